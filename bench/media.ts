// Media bench: download throughput and the serving process's CPU per MiB, for a result served by the
// gateway's media host from each store, against the same file read directly.
//   direct     a plain node:http server piping fs.createReadStream: what reading the file costs
//   fs         the media host (signed link checked, ranges, ETag) over the filesystem store
//   s3         the media host over the S3 store, reading from a real S3-protocol server (s3rver,
//              started by this bench in its own process, so its CPU is not the gateway's)
// Each server runs in a child process of its own; the bench (the client, undici) reads --rounds
// whole downloads of one --mib object after one warm-up, and asks the child for its CPU time over
// exactly those rounds. The engine is the configuration's default (auto) unless --engine is given.
//
// Run: npm run bench:media [-- --mib 64 --rounds 5 --engine node --json]
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createReadStream, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';

type Role = 'direct' | 'fs' | 's3' | 's3rver';
const argv = process.argv.slice(2);
const arg = (name: string, dflt: string): string => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1]! : dflt;
};
const MiB = 1024 * 1024;
const BUCKET = 'inkgate-bench';
const KEY = 'video/bench.mp4';
const S3_KEYS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };

interface Ready {
  readonly url: string;
}
type Msg = { ready: Ready } | { cpuUs: number };

/** A child's reply to one message. */
function ask(cp: ChildProcess, msg: unknown): Promise<Msg> {
  return new Promise((resolve) => {
    cp.once('message', (m) => resolve(m as Msg));
    if (msg !== undefined) cp.send(msg as object);
  });
}

async function startChild(role: Role, config: object): Promise<{ cp: ChildProcess; url: string }> {
  const cp = fork(fileURLToPath(import.meta.url), ['--role', role], { execArgv: process.execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  cp.send(config);
  const m = await ask(cp, undefined);
  if (!('ready' in m)) throw new Error(`${role}: no ready message`);
  return { cp, url: m.ready.url };
}

const cpuNowUs = (): number => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

/** In a child: serve, then answer each `cpu` message with the CPU used so far. */
async function child(role: Role): Promise<void> {
  const config = await new Promise<Record<string, string>>((resolve) => process.once('message', (m) => resolve(m as Record<string, string>)));
  const url = role === 's3rver' ? await serveS3rver(config) : role === 'direct' ? await serveDirect(config.file!) : await serveMediaHost(role, config);
  process.on('message', () => process.send!({ cpuUs: cpuNowUs() }));
  process.send!({ ready: { url } });
}

async function serveS3rver(c: Record<string, string>): Promise<string> {
  const S3rver = createRequire(import.meta.url)('s3rver') as new (o: object) => { run(): Promise<{ port: number }> };
  const { port } = await new S3rver({ port: 0, address: '127.0.0.1', directory: c.dir, silent: true, configureBuckets: [{ name: BUCKET }] }).run();
  return `http://127.0.0.1:${port}`;
}

async function serveDirect(file: string): Promise<string> {
  const size = statSync(file).size;
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'video/mp4', 'content-length': String(size) });
    createReadStream(file).pipe(res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function serveMediaHost(role: 'fs' | 's3', c: Record<string, string>): Promise<string> {
  const { FsMediaStore } = await import('../src/media/media-store.js');
  const { S3MediaStore } = await import('../src/media/s3-media-store.js');
  const { mediaHostHandler } = await import('../src/generations/routes.js');
  const { signedMediaLink } = await import('../src/media/signed-link.js');
  const { startServer } = await import('../src/server/server.js');
  const { Router } = await import('../src/server/router.js');
  const { MemoryRateLimiter } = await import('../src/limits/memory-rate-limiter.js');
  const { silentLogger } = await import('../src/util/log.js');
  const media =
    role === 'fs'
      ? new FsMediaStore(c.dir!)
      : new S3MediaStore({
          bucket: BUCKET,
          region: 'us-east-1',
          endpoint: c.endpoint,
          prefix: '',
          forcePathStyle: true,
          timeoutMs: 30_000,
          idleTimeoutMs: 30_000,
          uploadPartTimeoutMs: 60_000,
          partSizeBytes: 8 * MiB,
          uploadQueueSize: 2,
          maxSockets: 16,
          maxObjectBytes: 2 * 1024 * MiB,
          credentials: S3_KEYS,
        });
  await media.put(KEY, createReadStream(c.file!), 'video/mp4');
  const secret = randomBytes(32);
  const clock = () => Date.now();
  const noDb = { query: () => Promise.reject(new Error('the media bench has no database')) };
  const srv = await startServer({
    engine: (c.engine ?? 'auto') as 'auto' | 'uws' | 'node',
    listen: {
      host: '127.0.0.1',
      port: 0,
      proxyProtocol: false,
      keepAliveTimeoutMs: 10_000,
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 600_000,
      maxHeaderBytes: 65_536,
    },
    router: new Router([]),
    state: { current: { apiOpen: true } } as never,
    limiter: new MemoryRateLimiter(),
    db: noDb as never,
    keys: {} as never,
    requestsPerMinute: 60,
    publicRequestsPerMinute: 60,
    log: silentLogger,
    other: mediaHostHandler({ media, mediaSecret: secret, clock }),
  });
  const probe = `http://127.0.0.1:${srv.port}`;
  return signedMediaLink(secret, probe, KEY, clock(), 3_600, clock() + 3_600_000).url;
}

/** Downloads `url` `rounds` times; MiB/s over the rounds and the server's CPU ms per MiB. */
async function measure(name: string, cp: ChildProcess, url: string, sizeBytes: number, rounds: number) {
  const once = async (): Promise<void> => {
    const r = await request(url);
    let n = 0;
    for await (const chunk of r.body) n += (chunk as Buffer).length;
    if (r.statusCode !== 200 || n !== sizeBytes) throw new Error(`${name}: ${r.statusCode}, ${n} of ${sizeBytes} bytes`);
  };
  await once(); // warm-up
  const cpu0 = ((await ask(cp, 'cpu')) as { cpuUs: number }).cpuUs;
  const t0 = performance.now();
  for (let i = 0; i < rounds; i++) await once();
  const seconds = (performance.now() - t0) / 1000;
  const cpu1 = ((await ask(cp, 'cpu')) as { cpuUs: number }).cpuUs;
  const mib = (sizeBytes * rounds) / MiB;
  return { target: name, mib, mibPerS: mib / seconds, serverCpuMsPerMiB: (cpu1 - cpu0) / 1000 / mib };
}

async function main(): Promise<void> {
  const mibs = Number(arg('mib', '64'));
  const rounds = Number(arg('rounds', '5'));
  const engine = arg('engine', 'auto');
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-bench-media-'));
  const children: ChildProcess[] = [];
  try {
    const file = join(dir, 'result.mp4');
    writeFileSync(file, randomBytes(mibs * MiB));
    const size = mibs * MiB;
    const s3rver = await startChild('s3rver', { dir: join(dir, 's3') });
    children.push(s3rver.cp);
    const results = [];
    for (const role of ['direct', 'fs', 's3'] as const) {
      const c = await startChild(role, { file, dir: join(dir, `store-${role}`), endpoint: s3rver.url, engine });
      children.push(c.cp);
      results.push(await measure(role === 'direct' ? 'file read directly (node:http)' : `media host, ${role} store`, c.cp, c.url, size, rounds));
      c.cp.kill();
    }
    if (argv.includes('--json')) console.log(JSON.stringify({ node: process.version, engine, mibs, rounds, results }));
    else {
      console.log(`# media downloads, ${rounds} x ${mibs} MiB after one warm-up, Node ${process.version}, engine ${engine}`);
      console.log('| served by | MiB/s | server CPU ms per MiB | vs direct (CPU) |');
      console.log('|---|---|---|---|');
      const base = results[0]!.serverCpuMsPerMiB;
      for (const r of results)
        console.log(`| ${r.target} | ${r.mibPerS.toFixed(0)} | ${r.serverCpuMsPerMiB.toFixed(2)} | ${(r.serverCpuMsPerMiB / base).toFixed(2)}x |`);
    }
  } finally {
    for (const c of children) c.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

const role = arg('role', '');
if (role !== '') await child(role as Role);
else await main();
