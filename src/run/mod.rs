//! Wiring: start the node connections, the elector, the watchdog and the publishers; wait for
//! the shutdown trigger; then stop contending, release, and return.
//!
//! Kubernetes sends SIGTERM to start a graceful shutdown: the elector publishes "not leader"
//! first, then releases on all nodes in parallel and publishes the release notice, so a follower
//! takes over within milliseconds. The whole shutdown is bounded by [`shutdown_budget`].
//!
//! One [`CancellationToken`] (`stop`) tells every task of the election to end; a second one
//! (`finish`) tells the kube publisher to label the pod follower and end, once the release is
//! done; a third (`serving`) closes the API and ops listeners last.
//!
//! Every task is spawned on one [`TaskTracker`] (the Redlock layer's, which also runs the
//! connections' drivers), and `run` returns only once it is empty or the shutdown budget is
//! spent: no task of the sidecar outlives `run` (tests/suite/lifecycle.rs).

use std::ffi::OsString;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::elector::{self, Elector, Handles, Timing, balance};

use crate::exec;
use crate::k8s;
use crate::leadership::Shared;
use crate::metrics::Metrics;
use crate::ops::{self, Ops};
use crate::publish;
use crate::redlock::{NodeSet, Redlock};
use crate::{Error, Result, api};

mod inputs;
mod shutdown;

use inputs::{preference, start_nodes, start_pod_poller, with_health_url};
use shutdown::shut_down;
pub use shutdown::{shutdown_budget, signals};

/// One lease of the process: its protocol, its elector (until it runs), and what the rest of
/// the process reads of it.
struct Lease {
    /// `lease.name`, or one of `lease.names`.
    name: String,
    /// Its keys over the shared nodes.
    redlock: Arc<Redlock>,
    /// Its elector.
    elector: Elector,
    /// Its watches and channels.
    handles: Handles,
    /// Its series (the per-process ones are shared).
    metrics: Metrics,
}

/// The kube publishers' tasks, and the token that tells them to finish.
struct Publisher {
    /// Cancelled after the release: label the pod follower, take the own address off the
    /// EndpointSlice, and end.
    finish: CancellationToken,
    /// The label publisher.
    task: JoinHandle<()>,
    /// The EndpointSlice writer (`kubernetes.endpointSlice`).
    slice: Option<JoinHandle<()>>,
}

/// Run the sidecar until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    run_with(config, None, shutdown).await.map(|_| ())
}

/// `redlock-elector run -- CMD`: run the sidecar, and the command while leading
/// ([`crate::exec`]), until the command's end or a signal ends `run`; returns the exit status.
pub async fn run_command(config: Config, command: Vec<OsString>) -> Result<u8> {
    run_with(config, Some(command), std::future::pending()).await
}

async fn run_with(
    config: Config,
    command: Option<Vec<OsString>>,
    shutdown: impl Future<Output = ()>,
) -> Result<u8> {
    let metrics =
        Metrics::register(&Registry::new(), &config.lease.name).map_err(Error::Metrics)?;
    // One set of node connections, clock watches and attestations, whatever the leases.
    let set = NodeSet::new(&config, metrics.clone())?;
    let api_listener = bind(config.api_listen, "api.listen").await?;
    let ops_listener = bind(config.ops_listen, "ops.listen").await?;

    let stop = CancellationToken::new();
    let serving = CancellationToken::new();
    let tasks = set.tasks().clone();
    let timing = Timing::of_process(&config.lease, tokio::time::Instant::now());
    let kube_settings = k8s::Settings::from_config(&config);
    let standing = start_pod_poller(&tasks, kube_settings.as_ref(), &metrics, &stop);
    let standing = with_health_url(&tasks, &config, standing, &stop);
    // One elector per lease, each on its own keys over the shared nodes.
    let mut leases = Vec::with_capacity(config.lease.names.len());
    for name in &config.lease.names {
        let metrics = match leases.is_empty() {
            true => metrics.clone(),
            false => metrics.for_lease(name).map_err(Error::Metrics)?,
        };
        let redlock = Arc::new(Redlock::on(&set, &config, name, metrics.clone()));
        let (elector, handles) = Elector::new(
            redlock.clone(),
            config.identity.clone(),
            timing.clone(),
            preference(&config),
            standing.clone(),
            metrics.clone(),
        );
        leases.push(Lease {
            name: name.clone(),
            redlock,
            elector,
            handles,
            metrics,
        });
    }
    // `run` (one lease only: config validation refuses more): the command's runner, and the
    // gate the elector's releases wait on.
    let runner = match command {
        None => None,
        Some(command) => {
            let first = &mut leases[0];
            let spec = exec::Spec {
                command,
                kill_grace: config.run.kill_grace,
                on_exit: config.run.on_child_exit,
                lease: config.lease.name.clone(),
                identity: config.identity.clone(),
                deadline: !config.unsafe_switches.run_deadline_off,
                start_delay: config
                    .unsafe_switches
                    .run_start_delay_ms
                    .map(Duration::from_millis),
                guard_delay: config
                    .unsafe_switches
                    .guard_spawn_delay_ms
                    .map(Duration::from_millis),
            };
            let spec_deadline = spec.deadline;
            let (runner, gate) = exec::Runner::new(
                spec,
                first.handles.leadership.clone(),
                first.handles.step_down.clone(),
            )?;
            if spec_deadline {
                first.elector.set_gate(gate);
            }
            Some(runner)
        }
    };
    let attestations = !config.unsafe_switches.no_attestations;
    start_nodes(&tasks, &set, &leases, attestations, &stop);
    // `lease.shards`: the shards spread evenly over the replicas.
    let shards: Vec<balance::Shard> = match config.lease.shards {
        0 => Vec::new(),
        _ => leases
            .iter()
            .map(|l| balance::Shard {
                leadership: l.handles.leadership.clone(),
                candidacy: l.handles.candidacy.clone(),
                step_down: l.handles.step_down.clone(),
                notices: l.handles.notices.clone(),
            })
            .collect(),
    };
    let memory = balance::Shared::default();
    if !shards.is_empty() {
        tasks.spawn(balance::balance(
            config.identity.clone(),
            shards.clone(),
            config.lease.prefer,
            memory.clone(),
            config.lease.renew_every,
            stop.clone(),
        ));
    }
    for lease in &leases {
        tasks.spawn(elector::watchdog(
            lease.handles.health.clone(),
            lease.metrics.clone(),
            timing.stall_margin,
            stop.clone(),
        ));
    }
    // The kube publisher only reads the leadership watches (with several leases, whether any
    // is led, and which); it is told to finish after the electors have released.
    let publisher = kube_settings.map(|settings| {
        let (leadership, led) = match leases.len() {
            1 => (leases[0].handles.leadership.clone(), None),
            _ => {
                let (any, led) = crate::leadership::any_led(
                    &tasks,
                    leases
                        .iter()
                        .map(|l| l.handles.leadership.clone())
                        .collect(),
                );
                (any, Some(led))
            }
        };
        let mut publisher = start_publisher(&tasks, settings.clone(), &metrics, leadership, led);
        // The slice follows its own lease's term (validation made it one of the leases).
        if let (Some(slice), Some(ip)) =
            (&config.kubernetes.endpoint_slice, config.kubernetes.pod_ip)
            && let Some(lease) = leases.iter().find(|l| l.name == slice.lease)
        {
            let fence = publish::k8s::endpoints::Fence {
                on: !config.unsafe_switches.endpoint_fence_off,
                write_delay: config
                    .unsafe_switches
                    .endpoint_write_delay_ms
                    .map(Duration::from_millis),
            };
            let writer = publish::k8s::endpoints::SlicePublisher::new(
                settings,
                slice,
                ip,
                lease.metrics.clone(),
                lease.handles.leadership.clone(),
                fence,
            );
            publisher.slice = Some(tasks.spawn(writer.run(publisher.finish.clone())));
        }
        publisher
    });
    let answers: Vec<api::LeaseApi> = leases
        .iter()
        .map(|l| api::LeaseApi {
            shared: shared(&config, &l.name, &l.redlock, &l.handles),
            step_down: l.handles.step_down.clone(),
            metrics: l.metrics.clone(),
            health: l.handles.health.clone(),
        })
        .collect();
    let api_addr = api_listener.local_addr().ok();
    let ops_addr = ops_listener.local_addr().ok();
    tasks.spawn(api::serve(api_listener, answers.clone(), serving.clone()));
    tasks.spawn(ops::serve(
        ops_listener,
        Ops {
            leases: answers,
            nodes: set.nodes().to_vec(),
        },
        serving.clone(),
    ));
    tracing::info!(
        identity = %config.identity,
        lease = %config.lease.name,
        leases = ?config.lease.names,
        key = %leases[0].redlock.key(),
        endpoints = ?config.redis.endpoints.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        api = ?api_addr,
        ops = ?ops_addr,
        ttl_ms = config.lease.ttl.as_millis() as u64,
        "redlock-elector started"
    );

    let redlocks: Vec<Arc<Redlock>> = leases.iter().map(|l| l.redlock.clone()).collect();
    let mut elector_tasks: Vec<JoinHandle<()>> = leases
        .into_iter()
        .map(|l| tasks.spawn(l.elector.run(stop.clone())))
        .collect();
    let mut code = 0;
    let exec_mode = runner.is_some();
    let command_ended = async {
        match runner {
            Some(runner) => runner.run().await,
            None => std::future::pending().await,
        }
    };
    let any_elector_ended = futures::future::select_all(elector_tasks.iter_mut());
    tokio::select! {
        _ = shutdown => {}
        c = command_ended => code = c,
        (r, _, _) = any_elector_ended => {
            tracing::error!(?r, "election loop ended unexpectedly");
            // `run` fails; the sidecar alone exits as it always has.
            code = u8::from(exec_mode);
        }
    }
    let budget = shutdown_budget(config.redis.timeout);
    let started = Instant::now();
    // Sharded: the shards go to the ready candidates leading the fewest first, so they spread
    // over the survivors; what is left the electors release as they stop. A handover takes a
    // release round (bounded by redis.timeout), and leaves the rest of the budget to them.
    if !shards.is_empty() {
        balance::spread_out(
            &config.identity,
            &shards,
            config.lease.prefer,
            &memory,
            // At most a follower's watch period, and never much of the shutdown budget.
            config.lease.retry_every.min(Duration::from_millis(300)),
            config.redis.timeout * 2,
        )
        .await;
    }
    shut_down(
        stop,
        elector_tasks,
        &redlocks,
        publisher,
        budget.saturating_sub(started.elapsed()),
    )
    .await;
    // Last, the listeners and the connections: then every task ends.
    serving.cancel();
    set.disconnect();
    tasks.close();
    let left = budget.saturating_sub(started.elapsed());
    if tokio::time::timeout(left, tasks.wait()).await.is_err() {
        tracing::warn!(
            tasks = tasks.len(),
            "tasks still running when the shutdown budget ran out"
        );
    }
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        "shutdown complete"
    );
    Ok(code)
}

async fn bind(addr: SocketAddr, what: &'static str) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, what, source })
}

fn start_publisher(
    tasks: &TaskTracker,
    settings: k8s::Settings,
    metrics: &Metrics,
    leadership: watch::Receiver<crate::leadership::Leadership>,
    led: Option<watch::Receiver<crate::leadership::Led>>,
) -> Publisher {
    metrics.new_kube_requests(&k8s::call::VERBS, &k8s::call::RESULTS);
    let finish = CancellationToken::new();
    let task = tasks.spawn(
        publish::k8s::Publisher::new(settings, metrics.clone(), leadership, led)
            .run(finish.clone()),
    );
    Publisher {
        finish,
        task,
        slice: None,
    }
}

/// What the API and the ops server answer from.
fn shared(config: &Config, lease: &str, redlock: &Arc<Redlock>, handles: &Handles) -> Shared {
    Shared {
        lease: lease.into(),
        identity: config.identity.as_str().into(),
        leadership: handles.leadership.clone(),
        eligibility: {
            let redlock = redlock.clone();
            Arc::new(move |now| {
                let wait = redlock.quorum_wait(now);
                crate::leadership::Nodes {
                    counts: redlock.eligibility(now),
                    waiting_for: wait.reason.map(|r| r.as_str()),
                    quorum_in_ms: match wait.reason {
                        None => Some(0),
                        Some(_) => wait
                            .at
                            .map(|at| at.saturating_duration_since(now).as_millis() as u64),
                    },
                }
            })
        },
        candidacy: handles.candidacy.clone(),
    }
}
