// `inkgate console link --account A`: a one-time sign-in link to the console (src/console).
import { AdminError } from '../accounts/accounts.js';
import { consoleLinkBase } from '../config/public-url.js';
import { createSignInLink, ConsoleError } from '../console/sessions.js';
import type { AdminCommand } from './command.js';

export const consoleCommands: Readonly<Record<string, AdminCommand>> = {
  'console link': {
    usage: 'console link --account A',
    summary: 'print a one-time sign-in link to the browser console (single use, 15 minutes)',
    run: async (args, ctx) => {
      const account = args.flags.account as string; // required by the usage line (args.ts)
      const cfg = ctx.config;
      const base = consoleLinkBase(cfg);
      // The link's address is only right when the setting is: say which one it came from.
      ctx.note?.(
        base.source === 'INKGATE_HOST/INKGATE_PORT'
          ? `using ${base.url} from INKGATE_HOST/INKGATE_PORT (set INKGATE_PUBLIC_URL for the public address)`
          : `using ${base.source} (${base.url})`,
      );
      try {
        const link = await createSignInLink(ctx.pool, account, cfg.console.linkTtlMs);
        return { url: `${base.url}/console/signin?token=${link.token}`, expires_at: link.expiresAt.toISOString() };
      } catch (e) {
        if (e instanceof ConsoleError) throw new AdminError(e.message);
        throw e;
      }
    },
  },
};
