//! CTR.* command handlers: parse, run the counter core, reply, replicate, notify.
//!
//! Replication: a plain add to a cold counter is deterministic and replicates verbatim. Every
//! other write (a token, a TTL, a sharded counter, a promotion) replicates as one
//! `CTR.APPLY key <effect>` carrying the master's time and decisions.

use std::ffi::CStr;

use super::ctr_args::{parse_add, parse_clear, AddArgs};
use super::decide;
use super::parse::integer;
use crate::config::Settings;
use crate::counter::{
    siphash::token_fingerprint, token_expiry, AddOp, ClearOp, Counter, CounterCell, CounterError,
    CounterRef, TokenStamp, TokenTimeError,
};
use crate::ffi::{
    Args, CommandError, CommandResult, Ctx, Key, KeyContent, RawString, Reply, WRONG_TYPE,
};
use crate::metrics;
use crate::persist::ctr_format;
use crate::persist::ctr_type::ctr_type;
use crate::persist::effect::{self, CounterOp, Effect};

const APPLY_COMMAND: &CStr = c"CTR.APPLY";

impl From<CounterError> for CommandError {
    fn from(e: CounterError) -> Self {
        match e {
            CounterError::Overflow => CommandError::fixed("ERR counter overflow"),
            other => CommandError(other.message().into()),
        }
    }
}

impl From<TokenTimeError> for CommandError {
    fn from(e: TokenTimeError) -> Self {
        metrics::TOKENS_REFUSED.incr();
        CommandError::fixed(match e {
            TokenTimeError::TooOld => {
                "ERR token event time is older than the dedup window (ctr.token-window-ms)"
            }
            TokenTimeError::TooFarInFuture => {
                "ERR token event time is too far in the future (ctr.token-max-future-ms)"
            }
        })
    }
}

/// What the key held before a write.
#[derive(Debug, Clone, Copy)]
struct Before {
    created: bool,
    inline: bool,
    shards: usize,
}

/// A view of the counter at `key` (None when missing), or WRONGTYPE.
fn with_counter<R>(
    ctx: Ctx,
    key: RawString,
    f: impl FnOnce(Option<CounterRef>) -> R,
) -> Result<R, CommandError> {
    let k = Key::open(ctx, key, false);
    match k.content(ctr_type()) {
        KeyContent::Empty => Ok(f(None)),
        // SAFETY: the key is open and holds a live counter for the duration of this borrow.
        KeyContent::Mine(raw) => Ok(f(Some(unsafe { CounterCell::borrow(raw) }))),
        KeyContent::Other => Err(WRONG_TYPE),
    }
}

/// Applies `f` to the counter in `key` (opened for writing), creating it at 0 when missing.
/// Nothing is stored when `f` fails. Keeps the representation (inline or boxed) right and the
/// tokens-held gauge exact.
fn update_counter<R>(
    key: &Key,
    f: impl FnOnce(&mut Counter, Before) -> Result<R, CommandError>,
) -> Result<R, CommandError> {
    match key.content(ctr_type()) {
        KeyContent::Empty => {
            let mut counter = Counter::default();
            let before = Before {
                created: true,
                inline: true,
                shards: 1,
            };
            let result = f(&mut counter, before)?;
            let tokens = counter.tokens().len();
            let raw = CounterCell::new(counter).into_raw();
            if !key.set_value(ctr_type(), raw) {
                // SAFETY: the keyspace refused the value; we still own it.
                drop(unsafe { CounterCell::from_raw(raw) });
                return Err(CommandError::fixed("ERR could not store the counter"));
            }
            metrics::TOKENS_HELD.add(tokens as u64);
            Ok(result)
        }
        KeyContent::Mine(raw) => {
            // SAFETY: the key is open for writing and holds a live counter we access alone.
            let view = unsafe { CounterCell::borrow(raw) };
            let tokens_before = view.token_count();
            let before = Before {
                created: false,
                inline: view.is_inline(),
                shards: view.shard_count(),
            };
            // SAFETY: as above.
            let (result, new_cell) = unsafe { CounterCell::update(raw, |c| f(c, before)) };
            let mut tokens_after = None;
            if let Some(cell) = new_cell {
                let new_raw = cell.into_raw();
                match key.replace_value(ctr_type(), new_raw) {
                    Some(old) => {
                        // SAFETY: the keyspace handed the old value back to us.
                        drop(unsafe { CounterCell::from_raw(old) });
                        // SAFETY: new_raw is now the live value.
                        tokens_after = Some(unsafe { CounterCell::borrow(new_raw) }.token_count());
                    }
                    // SAFETY: refused: the new value is still ours.
                    None => drop(unsafe { CounterCell::from_raw(new_raw) }),
                }
            }
            // SAFETY: when unchanged, raw is still the live value.
            let tokens_after =
                tokens_after.unwrap_or_else(|| unsafe { CounterCell::borrow(raw) }.token_count());
            metrics::TOKENS_HELD.add(tokens_after.saturating_sub(tokens_before) as u64);
            metrics::TOKENS_HELD.sub(tokens_before.saturating_sub(tokens_after) as u64);
            result
        }
        KeyContent::Other => Err(WRONG_TYPE),
    }
}

fn read_value(ctx: Ctx, key: RawString) -> Result<i64, CommandError> {
    with_counter(ctx, key, |c| c.map_or(0, CounterRef::value))
}

/// A token's fingerprint and expiry, or why it is refused.
fn stamp(
    token: Option<&[u8]>,
    at: Option<i64>,
    now: i64,
    s: &Settings,
) -> Result<Option<TokenStamp>, CommandError> {
    let Some(token) = token else {
        return Ok(None);
    };
    let expires_at = token_expiry(
        at.unwrap_or(now),
        now,
        s.token_window_ms,
        s.token_max_future_ms,
    )?;
    Ok(Some(TokenStamp {
        fp: token_fingerprint(token),
        expires_at,
    }))
}

enum Outcome {
    Applied { value: i64, op: AddOp },
    Duplicate(i64),
}

/// The shard count an add should leave, decided from the add rate.
fn advise_shards(c: &mut Counter, before: Before, key: &[u8], now: i64, s: &Settings) -> usize {
    if before.inline {
        let promote = decide::inline_counter_is_hot(key, now, s.promote_threshold);
        if promote && s.max_shards >= 2 {
            return 2;
        }
        return 1;
    }
    c.advise_shards(now, s.promote_threshold, s.max_shards)
}

fn count_resize(from: usize, to: usize) {
    if to > from {
        metrics::PROMOTIONS.incr();
    } else if to < from {
        metrics::DEMOTIONS.incr();
    }
}

/// CTR.ADD key delta [TOKEN token] [AT ms] [EX seconds | PX milliseconds]
pub fn add(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 3 {
        return Err(super::wrong_arity("ctr.add"));
    }
    let parsed = if args.len() == 3 {
        AddArgs {
            delta: integer(args.bytes(2))?,
            ..AddArgs::default()
        }
    } else {
        let words: Vec<&[u8]> = (2..args.len()).map(|i| args.bytes(i)).collect();
        parse_add(&words)?
    };
    let key_name = args.raw(1);
    let now = ctx.now_ms();
    let replaying = ctx.is_replaying();
    let settings = Settings::current();
    let token = stamp(parsed.token, parsed.at, now, &settings)?;
    let key = Key::open(ctx, key_name, true);
    let mut before_state = None;
    let outcome = update_counter(&key, |c, before| {
        before_state = Some(before);
        if let Some(t) = token {
            if c.has_token(t.fp, now) {
                c.note_duplicate();
                return Ok(Outcome::Duplicate(c.value()));
            }
        }
        let shards = if replaying {
            before.shards // a verbatim add from our master or the AOF: decide nothing
        } else {
            advise_shards(c, before, args.bytes(1), now, &settings)
        };
        let op = AddOp {
            now,
            delta: parsed.delta,
            shard: decide::pick_shard(shards),
            shards,
            token,
        };
        let value = c.apply_add(&op)?;
        Ok(Outcome::Applied { value, op })
    })?;
    let before = before_state.unwrap_or(Before {
        created: false,
        inline: false,
        shards: 1,
    });
    match outcome {
        Outcome::Duplicate(value) => {
            metrics::DUPLICATES_IGNORED.incr();
            Ok(Reply::Integer(value))
        }
        Outcome::Applied { value, op } => {
            let expire_at = match parsed.ttl_ms {
                Some(ttl) if before.created => Some(now.saturating_add(ttl)),
                _ => None,
            };
            if let Some(at) = expire_at {
                key.set_abs_expire(at);
            }
            // Verbatim only for the bare form: a replica replays it exactly (single shard, no
            // token to sweep, no TTL); anything else carries the master's decisions.
            let plain = args.len() == 3 && before.inline && op.shards == 1;
            if plain {
                ctx.replicate_verbatim();
            } else {
                replicate(
                    ctx,
                    key_name,
                    &Effect {
                        op: CounterOp::Add(op),
                        expire_at,
                    },
                )?;
            }
            metrics::ADDS.incr();
            count_resize(before.shards, op.shards);
            ctx.notify(c"ctr.add", key_name);
            if expire_at.is_some() {
                ctx.notify(c"expire", key_name);
            }
            Ok(Reply::Integer(value))
        }
    }
}

fn replicate(ctx: Ctx, key: RawString, effect: &Effect) -> Result<(), CommandError> {
    if ctx.replicate_effect(APPLY_COMMAND, key, &effect::encode(effect)) {
        Ok(())
    } else {
        Err(CommandError::fixed("ERR could not replicate the write"))
    }
}

/// CTR.CLEAR key [TOKEN token]
pub fn clear(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 2 {
        return Err(super::wrong_arity("ctr.clear"));
    }
    let words: Vec<&[u8]> = (2..args.len()).map(|i| args.bytes(i)).collect();
    let parsed = parse_clear(&words)?;
    let key_name = args.raw(1);
    let now = ctx.now_ms();
    let token = stamp(parsed.token, None, now, &Settings::current())?;
    if token.is_none() && with_counter(ctx, key_name, |c| c.is_none())? {
        return Ok(Reply::Integer(0)); // nothing to clear, nothing to remember
    }
    let key = Key::open(ctx, key_name, true);
    let op = ClearOp { now, token };
    let outcome = update_counter(&key, |c, _| {
        if let Some(t) = token {
            if c.has_token(t.fp, now) {
                c.note_duplicate();
                return Ok(None);
            }
        }
        Ok(Some(c.apply_clear(&op)?))
    })?;
    match outcome {
        None => {
            metrics::DUPLICATES_IGNORED.incr();
            Ok(Reply::Integer(read_value(ctx, key_name)?))
        }
        Some(before) => {
            replicate(
                ctx,
                key_name,
                &Effect {
                    op: CounterOp::Clear(op),
                    expire_at: None,
                },
            )?;
            metrics::CLEARS.incr();
            ctx.notify(c"ctr.clear", key_name);
            Ok(Reply::Integer(before))
        }
    }
}

/// CTR.APPLY key effect: applies a write effect replicated by a master (internal).
pub fn apply(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(super::wrong_arity("ctr.apply"));
    }
    let effect = effect::decode(args.bytes(2))
        .map_err(|e| CommandError(format!("ERR invalid CTR effect: {e}").into()))?;
    let key_name = args.raw(1);
    let key = Key::open(ctx, key_name, true);
    let mut created = false;
    let reply = update_counter(&key, |c, before| {
        created = before.created;
        match effect.op {
            CounterOp::Add(op) => c.apply_add(&op),
            CounterOp::Clear(op) => c.apply_clear(&op),
        }
        .map_err(CommandError::from)
    })?;
    if let (Some(at), true) = (effect.expire_at, created) {
        key.set_abs_expire(at);
    }
    ctx.replicate_verbatim();
    let event = match effect.op {
        CounterOp::Add(_) => c"ctr.add",
        CounterOp::Clear(_) => c"ctr.clear",
    };
    ctx.notify(event, key_name);
    Ok(Reply::Integer(reply))
}

/// CTR.GET key
pub fn get(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 2 {
        return Err(super::wrong_arity("ctr.get"));
    }
    Ok(Reply::Integer(read_value(ctx, args.raw(1))?))
}

/// CTR.MGET key [key ...]
pub fn mget(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 2 {
        return Err(super::wrong_arity("ctr.mget"));
    }
    let values = (1..args.len())
        .map(|i| read_value(ctx, args.raw(i)).map(Reply::Integer))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Reply::Array(values))
}

/// CTR.INFO key: a map describing the counter (nil when missing).
pub fn info(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 2 {
        return Err(super::wrong_arity("ctr.info"));
    }
    let key_bytes = args.bytes(1);
    with_counter(ctx, args.raw(1), |c| {
        let Some(c) = c else {
            return Reply::Null;
        };
        let plain;
        let (full, rate, encoding) = match c {
            CounterRef::Inline(v) => {
                plain = Counter::plain(v);
                (&plain, decide::inline_counter_rate(key_bytes), "inline")
            }
            CounterRef::Boxed(b) => (b, b.add_rate(), "boxed"),
        };
        Reply::Map(vec![
            ("value", Reply::Integer(full.value())),
            ("shards", Reply::Integer(full.shard_count() as i64)),
            (
                "shard_values",
                Reply::Array(
                    full.shard_values()
                        .into_iter()
                        .map(Reply::Integer)
                        .collect(),
                ),
            ),
            ("add_rate", Reply::Integer(i64::from(rate))),
            ("tokens", Reply::Integer(full.tokens().len() as i64)),
            (
                "duplicates_ignored",
                Reply::Integer(full.duplicates() as i64),
            ),
            ("encoding", Reply::Bulk(encoding.as_bytes().to_vec())),
        ])
    })
}

/// CTR.SETSTATE key payload: replaces the counter with a decoded `ctr_format` payload. The AOF
/// rewrite emits it; it is deterministic, so it replicates verbatim.
pub fn setstate(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(super::wrong_arity("ctr.setstate"));
    }
    let counter = ctr_format::decode(args.bytes(2))
        .map_err(|e| CommandError(format!("ERR invalid CTR state: {e}").into()))?;
    let key = Key::open(ctx, args.raw(1), true);
    update_counter(&key, |c, _| {
        *c = counter;
        Ok(())
    })?;
    ctx.replicate_verbatim();
    ctx.notify(c"ctr.setstate", args.raw(1));
    Ok(Reply::Ok)
}
