//! The orphan audit, the Redis glue (the rules are in `crate::counter::audit`, the node's part of
//! it, steps 2 to 4 below, in `crate::protocol::audit_node`, run here over
//! `spread_transfer::RedisHost`; the bus payloads are `crate::persist::audit_msg`; this file
//! walks the keys, step 1): the backstop that reports the holders of a spread whose
//! home is gone when no collection (`spread_collect`) took them: its claim was lost with a master
//! that restarted from an RDB alone, with a `FLUSHALL` whose master failed over before the
//! claims went, or given up after `ctr.collect-timeout-ms` while a holder's master did not
//! answer.
//!
//! 1. **Walk.** In a cluster, every master walks its keys with an incremental cursor
//!    (`RedisModule_Scan`), at most [`KEYS_PER_TICK`] keys per 100 ms tick, one whole pass every
//!    `ctr.audit-interval-ms` (default 60 s; 0 stops it). It notes every holder of a spread with
//!    an id that has no expiry (a folded holder kept for the token window, a windowed holder,
//!    goes by itself).
//! 2. **Ask.** For each spread it found, it asks the master serving the slot of the home name
//!    the holders carry (type 0xCE; itself directly when that is this master): does the spread
//!    live there? Unanswered questions are asked again after 5 s.
//! 3. **Answer** (type 0xCF, `audit::answer`): lives when a counter of that slot is a home of
//!    the spread (the carried name first, then every key of the slot, `CLUSTER
//!    GETKEYSINSLOT`: `RENAME`, `RESTORE` and `MIGRATE` keep a home in its slot); gone only when
//!    this node serves the slot as a master, nothing moves it (the routing check, an atomic slot
//!    migration) and it read all of the slot's keys (at most 20,000, and 20,000 slot keys per
//!    tick or received message); otherwise unsure, asked again a second later. A message holding a gone answer goes only once this master's
//!    replicas hold what it read (a failover must not bring back a home whose holders went).
//! 4. **Report.** A spread answered gone twice, the second at least `ctr.orphan-grace-ms`
//!    after the first (default 10 min: a home restored after its holders, by a tool that copies
//!    keys in any order, arrives within it), is reported (a warning in the log, INFO
//!    `ctr_orphans_reported`, `CTR.ORPHANS`), and its holders stay: an answer is absence, and
//!    absence is no proof that a spread ended (a reshard cancelled after its `MIGRATE`, or a
//!    failover that lost a migration's state, leaves a living home where its slot's master
//!    cannot see it). It is asked again every 10 s; a home found again clears the report. The
//!    holders go only on an operator's `CTR.ORPHANS DELETE id`, with the receiver's rule of
//!    collections (`collect::verdict`: `DEL`, replicated, only a counter whose name is a holder
//!    of exactly that spread id and carried home, in a slot this master serves).
//!
//! Cost: a pass reads every key once (about 0.1 µs each); one question per spread per pass (at
//! most 512 asked per tick); a gone answer reads the home slot's keys. Nothing runs outside a cluster (a home's holders sit
//! in its own database and go with it, `spread_collect`) or on a replica.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use redis_module::raw;

use super::replication_gate;
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, NodeId};
use super::spread_collect::select_db;
use super::spread_transfer::{is_master, run_machine, RedisHost};
use crate::config::AUDIT_INTERVAL_MS;
use crate::counter::audit::{self, Question};
use crate::counter::spread::parse_holder_name;
use crate::counter::{CounterCell, CounterRef};
use crate::ffi::{rm, string_bytes, Ctx};
use crate::guard::guard;
use crate::persist::audit_msg;
use crate::persist::ctr_type::ctr_type;
use crate::protocol::audit_node::AuditNode;
use crate::protocol::host::NodeMessage;
use crate::protocol::messages::MessageKind;

const TICK_MS: i64 = 100;
/// Keys one tick reads at most, and the most main-thread time it walks.
const KEYS_PER_TICK: usize = 1_000;
const TICK_TIME_CAP: Duration = Duration::from_micros(500);

/// Where the walk stands.
struct Walk {
    cursor: *mut raw::RedisModuleScanCursor,
    in_pass: bool,
    /// When the next pass may begin.
    next_pass_ms: i64,
}

thread_local! {
    // Timers and bus receivers run on the main thread.
    static WALK: RefCell<Option<Walk>> = const { RefCell::new(None) };
    /// This master's audit (request ids from a random start: an answer to an earlier life of
    /// this node matches nothing).
    static NODE: RefCell<AuditNode<NodeId>> =
        RefCell::new(AuditNode::new(u64::from_le_bytes(crate::ffi::random_bytes())));
}

/// Runs the audit node over this server (`spread_transfer::run_machine`: a new host each
/// time, so the slot keys it may read are counted per tick and per message).
fn run<R: Default>(ctx: Ctx, f: impl FnOnce(&mut AuditNode<NodeId>, &mut RedisHost) -> R) -> R {
    run_machine(ctx, &NODE, "the audit", f)
}

fn tick(ctx: Ctx) {
    if replication_gate::paused() {
        return; // the next tick does this one's work
    }
    let interval = AUDIT_INTERVAL_MS.load(Relaxed);
    if interval <= 0 || !cluster::in_cluster(ctx) {
        return;
    }
    if !is_master(ctx) {
        // A replica (or a node loading) follows nothing; promoted, it walks anew.
        run(ctx, |node, host| node.stop(host));
        WALK.with(|w| {
            if let Some(w) = w.borrow_mut().as_mut() {
                w.in_pass = false;
            }
        });
        return;
    }
    let now = ctx.now_ms();
    run(ctx, |node, host| node.send_held(host));
    walk(ctx, now, interval);
    run(ctx, |node, host| node.ask(host));
}

/// Walks up to [`KEYS_PER_TICK`] keys of database 0 (a cluster's only one), noting holders.
fn walk(ctx: Ctx, now: i64, interval: i64) {
    let mut found = Found::default();
    let ended = WALK.with(|cell| {
        let mut cell = cell.borrow_mut();
        let w = cell.get_or_insert_with(|| Walk {
            // SAFETY: plain constructor; one cursor for the server's life.
            cursor: unsafe { rm!(RedisModule_ScanCursorCreate)() },
            in_pass: false,
            next_pass_ms: now,
        });
        if !w.in_pass {
            if now < w.next_pass_ms {
                return false;
            }
            w.in_pass = true;
            w.next_pass_ms = now.saturating_add(interval);
            // SAFETY: the cursor is ours and live.
            unsafe { rm!(RedisModule_ScanCursorRestart)(w.cursor) };
        }
        select_db(ctx, 0);
        let started = Instant::now();
        while found.visited < KEYS_PER_TICK && started.elapsed() < TICK_TIME_CAP {
            // SAFETY: ctx is live, the cursor ours, `found` outlives the call.
            let more = unsafe {
                rm!(RedisModule_Scan)(
                    ctx.ptr,
                    w.cursor,
                    Some(visit),
                    (&mut found as *mut Found).cast(),
                )
            };
            if more == 0 {
                w.in_pass = false;
                return true;
            }
        }
        false
    });
    run(ctx, |node, host| {
        for (q, name) in found.holders {
            node.saw(q, &name, now);
        }
        if ended {
            node.end_pass(host);
        }
    });
}

#[derive(Default)]
struct Found {
    visited: usize,
    holders: Vec<(Question, Vec<u8>)>,
}

/// The scan callback: notes holders of spreads with an id that hold a counter and have no
/// expiry, with the question to ask about each (`audit::question_for`). It only reads.
unsafe extern "C" fn visit(
    ctx: *mut raw::RedisModuleCtx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) {
    guard(ctx, "audit-scan", || {
        // SAFETY: privdata is the `Found` passed to RedisModule_Scan by `walk`.
        let found = unsafe { &mut *privdata.cast::<Found>() };
        found.visited += 1;
        let name = string_bytes(keyname);
        if key.is_null() || parse_holder_name(name).is_none_or(|h| h.spread_id == 0) {
            return; // not a holder of a spread with an id (the cheap test first)
        }
        // SAFETY: key is the open key of this scan step.
        let value = unsafe {
            let mine = rm!(RedisModule_ModuleTypeGetType)(key) == ctr_type();
            if !mine || rm!(RedisModule_GetExpire)(key) != raw::REDISMODULE_NO_EXPIRE as i64 {
                return;
            }
            rm!(RedisModule_ModuleTypeGetValue)(key)
        };
        // SAFETY: a live counter of our type, read only during this callback.
        if let Some(q) = question_at(name, unsafe { CounterCell::borrow(value) }) {
            found.holders.push((q, name.to_vec()));
        }
    });
}

/// A spread this master's audit reports as an orphan.
pub struct Orphan {
    pub spread_id: u64,
    /// The home name its holders carry.
    pub home: Vec<u8>,
    /// Its holders on this master.
    pub holders: Vec<Vec<u8>>,
    /// When it was first reported (ms).
    pub since_ms: i64,
}

/// The spreads this master's audit reports as orphans (`CTR.ORPHANS`).
pub fn orphans() -> Vec<Orphan> {
    NODE.with(|n| {
        (n.borrow().audit().orphans())
            .map(|(q, holders, since_ms)| Orphan {
                spread_id: q.spread_id,
                home: q.home.clone(),
                holders: holders.to_vec(),
                since_ms,
            })
            .collect()
    })
}

/// The operator's order (`CTR.ORPHANS DELETE id`): see `AuditNode::delete_orphans`. How many
/// keys went; None when `id` is not reported here (nothing deleted).
pub fn delete_orphans(ctx: Ctx, id: u64) -> Option<u64> {
    run(ctx, |node, host| node.delete_orphans(host, id))
}

/// The question the walk asks about the holder `name` holding `c` (`audit::question_for`);
/// none about a stray, which is no holder (`strays`).
fn question_at(name: &[u8], c: CounterRef) -> Option<Question> {
    match c {
        CounterRef::Boxed(c) if c.is_stray() => None,
        CounterRef::Boxed(c) => audit::question_for(name, Some(c)),
        CounterRef::Inline(_) | CounterRef::Limiter(_) => audit::question_for(name, None),
    }
}

/// Receives this file's bus messages (from `bus`, the one receiver).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    let m = match kind {
        MessageKind::AuditAsk => match audit_msg::decode_ask(payload) {
            Ok((request, questions)) => NodeMessage::AuditAsk { request, questions },
            Err(_) => return, // malformed or another version: as if lost
        },
        MessageKind::AuditAnswer => match audit_msg::decode_answers(payload) {
            Ok((request, answers)) => NodeMessage::AuditAnswers { request, answers },
            Err(_) => return,
        },
        _ => return,
    };
    run(ctx, |node, host| node.receive(host, from, m));
}

/// The audit's tick (a panic in it is a defect; the tick goes on).
static TICK: Job = Job::every("audit-tick", tick, TICK_MS);

/// Registers the bus receivers and starts the timer (from the module's load).
pub fn register(ctx: *mut raw::RedisModuleCtx) {
    scheduler::arm_once(ctx, When::After(TICK_MS), &TICK);
}
