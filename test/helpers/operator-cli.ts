// The operator's CLI, run in-process against a test schema (`inkgate ... --json`), and a key made
// the way an operator makes one: account, top-up, key.
import { runCli } from '../../src/admin/cli.js';
import type { Config } from '../../src/config/config.js';

export interface OperatorCli {
  cli(...argv: string[]): Promise<any>;
  operatorKey(name: string, usd: number): Promise<{ accountId: string; keyId: string; key: string }>;
}

export function operatorCli(config: Config): OperatorCli {
  const cli = async (...argv: string[]): Promise<any> => {
    let out = '';
    let err = '';
    const code = await runCli(
      [...argv, '--json'],
      (s) => void (out += s),
      (s) => void (err += s),
      config,
    );
    if (code !== 0) throw new Error(`inkgate ${argv.join(' ')}: ${err}`);
    return JSON.parse(out);
  };
  return {
    cli,
    async operatorKey(name, usd) {
      const acc = await cli('account', 'create', '--name', name, '--plan', 'pro');
      await cli('topup', '--account', acc.id, '--usd', String(usd));
      const k = await cli('key', 'create', '--account', acc.id, '--name', name);
      return { accountId: acc.id, keyId: k.id, key: k.key };
    },
  };
}
