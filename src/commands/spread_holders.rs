//! CTR.HOLDERS: a spread counter's holder names, read from the home key alone.
//!
//! Unlike `CTR.INFO` (which gathers every holder's value from the other masters and so waits
//! for the slowest), this reads only what the home's master has recorded: it answers at once
//! while another master is down or frozen. Client libraries refresh their holder lists with it.

use super::ctr_spread::refuse_holder;
use super::ctr_store::with_counter;
use crate::counter::CounterRef;
use crate::ffi::{Args, CommandResult, Ctx, Reply};

/// CTR.HOLDERS key
///
/// The holders' names, the home (the key as given) first, as `CTR.SPREAD` replies them: the
/// current holders only (those a shrink is still folding back are not written any more). A key
/// that is missing or not spread replies `[key]` (its adds go to the key itself); another type
/// is WRONGTYPE; a key named as a holder is refused with the holder error, as `CTR.SPREAD` does
/// (a holder is never a home, and its own holder list would mean nothing).
pub fn holders(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 2 {
        return Err(super::wrong_arity("ctr.holders"));
    }
    let home = args.bytes(1);
    let others = with_counter(ctx, args.raw(1), |c| match c {
        Some(CounterRef::Boxed(b)) => b.spread().map(|s| s.holders.clone()).unwrap_or_default(),
        _ => Vec::new(),
    })?;
    refuse_holder(ctx, home)?;
    let mut names = Vec::with_capacity(others.len() + 1);
    names.push(Reply::Bulk(home.to_vec()));
    names.extend(others.into_iter().map(Reply::Bulk));
    Ok(Reply::Array(names))
}
