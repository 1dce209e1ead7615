//! The idle sweep: releases the expired tokens and ledger entries of counters that no write
//! visits any more (a write sweeps its own counter; an idle one would keep them for ever).
//!
//! A timer ticks every `ctr.sweep-interval-ms` (ten times as often while a tick found work, so
//! a backlog clears fast in short slices). Each tick walks the keyspace with an incremental
//! cursor (`RedisModule_Scan`, the machinery of `SCAN`), resumed where the last tick stopped,
//! for at most `ctr.sweep-budget` units of work and never longer than [`TICK_TIME_CAP`]. Units,
//! fitted so that one is about a quarter of a microsecond here: 1 per key visited, 1 per 16
//! tokens examined, [`SWEEP_COST`] per counter swept. A counter is swept once every entry
//! it holds has expired (all of them go in one step; until then its own writes sweep it). The
//! sweep is replicated as its effect (`CTR.APPLY key <SWEEP now>`), so replicas and the AOF drop
//! exactly the same entries. Only a master sweeps; nothing runs while no token is held.
//!
//! Why a cursor and not an index of counters by expiry: the cursor needs no memory per key and
//! stays right whatever happens to keys (RENAME, MOVE, SWAPDB, FLUSHALL, RESTORE, a replica's
//! full sync, a failover), where an index would have to follow each of these. Its cost is a walk
//! over the whole keyspace per pass, spread over ticks: a pass over K keys takes about
//! K / (budget x ticks per second).

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use redis_module::raw;

use super::ctr_store::{select_db, update_counter};
use super::scheduler::{self, Job, Next, When};
use crate::config::{SWEEP_BUDGET, SWEEP_INTERVAL_MS};
use crate::counter::{CounterCell, CounterRef};
use crate::ffi::{rm, Ctx, Key, KeyContent};
use crate::metrics;
use crate::persist::ctr_type::ctr_type;
use crate::persist::effect::{self, CounterOp, Effect};

/// The most main-thread time one tick may take (checked between scan steps, each a few keys).
const TICK_TIME_CAP: Duration = Duration::from_micros(700);

/// Budget units one counter's sweep costs (open, sweep, re-store, replicate: a few µs).
const SWEEP_COST: i64 = 10;

/// Where the walk stands: the database and the cursor in it. Only the main thread touches it
/// (timers run there).
struct Walk {
    db: c_int,
    cursor: *mut raw::RedisModuleScanCursor,
}

thread_local! {
    static WALK: std::cell::Cell<Option<Walk>> = const { std::cell::Cell::new(None) };
}

/// What one scan step found.
struct Found {
    now: i64,
    visited: i64,
    examined: i64,
    /// Names of counters whose entries have all expired.
    due: Vec<Vec<u8>>,
}

/// Starts the timer (from the module's load).
pub fn start(ctx: &redis_module::Context) {
    scheduler::arm_once(ctx.ctx, When::After(period(false)), &SWEEP);
}

/// The sweep's tick, sooner while a pass found more to do than its budget (a panic in it is a
/// defect; the tick goes on).
static SWEEP: Job = Job::new(
    "sweep",
    |ctx, _| Next::After(period(tick(ctx))),
    || Next::After(period(false)),
);

fn period(busy: bool) -> i64 {
    let period = SWEEP_INTERVAL_MS.load(Relaxed).max(1);
    if busy {
        (period / 10).max(1)
    } else {
        period
    }
}

fn should_sweep(ctx: Ctx) -> bool {
    let flags = ctx.flags();
    flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
        && flags & raw::REDISMODULE_CTX_FLAGS_LOADING == 0
        && metrics::TOKENS_HELD.get() > 0
}

/// The main thread's CPU time (µs): what a tick costs the server, whatever else the machine does.
fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000) + ts.tv_nsec as u64 / 1_000
}

/// One tick: scan steps until the budget or the time cap is spent, sweeping what they found.
/// True when it swept something (more is likely waiting).
fn tick(ctx: Ctx) -> bool {
    if super::replication_gate::paused() {
        return false; // the next tick does this one's work
    }
    let mut budget = SWEEP_BUDGET.load(Relaxed);
    if budget <= 0 || !should_sweep(ctx) {
        return false;
    }
    let started = Instant::now();
    let cpu_started = thread_cpu_us();
    let mut swept = false;
    let now = ctx.precise_now_ms();
    let mut walk = WALK.with(|w| w.take()).unwrap_or_else(|| Walk {
        db: 0,
        // SAFETY: plain constructor; destroyed never (one cursor for the server's life).
        cursor: unsafe { rm!(RedisModule_ScanCursorCreate)() },
    });
    // Defensive: a database the walk cannot select starts it over at database 0.
    if !select_db(ctx, walk.db) {
        walk.db = 0;
        restart(&walk);
        select_db(ctx, 0); // database 0 always exists
    }
    while budget > 0 && started.elapsed() < TICK_TIME_CAP {
        let mut found = Found {
            now,
            visited: 0,
            examined: 0,
            due: Vec::new(),
        };
        // SAFETY: ctx is live, the cursor ours, `found` outlives the call.
        let more = unsafe {
            rm!(RedisModule_Scan)(
                ctx.ptr,
                walk.cursor,
                Some(visit),
                (&mut found as *mut Found).cast(),
            )
        };
        for name in &found.due {
            // A key in an atomic slot migration is swept once it has settled (rule 1 of
            // `slot_migration`).
            if super::slot_migration::moving_key(name) {
                continue;
            }
            swept |= sweep_key(ctx, name, now);
            budget -= SWEEP_COST;
        }
        budget -= found.visited + found.examined / 16 + 1;
        if more == 0 {
            // This database is done: on to the next one (or back to 0 when there is none).
            restart(&walk);
            walk.db += 1;
            if !select_db(ctx, walk.db) {
                walk.db = 0;
                select_db(ctx, 0);
                break; // a whole pass is done: the rest waits for the next tick
            }
        }
    }
    WALK.with(|w| w.set(Some(walk)));
    metrics::SWEEP_TICKS.incr();
    metrics::SWEEP_LONGEST_TICK_US.raise_to(thread_cpu_us().saturating_sub(cpu_started));
    swept
}

fn restart(walk: &Walk) {
    // SAFETY: the cursor is ours and live.
    unsafe { rm!(RedisModule_ScanCursorRestart)(walk.cursor) };
}

/// The scan callback: notes counters whose entries have all expired. It only reads; the sweep
/// happens after the scan step returns (the keyspace must not change under a scan step).
unsafe extern "C" fn visit(
    ctx: *mut raw::RedisModuleCtx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) {
    crate::guard::guard(ctx, "sweep-scan", || {
        // SAFETY: privdata is the `Found` passed to RedisModule_Scan by `tick`.
        let found = unsafe { &mut *privdata.cast::<Found>() };
        found.visited += 1;
        if key.is_null() {
            return;
        }
        // SAFETY: key is the open key of this scan step.
        let value = unsafe {
            if rm!(RedisModule_ModuleTypeGetType)(key) != ctr_type() {
                return;
            }
            rm!(RedisModule_ModuleTypeGetValue)(key)
        };
        // SAFETY: a live counter of our type, read only during this callback.
        if let CounterRef::Boxed(c) = unsafe { CounterCell::borrow(value) } {
            let held = c.token_count();
            if held > 0 {
                found.examined += held as i64;
                if c.has_only_expired_tokens(found.now) {
                    found.due.push(crate::ffi::string_bytes(keyname).to_vec());
                }
            }
        }
    });
}

/// Sweeps one counter and replicates the sweep; true when it released something.
fn sweep_key(ctx: Ctx, name: &[u8], now: i64) -> bool {
    // SAFETY: ctx is live; the string is freed below.
    let raw_name =
        unsafe { rm!(RedisModule_CreateString)(ctx.ptr, name.as_ptr().cast(), name.len()) };
    let mut released = 0;
    {
        let key = Key::open(ctx, raw_name, true);
        if let KeyContent::Mine(_) = key.content(ctr_type()) {
            if let Ok(n) = update_counter(&key, |c, _| Ok(c.apply_sweep(now))) {
                released = n;
            }
        }
        if released > 0 {
            let effect = Effect {
                op: CounterOp::Sweep { now },
                expire_at: None,
            };
            let payload = effect::encode(&effect);
            if ctx.replicate_effect(c"CTR.APPLY", raw_name, &payload) {
                metrics::SWEEP_RELEASED.add(released as u64);
                metrics::SWEEP_COUNTERS.incr();
            } else {
                ctx.log_warning("ctr: the idle sweep could not replicate a sweep");
            }
        }
    }
    // SAFETY: made above, no longer used (the key was closed at the end of the block).
    unsafe { rm!(RedisModule_FreeString)(ctx.ptr, raw_name) };
    released > 0
}
