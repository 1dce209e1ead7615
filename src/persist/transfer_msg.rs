//! The cluster-bus messages of transfers between counters (see `crate::counter::transfer`):
//!
//! ```text
//! seal:   u8 version (= 1), (uvarint len, home), (uvarint len, holder)
//!         the home's master asks the holder's master to fold the holder into the home
//! credit: u8 version (= 1), (uvarint len, giver), (uvarint len, receiver), uvarint seq (>= 1),
//!         ivarint dv, ivarint df
//! ack:    u8 version (= 1), (uvarint len, giver), (uvarint len, receiver), uvarint seq (>= 1)
//! ```
//! Each message is idempotent, so a resend or a late copy is harmless. Anything malformed is
//! dropped by the receiver (the sender resends; the outcome is that of a lost message).

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::transfer::MAX_NAME;

const VERSION: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seal {
    pub home: Vec<u8>,
    pub holder: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credit {
    pub giver: Vec<u8>,
    pub receiver: Vec<u8>,
    pub seq: u64,
    pub dv: i64,
    pub df: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub giver: Vec<u8>,
    pub receiver: Vec<u8>,
    pub seq: u64,
}

pub fn encode_seal(m: &Seal) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).bytes(&m.home).bytes(&m.holder);
    w.finish()
}

pub fn decode_seal(buf: &[u8]) -> Result<Seal, DecodeError> {
    let mut r = open(buf)?;
    let m = Seal {
        home: name(&mut r)?,
        holder: name(&mut r)?,
    };
    close(&r, m)
}

pub fn encode_credit(m: &Credit) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).bytes(&m.giver).bytes(&m.receiver);
    w.uvarint(m.seq).ivarint(m.dv).ivarint(m.df);
    w.finish()
}

pub fn decode_credit(buf: &[u8]) -> Result<Credit, DecodeError> {
    let mut r = open(buf)?;
    let m = Credit {
        giver: name(&mut r)?,
        receiver: name(&mut r)?,
        seq: seq(&mut r)?,
        dv: r.ivarint()?,
        df: r.ivarint()?,
    };
    close(&r, m)
}

pub fn encode_ack(m: &Ack) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION)
        .bytes(&m.giver)
        .bytes(&m.receiver)
        .uvarint(m.seq);
    w.finish()
}

pub fn decode_ack(buf: &[u8]) -> Result<Ack, DecodeError> {
    let mut r = open(buf)?;
    let m = Ack {
        giver: name(&mut r)?,
        receiver: name(&mut r)?,
        seq: seq(&mut r)?,
    };
    close(&r, m)
}

const FAMILY: &str = "transfer message";

fn open(buf: &[u8]) -> Result<Reader<'_>, DecodeError> {
    Reader::open_message(buf, VERSION, FAMILY)
}

fn name(r: &mut Reader) -> Result<Vec<u8>, DecodeError> {
    r.key_name(MAX_NAME, FAMILY)
}

fn seq(r: &mut Reader) -> Result<u64, DecodeError> {
    match r.uvarint()? {
        0 => decode_error("transfer seq 0"),
        s => Ok(s),
    }
}

fn close<T>(r: &Reader, m: T) -> Result<T, DecodeError> {
    r.end(m, FAMILY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_roundtrip_and_every_truncation_is_refused() {
        let seal = Seal {
            home: b"home".to_vec(),
            holder: b"{ctr.1.0}home".to_vec(),
        };
        let credit = Credit {
            giver: b"g\x00\xff".to_vec(),
            receiver: b"r".to_vec(),
            seq: u64::MAX,
            dv: i64::MIN,
            df: -5,
        };
        let ack = Ack {
            giver: b"g".to_vec(),
            receiver: b"r".to_vec(),
            seq: 1,
        };
        let bufs = [encode_seal(&seal), encode_credit(&credit), encode_ack(&ack)];
        assert_eq!(decode_seal(&bufs[0]), Ok(seal));
        assert_eq!(decode_credit(&bufs[1]), Ok(credit));
        assert_eq!(decode_ack(&bufs[2]), Ok(ack));
        type Check = fn(&[u8]) -> bool;
        let refused: [Check; 3] = [
            |b| decode_seal(b).is_err(),
            |b| decode_credit(b).is_err(),
            |b| decode_ack(b).is_err(),
        ];
        for (buf, refused) in bufs.iter().zip(refused) {
            for len in 0..buf.len() {
                assert!(refused(&buf[..len]), "prefix {len}");
            }
            let mut trailing = buf.clone();
            trailing.push(0);
            assert!(refused(&trailing), "trailing byte");
        }
    }

    #[test]
    fn forged_messages_are_refused() {
        let mut zero_seq = Writer::new();
        zero_seq.u8(VERSION).bytes(b"g").bytes(b"r").uvarint(0);
        assert!(decode_ack(&zero_seq.finish()).is_err());
        let mut empty_name = Writer::new();
        empty_name.u8(VERSION).bytes(b"").bytes(b"r");
        assert!(decode_seal(&empty_name.finish()).is_err());
        let mut version = encode_seal(&Seal {
            home: b"h".to_vec(),
            holder: b"x".to_vec(),
        });
        version[0] = 2;
        assert!(decode_seal(&version).is_err());
        let mut long = Writer::new();
        long.u8(VERSION)
            .bytes(&vec![b'k'; MAX_NAME + 1])
            .bytes(b"x");
        assert!(decode_seal(&long.finish()).is_err());
    }
}
