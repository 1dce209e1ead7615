//! Collecting the holders of a spread counter whose home is gone, the Redis glue (the rules are
//! in `crate::counter::collect`, the bus payloads in `crate::persist::collect_msg`).
//!
//! 1. **What goes.** The type's `unlink2` callback (`persist::ctr_type`, where the server paths
//!    that call it are listed) stashes what a spread home leaves to collect when the server
//!    unlinks it, calling nothing of the server but its name and database. The keyspace event
//!    that follows in the same call decides (`collect::event_rule`): `del`, `expired`,
//!    `evicted`, or its name overwritten (`rename_to`, `restore`, `copy_to`) claim it;
//!    `rename_from` and `move_from` (the counter lives on under another name or database)
//!    forget it; what is still stashed at the next tick is claimed when its name now holds a
//!    value of another type (`SET`, `SORT ... STORE`, `SUNIONSTORE` and the like overwrote it:
//!    their events are of classes the module does not subscribe to), and forgotten otherwise. Never collect on a
//!    doubt: a leak is better than a lost unit. `FLUSHALL`/`FLUSHDB` unlink nothing: in a
//!    cluster, the flush's start event walks the database (O(keys), like the flush; a flush
//!    with `ASYNC` pays that walk on the main thread) and claims every spread home in it.
//!    Outside a cluster a home's holders sit in its own database and go with the flush.
//! 2. **Checked** on a master once its online replicas hold the deletion (read from `INFO
//!    replication` by the timer, as transfers wait: a failover that loses the `DEL` brings the
//!    home back, and its holders must be there then; replicas acknowledge about once a second,
//!    a master without replicas goes at the next tick): in a cluster the home's slot must still be
//!    served here (the server's routing check, through `RM_Call`), which fails for `MIGRATE`'s
//!    `del` on the source of a slot migration and for keys a node drops with a slot it lost
//!    (Valkey sends them `del`), so nothing is collected then; the name must not hold a home
//!    of the same spread again (`RESTORE` of its dump, `DEBUG RELOAD`); and the deleted key
//!    must not be a copy of a home restored under another name (`collect::still_to_collect`).
//! 3. **Sent.** Outside a cluster the holders are deleted there and then (the tick runs right
//!    after the command). In a cluster the master serving each holder's slot is asked over the
//!    bus (type 0xCC, as few messages as fit in 32 KB each) and answers with the names it
//!    handled (0xCD); holders this master serves are deleted directly. Unanswered names go
//!    again every 100 ms, to whichever master serves their slot then, until
//!    `ctr.collect-timeout-ms`; then the collection is dropped and counted abandoned.
//! 4. **Deleted** by a receiver only when it serves the name's slot as a master, the key is a
//!    counter of this module and its name is a holder of exactly that spread id and carried
//!    home (`collect::verdict`); with `DEL` through `RM_Call`, replicated to its replicas and
//!    the AOF, with the server's own `del` event. It answers once its online replicas hold
//!    those deletions (the same gate as claims; at most 1024 answers held, past that a request
//!    goes unanswered and is asked again): a failover to a replica that lacked them brings the
//!    holders back while the sender still asks.
//!
//! Bounds: the stash holds 1024 homes at most (oldest dropped), claims and pending collections
//! 8 MB of names each (past that a home's collection is abandoned at once), a tick sends or
//! deletes at most 4096 names (the rest wait for the next tick) and a receiver handles at most
//! 4096 names per message (the rest are asked again).
//!
//! Failover: a replica claims what its master's replicated `DEL`s unlink, keeps it for the
//! timeout, and sends it if it is promoted within it (a receiver answers a holder already
//! deleted as gone); a failover to a replica that never got the `DEL` finds the home and every
//! holder (nothing was collected before the replicas held it). A master that restarts from
//! its AOF claims the deletions it replays again (checked as above once loading is over, the
//! cluster waited for while it is down; holders already collected answer as gone). What no collection reaches (collections
//! pending on a master that restarts from an RDB alone, a flush's claims when its master fails
//! over right after it: replicas do not walk, holders whose master does not answer within the
//! timeout) the orphan audit finds from the holders' side (`spread_audit`).

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::raw;

use super::ctr_store::with_counter;
use super::replication_gate::{self, Gate};
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, NodeId};
use super::spread_transfer::{is_master, route, selected_db, serves};
use crate::config;
use crate::counter::collect::{self, Collection, EventRule, Found, Pending, Seen, Verdict};
use crate::counter::spread::key_slot;
use crate::counter::{Counter, CounterCell, CounterRef};
use crate::ffi::{rm, string_bytes, Ctx, KeyName, RawString};
use crate::guard::guard;
use crate::metrics;
use crate::persist::collect_msg;
use crate::persist::ctr_type::ctr_type;
use crate::protocol::messages::MessageKind;

const MSG_COLLECT: MessageKind = MessageKind::Collect;
const MSG_COLLECTED: MessageKind = MessageKind::Collected;

/// The timer's period (also the resend period: `collect::RESEND_MS`).
const TICK_MS: i64 = 100;
const MAX_STASH: usize = 1024;
const MAX_CLAIM_BYTES: usize = 8 << 20;
const MAX_PENDING_BYTES: usize = 8 << 20;
const MAX_NAMES_PER_TICK: usize = 4096;
const MAX_NAMES_PER_MESSAGE: usize = 4096;
const MAX_MESSAGE_BYTES: usize = 32 * 1024;
/// Answers held for the replicas, at most (past it a request goes unanswered: asked again).
const MAX_HELD_ANSWERS: usize = 1024;

/// What a home left when it was unlinked (stashed), or the claim the event made of it.
struct Left {
    db: c_int,
    name: Vec<u8>,
    collections: Vec<Collection>,
    /// When it was claimed (the collection's deadline counts from there).
    at_ms: i64,
    /// A claim starts only once this master's replicas hold the deletion that made it.
    gate: Gate,
}

/// A receiver's answer, held until this master's replicas hold the deletions it answers: a
/// failover to a replica that never got them would bring the holders back after the sender
/// stopped asking.
struct HeldAnswer {
    to: NodeId,
    answered: Vec<Collection>,
    gate: Gate,
}

struct State {
    stash: Vec<Left>,
    claims: Vec<Left>,
    claim_bytes: usize,
    pending: Pending,
    held: Vec<HeldAnswer>,
}

/// Behind a lock rather than thread-local: `unlink2` and keyspace events run on whichever
/// thread holds the server's lock (a module's thread-safe context may delete keys). Never held
/// across a server call (a `DEL` here runs `unlink2` and the event handler again).
static STATE: Mutex<State> = Mutex::new(State {
    stash: Vec::new(),
    claims: Vec::new(),
    claim_bytes: 0,
    pending: Pending::with_cap(MAX_PENDING_BYTES),
    held: Vec::new(),
});
/// Something is stashed: the keyspace event handler's fast path.
static STASHED: AtomicBool = AtomicBool::new(false);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn bytes_of(collections: &[Collection]) -> usize {
    collections.iter().map(Collection::bytes).sum()
}

/// Stashes every home the type's `unlink2` saw unlinked since the last look.
fn take_unlinked() {
    for (db, name, left) in crate::persist::ctr_type::take_unlinked() {
        stash(db, &name, left);
    }
}

/// The home `name` of database `db` was unlinked, leaving `collections`.
fn stash(db: c_int, name: &[u8], collections: Vec<Collection>) {
    let mut s = state();
    s.stash.retain(|l| !(l.db == db && l.name == name));
    if s.stash.len() >= MAX_STASH {
        s.stash.remove(0);
    }
    s.stash.push(Left {
        db,
        name: name.to_vec(),
        collections,
        at_ms: 0,
        gate: Gate::default(),
    });
    STASHED.store(true, Relaxed);
}

/// A keyspace event (any class the module subscribes to): claims or forgets what the unlink
/// of that key just stashed.
pub fn on_event(ctx: Ctx, event: &[u8], key: RawString) {
    take_unlinked();
    if !STASHED.load(Relaxed) {
        return;
    }
    let rule = collect::event_rule(event);
    if rule == EventRule::Ignore {
        return;
    }
    let db = selected_db(ctx);
    let name = string_bytes(key);
    let left = {
        let mut s = state();
        let at = s.stash.iter().position(|l| l.db == db && l.name == name);
        at.map(|i| s.stash.swap_remove(i))
    };
    let Some(mut left) = left else {
        return;
    };
    if rule == EventRule::Forget || !seen_ending_here(ctx, name) {
        return;
    }
    left.at_ms = ctx.now_ms();
    claim(vec![left]);
    soon(ctx);
}

/// True when the home's end was seen by its own master: positive evidence that the spread
/// ended, the only kind a collection acts on. Not an AOF replay nor a replica's replicated
/// `DEL` (either may be a `MIGRATE`'s own `del`, whose home lives on elsewhere; a replica
/// promoted after a reshard lost the slot's migrating state), and in a cluster not a home
/// whose slot the routing check sends elsewhere the moment it went (`MIGRATE` on the source
/// of a slot migration: the key is gone and the slot migrating, so the server would redirect;
/// read now, not at the next tick, after which an operator may have cancelled the reshard
/// with `SETSLOT ... STABLE`). A cluster down says nothing yet: the claim waits for the tick's
/// own check. What is not claimed is left to the orphan audit, which reports, never deletes.
fn seen_ending_here(ctx: Ctx, name: &[u8]) -> bool {
    let flags = ctx.flags();
    if flags & raw::REDISMODULE_CTX_FLAGS_LOADING != 0
        || flags & raw::REDISMODULE_CTX_FLAGS_MASTER == 0
    {
        return false;
    }
    !cluster::in_cluster(ctx) || cluster::route(ctx.ptr, name) != cluster::Route::Elsewhere
}

fn claim(lefts: Vec<Left>) {
    let mut s = state();
    for l in lefts {
        let size = bytes_of(&l.collections);
        if s.claim_bytes.saturating_add(size) > MAX_CLAIM_BYTES {
            metrics::COLLECTIONS_ABANDONED.add(l.collections.len() as u64);
            continue;
        }
        s.claim_bytes += size;
        s.claims.push(l);
    }
}

pub(crate) fn select_db(ctx: Ctx, db: c_int) -> bool {
    // SAFETY: ctx is live.
    unsafe { rm!(RedisModule_SelectDb)(ctx.ptr, db) == raw::REDISMODULE_OK as c_int }
}

/// One pass: claims what was overwritten by another type and forgets what else no event
/// claimed, checks the claims and starts their collections
/// (a master), sends what is due, drops what is past the timeout.
fn tick(ctx: Ctx) {
    if super::replication_gate::paused() {
        return; // the next tick does this one's work
    }
    // An unlink is claimed by its event in the same call: what is left now never will be,
    // unless its name now holds another type (`claim_overwritten`).
    take_unlinked();
    let now = ctx.now_ms();
    let timeout = config::COLLECT_TIMEOUT_MS.load(Relaxed);
    let idle = {
        let s = state();
        s.stash.is_empty() && s.claims.is_empty() && s.pending.is_empty() && s.held.is_empty()
    };
    if idle {
        return;
    }
    claim_overwritten(ctx, now);
    let master = is_master(ctx);
    let claims = {
        let mut s = state();
        s.claim_bytes = 0;
        if master {
            std::mem::take(&mut s.claims)
        } else {
            // A replica claims nothing (a replicated `DEL` may be a `MIGRATE`'s: no proof that
            // a spread ended, `seen_ending_here`); promoted, it leaves what its old master had
            // not collected to the audit. Collections a demoted master had pending are dropped.
            s.claims.clear();
            s.pending.clear();
            s.held.clear(); // the senders ask the new master
            metrics::COLLECTIONS_PENDING.set(0);
            return;
        }
    };
    let in_cluster = cluster::in_cluster(ctx);
    // Read once per tick, after the deletions of earlier commands were propagated.
    let replication = replication_gate::read(ctx);
    if let Some(r) = &replication {
        send_held_answers(ctx, r);
    }
    let mut started: Vec<(Collection, i64)> = Vec::new();
    let mut waiting: Vec<Left> = Vec::new();
    for mut left in claims {
        if now.saturating_sub(left.at_ms) > timeout {
            metrics::COLLECTIONS_ABANDONED.add(left.collections.len() as u64);
            continue;
        }
        // Not before the replicas hold the deletion: a failover that lost it would bring the
        // home back, and its holders must be there then.
        let replicas_hold_it = replication.as_ref().is_some_and(|r| left.gate.open(r));
        if !replicas_hold_it {
            waiting.push(left);
            continue;
        }
        if !select_db(ctx, left.db) {
            continue;
        }
        // The home's slot is not served here now (a slot migration's MIGRATE, a slot this
        // node lost): a doubt, so nothing is collected. A cluster down (a node that just
        // restarted and has not heard from the others yet) says nothing: the claim waits,
        // within the timeout.
        if in_cluster {
            match cluster::route(ctx.ptr, &left.name) {
                cluster::Route::Here => {}
                // Down (a node just restarted, before it heard from the others): wait.
                cluster::Route::ClusterDown => {
                    waiting.push(left);
                    continue;
                }
                cluster::Route::Elsewhere => continue,
            }
        }
        let todo: Vec<Collection> = left
            .collections
            .into_iter()
            .filter(|c| still_to_collect(ctx, c, &left.name, in_cluster))
            .collect();
        if in_cluster {
            started.extend(todo.into_iter().map(|c| (c, left.at_ms)));
        } else {
            // One server: every holder is here, in the home's database.
            metrics::COLLECTIONS.add(todo.len() as u64);
            collect_here(ctx, &todo, usize::MAX);
        }
    }
    select_db(ctx, 0);
    let due = {
        let mut s = state();
        s.claim_bytes += waiting
            .iter()
            .map(|l| bytes_of(&l.collections))
            .sum::<usize>();
        s.claims.extend(waiting);
        for (c, at) in started {
            if s.pending.add(c, at) {
                metrics::COLLECTIONS.incr();
            } else {
                metrics::COLLECTIONS_ABANDONED.incr();
            }
        }
        let abandoned = s.pending.expire(now, timeout);
        metrics::COLLECTIONS_ABANDONED.add(abandoned as u64);
        s.pending.due(now, MAX_NAMES_PER_TICK)
    };
    if !due.is_empty() {
        send(ctx, due);
    }
    let left = state().pending.len();
    metrics::COLLECTIONS_PENDING.set(left as u64);
}

/// Claims what is still stashed (no subscribed event claimed or forgot it) when its name now
/// holds a value of another type: a command of another event class (`SET`, `SORT ... STORE`,
/// `SUNIONSTORE` ...) overwrote the home, and the counter is gone. Anything else stashed is
/// forgotten (a doubt: a leak is better than a lost unit).
fn claim_overwritten(ctx: Ctx, now: i64) {
    let stashed = {
        let mut s = state();
        STASHED.store(false, Relaxed);
        std::mem::take(&mut s.stash)
    };
    let overwritten: Vec<Left> = stashed
        .into_iter()
        .filter(|l| select_db(ctx, l.db) && holds_another_type(ctx, &l.name))
        .map(|l| Left { at_ms: now, ..l })
        .collect();
    select_db(ctx, 0);
    claim(overwritten);
}

fn holds_another_type(ctx: Ctx, name: &[u8]) -> bool {
    let key = KeyName::new(ctx, name);
    with_counter(ctx, key.raw, |_| ()).is_err()
}

/// The checks of `collect::still_to_collect`, on this master (the selected database).
fn still_to_collect(ctx: Ctx, c: &Collection, deleted_name: &[u8], in_cluster: bool) -> bool {
    // What a name holds, as a counter (another type, or an inline counter: not a home).
    let read = |name: &[u8], f: &mut dyn FnMut(Option<&Counter>) -> bool| -> bool {
        let key = KeyName::new(ctx, name);
        with_counter(ctx, key.raw, |k| match k {
            Some(CounterRef::Boxed(b)) => f(Some(b)),
            _ => f(None),
        })
        .unwrap_or_else(|_| f(None))
    };
    read(deleted_name, &mut |now_under_the_name| {
        // The carried home, when it is another name whose slot this master serves (in a
        // cluster, another slot is itself a reason not to collect).
        let carried_here =
            c.home != deleted_name && (!in_cluster || key_slot(&c.home) == key_slot(deleted_name));
        let check = |other_home: Option<&Counter>| {
            collect::still_to_collect(
                c,
                &Seen {
                    deleted_name,
                    now_under_the_name,
                    other_home,
                    in_cluster,
                },
            )
        };
        if carried_here {
            read(&c.home, &mut |carried| check(carried))
        } else {
            check(None)
        }
    })
}

/// Appends `name` to the collection of `c`'s spread at the end of `to`.
fn push_name(to: &mut Vec<Collection>, c: &Collection, name: Vec<u8>) {
    match to.last_mut() {
        Some(last) if last.spread_id == c.spread_id && last.home == c.home => {
            last.holders.push(name)
        }
        _ => to.push(Collection {
            spread_id: c.spread_id,
            home: c.home.clone(),
            holders: vec![name],
        }),
    }
}

/// Asks the master serving each name (this one directly) to collect it.
fn send(ctx: Ctx, due: Vec<Collection>) {
    let mut local: Vec<Collection> = Vec::new();
    let mut remote: BTreeMap<NodeId, Vec<Collection>> = BTreeMap::new();
    for c in &due {
        for name in &c.holders {
            match route(ctx, name) {
                Ok(None) => push_name(&mut local, c, name.clone()),
                Ok(Some(node)) => push_name(remote.entry(node).or_default(), c, name.clone()),
                // No master known for its slot now: asked again at the next resend.
                Err(_) => cluster::forget_topology(),
            }
        }
    }
    if !local.is_empty() {
        let answered = collect_here(ctx, &local, usize::MAX);
        on_answer(&answered);
    }
    for (node, collections) in remote {
        for m in collect_msg::encode_chunked(&collections, MAX_MESSAGE_BYTES) {
            cluster::send(ctx.ptr, &node, MSG_COLLECT, &m);
        }
    }
}

/// The receiver's side, on this server: deletes each name the rule allows, at most `budget`
/// names; returns the names handled (deleted, gone, or never the sender's), by collection.
/// A name whose slot this master does not serve is not answered (the sender re-routes it).
fn collect_here(ctx: Ctx, collections: &[Collection], budget: usize) -> Vec<Collection> {
    let mut answered = Vec::new();
    let mut left = budget;
    for c in collections {
        let mut done = Collection {
            spread_id: c.spread_id,
            home: c.home.clone(),
            holders: Vec::new(),
        };
        for name in &c.holders {
            if left == 0 {
                break;
            }
            left -= 1;
            if !serves(ctx, name) {
                continue;
            }
            let key = KeyName::new(ctx, name);
            let found = match with_counter(ctx, key.raw, |k| k.is_some()) {
                Ok(true) => Found::Counter,
                Ok(false) => Found::Missing,
                Err(_) => Found::Other,
            };
            drop(key);
            let handled = match collect::verdict(c, name, found) {
                Verdict::Delete => delete(ctx, name),
                Verdict::Gone | Verdict::Leave => true,
            };
            if handled {
                done.holders.push(name.clone());
            }
        }
        if !done.holders.is_empty() {
            answered.push(done);
        }
    }
    answered
}

/// `DEL name` through the server (`!`: replicated to the replicas and the AOF, with its
/// keyspace event); true when it ran.
pub(crate) fn delete(ctx: Ctx, name: &[u8]) -> bool {
    // SAFETY: ctx is live; "b" takes (pointer, length).
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx.ptr,
            c"DEL".as_ptr(),
            c"b!".as_ptr(),
            name.as_ptr().cast::<c_char>(),
            name.len(),
        )
    };
    if reply.is_null() {
        return false;
    }
    // SAFETY: a live reply, freed once below.
    let (kind, n) = unsafe {
        (
            rm!(RedisModule_CallReplyType)(reply),
            rm!(RedisModule_CallReplyInteger)(reply),
        )
    };
    // SAFETY: as above.
    unsafe { rm!(RedisModule_FreeCallReply)(reply) };
    let ran = kind as isize == raw::REDISMODULE_REPLY_INTEGER;
    if ran && n == 1 {
        metrics::HOLDERS_COLLECTED.incr();
    }
    ran
}

/// Sends every held answer whose deletions this master's replicas hold.
fn send_held_answers(ctx: Ctx, replication: &replication_gate::Replication) {
    let ready: Vec<HeldAnswer> =
        replication_gate::take_open(&mut state().held, replication, |h| &mut h.gate);
    for h in ready {
        for m in collect_msg::encode_chunked(&h.answered, MAX_MESSAGE_BYTES) {
            cluster::send(ctx.ptr, &h.to, MSG_COLLECTED, &m);
        }
    }
}

fn on_answer(answered: &[Collection]) {
    let mut s = state();
    for c in answered {
        s.pending.answered(c);
    }
    metrics::COLLECTIONS_PENDING.set(s.pending.len() as u64);
}

/// Receives this file's bus messages (from `bus`, the one receiver).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    match kind {
        MSG_COLLECT => {
            let Ok(collections) = collect_msg::decode(payload) else {
                return; // malformed or another version: as if lost
            };
            select_db(ctx, 0);
            let answered = collect_here(ctx, &collections, MAX_NAMES_PER_MESSAGE);
            if answered.is_empty() {
                return;
            }
            let mut s = state();
            if s.held.len() < MAX_HELD_ANSWERS {
                s.held.push(HeldAnswer {
                    to: from,
                    answered,
                    gate: Gate::default(),
                });
            }
            drop(s);
            soon(ctx);
        }
        MSG_COLLECTED => {
            if let Ok(answered) = collect_msg::decode(payload) {
                on_answer(&answered);
            }
        }
        _ => {}
    }
}

/// What one walk of a database found: every spread home and what it would leave.
struct Walk {
    at_ms: i64,
    db: c_int,
    found: Vec<Left>,
}

/// The flush's start event (the keys are still there): in a cluster, a master claims every
/// spread home of the flushed database (a cluster has only database 0).
unsafe extern "C" fn on_flush(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_START || data.is_null() {
        return;
    }
    guard(ctx, "flush", || {
        let c = Ctx { ptr: ctx };
        if !cluster::in_cluster(c) || !is_master(c) {
            return;
        }
        // SAFETY: the server passes its flush info with this event.
        let dbnum = unsafe { (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum };
        if dbnum != -1 && dbnum != 0 {
            return;
        }
        let homes = walk_homes(c, 0);
        if !homes.is_empty() {
            claim(homes);
            soon(c);
        }
    });
}

fn walk_homes(ctx: Ctx, db: c_int) -> Vec<Left> {
    if !select_db(ctx, db) {
        return Vec::new();
    }
    let mut walk = Walk {
        at_ms: ctx.now_ms(),
        db,
        found: Vec::new(),
    };
    // SAFETY: plain constructor; destroyed below.
    let cursor = unsafe { rm!(RedisModule_ScanCursorCreate)() };
    // SAFETY: ctx is live, the cursor ours, `walk` outlives every call.
    while unsafe {
        rm!(RedisModule_Scan)(
            ctx.ptr,
            cursor,
            Some(visit_home),
            (&mut walk as *mut Walk).cast(),
        )
    } != 0
    {}
    // SAFETY: made above, used no more.
    unsafe { rm!(RedisModule_ScanCursorDestroy)(cursor) };
    walk.found
}

unsafe extern "C" fn visit_home(
    _ctx: *mut raw::RedisModuleCtx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) {
    guard(_ctx, "flush-scan", || {
        if key.is_null() {
            return;
        }
        // SAFETY: privdata is the `Walk` passed to RedisModule_Scan by `walk_homes`.
        let walk = unsafe { &mut *privdata.cast::<Walk>() };
        // SAFETY: key is the open key of this scan step.
        let value = unsafe {
            if rm!(RedisModule_ModuleTypeGetType)(key) != ctr_type() {
                return;
            }
            rm!(RedisModule_ModuleTypeGetValue)(key)
        };
        // SAFETY: a live counter of our type, read only during this callback.
        let CounterRef::Boxed(c) = (unsafe { CounterCell::borrow(value) }) else {
            return;
        };
        if c.spread().is_none() && c.leaving().is_empty() {
            return;
        }
        let name = string_bytes(keyname);
        let collections = collect::left_by(name, c);
        if !collections.is_empty() {
            walk.found.push(Left {
                db: walk.db,
                name: name.to_vec(),
                collections,
                at_ms: walk.at_ms,
                gate: Gate::default(),
            });
        }
    });
}

/// The collector's tick (a panic in it is a defect; the tick goes on).
static TICK: Job = Job::every("collect-tick", tick, TICK_MS);
/// One more tick right after the current command (something was claimed).
static SOON: Job = Job::once("collect-tick", |ctx, _| tick(ctx));

fn soon(ctx: Ctx) {
    scheduler::arm_once(ctx.ptr, When::After(0), &SOON);
}

/// Registers the bus receivers and the flush event, and starts the timer (from the module's
/// load). The keyspace events reach [`on_event`] through `spread_transfer`'s subscription.
pub fn register(ctx: *mut raw::RedisModuleCtx) {
    let flush = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_FLUSHDB,
        dataver: 1,
    };
    // SAFETY: as above.
    unsafe { rm!(RedisModule_SubscribeToServerEvent)(ctx, flush, Some(on_flush)) };
    scheduler::arm_once(ctx, When::After(TICK_MS), &TICK);
}
