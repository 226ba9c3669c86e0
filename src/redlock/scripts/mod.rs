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

mod rounds;
pub use rounds::*;

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

#[cfg(test)]
mod tests {
    use super::scripts;

    /// The documented minimal ACL (docs/operating/managed-redis.md, applied verbatim by
    /// `tests/suite/managed_redis.rs`) allows every command any script calls: a command missing
    /// there fails only on the path that calls it (a renewal healing a restarted node's key, a
    /// follower of many leases), under an ACL user.
    #[test]
    fn every_command_a_script_calls_is_in_the_minimal_acl() {
        let page = include_str!("../../../docs/operating/managed-redis.md");
        let acl = page
            .lines()
            .find(|l| l.starts_with("ACL SETUSER redlock-elector "))
            .expect("the page gives the ACL line");
        let allowed: Vec<&str> = acl
            .split_whitespace()
            .filter_map(|w| w.strip_prefix('+'))
            .collect();
        let mut called = std::collections::BTreeSet::new();
        for script in scripts().all() {
            for (i, _) in script.source.match_indices("redis.call('") {
                let rest = &script.source[i + "redis.call('".len()..];
                let name = &rest[..rest.find('\'').expect("a quoted command")];
                called.insert((name.to_ascii_lowercase(), script.name));
            }
        }
        assert!(called.len() > 10, "the scan found the calls: {called:?}");
        let missing: Vec<_> = called
            .iter()
            .filter(|(name, _)| !allowed.contains(&name.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "(command, script) the minimal ACL does not allow: {missing:?}\n{acl}"
        );
        // The page's sentence that names the scripts' commands names each of them.
        for (name, _) in &called {
            let upper = format!("`{}`", name.to_ascii_uppercase());
            assert!(page.contains(&upper), "the page does not name {upper}");
        }
    }
}
