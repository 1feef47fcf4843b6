# syntax=docker/dockerfile:1
# inkgate's image: compiled in one stage, run from dist/ in the next with production dependencies
# only (no TypeScript, no compiler), as the unprivileged `node` user. Build: docker build -t inkgate .
# Node 20: the uWebSockets.js binary in the lockfile is built for its ABI, so the image serves
# with uWS (server.engine auto); on a later Node it would serve with node:http.

FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# The demo's vendor simulators and the bench tool are compiled with the product (npm run demo, inkgate bench).
COPY simulators ./simulators
COPY bench/tool ./bench/tool
RUN npx tsc -p tsconfig.build.json \
 && npm prune --omit=dev --no-audit --no-fund

FROM node:20-bookworm-slim AS run
ENV NODE_ENV=production \
    INKGATE_HOST=0.0.0.0 \
    INKGATE_PORT=8080 \
    INKGATE_ADMIN_HOST=0.0.0.0 \
    INKGATE_ADMIN_PORT=9464 \
    INKGATE_DATA_DIR=/var/lib/inkgate
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
COPY config ./config
# Read from src/ at run time: the migrations and the SQL function files at start-up
# (store/migrate.ts), the console's static files (console/static.ts).
COPY src/store/migrations ./src/store/migrations
COPY src/store/functions ./src/store/functions
COPY src/console/assets ./src/console/assets
RUN mkdir -p /var/lib/inkgate && chown node:node /var/lib/inkgate
USER node
EXPOSE 8080 9464
# The admin port's readiness: fails while draining or while Postgres or Redis do not answer.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.INKGATE_ADMIN_PORT || 9464) + '/readyz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# SIGTERM: readiness fails, INKGATE_DRAIN_DELAY_MS later the public port stops admitting and drains.
STOPSIGNAL SIGTERM
CMD ["node", "bin/start.js"]
