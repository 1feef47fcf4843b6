// `inkgate vendor list [--admin URL]`: each vendor deployment from the configuration (name, host,
// weight, key prefix: a few characters, never the key) and its state. The state is each
// instance's own (no shared store): it is read from one instance's /readyz, by default the admin
// listener this configuration names; `unknown` when that instance does not answer.
import { request } from 'undici';
import { AdminError } from '../accounts/accounts.js';
import { deploymentsOf, VENDORS } from '../config/vendor-deployments.js';
import { keyPrefixOf } from '../vendors/pool/pool.js';
import type { AdminCommand } from './command.js';

const READYZ_TIMEOUT_MS = 2000;

type States = Record<string, ReadonlyArray<{ name: string; state: string; reopens_in_s: number }>>;

/** The instance's deployment states, or undefined when it does not answer in time. */
async function instanceStates(adminUrl: string): Promise<States | undefined> {
  try {
    const r = await request(`${adminUrl.replace(/\/+$/, '')}/readyz`, { headersTimeout: READYZ_TIMEOUT_MS, bodyTimeout: READYZ_TIMEOUT_MS });
    const body = (await r.body.json()) as { vendors?: States };
    return body.vendors ?? {};
  } catch {
    return undefined;
  }
}

export const vendorCommands: Readonly<Record<string, AdminCommand>> = {
  'vendor list': {
    usage: 'vendor list [--admin URL]',
    summary: "each vendor deployment: name, host, weight, key prefix, and its state on one instance (its /readyz; default this configuration's admin listener)",
    run: async (a, ctx) => {
      const admin = typeof a.flags.admin === 'string' ? a.flags.admin : `http://${ctx.config.admin.host}:${ctx.config.admin.port}`;
      if (!/^https?:\/\//.test(admin)) throw new AdminError('--admin must be an http(s) URL of an instance admin listener');
      const states = await instanceStates(admin);
      return VENDORS.flatMap((vendor) =>
        deploymentsOf(ctx.config.vendors, vendor).map((d) => {
          const seen = states?.[vendor]?.find((s) => s.name === d.name);
          return {
            vendor,
            name: d.name,
            host: new URL(d.baseUrl).host,
            weight: d.weight,
            key: keyPrefixOf(d.apiKey),
            state: seen ? seen.state : 'unknown',
            ...(seen && seen.state === 'cooling' ? { reopens_in_s: seen.reopens_in_s } : {}),
          };
        }),
      );
    },
  },
};
