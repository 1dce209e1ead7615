//! CTR.RECONCILE: repair a counter from its source of truth at a watermark, and measure drift.

use super::ctr_args::{parse_reconcile, TruthSource};
use super::reconcile_write::{reply, write_reconcile};
use super::spread_holders::refuse_look_alike;
use super::spread_reconcile;
use crate::counter::history::bucket_of;
use crate::counter::history::WatermarkError;
use crate::counter::{CounterError, CounterRef, ReconcileOp, StartOp};
use crate::ffi::{
    Args, CommandError, CommandResult, Ctx, Key, KeyKind, RawString, Reply, WRONG_TYPE,
};
use crate::persist::effect::{CounterOp, Effect};
use crate::runtime::ctr_store::with_counter;
use crate::runtime::ctr_store::{refuse_unwritable, update_counter, Write};
use crate::runtime::holder_check::Checked;

/// The newest bucket boundary at least `settle` old: events up to it have had time to land in
/// the source.
fn settled_watermark(now: i64, settle: i64, width: i64) -> i64 {
    let t = now.saturating_sub(settle);
    // The largest multiple of width <= t.
    let end = bucket_of(t, width);
    if end == t {
        end
    } else {
        end.saturating_sub(width)
    }
}

/// The refusal of a missing source key without `EMPTYOK`.
pub const NO_SOURCE: CommandError = CommandError::fixed(
    "ERR no such source key: it would count 0 and set the counter to 0 (add EMPTYOK if an empty source is meant)",
);

/// WRONGTYPE when the source key holds a kind `source` cannot count; a missing one counts 0
/// only with `EMPTYOK` (else a mistyped name would wipe the counter). Checked before anything
/// about the watermark, as a native command would.
fn check_source(
    ctx: Ctx,
    source: TruthSource,
    raw: RawString,
    empty_ok: bool,
) -> Result<(), CommandError> {
    let want = match source {
        TruthSource::Given(_) => return Ok(()),
        TruthSource::Stream(_) => KeyKind::Stream,
        TruthSource::SortedSet(_) => KeyKind::SortedSet,
        TruthSource::Set(_) => KeyKind::Set,
    };
    match Key::open(ctx, raw, false).kind() {
        KeyKind::Empty if empty_ok => Ok(()),
        KeyKind::Empty => Err(NO_SOURCE),
        kind if kind == want => Ok(()),
        _ => Err(WRONG_TYPE),
    }
}

/// Counts the truth in the source key (argument `raw`, of the right kind or missing) up to `w`
/// (None: everything in it).
fn count_source(
    ctx: Ctx,
    source: TruthSource,
    raw: RawString,
    w: Option<i64>,
) -> Result<i64, CommandError> {
    let name = match source {
        TruthSource::Given(n) => return Ok(n),
        TruthSource::Stream(k) | TruthSource::SortedSet(k) | TruthSource::Set(k) => k,
    };
    let key = Key::open(ctx, raw, false);
    let kind = key.kind();
    if kind == KeyKind::Empty {
        return Ok(0);
    }
    let total = key.length();
    drop(key);
    let count = match (kind, w) {
        (KeyKind::Stream, Some(w)) => total.saturating_sub(stream_entries_after(ctx, name, w)?),
        (KeyKind::SortedSet, Some(w)) => {
            let w = w.to_string();
            integer_reply(ctx, "ZCOUNT", &[name, b"-inf", w.as_bytes()])?
        }
        _ => total,
    };
    i64::try_from(count).map_err(|_| CommandError::fixed("ERR counter overflow"))
}

/// Runs a read-only command on a source key and takes its integer reply.
fn integer_reply(ctx: Ctx, command: &str, args: &[&[u8]]) -> Result<u64, CommandError> {
    let context = redis_module::Context::new(ctx.ptr);
    match context.call(command, args) {
        Ok(redis_module::RedisValue::Integer(n)) => Ok(u64::try_from(n).unwrap_or(0)),
        Ok(other) => Err(CommandError(
            format!("ERR unexpected {command} reply: {other:?}").into(),
        )),
        Err(e) => Err(CommandError(format!("ERR {e}").into())),
    }
}

/// Entries of a stream whose id's time part is after `w`, read newest first in pages (the cost
/// is the number of entries after the watermark, usually the few inside the settle delay).
fn stream_entries_after(ctx: Ctx, key: &[u8], w: i64) -> Result<u64, CommandError> {
    const PAGE: usize = 1000;
    if w < 0 {
        return Ok(u64::MAX); // every id is after a negative watermark
    }
    let context = redis_module::Context::new(ctx.ptr);
    let floor = format!("({w}-18446744073709551615");
    let mut end = "+".to_string();
    let mut count = 0u64;
    loop {
        let page = PAGE.to_string();
        let args: [&[u8]; 5] = [
            key,
            end.as_bytes(),
            floor.as_bytes(),
            b"COUNT",
            page.as_bytes(),
        ];
        let entries = match context.call("XREVRANGE", &args[..]) {
            Ok(redis_module::RedisValue::Array(entries)) => entries,
            Ok(other) => {
                return Err(CommandError(
                    format!("ERR unexpected XREVRANGE reply: {other:?}").into(),
                ))
            }
            Err(e) => return Err(CommandError(format!("ERR {e}").into())),
        };
        count += entries.len() as u64;
        if entries.len() < PAGE {
            return Ok(count);
        }
        // Continue below the oldest id of this page.
        let last_id = match entries.last() {
            Some(redis_module::RedisValue::Array(entry)) => match entry.first() {
                Some(redis_module::RedisValue::BulkString(id)) => id.clone(),
                Some(redis_module::RedisValue::SimpleString(id)) => id.clone(),
                Some(redis_module::RedisValue::BulkRedisString(id)) => id.to_string_lossy(),
                _ => return Err(CommandError::fixed("ERR unexpected stream entry")),
            },
            _ => return Err(CommandError::fixed("ERR unexpected stream entry")),
        };
        end = format!("({last_id}");
    }
}

/// What the counter key holds, as far as a reconcile cares: its bucket width and earliest
/// accepted watermark when it keeps a history. WRONGTYPE for another type.
fn tracked_history(ctx: Ctx, key: RawString) -> Result<Option<(i64, i64)>, CommandError> {
    with_counter(ctx, key, |c| match c {
        Some(CounterRef::Boxed(b)) => b.history().map(|h| (h.width, h.earliest_watermark())),
        _ => None,
    })
}

/// CTR.RECONCILE key START: the counter keeps buckets from now on; replies with the earliest
/// watermark it accepts. A counter that already keeps them is left untouched (no write, no
/// replication, no event): START is idempotent.
fn start(ctx: Ctx, args: &Args) -> CommandResult {
    let w = Write::new(ctx, args, None, None)?;
    let now = ctx.precise_now_ms();
    if let Some((_, earliest)) = tracked_history(ctx, w.key_name)? {
        return Ok(Reply::Integer(earliest));
    }
    refuse_unwritable(ctx, w.key_name)?;
    let key = Key::open(ctx, w.key_name, true);
    let name = crate::ffi::string_bytes(w.key_name);
    if let Checked::Blocked = refuse_look_alike(ctx, &key, name, reconcile)? {
        return Ok(Reply::Blocked);
    }
    let (op, earliest, before) = update_counter(&key, |c, before| {
        let op = StartOp {
            now,
            width: w.settings.bucket_ms,
            retention: w.settings.bucket_retention_ms,
            created: before.created && w.settings.track_history,
        };
        if c.window().is_some() {
            return Err(CounterError::Window(crate::counter::WINDOW_ALONE).into());
        }
        let (earliest, _) = c.apply_start(&op);
        Ok((op, earliest, before))
    })?;
    let effect = Effect {
        op: CounterOp::Start(op),
        expire_at: None,
    };
    w.finish(&effect, before, c"ctr.reconcile")?;
    Ok(Reply::Integer(earliest))
}

/// CTR.RECONCILE key truth [AT w] | CTR.RECONCILE key FROM STREAM|ZSET|SET source [AT w] [EMPTYOK]
/// | CTR.RECONCILE key START
pub fn reconcile(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 3 {
        return Err(super::wrong_arity("ctr.reconcile"));
    }
    if args.len() == 3 && args.bytes(2).eq_ignore_ascii_case(b"START") {
        return start(ctx, args);
    }
    // The counter's type before any complaint about the arguments, as for every CTR write.
    tracked_history(ctx, args.raw(1))?;
    let parsed = args.with_words(2, parse_reconcile)?;
    let mut w = Write::new(ctx, args, None, None)?;
    // Watermarks are compared with the clock at full resolution: a job that computes a
    // boundary from its own (precise) clock must not find it "in the future" by a coarse tick.
    w.now = ctx.precise_now_ms();
    let settings = w.settings;
    // Types first (the counter's, then the source's), then the watermark, then the counting.
    let tracked = tracked_history(ctx, w.key_name)?;
    // FROM TYPE source: the source key is argument 4.
    let source_key = if args.len() > 4 {
        args.raw(4)
    } else {
        args.raw(1)
    };
    check_source(ctx, parsed.source, source_key, parsed.empty_ok)?;
    // Without AT, a stream or sorted set is counted at the settled watermark of a counter that
    // keeps a history, and in full (a plain overwrite) for one that keeps none.
    let watermark = match (parsed.source, parsed.at, tracked) {
        (_, Some(at), _) => Some(at),
        (TruthSource::Stream(_) | TruthSource::SortedSet(_), None, Some((width, _))) => {
            Some(settled_watermark(w.now, settings.settle_ms, width))
        }
        _ => None,
    };
    // A spread home's total is set through a gather, without a watermark: the holders keep
    // no buckets of the home's.
    let spread_home = spread_reconcile::is_spread_home(ctx, w.key_name);
    if spread_home && watermark.is_some() {
        return Err(spread_reconcile::AT_ON_SPREAD);
    }
    // Refuse a bad watermark before counting a source, which can be the costly part.
    if let Some(at) = watermark {
        with_counter(ctx, w.key_name, |c| match c {
            Some(CounterRef::Boxed(b)) => match b.history() {
                Some(h) => h
                    .check_watermark(at, w.now)
                    .map_err(CounterError::Watermark),
                None => Err(CounterError::Watermark(WatermarkError::NotTracked)),
            },
            _ => Err(CounterError::Watermark(WatermarkError::NotTracked)),
        })??;
    }
    let truth = count_source(ctx, parsed.source, source_key, watermark)?;
    if spread_home {
        return spread_reconcile::set_total(ctx, &w, truth);
    }
    let op = ReconcileOp {
        now: w.now,
        truth,
        watermark,
        width: settings.bucket_ms,
        retention: settings.bucket_retention_ms,
    };
    // A retry that changes nothing replies without opening the key for writing: nothing is
    // replicated or notified, and a WATCH on the key holds.
    let unchanged = with_counter(ctx, w.key_name, |c| match c {
        Some(CounterRef::Boxed(b)) => b.unchanged_by(&op),
        _ => None,
    })?;
    if let Some(repair) = unchanged {
        return Ok(reply(repair));
    }
    refuse_unwritable(ctx, w.key_name)?;
    let key = Key::open(ctx, w.key_name, true);
    let name = crate::ffi::string_bytes(w.key_name);
    if let Checked::Blocked = refuse_look_alike(ctx, &key, name, reconcile)? {
        return Ok(Reply::Blocked);
    }
    let repair = write_reconcile(&w, key, op)?;
    Ok(reply(repair))
}
