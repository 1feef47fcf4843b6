// `npm run bench`: the bench tool (src/bench) run from source through the ts loader,
// the same tool as `inkgate bench` on a built install. Flags: `--help`.
import { runBench } from '../src/bench/cli.js';

process.exitCode = await runBench(process.argv.slice(2));
