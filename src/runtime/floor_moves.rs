//! Budget follows demand, the Redis glue: the machine is `protocol::rebalance_node` (polls,
//! answers, gives, the whole headroom told; its module docs tell the protocol) and the policy
//! the pure `counter::rebalance::plan_moves`. Here: refusals recorded by the commands, the
//! timer that rebalances the homes due `ctr.rebalance-delay-ms` after their first refusal, the
//! timer that drops polls unanswered past `POLL_TIMEOUT_MS`, the bus receiver, and on one
//! server (no cluster) a rebalance that reads every holder and applies the moves at once
//! ([`rebalance_here`]).

use std::sync::atomic::Ordering::Relaxed;

use redis_module::raw;

use super::bounded_spread::{bounded_spread_names, write_bound, Bounded};
use super::ctr_store::{select_db, with_counter};
use super::demand::{self, selected_db, NODE};
use super::scheduler::{self, Job, Next, When};
use super::spread_cluster::NodeId;
use super::spread_transfer::{decode_message, hurry, run_machine, tick_soon, RedisHost};
use crate::config;
use crate::counter::budget_kind::BudgetKind;
use crate::counter::headroom::whole_headroom;
use crate::counter::rebalance::{apply_moves, plan_moves, HolderReport};
use crate::counter::spread::{parse_holder_name, NameBounds};
use crate::counter::Counter;
use crate::ffi::{CommandError, Ctx, KeyName};
use crate::protocol::messages::MessageKind;
use crate::protocol::rebalance_node::{RebalanceNode, MAX_MOVES, POLL_TIMEOUT_MS};

/// Runs the rebalancer over this server.
fn run<R: Default>(ctx: Ctx, f: impl FnOnce(&mut RebalanceNode<NodeId>, &mut RedisHost) -> R) -> R {
    let r = run_machine(ctx, &NODE, "the rebalancer", f);
    after_run(ctx);
    r
}

/// What a run of the node leaves for the timers: homes due (notices), polls to drop in time,
/// budget moves to send.
fn after_run(ctx: Ctx) {
    let (due, polling, started) = NODE.with(|n| match n.try_borrow_mut() {
        Ok(mut n) => (n.has_due(), n.polling(), n.take_moves_started()),
        Err(_) => (false, false, Vec::new()),
    });
    for (db, giver) in started {
        if select_db(ctx, db) {
            hurry(ctx, &giver);
        }
    }
    if due && config::REBALANCE_DELAY_MS.load(Relaxed) > 0 {
        schedule_rebalance(ctx);
    } else if due {
        // Rebalancing is off here (a notice from a master where it is on): nothing waits.
        NODE.with(|n| n.try_borrow_mut().map(|mut n| n.take_due()).ok());
    }
    if polling {
        scheduler::arm_once(ctx.ptr, When::After(POLL_TIMEOUT_MS), &POLL_TIMEOUT);
    }
    tick_soon(ctx);
}

/// Drops the polls unanswered past their deadline; armed again while any is under way.
static POLL_TIMEOUT: Job = Job::new(
    "floor-poll-timeout",
    |ctx, _| {
        run_machine(ctx, &NODE, "the rebalancer", |node, host| node.expire(host));
        match NODE.with(|n| n.try_borrow().map_or(true, |n| n.polling())) {
            true => Next::After(POLL_TIMEOUT_MS),
            false => Next::Done,
        }
    },
    || Next::Done,
);

/// Receives this file's bus messages (from `bus`, the one receiver).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    if let Some(m) = decode_message(kind, payload) {
        run(ctx, |node, host| node.receive(host, from, m));
    }
}

/// True when a write of `amount` units of `kind` (a purchase, a positive add) that the counter
/// `c` at `key` (named with `by_name`) refuses should wait for budget to gather from the other
/// holders (`TRYAGAIN`) rather than be refused for good ([`BudgetKind::waits_to_gather`]), as
/// the last rebalance round told this master of the whole headroom (`counter::headroom`).
/// Never while rebalancing is off: no round would ever come.
pub fn refusal_waits_for_rebalance(
    ctx: Ctx,
    named: (&[u8], NameBounds),
    c: &Counter,
    kind: BudgetKind,
    amount: i64,
    now_ms: i64,
) -> bool {
    let rebalancing = config::REBALANCE_DELAY_MS.load(Relaxed) != 0;
    kind.waits_to_gather(named, c, amount, rebalancing, |spread_id| {
        demand::refusal_fate((selected_db(ctx), spread_id), amount, now_ms)
    })
}

/// True when a final refusal of a purchase of `amount` by the counter `c` at `key` (None: a
/// missing key) may be false: `key` belongs to a floored spread counter and no fresh bound of
/// the whole counter's headroom shows the amount beyond it (the rebalancer is off, or no round
/// told this master in time). A refusal by any other counter is true: it is the whole counter.
pub fn refusal_may_be_false(
    ctx: Ctx,
    key: &[u8],
    c: Option<&Counter>,
    amount: i64,
    now_ms: i64,
) -> bool {
    let Some(spread_id) = BudgetKind::Down.moving_spread(key, c) else {
        return false;
    };
    config::REBALANCE_DELAY_MS.load(Relaxed) == 0
        || !demand::refusal_proven((selected_db(ctx), spread_id), amount, now_ms)
}

/// A purchase (or a positive add at a member of a spread that moves up-budget) refused afresh by
/// the counter at `key` on this master (not a replay), for good or (`waiting_since`) told to
/// retry while budget gathers: the demand the rebalancer moves budget toward. It schedules a
/// rebalance of the spread counter `key` belongs to.
pub fn record_refusal(ctx: Ctx, key: &[u8], amount: i64, waiting_since: Option<i64>) {
    let rebalancing = config::REBALANCE_DELAY_MS.load(Relaxed) > 0;
    demand::record(selected_db(ctx), key, amount, waiting_since, rebalancing);
    schedule_rebalance(ctx);
}

/// A write of `amount` at `key` blocked in the server while budget gathers, still waiting at
/// `now_ms`: it keeps asking for rounds, as a client retrying it would (one round gives a
/// holder at most half of each giver's budget).
pub fn keep_waiting(ctx: Ctx, key: &[u8], amount: i64, now_ms: i64) {
    if config::REBALANCE_DELAY_MS.load(Relaxed) > 0 {
        demand::keep_waiting(selected_db(ctx), key, amount, now_ms);
        schedule_rebalance(ctx);
    }
}

/// Arms the rebalance `ctr.rebalance-delay-ms` from now (0: never): refusals of the same burst
/// are planned together, and a home is rebalanced at most once per period.
fn schedule_rebalance(ctx: Ctx) {
    let delay = config::REBALANCE_DELAY_MS.load(Relaxed);
    if delay > 0 {
        scheduler::arm_once(ctx.ptr, When::After(delay), &REBALANCE);
    }
}

/// Rebalances every home due (on a master only). A panic in it leaves the job free: the next
/// refusal arms it again.
static REBALANCE: Job = Job::new(
    "rebalance",
    |ctx, _| {
        if super::replication_gate::paused() {
            // The homes wait, the job still armed, for a run once writes go on.
            return Next::After(config::REBALANCE_DELAY_MS.load(Relaxed).max(100));
        }
        rebalance_due(ctx);
        Next::Done
    },
    || Next::Done,
);

/// Rebalances every home due: across masters the home's master polls the holders and asks
/// givers to move (the node); on one server, at once here.
fn rebalance_due(ctx: Ctx) {
    let homes = NODE.with(|n| {
        n.try_borrow_mut()
            .map(|mut n| n.take_due())
            .unwrap_or_default()
    });
    if ctx.flags() & raw::REDISMODULE_CTX_FLAGS_MASTER == 0 {
        return;
    }
    let in_cluster = super::spread_cluster::in_cluster(ctx);
    for (db, carried) in homes {
        if !select_db(ctx, db) {
            continue;
        }
        // Holders name their home by the name it had when it spread.
        let home = super::home_names::current_home(ctx, carried);
        if in_cluster {
            run(ctx, |node, host| node.rebalance(host, &home));
            continue;
        }
        if let Err(e) = rebalance_here(ctx, db, &home) {
            ctx.log_warning(&format!(
                "ctr: a rebalance of a floored spread counter failed: {}",
                e.0
            ));
        }
    }
    select_db(ctx, 0);
}

/// One rebalance of the bounded spread counter at `home`, all on this server: reads every
/// holder's budget of the kind the spread moves and its demand since the last rebalance, plans
/// the moves ([`plan_moves`]) and applies them at once.
fn rebalance_here(ctx: Ctx, db: i32, home: &[u8]) -> Result<(), CommandError> {
    let Some((kind, names)) = bounded_spread_names(ctx, home)? else {
        return Ok(()); // not (or no longer) a bounded spread counter
    };
    let keys: Vec<KeyName> = names.iter().map(|n| KeyName::new(ctx, n)).collect();
    let (mut values, mut bounds) = (Vec::new(), Vec::new());
    let now = ctx.precise_now_ms();
    for key in &keys {
        // A member without the bound yet counts it as 0: its name holds it there.
        let member = with_counter(ctx, key.raw, Bounded::of)?;
        values.push(member.value);
        bounds.push(member.bound(kind).unwrap_or(0));
    }
    let folding = with_counter(ctx, keys[0].raw, |c| match c {
        Some(crate::counter::CounterRef::Boxed(b)) => !b.leaving().is_empty(),
        _ => false,
    })?;
    let spread_id = names
        .get(1)
        .and_then(|n| parse_holder_name(n))
        .map(|h| h.spread_id);
    let reports: Vec<HolderReport> = NODE.with(|n| {
        let Ok(mut node) = n.try_borrow_mut() else {
            return Vec::new();
        };
        let book = &mut node.book;
        let reports: Vec<HolderReport> = (names.iter().zip(values.iter().zip(&bounds)))
            .map(|(name, (&value, &bound))| {
                let key = (db, name.clone());
                let meter = book.take_meter(&key, now);
                HolderReport {
                    budget: kind.room_clamped(value, bound),
                    demand: book.since_last_rebalance(key, meter),
                }
            })
            .collect();
        if let Some(id) = spread_id.filter(|_| !folding) {
            let units = whole_headroom(reports.iter().map(|r| (r.budget, 0)));
            book.saw_headroom((db, id), units, now, now);
        }
        reports
    });
    let moves = plan_moves(&reports, MAX_MOVES);
    if moves.is_empty() {
        return Ok(());
    }
    let after = apply_moves(kind, &bounds, &values, &moves)
        .map_err(|_| CommandError::fixed("ERR counter overflow"))?;
    for ((key, before), &bound) in keys.iter().zip(&bounds).zip(&after) {
        if *before != bound {
            write_bound(ctx, key.raw, kind, bound)?;
        }
    }
    Ok(())
}
