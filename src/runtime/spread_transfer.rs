//! Transfers between counters, the Redis glue: the rules are in `crate::counter::transfer`, the
//! node's part of the protocol (what each message does, the registry of keys with something to
//! send, resends, acknowledgements held for the replicas) in `crate::protocol::transfer_node`,
//! run here over [`RedisHost`] and in the simulator over its simulated masters.
//!
//! API (for folds here, and for budget moves between holders of floored spread counters):
//! - [`start`]`(ctx, giver_key, receiver_name, dv, df)`, on the giver's master: debits the
//!   giver (value -= dv, floor -= df) and records the outbox entry in one replicated write,
//!   then delivers the credit in the background until it is acknowledged. A budget move is
//!   `dv = 0, df = -n` (the giver's floor rises by n, the receiver's falls by n). Refused while
//!   a transfer from that giver to that receiver is unacknowledged ([`TransferError::Busy`]).
//! - [`begin_fold`]`(ctx, home_key, target)`, on the home's master: shrinks a spread counter
//!   (see `ctr_spread`); the removed holders are sealed and folded back, in the background in
//!   a cluster, within the command on one server.
//! - [`super::ctr_store::refuse_sealed`]: what every user write checks first.
//!
//! Delivery. Every step is one ordinary write on the key's master, replicated as the step it
//! took (`CTR.STEP`, replayed through `Counter::apply_step`, never the key's whole state), and
//! each message is idempotent (seal, credit by seq, ack by seq), so any message may be lost,
//! repeated or late. A key with something to send (an outbox entry, a holder still leaving)
//! sits in the node's registry that a 100 ms timer walks: it sends the key's seals and credits again,
//! backing off to every 2 s while nothing answers. The registry is filled wherever such a
//! state appears on this server: the master's own writes, a replicated or AOF `CTR.STEP` or
//! `CTR.SETSTATE`, an RDB or RESTORE load, a COPY. So a replica promoted by a failover, or a
//! server restarted from its RDB or AOF, resumes every transfer.
//! Why a registry rather than a keyspace walk like `sweep`: transfers are few and short-lived,
//! and a walk would cost every tick a pass over all keys; the registry costs nothing per key
//! that transfers nothing. Entries go only when their key has nothing left to send (or is
//! gone): a node that cannot reach the other master, or believes the slot is elsewhere, keeps
//! trying.
//!
//! Messages go to the master serving the receiver's slot over the cluster bus (types
//! 0xC9-0xCB); when that is this server (and always outside a cluster) the handler runs
//! directly. In a cluster that is always from the timer, never inside a command, where Valkey
//! would look another slot's key up in the command's slot.
//!
//! Durability: the credit and the ack are separate writes; the ack is sent only after the
//! credit is applied. With `appendfsync always` the AOF holding the credit is fsynced in
//! beforeSleep, before the bus link writes the ack, so a restarted receiver never lost an
//! acknowledged credit. Across a failover, every message that another master acts on waits
//! until this master's online replicas hold the write it announces ([`replication_gate`]): a
//! giver sends a seal or a credit only once its replicas hold the debit (or the home's leaving
//! list), and a receiver acknowledges only once its replicas hold the credit. So a promoted
//! replica has every write the other side was told about: no credit acknowledged and then
//! lost, no credit of a debit the new master never made. The price is the replicas'
//! acknowledgement period (about a second) per step on masters that have replicas.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::ffi::c_int;
use std::sync::atomic::Ordering::Relaxed;
use std::thread::LocalKey;

use redis_module::raw;

use super::ctr_store::{update_counter, with_counter};
use super::replication_gate::{self, Replication};
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, NodeId};
use crate::config;
use crate::counter::collect::lists_holder;
use crate::counter::spread::key_slot;
use crate::counter::step::{Step, StepOutcome};
use crate::counter::transfer::{Outgoing, TransferError, Units, LEGACY_FOLD};
use crate::counter::{Counter, CounterRef};
use crate::ffi::{string_bytes, CommandError, Ctx, Key, KeyName, RawString};
use crate::metrics;
use crate::persist::gather_msg::{self, HolderAnswer};
use crate::persist::step_msg;
use crate::persist::transfer_msg::{self as msg, Credit};
use crate::persist::{admission_msg, audit_msg, collect_msg, demand_msg, holder_check_msg};
use crate::protocol::host::{Event, Host, NodeMessage, Route, TransferMessage};
use crate::protocol::messages::MessageKind;
use crate::protocol::transfer_node::{TransferNode, TICK_MS};

pub use crate::protocol::transfer_node::SEALED_GRACE_MS;

thread_local! {
    /// This server's transfer node (timers and bus receivers run on the main thread).
    static NODE: RefCell<TransferNode<NodeId>> = RefCell::new(TransferNode::default());
    /// (db, key name) of the keys noted with something to send since the node last took them.
    static NOTED: RefCell<HashSet<(c_int, Vec<u8>)>> = RefCell::new(HashSet::new());
    /// Something was noted to send since the last tick: [`tick_soon`] may tick at once.
    static TICK_SOON: Cell<bool> = const { Cell::new(false) };
}

/// Records that `name` in `db` may have something to send (a no-op when it has not): the node
/// takes it at its next run, and its sends wait for the replicas to hold this write.
pub fn track(db: c_int, name: &[u8], c: &Counter) {
    if c.transfers().is_some_and(|t| t.has_pending()) {
        NOTED.with(|n| n.borrow_mut().insert((db, name.to_vec())));
        TICK_SOON.with(|t| t.set(true));
    }
}

/// Runs one of this server's machines (kept in `machine`, named `what` for the log) over a
/// new [`RedisHost`]. A call made while that machine runs (never expected: no host effect runs
/// a machine) is skipped with a warning; what it would have done is done by the next tick or
/// the sender's resend.
pub(crate) fn run_machine<N: 'static, R: Default>(
    ctx: Ctx,
    machine: &'static LocalKey<RefCell<N>>,
    what: &str,
    f: impl FnOnce(&mut N, &mut RedisHost) -> R,
) -> R {
    machine.with(|n| match n.try_borrow_mut() {
        Ok(mut node) => f(&mut node, &mut RedisHost::new(ctx)),
        Err(_) => {
            ctx.log_warning(&format!(
                "ctr: {what} was entered again; the next tick goes on"
            ));
            R::default()
        }
    })
}

/// Runs the transfer node over this server.
fn run<R: Default>(ctx: Ctx, f: impl FnOnce(&mut TransferNode<NodeId>, &mut RedisHost) -> R) -> R {
    run_machine(ctx, &NODE, "the transfer node", f)
}

pub use super::demand::selected_db;

/// The transfer API: see the module docs. Runs on the giver's master.
pub fn start(
    ctx: Ctx,
    giver: RawString,
    receiver: &[u8],
    units: Units,
) -> Result<Outgoing, CommandError> {
    let step = Step::Move {
        receiver: receiver.to_vec(),
        units,
        now_ms: ctx.now_ms(),
        new_id: new_id(),
    };
    let StepOutcome::Moved(out) = write_step(ctx, giver, |_| step)? else {
        return Err(unexpected());
    };
    metrics::TRANSFERS_STARTED.incr();
    hurry(ctx, string_bytes(giver));
    Ok(out)
}

/// True when `name` (in the selected database) is a holder sealed and renamed away whose fold
/// is still unacknowledged ([`TransferNode::fold_carried_elsewhere`]).
pub fn fold_carried_elsewhere(ctx: Ctx, name: &[u8]) -> bool {
    run(ctx, |node, host| node.fold_carried_elsewhere(host, name))
}

/// A transfer of `giver` (in the selected database) just started: its credit goes at the next
/// tick, not after the backoff of the giver's older sends.
pub fn hurry(ctx: Ctx, giver: &[u8]) {
    run(ctx, |node, host| node.hurry(host, giver));
    tick_soon(ctx);
}

/// A random id that is neither 0 (none) nor [`LEGACY_FOLD`]: a giver's id or a fold's. Made
/// on the master and replicated inside the state it is written into.
fn new_id() -> u64 {
    loop {
        let id = u64::from_le_bytes(crate::ffi::random_bytes());
        if id > LEGACY_FOLD {
            return id;
        }
    }
}

fn transfer_error(e: TransferError) -> CommandError {
    match e {
        TransferError::Busy => CommandError::fixed(
            "ERR a transfer to that key is still unacknowledged (one at a time per pair)",
        ),
        TransferError::Sealed => super::ctr_store::SEALED,
        TransferError::Counter(e) => e.into(),
    }
}

/// Shrinks the spread counter at `home` to `target` holders (1..current): the holders past it
/// leave the holder list and are folded back (in the background in a cluster). Returns the
/// holders kept.
pub fn begin_fold(ctx: Ctx, home: RawString, target: usize) -> Result<Vec<Vec<u8>>, CommandError> {
    let in_cluster = cluster::in_cluster(ctx);
    if !in_cluster {
        check_local_fold(ctx, home, target)?;
    }
    let clock = super::ctr_store::list_change_clock(ctx);
    let shrink = |c: &Counter| Step::Shrink {
        target,
        fold_ids: (0..c.folds_needed(target)).map(|_| new_id()).collect(),
        clock: Some(clock),
    };
    let StepOutcome::Shrunk(gone) = write_step(ctx, home, shrink)? else {
        return Err(unexpected());
    };
    let kept = with_counter(ctx, home, |c| match c {
        Some(CounterRef::Boxed(b)) => b.spread().map(|s| s.holders.clone()),
        _ => None,
    })?
    .unwrap_or_default();
    metrics::FOLDS.add(gone.len() as u64);
    if in_cluster {
        tick_soon(ctx);
    } else {
        // One server: every step is local, so the fold completes within the command (no
        // Valkey slot trap outside a cluster), and the reply already finds it done.
        run(ctx, |node, host| node.send_seals(host, string_bytes(home)));
    }
    Ok(kept)
}

/// On one server a shrink is all or nothing: it is refused, changing nothing, unless every
/// holder it removes can be folded into the home now (a counter or missing, not sealed into
/// another home, and its units and floor credited without overflow). Otherwise a fold that
/// cannot complete would stall in the background and finish whenever a later command made it
/// possible, changing the home between commands.
fn check_local_fold(ctx: Ctx, home: RawString, target: usize) -> Result<(), CommandError> {
    let Some(mut trial) = with_counter(ctx, home, |c| match c {
        Some(CounterRef::Boxed(b)) => Some(b.clone()),
        _ => None,
    })?
    else {
        return Ok(());
    };
    let home_name = string_bytes(home);
    trial.begin_shrink(target, &mut new_id)?;
    for leaving in trial.leaving().to_vec() {
        let holder = leaving.name;
        let name = KeyName::new(ctx, &holder);
        let owed = with_counter(ctx, name.raw, |c| match c {
            Some(CounterRef::Boxed(b)) if b.is_sealed() => b
                .transfers()
                .and_then(|t| t.outgoing_to(home_name))
                .map(Outgoing::units)
                .ok_or(super::ctr_store::SEALED),
            Some(CounterRef::Boxed(b)) => Ok(Units {
                dv: b.value(),
                df: b.floor().map_or(0, |f| f.floor),
                dc: b.ceiling().map_or(0, |c| c.ceiling),
            }),
            c => Ok(Units {
                dv: c.map_or(0, |c| c.value()),
                ..Units::default()
            }),
        })??;
        let credit = Credit {
            from: holder.clone(),
            giver: holder,
            receiver: home_name.to_vec(),
            giver_id: new_id(),
            seq: u64::MAX,
            dv: owed.dv,
            df: owed.df,
            dc: owed.dc,
            fold_id: leaving.fold_id,
        };
        trial.apply_credit(&credit).map_err(transfer_error)?;
    }
    Ok(())
}

/// Takes the step `build` makes from the counter at `key` (made at 0 when missing) and
/// replicates the step, not the resulting state (`CTR.STEP`: replicas and the AOF replay it
/// through the same function); registers the key when it has something to send.
fn write_step(
    ctx: Ctx,
    key_name: RawString,
    build: impl FnOnce(&Counter) -> Step,
) -> Result<StepOutcome, CommandError> {
    let key = Key::open(ctx, key_name, true);
    let (outcome, payload) = update_counter(&key, |c, _| {
        let step = build(c);
        let outcome = apply_step(ctx, key_name, c, &step)?;
        Ok((outcome, step_msg::encode(&step)))
    })?;
    drop(key);
    if !ctx.replicate_effect(STEP_COMMAND, key_name, &payload) {
        return Err(CommandError::fixed("ERR could not replicate the write"));
    }
    ctx.key_changed(c"ctr.transfer", key_name);
    // Units came or an acknowledgement landed: commands waiting for them may go on.
    super::waiter::key_written(ctx, crate::ffi::string_bytes(key_name));
    Ok(outcome)
}

/// The command that replays a step on replicas and from the AOF.
pub const STEP_COMMAND: &std::ffi::CStr = c"CTR.STEP";

/// Applies `step` to the counter `c` at `key_name` and registers the key when it has something
/// to send: the master's write and its replay (`CTR.STEP`) alike.
pub fn apply_step(
    ctx: Ctx,
    key_name: RawString,
    c: &mut Counter,
    step: &Step,
) -> Result<StepOutcome, CommandError> {
    let name = string_bytes(key_name);
    let outcome = c.apply_step(name, step).map_err(transfer_error)?;
    track(selected_db(ctx), name, c);
    Ok(outcome)
}

/// A step answered with another step's outcome (never: each step has its own).
fn unexpected() -> CommandError {
    CommandError::fixed(
        "ERR internal error in redis-ctr: a transfer step gave another step's outcome",
    )
}

pub fn is_master(ctx: Ctx) -> bool {
    let flags = ctx.flags();
    flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
        && flags & raw::REDISMODULE_CTX_FLAGS_LOADING == 0
}

/// Where a message about `name` goes: None when this server serves it (always outside a
/// cluster), else the master serving its slot. Err when no master is known for it now.
pub(crate) fn route(ctx: Ctx, name: &[u8]) -> Result<Option<NodeId>, CommandError> {
    if !cluster::in_cluster(ctx) {
        return Ok(None);
    }
    match cluster::topology(ctx, false)?.remote_owner(key_slot(name)) {
        // `CLUSTER SHARDS` can show a shard without its slots (a takeover whose old master is
        // not failed yet: CLUSTER.md); the server's routing check still knows a slot it serves.
        Err(_) if cluster::routed_here(ctx.ptr, name) => Ok(None),
        owner => owner,
    }
}

/// A counter key this server serves and may write: a master, the slot here and, in a cluster,
/// not migrating away (asked through the server's routing check, which `RM_OpenKey` skips: a
/// holder already moved to the importing node must not be sealed here as a missing key at 0,
/// nor a credit stranded in a slot this node is giving up), nor in an atomic slot migration
/// either way (`slot_migration`, rule 1: a write the source made once the handoff began would
/// reach no snapshot nor stream, and be lost with the trimmed key after it was acknowledged).
pub(crate) fn serves(ctx: Ctx, name: &[u8]) -> bool {
    is_master(ctx)
        && matches!(route(ctx, name), Ok(None))
        && (!cluster::in_cluster(ctx)
            || (cluster::routed_here(ctx.ptr, name) && !super::slot_migration::moving_key(name)))
}

/// A collection's or an audit's message payload, at most (a longer one goes as several; an
/// audit ask's parts carry the same request).
const MAX_MESSAGE_BYTES: usize = 32 * 1024;

/// This server as the host of the node's machines (the transfer node here, the collector in
/// `spread_collect`).
pub struct RedisHost {
    ctx: Ctx,
    /// Whose rights a gather's holder reads run with: the module's, or those of the client
    /// whose `CTR.GATHER` (a read link's request) is being answered.
    caller: cluster::Caller,
    /// Slot keys the audit's home side may still read through this host (one tick, or one
    /// received message: about 2 ms of main thread); past it a question is answered unsure.
    slot_keys_left: i64,
}

/// A slot holding more keys than this is not read: its spreads are answered unsure.
const MAX_SLOT_KEYS: i64 = 20_000;
/// Slot keys one host reads at most.
const SLOT_KEYS_BUDGET: i64 = 20_000;

impl RedisHost {
    pub fn new(ctx: Ctx) -> RedisHost {
        RedisHost {
            ctx,
            caller: cluster::Caller::Module,
            slot_keys_left: SLOT_KEYS_BUDGET,
        }
    }

    /// A host whose holder reads run with `caller`'s rights.
    pub fn reading_as(ctx: Ctx, caller: cluster::Caller) -> RedisHost {
        RedisHost {
            caller,
            ..RedisHost::new(ctx)
        }
    }
}

impl Host for RedisHost {
    type Peer = NodeId;

    fn now_ms(&self) -> i64 {
        self.ctx.now_ms()
    }

    fn new_id(&mut self) -> u64 {
        new_id()
    }

    fn is_master(&self) -> bool {
        is_master(self.ctx)
    }

    fn in_cluster(&self) -> bool {
        cluster::in_cluster(self.ctx)
    }

    fn paused(&self) -> bool {
        replication_gate::paused()
    }

    fn serves(&self, name: &[u8]) -> bool {
        serves(self.ctx, name)
    }

    fn refresh_routes(&mut self) {
        cluster::forget_topology();
    }

    fn link_address(&mut self, to: &NodeId) -> Option<std::net::SocketAddr> {
        cluster::topology(self.ctx, false).ok()?.client_address(to)
    }

    fn read_holder(&mut self, name: &[u8]) -> HolderAnswer {
        cluster::read_holder_as(self.ctx.ptr, name, self.caller)
    }

    fn route(&mut self, name: &[u8]) -> Route<NodeId> {
        match route(self.ctx, name) {
            Ok(None) => Route::Here,
            Ok(Some(node)) => Route::To(node),
            Err(_) => {
                cluster::forget_topology();
                Route::Unknown
            }
        }
    }

    fn moving(&self, name: &[u8]) -> bool {
        super::slot_migration::moving_key(name)
    }

    fn db(&self) -> i32 {
        selected_db(self.ctx)
    }

    fn select_db(&mut self, db: i32) -> bool {
        super::ctr_store::select_db(self.ctx, db)
    }

    fn read<R>(&self, name: &[u8], f: impl FnOnce(Option<&Counter>) -> R) -> Option<R> {
        let key = KeyName::new(self.ctx, name);
        with_counter(self.ctx, key.raw, |c| match c {
            Some(CounterRef::Boxed(b)) => f(Some(b)),
            Some(other) => f(Some(&other.to_counter())),
            None => f(None),
        })
        .ok()
    }

    fn write_step(&mut self, name: &[u8], step: Step) -> Result<StepOutcome, String> {
        let key = KeyName::new(self.ctx, name);
        write_step(self.ctx, key.raw, |_| step).map_err(|e| e.0.into_owned())
    }

    fn expire_at(&mut self, name: &[u8], at_ms: i64) {
        let name = KeyName::new(self.ctx, name);
        let key = Key::open(self.ctx, name.raw, true);
        key.set_abs_expire(at_ms);
        drop(key);
        let at = at_ms.to_string();
        self.ctx.replicate(c"PEXPIREAT", name.raw, &[at.as_bytes()]);
    }

    fn current_home(&mut self, carried: &[u8]) -> Vec<u8> {
        super::home_names::current_home(self.ctx, carried.to_vec())
    }

    fn living_home(&self, name: &[u8], spread_id: u64) -> Option<Vec<u8>> {
        super::home_names::living_home(self.ctx, name, spread_id)
    }

    fn take_noted(&mut self) -> Vec<(i32, Vec<u8>)> {
        let mut noted: Vec<(i32, Vec<u8>)> = NOTED.with(|n| n.borrow_mut().drain().collect());
        noted.extend(crate::persist::ctr_type::take_loaded_with_transfers());
        noted
    }

    fn replication(&mut self) -> Option<Replication> {
        replication_gate::read(self.ctx)
    }

    fn wait_for_replicas(&mut self, now: &Replication) {
        // The replicas are asked to acknowledge now; what waited goes a few ms later, not at
        // their next once-a-second acknowledgement.
        replication_gate::ask_replicas_to_acknowledge(self.ctx, now);
        scheduler::arm_once(self.ctx.ptr, When::After(RECHECK_MS), &RECHECK);
    }

    fn send(&mut self, to: &NodeId, message: NodeMessage) {
        let (kind, payloads): (MessageKind, Vec<Vec<u8>>) = match message {
            NodeMessage::Transfer(TransferMessage::Seal(m)) => {
                (MessageKind::Seal, vec![msg::encode_seal(&m)])
            }
            NodeMessage::Transfer(TransferMessage::Credit(m)) => {
                (MessageKind::Credit, vec![msg::encode_credit(&m)])
            }
            NodeMessage::Transfer(TransferMessage::Ack(m)) => {
                (MessageKind::Ack, vec![msg::encode_ack(&m)])
            }
            NodeMessage::Collect(c) => (
                MessageKind::Collect,
                collect_msg::encode_chunked(&c, MAX_MESSAGE_BYTES),
            ),
            NodeMessage::Collected(c) => (
                MessageKind::Collected,
                collect_msg::encode_chunked(&c, MAX_MESSAGE_BYTES),
            ),
            // Every ask of this version carries its request id.
            NodeMessage::AuditAsk { request, questions } => (
                MessageKind::AuditAsk,
                (audit_msg::chunks(&questions, |q| &q.home, MAX_MESSAGE_BYTES).into_iter())
                    .filter_map(|part| Some(audit_msg::encode_ask(request?, part)))
                    .collect(),
            ),
            NodeMessage::AuditAnswers { request, answers } => (
                MessageKind::AuditAnswer,
                (audit_msg::chunks(&answers, |(q, _)| &q.home, MAX_MESSAGE_BYTES).into_iter())
                    .map(|part| audit_msg::encode_answers(request, part))
                    .collect(),
            ),
            NodeMessage::DemandNotice(home) => (
                MessageKind::DemandNotice,
                vec![demand_msg::encode_notice(&home)],
            ),
            NodeMessage::DemandPoll(p) => (
                MessageKind::DemandPoll,
                vec![demand_msg::encode_poll(p.id, &p.home, &p.names)],
            ),
            NodeMessage::DemandAnswer { id, reports } => (
                MessageKind::DemandAnswer,
                vec![demand_msg::encode_answer(id, &reports)],
            ),
            NodeMessage::DemandGive(g) => {
                (MessageKind::DemandGive, vec![demand_msg::encode_give(&g)])
            }
            NodeMessage::HolderCheckRequest { id, holder } => (
                MessageKind::HolderCheckRequest,
                vec![holder_check_msg::encode_request(id, &holder)],
            ),
            NodeMessage::HolderCheckResponse { id, verdict } => (
                MessageKind::HolderCheckResponse,
                vec![holder_check_msg::encode_response(id, verdict)],
            ),
            NodeMessage::AdmissionRequest { id, name } => (
                MessageKind::AdmissionRequest,
                vec![admission_msg::encode_request(id, &name)],
            ),
            NodeMessage::AdmissionResponse { id, answer } => (
                MessageKind::AdmissionResponse,
                vec![admission_msg::encode_response(id, answer)],
            ),
            NodeMessage::Headroom(h) => {
                (MessageKind::Headroom, vec![demand_msg::encode_headroom(&h)])
            }
            NodeMessage::GatherRequest { id, names, link } => {
                let payload = gather_msg::encode_request(id, names.iter().map(Vec::as_slice));
                // Its first send goes on the master's read link when one is ready.
                if link.is_some() && super::read_links::send(to, link, id, &payload) {
                    return;
                }
                (MessageKind::GatherRequest, vec![payload])
            }
            NodeMessage::GatherResponse { id, answers } => (
                MessageKind::GatherResponse,
                vec![gather_msg::encode_response(id, &answers)],
            ),
        };
        for payload in payloads {
            cluster::send(self.ctx.ptr, to, kind, &payload);
        }
    }

    fn slot_served_here(&mut self, name: &[u8]) -> Option<bool> {
        match cluster::route(self.ctx.ptr, name) {
            cluster::Route::Here => Some(true),
            cluster::Route::ClusterDown => None,
            cluster::Route::Elsewhere => Some(false),
        }
    }

    fn delete(&mut self, name: &[u8]) -> bool {
        super::ctr_store::delete(self.ctx, name)
    }

    fn collect_timeout_ms(&self) -> i64 {
        config::COLLECT_TIMEOUT_MS.load(Relaxed)
    }

    fn slot_holds_home(&mut self, home: &[u8], spread_id: u64) -> Option<bool> {
        let budget = self.slot_keys_left.min(MAX_SLOT_KEYS);
        let keys = cluster::keys_in_slot(self.ctx, key_slot(home), budget)?;
        self.slot_keys_left -= keys.len() as i64;
        Some(
            keys.iter()
                .any(|k| super::home_names::holds_home(self.ctx, k, spread_id)),
        )
    }

    fn slot_home_lists(
        &mut self,
        home: &[u8],
        spread_id: u64,
        holder: &[u8],
        limit: i64,
    ) -> Option<(bool, i64)> {
        let keys = cluster::keys_in_slot(self.ctx, key_slot(home), limit)?;
        let lists = keys.iter().any(|k| {
            super::home_names::holds_home(self.ctx, k, spread_id)
                && self.read(k, |c| c.is_some_and(|c| lists_holder(c, holder))) == Some(true)
        });
        Some((lists, keys.len() as i64))
    }

    fn orphan_grace_ms(&self) -> i64 {
        config::ORPHAN_GRACE_MS.load(Relaxed)
    }

    fn count(&mut self, event: Event) {
        match event {
            Event::Sealed => metrics::TRANSFERS_STARTED.incr(),
            Event::Credited => metrics::TRANSFERS_CREDITED.incr(),
            Event::DuplicateCredit => metrics::TRANSFERS_DUPLICATE_CREDITS.incr(),
            Event::Refused => metrics::TRANSFERS_REFUSED.incr(),
            Event::RolledBack => metrics::TRANSFERS_ROLLED_BACK.incr(),
            Event::Acked => metrics::TRANSFERS_ACKED.incr(),
            Event::Resent => metrics::TRANSFERS_RESENT.incr(),
            Event::Collections(n) => metrics::COLLECTIONS.add(n),
            Event::CollectionsAbandoned(n) => metrics::COLLECTIONS_ABANDONED.add(n),
            Event::CollectionsPending(n) => metrics::COLLECTIONS_PENDING.set(n),
            Event::AuditPass => metrics::AUDIT_PASSES.incr(),
            Event::AuditQuestions(n) => metrics::AUDIT_QUESTIONS.add(n),
            Event::OrphanReported => metrics::AUDIT_ORPHANS.incr(),
            Event::OrphansReported(n) => metrics::ORPHANS_REPORTED.set(n),
            Event::OrphanHoldersDeleted(n) => metrics::ORPHAN_HOLDERS_DELETED.add(n),
            Event::BudgetMove => {
                metrics::BUDGET_MOVES.incr();
                metrics::TRANSFERS_STARTED.incr();
            }
            Event::BudgetMoveSkipped => metrics::BUDGET_MOVES_SKIPPED.incr(),
            Event::HolderCheckTimeouts(n) => metrics::HOLDER_CHECK_TIMEOUTS.add(n),
            Event::HolderCheckResent => metrics::HOLDER_CHECK_RESENDS.incr(),
            Event::HolderNameAsked => metrics::HOLDER_NAMES_ASKED.incr(),
            Event::HolderNameTaken => metrics::HOLDER_NAMES_TAKEN.incr(),
            Event::GatherReroutes(n) => metrics::GATHER_REROUTES.add(n),
            Event::GatherRequestServed => metrics::GATHER_REQUESTS_SERVED.incr(),
        }
    }

    fn warn(&mut self, why: &str) {
        self.ctx.log_warning(why);
    }

    fn token_window_ms(&self) -> i64 {
        config::TOKEN_WINDOW_MS.load(Relaxed)
    }

    fn holds_credits(&self) -> bool {
        config::DEBUG_HOLD_CREDITS.load(Relaxed)
    }
}

/// A machine's message as the bus carried it, decoded (the reverse of [`RedisHost::send`]'s
/// encoding), for the kinds one message each (a collection's and an audit's are chunked and
/// decoded by their receivers). None: another kind, or malformed (dropped: the sender asks
/// again, or the outcome is that of a lost message).
pub(crate) fn decode_message(kind: MessageKind, payload: &[u8]) -> Option<NodeMessage> {
    use MessageKind as K;
    let transfer = |m: Result<TransferMessage, _>| m.map(NodeMessage::Transfer);
    let decoded = match kind {
        K::Seal => transfer(msg::decode_seal(payload).map(TransferMessage::Seal)),
        K::Credit => transfer(msg::decode_credit(payload).map(TransferMessage::Credit)),
        K::Ack => transfer(msg::decode_ack(payload).map(TransferMessage::Ack)),
        K::DemandNotice => demand_msg::decode_notice(payload).map(NodeMessage::DemandNotice),
        K::DemandPoll => demand_msg::decode_poll(payload).map(NodeMessage::DemandPoll),
        K::DemandAnswer => demand_msg::decode_answer(payload)
            .map(|(id, reports)| NodeMessage::DemandAnswer { id, reports }),
        K::DemandGive => demand_msg::decode_give(payload).map(NodeMessage::DemandGive),
        K::Headroom => demand_msg::decode_headroom(payload).map(NodeMessage::Headroom),
        K::HolderCheckRequest => holder_check_msg::decode_request(payload).map(|(id, holder)| {
            let holder = holder.to_vec();
            NodeMessage::HolderCheckRequest { id, holder }
        }),
        K::HolderCheckResponse => holder_check_msg::decode_response(payload)
            .map(|(id, verdict)| NodeMessage::HolderCheckResponse { id, verdict }),
        K::AdmissionRequest => admission_msg::decode_request(payload).map(|(id, name)| {
            let name = name.to_vec();
            NodeMessage::AdmissionRequest { id, name }
        }),
        K::AdmissionResponse => admission_msg::decode_response(payload)
            .map(|(id, answer)| NodeMessage::AdmissionResponse { id, answer }),
        _ => return None,
    };
    decoded.ok()
}

/// Runs a machine of name questions (the holder check, the admission) over this server, then
/// wakes the clients waiting on the keys its questions that ended name (`ended` takes them).
pub(crate) fn run_and_wake<N: 'static, R: Default>(
    ctx: Ctx,
    machine: &'static LocalKey<RefCell<N>>,
    what: &str,
    f: impl FnOnce(&mut N, &mut RedisHost) -> R,
    ended: fn(&mut N) -> Vec<Vec<u8>>,
) -> R {
    let r = run_machine(ctx, machine, what, f);
    let woken = machine.with(|n| {
        n.try_borrow_mut()
            .map(|mut n| ended(&mut n))
            .unwrap_or_default()
    });
    if !woken.is_empty() {
        super::ctr_store::select_db(ctx, 0); // a cluster's only database
        for key in woken {
            super::waiter::key_written(ctx, &key);
        }
    }
    r
}

/// How long after asking the replicas to acknowledge the held sends are looked at again.
const RECHECK_MS: i64 = 2;

/// One pass of the node over its registry.
fn tick(ctx: Ctx) {
    super::home_names::take_loaded(); // what loading left for it, without waiting for a lookup
    run(ctx, |node, host| node.tick(host));
}

/// The registry's tick (a panic in it is a defect; the tick goes on).
static TICK: Job = Job::every(
    "transfer-tick",
    |ctx| {
        TICK_SOON.with(|t| t.set(false));
        tick(ctx);
    },
    TICK_MS,
);
/// One more tick right after the current command.
static SOON: Job = Job::once("transfer-tick", |ctx, _| tick(ctx));
/// One more tick once the replicas were asked to acknowledge.
static RECHECK: Job = Job::once("transfer-tick", |ctx, _| tick(ctx));

/// A tick at once (after the current command): a transfer just started, a fold began, an
/// acknowledgement was queued.
pub fn tick_soon(ctx: Ctx) {
    let queued = NODE.with(|n| n.try_borrow_mut().is_ok_and(|mut n| n.take_soon()));
    if TICK_SOON.with(|t| t.replace(false)) || queued {
        scheduler::arm(ctx.ptr, When::After(0), &SOON, 0);
    }
}

/// Receives this file's bus messages (from `bus`, the one receiver).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    if let Some(NodeMessage::Transfer(m)) = decode_message(kind, payload) {
        run(ctx, |node, host| node.receive(host, Some(from), m));
    }
    tick_soon(ctx);
}

/// After `RENAME` or `MOVE` (the key's `rename_to` / `move_to` event): a key keeps its
/// transfer state under its new name, which the registry does not know yet (it forgets the old
/// one at its next tick): the new name is tracked, so its seals and credits go on without
/// waiting for a restart to find it.
pub fn track_key(ctx: Ctx, key: RawString) {
    let name = string_bytes(key).to_vec();
    let db = selected_db(ctx);
    let _ = with_counter(ctx, key, |counter| {
        if let Some(CounterRef::Boxed(b)) = counter {
            track(db, &name, b);
        }
    });
}

/// Starts the registry's timer (from the module's load).
pub fn register(ctx: *mut raw::RedisModuleCtx) {
    scheduler::arm_once(ctx, When::After(TICK_MS), &TICK);
}
