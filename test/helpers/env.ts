// Where the tests find Postgres and Redis. `npm test` (test/run.js) decides once per run and passes
// TEST_DATABASE_URL / TEST_REDIS_URL down; a file run alone with `npx tap` falls back to the
// machine's services at their standard addresses.
export const testDatabaseUrl: string = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const testRedisUrl: string | null = process.env.TEST_REDIS_URL === undefined ? 'redis://127.0.0.1:6379' : process.env.TEST_REDIS_URL || null;
