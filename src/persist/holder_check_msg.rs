//! The cluster-bus messages of a holder check: before a client's write creates a key named like
//! a holder, the key's master asks the master of the home that name carries whether that home
//! lists it (`crate::runtime::holder_check`).
//!
//! ```text
//! request:  u8 version (= 1), u64 LE request id, (uvarint len, holder name)
//! response: u8 version (= 1), u64 LE request id, u8 verdict: 0 listed, 1 not listed,
//!           2 unsure (the home's slot is not served there, or is moving)
//! ```
//! A request is idempotent and a response acts only on a request id its receiver sent to that
//! node and has not had answered, so a late or repeated copy is harmless. Anything malformed,
//! including an unknown version or verdict, is refused by the decoder and dropped (the asker
//! then times out, as for a lost message).

use super::codec::{decode_error, DecodeError};
use super::name_query;

const VERSION: u8 = 1;
const FAMILY: &str = "holder check message";

/// What the home's master says of a holder name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A living home of that spread lists it (current or folding back).
    Listed,
    /// No home of that spread lists it: a look-alike.
    NotListed,
    /// That master cannot tell: it does not serve the home's slot (any more), or the slot is
    /// being handed over.
    Unsure,
}

impl Verdict {
    fn code(self) -> u8 {
        match self {
            Verdict::Listed => 0,
            Verdict::NotListed => 1,
            Verdict::Unsure => 2,
        }
    }

    fn from_code(code: u8) -> Result<Verdict, DecodeError> {
        match code {
            0 => Ok(Verdict::Listed),
            1 => Ok(Verdict::NotListed),
            2 => Ok(Verdict::Unsure),
            other => decode_error(format!("unknown holder check verdict {other}")),
        }
    }
}

pub fn encode_request(id: u64, holder: &[u8]) -> Vec<u8> {
    name_query::encode_request(VERSION, id, holder)
}

pub fn decode_request(buf: &[u8]) -> Result<(u64, &[u8]), DecodeError> {
    name_query::decode_request(buf, VERSION, FAMILY)
}

pub fn encode_response(id: u64, answer: Verdict) -> Vec<u8> {
    name_query::encode_answer(VERSION, id, answer.code())
}

pub fn decode_response(buf: &[u8]) -> Result<(u64, Verdict), DecodeError> {
    let (id, code) = name_query::decode_answer(buf, VERSION, FAMILY)?;
    Ok((id, Verdict::from_code(code)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::spread::MAX_HOLDER_NAME;

    #[test]
    fn requests_and_responses_round_trip() {
        let name = b"{ctr.00000000000000ab.3.0}page:views";
        let req = encode_request(42, name);
        assert_eq!(decode_request(&req), Ok((42, &name[..])));
        for v in [Verdict::Listed, Verdict::NotListed, Verdict::Unsure] {
            assert_eq!(decode_response(&encode_response(7, v)), Ok((7, v)));
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        let req = encode_request(1, b"{ctr.1.0}k");
        for cut in 0..req.len() {
            assert!(decode_request(&req[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = req.clone();
        trailing.push(0);
        assert!(decode_request(&trailing).is_err());
        let mut other_version = req.clone();
        other_version[0] = 2;
        assert!(decode_request(&other_version).is_err());
        assert!(decode_request(&encode_request(1, b"")).is_err());
        let too_long = vec![b'k'; MAX_HOLDER_NAME + 1];
        assert!(decode_request(&encode_request(1, &too_long)).is_err());

        let mut bad_verdict = encode_response(1, Verdict::Listed);
        *bad_verdict.last_mut().unwrap() = 3;
        assert!(decode_response(&bad_verdict).is_err());
        let resp = encode_response(1, Verdict::NotListed);
        for cut in 0..resp.len() {
            assert!(decode_response(&resp[..cut]).is_err(), "cut at {cut}");
        }
    }
}
