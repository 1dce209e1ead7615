//! The cluster-bus messages of a gathered read of a spread counter: the home's master asks
//! another master for some holders' values, and that master answers for each one.
//!
//! ```text
//! request:  u8 version (= 1), u64 LE request id, uvarint n (>= 1), n x (uvarint len, name)
//! response: u8 version (= 1), u64 LE request id, uvarint n, n x answer
//! answer:   u8 0 + ivarint value   the holder's value (0 when the key is missing)
//!           u8 1                   not served here (the slot is elsewhere or migrating)
//!           u8 2 + (uvarint len, text)  the read failed (for example WRONGTYPE)
//!           u8 3 + ivarint value + ivarint floor   a floored holder's value and own floor
//!           u8 4 + ivarint value + ivarint ceiling + u8 has_floor (0 or 1) [+ ivarint floor]
//!                                  a ceiled holder's value, own ceiling, and own floor if any
//! ```
//! Answer 3 is sent only for a holder that has a floor and no ceiling, which only a floored
//! spread counter across masters gives a holder: a cluster that never spread one never sends
//! it. Answer 4 is sent only for a holder that has a ceiling or folds ceiling units home (a
//! ceiled spread counter's, with its floor when the spread has both bounds): a cluster that
//! never spread a ceiled counter sends what it sent before ceilings, byte for byte. A module
//! from before ceilings drops a response carrying answer 4 as malformed, which is why every
//! master is upgraded before the first ceiled spread (docs/CLUSTER.md).
//! Answers come in request order. Anything malformed is dropped by the receiver (the asker
//! then times out, which is the same outcome as a lost message).
//!
//! A receiver takes at most [`MAX_REQUEST_NAMES`] names in one request (and answers as many),
//! so an asker splits what it asks one master into requests of at most that many names and
//! about [`MAX_REQUEST_BYTES`] bytes ([`split_request`]), each with its own request id: a read
//! of several homes of 1,024 holders asks one master for more names than one request carries.

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::spread::{MAX_HOLDERS, MAX_HOLDER_NAME};

const VERSION: u8 = 1;
/// The most names a receiver accepts in one request (and so the most answers in a response).
pub const MAX_REQUEST_NAMES: usize = MAX_HOLDERS;
/// The most name bytes an asker puts in one request (one name longer than this goes alone):
/// bus messages stay small, and a resend to a master that does not answer copies little.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;
/// Longest error text carried back.
const MAX_ERROR_TEXT: usize = 256;

/// What a master answers for one holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderAnswer {
    Value(i64),
    /// A holder with a floor of its own and no ceiling (a floored spread counter's holder):
    /// value, floor.
    Floored(i64, i64),
    /// A holder with a ceiling of its own (a ceiled spread counter's holder), and its own
    /// floor when it has one too (a spread with both bounds).
    Ceiled {
        value: i64,
        ceiling: i64,
        floor: Option<i64>,
    },
    NotHere,
    Failed(String),
}

pub fn encode_request<'a>(id: u64, names: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).fixed_u64(id).uvarint(names.len() as u64);
    for name in names {
        w.bytes(name);
    }
    w.finish()
}

/// Splits names of the given lengths, in order, into consecutive ranges, each one request: at
/// most [`MAX_REQUEST_NAMES`] names and, unless a single name is longer, at most
/// [`MAX_REQUEST_BYTES`] bytes of names.
pub fn split_request(name_lens: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (i, &len) in name_lens.iter().enumerate() {
        let count = i - start;
        if count > 0
            && (count == MAX_REQUEST_NAMES || bytes.saturating_add(len) > MAX_REQUEST_BYTES)
        {
            ranges.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(len);
    }
    if start < name_lens.len() {
        ranges.push(start..name_lens.len());
    }
    ranges
}

pub fn decode_request(buf: &[u8]) -> Result<(u64, Vec<&[u8]>), DecodeError> {
    let mut r = Reader::open_message(buf, VERSION, FAMILY)?;
    let id = r.fixed_u64()?;
    let n = r.count(MAX_REQUEST_NAMES, 2)?;
    if n == 0 {
        return decode_error("gather request for no holders");
    }
    let names = (0..n)
        .map(|_| r.bytes(MAX_HOLDER_NAME))
        .collect::<Result<Vec<_>, _>>()?;
    r.end((), FAMILY)?;
    Ok((id, names))
}

pub fn encode_response(id: u64, answers: &[HolderAnswer]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).fixed_u64(id).uvarint(answers.len() as u64);
    for a in answers {
        match a {
            HolderAnswer::Value(v) => w.u8(0).ivarint(*v),
            HolderAnswer::Floored(v, f) => w.u8(3).ivarint(*v).ivarint(*f),
            HolderAnswer::Ceiled {
                value,
                ceiling,
                floor,
            } => {
                w.u8(4).ivarint(*value).ivarint(*ceiling);
                match floor {
                    Some(f) => w.u8(1).ivarint(*f),
                    None => w.u8(0),
                }
            }
            HolderAnswer::NotHere => w.u8(1),
            HolderAnswer::Failed(text) => {
                let end = text.len().min(MAX_ERROR_TEXT);
                let cut = (0..=end).rev().find(|&i| text.is_char_boundary(i));
                w.u8(2).bytes(&text.as_bytes()[..cut.unwrap_or(0)])
            }
        };
    }
    w.finish()
}

pub fn decode_response(buf: &[u8]) -> Result<(u64, Vec<HolderAnswer>), DecodeError> {
    let mut r = Reader::open_message(buf, VERSION, FAMILY)?;
    let id = r.fixed_u64()?;
    let n = r.count(MAX_REQUEST_NAMES, 1)?;
    let answers = (0..n)
        .map(|_| {
            Ok(match r.u8()? {
                0 => HolderAnswer::Value(r.ivarint()?),
                1 => HolderAnswer::NotHere,
                2 => HolderAnswer::Failed(
                    String::from_utf8_lossy(r.bytes(MAX_ERROR_TEXT)?).into_owned(),
                ),
                3 => HolderAnswer::Floored(r.ivarint()?, r.ivarint()?),
                4 => HolderAnswer::Ceiled {
                    value: r.ivarint()?,
                    ceiling: r.ivarint()?,
                    floor: match r.u8()? {
                        0 => None,
                        1 => Some(r.ivarint()?),
                        other => return decode_error(format!("ceiled answer floor flag {other}")),
                    },
                },
                other => return decode_error(format!("unknown holder answer {other}")),
            })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    r.end((), FAMILY)?;
    Ok((id, answers))
}

const FAMILY: &str = "gather message";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_roundtrip() {
        let names: Vec<&[u8]> = vec![b"{ctr.1.0}k", b"{ctr.2.7}k\x00\xff"];
        let buf = encode_request(u64::MAX, names.iter().copied());
        assert_eq!(decode_request(&buf).unwrap(), (u64::MAX, names));
        let answers = vec![
            HolderAnswer::Value(i64::MIN),
            HolderAnswer::NotHere,
            HolderAnswer::Floored(-3, i64::MIN),
            HolderAnswer::Ceiled {
                value: i64::MAX,
                ceiling: i64::MAX,
                floor: None,
            },
            HolderAnswer::Ceiled {
                value: -3,
                ceiling: 0,
                floor: Some(i64::MIN),
            },
            HolderAnswer::Failed("WRONGTYPE é".repeat(40)),
        ];
        let (id, back) = decode_response(&encode_response(7, &answers)).unwrap();
        assert_eq!(id, 7);
        assert_eq!(back[..5], answers[..5]);
        let HolderAnswer::Failed(text) = &back[5] else {
            panic!("{back:?}")
        };
        assert!(text.len() <= MAX_ERROR_TEXT && text.starts_with("WRONGTYPE é"));
    }

    #[test]
    fn requests_are_split_to_the_receivers_limits() {
        assert!(split_request(&[]).is_empty());
        assert_eq!(split_request(&[10; 3]), vec![0..3]);
        // Many short names: MAX_REQUEST_NAMES per request, every name once, in order.
        let short = vec![1; 2 * MAX_REQUEST_NAMES + 5];
        let ranges = split_request(&short);
        assert_eq!(ranges, vec![0..1024, 1024..2048, 2048..2053]);
        // Long names: by bytes; a name longer than the byte bound goes alone.
        let long = vec![1088; 200];
        let ranges = split_request(&long);
        assert!(ranges.iter().all(|r| r.len() * 1088 <= MAX_REQUEST_BYTES));
        assert_eq!(ranges.iter().map(|r| r.len()).sum::<usize>(), 200);
        assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
        let huge = [MAX_REQUEST_BYTES + 1, 5, MAX_REQUEST_BYTES + 1];
        assert_eq!(split_request(&huge), vec![0..1, 1..2, 2..3]);
        // Each split request decodes at the receiver, with its names in order.
        let names: Vec<Vec<u8>> = (0..3000)
            .map(|i| format!("{{ctr.{i}.0}}k").into_bytes())
            .collect();
        let lens: Vec<usize> = names.iter().map(Vec::len).collect();
        let mut back = Vec::new();
        for r in split_request(&lens) {
            let buf = encode_request(1, names[r].iter().map(Vec::as_slice));
            back.extend(
                decode_request(&buf)
                    .unwrap()
                    .1
                    .into_iter()
                    .map(<[u8]>::to_vec),
            );
        }
        assert_eq!(back, names);
        // One request over the receiver's limit is refused there.
        let over = encode_request(1, names[..MAX_REQUEST_NAMES + 1].iter().map(Vec::as_slice));
        assert!(decode_request(&over).is_err());
    }

    #[test]
    fn malformed_messages_are_refused() {
        let buf = encode_request(1, [&b"a"[..]].into_iter());
        for len in 0..buf.len() {
            assert!(decode_request(&buf[..len]).is_err(), "prefix {len}");
        }
        let mut trailing = buf.clone();
        trailing.push(0);
        assert!(decode_request(&trailing).is_err());
        assert!(decode_request(&encode_request(1, std::iter::empty())).is_err());
        let mut wrong = buf;
        wrong[0] = 9;
        assert!(decode_request(&wrong).is_err());
        let mut bad = encode_response(1, &[HolderAnswer::NotHere]);
        *bad.last_mut().unwrap() = 3;
        assert!(decode_response(&bad).is_err());
        // An answer kind this version does not know is refused, with or without bytes after.
        for kind in [5u8, 0xff] {
            let mut unknown = encode_response(1, &[HolderAnswer::NotHere]);
            *unknown.last_mut().unwrap() = kind;
            assert!(decode_response(&unknown).is_err(), "kind {kind}");
            unknown.extend_from_slice(&[2, 4, 0]);
            assert!(
                decode_response(&unknown).is_err(),
                "kind {kind}, bytes after"
            );
        }
    }

    /// Ceiled answers (kind 4): every truncation is refused, so is a floor flag other than 0
    /// or 1 and a byte after the last answer; none panics.
    #[test]
    fn malformed_ceiled_answers_are_refused() {
        let answers = [
            HolderAnswer::Ceiled {
                value: 10,
                ceiling: 40,
                floor: None,
            },
            HolderAnswer::Ceiled {
                value: -300,
                ceiling: 5,
                floor: Some(-8000),
            },
        ];
        for one in &answers {
            let buf = encode_response(1, std::slice::from_ref(one));
            assert_eq!(decode_response(&buf).unwrap().1, std::slice::from_ref(one));
            for len in 0..buf.len() {
                assert!(
                    decode_response(&buf[..len]).is_err(),
                    "{one:?} prefix {len}"
                );
            }
            let mut trailing = buf.clone();
            trailing.push(0);
            assert!(decode_response(&trailing).is_err());
        }
        // The floor flag is the byte after the ceiling: 10 and 40 are one byte each.
        let mut flag = encode_response(1, &answers[..1]);
        assert_eq!(flag[flag.len() - 4..], [4, 20, 80, 0]);
        for bad in [2u8, 0x80, 0xff] {
            *flag.last_mut().unwrap() = bad;
            assert!(decode_response(&flag).is_err(), "flag {bad}");
            let mut with_floor = flag.clone();
            with_floor.push(0);
            assert!(
                decode_response(&with_floor).is_err(),
                "flag {bad} and a floor"
            );
        }
    }

    /// A floored holder without a ceiling is still answer 3, byte for byte: a cluster that
    /// never ceiled a spread sends what it sent before answer 4 existed.
    #[test]
    fn a_floored_answer_is_unchanged_by_ceilings() {
        let floored = encode_response(1, &[HolderAnswer::Floored(10, 2)]);
        assert_eq!(floored[floored.len() - 3..], [3, 20, 4]);
        let plain = encode_response(1, &[HolderAnswer::Value(-3)]);
        assert_eq!(plain[plain.len() - 2..], [0, 5]);
    }
}
