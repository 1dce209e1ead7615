//! Bounds as users write them: CTR.CEIL (the mirror of CTR.FLOOR), CTR.INCREX (Redis 8.8's
//! INCREX on a counter, with tokens) and CTR.REFUND (a tokened grant given back once).

use super::ctr_args::{parse_floor, parse_increx, parse_token, IncrexArgs, BAD_EXPIRE_INCREX};
use super::parse::SYNTAX_ERROR;
use super::ttl::{self, TtlChange};
use crate::config::Settings;
use crate::counter::bounds::{bounded_result, home_refund_token};
use crate::counter::spread::parse_holder_name;
use crate::counter::{
    AddOp, Counter, CounterCell, CounterError, CounterRef, IncrexOp, RefundOp, RefundPlan,
    WriteKind,
};
use crate::ffi::{Args, CommandError, CommandResult, Ctx, Key, KeyContent, Reply};
use crate::metrics;
use crate::persist::effect::{CounterOp, Effect};
use crate::runtime::ctr_store::store_inline;
use crate::runtime::ctr_store::{
    created_with_ttl, inline_advice, is_missing, open_for_retry_as, open_for_write,
    open_for_write_as, update_counter, Before, Write,
};

/// Refuses with `refusal` a key named as a holder, or a home that lists holders or still folds
/// some back: a spread counter's ceiling is set before it spreads (its members hold shares of
/// it), and `CTR.INCREX`'s bounds are one key's.
fn refuse_spread(key: &[u8], c: &Counter, refusal: CounterError) -> Result<(), CommandError> {
    if parse_holder_name(key).is_some() || c.spread().is_some() || !c.leaving().is_empty() {
        return Err(refusal.into());
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
        refuse_spread(args.bytes(1), c, CounterError::CeilingOnSpread)?;
        Ok(c.set_ceiling(ceiling)? || before.created)
    })?;
    drop(key);
    if changed {
        ctx.replicate_verbatim();
        ctx.key_changed(c"ctr.ceil", key_name);
    }
    Ok(Reply::Ok)
}

/// What a `CTR.INCREX` that reached the counter did.
enum Increxed {
    /// Applied, or skipped with its reply remembered under its token.
    Recorded(IncrexOp, Before, (i64, i64)),
    /// A retry: the first reply.
    Replayed((i64, i64)),
}

fn pair((value, applied): (i64, i64)) -> Reply {
    Reply::Pair(value, applied)
}

/// CTR.INCREX key [BYINT increment] [LBOUND lb] [UBOUND ub] [SATURATE]
/// [EX s | PX ms | EXAT unix-s | PXAT unix-ms | PERSIST] [ENX] [TOKEN token] [AT ms]
pub fn increx(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 2 {
        return Err(super::wrong_arity("ctr.increx"));
    }
    let (key, content) = open_for_write_as(ctx, args.raw(1))?;
    let parsed = args.with_words(2, parse_increx)?;
    if parse_holder_name(args.bytes(1)).is_some() {
        return Err(CounterError::IncrexOnSpread.into());
    }
    let deadline = ttl::deadline(ctx, parsed.expiry, BAD_EXPIRE_INCREX)?;
    if let Some((reply, ttl_change)) = increx_inline(ctx, &key, content, &parsed, deadline, args)? {
        drop(key);
        ctx.replicate_verbatim();
        ctx.key_changed(c"ctr.increx", args.raw(1));
        ttl::publish(ctx, args.raw(1), ttl_change)?;
        metrics::ADDS.incr_from_command();
        return Ok(pair(reply));
    }
    let w = Write::new(ctx, args, parsed.token, parsed.at)?;
    // The target and the value it starts from, as a windowed counter's window stands now.
    let at = w.now.max(w.event);
    let target = |c: &Counter| {
        c.increx_target_at(
            at,
            parsed.increment,
            parsed.lower,
            parsed.upper,
            parsed.saturate,
        )
    };
    if w.token.is_none() {
        // A skip without a token changes nothing: decided on a read, the key left alone (a
        // missing one is not made).
        let skipped_at = |c: &Counter| -> Result<Option<i64>, CommandError> {
            refuse_spread(args.bytes(1), c, CounterError::IncrexOnSpread)?;
            let (target, current) = target(c)?;
            Ok(target.is_none().then_some(current))
        };
        let skipped = match content {
            // SAFETY: the key is open and holds a live counter for the duration of this borrow.
            KeyContent::Mine(raw) => match unsafe { CounterCell::borrow(raw) } {
                CounterRef::Boxed(c) => skipped_at(c)?,
                other => skipped_at(&other.to_counter())?,
            },
            _ => skipped_at(&Counter::default())?,
        };
        if let Some(current) = skipped {
            return Ok(pair((current, 0)));
        }
    }
    let had_ttl = key.abs_expire().is_some();
    // Only a token's retry compares the arguments.
    let print = if w.token.is_some() { parsed.print() } else { 0 };
    let outcome = w.update(&key, |c, before| {
        refuse_spread(args.bytes(1), c, CounterError::IncrexOnSpread)?;
        if let Some(first) = w.retry_of(c, WriteKind::Increx(print))? {
            c.note_duplicate();
            let fp = w.token.map_or(0, |t| t.fp);
            return Ok(Increxed::Replayed(c.increx_reply(fp, first, w.now)));
        }
        let (target, current) = target(c)?;
        let shards = match target {
            Some(_) => w.shards(c, before),
            None => c.shard_count(),
        };
        let delta = target.map_or(Some(0), |t| t.checked_sub(current));
        let op = IncrexOp {
            add: AddOp {
                now: w.now,
                event: w.event,
                delta: delta.ok_or(CounterError::Overflow)?,
                shard: c.next_shard(shards),
                shards,
                token: w.token,
            },
            skipped: target.is_none(),
            print,
        };
        let reply = c.apply_increx(&op)?;
        Ok(Increxed::Recorded(op, before, reply))
    })?;
    let (op, before, reply) = match outcome {
        Increxed::Replayed(first) => {
            metrics::DUPLICATES_IGNORED.incr();
            return Ok(pair(first));
        }
        Increxed::Recorded(op, before, reply) => (op, before, reply),
    };
    // A skip leaves the TTL as it is; an applied write sets it as INCREX does.
    let ttl_change = if op.skipped {
        TtlChange::Kept
    } else {
        ttl::apply(
            ctx,
            &key,
            parsed.expiry,
            deadline,
            had_ttl && !before.created,
        )
    };
    let expires = created_with_ttl(&key, before) && ttl_change == TtlChange::Kept;
    drop(key);
    let effect = Effect {
        op: CounterOp::Increx(op),
        expire_at: None,
    };
    // Without a token, on a counter whose outcome does not depend on the clock, the value is
    // decided by the state alone: replicated as sent, as a bare CTR.ADD is. Its TTL change, the
    // one part a replica's clock would decide otherwise, follows as `PEXPIREAT` (an absolute
    // time, `ttl::publish`), which overrides the TTL the replay set; with `ENX` on a key that
    // has one, nothing changes there or on the replay.
    let deterministic = w.token.is_none();
    w.replicate(deterministic, before, &effect, c"ctr.increx")?;
    if expires {
        ctx.expire_set(w.key_name);
    }
    ttl::publish(ctx, w.key_name, ttl_change)?;
    if !op.skipped {
        metrics::ADDS.incr_from_command();
    }
    Ok(pair(reply))
}

/// What the fast path did: its reply (value, applied) and its key's TTL change.
type InlineIncrex = ((i64, i64), TtlChange);

/// The fast path of `CTR.INCREX` without a token or `AT` on a counter that is nothing but its
/// value (missing, or inline), as `CTR.ADD`'s: the write applied in place and its TTL set, for
/// the caller to replicate as sent (the TTL change after it); None for anything else (a skip,
/// a value past the inline range, a counter turning hot, history kept for every counter),
/// which the general path decides.
fn increx_inline(
    ctx: Ctx,
    key: &Key,
    content: KeyContent,
    parsed: &IncrexArgs,
    deadline: Option<i64>,
    args: &Args,
) -> Result<Option<InlineIncrex>, CommandError> {
    if parsed.token.is_some() || parsed.at.is_some() {
        return Ok(None);
    }
    let stored = match content {
        KeyContent::Empty => None,
        KeyContent::Mine(raw) => match CounterCell::inline_value(raw) {
            Some(value) => Some((raw, value)),
            None => return Ok(None),
        },
        KeyContent::Other => return Ok(None), // the general path says WRONGTYPE
    };
    let s = Settings::current();
    if s.track_history {
        return Ok(None);
    }
    let current = stored.map_or(0, |(_, value)| value);
    // A value alone has no stored bounds and no window: the call's bounds decide.
    let target = bounded_result(
        current,
        parsed.increment,
        parsed.lower.unwrap_or(i64::MIN),
        parsed.upper.unwrap_or(i64::MAX),
        parsed.saturate,
    )?;
    let Some(target) = target else {
        return Ok(None);
    };
    if inline_advice(
        args.bytes(1),
        ctx.now_ms(),
        s.promote_threshold,
        s.max_shards,
    ) != 1
    {
        return Ok(None);
    }
    let Some(cell) = CounterCell::inline(target) else {
        return Ok(None);
    };
    // The TTL is looked up only for an expiry option to act on.
    let had_ttl = stored.is_some() && parsed.expiry.expiry.is_some() && key.abs_expire().is_some();
    store_inline(key, stored.map(|(raw, _)| raw), cell)?;
    let ttl_change = ttl::apply(ctx, key, parsed.expiry, deadline, had_ttl);
    Ok(Some(((target, target - current), ttl_change)))
}

/// What a `CTR.REFUND` found.
enum Refunded {
    /// No grant of this token in the window.
    Nothing,
    /// Refunded before: the units it returned.
    Replayed(i64),
    /// Given back now.
    Given(RefundOp, Before),
}

/// A refund of a grant that a shrink folded back into the home with the holder's units, once
/// the fold landed: the units go back at the home, under a token of the grant's own, so a
/// retried refund replays there. The clients' refund walks run the command it names.
fn refund_folded(c: &Counter, units: i64, fp: u64) -> CommandError {
    let home = c
        .transfers()
        .and_then(|t| t.sealed_into.as_deref())
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    CommandError(
        format!(
            "ERR refund after a fold: the grant's {units} units went home with the fold; give them back there, once: CTR.ADD {home} {units} TOKEN {}",
            home_refund_token(fp)
        )
        .into(),
    )
}

/// A refund of a grant whose holder is being folded back: its units are on their way home.
const REFUND_AWAITS_FOLD: CommandError = CommandError::fixed(
    "TRYAGAIN refund awaits a fold: this holder is being folded back into its home with the grant's units; retry the refund",
);

/// CTR.REFUND key TOKEN token
pub fn refund(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 4 {
        return Err(super::wrong_arity("ctr.refund"));
    }
    // A spread counter's home and holders refund as any counter: a grant is given back to the
    // key that granted it (the clients find it by the purchase's probe walk).
    let (key, _) = open_for_retry_as(ctx, args.raw(1))?;
    if !args.bytes(2).eq_ignore_ascii_case(b"TOKEN") {
        return Err(SYNTAX_ERROR);
    }
    let token = parse_token(args.bytes(3))?;
    if is_missing(&key) {
        return Ok(Reply::Null); // no counter, no grant
    }
    let w = Write::new(ctx, args, Some(token), None)?;
    let fp = w.token.map_or(0, |t| t.fp);
    let updated = w.update(&key, |c, before| {
        Ok(match c.refund_plan(fp, w.now)? {
            RefundPlan::NoGrant => Refunded::Nothing,
            RefundPlan::Folded { landed: false, .. } => return Err(REFUND_AWAITS_FOLD),
            RefundPlan::Folded { units, .. } => return Err(refund_folded(c, units, fp)),
            RefundPlan::Replay(units) => {
                c.note_duplicate();
                Refunded::Replayed(units)
            }
            RefundPlan::Give(units) => {
                let shards = w.shards(c, before);
                let op = RefundOp {
                    now: w.now,
                    fp,
                    units,
                    shard: c.next_shard(shards),
                    shards,
                };
                c.apply_refund(&op)?;
                Refunded::Given(op, before)
            }
        })
    });
    let outcome = match updated {
        // The grant's units are on their way home: the refund waits in the server for the
        // fold to land (then names the add at the home), else answers TRYAGAIN at the bound.
        Err(e) if e == REFUND_AWAITS_FOLD => {
            drop(key);
            return super::ctr_floor::wait_for_fold(ctx, args, refund, || e);
        }
        updated => updated?,
    };
    drop(key);
    match outcome {
        Refunded::Nothing => Ok(Reply::Null),
        Refunded::Replayed(units) => {
            metrics::DUPLICATES_IGNORED.incr();
            Ok(Reply::Integer(units))
        }
        Refunded::Given(op, before) => {
            let effect = Effect {
                op: CounterOp::Refund(op),
                expire_at: None,
            };
            w.finish(&effect, before, c"ctr.refund")?;
            Ok(Reply::Integer(op.units))
        }
    }
}
