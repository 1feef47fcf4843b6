#!/usr/bin/env node
// The admin CLI (`inkgate ...`): same database as the gateway.
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureBuilt } from './start.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
ensureBuilt();
const { runCli } = await import(join(root, 'dist', 'admin', 'cli.js'));
process.exitCode = await runCli(process.argv.slice(2));
