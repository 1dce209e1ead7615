//! The cluster-bus messages of transfers between counters (see `crate::counter::transfer`):
//!
//! ```text
//! seal:   u8 version (= 2), (uvarint len, home), (uvarint len, holder), u64 LE fold id
//!         the home's master asks the holder's master to fold the holder into the home; with
//!         fold id 0, only to re-target the holder's budget move toward a name the home had
//!         before a RENAME to this one (a module before issue 34 drops it as malformed)
//! credit: u8 version (= 2), (uvarint len, giver), (uvarint len, giver's name at the debit),
//!         (uvarint len, receiver), u64 LE giver id, uvarint seq (>= 1), ivarint dv, ivarint df,
//!         u64 LE fold id (0: a budget move): a credit without ceiling units (dc = 0)
//!         or u8 version (= 3), the same fields with ivarint dc (!= 0) after df: a credit of
//!         ceiling units (a ceiled spread's budget move or fold)
//! ack:    u8 version (= 2), (uvarint len, giver), (uvarint len, receiver), uvarint seq (>= 1),
//!         u8 outcome (0 applied, now or before; 1 refused: the receiver does not expect it)
//! ```
//! Each message is idempotent, so a resend or a late copy is harmless. Anything malformed is
//! dropped by the receiver (the sender resends; the outcome is that of a lost message).
//! Version 1 (before giver and fold ids) is refused as malformed: a cluster is upgraded on
//! every master before it folds or moves budget again (docs/CLUSTER.md). Only a credit with
//! ceiling units is written as version 3 (a module before ceilings drops it as malformed, and
//! only a ceiled spread sends one); every other credit stays version 2, so masters of both
//! versions keep exchanging them while a cluster is upgraded. Seals and acks are version 2.

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::transfer::MAX_NAME;

/// Seals, acks, and credits without ceiling units.
const VERSION: u8 = 2;
/// A credit with ceiling units: version 2's fields and its dc.
const VERSION_CEILED: u8 = 3;

pub use crate::counter::transfer::{Ack, Credit, Seal};

pub fn encode_seal(m: &Seal) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION)
        .bytes(&m.home)
        .bytes(&m.holder)
        .fixed_u64(m.fold_id);
    w.finish()
}

pub fn decode_seal(buf: &[u8]) -> Result<Seal, DecodeError> {
    let mut r = open(buf)?;
    let m = Seal {
        home: name(&mut r)?,
        holder: name(&mut r)?,
        fold_id: r.fixed_u64()?,
    };
    close(&r, m)
}

pub fn encode_credit(m: &Credit) -> Vec<u8> {
    let ceiled = m.dc != 0;
    let mut w = Writer::new();
    w.u8(if ceiled { VERSION_CEILED } else { VERSION })
        .bytes(&m.giver)
        .bytes(&m.from)
        .bytes(&m.receiver);
    w.fixed_u64(m.giver_id)
        .uvarint(m.seq)
        .ivarint(m.dv)
        .ivarint(m.df);
    if ceiled {
        w.ivarint(m.dc);
    }
    w.fixed_u64(m.fold_id);
    w.finish()
}

pub fn decode_credit(buf: &[u8]) -> Result<Credit, DecodeError> {
    let (mut r, version) = Reader::open_message_of(buf, &[VERSION, VERSION_CEILED], FAMILY)?;
    let m = Credit {
        giver: name(&mut r)?,
        from: name(&mut r)?,
        receiver: name(&mut r)?,
        giver_id: r.fixed_u64()?,
        seq: seq(&mut r)?,
        dv: r.ivarint()?,
        df: r.ivarint()?,
        dc: match version {
            VERSION_CEILED => r.nonzero_ivarint("ceiling units", FAMILY)?,
            _ => 0,
        },
        fold_id: r.fixed_u64()?,
    };
    close(&r, m)
}

pub fn encode_ack(m: &Ack) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION)
        .bytes(&m.giver)
        .bytes(&m.receiver)
        .uvarint(m.seq)
        .u8(u8::from(m.refused));
    w.finish()
}

pub fn decode_ack(buf: &[u8]) -> Result<Ack, DecodeError> {
    let mut r = open(buf)?;
    let m = Ack {
        giver: name(&mut r)?,
        receiver: name(&mut r)?,
        seq: seq(&mut r)?,
        refused: match r.u8()? {
            0 => false,
            1 => true,
            other => return decode_error(format!("unknown ack outcome {other}")),
        },
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
            fold_id: u64::MAX,
        };
        let credit = Credit {
            giver: b"g\x00\xff".to_vec(),
            from: b"f".to_vec(),
            receiver: b"r".to_vec(),
            giver_id: 77,
            seq: u64::MAX,
            dv: i64::MIN,
            df: -5,
            dc: 0,
            fold_id: 0,
        };
        let ack = Ack {
            giver: b"g".to_vec(),
            receiver: b"r".to_vec(),
            seq: 1,
            refused: true,
        };
        let ceiled = Credit {
            dc: i64::MIN,
            ..credit.clone()
        };
        let bufs = [
            encode_seal(&seal),
            encode_credit(&credit),
            encode_ack(&ack),
            encode_credit(&ceiled),
        ];
        assert_eq!(decode_seal(&bufs[0]), Ok(seal));
        assert_eq!(decode_credit(&bufs[1]), Ok(credit));
        assert_eq!(decode_ack(&bufs[2]), Ok(ack));
        assert_eq!(decode_credit(&bufs[3]), Ok(ceiled));
        type Check = fn(&[u8]) -> bool;
        let refused: [Check; 4] = [
            |b| decode_seal(b).is_err(),
            |b| decode_credit(b).is_err(),
            |b| decode_ack(b).is_err(),
            |b| decode_credit(b).is_err(),
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

    /// Only a credit with ceiling units is version 3, so a module before ceilings reads every
    /// other one; it is the version 2 credit with its dc after df.
    #[test]
    fn a_credit_is_version_3_exactly_when_it_carries_ceiling_units() {
        let credit = Credit {
            giver: b"g".to_vec(),
            from: b"g".to_vec(),
            receiver: b"r".to_vec(),
            giver_id: 7,
            seq: 3,
            dv: 0,
            df: -2,
            dc: 0,
            fold_id: 0x0102,
        };
        let v2 = encode_credit(&credit);
        assert_eq!(v2[0], VERSION);
        assert_eq!(decode_credit(&v2).map(|c| c.dc), Ok(0));
        let ceiled = Credit { dc: 5, ..credit };
        let v3 = encode_credit(&ceiled);
        assert_eq!(v3[0], VERSION_CEILED);
        let fold_id_at = v2.len() - 8;
        let expected = [
            &[VERSION_CEILED][..],
            &v2[1..fold_id_at],
            &[10],
            &v2[fold_id_at..],
        ];
        assert_eq!(
            v3,
            expected.concat(),
            "v2's bytes with dc (zigzag 10) after df"
        );
        assert_eq!(decode_credit(&v3), Ok(ceiled));
        // A dc of 0 written out is not the credit's encoding (that is version 2).
        let mut zero = v3.clone();
        zero[fold_id_at] = 0;
        assert!(decode_credit(&zero).is_err(), "version 3 with dc 0");
        // A version 2 credit relabelled 3 reads the fold id's first byte (2) as its dc, and
        // then its fold id is a byte short.
        let mut relabelled = v2.clone();
        relabelled[0] = VERSION_CEILED;
        assert!(decode_credit(&relabelled).is_err());
        for v in [0, 1, 4, 255] {
            let mut other = v3.clone();
            other[0] = v;
            assert!(decode_credit(&other).is_err(), "credit version {v}");
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
        let seal = Seal {
            home: b"h".to_vec(),
            holder: b"x".to_vec(),
            fold_id: 3,
        };
        let ack = Ack {
            giver: b"g".to_vec(),
            receiver: b"r".to_vec(),
            seq: 1,
            refused: false,
        };
        for v in [1, 3, 4] {
            let mut version = encode_seal(&seal);
            version[0] = v;
            assert!(decode_seal(&version).is_err(), "seal version {v}");
            let mut version = encode_ack(&ack);
            version[0] = v;
            assert!(decode_ack(&version).is_err(), "ack version {v}");
        }
        let retarget = Seal {
            fold_id: 0,
            ..seal.clone()
        };
        assert_eq!(
            decode_seal(&encode_seal(&retarget)),
            Ok(retarget),
            "fold id 0: re-target"
        );
        let mut bad_outcome = Writer::new();
        bad_outcome
            .u8(VERSION)
            .bytes(b"g")
            .bytes(b"r")
            .uvarint(1)
            .u8(2);
        assert!(decode_ack(&bad_outcome.finish()).is_err());
        let mut long = Writer::new();
        long.u8(VERSION)
            .bytes(&vec![b'k'; MAX_NAME + 1])
            .bytes(b"x");
        assert!(decode_seal(&long.finish()).is_err());
    }
}
