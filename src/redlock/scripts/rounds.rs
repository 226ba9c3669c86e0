//! The scripts of the rounds a process can batch (the node's batching): renew, candidate
//! records and the follower's watch, each a body that [`BATCH`] also runs as a function, and
//! [`BATCH`] itself.

/// A candidate's own record written into the hash `$hash` (a Lua expression: `KEYS[1]` or
/// `KEYS[2]`), as [`CANDIDATES`] and a brief [`WATCH`] write it: `value` is the record, the
/// ready-since kept from the live one, and the hash kept alive for a lifetime (`life`, ms).
/// ARGV as [`CANDIDATES`]'s.
macro_rules! own_record {
    ($hash:literal) => {
        concat!(
            r#"  local since = 0
  if ARGV[3] == '1' then
    since = now
    local old = redis.call('HGET', "#,
            $hash,
            r#", ARGV[1])
    if old then
      local oe, os = string.match(old, '^(%d+)|(%d+)|')
      if oe and tonumber(oe) > now and tonumber(os) > 0 then
        since = tonumber(os)
      end
    end
  end
  local life = tonumber(ARGV[2])
  local value = string.format('%.0f|%.0f|%s|%s|%s|%s', now + life * 1000, since, ARGV[4], ARGV[5], ARGV[6], ARGV[7])
  redis.call('HSET', "#,
            $hash,
            r#", ARGV[1], value)
  if redis.call('PTTL', "#,
            $hash,
            r#") < life then
    redis.call('PEXPIRE', "#,
            $hash,
            r#", life)
  end
"#
        )
    };
}

/// The body of [`RENEW`] after its reading of `now`; [`BATCH`] runs it as a function.
macro_rules! renew_body {
    () => {
        r#"local v = redis.call('GET', KEYS[1])
local r
if v == ARGV[1] then
  if ARGV[4] == '1' or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  r = 1
elseif not v then
  if redis.call('GET', KEYS[3]) then
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
/// token, and `1` only under the test-only `--unsafe-allow-renewal-to-shorten`. Ours →
/// PEXPIRE, `{now, 1}`, but only where it extends the key (`PTTL` < ttl): a renewal never
/// shortens the key's expiry on the node's clock. Read while the node's clock is stepped back,
/// now + ttl is earlier than the expiry the holder's counted deadline rests on; a forward step
/// that undoes the step later would end the key that much before that deadline, and a taker
/// whose watch read the node only before and after both steps sees net zero and counts it
/// (finding 9, docs/concepts/clock-jumps.md). Missing (the node lost it: restart) → healed with SET NX,
/// `{now, 2}`, unless a release reserved the node for a successor (read with `GET`: the minimal
/// ACL has no `EXISTS`): then `{now, 3}`, nothing written (a renewal that arrives late, after
/// its own release, must not re-create the releaser's key over the successor's reservation and
/// make the release proof false).
/// Someone else's → `{now, 0}`. On 1 or 2 the epoch is raised to the token if lower
/// (set-if-greater).
pub const RENEW: &str = concat!(now_us!(), renew_body!());

/// The body of [`CANDIDATES`] after its reading of `now`; [`BATCH`] runs it as a function.
macro_rules! candidates_body {
    () => {
        concat!(
            r#"if ARGV[3] == 'withdraw' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {now, now}
end
if ARGV[1] ~= '' then
"#,
            own_record!("KEYS[1]"),
            r#"end
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
        )
    };
}
/// Candidate records ([`crate::redlock::candidates`]). KEYS: candidates hash. ARGV: identity ('' = only
/// read), lifetime ms, ready (0/1, or `withdraw`: delete the record), priority, created, pending
/// (0/1), revision.
/// Writes `expiry|ready_since|priority|created|pending|revision` (times in this node's `TIME`
/// µs; `ready_since` kept from the live record while ready, 0 when not ready), keeps the hash
/// alive for a lifetime, drops expired entries, and returns `{now, now, id1, value1, ...}` of
/// the live ones (`now` twice: [`crate::redlock::node::Node::eval`] takes the first as a clock reading).
pub const CANDIDATES: &str = concat!(now_us!(), candidates_body!());

/// The body of [`WATCH`] after its reading of `now`; [`BATCH`] runs it as a function.
macro_rules! watch_body {
    () => {
        concat!(
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
if ARGV[9] == '2' then
  return out
end
if ARGV[9] == '1' and ARGV[1] ~= '' then
"#,
            own_record!("KEYS[2]"),
            r#"  out[#out + 1] = ARGV[1]
  out[#out + 1] = value
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    if all[i] ~= ARGV[1] then
      out[#out + 1] = all[i]
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
        )
    };
}
/// An idle follower's refresh ([`crate::redlock::watch`]): the holder and the candidates in one atomic
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
/// (only when ready), `HSET`, `PTTL` of the hash, `PEXPIRE` (only when shorter), `HGETALL`
/// (its identities only returned: the minimal ACL has no `HKEYS`). A follower of many leases
/// reads the others' records of each lease on every [`crate::redlock::BRIEF_EVERY`]-th watch
/// only ([`crate::redlock::watch`]).
///
/// Key only (ARGV[9] = `2`: a shard of a sharded lease, whose records its process's shards
/// share, [`crate::redlock::SharedRecords`]): `{now, pttl, holder, epoch, now}`, no record
/// read or written. Commands: `TIME`, `GET`, `PTTL` (when held), `GET` of the epoch (a new
/// holder).
pub const WATCH: &str = concat!(now_us!(), watch_body!());

/// Several leases' rounds in one call (`lease.names`, `lease.shards`: [`crate::redlock::node`]'s
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
