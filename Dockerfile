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
CMD ["node", "dist/server/main.js"]
