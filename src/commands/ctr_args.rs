//! Parsing of the CTR commands' options, pure and unit-tested.

use super::parse::{integer, SYNTAX_ERROR};
use crate::ffi::CommandError;

pub const MAX_TOKEN_BYTES: usize = 256;

pub const BAD_TOKEN: CommandError = CommandError::fixed("ERR token must be 1 to 256 bytes");
pub const BAD_EXPIRE: CommandError =
    CommandError::fixed("ERR invalid expire time in 'ctr.add' command");
pub const NEGATIVE_AT: CommandError =
    CommandError::fixed("ERR AT must be a unix time in ms (not negative)");

/// An `AT` event time: an integer, not negative.
fn event_time(value: &[u8]) -> Result<i64, CommandError> {
    Some(integer(value)?)
        .filter(|at| *at >= 0)
        .ok_or(NEGATIVE_AT)
}

/// `CTR.ADD key delta [TOKEN token] [AT ms] [EX seconds | PX milliseconds]`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddArgs<'a> {
    pub delta: i64,
    pub token: Option<&'a [u8]>,
    pub at: Option<i64>,
    /// Time to live in ms, applied only when the call creates the key.
    pub ttl_ms: Option<i64>,
}

/// `CTR.CLEAR key [TOKEN token]`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClearArgs<'a> {
    pub token: Option<&'a [u8]>,
}

/// `CTR.DECRFLOOR key amount [TOKEN token] [AT ms]`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecrArgs<'a> {
    pub amount: i64,
    pub token: Option<&'a [u8]>,
    pub at: Option<i64>,
}

pub const AMOUNT_NOT_POSITIVE: CommandError = CommandError::fixed("ERR amount must be positive");

/// Where a reconcile's truth comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruthSource<'a> {
    /// A number given by the caller.
    Given(i64),
    /// Stream entries with ids up to the watermark.
    Stream(&'a [u8]),
    /// Sorted-set members with score up to the watermark.
    SortedSet(&'a [u8]),
    /// Set cardinality.
    Set(&'a [u8]),
}

pub const SET_TAKES_NO_AT: CommandError = CommandError::fixed(
    "ERR FROM SET takes no AT: a set has no time (its cardinality is the truth now)",
);

/// `CTR.RECONCILE key truth [AT w]` or `CTR.RECONCILE key FROM STREAM|ZSET|SET source [AT w]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileArgs<'a> {
    pub source: TruthSource<'a>,
    pub at: Option<i64>,
}

/// Options are `NAME value` pairs; each may appear once.
fn options<'a>(
    rest: &[&'a [u8]],
    mut on: impl FnMut(&str, &'a [u8]) -> Result<bool, CommandError>,
) -> Result<(), CommandError> {
    let mut seen: Vec<String> = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let name = String::from_utf8_lossy(rest[i]).to_ascii_uppercase();
        let value = rest.get(i + 1).ok_or(SYNTAX_ERROR)?;
        if seen.contains(&name) || !on(&name, value)? {
            return Err(SYNTAX_ERROR);
        }
        seen.push(name);
        i += 2;
    }
    Ok(())
}

fn token(value: &[u8]) -> Result<&[u8], CommandError> {
    if value.is_empty() || value.len() > MAX_TOKEN_BYTES {
        return Err(BAD_TOKEN);
    }
    Ok(value)
}

pub fn parse_add<'a>(args: &[&'a [u8]]) -> Result<AddArgs<'a>, CommandError> {
    let (delta, rest) = args.split_first().ok_or(SYNTAX_ERROR)?;
    let mut parsed = AddArgs {
        delta: integer(delta)?,
        ..AddArgs::default()
    };
    options(rest, |name, value| {
        match name {
            "TOKEN" => parsed.token = Some(token(value)?),
            "AT" => parsed.at = Some(event_time(value)?),
            "EX" | "PX" => {
                if parsed.ttl_ms.is_some() {
                    return Ok(false); // EX and PX together
                }
                let n = integer(value)?;
                let ms = if name == "EX" {
                    n.checked_mul(1000)
                } else {
                    Some(n)
                };
                parsed.ttl_ms = Some(ms.filter(|ms| *ms > 0).ok_or(BAD_EXPIRE)?);
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(parsed)
}

pub fn parse_decrement<'a>(args: &[&'a [u8]]) -> Result<DecrArgs<'a>, CommandError> {
    let (amount, rest) = args.split_first().ok_or(SYNTAX_ERROR)?;
    let amount = integer(amount)?;
    if amount <= 0 {
        return Err(AMOUNT_NOT_POSITIVE);
    }
    let (token, at) = token_and_at(rest)?;
    Ok(DecrArgs { amount, token, at })
}

/// `[TOKEN token] [AT ms]`, in any order, each at most once: the options of the commands that
/// take no others.
pub(super) fn token_and_at<'a>(
    rest: &[&'a [u8]],
) -> Result<(Option<&'a [u8]>, Option<i64>), CommandError> {
    let (mut tok, mut at) = (None, None);
    options(rest, |name, value| {
        match name {
            "TOKEN" => tok = Some(token(value)?),
            "AT" => at = Some(event_time(value)?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok((tok, at))
}

pub fn parse_reconcile<'a>(args: &[&'a [u8]]) -> Result<ReconcileArgs<'a>, CommandError> {
    let (first, rest) = args.split_first().ok_or(SYNTAX_ERROR)?;
    let (source, rest) = if first.eq_ignore_ascii_case(b"FROM") {
        let [kind, key, rest @ ..] = rest else {
            return Err(SYNTAX_ERROR);
        };
        let source = match kind.to_ascii_uppercase().as_slice() {
            b"STREAM" => TruthSource::Stream(key),
            b"ZSET" => TruthSource::SortedSet(key),
            b"SET" => TruthSource::Set(key),
            _ => return Err(SYNTAX_ERROR),
        };
        (source, rest)
    } else {
        (TruthSource::Given(integer(first)?), rest)
    };
    let mut at = None;
    options(rest, |name, value| {
        if name != "AT" {
            return Ok(false);
        }
        if matches!(source, TruthSource::Set(_)) {
            return Err(SET_TAKES_NO_AT);
        }
        at = Some(integer(value)?);
        Ok(true)
    })?;
    Ok(ReconcileArgs { source, at })
}

/// `CTR.FLOOR key floor|NONE`: Some(floor), or None to remove it.
pub fn parse_floor(arg: &[u8]) -> Result<Option<i64>, CommandError> {
    if arg.eq_ignore_ascii_case(b"NONE") {
        return Ok(None);
    }
    integer(arg).map(Some)
}

pub fn parse_clear<'a>(args: &[&'a [u8]]) -> Result<ClearArgs<'a>, CommandError> {
    let mut parsed = ClearArgs::default();
    options(args, |name, value| {
        if name != "TOKEN" {
            return Ok(false);
        }
        parsed.token = Some(token(value)?);
        Ok(true)
    })?;
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::parse::NOT_AN_INTEGER;

    fn add(line: &str) -> Result<AddArgs<'_>, CommandError> {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse_add(&words)
    }

    #[test]
    fn parses_every_option_in_any_order_and_case() {
        let a = add("5 token t1 AT 1700000000000 ex 10").unwrap();
        assert_eq!(a.delta, 5);
        assert_eq!(a.token, Some(&b"t1"[..]));
        assert_eq!(a.at, Some(1_700_000_000_000));
        assert_eq!(a.ttl_ms, Some(10_000));
        assert_eq!(add("-1 PX 250").unwrap().ttl_ms, Some(250));
        assert_eq!(
            add("7").unwrap(),
            AddArgs {
                delta: 7,
                ..AddArgs::default()
            }
        );
    }

    #[test]
    fn refuses_bad_option_syntax() {
        for bad in [
            "1 TOKEN",
            "1 TOKEN a TOKEN b",
            "1 EX 1 PX 1",
            "1 BOGUS 1",
            "1 AT 1 AT 2",
            "1 EX 1 EX 1",
        ] {
            assert_eq!(add(bad), Err(SYNTAX_ERROR), "{bad}");
        }
        assert_eq!(add("x"), Err(NOT_AN_INTEGER));
        assert_eq!(add("1 AT soon"), Err(NOT_AN_INTEGER));
        assert_eq!(add("1 AT -5"), Err(NEGATIVE_AT));
        assert_eq!(add("1 AT 0").unwrap().at, Some(0));
        assert_eq!(parse_decrement(&[b"1", b"AT", b"-1"]), Err(NEGATIVE_AT));
        assert_eq!(add("1 EX 0"), Err(BAD_EXPIRE));
        assert_eq!(add("1 PX -5"), Err(BAD_EXPIRE));
        assert_eq!(add("1 EX 9223372036854775807"), Err(BAD_EXPIRE));
        assert_eq!(parse_add(&[]), Err(SYNTAX_ERROR));
    }

    #[test]
    fn token_length_is_bounded() {
        let long = vec![b'a'; 257];
        let max = vec![b'a'; 256];
        assert_eq!(parse_add(&[b"1", b"TOKEN", &long]), Err(BAD_TOKEN));
        assert_eq!(parse_add(&[b"1", b"TOKEN", b""]), Err(BAD_TOKEN));
        assert!(parse_add(&[b"1", b"TOKEN", &max]).is_ok());
        assert_eq!(
            parse_add(&[b"1", b"TOKEN", b"\0\xff"]).unwrap().token,
            Some(&b"\0\xff"[..])
        );
    }

    #[test]
    fn decrement_amounts_are_positive() {
        let d = parse_decrement(&[b"3", b"TOKEN", b"o1", b"AT", b"5"]).unwrap();
        assert_eq!((d.amount, d.token, d.at), (3, Some(&b"o1"[..]), Some(5)));
        assert_eq!(parse_decrement(&[b"0"]), Err(AMOUNT_NOT_POSITIVE));
        assert_eq!(parse_decrement(&[b"-2"]), Err(AMOUNT_NOT_POSITIVE));
        assert_eq!(parse_decrement(&[b"x"]), Err(NOT_AN_INTEGER));
        assert_eq!(parse_decrement(&[b"1", b"EX", b"5"]), Err(SYNTAX_ERROR));
    }

    #[test]
    fn floor_is_an_integer_or_none() {
        assert_eq!(parse_floor(b"none"), Ok(None));
        assert_eq!(parse_floor(b"-7"), Ok(Some(-7)));
        assert_eq!(parse_floor(b"low"), Err(NOT_AN_INTEGER));
    }

    #[test]
    fn reconcile_takes_a_truth_or_a_source() {
        let r = |line: &'static str| {
            let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            parse_reconcile(&words)
        };
        assert_eq!(
            r("100").unwrap(),
            ReconcileArgs {
                source: TruthSource::Given(100),
                at: None
            }
        );
        assert_eq!(r("100 AT 60000").unwrap().at, Some(60_000));
        assert_eq!(
            r("FROM stream ev").unwrap().source,
            TruthSource::Stream(b"ev")
        );
        assert_eq!(
            r("from ZSET z at 5").unwrap(),
            ReconcileArgs {
                source: TruthSource::SortedSet(b"z"),
                at: Some(5)
            }
        );
        assert_eq!(r("FROM SET s").unwrap().source, TruthSource::Set(b"s"));
        assert_eq!(
            r("FROM SET s AT 5"),
            Err(SET_TAKES_NO_AT),
            "a set has no time"
        );
        assert_eq!(r("FROM SET s AT"), Err(SYNTAX_ERROR));
        assert_eq!(r("FROM LIST l"), Err(SYNTAX_ERROR));
        assert_eq!(r("FROM STREAM"), Err(SYNTAX_ERROR));
        assert_eq!(r("100 AT"), Err(SYNTAX_ERROR));
        assert_eq!(r("many"), Err(NOT_AN_INTEGER));
        assert_eq!(r("100 AT 1 AT 2"), Err(SYNTAX_ERROR));
    }

    #[test]
    fn clear_takes_only_a_token() {
        assert_eq!(parse_clear(&[]).unwrap().token, None);
        assert_eq!(
            parse_clear(&[b"token", b"x"]).unwrap().token,
            Some(&b"x"[..])
        );
        assert_eq!(parse_clear(&[b"AT", b"1"]), Err(SYNTAX_ERROR));
        assert_eq!(parse_clear(&[b"TOKEN"]), Err(SYNTAX_ERROR));
    }
}
