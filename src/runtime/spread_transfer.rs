//! Transfers between counters, the Redis glue (the rules are in `crate::counter::transfer`).
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
//! sits in a registry that a 100 ms timer walks: it sends the key's seals and credits again,
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
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::Ordering::Relaxed;

use redis_module::raw;

use super::ctr_store::{update_counter, with_counter};
use super::replication_gate::{self, Gate, Replication};
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, NodeId};
use crate::config;
use crate::counter::spread::{key_slot, parse_holder_name};
use crate::counter::step::{Step, StepOutcome};
use crate::counter::transfer::{AckEffect, CreditOutcome, Outgoing, TransferError, LEGACY_FOLD};
use crate::counter::{Counter, CounterRef};
use crate::ffi::{rm, string_bytes, CommandError, Ctx, Key, KeyName, RawString};
use crate::metrics;
use crate::persist::step_msg;
use crate::persist::transfer_msg::{self as msg, Ack, Credit, Seal};
use crate::protocol::messages::MessageKind;
use crate::protocol::timeout::Timeout;

const MSG_SEAL: MessageKind = MessageKind::Seal;
const MSG_CREDIT: MessageKind = MessageKind::Credit;
const MSG_ACK: MessageKind = MessageKind::Ack;

/// The registry's timer period, the first resend delay, and the longest one.
const TICK_MS: i64 = 100;
const MAX_BACKOFF_MS: i64 = 2_000;

/// How long a folded holder stays (sealed, refusing writes) after its credit is acknowledged,
/// at least: long enough for every writer's holder cache (1 s in the client libraries) to
/// learn the new holder list, so a late write meets the sealed error instead of making the key
/// anew. It stays the token window (`ctr.token-window-ms`) when that is longer, so that a
/// retried token replays its first answer there for as long as a token is remembered.
pub const SEALED_GRACE_MS: i64 = 60_000;

/// When a key is due to send (at once, then backing off while unanswered), whether it sent
/// before, and the replication its last write must reach before anything about it is sent.
struct Due {
    resend: Timeout,
    sent_before: bool,
    gate: Gate,
}

/// An acknowledgement waiting for the replicas to hold its credit.
struct PendingAck {
    to: NodeId,
    ack: Ack,
    gate: Gate,
}

/// Acknowledgements waiting at most (a giver whose ack was dropped sends its credit again).
const MAX_PENDING_ACKS: usize = 4096;

thread_local! {
    /// (db, key name) of every key with something to send.
    static REGISTRY: RefCell<HashMap<(c_int, Vec<u8>), Due>> = RefCell::new(HashMap::new());
    static PENDING_ACKS: RefCell<Vec<PendingAck>> = const { RefCell::new(Vec::new()) };
    /// Something was noted to send since the last tick: [`tick_soon`] may tick at once.
    static TICK_SOON: Cell<bool> = const { Cell::new(false) };
}

/// Records that `name` in `db` may have something to send (a no-op when it has not).
pub fn track(db: c_int, name: &[u8], c: &Counter) {
    if c.transfers().is_some_and(|t| t.has_pending()) {
        enter(db, name);
        TICK_SOON.with(|t| t.set(true));
    }
}

/// Puts `name` in `db` in the registry; a new write: what is sent about it waits for the
/// replicas to hold it.
fn enter(db: c_int, name: &[u8]) {
    REGISTRY.with(|r| {
        r.borrow_mut()
            .entry((db, name.to_vec()))
            .and_modify(|d| d.gate = Gate::default())
            .or_insert(Due {
                resend: Timeout::backoff_from_now(TICK_MS, MAX_BACKOFF_MS),
                sent_before: false,
                gate: Gate::default(),
            });
    });
}

pub use super::demand::selected_db;

/// The transfer API: see the module docs. Runs on the giver's master.
pub fn start(
    ctx: Ctx,
    giver: RawString,
    receiver: &[u8],
    dv: i64,
    df: i64,
) -> Result<Outgoing, CommandError> {
    let step = Step::Move {
        receiver: receiver.to_vec(),
        dv,
        df,
        now_ms: ctx.now_ms(),
        new_id: new_id(),
    };
    let StepOutcome::Moved(out) = write_step(ctx, giver, |_| step)? else {
        return Err(unexpected());
    };
    metrics::TRANSFERS_STARTED.incr();
    // A new credit goes at the next tick, not after the giver's backoff for older ones.
    REGISTRY.with(|r| {
        let key = (selected_db(ctx), string_bytes(giver).to_vec());
        if let Some(d) = r.borrow_mut().get_mut(&key) {
            d.resend.hurry();
        }
    });
    tick_soon(ctx);
    Ok(out)
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
        send_seals(ctx, string_bytes(home));
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
                .map(|o| (o.dv, o.df))
                .ok_or(super::ctr_store::SEALED),
            c => {
                let (value, floor) = super::ctr_store::value_and_floor(c);
                Ok((value, floor.unwrap_or(0)))
            }
        })??;
        let credit = Credit {
            from: holder.clone(),
            giver: holder,
            receiver: home_name.to_vec(),
            giver_id: new_id(),
            seq: u64::MAX,
            dv: owed.0,
            df: owed.1,
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
    cluster::topology(ctx, false)?.remote_owner(key_slot(name))
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

/// Sends one message toward the master of `to_key`, or handles it here when that is us.
fn deliver(ctx: Ctx, to_key: &[u8], kind: MessageKind, payload: &[u8]) {
    match route(ctx, to_key) {
        Ok(None) => handle(ctx, None, kind, payload),
        Ok(Some(node)) => {
            cluster::send(ctx.ptr, &node, kind, payload);
        }
        Err(_) => cluster::forget_topology(),
    }
}

fn handle(ctx: Ctx, from: Option<NodeId>, kind: MessageKind, payload: &[u8]) {
    let _ = match kind {
        MSG_SEAL => msg::decode_seal(payload).map(|m| on_seal(ctx, m)),
        MSG_CREDIT => msg::decode_credit(payload).map(|m| on_credit(ctx, from, m)),
        MSG_ACK => msg::decode_ack(payload).map(|m| on_ack(ctx, m)),
        _ => Ok(()),
    };
}

/// On the holder's master: seals the holder into its home (once), then sends the credit.
fn on_seal(ctx: Ctx, m: Seal) {
    // Only a key named as a holder is ever sealed (a home's state that names another key is
    // refused when it is decoded; this holds also for a request from an older version).
    if !serves(ctx, &m.holder) || parse_holder_name(&m.holder).is_none() {
        return;
    }
    let name = KeyName::new(ctx, &m.holder);
    match with_counter(ctx, name.raw, |c| c.is_none()) {
        Err(_) => return, // another type under the holder's name: nothing of ours to fold
        // The holder was sealed and then renamed (or restored under another name): the key
        // under its new name carries the fold. Sealing a new key at 0 under the old name would
        // send the home an empty credit for the same fold, which could end it first and leave
        // the holder's units refused for ever.
        Ok(true) if retarget_carried_fold(ctx, &m) => return,
        Ok(_) => {}
    }
    // A move toward the home under a name it had before a RENAME goes to this name.
    let stale_move = with_counter(ctx, name.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => b.has_move_to_former_home(&m.home),
        _ => false,
    });
    if stale_move == Ok(true) {
        let home = m.home.clone();
        let _ = write_step(ctx, name.raw, |_| Step::RetargetMoves { home });
    }
    // Its own moves still unanswered: it seals later (the home asks again), nothing to write.
    let busy = with_counter(ctx, name.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => {
            !b.is_sealed() && b.transfers().is_some_and(|t| !t.outbox.is_empty())
        }
        _ => false,
    });
    if busy == Ok(true) {
        return;
    }
    match write_step(ctx, name.raw, |_| seal_step(ctx, &m.home, m.fold_id)) {
        Ok(StepOutcome::Sealed(Some(_))) => metrics::TRANSFERS_STARTED.incr(),
        Ok(_) => {}
        Err(e) => ctx.log_warning(&format!("ctr: could not seal a holder: {}", e.0)),
    }
    // Sealed now or earlier: its credit goes (a repeat is harmless). Within one server's
    // command, at once (every step is in that command's replication); in a cluster, from the
    // registry's timer once the replicas hold the seal.
    if !cluster::in_cluster(ctx) {
        send_credits(ctx, &m.holder, false);
    }
}

/// The keys this server tracks (the registry holds every key with a transfer in flight) that
/// are sealed holders carrying the fold of `m`: each re-targets its fold to the home that asks
/// (it may have been renamed too). True when there was one.
fn retarget_carried_fold(ctx: Ctx, m: &Seal) -> bool {
    let db = selected_db(ctx);
    let names: Vec<Vec<u8>> = REGISTRY.with(|r| {
        r.borrow()
            .keys()
            .filter(|(d, _)| *d == db)
            .map(|(_, n)| n.clone())
            .collect()
    });
    let carriers: Vec<Vec<u8>> = names
        .into_iter()
        .filter(|n| {
            let key = KeyName::new(ctx, n);
            with_counter(ctx, key.raw, |c| match c {
                Some(CounterRef::Boxed(b)) => b.carries_fold(m.fold_id, &m.holder),
                _ => false,
            })
            .unwrap_or(false)
        })
        .collect();
    for carrier in &carriers {
        let key = KeyName::new(ctx, carrier);
        let moved_home = with_counter(ctx, key.raw, |c| match c {
            Some(CounterRef::Boxed(b)) => b.transfers().and_then(|t| t.sealed_into.clone()),
            _ => None,
        });
        if moved_home.ok().flatten().is_some_and(|into| into != m.home) {
            let _ = write_step(ctx, key.raw, |_| seal_step(ctx, &m.home, m.fold_id));
        }
    }
    !carriers.is_empty()
}

/// Sealing the key into `home` for the fold `fold_id`, now.
fn seal_step(ctx: Ctx, home: &[u8], fold_id: u64) -> Step {
    Step::Seal {
        home: home.to_vec(),
        fold_id,
        now_ms: ctx.now_ms(),
        new_id: new_id(),
    }
}

/// On the receiver's master: applies a credit it expects, once, then acknowledges it (also a
/// repeat); answers a credit it does not expect with a refusal. Nothing is answered while the
/// credit cannot be applied (the giver sends it again).
fn on_credit(ctx: Ctx, from: Option<NodeId>, m: Credit) {
    if config::DEBUG_HOLD_CREDITS.load(Relaxed) || !serves(ctx, &m.receiver) {
        return;
    }
    let name = KeyName::new(ctx, &m.receiver);
    // Decided on a read first: a repeat or a refusal writes nothing (and replicates nothing).
    let Ok((decided, missing_home)) = with_counter(ctx, name.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => (Counter::credit_outcome_at(Some(b), &m), false),
        Some(other) => (
            Counter::credit_outcome_at(Some(&other.to_counter()), &m),
            false,
        ),
        None => (
            Counter::credit_outcome_at(None, &m),
            parse_holder_name(&m.receiver).is_none(),
        ),
    }) else {
        return; // another type under the receiver's name
    };
    // A home name missing here (not yet, for the core): the home renamed on this master
    // answers a credit it applied under that name (the simulator's copy of the glue does too).
    let decided = if missing_home {
        Some(outcome_at_renamed_home(ctx, &m))
    } else {
        decided
    };
    let outcome = match decided {
        Some(outcome) => outcome,
        None => match write_step(ctx, name.raw, |_| Step::Credit(m.clone())) {
            Ok(StepOutcome::Credited(outcome)) => outcome,
            Ok(_) => return,
            Err(e) => {
                ctx.log_warning(&format!("ctr: could not apply a transfer credit: {}", e.0));
                return;
            }
        },
    };
    match outcome {
        CreditOutcome::Applied => metrics::TRANSFERS_CREDITED.incr(),
        CreditOutcome::Repeat => metrics::TRANSFERS_DUPLICATE_CREDITS.incr(),
        CreditOutcome::Refused => metrics::TRANSFERS_REFUSED.incr(),
        CreditOutcome::NotYet => return, // sent again by the giver
    }
    let ack = Ack {
        giver: m.giver,
        receiver: m.receiver,
        seq: m.seq,
        refused: outcome == CreditOutcome::Refused,
    };
    match from {
        None => on_ack(ctx, ack),
        Some(node) => queue_ack(node, ack),
    }
}

/// A credit to a home name missing here: the home renamed on this master (the renamed-home
/// rule, `home_names`) answers it as a repeat when it applied it under that name; else it is
/// not yet (see [`Counter::credit_outcome_at_renamed_home`]).
fn outcome_at_renamed_home(ctx: Ctx, m: &Credit) -> CreditOutcome {
    let renamed = parse_holder_name(&m.from)
        .filter(|h| h.spread_id != 0)
        .and_then(|h| super::home_names::living_home(ctx, &m.receiver, h.spread_id));
    let Some(home) = renamed else {
        return CreditOutcome::NotYet;
    };
    let key = KeyName::new(ctx, &home);
    let outcome = with_counter(ctx, key.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => Counter::credit_outcome_at_renamed_home(b, m),
        _ => CreditOutcome::NotYet,
    });
    outcome.unwrap_or(CreditOutcome::NotYet)
}

/// Queues an acknowledgement for the timer, which sends it once the replicas hold the credit.
fn queue_ack(to: NodeId, ack: Ack) {
    PENDING_ACKS.with(|p| {
        let mut pending = p.borrow_mut();
        let queued = pending.iter().any(|q| q.to == to && q.ack == ack);
        if !queued && pending.len() < MAX_PENDING_ACKS {
            pending.push(PendingAck {
                to,
                ack,
                gate: Gate::default(),
            });
        }
    });
    TICK_SOON.with(|t| t.set(true));
}

/// Sends the acknowledgements whose credits the replicas hold.
fn send_acks(ctx: Ctx, now: &Replication) {
    let ready: Vec<PendingAck> = PENDING_ACKS
        .with(|p| replication_gate::take_open(&mut p.borrow_mut(), now, |a| &mut a.gate));
    for a in ready {
        cluster::send(ctx.ptr, &a.to, MSG_ACK, &msg::encode_ack(&a.ack));
    }
}

/// On the giver's master: an acknowledgement forgets the outbox entry (a sealed holder with
/// nothing left to send expires after the grace period); a refusal rolls a budget move back.
fn on_ack(ctx: Ctx, m: Ack) {
    if !serves(ctx, &m.giver) {
        return;
    }
    let name = KeyName::new(ctx, &m.giver);
    let matters = with_counter(ctx, name.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => b.answer_matters(&m),
        _ => false,
    });
    if matters != Ok(true) {
        return;
    }
    let effect = match write_step(ctx, name.raw, |_| Step::Answer(m.clone())) {
        Ok(StepOutcome::Answered(effect)) => effect,
        Ok(_) => return,
        Err(e) => {
            ctx.log_warning(&format!("ctr: could not apply a transfer answer: {}", e.0));
            return;
        }
    };
    match effect {
        AckEffect::Nothing => {}
        AckEffect::RolledBack => metrics::TRANSFERS_ROLLED_BACK.incr(),
        AckEffect::Acknowledged { sealed_and_done } => {
            metrics::TRANSFERS_ACKED.incr();
            if sealed_and_done {
                // Kept for the token window at least: a retried token replays there.
                let window = config::TOKEN_WINDOW_MS.load(Relaxed);
                let at = ctx.now_ms().saturating_add(SEALED_GRACE_MS.max(window));
                let key = Key::open(ctx, name.raw, true);
                key.set_abs_expire(at);
                drop(key);
                ctx.replicate(c"PEXPIREAT", name.raw, &[at.to_string().as_bytes()]);
            }
        }
    }
}

/// What the counter at `name` has to send (seal requests and credits; none when missing).
fn messages_due(ctx: Ctx, name: &[u8]) -> (Vec<Seal>, Vec<Credit>) {
    let key = KeyName::new(ctx, name);
    with_counter(ctx, key.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => b.messages_due(name),
        _ => Default::default(),
    })
    .unwrap_or_default()
}

/// Sends (again) every credit in `giver`'s outbox; returns how many went.
fn send_credits(ctx: Ctx, giver: &[u8], resend: bool) -> usize {
    let (_, credits) = messages_due(ctx, giver);
    for credit in &credits {
        if resend {
            metrics::TRANSFERS_RESENT.incr();
        }
        deliver(
            ctx,
            &credit.receiver,
            MSG_CREDIT,
            &msg::encode_credit(credit),
        );
    }
    credits.len()
}

/// Asks (again) the master of every holder still leaving `home` to seal it.
fn send_seals(ctx: Ctx, home: &[u8]) -> usize {
    let (seals, _) = messages_due(ctx, home);
    for seal in &seals {
        deliver(ctx, &seal.holder, MSG_SEAL, &msg::encode_seal(seal));
    }
    seals.len()
}

/// One pass over the registry: sends what is due; forgets keys with nothing left to send.
/// A replica only drops the keys its master has finished with (it resumes the others once
/// promoted).
fn tick(ctx: Ctx) {
    if super::replication_gate::paused() {
        return; // the next tick does this one's work
    }
    super::home_names::take_loaded(); // what loading left for it, without waiting for a lookup
    for (db, name) in crate::persist::ctr_type::take_loaded_with_transfers() {
        enter(db, &name);
    }
    let master = is_master(ctx);
    let now = ctx.now_ms();
    // Read once per tick, after every write of earlier callbacks was propagated.
    let replication = if master {
        replication_gate::read(ctx)
    } else {
        PENDING_ACKS.with(|p| p.borrow_mut().clear());
        None
    };
    if let Some(r) = &replication {
        send_acks(ctx, r);
    }
    let due: Vec<(c_int, Vec<u8>, bool)> = REGISTRY.with(|r| {
        r.borrow()
            .iter()
            .filter(|(_, d)| d.resend.fired(now))
            .map(|((db, name), d)| (*db, name.clone(), d.sent_before))
            .collect()
    });
    let mut held_by_gate = false;
    for (db, name, resend) in due {
        // SAFETY: ctx is the timer's live context.
        if unsafe { rm!(RedisModule_SelectDb)(ctx.ptr, db) } != raw::REDISMODULE_OK as c_int {
            forget(db, &name);
            continue;
        }
        if !master {
            if !has_pending(ctx, &name) {
                forget(db, &name);
            }
            continue;
        }
        let replicas_hold_it = replication.as_ref().is_some_and(|now| {
            REGISTRY.with(|r| {
                r.borrow_mut()
                    .get_mut(&(db, name.clone()))
                    .is_some_and(|d| d.gate.open(now))
            })
        });
        if !replicas_hold_it {
            held_by_gate = true;
            continue; // asked again next tick
        }
        // A key whose slot moves (atomic slot migration, either way) sends nothing until the
        // move ends: then its new master sends (kept here, it goes on from here if the move
        // was aborted).
        if super::slot_migration::moving_key(&name) {
            continue;
        }
        let sent = send_seals(ctx, &name) + send_credits(ctx, &name, resend);
        if sent == 0 {
            forget(db, &name);
            continue;
        }
        REGISTRY.with(|r| {
            if let Some(d) = r.borrow_mut().get_mut(&(db, name)) {
                d.sent_before = true;
                d.resend.fire(now);
            }
        });
    }
    // SAFETY: as above; database 0 always exists.
    unsafe { rm!(RedisModule_SelectDb)(ctx.ptr, 0) };
    let acks_held = PENDING_ACKS.with(|p| !p.borrow().is_empty());
    if let (Some(r), true) = (&replication, held_by_gate || acks_held) {
        // The replicas are asked to acknowledge now; what waited goes a few ms later, not at
        // their next once-a-second acknowledgement.
        replication_gate::ask_replicas_to_acknowledge(ctx, r);
        recheck_soon(ctx);
    }
}

/// How long after asking the replicas to acknowledge the held sends are looked at again.
const RECHECK_MS: i64 = 2;

/// A one-shot tick [`RECHECK_MS`] from now, unless one is armed already.
fn recheck_soon(ctx: Ctx) {
    scheduler::arm_once(ctx.ptr, When::After(RECHECK_MS), &RECHECK);
}

fn has_pending(ctx: Ctx, name: &[u8]) -> bool {
    let name = KeyName::new(ctx, name);
    with_counter(ctx, name.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => b.transfers().is_some_and(|t| t.has_pending()),
        _ => false,
    })
    .unwrap_or(false)
}

fn forget(db: c_int, name: &[u8]) {
    REGISTRY.with(|r| r.borrow_mut().remove(&(db, name.to_vec())));
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

/// A tick at once (after the current command): a transfer just started or a fold began.
pub fn tick_soon(ctx: Ctx) {
    if TICK_SOON.with(|t| t.replace(false)) {
        scheduler::arm(ctx.ptr, When::After(0), &SOON, 0);
    }
}

/// Receives this file's bus messages (from `bus`, the one receiver).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    handle(ctx, Some(from), kind, payload);
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

/// Registers the bus receivers and starts the registry's timer (from the module's load).
pub fn register(ctx: *mut raw::RedisModuleCtx) {
    scheduler::arm_once(ctx, When::After(TICK_MS), &TICK);
}
