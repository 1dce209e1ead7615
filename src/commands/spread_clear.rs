//! CTR.CLEAR of a spread counter's home: the total becomes 0 and the reply is the total before.
//!
//! The home's master gathers every holder as a read of the total does
//! ([`super::ctr_spread::write_total`]: outside a cluster all at once, in a cluster with the
//! client blocked, the same timeout and errors, never from the cache), then, in one step on the
//! main thread, sums the home's own units with the holders it still lists and lowers the home's
//! value by that total ([`Counter::total_at_clear`], [`Counter::apply_clear_total`]). Holders
//! are not written: what they gained after they were read stays in the total, what they held
//! before is cancelled by the home. A failed gather changes nothing. The write replicates as
//! its effect (`CTR.APPLY key <CLEAR_TOTAL total>`): replicas and the AOF never gather.
//!
//! A token is checked before the gather and again when the clear is applied (two clears with
//! one token: one applies, the other replays its reply). A floored spread is refused: its
//! holders hold budgets that lowering the home cannot take back.

use super::ctr_spread::TotalWrite;
use crate::counter::{ClearTotalOp, CounterCell, CounterError, CounterRef, WriteKind};
use crate::ffi::{CommandError, CommandResult, Ctx, Key, KeyContent, KeyName, Reply};
use crate::metrics;
use crate::persist::ctr_type::ctr_type;
use crate::persist::effect::CounterOp;
use crate::runtime::ctr_store::{
    created_with_ttl, finish_clear, is_missing, open_for_write, update_counter, Write,
};
use crate::runtime::spread_transfer::serves;

/// True when `key` (open, a counter or missing) is a spread home: holders, current or still
/// folding back. A replayed command never gathers (it would not be one: clears replicate as
/// their effect).
pub fn is_spread_home(ctx: Ctx, key: &Key) -> bool {
    let KeyContent::Mine(raw) = key.content(ctr_type()) else {
        return false;
    };
    // SAFETY: the key is open and holds a live counter for the duration of this borrow.
    let spread = match unsafe { CounterCell::borrow(raw) } {
        CounterRef::Boxed(b) => b.spread().is_some() || !b.leaving().is_empty(),
        CounterRef::Inline(_) | CounterRef::Limiter(_) => false,
    };
    spread && !ctx.is_replaying()
}

/// CTR.CLEAR of a spread home `key`: a retry replays, a floored spread is refused, both before
/// anything is gathered; otherwise the gather starts (the clear is applied when it completes).
pub fn clear(ctx: Ctx, w: &Write, key: Key) -> CommandResult {
    let replay = update_counter(&key, |c, _| match w.retry_of(c, WriteKind::ClearTotal)? {
        Some(first) => {
            c.note_duplicate();
            Ok(Some(first))
        }
        None if c.is_floored_spread() => Err(CounterError::ClearFlooredSpread.into()),
        None => Ok(None),
    })?;
    drop(key);
    if let Some(first) = replay {
        metrics::DUPLICATES_IGNORED.incr();
        return Ok(first.map_or(Reply::Null, Reply::Integer));
    }
    let write = TotalWrite {
        token: w.token,
        truth: None,
    };
    super::ctr_spread::write_total(ctx, w.key_name, write, apply)
}

/// Before a write of the total gathered from the holders: outside a cluster it runs in the
/// command; in one, in a callback, which the server's pause of writes does not hold back, and
/// after the home's master may have failed over or its slot moved while the holders were read.
pub(super) fn refuse_unless_still_served(ctx: Ctx, home: &[u8]) -> Result<(), CommandError> {
    if crate::runtime::spread_cluster::in_cluster(ctx)
        && (!serves(ctx, home) || crate::runtime::replication_gate::paused())
    {
        return Err(CommandError(
            format!(
                "TRYAGAIN spread counter '{}' is no longer served here, or writes are paused",
                String::from_utf8_lossy(home)
            )
            .into(),
        ));
    }
    Ok(())
}

/// Once the gather is in, on the home's master (in the command outside a cluster, else in the
/// timer or bus callback that completed it): sums and clears the total in one step, replicates
/// the effect and gives the reply. `gathered` holds each holder's answer by name.
pub fn apply(
    ctx: Ctx,
    home: &[u8],
    gathered: Vec<(&[u8], i64)>,
    write: TotalWrite,
) -> CommandResult {
    let token = write.token;
    let name = KeyName::new(ctx, home);
    refuse_unless_still_served(ctx, home)?;
    let key = open_for_write(ctx, name.raw)?;
    let w = Write::resumed(ctx, name.raw, home, token);
    if w.token.is_none() && is_missing(&key) {
        return Ok(Reply::Integer(0)); // deleted meanwhile: nothing to clear or remember
    }
    let outcome = w.update(&key, |c, before| {
        if let Some(first) = w.retry_of(c, WriteKind::ClearTotal)? {
            c.note_duplicate();
            return Ok(Err(first));
        }
        let op = ClearTotalOp {
            now: w.now,
            total: c.total_at_clear(gathered)?,
            token: w.token,
        };
        c.apply_clear_total(&op)?;
        Ok(Ok((op, before)))
    })?;
    let expires = matches!(outcome, Ok((_, before)) if created_with_ttl(&key, before));
    drop(key);
    let applied = outcome.map(|(op, before)| (CounterOp::ClearTotal(op), before, op.total));
    finish_clear(&w, applied, expires)
}
