//! Logging setup. Passwords never reach a log line: the config keeps them in a type whose
//! `Debug` prints `<redacted>`, and endpoints are logged by `host:port` only.

use crate::config::{LogConfig, LogFormat};

/// Install the global subscriber (stderr). Idempotent: a second call is ignored.
pub fn init(cfg: &LogConfig) {
    let filter = tracing_subscriber::EnvFilter::try_new(&cfg.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match cfg.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
