# Scriptorium server. Build: docker build -t scriptorium . (or docker compose up --build)

FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci
# Everything else (.dockerignore keeps out node_modules, dist and data).
COPY . .
RUN npm run build && npm prune --omit=dev

FROM node:20-slim
ENV NODE_ENV=production PORT=4000
# An init as PID 1, node its child. The kernel ignores a signal PID 1 sends itself, even
# SIGKILL, and any signal it has no handler for: the server's last resort on a hung disk
# (killing itself, status 137) did nothing and the container hung until Docker's own SIGKILL.
# tini forwards SIGTERM and SIGINT to node and exits with node's status.
RUN apt-get update && apt-get install -y --no-install-recommends tini && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build --chown=node:node /app/package.json ./
COPY --from=build --chown=node:node /app/node_modules ./node_modules
COPY --from=build --chown=node:node /app/dist ./dist
# Without REDIS_URL the file store writes under /app/data: give it to the unprivileged user
# and make it a volume so documents outlive the container.
RUN mkdir -p /app/data && chown node:node /app/data
VOLUME /app/data
# The image's built-in unprivileged user.
USER node
EXPOSE 4000
# node:20-slim has no curl; Node's fetch does the probe.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 4000) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "dist/server/main.js"]
