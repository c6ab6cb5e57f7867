// The Lua scripts of `RedisStore`. Each touches the keys of one document only, all in the
// document's hash slot (`{docId}`), or one node liveness key: on a Redis Cluster every script
// runs on the one master that holds its keys. Scripts never return a Lua false: RESP3 would
// turn it into a boolean.

// Journal entries are stored as "<endVersion>\n<entry JSON>", so that the snapshot script can
// tell which entries a snapshot covers by reading a number at the front of each string instead
// of decoding (with cjson, in Redis's single thread) whole entries full of steps. JSON.stringify
// never emits a raw newline, so the first newline is always the separator.

// KEYS: meta, journal, lease, snapshot. ARGV: epoch, baseVersion, endVersion, encoded entry, lease token
// ('' for none). Returns {1, version} when appended, {0, storedVersion, storedEpoch} on
// conflict ('' when the document does not exist), {2, storedVersion, storedEpoch} when the
// lease is not (or no longer) the writer's: the fencing that keeps a process that lost its
// lease from writing (the position lets it tell a Redis that went back to an older state). Never returns a
// Lua false: RESP3 would turn it into a boolean.
//
// A document is created (base 0, no meta hash) only where none of its keys exist: a journal or
// snapshot left without its meta hash (evicted, partly lost, deleted by hand) would otherwise
// be extended, and the next load would mix the old entries into the new history and refuse
// every acknowledged step of it. Such leftovers answer as a conflict: the room reloads, and the
// load quarantines the document as corrupt.
export const appendScript = `
local meta = redis.call('HMGET', KEYS[1], 'version', 'epoch')
if ARGV[5] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[5] then
  return {2, tonumber(meta[1]) or 0, meta[2] or ''}
end
local base = tonumber(ARGV[2])
if not meta[1] then
  if base ~= 0 or redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[4]) > 0 then return {0, 0, ''} end
elseif meta[2] ~= ARGV[1] or tonumber(meta[1]) ~= base then
  return {0, tonumber(meta[1]), meta[2] or ''}
end
redis.call('RPUSH', KEYS[2], ARGV[4])
redis.call('HSET', KEYS[1], 'version', ARGV[3], 'epoch', ARGV[1])
return {1, tonumber(ARGV[3])}
`;

// KEYS: meta, journal, snapshot, lease, history, history-meta. ARGV: epoch, snapshot version,
// snapshot JSON, lease token ('' for none). Returns 'ok', 'conflict', 'outdated' or 'lost' (the meanings of
// `SnapshotOutcome`), or 'corrupt' when a journal entry it must read has no numeric end
// prefix. Redis does not roll a script back when it fails half-way, so every check, the
// prefixes of the entries to trim included, comes before the first write: a failed snapshot
// writes nothing. The entries are read in chunks with LRANGE and trimmed with one LTRIM rather
// than one LPOP each. The snapshot it replaces and the entries it trims, with the first one it
// keeps (which the new snapshot may end inside), are archived as one history segment under the
// old snapshot's version: "<old snapshot JSON or ''>\n<entry>\n<entry>…", each entry as the
// journal holds it.
export const snapshotScript = `
if ARGV[4] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[4] then return 'lost' end
local meta = redis.call('HMGET', KEYS[1], 'version', 'epoch', 'snapshotVersion')
local sv = tonumber(ARGV[2])
if not meta[1] then
  if sv ~= 0 or redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) > 0 then return 'conflict' end
elseif meta[2] ~= ARGV[1] or tonumber(meta[1]) < sv then
  return 'conflict'
elseif meta[3] and tonumber(meta[3]) >= sv then
  return 'outdated'
end
local covered = 0
local kept = {redis.call('GET', KEYS[3]) or ''}
while true do
  local head = redis.call('LRANGE', KEYS[2], covered, covered + 127)
  local done = #head < 128
  for i = 1, #head do
    local prefix = string.match(head[i], '^(%d+)\\n')
    if not prefix then return 'corrupt' end
    kept[#kept + 1] = head[i]
    if tonumber(prefix) > sv then
      done = true
      break
    end
    covered = covered + 1
  end
  if done then break end
end
if meta[1] and (#kept > 1 or kept[1] ~= '') then
  local text = table.concat(kept, '\\n')
  local base = meta[3] or '0'
  local before = redis.call('HSTRLEN', KEYS[5], base)
  redis.call('HSET', KEYS[5], base, text)
  redis.call('HINCRBY', KEYS[6], 'bytes', #text - before)
end
if not meta[1] then redis.call('HSET', KEYS[1], 'version', 0, 'epoch', ARGV[1]) end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('HSET', KEYS[1], 'snapshotVersion', ARGV[2])
if covered > 0 then redis.call('LTRIM', KEYS[2], covered, -1) end
return 'ok'
`;

// KEYS: meta, journal, snapshot, lease. ARGV: expected epoch ('' for a document that must not
// exist), expected version, new epoch, snapshot version, snapshot JSON, lease token ('' for
// none), '1' when nobody may hold the lease. Returns 'ok', 'conflict' (the document is not where
// the caller saw it) or 'lost'.
// Replaces the whole history: journal gone, snapshot and meta hash of the new epoch.
export const resetScript = `
if ARGV[6] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[6] then return 'lost' end
if ARGV[7] == '1' and redis.call('EXISTS', KEYS[4]) == 1 then return 'lost' end
local meta = redis.call('HMGET', KEYS[1], 'version', 'epoch')
if ARGV[1] == '' then
  if meta[1] then return 'conflict' end
elseif meta[2] ~= ARGV[1] or tonumber(meta[1]) ~= tonumber(ARGV[2]) then
  return 'conflict'
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SET', KEYS[3], ARGV[5])
redis.call('HSET', KEYS[1], 'version', ARGV[4], 'epoch', ARGV[3], 'snapshotVersion', ARGV[4])
return 'ok'
`;

// KEYS: history, history-meta, windows. ARGV: expected generation, windows JSON, how many bases
// to remove, those bases, then base and encoded segment pairs to add. Returns 'ok', or
// 'conflict' (nothing written) when another rewrite moved the generation on. Retention's one
// write: segments the snapshot script adds meanwhile are past those it touches.
export const rewriteHistoryScript = `
local generation = tonumber(redis.call('HGET', KEYS[2], 'generation') or '0')
if generation ~= tonumber(ARGV[1]) then return 'conflict' end
local removed = tonumber(ARGV[3])
local delta = 0
for i = 4, 3 + removed do
  delta = delta - redis.call('HSTRLEN', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[1], ARGV[i])
end
for i = 4 + removed, #ARGV, 2 do
  delta = delta - redis.call('HSTRLEN', KEYS[1], ARGV[i]) + #ARGV[i + 1]
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[3], ARGV[2])
redis.call('HINCRBY', KEYS[2], 'bytes', delta)
redis.call('HINCRBY', KEYS[2], 'generation', 1)
return 'ok'
`;

// KEYS: history. ARGV: base version. Returns the segment without its checkpoint, for readers of
// steps only, which then do not receive a whole document per segment: the text from its first
// newline on (which decodes as a segment with no checkpoint), ' ' for a segment that is a
// checkpoint alone, '' for none (a Lua false would become a RESP3 boolean).
export const segmentSteps = `
local text = redis.call('HGET', KEYS[1], ARGV[1])
if not text then return '' end
local nl = string.find(text, '\\n', 1, true)
if not nl then return ' ' end
return string.sub(text, nl)
`;

// KEYS: meta, journal, snapshot. Returns '' for an unknown document, 'orphan' when there is no
// meta version but one of the keys exists (a journal or snapshot whose meta hash is gone, or a
// meta hash without its version), else {version, epoch or '', snapshot JSON or '',
// {encoded entries}}: one script, so the three reads see one state even while appends and
// snapshots of the document run on other servers. A missing epoch is sent as '' because a nil
// would end the reply's array early.
export const loadScript = `
local meta = redis.call('HMGET', KEYS[1], 'version', 'epoch')
if not meta[1] then
  if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) > 0 then return 'orphan' end
  return ''
end
local snapshot = redis.call('GET', KEYS[3]) or ''
return {meta[1], meta[2] or '', snapshot, redis.call('LRANGE', KEYS[2], 0, -1)}
`;

// KEYS: lease, fence, wanted, home. ARGV: holder, ttl (ms), node id. A holder that already has
// the lease gets it back (extended); otherwise it is taken only when free, with the next
// fencing number. The document's home (the node the gateway routes it to) then becomes this
// node when it has none or is this one already; a home on another node is returned for the
// caller to look up, as node liveness keys live outside the document's slot (see
// claimHomeScript). Returns {1, token, other home or ''} or {0, current token, remaining ms}.
export const acquireScript = `
local current = redis.call('GET', KEYS[1])
if current then
  if string.sub(current, 1, #ARGV[1] + 1) == ARGV[1] .. '#' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, current, ''}
  end
  return {0, current, redis.call('PTTL', KEYS[1])}
end
local token = ARGV[1] .. '#' .. redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
local home = redis.call('GET', KEYS[4])
if not home or home == ARGV[3] then
  redis.call('SET', KEYS[4], ARGV[3])
  return {1, token, ''}
end
return {1, token, home}
`;

// KEYS: home, lease. ARGV: the home the acquire saw, node id, lease token. After an acquire
// found the document's home on another node that is alive (the gateway routes the document
// here now), makes this node its home, unless the lease or the home changed meanwhile. A home
// node that is down keeps its home: this node only stands in for it (see renewScript).
export const claimHomeScript = `
if redis.call('GET', KEYS[2]) ~= ARGV[3] or redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 'ok'
end
redis.call('SET', KEYS[1], ARGV[2])
return 'ok'
`;

// KEYS: node key. ARGV: ttl (ms). A node's liveness: the key holds the Redis time (ms) at
// which the node was first seen alive since it was last down, and expires unless renewed.
// Each node key hashes to a slot of its own (no hash tag): it is never read in a script with
// a document's keys, so it needs none.
export const heartbeatScript = `
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then
  local now = redis.call('TIME')
  redis.call('SET', KEYS[1], now[1] * 1000 + math.floor(now[2] / 1000), 'PX', ARGV[1])
end
return 'ok'
`;

// KEYS: node key. Returns how long (ms, by the clock of the Redis that holds the key, the one
// that wrote it) the node has been alive since it was last down, or -1 when it is down.
export const nodeAgeScript = `
local since = redis.call('GET', KEYS[1])
if not since then return -1 end
local now = redis.call('TIME')
return now[1] * 1000 + math.floor(now[2] / 1000) - tonumber(since)
`;

// KEYS: lease, wanted, home. ARGV: token, ttl (ms), holder, node id. Returns 'held'; 'wanted'
// when another holder asked for the document; 'lost'; or 'home:<node>' when the lease is held
// but the document's home is another node, for the caller to ask how long that node has been
// back (this node stands in for it, and hands the document back once the home node has been
// alive long enough for the gateway to route to it again).
export const renewScript = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 'lost' end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local wanted = redis.call('GET', KEYS[2])
if wanted and wanted ~= ARGV[3] then return 'wanted' end
local home = redis.call('GET', KEYS[3])
if home and home ~= ARGV[4] then return 'home:' .. home end
return 'held'
`;

// KEYS: lease, meta, journal, snapshot, fence, home. ARGV: token. Deletes the lease only if it
// is still this one. A document that was never written (a creation refused once its lease was
// held, an editor that joined a new document and left without a change) also loses its fencing
// counter and home, which would otherwise stay for good, two keys per made-up id: nobody holds
// the lease now, so no fenced writer can be confused by numbers starting over (a token names
// its holder, one per process, as well as the number).
export const releaseScript = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 'ok' end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[4]) == 0 then redis.call('DEL', KEYS[5], KEYS[6]) end
return 'ok'
`;
