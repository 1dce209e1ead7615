//! Collecting the holders of a spread counter whose home is gone, the Redis glue: the rules are
//! in `crate::counter::collect`, the collector (steps 2 to 4 below: claims checked, sent, resent,
//! answered) is `crate::protocol::collect_node`, run here over `spread_transfer::RedisHost`; the
//! bus payloads are `crate::persist::collect_msg`. This file claims (step 1).
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
//! Failover: a replica claims nothing (a replicated `DEL` may be a `MIGRATE`'s, no proof that a
//! spread ended), and a promoted replica leaves what its old master had not collected to the
//! audit; a failover to a replica that never got the `DEL` finds the home and every holder
//! (nothing was collected before the replicas held it). A master that restarts from
//! its AOF claims the deletions it replays again (checked as above once loading is over, the
//! cluster waited for while it is down; holders already collected answer as gone). What no collection reaches (collections
//! pending on a master that restarts from an RDB alone, a flush's claims when its master fails
//! over right after it: replicas do not walk, holders whose master does not answer within the
//! timeout) the orphan audit finds from the holders' side (`spread_audit`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::raw;

use super::ctr_store::with_counter;
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, NodeId};
use super::spread_transfer::{is_master, run_machine, selected_db, RedisHost};
use crate::counter::collect::{self, Collection, EventRule};
use crate::counter::CounterCell;
use crate::counter::CounterRef;
use crate::ffi::{rm, string_bytes, Ctx, KeyName, RawString};
use crate::guard::guard;
use crate::metrics;
use crate::persist::collect_msg;
use crate::persist::ctr_type::ctr_type;
use crate::protocol::collect_node::{Claim, CollectNode};
use crate::protocol::host::NodeMessage;
use crate::protocol::messages::MessageKind;

/// The timer's period (also the resend period: `collect::RESEND_MS`).
const TICK_MS: i64 = 100;
const MAX_STASH: usize = 1024;

/// What the events told the collector since it last looked, in their order.
enum Told {
    /// A home's master saw it end: what it left.
    Claim(Claim),
    /// A home of these spreads is back under this name (db, name, spread ids).
    Back(c_int, Vec<u8>, Vec<u64>),
}

/// What unlinked homes left (stashed, `at_ms` 0), and what the events told the collector
/// since it last looked.
struct State {
    stash: Vec<Claim>,
    told: Vec<Told>,
}

/// Behind a lock rather than thread-local: `unlink2` and keyspace events run on whichever
/// thread holds the server's lock (a module's thread-safe context may delete keys). Never held
/// across a server call (a `DEL` here runs `unlink2` and the event handler again).
static STATE: Mutex<State> = Mutex::new(State {
    stash: Vec::new(),
    told: Vec::new(),
});
/// Something is stashed: the keyspace event handler's fast path.
static STASHED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This server's collector (run by the timer and the bus receiver, on the main thread).
    static NODE: std::cell::RefCell<CollectNode<NodeId>> =
        std::cell::RefCell::new(CollectNode::default());
}

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the collector over this server (`spread_transfer::run_machine`).
fn run<R: Default>(ctx: Ctx, f: impl FnOnce(&mut CollectNode<NodeId>, &mut RedisHost) -> R) -> R {
    run_machine(ctx, &NODE, "the collector", f)
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
    s.stash.push(Claim {
        db,
        name: name.to_vec(),
        collections,
        at_ms: 0,
    });
    STASHED.store(true, Relaxed);
}

/// A keyspace event (any class the module subscribes to): claims or forgets what the unlink
/// of that key just stashed; a home restored under a name (`restore`) undoes the claims its
/// deletion there made, whatever the collector reads later.
pub fn on_event(ctx: Ctx, event: &[u8], key: RawString) {
    claim_stashed(ctx, event, key);
    if event == b"restore" {
        let spreads = with_counter(ctx, key, |c| match c {
            Some(CounterRef::Boxed(b)) => collect::spreads_of(b),
            _ => Vec::new(),
        });
        if let Some(spreads) = spreads.ok().filter(|s| !s.is_empty()) {
            let name = string_bytes(key).to_vec();
            let back = Told::Back(selected_db(ctx), name, spreads);
            state().told.push(back);
        }
    }
}

/// Claims or forgets what the unlink of the event's key just stashed.
fn claim_stashed(ctx: Ctx, event: &[u8], key: RawString) {
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

/// Queues claims for the collector (its next tick takes them).
fn claim(claims: Vec<Claim>) {
    state().told.extend(claims.into_iter().map(Told::Claim));
}

pub(crate) use super::ctr_store::select_db;

/// One pass: claims what was overwritten by another type and forgets what else no event
/// claimed, then runs the collector (claims checked and started on a master, what is due sent,
/// what is past the timeout dropped).
fn tick(ctx: Ctx) {
    if super::replication_gate::paused() {
        return; // the next tick does this one's work
    }
    // An unlink is claimed by its event in the same call: what is left now never will be,
    // unless its name now holds another type (`claim_overwritten`).
    take_unlinked();
    let quiet = {
        let s = state();
        s.stash.is_empty() && s.told.is_empty()
    };
    if quiet && NODE.with(|n| n.try_borrow().is_ok_and(|n| n.is_idle())) {
        return;
    }
    claim_overwritten(ctx, ctx.now_ms());
    let told = std::mem::take(&mut state().told);
    run(ctx, |node, host| {
        for t in told {
            match t {
                Told::Claim(c) => metrics::COLLECTIONS_ABANDONED.add(node.claim(vec![c])),
                Told::Back(db, name, spreads) => node.unclaim(db, &name, &spreads),
            }
        }
        node.tick(host);
    });
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
    let overwritten: Vec<Claim> = stashed
        .into_iter()
        .filter(|l| select_db(ctx, l.db) && holds_another_type(ctx, &l.name))
        .map(|l| Claim { at_ms: now, ..l })
        .collect();
    select_db(ctx, 0);
    claim(overwritten);
}

fn holds_another_type(ctx: Ctx, name: &[u8]) -> bool {
    let key = KeyName::new(ctx, name);
    with_counter(ctx, key.raw, |_| ()).is_err()
}

/// Receives this file's bus messages (from `bus`, the one receiver).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    let Ok(collections) = collect_msg::decode(payload) else {
        return; // malformed or another version: as if lost
    };
    let m = match kind {
        MessageKind::Collect => NodeMessage::Collect(collections),
        MessageKind::Collected => NodeMessage::Collected(collections),
        _ => return,
    };
    if run(ctx, |node, host| {
        node.receive(host, from, m);
        node.take_soon()
    }) {
        soon(ctx);
    }
}

/// What one walk of a database found: every spread home and what it would leave.
struct Walk {
    at_ms: i64,
    db: c_int,
    found: Vec<Claim>,
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

fn walk_homes(ctx: Ctx, db: c_int) -> Vec<Claim> {
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
            walk.found.push(Claim {
                db: walk.db,
                name: name.to_vec(),
                collections,
                at_ms: walk.at_ms,
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
