//! The holder check of a cluster: a client's write that would create a key named like a holder
//! (`{ctr.<id>.<i>.<k>}<home>`) waits until the master of the home that name carries says
//! whether that home lists it. A look-alike (a name copied from another cluster or a document,
//! or a holder of a spread long gone) is refused with the holder error instead of holding units
//! that count toward no counter.
//!
//! Outside a cluster the home is a key of the same server and `spread_holders` reads it in the
//! command. In a cluster the home lives in another slot, usually on another master, and even
//! on this master a command must not read it (Valkey looks keys up in the slot of the command
//! being run). So the command waits in the server (the one waiter, `waiter`) while this node:
//! - asks the home's master over the bus (types 0xD5 and 0xD6, `persist::holder_check_msg`),
//!   or, when the home's slot is this master's, reads it from a timer, outside the command
//!   (the writes of one name share one check);
//! - keeps the verdict for a second, and wakes the waiting writes: each runs again from the
//!   waiter's reply callback and reads the verdict; "listed": it goes on, the check passed (it
//!   replicates and replies as it would have); "not listed": the holder error, nothing
//!   written.
//!
//! Only a definite "not listed" refuses. When the home's master cannot tell (it does not serve
//! the slot any more, the slot is moving), no master is known for the home's slot, or no answer
//! came within `ctr.gather-timeout-ms`, the write goes on as it did before this check (a
//! look-alike then holds units that count toward nothing, and the orphan audit deletes them if
//! the spread is gone): a slot move or a master down never refuses a real holder. Nor is
//! anything checked where a client cannot wait (inside MULTI/EXEC or a script), on a replica or
//! while loading, or for a key that exists: only the first write of each holder waits.

use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;

use redis_module::raw;

use super::ctr_store::{is_missing, with_counter};
use super::home_names::{holds_home, living_home};
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, NodeId};
use super::spread_collect::select_db;
use super::spread_transfer::{route, serves};
use super::waiter;
use crate::config;
use crate::counter::collect::lists_holder;
use crate::counter::spread::{key_slot, parse_holder_name, HolderName};
use crate::counter::CounterRef;
use crate::ffi::{Args, CommandError, CommandResult, Ctx, Key, KeyName};
use crate::metrics;
use crate::persist::holder_check_msg::{self as msg, Verdict};
use crate::protocol::messages::MessageKind;
use crate::protocol::name_queries::{NameQueries, Opened, Query};

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

thread_local! {
    /// The holder names asked about (the writes of one name share its check; each woken by
    /// the name's key), and what the homes' masters said of each lately, trusted for
    /// [`VERDICT_MS`]: a write waiting for it runs again and reads it (a look-alike is
    /// refused; a listed or unsure one goes on), and so does a write that the run again could
    /// not answer for good (a purchase whose budget is in flight answers `TRYAGAIN` there)
    /// when it is retried.
    static CHECKS: RefCell<NameQueries<NodeId, Verdict>> =
        RefCell::new(NameQueries::new(MAX_PENDING, MAX_PENDING));
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
/// client's write, is a holder its home lists (see the [module](self) docs). The client waits
/// in the server (`waiter`) for the home master's verdict; `rerun` is the command, run again
/// then, which reads the verdict here.
pub fn check(ctx: Ctx, key: &Key, name: &[u8], rerun: Rerun) -> Result<Checked, CommandError> {
    if !is_missing(key) {
        return Ok(Checked::Go);
    }
    let Some(holder) = parse_holder_name(name) else {
        return Ok(Checked::Go);
    };
    if ctx.is_replaying() {
        return Ok(Checked::Go);
    }
    match verdict_known(name, ctx.now_ms()) {
        Some(Verdict::NotListed) => {
            metrics::HOLDER_CHECKS_REFUSED.incr();
            return Err(look_alike_error(name, holder.home));
        }
        Some(Verdict::Listed | Verdict::Unsure) => return Ok(Checked::Go),
        None => {}
    }
    // A write run again from a reply callback without a verdict (the check's wait reached its
    // bound, or it waited for units in flight, checked before) cannot block again.
    if !ctx.can_block() || super::waiter::rerunning() {
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
    if !ask(ctx, name, asked) {
        return Ok(Checked::Go); // too many checks under way
    }
    let waiting_for = name.to_vec();
    let still_waits: waiter::StillWaits =
        Box::new(move |ctx| verdict_known(&waiting_for, ctx.now_ms()).is_none());
    // Past the check's own deadline: an unanswered check has ended (unsure) by then.
    let bound_ms = config::GATHER_TIMEOUT_MS
        .load(Relaxed)
        .saturating_add(2 * TICK_MS);
    if !waiter::wait(ctx, name, rerun, still_waits, serves, bound_ms) {
        return Ok(Checked::Go);
    }
    metrics::HOLDER_CHECKS.incr();
    Ok(Checked::Blocked)
}

/// Asks the home's master about `name` (`asked`; None: this master, from a timer), unless a
/// check of it is under way; false when the table is full.
fn ask(ctx: Ctx, name: &[u8], asked: Option<NodeId>) -> bool {
    let now = ctx.now_ms();
    let deadline_ms = now.saturating_add(config::GATHER_TIMEOUT_MS.load(Relaxed));
    let query = Query {
        name: name.to_vec(),
        asked,
        wake: name.to_vec(),
    };
    let random = || u64::from_le_bytes(crate::ffi::random_bytes());
    let opened = CHECKS.with(|c| {
        c.borrow_mut()
            .open(random, query, now, TICK_MS, deadline_ms)
    });
    let id = match opened {
        Opened::Asked(id) => id,
        Opened::AlreadyAsked => return true,
        Opened::Full => return false,
    };
    match asked {
        Some(node) => {
            cluster::send(ctx.ptr, &node, MSG_REQUEST, &msg::encode_request(id, name));
        }
        None => scheduler::arm(ctx.ptr, When::Now, &LOCAL_ANSWERS, 0),
    }
    // The periodic tick runs while any check is under way: it ends them at their deadline,
    // and answers a local one whose timer above failed.
    arm_periodic_tick(ctx.ptr);
    true
}

/// What the home's master said of `name` lately.
fn verdict_known(name: &[u8], now: i64) -> Option<Verdict> {
    CHECKS.with(|c| c.borrow().known(name, now))
}

/// How long a verdict is trusted by this node's later first writes of the same name.
const VERDICT_MS: i64 = 1_000;
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

/// Ends the check `id` with `verdict`, when it came from the node asked (`from`; None: this
/// one).
fn resolve(ctx: Ctx, id: u64, from: Option<NodeId>, verdict: Verdict) {
    if let Some(query) = CHECKS.with(|c| c.borrow_mut().answered(id, from)) {
        settle(ctx, query, verdict);
    }
}

/// Keeps `verdict` of the name of `query` for the writes waiting for it, which run again now.
fn settle(ctx: Ctx, query: Query<NodeId>, verdict: Verdict) {
    let now = ctx.now_ms();
    let until = now.saturating_add(VERDICT_MS);
    CHECKS.with(|c| c.borrow_mut().keep(&query.name, verdict, until, now));
    select_db(ctx, 0);
    waiter::key_written(ctx, &query.wake);
}

/// The periodic tick, armed while a check waits (a panic in it is a defect; it goes on).
static TICK: Job = Job::while_busy("holder-check-timer", tick, checking, TICK_MS);
/// The same tick at once, answering a check of a home this master serves.
static LOCAL_ANSWERS: Job = Job::once("holder-check-timer", |ctx, _| tick(ctx));

fn arm_periodic_tick(ctx: *mut raw::RedisModuleCtx) {
    scheduler::arm_once(ctx, When::After(TICK_MS), &TICK);
}

fn checking() -> bool {
    CHECKS.with(|c| !c.borrow().is_empty())
}

/// The timer: answers the checks of homes this master serves, asks again for the others (a
/// bus message may be lost: a link reconnecting drops it; the home's master may have changed),
/// and lets the writes whose checks passed their deadline go on unchecked.
fn tick(ctx: Ctx) {
    let now = ctx.now_ms();
    let expired = CHECKS.with(|c| c.borrow_mut().expired(now));
    if !expired.is_empty() {
        metrics::HOLDER_CHECK_TIMEOUTS.add(expired.len() as u64);
    }
    for query in expired {
        settle(ctx, query, Verdict::Unsure);
    }
    let local = CHECKS.with(|c| c.borrow().local());
    for (id, holder) in local {
        resolve(ctx, id, None, verdict(ctx, &holder));
    }
    // Every check left is asked of another master: those silent for a tick are asked again.
    let unanswered = CHECKS.with(|c| c.borrow_mut().due(now, RESENDS_PER_TICK));
    for (id, query) in unanswered {
        if let Some(asked) = query.asked {
            ask_again(ctx, id, asked, &query.name);
        }
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
    CHECKS.with(|c| c.borrow_mut().reroute(id, now_asked));
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
            resolve(ctx, id, Some(from), verdict);
        }
        _ => {}
    }
}
