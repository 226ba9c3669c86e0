//! The system the checker explores: real time, N Redis nodes, K sidecars, the links between
//! them, and the faults. See the module doc of `tests/model.rs` for how to read it.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redlock_elector::config::Prefer;
use redlock_elector::elector::machine::{Command, Cx, Event, Machine, Nodes};
use redlock_elector::elector::{Preference, Standing, StepDownReason, Timing};
use redlock_elector::leadership::Leadership;
use redlock_elector::redlock::candidates::{Candidate, Rank};
use redlock_elector::redlock::clock::{Policy, Reading, Watch};
use redlock_elector::redlock::math::{self, Tally};
use redlock_elector::redlock::node::{self, Exclusion};
use redlock_elector::redlock::proof::{self, TermLog};
use redlock_elector::redlock::{Acquire, Observed, QuorumWait};
use stateright::{Model, Property};
use tokio::time::Instant;

/// One unit of real time (one `Tick`): 1 s. Every time inside the model is in µs, so the
/// sidecar's functions run on the numbers they see in production, only coarser.
pub const UNIT_US: i64 = 1_000_000;
/// Lease ttl: 10 units.
pub const TTL: Duration = Duration::from_secs(10);
/// `driftFactor` of the model: 0.2, so that rate drift amounts to whole units within a ttl (the
/// product's default, 0.01, would hide below the model's time resolution). The allowance is
/// then `ttl·0.2 + 2 ms` = 2.002 units.
pub const DRIFT_FACTOR: f64 = 0.2;
/// Per-node timeout of a round: after one unit on the sidecar's clock, a round may give up on
/// the nodes that have not answered.
pub const TIMEOUT_US: i64 = UNIT_US;
/// The base bound of the model's policy (`Policy.base_rtt_us`): the binary's default
/// `redis.timeout`, 50 ms, far below a unit, so only readings taken within one step are bases.
pub const BASE_RTT: Duration = Duration::from_millis(50);
/// A node's wall clock at real time 0 (before any jump), µs.
const WALL0_US: i64 = 1_000 * UNIT_US;

/// How fast a sidecar's monotonic clock runs against real time (and the nodes' wall clocks,
/// which run at the real rate between jumps). 0.9 and 1.1 differ from the nodes' rate by less
/// than the model's `driftFactor` (also as seen from the node: 1/0.9 < 1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rate {
    /// 0.9 units of local time per unit of real time.
    Slow,
    /// 1.
    Exact,
    /// 1.1.
    Fast,
    /// 0.85: the slowest a leader's clock may run against the nodes and the other sidecars
    /// within the model's `driftFactor` (1/0.85 = 1.18 < 1.2; at 0.8 its own watch would take
    /// the nodes' normal movement for a forward jump). Issue 52, finding 2.
    Slower,
    /// 0.91: the slow edge within a `driftFactor` of 0.1 (1/0.91 = 1.099 < 1.1), for the
    /// rescaled scenarios of issue 52 ([`System::drift_factor`]).
    Slow91,
}

impl Rate {
    fn us_per_unit(self) -> i64 {
        match self {
            Rate::Slow => 900_000,
            Rate::Exact => 1_000_000,
            Rate::Fast => 1_100_000,
            Rate::Slower => 850_000,
            Rate::Slow91 => 910_000,
        }
    }
    fn short(self) -> &'static str {
        match self {
            Rate::Slow => "0.9x",
            Rate::Exact => "1x",
            Rate::Fast => "1.1x",
            Rate::Slower => "0.85x",
            Rate::Slow91 => "0.91x",
        }
    }
}

/// The defences, each of which a counterexample test switches off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defences {
    /// Restart quarantine (uptime / run_id), `Node::counts_from` with `Quarantine::Ignored` when off.
    pub quarantine: bool,
    /// Clock-jump detection and observe-before-counting: `Policy.enabled`.
    pub clock_check: bool,
    /// `now < deadline` evaluated when answering (`Leadership::at`); off: the answer is the
    /// published flag, cleared only when the elector's deadline timer runs.
    pub answer_time: bool,
    /// The drift term `ttl·driftFactor + 2 ms` in validity and deadline; off: zero.
    pub drift_term: bool,
    /// A reading after a gap longer than the window (from the newest base) starts the watch
    /// again (`Policy.rewatch_after_gap`); off: it is compared like any other. On in
    /// `Defences::ALL` since issue 34: the model's ticks read a node's clock at the binary's
    /// cadence (`Node::maintain`: when no fast reading came for a third of the window).
    pub rewatch: bool,
    /// A named successor counts a node it has not watched long enough only if its grant
    /// consumed the releaser's proof (`Policy.proof_check`); off: it counts every grant of its
    /// attempt after the notice.
    pub release_proof: bool,
    /// A sidecar vouches for another's fresh watch of a node only if the node counts for it at
    /// the reading that returned the request (`Policy.attestation_check`, `Watch::may_vouch`);
    /// off: at any reading of the same server.
    pub attestation: bool,
    /// The blind band (issue 34, `Policy.blind_check`): only readings within the base bound are
    /// bases, every reading is compared with every base of the window, and each term pays the
    /// band of the votes it counted (deadline `T1 + ttl − drift − lead`; an acquire won on votes
    /// without a release proof reports `Acquired` only `hold` later). Off: the watch as before
    /// 5375106 (every reading a base, only the latest compared, band 0).
    pub blind: bool,
    /// The reconnect taint (issue 34, `--unsafe-disable-reconnect-taint` in the binary): each
    /// lock command is logged with the connection it went out on (`TermLog::sent`'s
    /// generation), so a command sent on a new connection while one on an older connection is
    /// unanswered taints the node for the release proof; and a RENEW never heals a missing key
    /// over a reservation. Off: every connection is logged as one, and RENEW heals whatever is
    /// reserved (5375106).
    pub reconnect_taint: bool,
    /// A release proof counts for its own lease only (issue 37: `Watch::prove` takes the
    /// lease, `Node::counts_for`); off: one proof slot per watch, so a proof that one lease
    /// consumed makes the node count for every lease of the process (the binary before the
    /// fix).
    pub proof_per_lease: bool,
    /// The span check (issue 52, findings 2 and 3, `Policy.span_check`,
    /// `--unsafe-disable-span-band`): every term pays what a taker's watch can miss beyond its
    /// band, `ttl × driftFactor + 2 × driftFactor × (1 + driftFactor) × window` besides
    /// Redlock's drift (`Policy::term_margin`). Off: Redlock's drift alone.
    pub span: bool,
    /// Proof continuity (issue 52, finding 1, `Policy.proof_continuity_check`,
    /// `--unsafe-disable-proof-continuity`): a release proof counts only for a watch that counts
    /// by itself or through a vouch, and a vouched watch younger than a window adds the largest
    /// band a voucher's reading can have. Off: a proof counts from the watch's first reading.
    pub proof_continuity: bool,
    /// A renewal only lengthens a key (finding 9, the RENEW script's `PEXPIRE` only where
    /// `PTTL` < ttl; `--unsafe-allow-renewal-to-shorten` in the binary): the key keeps the later
    /// of its expiry and the node's now + ttl, so its expiry on the node's clock never
    /// decreases. Off: now + ttl, which is earlier while the node's clock is stepped back.
    pub renewal_lengthens_only: bool,
}

impl Defences {
    /// Everything on, as the binary runs.
    pub const ALL: Defences = Defences {
        quarantine: true,
        clock_check: true,
        answer_time: true,
        drift_term: true,
        rewatch: true,
        release_proof: true,
        attestation: true,
        blind: true,
        reconnect_taint: true,
        proof_per_lease: true,
        // Off at the model's `driftFactor` 0.2: the span check's term margin
        // (`Policy::term_margin`: 2.002 + 2 + 0.48 × the 12.002-unit window = 9.763 units of
        // a 10-unit ttl) leaves no term long enough to lead (every check would be vacuous).
        // The binary at 0.01 pays 0.44 s of 10 s. The span check's own checks (issue 52,
        // findings 2 and 3) rescale the clock (`System.drift_factor` 0.1, `System.ttl` 25
        // units: 11.05 units of margin) and switch it on.
        span: false,
        proof_continuity: true,
        renewal_lengthens_only: true,
    };
}

/// Which faults the adversary may inject, and how many in one behaviour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// A sidecar stops (SIGSTOP, GC) and later resumes; its clock runs on meanwhile.
    pub pause: bool,
    /// A sidecar crashes and restarts as a fresh process.
    pub sidecar_crash: bool,
    /// A node crashes and restarts empty (new run_id, uptime 0, no key, no epoch).
    pub node_restart: bool,
    /// A reply is lost after the node applied the command.
    pub reply_loss: bool,
    /// A node's wall clock steps forward by `jump_units`.
    pub jump_forward: bool,
    /// A node's wall clock steps backward by `jump_units`.
    pub jump_backward: bool,
    /// A sidecar reads every connected node's clock in a reading that took `slow_units` (sent
    /// that long ago, the node read its clock at the end): a slow refresh.
    pub slow_refresh: bool,
    /// A running sidecar replaces its connection to a node while commands are in flight on it
    /// (a maintenance read timed out): the node may still run them, later, and nobody reads
    /// their replies; the new connection's handshake reads INFO and the clock.
    pub reconnect: bool,
    /// At most this many faults per behaviour (resuming is not a fault).
    pub max: u8,
}

/// The model: bounds, rates, faults and defences.
#[derive(Clone, Debug)]
pub struct System {
    /// Redis nodes.
    pub nodes: usize,
    /// Sidecars.
    pub sidecars: usize,
    /// Real time runs from 0 to this many units.
    pub horizon: u8,
    /// For each sidecar, the clock rates the checker tries (one initial state per combination).
    pub rates: Vec<Vec<Rate>>,
    /// The adversary.
    pub faults: Faults,
    /// Size of a wall-clock jump, units.
    pub jump_units: i64,
    /// Round trip of a slow refresh ([`Faults::slow_refresh`], [`System::slow_refresh_at`]),
    /// units of real time.
    pub slow_units: i64,
    /// A scheduled slow refresh, not counted as a fault: (sidecar, unit): that sidecar's
    /// refresh at the tick that reaches that unit takes `slow_units` (a scenario that needs one
    /// at a known place, without the search placing it everywhere).
    pub slow_refresh_at: Option<(u8, u8)>,
    /// Which defences are on.
    pub defences: Defences,
    /// If set, only sidecar 0 (A) may start rounds until real time reaches this unit, so a
    /// scenario can let A lead first; the checker still explores every interleaving of the rest.
    pub a_first_until: u8,
    /// At most this many acquire and renew rounds per sidecar (the bound on its activity).
    pub max_rounds: u8,
    /// Sidecars that start fresh: they have watched no node's clock before time 0 (a rolling
    /// restart), so only a release proof lets them count a node within the horizon.
    pub fresh: Vec<bool>,
    /// Whether a leader may hand over gracefully: release naming the other sidecar, with the
    /// release proof on the nodes where `proof::may_prove` allows it (`Elector::step_down`).
    pub handovers: bool,
    /// Per sidecar, the real time (units) before which it is not running yet: no connection, no
    /// clock reading, no round (a process that starts later, e.g. a rollout's new pod). Its
    /// first readings are the handshakes of the first tick at or after it.
    pub connect_at: Vec<u8>,
    /// Whether sidecars ask for and give attestations of their clock watches
    /// (`src/redlock/node/attest.rs`): request, vouch and check, each one step.
    pub attestations: bool,
    /// If set, only these sidecars ask for attestations (every sidecar may still vouch): a
    /// scenario with several fresh sidecars gives each one path to counting.
    pub requesters: Option<Vec<bool>>,
    /// If set, a graceful handover names only this sidecar.
    pub successor: Option<u8>,
    /// Leases each sidecar holds (issue 37): each has its own key and epoch on every node, and
    /// per sidecar its own elector, rounds, term log and S1/S2 bookkeeping; the connections,
    /// the clock watches, the restart quarantine and the attestations ([`Link`], [`Redis`]'s
    /// `attest`) are the process's, shared by every lease. 1 by default (the single-lease model).
    pub leases: usize,
    /// If set, per sidecar and lease the units `[from, until)` in which it may start a round
    /// of that lease (a phased scenario, with fewer interleavings to explore). The renewal a
    /// won acquisition needs to confirm its token is not a start: it goes out anyway.
    pub starts: Option<Vec<Vec<(u8, u8)>>>,
    /// Prompt links: a command runs, and its reply is read (or lost), within the unit it was
    /// sent in (replies to a paused sidecar still wait for it), so no reply's reading spans a
    /// tick. Fewer interleavings (the two-lease checks); off by default.
    pub prompt: bool,
    /// Scheduled steps of node wall clocks (issue 52), not faults: each happens once, in the
    /// unit it names, at whatever point of that unit the checker picks (a tick waits for it),
    /// so a scenario can place steps of any size and sign between given readings without the
    /// search placing them everywhere. Steps name nodes, so a system with steps is checked
    /// without the symmetry reduction over the nodes ([`System::symmetric`]).
    pub steps: Vec<Step>,
    /// Per sidecar, if set and not 0: it also reads every connected node's clock at each tick
    /// that is a multiple of this many units, and its watch's history before time 0 is such
    /// readings (every 4 units otherwise). What a sidecar's own rounds read in the binary (a
    /// follower's watch round every `retryEvery`, a leader's renewals) beyond the maintenance
    /// cadence; the cadence still applies.
    pub read_every: Option<Vec<u8>>,
    /// The base bound of the policy (`Policy.base_rtt_us`, `redis.timeout` in the binary):
    /// [`BASE_RTT`] but in the slow-base scenario (issue 52, finding 3), where it is 2 units so
    /// that a reading with a round trip of 2 units is a base.
    pub base_rtt: Duration,
    /// Scheduled readings with a round trip (issue 52), not faults: at the tick reaching
    /// `at`, `sidecar` reads the clocks of `nodes` in a reading sent `rtt_units` earlier, the
    /// node reading its clock at the start or the end of that round trip.
    pub timed_reads: Vec<TimedRead>,
    /// The lease's ttl: [`TTL`] but where a scenario rescales the clock (issue 52, the span
    /// check's on-checks, whose term margin at [`DRIFT_FACTOR`] leaves no term to lead).
    pub ttl: Duration,
    /// `driftFactor`: [`DRIFT_FACTOR`] but where a scenario rescales the clock (see `ttl`).
    pub drift_factor: f64,
    /// Per sidecar, if set: its watch's history before time 0 is readings every `.0` units
    /// (the last at 0) that each took `.1` units, the node reading its clock at the end of the
    /// round trip (issue 52, finding 3: bases at the base bound). Else `read_every`'s cadence
    /// (4 units by default), instant.
    pub history: Option<Vec<(u8, i64)>>,
}

/// A scheduled step of a node's wall clock ([`System::steps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The unit it happens in.
    pub at: u8,
    pub node: u8,
    /// Forward (positive) or backward, µs.
    pub us: i64,
}

/// A scheduled reading with a round trip ([`System::timed_reads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimedRead {
    /// The tick it arrives at.
    pub at: u8,
    pub sidecar: u8,
    /// Bit i: node i is read.
    pub nodes: u8,
    /// Round trip, units of real time.
    pub rtt_units: i64,
    /// The node read its clock when the request arrived (the round trip's start); else at its
    /// end.
    pub node_at_start: bool,
}

/// The value a sidecar stores in the key: (sidecar, nonce), the nonce new for every round.
pub type Val = (u8, u16);

/// One lease's keys on one node: the lock key, the epoch key and the reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Slot {
    /// The lock key: value and absolute expiry on this node's wall clock (µs).
    pub key: Option<(Val, i64)>,
    /// The fencing epoch key.
    pub epoch: u64,
    /// The reservation a graceful release wrote: (successor, with the proof, expiry on this
    /// node's wall clock µs).
    pub reserved: Option<(u8, bool, i64)>,
}

/// One Redis node (the server, not the host: its clock offset survives a restart).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Redis {
    /// Per lease, its keys ([`System::leases`]).
    pub slots: Vec<Slot>,
    /// Which server: the number of restarts of this node, its `run_id` `r<run>`. A sidecar only
    /// ever compares a node's run_id with the same node's earlier one, so run_ids need only be
    /// unique per node; unique across nodes they would break the nodes' symmetry.
    pub run: u8,
    /// Wall clock (µs) when the server started, for `INFO` uptime.
    pub started_us: i64,
    /// How far this node's wall clock is from `WALL0 + real time` (jumps), µs.
    pub offset_us: i64,
    /// The attestation hash (`ATTEST`): (sidecar, its watch's epoch, vouched), sorted. Entries
    /// live until the node restarts (the binary's expire after a window; keeping them longer
    /// only gives the adversary more).
    pub attest: Vec<(u8, u32, bool)>,
}

/// A command on the wire, as the scripts in `src/redlock/scripts.rs` receive it. `lease`
/// names the lease whose keys it works on: every lease of a process sends on the same
/// connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Req {
    /// ACQUIRE: `SET NX PX` + set-if-greater epoch (`probe` takes no key).
    Acquire {
        lease: u8,
        round: u16,
        value: Val,
        proposed: u64,
        probe: bool,
        /// `proof` mode: take the key only on a release proof for this sidecar.
        on_proof: bool,
    },
    /// RENEW: PEXPIRE ours (where it lengthens the key: [`Defences::renewal_lengthens_only`]),
    /// or heal a lost key with SET NX; set-if-greater epoch on 1 or 2.
    /// `guarded`: KEYS[3] is the reservation key, so a missing key is not healed while a
    /// reservation exists (3); false under the test-only switch (a key that never exists).
    Renew {
        lease: u8,
        round: u16,
        value: Val,
        token: u64,
        guarded: bool,
        /// Its sequence number in the term log (0 when the scenario keeps no log), and the
        /// round's T1: a reply read after the round was decided is still logged and read as a
        /// clock reading (`renew::log_renewal`, in the binary's background task).
        seq: u64,
        t1_us: i64,
    },
    /// RELEASE: token-checked delete (its reply is not modelled); a graceful one reserves the
    /// key for the successor, with the proof if the releaser marked this node.
    Release {
        lease: u8,
        value: Val,
        successor: Option<(u8, bool)>,
    },
}

/// What a script answered (the node's `TIME` travels with it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// ACQUIRE granted; the epoch before the write, and whether it consumed a proof.
    Granted { epoch: u64, proved: bool },
    /// ACQUIRE denied (or probed); the node's epoch.
    Denied { epoch: u64 },
    /// RENEW: 1 renewed, 2 healed, 0 someone else's, 3 missing and reserved (not healed).
    Renewed(u8),
}

/// A reply in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reply {
    /// The lease and the round it answers.
    pub lease: u8,
    pub round: u16,
    /// A renewal's value, sequence number and T1 ([`Req::Renew`]): a straggler is still read.
    pub renew: Option<(Val, u64, i64)>,
    /// The node's `TIME`, µs.
    pub node_us: i64,
    /// The script's result.
    pub answer: Answer,
}

/// One sidecar's connection to one node: FIFO both ways (one TCP connection; Redis runs a
/// connection's commands in order), and what the handshake and the clock watch learned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Link {
    /// A verified connection (handshake done) to the node's current server.
    pub conn: bool,
    /// Commands sent (with the unit they were sent in), not yet run by the node.
    pub reqs: VecDeque<(u8, Req)>,
    /// Commands of a crashed process of this sidecar: the node may still run them; nobody reads
    /// the replies.
    pub orphans: VecDeque<(u8, Req)>,
    /// Commands sent on a connection this process replaced ([`Faults::reconnect`]): the node
    /// may still run them at any later time (no delay bound: they may sit in a send buffer or
    /// be retransmitted), after the new connection's commands; nobody reads the replies.
    pub stale: VecDeque<Req>,
    /// Replies not yet read (with the unit they were sent in).
    pub replies: VecDeque<(u8, Reply)>,
    /// run_id seen by the last handshake (`Health.run_id`).
    pub run_id: Option<u8>,
    /// Restart quarantine from `node::classify` (`Health.exclusion`), local µs.
    pub exclusion: Option<Exclusion<Us>>,
    /// The clock watch (`Health.clock`).
    pub watch: Watch,
    /// Which connection this is (`Verified.generation`): every reconnect of a live sidecar
    /// counts one.
    pub generation: u8,
    /// Local µs at which the latest fast reading (round trip within the base bound) was sent
    /// (`Health.last_reading`): the maintenance cadence counts from it.
    pub last_fast_us: Option<i64>,
}

/// A lease as the elector holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    pub value: Val,
    pub token: u64,
    /// Local monotonic µs.
    pub deadline_us: i64,
}

/// Which round.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RoundKind {
    Acquire {
        value: Val,
        proposed: u64,
        /// `Node::counts(t1)` per node.
        eligible: Vec<bool>,
        /// Asked in `proof` mode (a named successor on a node it does not count yet).
        on_proof: Vec<bool>,
    },
    Renew,
}

/// An acquire or renew round in progress.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Round {
    pub id: u16,
    /// T1, local µs, taken before sending.
    pub t1_us: i64,
    pub kind: RoundKind,
    /// `Tally.yes`, `Tally.not_yes`.
    pub yes: u8,
    pub not_yes: u8,
    /// Nodes whose reply this round still waits for.
    pub waiting: Vec<bool>,
    /// Highest epoch in the replies (`Replies.max_epoch`).
    pub max_epoch: u64,
    /// The lock value the round's commands carry.
    pub value: Option<Val>,
    /// Per node, the command's sequence number in the term log.
    pub seqs: Vec<u64>,
    /// `Blind::lead`: the largest blind band (`Watch::band_us`) of the counted votes, µs.
    pub lead_us: i64,
    /// `Blind::hold`: the largest band of the counted votes without a release proof, µs.
    pub hold_us: i64,
}

/// One sidecar process (and its host's monotonic clock): what its leases share.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sidecar {
    pub rate: Rate,
    pub paused: bool,
    /// The node connections, their clock watches, restart quarantine and attestations: one set
    /// per process, shared by every lease (`NodeSet`). Shared between states until written
    /// (`Arc::make_mut`): a state is cloned per transition.
    pub links: Vec<Arc<Link>>,
    /// Per lease ([`System::leases`]), what `Redlock::on` keeps for it and its elector.
    pub leases: Vec<Elect>,
}

/// One lease of one sidecar (`Redlock::on` and the elector of that lease).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Elect {
    /// Nonces and round ids; survives a crash (it only has to be unique per lease).
    pub seq: u16,
    /// `Redlock.epoch_seen`.
    pub epoch_seen: u64,
    /// The binary's elector ([`Machine`]): every decision above the rounds.
    pub elector: Machine,
    /// A round the elector asked for that has not gone out yet (an attempt after a notice that
    /// arrived in another step); the next start sends it.
    pub pending: Option<Command>,
    /// A named notice that arrived while a round was in flight: the elector takes it when the
    /// round is back (as the driver's select does).
    pub notice: bool,
    /// Acquired with a token above the proposal: the first renewal must write it to a quorum
    /// before the attempt counts as won (`Redlock::acquire`).
    pub confirming: Option<Lease>,
    pub round: Option<Round>,
    /// Real time of the last round started (at most one start per unit).
    pub last_start: Option<u8>,
    /// Rounds started for this lease (the bound `System.max_rounds`; survives a crash).
    pub rounds: u8,
    /// `Redlock.term_log`: the lock commands of the current value per node.
    pub log: TermLog,
    /// An acquire won on votes without a release proof, sleeping out its hold
    /// (`Blind::hold`) before it reports `Acquired`: the lease, the round's proposal, and the
    /// local µs the sleep ends at. The first step at or after it (a tick, a resume) hands the
    /// result on.
    pub holding: Option<(Lease, u64, i64)>,
}

/// S2's bookkeeping, per lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Fence {
    /// Highest token of any term of the lease published so far.
    pub max_token: u64,
    /// Whether a term of the lease ever failed to exceed it.
    pub s2_broken: bool,
}

/// A state of the whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Real time, units.
    pub now: u8,
    /// Faults injected so far.
    pub faults: u8,
    pub redis: Vec<Redis>,
    pub sidecars: Vec<Sidecar>,
    /// Per lease: the highest token published so far, and whether a term ever failed to
    /// exceed it.
    pub fences: Vec<Fence>,
    /// A release proof was written on a node while a lock command of the releaser's term could
    /// still arrive there (on a connection it replaced): the invariant the proof rests on
    /// (`src/redlock/proof.rs`), broken.
    pub false_proof: bool,
    /// Within one step only: the successor a release just notified, and the lease (`run_script`
    /// sets it, the step hands it to that sidecar's elector of that lease).
    pub notified: Option<(u8, u8)>,
    /// Bit n: the scheduled step `System.steps[n]` has happened.
    pub stepped: u32,
}

/// Integer µs with `+ Duration`, the time type `node::classify_at` runs on here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Us(pub i64);

impl std::ops::Add<Duration> for Us {
    type Output = Us;
    fn add(self, d: Duration) -> Us {
        Us(self.0 + d.as_micros() as i64)
    }
}

/// A transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Real time advances one unit; node keys expire; every running sidecar's timers fire
    /// (step-down at the deadline), it (re)connects and refreshes every node's clock reading,
    /// as `Node::maintain` does every second.
    Tick,
    Pause(u8),
    Resume(u8),
    CrashRestart(u8),
    NodeRestart(u8),
    /// A slow refresh of sidecar `k`: a reading of every connected node sent `slow_units` ago.
    SlowRefresh(u8),
    /// Sidecar `sidecar` replaces its connection to `node` with commands in flight on it.
    Reconnect {
        sidecar: u8,
        node: u8,
    },
    Jump {
        node: u8,
        forward: bool,
    },
    /// The scheduled step `System.steps[.0]`.
    Step(u8),
    LoseReply {
        sidecar: u8,
        node: u8,
    },
    /// Sidecar `.0` starts a round of lease `.1`.
    StartAcquire(u8, u8),
    StartRenew(u8, u8),
    /// The node runs the next command of this sidecar's connection.
    Apply {
        sidecar: u8,
        node: u8,
    },
    /// The node runs the next command of this sidecar's crashed predecessor.
    ApplyOrphan {
        sidecar: u8,
        node: u8,
    },
    /// The node runs the next command this sidecar sent on a connection it replaced.
    ApplyStale {
        sidecar: u8,
        node: u8,
    },
    /// The sidecar reads the next reply from this node.
    Deliver {
        sidecar: u8,
        node: u8,
    },
    /// Sidecar `.0`'s round of lease `.1` gives up on the nodes that have not answered.
    Timeout(u8, u8),
    /// A leader of `lease` hands over gracefully to the other sidecar: steps down, releases
    /// naming it.
    Handover {
        from: u8,
        to: u8,
        lease: u8,
    },
    /// A resumed leader's deadline timer fires (sidecar, lease).
    StepDown(u8, u8),
    /// `ATTEST request`: a sidecar whose watch of the node does not count yet asks for a vouch
    /// (a clock reading, like every script reply).
    Request {
        sidecar: u8,
        node: u8,
    },
    /// `ATTEST pending` then `vouch`: a sidecar reads the node's pending requests (a reading)
    /// and, if the node counts for it at that reading, vouches for all of them. One step: the
    /// binary's vouch comes later, so the requester learns of it later, never sooner.
    Vouch {
        sidecar: u8,
        node: u8,
    },
    /// `ATTEST check`: a sidecar reads that its current watch was vouched for (a reading) and
    /// takes the vouch (`Watch::attest`).
    Check {
        sidecar: u8,
        node: u8,
    },
}

/// The model's randomness: always the low end of a range. Jitter is far below the model's unit
/// of time; what it spreads in production, the checker's interleavings cover.
struct Low;

impl rand::RngCore for Low {
    fn next_u32(&mut self) -> u32 {
        0
    }
    fn next_u64(&mut self) -> u64 {
        0
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        dest.fill(0);
    }
}

/// The index of the sidecar named `id` in traces.
fn index(id: &str) -> u8 {
    id.bytes().next().map_or(0, |b| b - b'A')
}

/// The name of sidecar `k` in traces.
pub fn name(k: usize) -> char {
    (b'A' + k as u8) as char
}

static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

/// The `Instant` of local µs `us` (shifted so that negative µs still map to an instant).
fn instant(us: i64) -> Instant {
    *BASE + Duration::from_micros((us + 1_000 * UNIT_US) as u64)
}

/// Local µs of an `Instant` made by [`instant`].
fn local_us(at: Instant) -> i64 {
    at.duration_since(*BASE).as_micros() as i64 - 1_000 * UNIT_US
}

/// The model's value of a lock value made by [`val_str`].
fn parse_val(s: &str) -> Val {
    let (k, n) = s.split_once('#').expect("a lock value of the model");
    (index(k), n.parse().expect("a nonce of the model"))
}

/// A lock value as the binary writes it, for the term log.
fn val_str(v: Val) -> String {
    format!("{}#{}", name(v.0 as usize), v.1)
}

fn run_id(run: u8) -> String {
    format!("r{run}")
}

impl System {
    /// The defaults: 3 nodes, 2 sidecars, every rate, all defences on.
    pub fn new(horizon: u8, faults: Faults, defences: Defences) -> Self {
        System {
            nodes: 3,
            sidecars: 2,
            horizon,
            rates: vec![vec![Rate::Exact]; 2],
            faults,
            jump_units: 4,
            slow_units: 1,
            slow_refresh_at: None,
            defences,
            a_first_until: 0,
            max_rounds: 4,
            fresh: vec![false; 2],
            handovers: false,
            connect_at: vec![0; 2],
            attestations: false,
            requesters: None,
            successor: None,
            leases: 1,
            starts: None,
            prompt: false,
            steps: Vec::new(),
            read_every: None,
            base_rtt: BASE_RTT,
            timed_reads: Vec::new(),
            ttl: TTL,
            drift_factor: DRIFT_FACTOR,
            history: None,
        }
    }

    /// The binary's policy for the model's ttl and `driftFactor`, with the base bound of
    /// [`BASE_RTT`]: a reading taken within one step (handshakes, refreshes, a reply read in the
    /// unit it was sent: round trip 0) is a base, one that spans a tick (≥ 0.9 unit) is not.
    pub fn policy(&self) -> Policy {
        Policy {
            rewatch_after_gap: self.defences.rewatch,
            proof_check: self.defences.release_proof,
            attestation_check: self.defences.attestation,
            blind_check: self.defences.blind,
            span_check: self.defences.span,
            proof_continuity_check: self.defences.proof_continuity,
            ..Policy::new(self.ttl, self.drift_factor, self.defences.clock_check)
                .with_base_rtt(self.base_rtt)
        }
    }

    fn drift(&self) -> Duration {
        if self.defences.drift_term {
            // `Redlock.drift`: Redlock's drift, plus `ttl` × `driftFactor` under the span check.
            self.policy().term_margin(self.ttl)
        } else {
            Duration::ZERO
        }
    }

    /// Sidecar `k`'s monotonic clock, µs: the host's clock, so it runs through pauses and
    /// process restarts.
    pub fn clock(&self, s: &State, k: usize) -> i64 {
        s.now as i64 * s.sidecars[k].rate.us_per_unit()
    }

    /// Node `i`'s wall clock, µs.
    pub fn wall(s: &State, i: usize) -> i64 {
        WALL0_US + s.now as i64 * UNIT_US + s.redis[i].offset_us
    }

    /// Redis's active expiry, at its worst for us: a key is gone the moment its node's wall
    /// clock passes its expiry (`now > when`).
    fn expire(s: &mut State, i: usize) {
        let wall = Self::wall(s, i);
        for slot in &mut s.redis[i].slots {
            if slot.key.is_some_and(|(_, exp)| wall > exp) {
                slot.key = None;
            }
            if slot.reserved.is_some_and(|(_, _, exp)| wall > exp) {
                slot.reserved = None;
            }
        }
    }

    /// `Node::counts_with_proof(now)`: whether a proved yes of node `i` would count.
    fn counts_with_proof(&self, l: &Link, now_us: i64) -> bool {
        node::counts_from_at(
            l.exclusion.as_ref(),
            match self.defences.quarantine {
                true => node::Quarantine::Enforced,
                false => node::Quarantine::Ignored,
            },
            l.watch.counts_with_proof_from(&self.policy()).map(Us),
        )
        .is_some_and(|from| Us(now_us) >= from)
    }

    /// The watch's proof slot of lease `j` (`Redlock`'s tag): one per lease, or one for all
    /// with the defence off.
    fn proof_tag(&self, j: usize) -> u64 {
        match self.defences.proof_per_lease {
            true => j as u64,
            false => 0,
        }
    }

    /// `Node::counts_for(lease, now)`: whether a yes of node `i` counts for lease `j` of sidecar
    /// `k` at local `now_us` (also since that lease's release proof).
    fn counts_for(&self, l: &Link, j: usize, now_us: i64) -> bool {
        node::counts_from_at(
            l.exclusion.as_ref(),
            match self.defences.quarantine {
                true => node::Quarantine::Enforced,
                false => node::Quarantine::Ignored,
            },
            l.watch
                .counts_from_for(&self.policy(), self.proof_tag(j))
                .map(Us),
        )
        .is_some_and(|from| Us(now_us) >= from)
    }

    /// `Node::counts(now)`: whether a yes of node `i` counts for sidecar `k` at local `now_us`,
    /// for any lease (no release proof: the attestations' check).
    fn counts(&self, l: &Link, now_us: i64) -> bool {
        node::counts_from_at(
            l.exclusion.as_ref(),
            match self.defences.quarantine {
                true => node::Quarantine::Enforced,
                false => node::Quarantine::Ignored,
            },
            l.watch.counts_from(&self.policy()).map(Us),
        )
        .is_some_and(|from| Us(now_us) >= from)
    }

    /// A clock reading, as `Node::observe` takes it (a jump quarantines inside the watch).
    fn observe(&self, s: &mut State, k: usize, i: usize, sent_us: i64) {
        let reading = Reading {
            node_us: Self::wall(s, i),
            sent_us,
            received_us: self.clock(s, k),
        };
        self.observe_reading(s, k, i, reading);
    }

    /// `Node::observe`: the watch takes the reading; a fast one (round trip within the base
    /// bound) also counts for the maintenance cadence (`Health.last_reading`).
    fn observe_reading(&self, s: &mut State, k: usize, i: usize, reading: Reading) {
        let run = run_id(s.redis[i].run);
        let policy = self.policy();
        let l = Arc::make_mut(&mut s.sidecars[k].links[i]);
        l.watch.observe(&run, reading, &policy);
        if reading.received_us - reading.sent_us <= policy.base_rtt_us {
            l.last_fast_us = l.last_fast_us.max(Some(reading.sent_us));
        }
    }

    /// `Node::maintain`'s cadence: the clock is read when no fast reading came for a third of
    /// the window (`Node::clock_refresh`).
    fn clock_due(&self, l: &Link, now_us: i64) -> bool {
        let every = (self.policy().window_us / 3).max(1);
        l.last_fast_us.is_none_or(|at| now_us - at >= every)
    }

    /// A slow refresh of every connected node by sidecar `k`: sent `slow_units` of real time
    /// ago, the node's clock read now (where in the round trip is the adversary's: at the end
    /// is what widens the next comparison most).
    fn slow_refresh(&self, s: &mut State, k: usize) {
        let sent_us = self.clock(s, k) - self.slow_units * s.sidecars[k].rate.us_per_unit();
        for i in 0..self.nodes {
            if s.sidecars[k].links[i].conn {
                self.observe(s, k, i, sent_us);
            }
        }
    }

    /// The end of a hold (`tokio::time::sleep(blind.hold)` in `acquire_inner`): once sidecar
    /// `k`'s clock reached it, `won` runs, as after a decision without a hold.
    fn end_hold(&self, s: &mut State, k: usize, j: usize) {
        let Some((lease, proposed, until_us)) = s.sidecars[k].leases[j].holding else {
            return;
        };
        if self.clock(s, k) < until_us {
            return;
        }
        s.sidecars[k].leases[j].holding = None;
        // After the sleep `acquire_inner` checks the validity again (`t1.elapsed()` against
        // `drift + lead`, i.e. the deadline): a hold outlasted by a pause is released and lost.
        if self.clock(s, k) >= lease.deadline_us {
            self.release(s, k, j, lease.value);
            self.attempted(s, k, j, None);
            return;
        }
        self.won(s, k, j, lease, proposed);
    }

    /// `Redlock::won`: the token is the proposal (on a quorum already), or the first renewal
    /// writes it.
    fn won(&self, s: &mut State, k: usize, j: usize, lease: Lease, proposed: u64) {
        if lease.token == proposed {
            self.attempted(s, k, j, Some(lease));
        } else {
            s.sidecars[k].leases[j].confirming = Some(lease);
            self.start_renew(s, k, j, lease);
        }
    }

    /// `Node::handshake`: INFO (classify → restart quarantine), then a clock reading.
    fn handshake(&self, s: &mut State, k: usize, i: usize) {
        let now_us = self.clock(s, k);
        let r = &s.redis[i];
        let uptime = (Self::wall(s, i) - r.started_us).div_euclid(UNIT_US);
        let info = node::parse_info(&format!(
            "run_id:{}\r\nuptime_in_seconds:{uptime}\r\nrole:master\r\nmaxmemory_policy:noeviction\r\n",
            run_id(r.run)
        ));
        let run = r.run;
        let l = Arc::make_mut(&mut s.sidecars[k].links[i]);
        let previous = l.run_id.map(run_id);
        l.exclusion = node::classify_at(&info, previous.as_deref(), self.ttl, Us(now_us));
        l.run_id = Some(run);
        l.conn = true;
        self.observe(s, k, i, now_us);
    }

    /// The watch sidecar `k` would ask a vouch for on node `i` (`Node::attestation_wanted`): its
    /// clock watch of the node does not count yet and no jump quarantine runs.
    fn wanted(&self, s: &State, k: usize, i: usize) -> Option<u32> {
        let l = &s.sidecars[k].links[i];
        if !l.conn {
            return None;
        }
        l.watch
            .attestation_wanted(self.clock(s, k), &self.policy())
            .map(|(_, epoch)| epoch)
    }

    /// Whether sidecar `k` would read node `i`'s pending requests now (`Node::vouch`'s first
    /// check): someone else's request is pending there and, with the check on, the node counts.
    fn may_read_pending(&self, s: &State, k: usize, i: usize) -> bool {
        let l = &s.sidecars[k].links[i];
        l.conn
            && s.redis[i]
                .attest
                .iter()
                .any(|&(j, _, v)| !v && j as usize != k)
            && (!self.defences.attestation || self.counts(l, self.clock(s, k)))
    }

    /// `Node::attest`'s request: written at a reading of the watch it names.
    fn request(&self, s: &mut State, k: usize, i: usize) {
        let Some(epoch) = self.wanted(s, k, i) else {
            return;
        };
        let entry = (k as u8, epoch, false);
        let a = &mut s.redis[i].attest;
        if !a.iter().any(|&(j, e, _)| (j, e) == (entry.0, entry.1)) {
            a.push(entry);
            a.sort();
        }
        let now_us = self.clock(s, k);
        self.observe(s, k, i, now_us);
    }

    /// `Node::vouch`: the pending reading (observed first), then the binary's decision.
    fn vouch(&self, s: &mut State, k: usize, i: usize) {
        let now_us = self.clock(s, k);
        self.observe(s, k, i, now_us);
        let run = run_id(s.redis[i].run);
        let l = &s.sidecars[k].links[i];
        let counts = !self.defences.attestation || self.counts(l, now_us);
        if l.watch.may_vouch(&run, now_us, &self.policy()) && counts {
            for entry in s.redis[i].attest.iter_mut().filter(|e| e.0 as usize != k) {
                entry.2 = true;
            }
        }
    }

    /// `Node::check_vouch`: the check reading (observed first), then `Watch::attest`.
    fn check_vouch(&self, s: &mut State, k: usize, i: usize) {
        let Some(epoch) = self.wanted(s, k, i) else {
            return;
        };
        let now_us = self.clock(s, k);
        self.observe(s, k, i, now_us);
        let vouched = s.redis[i].attest.contains(&(k as u8, epoch, true));
        let run = run_id(s.redis[i].run);
        if vouched {
            Arc::make_mut(&mut s.sidecars[k].links[i])
                .watch
                .attest(&run, epoch, now_us);
        }
    }

    fn believes(&self, s: &State, k: usize, j: usize) -> bool {
        let c = &s.sidecars[k];
        let Some(term) = c.leases[j].elector.term() else {
            return false;
        };
        if c.paused {
            return false;
        }
        if !self.defences.answer_time {
            return true;
        }
        let published = Leadership::default().with(Some(term), Some(name(k).to_string()));
        published.at(instant(self.clock(s, k))).term.is_some()
    }

    /// How many nodes count sidecar `k`'s votes at its clock now.
    pub fn counting(&self, s: &State, k: usize) -> usize {
        let now_us = self.clock(s, k);
        s.sidecars[k]
            .links
            .iter()
            .filter(|l| self.counts(l, now_us))
            .count()
    }

    /// How many nodes count sidecar `k`'s votes for lease `j` at its clock now (its release
    /// proofs included).
    pub fn counting_for(&self, s: &State, k: usize, j: usize) -> usize {
        let now_us = self.clock(s, k);
        s.sidecars[k]
            .links
            .iter()
            .filter(|l| self.counts_for(l, j, now_us))
            .count()
    }

    /// Sidecars answering `is_leader: true` for the first lease right now.
    pub fn leaders(&self, s: &State) -> Vec<usize> {
        self.leaders_of(s, 0)
    }

    /// Sidecars answering `is_leader: true` for lease `j` right now.
    pub fn leaders_of(&self, s: &State, j: usize) -> Vec<usize> {
        (0..self.sidecars)
            .filter(|&k| self.believes(s, k, j))
            .collect()
    }

    /// The first lease two sidecars answer `is_leader: true` for right now (S1 broken).
    pub fn overlap(&self, s: &State) -> Option<usize> {
        (0..self.leases).find(|&j| self.leaders_of(s, j).len() > 1)
    }

    /// S2's bookkeeping when a new term of lease `j` is published.
    fn new_term(s: &mut State, j: usize, token: u64) {
        let f = &mut s.fences[j];
        if token <= f.max_token {
            f.s2_broken = true;
        }
        f.max_token = f.max_token.max(token);
    }

    /// The binary's elector as the model runs it, started at local µs `now_us`. Its timers are
    /// as short as they go (`retryEvery` and `renewEvery` 1 µs, no stall margin, grace 0, no
    /// cool-down after a step-down): when a round may start is the model's choice (a start per
    /// unit, at most `max_rounds`), so the elector asks for one whenever the checker lets it,
    /// a superset of the jittered periods. Its decisions (what to attempt, a named successor's
    /// proof attempt, renewal results, the deadline, whom a step-down names, what is published)
    /// are its own.
    fn machine(&self, k: usize, now_us: i64) -> Machine {
        let micro = Duration::from_micros(1);
        let timing = Timing {
            stall_margin: Duration::from_secs(1_000),
            ..Timing::new(Duration::ZERO, micro, micro)
        };
        let preference = Preference {
            prefer: Prefer::None,
            priority: 0,
            settle: Duration::ZERO,
            grace: Duration::ZERO,
            name_successor: true,
            follow_app: None,
        };
        let id = name(k).to_string();
        let quorum = math::quorum(self.nodes);
        Machine::new(
            id,
            timing,
            preference,
            Standing::fixed(),
            quorum,
            instant(now_us),
        )
    }

    /// A lease of sidecar `k` as a fresh process holds it at local µs `now_us`: no round, no
    /// term, an empty log; `seq` and `rounds` 0 (a crash keeps the old ones).
    fn elect(&self, k: usize, now_us: i64) -> Elect {
        Elect {
            seq: 0,
            epoch_seen: 0,
            elector: self.machine(k, now_us),
            pending: None,
            notice: false,
            confirming: None,
            round: None,
            last_start: None,
            rounds: 0,
            log: TermLog::default(),
            holding: None,
        }
    }

    /// Hand sidecar `k`'s elector of lease `j` one event at its clock, and run what it asks for: rounds go
    /// out now if `start` (the step is a round start), else wait in `pending`; a watch is
    /// answered "free" at once (the model has no watch round: the follower attempts instead);
    /// a successor read shows `to` ready; a release runs as `Redlock::release` does.
    fn feed(&self, s: &mut State, k: usize, j: usize, event: Event, to: Option<u8>) {
        self.feed_with(s, k, j, event, to, false);
    }

    fn feed_with(
        &self,
        s: &mut State,
        k: usize,
        j: usize,
        event: Event,
        to: Option<u8>,
        start: bool,
    ) {
        let now_us = self.clock(s, k);
        let before = s.sidecars[k].leases[j].elector.term().map(|t| t.token);
        let nodes = Nodes {
            wait: QuorumWait::default(),
            counts_at: None,
            successor_ready: true,
            notices_live: false,
            watch_period: Duration::from_micros(1),
        };
        let mut events = VecDeque::from([event]);
        while let Some(event) = events.pop_front() {
            let mut cx = Cx {
                now: instant(now_us),
                nodes: nodes.clone(),
                stalled: false,
                rng: &mut Low,
            };
            s.sidecars[k].leases[j].elector.handle(&mut cx, event);
            while let Some(command) = s.sidecars[k].leases[j].elector.poll_command() {
                match command {
                    Command::Attempt { .. } | Command::Renew { .. } if start => {
                        self.send(s, k, j, command)
                    }
                    Command::Attempt { .. } | Command::Renew { .. } => {
                        s.sidecars[k].leases[j].pending = Some(command)
                    }
                    Command::Watch { .. } => events.push_back(Event::Watched {
                        held: None,
                        candidates: None,
                        answered: true,
                    }),
                    Command::ReadCandidates { .. } => {
                        let ready = to.map(|to| Candidate {
                            identity: name(to as usize).to_string(),
                            rank: Rank::default(),
                            ready_for: Some(Duration::ZERO),
                            pending: false,
                        });
                        events.push_back(Event::Candidates(Some(ready.into_iter().collect())));
                    }
                    Command::Release { lease, successor } => {
                        let value = parse_val(&lease.value);
                        let model = Lease {
                            value,
                            token: lease.token,
                            deadline_us: local_us(lease.deadline),
                        };
                        match successor {
                            Some(to) => self.handover(s, k, j, model, index(&to)),
                            None => {
                                s.sidecars[k].leases[j].round = None;
                                self.release(s, k, j, value);
                            }
                        }
                        events.push_back(Event::Released);
                    }
                    Command::PublishEnd(_) => {
                        // A term's end makes a renewal not yet sent moot.
                        let e = &mut s.sidecars[k].leases[j];
                        if matches!(e.pending, Some(Command::Renew { .. })) {
                            e.pending = None;
                        }
                    }
                    _ => {}
                }
            }
        }
        if let Some(term) = s.sidecars[k].leases[j].elector.term()
            && Some(term.token) != before
        {
            Self::new_term(s, j, term.token);
        }
    }

    /// Send a round the elector asked for.
    fn send(&self, s: &mut State, k: usize, j: usize, command: Command) {
        match command {
            Command::Attempt { named, .. } => self.start_acquire(s, k, j, named),
            Command::Renew { lease, .. } => {
                let model = Lease {
                    value: parse_val(&lease.value),
                    token: lease.token,
                    deadline_us: local_us(lease.deadline),
                };
                self.start_renew(s, k, j, model)
            }
            _ => {}
        }
    }

    /// A round start: the one the elector asked for, or whatever its timer asks for now.
    fn start(&self, s: &mut State, k: usize, j: usize) {
        match s.sidecars[k].leases[j].pending.take() {
            Some(command) => self.send(s, k, j, command),
            None => self.feed_with(s, k, j, Event::Timer, None, true),
        }
    }

    /// A release notice of lease `j` naming sidecar `k` reached it: its elector of that lease
    /// takes it now if it is waiting, else when its round is back.
    fn notify(&self, s: &mut State, k: usize, j: usize) {
        if !s.sidecars[k].leases[j].elector.waiting() {
            s.sidecars[k].leases[j].notice = true;
            return;
        }
        let event = Event::Notice {
            successor: Some(name(k).to_string()),
            copies: 1,
        };
        self.feed(s, k, j, event, None);
    }

    /// Whether sidecar `k`'s elector of lease `j` asks for something now (a timer due).
    fn due(&self, s: &State, k: usize, j: usize) -> bool {
        let e = &s.sidecars[k].leases[j];
        e.pending.is_some()
            || e.elector
                .poll_timeout()
                .is_some_and(|t| t <= instant(self.clock(s, k)))
    }

    /// Sidecar `k` leads lease `j` and its clock reached the deadline.
    fn past_deadline(&self, s: &State, k: usize, j: usize) -> bool {
        s.sidecars[k].leases[j]
            .elector
            .term()
            .is_some_and(|t| instant(self.clock(s, k)) >= t.deadline)
    }

    /// `Redlock::release`: token-checked delete on every connected node. It runs at once where
    /// nothing is queued before it on the connection, else behind the queued commands (a late
    /// `SET` runs first, as in production). A release only ever deletes its own round's value,
    /// so running it early gives the adversary more, not less.
    fn release(&self, s: &mut State, k: usize, j: usize, value: Val) {
        for i in 0..s.redis.len() {
            let l = Arc::make_mut(&mut s.sidecars[k].links[i]);
            if !l.conn {
                continue;
            }
            let release = Req::Release {
                lease: j as u8,
                value,
                successor: None,
            };
            if l.reqs.is_empty() {
                self.run_script(s, i, &release);
            } else {
                l.reqs.push_back((s.now, release));
            }
        }
    }

    /// `Elector::step_down` with a named successor, then `Redlock::release`: the proof per node
    /// from `proof::may_prove` at the moment of sending, the release queued behind whatever the
    /// connection still carries (it may run late, after the lease ran out).
    fn handover(&self, s: &mut State, k: usize, j: usize, lease: Lease, to: u8) {
        let now_us = self.clock(s, k);
        let valid = now_us < lease.deadline_us;
        let value = val_str(lease.value);
        let c = &mut s.sidecars[k];
        c.leases[j].round = None;
        let now = s.now;
        let mut false_proof = false;
        let j8 = j as u8;
        for i in 0..self.nodes {
            let counts = self.counts_for(&c.links[i], j, now_us);
            let proof = proof::may_prove(&c.leases[j].log, &value, i, valid, counts);
            let l = Arc::make_mut(&mut c.links[i]);
            // The invariant the proof rests on: nothing of this term can still arrive there.
            let ours = |r: &Req| match r {
                Req::Acquire {
                    lease: x, value: v, ..
                }
                | Req::Renew {
                    lease: x, value: v, ..
                } => *x == j8 && *v == lease.value,
                Req::Release { .. } => false,
            };
            if proof
                && l.stale
                    .iter()
                    .chain(l.orphans.iter().map(|(_, r)| r))
                    .any(ours)
            {
                false_proof = true;
            }
            if l.conn {
                l.reqs.push_back((
                    now,
                    Req::Release {
                        lease: j8,
                        value: lease.value,
                        successor: Some((to, proof)),
                    },
                ));
            }
        }
        s.false_proof |= false_proof;
    }

    /// Send a round's commands; a node without a verified connection is `NotConnected` at once.
    fn start_round(
        &self,
        s: &mut State,
        k: usize,
        j: usize,
        kind: RoundKind,
        req: impl Fn(u16, usize) -> Req,
    ) {
        let t1_us = self.clock(s, k);
        let c = &mut s.sidecars[k];
        let e = &mut c.leases[j];
        e.seq += 1;
        e.rounds += 1;
        e.last_start = Some(s.now);
        let id = e.seq;
        let now = s.now;
        let mut round = Round {
            id,
            t1_us,
            kind,
            yes: 0,
            not_yes: 0,
            waiting: vec![false; self.nodes],
            max_epoch: 0,
            value: None,
            seqs: vec![0; self.nodes],
            lead_us: 0,
            hold_us: 0,
        };
        for (i, l) in c.links.iter_mut().map(Arc::make_mut).enumerate() {
            if l.conn {
                let mut r = req(id, i);
                let value = match &r {
                    Req::Acquire { value, .. } | Req::Renew { value, .. } => Some(*value),
                    Req::Release { .. } => None,
                };
                // Only a graceful handover reads the log: without handovers it would only
                // split states that behave alike.
                if let Some(v) = value.filter(|_| self.handovers) {
                    round.value = Some(v);
                    // Under the test-only switch every connection is logged as one.
                    let generation = match self.defences.reconnect_taint {
                        true => l.generation as u64,
                        false => 0,
                    };
                    round.seqs[i] = e.log.sent(&val_str(v), i, self.nodes, generation);
                    if let Req::Renew { seq, .. } = &mut r {
                        *seq = round.seqs[i];
                    }
                }
                l.reqs.push_back((now, r));
                round.waiting[i] = true;
            } else {
                round.not_yes += 1;
            }
        }
        e.round = Some(round);
        self.maybe_finish(s, k, j);
    }

    fn start_acquire(&self, s: &mut State, k: usize, j: usize, named: bool) {
        let now_us = self.clock(s, k);
        let c = &s.sidecars[k];
        let value = (k as u8, c.leases[j].seq + 1);
        let proposed = c.leases[j].epoch_seen + 1;
        let eligible: Vec<bool> = c
            .links
            .iter()
            .map(|l| self.counts_for(l, j, now_us))
            .collect();
        let on_proof: Vec<bool> = c
            .links
            .iter()
            .zip(&eligible)
            .map(|(l, &e)| named && !e && self.counts_with_proof(l, now_us))
            .collect();
        let can_win = eligible
            .iter()
            .zip(&on_proof)
            .filter(|(e, p)| **e || **p)
            .count()
            >= math::quorum(self.nodes);
        let (e2, p2) = (eligible.clone(), on_proof.clone());
        // Under the test-only switch a node asked on a proof is asked to take the key outright.
        let check = self.defences.release_proof;
        let lease = j as u8;
        self.start_round(
            s,
            k,
            j,
            RoundKind::Acquire {
                value,
                proposed,
                eligible,
                on_proof,
            },
            move |round, i| Req::Acquire {
                lease,
                round,
                value,
                proposed: if (e2[i] || p2[i]) && can_win {
                    proposed
                } else {
                    0
                },
                probe: !can_win,
                on_proof: p2[i] && check,
            },
        );
    }

    fn start_renew(&self, s: &mut State, k: usize, j: usize, lease: Lease) {
        let guarded = self.defences.reconnect_taint;
        let t1_us = self.clock(s, k);
        let j8 = j as u8;
        self.start_round(s, k, j, RoundKind::Renew, move |round, _| Req::Renew {
            lease: j8,
            round,
            value: lease.value,
            token: lease.token,
            guarded,
            seq: 0,
            t1_us,
        });
    }

    fn tally(&self, r: &Round) -> Tally {
        let mut t = Tally::new(self.nodes);
        t.yes = r.yes as usize;
        t.not_yes = r.not_yes as usize;
        t
    }

    /// The end of `acquire_inner` / `renew` and what the elector does with the result.
    fn maybe_finish(&self, s: &mut State, k: usize, j: usize) {
        let Some(round) = s.sidecars[k].leases[j].round.clone() else {
            return;
        };
        let Some(won) = self.tally(&round).decided() else {
            return;
        };
        let now_us = self.clock(s, k);
        let elapsed = Duration::from_micros((now_us - round.t1_us) as u64);
        // `Blind`: the term ends `lead` sooner; an acquire waits `hold` before it reports (a
        // renewal has no hold: its term began already).
        let lead = Duration::from_micros(round.lead_us.max(0) as u64);
        let hold = match round.kind {
            RoundKind::Acquire { .. } => Duration::from_micros(round.hold_us.max(0) as u64),
            RoundKind::Renew => Duration::ZERO,
        };
        let valid = math::validity(self.ttl, elapsed + hold, self.drift() + lead).is_some();
        let deadline_us =
            round.t1_us + self.ttl.saturating_sub(self.drift() + lead).as_micros() as i64;
        let c = &mut s.sidecars[k];
        c.leases[j].round = None;
        // An acquisition's replies after its decision are never read: drop them (later ones
        // are not queued). A renewal's are still read ([`System::deliver`]), and so are the
        // other leases' replies on the same connections.
        let ours = |r: &Reply| r.renew.is_none() && r.lease as usize == j;
        for l in c.links.iter_mut() {
            if l.replies.iter().any(|(_, r)| ours(r)) {
                Arc::make_mut(l).replies.retain(|(_, r)| !ours(r));
            }
        }
        let e = &mut c.leases[j];
        match round.kind {
            RoundKind::Acquire {
                value, proposed, ..
            } => {
                if won && valid {
                    let token = math::next_token(round.max_epoch, e.epoch_seen);
                    e.epoch_seen = e.epoch_seen.max(token);
                    let lease = Lease {
                        value,
                        token,
                        deadline_us,
                    };
                    if hold.is_zero() {
                        self.won(s, k, j, lease, proposed);
                    } else {
                        e.holding = Some((lease, proposed, now_us + hold.as_micros() as i64));
                    }
                } else {
                    e.epoch_seen = e.epoch_seen.max(round.max_epoch);
                    self.release(s, k, j, value);
                    self.attempted(s, k, j, None);
                }
            }
            RoundKind::Renew => match e.confirming.take() {
                Some(mut lease) if won && valid => {
                    lease.deadline_us = lease.deadline_us.max(deadline_us);
                    self.attempted(s, k, j, Some(lease));
                }
                Some(lease) => {
                    self.release(s, k, j, lease.value);
                    self.attempted(s, k, j, None);
                }
                None => {
                    let deadline = (won && valid).then(|| instant(deadline_us));
                    let event = Event::Renewed {
                        deadline,
                        candidates: None,
                    };
                    self.feed(s, k, j, event, None);
                }
            },
        }
    }

    /// An attempt is back: the elector takes the result (a won lease, or no quorum: the model
    /// does not tell a contended attempt from a split one), then a notice that came meanwhile.
    fn attempted(&self, s: &mut State, k: usize, j: usize, won: Option<Lease>) {
        let outcome = match won {
            Some(l) => Acquire::Acquired(redlock_elector::redlock::Lease {
                value: val_str(l.value),
                token: l.token,
                deadline: instant(l.deadline_us),
            }),
            None => Acquire::NoQuorum(Observed::default()),
        };
        let event = Event::Attempted {
            outcome,
            candidates: None,
        };
        self.feed(s, k, j, event, None);
        if std::mem::take(&mut s.sidecars[k].leases[j].notice) {
            self.notify(s, k, j);
        }
    }

    /// The node side of the scripts (`src/redlock/scripts.rs`), mirrored: the model cannot run
    /// Lua. Returns the reply, if the command has one.
    fn run_script(&self, s: &mut State, i: usize, req: &Req) -> Option<Reply> {
        let wall = Self::wall(s, i);
        let ttl_us = self.ttl.as_micros() as i64;
        let lease = match *req {
            Req::Acquire { lease, .. } | Req::Renew { lease, .. } | Req::Release { lease, .. } => {
                lease
            }
        };
        let r = &mut s.redis[i].slots[lease as usize];
        let mut renew = None;
        let (round, answer) = match *req {
            Req::Acquire {
                round,
                value,
                proposed,
                probe,
                on_proof,
                ..
            } => {
                let e = r.epoch;
                let mut proved = false;
                if let Some((to, proof, _)) = r.reserved {
                    if to != value.0 {
                        return Some(Reply {
                            lease,
                            round,
                            renew: None,
                            node_us: wall,
                            answer: Answer::Denied { epoch: e },
                        });
                    }
                    proved = proof;
                }
                let take = !probe && (!on_proof || proved);
                if take && r.key.is_none() {
                    r.key = Some((value, wall + ttl_us));
                    r.reserved = None;
                    if proposed > e {
                        r.epoch = proposed;
                    }
                    (round, Answer::Granted { epoch: e, proved })
                } else {
                    (round, Answer::Denied { epoch: e })
                }
            }
            Req::Renew {
                round,
                value,
                token,
                guarded,
                seq,
                t1_us,
                ..
            } => {
                renew = Some((value, seq, t1_us));
                let res = match r.key {
                    Some((v, _)) if v == value => 1,
                    None if guarded && r.reserved.is_some() => 3,
                    None => 2,
                    Some(_) => 0,
                };
                if res == 1 || res == 2 {
                    // Finding 9: a renewal read while the node's clock is stepped back would
                    // end the key before the deadline it rests on once the step is undone.
                    let expiry = match (r.key, res) {
                        (Some((_, exp)), 1) if self.defences.renewal_lengthens_only => {
                            exp.max(wall + ttl_us)
                        }
                        _ => wall + ttl_us,
                    };
                    r.key = Some((value, expiry));
                    if token > r.epoch {
                        r.epoch = token;
                    }
                }
                (round, Answer::Renewed(res))
            }
            Req::Release {
                value, successor, ..
            } => {
                if r.key.is_some_and(|(v, _)| v == value) {
                    r.key = None;
                    // The reservation lives for the grace: less than a unit, so it is gone by
                    // the next tick (sooner if the node's clock jumps forward).
                    if let Some((to, proof)) = successor {
                        r.reserved = Some((to, proof, wall + UNIT_US / 2));
                        // The notice: the successor's elector takes it (`System::notify`).
                        s.notified = Some((to, lease));
                    }
                }
                return None;
            }
        };
        Some(Reply {
            lease,
            round,
            renew,
            node_us: wall,
            answer,
        })
    }

    /// The sidecar reads a reply: the clock reading first (`Node::eval`), then the vote.
    fn deliver(&self, s: &mut State, k: usize, i: usize) {
        let Some((_, reply)) = Arc::make_mut(&mut s.sidecars[k].links[i])
            .replies
            .pop_front()
        else {
            return;
        };
        let now_us = self.clock(s, k);
        let j = reply.lease as usize;
        let current = s.sidecars[k].leases[j]
            .round
            .as_ref()
            .filter(|r| r.id == reply.round && r.waiting[i])
            .cloned();
        let Some(round) = current else {
            // A straggler of a finished round. A renewal's is read and logged (the binary's
            // background task, `renew::log_renewal`); an acquisition's is dropped unread.
            if let (Some((v, seq, t1_us)), Answer::Renewed(res)) = (reply.renew, &reply.answer) {
                let reading = Reading {
                    node_us: reply.node_us,
                    sent_us: t1_us,
                    received_us: now_us,
                };
                self.observe_reading(s, k, i, reading);
                let yes =
                    matches!(res, 1 | 2) && self.counts_for(&s.sidecars[k].links[i], j, now_us);
                if self.handovers {
                    s.sidecars[k].leases[j]
                        .log
                        .answered(&val_str(v), i, seq, yes);
                }
            }
            return;
        };
        let reading = Reading {
            node_us: reply.node_us,
            sent_us: round.t1_us,
            received_us: now_us,
        };
        self.observe_reading(s, k, i, reading);
        let run = run_id(s.redis[i].run);
        // `Node::observe` returns the reading's band; the reply carries it.
        let band_us = s.sidecars[k].links[i].watch.band_us();
        // `Redlock::counts_vote`: a proof is taken at this very reading.
        // Under the test-only switch, every grant on a node asked on a proof is taken as proved.
        if let (RoundKind::Acquire { on_proof, .. }, Answer::Granted { proved, .. }) =
            (&round.kind, &reply.answer)
            && on_proof[i]
            && (*proved || !self.defences.release_proof)
        {
            Arc::make_mut(&mut s.sidecars[k].links[i])
                .watch
                .prove(self.proof_tag(j), &run, now_us);
        }
        let counts = self.counts_for(&s.sidecars[k].links[i], j, now_us);
        let check = self.defences.release_proof;
        let r = s.sidecars[k].leases[j].round.as_mut().unwrap();
        r.waiting[i] = false;
        let value = r.value;
        let yes = match (&r.kind, &reply.answer) {
            (
                RoundKind::Acquire {
                    eligible, on_proof, ..
                },
                Answer::Granted { epoch, proved },
            ) => {
                r.max_epoch = r.max_epoch.max(*epoch);
                if eligible[i] {
                    counts
                } else if on_proof[i] {
                    // Under the test-only switch the node was asked to take the key outright,
                    // and the grant was taken as proved above.
                    (*proved || !check) && counts
                } else {
                    false
                }
            }
            (RoundKind::Acquire { .. }, Answer::Denied { epoch }) => {
                r.max_epoch = r.max_epoch.max(*epoch);
                false
            }
            (RoundKind::Renew, Answer::Renewed(1 | 2)) => counts,
            _ => false,
        };
        if yes {
            r.yes += 1;
            // `Blind::count(band, proved)`.
            r.lead_us = r.lead_us.max(band_us);
            if !matches!(reply.answer, Answer::Granted { proved: true, .. }) {
                r.hold_us = r.hold_us.max(band_us);
            }
        } else {
            r.not_yes += 1;
        }
        if let Some(v) = value {
            s.sidecars[k].leases[j]
                .log
                .answered(&val_str(v), i, round.seqs[i], yes);
        }
        self.maybe_finish(s, k, j);
    }

    /// Bounded delay: a command runs, and a reply is read (or lost), before real time moves
    /// more than one unit past its sending; replies to a paused sidecar wait for it. A running
    /// sidecar gives up on a round (per-node timeout) before its clock moves a unit past it.
    /// Without this bound a reply could arrive any number of units late, which only lengthens
    /// traces: validity is computed from T1, whenever the reply comes.
    fn time_may_pass(&self, s: &State) -> bool {
        self.next_step(s).is_none_or(|n| self.steps[n].at > s.now)
            && s.sidecars.iter().enumerate().all(|(k, c)| {
                let links_ok = c.links.iter().all(|l| {
                    l.reqs
                        .iter()
                        .chain(l.orphans.iter())
                        .all(|(at, _)| *at >= s.now)
                        && (c.paused || l.replies.iter().all(|(at, _)| *at >= s.now))
                        && (!self.prompt
                            || (l.reqs.is_empty() && (c.paused || l.replies.is_empty())))
                });
                let round_ok = c.paused
                    || c.leases.iter().all(|e| {
                        e.round
                            .as_ref()
                            .is_none_or(|r| self.clock(s, k) - r.t1_us < TIMEOUT_US)
                    });
                links_ok && round_ok
            })
    }

    /// The first scheduled step that has not happened (steps of one unit happen in their
    /// order: the checker places each anywhere in the unit, not their permutations).
    fn next_step(&self, s: &State) -> Option<usize> {
        (0..self.steps.len()).find(|&n| s.stepped & (1 << n) == 0)
    }

    /// Whether nothing depends on a node's index, so the symmetry reduction over the nodes is
    /// sound: no scheduled step or reading names a node.
    pub fn symmetric(&self) -> bool {
        self.steps.is_empty() && self.timed_reads.is_empty()
    }

    /// A reading of node `i` by sidecar `k` that arrives now, sent `rtt_units` ago, the node
    /// reading its clock at the start or the end of the round trip ([`TimedRead`]).
    fn timed_read(&self, s: &mut State, k: usize, i: usize, rtt_units: i64, node_at_start: bool) {
        let received_us = self.clock(s, k);
        let sent_us = received_us - rtt_units * s.sidecars[k].rate.us_per_unit();
        let node_us = Self::wall(s, i)
            - if node_at_start {
                rtt_units * UNIT_US
            } else {
                0
            };
        let reading = Reading {
            node_us,
            sent_us,
            received_us,
        };
        self.observe_reading(s, k, i, reading);
    }

    /// Whether sidecar `k` reads every node at this tick besides the cadence
    /// ([`System::read_every`]).
    fn reads_now(&self, s: &State, k: usize) -> bool {
        self.read_every
            .as_ref()
            .and_then(|v| v.get(k).copied())
            .is_some_and(|every| every > 0 && s.now.is_multiple_of(every))
    }

    /// Whether sidecar `k` has started ([`System::connect_at`]).
    fn running(&self, s: &State, k: usize) -> bool {
        self.connect_at.get(k).is_none_or(|&at| s.now >= at)
    }

    fn fault_ok(&self, s: &State) -> bool {
        s.faults < self.faults.max
    }
}

/// Breadth-first: the fewest steps to a state where `goal` holds, if one is reachable within
/// the bound (a "sometimes" check that names the state, which stateright's properties cannot).
pub fn reachable(sys: &System, goal: impl Fn(&State) -> bool) -> Option<usize> {
    let mut seen = std::collections::HashSet::new();
    let mut frontier: Vec<State> = sys.init_states();
    for depth in 0.. {
        if frontier.is_empty() {
            return None;
        }
        if frontier.iter().any(&goal) {
            return Some(depth);
        }
        let mut next = Vec::new();
        for s in frontier {
            let mut actions = Vec::new();
            sys.actions(&s, &mut actions);
            for a in actions {
                if let Some(n) = sys.next_state(&s, a)
                    && sys.within_boundary(&n)
                    && seen.insert(match sys.symmetric() {
                        true => canonical(&n),
                        false => n.clone(),
                    })
                {
                    next.push(n);
                }
            }
        }
        frontier = next;
    }
    None
}

/// The nodes are interchangeable: nothing in the system depends on a node's index (run_ids
/// travel with the node's data). This maps a state to one representative of its class under
/// every permutation of the nodes, for the checker's symmetry reduction: the nodes sorted by a
/// hash of everything that belongs to them (the server, every sidecar's link to it, every
/// round's per-node fields). Two states that differ only by a permutation get the same
/// representative unless two different nodes' data hash alike, which costs reduction, never
/// soundness: the representative is always a permutation of the state.
pub fn canonical(s: &State) -> State {
    use std::hash::{BuildHasher, Hash, Hasher};
    // Fixed keys: the order must not depend on the process (the checker's threads share it).
    let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
    let n = s.redis.len();
    let key = |i: usize| {
        let mut h = hasher.build_hasher();
        s.redis[i].hash(&mut h);
        for c in &s.sidecars {
            c.links[i].hash(&mut h);
            for e in &c.leases {
                e.log.node(i).hash(&mut h);
                if let Some(r) = &e.round {
                    r.waiting[i].hash(&mut h);
                    r.seqs[i].hash(&mut h);
                    if let RoundKind::Acquire {
                        eligible, on_proof, ..
                    } = &r.kind
                    {
                        eligible[i].hash(&mut h);
                        on_proof[i].hash(&mut h);
                    }
                }
            }
        }
        h.finish()
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_cached_key(|&i| key(i));
    if order.iter().enumerate().all(|(j, &i)| i == j) {
        return s.clone();
    }
    fn permute<T: Clone>(v: &mut Vec<T>, order: &[usize]) {
        *v = order.iter().map(|&i| v[i].clone()).collect();
    }
    let mut out = s.clone();
    permute(&mut out.redis, &order);
    for c in &mut out.sidecars {
        permute(&mut c.links, &order);
        for e in &mut c.leases {
            e.log.permute(&order);
            if let Some(r) = &mut e.round {
                permute(&mut r.waiting, &order);
                permute(&mut r.seqs, &order);
                if let RoundKind::Acquire {
                    eligible, on_proof, ..
                } = &mut r.kind
                {
                    permute(eligible, &order);
                    permute(on_proof, &order);
                }
            }
        }
    }
    out
}

impl Model for System {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut combos: Vec<Vec<Rate>> = vec![vec![]];
        for allowed in &self.rates {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    allowed.iter().map(move |r| {
                        let mut c = c.clone();
                        c.push(*r);
                        c
                    })
                })
                .collect();
        }
        combos
            .into_iter()
            .map(|rates| {
                let mut s = State {
                    now: 0,
                    faults: 0,
                    redis: (0..self.nodes)
                        .map(|_| Redis {
                            slots: vec![Slot::default(); self.leases],
                            run: 0,
                            started_us: WALL0_US - 100 * UNIT_US,
                            offset_us: 0,
                            attest: Vec::new(),
                        })
                        .collect(),
                    sidecars: rates
                        .iter()
                        .enumerate()
                        .map(|(k, &rate)| Sidecar {
                            rate,
                            paused: false,
                            links: (0..self.nodes).map(|_| Arc::new(Link::default())).collect(),
                            leases: (0..self.leases).map(|_| self.elect(k, 0)).collect(),
                        })
                        .collect(),
                    fences: vec![Fence::default(); self.leases],
                    false_proof: false,
                    notified: None,
                    stepped: 0,
                };
                // Every sidecar has run for a while: connected, and each node's clock watched
                // for longer than the window (readings 14 units ago and now).
                let policy = self.policy();
                for (k, rate) in rates.iter().enumerate() {
                    if self.connect_at.get(k).is_some_and(|&at| at > 0) {
                        continue;
                    }
                    for i in 0..self.nodes {
                        self.handshake(&mut s, k, i);
                        let l = Arc::make_mut(&mut s.sidecars[k].links[i]);
                        l.watch = Watch::default();
                        let per = rate.us_per_unit();
                        // A fresh sidecar read each clock once, now: its watch has just begun.
                        // The others read it at the binary's cadence (every third of the window,
                        // 4 units, as the ticks do from now on) for 16 units, or longer than
                        // the window where a scenario's ttl is longer.
                        let (every, rtt) = self
                            .history
                            .as_ref()
                            .and_then(|v| v.get(k).copied())
                            .unwrap_or((
                                self.read_every
                                    .as_ref()
                                    .and_then(|v| v.get(k).copied())
                                    .filter(|&e| e > 0)
                                    .unwrap_or(4),
                                0,
                            ));
                        let every = every.max(1) as usize;
                        let window_units = (policy.window_us / per) as usize + 2;
                        let times: Vec<i64> = if self.fresh.get(k) == Some(&true) {
                            vec![0]
                        } else {
                            (0..=(16 / every).max(window_units.div_ceil(every)))
                                .rev()
                                .map(|n| -((n * every) as i64))
                                .collect()
                        };
                        for t in times {
                            let reading = Reading {
                                node_us: WALL0_US + t * UNIT_US,
                                sent_us: (t - rtt) * per,
                                received_us: t * per,
                            };
                            l.watch.observe(&run_id(0), reading, &policy);
                        }
                    }
                }
                s
            })
            .collect()
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon && self.time_may_pass(s) {
            actions.push(Action::Tick);
        }
        if let Some(n) = self.next_step(s)
            && self.steps[n].at == s.now
        {
            actions.push(Action::Step(n as u8));
        }
        let f = self.faults;
        let fault = self.fault_ok(s);
        for i in 0..self.nodes {
            let i8 = i as u8;
            if fault && f.node_restart {
                actions.push(Action::NodeRestart(i8));
            }
            if fault && f.jump_forward {
                actions.push(Action::Jump {
                    node: i8,
                    forward: true,
                });
            }
            if fault && f.jump_backward {
                actions.push(Action::Jump {
                    node: i8,
                    forward: false,
                });
            }
        }
        for (k, c) in s.sidecars.iter().enumerate() {
            let k8 = k as u8;
            if c.paused {
                actions.push(Action::Resume(k8));
            } else if fault && f.pause {
                actions.push(Action::Pause(k8));
            }
            if fault && f.sidecar_crash {
                actions.push(Action::CrashRestart(k8));
            }
            if fault && f.slow_refresh && !c.paused && self.running(s, k) {
                actions.push(Action::SlowRefresh(k8));
            }
            if fault && f.reconnect && !c.paused && self.running(s, k) {
                for (i, l) in c.links.iter().enumerate() {
                    if l.conn && !l.reqs.is_empty() {
                        actions.push(Action::Reconnect {
                            sidecar: k8,
                            node: i as u8,
                        });
                    }
                }
            }
            for (i, l) in c.links.iter().enumerate() {
                let (sidecar, node) = (k8, i as u8);
                if !l.reqs.is_empty() {
                    actions.push(Action::Apply { sidecar, node });
                }
                if !l.orphans.is_empty() {
                    actions.push(Action::ApplyOrphan { sidecar, node });
                }
                if !l.stale.is_empty() {
                    actions.push(Action::ApplyStale { sidecar, node });
                }
                if self.attestations && !c.paused && self.running(s, k) {
                    let requests = self.requesters.as_ref().is_none_or(|r| r[k]);
                    if let Some(epoch) = self.wanted(s, k, i).filter(|_| requests) {
                        let entry = s.redis[i].attest.iter().find(|e| (e.0, e.1) == (k8, epoch));
                        match entry {
                            None => actions.push(Action::Request { sidecar, node }),
                            Some(&(_, _, true)) => actions.push(Action::Check { sidecar, node }),
                            Some(_) => {}
                        }
                    }
                    if self.may_read_pending(s, k, i) {
                        actions.push(Action::Vouch { sidecar, node });
                    }
                }
                if !l.replies.is_empty() {
                    if !c.paused {
                        actions.push(Action::Deliver { sidecar, node });
                    }
                    if fault && f.reply_loss {
                        actions.push(Action::LoseReply { sidecar, node });
                    }
                }
            }
            if c.paused {
                continue;
            }
            for (j, e) in c.leases.iter().enumerate() {
                let j8 = j as u8;
                let may_start = self.running(s, k)
                    && e.round.is_none()
                    && e.holding.is_none()
                    && e.last_start != Some(s.now)
                    && e.rounds < self.max_rounds
                    && (k == 0 || s.now >= self.a_first_until)
                    && self
                        .starts
                        .as_ref()
                        .is_none_or(|w| w[k][j].0 <= s.now && s.now < w[k][j].1);
                let leading = e.elector.term().is_some();
                if leading && self.past_deadline(s, k, j) {
                    actions.push(Action::StepDown(k8, j8));
                } else if may_start && e.confirming.is_none() && self.due(s, k, j) {
                    actions.push(match leading {
                        true => Action::StartRenew(k8, j8),
                        false => Action::StartAcquire(k8, j8),
                    });
                }
                if leading && self.handovers && e.round.is_none() && e.holding.is_none() {
                    let named = |to: usize| self.successor.is_none_or(|t| t as usize == to);
                    for to in (0..self.sidecars).filter(|&to| to != k && named(to)) {
                        actions.push(Action::Handover {
                            from: k8,
                            to: to as u8,
                            lease: j8,
                        });
                    }
                }
                if let Some(r) = &e.round
                    && self.clock(s, k) - r.t1_us >= TIMEOUT_US
                    && r.waiting.iter().any(|&w| w)
                {
                    actions.push(Action::Timeout(k8, j8));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                for i in 0..self.nodes {
                    Self::expire(&mut s, i);
                }
                for k in 0..self.sidecars {
                    if s.sidecars[k].paused || !self.running(&s, k) {
                        continue;
                    }
                    for j in 0..self.leases {
                        if self.past_deadline(&s, k, j) {
                            self.feed(&mut s, k, j, Event::Timer, None);
                        }
                    }
                    let now_us = self.clock(&s, k);
                    let reads = self.reads_now(&s, k);
                    for t in self.timed_reads.clone() {
                        if (t.at, t.sidecar as usize) != (s.now, k) {
                            continue;
                        }
                        for i in (0..self.nodes).filter(|i| t.nodes & (1 << i) != 0) {
                            if s.sidecars[k].links[i].conn {
                                self.timed_read(&mut s, k, i, t.rtt_units, t.node_at_start);
                            }
                        }
                    }
                    for i in 0..self.nodes {
                        let l = &s.sidecars[k].links[i];
                        if !l.conn {
                            self.handshake(&mut s, k, i);
                        } else if reads || self.clock_due(l, now_us) {
                            self.observe(&mut s, k, i, now_us);
                        }
                    }
                    if self.slow_refresh_at == Some((k as u8, s.now)) {
                        self.slow_refresh(&mut s, k);
                    }
                    for j in 0..self.leases {
                        self.end_hold(&mut s, k, j);
                    }
                }
            }
            Action::Pause(k) => {
                s.faults += 1;
                s.sidecars[k as usize].paused = true;
            }
            Action::Resume(k) => {
                s.sidecars[k as usize].paused = false;
                for j in 0..self.leases {
                    self.end_hold(&mut s, k as usize, j);
                }
            }
            Action::SlowRefresh(k) => {
                s.faults += 1;
                self.slow_refresh(&mut s, k as usize);
            }
            Action::Reconnect { sidecar, node } => {
                s.faults += 1;
                let (k, i) = (sidecar as usize, node as usize);
                let l = Arc::make_mut(&mut s.sidecars[k].links[i]);
                // The old connection's commands may still run; their replies are never read.
                let stale = std::mem::take(&mut l.reqs);
                l.stale.extend(stale.into_iter().map(|(_, r)| r));
                l.replies.clear();
                l.generation = l.generation.wrapping_add(1);
                self.handshake(&mut s, k, i);
            }
            Action::CrashRestart(k) => {
                s.faults += 1;
                let now_us = self.clock(&s, k as usize);
                let c = &mut s.sidecars[k as usize];
                c.paused = false;
                // A fresh process: every lease as new, but nonces and the round bound go on.
                for e in &mut c.leases {
                    *e = Elect {
                        seq: e.seq,
                        rounds: e.rounds,
                        ..self.elect(k as usize, now_us)
                    };
                }
                for l in c.links.iter_mut().map(Arc::make_mut) {
                    let mut orphans = std::mem::take(&mut l.orphans);
                    orphans.extend(l.reqs.drain(..));
                    *l = Link {
                        orphans,
                        stale: std::mem::take(&mut l.stale),
                        ..Link::default()
                    };
                }
            }
            Action::NodeRestart(i) => {
                s.faults += 1;
                let i = i as usize;
                let wall = Self::wall(&s, i);
                let r = &mut s.redis[i];
                for slot in &mut r.slots {
                    slot.key = None;
                    slot.epoch = 0;
                }
                r.run += 1;
                r.started_us = wall;
                r.attest.clear();
                for c in &mut s.sidecars {
                    let l = Arc::make_mut(&mut c.links[i]);
                    l.conn = false;
                    l.reqs.clear();
                    l.orphans.clear();
                    l.stale.clear();
                    l.replies.clear();
                }
            }
            Action::Step(n) => {
                let step = self.steps[n as usize];
                s.stepped |= 1 << n;
                s.redis[step.node as usize].offset_us += step.us;
                Self::expire(&mut s, step.node as usize);
            }
            Action::Jump { node, forward } => {
                s.faults += 1;
                let step = self.jump_units * UNIT_US;
                s.redis[node as usize].offset_us += if forward { step } else { -step };
                Self::expire(&mut s, node as usize);
            }
            Action::LoseReply { sidecar, node } => {
                s.faults += 1;
                Arc::make_mut(&mut s.sidecars[sidecar as usize].links[node as usize])
                    .replies
                    .pop_front();
            }
            Action::StartAcquire(k, j) | Action::StartRenew(k, j) => {
                self.start(&mut s, k as usize, j as usize)
            }
            Action::Apply { sidecar, node } => {
                let (k, i) = (sidecar as usize, node as usize);
                let (_, req) = Arc::make_mut(&mut s.sidecars[k].links[i])
                    .reqs
                    .pop_front()?;
                if let Some(reply) = self.run_script(&mut s, i, &req)
                    && (reply.renew.is_some()
                        || s.sidecars[k].leases[reply.lease as usize]
                            .round
                            .as_ref()
                            .is_some_and(|r| r.id == reply.round))
                {
                    let now = s.now;
                    Arc::make_mut(&mut s.sidecars[k].links[i])
                        .replies
                        .push_back((now, reply));
                }
                if let Some((to, j)) = s.notified.take() {
                    self.notify(&mut s, to as usize, j as usize);
                }
            }
            Action::ApplyOrphan { sidecar, node } => {
                let (k, i) = (sidecar as usize, node as usize);
                let (_, req) = Arc::make_mut(&mut s.sidecars[k].links[i])
                    .orphans
                    .pop_front()?;
                self.run_script(&mut s, i, &req);
                if let Some((to, j)) = s.notified.take() {
                    self.notify(&mut s, to as usize, j as usize);
                }
            }
            Action::ApplyStale { sidecar, node } => {
                let (k, i) = (sidecar as usize, node as usize);
                let req = Arc::make_mut(&mut s.sidecars[k].links[i])
                    .stale
                    .pop_front()?;
                self.run_script(&mut s, i, &req);
                if let Some((to, j)) = s.notified.take() {
                    self.notify(&mut s, to as usize, j as usize);
                }
            }
            Action::Deliver { sidecar, node } => {
                self.deliver(&mut s, sidecar as usize, node as usize)
            }
            Action::Timeout(k, j) => {
                let (k, j) = (k as usize, j as usize);
                let e = &mut s.sidecars[k].leases[j];
                if let Some(r) = e.round.as_mut() {
                    for (i, w) in r.waiting.iter_mut().enumerate().filter(|(_, w)| **w) {
                        *w = false;
                        r.not_yes += 1;
                        if let Some(v) = r.value {
                            e.log.failed(&val_str(v), i);
                        }
                    }
                }
                self.maybe_finish(&mut s, k, j);
            }
            Action::StepDown(k, j) => self.feed(&mut s, k as usize, j as usize, Event::Timer, None),
            Action::Handover { from, to, lease } => {
                // `POST /leases/{name}/step-down`: the elector reads the candidates (the model
                // shows `to` ready) and releases naming it.
                self.feed(
                    &mut s,
                    from as usize,
                    lease as usize,
                    Event::StepDown(0, StepDownReason::Requested),
                    Some(to),
                );
            }
            Action::Request { sidecar, node } => {
                self.request(&mut s, sidecar as usize, node as usize)
            }
            Action::Vouch { sidecar, node } => self.vouch(&mut s, sidecar as usize, node as usize),
            Action::Check { sidecar, node } => {
                self.check_vouch(&mut s, sidecar as usize, node as usize)
            }
        }
        for k in 0..self.sidecars {
            let now = instant(self.clock(&s, k));
            for e in &mut s.sidecars[k].leases {
                e.elector.forget_past(now);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("S1 mutual exclusion", |m: &System, s: &State| {
                m.overlap(s).is_none()
            }),
            Property::always("S2 fencing tokens increase", |_, s: &State| {
                s.fences.iter().all(|f| !f.s2_broken)
            }),
            Property::always(
                "a release proof only where nothing of the term can still arrive",
                |_, s: &State| !s.false_proof,
            ),
            Property::sometimes("a leader is reachable", |m: &System, s: &State| {
                (0..m.leases).any(|j| !m.leaders_of(s, j).is_empty())
            }),
        ]
    }

    fn within_boundary(&self, s: &State) -> bool {
        s.now <= self.horizon
    }
}

impl System {
    /// One line per sidecar and node: what a reader of a trace needs. With several leases,
    /// each sidecar's and each node's line has a part per lease (`lease 0: …; lease 1: …`).
    pub fn describe(&self, s: &State) -> String {
        let units = |us: i64| format!("{:.3}", us as f64 / UNIT_US as f64);
        let many = self.leases > 1;
        let mut out = format!("  real time {}", s.now);
        if s.faults > 0 {
            let _ = write!(out, ", {} fault(s) so far", s.faults);
        }
        out.push('\n');
        for (k, c) in s.sidecars.iter().enumerate() {
            let _ = write!(
                out,
                "    {} clock {} ({}){}: ",
                name(k),
                units(self.clock(s, k)),
                c.rate.short(),
                if c.paused { " PAUSED" } else { "" }
            );
            for (j, e) in c.leases.iter().enumerate() {
                if many {
                    let _ = write!(out, "{}lease {j}: ", if j > 0 { "; " } else { "" });
                }
                match (e.confirming, e.elector.term()) {
                    _ if e.holding.is_some() => {
                        let (l, _, until) = e.holding.unwrap();
                        let _ = write!(
                            out,
                            "won token {}, holding until {} (blind band)",
                            l.token,
                            units(until)
                        );
                    }
                    (Some(l), _) => {
                        let _ = write!(out, "confirming token {}", l.token);
                    }
                    (None, Some(t)) => {
                        let _ = write!(
                            out,
                            "leader, token {}, deadline {}",
                            t.token,
                            units(local_us(t.deadline))
                        );
                    }
                    (None, None) => out.push_str("follower"),
                }
                if let Some(Command::Attempt { named, .. }) = &e.pending {
                    let _ = write!(
                        out,
                        "; attempt asked{}",
                        if *named { " (named by a notice)" } else { "" }
                    );
                }
                if self.believes(s, k, j) {
                    out.push_str(" => answers is_leader: true");
                }
                if let Some(r) = &e.round {
                    let kind = match r.kind {
                        RoundKind::Acquire { .. } => "acquire",
                        RoundKind::Renew => "renew",
                    };
                    let _ = write!(
                        out,
                        "; {kind} round T1 {} yes {} not {}",
                        units(r.t1_us),
                        r.yes,
                        r.not_yes
                    );
                    if r.lead_us > 0 {
                        let _ = write!(
                            out,
                            " (blind band: lead {}, hold {})",
                            units(r.lead_us),
                            units(r.hold_us)
                        );
                    }
                }
            }
            let counting: String = c
                .links
                .iter()
                .map(|l| {
                    if self.counts(l, self.clock(s, k)) {
                        '+'
                    } else {
                        '-'
                    }
                })
                .collect();
            let _ = writeln!(out, "; counts nodes [{counting}]");
        }
        for (i, r) in s.redis.iter().enumerate() {
            let wall = Self::wall(s, i) - WALL0_US;
            let _ = write!(out, "    node {i} (run r{}) wall {}", r.run, units(wall));
            for (j, slot) in r.slots.iter().enumerate() {
                if many {
                    let _ = write!(out, "{} lease {j}:", if j > 0 { ";" } else { "," });
                }
                match slot.key {
                    Some(((k, n), exp)) => {
                        let _ = write!(
                            out,
                            "{} key {}#{n} until {}",
                            if many { "" } else { "," },
                            name(k as usize),
                            units(exp - WALL0_US)
                        );
                    }
                    None if many => out.push_str(" no key"),
                    None => out.push_str(", no key"),
                }
                if let Some((to, proof, _)) = slot.reserved {
                    let _ = write!(
                        out,
                        ", reserved for {}{}",
                        name(to as usize),
                        if proof { " with proof" } else { "" }
                    );
                }
                if many {
                    let _ = write!(out, ", epoch {}", slot.epoch);
                }
            }
            for &(k, e, v) in &r.attest {
                let _ = write!(
                    out,
                    ", {}'s watch {e} {}",
                    name(k as usize),
                    if v { "vouched for" } else { "asks a vouch" }
                );
            }
            if many {
                out.push('\n');
            } else {
                let _ = writeln!(out, ", epoch {}", r.slots[0].epoch);
            }
        }
        out
    }

    /// A trace, step by step.
    pub fn render(&self, path: &[(State, Option<Action>)]) -> String {
        let mut out = String::new();
        for (n, (state, action)) in path.iter().enumerate() {
            if n == 0 {
                out.push_str("initial state\n");
                out.push_str(&self.describe(state));
            }
            if let Some(a) = action {
                let next = self.next_state(state, *a).expect("replayable");
                let _ = writeln!(
                    out,
                    "{:>3}. {}{}",
                    n + 1,
                    self.format(*a),
                    self.which(state, *a)
                );
                if !matches!(
                    a,
                    Action::Apply { .. } | Action::ApplyOrphan { .. } | Action::ApplyStale { .. }
                ) || n + 2 == path.len()
                {
                    out.push_str(&self.describe(&next));
                }
            }
        }
        out
    }

    /// With several leases, the lease a command or reply of `a` belongs to (from the queue it
    /// comes from in `s`); else nothing.
    fn which(&self, s: &State, a: Action) -> String {
        if self.leases < 2 {
            return String::new();
        }
        let lease_of = |r: &Req| match *r {
            Req::Acquire { lease, .. } | Req::Renew { lease, .. } | Req::Release { lease, .. } => {
                lease
            }
        };
        let link = |k: u8, i: u8| &s.sidecars[k as usize].links[i as usize];
        let j = match a {
            Action::Apply { sidecar, node } => {
                link(sidecar, node).reqs.front().map(|(_, r)| lease_of(r))
            }
            Action::ApplyOrphan { sidecar, node } => link(sidecar, node)
                .orphans
                .front()
                .map(|(_, r)| lease_of(r)),
            Action::ApplyStale { sidecar, node } => link(sidecar, node).stale.front().map(lease_of),
            Action::Deliver { sidecar, node } | Action::LoseReply { sidecar, node } => {
                link(sidecar, node).replies.front().map(|(_, r)| r.lease)
            }
            _ => None,
        };
        j.map_or_else(String::new, |j| format!(" (lease {j})"))
    }

    /// " of lease j" where there are several, else nothing.
    fn of_lease(&self, j: u8) -> String {
        match self.leases > 1 {
            true => format!(" of lease {j}"),
            false => String::new(),
        }
    }

    fn format(&self, a: Action) -> String {
        let n = |k: u8| name(k as usize);
        match a {
            Action::Tick => "time passes one unit".into(),
            Action::Pause(k) => format!("FAULT: {} is paused", n(k)),
            Action::Resume(k) => format!("{} resumes", n(k)),
            Action::CrashRestart(k) => format!("FAULT: {} crashes and restarts", n(k)),
            Action::NodeRestart(i) => format!("FAULT: node {i} restarts empty"),
            Action::Reconnect { sidecar, node } => format!(
                "FAULT: {} replaces its connection to node {node} with commands in flight (they may still run)",
                n(sidecar)
            ),
            Action::SlowRefresh(k) => format!(
                "FAULT: {} reads every node's clock in a reading that took {} unit(s) (sent then, read by the node now)",
                n(k),
                self.slow_units
            ),
            Action::Step(n) => {
                let step = self.steps[n as usize];
                format!(
                    "STEP (scheduled): node {}'s wall clock steps {} {:.3} units",
                    step.node,
                    if step.us >= 0 { "forward" } else { "backward" },
                    step.us.abs() as f64 / UNIT_US as f64
                )
            }
            Action::Jump { node, forward } => format!(
                "FAULT: node {node}'s wall clock jumps {} {} units",
                if forward { "forward" } else { "backward" },
                self.jump_units
            ),
            Action::LoseReply { sidecar, node } => {
                format!("FAULT: node {node}'s reply to {} is lost", n(sidecar))
            }
            Action::StartAcquire(k, j) => {
                format!("{} starts an acquire round{}", n(k), self.of_lease(j))
            }
            Action::StartRenew(k, j) => format!("{} starts a renewal{}", n(k), self.of_lease(j)),
            Action::Apply { sidecar, node } => {
                format!("node {node} runs {}'s next command", n(sidecar))
            }
            Action::ApplyOrphan { sidecar, node } => {
                format!(
                    "node {node} runs a command of {}'s crashed process",
                    n(sidecar)
                )
            }
            Action::ApplyStale { sidecar, node } => format!(
                "node {node} runs a command {} sent on the connection it replaced",
                n(sidecar)
            ),
            Action::Deliver { sidecar, node } => {
                format!("{} reads node {node}'s reply", n(sidecar))
            }
            Action::Timeout(k, j) => format!("{}'s round{} times out", n(k), self.of_lease(j)),
            Action::StepDown(k, j) => format!(
                "{}'s deadline timer{} fires: steps down",
                n(k),
                self.of_lease(j)
            ),
            Action::Handover { from, to, lease } => format!(
                "{} hands {}over gracefully: steps down, releases naming {}",
                n(from),
                match self.leases > 1 {
                    true => format!("lease {lease} "),
                    false => String::new(),
                },
                n(to)
            ),
            Action::Request { sidecar, node } => format!(
                "{} asks node {node} for a vouch of its fresh watch (a reading)",
                n(sidecar)
            ),
            Action::Vouch { sidecar, node } => format!(
                "{} reads node {node}'s pending requests (a reading) and vouches if the node counts for it",
                n(sidecar)
            ),
            Action::Check { sidecar, node } => format!(
                "{} reads node {node}'s vouch for its watch (a reading) and takes it",
                n(sidecar)
            ),
        }
    }
}
