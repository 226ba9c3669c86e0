//! `lease.name`, `lease.names` and `lease.shards`: which leases a sidecar contends for.

use super::super::file::Text;
use super::super::settings::LeaseSettings;
use super::super::{ConfigError, err};
use super::parse::is_dns_label;

/// The most leases one sidecar contends for (`lease.names`): every one costs a round per node
/// per renewal or retry, and a `lease` label value on the per-lease series.
pub const MAX_LEASES: usize = 64;

/// The most shards of one lease (`lease.shards`).
pub const MAX_SHARDS: u32 = 256;

/// `lease.name`, or the list `lease.names`, or `lease.name` in `lease.shards` shards: the lease
/// names, and the number of shards (0 when not sharded).
pub(super) fn lease_names(s: &LeaseSettings) -> Result<(Vec<String>, u32), ConfigError> {
    let Some(text) = Text::given(&s.shards) else {
        return Ok((several(s)?, 0));
    };
    let shards: u32 = text
        .trim()
        .parse()
        .ok()
        .filter(|m| (2..=MAX_SHARDS).contains(m))
        .ok_or_else(|| {
            err(
                "lease.shards",
                format!("{text:?} is not a number of shards from 2 to {MAX_SHARDS}"),
            )
        })?;
    if s.names.as_ref().is_some_and(|l| !l.is_empty()) {
        return Err(err(
            "lease.shards",
            "and lease.names are both given: shards are of one lease.name",
        ));
    }
    let name = several(s)?.remove(0);
    let last = format!("{name}-{}", shards - 1);
    if !is_dns_label(&last) {
        return Err(err(
            "lease.shards",
            format!(
                "the last shard's name {last:?} is longer than a DNS label (63 chars): shorten lease.name"
            ),
        ));
    }
    Ok(((0..shards).map(|i| format!("{name}-{i}")).collect(), shards))
}

/// `lease.name`, or the list `lease.names`: one of the two.
fn several(s: &LeaseSettings) -> Result<Vec<String>, ConfigError> {
    let label = |field: &str, name: &str| -> Result<String, ConfigError> {
        if !is_dns_label(name) {
            return Err(err(
                field,
                format!(
                    "{name:?} is not a lowercase DNS label (a-z, 0-9, '-', starting and ending alphanumeric, <= 63 chars)"
                ),
            ));
        }
        Ok(name.to_string())
    };
    let Some(list) = s.names.as_ref().filter(|l| !l.is_empty()) else {
        let name = Text::given(&s.name)
            .ok_or_else(|| err("lease.name", "is required (e.g. \"my-app\")"))?;
        return Ok(vec![label("lease.name", name)?]);
    };
    if Text::given(&s.name).is_some() {
        return Err(err(
            "lease.names",
            "and lease.name are both given: give the list alone (its first lease is the one /leader answers for)",
        ));
    }
    if list.len() > MAX_LEASES {
        return Err(err(
            "lease.names",
            format!(
                "{} leases given; at most {MAX_LEASES} are supported",
                list.len()
            ),
        ));
    }
    let mut names: Vec<String> = Vec::with_capacity(list.len());
    for (i, name) in list.iter().enumerate() {
        let name = label(&format!("lease.names[{i}]"), name)?;
        if names.contains(&name) {
            return Err(err(
                format!("lease.names[{i}]"),
                format!("{name:?} is given twice"),
            ));
        }
        names.push(name);
    }
    Ok(names)
}
