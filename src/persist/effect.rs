//! The encoding of a replicated write effect (`CTR.APPLY key <effect>`): the operation the
//! master applied, with every decision it made (time, shard, shard count, token stamp) and the
//! absolute expiry it set on create. Replicas and the AOF replay it without deciding anything.
//!
//! Layout, format 1:
//! ```text
//! u8 format (= 1)
//! u8 kind: 1 ADD, 2 CLEAR, 3 DECR
//! ivarint now
//! ADD:  ivarint delta, uvarint shard, uvarint shards
//! DECR: ivarint amount, uvarint shard, uvarint shards
//! u8 flags: bit 0 token, bit 1 expire-at; other bits must be 0
//! token:     u64 LE fingerprint, ivarint expiry
//! expire-at: ivarint unix ms
//! ```

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::{AddOp, ClearOp, DecrOp, TokenStamp, MAX_SHARDS};

const FORMAT_V1: u8 = 1;
const KIND_ADD: u8 = 1;
const KIND_CLEAR: u8 = 2;
const KIND_DECR: u8 = 3;
const FLAG_TOKEN: u8 = 1;
const FLAG_EXPIRE_AT: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterOp {
    Add(AddOp),
    Clear(ClearOp),
    Decr(DecrOp),
}

impl CounterOp {
    /// The shard count the operation leaves (None: a clear keeps the current one).
    pub fn shards(&self) -> Option<usize> {
        match self {
            CounterOp::Add(op) => Some(op.shards),
            CounterOp::Decr(op) => Some(op.shards),
            CounterOp::Clear(_) => None,
        }
    }

    fn token(&self) -> Option<TokenStamp> {
        match self {
            CounterOp::Add(op) => op.token,
            CounterOp::Clear(op) => op.token,
            CounterOp::Decr(op) => op.token,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effect {
    pub op: CounterOp,
    /// Absolute expiry (unix ms) the master set because this write created the key.
    pub expire_at: Option<i64>,
}

pub fn encode(effect: &Effect) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(FORMAT_V1);
    match &effect.op {
        CounterOp::Add(op) => {
            w.u8(KIND_ADD).ivarint(op.now).ivarint(op.delta);
            w.uvarint(op.shard as u64).uvarint(op.shards as u64);
        }
        CounterOp::Clear(op) => {
            w.u8(KIND_CLEAR).ivarint(op.now);
        }
        CounterOp::Decr(op) => {
            w.u8(KIND_DECR).ivarint(op.now).ivarint(op.amount);
            w.uvarint(op.shard as u64).uvarint(op.shards as u64);
        }
    }
    let token = effect.op.token();
    let mut flags = 0;
    if token.is_some() {
        flags |= FLAG_TOKEN;
    }
    if effect.expire_at.is_some() {
        flags |= FLAG_EXPIRE_AT;
    }
    w.u8(flags);
    if let Some(t) = token {
        w.fixed_u64(t.fp).ivarint(t.expires_at);
    }
    if let Some(at) = effect.expire_at {
        w.ivarint(at);
    }
    w.finish()
}

pub fn decode(buf: &[u8]) -> Result<Effect, DecodeError> {
    let mut r = Reader::new(buf);
    let format = r.u8()?;
    if format != FORMAT_V1 {
        return decode_error(format!("unknown effect format {format}"));
    }
    let kind = r.u8()?;
    let now = r.ivarint()?;
    let (delta, shard, shards) = match kind {
        KIND_ADD | KIND_DECR => (r.ivarint()?, shard_index(&mut r)?, shard_index(&mut r)?),
        KIND_CLEAR => (0, 0, 0),
        other => return decode_error(format!("unknown effect kind {other}")),
    };
    let flags = r.u8()?;
    if flags & !(FLAG_TOKEN | FLAG_EXPIRE_AT) != 0 {
        return decode_error("unknown effect flags");
    }
    let token = if flags & FLAG_TOKEN != 0 {
        Some(TokenStamp {
            fp: r.fixed_u64()?,
            expires_at: r.ivarint()?,
        })
    } else {
        None
    };
    let expire_at = if flags & FLAG_EXPIRE_AT != 0 {
        Some(r.ivarint()?)
    } else {
        None
    };
    if !r.is_empty() {
        return decode_error("trailing bytes after the effect");
    }
    let op = match kind {
        KIND_ADD => CounterOp::Add(AddOp {
            now,
            delta,
            shard,
            shards,
            token,
        }),
        KIND_DECR => CounterOp::Decr(DecrOp {
            now,
            amount: delta,
            shard,
            shards,
            token,
        }),
        _ => CounterOp::Clear(ClearOp { now, token }),
    };
    Ok(Effect { op, expire_at })
}

fn shard_index(r: &mut Reader) -> Result<usize, DecodeError> {
    let v = r.uvarint()?;
    match usize::try_from(v) {
        Ok(v) if v <= MAX_SHARDS => Ok(v),
        _ => decode_error("shard number out of range"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Effect> {
        let token = Some(TokenStamp {
            fp: u64::MAX,
            expires_at: i64::MIN,
        });
        vec![
            Effect {
                op: CounterOp::Add(AddOp {
                    now: 1_700_000_000_000,
                    delta: -5,
                    shard: 3,
                    shards: 4,
                    token,
                }),
                expire_at: Some(1_700_000_060_000),
            },
            Effect {
                op: CounterOp::Add(AddOp {
                    now: 0,
                    delta: i64::MAX,
                    shard: 0,
                    shards: 1,
                    token: None,
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Clear(ClearOp { now: 5, token }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Decr(DecrOp {
                    now: 7,
                    amount: 3,
                    shard: 1,
                    shards: 2,
                    token,
                }),
                expire_at: None,
            },
        ]
    }

    #[test]
    fn roundtrip() {
        for e in samples() {
            assert_eq!(decode(&encode(&e)).unwrap(), e);
        }
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        for e in samples() {
            let full = encode(&e);
            for len in 0..full.len() {
                assert!(decode(&full[..len]).is_err());
            }
            let mut longer = full.clone();
            longer.push(0);
            assert!(decode(&longer).is_err());
        }
    }

    #[test]
    fn refuses_unknown_kinds_flags_and_formats() {
        let mut b = encode(&samples()[1]);
        b[0] = 2;
        assert!(decode(&b).is_err());
        let mut b = encode(&samples()[1]);
        b[1] = 9;
        assert!(decode(&b).is_err());
        let mut b = encode(&samples()[2]);
        let flags_at = b.len() - 1 - 8 - 10; // flags, then fp (8) and expiry (10-byte varint)
        b[flags_at] |= 0x80;
        assert!(decode(&b).is_err());
    }
}
