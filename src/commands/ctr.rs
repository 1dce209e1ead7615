//! CTR.ADD, CTR.CLEAR, CTR.GET, CTR.MGET, CTR.INFO: parse, run the counter core, reply,
//! replicate, notify. A clear of a spread home is `spread_clear`'s.
//!
//! Replication: the bare `CTR.ADD key delta` on a counter whose outcome does not depend on the
//! clock (no tokens, ledger or buckets), without a resize, is deterministic (the shard is a
//! function of the state) and replicates as sent. Every other write (a token, a TTL, buckets, a
//! promotion) replicates as one `CTR.APPLY key <effect>` carrying the master's time and
//! decisions.

use super::ctr_args::{parse_add, parse_clear, AddArgs, Expiry, ExpiryArgs, BAD_EXPIRE};
use super::ctr_floor::{budget_wait, wait_for_budget};
use super::parse::integer;
use super::spread_holders::refuse_look_alike;
use super::ttl::{self, TtlChange};
use crate::config::Settings;
use crate::counter::budget_kind::BudgetKind;
use crate::counter::spread::{bounds_by_name, NameBounds};
use crate::counter::{AddOp, ClearOp, Counter, CounterCell, CounterError, CounterRef, WriteKind};
use crate::ffi::{Args, CommandError, CommandResult, Ctx, Key, KeyContent, Reply, WRONG_TYPE};
use crate::metrics;
use crate::persist::effect::{CounterOp, Effect};
use crate::runtime::ctr_store::store_inline;
use crate::runtime::ctr_store::{
    created_with_ttl, finish_clear, inline_advice, is_missing, open_for_retry_as, open_for_write,
    refuse_sealed_unless_retry, with_counter, Before, Write, FOLD_IN_FLIGHT,
};
use crate::runtime::decide;
use crate::runtime::floor_moves::record_refusal;
use crate::runtime::holder_check::Checked;

/// A new token's add at a holder being folded back, past the wait for its fold to land.
const ADD_AWAITS_FOLD: CommandError = CommandError::fixed(
    "TRYAGAIN add awaits a fold: this holder is being folded back into its home; retry the add with the same token",
);

enum Added {
    /// Applied, or refused by the floor with the refusal remembered under its token.
    Recorded(AddOp, Before, Option<i64>),
    /// A negative add without a token that would cross the floor: nothing changed.
    Refused,
    /// A retry: what the first attempt replies now.
    Replayed(Option<i64>),
}

/// CTR.ADD key delta [TOKEN token] [AT ms] [EX seconds | PX milliseconds]
pub fn add(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 3 {
        return Err(super::wrong_arity("ctr.add"));
    }
    // A sealed holder is refused below, unless this is a retry it remembers (the fast path
    // takes no token and leaves a sealed counter, which holds transfers, to the general one).
    let (key, content) = open_for_retry_as(ctx, args.raw(1))?;
    if let Checked::Blocked = refuse_look_alike(ctx, &key, args.bytes(1), add)? {
        return Ok(Reply::Blocked);
    }
    let mut advised_shards = None;
    // A holder of a bounded spread is held at 0 until it has a bound of its own: the general
    // path decides its adds (the fast path knows no bound).
    let by_name = bounds_by_name(args.bytes(1));
    // With ctr.track-history yes a bare add may start a history: the general path decides.
    if by_name.is_none()
        && !crate::config::TRACK_HISTORY.load(std::sync::atomic::Ordering::Relaxed)
        && (args.len() == 3 || expiry_changes_nothing(ctx, &key, content, args)?)
    {
        match add_fast(ctx, &key, content, args)? {
            FastAdd::Done(value) => {
                drop(key);
                ctx.replicate_verbatim();
                ctx.key_changed(c"ctr.add", args.raw(1));
                metrics::ADDS.incr_from_command();
                super::ctr_spread::after_add(ctx, args.raw(1));
                return Ok(Reply::Integer(value));
            }
            FastAdd::Resize(shards) => advised_shards = Some(shards),
            FastAdd::General => {}
        }
    }
    let parsed = if args.len() == 3 {
        AddArgs {
            delta: integer(args.bytes(2))?,
            ..AddArgs::default()
        }
    } else {
        args.with_words(2, parse_add)?
    };
    let deadline = ttl::deadline(ctx, parsed.expiry, BAD_EXPIRE)?;
    let had_ttl = key.abs_expire().is_some();
    let mut w = Write::new(ctx, args, parsed.token, parsed.at)?;
    let sealed = refuse_sealed_unless_retry(&w, &key, WriteKind::Add(parsed.delta));
    if sealed == Err(FOLD_IN_FLIGHT) {
        drop(key);
        return super::ctr_floor::wait_for_fold(ctx, args, add, || ADD_AWAITS_FOLD);
    }
    if let Some(first) = sealed? {
        metrics::DUPLICATES_IGNORED.incr();
        return Ok(first.map_or(Reply::Null, Reply::Integer));
    }
    if w.token.is_none() && by_name.refuses(0, parsed.delta) && is_missing(&key) {
        if let Some((awaits, wanted)) =
            room_wait(ctx, (args.bytes(1), by_name), None, parsed.delta, w.now)
        {
            drop(key);
            return wait_for_budget(ctx, args, wanted, (awaits, w.now), add);
        }
        // A missing holder of a bounded spread is 0 held at 0: refused, nothing to remember
        // (and no key made), as CTR.DECRFLOOR refuses on a missing key.
        metrics::ADDS_REFUSED_BY_FLOOR.incr();
        return Ok(Reply::Null);
    }
    w.advised_shards = advised_shards;
    let mut awaits = None;
    let mut demand = None;
    let added = w.update(&key, |c, before| {
        if let Some(replay) = w.retry_of(c, WriteKind::Add(parsed.delta))? {
            c.note_duplicate();
            return Ok(Added::Replayed(replay));
        }
        // Before anything changes: a missing key is not made, a token not recorded.
        awaits = room_wait(ctx, (args.bytes(1), by_name), Some(c), parsed.delta, w.now);
        if awaits.is_some() {
            return Err(ROOM_NOT_YET);
        }
        let shards = w.shards(c, before);
        let op = AddOp {
            now: w.now,
            event: w.event,
            delta: parsed.delta,
            shard: c.next_shard(shards),
            shards,
            token: w.token,
        };
        let result = c.apply_add_under(&op, by_name)?;
        // A refusal by a member of a spread that moves its kind of budget is demand for it.
        if result.is_none() {
            demand = BudgetKind::of_add(op.delta)
                .filter(|(kind, _)| kind.refusal_is_demand(args.bytes(1), Some(c)))
                .map(|(_, amount)| amount);
        }
        if result.is_none() && op.token.is_none() {
            return Ok(Added::Refused);
        }
        Ok(Added::Recorded(op, before, result))
    });
    if let Some((awaits, wanted)) = awaits {
        drop(key);
        return wait_for_budget(ctx, args, wanted, (awaits, w.now), add);
    }
    let refused = |ctx: Ctx| {
        metrics::ADDS_REFUSED_BY_FLOOR.incr();
        if let Some(amount) = demand {
            record_refusal(ctx, args.bytes(1), amount, None);
        }
        Ok(Reply::Null)
    };
    let (op, before, result) = match added? {
        Added::Replayed(replay) => {
            metrics::DUPLICATES_IGNORED.incr();
            return Ok(replay.map_or(Reply::Null, Reply::Integer));
        }
        Added::Refused => return refused(ctx),
        Added::Recorded(op, before, result) => (op, before, result),
    };
    // A key the write makes gets its deadline with the write's effect; an existing one only
    // through ENX or PERSIST, when the add was applied.
    let on_create = deadline.filter(|_| before.created);
    let mut ttl_change = TtlChange::Kept;
    let expire_at = match on_create.map(|at| ttl::set_or_delete(ctx, &key, at)) {
        Some(TtlChange::Set(at)) => Some(at),
        Some(change) => {
            ttl_change = change; // a time already past: the key is gone
            None
        }
        None => None,
    };
    if !before.created && result.is_some() {
        let on_existing = ExpiryArgs {
            expiry: parsed
                .expiry
                .expiry
                .filter(|e| *e == Expiry::Persist || parsed.expiry.only_if_none),
            ..parsed.expiry
        };
        ttl_change = ttl::apply(ctx, &key, on_existing, deadline, had_ttl);
    }
    let expires = created_with_ttl(&key, before);
    drop(key);
    let effect = Effect {
        op: CounterOp::Add(op),
        expire_at,
    };
    w.replicate(args.len() == 3, before, &effect, c"ctr.add")?;
    if expires {
        ctx.expire_set(w.key_name);
    }
    ttl::publish(ctx, w.key_name, ttl_change)?;
    match result {
        Some(value) => {
            metrics::ADDS.incr_from_command();
            super::ctr_spread::after_add(ctx, w.key_name);
            Ok(Reply::Integer(value))
        }
        None => refused(ctx),
    }
}

/// The closure's way out of a write when the add waits for budget (never replied).
const ROOM_NOT_YET: CommandError = CommandError::fixed("TRYAGAIN budget in flight");

/// What an add of `delta` at a member of a bounded spread (the counter `c`, None when missing)
/// waits for before it is decided, as a purchase does, and the budget it waits for
/// ([`BudgetKind::of_add`]: room below the ceiling for a positive add, units above the floor
/// for a negative one): that budget on its way to it, or to gather to it. None for every other
/// add.
fn room_wait(
    ctx: Ctx,
    named: (&[u8], NameBounds),
    c: Option<&Counter>,
    delta: i64,
    now: i64,
) -> Option<(super::ctr_floor::Awaits, (BudgetKind, i64))> {
    let (kind, amount) = BudgetKind::of_add(delta)?;
    let awaits = budget_wait(ctx, named, c, kind, amount, now)?;
    Some((awaits, (kind, amount)))
}

/// True for `CTR.ADD key delta EX|PX|EXAT|PXAT time` on a counter that exists, and for the
/// same with `ENX` on one that has a TTL: the expiry is for the add that creates the key (or,
/// with `ENX`, gives a TTL to one without), so this add is the bare one (a fixed window's every
/// add after its first), and takes its fast path. Its options are checked as the general path
/// checks them (the same errors for a bad time), and it replicates as sent: replayed on the
/// key as it is there too (it exists, with its TTL), it changes no TTL either.
fn expiry_changes_nothing(
    ctx: Ctx,
    key: &Key,
    content: KeyContent,
    args: &Args,
) -> Result<bool, CommandError> {
    if !matches!(args.len(), 5 | 6) || !matches!(content, KeyContent::Mine(_)) {
        return Ok(false);
    }
    let parsed = args.with_words(2, parse_add)?;
    let timed = matches!(parsed.expiry.expiry, Some(Expiry::In(_) | Expiry::At(_)));
    ttl::deadline(ctx, parsed.expiry, BAD_EXPIRE)?;
    let kept = !parsed.expiry.only_if_none || key.abs_expire().is_some();
    Ok(timed && kept && parsed.token.is_none() && parsed.at.is_none())
}

/// What the bare add's fast path did.
enum FastAdd {
    /// Added and stored, with no change of shape (no resize, no move between inline and boxed).
    /// Replication (as sent: the add is deterministic), the event and the count are the
    /// caller's, once the key is closed.
    Done(i64),
    /// The write rate asks for this shard count: the general path resizes (nothing changed).
    Resize(usize),
    /// Not a counter the fast path handles, or the result needs another representation: the
    /// general path runs (nothing changed).
    General,
}

/// `CTR.ADD key delta` on a counter that is nothing but its value: a cold one (missing, or
/// inline), or a hot one (sub-shards, no floor, tokens, ledger or buckets). What the general
/// path does, minus its generality: the rate counts the write, then the add, in place (on the
/// tagged value of a cold counter, or on the next shard of a hot one); any change of shape
/// goes to the general path.
fn add_fast(
    ctx: Ctx,
    key: &Key,
    content: KeyContent,
    args: &Args,
) -> Result<FastAdd, CommandError> {
    let stored = match content {
        KeyContent::Empty => None,
        KeyContent::Mine(raw) => match CounterCell::inline_value(raw) {
            Some(value) => Some((raw, value)),
            // SAFETY: the key is open for writing and holds a live counter we access alone.
            None => match unsafe { CounterCell::boxed_mut(raw) } {
                Some(c) => return add_to_shards(ctx, c, args),
                None => return Ok(FastAdd::General), // a limiter's key: the general path
            },
        },
        KeyContent::Other => return Err(WRONG_TYPE),
    };
    let delta = integer(args.bytes(2))?;
    let s = Settings::current();
    let shards = inline_advice(
        args.bytes(1),
        ctx.now_ms(),
        s.promote_threshold,
        s.max_shards,
    );
    if shards != 1 {
        return Ok(FastAdd::Resize(shards));
    }
    let value = stored
        .map_or(0, |(_, value)| value)
        .checked_add(delta)
        .ok_or(CommandError::from(CounterError::Overflow))?;
    let Some(cell) = CounterCell::inline(value) else {
        return Ok(FastAdd::General);
    };
    store_inline(key, stored.map(|(raw, _)| raw), cell)?;
    Ok(FastAdd::Done(value))
}

/// The fast path on a boxed counter: only one that holds sub-shards and nothing else.
fn add_to_shards(ctx: Ctx, c: &mut Counter, args: &Args) -> Result<FastAdd, CommandError> {
    if !c.holds_only_shards() {
        return Ok(FastAdd::General);
    }
    let delta = integer(args.bytes(2))?;
    let s = Settings::current();
    let now = ctx.now_ms();
    let shards = c.shard_count();
    let advised = c.advise_shards(now, s.promote_threshold, s.max_shards);
    // A replayed command decides nothing: it keeps the count it finds.
    if advised != shards && !ctx.is_replaying() {
        return Ok(FastAdd::Resize(advised));
    }
    Ok(FastAdd::Done(c.add_to_shard(c.next_shard(shards), delta)?))
}

/// CTR.CLEAR key [TOKEN token]
pub fn clear(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 2 {
        return Err(super::wrong_arity("ctr.clear"));
    }
    super::ctr_spread::refuse_holder(ctx, args.bytes(1))?;
    let key = open_for_write(ctx, args.raw(1))?;
    let parsed = args.with_words(2, parse_clear)?;
    let w = Write::new(ctx, args, parsed.token, None)?;
    if super::spread_clear::is_spread_home(ctx, &key) {
        // The total over every holder becomes 0, not the home's own value alone.
        return super::spread_clear::clear(ctx, &w, key);
    }
    if w.token.is_none() && is_missing(&key) {
        return Ok(Reply::Integer(0)); // nothing to clear, nothing to remember
    }
    let op = ClearOp {
        now: w.now,
        token: w.token,
    };
    let outcome = w.update(&key, |c, before| {
        if let Some(replay) = w.retry_of(c, WriteKind::Clear)? {
            c.note_duplicate();
            return Ok(Err(replay));
        }
        Ok(Ok((c.apply_clear(&op)?, before)))
    })?;
    let expires = matches!(outcome, Ok((_, before)) if created_with_ttl(&key, before));
    drop(key);
    let applied =
        outcome.map(|(value_before, before)| (CounterOp::Clear(op), before, value_before));
    finish_clear(&w, applied, expires)
}

/// CTR.GET key
pub fn get(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 2 {
        return Err(super::wrong_arity("ctr.get"));
    }
    super::ctr_spread::get(ctx, args.raw(1))
}

/// CTR.MGET key [key ...]
pub fn mget(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 2 {
        return Err(super::wrong_arity("ctr.mget"));
    }
    super::ctr_spread::mget(ctx, args)
}

fn clamp_u64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn integers(values: &[i64]) -> Reply {
    Reply::Array(values.iter().copied().map(Reply::Integer).collect())
}

/// CTR.INFO key: a map describing the counter (nil when missing).
pub fn info(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 2 {
        return Err(super::wrong_arity("ctr.info"));
    }
    let key_bytes = args.bytes(1);
    let own = with_counter(ctx, args.raw(1), |c| {
        let plain;
        let (counter, rate, encoding) = match c {
            None => return Reply::Null,
            Some(CounterRef::Inline(v)) => {
                plain = Counter::plain(v);
                (&plain, decide::inline_counter_rate(key_bytes), "inline")
            }
            Some(CounterRef::Limiter(tat)) => {
                plain = Counter::bare_limiter(tat);
                (&plain, 0, "limiter")
            }
            Some(CounterRef::Boxed(b)) => (b, b.add_rate(), "boxed"),
        };
        let floor = counter.floor();
        let ceiling = counter.ceiling();
        let history = counter.history();
        let (tokens, ledger) = counter.token_counts();
        let window = counter.window();
        Reply::Map(vec![
            (
                "value",
                Reply::Integer(counter.value_at(crate::ffi::coarse_now_ms())),
            ),
            (
                "floor",
                floor.map_or(Reply::Null, |f| Reply::Integer(f.floor)),
            ),
            ("shards", Reply::Integer(counter.shard_count() as i64)),
            ("shard_values", integers(&counter.shard_values())),
            (
                "budgets",
                floor.map_or(Reply::Null, |f| integers(&f.budgets)),
            ),
            (
                "ceiling",
                ceiling.map_or(Reply::Null, |c| Reply::Integer(c.ceiling)),
            ),
            (
                "ceiling_budgets",
                ceiling.map_or(Reply::Null, |c| integers(&c.budgets)),
            ),
            ("add_rate", Reply::Integer(i64::from(rate))),
            ("tokens", Reply::Integer(tokens as i64)),
            ("ledger", Reply::Integer(ledger as i64)),
            (
                "duplicates_ignored",
                Reply::Integer(counter.duplicates() as i64),
            ),
            (
                "bucket_count",
                Reply::Integer(history.map_or(0, |h| h.buckets.len() as i64)),
            ),
            (
                "last_watermark",
                history
                    .and_then(|h| h.watermark)
                    .map_or(Reply::Null, Reply::Integer),
            ),
            (
                "last_drift",
                history.map_or(Reply::Null, |h| Reply::Integer(h.last_drift)),
            ),
            (
                "total_abs_drift",
                Reply::Integer(history.map_or(0, |h| clamp_u64(h.total_abs_drift))),
            ),
            (
                "reconciles",
                Reply::Integer(history.map_or(0, |h| clamp_u64(h.reconciles))),
            ),
            (
                "window_ms",
                window.map_or(Reply::Null, |w| Reply::Integer(w.width_ms)),
            ),
            (
                "window_buckets",
                window.map_or(Reply::Null, |w| Reply::Integer(w.buckets)),
            ),
            ("encoding", Reply::Bulk(encoding.as_bytes().to_vec())),
        ])
    })?;
    super::ctr_spread::info(ctx, args.raw(1), own)
}
