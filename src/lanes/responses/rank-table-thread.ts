// Builds the o200k rank table (rank-table.ts) from gpt-tokenizer's rank list, posts it (shared
// memory: no copy) and ends, so that the rank list's 100 MB of heap go with the thread.
import { parentPort } from 'node:worker_threads';
import bpeRanks from 'gpt-tokenizer/bpeRanks/o200k_base';
import { buildRankTable } from './rank-table.js';

parentPort!.postMessage(buildRankTable(bpeRanks));
