//! The cluster-bus messages of the orphan audit (see `crate::counter::audit`): a master holding
//! holders asks the master serving each carried home name's slot whether the spread lives, and
//! that master answers each question.
//!
//! ```text
//! ask:     u8 version (= 2), u64 LE request id, uvarint n (1..=1024), n x question
//! answer:  u8 version (= 2), u64 LE request id (the ask's), uvarint n (1..=1024),
//!          n x (question, u8 answer: 0 lives, 1 gone, 2 unsure)
//! question: u64 LE spread id (!= 0), (uvarint len, home name carried by the holders)
//! ```
//! Version 1 (an earlier module) has no request id: its ask is answered in version 1, and its
//! answers are dropped, since an answer acts only as the answer to the question its receiver
//! last asked, under that request id, of the master that answers (a late copy of an answer to
//! an earlier ask, a "gone" read while a home was missing for a moment, never counts as a fresh
//! one). Anything malformed, including an unknown version or answer, is refused by the decoder
//! and dropped (the asker asks again).

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::audit::{Answer, Question};
use crate::counter::spread::MAX_HOME_NAME;

/// Without a request id (an earlier module's).
const VERSION_1: u8 = 1;
const VERSION: u8 = 2;
const FAMILY: &str = "audit message";
/// Most questions in one message.
pub const MAX_QUESTIONS: usize = 1024;

fn write_question(w: &mut Writer, q: &Question) {
    w.fixed_u64(q.spread_id).bytes(&q.home);
}

fn read_question(r: &mut Reader) -> Result<Question, DecodeError> {
    let spread_id = match r.fixed_u64()? {
        0 => return decode_error("spread id 0 in an audit message"),
        id => id,
    };
    let home = r.key_name(MAX_HOME_NAME, FAMILY)?;
    Ok(Question { spread_id, home })
}

fn encode_with<T>(
    request: Option<u64>,
    items: &[T],
    mut each: impl FnMut(&mut Writer, &T),
) -> Vec<u8> {
    let mut w = Writer::new();
    match request {
        Some(id) => w.u8(VERSION).fixed_u64(id),
        None => w.u8(VERSION_1),
    };
    w.uvarint(items.len() as u64);
    for item in items {
        each(&mut w, item);
    }
    w.finish()
}

/// The request id (None in version 1) and the items.
fn decode_with<T>(
    buf: &[u8],
    mut each: impl FnMut(&mut Reader) -> Result<T, DecodeError>,
) -> Result<(Option<u64>, Vec<T>), DecodeError> {
    let mut r = Reader::new(buf);
    let request = match r.u8()? {
        VERSION_1 => None,
        VERSION => Some(r.fixed_u64()?),
        other => return decode_error(format!("unknown {FAMILY} version {other}")),
    };
    // Each item takes at least 8 + 2 bytes.
    let n = r.count(MAX_QUESTIONS, 10)?;
    if n == 0 {
        return decode_error("an audit message without questions");
    }
    let items = (0..n)
        .map(|_| each(&mut r))
        .collect::<Result<Vec<_>, _>>()?;
    r.end((request, items), FAMILY)
}

/// An ask under the request id `request`.
pub fn encode_ask(request: u64, questions: &[Question]) -> Vec<u8> {
    encode_with(Some(request), questions, write_question)
}

/// The ask's request id (None: an earlier module's, version 1) and its questions.
pub fn decode_ask(buf: &[u8]) -> Result<(Option<u64>, Vec<Question>), DecodeError> {
    decode_with(buf, read_question)
}

/// The answers to the ask `request` (None: an earlier module's ask, answered in its version).
pub fn encode_answers(request: Option<u64>, answers: &[(Question, Answer)]) -> Vec<u8> {
    encode_with(request, answers, |w, (q, a)| {
        write_question(w, q);
        w.u8(a.code());
    })
}

/// An answers message: its request id (None: version 1) and the answers.
pub type Answers = (Option<u64>, Vec<(Question, Answer)>);

/// The answers' request id (None: version 1) and the answers.
pub fn decode_answers(buf: &[u8]) -> Result<Answers, DecodeError> {
    decode_with(buf, |r| {
        let q = read_question(r)?;
        match Answer::from_code(r.u8()?) {
            Some(a) => Ok((q, a)),
            None => decode_error("an unknown audit answer"),
        }
    })
}

/// Splits items into runs that fit messages of at most `max_bytes` (home names at their
/// longest varint) and [`MAX_QUESTIONS`] items.
pub fn chunks<T>(items: &[T], home: impl Fn(&T) -> &[u8], max_bytes: usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 19);
    for (i, item) in items.iter().enumerate() {
        let n = 8 + 10 + home(item).len() + 1;
        if i > start && (size + n > max_bytes || i - start >= MAX_QUESTIONS) {
            out.push(&items[start..i]);
            (start, size) = (i, 19);
        }
        size += n;
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: u64, home: &[u8]) -> Question {
        Question {
            spread_id: id,
            home: home.to_vec(),
        }
    }

    #[test]
    fn messages_roundtrip_and_every_truncation_is_refused() {
        let asks = vec![q(u64::MAX, b"{user:1}:views"), q(2, b"\x00\xff")];
        let buf = encode_ask(77, &asks);
        assert_eq!(decode_ask(&buf), Ok((Some(77), asks.clone())));
        let answers = vec![
            (asks[0].clone(), Answer::Gone),
            (asks[1].clone(), Answer::Unsure),
        ];
        let abuf = encode_answers(Some(77), &answers);
        assert_eq!(decode_answers(&abuf), Ok((Some(77), answers.clone())));
        let v1 = encode_answers(None, &answers);
        assert_eq!(
            v1[0], VERSION_1,
            "an earlier module's ask is answered in its version"
        );
        assert_eq!(decode_answers(&v1), Ok((None, answers)));
        for len in 0..buf.len() {
            assert!(decode_ask(&buf[..len]).is_err(), "prefix {len}");
        }
        for len in 0..abuf.len() {
            assert!(decode_answers(&abuf[..len]).is_err(), "prefix {len}");
        }
        let mut trailing = buf.clone();
        trailing.push(0);
        assert!(decode_ask(&trailing).is_err(), "trailing byte");
    }

    #[test]
    fn an_earlier_modules_ask_decodes_without_a_request_id() {
        let mut w = Writer::new();
        w.u8(VERSION_1).uvarint(1);
        write_question(&mut w, &q(5, b"k"));
        assert_eq!(decode_ask(&w.finish()), Ok((None, vec![q(5, b"k")])));
    }

    #[test]
    fn forged_messages_are_refused() {
        let mut other = encode_ask(1, &[q(2, b"k")]);
        other[0] = 3;
        assert!(decode_ask(&other).is_err(), "another version");
        assert!(decode_ask(&encode_ask(1, &[])).is_err(), "no questions");
        assert!(
            decode_ask(&encode_ask(1, &[q(0, b"k")])).is_err(),
            "spread id 0"
        );
        assert!(
            decode_ask(&encode_ask(1, &[q(2, b"")])).is_err(),
            "empty home"
        );
        let mut bad = encode_answers(Some(1), &[(q(2, b"k"), Answer::Lives)]);
        *bad.last_mut().unwrap() = 3;
        assert!(decode_answers(&bad).is_err(), "unknown answer");
        let mut w = Writer::new();
        w.u8(VERSION).fixed_u64(1).uvarint(1_000_000);
        assert!(
            decode_ask(&w.finish()).is_err(),
            "a count beyond the payload"
        );
    }

    #[test]
    fn chunks_stay_under_their_size_and_carry_every_item() {
        let items: Vec<Question> = (1..=3000).map(|i| q(i, b"home-name")).collect();
        let parts = chunks(&items, |q| &q.home, 4096);
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), 3000);
        for p in &parts {
            assert!(encode_ask(u64::MAX, p).len() <= 4096 && p.len() <= MAX_QUESTIONS);
        }
    }
}
