//! A deterministic simulator of the spread protocol (FoundationDB's simulation testing and
//! TigerBeetle's VOPR are the models): the pure core's rules (`transfer.rs`: what a key has to
//! send, a credit's outcome, an answer's effect, seals, shrinks, budget moves) driven through
//! seeded random schedules on simulated masters, each with a lagging replica. Each master runs
//! the transfer node the server runs (`protocol::transfer_node`, over [`SimHost`]: the glue's
//! `RedisHost` over the simulated keys, replication counts and network):
//!
//! - messages (seal requests, credits, answers) lost, duplicated, reordered and delayed;
//! - a key's messages leave its master only once its replica holds the key's last write, and
//!   an answer only once the replica holds the credit (the replication gate);
//! - failovers (the replica, without the writes it had not received, becomes the master),
//!   restarts (everything kept, in-memory queues lost);
//! - spreads floored or not and (a third, from a stream of their own) ceiled or not, each
//!   bounded one sending its holders their shares as moves of floor and ceiling units;
//! - adds and purchases on every member, shrinks, grows, budget moves of either kind; adds to
//!   a ceiled spread walked over every member until one counts them or answers `TRYAGAIN`
//!   (`transfer::add_waits_for_up_budget`, or room the rounds gather), a walk refused
//!   everywhere checked against the up-budget in flight; each master's rebalancer
//!   (`protocol::rebalance_node`, the server's): refusals recorded, notices, the home's polls,
//!   answers, gives and the whole headroom told, lost, late, duplicated and reordered like the
//!   rest, each master's rebalance timer firing at its ticks; purchases that a holder cannot
//!   cover made final or retryable by that bound, as the glue does (`counter::headroom`), or
//!   (one schedule in four) with rebalancing off; clients'
//!   purchases that walk every member until one grants or says `TRYAGAIN`, a walk refused
//!   everywhere checked against the budget in flight (a ghost check: no move on its way would
//!   have covered it);
//! - refunds of tokened purchases (`CTR.REFUND`, [`Counter::refund_plan`] as the glue runs
//!   it), walking the purchase's members in its order until one answers, retried, also
//!   after a shrink folded the granting holder (which answers `TRYAGAIN` until its fold lands,
//!   then sends the refund home: the client's tokened add there); a ghost check fails a token refunded twice or without a grant, and the total
//!   check a refund counted twice or lost;
//! - key operations: DUMP/RESTORE of a holder under another name (also another holder-shaped
//!   name of the same spread), RESTORE of forged payloads whose outbox claims a member's
//!   transfer (the glue's rule, `drop_foreign_transfers`, runs on every RESTORE), DUMP/RESTORE
//!   of the home under another name (the glue's
//!   `collect::Copy` rule must detach it), COPY of a holder, RENAME of a sealed holder and of
//!   the home, expiry of a folded holder, DEL of the home and a new spread under the same name,
//!   with the collection of the gone spread's holders (`collect::left_by`, `still_to_collect`,
//!   `verdict`; requests and answers lost, duplicated, reordered; a restart loses the claims),
//!   and the orphan audit behind it (`audit`: each master's walk asks the master of a holder's
//!   home slot whether its spread lives; a `Gone` waits for that master's replica; a spread
//!   gone twice, the schedule's grace apart, is reported, never deleted; after healing the
//!   operator's `CTR.ORPHANS DELETE` takes what was reported);
//! - a backup restored offline with the home coming back after its holders within the grace,
//!   the operator deleting what the audits report meanwhile;
//! - a `DEL` of the home no client waited for, which a failover may take back, with the
//!   operator's `CTR.ORPHANS DELETE` run at any moment (the audit's `Gone` must wait for the
//!   replica: `audit::answers_wait_for_replicas`, the glue's rule);
//! - a partition between two masters longer than the sealed grace, across which a holder's
//!   budget move to a sibling outlives its receiver (shrunk away, folded and expired): the
//!   fresh name must not take it;
//! - steps in the same millisecond as the one before (0, 10, 50 or 90 percent per schedule);
//! - atomic slot migrations of a member's slot (or any key's): started (neither end does
//!   module work on the slot's keys, `Host::moving`; clients still write at the source),
//!   then handed over (the keys as the source has them go to the target and its replica) or
//!   cancelled; for a second after a handoff the third master's slot map still names the
//!   source, so its messages go there and are dropped (the runtime's map is a second old at
//!   most). A ghost check fails any machine's write to a key its master does not serve or
//!   that a migration moves (such a write would be lost with the trimmed key).
//!
//! After every step it checks: the gathered total (the glue's rule: the home's value, every
//! current holder's units in hand, every leaving holder's units in hand) equals every
//! acknowledged add and purchase that the failovers did not take back; in a floored spread the
//! members' floors plus the floor units in flight equal `F`, no counter is below its floor
//! (so no purchase beyond stock); in a ceiled spread the members' ceilings plus the ceiling
//! units in flight equal `C`, no counter is above its ceiling (so no add past the cap); a
//! round's bound is never below the lowest true headroom since its poll began (the total minus
//! `F`, or `C` minus the total: a bound below it would refuse for good what the counter
//! covers). Once the faults stop (and the audit's passes ran) it checks that every fold
//! finished, that no member still waits for budget or room, every
//! transfer of the spread was answered, every holder of a spread that no key is the home of
//! was collected or reported by its master's audit, and, once the operator deleted what was
//! reported, none is left (but a folded holder whose fold was answered: the glue gives it an
//! expiry).
//!
//! A failing schedule panics with its seed and the steps it took; `CTR_SIM_SEED=<seed>` replays
//! that one schedule (`CTR_SIM_TRACE=1` prints each step as it runs). `CTR_SIM_SCHEDULES` sets how many schedules a run takes (10,000 by
//! default, what `make test` runs; `make simulate` runs a long soak).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

use super::audit::{self, Answer, Question};
use super::bounds::home_refund_token;
use super::budget_kind::BudgetKind;
use super::collect::{self, lists_holder, Collection, Copy};
use super::folded::first_attempt_at;
use super::listing::{ListClock, ListedAtError};
use super::rebalance::{through_the_home, Move};
use super::siphash::token_fingerprint;
use super::spread::{
    bounds_by_name, carried_home, first_attempt_for, floor_by_name, holder_name, key_slot,
    parse_holder_name, plan_holders_avoiding, spread_id_from, Standalone,
};
use super::step::{Step, StepOutcome};
use super::transfer::{
    add_waits_for_up_budget, debited_ms, purchase_waits_for_budget, Credit, Giver, TransferError,
    Units, MOVE_IN_FLIGHT_MS,
};
use super::{
    token_expiry, AddOp, Counter, DecrOp, RefundOp, RefundPlan, Spread, TokenStamp, TokenUse,
    WriteKind,
};
use crate::persist::admission_msg::NameAnswer;
use crate::persist::gather_msg::HolderAnswer;
use crate::persist::holder_check_msg::Verdict;
use crate::protocol::admission_node::{AdmissionNode, Known};
use crate::protocol::audit_node::AuditNode;
use crate::protocol::collect_node::{Claim, CollectNode};
use crate::protocol::gather_node;
use crate::protocol::holder_check_node::{Asked, HolderCheckNode};
use crate::protocol::host::{Event, Host, NodeMessage, Route, TransferMessage};
use crate::protocol::listing_gate::ListingGate;
use crate::protocol::rebalance_node::RebalanceNode;
use crate::protocol::replicas::Replication;
use crate::protocol::transfer_node::{TransferNode, TICK_MS};

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[path = "simulator_reads.rs"]
mod reads;

const MASTERS: usize = 3;
/// The token window (`ctr.token-window-ms`, its default).
const TOKEN_WINDOW_MS: i64 = 3_600_000;
/// `ctr.collect-timeout-ms`, its default.
const COLLECT_TIMEOUT_MS: i64 = 10_000;
/// `ctr.gather-timeout-ms`, its default: how long a holder check is tried.
const CHECK_TIMEOUT_MS: i64 = 1_000;
/// How old the runtime's slot map may be (`spread_cluster::topology`).
const STALE_MAP_MS: i64 = 1_000;
/// `ctr.clock-skew-ms` in the model: the masters' clocks differ by up to this much. Smaller than
/// the default (1 s), so that purchases wait for a clock that is behind for a few steps only.
const CLOCK_SKEW_MS: i64 = 40;

/// A client's write to a missing holder-named key, waiting in the server for its holder check
/// on master `master`.
struct WaitingAdd {
    master: usize,
    name: Vec<u8>,
    delta: i64,
    /// Its check ended: it runs again.
    due: bool,
}

/// What a `DEL` no client waited for took, given back when a failover loses it.
struct Deleted {
    floor: Option<i64>,
    ceiling: Option<i64>,
    renamed: Vec<(Vec<u8>, Vec<u8>)>,
    /// The home as it was (its dump), and the units its `DEL` took.
    dump: Counter,
    units: i64,
}

/// A walked write's outcome at one member (a purchase, an add under a ceiling).
enum Walked {
    Granted,
    /// `TRYAGAIN`: nothing changed, nothing recorded; the client asks again.
    Retry,
    /// Refused for good at this member (its stock, or folded back): a walk goes on.
    Refused,
}
const STEPS: usize = 160;

/// What the schedules ran of the rebalancer, for the summary line.
static ROUNDS_POLLED: AtomicU64 = AtomicU64::new(0);
static BOUNDS_CHECKED: AtomicU64 = AtomicU64::new(0);
static GIVES: AtomicU64 = AtomicU64::new(0);
/// Refund walks: given afresh, replayed, stopped at a folded holder whose fold had not landed,
/// given at the home after a fold.
static REFUNDS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
/// Tokened adds: counted, replayed, waiting for a folding holder's fold to land.
static TOKENED_ADDS: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
/// Ceiled spreads: schedules that made one, adds refused by a ceiling (tokened ones
/// recorded), adds told to wait for up-budget in flight, walks of adds refused everywhere.
static CEILED: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
/// Atomic slot migrations handed over and cancelled.
static MIGRATIONS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
/// Writes that waited for a holder check, by the verdict they ran again with: listed, not
/// listed, unsure.
static CHECKED_WRITES: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// splitmix64: small, seedable, the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
    /// A random id above the reserved ones (0: none, 1: a fold from before ids).
    fn id(&mut self) -> u64 {
        self.next() | 2
    }
}

#[derive(Debug, Clone)]
enum Message {
    /// A message between two masters' machines (transfers, collections).
    Node {
        from: usize,
        to: usize,
        m: NodeMessage,
    },
}

/// A write the replica does not hold yet (one command: RENAME writes two keys at once): each
/// key's state after it (None: deleted), and the client's units it carried (taken back from
/// what was acknowledged if a failover loses the write).
struct Pending {
    keys: Vec<(Vec<u8>, Option<Counter>)>,
    client_units: i64,
    /// A transfer or fold step, replicated as the step (the glue's `CTR.STEP`): the replica
    /// replays it on its own state, which must reach the master's (`keys`).
    step: Option<Step>,
    /// The purchase token this write decided (granted or refused), if any: a failover that
    /// loses the write loses the decision, asynchronous replication's loss, not the protocol's.
    token: Option<u64>,
}

#[derive(Default)]
struct Master {
    keys: BTreeMap<Vec<u8>, Counter>,
    replica: BTreeMap<Vec<u8>, Counter>,
    unreplicated: VecDeque<Pending>,
    /// This master's transfer node, the glue's machine (soft state: a restart or a failover
    /// starts it anew from the keys it loads).
    transfers: TransferNode<usize>,
    /// Keys written with something to send since the node last took them (the glue's
    /// `track`).
    noted: Vec<Vec<u8>>,
    /// This master's rebalancer, the glue's machine: the demand its holders recorded, the
    /// polls it began, the whole headroom rounds told it (soft state: a restart or a failover
    /// starts from nothing).
    rebalance: RebalanceNode<usize>,
    /// This master's holder checks, the glue's machine (soft state: a restart or a failover
    /// starts from nothing; the writes waiting on them lose their clients).
    holder_checks: HolderCheckNode<usize>,
    /// This master's holder admission, the glue's machine (soft state, as the checks').
    admission: AdmissionNode<usize>,
    /// This master's collector, the glue's machine: the gone homes it claimed and the
    /// collections it has not seen answered (soft state: a restart or a failover loses them;
    /// the promoted replica claims nothing).
    collector: CollectNode<usize>,
    /// The orphan audit, the glue's machine (soft state: a restart or a failover starts from
    /// nothing).
    /// Questions asked of masters by index, under a request id.
    audit: AuditNode<usize>,
    /// Writes made, and writes the replica holds (the replication offsets).
    written: u64,
    replicated: u64,
    /// When `CTR.HOLDERS ... AT` may answer on this master (soft state, the glue's machine).
    listing_gate: ListingGate,
    /// How far this master's clock is ahead of the model's time (behind when negative), as the
    /// home's listing dates changes and answers `AT` by it; a failover's promoted replica is
    /// another machine, with another clock.
    clock_offset: i64,
}

impl Master {
    /// A new process (a restart, or the replica promoted): its transfer node starts from the
    /// keys it holds with something to send (loaded, or replayed into the replica).
    fn restart_transfer_node(&mut self) {
        self.transfers = TransferNode::default();
        self.noted = (self.keys.iter())
            .filter(|(_, c)| has_transfers(c))
            .map(|(k, _)| k.clone())
            .collect();
    }

    fn replica_holds(&self, key: &[u8]) -> bool {
        !self
            .unreplicated
            .iter()
            .any(|p| p.keys.iter().any(|(k, _)| k == key))
    }
}

struct Sim {
    rng: Rng,
    masters: Vec<Master>,
    network: Vec<Message>,
    now: i64,
    /// The home's current name (RENAME moves it).
    home: Vec<u8>,
    floor: Option<i64>,
    /// A ceiled spread's ceiling `C` (each holder its own, the ceilings summing to `C` with the
    /// ceiling units in flight).
    ceiling: Option<i64>,
    /// Every client unit acknowledged and not taken back by a failover.
    expected: i64,
    faults: bool,
    /// Sealed holders a user renamed, by their listed name: (new name, units). The glue's read
    /// counts the listed name (now missing), so the total dips by the units until the fold's
    /// credit lands: the checks count them at the new name meanwhile.
    renamed: Vec<(Vec<u8>, Vec<u8>)>,
    /// `ctr.orphan-grace-ms` of this schedule.
    grace: i64,
    /// After a `DEL` of the home no client waited for (`delete_home_unwaited`): the floor of
    /// the deleted counter, until the `DEL` reaches the replica (then a new counter is made
    /// under the name) or a failover loses it (the counter is back, with its floor).
    deleted_unwaited: Option<Deleted>,
    /// Credits from one master to another are lost until a time: (from, to, until).
    partition: Option<(usize, usize, i64)>,
    /// False in one schedule in four: `ctr.rebalance-delay-ms` 0, no round and no whole
    /// headroom, so a holder's refusal waits only for its own budget in flight.
    rebalancing: bool,
    /// The percent of steps run in the same millisecond as the step before (Redis runs many
    /// commands, timers and bus messages in one): 0, 10, 50 or 90 per schedule.
    same_ms: u64,
    /// A replayed step that did not reach the master's state (reported by `check`).
    replay_error: Option<String>,
    /// A machine's write to a key its master does not serve (reported by `check`).
    write_error: Option<String>,
    /// A gathered read's check that failed in a delivery or a tick (reported by `check`).
    read_error: Option<String>,
    /// The latest rebalance poll sent (its id), and (ghost state) the lowest true headroom
    /// since it began, less what clients added since (a report taken before an add cannot
    /// count it): the bound its round tells must not be below it. With `raised` then.
    round: Option<(u64, i64, i64)>,
    /// Every acknowledged unit clients added (or a failover gave back), summed (ghost state).
    raised: i64,
    /// Every acknowledged unit clients took away (or a failover took back), summed (ghost
    /// state): the room under a ceiling they made.
    lowered: i64,
    /// A round's bound below the true headroom (reported by `check`).
    bound_error: Option<String>,
    /// Writes waiting for their holder checks.
    waiting_adds: Vec<WaitingAdd>,
    /// A grow waits for its name's admission (one at a time, on the home's master).
    waiting_grow: bool,
    /// A holder check that answered a look-alike listed (reported by `check`).
    check_error: Option<String>,
    /// The names of the holder checks asked over the network, by request id (ghost state).
    check_names: BTreeMap<u64, Vec<u8>>,
    /// Gathered reads, answered one request at a time (`simulator_reads.rs`).
    reads: reads::Reads,
    log: String,
    /// Purchase tokens clients sent and may retry, and (ghost state) how many times each was
    /// granted: never more than once.
    tokens: Vec<TokenWalk>,
    /// Ghost: the lists the home answered for the times walks read (the latest 16): a list
    /// answered for a time never changes (a change dated at or before it would send a retry
    /// over another list than its first send walked).
    walked_lists: Vec<(i64, Vec<Vec<u8>>)>,
    /// The token of a purchase whose `CTR.HOLDERS AT` waits in the server for the listing
    /// gate: walked once a replication step opens it, as the server runs it again.
    waiting_walk: Option<u64>,
    /// Slots that migrations moved, to their master now (the others are on their first).
    slot_owners: BTreeMap<u16, usize>,
    /// The atomic slot migration under way, if any.
    migration: Option<Migration>,
    /// The last handoff and when it happened: the third master's slot map (the runtime's,
    /// fetched again once a second) still names the source for up to a second after it.
    last_handoff: Option<(Migration, i64)>,
    /// When each master last read its slot map afresh (`Host::refresh_routes`).
    maps_read_at: Vec<i64>,
    /// Migrations draw from a stream of their own: a schedule's other steps stay what they
    /// were until the first handoff.
    migrations: Rng,
    /// The masters' clocks (a stream of its own, so that the other choices of a seed stay).
    clocks: Rng,
    /// Whether a spread is ceiled, and its ceiling (a stream of its own, so that a schedule of
    /// an unceiled spread is the one its seed ran before ceilings).
    ceilings: Rng,
}

/// A tokened purchase a client may retry, or refund, or a tokened add (a restock) it may
/// retry: its token (fingerprint), time and amount, and (ghost state) how many times it was
/// granted (an add: counted) and refunded.
#[derive(Clone, Copy)]
struct TokenWalk {
    fp: u64,
    at: i64,
    amount: i64,
    /// A `CTR.ADD` of `amount` with the token, walking as a purchase walks (a client whose
    /// list is the one at the token's time): counted at most once, wherever its retries go.
    add: bool,
    granted: u32,
    refunded: u32,
}

/// Where a tokened write's walk stops at member `c` before the write is decided, as the
/// glue's `refuse_sealed_unless_retry` answers (None: decided afresh there): a token it
/// remembers replays (also on a folded holder), a token's other use conflicts, and a folded
/// holder passes a new token on only once its fold has landed (before, its seal may not be
/// on its replica, and a failover would give the holder back unsealed to count or grant the
/// token after another member did).
fn known_or_sealed(c: &Counter, used: TokenUse) -> Option<TokenStop> {
    match used {
        TokenUse::Retry(Some(_)) => Some(TokenStop::Granted(false)),
        TokenUse::Retry(None) => Some(TokenStop::Passed),
        TokenUse::Conflict => Some(TokenStop::Undecided),
        TokenUse::New if c.fold_travels() => Some(TokenStop::Undecided),
        TokenUse::New if c.is_sealed() => Some(TokenStop::Passed),
        TokenUse::New => None,
    }
}

/// One new token in five is a tokened add's, picked from its fingerprint's high bits (the
/// low ones pick where its walk starts).
fn is_add_token(fp: u64) -> bool {
    (fp >> 40).is_multiple_of(5)
}

/// The members a token's walk visits.
enum WalkOrder {
    /// These, in this order.
    Members(Vec<Vec<u8>>),
    /// None yet: the home's listing gate is closed, or its clock behind the token's time.
    Waits,
    /// None: no home, or a time the listing does not know.
    Unwalked,
}

/// Where a tokened purchase's walk stops at one member.
enum TokenStop {
    /// Granted: afresh (true) or replayed (false).
    Granted(bool),
    /// Refused (recorded or replayed), or folded back: the walk goes on.
    Passed,
    /// `TRYAGAIN`, or a member not there: the walk ends undecided; the client retries later.
    Undecided,
}

/// The replica's replay of a step (the glue's `CTR.STEP`) on what it holds: why it did not
/// reach the master's state `keys` (one key), None when it did.
fn replay(
    replica: &BTreeMap<Vec<u8>, Counter>,
    step: &Step,
    keys: &[(Vec<u8>, Option<Counter>)],
) -> Option<String> {
    let [(key, Some(want))] = keys else {
        return Some("a step that wrote another key than its own".to_string());
    };
    let mut c = replica
        .get(key)
        .cloned()
        .unwrap_or_else(|| Counter::plain(0));
    let replayed = c.apply_step(key, step);
    (c != *want).then(|| {
        format!(
            "the replica's replay of {step:?} on {} ({replayed:?}) did not reach the master's \
             state",
            show(key)
        )
    })
}

/// A key that would carry an expiry in the glue: a folded holder whose fold was answered (the
/// glue sets the sealed grace period then).
fn expiring(c: &Counter) -> bool {
    c.is_sealed() && c.transfers().is_none_or(|t| t.outbox.is_empty())
}

/// The master a slot starts on (before any migration moves it).
fn first_master_of(slot: u16) -> usize {
    slot as usize % MASTERS
}

/// An atomic slot migration under way: while it runs neither node does module work on the
/// slot's keys (`Host::moving`); clients still write at the source, and the handoff takes the
/// slot's keys to the target as they are then.
#[derive(Debug, Clone, Copy)]
struct Migration {
    slot: u16,
    from: usize,
    to: usize,
}

/// A simulated master as the host of its transfer node: the glue's `RedisHost` over the
/// simulated keys, replication counts and network.
struct SimHost<'a> {
    sim: &'a mut Sim,
    master: usize,
}

impl SimHost<'_> {
    /// A machine writes only keys its master serves and that no migration is moving: a write
    /// on the source once a handoff began reaches neither the snapshot nor the stream, and is
    /// lost with the trimmed key (`runtime::slot_migration`, rule 1). Ghost state: the write
    /// itself lands on the key's master, so the checks would not see the loss.
    fn check_writable(&mut self, name: &[u8]) {
        if self.sim.write_error.is_none() && !self.serves(name) {
            self.sim.write_error = Some(format!(
                "master {} wrote {}, which it does not serve or which a migration moves",
                self.master,
                show(name)
            ));
        }
    }
}

impl Host for SimHost<'_> {
    type Peer = usize;

    fn now_ms(&self) -> i64 {
        self.sim.now
    }

    fn new_id(&mut self) -> u64 {
        self.sim.rng.id()
    }

    fn is_master(&self) -> bool {
        true
    }

    fn in_cluster(&self) -> bool {
        true
    }

    fn paused(&self) -> bool {
        false
    }

    fn serves(&self, name: &[u8]) -> bool {
        self.sim.master_of(name) == self.master && !self.moving(name)
    }

    fn refresh_routes(&mut self) {
        self.sim.maps_read_at[self.master] = self.sim.now;
    }

    fn link_address(&mut self, _to: &usize) -> Option<std::net::SocketAddr> {
        None // no read links: every request goes over the (simulated) bus
    }

    fn read_holder(&mut self, name: &[u8]) -> HolderAnswer {
        if self.sim.master_of(name) != self.master {
            return HolderAnswer::NotHere;
        }
        reads::holder_answer(self.sim.masters[self.master].keys.get(name))
    }

    fn route(&mut self, name: &[u8]) -> Route<usize> {
        match self.sim.seen_owner(self.master, name) {
            m if m == self.master => Route::Here,
            m => Route::To(m),
        }
    }

    fn moving(&self, name: &[u8]) -> bool {
        self.sim.migration.is_some_and(|mg| {
            key_slot(name) == mg.slot && (self.master == mg.from || self.master == mg.to)
        })
    }

    fn db(&self) -> i32 {
        0
    }

    fn select_db(&mut self, db: i32) -> bool {
        db == 0
    }

    fn read<R>(&self, name: &[u8], f: impl FnOnce(Option<&Counter>) -> R) -> Option<R> {
        Some(f(self.sim.masters[self.master].keys.get(name)))
    }

    fn write_step(&mut self, name: &[u8], step: Step) -> Result<StepOutcome, String> {
        self.check_writable(name);
        let answers = matches!(step, Step::Credit(_) | Step::Answer(_));
        let r = self.sim.take_step(name, step);
        if let Err(e) = &r {
            // An overflowing credit waits (the giver sends it again); any other refusal of a
            // credit or an answer the node decided to write is a defect.
            if answers && !matches!(e, TransferError::Counter(_)) && self.sim.replay_error.is_none()
            {
                self.sim.replay_error = Some(format!("a step on {} failed: {e:?}", show(name)));
            }
        }
        r.map_err(|e| format!("{e:?}"))
    }

    fn expire_at(&mut self, name: &[u8], at_ms: i64) {
        // Expiry is a step of its own (`expire_folded_holder`), at any time after this.
        self.sim
            .note(format_args!("{} expires at {at_ms}", show(name)));
    }

    fn living_home(&self, name: &[u8], spread_id: u64) -> Option<Vec<u8>> {
        self.sim.living_home(self.master, name, spread_id, name)
    }

    fn current_home(&mut self, carried: &[u8]) -> Vec<u8> {
        // The one home of the schedule, under its current name when it carries that spread.
        let home = self.sim.home.clone();
        let carries = |c: &Counter| {
            c.spread()
                .is_some_and(|s| carried_home(s.holders.iter().map(Vec::as_slice)) == Some(carried))
        };
        match self.sim.masters[self.master].keys.get(&home) {
            Some(c) if carries(c) => home,
            _ => carried.to_vec(),
        }
    }

    fn take_noted(&mut self) -> Vec<(i32, Vec<u8>)> {
        let noted = std::mem::take(&mut self.sim.masters[self.master].noted);
        noted.into_iter().map(|k| (0, k)).collect()
    }

    fn replication(&mut self) -> Option<Replication> {
        let m = &self.sim.masters[self.master];
        Some(Replication {
            master_offset: m.written as i64,
            slowest_replica: Some(m.replicated as i64),
        })
    }

    fn wait_for_replicas(&mut self, _now: &Replication) {
        // The replica catches up in its own steps.
    }

    fn send(&mut self, to: &usize, m: NodeMessage) {
        self.sim.check_round(&m);
        self.sim.check_verdict(&m);
        let (from, to) = (self.master, *to);
        self.sim.network.push(Message::Node { from, to, m });
    }

    fn slot_served_here(&mut self, name: &[u8]) -> Option<bool> {
        Some(self.sim.master_of(name) == self.master)
    }

    fn delete(&mut self, name: &[u8]) -> bool {
        self.check_writable(name);
        self.sim.note(format_args!(
            "collect {} on master {}",
            show(name),
            self.master
        ));
        self.sim.write(name, None, 0);
        true
    }

    fn collect_timeout_ms(&self) -> i64 {
        COLLECT_TIMEOUT_MS
    }

    fn slot_holds_home(&mut self, home: &[u8], spread_id: u64) -> Option<bool> {
        let slot = key_slot(home);
        let keys = &self.sim.masters[self.master].keys;
        Some(
            keys.iter()
                .any(|(k, c)| key_slot(k) == slot && collect::is_home_of(c, spread_id)),
        )
    }

    fn slot_home_lists(
        &mut self,
        home: &[u8],
        spread_id: u64,
        holder: &[u8],
        _limit: i64,
    ) -> Option<(bool, i64)> {
        let slot = key_slot(home);
        let keys = &self.sim.masters[self.master].keys;
        let in_slot: Vec<&Counter> = (keys.iter())
            .filter(|(k, _)| key_slot(k) == slot)
            .map(|(_, c)| c)
            .collect();
        let lists = |c: &&Counter| collect::is_home_of(c, spread_id) && lists_holder(c, holder);
        Some((in_slot.iter().any(lists), in_slot.len() as i64))
    }

    fn orphan_grace_ms(&self) -> i64 {
        self.sim.grace
    }

    fn count(&mut self, _event: Event) {}

    fn warn(&mut self, why: &str) {
        self.sim.note(format_args!("{why}"));
    }

    fn token_window_ms(&self) -> i64 {
        TOKEN_WINDOW_MS
    }

    fn holds_credits(&self) -> bool {
        false
    }
}

impl Sim {
    /// Runs one of master `master`'s machines (`machine` picks it) over it.
    fn run_machine<N: Default, R>(
        &mut self,
        master: usize,
        machine: fn(&mut Master) -> &mut N,
        f: impl FnOnce(&mut N, &mut SimHost) -> R,
    ) -> R {
        let mut node = std::mem::take(machine(&mut self.masters[master]));
        let r = f(&mut node, &mut SimHost { sim: self, master });
        *machine(&mut self.masters[master]) = node;
        r
    }

    fn new(seed: u64) -> Sim {
        let mut sim = Sim {
            rng: Rng(seed),
            masters: (0..MASTERS).map(|_| Master::default()).collect(),
            network: Vec::new(),
            now: 1_000_000,
            home: b"{sale}stock".to_vec(),
            floor: None,
            ceiling: None,
            expected: 0,
            faults: true,
            renamed: Vec::new(),
            grace: 0,
            rebalancing: true,
            deleted_unwaited: None,
            partition: None,
            same_ms: 0,
            replay_error: None,
            write_error: None,
            read_error: None,
            round: None,
            raised: 0,
            lowered: 0,
            bound_error: None,
            waiting_adds: Vec::new(),
            waiting_grow: false,
            check_error: None,
            check_names: BTreeMap::new(),
            reads: reads::Reads::new(seed),
            log: String::new(),
            tokens: Vec::new(),
            walked_lists: Vec::new(),
            waiting_walk: None,
            slot_owners: BTreeMap::new(),
            migration: None,
            last_handoff: None,
            maps_read_at: vec![0; MASTERS],
            migrations: Rng(seed ^ 0x5107_0000_0000_0002),
            clocks: Rng(seed ^ 0xC10C_0000_0000_0003),
            ceilings: Rng(seed ^ 0xCE11_0000_0000_0004),
        };
        for m in 0..MASTERS {
            sim.masters[m].clock_offset = sim.draw_clock_offset();
        }
        sim.grace = [0, 100, 1_000][sim.rng.below(3)];
        sim.same_ms = [0u64, 10, 50, 90][sim.rng.below(4)];
        sim.rebalancing = !sim.rng.percent(25);
        let floored = sim.rng.percent(50);
        sim.create_and_spread(floored);
        sim
    }

    /// The master serving `key`'s slot now.
    fn master_of(&self, key: &[u8]) -> usize {
        let slot = key_slot(key);
        self.slot_owners
            .get(&slot)
            .copied()
            .unwrap_or_else(|| first_master_of(slot))
    }

    /// The master serving `key`'s slot as master `by`'s slot map has it: the source of the
    /// last handoff, for a master that was neither end of it, within a second of it.
    fn seen_owner(&self, by: usize, key: &[u8]) -> usize {
        match self.last_handoff {
            Some((mg, at))
                if mg.slot == key_slot(key)
                    && by != mg.from
                    && by != mg.to
                    && self.maps_read_at[by] < at
                    && self.now - at < STALE_MAP_MS =>
            {
                mg.from
            }
            _ => self.master_of(key),
        }
    }

    fn note(&mut self, what: std::fmt::Arguments) {
        // CTR_SIM_TRACE=1 prints each step as it happens (a schedule that never ends).
        static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *TRACE.get_or_init(|| std::env::var_os("CTR_SIM_TRACE").is_some()) {
            eprintln!("{what}");
        }
        let _ = writeln!(self.log, "{what}");
    }

    fn get(&self, key: &[u8]) -> Option<&Counter> {
        self.masters[self.master_of(key)].keys.get(key)
    }

    /// One write on the key's master: the new state (None: deleted), replicated later.
    fn write(&mut self, key: &[u8], state: Option<Counter>, client_units: i64) {
        self.write_keys(vec![(key.to_vec(), state)], client_units);
    }

    /// One command writing keys of one slot (so of one master).
    fn write_keys(&mut self, keys: Vec<(Vec<u8>, Option<Counter>)>, client_units: i64) {
        self.write_replicated_as(keys, client_units, None);
    }

    /// A write whose replication is `step` when there is one, else the states it leaves.
    fn write_replicated_as(
        &mut self,
        keys: Vec<(Vec<u8>, Option<Counter>)>,
        client_units: i64,
        step: Option<Step>,
    ) {
        let owner = self.master_of(&keys[0].0);
        let m = &mut self.masters[owner];
        for (key, state) in &keys {
            match state {
                Some(c) => m.keys.insert(key.clone(), c.clone()),
                None => m.keys.remove(key),
            };
            if state.as_ref().is_some_and(has_transfers) {
                m.noted.push(key.clone());
            }
        }
        m.unreplicated.push_back(Pending {
            keys,
            client_units,
            step,
            token: None,
        });
        m.written += 1;
        self.expected += client_units;
        self.raised += client_units.max(0);
        self.lowered += client_units.saturating_neg().max(0);
    }

    /// The clock a change of the home's holder list is dated with (as the glue dates it): the
    /// home master's, past the skew allowed after it took the home over.
    fn list_clock(&self) -> ListClock {
        let m = self.master_of(&self.home);
        ListClock {
            now_ms: (self.masters[m].listing_gate).dating_clock(self.clock_of(m)),
            window_ms: TOKEN_WINDOW_MS,
        }
    }

    /// Master `m`'s clock.
    fn clock_of(&self, m: usize) -> i64 {
        self.now + self.masters[m].clock_offset
    }

    /// A machine's clock offset: the masters' clocks differ by at most [`CLOCK_SKEW_MS`], the
    /// allowance the listing gate dates by after a take-over (`ctr.clock-skew-ms`).
    fn draw_clock_offset(&mut self) -> i64 {
        self.clocks.below(CLOCK_SKEW_MS as usize + 1) as i64 - CLOCK_SKEW_MS / 2
    }

    /// Master `m` took homes over (a failover, a restart, an import): as the glue's
    /// `listing_gate::took_over`.
    fn took_over(&mut self, m: usize) {
        let now = self.clock_of(m);
        self.masters[m].listing_gate.took_over(now, CLOCK_SKEW_MS);
    }

    /// The clock a change of the home's holder list is dated with, the change counted by the
    /// home master's listing gate (as the glue's `list_change_clock`).
    fn list_change_clock(&mut self) -> ListClock {
        let home_master = self.master_of(&self.home);
        self.masters[home_master].listing_gate.changed();
        self.list_clock()
    }

    /// A shrink of the home to `target`, dated by the simulated clock.
    fn shrink_step(&mut self, target: usize, fold_ids: Vec<u64>) -> Step {
        Step::Shrink {
            target,
            fold_ids,
            clock: Some(self.list_change_clock()),
        }
    }

    /// One transfer or fold step on `key`'s master (`Counter::apply_step`, the glue's
    /// `write_step`), written when it changed anything and replicated as the step.
    fn take_step(&mut self, key: &[u8], step: Step) -> Result<StepOutcome, TransferError> {
        let before = self.get(key).cloned();
        let mut c = before.clone().unwrap_or_else(|| Counter::plain(0));
        let r = c.apply_step(key, &step);
        if before.as_ref() != Some(&c) && !(before.is_none() && c == Counter::plain(0)) {
            self.write_replicated_as(vec![(key.to_vec(), Some(c))], 0, Some(step));
        }
        r
    }

    /// A new counter under the home's name, floored or not, ceiled or not (one in three),
    /// spread to 2-5 holders; a bounded one sends each holder its shares as a budget move, as
    /// the glue does.
    fn create_and_spread(&mut self, floored: bool) {
        let home = self.home.clone();
        let id = spread_id_from(self.rng.next().to_le_bytes(), floored);
        let ceiled = self.ceilings.percent(33);
        let count = 3 + self.rng.below(4);
        let first = |_| first_attempt_for(ceiled, 0);
        let holders = plan_holders_avoiding(&home, id, &[], count, &Standalone, &|_| false, &first)
            .expect("free slots");
        let value = 20 + self.rng.below(80) as i64;
        let floor = floored.then(|| self.rng.below(10) as i64);
        let ceiling = ceiled.then(|| value + 5 + self.ceilings.below(40) as i64);
        let mut c = Counter::plain(value);
        if let Some(f) = floor {
            c.set_floor(Some(f)).expect("a floor below the value");
        }
        c.set_ceiling(ceiling).expect("a ceiling above the value");
        let spread = Spread {
            id,
            holders: holders.clone(),
            floor,
            ceiling,
        };
        c.list_spread(spread, self.list_change_clock())
            .expect("valid holders");
        self.write(&home, Some(c), value);
        (self.floor, self.ceiling) = (floor, ceiling);
        if ceiled {
            CEILED[0].fetch_add(1, Relaxed);
        }
        self.note(format_args!(
            "create {value} floor {floor:?} ceiling {ceiling:?}, spread {}",
            holders.len()
        ));
        self.send_shares(&holders);
        // One command in the glue (its writes replicate together), and the client waits.
        self.wait_replica(&home);
    }

    /// The home's first shares of a bounded spread to its holders: its headroom above its
    /// floor and below its ceiling, each split evenly over the home and `holders`, one move
    /// per holder (of 0 units too: its credit bounds the holder).
    fn send_shares(&mut self, holders: &[Vec<u8>]) {
        let Some(c) = self.home_counter() else {
            return;
        };
        let parts = holders.len() as i64 + 1;
        let share = Units {
            dv: 0,
            df: -c.floor().map_or(0, |f| (c.value() - f.floor) / parts),
            dc: c.ceiling().map_or(0, |x| (x.ceiling - c.value()) / parts),
        };
        if self.floor.is_none() && self.ceiling.is_none() {
            return;
        }
        let home = self.home.clone();
        for h in holders {
            self.start_move(&home, h, share);
        }
    }

    /// The client waits for the replica (WAIT) after a command that changes which keys make
    /// the counter (spread, grow, RENAME, DEL): a failover that loses such a command orphans
    /// every add acknowledged on its holders since, which is asynchronous replication's loss
    /// of acknowledged writes, not the protocol's.
    fn wait_replica(&mut self, key: &[u8]) {
        self.replicate_all(self.master_of(key));
    }

    /// A new holder's name as the glue's planner picks it: the next index, the home name the
    /// others carry, never a name the home `c` knows (nor an attempt at or below one it knows
    /// at that place, so that holders of one place are made in increasing attempts).
    fn new_holder_name(&self, c: &Counter, spread: &Spread) -> Option<Vec<u8>> {
        let names = &spread.holders;
        let home = carried_home(names.iter().map(Vec::as_slice)).unwrap_or(&self.home);
        // The names the home knows, and those its master's admission found taken lately.
        let admission = &self.masters[self.master_of(&self.home)].admission;
        let taken = |n: &[u8]| {
            c.transfers().is_some_and(|t| t.knows_name(n))
                || admission.known(n, self.now) == Some(Known::Taken)
        };
        let later = c.transfers().map(|t| t.first_attempts(spread.id));
        let ceiled = spread.ceiling.is_some();
        let first = |index| {
            first_attempt_for(
                ceiled,
                later.as_ref().map_or(0, |l| first_attempt_at(l, index)),
            )
        };
        let target = names.len() + 2;
        let mut added =
            plan_holders_avoiding(home, spread.id, names, target, &Standalone, &taken, &first)
                .ok()?;
        added.pop()
    }

    /// A key's budget of `kind` (0 for a missing key or one without that bound).
    fn budget(&self, key: &[u8], kind: BudgetKind) -> i64 {
        let bounded = |c: &&Counter| kind.bound(c).is_some();
        self.get(key).filter(bounded).map_or(0, |c| kind.budget(c))
    }

    /// Which budget a move of this spread carries: its floor's, its ceiling's, either (drawn
    /// from the ceilings' stream, so that floored schedules stay what they were), or none.
    fn draw_budget_kind(&mut self) -> Option<BudgetKind> {
        match (self.floor.is_some(), self.ceiling.is_some()) {
            (true, true) if self.ceilings.percent(50) => Some(BudgetKind::Up),
            (true, _) => Some(BudgetKind::Down),
            (false, true) => Some(BudgetKind::Up),
            (false, false) => None,
        }
    }

    /// What a token's members recorded is rolled back or gone (a backup restored, a copy or a
    /// rename over a key, a home deleted): outside the protocol's promise.
    fn forget_tokens(&mut self) {
        self.tokens.clear();
        self.walked_lists.clear();
    }

    /// A list the home answered for `at` is the list it answers for `at` now (while its
    /// master's clock has reached `at` and the listing still knows it).
    fn check_walked_lists(&self) -> Result<(), String> {
        let Some(home) = self.home_counter() else {
            return Ok(());
        };
        let now = self.clock_of(self.master_of(&self.home));
        for (at, walked) in &self.walked_lists {
            match home.holders_at(*at, now) {
                Ok(listed) if listed != *walked => {
                    return Err(format!(
                        "the holder list at {at} changed after a walk read it: {} then, {} now",
                        show_list(walked),
                        show_list(&listed)
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn home_counter(&self) -> Option<&Counter> {
        self.get(&self.home)
    }

    /// The home, its current holders and those still leaving it.
    fn members(&self) -> Vec<Vec<u8>> {
        let mut names = vec![self.home.clone()];
        if let Some(h) = self.home_counter() {
            names.extend(h.spread().map(|s| s.holders.clone()).unwrap_or_default());
            names.extend(h.leaving().iter().map(|l| l.name.clone()));
        }
        names
    }

    /// The glue's read of the total (ctr_spread's gather).
    fn total(&self) -> i64 {
        let Some(home) = self.home_counter() else {
            return 0;
        };
        let in_hand = |name: &Vec<u8>| self.get(name).map_or(0, |c| c.units_in_hand().unwrap());
        let current = home.spread().map(|s| s.holders.clone()).unwrap_or_default();
        home.value()
            + current.iter().map(in_hand).sum::<i64>()
            + home.leaving().iter().map(|l| in_hand(&l.name)).sum::<i64>()
    }

    fn start_move(&mut self, giver: &[u8], receiver: &[u8], units: Units) {
        let step = Step::Move {
            receiver: receiver.to_vec(),
            units,
            now_ms: self.now,
            new_id: self.rng.id(),
        };
        let started = match self.take_step(giver, step) {
            Ok(StepOutcome::Moved(o)) => Ok(o.seq),
            Ok(other) => panic!("a move gave {other:?}"),
            Err(e) => Err(e),
        };
        self.note(format_args!(
            "move {units:?} {} -> {}: {started:?}",
            show(giver),
            show(receiver),
        ));
    }

    fn step(&mut self) -> Result<(), String> {
        if !self.rng.percent(self.same_ms) {
            self.now += 1 + self.rng.below(50) as i64;
        }
        if self.faults && self.deleted_unwaited.is_none() && self.migrations.percent(3) {
            self.migration_step();
        }
        let roll = self.rng.below(100);
        let master = self.rng.below(MASTERS);
        // A client's write or a fault: a gathered read across it may differ from the total.
        if matches!(roll, 52..=69 | 93 | 94) || (self.faults && matches!(roll, 82..=95 | 98)) {
            self.reads.disturbances += 1;
        }
        if self.deleted_unwaited.is_some() {
            return self.step_while_deleted(roll, master);
        }
        if self.faults && matches!(roll, 87..=92 | 95 | 98) {
            // A backup restored, a copy or a rename over a key, a home deleted: what a token's
            // members recorded may be rolled back with them, outside the protocol's promise.
            self.forget_tokens();
        }
        match roll {
            0..=2 => self.move_lands_mid_round(),
            3..=29 => self.deliver(),
            30..=39 => self.tick(master),
            40..=51 => {
                self.replicate(master);
                return self.walk_waiting();
            }
            52..=61 => return self.client_add(),
            62..=69 => return self.purchase(),
            70..=73 => self.shrink(),
            74..=76 => self.grow(),
            77..=81 => self.budget_move(),
            82..=84 if self.faults => {
                self.failover(master);
                return self.retry_after_failover(master);
            }
            85..=86 if self.faults => self.restart(master),
            87 | 88 if self.faults => self.restore_copy(),
            89 if self.faults => self.restore_forged(),
            90 if self.faults => self.rename_sealed_holder(),
            91 if self.faults => self.rename_home(),
            92 if self.faults && self.rng.percent(40) => self.delete_home_and_spread_again(),
            92 if self.faults && self.rng.percent(50) => self.delete_home_unwaited(),
            92 if self.faults => self.home_restored_after_its_holders(),
            93 | 94 if self.rng.percent(25) => return self.walks_over_a_fold(),
            93 | 94 => self.expire_folded_holder(),
            95 if self.faults && self.rng.percent(50) => self.copy_holder(),
            95 if self.faults => self.sibling_move_outlives_its_receiver(),
            96 | 97 => self.purchase_beyond_a_holder(),
            98 if self.faults => return self.restore_home_copy(),
            99 if self.rng.percent(60) => self.audit_pass(master),
            99 => self.operator_deletes_reported(master, self.reported(master)),
            _ => self.tick(master),
        }
        Ok(())
    }

    /// An atomic slot migration of a member's slot: started (its keys' module work waits on
    /// both nodes), then handed over (the keys, as the source has them then, go to the
    /// target, which serves the slot from then on) or cancelled (one in four).
    fn migration_step(&mut self) {
        let Some(mg) = self.migration.take() else {
            // A member's slot mostly, else any key's (a look-alike at a name a grow plans, a
            // restored copy).
            let members: Vec<Vec<u8>> = if self.migrations.percent(70) {
                (self.members().into_iter())
                    .filter(|k| self.get(k).is_some())
                    .collect()
            } else {
                (self.masters.iter())
                    .flat_map(|m| m.keys.keys().cloned())
                    .collect()
            };
            if members.is_empty() {
                return;
            }
            let key = &members[self.migrations.below(members.len())];
            let from = self.master_of(key);
            let to = (from + 1 + self.migrations.below(MASTERS - 1)) % MASTERS;
            let slot = key_slot(key);
            self.note(format_args!(
                "migration of slot {slot} ({}) from master {from} to {to} starts",
                show(key)
            ));
            self.migration = Some(Migration { slot, from, to });
            return;
        };
        if self.migrations.percent(25) {
            self.note(format_args!("migration of slot {} cancelled", mg.slot));
            MIGRATIONS[1].fetch_add(1, Relaxed);
            return;
        }
        self.hand_over(mg);
    }

    /// The handoff: the source's keys of the slot go to the target, held by its replica too
    /// (the migration ends once the target has them; a failover of the target then keeps
    /// them), and are trimmed on the source. The target's node sends what they have to send.
    fn hand_over(&mut self, mg: Migration) {
        self.replicate_all(mg.from);
        let source = &mut self.masters[mg.from];
        let in_slot: Vec<Vec<u8>> = (source.keys.keys())
            .filter(|k| key_slot(k) == mg.slot)
            .cloned()
            .collect();
        let mut moved = Vec::new();
        for key in &in_slot {
            source.replica.remove(key);
            if let Some(c) = source.keys.remove(key) {
                moved.push((key.clone(), c));
            }
        }
        // Valkey trims the source's keys with a `del` event each, Redis without events; the
        // glue claims no trimmed home (`spread_collect::seen_ending_here`: the routing check
        // sends the name elsewhere by then), so the collector sees nothing of the trim.
        let target = &mut self.masters[mg.to];
        for (key, c) in moved {
            if has_transfers(&c) {
                target.noted.push(key.clone());
            }
            target.replica.insert(key.clone(), c.clone());
            target.keys.insert(key, c);
        }
        self.slot_owners.insert(mg.slot, mg.to);
        self.last_handoff = Some((mg, self.now));
        MIGRATIONS[0].fetch_add(1, Relaxed);
        if key_slot(&self.home) == mg.slot {
            // The target never dated the home's list changes (as after a restart), and a grow
            // waiting on the source's admission is answered MOVED.
            self.took_over(mg.to);
            self.waiting_grow = false;
        }
        // Writes waiting in the source for their holder checks are answered MOVED.
        self.waiting_adds.retain(|w| key_slot(&w.name) != mg.slot);
        self.note(format_args!(
            "slot {} handed over to master {} ({} keys)",
            mg.slot,
            mg.to,
            in_slot.len()
        ));
    }

    /// A step while the home is deleted and its `DEL` may still be lost: no client writes (a
    /// write would make a new counter under the name), the rest goes on; the operator's
    /// `CTR.ORPHANS DELETE` runs more often, as an operator cleaning up after a delete would.
    fn step_while_deleted(&mut self, roll: usize, master: usize) -> Result<(), String> {
        match roll {
            0..=29 => self.deliver(),
            40..=51 => self.replicate(master),
            82..=84 if self.faults => self.failover(master),
            85..=86 if self.faults => self.restart(master),
            60..=64 => self.restore_deleted_home(),
            90..=94 => self.audit_pass(master),
            95..=99 => self.operator_deletes_reported(master, self.reported(master)),
            _ => self.tick(master),
        }
        self.after_unwaited_delete();
        Ok(())
    }

    /// `DEL` of the home, and the client does not wait for the replica: every write before it
    /// reached the replicas (so a failover takes back only the `DEL`), and the home stays
    /// missing until the `DEL` reaches the replica or a failover loses it. The holders' audit
    /// answered `Gone` from the home's master must wait for that replica (the glue's gate):
    /// deleted on an answer a failover takes back, they would be lost with the home back.
    fn delete_home_unwaited(&mut self) {
        let home = self.home.clone();
        if self.home_counter().is_none() {
            return;
        }
        for m in 0..MASTERS {
            self.replicate_all(m);
        }
        self.note(format_args!("DEL {} (no WAIT)", show(&home)));
        let gone = self.expected;
        let Some(dump) = self.home_counter().cloned() else {
            return;
        };
        self.write(&home, None, -gone);
        self.claim_left(&home, collect::left_by(&home, &dump));
        self.deleted_unwaited = Some(Deleted {
            floor: self.floor.take(),
            ceiling: self.ceiling.take(),
            renamed: std::mem::take(&mut self.renamed),
            dump,
            units: gone,
        });
    }

    /// `RESTORE` of the deleted home's dump under its name (an operator's undo) while its
    /// master's collector still holds the claim the `DEL` made (waiting for the replica), and
    /// before any audit reported the spread: the collector must find the home again and leave
    /// its holders (`collect::still_to_collect`). Replicated at once, with the `DEL`.
    fn restore_deleted_home(&mut self) {
        let Some(d) = &self.deleted_unwaited else {
            return;
        };
        let (home, dump, units) = (self.home.clone(), d.dump.clone(), d.units);
        let m = self.master_of(&home);
        // Every holder the dump lists is still there (no collection nor operator took one).
        let current = dump.spread().map_or(&[][..], |s| s.holders.as_slice());
        let leaving = dump.leaving().iter().map(|l| &l.name);
        let untouched = current.iter().chain(leaving).all(|h| self.get(h).is_some());
        let spreads = collect::spreads_of(&dump);
        let waits = self.masters[m].collector.waits(0, &home, &spreads);
        // No audit answered it gone meanwhile: a home missing twice inside one grace with no
        // answer between looks like one absence (a known gap, docs/CLUSTER.md).
        let suspected = (self.masters.iter())
            .any(|r| spreads.iter().any(|&id| r.audit.audit().suspects_gone(id)));
        if self.get(&home).is_some() || !untouched || !waits || suspected {
            return;
        }
        self.note(format_args!(
            "RESTORE {} from its dump before its collection started",
            show(&home)
        ));
        self.forget_tokens();
        self.write(&home, Some(dump), units);
        self.replicate_all(m);
        // The server's `restore` event: the claims of the DEL there are undone.
        self.masters[m].collector.unclaim(0, &home, &spreads);
        // The model's bound (as after a backup restore): the audits ask again and find the
        // home before it can go missing again (two absences inside one grace with no answer
        // between look like one: a known gap, docs/CLUSTER.md).
        self.now += self.grace.max(audit::ASK_TIMEOUT_MS) + 1;
        self.audit_asks();
        self.deliver_audit_messages();
    }

    /// Ends the window of an unwaited `DEL`: a failover lost it (the counter is back with its
    /// floor), or the replica holds it (a new counter is made under the name, as a client
    /// would; what the old spread left is the audit's).
    fn after_unwaited_delete(&mut self) {
        if self.deleted_unwaited.is_none() {
            return;
        }
        if self.home_counter().is_some() {
            self.note(format_args!("the DEL was lost: the counter is back"));
            if let Some(deleted) = self.deleted_unwaited.take() {
                (self.floor, self.ceiling) = (deleted.floor, deleted.ceiling);
                self.renamed = deleted.renamed;
            }
        } else if !self.masters[self.master_of(&self.home)]
            .replica
            .contains_key(&self.home)
        {
            self.deleted_unwaited = None;
            let floored = self.rng.percent(50);
            self.create_and_spread(floored);
        }
    }

    fn deliver(&mut self) {
        if self.network.is_empty() {
            return;
        }
        let i = self.rng.below(self.network.len());
        let duplicated = self.faults && self.rng.percent(10);
        let m = if duplicated {
            self.network[i].clone()
        } else {
            self.network.swap_remove(i)
        };
        if self.faults && (self.rng.percent(15) || self.partitioned(&m)) {
            let what = describe(&m);
            self.note(format_args!("lost {what}"));
            return;
        }
        self.handle(m);
    }

    /// While a rebalance poll is out (else the home's master starts a round), every budget
    /// move in flight completes: its credit lands (at the home, or at a holder for the home's
    /// own move), the receiver's replica holds it, and the acknowledgement reaches the giver,
    /// all before any master answers the poll. The round then read one side of each move
    /// before it and the other after it. Without a round, a delivery.
    fn move_lands_mid_round(&mut self) {
        if self.polled_masters().is_empty() && !self.open_round() {
            return self.deliver();
        }
        self.note(format_args!("moves land mid-round"));
        self.holder_gives_home_mid_round();
        let is_move = |m: &Message| {
            matches!(
                m,
                Message::Node {
                    m: NodeMessage::Transfer(TransferMessage::Credit(_) | TransferMessage::Ack(_)),
                    ..
                }
            )
        };
        // Credits, then (their receivers' replicas holding them) the acknowledgements.
        for _ in 0..2 {
            let mut receivers = self.deliver_reachable(is_move);
            receivers.sort_unstable();
            receivers.dedup();
            receivers.into_iter().for_each(|m| self.send_transfers(m));
        }
        // The polls and their answers (none lost): the round ends, its bound told.
        self.deliver_every(|m| {
            matches!(
                m,
                NodeMessage::DemandPoll(_) | NodeMessage::DemandAnswer { .. }
            )
        });
    }

    /// Every message `kind` takes in flight that no partition holds back is delivered, and
    /// those they make of it too; the masters each went to, in delivery order.
    fn deliver_reachable(&mut self, kind: impl Fn(&Message) -> bool) -> Vec<usize> {
        let mut receivers = Vec::new();
        while let Some(i) = (self.network.iter()).position(|m| kind(m) && !self.partitioned(m)) {
            let m = self.network.swap_remove(i);
            let Message::Node { to, .. } = &m;
            receivers.push(*to);
            self.handle(m);
        }
        receivers
    }

    /// Master `m`'s replica catches up and its transfer node's timer fires: what it holds
    /// back for the replica (debits' credits, acknowledgements) goes out.
    fn send_transfers(&mut self, m: usize) {
        self.replicate_all(m);
        self.run_machine(m, |m| &mut m.transfers, |node, host| node.tick(host));
    }

    /// The masters a rebalance poll is on its way to.
    fn polled_masters(&self) -> Vec<usize> {
        (self.network.iter())
            .filter_map(|m| match m {
                Message::Node {
                    to,
                    m: NodeMessage::DemandPoll(_),
                    ..
                } => Some(*to),
                _ => None,
            })
            .collect()
    }

    /// Every message between machines of the kind `kind` in flight is delivered (none lost),
    /// and those they make of it too; the rest waits.
    fn deliver_every(&mut self, kind: impl Fn(&NodeMessage) -> bool) {
        while let Some(i) = (self.network.iter()).position(|Message::Node { m, .. }| kind(m)) {
            let m = self.network.swap_remove(i);
            self.handle(m);
        }
    }

    /// The home's master starts a rebalance round of the home now, as its timer does once a
    /// refusal made the home due. True when a poll went out (some holder on another master).
    fn open_round(&mut self) -> bool {
        if !self.rebalancing || self.round_kind().is_none() {
            return false;
        }
        let (home, master) = (self.home.clone(), self.master_of(&self.home));
        self.run_machine(
            master,
            |m| &mut m.rebalance,
            |node, host| node.rebalance(host, &home),
        );
        self.hurry_moves_started(master);
        !self.polled_masters().is_empty()
    }

    /// A holder with budget, on a master a poll is still on its way to, starts a move to the
    /// home and sends it (its replica holding the debit): the move then starts and ends inside
    /// the round, after the home was read and before the holder is.
    fn holder_gives_home_mid_round(&mut self) {
        let polled = self.polled_masters();
        let holders = (self.home_counter().and_then(|h| h.spread()))
            .map(|s| s.holders.clone())
            .unwrap_or_default();
        let Some(kind) = self.round_kind() else {
            return;
        };
        let givers: Vec<_> = (holders.into_iter())
            .filter(|h| polled.contains(&self.master_of(h)))
            .map(|h| (self.budget(&h, kind), h))
            .filter(|(budget, _)| *budget > 0)
            .collect();
        if givers.is_empty() {
            return;
        }
        let (budget, giver) = givers[self.rng.below(givers.len())].clone();
        let home = self.home.clone();
        let units = 1 + self.rng.below(budget as usize) as i64;
        self.start_move(&giver, &home, kind.units(units));
        self.send_transfers(self.master_of(&giver));
    }

    /// True when `m` is a credit across the partition in force.
    fn partitioned(&self, m: &Message) -> bool {
        let Some((from, to, until)) = self.partition else {
            return false;
        };
        let across =
            |c: &Credit| self.master_of(&c.giver) == from && self.master_of(&c.receiver) == to;
        let credit = |m: &Message| match m {
            Message::Node {
                m: NodeMessage::Transfer(TransferMessage::Credit(c)),
                ..
            } => Some(c.clone()),
            _ => None,
        };
        self.now < until && credit(m).is_some_and(|c| across(&c))
    }

    /// A budget move from a holder to a sibling (sent by a node from before every move went
    /// through the home), across a partition of their masters longer than the sealed grace:
    /// the receiver is shrunk away, sealed, folded and expires before the credit comes. The
    /// fresh name must not take it (a key made there would hold floor units no read counts),
    /// nor hold it "not yet" (the move, and its giver's fold, would wait for good): it is
    /// refused, and the giver rolls it back.
    fn sibling_move_outlives_its_receiver(&mut self) {
        let Some(spread) = self.home_counter().and_then(|h| h.spread()).cloned() else {
            return;
        };
        let Some(kind) = self.draw_budget_kind() else {
            return;
        };
        if spread.holders.len() < 2 {
            return;
        }
        let j = 1 + self.rng.below(spread.holders.len() - 1);
        let (giver, receiver) = (
            spread.holders[self.rng.below(j)].clone(),
            spread.holders[j].clone(),
        );
        let budget = self.budget(&giver, kind);
        let (from, to) = (self.master_of(&giver), self.master_of(&receiver));
        if budget <= 0 || from == to {
            return;
        }
        let until = self.now + 60_000;
        self.note(format_args!(
            "partition: credits from master {from} to master {to} lost until {until}"
        ));
        self.partition = Some((from, to, until));
        let units = 1 + self.rng.below(budget as usize) as i64;
        self.start_move(&giver, &receiver, kind.units(units));
        let home = self.home.clone();
        let target = j + 1; // the home and the holders before the receiver stay
        let needed = self.home_counter().map_or(0, |c| c.folds_needed(target));
        let fold_ids = (0..needed).map(|_| self.rng.id()).collect();
        let shrink = self.shrink_step(target, fold_ids);
        if let Ok(StepOutcome::Shrunk(gone)) = self.take_step(&home, shrink) {
            self.note(format_args!("shrink to {target}: {} leave", gone.len()));
        }
        for _ in 0..30 {
            self.now += TICK_MS;
            for m in 0..MASTERS {
                self.replicate_all(m);
                self.tick(m);
            }
            for m in std::mem::take(&mut self.network) {
                if self.partitioned(&m) {
                    self.note(format_args!("lost {}", describe(&m)));
                } else {
                    self.handle(m);
                }
            }
        }
        self.expire_folded_holder_at(&receiver, true);
        self.partition = None;
    }

    fn handle(&mut self, m: Message) {
        let what = describe(&m);
        self.note(format_args!("deliver {what}"));
        match m {
            Message::Node {
                from,
                to,
                m: NodeMessage::Transfer(m),
            } => self.run_machine(
                to,
                |m| &mut m.transfers,
                |node, host| node.receive(host, Some(from), m),
            ),
            Message::Node {
                from,
                to,
                m: m @ (NodeMessage::AuditAsk { .. } | NodeMessage::AuditAnswers { .. }),
            } => self.run_machine(
                to,
                |m| &mut m.audit,
                |node, host| node.receive(host, from, m),
            ),
            Message::Node {
                from,
                to,
                m:
                    m @ (NodeMessage::AdmissionRequest { .. } | NodeMessage::AdmissionResponse { .. }),
            } => {
                self.run_machine(
                    to,
                    |m| &mut m.admission,
                    |node, host| node.receive(host, from, m),
                );
                self.admission_ended(to);
            }
            Message::Node {
                from,
                to,
                m:
                    m @ (NodeMessage::HolderCheckRequest { .. }
                    | NodeMessage::HolderCheckResponse { .. }),
            } => {
                self.run_machine(
                    to,
                    |m| &mut m.holder_checks,
                    |node, host| node.receive(host, from, m),
                );
                self.checks_ended(to);
            }
            Message::Node {
                from,
                to,
                m:
                    m @ (NodeMessage::DemandNotice(_)
                    | NodeMessage::DemandPoll(_)
                    | NodeMessage::DemandAnswer { .. }
                    | NodeMessage::DemandGive(_)
                    | NodeMessage::Headroom(_)),
            } => {
                self.run_machine(
                    to,
                    |m| &mut m.rebalance,
                    |node, host| node.receive(host, from, m),
                );
                self.hurry_moves_started(to);
            }
            Message::Node {
                from,
                to,
                m: NodeMessage::GatherRequest { id, names, .. },
            } => self.run_machine(
                to,
                |m| &mut m.transfers, // no machine of its own: the answer is a read
                |_, host| {
                    let answers = gather_node::answer(host, &names);
                    host.send(&from, NodeMessage::GatherResponse { id, answers });
                },
            ),
            Message::Node {
                from,
                to,
                m: NodeMessage::GatherResponse { id, answers },
            } => {
                if to == self.reads.master {
                    let recorded = self.with_reads(|node, host, effects| {
                        node.on_response(host, &from, id, answers, effects)
                    });
                    if let Err(e) = recorded {
                        self.read_error.get_or_insert(e);
                    }
                }
            }
            Message::Node { from, to, m } => self.run_machine(
                to,
                |m| &mut m.collector,
                |node, host| node.receive(host, from, m),
            ),
        }
    }

    /// The timers of one master: its transfer node's (every key with something to send sends
    /// it once its replica holds the key's last write; answers go once the replica holds their
    /// credit), its collector's (claims started once the replica holds the `DEL`, collections
    /// sent again), and its audit's held answers (once the replica holds what they read).
    fn tick(&mut self, master: usize) {
        self.run_machine(master, |m| &mut m.transfers, |node, host| node.tick(host));
        self.run_machine(master, |m| &mut m.collector, |node, host| node.tick(host));
        self.run_machine(master, |m| &mut m.audit, |node, host| node.send_held(host));
        self.run_machine(master, |m| &mut m.rebalance, |node, host| node.expire(host));
        self.rebalance_round(master); // its rebalance timer, when a home is due
        self.run_machine(
            master,
            |m| &mut m.holder_checks,
            |node, host| node.tick(host),
        );
        self.checks_ended(master);
        self.run_machine(master, |m| &mut m.admission, |node, host| node.tick(host));
        self.admission_ended(master);
        if master == self.reads.master {
            if let Err(e) = self.with_reads(|node, host, _| node.resend_due(host)) {
                self.read_error.get_or_insert(e);
            }
        }
    }

    /// The replica receives the master's next 1-4 writes.
    fn replicate(&mut self, master: usize) {
        for _ in 0..1 + self.rng.below(4) {
            self.replicate_one(master);
        }
    }

    fn replicate_one(&mut self, master: usize) {
        let m = &mut self.masters[master];
        let Some(p) = m.unreplicated.pop_front() else {
            return;
        };
        m.replicated += 1;
        let diverged = p
            .step
            .as_ref()
            .and_then(|step| replay(&m.replica, step, &p.keys));
        for (key, state) in p.keys {
            match state {
                Some(c) => m.replica.insert(key, c),
                None => m.replica.remove(&key),
            };
        }
        if self.replay_error.is_none() {
            self.replay_error = diverged;
        }
    }
    fn failover(&mut self, master: usize) {
        let home_master = self.master_of(&self.home);
        let m = &mut self.masters[master];
        let lost: i64 = m.unreplicated.iter().map(|p| p.client_units).sum();
        let undecided: Vec<u64> = m.unreplicated.iter().filter_map(|p| p.token).collect();
        self.tokens.retain(|t| !undecided.contains(&t.fp));
        // A grow or shrink lost with the home's unreplicated writes changes the list at the
        // times after it; no walk read it (the listing gate opens once the replica holds it).
        m.keys = m.replica.clone();
        m.unreplicated.clear();
        m.written = m.replicated;
        m.restart_transfer_node();
        m.rebalance = RebalanceNode::default();
        m.holder_checks = HolderCheckNode::default();
        m.admission = AdmissionNode::default();
        // A grow waiting on its admission loses its connection with the home's master.
        self.waiting_grow &= master != home_master;
        // The writes waiting on its checks lose their connections: never written.
        self.waiting_adds.retain(|w| w.master != master);
        // The promoted replica claims nothing: a replicated `DEL` is no proof that a spread
        // ended (it may be a `MIGRATE`'s); what was not collected is left to the audit.
        m.collector = CollectNode::default();
        m.audit = AuditNode::new(self.rng.next());
        self.reads_lost(master);
        self.expected -= lost;
        self.raised += lost.saturating_neg().max(0); // purchases taken back
        self.lowered += lost.max(0); // adds taken back
                                     // A rename the replica never had is undone: the sealed holder is back under its listed
                                     // name (and may be renamed again), so this record of it goes too.
        let renamed = std::mem::take(&mut self.renamed);
        self.renamed = renamed
            .into_iter()
            .filter(|(_, to)| self.get(to).is_some())
            .collect();
        // The promoted replica is another machine: its clock is another.
        let clock = self.draw_clock_offset();
        self.masters[master].clock_offset = clock;
        self.took_over(master);
        self.note(format_args!(
            "failover of master {master} (lost {lost} client units, clock {clock:+} ms)"
        ));
    }

    fn restart(&mut self, master: usize) {
        self.replicate_all(master);
        let home_master = self.master_of(&self.home);
        let m = &mut self.masters[master];
        m.restart_transfer_node();
        m.rebalance = RebalanceNode::default();
        m.holder_checks = HolderCheckNode::default();
        m.admission = AdmissionNode::default();
        // A grow waiting on its admission loses its connection with the home's master.
        self.waiting_grow &= master != home_master;
        // The writes waiting on its checks lose their connections: never written.
        self.waiting_adds.retain(|w| w.master != master);
        // The lists loaded are not proven held (and dated past the skew allowed); pending
        // collections are lost with the process (the audit finds what they left).
        m.collector = CollectNode::default();
        m.audit = AuditNode::new(self.rng.next());
        self.reads_lost(master);
        self.took_over(master);
        self.note(format_args!("restart of master {master}"));
    }

    /// Where a writer sends an add or a purchase: the home, a current holder, or a leaving
    /// holder still there (a writer whose holder list is stale; a sealed one refuses). Not a
    /// leaving holder whose key is gone (renamed away): a write there makes a new key that no
    /// fold will carry home, the case the sealed grace period exists for (docs/CLUSTER.md).
    fn random_member(&mut self) -> Vec<u8> {
        let writable = self.writable_members();
        writable[self.rng.below(writable.len())].clone()
    }

    /// The members a writer may reach (see [`Sim::random_member`]).
    fn writable_members(&self) -> Vec<Vec<u8>> {
        let members: Vec<Vec<u8>> = self.members();
        let current = 1 + self
            .home_counter()
            .and_then(|h| h.spread())
            .map_or(0, |s| s.holders.len());
        let writable: Vec<Vec<u8>> = members
            .into_iter()
            .enumerate()
            .filter(|(i, name)| *i < current || self.get(name).is_some())
            .map(|(_, name)| name)
            .collect();
        writable
    }

    fn client_add(&mut self) -> Result<(), String> {
        let delta = self.rng.below(20) as i64 - 5;
        if self.rng.percent(10) {
            self.look_alike_add(delta);
            return Ok(());
        }
        if self.ceiling.is_some() && delta > 0 && self.rng.percent(40) {
            return self.add_walk(delta);
        }
        let key = self.random_member();
        self.add_to(key, delta);
        Ok(())
    }

    /// A client's walk of a positive add over every member of a ceiled spread in a random
    /// order, until one counts it or one answers `TRYAGAIN` (the clients' router under a
    /// ceiling). A walk every member refused for good is the client's final nil: checked
    /// against the up-budget in flight (the ghost check of [`Sim::walk_refused`], turned over).
    fn add_walk(&mut self, delta: i64) -> Result<(), String> {
        let mut walk = self.writable_members();
        for i in (1..walk.len()).rev() {
            walk.swap(i, self.rng.below(i + 1));
        }
        for key in walk {
            match self.add_counted(key, delta, true) {
                Walked::Granted | Walked::Retry => return Ok(()),
                Walked::Refused => {}
            }
        }
        CEILED[3].fetch_add(1, Relaxed);
        self.walk_refused(delta, BudgetKind::Up)
    }

    /// A client's add to a key named like a holder of the spread that its home does not list
    /// (the next name a grow would plan: a stale or forged list). Where no key sits, the
    /// write waits for the holder check of the key's master (`protocol::holder_check_node`,
    /// the glue's machine: the home's master asked over the network) and runs again once it
    /// ended: refused when the home does not list the name (a key made there would be counted
    /// by no total), on otherwise.
    fn look_alike_add(&mut self, delta: i64) {
        let Some(home) = self.home_counter().cloned() else {
            return;
        };
        let Some(spread) = home.spread() else {
            return;
        };
        // Half the time a holder a shrink took out of the list (a client's stale list): folding
        // back, its key may be gone under another name (a user's RENAME).
        let leaving = home.leaving().iter().map(|l| l.name.clone());
        let stale: Vec<Vec<u8>> = leaving.filter(|n| self.get(n).is_none()).collect();
        let name = match stale.is_empty() || self.rng.percent(50) {
            true => self.new_holder_name(&home, spread),
            false => Some(stale[self.rng.below(stale.len())].clone()),
        };
        let Some(name) = name else {
            return;
        };
        if self.get(&name).is_some() {
            return; // a key that exists is written as it is (a holder the protocol made)
        }
        if self.fold_carried_elsewhere(&name) {
            return self.note(format_args!("add to {}: folded back", show(&name)));
        }
        let m = self.master_of(&name);
        if let Some(verdict) = self.masters[m].holder_checks.known(&name, self.now) {
            return self.add_checked(name, delta, verdict);
        }
        let ask = |node: &mut HolderCheckNode<usize>, host: &mut SimHost| {
            node.ask(host, &name, CHECK_TIMEOUT_MS)
        };
        match self.run_machine(m, |m| &mut m.holder_checks, ask) {
            Asked::No => self.add_checked(name, delta, Verdict::Unsure), // goes on unchecked
            Asked::Here | Asked::Remote => {
                self.note(format_args!(
                    "add {delta} to {} waits for its check",
                    show(&name)
                ));
                self.waiting_adds.push(WaitingAdd {
                    master: m,
                    name,
                    delta,
                    due: false,
                });
            }
        }
    }

    /// A write to the missing key `name` run again once its holder check said `verdict`, as
    /// the glue runs it: refused when not listed, on otherwise. Its units count in the total
    /// only where the key is a member of the counter now: an unsure check lets a look-alike's
    /// write through (the documented leak), and a home deleted meanwhile leaves its holder
    /// counted by no total.
    fn add_checked(&mut self, name: Vec<u8>, delta: i64, verdict: Verdict) {
        self.note(format_args!("check of {}: {verdict:?}", show(&name)));
        let kind = match verdict {
            Verdict::Listed => 0,
            Verdict::NotListed => 1,
            Verdict::Unsure => 2,
        };
        CHECKED_WRITES[kind].fetch_add(1, Relaxed);
        if verdict != Verdict::NotListed {
            self.reads.disturbances += 1; // a client's write, as an add step's
            let member = self.members().contains(&name);
            self.add_counted(name, delta, member);
        }
    }

    /// The admission questions of `master` that ended since it last ran: a grow of the home
    /// waiting on one runs again, as the server runs the blocked command again.
    fn admission_ended(&mut self, master: usize) {
        let ended = self.masters[master].admission.take_ended();
        if self.waiting_grow && ended.contains(&self.home) {
            self.waiting_grow = false;
            self.grow();
        }
    }

    /// The holder checks of `master` that ended since it last ran: the writes waiting on them
    /// are due to run again.
    fn checks_ended(&mut self, master: usize) {
        let ended = self.masters[master].holder_checks.take_ended();
        for w in &mut self.waiting_adds {
            w.due |= w.master == master && ended.contains(&w.name);
        }
        self.rerun_checked_adds();
    }

    /// The writes whose checks ended run again, reading the verdict their master keeps (none
    /// kept any more: the write cannot wait again and goes on). The model runs them while the
    /// home is there (not inside a backup restore's window, nor an unwaited `DEL`'s), so that
    /// whether their units count is whether the name is a member then.
    fn rerun_checked_adds(&mut self) {
        if self.home_counter().is_none() || self.deleted_unwaited.is_some() {
            return;
        }
        let (runs, waits) = std::mem::take(&mut self.waiting_adds)
            .into_iter()
            .partition(|w| w.due);
        self.waiting_adds = waits;
        for w in runs {
            let verdict = self.masters[w.master]
                .holder_checks
                .known(&w.name, self.now);
            self.add_checked(w.name, w.delta, verdict.unwrap_or(Verdict::Unsure));
        }
    }

    /// True when a write would make the missing holder-named key `key` while the holder sealed
    /// and renamed away still folds back (`spread_holders::refuse_look_alike` asks the transfer
    /// node of the key's master, and refuses it with the folded-back error).
    fn fold_carried_elsewhere(&mut self, key: &[u8]) -> bool {
        if self.get(key).is_some() || parse_holder_name(key).is_none() {
            return false;
        }
        let carried = |node: &mut TransferNode<usize>, host: &mut SimHost| {
            node.fold_carried_elsewhere(host, key)
        };
        self.run_machine(self.master_of(key), |m| &mut m.transfers, carried)
    }

    /// A client's add of `delta` to `key`, as the glue decides it.
    fn add_to(&mut self, key: Vec<u8>, delta: i64) {
        self.add_counted(key, delta, true);
    }

    /// An add as the glue decides it; its units `counted` in the total or not (a key that is
    /// no member of the counter: acknowledged to the client, counted toward nothing).
    fn add_counted(&mut self, key: Vec<u8>, delta: i64, counted: bool) -> Walked {
        let now = self.now;
        // The glue's first check of a write making a holder-named key, also when it runs again
        // after its holder check.
        if self.fold_carried_elsewhere(&key) {
            self.note(format_args!("add to {}: folded back", show(&key)));
            return Walked::Refused;
        }
        let by_name = bounds_by_name(&key);
        // The budget it takes: room below a ceiling, or (negative) units above a floor.
        let wanted = BudgetKind::of_add(delta);
        let in_flight =
            |(kind, n): (BudgetKind, i64)| kind.waits_in_flight(self.get(&key), n, by_name, now);
        if let Some((kind, _)) = wanted.filter(|&w| in_flight(w)) {
            // TRYAGAIN, as the glue answers: nothing changes.
            if kind == BudgetKind::Up {
                CEILED[2].fetch_add(1, Relaxed);
            }
            self.note(format_args!("add {delta} at {} waits", show(&key)));
            return Walked::Retry;
        }
        let mut c = self.get(&key).cloned().unwrap_or_else(|| Counter::plain(0));
        if c.is_sealed() {
            return Walked::Refused; // the folded-back error
        }
        if let Some((kind, amount)) = wanted.filter(|&(k, n)| self.gathers(&key, &c, n, k)) {
            // TRYAGAIN: budget to gather; nothing changes but the demand recorded.
            self.note(format_args!(
                "add {delta} at {} waits to gather {kind:?} budget",
                show(&key)
            ));
            self.record_refusal(&key, amount, Some(now));
            return Walked::Retry;
        }

        let op = AddOp {
            now,
            event: now,
            delta,
            shard: 0,
            shards: c.shard_count(),
            token: None,
        };
        // A holder of a bounded spread is held at 0 by its name before its first credit.
        if let Ok(Some(_)) = c.apply_add_under(&op, by_name) {
            self.write(&key, Some(c), if counted { delta } else { 0 });
            let nowhere = if counted { "" } else { " (counted nowhere)" };
            self.note(format_args!("add {delta} to {}{nowhere}", show(&key)));
            return Walked::Granted;
        }
        if let Some((kind, amount)) = wanted {
            if kind == BudgetKind::Up && self.ceiling.is_some() {
                CEILED[1].fetch_add(1, Relaxed);
            }
            self.record_final_refusal(&key, &c, amount, kind);
        }
        Walked::Refused
    }

    /// A purchase at one member, or (one in three) a client's walk over every member in a
    /// random order until one grants it or one answers `TRYAGAIN`, as the clients' probe rule
    /// walks. A walk that every member refused for good is a final refusal the client records:
    /// it is checked against budget in flight (the ghost check of [`Sim::walk_refused`]).
    fn purchase(&mut self) -> Result<(), String> {
        if self.floor.is_none() {
            // An unfloored spread's tokened writes are adds (events, restocks): walked as a
            // purchase walks, new or retried.
            return match self.rng.percent(50) {
                true => self.token_purchase(),
                false => Ok(()),
            };
        }
        if self.rng.percent(30) {
            return self.token_purchase();
        }
        let mut amount = 1 + self.rng.below(6) as i64;
        if !self.rng.percent(33) {
            let key = self.random_member();
            self.purchase_at(&key, amount);
            return Ok(());
        }
        let mut walk = self.writable_members();
        if self.rng.percent(50) {
            // Just beyond what any member holds: every member refuses, unless one waits.
            let most = walk
                .iter()
                .filter_map(|k| self.get(k))
                .map(|c| c.value().saturating_sub(c.floor().map_or(0, |f| f.floor)))
                .max()
                .unwrap_or(0);
            amount = most.max(0) + 1 + self.rng.below(8) as i64;
        }
        for i in (1..walk.len()).rev() {
            walk.swap(i, self.rng.below(i + 1));
        }
        for key in &walk {
            match self.purchase_at(key, amount) {
                Walked::Granted | Walked::Retry => return Ok(()),
                Walked::Refused => {}
            }
        }
        self.walk_refused(amount, BudgetKind::Down)
    }

    /// A tokened purchase, new or (half the time) the retry of an earlier one, walking the
    /// holders in force at its time (`CTR.HOLDERS home AT at`, the home's listing) in an order
    /// from its token and the list's length (the clients' probe rule is such an order; a
    /// rotation here). Ghost check: a token is granted at most once, whatever grows, shrinks
    /// and folds came between its walks.
    fn token_purchase(&mut self) -> Result<(), String> {
        let retry = !self.tokens.is_empty() && self.rng.percent(50);
        if retry && self.rng.percent(50) {
            return self.refund_some_token(); // an order cancelled
        }
        let index = if retry {
            self.rng.below(self.tokens.len())
        } else {
            let fp = self.rng.id();
            self.tokens.push(TokenWalk {
                fp,
                at: self.now,
                amount: 1 + self.rng.below(6) as i64,
                add: self.floor.is_none() || is_add_token(fp),
                granted: 0,
                refunded: 0,
            });
            self.tokens.len() - 1
        };
        self.walk_token(index)
    }

    /// The refund of a purchase: mostly one that was granted (a refund of any other walks to
    /// nil), new or the retry of a refund.
    fn refund_some_token(&mut self) -> Result<(), String> {
        let granted: Vec<usize> = (0..self.tokens.len())
            .filter(|&i| self.tokens[i].granted > 0 && !self.tokens[i].add)
            .collect();
        let index = if !granted.is_empty() && self.rng.percent(80) {
            granted[self.rng.below(granted.len())]
        } else {
            self.rng.below(self.tokens.len())
        };
        self.walk_refund(index)
    }

    /// True when the home master's listing gate lets `CTR.HOLDERS home AT` answer: its
    /// replica holds its latest holder list change.
    fn listing_gate_open(&mut self) -> bool {
        let owner = self.master_of(&self.home);

        let m = &mut self.masters[owner];
        m.listing_gate
            .open(m.written as i64, Some(m.replicated as i64))
    }

    /// After a failover of the home's master, half the time, the latest tokened purchase is
    /// retried at once (its client's connection broke with the master): the walk that a lost
    /// grow or shrink would send over another list.
    fn retry_after_failover(&mut self, master: usize) -> Result<(), String> {
        if master != self.master_of(&self.home) || self.tokens.is_empty() || !self.rng.percent(50) {
            return Ok(());
        }
        self.walk_token(self.tokens.len() - 1)
    }

    /// The purchase waiting for the listing gate, walked if the gate opened.
    fn walk_waiting(&mut self) -> Result<(), String> {
        let Some(fp) = self.waiting_walk else {
            return Ok(());
        };
        if !self.listing_gate_open() {
            return Ok(());
        }
        self.waiting_walk = None;
        self.reads.disturbances += 1; // a client's write, as a purchase step's
        match self.tokens.iter().position(|t| t.fp == fp) {
            Some(index) => self.walk_token(index),
            None => Ok(()), // forgotten (a failover lost its decision, a restore)
        }
    }

    /// The walk of the token at `index` over the list at its time, once the listing gate
    /// lets the home answer (else it waits, replacing an earlier waiting walk: that client's
    /// bound passed).
    fn walk_token(&mut self, index: usize) -> Result<(), String> {
        let walk = self.tokens[index];
        let order = match self.walk_order(&walk) {
            WalkOrder::Members(order) => order,
            WalkOrder::Waits => {
                self.waiting_walk = Some(walk.fp);
                return Ok(());
            }
            WalkOrder::Unwalked => return Ok(()),
        };
        for key in &order {
            let stop = if walk.add {
                self.token_add_at(key, &walk)
            } else {
                self.token_purchase_at(key, &walk)
            };
            match stop {
                TokenStop::Granted(afresh) => return self.granted(index, afresh),
                TokenStop::Passed => {}
                TokenStop::Undecided => return Ok(()),
            }
        }
        Ok(())
    }

    /// The refund of the token at `index`, walking the members its purchase walks, in the same
    /// order, until one gives the grant back or replays its refund (the clients' refund walk).
    /// Ghost check: a token is refunded at most once, and only after a grant.
    fn walk_refund(&mut self, index: usize) -> Result<(), String> {
        let walk = self.tokens[index];
        // A refund waiting for the home's listing is retried by its client later.
        let WalkOrder::Members(order) = self.walk_order(&walk) else {
            return Ok(());
        };
        for key in &order {
            match self.refund_at(key, &walk) {
                TokenStop::Granted(afresh) => return self.refunded(index, afresh),
                TokenStop::Passed => {}
                TokenStop::Undecided => return Ok(()),
            }
        }
        Ok(())
    }

    /// The members a walk of `walk`'s token visits, in order: the home and the holders in force
    /// at its time (`CTR.HOLDERS home AT at`), from the member its token picks.
    fn walk_order(&mut self, walk: &TokenWalk) -> WalkOrder {
        if !self.listing_gate_open() {
            return WalkOrder::Waits;
        }
        let Some(home) = self.home_counter() else {
            return WalkOrder::Unwalked;
        };
        let now = self.clock_of(self.master_of(&self.home));
        let listed = match home.holders_at(walk.at, now) {
            Ok(listed) => listed,
            // The home's clock has not reached the token's time: the client waits for it (its
            // library asks again), and walks what the home lists then.
            Err(ListedAtError::Ahead { .. }) => return WalkOrder::Waits,
            // A time the listing does not know: the clients walk the current list (not modelled).
            Err(ListedAtError::Unknown { .. }) => return WalkOrder::Unwalked,
        };
        self.walked_lists.retain(|(at, _)| *at != walk.at);
        if self.walked_lists.len() == 16 {
            self.walked_lists.remove(0);
        }
        self.walked_lists.push((walk.at, listed.clone()));
        let mut list: Vec<Vec<u8>> = std::iter::once(self.home.clone()).chain(listed).collect();
        let start = (walk.fp % list.len() as u64) as usize;
        list.rotate_left(start);
        WalkOrder::Members(list)
    }

    /// The ghost's count of a walk's refund.
    fn refunded(&mut self, index: usize, afresh: bool) -> Result<(), String> {
        let walk = &mut self.tokens[index];
        if afresh {
            walk.refunded += 1;
        } else if walk.refunded == 0 {
            return Err(format!(
                "the purchase token {:x} of time {} had a refund replayed that was never given",
                walk.fp, walk.at
            ));
        }
        if walk.refunded > walk.granted.min(1) {
            return Err(format!(
                "the purchase token {:x} of time {} was refunded {} times, granted {} times",
                walk.fp, walk.at, walk.refunded, walk.granted
            ));
        }
        Ok(())
    }

    /// A refund at one member, as the glue decides it ([`Counter::refund_plan`]): a grant is
    /// given back once, a refund replays, a folded holder refuses a grant it still holds.
    fn refund_at(&mut self, key: &[u8], walk: &TokenWalk) -> TokenStop {
        let now = self.now;
        let Some(c) = self.get(key) else {
            return TokenStop::Undecided;
        };
        let units = match c.refund_plan(walk.fp, now) {
            Ok(RefundPlan::NoGrant) => return TokenStop::Passed,
            Ok(RefundPlan::Replay(_)) => {
                REFUNDS[1].fetch_add(1, Relaxed);
                return TokenStop::Granted(false);
            }
            Ok(RefundPlan::Folded { landed: false, .. }) => {
                REFUNDS[2].fetch_add(1, Relaxed);
                return TokenStop::Undecided;
            }
            Ok(RefundPlan::Folded { units, .. }) => return self.refund_at_home(walk, units),
            Err(_) => return TokenStop::Undecided,
            Ok(RefundPlan::Give(units)) => units,
        };
        let mut c = c.clone();
        let op = RefundOp {
            now,
            fp: walk.fp,
            units,
            shard: 0,
            shards: c.shard_count(),
        };
        if c.apply_refund(&op).is_err() {
            return TokenStop::Undecided;
        }
        self.write_tokened(key, c, units, walk.fp);
        REFUNDS[0].fetch_add(1, Relaxed);
        self.note(format_args!(
            "token {:x} of {} at {}: refunded {units}",
            walk.fp,
            walk.at,
            show(key)
        ));
        TokenStop::Granted(true)
    }

    /// A refund that a folded holder sends home (its fold landed): the client's
    /// `CTR.ADD home units TOKEN <home_refund_token>`, which a retry replays.
    fn refund_at_home(&mut self, walk: &TokenWalk, units: i64) -> TokenStop {
        let (home, now) = (self.home.clone(), self.now);
        // A home gone: the client's add would make a new counter (not modelled).
        let Some(c) = self.get(&home) else {
            return TokenStop::Undecided;
        };
        let fp = token_fingerprint(home_refund_token(walk.fp).as_bytes());
        match c.token_use(fp, WriteKind::Add(units), now) {
            TokenUse::Retry(_) => {
                REFUNDS[1].fetch_add(1, Relaxed);
                return TokenStop::Granted(false);
            }
            TokenUse::Conflict => return TokenStop::Undecided,
            TokenUse::New => {}
        }
        let Ok(expires_at) = token_expiry(now, now, TOKEN_WINDOW_MS, TOKEN_WINDOW_MS) else {
            return TokenStop::Undecided;
        };
        let mut c = c.clone();
        let op = AddOp {
            now,
            event: now,
            delta: units,
            shard: 0,
            shards: c.shard_count(),
            token: Some(TokenStamp { fp, expires_at }),
        };
        if !matches!(c.apply_add(&op), Ok(Some(_))) {
            return TokenStop::Undecided;
        }
        self.write_tokened(&home, c, units, walk.fp);
        REFUNDS[3].fetch_add(1, Relaxed);
        self.note(format_args!(
            "token {:x} of {}: refunded {units} at the home after its fold",
            walk.fp, walk.at
        ));
        TokenStop::Granted(true)
    }

    /// The ghost's count of a walk's grant.
    fn granted(&mut self, index: usize, afresh: bool) -> Result<(), String> {
        let walk = &mut self.tokens[index];
        if afresh {
            walk.granted += 1;
        }
        if walk.granted > 1 {
            let (what, done) = if walk.add {
                ("add", "counted")
            } else {
                ("purchase", "granted")
            };
            return Err(format!(
                "the {what} token {:x} of time {} was {done} twice",
                walk.fp, walk.at
            ));
        }
        Ok(())
    }

    /// A tokened purchase at one member, as the glue decides it: a remembered token replays
    /// (also on a folded holder), a folded holder passes any other, then as [`Sim::purchase_at`].
    fn token_purchase_at(&mut self, key: &[u8], walk: &TokenWalk) -> TokenStop {
        let now = self.now;
        let Some(c) = self.get(key) else {
            return TokenStop::Undecided;
        };
        if let Some(stop) =
            known_or_sealed(c, c.token_use(walk.fp, WriteKind::Decr(walk.amount), now))
        {
            return stop;
        }
        let mut c = c.clone();
        if purchase_waits_for_budget(Some(&c), walk.amount, floor_by_name(key), now) {
            return TokenStop::Undecided;
        }
        if self.gathers(key, &c, walk.amount, BudgetKind::Down) {
            self.record_refusal(key, walk.amount, Some(now));
            return TokenStop::Undecided;
        }
        let Ok(expires_at) = token_expiry(walk.at, now, TOKEN_WINDOW_MS, TOKEN_WINDOW_MS) else {
            return TokenStop::Undecided;
        };
        let op = DecrOp {
            now,
            event: walk.at,
            amount: walk.amount,
            shard: 0,
            shards: c.shard_count(),
            token: Some(TokenStamp {
                fp: walk.fp,
                expires_at,
            }),
        };
        let decided = match c.apply_decrement(&op) {
            Ok(Some(_)) => TokenStop::Granted(true),
            Ok(None) => TokenStop::Passed,
            Err(_) => return TokenStop::Undecided,
        };
        let units = match decided {
            TokenStop::Granted(_) => -walk.amount,
            _ => {
                self.record_final_refusal(key, &c, walk.amount, BudgetKind::Down);
                0
            }
        };
        self.write_tokened(key, c, units, walk.fp);
        self.note(format_args!(
            "token {:x} of {} at {}: {}",
            walk.fp,
            walk.at,
            show(key),
            if units < 0 { "granted" } else { "refused" }
        ));
        decided
    }

    /// A tokened add at one member, as the glue decides it: a remembered token replays (also
    /// on a folded holder); a folded holder waits for its fold to land, then passes any
    /// other on (the clients send it to another member); any other member counts it.
    fn token_add_at(&mut self, key: &[u8], walk: &TokenWalk) -> TokenStop {
        let now = self.now;
        let Some(c) = self.get(key) else {
            return TokenStop::Undecided;
        };
        let used = c.token_use(walk.fp, WriteKind::Add(walk.amount), now);
        let new = matches!(used, TokenUse::New);
        if let Some(stop) = known_or_sealed(c, used) {
            match stop {
                TokenStop::Granted(_) => TOKENED_ADDS[1].fetch_add(1, Relaxed),
                TokenStop::Undecided if new => TOKENED_ADDS[2].fetch_add(1, Relaxed),
                _ => 0,
            };
            return stop;
        }
        let by_name = bounds_by_name(key);
        if add_waits_for_up_budget(Some(c), walk.amount, by_name.ceiling, now) {
            CEILED[2].fetch_add(1, Relaxed);
            return TokenStop::Undecided; // TRYAGAIN: nothing recorded
        }
        let c = c.clone();
        if self.gathers(key, &c, walk.amount, BudgetKind::Up) {
            self.record_refusal(key, walk.amount, Some(now));
            return TokenStop::Undecided;
        }
        let Ok(expires_at) = token_expiry(walk.at, now, TOKEN_WINDOW_MS, TOKEN_WINDOW_MS) else {
            return TokenStop::Undecided;
        };
        let mut c = c;
        let op = AddOp {
            now,
            event: walk.at,
            delta: walk.amount,
            shard: 0,
            shards: c.shard_count(),
            token: Some(TokenStamp {
                fp: walk.fp,
                expires_at,
            }),
        };
        match c.apply_add_under(&op, by_name) {
            Ok(Some(_)) => {}
            Ok(None) => {
                // Refused by the member's ceiling, and remembered: a retry here replays it,
                // and the walk goes on to the next member.
                CEILED[1].fetch_add(1, Relaxed);
                self.record_final_refusal(key, &c, walk.amount, BudgetKind::Up);
                self.write_tokened(key, c, 0, walk.fp);
                self.note(format_args!(
                    "add token {:x} of {} at {}: refused by its ceiling",
                    walk.fp,
                    walk.at,
                    show(key)
                ));
                return TokenStop::Passed;
            }
            Err(_) => return TokenStop::Undecided,
        }
        self.write_tokened(key, c, walk.amount, walk.fp);
        TOKENED_ADDS[0].fetch_add(1, Relaxed);
        self.note(format_args!(
            "add token {:x} of {} at {}: counted",
            walk.fp,
            walk.at,
            show(key)
        ));
        TokenStop::Granted(true)
    }

    /// A client's tokened write of `c` at `key` (`units` into the total), its token `fp`
    /// tagged on the write: a failover that loses the write forgets the token's walk.
    fn write_tokened(&mut self, key: &[u8], c: Counter, units: i64, fp: u64) {
        self.write(key, Some(c), units);
        let owner = self.master_of(key);
        if let Some(p) = self.masters[owner].unreplicated.back_mut() {
            p.token = Some(fp);
        }
    }

    /// True when a refusal at `key` (of a purchase of `amount`: down-budget; of an add of
    /// `amount`: up-budget) waits for budget the rebalance round gathers (`TRYAGAIN`).
    fn gathers(&mut self, key: &[u8], c: &Counter, amount: i64, kind: BudgetKind) -> bool {
        let now = self.now;
        let owner = self.master_of(key);
        let book = &mut self.masters[owner].rebalance.book;
        let named = (key, bounds_by_name(key));
        kind.waits_to_gather(named, c, amount, self.rebalancing, |spread_id| {
            book.refusal_fate((0, spread_id), amount, now)
        })
    }

    /// A write of `kind` refused for good at `key` by `c`: demand where the glue records it
    /// ([`BudgetKind::refusal_is_demand`]).
    fn record_final_refusal(&mut self, key: &[u8], c: &Counter, amount: i64, kind: BudgetKind) {
        if kind.refusal_is_demand(key, Some(c)) {
            self.record_refusal(key, amount, None);
        }
    }

    /// A purchase refused afresh at `key` (for good, or told to retry while budget gathers
    /// since `waiting_since`), recorded on its master as the glue records it: the demand a
    /// round moves budget toward.
    fn record_refusal(&mut self, key: &[u8], amount: i64, waiting_since: Option<i64>) {
        let rebalancing = self.rebalancing;
        let owner = self.master_of(key);

        let node = &mut self.masters[owner].rebalance;
        node.record_refusal((0, key.to_vec()), amount, waiting_since, rebalancing);
    }

    /// A purchase of `amount` at `key`, as the glue decides it.
    fn purchase_at(&mut self, key: &[u8], amount: i64) -> Walked {
        let now = self.now;
        if purchase_waits_for_budget(self.get(key), amount, floor_by_name(key), self.now) {
            // TRYAGAIN, as the glue answers: nothing changes, nothing is recorded.
            self.note(format_args!("purchase {amount} at {} waits", show(key)));
            return Walked::Retry;
        }
        let mut c = self.get(key).cloned().unwrap_or_else(|| Counter::plain(0));
        if c.is_sealed() {
            return Walked::Refused; // the folded-back error: the walk goes on
        }
        if self.gathers(key, &c, amount, BudgetKind::Down) {
            // TRYAGAIN: budget to gather; nothing changes but the demand recorded.
            self.note(format_args!(
                "purchase {amount} at {} waits to gather",
                show(key)
            ));
            self.record_refusal(key, amount, Some(now));
            return Walked::Retry;
        }
        let op = DecrOp {
            now,
            event: now,
            amount,
            shard: 0,
            shards: c.shard_count(),
            token: None,
        };
        if let Ok(Some(_)) = c.apply_decrement(&op) {
            self.write(key, Some(c), -amount);
            self.note(format_args!("purchase {amount} at {}", show(key)));
            return Walked::Granted;
        }
        self.record_final_refusal(key, &c, amount, BudgetKind::Down);
        Walked::Refused
    }

    /// Ghost check of a walk every member refused for good (a refusal the client makes final,
    /// records against its token): no budget move of `kind` was on its way to a member that,
    /// landed, would have covered it. Budget that travels must make the walk wait
    /// (`TRYAGAIN`), never refuse for good what the stock (the room under the ceiling) covers.
    fn walk_refused(&mut self, amount: i64, kind: BudgetKind) -> Result<(), String> {
        self.note(format_args!("walk for {amount} refused everywhere"));
        let members = self.members();
        for giver in &members {
            let Some(g) = self.get(giver) else { continue };
            for o in g.transfers().map(|t| t.outbox.as_slice()).unwrap_or(&[]) {
                let moved = kind.moved(o.units());
                let moves_budget = o.fold_id == 0 && moved > 0;
                if !moves_budget || self.applied(giver, g, o) || !members.contains(&o.receiver) {
                    continue;
                }
                // A move unanswered for longer than the bound is stuck by design (a partition, a
                // migration that long): refusals are final again, its units err low, never sold.
                if debited_ms(o.seq) < self.now.saturating_sub(MOVE_IN_FLIGHT_MS) {
                    continue;
                }
                let Some(r) = self.get(&o.receiver).filter(|r| !r.is_sealed()) else {
                    continue;
                };
                if kind.budget_after(r, moved) >= amount {
                    return Err(format!(
                        "a walk for {amount} refused for good while {moved} {kind:?} units \
                         travel from {} to {}, which would cover it",
                        show(giver),
                        show(&o.receiver)
                    ));
                }
            }
        }
        Ok(())
    }

    fn shrink(&mut self) {
        let Some(count) = self
            .home_counter()
            .and_then(|h| h.spread())
            .map(Spread::count)
        else {
            return;
        };
        let target = 1 + self.rng.below(count);
        let home = self.home.clone();
        let needed = self.home_counter().map_or(0, |c| c.folds_needed(target));
        let fold_ids = (0..needed).map(|_| self.rng.id()).collect();
        let shrink = self.shrink_step(target, fold_ids);
        if let Ok(StepOutcome::Shrunk(gone)) = self.take_step(&home, shrink) {
            self.note(format_args!("shrink to {target}: {} leave", gone.len()));
        }
    }

    fn grow(&mut self) {
        let Some(mut c) = self.home_counter().cloned() else {
            return;
        };
        let Some(mut spread) = c.spread().cloned() else {
            return self.spread_again(c);
        };
        if spread.holders.len() >= 6 {
            return;
        }
        let Some(name) = self.new_holder_name(&c, &spread) else {
            return;
        };
        // The holder admission (the glue's machine): the name's master says whether a key sits
        // there; the grow waits in the server until an answer ends its question, and runs again
        // then (`admission_ended`).
        let names = [name.clone()];
        let home = self.home.clone();
        let ask = |node: &mut AdmissionNode<usize>, host: &mut SimHost| {
            node.all_known_free(host, &home, &names, CHECK_TIMEOUT_MS).0
        };
        if !self.run_machine(self.master_of(&home), |m| &mut m.admission, ask) {
            self.note(format_args!(
                "grow waits for the admission of {}",
                show(&name)
            ));
            self.waiting_grow = true;
            return;
        }
        if self.get(&name).is_some() {
            // A key made there after its free answer would be adopted (the documented window
            // of one bus round trip, docs/CLUSTER.md): not modelled.
            return;
        }
        spread.holders.push(name.clone());
        if c.list_spread(spread, self.list_change_clock()).is_err() {
            return; // two holders in one slot: the planner would pick another name
        }
        let home = self.home.clone();
        self.write(&home, Some(c), 0);
        self.note(format_args!("grow: {}", show(&name)));
        if self.floor.is_some() || self.ceiling.is_some() {
            self.start_move(&home, &name, Units::default());
        }
        self.wait_replica(&home);
    }

    /// `CTR.SPREAD home n` on a home shrunk to 1 (the glue's grow of a counter not spread): a
    /// new spread id, never one the home retired, while the old spread's holders may still
    /// be folding back; a floored home sends each new holder a share.
    fn spread_again(&mut self, mut c: Counter) {
        let bounded = self.floor.is_some() || self.ceiling.is_some();
        if bounded && !c.leaving().is_empty() {
            return;
        }
        let home = self.home.clone();
        let floored = self.floor.is_some();
        let id = loop {
            let id = spread_id_from(self.rng.next().to_le_bytes(), floored);
            if !c.has_retired(id) {
                break id;
            }
        };
        let count = 2 + self.rng.below(4);
        let ceiled = self.ceiling.is_some();
        let first = |_| first_attempt_for(ceiled, 0);
        let planned = plan_holders_avoiding(&home, id, &[], count, &Standalone, &|_| false, &first);
        let Ok(holders) = planned else {
            return;
        };
        let spread = Spread {
            id,
            holders: holders.clone(),
            floor: self.floor,
            ceiling: self.ceiling,
        };
        if c.list_spread(spread, self.list_change_clock()).is_err() {
            return;
        }
        self.write(&home, Some(c), 0);
        self.note(format_args!("spread again {id:x}: {}", holders.len()));
        self.send_shares(&holders);
        self.wait_replica(&home);
    }

    /// The rebalance timer of one master (`ctr.rebalance-delay-ms` after its first refusal,
    /// the glue's job): every home due (its holders refused there, or a notice came) is
    /// rebalanced by the node, under its current name.
    fn rebalance_round(&mut self, master: usize) {
        if !self.rebalancing {
            return;
        }
        self.run_machine(
            master,
            |m| &mut m.rebalance,
            |node, host| {
                for (db, carried) in node.take_due() {
                    if host.select_db(db) {
                        let home = host.current_home(&carried);
                        node.rebalance(host, &home);
                    }
                }
            },
        );
        self.hurry_moves_started(master);
    }

    /// The glue's hand-off after the rebalancer ran: the moves its gives started are sent at
    /// the transfer node's next tick.
    fn hurry_moves_started(&mut self, master: usize) {
        let started = self.masters[master].rebalance.take_moves_started();
        for (_, giver) in started {
            self.run_machine(
                master,
                |m| &mut m.transfers,
                |node, host| node.hurry(host, &giver),
            );
        }
    }

    /// Ghost check of the rebalancer's rounds, as its messages leave a master: a poll starts
    /// a round; the whole headroom a round tells is never below the lowest true headroom since
    /// it began, less what clients added meanwhile (units it missed would make a refusal final
    /// that the stock covers; an add after a member's report is a bound's known staleness).
    fn check_round(&mut self, m: &NodeMessage) {
        let truth = self.true_headroom();
        match (m, truth) {
            (NodeMessage::DemandPoll(p), Some(t)) if self.round.is_none_or(|r| r.0 != p.id) => {
                ROUNDS_POLLED.fetch_add(1, Relaxed);
                self.round = Some((p.id, t, self.room_added()));
            }
            (NodeMessage::DemandGive(_), _) => {
                GIVES.fetch_add(1, Relaxed);
            }
            (NodeMessage::Headroom(h), _) => {
                BOUNDS_CHECKED.fetch_add(1, Relaxed);
                if let Some((_, lowest, _)) = self.round.filter(|r| h.units < r.1) {
                    self.bound_error = Some(format!(
                        "a round's bound {} is below the headroom {lowest}",
                        h.units
                    ));
                }
            }
            _ => {}
        }
    }

    /// Ghost check of the holder checks' answers, as they leave the home's master: a name
    /// the home does not list now is never answered listed (a look-alike's units would then
    /// count toward no total while its writer was told they were taken); and of the holder
    /// admission's: a name where a key sits is never answered free (a grow would list it,
    /// and the total would count the key).
    fn check_verdict(&mut self, m: &NodeMessage) {
        match m {
            NodeMessage::HolderCheckRequest { id, holder: name }
            | NodeMessage::AdmissionRequest { id, name } => {
                self.check_names.insert(*id, name.clone());
            }
            NodeMessage::AdmissionResponse {
                id,
                answer: NameAnswer::Free,
            } => {
                let Some(name) = self.check_names.get(id) else {
                    return;
                };
                if self.get(name).is_some() {
                    self.check_error =
                        Some(format!("{} answered free, a key sits there", show(name)));
                }
            }
            NodeMessage::HolderCheckResponse {
                id,
                verdict: Verdict::Listed,
            } => {
                let Some(holder) = self.check_names.get(id) else {
                    return;
                };
                let members = self.members();
                let listed = self.home_counter().is_some_and(|h| lists_holder(h, holder));
                if !listed || !members.contains(holder) {
                    self.check_error =
                        Some(format!("{} answered listed, not listed", show(holder)));
                }
            }
            _ => {}
        }
    }

    /// After a step: the round under way keeps the lowest true headroom it saw, less what
    /// clients added since it began.
    fn track_round(&mut self) {
        if let (Some((id, lowest, raised)), Some(t)) = (self.round, self.true_headroom()) {
            let t = t.saturating_sub(self.room_added() - raised);
            self.round = Some((id, lowest.min(t), raised));
        }
    }

    /// A purchase just beyond what one member holds (a hot holder's buyer): refused there or
    /// told to retry while budget gathers, its demand recorded for the rounds; then every
    /// master's rebalance timer.
    fn purchase_beyond_a_holder(&mut self) {
        match self.round_kind() {
            Some(BudgetKind::Down) => {
                let key = self.random_member();
                let budget = self.get(&key).map_or(0, Counter::budget);
                let amount = budget.max(0) + 1 + self.rng.below(3) as i64;
                self.purchase_at(&key, amount);
            }
            Some(BudgetKind::Up) => {
                // An add just beyond the room one member has (a hot holder's writer).
                let key = self.random_member();
                let room = self.get(&key).map_or(0, |c| BudgetKind::Up.budget(c));
                let delta = room.max(0) + 1 + self.rng.below(3) as i64;
                self.add_counted(key, delta, true);
            }
            None => {}
        }
        (0..MASTERS).for_each(|m| self.rebalance_round(m));
    }

    /// The counter's true headroom now (None: not floored, or its home deleted): every
    /// unit above the floor but those of budget moves stuck past `MOVE_IN_FLIGHT_MS` (by
    /// design they leave the bound: a refusal may then be false, never an oversell).
    fn true_headroom(&self) -> Option<i64> {
        let (kind, home) = (self.round_kind()?, self.home_counter()?);
        let mut current = vec![self.home.clone()];
        current.extend(home.spread().map(|s| s.holders.clone()).unwrap_or_default());
        let now = self.now;
        let stuck: i64 = (current.iter().filter_map(|k| self.get(k)))
            .map(|c| c.budget_moving_out(kind, 0) - c.budget_moving_out(kind, now))
            .sum();
        let room = match kind {
            BudgetKind::Down => self.total() - self.floor?,
            BudgetKind::Up => self.ceiling? - self.total(),
        };
        Some(room - stuck)
    }

    /// The budget the rounds move (the rebalancer's rule, `BudgetKind::of_member` of the
    /// home): a floor's, else a ceiling's.
    fn round_kind(&self) -> Option<BudgetKind> {
        match (self.floor, self.ceiling) {
            (Some(_), _) => Some(BudgetKind::Down),
            (None, Some(_)) => Some(BudgetKind::Up),
            (None, None) => None,
        }
    }

    /// What clients did since a round began that makes room its reports could not count:
    /// units added above a floor, units taken away below a ceiling.
    fn room_added(&self) -> i64 {
        match self.round_kind() {
            Some(BudgetKind::Up) => self.lowered,
            _ => self.raised,
        }
    }

    fn budget_move(&mut self) {
        let Some(kind) = self.draw_budget_kind() else {
            return;
        };
        // The planner moves budget between the home and its current holders, as the glue
        // routes a plan across masters (`rebalance::through_the_home`).
        let mut current = vec![self.home.clone()];
        if let Some(s) = self.home_counter().and_then(|h| h.spread()) {
            current.extend(s.holders.iter().cloned());
        }
        let (giver, receiver) = (self.rng.below(current.len()), self.rng.below(current.len()));
        let budget = |sim: &Sim, i: usize| sim.budget(&current[i], kind);
        let planned = budget(self, giver);
        if giver == receiver || planned <= 0 {
            return;
        }
        let units = 1 + self.rng.below(planned as usize) as i64;
        let plan = Move {
            giver,
            receiver,
            units,
        };
        for m in through_the_home(&[plan]) {
            // The giver's master moves at most what the giver holds now (it decides alone).
            let units = m.units.min(budget(self, m.giver));
            if units > 0 {
                let (from, to) = (current[m.giver].clone(), current[m.receiver].clone());
                self.start_move(&from, &to, kind.units(units));
            }
        }
    }

    /// DUMP of a giver with transfers in flight, RESTORE under a name outside the spread or
    /// under another holder-shaped name of the same spread. Not of a home: a home restored
    /// under another name is a second home of the same holders and folds (the alias of the
    /// spread issue, still open: docs/CLUSTER.md), which this simulator would report.
    fn restore_copy(&mut self) {
        let mut with_transfers: Vec<(Vec<u8>, Counter)> = Vec::new();
        for m in &self.masters {
            for (k, c) in &m.keys {
                // A copy of writes a failover may take back would resurrect them: that is
                // asynchronous replication (DUMP reads the master), not the protocol, so the
                // simulated DUMP takes state the replica holds.
                let home = c.spread().is_some() || !c.leaving().is_empty();
                let durable = m.replica_holds(k);
                if durable && !home && c.transfers().is_some_and(|t| !t.outbox.is_empty()) {
                    with_transfers.push((k.clone(), c.clone()));
                }
            }
        }
        if with_transfers.is_empty() {
            return;
        }
        let (from, c) = with_transfers.swap_remove(self.rng.below(with_transfers.len()));
        let id = self
            .home_counter()
            .and_then(|h| h.spread())
            .map_or(7, |s| s.id);
        let name = if self.rng.percent(50) {
            format!("copy:{}", self.rng.below(1000)).into_bytes()
        } else {
            holder_name(&self.home, id, 900 + self.rng.below(50), 0)
        };
        if self.members().contains(&name) || self.get(&name).is_some() {
            return;
        }
        let mut c = c;
        let dropped = c.drop_foreign_transfers(&name); // the glue's rule on RESTORE
        self.note(format_args!(
            "restore {} as {} ({dropped} dropped)",
            show(&from),
            show(&name)
        ));
        self.write(&name, Some(c), 0);
    }

    /// RESTORE of a forged payload under a name a tenant may write (`atk:<n>`, or a
    /// holder-shaped name with this spread's public id and the tenant's own home): its outbox
    /// claims a transfer debited at a member, a fold credit with the fold id the home's DUMP
    /// shows (signed with the leaving holder's name, or with the forger's own), or a budget move
    /// from the home or a holder to another member.
    /// The glue's rule runs on it (`drop_foreign_transfers`); the checks catch any unit a
    /// forged credit mints or destroys.
    fn restore_forged(&mut self) {
        let Some(home) = self.home_counter().cloned() else {
            return;
        };
        let id = home.spread().map_or(7, |s| s.id);
        let name = if self.rng.percent(50) {
            format!("atk:{}", self.rng.below(1000)).into_bytes()
        } else {
            holder_name(b"atk", id, 900 + self.rng.below(50), 0)
        };
        if self.get(&name).is_some() {
            return;
        }
        let new_id = 1 + self.rng.below(1 << 30) as u64;
        let leaving = home.leaving().to_vec();
        let mut forged = Counter::plain(1_000_000);
        let made = if !leaving.is_empty() && self.rng.percent(50) {
            let l = &leaving[self.rng.below(leaving.len())];
            // Signed with the leaving holder's name, or with the forger's own (kept on RESTORE).
            let signer = if self.rng.percent(50) { &l.name } else { &name };
            let giver = Giver {
                name: signer,
                new_id,
            };
            forged
                .seal_into(&self.home, l.fold_id, self.now, giver)
                .map(|_| ())
        } else {
            let members = self.members();
            let from = members[self.rng.below(members.len())].clone();
            let to = members[self.rng.below(members.len())].clone();
            let _ = forged.set_floor(Some(0));
            let giver = Giver {
                name: &from,
                new_id,
            };
            let units = 1 + self.rng.below(1000) as i64;
            forged
                .start_transfer(&to, Units::floor(-units), self.now, giver)
                .map(|_| ())
        };
        if made.is_err() {
            return;
        }
        let dropped = forged.drop_foreign_transfers(&name);
        self.note(format_args!(
            "restore a forged outbox as {} ({dropped} dropped)",
            show(&name)
        ));
        self.write(&name, Some(forged), 0);
    }

    /// A purchase granted by the spread's last holder (on a floored spread), a shrink that
    /// folds that holder, the fold's messages delivered (those a partition does not hold),
    /// then the purchase's refund: the folded holder has it wait for the fold to land, then
    /// sends it home (its units went home with the fold: the client's tokened add there), and
    /// no unit comes back twice, once in the fold and once in the refund. In a third of the
    /// fault schedules the fold stops after one round for a purchase and a tokened add (only
    /// the add on an unfloored spread) over the list before the shrink, and the holder's master
    /// fails over before they are walked again.
    fn walks_over_a_fold(&mut self) -> Result<(), String> {
        let Some(count) = self
            .home_counter()
            .and_then(|h| h.spread())
            .map(Spread::count)
        else {
            return Ok(());
        };
        let at = self.now;
        let refunded = self
            .floor
            .is_some()
            .then(|| self.walk_from_the_last_holder(count, at, false));
        if refunded.is_some() {
            self.walk_token(self.tokens.len() - 1)?;
        }
        let home = self.home.clone();
        let needed = self.home_counter().map_or(0, |c| c.folds_needed(count - 1));
        let fold_ids = (0..needed).map(|_| self.rng.id()).collect();
        let shrink = self.shrink_step(count - 1, fold_ids);
        if !matches!(self.take_step(&home, shrink), Ok(StepOutcome::Shrunk(_))) {
            return Ok(());
        }
        self.note(format_args!(
            "shrink to {}, then walks over the fold",
            count - 1
        ));
        let mut late = Vec::new();
        if self.faults && self.rng.percent(33) {
            // One round: the holder seals, and its fold's credit waits for its replica to hold
            // the seal. A refund, and a purchase and a tokened add of the list before the
            // shrink, meet the seal; then the holder's master fails over.
            self.fold_rounds(1);
            if let Some(fp) = refunded {
                self.walk_fp(fp, Sim::walk_refund)?;
                late.push(self.walk_from_the_last_holder(count, at, false));
                self.walk_token(self.tokens.len() - 1)?;
            }
            late.push(self.walk_from_the_last_holder(count, at, true));
            self.walk_token(self.tokens.len() - 1)?;
            self.fail_over_the_last_holder();
        }
        self.fold_rounds(3);
        for fp in late {
            self.walk_fp(fp, Sim::walk_token)?;
        }
        match refunded {
            Some(fp) => self.walk_fp(fp, Sim::walk_refund),
            None => Ok(()),
        }
    }

    /// A new purchase walk (`add`: a tokened add's) of one unit over the list at `at` (of
    /// `count` members: the home, the holders), its token picked so that the walk starts at
    /// the last holder.
    fn walk_from_the_last_holder(&mut self, count: usize, at: i64, add: bool) -> u64 {
        let n = count as u64;
        let fp = self.rng.id() / n * n + (n - 1);
        self.tokens.push(TokenWalk {
            fp,
            at,
            amount: 1,
            add,
            granted: 0,
            refunded: 0,
        });
        fp
    }

    /// `walk` (a purchase's or a refund's) of the token `fp`, unless a failover that lost its
    /// decisions forgot it.
    fn walk_fp(
        &mut self,
        fp: u64,
        walk: fn(&mut Sim, usize) -> Result<(), String>,
    ) -> Result<(), String> {
        match self.tokens.iter().position(|t| t.fp == fp) {
            Some(index) => walk(self, index),
            None => Ok(()),
        }
    }

    /// The master of the holder folding back fails over (when it is not the home's): a seal
    /// its replica lacked is lost, the holder takes writes again and is sealed anew later. A
    /// refund sent home on the strength of that seal would now be given a second time.
    fn fail_over_the_last_holder(&mut self) {
        let leaving = self
            .home_counter()
            .and_then(|h| h.leaving().last().cloned());
        let Some(holder) = leaving.map(|l| l.name) else {
            return;
        };
        let master = self.master_of(&holder);
        if master != self.master_of(&self.home) {
            self.note(format_args!("fail over the master of {}", show(&holder)));
            self.failover(master);
        }
    }

    /// `rounds` rounds of transfers: every master sends, every reachable message is delivered.
    fn fold_rounds(&mut self, rounds: usize) {
        for _ in 0..rounds {
            self.now += TICK_MS;
            (0..MASTERS).for_each(|m| self.send_transfers(m));
            self.deliver_reachable(|_| true);
        }
    }

    /// A folded holder's key expires (its grace period over): sealed, its fold answered, no
    /// longer leaving, and nothing owed to it (the grace period, the token window, is long next
    /// to the resends that answer a move toward it; a partition longer than that is
    /// [`Sim::sibling_move_outlives_its_receiver`]).
    fn expire_folded_holder(&mut self) {
        let done: Vec<Vec<u8>> = self
            .masters
            .iter()
            .flat_map(|m| m.keys.keys())
            .filter(|k| self.may_expire(k, false))
            .cloned()
            .collect();
        if done.is_empty() {
            return;
        }
        let key = done[self.rng.below(done.len())].clone();
        self.note(format_args!("expire {}", show(&key)));
        self.write(&key, None, 0);
    }

    /// Expires the folded holder `key` when it may (see [`Sim::expire_folded_holder`]);
    /// `but_sibling_moves`: also while a sibling's budget move toward it is unanswered.
    fn expire_folded_holder_at(&mut self, key: &[u8], but_sibling_moves: bool) {
        if self.may_expire(key, but_sibling_moves) {
            self.note(format_args!("expire {}", show(key)));
            self.write(key, None, 0);
        }
    }

    /// True when `key` is a folded holder whose grace period may end: sealed, its fold
    /// answered, no longer leaving, nothing owed to it (but a sibling's move, when asked).
    fn may_expire(&self, key: &[u8], but_sibling_moves: bool) -> bool {
        let leaving = self
            .home_counter()
            .is_some_and(|h| h.leaving().iter().any(|l| l.name == key));
        // The expiry the answer set comes after the sealed grace (60 s at least): the replica
        // holds the holder's last write by then (and, in order, the home's credit before it
        // when both are on one master).
        self.get(key)
            .is_some_and(|c| c.is_sealed() && c.transfers().is_none_or(|t| t.outbox.is_empty()))
            && !leaving
            && !self.owed(key, but_sibling_moves)
            && self.masters[self.master_of(key)].replica_holds(key)
    }

    /// COPY of a holder under a name outside the spread: the copy keeps the units but none of
    /// the transfer state (the type's copy callback), so it is an independent counter; a
    /// sealed holder is never copied (refused).
    fn copy_holder(&mut self) {
        let Some(spread) = self.home_counter().and_then(|h| h.spread()).cloned() else {
            return;
        };
        let from = spread.holders[self.rng.below(spread.holders.len())].clone();
        let Some(mut c) = self.get(&from).cloned().filter(|c| !c.is_sealed()) else {
            return;
        };
        let close = from.iter().position(|&b| b == b'}').unwrap_or(0);
        let mut to = from[..=close].to_vec();
        to.extend_from_slice(format!("copy:{}", self.rng.below(1000)).as_bytes());
        if self.get(&to).is_some() {
            return;
        }
        c.forget_transfers();
        self.note(format_args!("copy {} {}", show(&from), show(&to)));
        self.write(&to, Some(c), 0);
    }

    /// True when a transfer toward `name` is unanswered or a message to it is on its way;
    /// `but_sibling_moves`: other than a budget move from a holder.
    fn owed(&self, name: &[u8], but_sibling_moves: bool) -> bool {
        let sibling_move = |fold_id: u64, from: &[u8]| {
            but_sibling_moves && fold_id == 0 && parse_holder_name(from).is_some()
        };
        let addressed = |m: &Message| match m {
            Message::Node {
                m: NodeMessage::Transfer(m),
                ..
            } => match m {
                TransferMessage::Seal(s) => s.holder == name,
                TransferMessage::Credit(c) => {
                    c.receiver == name && !sibling_move(c.fold_id, &c.from)
                }
                TransferMessage::Ack(a) => a.giver == name,
            },
            Message::Node { .. } => false,
        };
        let in_outbox = self.masters.iter().flat_map(|m| &m.keys).any(|(giver, c)| {
            let outbox = c.transfers().map(|t| t.outbox.as_slice()).unwrap_or(&[]);
            outbox.iter().any(|o| {
                let from = if o.from.is_empty() { giver } else { &o.from };
                o.receiver == name && !sibling_move(o.fold_id, from)
            })
        });
        in_outbox || self.network.iter().any(addressed)
    }

    /// RENAME within one slot: one command, replicated (or lost) whole.
    fn rename(&mut self, from: &[u8], to: &[u8]) {
        let Some(c) = self.get(from).cloned() else {
            return;
        };
        self.note(format_args!("rename {} {}", show(from), show(to)));
        self.write_keys(vec![(to.to_vec(), Some(c)), (from.to_vec(), None)], 0);
    }

    /// A user renames a sealed holder whose fold credit is still unanswered: the credit, sent
    /// from the new name, still ends the fold once (it carries the fold and the giver's id).
    /// Not while a transfer toward the holder is unanswered or a message to it is on its way:
    /// a key that a user deletes or renames away is fresh again under its name, and an old
    /// credit landing there is judged anew (a holder key is part of the counter; the known
    /// gap in docs/CLUSTER.md).
    fn rename_sealed_holder(&mut self) {
        let Some(home) = self.home_counter() else {
            return;
        };
        let leaving: Vec<Vec<u8>> = home.leaving().iter().map(|l| l.name.clone()).collect();
        let sealed = leaving
            .into_iter()
            .find(|n| self.get(n).is_some_and(|c| c.is_sealed()));
        let sealed = sealed.filter(|n| !self.owed(n, false));
        if let Some(from) = sealed {
            // The same slot: the holder's hash tag, another name after it.
            let close = from.iter().position(|&b| b == b'}').unwrap_or(0);
            let mut to = from[..=close].to_vec();
            to.extend_from_slice(format!("renamed:{}", self.rng.below(1000)).as_bytes());
            if self.get(&to).is_none() {
                self.rename(&from, &to);
                self.renamed.push((from, to));
            }
        }
    }

    /// RENAME of the home, but not while a budget move toward it is in flight: such a move
    /// stays addressed to the old name and waits there (its floor units err low, never lost
    /// or minted), and the holder it comes from cannot be folded meanwhile: a known gap,
    /// docs/CLUSTER.md.
    fn rename_home(&mut self) {
        let to = format!("{{sale}}stock:{}", self.rng.below(1000)).into_bytes();
        if self.get(&to).is_some() || self.home_counter().is_none() {
            return;
        }
        let from = self.home.clone();
        self.rename(&from, &to);
        self.wait_replica(&to);
        self.home = to;
    }

    /// A backup restored offline in which the home comes back after its holders, within the
    /// grace (the operator's bound for it): while the home is missing, nothing but the audits
    /// runs (every master's walk, its questions and answers, the gate of a `Gone` answer), and
    /// the operator deletes whatever they report at once; then the home is back as it was, and
    /// every master's replica holds the restore. Nothing may be lost: a spread is reported only
    /// when answered gone twice, the grace apart.
    fn home_restored_after_its_holders(&mut self) {
        if self.grace == 0 {
            return; // without a grace the audit may not wait for a restore
        }
        let home = self.home.clone();
        let Some(saved) = self.home_counter().cloned() else {
            return;
        };
        let back_at = self.now + self.rng.below(self.grace as usize) as i64;
        self.note(format_args!(
            "backup restore: {} missing until {back_at}",
            show(&home)
        ));
        self.write(&home, None, 0);
        // Half the time the bus keeps a copy of the answers sent while the home is missing
        // and delivers it late, after the home is back.
        let keep_late = self.rng.percent(50);
        let mut late: Vec<Message> = Vec::new();
        loop {
            self.audit_asks();
            if keep_late {
                late.extend(self.network.iter().filter(|m| is_gone_answer(m)).cloned());
            }
            self.deliver_audit_messages();
            for m in 0..MASTERS {
                let reported = self.reported(m);
                self.operator_deletes_reported(m, reported);
            }
            let next = self.now + 1 + self.rng.below(self.grace as usize / 4 + 1) as i64;
            if next >= back_at {
                break;
            }
            self.now = next;
        }
        let spreads = collect::spreads_of(&saved);
        self.write(&home, Some(saved), 0);
        // The server's `restore` event: claims of a deletion there are undone.
        let owner = self.master_of(&home);
        self.masters[owner].collector.unclaim(0, &home, &spreads);
        // The model's bound: the audit asks again (and finds the home) before the next
        // restore: the answers held during the absence land, then a new ask. Two restores of
        // one home inside a grace, with no answer between, look like one absence as long as
        // the grace (a known gap, docs/CLUSTER.md). The late copies land first, past the grace,
        // while the new asks are out: an operator deletes what they made reported before the
        // fresh answers come (a late "gone" must never pass for the answer to a new ask).
        for _ in 0..2 {
            self.now += self.grace.max(audit::ASK_TIMEOUT_MS) + 1;
            self.audit_asks();
            if !late.is_empty() {
                self.note(format_args!(
                    "{} late audit answer(s) delivered",
                    late.len()
                ));
                for m in std::mem::take(&mut late) {
                    self.handle(m);
                }
                for m in 0..MASTERS {
                    let reported = self.reported(m);
                    self.operator_deletes_reported(m, reported);
                }
            }
            self.deliver_audit_messages();
            self.release_held_answers();
        }
    }

    /// Answers held for replicas (a batch with a `Gone` in it waits, its `Lives` too) go once
    /// every master's replica holds its writes, and are delivered: the runtime asks again every
    /// `ASK_TIMEOUT_MS`, so an answer that finds the home comes between two restores of it.
    fn release_held_answers(&mut self) {
        for m in 0..MASTERS {
            self.replicate_all(m);
            self.run_machine(m, |m| &mut m.audit, |node, host| node.send_held(host));
        }
        self.deliver_audit_messages();
    }

    /// Every master's audit walks and asks, its replica holds every write and its held
    /// answers go out (nothing delivered yet).
    fn audit_asks(&mut self) {
        for m in 0..MASTERS {
            self.audit_pass(m);
            self.replicate_all(m);
            self.tick(m);
        }
    }

    /// Every write of master `m` reaches its replica.
    fn replicate_all(&mut self, m: usize) {
        while !self.masters[m].unreplicated.is_empty() {
            self.replicate_one(m);
        }
    }

    /// The audits' questions and answers in flight are delivered (none lost), the rest waits.
    fn deliver_audit_messages(&mut self) {
        self.deliver_every(|m| {
            matches!(
                m,
                NodeMessage::AuditAsk { .. } | NodeMessage::AuditAnswers { .. }
            )
        });
    }

    /// DEL of the home (the counter is gone: its total with it) and a new counter spread under
    /// the same name: none of the old holders' units may come in.
    fn delete_home_and_spread_again(&mut self) {
        let home = self.home.clone();
        self.note(format_args!("DEL {}", show(&home)));
        // The deleted counter's units go with it (and come back if a failover loses the DEL).
        let gone = self.expected;
        // Writes not yet replicated belong to the deleted counter whatever happens to them.
        for m in &mut self.masters {
            for p in &mut m.unreplicated {
                p.client_units = 0;
            }
        }
        let left = self
            .home_counter()
            .map(|c| collect::left_by(&home, c))
            .unwrap_or_default();
        self.write(&home, None, -gone);
        self.renamed.clear();
        let floored = self.rng.percent(50);
        self.create_and_spread(floored);
        // The home's master saw it end: it claims what the home left (its collector starts
        // once the replica holds the DEL, and checks that the home is still gone).
        self.claim_left(&home, left);
    }

    /// The home's master claims what a home it saw deleted left, as the glue's keyspace event
    /// does.
    fn claim_left(&mut self, home: &[u8], collections: Vec<Collection>) {
        if collections.is_empty() {
            return;
        }
        self.note(format_args!("claim what {} left", show(home)));
        let claim = Claim {
            db: 0,
            name: home.to_vec(),
            collections,
            at_ms: self.now,
        };
        let owner = self.master_of(home);
        let abandoned = self.masters[owner].collector.claim(vec![claim]);
        debug_assert_eq!(abandoned, 0);
    }

    /// DUMP of the home (what its replica holds) and RESTORE under another name, of its slot
    /// or of another: the glue (`spread_restore`) must tell it is a copy of the living home
    /// and detach it into a counter of its own units; a second home of the same holders would
    /// count them twice and take the real home's folds.
    fn restore_home_copy(&mut self) -> Result<(), String> {
        let Some(c) = self.home_counter().cloned() else {
            return Ok(());
        };
        let Some((carried, spread_id)) = collect::carried_by(&c) else {
            return Ok(());
        };
        if !self.masters[self.master_of(&self.home)].replica_holds(&self.home) {
            return Ok(()); // a dump of writes a failover may take back: not the protocol's
        }
        let n = self.rng.below(1000);
        let name = if self.rng.percent(50) {
            format!("{{sale}}stock:copy:{n}").into_bytes()
        } else {
            format!("copy:{n}").into_bytes()
        };
        if self.get(&name).is_some() {
            return Ok(());
        }
        let living = (self.living_home(self.master_of(&name), &carried, spread_id, &name))
            .and_then(|home| self.get(&home).cloned());
        let copy = Copy {
            name: &name,
            carried_home: &carried,
            spread_id,
            other_home: living.as_ref(),
            in_cluster: true,
        };
        if !copy.is_copy() {
            return Err(format!(
                "{} restored from the living home {} is not told apart as a copy",
                show(&name),
                show(&self.home)
            ));
        }
        let mut restored = c;
        restored.detach_from_spread();
        self.note(format_args!(
            "restore {} as {} (detached)",
            show(&self.home),
            show(&name)
        ));
        self.write(&name, Some(restored), 0);
        Ok(())
    }

    /// The orphan audit's walk of master `m` (the glue's `spread_audit`): every holder of a
    /// spread with an id that has no expiry (here: not a folded holder whose fold was
    /// answered) and no transfer of its own in flight is followed; what is due is asked of the
    /// master of the carried home's slot (this one answers its own at once).
    fn audit_pass(&mut self, m: usize) {
        let now = self.now;
        let found: Vec<(Question, Vec<u8>)> = (self.masters[m].keys.iter())
            .filter(|(_, c)| !expiring(c))
            .filter_map(|(name, c)| Some((audit::question_for(name, Some(c))?, name.clone())))
            .collect();
        self.run_machine(
            m,
            |m| &mut m.audit,
            |node, host| {
                for (q, name) in found {
                    node.saw(q, &name, now);
                }
                node.end_pass(host);
                node.ask(host);
            },
        );
    }

    /// After healing, the operator's `CTR.ORPHANS DELETE` on every master: each holder of a
    /// gone spread that would not expire by itself must have been reported by its master's
    /// audit (a leak is reported); then every reported spread's holders there are deleted with
    /// the glue's rule (each read again: still a holder of exactly that question). A report of
    /// a living spread would lose units here, which the checks after it catch.
    fn operator_deletes_reported_orphans(&mut self) -> Result<(), String> {
        for m in 0..MASTERS {
            let reported = self.reported(m);
            for (name, c) in &self.masters[m].keys {
                let Some(h) = parse_holder_name(name).filter(|h| h.spread_id != 0) else {
                    continue;
                };
                let lives = self
                    .masters
                    .iter()
                    .flat_map(|m| m.keys.values())
                    .any(|k| collect::is_home_of(k, h.spread_id));
                if !lives && !expiring(c) && !reported.contains(&h.spread_id) {
                    return Err(format!(
                        "{} of a gone spread is neither collected nor reported",
                        show(name)
                    ));
                }
            }
            self.operator_deletes_reported(m, reported);
        }
        Ok(())
    }

    /// The spreads master `m`'s audit reports as orphans.
    fn reported(&self, m: usize) -> Vec<u64> {
        let orphans = self.masters[m].audit.audit().orphans();
        orphans.map(|(q, _, _)| q.spread_id).collect()
    }

    /// The operator's `CTR.ORPHANS DELETE` on master `m` of the spreads `reported` there: each
    /// holder deleted with the glue's rule (read again: still a holder of exactly that
    /// question).
    fn operator_deletes_reported(&mut self, m: usize, reported: Vec<u64>) {
        for id in reported {
            self.run_machine(
                m,
                |m| &mut m.audit,
                |node, host| node.delete_orphans(host, id),
            );
        }
    }

    /// What the glue finds on master `m` as the living home of a spread (`home_names`): the
    /// key under the carried name when it is a home of it, else a key this master saw that
    /// home renamed to (here: any other key of `m` that is a home of it; the glue's table of
    /// renamed homes is kept over restarts and failovers).
    fn living_home(&self, m: usize, carried: &[u8], spread_id: u64, not: &[u8]) -> Option<Vec<u8>> {
        let keys = &self.masters[m].keys;
        let home_of = |c: &Counter| collect::is_home_of(c, spread_id);
        if keys.get(carried).is_some_and(home_of) {
            return Some(carried.to_vec());
        }
        keys.iter()
            .find(|(k, c)| k.as_slice() != not && home_of(c))
            .map(|(k, _)| k.clone())
    }
}

impl Sim {
    /// The keys whose floors make the counter's: the members, and renamed sealed holders
    /// (whose fold credit carries floor units until it lands).
    fn accounted_keys(&self) -> Vec<Vec<u8>> {
        let mut keys = self.members();
        keys.extend(self.renamed.iter().map(|(_, to)| to.clone()));
        keys
    }

    /// Units of renamed sealed holders whose fold credit the home has not applied: the read
    /// does not count them (their listed name is gone, or was sealed anew at 0 by a late seal
    /// request), and they are lost to the counter if the fold ended before they land.
    fn renamed_units_out(&self) -> i64 {
        let mut out = 0;
        for (_, to) in &self.renamed {
            let Some(c) = self.get(to) else { continue };
            for o in c.transfers().map(|t| t.outbox.as_slice()).unwrap_or(&[]) {
                if o.fold_id != 0 && !self.applied(to, c, o) {
                    out += o.dv;
                }
            }
        }
        out
    }

    /// Every key of every master, for a failure report.
    fn dump(&self) -> String {
        let mut out = format!("home {}\n", show(&self.home));
        for (i, m) in self.masters.iter().enumerate() {
            for (k, c) in &m.keys {
                let _ = writeln!(out, "master {i}: {} = {c:?}", show(k));
            }
        }
        out
    }

    /// True when the receiver of `o` (sent by the counter `giver` at `name`) applied it, or
    /// the home did under the name it was renamed to since.
    fn applied(&self, name: &[u8], giver: &Counter, o: &super::Outgoing) -> bool {
        let id = giver.transfers().map_or(0, |t| t.giver_id);
        let from = if o.from.is_empty() { name } else { &o.from };
        let by = |key: &[u8]| {
            self.get(key)
                .and_then(Counter::transfers)
                .is_some_and(|t| t.has_applied(id, from, o.seq))
        };
        let to_a_home = parse_holder_name(&o.receiver).is_none();
        by(&o.receiver) || (to_a_home && by(&self.home))
    }

    fn check(&self) -> Result<(), String> {
        let errors = [
            &self.replay_error,
            &self.bound_error,
            &self.check_error,
            &self.write_error,
            &self.read_error,
        ];
        if let Some(e) = errors.into_iter().flatten().next() {
            return Err(e.clone());
        }
        self.check_walked_lists()?;
        let keys = self.accounted_keys();
        let total = self.total();
        let expected = self.expected - self.renamed_units_out();
        if total != expected {
            return Err(format!("total {total}, acknowledged {expected}"));
        }
        for m in &self.masters {
            for (k, c) in &m.keys {
                if c.floor().is_some_and(|f| c.value() < f.floor) {
                    return Err(format!("{} below its floor", show(k)));
                }
                if c.ceiling().is_some_and(|x| c.value() > x.ceiling) {
                    return Err(format!("{} above its ceiling", show(k)));
                }
            }
        }
        let (floored, ceiled) = (self.floor.is_some(), self.ceiling.is_some());
        for k in &self.members()[1..] {
            let Some(c) = self.get(k) else { continue };
            if floored && c.floor().is_none() && c.value() < 0 {
                return Err(format!("{} below 0 before its first credit", show(k)));
            }
            if ceiled && c.ceiling().is_none() && c.value() > 0 {
                return Err(format!("{} above 0 before its first credit", show(k)));
            }
        }
        self.check_conserved(BudgetKind::Down, &keys)?;
        self.check_conserved(BudgetKind::Up, &keys)
    }

    /// The bound of `kind` is conserved: the members' own bounds (0 where a member has none)
    /// plus the units of that kind in flight sum to the spread's bound.
    fn check_conserved(&self, kind: BudgetKind, keys: &[Vec<u8>]) -> Result<(), String> {
        let spreads = match kind {
            BudgetKind::Down => self.floor,
            BudgetKind::Up => self.ceiling,
        };
        let Some(bound) = spreads else {
            return Ok(());
        };
        let mut units = 0;
        let mut parts = String::new();
        for k in keys {
            let Some(c) = self.get(k) else { continue };
            let held = kind.bound(c).unwrap_or(0);
            units += held;
            let _ = write!(parts, " {}: {held}", show(k));
            for o in c.transfers().map(|t| t.outbox.as_slice()).unwrap_or(&[]) {
                if !self.applied(k, c, o) {
                    let moving = kind.bound_units(o.units());
                    units += moving;
                    let _ = write!(parts, " (+{moving} to {})", show(&o.receiver));
                }
            }
        }
        if units != bound {
            return Err(format!(
                "{kind:?} bounds and their units in flight {units}, the spread's {bound}:{parts}"
            ));
        }
        Ok(())
    }

    /// No more faults: every message delivered, replicas caught up, until quiet; then the
    /// audit's passes, each after the grace (a spread answered gone twice goes).
    fn heal(&mut self) {
        self.faults = false;
        // A migration under way ends (the runtime's check against the server's own list ends
        // one whose end it missed): handed over or cancelled.
        if self.migration.is_some() {
            self.migration_step();
        }
        self.quiet_rounds(60);
        for _ in 0..4 {
            self.now += self.grace.max(audit::ASK_TIMEOUT_MS) + 1;
            for m in 0..MASTERS {
                self.audit_pass(m);
            }
            self.quiet_rounds(4);
        }
    }

    /// `n` rounds of: every replica catches up, every master ticks, every message delivered;
    /// a round is one period of the transfer nodes' tick.
    fn quiet_rounds(&mut self, n: usize) {
        for _ in 0..n {
            self.now += TICK_MS;
            for m in 0..MASTERS {
                self.replicate_all(m);
                self.tick(m);
            }
            while let Some(m) = self.network.pop() {
                self.handle(m);
            }
        }
    }

    /// After healing: every fold finished, every transfer of the counter answered, and no
    /// current member of a floored spread keeps a purchase waiting for budget (a `TRYAGAIN`
    /// that never ends would stall every walk that reaches it).
    fn check_settled(&self) -> Result<(), String> {
        // No holder of a gone spread is left: every holder that would not expire by itself
        // belongs to a spread some key is the home of (collections, and the audit behind them).
        let all = || self.masters.iter().flat_map(|m| m.keys.iter());
        for (name, c) in all() {
            let Some(h) = parse_holder_name(name).filter(|h| h.spread_id != 0) else {
                continue;
            };
            let lives = all().any(|(_, k)| collect::is_home_of(k, h.spread_id));
            if !lives && !expiring(c) {
                return Err(format!("{} of a gone spread leaked", show(name)));
            }
        }
        let current = self
            .home_counter()
            .and_then(|h| h.spread())
            .map_or(0, |s| s.holders.len() + 1);
        for k in self.members().into_iter().take(current) {
            let by_name = bounds_by_name(&k);
            let down = self.floor.is_some()
                && purchase_waits_for_budget(self.get(&k), i64::MAX, by_name.floor, self.now);
            let up = self.ceiling.is_some()
                && add_waits_for_up_budget(self.get(&k), i64::MAX, by_name.ceiling, self.now);
            if down || up {
                return Err(format!("{} still waits for budget", show(&k)));
            }
        }
        let home = self.home_counter();
        if home.is_some_and(|h| !h.leaving().is_empty()) {
            return Err("a fold never finished".into());
        }
        for k in self.members() {
            if self
                .get(&k)
                .is_some_and(|c| c.transfers().is_some_and(|t| !t.outbox.is_empty()))
            {
                return Err(format!("{} still has a transfer unanswered", show(&k)));
            }
        }
        Ok(())
    }
}

/// Runs one schedule; Err carries the failure and the steps taken.
fn run(seed: u64) -> Result<(), String> {
    let mut sim = Sim::new(seed);
    let fail =
        |sim: &Sim, why: String| Err(format!("seed {seed}: {why}\n{}\n{}", sim.log, sim.dump()));
    for step in 0..STEPS {
        if let Err(why) = sim
            .step()
            .map(|()| sim.rerun_checked_adds())
            .and_then(|()| sim.read_step())
            .map(|()| sim.track_round())
            .and_then(|()| sim.check())
        {
            return fail(&sim, format!("after step {step}: {why}"));
        }
    }
    sim.heal();
    let settled = sim
        .check()
        .and_then(|()| sim.operator_deletes_reported_orphans())
        .and_then(|()| sim.check())
        .and_then(|()| sim.check_settled());
    if let Err(why) = settled {
        return fail(&sim, format!("after healing: {why}"));
    }
    Ok(())
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

#[test]
fn every_schedule_keeps_the_spread_protocols_invariants() {
    if let Some(seed) = env_number("CTR_SIM_SEED") {
        if let Err(report) = run(seed) {
            panic!("{report}");
        }
        return;
    }
    let schedules = env_number("CTR_SIM_SCHEDULES").unwrap_or(10_000);
    let base = env_number("CTR_SIM_BASE").unwrap_or(0);
    let started = std::time::Instant::now();
    for seed in base..base + schedules {
        if let Err(report) = run(seed) {
            panic!("{report}\nreplay: CTR_SIM_SEED={seed} cargo test --release --lib simulator");
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "simulator: {schedules} schedules of {STEPS} steps in {secs:.1} s ({:.0} schedules/s); \
         {} gathered reads, {} of them in quiet windows checked against the total ({} failed, \
         {} timed out, {} redirected); \
         {} rebalance polls, {} bounds told and checked, {} gives; refunds: {} given, {} \
         replayed, {} waiting for a fold, {} given at the home after a fold; tokened adds: {} \
         counted, {} replayed, {} waiting for a fold; writes after a holder check: {} listed, {} \
         not listed, {} unsure; slot migrations: {} handed over, {} cancelled; ceiled spreads: \
         {} made, {} adds refused by a ceiling, {} told to wait for up-budget, {} walks of adds \
         refused everywhere",
        schedules as f64 / secs.max(1e-9),
        reads::FINISHED.load(Relaxed),
        reads::CHECKED.load(Relaxed),
        reads::FAILED.load(Relaxed),
        reads::TIMED_OUT.load(Relaxed),
        reads::REDIRECTED.load(Relaxed),
        ROUNDS_POLLED.load(Relaxed),
        BOUNDS_CHECKED.load(Relaxed),
        GIVES.load(Relaxed),
        REFUNDS[0].load(Relaxed),
        REFUNDS[1].load(Relaxed),
        REFUNDS[2].load(Relaxed),
        REFUNDS[3].load(Relaxed),
        TOKENED_ADDS[0].load(Relaxed),
        TOKENED_ADDS[1].load(Relaxed),
        TOKENED_ADDS[2].load(Relaxed),
        CHECKED_WRITES[0].load(Relaxed),
        CHECKED_WRITES[1].load(Relaxed),
        CHECKED_WRITES[2].load(Relaxed),
        MIGRATIONS[0].load(Relaxed),
        MIGRATIONS[1].load(Relaxed),
        CEILED[0].load(Relaxed),
        CEILED[1].load(Relaxed),
        CEILED[2].load(Relaxed),
        CEILED[3].load(Relaxed),
    );
}

fn describe(m: &Message) -> String {
    match m {
        Message::Node { from, to, m } => {
            format!("{} from master {from} to master {to}", describe_node(m))
        }
    }
}

fn describe_node(m: &NodeMessage) -> String {
    let names = |c: &[Collection]| c.iter().map(|c| c.holders.len()).sum::<usize>();
    match m {
        NodeMessage::Transfer(m) => describe_transfer(m),
        NodeMessage::Collect(c) => format!(
            "collect {} holders ({})",
            names(c),
            (c.iter().flat_map(|c| &c.holders))
                .map(|h| show(h))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        NodeMessage::Collected(c) => format!("collected {} holders", names(c)),
        NodeMessage::AuditAsk { questions, .. } => {
            format!("audit ask {} spread(s)", questions.len())
        }
        NodeMessage::AuditAnswers { answers, .. } => format!(
            "audit answers {:?}",
            answers
                .iter()
                .map(|(q, a)| format!("{:x} {a:?}", q.spread_id))
                .collect::<Vec<_>>()
        ),
        NodeMessage::DemandNotice(_) => "rebalance notice".into(),
        NodeMessage::DemandPoll(p) => format!("poll {:x} of {} holders", p.id, p.names.len()),
        NodeMessage::DemandAnswer { id, reports } => format!("answer {id:x} {reports:?}"),
        NodeMessage::DemandGive(g) => {
            format!(
                "give {} {} -> {}",
                g.units,
                show(&g.giver),
                show(&g.receiver)
            )
        }
        NodeMessage::Headroom(h) => format!("headroom {} of round {}", h.units, h.round_ms),
        NodeMessage::HolderCheckRequest { id, holder } => {
            format!("holder check {id:x} of {}", show(holder))
        }
        NodeMessage::HolderCheckResponse { id, verdict } => {
            format!("holder check {id:x}: {verdict:?}")
        }
        NodeMessage::AdmissionRequest { id, name } => {
            format!("admission {id:x} of {}", show(name))
        }
        NodeMessage::AdmissionResponse { id, answer } => format!("admission {id:x}: {answer:?}"),
        NodeMessage::GatherRequest { id, names, .. } => {
            format!("gather request {id:x} of {} holders", names.len())
        }
        NodeMessage::GatherResponse { id, answers } => format!("gather answer {id:x} {answers:?}"),
    }
}

fn describe_transfer(m: &TransferMessage) -> String {
    match m {
        TransferMessage::Seal(s) => format!(
            "seal {} into {} fold {:x}",
            show(&s.holder),
            show(&s.home),
            s.fold_id
        ),
        TransferMessage::Credit(c) => format!(
            "credit {} -> {} giver {:x} seq {} dv {} df {} fold {:x}",
            show(&c.giver),
            show(&c.receiver),
            c.giver_id,
            c.seq,
            c.dv,
            c.df,
            c.fold_id
        ),
        TransferMessage::Ack(a) => format!(
            "answer {} -> {} seq {} refused {}",
            show(&a.receiver),
            show(&a.giver),
            a.seq,
            a.refused
        ),
    }
}

fn has_transfers(c: &Counter) -> bool {
    c.transfers().is_some_and(|t| t.has_pending())
}

/// An audit answer holding a `Gone`.
fn is_gone_answer(m: &Message) -> bool {
    matches!(
        m,
        Message::Node { m: NodeMessage::AuditAnswers { answers, .. }, .. }
            if answers.iter().any(|(_, a)| *a == Answer::Gone)
    )
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

fn show_list(names: &[Vec<u8>]) -> String {
    let names: Vec<String> = names.iter().map(|n| show(n)).collect();
    format!("[{}]", names.join(", "))
}
