// The media store the configuration names (media.store): files under dataDir/media, or an
// S3-compatible bucket. The S3 client is loaded only when used (it is a large module tree).
import { join } from 'node:path';
import type { Config } from '../config/config.js';
import { FsMediaStore, type MediaStore } from './media-store.js';

export function fsMediaStore(cfg: Config): FsMediaStore {
  return new FsMediaStore(join(cfg.dataDir, 'media'), { maxObjectBytes: cfg.media.maxResultBytes });
}

/** The S3 store of cfg.media.s3 (whatever media.store says: the migration builds it for an fs deployment). */
export async function s3MediaStore(cfg: Config): Promise<MediaStore> {
  const s3 = cfg.media.s3;
  if (s3.bucket === null) throw new Error('media.s3.bucket (INKGATE_S3_BUCKET) is not set');
  const { S3MediaStore } = await import('./s3-media-store.js');
  return new S3MediaStore({
    bucket: s3.bucket,
    region: s3.region,
    endpoint: s3.endpoint ?? undefined,
    prefix: s3.prefix,
    forcePathStyle: s3.forcePathStyle,
    timeoutMs: s3.timeoutMs,
    idleTimeoutMs: s3.idleTimeoutMs,
    uploadPartTimeoutMs: s3.uploadPartTimeoutMs,
    partSizeBytes: s3.partSizeBytes,
    uploadQueueSize: s3.uploadQueueSize,
    maxSockets: s3.maxSockets,
    presignedRedirect: s3.presignedRedirect,
    maxObjectBytes: cfg.media.maxResultBytes,
  });
}

export async function configuredMediaStore(cfg: Config): Promise<MediaStore> {
  return cfg.media.store === 's3' ? s3MediaStore(cfg) : fsMediaStore(cfg);
}
