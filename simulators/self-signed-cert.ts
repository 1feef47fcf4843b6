// A self-signed certificate for local HTTPS simulators (the demo, the tests): made by the `openssl`
// CLI because node:crypto cannot issue certificates. It names localhost, media.test, 127.0.0.1 and ::1.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface SelfSignedCert {
  readonly key: string;
  readonly cert: string;
}

let cached: SelfSignedCert | undefined;

/** One certificate per process (EC P-256, valid one day). */
export function selfSignedCert(): SelfSignedCert {
  if (cached !== undefined) return cached;
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-cert-'));
  try {
    const keyPath = join(dir, 'key.pem');
    const certPath = join(dir, 'cert.pem');
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        keyPath,
        '-out',
        certPath,
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
        '-addext',
        'subjectAltName=DNS:localhost,DNS:media.test,IP:127.0.0.1,IP:::1',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], timeout: 20_000 },
    );
    cached = { key: readFileSync(keyPath, 'utf8'), cert: readFileSync(certPath, 'utf8') };
    return cached;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
