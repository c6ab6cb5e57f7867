# The nginx gateway in front of Scriptorium nodes (Render's gateway service, the compose
# cluster profile). Renders its config from SCRIPTORIUM_NODES / SCRIPTORIUM_NODE_n at start.
FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci
COPY . .
RUN npx tsc -p tsconfig.json

FROM node:20-alpine
# tini as PID 1, as in the server's image: node, not PID 1, then gets every signal Docker sends.
RUN apk add --no-cache nginx tini
WORKDIR /app
COPY --from=build /app/dist/deploy ./deploy
RUN echo '{"type":"module"}' > package.json && mkdir -p /tmp/gateway && chown -R node:node /tmp/gateway
USER node
ENV PORT=8080
EXPOSE 8080
ENTRYPOINT ["/sbin/tini", "--"]
CMD ["node", "deploy/gateway_start.js"]
