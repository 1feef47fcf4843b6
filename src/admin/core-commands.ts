// The core operator commands: migrations, plans, accounts, keys, models, lanes and the API switch.
// A wrong flag value is a UsageError (exit 2); a refusal from the data (an unknown id) is an Error (exit 1).
import {
  AdminError,
  createAccount,
  createKey,
  keyChangeInForce,
  listKeys,
  listPlans,
  revokeKey,
  setAccountPlan,
  setKeyLimit,
  updateKey,
  type KeyChanges,
} from '../accounts/accounts.js';
import { isUsageFrame, USAGE_FRAME_CHOICES, type UsageFrame } from '../accounts/usage-frame.js';
import { LANES, pauseModel, resumeModel, setApiOpen, setLane, type Lane } from '../deployment/state.js';
import { migrateAll } from '../store/migrate.js';
import { need, type ParsedArgs } from './args.js';
import { UsageError, type AdminCommand, type AdminContext } from './command.js';

const wholeInk = (value: string, name: string): number => {
  if (!/^\d{1,15}$/.test(value)) throw new UsageError(`--${name} must be a whole number of Ink`);
  return Number(value);
};

/** A usage frame flag's value, checked before anything is written. */
const usageFrameFlag = (value: string): UsageFrame => {
  if (!isUsageFrame(value)) throw new UsageError(`--usage-frame must be ${USAGE_FRAME_CHOICES}, not ${JSON.stringify(value)}`);
  return value;
};

/**
 * A key's change is saved and announced; the command returns once every instance has it in force
 * (none holds from a lease the key had before), so the next request anywhere sees it. A wait longer
 * than a moment (an instance that is stopped) is told on stderr.
 */
async function inForce(ctx: AdminContext, keyId: string): Promise<true> {
  await keyChangeInForce(ctx.pool, keyId, ctx.config.ledger.lease, {
    afterMs: 500,
    note: (n, boundMs) => ctx.note?.(`waiting for ${n} instance(s) to stop holding Ink for key ${keyId} (at most ${Math.ceil(boundMs / 1000)} s)`),
  });
  return true;
}

/** `key set`'s changes: only the flags given; at least one. */
function keyChanges(args: ParsedArgs): KeyChanges {
  const lim = args.flags['ink-limit'];
  const frame = args.flags['usage-frame'];
  if (typeof lim !== 'string' && typeof frame !== 'string') throw new UsageError('key set needs --ink-limit or --usage-frame');
  return {
    ...(typeof lim === 'string' ? { inkLimit: lim === 'none' ? null : wholeInk(lim, 'ink-limit') } : {}),
    ...(typeof frame === 'string' ? { usageFrame: usageFrameFlag(frame) } : {}),
  };
}

const lane = (laneName: string | undefined): Lane => {
  if (!laneName || !(LANES as readonly string[]).includes(laneName)) throw new UsageError(`lane must be one of ${LANES.join(', ')}`);
  return laneName as Lane;
};

export const coreCommands: Record<string, AdminCommand> = {
  migrate: {
    usage: 'migrate',
    createsDatabase: true,
    summary: 'apply pending database migrations, then changed SQL function files',
    run: async (_a, ctx) => migrateAll(ctx.pool, ctx.config.db.schema),
  },
  'plan list': {
    usage: 'plan list',
    summary: 'list plans (video allowed, daily cap, period grant)',
    run: async (_a, ctx) => listPlans(ctx.pool),
  },
  'account create': {
    usage: 'account create --name N --plan P',
    summary: 'create an account with an empty wallet; prints its usr_ id',
    run: async (args, ctx) => {
      const acc = await createAccount(ctx.pool, { name: need(args, 'name'), planId: need(args, 'plan') });
      return { id: acc.id };
    },
  },
  'account set-plan': {
    usage: 'account set-plan --account A --plan P',
    summary: "change an account's plan",
    run: async (args, ctx) => {
      await setAccountPlan(ctx.pool, need(args, 'account'), need(args, 'plan'));
      return { ok: true };
    },
  },
  'key create': {
    usage: 'key create --account A --name N [--ink-limit N] [--expires ISO] [--usage-frame event|comment|none]',
    summary: 'create a key; prints the raw key once (--usage-frame: how its streams carry the usage frame, default event)',
    run: async (args, ctx) => {
      const lim = args.flags['ink-limit'];
      const exp = args.flags.expires;
      const frame = args.flags['usage-frame'];
      const usageFrame = typeof frame === 'string' ? usageFrameFlag(frame) : undefined;
      let expiresAt: Date | null = null;
      if (typeof exp === 'string') {
        expiresAt = new Date(exp);
        if (Number.isNaN(expiresAt.getTime())) throw new UsageError('--expires must be an ISO 8601 timestamp');
      }
      return createKey(ctx.pool, {
        accountId: need(args, 'account'),
        name: need(args, 'name'),
        inkLimit: typeof lim === 'string' ? wholeInk(lim, 'ink-limit') : null,
        expiresAt,
        usageFrame,
      });
    },
  },
  'key list': {
    usage: 'key list [--account A]',
    summary: 'list keys (prefix and last four only)',
    run: async (a, ctx) => listKeys(ctx.pool, typeof a.flags.account === 'string' ? a.flags.account : undefined),
  },
  'key revoke': {
    usage: 'key revoke KEY_ID',
    summary: 'refuse the key from the next request on, on every instance (returns once all have it in force)',
    run: async (args, ctx) => {
      const id = args.positional[0]!; // required by the usage line (args.ts)
      await revokeKey(ctx.pool, id);
      return { id, revoked: true, in_force: await inForce(ctx, id) };
    },
  },
  'key set-limit': {
    usage: 'key set-limit KEY_ID --ink-limit N|none',
    summary: "edit a key's lifetime Ink cap",
    run: async (args, ctx) => {
      const id = args.positional[0]!; // required by the usage line (args.ts)
      const v = need(args, 'ink-limit');
      const limit = v === 'none' ? null : wholeInk(v, 'ink-limit');
      await setKeyLimit(ctx.pool, id, limit);
      return { id, ink_limit: limit, in_force: await inForce(ctx, id) };
    },
  },
  'key set': {
    usage: 'key set KEY_ID [--ink-limit N|none] [--usage-frame event|comment|none]',
    summary: "edit a key's settings: its lifetime Ink cap, how its streams carry the usage frame (one change, all or nothing)",
    run: async (args, ctx) => {
      const id = args.positional[0]!; // required by the usage line (args.ts)
      const changes = keyChanges(args);
      await updateKey(ctx.pool, id, changes);
      return {
        id,
        ...(changes.inkLimit !== undefined ? { ink_limit: changes.inkLimit } : {}),
        ...(changes.usageFrame !== undefined ? { usage_frame: changes.usageFrame } : {}),
        in_force: await inForce(ctx, id),
      };
    },
  },
  'model pause': {
    usage: 'model pause MODEL_ID [--retry-after S]',
    summary: 'mark a model unavailable; submits answer 503 with Retry-After',
    run: async (args, ctx) => {
      const id = ctx.catalog().resolveId(args.positional[0] ?? '');
      if (!id) throw new AdminError(`unknown model ${JSON.stringify(args.positional[0] ?? '')}`);
      const ra = typeof args.flags['retry-after'] === 'string' ? Number(args.flags['retry-after']) : 300;
      if (!Number.isInteger(ra) || ra < 1 || ra > 86400) throw new UsageError('--retry-after must be 1 to 86400 seconds');
      await pauseModel(ctx.pool, id, ra);
      return { model: id, paused: true, retry_after_s: ra };
    },
  },
  'model resume': {
    usage: 'model resume MODEL_ID',
    summary: 'put a paused model back on sale',
    run: async (args, ctx) => {
      const id = ctx.catalog().resolveId(args.positional[0] ?? '');
      if (!id) throw new AdminError(`unknown model ${JSON.stringify(args.positional[0] ?? '')}`);
      await resumeModel(ctx.pool, id);
      return { model: id, paused: false };
    },
  },
  'lane enable': {
    usage: `lane enable ${LANES.join('|')}`,
    summary: 'open a lane (text lanes: after vendor certification)',
    run: async (args, ctx) => {
      const l = lane(args.positional[0]);
      await setLane(ctx.pool, l, true);
      return { lane: l, enabled: true };
    },
  },
  'lane disable': {
    usage: `lane disable ${LANES.join('|')}`,
    summary: 'close a lane: cards show available: false, calls answer 503',
    run: async (args, ctx) => {
      const l = lane(args.positional[0]);
      await setLane(ctx.pool, l, false);
      return { lane: l, enabled: false };
    },
  },
  'api open': {
    usage: 'api open',
    summary: 'open the /v1 API on this deployment',
    run: async (_a, ctx) => {
      await setApiOpen(ctx.pool, true);
      return { api_open: true };
    },
  },
  'api close': {
    usage: 'api close',
    summary: 'close the API: every /v1 path answers 404 external_api_disabled',
    run: async (_a, ctx) => {
      await setApiOpen(ctx.pool, false);
      return { api_open: false };
    },
  },
};
