//! The rate limiters: `CTR.THROTTLE` (GCRA, redis-cell's reply) and `CTR.WINDOW` (a sliding
//! window on a counter). Parse, run the core (`crate::counter::throttle`, `window`), reply,
//! replicate the effect with the master's time, notify.

use std::time::{SystemTime, UNIX_EPOCH};

use super::ctr_args::token_and_at;
use super::parse::{integer, SYNTAX_ERROR};
use crate::counter::throttle::{throttle_intent, Gcra, ThrottleError, ThrottleReply, NS_PER_MS};
use crate::counter::window::{check_config, DEFAULT_BUCKETS};
use crate::counter::{CounterCell, CounterRef, ThrottleOp, ThrottleRetry, WindowOp};
use crate::ffi::{Args, CommandError, CommandResult, Ctx, Key, KeyContent, Reply, WRONG_TYPE};
use crate::metrics;
use crate::persist::ctr_type::ctr_type;
use crate::persist::effect::{CounterOp, Effect};
use crate::runtime::ctr_store::{is_missing, open_for_write, update_counter, Write, TOKEN_REUSED};

/// `CTR.THROTTLE key max_burst count_per_period period_seconds [quantity] [TOKEN t] [AT ms]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleArgs<'a> {
    pub max_burst: i64,
    pub count: i64,
    pub period_s: i64,
    pub quantity: i64,
    pub token: Option<&'a [u8]>,
    pub at: Option<i64>,
}

/// Parses the words after the key. The quantity is the one word before the option pairs.
pub fn parse_throttle<'a>(args: &[&'a [u8]]) -> Result<ThrottleArgs<'a>, CommandError> {
    let [max_burst, count, period, rest @ ..] = args else {
        return Err(SYNTAX_ERROR);
    };
    let (quantity, rest) = match rest.split_first() {
        Some((q, options)) if rest.len() % 2 == 1 => (integer(q)?, options),
        _ => (1, rest),
    };
    let (token, at) = token_and_at(rest)?;
    Ok(ThrottleArgs {
        max_burst: integer(max_burst)?,
        count: integer(count)?,
        period_s: integer(period)?,
        quantity,
        token,
        at,
    })
}

pub const NOT_A_LIMITER: CommandError = CommandError::fixed(
    "ERR CTR.THROTTLE needs a key of its own: this counter holds a value or other state",
);

impl From<ThrottleError> for CommandError {
    fn from(e: ThrottleError) -> Self {
        CommandError::fixed(e.message())
    }
}

fn throttle_reply(r: ThrottleReply) -> Reply {
    Reply::Array(
        [
            i64::from(r.limited),
            r.limit,
            r.remaining,
            r.retry_after,
            r.reset_after,
        ]
        .into_iter()
        .map(Reply::Integer)
        .collect(),
    )
}

/// The wall clock in unix ns (redis-cell reads its clock at this resolution).
fn wall_clock_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// What the key holds for a throttle call: the arrival time, and what its token finds.
fn limiter_state(
    key: &Key,
    fp: Option<u64>,
    intent: u32,
    now: i64,
) -> Result<(Option<i64>, ThrottleRetry), CommandError> {
    let view = match key.content(ctr_type()) {
        KeyContent::Empty => return Ok((None, ThrottleRetry::New)),
        // SAFETY: the key is open and holds a live counter for the duration of this borrow.
        KeyContent::Mine(raw) => unsafe { CounterCell::borrow(raw) },
        KeyContent::Other => return Err(WRONG_TYPE),
    };
    let c = match view {
        CounterRef::Inline(0) => return Ok((None, ThrottleRetry::New)),
        // A limiter that remembers no reply: a token can match nothing there.
        CounterRef::Limiter(tat) => return Ok((Some(tat), ThrottleRetry::New)),
        CounterRef::Boxed(c) if c.is_throttle_only() => c,
        _ => return Err(NOT_A_LIMITER),
    };
    // A limiter's key holds no other tokens (`is_throttle_only`): only its own can match.
    let throttle = c.throttle();
    let retry = match (fp, throttle) {
        (Some(fp), Some(t)) => t.retry(fp, intent, now),
        _ => ThrottleRetry::New,
    };
    Ok((throttle.and_then(|t| t.tat_ns), retry))
}

/// CTR.THROTTLE key max_burst count_per_period period_seconds [quantity] [TOKEN t] [AT ms]
pub fn throttle(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 5 {
        return Err(super::wrong_arity("ctr.throttle"));
    }
    let key = open_for_write(ctx, args.raw(1))?;
    let parsed = args.with_words(2, parse_throttle)?;
    let gcra = Gcra::new(parsed.max_burst, parsed.count, parsed.period_s)?;
    let w = Write::new(ctx, args, parsed.token, parsed.at)?;
    let now_ns = match parsed.at {
        Some(at) => at.checked_mul(NS_PER_MS).ok_or(ThrottleError::Overflow)?,
        None => wall_clock_ns(),
    };
    let intent = throttle_intent(
        parsed.max_burst,
        parsed.count,
        parsed.period_s,
        parsed.quantity,
    );
    let (tat, retry) = limiter_state(&key, w.token.map(|t| t.fp), intent, w.now)?;
    match retry {
        ThrottleRetry::New => {}
        ThrottleRetry::Replay(first) => {
            metrics::DUPLICATES_IGNORED.incr();
            return Ok(throttle_reply(first));
        }
        ThrottleRetry::Conflict => {
            metrics::TOKENS_REFUSED.incr();
            return Err(TOKEN_REUSED);
        }
    }
    let decision = gcra.decide(tat, now_ns, parsed.quantity)?;
    if decision.new_tat_ns.is_none() && w.token.is_none() {
        // Limited, or a read: nothing to store, nothing to replicate.
        return Ok(throttle_reply(decision.reply));
    }
    let op = ThrottleOp {
        now: w.now,
        tat_ns: decision.new_tat_ns,
        token: w.token,
        reply: decision.reply,
        intent,
    };
    let lag_ms = parsed.at.map_or(0, |at| w.now.saturating_sub(at));
    let (before, idle_at) = update_counter(&key, |c, before| {
        c.apply_throttle(&op);
        Ok((before, c.throttle().and_then(|t| t.idle_at_ms(lag_ms))))
    })?;
    // The key goes once its limiter is idle, as redis-cell's key expires.
    if let Some(at) = idle_at {
        key.set_abs_expire(at);
    }
    drop(key);
    let effect = Effect {
        op: CounterOp::Throttle(op),
        expire_at: idle_at,
    };
    w.finish(&effect, before, c"ctr.throttle")?;
    Ok(throttle_reply(decision.reply))
}

/// `CTR.WINDOW key window-ms [BUCKETS n] | NONE`: the words after the key, as (window-ms,
/// buckets), or None for `NONE`.
pub fn parse_window(args: &[&[u8]]) -> Result<Option<(i64, i64)>, CommandError> {
    let config = match args {
        [none] if none.eq_ignore_ascii_case(b"NONE") => return Ok(None),
        [width] => (integer(width)?, DEFAULT_BUCKETS),
        [width, option, n] if option.eq_ignore_ascii_case(b"BUCKETS") => {
            (integer(width)?, integer(n)?)
        }
        _ => return Err(SYNTAX_ERROR),
    };
    check_config(config.0, config.1).map_err(CommandError::fixed)?;
    Ok(Some(config))
}

/// CTR.WINDOW key window-ms [BUCKETS n] | NONE
pub fn window(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 3 {
        return Err(super::wrong_arity("ctr.window"));
    }
    super::ctr_spread::refuse_holder(ctx, args.bytes(1))?;
    let key = open_for_write(ctx, args.raw(1))?;
    let config = args.with_words(2, parse_window)?;
    if config.is_none() && is_missing(&key) {
        return Ok(Reply::Ok); // nothing to remove, nothing to create
    }
    let w = Write::new(ctx, args, None, None)?;
    let op = WindowOp { now: w.now, config };
    let (changed, before) = update_counter(&key, |c, before| Ok((c.apply_window(&op)?, before)))?;
    drop(key);
    if changed {
        let effect = Effect {
            op: CounterOp::Window(op),
            expire_at: None,
        };
        w.finish(&effect, before, c"ctr.window")?;
    }
    Ok(Reply::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<&[u8]> {
        s.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn parses_the_quantity_before_the_options() {
        let p = parse_throttle(&words("4 1 60")).unwrap();
        assert_eq!(
            (p.max_burst, p.count, p.period_s, p.quantity),
            (4, 1, 60, 1)
        );
        let p = parse_throttle(&words("4 1 60 0 token t AT 5")).unwrap();
        assert_eq!((p.quantity, p.token, p.at), (0, Some(&b"t"[..]), Some(5)));
        let p = parse_throttle(&words("4 1 60 TOKEN t")).unwrap();
        assert_eq!((p.quantity, p.token), (1, Some(&b"t"[..])));
        assert_eq!(parse_throttle(&words("4 1 60 TOKEN")), Err(NOT_INTEGER));
        assert_eq!(parse_throttle(&words("4 1 60 2 TOKEN")), Err(SYNTAX_ERROR));
        assert_eq!(
            parse_throttle(&words("4 1 60 AT 1 AT 2")),
            Err(SYNTAX_ERROR)
        );
        assert_eq!(parse_throttle(&words("4 x 60")), Err(NOT_INTEGER));
        assert!(parse_throttle(&words("4 1 60 AT -1")).is_err());
    }

    #[test]
    fn parses_a_window() {
        assert_eq!(parse_window(&words("NONE")), Ok(None));
        assert_eq!(parse_window(&words("60000")), Ok(Some((60_000, 10))));
        assert_eq!(
            parse_window(&words("60000 buckets 60")),
            Ok(Some((60_000, 60)))
        );
        assert_eq!(parse_window(&words("60000 BUCKETS")), Err(SYNTAX_ERROR));
        assert_eq!(parse_window(&words("NONE BUCKETS 3")), Err(NOT_INTEGER));
        assert_eq!(parse_window(&words("60000 SLOTS 3")), Err(SYNTAX_ERROR));
        for bad in [
            "0",
            "-5",
            "1000 BUCKETS 0",
            "1000 BUCKETS 3",
            "100000 BUCKETS 5000",
        ] {
            assert!(parse_window(&words(bad)).is_err(), "{bad}");
        }
    }

    const NOT_INTEGER: CommandError = super::super::parse::NOT_AN_INTEGER;
}
