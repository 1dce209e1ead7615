//! The holder check of a cluster: a client's write that would create a key named like a holder
//! (`{ctr.<id>.<i>.<k>}<home>`) waits until the master of the home that name carries says
//! whether that home lists it. A look-alike (a name copied from another cluster or a document,
//! or a holder of a spread long gone) is refused with the holder error instead of holding units
//! that count toward no counter.
//!
//! Outside a cluster the home is a key of the same server and `spread_holders` reads it in the
//! command. In a cluster the home lives in another slot, usually on another master, and even
//! on this master a command must not read it (Valkey looks keys up in the slot of the command
//! being run). So the command blocks its client and:
//! - asks the home's master over the bus (types 0xD5 and 0xD6, `persist::holder_check_msg`),
//!   or, when the home's slot is this master's, reads it from a timer, outside the command;
//! - on "listed", runs the same command again from the reply callback, the check passed (it
//!   replicates and replies as it would have);
//! - on "not listed", replies the holder error: nothing was written.
//!
//! Only a definite "not listed" refuses. When the home's master cannot tell (it does not serve
//! the slot any more, the slot is moving), no master is known for the home's slot, or no answer
//! came within `ctr.gather-timeout-ms`, the write goes on as it did before this check (a
//! look-alike then holds units that count toward nothing, and the orphan audit deletes them if
//! the spread is gone): a slot move or a master down never refuses a real holder. Nor is
//! anything checked where a client cannot wait (inside MULTI/EXEC or a script), on a replica or
//! while loading, or for a key that exists: only the first write of each holder waits.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering::Relaxed;

use redis_module::raw;

use super::ctr_store::{is_missing, with_counter};
use super::home_names::{holds_home, living_home};
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, NodeId};
use super::spread_collect::select_db;
use super::spread_transfer::{route, serves};
use super::waiter::{reply_by_running_again, ReplyDefects};
use crate::config;
use crate::counter::collect::lists_holder;
use crate::counter::spread::{key_slot, parse_holder_name, HolderName};
use crate::counter::CounterRef;
use crate::ffi::{rm, Args, CommandError, CommandResult, Ctx, Key, KeyName};
use crate::guard::guard;
use crate::metrics;
use crate::persist::holder_check_msg::{self as msg, Verdict};
use crate::protocol::exchange::Exchange;
use crate::protocol::messages::MessageKind;
use crate::protocol::timeout::Timeout;

const MSG_REQUEST: MessageKind = MessageKind::HolderCheckRequest;
const MSG_RESPONSE: MessageKind = MessageKind::HolderCheckResponse;

/// How often pending checks are looked at for their deadline.
const TICK_MS: i64 = 100;
/// The most unanswered checks asked again at one tick (the others at the next ones).
const RESENDS_PER_TICK: usize = 256;
/// The most writes waiting for holder checks on this node; past it a write goes on unchecked.
pub const MAX_PENDING: usize = 10_000;
/// The most keys of the home's slot read to find a home renamed to a name this master did not
/// see (as the orphan audit does), and the most such keys read in a [`TICK_MS`] window for all
/// checks (a flood of look-alikes naming a missing home cannot make the home's master read its
/// slots over and over); past either, the check is unsure and the write goes on.
const MAX_SLOT_KEYS: i64 = 20_000;

/// The command a checked write runs again once its holder is listed.
pub type Rerun = fn(Ctx, &Args) -> CommandResult;

/// What a write does after [`check`].
pub enum Checked {
    /// Go on: nothing to check, or the check passed.
    Go,
    /// The client waits for the check; the command replies [`Reply::Blocked`].
    Blocked,
}

/// A write waiting for its check.
struct Pending {
    bc: *mut raw::RedisModuleBlockedClient,
    holder: Vec<u8>,
    /// The master asked, or None when the home's slot is this master's (read by the timer).
    asked: Option<NodeId>,
    rerun: Rerun,
}

/// What the reply callback receives.
struct Outcome {
    verdict: Verdict,
    rerun: Rerun,
}

struct Checks {
    /// Asked again a tick after each send, ended at `ctr.gather-timeout-ms`.
    exchange: Exchange<Pending>,
}

thread_local! {
    static CHECKS: RefCell<Checks> = RefCell::new(Checks {
        exchange: Exchange::new(MAX_PENDING),
    });
    /// The holder whose write runs again from a reply callback, its check passed.
    static PASSED: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
    /// Holders found listed, until when their writes go on unchecked: a write that the check's
    /// reply could not answer for good (a purchase whose budget is in flight answers
    /// `TRYAGAIN` there, a reply callback cannot wait) is retried without a second check, and
    /// then waits in the server.
    static LISTED: RefCell<HashMap<Vec<u8>, i64>> = RefCell::new(HashMap::new());
    /// The slot keys the home side may still read in the current window, and when it began.
    static SLOT_KEYS_LEFT: std::cell::Cell<(i64, i64)> = const { std::cell::Cell::new((0, 0)) };
}

/// The refusal of a write to `name`, a key named like a holder of `home` that no home lists.
pub fn look_alike_error(name: &[u8], home: &[u8]) -> CommandError {
    CommandError(
        format!(
            "ERR {} is not a holder of the spread counter {} (only named like one): write the \
             home key, or a holder CTR.HOLDERS lists",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(home)
        )
        .into(),
    )
}

/// In a cluster: checks that the missing key `key` named `name`, about to be created by a
/// client's write, is a holder its home lists (see the [module](self) docs). `rerun` is the
/// command, run again once the home's master has said so.
pub fn check(ctx: Ctx, key: &Key, name: &[u8], rerun: Rerun) -> Result<Checked, CommandError> {
    if !is_missing(key) {
        return Ok(Checked::Go);
    }
    let Some(holder) = parse_holder_name(name) else {
        return Ok(Checked::Go);
    };
    // A write run again from a reply callback (it waited for units in flight) was checked
    // before it waited, and cannot block again.
    if ctx.is_replaying() || passed(name) || !ctx.can_block() || super::waiter::rerunning() {
        return Ok(Checked::Go);
    }
    // A key whose slot is moving (`ASKING` on the importing node, which the routing check of a
    // write run again from the reply would refuse, sending the client round in redirections;
    // or an atomic migration) is not checked: the write goes on.
    if super::slot_migration::moving_key(name) || !cluster::routed_here(ctx.ptr, name) {
        return Ok(Checked::Go);
    }
    let asked = match route(ctx, holder.home) {
        Ok(asked) => asked,
        Err(_) => return Ok(Checked::Go), // no master known for the home's slot now
    };
    if !CHECKS.with(|c| c.borrow().exchange.has_room()) {
        return Ok(Checked::Go);
    }
    let now = ctx.now_ms();
    let deadline_ms = now.saturating_add(config::GATHER_TIMEOUT_MS.load(Relaxed));
    // SAFETY: ctx is the live context of a command that may block (checked above). No server
    // timeout: the tick ends a check at its deadline and lets the write go on.
    let bc = unsafe {
        rm!(RedisModule_BlockClient)(ctx.ptr, Some(on_reply), None, Some(free_outcome), 0)
    };
    // SAFETY: bc was just returned by BlockClient.
    unsafe { rm!(RedisModule_SetDisconnectCallback)(bc, Some(on_disconnect)) };
    metrics::HOLDER_CHECKS.incr();
    let pending = Pending {
        bc,
        holder: name.to_vec(),
        asked,
        rerun,
    };
    let opened = CHECKS.with(|c| {
        let random = || u64::from_le_bytes(crate::ffi::random_bytes());
        let resend = Timeout::every(now, TICK_MS);
        c.borrow_mut()
            .exchange
            .open(random, pending, resend, deadline_ms)
    });
    let id = match opened {
        Ok(id) => id,
        Err(pending) => {
            // Full since the check above (nothing runs in between): the write goes on.
            unblock(pending, Verdict::Unsure);
            return Ok(Checked::Blocked);
        }
    };
    match asked {
        Some(node) => {
            cluster::send(ctx.ptr, &node, MSG_REQUEST, &msg::encode_request(id, name));
        }
        None => scheduler::arm(ctx.ptr, When::Now, &LOCAL_ANSWERS, 0),
    }
    // The periodic tick runs while any check waits: it ends them at their deadline, and answers
    // a local one whose timer above failed.
    arm_periodic_tick(ctx.ptr);
    Ok(Checked::Blocked)
}

fn passed(name: &[u8]) -> bool {
    PASSED.with(|p| p.borrow().as_deref() == Some(name))
        || LISTED.with(|l| {
            l.borrow()
                .get(name)
                .is_some_and(|until| *until > crate::ffi::coarse_now_ms())
        })
}

/// How long a holder found listed is trusted by this node's later first writes.
const LISTED_MS: i64 = 1_000;

/// The home side: what this master says of `holder` (database 0, a cluster's only one).
fn verdict(ctx: Ctx, holder: &[u8]) -> Verdict {
    let Some(h) = parse_holder_name(holder) else {
        return Verdict::NotListed;
    };
    select_db(ctx, 0);
    if !serves(ctx, h.home) {
        return Verdict::Unsure;
    }
    let lists = |home: &[u8]| home_lists(ctx, home, holder);
    if let Some(home) = living_home(ctx, h.home, h.spread_id) {
        return if lists(&home) {
            Verdict::Listed
        } else {
            Verdict::NotListed
        };
    }
    home_elsewhere_in_slot(ctx, h, lists)
}

/// True when the counter at `home` (in the selected database) lists `holder`, current or
/// folding back.
pub fn home_lists(ctx: Ctx, home: &[u8], holder: &[u8]) -> bool {
    let key = KeyName::new(ctx, home);
    with_counter(
        ctx,
        key.raw,
        |c| matches!(c, Some(CounterRef::Boxed(b)) if lists_holder(b, holder)),
    ) == Ok(true)
}

/// A home renamed, restored or moved in under a name this master did not see stays in its slot
/// (as the orphan audit reads it): looked for among the slot's keys.
fn home_elsewhere_in_slot(ctx: Ctx, h: HolderName, lists: impl Fn(&[u8]) -> bool) -> Verdict {
    let now = ctx.now_ms();
    let (mut window, mut left) = SLOT_KEYS_LEFT.get();
    if now.saturating_sub(window) >= TICK_MS {
        (window, left) = (now, MAX_SLOT_KEYS);
        SLOT_KEYS_LEFT.set((window, left));
    }
    match cluster::keys_in_slot(ctx, key_slot(h.home), left) {
        Some(keys) => {
            SLOT_KEYS_LEFT.set((window, left - keys.len() as i64));
            let listed = keys
                .iter()
                .any(|k| holds_home(ctx, k, h.spread_id) && lists(k));
            if listed {
                Verdict::Listed
            } else {
                Verdict::NotListed
            }
        }
        None => Verdict::Unsure,
    }
}

/// Ends the check `id` with `verdict`: the client's command replies (runs again, or refuses).
fn resolve(id: u64, verdict: Verdict) {
    if let Some(p) = CHECKS.with(|c| c.borrow_mut().exchange.end(id)) {
        unblock(p, verdict);
    }
}

fn unblock(p: Pending, verdict: Verdict) {
    if verdict == Verdict::NotListed {
        metrics::HOLDER_CHECKS_REFUSED.incr();
    }
    let outcome = Box::new(Outcome {
        verdict,
        rerun: p.rerun,
    });
    // SAFETY: bc is blocked and unblocked once: its check was just removed from the table.
    unsafe { rm!(RedisModule_UnblockClient)(p.bc, Box::into_raw(outcome).cast::<c_void>()) };
}

/// The periodic tick, armed while a check waits (a panic in it is a defect; it goes on).
static TICK: Job = Job::while_busy("holder-check-timer", tick, checking, TICK_MS);
/// The same tick at once, answering a check of a home this master serves.
static LOCAL_ANSWERS: Job = Job::once("holder-check-timer", |ctx, _| tick(ctx));

fn arm_periodic_tick(ctx: *mut raw::RedisModuleCtx) {
    scheduler::arm_once(ctx, When::After(TICK_MS), &TICK);
}

fn checking() -> bool {
    CHECKS.with(|c| !c.borrow().exchange.is_empty())
}

/// The timer: answers the checks of homes this master serves, asks again for the others (a
/// bus message may be lost: a link reconnecting drops it; the home's master may have changed),
/// and lets the writes whose checks passed their deadline go on unchecked.
fn tick(ctx: Ctx) {
    let now = ctx.now_ms();
    let expired = CHECKS.with(|c| c.borrow_mut().exchange.expired(now));
    if !expired.is_empty() {
        metrics::HOLDER_CHECK_TIMEOUTS.add(expired.len() as u64);
    }
    for (_, p) in expired {
        unblock(p, Verdict::Unsure);
    }
    let local: Vec<(u64, Vec<u8>)> = CHECKS.with(|c| {
        let c = c.borrow();
        let local = c.exchange.iter().filter(|(_, p)| p.asked.is_none());
        local.map(|(id, p)| (id, p.holder.clone())).collect()
    });
    for (id, holder) in local {
        resolve(id, verdict(ctx, &holder));
    }
    // Every check left is asked of another master: those silent for a tick are asked again.
    let unanswered: Vec<(u64, NodeId, Vec<u8>)> = CHECKS.with(|c| {
        let mut c = c.borrow_mut();
        let due = c.exchange.due(now, RESENDS_PER_TICK);
        let asked = |id| {
            c.exchange
                .get(id)
                .and_then(|p| Some((id, p.asked?, p.holder.clone())))
        };
        due.into_iter().filter_map(asked).collect()
    });
    for (id, asked, holder) in unanswered {
        ask_again(ctx, id, asked, &holder);
    }
}

/// Asks again for the check `id` of `holder`, unanswered from `asked`: of the master that
/// serves the home's slot now (a failover or a reshard may have moved it; only that master's
/// answer then ends the check), or at the next tick from here when that is this node.
fn ask_again(ctx: Ctx, id: u64, asked: NodeId, holder: &[u8]) {
    let home = parse_holder_name(holder).map_or(&[][..], |h| h.home);
    let now_asked = match route(ctx, home) {
        Ok(route) => route,
        Err(_) => Some(asked), // no master known for the slot now: the one asked before
    };
    CHECKS.with(|c| {
        if let Some(p) = c.borrow_mut().exchange.get_mut(id) {
            p.asked = now_asked;
        }
    });
    if let Some(node) = now_asked {
        metrics::HOLDER_CHECK_RESENDS.incr();
        cluster::send(
            ctx.ptr,
            &node,
            MSG_REQUEST,
            &msg::encode_request(id, holder),
        );
    }
}

/// The bus messages: a request (answered with this master's verdict) and a response (ends the
/// check it answers, when it comes from the master asked).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    match kind {
        MSG_REQUEST => {
            let Ok((id, holder)) = msg::decode_request(payload) else {
                return; // malformed: the asker's write goes on at its deadline
            };
            let response = msg::encode_response(id, verdict(ctx, holder));
            cluster::send(ctx.ptr, &from, MSG_RESPONSE, &response);
        }
        MSG_RESPONSE => {
            let Ok((id, verdict)) = msg::decode_response(payload) else {
                return;
            };
            let asked = CHECKS.with(|c| c.borrow().exchange.get(id).map(|p| p.asked));
            if asked == Some(Some(from)) {
                resolve(id, verdict);
            }
        }
        _ => {}
    }
}

/// The reply callback: a listed holder's write runs again (the check passed), a look-alike's is
/// refused, an unsure one goes on unchecked.
unsafe extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let defects = ReplyDefects {
        callback: "holder-check-reply",
        lost_data: "ERR internal error in redis-ctr: the holder check lost its outcome (a bug: please report it)",
        blocked_twice: "ERR internal error in redis-ctr: a write waited twice for its holder check (a bug: please report it)",
    };
    // SAFETY: a reply callback of clients blocked by `check`, unblocked with a boxed Outcome.
    unsafe { reply_by_running_again(ctx, argv, argc, &defects, run_checked) }
}

fn run_checked(ctx: Ctx, args: &Args, outcome: &Outcome) -> CommandResult {
    if args.len() < 2 {
        return Err(CommandError::fixed(
            "ERR internal error in redis-ctr: the holder check lost its command (a bug: please report it)",
        ));
    }
    let name = args.bytes(1);
    if outcome.verdict == Verdict::NotListed {
        let home = parse_holder_name(name).map_or(&[][..], |h| h.home);
        return Err(look_alike_error(name, home));
    }
    // The key's slot may have moved, or this master failed over, while the client waited; or
    // writes are paused (a manual failover, CLIENT PAUSE WRITE), which a write run from here
    // would not respect.
    if !serves(ctx, name) || crate::ffi::writes_paused() {
        return Err(CommandError(
            format!(
                "TRYAGAIN spread counter holder '{}' moved, or writes were paused, while its first write waited for its holder check",
                String::from_utf8_lossy(name)
            )
            .into(),
        ));
    }
    PASSED.with(|p| *p.borrow_mut() = Some(name.to_vec()));
    let result = super::waiter::replying(|| (outcome.rerun)(ctx, args));
    PASSED.with(|p| *p.borrow_mut() = None);
    if outcome.verdict == Verdict::Listed {
        let now = ctx.now_ms();
        LISTED.with(|l| {
            let mut l = l.borrow_mut();
            l.retain(|_, until| *until > now);
            if l.len() < MAX_PENDING {
                l.insert(name.to_vec(), now.saturating_add(LISTED_MS));
            }
        });
    }
    result
}

unsafe extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    let found = guard(ctx, "holder-check-disconnect", || {
        CHECKS.with(|c| {
            let mut c = c.borrow_mut();
            let id = c
                .exchange
                .iter()
                .find(|(_, p)| p.bc == bc)
                .map(|(id, _)| id);
            id.and_then(|id| c.exchange.end(id)).is_some()
        })
    });
    if found.unwrap_or(false) {
        // A client blocked without keys is released only by UnblockClient.
        // SAFETY: bc is live until this call; its check is gone, so nothing unblocks it again.
        unsafe { rm!(RedisModule_UnblockClient)(bc, std::ptr::null_mut()) };
    }
}

unsafe extern "C" fn free_outcome(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: the box given to UnblockClient, freed once here.
        let outcome = unsafe { Box::from_raw(data.cast::<Outcome>()) };
        guard(ctx, "holder-check-free", || drop(outcome));
    }
}
