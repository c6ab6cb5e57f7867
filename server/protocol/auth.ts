import { createPublicKey, createSecretKey, type KeyObject } from 'node:crypto';
import { errors as joseErrors, jwtVerify, SignJWT, type JWTPayload } from 'jose';

/// What a token lets its holder do with a document.
export type Access = 'read' | 'write';

/// A verified token: who it names (`sub`), the access it grants, and when it expires
/// (milliseconds since the Unix epoch).
export interface Grant {
  user: string;
  access: Access;
  expiresAt: number;
}

/// The outcome of checking a token for a document: a grant, or a refusal with its code —
/// `unauthorized` for a token that is missing, malformed, wrongly signed or expired, and
/// `forbidden` for a good token whose `doc` claim does not cover the document.
export type AuthOutcome =
  { ok: true; grant: Grant } | { ok: false; code: 'unauthorized' | 'forbidden'; message: string };

/// Checks tokens for documents.
export interface TokenVerifier {
  /// Verifies `token` (whatever the client sent) for `docId`. Never throws.
  verify(token: unknown, docId: string): Promise<AuthOutcome>;
}

/// Keys a verifier accepts: an HS256 shared secret, a PEM public key (RS256, ES256 or EdDSA),
/// or both; and, when given, the `aud` and `iss` claims a token must carry. An identity
/// service that signs tokens for several applications with one key tells them apart by these:
/// without them, a token it minted for another application with `doc` and `access` claims
/// would open documents here too.
export interface TokenKeys {
  secret?: string | null;
  publicKey?: string | null;
  /// Required in `aud` (a string, or one of an array's entries).
  audience?: string | null;
  /// Required as `iss`.
  issuer?: string | null;
}

/// The longest user name (`sub` claim) a token may carry, in characters.
export const maxUserLength = 256;

/// The longest token accepted, in characters: a JWT with the four claims is a few hundred.
const maxTokenLength = 8192;

/// Whether a `doc` claim covers `docId`: `*` covers every document, `prefix*` every id that
/// starts with `prefix`, and anything else exactly that id.
export function scopeAllows(scope: string, docId: string): boolean {
  if (scope === '*') return true;
  if (scope.endsWith('*')) return docId.startsWith(scope.slice(0, -1));
  return scope === docId;
}

/// Builds a verifier for `keys`. Throws a TypeError when neither key is given or the public
/// key is not a PEM public key (configuration errors, found at start).
export function createTokenVerifier(keys: TokenKeys): TokenVerifier {
  const candidates: { key: KeyObject; algorithms: string[] }[] = [];
  if (keys.secret) {
    candidates.push({
      key: createSecretKey(Buffer.from(keys.secret, 'utf8')),
      algorithms: ['HS256'],
    });
  }
  if (keys.publicKey) {
    candidates.push({
      key: createPublicKey(keys.publicKey),
      algorithms: ['RS256', 'ES256', 'EdDSA'],
    });
  }
  if (candidates.length === 0)
    throw new TypeError('a token verifier needs a secret or a public key');
  const claims = {
    requiredClaims: ['exp'],
    ...(keys.audience ? { audience: keys.audience } : {}),
    ...(keys.issuer ? { issuer: keys.issuer } : {}),
  };

  return {
    async verify(token, docId) {
      if (typeof token !== 'string' || token.length === 0) {
        return refuse(
          'unauthorized',
          'A token is needed (auth.token in the socket handshake; Authorization: Bearer over HTTP)',
        );
      }
      if (token.length > maxTokenLength) return refuse('unauthorized', 'The token is too long');
      let payload: JWTPayload | null = null;
      let failure = 'The token is malformed or wrongly signed';
      for (const { key, algorithms } of candidates) {
        try {
          ({ payload } = await jwtVerify(token, key, { algorithms, ...claims }));
          break;
        } catch (err) {
          if (err instanceof joseErrors.JWTExpired) failure = 'The token has expired';
          else if (err instanceof joseErrors.JWTClaimValidationFailed) failure = err.message;
        }
      }
      if (!payload) return refuse('unauthorized', failure);
      const { sub, doc, access, exp } = payload as Record<string, unknown>;
      if (typeof sub !== 'string' || sub === '' || sub.length > maxUserLength) {
        return refuse('unauthorized', 'The token has no sub claim naming the user');
      }
      if (typeof doc !== 'string' || doc === '') {
        return refuse('unauthorized', 'The token has no doc claim');
      }
      if (access !== 'read' && access !== 'write') {
        return refuse('unauthorized', 'The token’s access claim must be read or write');
      }
      if (!scopeAllows(doc, docId)) {
        return refuse('forbidden', `The token does not cover document ${docId}`);
      }
      return { ok: true, grant: { user: sub, access, expiresAt: (exp as number) * 1000 } };
    },
  };
}

function refuse(code: 'unauthorized' | 'forbidden', message: string): AuthOutcome {
  return { ok: false, code, message };
}

/// What `signToken` puts in a token.
export interface TokenClaims {
  /// The user (`sub`).
  user: string;
  /// An exact document id, a prefix ending in `*`, or `*`.
  doc: string;
  access: Access;
  /// Seconds from now until it expires.
  ttlSeconds: number;
  /// `aud` and `iss`, for a server that requires them (`AUTH_AUDIENCE`, `AUTH_ISSUER`).
  audience?: string | null;
  issuer?: string | null;
}

/// Signs an HS256 token with `secret`. For the `npm run token` command, tests and hosts that
/// mint tokens for their users.
export function signToken(secret: string, claims: TokenClaims): Promise<string> {
  const jwt = new SignJWT({ doc: claims.doc, access: claims.access })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.user)
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + claims.ttlSeconds);
  if (claims.audience) jwt.setAudience(claims.audience);
  if (claims.issuer) jwt.setIssuer(claims.issuer);
  return jwt.sign(createSecretKey(Buffer.from(secret, 'utf8')));
}

/// Parses a duration like `90s`, `15m`, `1h` or `7d` into seconds; null when it is not one.
export function parseDuration(text: string): number | null {
  const match = /^(\d+)([smhd])$/.exec(text);
  if (!match) return null;
  const units = { s: 1, m: 60, h: 3600, d: 86_400 } as const;
  return Number(match[1]) * units[match[2] as keyof typeof units];
}
