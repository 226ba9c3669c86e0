//! The machine's inputs and outputs: the [`Event`]s it takes with a [`Cx`] (the instant, the
//! nodes, randomness), and the [`Command`]s it gives.

use std::time::Duration;

use rand::RngCore;
use tokio::time::Instant;

use crate::elector::settings::Standing;
use crate::elector::step_down::StepDown;
use crate::leadership::{CandidacyView, Ended, StepDownReason, Term};
use crate::metrics::HandoverReason;
use crate::redlock::candidates::Candidate;
use crate::redlock::{Acquire, Lease, Observed, QuorumWait};

/// The own candidate record a round writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// The encoded fields ([`crate::redlock::candidates::fields`]); `None` while the rank is unknown (the round
    /// then only reads).
    pub fields: Option<[String; 5]>,
    /// How long it lives.
    pub life: Duration,
    /// A decision rests on the round's read (the health handover): it must come from a round
    /// begun at or after this instant, not from a sharded lease's shared earlier one.
    pub read_after: Option<Instant>,
}

/// What the nodes say at the instant of a call: the clock watch and the subscriptions, as
/// [`crate::redlock::Redlock`] reports them (the driver reads them; the tests set them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nodes {
    /// Whether a quorum counts this sidecar's votes now, and if not, why and from when.
    pub wait: QuorumWait,
    /// When a quorum of nodes will count, if nothing changes meanwhile.
    pub counts_at: Option<Instant>,
    /// Whether a named successor could win now (a quorum counts, or would on a release proof).
    pub successor_ready: bool,
    /// Whether release notices reach this sidecar (subscriptions up on a quorum).
    pub notices_live: bool,
    /// A follower's watch period ([`crate::redlock::Redlock::watch_period`]).
    pub watch_period: Duration,
}

/// The inputs of one call besides the event: the instant, the nodes, the loop's health and a
/// source of randomness (jitter, and the pick among equal candidates under `prefer: none`).
pub struct Cx<'a> {
    /// Now, on the monotonic clock.
    pub now: Instant,
    /// The nodes as they are now.
    pub nodes: Nodes,
    /// The stall watchdog's flag: a stalled loop does not attempt.
    pub stalled: bool,
    /// Randomness.
    pub rng: &'a mut dyn RngCore,
}

/// An input of the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The instant [`Machine::poll_timeout`] gave has come (early calls are ignored).
    Timer,
    /// [`Command::Attempt`] finished.
    Attempted {
        /// The acquire round's result.
        outcome: Acquire,
        /// The candidates read beside it (`None`: fewer than a quorum answered, or the acquire
        /// won and did not wait for them).
        candidates: Option<Vec<Candidate>>,
    },
    /// [`Command::Watch`] finished.
    Watched {
        /// Who holds the lease on a quorum, if anyone.
        held: Option<Observed>,
        /// The candidates read beside it.
        candidates: Option<Vec<Candidate>>,
        /// A quorum of nodes answered. `false`: nothing is known (not that the lease is free),
        /// and an attempt now would most likely go unanswered too.
        answered: bool,
    },
    /// [`Command::Renew`] finished: the new deadline if a quorum renewed in time.
    Renewed {
        /// The new deadline; `None`: no quorum, or the round ran into the old deadline.
        deadline: Option<Instant>,
        /// The candidates read beside it.
        candidates: Option<Vec<Candidate>>,
    },
    /// [`Command::ReadCandidates`] finished.
    Candidates(Option<Vec<Candidate>>),
    /// [`Command::Release`] finished (a quorum confirmed, or the budget ran out).
    Released,
    /// A release notice arrived (its first copy).
    Notice {
        /// The successor it names.
        successor: Option<String>,
        /// Copies of it so far.
        copies: usize,
    },
    /// More copies of the latest notice arrived: this many in all.
    Copies(usize),
    /// A step-down request (`POST /leader/step-down`, or `run`'s command ended), answered by a
    /// [`Command::Answer`] with the same id.
    StepDown(u64, StepDownReason),
    /// `lease.shards`: hand the lease over to this ready candidate (it leads fewer shards),
    /// answered as a [`Event::StepDown`]; not leading, or the candidate not ready, answers
    /// [`StepDown::NotLeader`] and changes nothing.
    HandOver(u64, String),
    /// The stall watchdog saw the loop late.
    Stall,
    /// The own standing (rank, readiness) changed.
    Standing(Standing),
    /// A node began to count this sidecar's votes sooner than the nodes said (an attestation
    /// of its clock watch): an idle follower whose votes now count on a quorum acts at once.
    Counting,
    /// Shut down: a leader steps down and releases; then the own record is withdrawn.
    Shutdown,
}

/// An output of the machine, in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// Run an acquire round (`named`: right after a notice naming this sidecar, so nodes may be
    /// counted on the release proof), and the candidate round beside it; answer with
    /// [`Event::Attempted`] (at once when the acquire won, without the candidates).
    Attempt {
        /// Named by the notice.
        named: bool,
        /// The own record to write.
        record: Record,
    },
    /// Run a watch round; answer with [`Event::Watched`].
    Watch {
        /// The own record to write.
        record: Record,
    },
    /// Renew, and write the own record beside it; give up at `until` (the deadline); answer with
    /// [`Event::Renewed`].
    Renew {
        /// The lease as last renewed.
        lease: Lease,
        /// The own record to write.
        record: Record,
        /// Give up then.
        until: Instant,
    },
    /// Read everyone's records without writing the own (choosing a successor); answer with
    /// [`Event::Candidates`].
    ReadCandidates {
        /// Records written meanwhile live this long.
        life: Duration,
    },
    /// Release the lease with a notice naming `successor` (or every follower); answer with
    /// [`Event::Released`].
    Release {
        /// The lease.
        lease: Lease,
        /// The named successor.
        successor: Option<String>,
    },
    /// Publish this term and holder ([`crate::leadership::Leadership::with`]).
    Publish {
        /// The term while leading.
        term: Option<Term>,
        /// The holder as last observed.
        leader: Option<String>,
    },
    /// Publish the end of a term, with "not leader", in one value.
    PublishEnd(Ended),
    /// What `/leader` shows about candidates.
    Candidacy(CandidacyView),
    /// Answer the step-down request with this id.
    Answer {
        /// [`Event::StepDown`]'s id.
        request: u64,
        /// The answer.
        answer: StepDown,
    },
    /// Count in the metrics.
    Count(Count),
    /// Withdraw the own candidate record; the machine is done.
    Withdraw,
}

impl Command {
    /// Whether the command runs a round on the nodes (the driver runs one at a time).
    pub fn is_round(&self) -> bool {
        match self {
            Command::Attempt { .. }
            | Command::Watch { .. }
            | Command::Renew { .. }
            | Command::ReadCandidates { .. }
            | Command::Release { .. }
            | Command::Withdraw => true,
            Command::Publish { .. }
            | Command::PublishEnd(_)
            | Command::Candidacy(_)
            | Command::Answer { .. }
            | Command::Count(_) => false,
        }
    }
}

/// What the metrics count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Count {
    /// A term began after a failover gap this long.
    BecameLeader(Duration),
    /// A renewal timer fired later than the stall margin.
    Stall,
    /// A graceful handover.
    Handover(HandoverReason),
    /// A term ended (every end, graceful or not).
    StepDown(StepDownReason),
}
