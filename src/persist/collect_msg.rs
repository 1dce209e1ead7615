//! The cluster-bus messages that collect the holders of a deleted spread counter (see
//! `crate::counter::collect`): the master that saw the home go asks the master serving each
//! holder to delete it, and that master answers with the names it handled.
//!
//! ```text
//! collect:    u8 version (= 1), uvarint n (1..=1024), n x collection
//! collected:  u8 version (= 1), uvarint n (1..=1024), n x collection   (the names handled)
//! collection: u64 LE spread id (!= 0), (uvarint len, home name carried by the holders),
//!             uvarint m (1..=1024), m x (uvarint len, holder name)
//! ```
//! Both are idempotent (a name deleted once is answered as gone), so a resend or a late copy
//! is harmless. Anything malformed, including an unknown version, is refused by the decoder
//! and dropped by the receiver (the sender resends; the outcome is that of a lost message).

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::collect::Collection;
use crate::counter::spread::{MAX_HOLDERS, MAX_HOLDER_NAME, MAX_HOME_NAME};

const VERSION: u8 = 1;
const FAMILY: &str = "collect message";
/// Most collections in one message.
pub const MAX_COLLECTIONS: usize = 1024;

/// Encodes a `collect` or a `collected` message (the same layout).
pub fn encode(collections: &[Collection]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).uvarint(collections.len() as u64);
    for c in collections {
        w.fixed_u64(c.spread_id)
            .bytes(&c.home)
            .uvarint(c.holders.len() as u64);
        for name in &c.holders {
            w.bytes(name);
        }
    }
    w.finish()
}

/// Decodes a `collect` or a `collected` message, every count and length bounded.
pub fn decode(buf: &[u8]) -> Result<Vec<Collection>, DecodeError> {
    let mut r = Reader::open_message(buf, VERSION, FAMILY)?;
    // Each collection takes at least 8 + 2 + 1 + 2 bytes.
    let n = r.count(MAX_COLLECTIONS, 13)?;
    if n == 0 {
        return decode_error("a collect message without collections");
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let spread_id = match r.fixed_u64()? {
            0 => return decode_error("spread id 0 in a collect message"),
            id => id,
        };
        let home = r.key_name(MAX_HOME_NAME, FAMILY)?;
        let m = r.count(MAX_HOLDERS, 2)?;
        if m == 0 {
            return decode_error("a collection without holders");
        }
        let holders = (0..m)
            .map(|_| r.key_name(MAX_HOLDER_NAME, FAMILY))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(Collection {
            spread_id,
            home,
            holders,
        });
    }
    r.end(out, FAMILY)
}

/// Splits collections into messages of at most `max_bytes` each (a single name larger than
/// that still goes, alone), a collection's names spread over several when they do not fit.
pub fn encode_chunked(collections: &[Collection], max_bytes: usize) -> Vec<Vec<u8>> {
    // Sizes are counted with every varint at its longest, so a message never exceeds them.
    const HEAD: usize = 1 + 10;
    let mut messages = Vec::new();
    let mut batch: Vec<Collection> = Vec::new();
    let mut size = HEAD;
    for c in collections {
        let header = 8 + 10 + c.home.len() + 10;
        let mut part: Option<Collection> = None;
        for name in &c.holders {
            let n = name.len() + 10;
            let extra = n + if part.is_none() { header } else { 0 };
            let part_full = part
                .as_ref()
                .is_some_and(|p| p.holders.len() >= MAX_HOLDERS);
            let batch_full = part.is_none() && batch.len() >= MAX_COLLECTIONS;
            let too_big = size.saturating_add(extra) > max_bytes || part_full || batch_full;
            if too_big && (part.is_some() || !batch.is_empty()) {
                batch.extend(part.take());
                messages.push(encode(&batch));
                batch.clear();
                size = HEAD;
            }
            let p = part.get_or_insert_with(|| {
                size += header;
                Collection {
                    spread_id: c.spread_id,
                    home: c.home.clone(),
                    holders: Vec::new(),
                }
            });
            p.holders.push(name.clone());
            size += n;
        }
        batch.extend(part);
    }
    if !batch.is_empty() {
        messages.push(encode(&batch));
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::spread::holder_name;

    fn sample() -> Vec<Collection> {
        vec![
            Collection {
                spread_id: u64::MAX,
                home: b"{user:1}:views".to_vec(),
                holders: vec![
                    holder_name(b"{user:1}:views", u64::MAX, 1, 0),
                    b"\x00\xff".to_vec(),
                ],
            },
            Collection {
                spread_id: 2,
                home: b"k".to_vec(),
                holders: vec![holder_name(b"k", 2, 3, 9)],
            },
        ]
    }

    #[test]
    fn messages_roundtrip_and_every_truncation_is_refused() {
        let buf = encode(&sample());
        assert_eq!(decode(&buf), Ok(sample()));
        for len in 0..buf.len() {
            assert!(decode(&buf[..len]).is_err(), "prefix {len}");
        }
        let mut trailing = buf.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_err(), "trailing byte");
    }

    #[test]
    fn forged_messages_are_refused() {
        for v in [0u8, 2, 255] {
            let mut other = encode(&sample());
            other[0] = v;
            assert!(decode(&other).is_err(), "version {v}");
        }
        assert!(decode(&encode(&[])).is_err(), "no collections");
        let empty = Collection {
            spread_id: 2,
            home: b"k".to_vec(),
            holders: vec![],
        };
        assert!(decode(&encode(&[empty])).is_err(), "no holders");
        let zero = Collection {
            spread_id: 0,
            ..sample().remove(1)
        };
        assert!(decode(&encode(&[zero])).is_err(), "spread id 0");
        let no_home = Collection {
            home: vec![],
            ..sample().remove(1)
        };
        assert!(decode(&encode(&[no_home])).is_err(), "empty home");
        let long = Collection {
            holders: vec![vec![b'x'; MAX_HOLDER_NAME + 1]],
            ..sample().remove(1)
        };
        assert!(decode(&encode(&[long])).is_err(), "holder name too long");
        // A count larger than the payload allocates nothing and is refused.
        let mut w = Writer::new();
        w.u8(VERSION).uvarint(1_000_000);
        assert!(decode(&w.finish()).is_err());
        let mut w = Writer::new();
        w.u8(VERSION)
            .uvarint(1)
            .fixed_u64(2)
            .bytes(b"k")
            .uvarint(u64::MAX);
        assert!(decode(&w.finish()).is_err());
    }

    #[test]
    fn chunks_stay_under_their_size_and_carry_every_name() {
        let big = Collection {
            spread_id: 6,
            home: b"k".to_vec(),
            holders: (1..=1000).map(|i| holder_name(b"k", 6, i, 0)).collect(),
        };
        let mut all = sample();
        all.push(big);
        let messages = encode_chunked(&all, 4096);
        assert!(messages.len() > 5);
        let mut names: Vec<Vec<u8>> = Vec::new();
        for m in &messages {
            assert!(m.len() <= 4096, "{}", m.len());
            for c in decode(m).unwrap() {
                assert!(!c.holders.is_empty());
                names.extend(c.holders);
            }
        }
        let expected: Vec<Vec<u8>> = all.into_iter().flat_map(|c| c.holders).collect();
        assert_eq!(names, expected);
        assert_eq!(encode_chunked(&sample(), 1 << 16).len(), 1);
        assert!(encode_chunked(&[], 100).is_empty());
        // A name larger than the limit still goes (alone).
        let huge = Collection {
            holders: vec![vec![b'x'; 300]],
            ..sample().remove(1)
        };
        assert_eq!(encode_chunked(&[huge], 100).len(), 1);
    }
}
