// `npm run bench`: the bench tool (bench/tool) run from source through the ts loader,
// the same tool as `inkgate bench` on a built install. Flags: `--help`.
import { runBench } from './tool/cli.js';

process.exitCode = await runBench(process.argv.slice(2));
