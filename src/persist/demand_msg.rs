//! The cluster-bus messages that move budget toward demand between the holders of a floored
//! spread counter across masters (see `runtime::floor_moves`):
//!
//! ```text
//! notice: u8 version (= 1), (uvarint len, home)
//!         a holder's master tells the home's master that holders of `home` refused purchases
//! poll:   u8 version (= 1), u64 LE id, (uvarint len, home), uvarint n (>= 1), n x (uvarint len, name)
//!         the home's master asks another master for these holders' budgets and demand
//! answer: u8 version (= 1), u64 LE id, uvarint n, n x report
//! report: u8 2 + ivarint budget + uvarint moving_out + uvarint refused_units + uvarint refusals
//!           + uvarint largest
//!         u8 0     the same without moving_out (read as 0; what earlier modules send)
//!         u8 1     not served here (the slot is elsewhere or migrating)
//! give:   u8 version (= 1), (uvarint len, giver), (uvarint len, receiver), uvarint units (>= 1)
//!         the home's master asks the giver's master to move up to `units` of budget
//! headroom: u8 version (= 1), (uvarint len, home), u64 LE spread id, uvarint units,
//!         ivarint round_ms
//!         the home's master tells a polled master the whole headroom its round saw, and when
//! ```
//! A lost, repeated or late message costs at most one rebalance: a poll that is not answered
//! is dropped by the home (the next refusal polls again), and a give is decided by the giver
//! alone against its budget at that moment (a repeat finds its pair busy or its budget spent).
//! Anything malformed is dropped by the receiver.

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::rebalance::DemandMeter;
use crate::counter::spread::{MAX_HOLDERS, MAX_HOLDER_NAME};

const VERSION: u8 = 1;

/// What a master reports about one holder it was polled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderDemand {
    /// Its budget (value - own floor), the budget moving out of it unacknowledged, and its
    /// demand meter since the master started.
    Here {
        budget: i64,
        moving_out: i64,
        meter: DemandMeter,
    },
    NotHere,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Give {
    pub giver: Vec<u8>,
    pub receiver: Vec<u8>,
    pub units: i64,
}

/// A poll: its id, the home, the holders asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollRequest {
    pub id: u64,
    pub home: Vec<u8>,
    pub names: Vec<Vec<u8>>,
}

pub fn encode_notice(home: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).bytes(home);
    w.finish()
}

pub fn decode_notice(buf: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut r = open(buf)?;
    let home = name(&mut r)?;
    close(&r, home)
}

pub fn encode_poll(id: u64, home: &[u8], names: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).fixed_u64(id).bytes(home);
    w.uvarint(names.len() as u64);
    for n in names {
        w.bytes(n);
    }
    w.finish()
}

pub fn decode_poll(buf: &[u8]) -> Result<PollRequest, DecodeError> {
    let mut r = open(buf)?;
    let id = r.fixed_u64()?;
    let home = name(&mut r)?;
    let n = r.count(MAX_HOLDERS, 2)?;
    if n == 0 {
        return decode_error("demand poll for no holders");
    }
    let names = (0..n)
        .map(|_| name(&mut r))
        .collect::<Result<Vec<_>, _>>()?;
    close(&r, PollRequest { id, home, names })
}

pub fn encode_answer(id: u64, reports: &[HolderDemand]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).fixed_u64(id).uvarint(reports.len() as u64);
    for report in reports {
        match report {
            HolderDemand::Here {
                budget,
                moving_out,
                meter,
            } => w
                .u8(2)
                .ivarint(*budget)
                .uvarint((*moving_out).max(0) as u64)
                .uvarint(meter.refused_units)
                .uvarint(meter.refusals)
                .uvarint(meter.largest_refused),
            HolderDemand::NotHere => w.u8(1),
        };
    }
    w.finish()
}

pub fn decode_answer(buf: &[u8]) -> Result<(u64, Vec<HolderDemand>), DecodeError> {
    let mut r = open(buf)?;
    let id = r.fixed_u64()?;
    let n = r.count(MAX_HOLDERS, 1)?;
    let reports = (0..n)
        .map(|_| {
            Ok(match r.u8()? {
                tag @ (0 | 2) => HolderDemand::Here {
                    budget: r.ivarint()?,
                    moving_out: match tag {
                        2 => i64::try_from(r.uvarint()?).unwrap_or(i64::MAX),
                        _ => 0,
                    },
                    meter: DemandMeter {
                        refused_units: r.uvarint()?,
                        refusals: r.uvarint()?,
                        largest_refused: r.uvarint()?,
                        waiting: None, // local to the holder's master
                    },
                },
                1 => HolderDemand::NotHere,
                other => return decode_error(format!("unknown holder report {other}")),
            })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    close(&r, (id, reports))
}

pub fn encode_give(m: &Give) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).bytes(&m.giver).bytes(&m.receiver);
    w.uvarint(m.units.max(0) as u64);
    w.finish()
}

pub fn decode_give(buf: &[u8]) -> Result<Give, DecodeError> {
    let mut r = open(buf)?;
    let giver = name(&mut r)?;
    let receiver = name(&mut r)?;
    let units = match i64::try_from(r.uvarint()?) {
        Ok(u) if u >= 1 => u,
        _ => return decode_error("give of no units or too many"),
    };
    close(
        &r,
        Give {
            giver,
            receiver,
            units,
        },
    )
}

/// The whole headroom a round saw, for one spread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headroom {
    pub home: Vec<u8>,
    pub spread_id: u64,
    pub units: i64,
    /// When the round ran, on the home master's clock.
    pub round_ms: i64,
}

pub fn encode_headroom(m: &Headroom) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(VERSION).bytes(&m.home).fixed_u64(m.spread_id);
    w.uvarint(m.units.max(0) as u64).ivarint(m.round_ms);
    w.finish()
}

pub fn decode_headroom(buf: &[u8]) -> Result<Headroom, DecodeError> {
    let mut r = open(buf)?;
    let home = name(&mut r)?;
    let spread_id = r.fixed_u64()?;
    let units = i64::try_from(r.uvarint()?).unwrap_or(i64::MAX);
    let round_ms = r.ivarint()?;
    close(
        &r,
        Headroom {
            home,
            spread_id,
            units,
            round_ms,
        },
    )
}

const FAMILY: &str = "demand message";

fn open(buf: &[u8]) -> Result<Reader<'_>, DecodeError> {
    Reader::open_message(buf, VERSION, FAMILY)
}

fn name(r: &mut Reader) -> Result<Vec<u8>, DecodeError> {
    r.key_name(MAX_HOLDER_NAME, FAMILY)
}

fn close<T>(r: &Reader, m: T) -> Result<T, DecodeError> {
    r.end(m, FAMILY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_roundtrip_and_every_truncation_is_refused() {
        let home = b"{sale}".to_vec();
        let names = vec![b"{ctr.1.0}{sale}".to_vec(), b"\x00\xff".to_vec()];
        let reports = vec![
            HolderDemand::Here {
                budget: -1,
                moving_out: 40,
                meter: DemandMeter {
                    refused_units: u64::MAX,
                    refusals: 3,
                    largest_refused: 9,
                    waiting: None,
                },
            },
            HolderDemand::NotHere,
        ];
        let headroom = Headroom {
            home: home.clone(),
            spread_id: u64::MAX,
            units: 1_000,
            round_ms: -1,
        };
        let give = Give {
            giver: home.clone(),
            receiver: names[0].clone(),
            units: i64::MAX,
        };
        let notice = encode_notice(&home);
        let poll = encode_poll(u64::MAX, &home, &names);
        let answer = encode_answer(7, &reports);
        let give_buf = encode_give(&give);
        let headroom_buf = encode_headroom(&headroom);
        assert_eq!(decode_headroom(&headroom_buf).unwrap(), headroom);
        assert_eq!(decode_notice(&notice).unwrap(), home);
        let request = PollRequest {
            id: u64::MAX,
            home,
            names,
        };
        assert_eq!(decode_poll(&poll).unwrap(), request);
        assert_eq!(decode_answer(&answer).unwrap(), (7, reports));
        assert_eq!(decode_give(&give_buf).unwrap(), give);
        type Decoder = fn(&[u8]) -> bool;
        let cases: [(&Vec<u8>, Decoder); 5] = [
            (&headroom_buf, |b| decode_headroom(b).is_ok()),
            (&notice, |b| decode_notice(b).is_ok()),
            (&poll, |b| decode_poll(b).is_ok()),
            (&answer, |b| decode_answer(b).is_ok()),
            (&give_buf, |b| decode_give(b).is_ok()),
        ];
        for (buf, decodes) in cases {
            for len in 0..buf.len() {
                assert!(!decodes(&buf[..len]), "prefix {len} of {buf:?}");
            }
            let mut trailing = buf.clone();
            trailing.push(0);
            assert!(!decodes(&trailing), "trailing byte after {buf:?}");
        }
    }

    #[test]
    fn forged_messages_are_refused() {
        let mut wrong_version = encode_notice(b"k");
        wrong_version[0] = 2;
        assert!(decode_notice(&wrong_version).is_err());
        assert!(decode_notice(&encode_notice(b"")).is_err(), "an empty name");
        assert!(
            decode_poll(&encode_poll(1, b"k", &[])).is_err(),
            "no holders"
        );
        let zero = encode_give(&Give {
            giver: b"g".to_vec(),
            receiver: b"r".to_vec(),
            units: 0,
        });
        assert!(decode_give(&zero).is_err(), "no units");
        let mut unknown = encode_answer(1, &[HolderDemand::NotHere]);
        *unknown.last_mut().unwrap() = 9;
        assert!(decode_answer(&unknown).is_err());
    }

    #[test]
    fn an_earlier_modules_report_reads_with_nothing_moving_out() {
        // version, id, one report: tag 0, budget 5 (zigzag 10), refused 7, refusals 1, largest 7
        let mut old = vec![VERSION];
        old.extend(3u64.to_le_bytes());
        old.extend([1, 0, 10, 7, 1, 7]);
        let meter = DemandMeter {
            refused_units: 7,
            refusals: 1,
            largest_refused: 7,
            waiting: None,
        };
        let here = HolderDemand::Here {
            budget: 5,
            moving_out: 0,
            meter,
        };
        assert_eq!(decode_answer(&old).unwrap(), (3, vec![here]));
    }
}
