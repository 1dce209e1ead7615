//! The waits that happen in the server: a command that cannot be answered yet only because
//! units are still travelling to its key (a purchase whose budget is in flight, `CTR.FLOOR`
//! while a shrink's folds land) blocks its client instead of replying `TRYAGAIN`, up to
//! `ctr.purchase-wait-ms`:
//! - when a transfer step writes the awaited key (a credit, an acknowledgement: the glue calls
//!   [`key_written`]) and the command's own test says it would no longer wait, or at a tick
//!   (every [`TICK_MS`]) that finds so, the command runs again from the reply callback, once,
//!   and replies what it replies then (a grant, a refusal, an applied floor);
//! - at the bound it runs again all the same and replies what it replies then, its retryable
//!   `TRYAGAIN` when the units still travel.
//!
//! A run from the reply callback never waits again. Nothing waits where a client cannot be
//! blocked (inside MULTI/EXEC or a script), on a replica's replay, or past [`MAX_WAITING`];
//! the key's slot moved or writes paused while it waited: the command's `TRYAGAIN` names that.
//!
//! The other way to wait, [`block_until_answered`]: a read whose reply is computed elsewhere (a
//! gathered total, when every master answered) is blocked with the server's own timeout, and
//! its owner hands it the reply with [`answer`]. Both ways block, reply, time out and free
//! through this file: no other file calls the server's blocked-client API.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};

use redis_module::raw;

use super::scheduler::{self, Job, When};
use crate::ffi::{rm, Args, CommandError, CommandResult, Ctx, Reply, INTERNAL_ERROR};
use crate::guard::guard;
use crate::metrics;

/// How often waiting commands are tested and their bounds checked.
pub const TICK_MS: i64 = 10;
/// The most clients waiting on this node; past it a command replies at once.
pub const MAX_WAITING: usize = 10_000;
/// The most waiting commands a tick tests (in turn): their units mostly come by transfer
/// steps, which test the commands waiting on their key at once; the tick is the fallback.
const TESTS_PER_TICK: usize = 256;

/// The command run again from the reply callback.
pub type Rerun = fn(Ctx, &Args) -> CommandResult;
/// True while the command would still wait (run on the waiting command's database).
pub type StillWaits = Box<dyn Fn(Ctx) -> bool>;
/// True while this node still serves the key for writes (its slot here, not moving, a master).
pub type Serves = fn(Ctx, &[u8]) -> bool;

struct Waiting {
    bc: *mut raw::RedisModuleBlockedClient,
    db: c_int,
    key: Vec<u8>,
    deadline_ms: i64,
    rerun: Rerun,
    still_waits: StillWaits,
    serves: Serves,
}

/// What the reply callback receives.
struct Wake {
    rerun: Rerun,
    serves: Serves,
}

#[derive(Default)]
struct Waiters {
    by_id: HashMap<u64, Waiting>,
    /// The ids in the order the tick tests them (ids of ended waits are skipped).
    turns: std::collections::VecDeque<u64>,
    next_id: u64,
}

thread_local! {
    static WAITERS: RefCell<Waiters> = RefCell::new(Waiters::default());
    /// True while a command runs again from the reply callback: it must not wait again.
    static RERUNNING: Cell<bool> = const { Cell::new(false) };
}

/// Blocks the client of the command running in `ctx` until what it waits for at `key` has
/// come (`still_waits` false) or `bound_ms` has passed (`ctr.purchase-wait-ms` for units in
/// flight); then `rerun` runs again from the reply callback. False (nothing done: the command
/// replies now) where a client cannot wait, or with a bound of 0.
pub fn wait(
    ctx: Ctx,
    key: &[u8],
    rerun: Rerun,
    still_waits: StillWaits,
    serves: Serves,
    bound_ms: i64,
) -> bool {
    if bound_ms <= 0 || RERUNNING.get() || ctx.is_replaying() || !ctx.can_block() {
        return false;
    }
    let id = WAITERS.with(|w| {
        let mut w = w.borrow_mut();
        (w.by_id.len() < MAX_WAITING).then(|| {
            w.next_id = w.next_id.wrapping_add(1);
            w.next_id
        })
    });
    let Some(id) = id else {
        return false;
    };
    // SAFETY: ctx is the live context of a command that may block (checked above). No server
    // timeout: the tick ends a wait at its bound and the command answers then.
    let bc =
        unsafe { rm!(RedisModule_BlockClient)(ctx.ptr, Some(on_reply), None, Some(free_wake), 0) };
    // SAFETY: bc was just returned by BlockClient.
    unsafe { rm!(RedisModule_SetDisconnectCallback)(bc, Some(on_disconnect)) };
    metrics::COMMANDS_WAITED.incr();
    // SAFETY: ctx is live.
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(ctx.ptr) };
    let waiting = Waiting {
        bc,
        db,
        key: key.to_vec(),
        deadline_ms: ctx.now_ms().saturating_add(bound_ms),
        rerun,
        still_waits,
        serves,
    };
    WAITERS.with(|w| {
        let mut w = w.borrow_mut();
        w.by_id.insert(id, waiting);
        w.turns.push_back(id);
    });
    arm_tick(ctx.ptr);
    true
}

/// Runs `f`, a command run again from a blocked client's reply callback: nothing in it waits,
/// since a reply callback cannot block its client again.
fn replying<R>(f: impl FnOnce() -> R) -> R {
    let outer = RERUNNING.replace(true);
    let result = f();
    RERUNNING.set(outer);
    result
}

/// True while a command runs again from a blocked client's reply callback: it cannot block
/// its client again, so nothing in it waits or checks.
pub fn rerunning() -> bool {
    RERUNNING.get()
}

/// A transfer step wrote `key` in the database selected in `ctx`: the commands waiting for it
/// that would no longer wait run again.
pub fn key_written(ctx: Ctx, key: &[u8]) {
    if WAITERS.with(|w| w.borrow().by_id.is_empty()) {
        return;
    }
    // SAFETY: ctx is live.
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(ctx.ptr) };
    let ids: Vec<u64> = WAITERS.with(|w| {
        let w = w.borrow();
        let on_key = w.by_id.iter().filter(|(_, p)| p.db == db && p.key == key);
        on_key.map(|(id, _)| *id).collect()
    });
    for id in ids {
        let done = WAITERS.with(|w| w.borrow().by_id.get(&id).map(|p| !(p.still_waits)(ctx)));
        if done == Some(true) {
            wake(id);
        }
    }
}

/// Ends the wait `id`: its command runs again from the reply callback.
fn wake(id: u64) {
    let Some(p) = WAITERS.with(|w| w.borrow_mut().by_id.remove(&id)) else {
        return;
    };
    let wake = Box::new(Wake {
        rerun: p.rerun,
        serves: p.serves,
    });
    // SAFETY: bc is blocked and unblocked once: its wait was just removed from the table.
    unsafe { rm!(RedisModule_UnblockClient)(p.bc, Box::into_raw(wake).cast::<c_void>()) };
}

/// The tick, armed while commands wait (a panic in it is a defect; it goes on).
static TICK: Job = Job::while_busy("waiter-timer", tick, waiting, TICK_MS);

fn arm_tick(ctx: *mut raw::RedisModuleCtx) {
    scheduler::arm_once(ctx, When::After(TICK_MS), &TICK);
}

/// The tick goes on while a command waits.
fn waiting() -> bool {
    WAITERS.with(|w| {
        let mut w = w.borrow_mut();
        if w.by_id.is_empty() {
            w.turns.clear(); // only ids of ended waits are left
        }
        !w.by_id.is_empty()
    })
}

/// The tick: wakes the waits past their bound, and tests up to [`TESTS_PER_TICK`] others in
/// turn (units that came by a path that wrote no step to their key, a refusal a rebalance
/// round made final).
fn tick(ctx: Ctx) {
    let now = ctx.now_ms();
    let expired: Vec<u64> = WAITERS.with(|w| {
        let w = w.borrow();
        let past = w.by_id.iter().filter(|(_, p)| p.deadline_ms <= now);
        past.map(|(id, _)| *id).collect()
    });
    metrics::WAITS_PAST_BOUND.add(expired.len() as u64);
    for id in expired {
        wake(id);
    }
    test_waiting(ctx);
}

/// Tests up to [`TESTS_PER_TICK`] waiting commands in turn, and runs again those that would no
/// longer wait: at the tick, and at once when what many may wait for came (the listing gate
/// opened).
pub fn test_waiting(ctx: Ctx) {
    for _ in 0..TESTS_PER_TICK {
        let Some((id, db)) = next_turn() else { break };
        // SAFETY: ctx is the timer's live context; db is a database a client had selected.
        unsafe { rm!(RedisModule_SelectDb)(ctx.ptr, db) };
        let done = WAITERS.with(|w| w.borrow().by_id.get(&id).map(|p| !(p.still_waits)(ctx)));
        if done == Some(true) {
            wake(id);
        }
    }
}

/// The next waiting command the tick tests, and its database (it goes to the back of the
/// turns); None when none waits.
fn next_turn() -> Option<(u64, c_int)> {
    WAITERS.with(|w| {
        let mut w = w.borrow_mut();
        while let Some(id) = w.turns.pop_front() {
            if let Some(db) = w.by_id.get(&id).map(|p| p.db) {
                w.turns.push_back(id);
                return Some((id, db));
            }
        }
        None
    })
}

/// What a reply callback that runs its blocked command again says when something that cannot
/// happen did (a bug): its private data gone, or the command run again asking to block.
struct ReplyDefects {
    /// The guard's callback name.
    callback: &'static str,
    lost_data: &'static str,
    blocked_twice: &'static str,
}

/// The body of a blocked client's reply callback that runs its command again from it: `run`
/// gets the boxed `T` given to `UnblockClient` and the command's arguments, and its reply is
/// sent (an error for a panic, for a lost `T`, or for a command that would block again).
///
/// # Safety
/// `ctx`, `argv` and `argc` are those the server passed to a reply callback of a client
/// unblocked with a `Box<T>` (or null) as its private data.
unsafe fn reply_by_running_again<T>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    defects: &ReplyDefects,
    run: impl FnOnce(Ctx, &Args, &T) -> CommandResult,
) -> c_int {
    // SAFETY: the private data is the boxed T given to UnblockClient (see above).
    let data = unsafe { rm!(RedisModule_GetBlockedClientPrivateData)(ctx) }.cast::<T>();
    let ctx = Ctx { ptr: ctx };
    let replied = guard(ctx.ptr, defects.callback, || {
        // SAFETY: non-null data is the caller's and lives until its free callback.
        let Some(data) = (unsafe { data.as_ref() }) else {
            return Err(CommandError::fixed(defects.lost_data));
        };
        // SAFETY: the server passes the blocked command's argc live arguments.
        let args = unsafe { Args::new(argv, argc) };
        match run(ctx, &args, data) {
            Ok(Reply::Blocked) => Err(CommandError::fixed(defects.blocked_twice)),
            result => result,
        }
    });
    reply_or_internal_error(ctx, replied.as_ref())
}

/// Sends a reply callback's `result`, or the internal error when computing it panicked (the
/// guard's None): the client is answered either way, as a command's panic answers it.
fn reply_or_internal_error(ctx: Ctx, result: Option<&CommandResult>) -> c_int {
    match result {
        Some(Ok(reply)) => ctx.reply(reply),
        Some(Err(e)) => ctx.reply_error(e),
        None => ctx.reply_error(&INTERNAL_ERROR),
    }
    raw::REDISMODULE_OK as c_int
}

/// The reply callback: the command runs again, once, without waiting.
unsafe extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let defects = ReplyDefects {
        callback: "waiter-reply",
        lost_data: "ERR internal error in redis-ctr: a waiting command lost its wake (a bug: please report it)",
        blocked_twice: "ERR internal error in redis-ctr: a command waited twice (a bug: please report it)",
    };
    // SAFETY: a reply callback of clients blocked by `wait`, unblocked with a boxed Wake.
    unsafe { reply_by_running_again(ctx, argv, argc, &defects, run_again) }
}

fn run_again(ctx: Ctx, args: &Args, wake: &Wake) -> CommandResult {
    if args.len() < 2 {
        return Err(CommandError::fixed(
            "ERR internal error in redis-ctr: a waiting command lost its arguments (a bug: please report it)",
        ));
    }
    let name = args.bytes(1);
    // The key's slot may have moved, or this master failed over, while the client waited; or
    // writes are paused (a manual failover, CLIENT PAUSE WRITE), which a write run from here
    // would not respect.
    if !(wake.serves)(ctx, name) || crate::ffi::writes_paused() {
        return Err(CommandError(
            format!(
                "TRYAGAIN spread counter '{}' moved, or writes were paused, while its command waited in the server",
                String::from_utf8_lossy(name)
            )
            .into(),
        ));
    }
    replying(|| (wake.rerun)(ctx, args))
}

unsafe extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    let found = guard(ctx, "waiter-disconnect", || {
        WAITERS.with(|w| {
            let mut w = w.borrow_mut();
            let id = w.by_id.iter().find(|(_, p)| p.bc == bc).map(|(id, _)| *id);
            id.and_then(|id| w.by_id.remove(&id)).is_some()
        })
    });
    if found.unwrap_or(false) {
        // A client blocked without keys is released only by UnblockClient.
        // SAFETY: bc is live until this call; its wait is gone, so nothing unblocks it again.
        unsafe { rm!(RedisModule_UnblockClient)(bc, std::ptr::null_mut()) };
    }
}

unsafe extern "C" fn free_wake(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: the box given to UnblockClient, freed once here.
        let wake = unsafe { Box::from_raw(data.cast::<Wake>()) };
        guard(ctx, "waiter-free", || drop(wake));
    }
}

/// A client blocked by [`block_until_answered`], named by its blocked-client handle.
pub type Answered = usize;

/// What the owner of clients blocked until answered hears when the server ends a wait before
/// its answer: at the timeout it gives the error the client gets; at a disconnect it is told.
/// Either way it forgets the client (an answer after that is dropped here all the same).
pub struct AnswerHooks {
    pub timed_out: fn(*mut raw::RedisModuleCtx, Answered) -> CommandError,
    pub gone: fn(*mut raw::RedisModuleCtx, Answered),
    /// The guard's names of the callbacks: reply, timeout, disconnect, free.
    pub callbacks: [&'static str; 4],
}

/// The answer handed to the reply callback, with whose it is.
struct Answer {
    result: CommandResult,
    hooks: &'static AnswerHooks,
}

thread_local! {
    /// The owner of each client blocked until answered.
    static ANSWERED: RefCell<HashMap<Answered, &'static AnswerHooks>> = RefCell::new(HashMap::new());
}

/// Blocks the client of the command running in `ctx` (the caller checked it may block) until
/// [`answer`] gives its reply, or for `timeout_ms` (then `hooks.timed_out` gives the error).
pub fn block_until_answered(ctx: Ctx, timeout_ms: i64, hooks: &'static AnswerHooks) -> Answered {
    // SAFETY: ctx is the live context of a command that may block (checked by the caller).
    let bc = unsafe {
        rm!(RedisModule_BlockClient)(
            ctx.ptr,
            Some(on_answer),
            Some(on_answer_timeout),
            Some(free_answer),
            timeout_ms,
        )
    };
    // SAFETY: bc was just returned by BlockClient.
    unsafe { rm!(RedisModule_SetDisconnectCallback)(bc, Some(on_answered_gone)) };
    ANSWERED.with(|a| a.borrow_mut().insert(bc as Answered, hooks));
    bc as Answered
}

/// Replies `result` to the blocked client `client`, once: its owner removed it from its own
/// tables before (a second answer, or one after the timeout or the disconnect, is a bug the
/// server would crash on; it is dropped here instead).
pub fn answer(client: Answered, result: CommandResult) {
    let Some(hooks) = ANSWERED.with(|a| a.borrow_mut().remove(&client)) else {
        return;
    };
    let boxed = Box::into_raw(Box::new(Answer { result, hooks })).cast::<c_void>();
    // SAFETY: the client is blocked (in the table until now) and unblocked once.
    unsafe { rm!(RedisModule_UnblockClient)(client as *mut raw::RedisModuleBlockedClient, boxed) };
}

unsafe extern "C" fn on_answer(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the private data is the boxed Answer given to UnblockClient by `answer`.
    let answer = unsafe { rm!(RedisModule_GetBlockedClientPrivateData)(ctx) }.cast::<Answer>();
    let ctx = Ctx { ptr: ctx };
    // SAFETY: non-null answers are ours and live until free_answer.
    let Some(answer) = (unsafe { answer.as_ref() }) else {
        ctx.reply_error(&CommandError::fixed(
            "ERR internal error in redis-ctr: a blocked read lost its answer (a bug: please report it)",
        ));
        return raw::REDISMODULE_OK as c_int;
    };
    // A panic in the callback (the injected one of a test) still answers the client.
    let checked = guard(ctx.ptr, answer.hooks.callbacks[0], || &answer.result);
    reply_or_internal_error(ctx, checked)
}

unsafe extern "C" fn on_answer_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: ctx is the timeout context of a blocked client.
    let bc = unsafe { rm!(RedisModule_GetBlockedClientHandle)(ctx) };
    let hooks = ANSWERED.with(|a| a.borrow_mut().remove(&(bc as Answered)));
    let error =
        hooks.and_then(|h| guard(ctx, h.callbacks[1], || (h.timed_out)(ctx, bc as Answered)));
    Ctx { ptr: ctx }.reply_error(&error.unwrap_or(INTERNAL_ERROR));
    // A client blocked without keys is released only by UnblockClient, timed out or not.
    // SAFETY: bc is live until this call; it left the table, so no answer unblocks it again.
    unsafe { rm!(RedisModule_UnblockClient)(bc, std::ptr::null_mut()) };
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_answered_gone(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    let Some(hooks) = ANSWERED.with(|a| a.borrow_mut().remove(&(bc as Answered))) else {
        return; // answered already: the server ends it
    };
    guard(ctx, hooks.callbacks[2], || {
        (hooks.gone)(ctx, bc as Answered)
    });
    // A client blocked without keys is released only by UnblockClient.
    // SAFETY: bc is live until this call; it left the table, so nothing unblocks it again.
    unsafe { rm!(RedisModule_UnblockClient)(bc, std::ptr::null_mut()) };
}

unsafe extern "C" fn free_answer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: the box given to UnblockClient by `answer`, freed once here.
        let answer = unsafe { Box::from_raw(data.cast::<Answer>()) };
        guard(ctx, answer.hooks.callbacks[3], || drop(answer));
    }
}
