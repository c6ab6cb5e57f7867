// The gateway's nginx configuration, rendered from the list of nodes. One renderer for every
// way the gateway runs: `npm run cluster` on this machine, the gateway image on Render, the
// docker compose `cluster` profile (both of which render it at start from SCRIPTORIUM_NODES).

/// Where the gateway listens and what it routes to.
export interface GatewayOptions {
  /// `host:port` of each node, in a stable order (the consistent-hash ring is built from them).
  nodes: readonly string[];
  /// `host:port` (or just a port) the gateway listens on.
  listen: string;
  /// A directory for nginx's pid, temporary files and error log (nginx runs with `-p` there,
  /// needing no root and no system paths).
  prefix: string;
  /// How long a node that failed a connection is skipped before it is tried again.
  failTimeoutSec?: number;
  /// nginx worker processes ('auto': one per core).
  workers?: number | 'auto';
  /// Proxies in front of the gateway (addresses or CIDR ranges) whose `X-Forwarded-For` names
  /// the client, as a platform's load balancer does. Empty (the default): the gateway is the
  /// edge, and the address that connected to it is the client's.
  trustForwardedFrom?: readonly string[];
}

const nodePattern = /^[A-Za-z0-9.-]+:\d{1,5}$/;
const addressPattern = /^([0-9.]+|[0-9A-Fa-f:]+)(\/\d{1,3})?$/;

/// The most ':' a document id holds (docIdPattern: 128 characters), so the most `%3A` the
/// gateway decodes in a Socket.io request's `doc`.
const maxColons = 128;
/// How many of them one map of `docKeyMaps` decodes.
const colonsPerMap = 8;

/// Renders nginx.conf. Every connection and request of one document goes to one node:
/// Socket.io by the `doc` query parameter (the client sends it in every handshake, websocket
/// and polling alike, and in every polling request), `GET /docs/:id` by the id in the path,
/// both through `hash … consistent` (ketama), so that adding or removing a node moves only
/// the documents of its part of the ring. Both are hashed as the decoded id, which the path
/// is already (nginx decodes it before matching a location): `doc` has its `%3A`s decoded (see
/// `docKeyMaps`), the only escapes the nodes accept in it, and the `/docs/` location matches as
/// express routes (any letter case, an optional trailing slash). A node that refuses
/// connections or times out is marked failed for `failTimeoutSec` (passive health:
/// `max_fails=1`) and the request goes to the next node on the ring (`proxy_next_upstream`),
/// which takes the document's lease once the dead node's expires. `/metrics…` and
/// `/dashboard…` answer 404 at the gateway (each node is scraped directly). Everything else
/// (the web editor, health) goes to any node. Throws a TypeError for invalid options (see
/// `checkOptions`).
export function renderNginxConfig(options: GatewayOptions): string {
  checkOptions(options);
  // The client's address for the nodes (their per-address caps, their logs): the gateway
  // replaces any X-Forwarded-For with it instead of appending to what the client sent, since
  // the nodes trust the gateway's network, which can hold the address a client seems to come
  // from (Docker's userland proxy and Docker Desktop connect from the bridge's gateway): an
  // appended header would let such a client name any address it likes. Behind a trusted
  // proxy, nginx's realip module takes the client from that proxy's header first.
  // In every proxied location, since a location with any proxy_set_header of its own inherits
  // none from the server block (nginx's rule): set there, the nodes would get
  // `Host: scriptorium_documents`, refusing every browser's Origin, and the client's own
  // X-Forwarded-For. $http_host keeps the port: the nodes compare the browser's Origin with it.
  const forwarded = `      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header X-Forwarded-Proto $scheme;`;
  const realIp = realIpBlock(options.trustForwardedFrom ?? []);
  const failTimeout = options.failTimeoutSec ?? 10;
  const servers = (extra: string) =>
    options.nodes.map((node) => `    server ${node}${extra};`).join('\n');
  const p = options.prefix.replace(/\/$/, '');
  return `# Rendered by deploy/nginx.ts from ${options.nodes.length} node(s); do not edit.
worker_processes ${options.workers ?? 'auto'};
pid ${p}/nginx.pid;
error_log ${p}/error.log warn;

events {
  worker_connections 8192;
}

http {
  access_log off;
  client_body_temp_path ${p}/client_body;
  proxy_temp_path ${p}/proxy;
  fastcgi_temp_path ${p}/fastcgi;
  uwsgi_temp_path ${p}/uwsgi;
  scgi_temp_path ${p}/scgi;
  # Steps are small; Scriptorium refuses larger messages itself.
  client_max_body_size 1m;
${realIp}
  map $http_upgrade $connection_upgrade {
    default upgrade;
    '' close;
  }

${docKeyMaps()}

  # Documents: one node per document id, on a consistent-hash ring.
  upstream scriptorium_documents {
    hash $scriptorium_doc consistent;
${servers(` max_fails=1 fail_timeout=${failTimeout}s`)}
    keepalive 32;
  }

  # Everything else: any node.
  upstream scriptorium_any {
    least_conn;
${servers(` max_fails=1 fail_timeout=${failTimeout}s`)}
    keepalive 16;
  }

${serverBlock(options, forwarded)}
}
`;
}

/// Throws a TypeError for options that would render a broken or unsafe nginx.conf: no node,
/// a node or listen address that is not `host:port`, a prefix with nginx syntax in it, a
/// trusted proxy that is not an address or CIDR range.
function checkOptions(options: GatewayOptions): void {
  if (options.nodes.length === 0) throw new TypeError('the gateway needs at least one node');
  for (const node of options.nodes) {
    if (!nodePattern.test(node)) throw new TypeError(`not a host:port: ${node}`);
  }
  if (!/^([A-Za-z0-9.-]+:)?\d{1,5}$/.test(options.listen)) {
    throw new TypeError(`not a listen address: ${options.listen}`);
  }
  if (/[\s;{}'"]/.test(options.prefix)) throw new TypeError(`unsafe prefix: ${options.prefix}`);
  for (const proxy of options.trustForwardedFrom ?? []) {
    if (!addressPattern.test(proxy)) throw new TypeError(`not an address or CIDR range: ${proxy}`);
  }
}

/// The realip directives taking the client from the trusted proxies' X-Forwarded-For; empty
/// when no proxy is trusted.
function realIpBlock(trusted: readonly string[]): string {
  if (trusted.length === 0) return '';
  return `
  # The client as named by the proxies in front (rightmost address not among them).
${trusted.map((proxy) => `  set_real_ip_from ${proxy};`).join('\n')}
  real_ip_header X-Forwarded-For;
  real_ip_recursive on;
`;
}

/// The gateway's server block: Socket.io and `/docs/:id…` to the document's node, metrics
/// and the dashboard refused, everything else to any node. `forwarded` holds the headers every
/// proxied location sets.
function serverBlock(options: GatewayOptions, forwarded: string): string {
  return `  server {
    listen ${options.listen};

    proxy_http_version 1.1;
    proxy_connect_timeout 2s;
    # A dead or unreachable node: the next one on the ring, at most once per node. Not on a
    # 503: that is a live node answering (\`moved\` while a document is handed over to it,
    # \`shutting-down\`), which must neither count as a failure nor send the request elsewhere.
    proxy_next_upstream error timeout;
    proxy_next_upstream_tries ${options.nodes.length};

    location /socket.io/ {
      set $scriptorium_doc $scriptorium_query_doc;
      proxy_pass http://scriptorium_documents;
${forwarded}
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      # Websockets stay open for the whole editing session; Engine.IO pings every 25 s.
      proxy_read_timeout 1h;
      proxy_send_timeout 1h;
      proxy_buffering off;
    }

    # As express matches \`/docs/:id\`: in any letter case, with or without a trailing slash
    # (the nodes serve \`/Docs/x/\` as \`x\`, which must not go to any node). The paths under
    # it (the history routes) go there too: restoring or reverting appends steps, which only
    # the document's node can, and another would answer \`moved\`.
    location ~* ^/docs/([^/]+)(/.*)?$ {
      set $scriptorium_doc $1;
      proxy_pass http://scriptorium_documents;
${forwarded}
      proxy_set_header Connection "";
    }

    # Metrics and the dashboard are per node, scraped from each node directly: through the
    # gateway they would come from whichever node is least busy (series flipping between
    # nodes, counters seeming to reset), and on a platform where the gateway is the only
    # public service they would be open to the internet. Case-insensitive, as the nodes'
    # routing is. The body has the shape of the nodes' coded errors.
    location ~* ^/(metrics|dashboard)(/|$) {
      default_type application/json;
      return 404 '{"code":"not-found","message":"Metrics and the dashboard are per node: ask each node directly","retryable":false}';
    }

    location / {
      proxy_pass http://scriptorium_any;
${forwarded}
      proxy_set_header Connection "";
    }
  }`;
}

/// The maps that make a Socket.io request's hash key, `$scriptorium_query_doc`: `doc`'s value
/// with every `%3A` (or `%3a`) decoded to ':', so that socket.io-client, which encodes ':'
/// (encodeURIComponent), and a hand-built URL that does not, both hash as the id that
/// `GET /docs/:id` hashes. nginx has no function that decodes an argument, and a map's regex
/// replaces what it matches once: each map of a chain decodes up to `colonsPerMap` of the
/// `%3A`s left (its first pattern that matches: the most first), enough maps for as many ':'
/// as an id can hold. Not one map per ':': nginx refuses to evaluate variables nested about
/// 100 deep (an error, "cycle while evaluating variable", and an empty key). The chain runs
/// only for a value with a '%' in it. Other escapes are not decoded: the nodes refuse a `doc`
/// with any (see `spellingProblem` in server/protocol/requests.ts), as they refuse a
/// second `doc` key in any letter case (`$arg_doc` is the first key named so in any case,
/// Engine.IO's the last spelled `doc`).
function docKeyMaps(): string {
  const maps = Math.ceil(maxColons / colonsPerMap);
  const lines = [
    '  # The document a Socket.io request names, decoded (see docKeyMaps in deploy/nginx.ts).',
    '  map $arg_doc $scriptorium_query_doc {',
    `    "~%" $scriptorium_doc_decoded_${maps};`,
    '    default $arg_doc;',
    '  }',
  ];
  for (let i = 1; i <= maps; i++) {
    const from = i === 1 ? '$arg_doc' : `$scriptorium_doc_decoded_${i - 1}`;
    lines.push(`  map ${from} $scriptorium_doc_decoded_${i} {`);
    for (let colons = colonsPerMap; colons >= 1; colons--) {
      const parts = Array.from({ length: colons }, (_, j) => `(?<c${j}>[^%]*)%3[Aa]`);
      const value = Array.from({ length: colons }, (_, j) => `$c${j}:`).join('');
      lines.push(`    "~^${parts.join('')}(?<rest>.*)$" "${value}$rest";`);
    }
    lines.push(`    default ${from};`, '  }');
  }
  return lines.join('\n');
}

/// Parses a node list as given in SCRIPTORIUM_NODES: `host:port` entries separated by commas
/// or spaces.
export function parseNodeList(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
}
