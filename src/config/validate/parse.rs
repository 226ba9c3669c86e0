//! Parsers for one value each, naming the field on error.

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::file::Text;
use crate::config::{ConfigError, err};

/// Parse a humantime duration, naming the field on error.
pub fn parse_duration(field: &str, s: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(s.trim()).map_err(|_| {
        let t = s.trim();
        let hint = if t.chars().all(|c| c.is_ascii_digit() || c == '.') && !t.is_empty() {
            format!(" (try \"{t}s\")")
        } else {
            " (e.g. \"250ms\", \"10s\", \"1m\")".to_string()
        };
        err(field, format!("{s:?} is not a duration{hint}"))
    })
}

/// A duration setting, or its default when not given.
pub(super) fn duration_or(
    field: &str,
    v: &Option<Text>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    Text::given(v).map_or(Ok(default), |s| parse_duration(field, s))
}

pub(super) fn parse_bool(field: &str, s: &str) -> Result<bool, ConfigError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(err(
            field,
            format!("{s:?} is not a boolean (true or false)"),
        )),
    }
}

/// A boolean setting, or its default when not given.
pub(super) fn bool_or(field: &str, v: &Option<Text>, default: bool) -> Result<bool, ConfigError> {
    Text::given(v).map_or(Ok(default), |s| parse_bool(field, s))
}

pub(super) fn parse_addr(field: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.trim().parse().map_err(|_| {
        err(
            field,
            format!("{s:?} is not an address (e.g. \"127.0.0.1:4040\")"),
        )
    })
}

/// RFC 1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric, <= 63.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A Kubernetes label value: empty, or <= 63 alphanumerics, '-', '_', '.', alphanumeric at
/// both ends.
pub(super) fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && (v.is_empty()
            || (v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric())))
}

/// A Kubernetes label key: an optional DNS-subdomain prefix and '/', then a name.
pub(super) fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && p.split('.').all(is_dns_label))
        && !name.is_empty()
        && is_label_value(name)
}

/// A duration as humantime prints it (`10s`, `250ms`).
pub fn fmt_dur(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_and_values() {
        assert!(is_label_key("redlock-elector/role"));
        assert!(is_label_key("example.com/r"));
        assert!(!is_label_key("bad key"));
        assert!(!is_label_key("/role"));
        assert!(is_label_value(""));
        assert!(!is_label_value("-x"));
    }

    #[test]
    fn booleans() {
        assert_eq!(parse_bool("f", " Yes "), Ok(true));
        assert_eq!(parse_bool("f", "0"), Ok(false));
        assert_eq!(
            parse_bool("f", "sometimes").unwrap_err().to_string(),
            "f: \"sometimes\" is not a boolean (true or false)"
        );
    }
}
