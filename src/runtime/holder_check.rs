//! The holder check of a cluster: a client's write that would create a key named like a holder
//! (`{ctr.<id>.<i>.<k>}<home>`) waits until the master of the home that name carries says
//! whether that home lists it. A look-alike (a name copied from another cluster or a document,
//! or a holder of a spread long gone) is refused with the holder error instead of holding units
//! that count toward no counter.
//!
//! Outside a cluster the home is a key of the same server and `spread_holders` reads it in the
//! command. In a cluster the home lives in another slot, usually on another master, and even
//! on this master a command must not read it (Valkey looks keys up in the slot of the command
//! being run). So the command waits in the server (the one waiter, `waiter`) while this node
//! (the machine is `protocol::holder_check_node`, run here over the node's host):
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

use super::ctr_store::{is_missing, with_counter};
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, NodeId};
use super::spread_transfer::{decode_message, run_and_wake, serves, RedisHost};
use super::waiter;
use crate::config;
use crate::counter::collect::lists_holder;
use crate::counter::spread::parse_holder_name;
use crate::counter::CounterRef;
use crate::ffi::{Args, CommandError, CommandResult, Ctx, Key, KeyName};
use crate::metrics;
use crate::persist::holder_check_msg::Verdict;
use crate::protocol::holder_check_node::{Asked, HolderCheckNode, TICK_MS};
use crate::protocol::messages::MessageKind;

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
    /// The node's holder checks (`protocol::holder_check_node`): the names asked about (the
    /// writes of one name share its check; each woken by the name's key), and what the homes'
    /// masters said of each lately: a write waiting for it runs again and reads it (a
    /// look-alike is refused; a listed or unsure one goes on), and so does a write that the run
    /// again could not answer for good (a purchase whose budget is in flight answers
    /// `TRYAGAIN` there) when it is retried.
    static NODE: RefCell<HolderCheckNode<NodeId>> = RefCell::new(HolderCheckNode::default());
}

/// Runs the holder checks over this server, then wakes the writes whose checks ended.
fn run<R: Default>(
    ctx: Ctx,
    f: impl FnOnce(&mut HolderCheckNode<NodeId>, &mut RedisHost) -> R,
) -> R {
    run_and_wake(
        ctx,
        &NODE,
        "the holder check",
        f,
        HolderCheckNode::take_ended,
    )
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
    let timeout = config::GATHER_TIMEOUT_MS.load(Relaxed);
    match run(ctx, |node, host| node.ask(host, name, timeout)) {
        // No master known for the home's slot now, or too many checks under way.
        Asked::No => return Ok(Checked::Go),
        Asked::Here => scheduler::arm(ctx.ptr, When::Now, &LOCAL_ANSWERS, 0),
        Asked::Remote => {}
    }
    // The periodic tick runs while any check is under way: it ends them at their deadline,
    // asks again, and answers a local one whose timer above failed.
    scheduler::arm_once(ctx.ptr, When::After(TICK_MS), &TICK);
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

/// What the home's master said of `name` lately.
fn verdict_known(name: &[u8], now: i64) -> Option<Verdict> {
    NODE.with(|n| n.try_borrow().ok()?.known(name, now))
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

/// The periodic tick, armed while a check waits (a panic in it is a defect; it goes on).
static TICK: Job = Job::while_busy("holder-check-timer", tick, checking, TICK_MS);
/// The same tick at once, answering a check of a home this master serves.
static LOCAL_ANSWERS: Job = Job::once("holder-check-timer", |ctx, _| tick(ctx));

fn checking() -> bool {
    NODE.with(|n| n.try_borrow().map_or(true, |n| n.checking()))
}

/// The timer: the node's tick (deadlines, local answers, resends).
fn tick(ctx: Ctx) {
    run(ctx, |node, host| node.tick(host));
}

/// The bus messages: a request (answered with this master's verdict) and a response (ends the
/// check it answers, when it comes from the master asked).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    if let Some(m) = decode_message(kind, payload) {
        run(ctx, |node, host| node.receive(host, from, m));
    }
}
