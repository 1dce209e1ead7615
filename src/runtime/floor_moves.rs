//! Budget follows demand, the Redis glue (the policy is the pure
//! `counter::rebalance::plan_moves`): on one server a rebalance reads every holder and applies
//! the moves at once ([`rebalance_here`]); across cluster masters:
//!
//! 1. A holder that refuses a purchase afresh records it on its master (`demand`),
//!    which schedules a rebalance of its home `ctr.rebalance-delay-ms` later: refusals of one
//!    burst make one **notice** to the home's master (0xD0), not one message each.
//! 2. The home's master, on a notice (also coalesced by the same delay) or on its own
//!    holders' refusals, **polls** the masters of the other holders (0xD1, one message per
//!    master) for each holder's budget and demand meter; they **answer** (0xD2).
//! 3. With every answer in, it plans with `plan_moves` (at most half a spare holder's budget,
//!    largest wants first), routes each move between two holders through the home
//!    (`through_the_home`: the giver gives to the home, the home to the receiver) and sends
//!    each giver's master a **give** (0xD3).
//! 4. The giver's master decides alone: it starts a transfer (`dv = 0, df = -n`) of at most
//!    its budget at that moment, so a stale plan can never oversell; a pair with a move still
//!    unacknowledged is busy and the give is dropped (the next refusal plans again).
//!
//! 5. It also tells every master it polled the whole headroom it saw (0xD4): the bound that
//!    decides whether a holder's refusal is final or retryable (`counter::headroom`).
//!
//! Nothing here is durable: a poll not answered within `POLL_TIMEOUT_MS` is dropped, and a
//! lost notice or give costs one round; the next refusal starts another. What must not be
//! lost (the move itself) is a transfer: replicated, resent until acknowledged.

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::c_int;
use std::sync::atomic::Ordering::Relaxed;

use redis_module::raw;

use super::ctr_floor_spread::{floored_spread_names, write_floor};
use super::ctr_store::value_and_floor;
use super::ctr_store::with_counter;
use super::demand::{self, selected_db, since_last_rebalance, take_meter, DbKey, DEMAND_LIMIT};
use super::demand::{saw_headroom, SpreadKey};
use super::scheduler::{self, Job, Next, When};
use super::spread_cluster::{self as cluster, NodeId};
use super::spread_transfer as transfer;
use crate::config;
use crate::counter::headroom::{floored_spread_id, whole_headroom, Refusal};
use crate::counter::rebalance::apply_moves;
use crate::counter::rebalance::{plan_moves, through_the_home, HolderReport};
use crate::counter::spread::{key_slot, parse_holder_name};
use crate::counter::{Counter, CounterRef};
use crate::ffi::{rm, CommandError, Ctx, KeyName};
use crate::metrics;
use crate::persist::demand_msg::{self as msg, Give, Headroom, HolderDemand};
use crate::protocol::exchange::Exchange;
use crate::protocol::messages::MessageKind;
use crate::protocol::timeout::Timeout;

const MSG_NOTICE: MessageKind = MessageKind::DemandNotice;
const MSG_POLL: MessageKind = MessageKind::DemandPoll;
const MSG_ANSWER: MessageKind = MessageKind::DemandAnswer;
const MSG_GIVE: MessageKind = MessageKind::DemandGive;
const MSG_HEADROOM: MessageKind = MessageKind::Headroom;

/// How long the home's master waits for every master's answer before dropping a poll.
const POLL_TIMEOUT_MS: i64 = 1_000;

/// Cluster keys live in database 0.
const DB: i32 = 0;

/// A poll of the holders of `home` under way on its master.
struct Poll {
    home: Vec<u8>,
    /// The home first, then its holders.
    names: Vec<Vec<u8>>,
    reports: Vec<Option<HolderDemand>>,
    /// Masters asked, with the holder indices each was asked for; None once answered.
    asks: Vec<(NodeId, Option<Vec<usize>>)>,
}

/// The most polls under way on one master (one per home at a time).
const MAX_POLLS: usize = 10_000;

thread_local! {
    /// Never resent (a lost poll costs a round), ended by its own timer at `POLL_TIMEOUT_MS`.
    static POLLS: RefCell<Exchange<Poll>> = RefCell::new(Exchange::new(MAX_POLLS));
}

/// A rebalance of `home` is due on this master (a holder of it refused): the home's master
/// polls; any other master sends it a notice.
pub fn rebalance(ctx: Ctx, home: &[u8]) {
    match transfer::route(ctx, home) {
        Ok(None) => start_poll(ctx, home),
        Ok(Some(node)) => {
            cluster::send(ctx.ptr, &node, MSG_NOTICE, &msg::encode_notice(home));
        }
        Err(_) => cluster::forget_topology(),
    }
}

/// On the home's master: reads the holders it serves and polls the other masters.
fn start_poll(ctx: Ctx, home: &[u8]) {
    let busy = POLLS.with(|p| p.borrow().iter().any(|(_, poll)| poll.home == home));
    if busy || !transfer::serves(ctx, home) {
        return; // a poll of this home is under way; the refusal's demand waits for the next
    }
    let Ok(Some(names)) = floored_spread_names(ctx, home) else {
        return; // not (or no longer) a floored spread counter
    };
    let Ok(topology) = cluster::topology(ctx, false) else {
        return;
    };
    let mut poll = Poll {
        home: home.to_vec(),
        reports: vec![None; names.len()],
        names,
        asks: Vec::new(),
    };
    for i in 0..poll.names.len() {
        match topology.remote_owner(key_slot(&poll.names[i])) {
            Ok(None) => poll.reports[i] = Some(local_demand(ctx, &poll.names[i])),
            Ok(Some(node)) => match poll.asks.iter_mut().find(|(n, _)| *n == node) {
                Some((_, Some(asked))) => asked.push(i),
                _ => poll.asks.push((node, Some(vec![i]))),
            },
            Err(_) => return,
        }
    }
    if poll.asks.is_empty() {
        return finish(ctx, poll);
    }
    let polls: Vec<(NodeId, Vec<Vec<u8>>)> = poll
        .asks
        .iter()
        .map(|(node, asked)| {
            let names = asked.iter().flatten().map(|&i| poll.names[i].clone());
            (*node, names.collect())
        })
        .collect();
    let random = || u64::from_le_bytes(crate::ffi::random_bytes());
    // No deadline in the exchange: the poll's own timer below ends it by id (the cached clock
    // may read a little earlier than the timer's, and a poll left behind would keep its home
    // from being polled again).
    let opened = POLLS.with(|p| p.borrow_mut().open(random, poll, Timeout::NEVER, i64::MAX));
    let Ok(id) = opened else {
        return; // too many polls under way: this refusal's demand waits for the next round
    };
    for (node, names) in &polls {
        cluster::send(ctx.ptr, node, MSG_POLL, &msg::encode_poll(id, home, names));
    }
    scheduler::arm(
        ctx.ptr,
        When::After(POLL_TIMEOUT_MS),
        &POLL_TIMEOUT,
        id as usize,
    );
}

/// One per poll, at `POLL_TIMEOUT_MS`: drops that poll if still unanswered.
static POLL_TIMEOUT: Job = Job::once("floor-poll-timeout", |_, id| {
    POLLS.with(|p| p.borrow_mut().end(id as u64));
});

/// A holder's budget, budget moving out and demand meter on this master (NotHere unless it
/// serves it).
fn local_demand(ctx: Ctx, name: &[u8]) -> HolderDemand {
    if !transfer::serves(ctx, name) {
        return HolderDemand::NotHere;
    }
    let key = KeyName::new(ctx, name);
    let now = ctx.precise_now_ms();
    let read = with_counter(ctx, key.raw, |c| {
        let moving_out = match &c {
            Some(CounterRef::Boxed(b)) => b.budget_moving_out(now),
            _ => 0,
        };
        (c.map_or(0, CounterRef::budget), moving_out)
    });
    match read {
        Ok((budget, moving_out)) => HolderDemand::Here {
            budget,
            moving_out,
            meter: take_meter(DB, name, now),
        },
        Err(_) => HolderDemand::NotHere,
    }
}

/// True while the home folds holders back: their units travel to the home in folds, in no
/// current holder's budget, so a round's bound would be low; it sends none (refusals wait for
/// the next round, at most `HEADROOM_WAIT_MS`).
fn folding(ctx: Ctx, home: &[u8]) -> bool {
    let key = KeyName::new(ctx, home);
    with_counter(ctx, key.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => !b.leaving().is_empty(),
        _ => false,
    })
    .unwrap_or(true)
}

/// The spread a round's names (the home first, then its holders) belong to.
fn spread_of_names(db: i32, names: &[Vec<u8>]) -> Option<SpreadKey> {
    let holder = parse_holder_name(names.get(1)?)?;
    Some((db, holder.spread_id))
}

/// Every report is in: plans the moves and sends each giver's master its give; tells every
/// master polled the whole headroom seen.
fn finish(ctx: Ctx, poll: Poll) {
    let mut reports = Vec::with_capacity(poll.names.len());
    let mut in_hand = Vec::with_capacity(poll.names.len());
    for (name, report) in poll.names.iter().zip(&poll.reports) {
        let Some(HolderDemand::Here {
            budget,
            moving_out,
            meter,
        }) = report
        else {
            return; // a holder moving between masters: plan at the next refusal
        };
        reports.push(HolderReport {
            budget: *budget,
            demand: since_last_rebalance(DB, name, *meter),
        });
        in_hand.push((*budget, *moving_out));
    }
    if let Some(spread) = spread_of_names(DB, &poll.names).filter(|_| !folding(ctx, &poll.home)) {
        let units = whole_headroom(in_hand);
        let now = ctx.precise_now_ms();
        let bound = msg::encode_headroom(&Headroom {
            home: poll.home.clone(),
            spread_id: spread.1,
            units,
            round_ms: now,
        });
        saw_headroom(spread, units, now, now);
        for (node, _) in &poll.asks {
            cluster::send(ctx.ptr, node, MSG_HEADROOM, &bound);
        }
    }
    // Across masters every move goes through the home (its names[0]): no move can outlive
    // its receiver (`rebalance::through_the_home`).
    for m in through_the_home(&plan_moves(&reports, MAX_MOVES)) {
        let give = Give {
            giver: poll.names[m.giver].clone(),
            receiver: poll.names[m.receiver].clone(),
            units: m.units,
        };
        match transfer::route(ctx, &give.giver) {
            Ok(None) => on_give(ctx, give),
            Ok(Some(node)) => {
                cluster::send(ctx.ptr, &node, MSG_GIVE, &msg::encode_give(&give));
            }
            Err(_) => cluster::forget_topology(),
        }
    }
}

/// On the giver's master: moves at most what the giver holds now (it decides alone).
fn on_give(ctx: Ctx, give: Give) {
    if !transfer::serves(ctx, &give.giver) {
        return;
    }
    let giver = KeyName::new(ctx, &give.giver);
    let Ok((value, floor)) = with_counter(ctx, giver.raw, value_and_floor) else {
        return;
    };
    let units = give.units.min(value.saturating_sub(floor.unwrap_or(0)));
    if units <= 0 {
        return;
    }
    match transfer::start(ctx, giver.raw, &give.receiver, 0, -units) {
        Ok(_) => metrics::BUDGET_MOVES.incr(),
        Err(_) => metrics::BUDGET_MOVES_SKIPPED.incr(), // busy pair: the next round retries
    }
}

/// On another master: answers a poll for the holders it serves.
fn on_poll(ctx: Ctx, from: NodeId, payload: &[u8]) {
    let Ok(poll) = msg::decode_poll(payload) else {
        return;
    };
    let id = poll.id;
    let reports: Vec<HolderDemand> = poll.names.iter().map(|n| local_demand(ctx, n)).collect();
    cluster::send(
        ctx.ptr,
        &from,
        MSG_ANSWER,
        &msg::encode_answer(id, &reports),
    );
}

/// On the home's master: records a master's answer; plans once every master answered.
fn on_answer(ctx: Ctx, from: NodeId, payload: &[u8]) {
    let Ok((id, answers)) = msg::decode_answer(payload) else {
        return;
    };
    let complete = POLLS.with(|p| {
        let mut polls = p.borrow_mut();
        let poll = polls.get_mut(id)?;
        let (_, asked) = poll.asks.iter_mut().find(|(n, _)| *n == from)?;
        let indices = asked.take_if(|a| a.len() == answers.len())?;
        for (i, report) in indices.into_iter().zip(answers) {
            poll.reports[i] = Some(report);
        }
        let done = poll.asks.iter().all(|(_, a)| a.is_none());
        done.then(|| polls.end(id)).flatten()
    });
    if let Some(poll) = complete {
        finish(ctx, poll);
    }
}

fn handle(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    match kind {
        MSG_NOTICE => {
            if let Ok(home) = msg::decode_notice(payload) {
                schedule_rebalance(ctx, (DB, home));
            }
        }
        MSG_POLL => on_poll(ctx, from, payload),
        MSG_ANSWER => on_answer(ctx, from, payload),
        MSG_GIVE => {
            if let Ok(give) = msg::decode_give(payload) {
                on_give(ctx, give);
            }
        }
        MSG_HEADROOM => {
            if let Ok(m) = msg::decode_headroom(payload) {
                let now = ctx.precise_now_ms();
                saw_headroom((DB, m.spread_id), m.units, m.round_ms, now);
            }
        }
        _ => {}
    }
}

/// Receives this file's bus messages (from `bus`, the one receiver).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    handle(ctx, from, kind, payload);
    transfer::tick_soon(ctx);
}

/// True when a purchase of `amount` that the counter `c` at `key` cannot cover should wait for
/// budget to gather from the other holders (`TRYAGAIN`, nothing recorded) rather than be
/// refused for good: `c` belongs to a floored spread counter whose whole headroom may cover
/// it, as the last rebalance round told this master (`counter::headroom`). Never while
/// rebalancing is off: no round would ever come.
pub fn refusal_waits_for_rebalance(
    ctx: Ctx,
    key: &[u8],
    c: &Counter,
    amount: i64,
    now_ms: i64,
) -> bool {
    if config::REBALANCE_DELAY_MS.load(Relaxed) == 0 {
        return false;
    }
    let Some(spread_id) = floored_spread_id(key, c) else {
        return false;
    };
    let spread = (selected_db(ctx), spread_id);
    demand::refusal_fate(spread, amount, now_ms) == Refusal::Retry
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
    let spread_id = match c {
        Some(c) => floored_spread_id(key, c),
        None => parse_holder_name(key)
            .map(|h| h.spread_id)
            .filter(|&id| crate::counter::spread::is_floored_id(id)),
    };
    let Some(spread_id) = spread_id else {
        return false;
    };
    config::REBALANCE_DELAY_MS.load(Relaxed) == 0
        || !demand::refusal_proven((selected_db(ctx), spread_id), amount, now_ms)
}

/// A purchase refused afresh by the counter at `key` on this master (not a replay), for good
/// or (`waiting_since`) told to retry while budget gathers: the demand the rebalancer moves
/// budget toward. It schedules a rebalance of the spread counter `key` belongs to.
pub fn record_refusal(ctx: Ctx, key: &[u8], amount: i64, waiting_since: Option<i64>) {
    let db = selected_db(ctx);
    demand::record(db, key, amount, waiting_since);
    // A holder's demand is rebalanced by its home; any other key is a home itself.
    let home = parse_holder_name(key).map_or(key, |h| h.home);
    schedule_rebalance(ctx, (db, home.to_vec()));
}

/// Budget moves planned per rebalance, at most.
const MAX_MOVES: usize = 16;

thread_local! {
    /// Homes with refusals since their last rebalance.
    static DUE: RefCell<HashSet<DbKey>> = RefCell::new(HashSet::new());
}

/// Schedules a rebalance of `home` `ctr.rebalance-delay-ms` from now (0: never): refusals of
/// the same burst are planned together, and a home is rebalanced at most once per period.
fn schedule_rebalance(ctx: Ctx, home: DbKey) {
    let delay = config::REBALANCE_DELAY_MS.load(Relaxed);
    if delay == 0 {
        return;
    }
    DUE.with(|d| {
        let mut homes = d.borrow_mut();
        // O(1) per refusal: a burst of refusals over many keys costs no scan of the others.
        if homes.len() < DEMAND_LIMIT {
            homes.insert(home);
        }
    });
    scheduler::arm_once(ctx.ptr, When::After(delay), &REBALANCE);
}

/// Rebalances every home with refusals since the last run (on a master only). A panic in it
/// leaves the job free: the next refusal arms it again.
static REBALANCE: Job = Job::new(
    "rebalance",
    |ctx, _| {
        if super::replication_gate::paused() {
            // The homes wait, the job still armed, for a run once writes go on.
            return Next::After(config::REBALANCE_DELAY_MS.load(Relaxed).max(100));
        }
        rebalance_due(ctx, DUE.with(|d| std::mem::take(&mut *d.borrow_mut())));
        Next::Done
    },
    || Next::Done,
);

/// Rebalances every home with refusals since the last run.
fn rebalance_due(ctx: Ctx, homes: HashSet<DbKey>) {
    if ctx.flags() & raw::REDISMODULE_CTX_FLAGS_MASTER == 0 {
        return;
    }
    for (db, home) in homes {
        // SAFETY: ctx is the timer's live context; database 0 is selected again below.
        if unsafe { rm!(RedisModule_SelectDb)(ctx.ptr, db) } != raw::REDISMODULE_OK as c_int {
            continue;
        }
        // Holders name their home by the name it had when it spread.
        let home = super::home_names::current_home(ctx, home);
        if super::spread_cluster::in_cluster(ctx) {
            // Across masters: the home's master polls the holders and asks givers to move.
            rebalance(ctx, &home);
            continue;
        }
        if let Err(e) = rebalance_here(ctx, db, &home) {
            ctx.log_warning(&format!(
                "ctr: a rebalance of a floored spread counter failed: {}",
                e.0
            ));
        }
    }
    // SAFETY: as above.
    unsafe { rm!(RedisModule_SelectDb)(ctx.ptr, 0) };
}

/// One rebalance of the floored spread counter at `home`, all on this server: reads every
/// holder's budget and its demand since the last rebalance, plans the moves
/// ([`plan_moves`]) and applies them at once.
fn rebalance_here(ctx: Ctx, db: i32, home: &[u8]) -> Result<(), CommandError> {
    let Some(names) = floored_spread_names(ctx, home)? else {
        return Ok(()); // not (or no longer) a floored spread counter
    };
    let keys: Vec<KeyName> = names.iter().map(|n| KeyName::new(ctx, n)).collect();
    let (mut values, mut floors, mut reports) = (Vec::new(), Vec::new(), Vec::new());
    let now = ctx.precise_now_ms();
    for (name, key) in names.iter().zip(&keys) {
        let (value, floor) = with_counter(ctx, key.raw, value_and_floor)?;
        let floor = floor.unwrap_or(0);
        let meter = take_meter(db, name, now);
        reports.push(HolderReport {
            budget: value.saturating_sub(floor),
            demand: since_last_rebalance(db, name, meter),
        });
        values.push(value);
        floors.push(floor);
    }
    if let Some(spread) = spread_of_names(db, &names).filter(|_| !folding(ctx, home)) {
        let units = whole_headroom(reports.iter().map(|r| (r.budget, 0)));
        saw_headroom(spread, units, now, now);
    }
    let moves = plan_moves(&reports, MAX_MOVES);
    if moves.is_empty() {
        return Ok(());
    }
    let after = apply_moves(&floors, &values, &moves)
        .map_err(|_| CommandError::fixed("ERR counter overflow"))?;
    for ((key, before), &floor) in keys.iter().zip(&floors).zip(&after) {
        if *before != floor {
            write_floor(ctx, key.raw, floor, None)?;
        }
    }
    Ok(())
}
