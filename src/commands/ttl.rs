//! The TTL options of a write (`EX`, `PX`, `EXAT`, `PXAT`, `PERSIST`, `ENX`), as `CTR.ADD` and
//! `CTR.INCREX` apply them to the key once the write is made. A TTL set on a key the write did
//! not create replicates as `PEXPIREAT` (an absolute time, the master's decision) and a removed
//! one as `PERSIST`, after the write's own effect; each sends the generic event `SET`/`PERSIST`
//! would. A time already past deletes the key, as `SET ... EXAT` with a past time does
//! (replicated as `DEL`).

use super::ctr_args::{Expiry, ExpiryArgs};
use crate::ffi::{CommandError, Ctx, Key, RawString};

/// What a write did to its key's TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlChange {
    Kept,
    Set(i64),
    Persisted,
    /// The time was already past: the key is gone.
    Deleted,
}

/// The absolute deadline of `EX`/`PX` (from the server's clock) or `EXAT`/`PXAT`; None for
/// `PERSIST` or no option. As `SET ... EX/PX`, a deadline past the end of time is refused
/// (`bad`), whether or not it is used.
#[inline]
pub fn deadline(
    ctx: Ctx,
    opts: ExpiryArgs,
    bad: CommandError,
) -> Result<Option<i64>, CommandError> {
    match opts.expiry {
        Some(Expiry::In(ms)) => Ok(Some(ctx.precise_now_ms().checked_add(ms).ok_or(bad)?)),
        Some(Expiry::At(at)) => Ok(Some(at)),
        Some(Expiry::Persist) | None => Ok(None),
    }
}

/// Applies the options to `key`, which a write has just changed. `had_ttl`: the key had a TTL
/// before the write (false for a key the write made). A deadline is set on every write
/// (`INCREX`'s rule) or, with `ENX`, only on a key that had none; `PERSIST` removes a TTL.
#[inline]
pub fn apply(
    ctx: Ctx,
    key: &Key,
    opts: ExpiryArgs,
    deadline: Option<i64>,
    had_ttl: bool,
) -> TtlChange {
    match (opts.expiry, deadline) {
        (Some(Expiry::Persist), _) if had_ttl && key.persist() => TtlChange::Persisted,
        (Some(Expiry::In(_) | Expiry::At(_)), Some(at)) if !(opts.only_if_none && had_ttl) => {
            set_or_delete(ctx, key, at)
        }
        _ => TtlChange::Kept,
    }
}

/// Gives the key an expiry at `at`, or deletes it when that time has already passed.
pub fn set_or_delete(ctx: Ctx, key: &Key, at: i64) -> TtlChange {
    if at <= ctx.precise_now_ms() {
        if key.delete() {
            return TtlChange::Deleted;
        }
    } else if key.set_abs_expire(at) {
        return TtlChange::Set(at);
    }
    TtlChange::Kept
}

/// Replicates a TTL change after the write's effect, and sends its event. Call it once the key
/// is closed.
#[inline]
pub fn publish(ctx: Ctx, key_name: RawString, change: TtlChange) -> Result<(), CommandError> {
    match change {
        TtlChange::Kept => Ok(()), // the common case, decided without a call
        _ => publish_change(ctx, key_name, change),
    }
}

#[inline(never)]
fn publish_change(ctx: Ctx, key_name: RawString, change: TtlChange) -> Result<(), CommandError> {
    let replicated = match change {
        TtlChange::Kept => return Ok(()),
        TtlChange::Set(at) => {
            let at = at.to_string();
            ctx.replicate(c"PEXPIREAT", key_name, &[at.as_bytes()])
        }
        TtlChange::Persisted => ctx.replicate(c"PERSIST", key_name, &[]),
        TtlChange::Deleted => ctx.replicate(c"DEL", key_name, &[]),
    };
    if !replicated {
        return Err(CommandError::fixed("ERR could not replicate the write"));
    }
    match change {
        TtlChange::Persisted => ctx.persisted(key_name),
        TtlChange::Deleted => ctx.deleted(key_name),
        _ => ctx.expire_set(key_name),
    }
    Ok(())
}
