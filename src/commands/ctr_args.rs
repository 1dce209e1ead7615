//! Parsing of the CTR commands' options, pure and unit-tested.

use super::parse::{integer, SYNTAX_ERROR};
use crate::ffi::CommandError;

pub const MAX_TOKEN_BYTES: usize = 256;

pub const BAD_TOKEN: CommandError = CommandError::fixed("ERR token must be 1 to 256 bytes");
pub const BAD_EXPIRE: CommandError =
    CommandError::fixed("ERR invalid expire time in 'ctr.add' command");
pub const BAD_EXPIRE_INCREX: CommandError =
    CommandError::fixed("ERR invalid expire time in 'ctr.increx' command");
pub const ENX_NEEDS_EXPIRY: CommandError =
    CommandError::fixed("ERR ENX requires one of EX, PX, EXAT or PXAT");
pub const BOUNDS_CROSSED: CommandError =
    CommandError::fixed("ERR LBOUND must not be greater than UBOUND");
pub const NO_FLOAT: CommandError =
    CommandError::fixed("ERR BYFLOAT is not supported: counters hold 64-bit integers (use BYINT)");
pub const NEGATIVE_AT: CommandError =
    CommandError::fixed("ERR AT must be a unix time in ms (not negative)");

/// An `AT` event time: an integer, not negative.
pub fn event_time(value: &[u8]) -> Result<i64, CommandError> {
    Some(integer(value)?)
        .filter(|at| *at >= 0)
        .ok_or(NEGATIVE_AT)
}

/// An expiry option: `EX`/`PX` (a time to live, ms), `EXAT`/`PXAT` (a unix time, ms) or
/// `PERSIST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    In(i64),
    At(i64),
    Persist,
}

/// The expiry options of a write: at most one [`Expiry`], and `ENX` (set it only on a key
/// without a TTL), which needs one of `EX`/`PX`/`EXAT`/`PXAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExpiryArgs {
    pub expiry: Option<Expiry>,
    pub only_if_none: bool,
}

impl ExpiryArgs {
    /// Takes the option `name` (reading its value from `words`) when it is an expiry option;
    /// false when it is not one. `bad` is the command's invalid-expire error.
    fn take(
        &mut self,
        name: &[u8],
        words: &mut Words,
        bad: CommandError,
    ) -> Result<bool, CommandError> {
        let positive = |n: i64, scale: i64| n.checked_mul(scale).filter(|ms| *ms > 0).ok_or(bad);
        let expiry = match name {
            b"ENX" if self.only_if_none => return Err(SYNTAX_ERROR), // twice
            b"ENX" => {
                self.only_if_none = true;
                return Ok(true);
            }
            b"PERSIST" => Expiry::Persist,
            b"EX" => Expiry::In(positive(integer(words.value()?)?, 1000)?),
            b"PX" => Expiry::In(positive(integer(words.value()?)?, 1)?),
            b"EXAT" => Expiry::At(positive(integer(words.value()?)?, 1000)?),
            b"PXAT" => Expiry::At(positive(integer(words.value()?)?, 1)?),
            _ => return Ok(false),
        };
        if self.expiry.replace(expiry).is_some() {
            return Err(SYNTAX_ERROR); // two expiry options
        }
        Ok(true)
    }

    /// The options once all are read: `ENX` needs a time, and never goes with `PERSIST`.
    fn finish(self) -> Result<Self, CommandError> {
        match (self.only_if_none, self.expiry) {
            (true, None) => Err(ENX_NEEDS_EXPIRY),
            (true, Some(Expiry::Persist)) => Err(SYNTAX_ERROR),
            _ => Ok(self),
        }
    }
}

/// An option's name, upper-cased and held inline (a write's hot path parses several: no heap).
/// Every option is a short word; a longer one, or one that is not text, reads as no name.
#[derive(Clone, Copy, PartialEq, Eq)]
struct OptName {
    len: u8,
    bytes: [u8; OptName::MAX],
}

impl OptName {
    const MAX: usize = 16;

    fn of(word: &[u8]) -> OptName {
        let mut name = OptName {
            len: 0,
            bytes: [0; OptName::MAX],
        };
        if word.len() <= OptName::MAX {
            name.bytes[..word.len()].copy_from_slice(word);
            name.bytes.make_ascii_uppercase();
            name.len = word.len() as u8;
        }
        name
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The option words of a command, read one by one; each option at most once (any case): the
/// parser marks the ones it took ([`Words::once`]), the expiry options mark themselves.
struct Words<'a, 'b> {
    rest: &'b [&'a [u8]],
    seen: u32,
}

impl<'a, 'b> Words<'a, 'b> {
    fn new(rest: &'b [&'a [u8]]) -> Words<'a, 'b> {
        Words { rest, seen: 0 }
    }

    /// The next option's name, upper-cased.
    fn name(&mut self) -> Option<OptName> {
        let (first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(OptName::of(first))
    }

    /// Marks the option numbered `bit` (below 32) as read: a syntax error the second time.
    fn once(&mut self, bit: u32) -> Result<(), CommandError> {
        let mask = 1u32 << bit;
        if self.seen & mask != 0 {
            return Err(SYNTAX_ERROR);
        }
        self.seen |= mask;
        Ok(())
    }

    /// The value of the option just named, marked as read with [`Words::once`].
    fn value_of(&mut self, bit: u32) -> Result<&'a [u8], CommandError> {
        self.once(bit)?;
        self.value()
    }

    /// The value of the option just named (a syntax error when missing).
    fn value(&mut self) -> Result<&'a [u8], CommandError> {
        let (first, rest) = self.rest.split_first().ok_or(SYNTAX_ERROR)?;
        self.rest = rest;
        Ok(first)
    }
}

/// `CTR.ADD key delta [TOKEN token] [AT ms] [EX s | PX ms | EXAT unix-s | PXAT unix-ms | PERSIST] [ENX]`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddArgs<'a> {
    pub delta: i64,
    pub token: Option<&'a [u8]>,
    pub at: Option<i64>,
    /// `EX`/`PX`/`EXAT`/`PXAT` apply when the call creates the key (with `ENX`, also on a key
    /// without a TTL); `PERSIST` removes the TTL.
    pub expiry: ExpiryArgs,
}

/// `CTR.INCREX key [BYINT increment] [LBOUND lb] [UBOUND ub] [SATURATE] [expiry] [ENX]
/// [TOKEN token] [AT ms]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncrexArgs<'a> {
    pub increment: i64,
    pub lower: Option<i64>,
    pub upper: Option<i64>,
    pub saturate: bool,
    pub expiry: ExpiryArgs,
    pub token: Option<&'a [u8]>,
    pub at: Option<i64>,
}

impl IncrexArgs<'_> {
    /// What names the write for a retry: its increment, bounds and SATURATE (a token reused
    /// with other ones is refused).
    pub fn print(&self) -> i64 {
        let mut bytes = Vec::with_capacity(27);
        bytes.extend(self.increment.to_le_bytes());
        for bound in [self.lower, self.upper] {
            bytes.push(u8::from(bound.is_some()));
            bytes.extend(bound.unwrap_or(0).to_le_bytes());
        }
        bytes.push(u8::from(self.saturate));
        crate::counter::siphash::token_fingerprint(&bytes) as i64
    }
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

/// `CTR.RECONCILE key truth [AT w]` or
/// `CTR.RECONCILE key FROM STREAM|ZSET|SET source [AT w] [EMPTYOK]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileArgs<'a> {
    pub source: TruthSource<'a>,
    pub at: Option<i64>,
    /// `EMPTYOK`: a missing source key counts 0 (without it, a missing source is refused: a
    /// mistyped name must not wipe the counter).
    pub empty_ok: bool,
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

/// A token argument: 1 to 256 bytes.
pub fn parse_token(value: &[u8]) -> Result<&[u8], CommandError> {
    token(value)
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
    let mut words = Words::new(rest);
    while let Some(name) = words.name() {
        match name.as_bytes() {
            b"TOKEN" => parsed.token = Some(token(words.value_of(0)?)?),
            b"AT" => parsed.at = Some(event_time(words.value_of(1)?)?),
            name if parsed.expiry.take(name, &mut words, BAD_EXPIRE)? => {}
            _ => return Err(SYNTAX_ERROR),
        }
    }
    parsed.expiry = parsed.expiry.finish()?;
    Ok(parsed)
}

pub fn parse_increx<'a>(args: &[&'a [u8]]) -> Result<IncrexArgs<'a>, CommandError> {
    let mut parsed = IncrexArgs {
        increment: 1,
        lower: None,
        upper: None,
        saturate: false,
        expiry: ExpiryArgs::default(),
        token: None,
        at: None,
    };
    if args.is_empty() {
        return Ok(parsed); // the bare form: nothing to look up or check
    }
    let mut words = Words::new(args);
    while let Some(name) = words.name() {
        match name.as_bytes() {
            b"BYINT" => parsed.increment = integer(words.value_of(0)?)?,
            b"LBOUND" => parsed.lower = Some(integer(words.value_of(1)?)?),
            b"UBOUND" => parsed.upper = Some(integer(words.value_of(2)?)?),
            b"SATURATE" => {
                words.once(3)?;
                parsed.saturate = true;
            }
            b"TOKEN" => parsed.token = Some(token(words.value_of(4)?)?),
            b"AT" => parsed.at = Some(event_time(words.value_of(5)?)?),
            b"BYFLOAT" => return Err(NO_FLOAT),
            name if parsed.expiry.take(name, &mut words, BAD_EXPIRE_INCREX)? => {}
            _ => return Err(SYNTAX_ERROR),
        }
    }
    if let (Some(lower), Some(upper)) = (parsed.lower, parsed.upper) {
        if lower > upper {
            return Err(BOUNDS_CROSSED);
        }
    }
    parsed.expiry = parsed.expiry.finish()?;
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
    let counted = !matches!(source, TruthSource::Given(_));
    let (empty_ok, rest) = take_flag(rest, b"EMPTYOK", counted)?;
    let mut at = None;
    options(&rest, |name, value| {
        if name != "AT" {
            return Ok(false);
        }
        if matches!(source, TruthSource::Set(_)) {
            return Err(SET_TAKES_NO_AT);
        }
        at = Some(integer(value)?);
        Ok(true)
    })?;
    Ok(ReconcileArgs {
        source,
        at,
        empty_ok,
    })
}

/// Takes a valueless option word (`flag`, any case, at most once, where an option name stands)
/// out of `rest`; the `NAME value` pairs are left. Where the flag is not `allowed`, it is left
/// in (and then refused as a syntax error by the options it is not one of).
fn take_flag<'a>(
    rest: &[&'a [u8]],
    flag: &[u8],
    allowed: bool,
) -> Result<(bool, Vec<&'a [u8]>), CommandError> {
    let mut found = false;
    let mut pairs = Vec::with_capacity(rest.len());
    let mut i = 0;
    while i < rest.len() {
        if allowed && rest[i].eq_ignore_ascii_case(flag) {
            if found {
                return Err(SYNTAX_ERROR);
            }
            found = true;
            i += 1;
            continue;
        }
        pairs.extend(rest[i..].iter().take(2));
        i += 2;
    }
    Ok((found, pairs))
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

    #[test]
    fn option_names_are_read_in_any_case_once_and_never_past_their_length() {
        let increx = |line: &str| {
            let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            parse_increx(&words).map(|p| (p.increment, p.upper, p.saturate))
        };
        assert_eq!(increx("byint 2 UbOuNd 9 saturate"), Ok((2, Some(9), true)));
        assert_eq!(
            increx("BYINT 2 byint 3"),
            Err(SYNTAX_ERROR),
            "repeated, any case"
        );
        assert_eq!(
            increx("SATURATEXXXXXXXXX"),
            Err(SYNTAX_ERROR),
            "past 16 bytes"
        );
        assert_eq!(increx("SATURATE\u{e9}"), Err(SYNTAX_ERROR), "not an option");
        assert_eq!(OptName::of(b"ub").as_bytes(), b"UB");
        let many = ["SATURATE"; 17].join(" ");
        assert_eq!(increx(&many), Err(SYNTAX_ERROR));
        for repeated in [
            "EX 10 enx ENX",
            "PERSIST persist",
            "EX 10 PX 10",
            "TOKEN a AT 1 token b",
            "at 1 AT 2",
            "LBOUND 1 lbound 2",
            "UBOUND 1 UBOUND 2",
        ] {
            assert_eq!(increx(repeated), Err(SYNTAX_ERROR), "{repeated}");
        }
        assert_eq!(
            add("1 TOKEN a EX 10 ENX token b").map(|_| ()),
            Err(SYNTAX_ERROR)
        );
    }

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
        assert_eq!(a.expiry.expiry, Some(Expiry::In(10_000)));
        assert_eq!(
            add("-1 PX 250").unwrap().expiry.expiry,
            Some(Expiry::In(250))
        );
        let at = add("1 EXAT 1700000000 ENX").unwrap().expiry;
        assert_eq!(at.expiry, Some(Expiry::At(1_700_000_000_000)));
        assert!(at.only_if_none);
        assert_eq!(add("1 pxat 5").unwrap().expiry.expiry, Some(Expiry::At(5)));
        assert_eq!(
            add("1 PERSIST").unwrap().expiry.expiry,
            Some(Expiry::Persist)
        );
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
            "1 EX 1 PERSIST",
            "1 EXAT 5 PXAT 5",
            "1 PERSIST ENX",
            "1 ENX ENX EX 1",
            "1 EXAT",
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
        assert_eq!(add("1 EXAT 0"), Err(BAD_EXPIRE));
        assert_eq!(add("1 PXAT -1"), Err(BAD_EXPIRE));
        assert_eq!(add("1 ENX"), Err(ENX_NEEDS_EXPIRY));
        assert_eq!(parse_add(&[]), Err(SYNTAX_ERROR));
    }

    fn increx(line: &str) -> Result<IncrexArgs<'_>, CommandError> {
        let words: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
        parse_increx(&words)
    }

    #[test]
    fn increx_takes_inc_bounds_saturate_expiry_and_tokens() {
        let bare = increx("").unwrap();
        assert_eq!((bare.increment, bare.lower, bare.upper), (1, None, None));
        assert!(!bare.saturate && bare.expiry == ExpiryArgs::default());
        let full = increx("byint -3 LBOUND -10 ubound 10 SATURATE EX 60 ENX TOKEN t AT 5").unwrap();
        assert_eq!(
            (full.increment, full.lower, full.upper, full.saturate),
            (-3, Some(-10), Some(10), true)
        );
        assert_eq!(full.expiry.expiry, Some(Expiry::In(60_000)));
        assert!(full.expiry.only_if_none);
        assert_eq!((full.token, full.at), (Some(&b"t"[..]), Some(5)));
        assert_eq!(increx("LBOUND 5 UBOUND 5").unwrap().lower, Some(5));
        assert_eq!(increx("LBOUND 6 UBOUND 5"), Err(BOUNDS_CROSSED));
        assert_eq!(increx("BYFLOAT 1.5"), Err(NO_FLOAT));
        assert_eq!(increx("BYINT 1.5"), Err(NOT_AN_INTEGER));
        assert_eq!(increx("EX 0"), Err(BAD_EXPIRE_INCREX));
        assert_eq!(increx("ENX"), Err(ENX_NEEDS_EXPIRY));
        for bad in [
            "SATURATE SATURATE",
            "BYINT",
            "PERSIST EX 1",
            "PERSIST ENX",
            "NOPE",
        ] {
            assert_eq!(increx(bad), Err(SYNTAX_ERROR), "{bad}");
        }
        assert_ne!(
            increx("BYINT 2").unwrap().print(),
            increx("BYINT 2 SATURATE").unwrap().print()
        );
        assert_eq!(
            increx("BYINT 2 EX 5").unwrap().print(),
            increx("TOKEN x BYINT 2").unwrap().print(),
            "the expiry and the token do not name the write"
        );
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
                at: None,
                empty_ok: false,
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
                at: Some(5),
                empty_ok: false,
            }
        );
        // EMPTYOK: a missing source counts 0; only with FROM, once, anywhere among the options.
        assert!(r("FROM STREAM ev EMPTYOK").unwrap().empty_ok);
        assert_eq!(
            r("FROM ZSET z emptyok AT 5").unwrap(),
            ReconcileArgs {
                source: TruthSource::SortedSet(b"z"),
                at: Some(5),
                empty_ok: true,
            }
        );
        assert!(r("FROM SET s EMPTYOK").unwrap().empty_ok);
        assert_eq!(r("FROM SET s EMPTYOK EMPTYOK"), Err(SYNTAX_ERROR));
        assert_eq!(
            r("100 EMPTYOK"),
            Err(SYNTAX_ERROR),
            "a given truth has no source"
        );
        assert_eq!(r("FROM STREAM ev AT EMPTYOK"), Err(NOT_AN_INTEGER));
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
