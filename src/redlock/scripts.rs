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

/// Acquire: `SET lock value NX PX ttl`. KEYS: lock, epoch. ARGV: value, ttl_ms, proposed token.
/// Granted → the proposed token is written set-if-greater in the same atomic step, and
/// `{1, epoch}` returns the node's fencing epoch *before* that write (0 if none). When no
/// granting node had an epoch at or above the proposal, the proposal is the term's token and is
/// already on a quorum: acquisition takes one round, not two.
/// Denied → `{0, holder_value, pttl_ms, epoch}` so followers learn the holder, when it may
/// expire, and the current term's token (remembered for their own next token).
pub const ACQUIRE: &str = r#"
local e = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if tonumber(ARGV[3]) > e then
    redis.call('SET', KEYS[2], ARGV[3])
  end
  return {1, e}
end
return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]), e}
"#;

/// Renew and assert the fencing epoch. KEYS: lock, epoch. ARGV: value, ttl_ms, token.
/// Ours → PEXPIRE, returns 1. Missing (the node lost it: restart) → healed with SET NX, returns 2.
/// Someone else's → 0. On 1 or 2 the epoch is raised to the token if lower (set-if-greater).
pub const RENEW: &str = r#"
local v = redis.call('GET', KEYS[1])
local r
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  r = 1
elseif not v then
  redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  r = 2
else
  return 0
end
local e = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if tonumber(ARGV[3]) > e then
  redis.call('SET', KEYS[2], ARGV[3])
end
return r
"#;

/// Token-checked release. KEYS: lock. ARGV: value, channel ('' = do not publish).
/// Deletes only our own value; publishes the release notice so followers retry at once.
pub const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], ARGV[1])
  end
  return 1
end
return 0
"#;

static ALL: LazyLock<[Script; 3]> = LazyLock::new(|| {
    [
        Script::new("acquire", ACQUIRE),
        Script::new("renew", RENEW),
        Script::new("release", RELEASE),
    ]
});

/// Every script, in a fixed order: acquire, renew, release.
pub fn scripts() -> &'static [Script; 3] {
    &ALL
}
