//! The cluster-bus messages of the orphan audit (see `crate::counter::audit`): a master holding
//! holders asks the master serving each carried home name's slot whether the spread lives, and
//! that master answers each question.
//!
//! ```text
//! ask:     u8 version (= 1), uvarint n (1..=1024), n x question
//! answer:  u8 version (= 1), uvarint n (1..=1024), n x (question, u8 answer: 0 lives,
//!          1 gone, 2 unsure)
//! question: u64 LE spread id (!= 0), (uvarint len, home name carried by the holders)
//! ```
//! A question is idempotent and an answer only acts on a question its receiver asked, so a
//! resend or a late copy is harmless. Anything malformed, including an unknown version or
//! answer, is refused by the decoder and dropped (the asker asks again).

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::audit::{Answer, Question};
use crate::counter::spread::MAX_HOME_NAME;

const VERSION: u8 = 1;
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

fn encode_with<T>(items: &[T], mut each: impl FnMut(&mut Writer, &T)) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).uvarint(items.len() as u64);
    for item in items {
        each(&mut w, item);
    }
    w.finish()
}

fn decode_with<T>(
    buf: &[u8],
    mut each: impl FnMut(&mut Reader) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    let mut r = Reader::open_message(buf, VERSION, FAMILY)?;
    // Each item takes at least 8 + 2 bytes.
    let n = r.count(MAX_QUESTIONS, 10)?;
    if n == 0 {
        return decode_error("an audit message without questions");
    }
    let items = (0..n)
        .map(|_| each(&mut r))
        .collect::<Result<Vec<_>, _>>()?;
    r.end(items, FAMILY)
}

pub fn encode_ask(questions: &[Question]) -> Vec<u8> {
    encode_with(questions, write_question)
}

pub fn decode_ask(buf: &[u8]) -> Result<Vec<Question>, DecodeError> {
    decode_with(buf, read_question)
}

pub fn encode_answers(answers: &[(Question, Answer)]) -> Vec<u8> {
    encode_with(answers, |w, (q, a)| {
        write_question(w, q);
        w.u8(a.code());
    })
}

pub fn decode_answers(buf: &[u8]) -> Result<Vec<(Question, Answer)>, DecodeError> {
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
    let (mut start, mut size) = (0, 11);
    for (i, item) in items.iter().enumerate() {
        let n = 8 + 10 + home(item).len() + 1;
        if i > start && (size + n > max_bytes || i - start >= MAX_QUESTIONS) {
            out.push(&items[start..i]);
            (start, size) = (i, 11);
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
        let buf = encode_ask(&asks);
        assert_eq!(decode_ask(&buf), Ok(asks.clone()));
        let answers = vec![
            (asks[0].clone(), Answer::Gone),
            (asks[1].clone(), Answer::Unsure),
        ];
        let abuf = encode_answers(&answers);
        assert_eq!(decode_answers(&abuf), Ok(answers));
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
    fn forged_messages_are_refused() {
        let mut other = encode_ask(&[q(2, b"k")]);
        other[0] = 2;
        assert!(decode_ask(&other).is_err(), "another version");
        assert!(decode_ask(&encode_ask(&[])).is_err(), "no questions");
        assert!(
            decode_ask(&encode_ask(&[q(0, b"k")])).is_err(),
            "spread id 0"
        );
        assert!(decode_ask(&encode_ask(&[q(2, b"")])).is_err(), "empty home");
        let mut bad = encode_answers(&[(q(2, b"k"), Answer::Lives)]);
        *bad.last_mut().unwrap() = 3;
        assert!(decode_answers(&bad).is_err(), "unknown answer");
        let mut w = Writer::new();
        w.u8(VERSION).uvarint(1_000_000);
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
            assert!(encode_ask(p).len() <= 4096 && p.len() <= MAX_QUESTIONS);
        }
    }
}
