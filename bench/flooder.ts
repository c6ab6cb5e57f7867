import { io, type Socket } from 'socket.io-client';

// A hostile client in a process of its own, so that its sending costs the server's process
// nothing: it floods one message type over websockets, and, with a duration, reconnects
// whenever the server closes it, as an attacker would. Used by `bench/floods.ts` and by
// test/integration/floods.test.ts.
//
//   node dist/bench/flooder.js <url> <kind> <doc> [durationMs] [sockets]
//
// Prints one JSON line `{"ready":true}` once its first socket has joined and the flood
// starts, then `{"connections", "refused", "frames", "closings": {code: count}}` at the end.
// Without a duration it floods one socket until the server closes it.

const stepAt = (text: string) => ({
  stepType: 'replace',
  from: 1,
  to: 1,
  slice: { content: [{ type: 'text', text }] },
});

/// The message types a flood may be made of: what each frame emits.
export const floodKinds: Record<string, (socket: Socket, i: number) => void> = {
  presence: (socket, i) =>
    socket.emit('presence', { version: 0, anchor: 1, head: 1, name: `F${i}`, color: '#aa0000' }),
  steps: (socket) => socket.emit('steps', { version: 0, steps: [stepAt('x')] }, () => {}),
  'over-limit-steps': (socket) =>
    socket.emit('steps', { version: 0, steps: [stepAt('x'.repeat(70_000))] }, () => {}),
  unknown: (socket, i) => socket.emit('no-such-event', i),
  pull: (socket) => socket.emit('pull', {}, () => {}),
  join: (socket) => socket.emit('join', {}, () => {}),
};

/// Frames sent per turn of the flooder's event loop: it notices a close between turns.
const framesPerTurn = 200;

interface Tally {
  connections: number;
  refused: number;
  frames: number;
  closings: Record<string, number>;
}

async function main(): Promise<void> {
  const [url, kind, doc, duration = '0', count = '1'] = process.argv.slice(2);
  const send = kind ? floodKinds[kind] : undefined;
  if (!url || !send || !doc) {
    console.error(`usage: flooder <url> <${Object.keys(floodKinds).join('|')}> <doc> [ms] [n]`);
    process.exit(2);
  }
  const until = Number(duration) > 0 ? performance.now() + Number(duration) : 0;
  const tally: Tally = { connections: 0, refused: 0, frames: 0, closings: {} };
  let announced = false;
  const announce = (): void => {
    if (announced) return;
    announced = true;
    console.log(JSON.stringify({ ready: true }));
  };
  const flooders: Promise<void>[] = [];
  for (let n = 0; n < Number(count); n++) {
    flooders.push(
      (async () => {
        let index = 0;
        do {
          await floodOnce(
            url,
            doc,
            `flooder-${process.pid}-${n}-${index++}`,
            send,
            tally,
            announce,
          );
        } while (until > 0 && performance.now() < until);
      })(),
    );
  }
  await Promise.all(flooders);
  console.log(JSON.stringify(tally));
  process.exit(0);
}

/// One socket: connects, joins, floods until the server closes it (or the refusal of its
/// handshake), counting into `tally`.
function floodOnce(
  url: string,
  doc: string,
  clientID: string,
  send: (socket: Socket, i: number) => void,
  tally: Tally,
  ready: () => void,
): Promise<void> {
  return new Promise((resolve) => {
    const socket = io(url, {
      transports: ['websocket'],
      reconnection: false,
      forceNew: true,
      query: { doc },
      auth: { clientID },
    });
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      socket.close();
      // A moment before the next socket, as a client that backs off a little would.
      setTimeout(resolve, 10);
    };
    socket.on('connect_error', () => {
      tally.refused++;
      finish();
    });
    socket.on('closing', (notice: { code: string }) => {
      tally.closings[notice.code] = (tally.closings[notice.code] ?? 0) + 1;
    });
    socket.on('disconnect', finish);
    socket.on('connect', () => {
      tally.connections++;
      socket.emit('join', {}, () => {
        ready();
        let i = 0;
        const turn = (): void => {
          if (!socket.connected) return finish();
          for (let k = 0; k < framesPerTurn; k++) send(socket, i++);
          tally.frames += framesPerTurn;
          setImmediate(turn);
        };
        turn();
      });
    });
  });
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
