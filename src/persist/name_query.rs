//! The shape two bus exchanges share (`holder_check_msg`, `admission_msg`): a request naming one
//! holder, and an answer of one code.
//!
//! ```text
//! request:  u8 version, u64 LE request id, (uvarint len, holder name)
//! answer:   u8 version, u64 LE request id, u8 code
//! ```

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::spread::MAX_HOLDER_NAME;

pub fn encode_request(version: u8, id: u64, holder: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(version).fixed_u64(id).bytes(holder);
    w.finish()
}

/// The request's id and name (never empty); `family` names the message in errors.
pub fn decode_request<'a>(
    buf: &'a [u8],
    version: u8,
    family: &str,
) -> Result<(u64, &'a [u8]), DecodeError> {
    let mut r = Reader::open_message(buf, version, family)?;
    let id = r.fixed_u64()?;
    let holder = r.bytes(MAX_HOLDER_NAME)?;
    if holder.is_empty() {
        return decode_error(format!("{family} for an empty name"));
    }
    r.end((id, holder), family)
}

pub fn encode_answer(version: u8, id: u64, code: u8) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(version).fixed_u64(id).u8(code);
    w.finish()
}

/// The answer's id and code (the caller reads the code).
pub fn decode_answer(buf: &[u8], version: u8, family: &str) -> Result<(u64, u8), DecodeError> {
    let mut r = Reader::open_message(buf, version, family)?;
    let id = r.fixed_u64()?;
    let code = r.u8()?;
    r.end((id, code), family)
}
