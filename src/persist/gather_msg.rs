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
//! ```
//! Answer 3 is sent only for a holder that has a floor, which only a floored spread counter
//! across masters gives a holder: a cluster that never spread one never sends it.
//! Answers come in request order. Anything malformed is dropped by the receiver (the asker
//! then times out, which is the same outcome as a lost message).

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::spread::{MAX_HOLDERS, MAX_HOLDER_NAME};

const VERSION: u8 = 1;
/// Longest error text carried back.
const MAX_ERROR_TEXT: usize = 256;

/// What a master answers for one holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderAnswer {
    Value(i64),
    /// A holder with a floor of its own (a floored spread counter's holder): value, floor.
    Floored(i64, i64),
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

pub fn decode_request(buf: &[u8]) -> Result<(u64, Vec<&[u8]>), DecodeError> {
    let mut r = Reader::open_message(buf, VERSION, FAMILY)?;
    let id = r.fixed_u64()?;
    let n = r.count(MAX_HOLDERS, 2)?;
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
    let n = r.count(MAX_HOLDERS, 1)?;
    let answers = (0..n)
        .map(|_| {
            Ok(match r.u8()? {
                0 => HolderAnswer::Value(r.ivarint()?),
                1 => HolderAnswer::NotHere,
                2 => HolderAnswer::Failed(
                    String::from_utf8_lossy(r.bytes(MAX_ERROR_TEXT)?).into_owned(),
                ),
                3 => HolderAnswer::Floored(r.ivarint()?, r.ivarint()?),
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
            HolderAnswer::Failed("WRONGTYPE é".repeat(40)),
        ];
        let (id, back) = decode_response(&encode_response(7, &answers)).unwrap();
        assert_eq!(id, 7);
        assert_eq!(back[..3], answers[..3]);
        let HolderAnswer::Failed(text) = &back[3] else {
            panic!("{back:?}")
        };
        assert!(text.len() <= MAX_ERROR_TEXT && text.starts_with("WRONGTYPE é"));
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
    }
}
