//! The rounds the elector's commands run: a trait small enough to implement in memory for
//! tests ([`super::memory`]), and [`Live`], the real [`Redlock`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::machine::io::Nodes;
use crate::redlock::candidates::Candidate;
use crate::redlock::{Acquire, Lease, OwnRecord, Redlock, Watched};

/// The rounds the machine's commands need, small enough to implement in memory for tests.
pub trait Rounds: Send + Sync + 'static {
    /// An acquire round (`named`: a notice named this sidecar).
    fn acquire(&self, named: bool) -> impl Future<Output = Acquire> + Send;
    /// A renewal round: the new deadline if a quorum renewed.
    fn renew(&self, lease: &Lease) -> impl Future<Output = Option<Instant>> + Send;
    /// Write the own record (when given) and read everyone's; `read_after`: from a round begun
    /// at or after that instant ([`crate::redlock::Redlock::candidates`]).
    fn records(
        &self,
        own: Option<&[String; 5]>,
        life: Duration,
        read_after: Option<Instant>,
    ) -> impl Future<Output = Option<Vec<Candidate>>> + Send;
    /// A follower's watch round, writing the own record (when given).
    fn watch(
        &self,
        own: Option<&[String; 5]>,
        life: Duration,
    ) -> impl Future<Output = Watched> + Send;
    /// Release with a notice naming `successor` (or every follower).
    /// `moved`: for a shard handed over to balance, how often it has moved in a rollout so far
    /// (the notice carries it to `successor`).
    fn hand_over(
        &self,
        lease: &Lease,
        successor: Option<&str>,
        moved: Option<u8>,
    ) -> impl Future<Output = ()> + Send;
    /// Withdraw the own record (shutdown).
    fn withdraw(&self) -> impl Future<Output = ()> + Send;
    /// What the nodes say at `now`.
    fn nodes(&self, now: Instant) -> Nodes;
    /// Resolves when a node began to count sooner than [`Rounds::nodes`] last said (an
    /// attestation of this sidecar's clock watch); never, where nothing can change that.
    fn counting_changed(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// The real rounds: this sidecar's identity on the [`Redlock`].
pub struct Live {
    /// The protocol over the nodes.
    pub redlock: Arc<Redlock>,
    /// This sidecar's identity.
    pub identity: String,
    /// `retryEvery`, of which the watch period is derived.
    pub retry_every: Duration,
}

impl Live {
    fn own<'a>(&'a self, fields: Option<&'a [String; 5]>) -> Option<OwnRecord<'a>> {
        fields.map(|fields| OwnRecord {
            identity: &self.identity,
            fields,
        })
    }
}

impl Rounds for Live {
    async fn acquire(&self, named: bool) -> Acquire {
        self.redlock.acquire(&self.identity, named).await
    }

    async fn renew(&self, lease: &Lease) -> Option<Instant> {
        self.redlock.renew(lease).await
    }

    async fn records(
        &self,
        own: Option<&[String; 5]>,
        life: Duration,
        read_after: Option<Instant>,
    ) -> Option<Vec<Candidate>> {
        self.redlock
            .candidates(self.own(own), life, read_after)
            .await
    }

    async fn watch(&self, own: Option<&[String; 5]>, life: Duration) -> Watched {
        self.redlock.watch(self.own(own), life).await
    }

    async fn hand_over(&self, lease: &Lease, successor: Option<&str>, moved: Option<u8>) {
        self.redlock.hand_over(lease, successor, moved).await
    }

    async fn withdraw(&self) {
        self.redlock.withdraw(&self.identity).await
    }

    fn counting_changed(&self) -> impl Future<Output = ()> + Send {
        self.redlock.counting_changed()
    }

    fn nodes(&self, now: Instant) -> Nodes {
        let r = &self.redlock;
        Nodes {
            wait: r.quorum_wait(now),
            counts_at: r.quorum_counts_at(),
            successor_ready: r.eligible_as_successor(now),
            notices_live: r.notices_live(),
            watch_period: r.watch_period(self.retry_every),
        }
    }
}
