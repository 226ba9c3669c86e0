//! `app.*` and `run.*`: the settings of health-gated leadership and of `redlock-elector run`,
//! beside the others in [`super`] and spelled the same way.

use clap::Args;
use serde::Deserialize;

use super::{OneOf, default, with_default};
use crate::config::file::Text;
use crate::config::fmt_dur;

/// `run.*`: how `redlock-elector run -- CMD` stops its command.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunSettings {
    /// `run.killGrace`.
    #[arg(long = "kill-grace", env = "REDLOCK_ELECTOR_RUN_KILL_GRACE", value_name = "DURATION",
        help = with_default("run: from SIGTERM to SIGKILL of the command; the command is stopped this long before the term's deadline, so ttl must leave room for it and a renewal", format_args!("ttl/{}", default::KILL_GRACE_DIVISOR)))]
    pub kill_grace: Option<Text>,
    /// `run.onChildExit`.
    #[arg(long = "on-child-exit", env = "REDLOCK_ELECTOR_RUN_ON_CHILD_EXIT", value_name = "VALUE",
        value_parser = OneOf(&crate::exec::OnChildExit::NAMES),
        help = with_default("run: when the command exits by itself while leading, release and exit with its status, or contend again after a ttl", default::ON_CHILD_EXIT))]
    pub on_child_exit: Option<Text>,
}

/// `app.*`: what "the app is healthy" means, with `lease.followApp`.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AppSettings {
    /// `app.containers`: the flag repeats, the env var is comma-separated.
    #[arg(
        long = "app-container",
        env = "REDLOCK_ELECTOR_APP_CONTAINERS",
        value_name = "NAME",
        value_delimiter = ',',
        help = "Kubernetes: the app containers whose health leadership follows; repeat for each [default: every container of the pod but redlock-elector]"
    )]
    pub containers: Option<Vec<String>>,
    /// `app.healthUrl`.
    #[arg(
        long = "app-health-url",
        env = "REDLOCK_ELECTOR_APP_HEALTH_URL",
        value_name = "URL",
        help = "An http:// URL on the loopback interface whose 2xx answer means the app is healthy (outside Kubernetes, or beside the containers' statuses) [default: none]"
    )]
    pub health_url: Option<Text>,
    /// `app.healthInterval`.
    #[arg(long = "app-health-interval", env = "REDLOCK_ELECTOR_APP_HEALTH_INTERVAL", value_name = "DURATION",
        help = with_default("How often app.healthUrl is probed", fmt_dur(default::HEALTH_INTERVAL)))]
    pub health_interval: Option<Text>,
    /// `app.healthTimeout`.
    #[arg(long = "app-health-timeout", env = "REDLOCK_ELECTOR_APP_HEALTH_TIMEOUT", value_name = "DURATION",
        help = with_default("How long a probe of app.healthUrl may take", fmt_dur(default::HEALTH_TIMEOUT)))]
    pub health_timeout: Option<Text>,
    /// `app.healthFailureThreshold`.
    #[arg(long = "app-health-failure-threshold", env = "REDLOCK_ELECTOR_APP_HEALTH_FAILURE_THRESHOLD", value_name = "INTEGER",
        help = with_default("Failed probes in a row after which the app is unhealthy", default::HEALTH_FAILURE_THRESHOLD))]
    pub health_failure_threshold: Option<Text>,
    /// `app.unhealthyGrace`.
    #[arg(long = "app-unhealthy-grace", env = "REDLOCK_ELECTOR_APP_UNHEALTHY_GRACE", value_name = "DURATION",
        help = with_default("How long the leader's app must have been unhealthy before it hands over", fmt_dur(default::UNHEALTHY_GRACE)))]
    pub unhealthy_grace: Option<Text>,
    /// `app.cooldown`.
    #[arg(long = "app-cooldown", env = "REDLOCK_ELECTOR_APP_COOLDOWN", value_name = "DURATION",
        help = with_default("After a handover for the app's health, this sidecar does not contend for this long", fmt_dur(default::APP_COOLDOWN)))]
    pub cooldown: Option<Text>,
}
