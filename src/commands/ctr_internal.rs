//! The internal commands that carry state between servers: CTR.APPLY (replicated effects),
//! CTR.STEP (replicated transfer and fold steps) and CTR.SETSTATE (AOF rewrite). All are
//! deterministic and validate everything first.

use crate::counter::spread::{bounds_by_name, parse_holder_name};
use crate::ffi::{Args, CommandError, CommandResult, Ctx, Key, RawString, Reply};
use crate::persist::ctr_format;
use crate::persist::effect::{self, CounterOp};
use crate::persist::step_msg;
use crate::runtime::ctr_store::{update_counter, update_counter_even_stray, with_counter};
use crate::runtime::spread_gather::forget_cached;

/// Refuses an internal command unless the master decided it: it runs from the master's
/// replication stream, an atomic slot import (the slots' source decided) and while loading
/// (the AOF), or for anyone when the module was loaded
/// with `expose-internal-commands yes`. Checked by the module itself because Redis 7.0 and
/// Valkey have no `internal` command flag, and an ACL rule an operator forgot would let any
/// client (a script too) write any state into any key.
///
/// The flags are read afresh here, never through the shortcut that skips them on a known
/// primary (`Ctx::is_replaying`): an atomic slot import runs these commands on a primary, and a
/// refusal there fails the whole migration (measured on Valkey 9.1.2).
pub fn refuse_client_call(ctx: Ctx, command: &str) -> Result<(), CommandError> {
    if crate::config::EXPOSE_INTERNAL.load(std::sync::atomic::Ordering::Relaxed)
        || crate::ffi::replayed(ctx.flags())
    {
        return Ok(());
    }
    Err(CommandError(
        format!(
            "ERR {command} is an internal command: only the master's replication stream and \
             loading run it (load the module with expose-internal-commands yes to call it)"
        )
        .into(),
    ))
}

/// CTR.APPLY key effect
pub fn apply(ctx: Ctx, args: &Args) -> CommandResult {
    refuse_client_call(ctx, "CTR.APPLY")?;
    if args.len() != 3 {
        return Err(super::wrong_arity("ctr.apply"));
    }
    let effect = effect::decode(args.bytes(2))
        .map_err(|e| CommandError(format!("ERR invalid CTR effect: {e}").into()))?;
    let key_name = args.raw(1);
    if let CounterOp::Sweep { now } = effect.op {
        return sweep(ctx, key_name, now);
    }
    let key = Key::open(ctx, key_name, true);
    let mut created = false;
    // Decided as on the master, which applied the same rule to the same state.
    let by_name = bounds_by_name(args.bytes(1));
    let named_holder = parse_holder_name(args.bytes(1)).is_some();
    let outcome = update_counter(&key, |c, before| {
        created = before.created;
        Ok(match effect.op {
            CounterOp::Add(op) => c.apply_add_under(&op, by_name)?,
            CounterOp::Decr(op) => c.apply_purchase(&op, named_holder)?,
            CounterOp::Clear(op) => Some(c.apply_clear(&op)?),
            CounterOp::ClearTotal(op) => Some(c.apply_clear_total(&op)?),
            CounterOp::Reconcile(op) => Some(c.apply_reconcile_under(&op, by_name)?.value),
            CounterOp::Start(op) => Some(c.apply_start(&op).0),
            CounterOp::Sweep { .. } => None,
            CounterOp::Increx(op) => Some(c.apply_increx(&op)?.0),
            CounterOp::Refund(op) => Some(c.apply_refund(&op)?),
            CounterOp::Throttle(op) => {
                c.apply_throttle(&op);
                None
            }
            CounterOp::Window(op) => Some(i64::from(c.apply_window(&op)?)),
        })
    })?;
    // A throttle moves its key's deadline on every call, as its master did.
    let sets_deadline = created || matches!(effect.op, CounterOp::Throttle(_));
    if let (Some(at), true) = (effect.expire_at, sets_deadline) {
        key.set_abs_expire(at);
    }
    drop(key); // closed before the keyspace event fires
    if matches!(effect.op, CounterOp::ClearTotal(_)) {
        // A replica reads what its master reads: the master forgot its cached total with the
        // clear, and so does every copy that replays it.
        forget_cached(args.bytes(1));
    }
    ctx.replicate_verbatim();
    let event = match effect.op {
        CounterOp::Add(_) => c"ctr.add",
        CounterOp::Decr(_) => c"ctr.decrfloor",
        CounterOp::Clear(_) | CounterOp::ClearTotal(_) => c"ctr.clear",
        CounterOp::Reconcile(_) | CounterOp::Start(_) => c"ctr.reconcile",
        CounterOp::Sweep { .. } => c"ctr.sweep",
        CounterOp::Increx(_) => c"ctr.increx",
        CounterOp::Refund(_) => c"ctr.refund",
        CounterOp::Throttle(_) => c"ctr.throttle",
        CounterOp::Window(_) => c"ctr.window",
    };
    ctx.key_changed(event, key_name);
    Ok(outcome.map_or(Reply::Null, Reply::Integer))
}

/// The idle sweep's effect: drops what expired at `now`. A sweep is housekeeping, not a write
/// a user made: it creates nothing, and sends no keyspace event, as on the master.
fn sweep(ctx: Ctx, key_name: RawString, now: i64) -> CommandResult {
    if with_counter(ctx, key_name, |c| c.is_none())? {
        return Ok(Reply::Integer(0));
    }
    let key = Key::open(ctx, key_name, true);
    let dropped = update_counter(&key, |c, _| Ok(c.apply_sweep(now)))?;
    ctx.replicate_verbatim();
    Ok(Reply::Integer(dropped as i64))
}

/// CTR.STEP key step: replays a transfer or fold step its master took (`counter::step`)
/// through the function the master ran; a step that does not decode, or does not fit the
/// key's state, is refused and changes nothing.
pub fn step(ctx: Ctx, args: &Args) -> CommandResult {
    refuse_client_call(ctx, "CTR.STEP")?;
    if args.len() != 3 {
        return Err(super::wrong_arity("ctr.step"));
    }
    let step = step_msg::decode(args.bytes(1), args.bytes(2)).map_err(|e| {
        CommandError(format!("ERR invalid CTR effect (a transfer step): {e}").into())
    })?;
    let key_name = args.raw(1);
    let key = Key::open(ctx, key_name, true);
    update_counter(&key, |c, _| {
        crate::runtime::spread_transfer::apply_step(ctx, key_name, c, &step)?;
        // As for a state set (the AOF, a replica's stream): a renamed home is entered.
        let db = crate::runtime::spread_transfer::selected_db(ctx);
        crate::runtime::home_names::note(db, args.bytes(1), c, false);
        Ok(())
    })?;
    drop(key);
    forget_cached(args.bytes(1)); // a fold or a move changed what a read of this home sums
    ctx.replicate_verbatim();
    ctx.key_changed(c"ctr.transfer", key_name);
    Ok(Reply::Ok)
}

/// CTR.SETSTATE key payload: replaces the counter with a decoded `ctr_format` payload.
pub fn setstate(ctx: Ctx, args: &Args) -> CommandResult {
    refuse_client_call(ctx, "CTR.SETSTATE")?;
    if args.len() != 3 {
        return Err(super::wrong_arity("ctr.setstate"));
    }
    let counter = ctr_format::decode(args.bytes(2))
        .map_err(|e| CommandError(format!("ERR invalid CTR state: {e}").into()))?;
    let key = Key::open(ctx, args.raw(1), true);
    // A replaced value keeps the key's TTL as it was (the AOF rewrite sends its own PEXPIREAT):
    // none of the TTL a write gives a key that only remembers refusals.
    let ttl = key.abs_expire();
    let db = crate::runtime::spread_transfer::selected_db(ctx);
    // The whole state, as the master decided it: a stray's too (marked or unmarked there).
    update_counter_even_stray(&key, |c, _| {
        // A replica or a restarted server resumes the transfers this state has under way.
        crate::runtime::spread_transfer::track(db, args.bytes(1), &counter);
        // The AOF and a replica's stream enter a renamed home as a load does: the first one.
        crate::runtime::home_names::note(db, args.bytes(1), &counter, false);
        *c = counter;
        Ok(())
    })?;
    match ttl {
        Some(at) => key.set_abs_expire(at),
        None => key.persist(),
    };
    drop(key);
    forget_cached(args.bytes(1)); // a spread, a growth or a rewrite replaced the state
    ctx.replicate_verbatim();
    ctx.key_changed(c"ctr.setstate", args.raw(1));
    Ok(Reply::Ok)
}
