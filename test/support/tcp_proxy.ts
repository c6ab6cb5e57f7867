import { once } from 'node:events';
import { createConnection, createServer, type Server, type Socket } from 'node:net';

/// A TCP proxy in front of a server, for observing and disturbing a client: it counts the
/// chunks the client sends (one chunk per socket write of the client, on loopback, for writes
/// that fit in one segment) and, when paused, swallows what the client sends, so the client
/// sees a server that accepts commands and never answers. `cut` goes further and models a
/// server that vanished (power loss, a NAT that forgot the flow): see there.
export class TcpProxy {
  port = 0;
  /// Chunks and bytes received from clients since the proxy started.
  chunksFromClients = 0;
  bytesFromClients = 0;
  paused = false;
  private isCut = false;
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private readonly links = new Set<{ dead: boolean }>();

  /// Where new connections go (`retarget` changes it; open connections stay where they are).
  private targetPort: number;

  constructor(targetPort: number) {
    this.targetPort = targetPort;
    this.server = createServer((client) => {
      const upstream = createConnection({ host: '127.0.0.1', port: this.targetPort });
      const link = { dead: this.isCut };
      this.sockets.add(client).add(upstream);
      this.links.add(link);
      client.on('data', (chunk) => {
        this.chunksFromClients++;
        this.bytesFromClients += chunk.length;
        if (!this.paused && !link.dead) upstream.write(chunk);
      });
      upstream.on('data', (chunk) => {
        if (!link.dead) client.write(chunk);
      });
      const closeBoth = (): void => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
        this.links.delete(link);
      };
      client.on('close', closeBoth).on('error', closeBoth);
      upstream.on('close', closeBoth).on('error', closeBoth);
    });
  }

  /// Listens on a free port of 127.0.0.1; resolves once listening.
  async start(): Promise<void> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    const address = this.server.address();
    if (address === null || typeof address === 'string') throw new Error('no port');
    this.port = address.port;
  }

  /// Black-holes every connection, in both directions and for good, without closing any: the
  /// client's writes succeed and nothing ever comes back, as when the server's host vanished.
  /// Connections made until `heal` are accepted and black-holed too.
  cut(): void {
    this.isCut = true;
    for (const link of this.links) link.dead = true;
  }

  /// Lets new connections through again (the server is reachable again); the connections
  /// black-holed by `cut` stay dead, as they would after a real outage.
  heal(): void {
    this.isCut = false;
  }

  /// Sends new connections to `port` from now on, as a router does when its routes change;
  /// connections already open stay with their server.
  retarget(port: number): void {
    this.targetPort = port;
  }

  /// Closes the listener and every connection.
  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    this.server.close();
    await once(this.server, 'close');
  }
}
