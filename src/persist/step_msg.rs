//! The encoding of a replicated transfer or fold step (`CTR.STEP key <step>`, see
//! `crate::counter::step`): what the master did to the key, not the key's state. The key's
//! name is not repeated: it is the giver of a move or a seal, the receiver of a credit, the
//! giver an answer is for.
//!
//! ```text
//! u8 version (= 1)
//! u8 kind, then:
//!   1 MOVE      (uvarint len, receiver), ivarint dv, ivarint df, ivarint now ms,
//!               u64 LE new giver id (nonzero)
//!   2 SHRINK    uvarint target holders (1..=MAX_HOLDERS), uvarint n (<= MAX_HOLDERS),
//!               n x u64 LE fold id (one per holder that starts leaving, in holder order)
//!   3 SEAL      (uvarint len, home), u64 LE fold id (nonzero), ivarint now ms,
//!               u64 LE new giver id (nonzero)
//!   4 RETARGET  (uvarint len, home)
//!   5 CREDIT    (uvarint len, giver), u8 0 (the giver's name is its name at the debit) or
//!               1 + (uvarint len, name at the debit), u64 LE giver id, uvarint seq (>= 1),
//!               ivarint dv, ivarint df, u64 LE fold id (0: a budget move)
//!   6 ANSWER    (uvarint len, receiver), uvarint seq (>= 1), u8 refused (0 or 1)
//!   7 SHRINK    as 2, then ivarint now ms, ivarint token window ms (> 0): the clock the
//!     (dated)   master dated the change in the home's listing with (`crate::counter::listing`);
//!               a kind-2 shrink (an earlier version's) leaves the home without a listing
//!   8 MOVE      as 1, then ivarint dc (!= 0): a move of ceiling units (a ceiled spread's)
//!     (ceiled)
//!   9 CREDIT    as 5, then ivarint dc (!= 0): a credit of ceiling units
//!     (ceiled)
//! nothing may follow
//! ```
//! A move or a credit is written as kind 8 or 9 exactly when it carries ceiling units, so a
//! replica of a module before ceilings still takes every other one; kinds 1 and 5 carry dc 0.
//! An unknown version or kind, a truncation, trailing bytes, a name of 0 or more than
//! `MAX_NAME` bytes, a dc of 0 in kind 8 or 9 are errors: the command refuses the step and
//! changes nothing. A later change adds a kind, or a version (every old version keeps its
//! decoder).

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::listing::ListClock;
use crate::counter::spread::MAX_HOLDERS;
use crate::counter::step::Step;
use crate::counter::transfer::{Ack, Credit, Units, MAX_NAME};

const VERSION: u8 = 1;
const FAMILY: &str = "CTR step";

const KIND_MOVE: u8 = 1;
const KIND_SHRINK: u8 = 2;
const KIND_SEAL: u8 = 3;
const KIND_RETARGET: u8 = 4;
const KIND_CREDIT: u8 = 5;
const KIND_ANSWER: u8 = 6;
const KIND_SHRINK_DATED: u8 = 7;
const KIND_MOVE_CEILED: u8 = 8;
const KIND_CREDIT_CEILED: u8 = 9;

pub fn encode(step: &Step) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION);
    match step {
        Step::Move {
            receiver,
            units,
            now_ms,
            new_id,
        } => {
            w.u8(ceiled_kind(units.dc, KIND_MOVE, KIND_MOVE_CEILED))
                .bytes(receiver)
                .ivarint(units.dv)
                .ivarint(units.df)
                .ivarint(*now_ms)
                .fixed_u64(*new_id);
            write_ceiling_units(&mut w, units.dc)
        }
        Step::Shrink {
            target,
            fold_ids,
            clock,
        } => {
            let kind = if clock.is_some() {
                KIND_SHRINK_DATED
            } else {
                KIND_SHRINK
            };
            w.u8(kind)
                .uvarint(*target as u64)
                .uvarint(fold_ids.len() as u64);
            for id in fold_ids {
                w.fixed_u64(*id);
            }
            if let Some(clock) = clock {
                w.ivarint(clock.now_ms).ivarint(clock.window_ms);
            }
            &mut w
        }
        Step::Seal {
            home,
            fold_id,
            now_ms,
            new_id,
        } => w
            .u8(KIND_SEAL)
            .bytes(home)
            .fixed_u64(*fold_id)
            .ivarint(*now_ms)
            .fixed_u64(*new_id),
        Step::RetargetMoves { home } => w.u8(KIND_RETARGET).bytes(home),
        Step::Credit(c) => {
            w.u8(ceiled_kind(c.dc, KIND_CREDIT, KIND_CREDIT_CEILED))
                .bytes(&c.giver);
            match c.from == c.giver {
                true => w.u8(0),
                false => w.u8(1).bytes(&c.from),
            };
            w.fixed_u64(c.giver_id)
                .uvarint(c.seq)
                .ivarint(c.dv)
                .ivarint(c.df)
                .fixed_u64(c.fold_id);
            write_ceiling_units(&mut w, c.dc)
        }
        Step::Answer(a) => w
            .u8(KIND_ANSWER)
            .bytes(&a.receiver)
            .uvarint(a.seq)
            .u8(u8::from(a.refused)),
    };
    w.finish()
}

/// The kind of a move or a credit carrying `dc` ceiling units: `plain` without any.
fn ceiled_kind(dc: i64, plain: u8, ceiled: u8) -> u8 {
    if dc == 0 {
        plain
    } else {
        ceiled
    }
}

/// The ceiling units a ceiled kind ends with; nothing for none (a plain kind's).
fn write_ceiling_units(w: &mut Writer, dc: i64) -> &mut Writer {
    if dc != 0 {
        w.ivarint(dc);
    }
    w
}

/// The step `buf` carries for the key `key`.
pub fn decode(key: &[u8], buf: &[u8]) -> Result<Step, DecodeError> {
    let mut r = Reader::open_message(buf, VERSION, FAMILY)?;
    let step = match r.u8()? {
        kind @ (KIND_MOVE | KIND_MOVE_CEILED) => {
            let receiver = name(&mut r)?;
            let (dv, df) = (r.ivarint()?, r.ivarint()?);
            let now_ms = r.ivarint()?;
            let new_id = nonzero(&mut r, "giver id")?;
            let dc = read_ceiling_units(&mut r, kind == KIND_MOVE_CEILED)?;
            Step::Move {
                receiver,
                units: Units { dv, df, dc },
                now_ms,
                new_id,
            }
        }
        kind @ (KIND_SHRINK | KIND_SHRINK_DATED) => {
            let target = r.uvarint()?;
            if target == 0 || target > MAX_HOLDERS as u64 {
                return decode_error("shrink target out of range");
            }
            let n = r.count(MAX_HOLDERS, 8)?;
            let fold_ids = (0..n)
                .map(|_| r.fixed_u64())
                .collect::<Result<Vec<_>, DecodeError>>()?;
            let clock = match kind {
                KIND_SHRINK_DATED => Some(list_clock(&mut r)?),
                _ => None,
            };
            Step::Shrink {
                target: target as usize,
                fold_ids,
                clock,
            }
        }
        KIND_SEAL => Step::Seal {
            home: name(&mut r)?,
            fold_id: nonzero(&mut r, "fold id")?,
            now_ms: r.ivarint()?,
            new_id: nonzero(&mut r, "giver id")?,
        },
        KIND_RETARGET => Step::RetargetMoves {
            home: name(&mut r)?,
        },
        kind @ (KIND_CREDIT | KIND_CREDIT_CEILED) => {
            let giver = name(&mut r)?;
            let from = match r.u8()? {
                0 => giver.clone(),
                1 => name(&mut r)?,
                other => return decode_error(format!("unknown credit name form {other}")),
            };
            let giver_id = r.fixed_u64()?;
            let seq = seq(&mut r)?;
            let (dv, df) = (r.ivarint()?, r.ivarint()?);
            let fold_id = r.fixed_u64()?;
            let dc = read_ceiling_units(&mut r, kind == KIND_CREDIT_CEILED)?;
            Step::Credit(Credit {
                giver,
                from,
                receiver: key.to_vec(),
                giver_id,
                seq,
                dv,
                df,
                dc,
                fold_id,
            })
        }
        KIND_ANSWER => Step::Answer(Ack {
            giver: key.to_vec(),
            receiver: name(&mut r)?,
            seq: seq(&mut r)?,
            refused: match r.u8()? {
                0 => false,
                1 => true,
                other => return decode_error(format!("unknown answer outcome {other}")),
            },
        }),
        other => return decode_error(format!("unknown {FAMILY} kind {other}")),
    };
    r.end(step, FAMILY)
}

fn name(r: &mut Reader) -> Result<Vec<u8>, DecodeError> {
    r.key_name(MAX_NAME, FAMILY)
}

/// The ceiling units a ceiled kind ends with (never 0); 0 for a plain kind.
fn read_ceiling_units(r: &mut Reader, ceiled: bool) -> Result<i64, DecodeError> {
    match ceiled {
        true => r.nonzero_ivarint("ceiling units", FAMILY),
        false => Ok(0),
    }
}

/// A fixed-width id that must not be 0.
fn nonzero(r: &mut Reader, what: &str) -> Result<u64, DecodeError> {
    match r.fixed_u64()? {
        0 => decode_error(format!("{what} 0 in a {FAMILY}")),
        v => Ok(v),
    }
}

fn seq(r: &mut Reader) -> Result<u64, DecodeError> {
    match r.uvarint()? {
        0 => decode_error(format!("seq 0 in a {FAMILY}")),
        v => Ok(v),
    }
}

/// The clock of a dated shrink: any time, a positive token window.
fn list_clock(r: &mut Reader) -> Result<ListClock, DecodeError> {
    let now_ms = r.ivarint()?;
    let window_ms = r.ivarint()?;
    if window_ms <= 0 {
        return decode_error("a shrink's token window is not positive");
    }
    Ok(ListClock { now_ms, window_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"{ctr.0000000000000006.1.0}k";

    fn samples() -> Vec<Step> {
        let credit = Credit {
            giver: b"g\x00\xff".to_vec(),
            from: b"f".to_vec(),
            receiver: KEY.to_vec(),
            giver_id: 77,
            seq: u64::MAX,
            dv: i64::MIN,
            df: -5,
            dc: 0,
            fold_id: 0,
        };
        vec![
            Step::Move {
                receiver: b"r".to_vec(),
                units: Units::value_and_floor(0, i64::MIN),
                now_ms: i64::MAX,
                new_id: u64::MAX,
            },
            Step::Shrink {
                target: 1,
                fold_ids: vec![2, u64::MAX],
                clock: None,
            },
            Step::Shrink {
                target: MAX_HOLDERS,
                fold_ids: Vec::new(),
                clock: None,
            },
            Step::Shrink {
                target: 3,
                fold_ids: vec![4],
                clock: Some(ListClock {
                    now_ms: i64::MIN,
                    window_ms: i64::MAX,
                }),
            },
            Step::Seal {
                home: b"k".to_vec(),
                fold_id: 9,
                now_ms: -1,
                new_id: 3,
            },
            Step::RetargetMoves {
                home: vec![b'h'; MAX_NAME],
            },
            Step::Move {
                receiver: b"r".to_vec(),
                units: Units::ceiling(i64::MIN),
                now_ms: -1,
                new_id: 1,
            },
            Step::Move {
                receiver: b"r".to_vec(),
                units: Units {
                    dv: 3,
                    df: -2,
                    dc: 1,
                },
                now_ms: 0,
                new_id: 2,
            },
            Step::Credit(credit.clone()),
            Step::Credit(Credit {
                from: credit.giver.clone(),
                fold_id: 5,
                ..credit.clone()
            }),
            Step::Credit(Credit {
                dc: i64::MAX,
                ..credit.clone()
            }),
            Step::Credit(Credit {
                from: credit.giver.clone(),
                dc: -1,
                ..credit
            }),
            Step::Answer(Ack {
                giver: KEY.to_vec(),
                receiver: b"k".to_vec(),
                seq: 1,
                refused: true,
            }),
        ]
    }

    #[test]
    fn steps_roundtrip_and_every_truncation_or_trailing_byte_is_refused() {
        for step in samples() {
            let buf = encode(&step);
            assert_eq!(decode(KEY, &buf), Ok(step.clone()));
            for len in 0..buf.len() {
                assert!(decode(KEY, &buf[..len]).is_err(), "{step:?} prefix {len}");
            }
            let mut trailing = buf.clone();
            trailing.push(0);
            assert!(decode(KEY, &trailing).is_err(), "{step:?} trailing");
        }
    }

    /// A move's or a credit's ceiling units, its plain and ceiled kinds, and the same step
    /// without ceiling units; None for another step.
    fn split_ceiling_units(step: &Step) -> Option<(i64, (u8, u8), Step)> {
        match step.clone() {
            Step::Move {
                receiver,
                units,
                now_ms,
                new_id,
            } => {
                let plain = Step::Move {
                    receiver,
                    units: Units { dc: 0, ..units },
                    now_ms,
                    new_id,
                };
                Some((units.dc, (KIND_MOVE, KIND_MOVE_CEILED), plain))
            }
            Step::Credit(c) => {
                let plain = Step::Credit(Credit { dc: 0, ..c.clone() });
                Some((c.dc, (KIND_CREDIT, KIND_CREDIT_CEILED), plain))
            }
            _ => None,
        }
    }

    /// A move or a credit is its plain kind's bytes exactly when it carries no ceiling units
    /// (so a replica before ceilings takes it), else the ceiled kind's: the same bytes with
    /// the dc after them. A plain kind decodes to dc 0; a ceiled kind with dc 0 is refused.
    #[test]
    fn ceiling_units_take_the_ceiled_kinds_and_plain_kinds_carry_none() {
        let mut ceiled = 0;
        for step in samples() {
            let Some((dc, kinds, plain)) = split_ceiling_units(&step) else {
                continue;
            };
            let (bytes, plain_bytes) = (encode(&step), encode(&plain));
            assert_eq!(plain_bytes[1], kinds.0, "{step:?}");
            if dc == 0 {
                assert_eq!(
                    bytes, plain_bytes,
                    "{step:?}: no ceiling units, the plain kind"
                );
                continue;
            }
            ceiled += 1;
            let mut dc_bytes = Writer::new();
            dc_bytes.ivarint(dc);
            let expected = [
                &plain_bytes[..1],
                &[kinds.1],
                &plain_bytes[2..],
                &dc_bytes.finish(),
            ];
            assert_eq!(bytes, expected.concat(), "{step:?}");
            // The plain kind's bytes (a master's before ceilings) decode to dc 0.
            assert_eq!(decode(KEY, &plain_bytes), Ok(plain));
            let zero_dc = [&bytes[..plain_bytes.len()], &[0][..]].concat();
            assert!(decode(KEY, &zero_dc).is_err(), "{step:?} with dc 0");
        }
        assert_eq!(ceiled, 4, "samples of both ceiled kinds");
    }

    #[test]
    fn unknown_versions_kinds_and_out_of_range_fields_are_refused() {
        let buf = encode(&samples()[0]);
        for v in [0, 2, 255] {
            let mut other = buf.clone();
            other[0] = v;
            assert!(decode(KEY, &other).is_err(), "version {v}");
        }
        for kind in [0, 10, 255] {
            let mut other = buf.clone();
            other[1] = kind;
            assert!(decode(KEY, &other).is_err(), "kind {kind}");
        }
        let forged = |body: &dyn Fn(&mut Writer)| {
            let mut w = Writer::new();
            w.u8(VERSION);
            body(&mut w);
            decode(KEY, &w.finish())
        };
        assert!(forged(&|w| {
            w.u8(KIND_SHRINK).uvarint(0).uvarint(0);
        })
        .is_err());
        assert!(forged(&|w| {
            w.u8(KIND_SHRINK).uvarint(MAX_HOLDERS as u64 + 1).uvarint(0);
        })
        .is_err());
        assert!(forged(&|w| {
            w.u8(KIND_SHRINK).uvarint(2).uvarint(u64::MAX);
        })
        .is_err());
        assert!(forged(&|w| {
            w.u8(KIND_SHRINK_DATED)
                .uvarint(2)
                .uvarint(0)
                .ivarint(5)
                .ivarint(0);
        })
        .is_err());
        assert!(forged(&|w| {
            w.u8(KIND_RETARGET).bytes(b"");
        })
        .is_err());
        assert!(forged(&|w| {
            w.u8(KIND_RETARGET).bytes(&vec![b'h'; MAX_NAME + 1]);
        })
        .is_err());
        assert!(forged(&|w| {
            w.u8(KIND_SEAL)
                .bytes(b"k")
                .fixed_u64(0)
                .ivarint(1)
                .fixed_u64(3);
        })
        .is_err());
        assert!(forged(&|w| {
            w.u8(KIND_ANSWER).bytes(b"k").uvarint(1).u8(2);
        })
        .is_err());
        assert!(forged(&|w| {
            w.u8(KIND_ANSWER).bytes(b"k").uvarint(0).u8(0);
        })
        .is_err());
        assert!(forged(&|w| {
            w.u8(KIND_CREDIT).bytes(b"g").u8(2);
        })
        .is_err());
    }
}
