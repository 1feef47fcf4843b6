// `inkgate console link --account A`: a one-time sign-in link to the console (src/console).
import { AdminError } from '../accounts/accounts.js';
import { createSignInLink, ConsoleError } from '../console/sessions.js';
import type { AdminCommand } from './command.js';

export const consoleCommands: Readonly<Record<string, AdminCommand>> = {
  'console link': {
    usage: 'console link --account A',
    summary: 'print a one-time sign-in link to the browser console (single use, 15 minutes)',
    run: async (a, ctx) => {
      const account = a.flags.account;
      if (typeof account !== 'string' || account === '') throw new AdminError('--account is required');
      const cfg = ctx.config;
      const origin = cfg.console.url ?? `http://${cfg.server.host.includes(':') ? `[${cfg.server.host}]` : cfg.server.host}:${cfg.server.port}`;
      try {
        const link = await createSignInLink(ctx.pool, account, cfg.console.linkTtlMs);
        return { url: `${origin.replace(/\/$/, '')}/console/signin?token=${link.token}`, expires_at: link.expiresAt.toISOString() };
      } catch (e) {
        if (e instanceof ConsoleError) throw new AdminError(e.message);
        throw e;
      }
    },
  },
};
