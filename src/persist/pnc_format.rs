//! The versioned encodings of a PN-Counter: the `PNC.STATE` blob that deployments exchange, and
//! the stored form (the blob plus the home record) that RDB, `DUMP`/`RESTORE`, the AOF restore
//! command `PNC.SETSTATE` and the digest use. One decoder serves all of them.
//!
//! Layout, version 1 (integers are bincode 2 "standard" varints: a value below 251 is one byte,
//! else a marker byte 251/252/253 and 2/4/8 little-endian bytes):
//! ```text
//! STATE blob:  u8 version (= 1)
//!              varint count (0..=1024)
//!              count x { varint id_len, id bytes, varint P, varint N }   ids strictly ascending
//! stored form: STATE blob, then the home record: u8 0 (none) | u8 1, varint id_len, id bytes,
//!              varint generation (>= 1)
//! ```
//! Version 2 (a bounded counter: a floor, rights transfers or a token ledger; a counter with
//! none of them still encodes as version 1, byte for byte):
//! ```text
//! STATE blob:  u8 version (= 2), varint count, count x entry (as version 1), then
//!              switch:    u8 0 | u8 1, varint epoch, varint setter_len, setter, u8 on (0/1)
//!              moves:     varint count (0..=1024) x { varint id_len, id, varint raised,
//!                         varint lowered }                       ids strictly ascending
//!              transfers: varint count (0..=4096) x { varint from_len, from, varint to_len,
//!                         to, varint amount }      (from, to) strictly ascending, from != to
//! stored form: STATE blob, home record (as version 1), then the ledger:
//!              varint count (0..=1024) x { varint token_len (1..=256), token,
//!                         zigzag varint amount, u8 0 (refused) | u8 1, zigzag varint reply }
//! ```
//! The entries are exactly bincode's encoding of `Vec<(&str, u64, u64)>`. Nothing may follow
//! the last field. A decoder refuses, before building anything: an unknown version, a blob over
//! [`MAX_STATE_BYTES`], a count over [`MAX_REPLICAS`] or larger than the bytes left could hold,
//! a malformed or out-of-alphabet id, duplicate or unordered ids, a P or N over `i64::MAX`, a
//! value outside the i64 range, and trailing bytes. A later version gets a new version byte and
//! this decode arm stays.

use bincode::{BorrowDecode, Encode};

use super::codec::{decode_error, DecodeError};
use crate::pncounter::bound::{LEDGER_CAPACITY, MAX_TRANSFERS};
use crate::pncounter::{
    Bound, Entry, FloorMove, FloorSwitch, Home, LedgerEntry, PnCounter, ReplicaId, Transfer,
    MAX_ID_LEN, MAX_REPLICAS,
};

/// Longest `PNC.DECRFLOOR` token.
pub const MAX_TOKEN_LEN: usize = 256;

pub const VERSION_1: u8 = 1;
/// A bounded counter (floor, transfers, ledger).
pub const VERSION_2: u8 = 2;
pub const CURRENT_VERSION: u8 = VERSION_2;

/// Largest blob accepted (a full 1024-replica state with 64-byte ids is about 85 KB).
pub const MAX_STATE_BYTES: usize = 128 * 1024;

/// The smallest encodable entry: 1-byte length, (empty id), 1-byte P, 1-byte N.
const MIN_ENTRY_BYTES: usize = 3;

type Config = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_STATE_BYTES>,
>;
const CONFIG: Config = bincode::config::standard().with_limit::<MAX_STATE_BYTES>();

#[derive(Encode, BorrowDecode)]
struct WireEntry<'a> {
    id: &'a str,
    p: u64,
    n: u64,
}

#[derive(Encode, BorrowDecode)]
struct WireSwitch<'a> {
    epoch: u64,
    setter: &'a str,
    on: bool,
}

#[derive(Encode, BorrowDecode)]
struct WireMove<'a> {
    id: &'a str,
    raised: u64,
    lowered: u64,
}

#[derive(Encode, BorrowDecode)]
struct WireTransfer<'a> {
    from: &'a str,
    to: &'a str,
    amount: u64,
}

#[derive(Encode, BorrowDecode)]
struct WireToken<'a> {
    token: &'a [u8],
    amount: i64,
    reply: Option<i64>,
}

#[derive(Encode, BorrowDecode)]
struct WireHome<'a> {
    id: &'a str,
    gen: u64,
}

fn put<E: Encode>(out: &mut Vec<u8>, value: E) {
    // A Vec writer cannot fail, and nothing we encode has a fallible Encode impl.
    let written = bincode::encode_into_std_write(value, out, CONFIG);
    debug_assert!(written.is_ok());
}

/// The `PNC.STATE` blob.
pub fn encode_state(counter: &PnCounter) -> Vec<u8> {
    let entries = counter.entries();
    let mut out = Vec::with_capacity(3 + entries.len() * 24);
    out.push(if counter.bound().is_some() {
        VERSION_2
    } else {
        VERSION_1
    });
    put_all(&mut out, entries, |e| WireEntry {
        id: e.id.as_str(),
        p: e.p,
        n: e.n,
    });
    if let Some(bound) = counter.bound() {
        put_bound(&mut out, bound);
    }
    out
}

/// The merged part of a bounded counter (version 2).
fn put_bound(out: &mut Vec<u8>, bound: &Bound) {
    put(
        out,
        bound.switch.as_ref().map(|s| WireSwitch {
            epoch: s.epoch,
            setter: s.setter.as_str(),
            on: s.on,
        }),
    );
    put_all(out, &bound.moves, |m| WireMove {
        id: m.id.as_str(),
        raised: m.raised,
        lowered: m.lowered,
    });
    put_all(out, &bound.transfers, |t| WireTransfer {
        from: t.from.as_str(),
        to: t.to.as_str(),
        amount: t.amount,
    });
}

/// A list: its length, then each item as `wire` makes it.
fn put_all<'a, T, W: Encode>(out: &mut Vec<u8>, items: &'a [T], wire: impl Fn(&'a T) -> W) {
    put(out, items.len() as u64);
    for item in items {
        put(out, wire(item));
    }
}

/// The stored form: the state blob plus the home record.
pub fn encode_stored(counter: &PnCounter) -> Vec<u8> {
    let mut out = encode_state(counter);
    put(
        &mut out,
        counter.home().map(|h| WireHome {
            id: h.id.as_str(),
            gen: h.gen,
        }),
    );
    if let Some(bound) = counter.bound() {
        put_all(&mut out, &bound.ledger, |e| WireToken {
            token: &e.token,
            amount: e.amount,
            reply: e.reply,
        });
    }
    out
}

/// Decodes and validates a `PNC.STATE` blob (no home record).
pub fn decode_state(buf: &[u8]) -> Result<PnCounter, DecodeError> {
    let mut r = BlobReader::new(buf)?;
    let entries = r.entries()?;
    let bound = r.bound()?;
    r.finish(true)?;
    PnCounter::from_parts(entries, None, bound).or_else(|e| decode_error(e.message()))
}

/// Decodes and validates the stored form.
pub fn decode_stored(buf: &[u8]) -> Result<PnCounter, DecodeError> {
    let mut r = BlobReader::new(buf)?;
    let entries = r.entries()?;
    let mut bound = r.bound()?;
    let home = r.home()?;
    if let Some(b) = bound.as_mut() {
        b.ledger = r.ledger()?;
    }
    r.finish(false)?;
    PnCounter::from_parts(entries, home, bound).or_else(|e| decode_error(e.message()))
}

fn bincode_error(e: bincode::error::DecodeError) -> DecodeError {
    use bincode::error::DecodeError as E;
    DecodeError(
        match e {
            E::UnexpectedEnd { .. } => "truncated",
            E::LimitExceeded => "larger than its bound",
            E::Utf8 { .. } => "replica id is not valid UTF-8",
            E::UnexpectedVariant { .. } => "malformed home record",
            _ => "malformed",
        }
        .to_string(),
    )
}

struct BlobReader<'a> {
    buf: &'a [u8],
    pos: usize,
    version: u8,
}

impl<'a> BlobReader<'a> {
    fn new(buf: &'a [u8]) -> Result<Self, DecodeError> {
        if buf.len() > MAX_STATE_BYTES {
            return decode_error(format!("larger than {MAX_STATE_BYTES} bytes"));
        }
        match buf.first() {
            None => decode_error("empty"),
            Some(&version @ (VERSION_1 | VERSION_2)) => Ok(BlobReader {
                buf,
                pos: 1,
                version,
            }),
            Some(&v) => decode_error(format!(
                "unsupported version {v} (this module reads versions 1 to {CURRENT_VERSION})"
            )),
        }
    }

    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    fn next<T: BorrowDecode<'a, ()>>(&mut self) -> Result<T, DecodeError> {
        let (value, used) = bincode::borrow_decode_from_slice::<T, Config>(self.rest(), CONFIG)
            .map_err(bincode_error)?;
        self.pos = self.pos.saturating_add(used);
        Ok(value)
    }

    /// A list's count, bounded by `max` and by the bytes left (each item at least
    /// `min_bytes`), before anything is allocated for it.
    fn count(&mut self, max: usize, min_bytes: usize, what: &str) -> Result<usize, DecodeError> {
        let count: u64 = self.next()?;
        let Some(count) = usize::try_from(count).ok().filter(|c| *c <= max) else {
            return decode_error(format!("{count} {what} (at most {max})"));
        };
        if count.saturating_mul(min_bytes) > self.rest().len() {
            return decode_error(format!(
                "truncated (fewer bytes than its {what} count needs)"
            ));
        }
        Ok(count)
    }

    fn entries(&mut self) -> Result<Vec<Entry>, DecodeError> {
        let count = self.count(MAX_REPLICAS, MIN_ENTRY_BYTES, "replica ids")?;
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let wire: WireEntry = self.next()?;
            let id = parse_id(wire.id)?;
            entries.push(Entry {
                id,
                p: wire.p,
                n: wire.n,
            });
        }
        Ok(entries)
    }

    /// The merged part of a bounded counter (version 2; None in version 1).
    fn bound(&mut self) -> Result<Option<Bound>, DecodeError> {
        if self.version == VERSION_1 {
            return Ok(None);
        }
        let switch: Option<WireSwitch> = self.next()?;
        let switch = match switch {
            Some(s) => Some(FloorSwitch {
                epoch: s.epoch,
                setter: parse_id(s.setter)?,
                on: s.on,
            }),
            None => None,
        };
        let count = self.count(MAX_REPLICAS, 4, "floor moves")?;
        let mut moves = Vec::with_capacity(count);
        for _ in 0..count {
            let m: WireMove = self.next()?;
            moves.push(FloorMove {
                id: parse_id(m.id)?,
                raised: m.raised,
                lowered: m.lowered,
            });
        }
        let count = self.count(MAX_TRANSFERS, 5, "transfers")?;
        let mut transfers = Vec::with_capacity(count);
        for _ in 0..count {
            let t: WireTransfer = self.next()?;
            transfers.push(Transfer {
                from: parse_id(t.from)?,
                to: parse_id(t.to)?,
                amount: t.amount,
            });
        }
        Ok(Some(Bound {
            switch,
            moves,
            transfers,
            ledger: Vec::new(),
        }))
    }

    fn ledger(&mut self) -> Result<Vec<LedgerEntry>, DecodeError> {
        let count = self.count(LEDGER_CAPACITY, 4, "ledger tokens")?;
        let mut ledger = Vec::with_capacity(count);
        for _ in 0..count {
            let t: WireToken = self.next()?;
            if t.token.is_empty() || t.token.len() > MAX_TOKEN_LEN {
                return decode_error("a ledger token of 0 or more than 256 bytes");
            }
            ledger.push(LedgerEntry {
                token: t.token.into(),
                amount: t.amount,
                reply: t.reply,
            });
        }
        Ok(ledger)
    }

    fn home(&mut self) -> Result<Option<Home>, DecodeError> {
        let wire: Option<WireHome> = self.next()?;
        let Some(wire) = wire else {
            return Ok(None);
        };
        if wire.gen == 0 {
            return decode_error("home record with generation 0");
        }
        Ok(Some(Home {
            id: parse_id(wire.id)?,
            gen: wire.gen,
        }))
    }

    fn finish(&self, is_state_blob: bool) -> Result<(), DecodeError> {
        let extra = self.rest();
        match extra {
            [] => Ok(()),
            [b'\n'] if is_state_blob => decode_error(
                "1 trailing byte, a newline (strip the newline a shell pipe adds, e.g. `head -c -1`)",
            ),
            _ => decode_error(format!("{} trailing byte(s)", extra.len())),
        }
    }
}

fn parse_id(s: &str) -> Result<ReplicaId, DecodeError> {
    if s.len() > MAX_ID_LEN {
        return decode_error(format!("replica id longer than {MAX_ID_LEN} bytes"));
    }
    ReplicaId::parse(s.as_bytes()).or_else(|e| decode_error(e.message()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pncounter::SLOT_MAX;

    fn id(s: &str) -> ReplicaId {
        ReplicaId::parse(s.as_bytes()).unwrap()
    }

    fn sample() -> PnCounter {
        let mut c = PnCounter::new();
        c.add(&id("eu-west"), 300).unwrap();
        c.add(&id("us-east"), -70_000).unwrap();
        c.add(&id("ap.south_1"), i64::MAX).unwrap();
        c.add(&id("us-east"), 5).unwrap();
        c
    }

    /// A bounded counter: floor, transfers and a ledger (version 2).
    fn bounded_sample() -> PnCounter {
        let mut c = sample();
        let (eu, us) = (id("eu-west"), id("ap.south_1"));
        c.set_floor(&eu, Some(-5)).unwrap();
        c.give(&us, &eu, 1_000).unwrap();
        c.decrement_within_rights(&eu, 7).unwrap();
        c.record_token(LedgerEntry {
            token: b"order-1".to_vec().into(),
            amount: 7,
            reply: Some(c.value()),
        });
        c.record_token(LedgerEntry {
            token: vec![0, 255].into(),
            amount: i64::MAX,
            reply: None,
        });
        c.set_home(Some(Home { id: eu, gen: 3 }));
        c
    }

    #[test]
    fn a_bounded_counter_roundtrips_as_version_2_and_a_plain_one_stays_version_1() {
        let c = bounded_sample();
        let state = encode_state(&c);
        assert_eq!(state[0], VERSION_2);
        let shipped = decode_state(&state).unwrap();
        assert!(shipped.same_state(&c));
        assert!(
            shipped.bound().unwrap().ledger.is_empty(),
            "the ledger stays home"
        );
        assert_eq!(decode_stored(&encode_stored(&c)).unwrap(), c);
        assert_eq!(encode_state(&sample())[0], VERSION_1);
        for len in 0..encode_stored(&c).len() {
            assert!(decode_stored(&encode_stored(&c)[..len]).is_err(), "{len}");
        }
        // A transfer to its own giver, or unordered moves, are refused.
        let mut bad = c.clone();
        bad.give(&id("eu-west"), &id("zz"), 1).unwrap();
        let mut blob = encode_state(&bad);
        let at = blob.windows(2).rposition(|w| w == b"zz").unwrap();
        blob[at..at + 2].copy_from_slice(b"eu");
        blob.splice(at..at + 2, b"eu-west".iter().copied());
        blob[at - 1] = 7;
        assert!(
            msg(decode_state(&blob)).contains("own giver"),
            "{}",
            msg(decode_state(&blob))
        );
    }

    #[test]
    fn state_and_stored_forms_roundtrip() {
        let mut c = sample();
        let state = decode_state(&encode_state(&c)).unwrap();
        assert!(state.same_state(&c));
        assert_eq!(state.home(), None);
        assert_eq!(decode_stored(&encode_stored(&c)).unwrap(), c);
        c.set_home(Some(Home {
            id: id("us-east"),
            gen: u64::MAX,
        }));
        assert_eq!(decode_stored(&encode_stored(&c)).unwrap(), c);
        let empty = PnCounter::new();
        assert_eq!(encode_state(&empty), vec![VERSION_1, 0]);
        assert_eq!(encode_stored(&empty), vec![VERSION_1, 0, 0]);
        assert_eq!(decode_stored(&encode_stored(&empty)).unwrap(), empty);
    }

    #[test]
    fn layout_is_a_version_byte_then_bincode() {
        let c = sample();
        let blob = encode_state(&c);
        let tuples: Vec<(&str, u64, u64)> = c
            .entries()
            .iter()
            .map(|e| (e.id.as_str(), e.p, e.n))
            .collect();
        let expected = bincode::encode_to_vec(&tuples, bincode::config::standard()).unwrap();
        assert_eq!(blob[0], VERSION_1);
        assert_eq!(&blob[1..], &expected[..]);
        // A small state is compact: 1 + 1 + (1 + 1 + 1 + 1).
        let mut small = PnCounter::new();
        small.add(&id("a"), 5).unwrap();
        assert_eq!(encode_state(&small), vec![1, 1, 1, b'a', 5, 0]);
    }

    #[test]
    fn the_two_forms_are_not_interchangeable() {
        let c = sample();
        assert!(decode_state(&encode_stored(&c)).is_err());
        assert!(decode_stored(&encode_state(&c)).is_err());
    }

    #[test]
    fn every_truncation_is_refused() {
        let mut c = sample();
        c.set_home(Some(Home {
            id: id("us-east"),
            gen: 300,
        }));
        let state = encode_state(&c);
        for len in 0..state.len() {
            assert!(decode_state(&state[..len]).is_err(), "state prefix {len}");
        }
        let stored = encode_stored(&c);
        for len in 0..stored.len() {
            assert!(
                decode_stored(&stored[..len]).is_err(),
                "stored prefix {len}"
            );
        }
    }

    fn msg(r: Result<PnCounter, DecodeError>) -> String {
        r.unwrap_err().0
    }

    #[test]
    fn refuses_each_kind_of_bad_blob_with_a_clear_reason() {
        assert_eq!(msg(decode_state(&[])), "empty");
        assert!(msg(decode_state(&[3, 0])).starts_with("unsupported version 3"));
        assert!(msg(decode_state(&[0, 0])).starts_with("unsupported version 0"));
        assert!(msg(decode_state(&[1, 0, 0])).contains("trailing"));
        assert!(msg(decode_state(&[1, 0, b'\n'])).contains("newline"));
        // count 2^40 (marker 253 + u64)
        let mut huge = vec![1, 253];
        huge.extend((1u64 << 40).to_le_bytes());
        assert!(msg(decode_state(&huge)).contains("at most 1024"));
        // count 1025 (marker 251 + u16)
        let mut over = vec![1, 251];
        over.extend(1025u16.to_le_bytes());
        over.extend(std::iter::repeat_n(0u8, 1025 * 4));
        assert!(msg(decode_state(&over)).contains("at most 1024"));
        // count 200 with 8 bytes left
        assert!(msg(decode_state(&[1, 200, 1, b'a', 1, 1, 1, b'b', 1, 1])).contains("truncated"));
        // duplicate and unordered ids
        assert_eq!(
            msg(decode_state(&[1, 2, 1, b'a', 1, 0, 1, b'a', 2, 0])),
            "duplicate replica id"
        );
        assert_eq!(
            msg(decode_state(&[1, 2, 1, b'b', 1, 0, 1, b'a', 2, 0])),
            "replica ids out of order"
        );
        // bad ids
        assert_eq!(msg(decode_state(&[1, 1, 0, 1, 0])), "replica id is empty");
        assert!(msg(decode_state(&[1, 1, 1, b' ', 1, 0])).contains("may only hold"));
        assert!(msg(decode_state(&[1, 1, 1, 0xff, 1, 0])).contains("UTF-8"));
        let mut long = vec![1, 1, 65];
        long.extend([b'x'; 65]);
        long.extend([1, 0]);
        assert!(msg(decode_state(&long)).contains("longer than 64"));
        // P over i64::MAX
        let mut big = vec![1, 1, 1, b'a', 253];
        big.extend((SLOT_MAX + 1).to_le_bytes());
        big.push(0);
        assert!(msg(decode_state(&big)).contains("exceeds"));
        // value over i64::MAX across two slots
        let mut sum = vec![1, 2, 1, b'a', 253];
        sum.extend(SLOT_MAX.to_le_bytes());
        sum.extend([0, 1, b'b', 1, 0]);
        assert!(msg(decode_state(&sum)).contains("signed 64-bit"));
        // home records
        assert!(msg(decode_stored(&[1, 0, 2])).contains("home"));
        assert!(msg(decode_stored(&[1, 0, 1, 1, b'a', 0])).contains("generation 0"));
        assert!(decode_stored(&[1, 0, 1, 1, b'a', 1]).is_ok());
        assert!(msg(decode_stored(&[1, 0, 1, 1, b'!', 1])).contains("may only hold"));
        // too large
        let mut large = vec![1, 0];
        large.resize(MAX_STATE_BYTES + 1, 0);
        assert!(msg(decode_state(&large)).contains("larger than"));
    }

    #[test]
    fn random_mutations_never_panic_and_valid_results_reencode_canonically() {
        use crate::pncounter::tests::Rng;
        let mut c = sample();
        c.set_home(Some(Home {
            id: id("h"),
            gen: 9,
        }));
        let b = bounded_sample();
        let seeds = [
            encode_state(&c),
            encode_stored(&c),
            encode_state(&b),
            encode_stored(&b),
        ];
        let mut rng = Rng::new(7);
        for i in 0..40_000 {
            let mut blob = seeds[i % 4].clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(blob.len() as u64 + 1) as usize;
                match rng.below(4) {
                    0 if at < blob.len() => blob[at] = rng.next() as u8,
                    1 if at < blob.len() => blob[at] ^= 1 << rng.below(8),
                    2 => blob.insert(at, rng.next() as u8),
                    _ => blob.truncate(at),
                }
            }
            for decoded in [decode_state(&blob), decode_stored(&blob)]
                .into_iter()
                .flatten()
            {
                // Whatever is accepted is a valid counter that survives a round trip.
                let again = decode_stored(&encode_stored(&decoded)).unwrap();
                assert_eq!(again, decoded);
            }
        }
    }
}
