//! The Lua scripts that run atomically on each node. Loaded once per connection (`SCRIPT LOAD`
//! in the handshake) and called with `EVALSHA`.

use std::sync::LazyLock;

/// A script and its SHA1.
pub struct Script {
    /// Metric label (`command`).
    pub name: &'static str,
    /// Lua source.
    pub source: &'static str,
    /// SHA1 of the source, as Redis computes it.
    pub sha: String,
}

impl Script {
    fn new(name: &'static str, source: &'static str) -> Self {
        Script {
            name,
            source,
            sha: redis::Script::new(source).get_hash().to_string(),
        }
    }
}

/// Every reply starts with the node's `TIME` in µs since the epoch, read inside the same atomic
/// step (clock-jump detection, [`super::clock`]). Lua numbers are doubles: µs since 1970 stay
/// exact below 2^53 (until the year 2255).
macro_rules! now_us {
    () => {
        "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    };
}

/// Acquire: `SET lock value NX PX ttl`. KEYS: lock, epoch, reservation. ARGV: value, ttl_ms,
/// proposed token, mode (`take` | `probe` | `proof`), identity.
/// Granted → the proposed token is written set-if-greater in the same atomic step, and
/// `{now, 1, epoch, proved}` returns the node's fencing epoch *before* that write (0 if none)
/// and whether the grant consumed a release proof for this identity (1) or not (0). When no
/// granting node had an epoch at or above the proposal, the proposal is the term's token and is
/// already on a quorum: acquisition takes one round, not two. A reservation (see [`RELEASE`])
/// is consumed by the grant.
/// Denied → `{now, 0, holder_value, pttl_ms, epoch}` so followers learn the holder, when it may
/// expire, and the current term's token (remembered for their own next token).
/// Reserved for another identity (a graceful release named it, less than a grace ago) → denied
/// like a free key, with the reservation's remaining lifetime: `{now, 0, '', pttl_ms, epoch}`.
/// `probe` never takes the key (an attempt that cannot win: fewer than a quorum of nodes count
/// yet); it answers like a denial, with an empty holder when the key is free. `proof` takes the
/// key only if a release proof for this identity is there (a fresh named successor on a node
/// whose clock it has not watched long enough: only the proof can make that vote count), and
/// otherwise answers like `probe`.
/// A reservation is `<identity>` (the successor's grace only) or `<identity> proof` (also the
/// proof: the releaser still held a valid lease that counted this node; identities have no
/// spaces). Releases before the proof existed write the first form only.
pub const ACQUIRE: &str = concat!(
    now_us!(),
    r#"local e = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local reserved = redis.call('GET', KEYS[3])
local proved = 0
if reserved then
  local name, mark = string.match(reserved, '^(%S+) (%S+)$')
  if not name then
    name = reserved
  end
  if name ~= ARGV[5] then
    return {now, 0, '', redis.call('PTTL', KEYS[3]), e}
  end
  if mark == 'proof' then
    proved = 1
  end
end
local take = ARGV[4] == 'take' or (ARGV[4] == 'proof' and proved == 1)
if take and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if reserved then
    redis.call('DEL', KEYS[3])
  end
  if tonumber(ARGV[3]) > e then
    redis.call('SET', KEYS[2], ARGV[3])
  end
  return {now, 1, e, proved}
end
return {now, 0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]), e}
"#
);

/// The body of [`RENEW`] after its reading of `now`; [`BATCH`] runs it as a function.
macro_rules! renew_body {
    () => {
        r#"local v = redis.call('GET', KEYS[1])
local r
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  r = 1
elseif not v then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return {now, 3}
  end
  redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  r = 2
else
  return {now, 0}
end
local e = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if tonumber(ARGV[3]) > e then
  redis.call('SET', KEYS[2], ARGV[3])
end
return {now, r}
"#
    };
}
/// Renew and assert the fencing epoch. KEYS: lock, epoch, reservation. ARGV: value, ttl_ms,
/// token. Ours → PEXPIRE, `{now, 1}`. Missing (the node lost it: restart) → healed with SET NX,
/// `{now, 2}`, unless a release reserved the node for a successor: then `{now, 3}`, nothing
/// written (a renewal that arrives late, after its own release, must not re-create the
/// releaser's key over the successor's reservation and make the release proof false).
/// Someone else's → `{now, 0}`. On 1 or 2 the epoch is raised to the token if lower
/// (set-if-greater).
pub const RENEW: &str = concat!(now_us!(), renew_body!());

/// Token-checked release. KEYS: lock, reservation. ARGV: value, channel ('' = do not publish),
/// notice payload (the value and the named successor, [`super::candidates::notice_payload`]),
/// successor identity ('' = none), grace ms, proof (`1`: the releaser's lease is still valid,
/// this node counts for it and every lock command it sent here was answered; see
/// [`super::release`]).
/// Deletes only our own value (`{now, 1}`, else `{now, 0}`). With a successor, the key is
/// reserved for it for the grace in the same atomic step: an attempt by anyone else that reaches
/// this node after the release and before the successor's is denied, so the successor wins even
/// against a follower whose scheduled retry happened to fire at that moment. With the proof,
/// the reservation also says that no live holder is left on this node (`<successor> proof`):
/// the releaser's own value was here, and the releaser was the only valid holder, so a fresh
/// successor may count this node's grant without watching its clock first. Publishes the
/// release notice so followers retry at once (the named successor first).
pub const RELEASE: &str = concat!(
    now_us!(),
    r#"if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[4] ~= '' then
    local r = ARGV[4]
    if ARGV[6] == '1' then
      r = r .. ' proof'
    end
    redis.call('SET', KEYS[2], r, 'PX', ARGV[5])
  end
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
  return {now, 1}
end
return {now, 0}
"#
);

/// The body of [`CANDIDATES`] after its reading of `now`; [`BATCH`] runs it as a function.
macro_rules! candidates_body {
    () => {
        r#"if ARGV[3] == 'withdraw' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {now, now}
end
if ARGV[1] ~= '' then
  local since = 0
  if ARGV[3] == '1' then
    since = now
    local old = redis.call('HGET', KEYS[1], ARGV[1])
    if old then
      local oe, os = string.match(old, '^(%d+)|(%d+)|')
      if oe and tonumber(oe) > now and tonumber(os) > 0 then
        since = tonumber(os)
      end
    end
  end
  local life = tonumber(ARGV[2])
  local value = string.format('%.0f|%.0f|%s|%s|%s|%s', now + life * 1000, since, ARGV[4], ARGV[5], ARGV[6], ARGV[7])
  redis.call('HSET', KEYS[1], ARGV[1], value)
  if redis.call('PTTL', KEYS[1]) < life then
    redis.call('PEXPIRE', KEYS[1], life)
  end
end
local all = redis.call('HGETALL', KEYS[1])
local out = {now, now}
for i = 1, #all, 2 do
  local e = tonumber(string.match(all[i + 1], '^(%d+)|'))
  if e and e > now then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  else
    redis.call('HDEL', KEYS[1], all[i])
  end
end
return out
"#
    };
}
/// Candidate records ([`super::candidates`]). KEYS: candidates hash. ARGV: identity ('' = only
/// read), lifetime ms, ready (0/1, or `withdraw`: delete the record), priority, created, pending
/// (0/1), revision.
/// Writes `expiry|ready_since|priority|created|pending|revision` (times in this node's `TIME`
/// µs; `ready_since` kept from the live record while ready, 0 when not ready), keeps the hash
/// alive for a lifetime, drops expired entries, and returns `{now, now, id1, value1, ...}` of
/// the live ones (`now` twice: [`super::node::Node::eval`] takes the first as a clock reading).
pub const CANDIDATES: &str = concat!(now_us!(), candidates_body!());

/// The body of [`WATCH`] after its reading of `now`; [`BATCH`] runs it as a function.
macro_rules! watch_body {
    () => {
        r#"local holder = redis.call('GET', KEYS[1]) or ''
local pttl = -2
if holder ~= '' then
  pttl = redis.call('PTTL', KEYS[1])
end
local epoch = -1
if holder ~= '' and holder ~= ARGV[8] then
  epoch = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
end
local out = {now, pttl, holder, epoch, now}
if ARGV[9] == '1' and ARGV[1] ~= '' then
  local since = 0
  if ARGV[3] == '1' then
    since = now
    local old = redis.call('HGET', KEYS[2], ARGV[1])
    if old then
      local oe, os = string.match(old, '^(%d+)|(%d+)|')
      if oe and tonumber(oe) > now and tonumber(os) > 0 then
        since = tonumber(os)
      end
    end
  end
  local life = tonumber(ARGV[2])
  local value = string.format('%.0f|%.0f|%s|%s|%s|%s', now + life * 1000, since, ARGV[4], ARGV[5], ARGV[6], ARGV[7])
  redis.call('HSET', KEYS[2], ARGV[1], value)
  if redis.call('PTTL', KEYS[2]) < life then
    redis.call('PEXPIRE', KEYS[2], life)
  end
  out[#out + 1] = ARGV[1]
  out[#out + 1] = value
  local ids = redis.call('HKEYS', KEYS[2])
  for i = 1, #ids do
    if ids[i] ~= ARGV[1] then
      out[#out + 1] = ids[i]
      out[#out + 1] = ''
    end
  end
  return out
end
local all = redis.call('HGETALL', KEYS[2])
local old = nil
local last = 0
for i = 1, #all, 2 do
  local e = tonumber(string.match(all[i + 1], '^(%d+)|'))
  if e and e > now then
    if all[i] == ARGV[1] then
      old = all[i + 1]
    else
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
    if e > last then
      last = e
    end
  else
    redis.call('HDEL', KEYS[2], all[i])
  end
end
if ARGV[1] ~= '' then
  local since = 0
  if ARGV[3] == '1' then
    since = now
    if old then
      local os = tonumber(string.match(old, '^%d+|(%d+)|'))
      if os and os > 0 then
        since = os
      end
    end
  end
  local expiry = now + tonumber(ARGV[2]) * 1000
  local value = string.format('%.0f|%.0f|%s|%s|%s|%s', expiry, since, ARGV[4], ARGV[5], ARGV[6], ARGV[7])
  redis.call('HSET', KEYS[2], ARGV[1], value)
  out[#out + 1] = ARGV[1]
  out[#out + 1] = value
  if expiry > last then
    last = expiry
  end
  redis.call('PEXPIRE', KEYS[2], string.format('%.0f', math.ceil((last - now) / 1000)))
end
return out
"#
    };
}
/// An idle follower's refresh ([`super::watch`]): the holder and the candidates in one atomic
/// step, the own record refreshed, so a follower that knows the holder needs one call per node
/// per refresh instead of an acquire attempt, its cleanup and a candidates round. KEYS: lock,
/// candidates hash, epoch. ARGV: as [`CANDIDATES`] (identity '' = only read; never
/// `withdraw`), then the holder value the follower last saw.
/// Returns `{now, pttl_ms (-2 when free), holder_value or '', epoch (-1: not read), now, id1,
/// value1, ...}`: the records as [`CANDIDATES`] returns them, the own one as written. The epoch
/// is read only when the holder is not the one last seen (a term this follower did not see
/// begin), so a follower still learns every term's token, as a denied attempt taught it.
/// Commands: `TIME`, `GET`, `PTTL` (only when held), `HGETALL`, `HSET` and `PEXPIRE` (only with
/// an identity), `GET` of the epoch (only for a new holder); the ready-since is taken from the
/// `HGETALL` (no `HGET`), and the hash is kept alive until its latest live record expires (one
/// `PEXPIRE`, no `PTTL` of the hash): never shorter than [`CANDIDATES`] keeps it, since each of
/// its records is among those live ones.
///
/// Brief (ARGV[9] = `1`, with an identity): the own record written as above, only the
/// others' identities returned (each with an empty value: who withdrew is seen at once), and
/// expired records not dropped (a full read does that): `{now, pttl, holder, epoch, now, id,
/// value, id2, '', ...}`, the hash kept alive for a lifetime as [`CANDIDATES`] keeps it.
/// Commands: `TIME`, `GET`, `PTTL` (when held), `GET` of the epoch (a new holder), `HGET`
/// (only when ready), `HSET`, `PTTL` of the hash, `PEXPIRE` (only when shorter), `HKEYS`. A
/// follower of many leases reads the others' records of each lease on every
/// [`super::BRIEF_EVERY`]-th watch only ([`super::watch`]).
pub const WATCH: &str = concat!(now_us!(), watch_body!());

/// Several leases' rounds in one call (`lease.names`, `lease.shards`: [`super::node`]'s
/// batching): [`RENEW`], [`CANDIDATES`] and [`WATCH`], each the same body run as a function on
/// its own keys and arguments, in the order given, in one atomic step with one reading of
/// `now`. KEYS: every op's keys in order. ARGV: the number of ops, then per op its name
/// (`renew`, `candidates` or `watch`), its number of keys, its number of arguments and its
/// arguments. Returns `{now, reply1, reply2, ...}`: each op's reply as its own script returns
/// it, without the leading `now`.
pub const BATCH: &str = concat!(
    now_us!(),
    "local function renew(KEYS, ARGV)\n",
    renew_body!(),
    "end\nlocal function candidates(KEYS, ARGV)\n",
    candidates_body!(),
    "end\nlocal function watch(KEYS, ARGV)\n",
    watch_body!(),
    r#"end
local ops = {renew = renew, candidates = candidates, watch = watch}
local out = {now}
local k, a = 1, 2
for i = 1, tonumber(ARGV[1]) do
  local op = ops[ARGV[a]]
  local nk, na = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local keys, args = {}, {}
  for j = 1, nk do
    keys[j] = KEYS[k]
    k = k + 1
  end
  for j = 1, na do
    args[j] = ARGV[a]
    a = a + 1
  end
  local r = op(keys, args)
  table.remove(r, 1)
  out[i + 1] = r
end
return out
"#
);

/// Attestations of the clock watch ([`super::node`]'s `attest`). KEYS: the attestation hash
/// (`<key>:attest`). ARGV[1] is the mode:
/// - `request`, ARGV: request name (`<instance>-<epoch>`), lifetime ms, channel. Writes the
///   request as pending (`p|<expiry µs>`, node time) unless it is there already, keeps the hash
///   alive for a lifetime, publishes `request`. Returns `{now}`.
/// - `check`, ARGV: request name. Returns `{now, state}`: `v` vouched, `p` pending, `''` none.
/// - `pending`: drops expired requests; returns `{now, name1, name2, ...}` of the pending ones.
/// - `vouch`, ARGV: channel, names... Each named request that is still pending becomes vouched
///   (`v|<expiry>`), and `vouched` is published if any did. The caller names only requests
///   its own `pending` reading returned, and vouches only if the node counted for it at that
///   reading; so every vouched request was written before a reading at which a sidecar
///   counted the node. Returns `{now, vouched}`.
///
/// Commands: `TIME`, `HGET`, `HSET`, `PTTL`, `PEXPIRE`, `PUBLISH`, `HGETALL`, `HDEL`.
pub const ATTEST: &str = concat!(
    now_us!(),
    r#"local mode = ARGV[1]
if mode == 'request' then
  local life = tonumber(ARGV[3])
  if not redis.call('HGET', KEYS[1], ARGV[2]) then
    redis.call('HSET', KEYS[1], ARGV[2], string.format('p|%.0f', now + life * 1000))
  end
  if redis.call('PTTL', KEYS[1]) < life then
    redis.call('PEXPIRE', KEYS[1], life)
  end
  redis.call('PUBLISH', ARGV[4], 'request')
  return {now}
end
if mode == 'check' then
  local v = redis.call('HGET', KEYS[1], ARGV[2]) or ''
  return {now, string.sub(v, 1, 1)}
end
if mode == 'pending' then
  local all = redis.call('HGETALL', KEYS[1])
  local out = {now}
  for i = 1, #all, 2 do
    local state, e = string.match(all[i + 1], '^(%a)|(%d+)$')
    if e and tonumber(e) > now then
      if state == 'p' then
        out[#out + 1] = all[i]
      end
    else
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
  return out
end
if mode == 'vouch' then
  local n = 0
  for i = 3, #ARGV do
    local v = redis.call('HGET', KEYS[1], ARGV[i])
    if v and string.sub(v, 1, 2) == 'p|' then
      redis.call('HSET', KEYS[1], ARGV[i], 'v' .. string.sub(v, 2))
      n = n + 1
    end
  end
  if n > 0 then
    redis.call('PUBLISH', ARGV[2], 'vouched')
  end
  return {now, n}
end
return redis.error_reply('attest: unknown mode')
"#
);

/// The scripts by role.
pub struct Scripts {
    /// [`ACQUIRE`].
    pub acquire: Script,
    /// [`RENEW`].
    pub renew: Script,
    /// [`RELEASE`].
    pub release: Script,
    /// [`CANDIDATES`].
    pub candidates: Script,
    /// [`WATCH`].
    pub watch: Script,
    /// [`ATTEST`].
    pub attest: Script,
    /// [`BATCH`].
    pub batch: Script,
}

impl Scripts {
    /// Every script, for loading.
    pub fn all(&self) -> [&Script; 7] {
        [
            &self.acquire,
            &self.renew,
            &self.release,
            &self.candidates,
            &self.watch,
            &self.attest,
            &self.batch,
        ]
    }
}

static ALL: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new("acquire", ACQUIRE),
    renew: Script::new("renew", RENEW),
    release: Script::new("release", RELEASE),
    candidates: Script::new("candidates", CANDIDATES),
    watch: Script::new("watch", WATCH),
    attest: Script::new("attest", ATTEST),
    batch: Script::new("batch", BATCH),
});

/// The scripts, hashed once.
pub fn scripts() -> &'static Scripts {
    &ALL
}
