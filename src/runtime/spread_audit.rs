//! The orphan audit, the Redis glue (the rules are in `crate::counter::audit`, the bus payloads
//! in `crate::persist::audit_msg`): the backstop that reports the holders of a spread whose
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
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use redis_module::raw;

use super::ctr_store::delete;
use super::ctr_store::with_counter;
use super::home_names;
use super::replication_gate::{self, Gate};
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, NodeId};
use super::spread_collect::select_db;
use super::spread_transfer::{is_master, route, serves};
use crate::config::{AUDIT_INTERVAL_MS, ORPHAN_GRACE_MS};
use crate::counter::audit::{self, Answer, Audit, Question};
use crate::counter::spread::{key_slot, parse_holder_name};
use crate::counter::{CounterCell, CounterRef};
use crate::ffi::{rm, string_bytes, Ctx, KeyName};
use crate::guard::guard;
use crate::metrics;
use crate::persist::audit_msg;
use crate::persist::ctr_type::ctr_type;
use crate::protocol::messages::MessageKind;

const MSG_ASK: MessageKind = MessageKind::AuditAsk;
const MSG_ANSWER: MessageKind = MessageKind::AuditAnswer;

const TICK_MS: i64 = 100;
/// Keys one tick reads at most, and the most main-thread time it walks.
const KEYS_PER_TICK: usize = 1_000;
const TICK_TIME_CAP: Duration = Duration::from_micros(500);
const MAX_MESSAGE_BYTES: usize = 32 * 1024;
/// A slot holding more keys than this is not read: its spreads are answered unsure.
const MAX_SLOT_KEYS: i64 = 20_000;
/// Slot keys read at most per tick and per received message (about 2 ms of main thread):
/// past it a question is answered unsure (asked again a second later).
const SLOT_KEYS_BUDGET: i64 = 20_000;
/// Questions this master asks (or answers itself) per tick at most.
const QUESTIONS_PER_TICK: usize = 512;
/// Answers held for the replicas, at most (past it a question goes unanswered: asked again).
const MAX_HELD: usize = 1024;

/// Where the walk stands.
struct Walk {
    cursor: *mut raw::RedisModuleScanCursor,
    in_pass: bool,
    /// When the next pass may begin.
    next_pass_ms: i64,
}

/// Answers that wait for this master's replicas.
struct Held {
    to: NodeId,
    /// The ask's request id (None: an earlier module's).
    request: Option<u64>,
    answers: Vec<(Question, Answer)>,
    gate: Gate,
}

/// Whom a question was asked of (None: this master) and under which request id: only the
/// answer of that master to that request ends it (`Audit::answered`).
type Asked = (Option<NodeId>, u64);

thread_local! {
    // Timers and bus receivers run on the main thread.
    static WALK: RefCell<Option<Walk>> = const { RefCell::new(None) };
    static AUDIT: RefCell<Audit<Asked>> = RefCell::new(Audit::default());
    /// The next request id (from a random start: an answer to an earlier life of this node
    /// matches nothing).
    static NEXT_REQUEST: std::cell::Cell<u64> =
        std::cell::Cell::new(u64::from_le_bytes(crate::ffi::random_bytes()));
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
    /// Slot keys the home side may still read in this tick or message.
    static SLOT_KEYS_LEFT: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
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
        AUDIT.with(|a| a.borrow_mut().clear());
        metrics::ORPHANS_REPORTED.set(0);
        HELD.with(|h| h.borrow_mut().clear());
        WALK.with(|w| {
            if let Some(w) = w.borrow_mut().as_mut() {
                w.in_pass = false;
            }
        });
        return;
    }
    let now = ctx.now_ms();
    if HELD.with(|h| !h.borrow().is_empty()) {
        if let Some(r) = replication_gate::read(ctx) {
            send_held(ctx, &r);
        }
    }
    walk(ctx, now, interval);
    ask(ctx, now);
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
    AUDIT.with(|a| {
        let mut a = a.borrow_mut();
        for (q, name) in found.holders {
            a.saw(q, &name, now);
        }
        if ended {
            a.end_pass();
            metrics::AUDIT_PASSES.incr();
            metrics::ORPHANS_REPORTED.set(a.orphan_count() as u64);
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

/// Asks what is due: this master answers its own homes' questions, the others get messages.
fn ask(ctx: Ctx, now: i64) {
    let due = AUDIT.with(|a| a.borrow_mut().due(now, QUESTIONS_PER_TICK));
    if due.is_empty() {
        return;
    }
    SLOT_KEYS_LEFT.set(SLOT_KEYS_BUDGET);
    metrics::AUDIT_QUESTIONS.add(due.len() as u64);
    let mut remote: BTreeMap<NodeId, Vec<Question>> = BTreeMap::new();
    for q in due {
        match route(ctx, &q.home) {
            // The home's master is this one: its deletions and ours share one replication
            // stream, in order, so nothing waits for the replicas.
            Ok(None) => {
                let asked = (None, next_request());
                AUDIT.with(|a| a.borrow_mut().asked(&q, asked));
                let a = home_side(ctx, &q);
                on_answer(ctx, asked, &q, a, now);
            }
            Ok(Some(node)) => remote.entry(node).or_default().push(q),
            // No master known for the slot now: asked again after the answer's timeout.
            Err(_) => cluster::forget_topology(),
        }
    }
    for (node, questions) in remote {
        for part in audit_msg::chunks(&questions, |q| &q.home, MAX_MESSAGE_BYTES) {
            let request = next_request();
            AUDIT.with(|a| {
                let mut a = a.borrow_mut();
                for q in part {
                    a.asked(q, (Some(node), request));
                }
            });
            cluster::send(
                ctx.ptr,
                &node,
                MSG_ASK,
                &audit_msg::encode_ask(request, part),
            );
        }
    }
}

fn next_request() -> u64 {
    NEXT_REQUEST.with(|n| {
        let id = n.get();
        n.set(id.wrapping_add(1));
        id
    })
}

/// The home side's answer, on this master (database 0).
fn home_side(ctx: Ctx, q: &Question) -> Answer {
    if !serves(ctx, &q.home) {
        return Answer::Unsure;
    }
    // The carried name, or the name this node saw that home renamed to: no slot to read.
    if home_names::living_home(ctx, &q.home, q.spread_id).is_some() {
        return Answer::Lives;
    }
    let budget = SLOT_KEYS_LEFT.get().min(MAX_SLOT_KEYS);
    let found = cluster::keys_in_slot(ctx, key_slot(&q.home), budget).map(|keys| {
        SLOT_KEYS_LEFT.set(SLOT_KEYS_LEFT.get() - keys.len() as i64);
        keys.iter()
            .any(|k| home_names::holds_home(ctx, k, q.spread_id))
    });
    audit::answer(true, found)
}

/// An answer of a master (None: this one) to one of this master's requests, counted only as
/// the answer to the question last asked of it under that request: a spread gone for good is
/// reported, and its holders here stay (absence is no proof that a spread ended; `CTR.ORPHANS
/// DELETE` is the operator's).
fn on_answer(ctx: Ctx, from: Asked, q: &Question, answer: Answer, now: i64) {
    let grace = ORPHAN_GRACE_MS.load(Relaxed);
    let (reported, count) = AUDIT.with(|a| {
        let mut a = a.borrow_mut();
        (a.answered(q, &from, answer, now, grace), a.orphan_count())
    });
    metrics::ORPHANS_REPORTED.set(count as u64);
    if !reported {
        return;
    }
    metrics::AUDIT_ORPHANS.incr();
    ctx.log_warning(&format!(
        "ctr: the audit reports spread {:016x} as an orphan: its home is not found on the master \
         of its slot; its holders here are kept (CTR.ORPHANS lists them, CTR.ORPHANS DELETE \
         {:016x} deletes them)",
        q.spread_id, q.spread_id
    ));
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
    AUDIT.with(|a| {
        a.borrow()
            .orphans()
            .map(|(q, holders, since_ms)| Orphan {
                spread_id: q.spread_id,
                home: q.home.clone(),
                holders: holders.to_vec(),
                since_ms,
            })
            .collect()
    })
}

/// The operator's order (`CTR.ORPHANS DELETE id`): deletes this master's holders of the
/// reported spread `id`, each read again (still a holder of exactly that spread id and carried
/// home, in a slot this master serves). How many keys went; None when `id` is not reported
/// here (nothing deleted).
pub fn delete_orphans(ctx: Ctx, id: u64) -> Option<u64> {
    let taken = AUDIT.with(|a| a.borrow_mut().take_orphans(id));
    if taken.is_empty() {
        return None;
    }
    let count = AUDIT.with(|a| a.borrow().orphan_count());
    metrics::ORPHANS_REPORTED.set(count as u64);
    select_db(ctx, 0);
    let mut deleted = 0;
    for c in &taken {
        let q = Question {
            spread_id: c.spread_id,
            home: c.home.clone(),
        };
        for name in &c.holders {
            if still_asked_with(ctx, name, &q) && delete(ctx, name) {
                deleted += 1;
            }
        }
    }
    metrics::ORPHAN_HOLDERS_DELETED.add(deleted);
    ctx.log_warning(&format!(
        "ctr: CTR.ORPHANS DELETE {id:016x} deleted {deleted} holder(s) of that spread"
    ));
    Some(deleted)
}

/// True when `name` is still a holder this master serves that the walk would ask about with
/// `q` (read again: it may have changed since the walk).
fn still_asked_with(ctx: Ctx, name: &[u8], q: &Question) -> bool {
    if !serves(ctx, name) {
        return false;
    }
    let key = KeyName::new(ctx, name);
    with_counter(ctx, key.raw, |c| {
        c.and_then(|c| question_at(name, c)).as_ref() == Some(q)
    })
    .unwrap_or(false)
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

fn send_held(ctx: Ctx, replication: &replication_gate::Replication) {
    let ready: Vec<Held> = HELD
        .with(|h| replication_gate::take_open(&mut h.borrow_mut(), replication, |h| &mut h.gate));
    for held in ready {
        send_answers(ctx, &held.to, held.request, &held.answers);
    }
}

fn send_answers(ctx: Ctx, to: &NodeId, request: Option<u64>, answers: &[(Question, Answer)]) {
    for part in audit_msg::chunks(answers, |(q, _)| &q.home, MAX_MESSAGE_BYTES) {
        let bytes = audit_msg::encode_answers(request, part);
        cluster::send(ctx.ptr, to, MSG_ANSWER, &bytes);
    }
}

/// Receives this file's bus messages (from `bus`, the one receiver).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    match kind {
        MSG_ASK => {
            let Ok((request, questions)) = audit_msg::decode_ask(payload) else {
                return; // malformed or another version: as if lost
            };
            select_db(ctx, 0);
            SLOT_KEYS_LEFT.set(SLOT_KEYS_BUDGET);
            let answers: Vec<(Question, Answer)> = questions
                .into_iter()
                .map(|q| {
                    let a = home_side(ctx, &q);
                    (q, a)
                })
                .collect();
            if !audit::answers_wait_for_replicas(&answers) {
                send_answers(ctx, &from, request, &answers);
                return;
            }
            HELD.with(|h| {
                let mut h = h.borrow_mut();
                if h.len() < MAX_HELD {
                    h.push(Held {
                        to: from,
                        request,
                        answers,
                        gate: Gate::default(),
                    });
                }
            });
        }
        MSG_ANSWER => {
            // An earlier module's answers carry no request id: nothing to match them with.
            let Ok((Some(request), answers)) = audit_msg::decode_answers(payload) else {
                return;
            };
            let now = ctx.now_ms();
            for (q, a) in answers {
                on_answer(ctx, (Some(from), request), &q, a, now);
            }
        }
        _ => {}
    }
}

/// The audit's tick (a panic in it is a defect; the tick goes on).
static TICK: Job = Job::every("audit-tick", tick, TICK_MS);

/// Registers the bus receivers and starts the timer (from the module's load).
pub fn register(ctx: *mut raw::RedisModuleCtx) {
    scheduler::arm_once(ctx, When::After(TICK_MS), &TICK);
}
