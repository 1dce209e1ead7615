//! CTR.RECONCILE of a spread counter's home sets the counter's total, not the home's own units:
//! the home's master gathers every holder (current and folding back, as a clear does), then in
//! one step moves the home's own value by what the total is off the truth, so that the total
//! is `truth`. The step is an ordinary plain reconcile of the home with that target (replicated
//! as its effect, deterministic), so its drift is the total's drift: what the whole counter
//! held minus the truth. A watermark (`AT`, or the settled one a `FROM STREAM|ZSET` on a
//! counter with a history implies) is refused: the holders keep no buckets of the home's
//! history, so a total at a watermark cannot be told. A floored spread is refused as a clear
//! of it is (its floor is held by every holder), and so is a ceiled one. Adds that race the gather count as they would
//! against a plain overwrite.

use super::ctr_spread::{write_total, TotalWrite};
use super::reconcile_write::{reply, write_reconcile};
use super::spread_clear::refuse_unless_still_served;
use crate::counter::{CounterError, CounterRef, ReconcileOp};
use crate::ffi::{CommandError, CommandResult, Ctx, KeyName, RawString};
use crate::runtime::ctr_store::{open_for_write, with_counter, Write};

/// `AT` (or an implied watermark) on a spread home.
pub const AT_ON_SPREAD: CommandError = CommandError::fixed(
    "ERR CTR.RECONCILE at a watermark is not supported on a spread counter (its holders keep no history): reconcile its total without AT, or shrink it to 1 first",
);

const FLOORED_SPREAD: CommandError = CommandError::fixed(
    "ERR cannot reconcile a floored spread counter (its floor is held by every holder): shrink it to 1 first",
);

const CEILED_SPREAD: CommandError = CommandError::fixed(
    "ERR cannot reconcile a ceiled spread counter (its ceiling is held by every holder): shrink it to 1 first",
);

/// True when `key` is a spread home (holders current or folding back) and this is not a
/// replayed command (replays carry the master's decided effect).
pub fn is_spread_home(ctx: Ctx, key: RawString) -> bool {
    let key = crate::ffi::Key::open(ctx, key, false);
    super::spread_clear::is_spread_home(ctx, &key)
}

/// Starts the gather that sets the total of the spread home `w.key_name` to `truth`.
pub fn set_total(ctx: Ctx, w: &Write, truth: i64) -> CommandResult {
    // A spread home has a ceiling exactly when its spread is ceiled (its share of it).
    let bounded = with_counter(ctx, w.key_name, |c| match c {
        Some(CounterRef::Boxed(b)) if b.is_floored_spread() => Some(FLOORED_SPREAD),
        Some(CounterRef::Boxed(b)) if b.ceiling().is_some() => Some(CEILED_SPREAD),
        _ => None,
    })?;
    if let Some(refusal) = bounded {
        return Err(refusal);
    }
    let write = TotalWrite {
        token: None,
        truth: Some(truth),
    };
    write_total(ctx, w.key_name, write, apply)
}

/// Once every holder answered, on the home's master: the home's own units become `truth`
/// minus the holders' units, as a plain reconcile of the home. Replies `[truth, drift]`.
fn apply(ctx: Ctx, home: &[u8], gathered: Vec<(&[u8], i64)>, write: TotalWrite) -> CommandResult {
    refuse_unless_still_served(ctx, home)?;
    let truth = write.truth.ok_or(crate::ffi::INTERNAL_ERROR)?;
    let name = KeyName::new(ctx, home);
    let w = Write::resumed(ctx, name.raw, home, None);
    // Only the home's value changes: it moves by what the total is off the truth.
    let own_target = with_counter(ctx, name.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => {
            let total = b.total_at_clear(gathered.iter().copied())?;
            truth
                .checked_sub(total)
                .and_then(|shift| b.value().checked_add(shift))
                .ok_or(CounterError::Overflow)
        }
        _ => Ok(truth), // deleted while the holders were read: a counter of its own
    })??;
    let op = ReconcileOp {
        now: w.now,
        truth: own_target,
        watermark: None,
        width: w.settings.bucket_ms,
        retention: w.settings.bucket_retention_ms,
    };
    let key = open_for_write(ctx, name.raw)?;
    let mut repair = write_reconcile(&w, key, op)?;
    repair.value = truth;
    Ok(reply(repair))
}
