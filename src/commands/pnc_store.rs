//! The PN-counter's key access and replication helpers, shared by its commands (`pnc.rs`),
//! the bounded counter's (`pnc_bound.rs`) and delta sync (`pnc_delta.rs`), which each import
//! them, so that none imports another for them.

use std::ffi::CStr;

use crate::ffi::{Args, CommandError, Ctx, Key, KeyContent, RawString, WRONG_TYPE};
use crate::persist::pnc_type::{borrow, from_raw, into_raw, pnc_type};
use crate::pncounter::{Home, PnCounter};

/// The internal command that carries the effect of PNC.ADD and PNC.CLEAR.
pub(super) const APPLY_COMMAND: &CStr = c"PNC.APPLY";

pub(super) fn check_arity(args: &Args, n: usize, name: &str) -> Result<(), CommandError> {
    if args.len() == n {
        Ok(())
    } else {
        Err(crate::commands::wrong_arity(name))
    }
}

/// Runs `f` on the counter at `key` (None when missing), or WRONGTYPE.
pub(super) fn read<R>(
    ctx: Ctx,
    key: RawString,
    f: impl FnOnce(Option<&PnCounter>) -> R,
) -> Result<R, CommandError> {
    let k = Key::open(ctx, key, false);
    match k.content(pnc_type()) {
        KeyContent::Empty => Ok(f(None)),
        // SAFETY: the key is open and holds a live counter for the duration of this borrow.
        KeyContent::Mine(raw) => Ok(f(Some(unsafe { borrow(raw) }))),
        KeyContent::Other => Err(WRONG_TYPE),
    }
}

/// What a write did: its reply value and whether the keyspace changed.
pub(super) struct Outcome<R> {
    pub(super) result: R,
    pub(super) changed: bool,
}

/// Runs `f` on the counter at `key`, or on a new empty one when the key is missing (stored only
/// when `f` reports a change). `f` must change nothing when it fails.
pub(super) fn write<R>(
    ctx: Ctx,
    key: RawString,
    f: impl FnOnce(&mut PnCounter, bool) -> Result<Outcome<R>, CommandError>,
) -> Result<Outcome<R>, CommandError> {
    let k = Key::open(ctx, key, true);
    match k.content(pnc_type()) {
        KeyContent::Empty => {
            let mut counter = PnCounter::new();
            let outcome = f(&mut counter, false)?;
            if outcome.changed {
                let raw = into_raw(counter);
                if !k.set_value(pnc_type(), raw) {
                    // SAFETY: the keyspace refused the value; we still own it.
                    drop(unsafe { from_raw(raw) });
                    return Err(CommandError::fixed("ERR could not store the PN-counter"));
                }
            }
            Ok(outcome)
        }
        KeyContent::Mine(raw) => {
            // SAFETY: the key is open for writing and holds a live counter we access alone.
            let counter = unsafe { &mut *raw.cast::<PnCounter>() };
            f(counter, true)
        }
        KeyContent::Other => Err(WRONG_TYPE),
    }
}

/// How PNC.ADD and PNC.CLEAR run: as a local write to this deployment's own slot, or as the
/// replay of a write its master (or the AOF) already decided.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Local,
    /// Sent by our master or replayed from the AOF.
    Replayed,
}

/// Where a local write runs. A replica has no slot of its own (its master's writes arrive as
/// PNC.APPLY or as the replayed command): only writable replicas ever get as far as refusing.
pub(super) fn origin(ctx: Ctx, name: &str) -> Result<Origin, CommandError> {
    if crate::ffi::known_primary() {
        return Ok(Origin::Local);
    }
    let flags = ctx.flags();
    if crate::ffi::replayed(flags) {
        Ok(Origin::Replayed)
    } else if flags & redis_module::raw::REDISMODULE_CTX_FLAGS_SLAVE != 0 {
        Err(CommandError(
            format!("ERR {name} must run on a primary: a replica has no replica id of its own")
                .into(),
        ))
    } else {
        Ok(Origin::Local)
    }
}

/// Formats an integer in decimal into `buf` (no heap allocation on the hot path).
fn decimal(v: i128, buf: &mut [u8; 40]) -> &[u8] {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    // 40 bytes hold any i128, so this write cannot fail.
    let _ = write!(cursor, "{v}");
    let len = usize::try_from(cursor.position()).unwrap_or(0);
    &buf[..len]
}

/// Replicates a local write to this deployment's slot as its deterministic effect.
pub(super) fn replicate_apply(ctx: Ctx, key: RawString, home: &Home, delta: i64) {
    replicate_apply_with(ctx, key, home, delta, &[]);
}

/// `PNC.APPLY key id generation delta` followed by `extra` (a `TOKEN` record).
pub(super) fn replicate_apply_with(
    ctx: Ctx,
    key: RawString,
    home: &Home,
    delta: i64,
    extra: &[&[u8]],
) {
    let (mut gen_buf, mut delta_buf) = ([0u8; 40], [0u8; 40]);
    let gen = decimal(i128::from(home.gen), &mut gen_buf);
    let delta = decimal(i128::from(delta), &mut delta_buf);
    let head: [&[u8]; 3] = [home.id.as_bytes(), gen, delta];
    let sent = if extra.is_empty() {
        ctx.replicate(APPLY_COMMAND, key, &head)
    } else {
        ctx.replicate(APPLY_COMMAND, key, &[&head[..], extra].concat())
    };
    if !sent {
        ctx.log_warning("ctr: the server refused to replicate PNC.APPLY");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_formats_the_extremes() {
        let mut buf = [0u8; 40];
        assert_eq!(super::decimal(0, &mut buf), b"0");
        assert_eq!(
            super::decimal(i128::from(i64::MIN), &mut buf),
            b"-9223372036854775808"
        );
        assert_eq!(
            super::decimal(i128::from(u64::MAX), &mut buf),
            b"18446744073709551615"
        );
        assert_eq!(super::decimal(i128::MIN, &mut buf).len(), 40);
    }
}
