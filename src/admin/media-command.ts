// `inkgate media migrate --to s3 [--dry-run] [--remove-local]`: copies the live results from
// $INKGATE_DATA_DIR/media to the bucket of media.s3, each copy verified by size and SHA-256
// (src/media/migrate-media.ts). Run it before switching INKGATE_MEDIA_STORE to s3 and once more
// after (it skips what is already there); local files are deleted only with --remove-local, each
// once its copy verified.
import { AdminError } from '../accounts/accounts.js';
import { fsMediaStore, s3MediaStore } from '../media/configured-store.js';
import { migrateMedia, type MigrateReport } from '../media/migrate-media.js';
import { UsageError, type AdminCommand } from './command.js';

export const mediaCommands: Readonly<Record<string, AdminCommand>> = {
  'media migrate': {
    usage: 'media migrate --to S [--dry-run] [--remove-local]',
    summary:
      'copy live results from the data directory to the S3 bucket of media.s3 (--to s3), each copy verified (size, SHA-256); idempotent; --remove-local deletes each local file once its copy verified',
    run: async (args, ctx) => {
      if (args.flags.to !== 's3') throw new UsageError('--to must be s3 (results are copied from the data directory to the bucket)');
      if (ctx.config.media.s3.bucket === null)
        throw new AdminError('set INKGATE_S3_BUCKET (and INKGATE_S3_ENDPOINT / INKGATE_S3_REGION for a store other than AWS) first');
      const to = await s3MediaStore(ctx.config);
      try {
        await to.check?.(); // the bucket and the credentials, before any copy
        const report = await migrateMedia(ctx.pool, fsMediaStore(ctx.config), to, {
          dryRun: args.flags['dry-run'] === true,
          removeSource: args.flags['remove-local'] === true,
        });
        return { ...report, dry_run: args.flags['dry-run'] === true };
      } finally {
        await to.close?.();
      }
    },
    failure: (r) => ((r as MigrateReport).failed > 0 ? `media migrate: ${(r as MigrateReport).failed} copies failed` : undefined),
  },
};
