//! The one `Host` of the spread node's machines: what a machine asks of the server it runs on.
//! A machine (the transfer node, `transfer_node.rs`; the collector, `collect_node.rs`; the
//! audit, `audit_node.rs`; the rebalancer, `rebalance_node.rs`; the holder check,
//! `holder_check_node.rs`; the holder admission, `admission_node.rs`; the gather,
//! `gather_node.rs`) decides;
//! its host carries the effects out. The runtime implements it over the Redis module API
//! (`spread_transfer::RedisHost`), the simulator over its simulated masters
//! (`src/counter/simulator.rs`), so a schedule runs the code Redis runs (as TigerBeetle's
//! simulator runs its production replica, and raft-rs hands its `Ready` to the IO layer).

use super::replicas::Replication;
use crate::counter::audit::{Answer, Question};
use crate::counter::collect::Collection;
use crate::counter::step::{Step, StepOutcome};
use crate::counter::transfer::{Ack, Credit, Seal};
use crate::counter::Counter;
use std::net::SocketAddr;

use crate::persist::admission_msg::NameAnswer;
use crate::persist::demand_msg::{Give, Headroom, HolderDemand, PollRequest};
use crate::persist::gather_msg::HolderAnswer;
use crate::persist::holder_check_msg::Verdict;

/// A message of the transfer protocol (bus kinds 0xC9-0xCB).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransferMessage {
    Seal(Seal),
    Credit(Credit),
    Ack(Ack),
}

/// A message between two nodes' machines (the bus kinds of `messages.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeMessage {
    /// A seal request, a credit or an acknowledgement (0xC9-0xCB).
    Transfer(TransferMessage),
    /// Collect these holders of gone homes (0xCC).
    Collect(Vec<Collection>),
    /// The names handled (deleted, gone, or never the sender's), back to the asker (0xCD).
    Collected(Vec<Collection>),
    /// The audit asks the master of each home's slot whether the spread lives (0xCE).
    AuditAsk {
        /// None: an earlier module's ask (answered without one).
        request: Option<u64>,
        questions: Vec<Question>,
    },
    /// Its answers, back to the asker under its request (None: an earlier module's) (0xCF).
    AuditAnswers {
        request: Option<u64>,
        answers: Vec<(Question, Answer)>,
    },
    /// Holders of this home refused purchases: rebalance it (0xD0).
    DemandNotice(Vec<u8>),
    /// The home's master asks for these holders' budgets and demand (0xD1).
    DemandPoll(PollRequest),
    /// Their reports, back under the poll's id (0xD2).
    DemandAnswer { id: u64, reports: Vec<HolderDemand> },
    /// Move up to this much budget from the giver (0xD3).
    DemandGive(Give),
    /// The whole headroom a round saw (0xD4).
    Headroom(Headroom),
    /// Does the home of this holder name list it? (0xD5)
    HolderCheckRequest { id: u64, holder: Vec<u8> },
    /// The home's master's verdict, under the request's id (0xD6).
    HolderCheckResponse { id: u64, verdict: Verdict },
    /// Does a key sit at this name? (0xD7)
    AdmissionRequest { id: u64, name: Vec<u8> },
    /// The name's master's answer, under the request's id (0xD8).
    AdmissionResponse { id: u64, answer: NameAnswer },
    /// Read these holders (0xC7): `link`, the master's plain client address when the request
    /// may go on its read link (its first send), else over the bus.
    GatherRequest {
        id: u64,
        names: Vec<Vec<u8>>,
        link: Option<SocketAddr>,
    },
    /// Their values, in the request's order, under its id (0xC8).
    GatherResponse { id: u64, answers: Vec<HolderAnswer> },
}

/// What the machines count (the INFO fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A holder sealed for a fold (a budget move's start is counted by its command).
    Sealed,
    Credited,
    DuplicateCredit,
    Refused,
    RolledBack,
    Acked,
    Resent,
    /// Collections started.
    Collections(u64),
    /// Collections dropped (past the timeout or the memory cap).
    CollectionsAbandoned(u64),
    /// Collections pending now (a gauge).
    CollectionsPending(u64),
    /// The audit's walk ended a pass.
    AuditPass,
    /// Questions the audit asked.
    AuditQuestions(u64),
    /// A spread reported as an orphan.
    OrphanReported,
    /// Spreads reported now (a gauge).
    OrphansReported(u64),
    /// Holders deleted on the operator's order.
    OrphanHoldersDeleted(u64),
    /// A give started a budget move.
    BudgetMove,
    /// A give found its pair busy (a move unacknowledged).
    BudgetMoveSkipped,
    /// Holder checks ended unanswered at their deadline.
    HolderCheckTimeouts(u64),
    /// A holder check asked again.
    HolderCheckResent,
    /// A grow's planned holder name asked about.
    HolderNameAsked,
    /// A planned holder name found taken.
    HolderNameTaken,
    /// Holders a gather asked again where they are served now.
    GatherReroutes(u64),
    /// A gather request answered here.
    GatherRequestServed,
}

/// Where a message about a key goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<P> {
    /// This node serves the key: the machine handles the message itself, at once.
    Here,
    /// The master serving the key's slot.
    To(P),
    /// No master is known for it now (the host learns the slots again): sent at the next try.
    Unknown,
}

impl<P> Route<P> {
    /// Whom a question about the key is asked of (`name_queries`' destination): Some(None)
    /// this node, Some(Some(master)) another; None while no master is known.
    pub fn destination(self) -> Option<Option<P>> {
        match self {
            Route::Here => Some(None),
            Route::To(node) => Some(Some(node)),
            Route::Unknown => None,
        }
    }
}

/// The server a machine runs on.
pub trait Host {
    /// A node of the cluster, as messages name their sender.
    type Peer: Clone + PartialEq;

    /// The server's clock, in milliseconds.
    fn now_ms(&self) -> i64;
    /// A random id above `transfer::LEGACY_FOLD` (a fold's, a giver's).
    fn new_id(&mut self) -> u64;
    /// A master, not loading.
    fn is_master(&self) -> bool;
    /// In a cluster: a fold runs in the background, never inside a command.
    fn in_cluster(&self) -> bool;
    /// The server pauses writes: nothing that writes runs now (the next tick does it).
    fn paused(&self) -> bool;
    /// A key this node serves and may write now.
    fn serves(&self, name: &[u8]) -> bool;
    /// Where a message about `name` goes.
    fn route(&mut self, name: &[u8]) -> Route<Self::Peer>;
    /// The routes are read afresh at the next `route` (a master said a key is not there).
    fn refresh_routes(&mut self);
    /// A master's plain client address, for a read link (None: none known, or no links).
    fn link_address(&mut self, to: &Self::Peer) -> Option<SocketAddr>;
    /// Reads a holder for a gather, through the routing check: `NotHere` when this node does
    /// not serve it now (moved, migrating, handed over), never a silent 0.
    fn read_holder(&mut self, name: &[u8]) -> HolderAnswer;
    /// The key's slot is being handed over (an atomic slot migration): it sends nothing now.
    fn moving(&self, name: &[u8]) -> bool;
    /// The database selected now, and selecting another (false: there is no such database).
    fn db(&self) -> i32;
    fn select_db(&mut self, db: i32) -> bool;
    /// Reads the counter at `name` in the selected database (None inside: missing). None when
    /// another type (or a stray) sits there: nothing of the protocol's.
    fn read<R>(&self, name: &[u8], f: impl FnOnce(Option<&Counter>) -> R) -> Option<R>;
    /// One protocol write (`Counter::apply_step` on the key, made at 0 when missing),
    /// replicated as the step; the key is noted when it has something to send.
    fn write_step(&mut self, name: &[u8], step: Step) -> Result<StepOutcome, String>;
    /// Sets the key's absolute expiry, replicated.
    fn expire_at(&mut self, name: &[u8], at_ms: i64);
    /// The name a home carried by its holders (the name it had when it spread) has now on
    /// this node: itself unless it was renamed here.
    fn current_home(&mut self, carried: &[u8]) -> Vec<u8>;
    /// The home renamed on this node from `name` whose spread is `spread_id`, if any.
    fn living_home(&self, name: &[u8], spread_id: u64) -> Option<Vec<u8>>;
    /// The keys noted since the last call as having something to send (a write, a replayed
    /// step, a load, a rename), by database.
    fn take_noted(&mut self) -> Vec<(i32, Vec<u8>)>;
    /// This master's replication stream and its replicas' acknowledgements (None: unknown).
    fn replication(&mut self) -> Option<Replication>;
    /// Sends wait for the replicas: ask them to acknowledge now, and look again soon.
    fn wait_for_replicas(&mut self, now: &Replication);
    /// Sends a message to another node.
    fn send(&mut self, to: &Self::Peer, message: NodeMessage);
    /// In a cluster, whether the slot of `name` is served here now (None: the cluster is down,
    /// say nothing yet): the routing check, which also fails for a slot migrating away.
    fn slot_served_here(&mut self, name: &[u8]) -> Option<bool>;
    /// `DEL name`, replicated, with its keyspace event; true when it ran.
    fn delete(&mut self, name: &[u8]) -> bool;
    /// How long a collection is tried (`ctr.collect-timeout-ms`).
    fn collect_timeout_ms(&self) -> i64;
    /// Whether a key of the slot of `home` is a home of the spread `spread_id` (None: the
    /// slot holds more keys than may be read now).
    fn slot_holds_home(&mut self, home: &[u8], spread_id: u64) -> Option<bool>;
    /// Whether a key of the slot of `home` is a home of the spread `spread_id` that lists
    /// `holder` (current or folding back), reading at most `limit` of the slot's keys, with
    /// how many it read (None: the slot holds more keys than that).
    fn slot_home_lists(
        &mut self,
        home: &[u8],
        spread_id: u64,
        holder: &[u8],
        limit: i64,
    ) -> Option<(bool, i64)>;
    /// How long a spread answered gone waits before it is reported (`ctr.orphan-grace-ms`).
    fn orphan_grace_ms(&self) -> i64;
    /// Counts an event (the INFO fields).
    fn count(&mut self, event: Event);
    /// Something that should not happen, for the log.
    fn warn(&mut self, why: &str);
    /// How long a token is remembered (`ctr.token-window-ms`).
    fn token_window_ms(&self) -> i64;
    /// A test hook holds every credit received unanswered (`ctr.debug-hold-credits`).
    fn holds_credits(&self) -> bool;
}
