//! Argument parsing shared by every command, with the contract's exact error texts.

use crate::ffi::CommandError;

pub const NOT_AN_INTEGER: CommandError =
    CommandError::fixed("ERR value is not an integer or out of range");
pub const SYNTAX_ERROR: CommandError = CommandError::fixed("ERR syntax error");

/// Parses a signed 64-bit integer exactly as Redis does (`string2ll`): an optional `-`, no `+`,
/// no spaces, no leading zeros, no overflow.
#[inline]
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    // Up to 18 digits cannot overflow: one pass without checked arithmetic (every delta a
    // client sends in practice; this runs on every add).
    if digits.len() > 18 {
        return parse_long_digits(negative, digits);
    }
    let mut acc: i64 = 0;
    for &d in digits {
        let digit = d.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        acc = acc * 10 + i64::from(digit);
    }
    Some(if negative { -acc } else { acc })
}

/// 19 digits or more (no leading zero): checked, since they may overflow.
#[cold]
#[inline(never)]
fn parse_long_digits(negative: bool, digits: &[u8]) -> Option<i64> {
    if digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Accumulate negatively so that i64::MIN parses without overflow.
    let mut acc: i64 = 0;
    for d in digits {
        acc = acc.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if negative {
        Some(acc)
    } else {
        acc.checked_neg()
    }
}

/// An integer argument, or the contract's integer error.
#[inline]
pub fn integer(bytes: &[u8]) -> Result<i64, CommandError> {
    parse_i64(bytes).ok_or(NOT_AN_INTEGER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_redis_accepts() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"42"), Some(42));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
    }

    #[test]
    fn refuses_what_redis_refuses() {
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"1.0",
            b"abc",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"1\0",
            b"12a",
            b"1-",
            b"-/",
            b"1:",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn matches_std_parse_for_canonical_numbers() {
        for v in [
            1i64,
            -7,
            1_000_000,
            i64::MAX - 1,
            i64::MIN + 1,
            123_456_789_012,
            // The last lengths of the one-pass path and the first of the checked one.
            999_999_999_999_999_999,
            -999_999_999_999_999_999,
            1_000_000_000_000_000_000,
            -1_000_000_000_000_000_000,
        ] {
            assert_eq!(parse_i64(v.to_string().as_bytes()), Some(v));
        }
    }
}
