//! The cluster-bus messages of a holder's admission: before a grow lists a new holder name, the
//! home's master asks the master of that name whether the name is free there
//! (`crate::runtime::holder_admission`).
//!
//! ```text
//! request:  u8 version (= 1), u64 LE request id, (uvarint len, holder name)
//! response: u8 version (= 1), u64 LE request id, u8 answer: 0 free (no key there),
//!           1 taken (a key of any type), 2 unsure (the name's slot is not served there, or
//!           is moving)
//! ```
//! A request only reads, so it is idempotent; a response acts only on a request id its receiver
//! sent to that node and has not had answered. Anything malformed, including an unknown version
//! or answer, is refused by the decoder and dropped (the asker asks again, as for a lost
//! message).

use super::codec::{decode_error, DecodeError};
use super::name_query;

const VERSION: u8 = 1;
const FAMILY: &str = "holder admission message";

/// What the master of a planned holder name says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameAnswer {
    /// No key of any type sits at the name.
    Free,
    /// A key sits there: the grow must not list the name.
    Taken,
    /// That master cannot tell: it does not serve the name's slot (any more), or the slot is
    /// moving.
    Unsure,
}

impl NameAnswer {
    fn code(self) -> u8 {
        match self {
            NameAnswer::Free => 0,
            NameAnswer::Taken => 1,
            NameAnswer::Unsure => 2,
        }
    }

    fn from_code(code: u8) -> Result<NameAnswer, DecodeError> {
        match code {
            0 => Ok(NameAnswer::Free),
            1 => Ok(NameAnswer::Taken),
            2 => Ok(NameAnswer::Unsure),
            other => decode_error(format!("unknown holder admission answer {other}")),
        }
    }
}

pub fn encode_request(id: u64, holder: &[u8]) -> Vec<u8> {
    name_query::encode_request(VERSION, id, holder)
}

pub fn decode_request(buf: &[u8]) -> Result<(u64, &[u8]), DecodeError> {
    name_query::decode_request(buf, VERSION, FAMILY)
}

pub fn encode_response(id: u64, answer: NameAnswer) -> Vec<u8> {
    name_query::encode_answer(VERSION, id, answer.code())
}

pub fn decode_response(buf: &[u8]) -> Result<(u64, NameAnswer), DecodeError> {
    let (id, code) = name_query::decode_answer(buf, VERSION, FAMILY)?;
    Ok((id, NameAnswer::from_code(code)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_read_back_and_malformed_ones_are_refused() {
        let request = encode_request(9, b"{ctr.00000000000000ab.2.5}h");
        assert_eq!(
            decode_request(&request).unwrap(),
            (9, &b"{ctr.00000000000000ab.2.5}h"[..])
        );
        for answer in [NameAnswer::Free, NameAnswer::Taken, NameAnswer::Unsure] {
            assert_eq!(
                decode_response(&encode_response(7, answer)).unwrap(),
                (7, answer)
            );
        }
        let mut unknown = encode_response(7, NameAnswer::Free);
        *unknown.last_mut().unwrap() = 3;
        assert!(decode_response(&unknown).is_err());
        assert!(decode_request(&encode_request(1, b"")).is_err());
        for cut in 0..request.len() {
            assert!(decode_request(&request[..cut]).is_err(), "{cut}");
        }
        let mut newer = request.clone();
        newer[0] = 2;
        assert!(decode_request(&newer).is_err());
    }
}
