//! The strong tier: CTR.FLOOR and CTR.DECRFLOOR.

use super::ctr_args::{parse_decrement, parse_floor};
use super::spread_holders::refuse_look_alike;
use crate::counter::budget_kind::BudgetKind;
use crate::counter::spread::{bounds_by_name, parse_holder_name, NameBounds};
use crate::counter::{Counter, CounterRef, DecrOp, WriteKind};
use crate::ffi::{Args, CommandError, CommandResult, Ctx, KeyName, Reply};
use crate::metrics;
use crate::persist::effect::{CounterOp, Effect};
use crate::runtime::ctr_store::with_counter;
use crate::runtime::ctr_store::{
    created_with_ttl, is_missing, open_for_retry_as, open_for_write, refuse_sealed_unless_retry,
    update_counter, Before, Write, FOLD_IN_FLIGHT,
};
use crate::runtime::floor_moves::{record_refusal, refusal_may_be_false};
use crate::runtime::holder_check::Checked;
use crate::runtime::spread_transfer::serves;
use crate::runtime::waiter;

const SPREAD_FLOOR_REFUSED: CommandError = CommandError::fixed(
    "ERR the floor of a spread counter is set before it spreads (its holders keep floors of their own)",
);

/// CTR.FLOOR key floor|NONE: deterministic given the state, so it replicates verbatim.
pub fn floor(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(super::wrong_arity("ctr.floor"));
    }
    super::ctr_spread::refuse_holder(ctx, args.bytes(1))?;
    let key_name = args.raw(1);
    let key = open_for_write(ctx, key_name)?;
    let floor = parse_floor(args.bytes(2))?;
    if floor.is_none() && is_missing(&key) {
        return Ok(Reply::Ok); // no counter, no floor to remove
    }
    let mut moving = false;
    let changed = update_counter(&key, |c, before| {
        if c.spread().is_some() {
            return Err(SPREAD_FLOOR_REFUSED);
        }
        if units_moving(c) {
            moving = true;
            return Err(units_in_flight(args.bytes(1)));
        }
        Ok(c.set_floor(floor)? || before.created)
    });
    drop(key);
    if moving && wait_for_units(ctx, args, floor_cmd_still_waits(args.bytes(1)), self::floor) {
        return Ok(Reply::Blocked);
    }
    let changed = changed?;
    if changed {
        ctx.replicate_verbatim();
        ctx.key_changed(c"ctr.floor", key_name);
    }
    Ok(Reply::Ok)
}

/// True while the counter's units are still moving (a shrink's folds landing, a credit
/// unacknowledged): a floor set now would be set on part of it.
fn units_moving(c: &Counter) -> bool {
    c.transfers().is_some_and(|t| t.has_pending())
}

/// Whether `CTR.FLOOR` of `key` would still wait (the key's units still moving).
fn floor_cmd_still_waits(key: &[u8]) -> waiter::StillWaits {
    still_while(key, units_moving)
}

/// A wait that lasts while the counter at `key` (a boxed one: only those carry transfers)
/// passes `test`; a key gone or of another form ends it.
fn still_while(key: &[u8], test: fn(&Counter) -> bool) -> waiter::StillWaits {
    let key = key.to_vec();
    Box::new(move |ctx| {
        let name = KeyName::new(ctx, &key);
        with_counter(
            ctx,
            name.raw,
            |c| matches!(c, Some(CounterRef::Boxed(c)) if test(c)),
        ) == Ok(true)
    })
}

/// Blocks the client until the units the command at `args` waits for have come (see
/// [`waiter`]); false when it cannot wait (it replies its `TRYAGAIN` now).
fn wait_for_units(
    ctx: Ctx,
    args: &Args,
    still_waits: waiter::StillWaits,
    rerun: waiter::Rerun,
) -> bool {
    let bound_ms = crate::config::PURCHASE_WAIT_MS.load(std::sync::atomic::Ordering::Relaxed);
    waiter::wait(ctx, args.bytes(1), rerun, still_waits, serves, bound_ms)
}

/// The retryable refusal of a floor set on a counter whose units are still moving (a shrink's
/// holders folding back, a credit unacknowledged): its value is not yet its total, and a floor
/// set on part of it would let the folds' units be sold past the floor.
fn units_in_flight(key: &[u8]) -> CommandError {
    CommandError(
        format!(
            "TRYAGAIN units in flight: spread counter '{}' is still folding holders back or moving units; retry CTR.FLOOR",
            String::from_utf8_lossy(key)
        )
        .into(),
    )
}

/// What a write refused only for now waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Awaits {
    /// Budget on its way to it (its share, a move unacknowledged).
    Share,
    /// Budget the next rebalance round gathers to it from the other holders.
    Gathered,
    /// A purchase's wait, at a folded holder, before it passes a new token on.
    Fold,
}

impl Awaits {
    fn text(self, kind: BudgetKind) -> &'static str {
        match (self, kind) {
            (Awaits::Share, BudgetKind::Down) => "its share",
            (Awaits::Share, BudgetKind::Up) => "its share of room",
            (Awaits::Gathered, BudgetKind::Down) => "budget gathered from the other holders",
            (Awaits::Gathered, BudgetKind::Up) => "room gathered from the other holders",
            (Awaits::Fold, _) => "its fold to land",
        }
    }
}

/// The retryable refusal of a write (a purchase; a positive add at a ceiled spread's member)
/// that only budget still travelling keeps from being decided (a bounded holder before its
/// first credit, a counter whose move is unacknowledged): not final, so nothing is recorded
/// against its token and a retry decides afresh. The probe rule's walk stops here (skipping
/// the holder could count the token twice) and retries it.
fn awaiting_budget(args: &Args, awaits: Awaits, kind: BudgetKind) -> CommandError {
    if kind == BudgetKind::Down {
        metrics::DECREMENTS_AWAITING_BUDGET.incr();
    }
    // The command to retry: a purchase, or an add (of either sign).
    let write = match args.bytes(0).eq_ignore_ascii_case(b"ctr.add") {
        true => "add",
        false => "purchase",
    };
    CommandError(
        format!(
            "TRYAGAIN budget in flight: spread counter holder '{}' waits for {}; retry the {write}",
            String::from_utf8_lossy(args.bytes(1)),
            awaits.text(kind),
        )
        .into(),
    )
}

/// Counts a final refusal, and among them those that may be false (`unproven`: see
/// [`refusal_may_be_false`]), which the CtrFalseRefusals alert reads.
fn count_refusal(unproven: bool) {
    metrics::DECREMENTS_REFUSED.incr();
    if unproven {
        metrics::DECREMENTS_REFUSED_UNPROVEN.incr();
    }
}

/// The closure's way out of a write when the purchase waits for budget (never replied).
const NOT_YET: CommandError = CommandError::fixed("TRYAGAIN budget in flight");

/// Blocks the client until the fold of the holder at `args`'s key has landed, then runs
/// `rerun` again (see [`fold_still_travels`]); `past_bound`'s error when it cannot wait.
pub(super) fn wait_for_fold(
    ctx: Ctx,
    args: &Args,
    rerun: waiter::Rerun,
    past_bound: impl FnOnce() -> CommandError,
) -> CommandResult {
    if wait_for_units(ctx, args, fold_still_travels(args.bytes(1)), rerun) {
        return Ok(Reply::Blocked);
    }
    Err(past_bound())
}

/// Whether the holder at `key` is still sealed with its fold unacknowledged (a purchase of a
/// new token, a refund of a grant, waits for the fold to land there).
fn fold_still_travels(key: &[u8]) -> waiter::StillWaits {
    still_while(key, Counter::fold_travels)
}

/// What a write of `amount` units of `kind` (a purchase, a positive add) at the counter `c`
/// (None: a missing key) at `key` (whose name gives it `by_name`) waits for before it is
/// decided, if anything: budget on its way to it, or budget a rebalance round is to gather to
/// it.
pub(super) fn budget_wait(
    ctx: Ctx,
    (key, by_name): (&[u8], NameBounds),
    c: Option<&Counter>,
    kind: BudgetKind,
    amount: i64,
    now: i64,
) -> Option<Awaits> {
    if kind.waits_in_flight(c, amount, by_name, now) {
        return Some(Awaits::Share);
    }
    let gathers = crate::runtime::floor_moves::refusal_waits_for_rebalance(
        ctx,
        (key, by_name),
        c?,
        kind,
        amount,
        now,
    );
    gathers.then_some(Awaits::Gathered)
}

/// Whether a write of `amount` units of `kind` at `key` would still wait (see [`budget_wait`]).
/// One still waiting for budget a round gathers keeps asking for rounds
/// ([`floor_moves::keep_waiting`](crate::runtime::floor_moves::keep_waiting)): a round may
/// bring it only part of what it waits for.
fn still_waits_for_budget(key: &[u8], kind: BudgetKind, amount: i64) -> waiter::StillWaits {
    let key = key.to_vec();
    Box::new(move |ctx| {
        let name = KeyName::new(ctx, &key);
        let now = ctx.now_ms();
        let named = (&key[..], bounds_by_name(&key));
        let awaits = |c: Option<&Counter>| budget_wait(ctx, named, c, kind, amount, now);
        let awaits = with_counter(ctx, name.raw, |c| match c {
            None => awaits(None),
            Some(CounterRef::Boxed(c)) => awaits(Some(c)),
            Some(other) => awaits(Some(&other.to_counter())),
        });
        match awaits {
            Ok(Some(Awaits::Gathered)) => {
                crate::runtime::floor_moves::keep_waiting(ctx, &key, amount, now);
                true
            }
            Ok(Some(_)) => true,
            _ => false,
        }
    })
}

/// A write of `amount` units of `kind` at `args`'s key that waits for budget (`awaits`): the
/// demand of one that waits for a round is recorded, then the client is blocked until the
/// budget has come and the command runs again (`rerun`), or answered `TRYAGAIN` when it cannot
/// wait.
pub(super) fn wait_for_budget(
    ctx: Ctx,
    args: &Args,
    (kind, amount): (BudgetKind, i64),
    (awaits, now): (Awaits, i64),
    rerun: waiter::Rerun,
) -> CommandResult {
    let key = args.bytes(1);
    if awaits == Awaits::Gathered {
        // The whole counter may cover it once budget gathers here: the refusal's demand asks
        // the next rebalance round for it.
        record_refusal(ctx, key, amount, Some(now));
    }
    if wait_for_units(ctx, args, still_waits_for_budget(key, kind, amount), rerun) {
        return Ok(Reply::Blocked);
    }
    Err(awaiting_budget(args, awaits, kind))
}

enum Decremented {
    /// Applied (granted, or refused with the refusal recorded in the ledger).
    Recorded(DecrOp, Before, Option<i64>),
    /// Refused with nothing to remember: nothing changed.
    Refused,
    /// A retry: the first outcome.
    Replayed(Option<i64>),
}

/// CTR.DECRFLOOR key amount [TOKEN token] [AT ms]
pub fn decrfloor(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 3 {
        return Err(super::wrong_arity("ctr.decrfloor"));
    }
    let (key, _) = open_for_retry_as(ctx, args.raw(1))?;
    let parsed = args.with_words(2, parse_decrement)?;
    if let Checked::Blocked = refuse_look_alike(ctx, &key, args.bytes(1), decrfloor)? {
        return Ok(Reply::Blocked);
    }
    let w = Write::new(ctx, args, parsed.token, parsed.at)?;
    // A purchase retried on a holder folded since replays its first answer (the probe rule's
    // walk then stops where it stopped the first time): never granted a second time elsewhere.
    let sealed = refuse_sealed_unless_retry(&w, &key, WriteKind::Decr(parsed.amount));
    if sealed == Err(FOLD_IN_FLIGHT) {
        drop(key);
        return wait_for_fold(ctx, args, decrfloor, || {
            awaiting_budget(args, Awaits::Fold, BudgetKind::Down)
        });
    }
    if let Some(first) = sealed? {
        metrics::DUPLICATES_IGNORED.incr();
        return Ok(first.map_or(Reply::Null, Reply::Integer));
    }
    let named_holder = parse_holder_name(args.bytes(1)).is_some();
    let named = (args.bytes(1), bounds_by_name(args.bytes(1)));
    let down = BudgetKind::Down;
    if w.token.is_none() && is_missing(&key) {
        if let Some(awaits) = budget_wait(ctx, named, None, down, parsed.amount, w.now) {
            drop(key);
            let wanted = (down, parsed.amount);
            return wait_for_budget(ctx, args, wanted, (awaits, w.now), decrfloor);
        }
        // A missing counter is 0 with floor 0: refused, and nothing to remember. Only a
        // holder's demand can bring budget to it (no home is ever missing).
        let unproven = refusal_may_be_false(ctx, args.bytes(1), None, parsed.amount, w.now);
        count_refusal(unproven);
        if down.refusal_is_demand(args.bytes(1), None) {
            record_refusal(ctx, args.bytes(1), parsed.amount, None);
        }
        return Ok(Reply::Null);
    }
    let mut awaits = None;
    let mut unproven = false;
    let mut demand = false;
    let outcome = w.update(&key, |c, before| {
        if let Some(first) = w.retry_of(c, WriteKind::Decr(parsed.amount))? {
            c.note_duplicate();
            return Ok(Decremented::Replayed(first));
        }
        // Before anything changes: a missing key is not made, a token not recorded.
        awaits = budget_wait(ctx, named, Some(c), down, parsed.amount, w.now);
        if awaits.is_some() {
            return Err(NOT_YET);
        }
        let shards = w.shards(c, before);
        let op = DecrOp {
            now: w.now,
            event: w.event,
            amount: parsed.amount,
            shard: c.next_shard(shards),
            shards,
            token: w.token,
        };
        let result = c.apply_purchase(&op, named_holder)?;
        if result.is_none() {
            unproven = refusal_may_be_false(ctx, args.bytes(1), Some(c), parsed.amount, w.now);
            // Demand only where a rebalancer moves budget to purchases: a member of a ceiled
            // spread's moves are room for adds, which a purchase's refusal does not ask for.
            demand = down.refusal_is_demand(args.bytes(1), Some(c));
        }
        if result.is_none() && op.token.is_none() {
            return Ok(Decremented::Refused);
        }
        Ok(Decremented::Recorded(op, before, result))
    });
    if let Some(awaits) = awaits {
        drop(key);
        let wanted = (down, parsed.amount);
        return wait_for_budget(ctx, args, wanted, (awaits, w.now), decrfloor);
    }
    let outcome = outcome?;
    let reply = |v: Option<i64>| v.map_or(Reply::Null, Reply::Integer);
    match outcome {
        Decremented::Replayed(first) => {
            metrics::DUPLICATES_IGNORED.incr();
            Ok(reply(first))
        }
        Decremented::Refused => {
            count_refusal(unproven);
            if demand {
                record_refusal(ctx, args.bytes(1), parsed.amount, None);
            }
            Ok(Reply::Null)
        }
        Decremented::Recorded(op, before, result) => {
            let expires = created_with_ttl(&key, before);
            drop(key);
            let effect = Effect {
                op: CounterOp::Decr(op),
                expire_at: None,
            };
            w.replicate(args.len() == 3, before, &effect, c"ctr.decrfloor")?;
            if expires {
                ctx.expire_set(w.key_name);
            }
            match result {
                Some(_) => metrics::DECREMENTS_GRANTED.incr(),
                None => {
                    count_refusal(unproven);
                    if demand {
                        record_refusal(ctx, args.bytes(1), parsed.amount, None);
                    }
                }
            }
            Ok(reply(result))
        }
    }
}
