//! Bounds as users write them: CTR.CEIL (the mirror of CTR.FLOOR), CTR.INCREX (Redis 8.8's
//! INCREX on a counter, with tokens) and CTR.REFUND (a tokened grant given back once).

use super::ctr_args::parse_floor;
use super::ctr_store::{is_missing, open_for_write, update_counter};
use crate::counter::spread::parse_holder_name;
use crate::counter::{Counter, CounterError};
use crate::ffi::{Args, CommandError, CommandResult, Ctx, Reply};

/// Ceilings (and the commands built on one key's bounds) are not for spread counters yet: a
/// key named as a holder, or a home that lists holders or still folds some back.
fn refuse_spread(key: &[u8], c: &Counter) -> Result<(), CommandError> {
    if parse_holder_name(key).is_some() || c.spread().is_some() || !c.leaving().is_empty() {
        return Err(CounterError::CeilingOnSpread.into());
    }
    Ok(())
}

/// CTR.CEIL key ceiling|NONE: deterministic given the state, so it replicates verbatim.
pub fn ceil(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(super::wrong_arity("ctr.ceil"));
    }
    let key_name = args.raw(1);
    let key = open_for_write(ctx, key_name)?;
    let ceiling = parse_floor(args.bytes(2))?;
    if parse_holder_name(args.bytes(1)).is_some() {
        return Err(CounterError::CeilingOnSpread.into());
    }
    if ceiling.is_none() && is_missing(&key) {
        return Ok(Reply::Ok); // no counter, no ceiling to remove
    }
    let changed = update_counter(&key, |c, before| {
        refuse_spread(args.bytes(1), c)?;
        Ok(c.set_ceiling(ceiling)? || before.created)
    })?;
    drop(key);
    if changed {
        ctx.replicate_verbatim();
        ctx.key_changed(c"ctr.ceil", key_name);
    }
    Ok(Reply::Ok)
}
