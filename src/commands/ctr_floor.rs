//! The strong tier: CTR.FLOOR and CTR.DECRFLOOR.

use super::ctr_args::{parse_decrement, parse_floor};
use super::ctr_store::{update_counter, with_counter, Before, Write};
use crate::counter::DecrOp;
use crate::ffi::{Args, CommandResult, Ctx, Key, Reply};
use crate::metrics;
use crate::persist::effect::{CounterOp, Effect};

/// CTR.FLOOR key floor|NONE: deterministic given the state, so it replicates verbatim.
pub fn floor(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(super::wrong_arity("ctr.floor"));
    }
    let floor = parse_floor(args.bytes(2))?;
    let key_name = args.raw(1);
    if floor.is_none() && with_counter(ctx, key_name, |c| c.is_none())? {
        return Ok(Reply::Ok); // no counter, no floor to remove
    }
    let key = Key::open(ctx, key_name, true);
    update_counter(&key, |c, _| Ok(c.set_floor(floor)?))?;
    ctx.replicate_verbatim();
    ctx.notify(c"ctr.floor", key_name);
    Ok(Reply::Ok)
}

enum Decremented {
    /// Applied (granted, or refused with the refusal recorded in the ledger).
    Recorded(DecrOp, Before, Option<i64>),
    /// Refused with nothing to remember: nothing changed.
    Refused,
    /// A retry: the first outcome (or the current value for a token first used by an add).
    Replayed(Option<i64>),
}

/// CTR.DECRFLOOR key amount [TOKEN token] [AT ms]
pub fn decrfloor(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 3 {
        return Err(super::wrong_arity("ctr.decrfloor"));
    }
    let parsed = args.with_words(2, parse_decrement)?;
    let w = Write::new(ctx, args, parsed.token, parsed.at)?;
    if w.token.is_none() && with_counter(ctx, w.key_name, |c| c.is_none())? {
        // A missing counter is 0 with floor 0: refused, and nothing to remember.
        metrics::DECREMENTS_REFUSED.incr();
        return Ok(Reply::Null);
    }
    let key = Key::open(ctx, w.key_name, true);
    let outcome = w.update(&key, |c, before| {
        if w.is_retry(c) {
            c.note_duplicate();
            let first = w.token.and_then(|t| c.ledger_outcome(t.fp, w.now));
            return Ok(Decremented::Replayed(first.unwrap_or(Some(c.value()))));
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
        let result = c.apply_decrement(&op)?;
        if result.is_none() && op.token.is_none() {
            return Ok(Decremented::Refused);
        }
        Ok(Decremented::Recorded(op, before, result))
    })?;
    let reply = |v: Option<i64>| v.map_or(Reply::Null, Reply::Integer);
    match outcome {
        Decremented::Replayed(first) => {
            metrics::DUPLICATES_IGNORED.incr();
            Ok(reply(first))
        }
        Decremented::Refused => {
            metrics::DECREMENTS_REFUSED.incr();
            Ok(Reply::Null)
        }
        Decremented::Recorded(op, before, result) => {
            let effect = Effect {
                op: CounterOp::Decr(op),
                expire_at: None,
            };
            w.replicate(args.len() == 3, before, &effect, c"ctr.decrfloor")?;
            match result {
                Some(_) => metrics::DECREMENTS_GRANTED.incr(),
                None => metrics::DECREMENTS_REFUSED.incr(),
            }
            Ok(reply(result))
        }
    }
}
