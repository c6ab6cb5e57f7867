import { parseArgs } from 'node:util';
import { docIdPattern } from '../../schema/events.js';
import { maxUserLength, parseDuration, signToken } from '../protocol/auth.js';

// `npm run -s token -- --doc ID --access write --ttl 1h [--user NAME]`: prints a token signed
// with AUTH_SECRET, and nothing else (`-s` keeps npm's banner out), for trying the server out
// and for scripts. An entry point: it reads the environment.

const usage =
  'usage: npm run -s token -- --doc ID|PREFIX*|* [--access read|write] [--ttl 1h] [--user NAME]\n' +
  'Signs an HS256 token with AUTH_SECRET and prints it; --ttl from 1s to 30d (1h by default).';

function fail(message: string): never {
  console.error(`token: ${message}\n${usage}`);
  process.exit(1);
}

let values;
try {
  ({ values } = parseArgs({
    options: {
      doc: { type: 'string' },
      access: { type: 'string', default: 'write' },
      ttl: { type: 'string', default: '1h' },
      user: { type: 'string', default: 'cli' },
      help: { type: 'boolean', default: false },
    },
  }));
} catch (err) {
  fail((err as Error).message);
}
if (values.help) {
  console.log(usage);
  process.exit(0);
}
const secret = process.env['AUTH_SECRET'];
if (!secret) fail('AUTH_SECRET is not set');
if (!values.doc) fail('--doc is required');
// What the server would refuse, refused here rather than printed: a document id it serves no
// document under, or a prefix no id has (checked as the prefix of one), and a user outside
// the 1 to 256 characters its token check allows.
const prefix = values.doc.endsWith('*') ? values.doc.slice(0, -1) : null;
if (!docIdPattern.test(prefix === null ? values.doc : `${prefix}x`)) {
  fail(
    "--doc must be a document id (1 to 128 letters, digits, '.', '_', ':' or '-', not '.' " +
      "or '..'), such an id's prefix followed by '*', or '*'",
  );
}
if (values.user.length === 0 || values.user.length > maxUserLength) {
  fail(`--user must be 1 to ${maxUserLength} characters`);
}
if (values.access !== 'read' && values.access !== 'write') fail('--access must be read or write');
// A token cannot be revoked before it expires (the server keeps no list of them): a month
// bounds what a leaked one opens. A `--ttl 100000d` was signed as asked, and a longer one
// carried an `exp` of 8.64e24, past any date a JWT library reads.
const maxTtlSeconds = 30 * 86_400;
const ttlSeconds = parseDuration(values.ttl);
if (ttlSeconds === null || ttlSeconds === 0) {
  fail('--ttl must be a whole number of seconds, minutes, hours or days, like 90s, 15m, 1h or 7d');
}
if (ttlSeconds > maxTtlSeconds) {
  fail('--ttl must be at most 30d (720h): a token cannot be revoked before it expires');
}

console.log(
  await signToken(secret, {
    user: values.user,
    doc: values.doc,
    access: values.access,
    ttlSeconds,
    // What this server requires of its tokens, from the same environment.
    audience: process.env['AUTH_AUDIENCE'] || null,
    issuer: process.env['AUTH_ISSUER'] || null,
  }),
);
