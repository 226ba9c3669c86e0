//! Creating and registering metrics: one call per metric in [`super::Metrics::register`].

use std::cell::RefCell;

use prometheus::core::Collector;
use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

pub(super) const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// One registered metric as the registry describes it: the metrics reference
/// (`docs/reference/metrics.md`) is generated from these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricDoc {
    /// The full name (`redlock_elector_is_leader`).
    pub name: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// The help text `/metrics` shows.
    pub help: String,
    /// The label names: the const `lease` label first where there is one, then the variable ones.
    pub labels: Vec<String>,
}

/// Failover gaps: milliseconds for a graceful handover, up to ttl + retryEvery after a crash.
pub(super) const WAIT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// Whether a metric carries the `lease` const label: the per-process ones do, the
/// per-endpoint and per-request ones are joined to it through `lease_info`.
#[derive(Clone, Copy)]
pub(super) enum Scope {
    /// `{lease="…"}` on every series.
    Lease,
    /// No `lease` label.
    Process,
}

/// Creates metrics and registers them, failing on the first error.
pub(super) struct Builder<'a> {
    /// Where they go.
    pub(super) registry: &'a Registry,
    /// The `lease` const label.
    pub(super) lease: &'a str,
    /// What was registered, as the registry describes it, for [`super::Metrics::descriptors`].
    pub(super) docs: RefCell<Vec<MetricDoc>>,
}

impl Builder<'_> {
    fn opts(&self, scope: Scope, name: &str, help: &str) -> Opts {
        match scope {
            Scope::Lease => Opts::new(name, help).const_label("lease", self.lease),
            Scope::Process => Opts::new(name, help),
        }
    }

    fn register<C: Collector + Clone + 'static>(
        &self,
        kind: &'static str,
        made: prometheus::Result<C>,
    ) -> prometheus::Result<C> {
        let c = made?;
        self.registry.register(Box::new(c.clone()))?;
        let mut docs = self.docs.borrow_mut();
        for d in c.desc() {
            docs.push(MetricDoc {
                name: d.fq_name.clone(),
                kind,
                help: d.help.clone(),
                labels: (d.const_label_pairs.iter().map(|p| p.name().to_string()))
                    .chain(d.variable_labels.iter().cloned())
                    .collect(),
            });
        }
        Ok(c)
    }

    pub(super) fn int_gauge(&self, name: &str, help: &str) -> prometheus::Result<IntGauge> {
        self.register(
            "gauge",
            IntGauge::with_opts(self.opts(Scope::Lease, name, help)),
        )
    }

    pub(super) fn gauge(&self, name: &str, help: &str) -> prometheus::Result<Gauge> {
        self.register(
            "gauge",
            Gauge::with_opts(self.opts(Scope::Lease, name, help)),
        )
    }

    pub(super) fn counter(&self, name: &str, help: &str) -> prometheus::Result<IntCounter> {
        self.register(
            "counter",
            IntCounter::with_opts(self.opts(Scope::Lease, name, help)),
        )
    }

    pub(super) fn gauge_vec(
        &self,
        scope: Scope,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> prometheus::Result<IntGaugeVec> {
        self.register(
            "gauge",
            IntGaugeVec::new(self.opts(scope, name, help), labels),
        )
    }

    pub(super) fn counter_vec(
        &self,
        scope: Scope,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> prometheus::Result<IntCounterVec> {
        self.register(
            "counter",
            IntCounterVec::new(self.opts(scope, name, help), labels),
        )
    }

    pub(super) fn histogram(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
    ) -> prometheus::Result<Histogram> {
        let opts = HistogramOpts::new(name, help)
            .const_label("lease", self.lease)
            .buckets(buckets.to_vec());
        self.register("histogram", Histogram::with_opts(opts))
    }

    pub(super) fn histogram_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> prometheus::Result<HistogramVec> {
        let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
        self.register("histogram", HistogramVec::new(opts, labels))
    }
}
