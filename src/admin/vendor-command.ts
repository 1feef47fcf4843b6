// `inkgate vendor list [--admin URL]`: each vendor deployment from the configuration (name, host,
// weight, key prefix: a few characters, never the key) and its state. The state is each
// instance's own (no shared store): it is read from one instance's /readyz, by default the admin
// listener this configuration names; `unknown` when that instance does not answer.
import { request } from 'undici';
import { selfBaseUrl } from '../console/console.js';
import { deploymentsOf, VENDORS } from '../config/vendor-deployments.js';
import { keyPrefixOf } from '../vendors/pool/pool.js';
import { type AdminCommand, UsageError } from './command.js';

const READYZ_TIMEOUT_MS = 2000;

type States = Record<string, ReadonlyArray<{ name: string; state: string; reopens_in_s: number }>>;

/** The instance's deployment states, or undefined (said on stderr, with why) when it does not answer in time. */
async function instanceStates(adminUrl: string, note?: (line: string) => void): Promise<States | undefined> {
  const url = `${adminUrl.replace(/\/+$/, '')}/readyz`;
  try {
    const r = await request(url, { headersTimeout: READYZ_TIMEOUT_MS, bodyTimeout: READYZ_TIMEOUT_MS });
    const body = (await r.body.json()) as { vendors?: States };
    return body.vendors ?? {};
  } catch (e) {
    note?.(`${url} did not answer (${(e as Error).message}): every state is unknown`);
    return undefined;
  }
}

export const vendorCommands: Readonly<Record<string, AdminCommand>> = {
  'vendor list': {
    usage: 'vendor list [--admin URL]',
    summary: "each vendor deployment: name, host, weight, key prefix, and its state on one instance (its /readyz; default this configuration's admin listener)",
    run: async (args, ctx) => {
      const admin = typeof args.flags.admin === 'string' ? args.flags.admin : selfBaseUrl(ctx.config.admin.host, ctx.config.admin.port);
      if (!/^https?:\/\//.test(admin)) throw new UsageError('--admin must be an http(s) URL of an instance admin listener');
      const states = await instanceStates(admin, ctx.note);
      return VENDORS.flatMap((vendor) =>
        deploymentsOf(ctx.config.vendors, vendor).map((deployment) => {
          const seen = states?.[vendor]?.find((s) => s.name === deployment.name);
          return {
            vendor,
            name: deployment.name,
            host: new URL(deployment.baseUrl).host,
            weight: deployment.weight,
            key: keyPrefixOf(deployment.apiKey),
            state: seen ? seen.state : 'unknown',
            ...(seen && seen.state === 'cooling' ? { reopens_in_s: seen.reopens_in_s } : {}),
          };
        }),
      );
    },
  },
};
