//! The encoding of a replicated write effect (`CTR.APPLY key <effect>`): the operation the
//! master applied, with every decision it made (time, shard, shard count, token stamp) and the
//! absolute expiry it set on create. Replicas and the AOF replay it without deciding anything.
//!
//! Layout, format 1:
//! ```text
//! u8 format (= 1)
//! u8 kind: 1 ADD, 2 CLEAR, 3 DECR, 4 RECONCILE, 5 START, 6 SWEEP, 7 CLEAR_TOTAL, 8 INCREX,
//!         9 REFUND
//! ivarint now
//! ADD:       ivarint delta, uvarint shard, uvarint shards
//! DECR:      ivarint amount, uvarint shard, uvarint shards
//! RECONCILE: ivarint truth, ivarint bucket width, ivarint retention
//! START:     ivarint bucket width, ivarint retention, u8 created (0 or 1)
//! SWEEP:     nothing more (drop the tokens and ledger entries expired at `now`)
//! CLEAR_TOTAL: ivarint total (the gathered total of a spread counter the master cleared:
//!            the home's value falls by it, and it is the reply a retry of the token replays)
//! INCREX:    ivarint applied increment, uvarint shard, uvarint shards, ivarint print of the
//!            arguments, u8 skipped (0 or 1: nothing changes but the token's memory)
//! REFUND:    ivarint units, uvarint shard, uvarint shards (the token flag names the grant)
//! THROTTLE (11): u8 parts (bit 0 arrival time, bit 1 reply; the reply exactly when the token
//!            flag is set), [ivarint arrival time, unix ns], [u8 limited, ivarint limit,
//!            ivarint remaining, ivarint retry_after, ivarint reset_after, uvarint intent]
//!            (a `CTR.THROTTLE` call the master decided: the arrival time it left and the reply
//!            its token replays; flags: token, expire-at, the key's new deadline)
//! WINDOW (12): ivarint window ms (0: NONE, remove the window), ivarint buckets; no flags
//!            (`CTR.WINDOW` at the master's time)
//! (kinds 8-10 are the bounds'; 13 is reserved)
//! u8 flags: bit 0 token, bit 1 expire-at, bit 2 event time, bit 3 watermark; others must be 0
//! then, in flag order:
//! token:     u64 LE fingerprint, ivarint expiry
//! expire-at: ivarint unix ms
//! event:     ivarint unix ms (absent: the event time is `now`)
//! watermark: ivarint unix ms
//! ```
//! Kinds 3-7 and flags 2-3 were added after kinds 1-2 shipped; effects without them decode as
//! before (a module from before kind 7 refuses a CLEAR_TOTAL effect as an unknown kind, an
//! error). START takes only the expire-at flag (the TTL of the write that created the key with
//! it), SWEEP none, CLEAR_TOTAL the token and expire-at flags, INCREX the token and event
//! flags, REFUND only the token flag, which it needs. INCREX and REFUND carry no TTL: the
//! master replicates the key's new TTL after them (PEXPIREAT or PERSIST).

use super::codec::{decode_error, DecodeError, Reader, Writer};
use crate::counter::throttle::ThrottleReply;
use crate::counter::window::{check_config, WindowOp};
use crate::counter::{
    AddOp, ClearOp, ClearTotalOp, DecrOp, IncrexOp, ReconcileOp, RefundOp, StartOp, ThrottleOp,
    TokenStamp, MAX_SHARDS,
};

const FORMAT_V1: u8 = 1;
const KIND_ADD: u8 = 1;
const KIND_CLEAR: u8 = 2;
const KIND_DECR: u8 = 3;
const KIND_RECONCILE: u8 = 4;
const KIND_START: u8 = 5;
const KIND_SWEEP: u8 = 6;
const KIND_CLEAR_TOTAL: u8 = 7;
const KIND_INCREX: u8 = 8;
const KIND_REFUND: u8 = 9;
const KIND_THROTTLE: u8 = 11;
const KIND_WINDOW: u8 = 12;
const THROTTLE_TAT: u8 = 1;
const THROTTLE_REPLY: u8 = 2;
const FLAG_TOKEN: u8 = 1;
const FLAG_EXPIRE_AT: u8 = 2;
const FLAG_EVENT: u8 = 4;
const FLAG_WATERMARK: u8 = 8;
const KNOWN_FLAGS: u8 = FLAG_TOKEN | FLAG_EXPIRE_AT | FLAG_EVENT | FLAG_WATERMARK;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterOp {
    Add(AddOp),
    Clear(ClearOp),
    Decr(DecrOp),
    Reconcile(ReconcileOp),
    /// Start keeping buckets.
    Start(StartOp),
    /// The idle sweep: drop what expired at this time.
    Sweep {
        now: i64,
    },
    /// A clear of a spread counter's total on its home (the total gathered by the master).
    ClearTotal(ClearTotalOp),
    /// A `CTR.INCREX` as decided (applied, or skipped with its token remembered).
    Increx(IncrexOp),
    /// A refund of a tokened grant.
    Refund(RefundOp),
    /// A `CTR.THROTTLE` call as the master decided it.
    Throttle(ThrottleOp),
    /// `CTR.WINDOW` at the master's time.
    Window(WindowOp),
}

impl CounterOp {
    /// The shard count the operation leaves (None: a clear keeps the current one).
    pub fn shards(&self) -> Option<usize> {
        match self {
            CounterOp::Add(op) => Some(op.shards),
            CounterOp::Decr(op) => Some(op.shards),
            CounterOp::Increx(op) if !op.skipped => Some(op.add.shards),
            CounterOp::Refund(op) => Some(op.shards),
            _ => None,
        }
    }

    fn token(&self) -> Option<TokenStamp> {
        match self {
            CounterOp::Add(op) => op.token,
            CounterOp::Clear(op) => op.token,
            CounterOp::Decr(op) => op.token,
            CounterOp::ClearTotal(op) => op.token,
            CounterOp::Increx(op) => op.add.token,
            CounterOp::Refund(op) => Some(TokenStamp {
                fp: op.fp,
                expires_at: 0,
            }),
            CounterOp::Throttle(op) => op.token,
            _ => None,
        }
    }

    /// The event time when it differs from `now` (only then is it encoded).
    fn distinct_event(&self) -> Option<i64> {
        let (now, event) = match self {
            CounterOp::Add(op) => (op.now, op.event),
            CounterOp::Decr(op) => (op.now, op.event),
            CounterOp::Increx(op) => (op.add.now, op.add.event),
            _ => return None,
        };
        (event != now).then_some(event)
    }

    fn watermark(&self) -> Option<i64> {
        match self {
            CounterOp::Reconcile(op) => op.watermark,
            _ => None,
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
    encode_into(effect, Vec::new())
}

/// Encodes into `buf` (cleared first), reusing its allocation.
pub fn encode_into(effect: &Effect, buf: Vec<u8>) -> Vec<u8> {
    let mut w = Writer::reusing(buf);
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
        CounterOp::Reconcile(op) => {
            w.u8(KIND_RECONCILE).ivarint(op.now).ivarint(op.truth);
            w.ivarint(op.width).ivarint(op.retention);
        }
        CounterOp::Start(op) => {
            w.u8(KIND_START).ivarint(op.now);
            w.ivarint(op.width)
                .ivarint(op.retention)
                .u8(u8::from(op.created));
        }
        CounterOp::Sweep { now } => {
            w.u8(KIND_SWEEP).ivarint(*now);
        }
        CounterOp::ClearTotal(op) => {
            w.u8(KIND_CLEAR_TOTAL).ivarint(op.now).ivarint(op.total);
        }
        CounterOp::Increx(op) => {
            let add = &op.add;
            w.u8(KIND_INCREX).ivarint(add.now).ivarint(add.delta);
            w.uvarint(add.shard as u64).uvarint(add.shards as u64);
            w.ivarint(op.print).u8(u8::from(op.skipped));
        }
        CounterOp::Refund(op) => {
            w.u8(KIND_REFUND).ivarint(op.now).ivarint(op.units);
            w.uvarint(op.shard as u64).uvarint(op.shards as u64);
        }
        CounterOp::Throttle(op) => encode_throttle(&mut w, op),
        CounterOp::Window(op) => {
            let (width, buckets) = op.config.unwrap_or((0, 0));
            w.u8(KIND_WINDOW)
                .ivarint(op.now)
                .ivarint(width)
                .ivarint(buckets);
        }
    }
    let token = effect.op.token();
    let event = effect.op.distinct_event();
    let watermark = effect.op.watermark();
    let flag = |present: bool, bit: u8| if present { bit } else { 0 };
    w.u8(flag(token.is_some(), FLAG_TOKEN)
        | flag(effect.expire_at.is_some(), FLAG_EXPIRE_AT)
        | flag(event.is_some(), FLAG_EVENT)
        | flag(watermark.is_some(), FLAG_WATERMARK));
    if let Some(t) = token {
        w.fixed_u64(t.fp).ivarint(t.expires_at);
    }
    for v in [effect.expire_at, event, watermark].into_iter().flatten() {
        w.ivarint(v);
    }
    w.finish()
}

fn encode_throttle(w: &mut Writer, op: &ThrottleOp) {
    let parts = if op.tat_ns.is_some() { THROTTLE_TAT } else { 0 }
        | if op.token.is_some() {
            THROTTLE_REPLY
        } else {
            0
        };
    w.u8(KIND_THROTTLE).ivarint(op.now).u8(parts);
    if let Some(tat) = op.tat_ns {
        w.ivarint(tat);
    }
    if op.token.is_some() {
        encode_throttle_reply(w, &op.reply, op.intent);
    }
}

/// A throttle call's reply and the print of its arguments, as effects and the state encoding
/// (section 21) write them: u8 limited, ivarint limit, remaining, retry_after, reset_after,
/// uvarint intent (< 2^31).
pub(super) fn encode_throttle_reply(w: &mut Writer, reply: &ThrottleReply, intent: u32) {
    w.u8(u8::from(reply.limited))
        .ivarint(reply.limit)
        .ivarint(reply.remaining)
        .ivarint(reply.retry_after)
        .ivarint(reply.reset_after)
        .uvarint(u64::from(intent));
}

pub(super) fn decode_throttle_reply(r: &mut Reader) -> Result<(ThrottleReply, u32), DecodeError> {
    let limited = match r.u8()? {
        0 => false,
        1 => true,
        other => return decode_error(format!("unknown throttle limited flag {other}")),
    };
    let reply = ThrottleReply {
        limited,
        limit: r.ivarint()?,
        remaining: r.ivarint()?,
        retry_after: r.ivarint()?,
        reset_after: r.ivarint()?,
    };
    match u32::try_from(r.uvarint()?) {
        Ok(intent) if intent < 1 << 31 => Ok((reply, intent)),
        _ => decode_error("throttle intent out of range"),
    }
}

/// The token of an effect whose flags say it has one.
fn decode_token(r: &mut Reader, flags: u8) -> Result<Option<TokenStamp>, DecodeError> {
    if flags & FLAG_TOKEN == 0 {
        return Ok(None);
    }
    Ok(Some(TokenStamp {
        fp: r.fixed_u64()?,
        expires_at: r.ivarint()?,
    }))
}

/// The body of a THROTTLE effect after its time, and its flags.
fn decode_throttle(r: &mut Reader, now: i64) -> Result<Effect, DecodeError> {
    let parts = r.u8()?;
    if parts & !(THROTTLE_TAT | THROTTLE_REPLY) != 0 {
        return decode_error("unknown throttle effect parts");
    }
    let tat_ns = if parts & THROTTLE_TAT != 0 {
        Some(r.ivarint()?)
    } else {
        None
    };
    let (reply, intent) = if parts & THROTTLE_REPLY != 0 {
        decode_throttle_reply(r)?
    } else {
        (ThrottleReply::default(), 0)
    };
    let flags = r.u8()?;
    if flags & !(FLAG_TOKEN | FLAG_EXPIRE_AT) != 0 {
        return decode_error("effect flag does not apply to its kind");
    }
    if (flags & FLAG_TOKEN != 0) != (parts & THROTTLE_REPLY != 0) {
        return decode_error("a throttle effect's reply goes with its token");
    }
    let token = decode_token(r, flags)?;
    let expire_at = if flags & FLAG_EXPIRE_AT != 0 {
        Some(r.ivarint()?)
    } else {
        None
    };
    if !r.is_empty() {
        return decode_error("trailing bytes after the effect");
    }
    let op = ThrottleOp {
        now,
        tat_ns,
        token,
        reply,
        intent,
    };
    Ok(Effect {
        op: CounterOp::Throttle(op),
        expire_at,
    })
}

/// The body of a WINDOW effect after its time, and its (empty) flags.
fn decode_window(r: &mut Reader, now: i64) -> Result<Effect, DecodeError> {
    let (width, buckets) = (r.ivarint()?, r.ivarint()?);
    let config = match (width, buckets) {
        (0, 0) => None,
        (w, n) => match check_config(w, n) {
            Ok(()) => Some((w, n)),
            Err(why) => return decode_error(format!("window effect refused ({why})")),
        },
    };
    if r.u8()? != 0 {
        return decode_error("effect flag does not apply to its kind");
    }
    if !r.is_empty() {
        return decode_error("trailing bytes after the effect");
    }
    Ok(Effect {
        op: CounterOp::Window(WindowOp { now, config }),
        expire_at: None,
    })
}

pub fn decode(buf: &[u8]) -> Result<Effect, DecodeError> {
    let mut r = Reader::new(buf);
    let format = r.u8()?;
    if format != FORMAT_V1 {
        return decode_error(format!("unknown effect format {format}"));
    }
    let kind = r.u8()?;
    let now = r.ivarint()?;
    if kind == KIND_THROTTLE {
        return decode_throttle(&mut r, now);
    }
    if kind == KIND_WINDOW {
        return decode_window(&mut r, now);
    }
    let (delta, shard, shards) = match kind {
        KIND_ADD | KIND_DECR | KIND_INCREX | KIND_REFUND => {
            (r.ivarint()?, shard_index(&mut r)?, shard_index(&mut r)?)
        }
        KIND_CLEAR => (0, 0, 0),
        KIND_RECONCILE | KIND_CLEAR_TOTAL => (r.ivarint()?, 0, 0),
        KIND_START | KIND_SWEEP => (0, 0, 0),
        other => return decode_error(format!("unknown effect kind {other}")),
    };
    let bucket_configs = if kind == KIND_RECONCILE || kind == KIND_START {
        Some((positive(&mut r)?, positive(&mut r)?))
    } else {
        None
    };
    let print = if kind == KIND_INCREX { r.ivarint()? } else { 0 };
    // START's created byte, INCREX's skipped byte.
    let created = match kind {
        KIND_START | KIND_INCREX => match r.u8()? {
            0 => false,
            1 => true,
            other => return decode_error(format!("unknown START or INCREX flag {other}")),
        },
        _ => false,
    };
    let flags = r.u8()?;
    let allowed = match kind {
        KIND_START => FLAG_EXPIRE_AT,
        KIND_SWEEP => 0,
        KIND_CLEAR_TOTAL => FLAG_TOKEN | FLAG_EXPIRE_AT,
        KIND_INCREX => FLAG_TOKEN | FLAG_EVENT,
        KIND_REFUND => FLAG_TOKEN,
        _ => KNOWN_FLAGS,
    };
    if flags & !allowed != 0 {
        return decode_error("effect flag does not apply to its kind");
    }
    if flags & !KNOWN_FLAGS != 0 {
        return decode_error("unknown effect flags");
    }
    let token = decode_token(&mut r, flags)?;
    let mut optional = |bit: u8| -> Result<Option<i64>, DecodeError> {
        if flags & bit != 0 {
            r.ivarint().map(Some)
        } else {
            Ok(None)
        }
    };
    let expire_at = optional(FLAG_EXPIRE_AT)?;
    let event = optional(FLAG_EVENT)?.unwrap_or(now);
    let watermark = optional(FLAG_WATERMARK)?;
    if (watermark.is_some() && kind != KIND_RECONCILE)
        || (flags & FLAG_EVENT != 0 && ![KIND_ADD, KIND_DECR, KIND_INCREX].contains(&kind))
    {
        return decode_error("effect flag does not apply to its kind");
    }
    if !r.is_empty() {
        return decode_error("trailing bytes after the effect");
    }
    let op = match kind {
        KIND_ADD => CounterOp::Add(AddOp {
            now,
            event,
            delta,
            shard,
            shards,
            token,
        }),
        KIND_DECR => CounterOp::Decr(DecrOp {
            now,
            event,
            amount: delta,
            shard,
            shards,
            token,
        }),
        KIND_RECONCILE => {
            let (width, retention) = bucket_configs.unwrap_or((1, 1));
            CounterOp::Reconcile(ReconcileOp {
                now,
                truth: delta,
                watermark,
                width,
                retention,
            })
        }
        KIND_START => {
            let (width, retention) = bucket_configs.unwrap_or((1, 1));
            CounterOp::Start(StartOp {
                now,
                width,
                retention,
                created,
            })
        }
        KIND_SWEEP => CounterOp::Sweep { now },
        KIND_CLEAR_TOTAL => CounterOp::ClearTotal(ClearTotalOp {
            now,
            total: delta,
            token,
        }),
        KIND_INCREX => CounterOp::Increx(IncrexOp {
            add: AddOp {
                now,
                event,
                delta,
                shard,
                shards,
                token,
            },
            skipped: created,
            print,
        }),
        KIND_REFUND => match token {
            Some(t) => CounterOp::Refund(RefundOp {
                now,
                fp: t.fp,
                units: delta,
                shard,
                shards,
            }),
            None => return decode_error("a refund effect without its token"),
        },
        _ => CounterOp::Clear(ClearOp { now, token }),
    };
    Ok(Effect { op, expire_at })
}

fn positive(r: &mut Reader) -> Result<i64, DecodeError> {
    match r.ivarint()? {
        v if v > 0 => Ok(v),
        _ => decode_error("bucket configs must be positive"),
    }
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
                    event: 1_699_999_999_000,
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
                    event: 0,
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
                    event: 7,
                    amount: 3,
                    shard: 1,
                    shards: 2,
                    token,
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Reconcile(ReconcileOp {
                    now: 9,
                    truth: -100,
                    watermark: Some(6_000),
                    width: 60_000,
                    retention: 3_600_000,
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Reconcile(ReconcileOp {
                    now: 9,
                    truth: 5,
                    watermark: None,
                    width: 1,
                    retention: 1,
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Start(StartOp {
                    now: 1_700_000_000_123,
                    width: 60_000,
                    retention: 3_600_000,
                    created: true,
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Start(StartOp {
                    now: -5,
                    width: 1,
                    retention: 1,
                    created: false,
                }),
                expire_at: Some(77),
            },
            Effect {
                op: CounterOp::Sweep { now: i64::MAX },
                expire_at: None,
            },
            Effect {
                op: CounterOp::ClearTotal(ClearTotalOp {
                    now: 11,
                    total: i64::MIN,
                    token,
                }),
                expire_at: Some(12),
            },
            Effect {
                op: CounterOp::ClearTotal(ClearTotalOp {
                    now: 11,
                    total: -3,
                    token: None,
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Increx(IncrexOp {
                    add: AddOp {
                        now: 20,
                        event: 15,
                        delta: -4,
                        shard: 1,
                        shards: 2,
                        token,
                    },
                    skipped: false,
                    print: i64::MIN,
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Throttle(ThrottleOp {
                    now: 1_700_000_000_000,
                    tat_ns: Some(1_700_000_001_000_000_000),
                    token,
                    reply: ThrottleReply {
                        limited: true,
                        limit: 5,
                        remaining: 0,
                        retry_after: 1,
                        reset_after: 4,
                    },
                    intent: 0x7fff_ffff,
                }),
                expire_at: Some(1_700_000_001_000),
            },
            Effect {
                op: CounterOp::Window(WindowOp {
                    now: 1_700_000_000_000,
                    config: Some((60_000, 10)),
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Increx(IncrexOp {
                    add: AddOp {
                        now: 20,
                        event: 20,
                        delta: 0,
                        shard: 0,
                        shards: 1,
                        token: None,
                    },
                    skipped: true,
                    print: 5,
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Window(WindowOp {
                    now: -4,
                    config: None,
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Refund(RefundOp {
                    now: 30,
                    fp: 77,
                    units: 9,
                    shard: 0,
                    shards: 1,
                }),
                expire_at: None,
            },
            Effect {
                op: CounterOp::Throttle(ThrottleOp {
                    now: 3,
                    tat_ns: Some(-1),
                    token: None,
                    reply: ThrottleReply::default(),
                    intent: 0,
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
        // START takes only an expiry, SWEEP nothing; START's created flag is 0 or 1.
        for (sample, flag) in [(6, FLAG_TOKEN), (8, FLAG_TOKEN), (8, FLAG_EXPIRE_AT)] {
            let mut b = encode(&samples()[sample]);
            *b.last_mut().unwrap() = flag;
            assert!(decode(&b).is_err(), "sample {sample} flag {flag}");
        }
        let mut b = encode(&samples()[6]);
        let created_at = b.len() - 2;
        b[created_at] = 2;
        assert!(decode(&b).is_err());
        // CLEAR_TOTAL takes no event time and no watermark.
        for flag in [FLAG_EVENT, FLAG_WATERMARK] {
            let mut b = encode(&samples()[10]);
            *b.last_mut().unwrap() = flag;
            b.push(2);
            assert!(decode(&b).is_err(), "flag {flag}");
        }
    }

    /// Effects written before CLEAR_TOTAL existed decode as they did (bytes as an older module
    /// wrote them), and a kind this module does not know is an error, not a panic.
    #[test]
    fn older_effects_still_decode_and_unknown_kinds_are_errors() {
        // format 1, CLEAR, now 5 (zigzag 10), flags 0
        assert_eq!(
            decode(&[1, 2, 10, 0]).unwrap(),
            Effect {
                op: CounterOp::Clear(ClearOp {
                    now: 5,
                    token: None
                }),
                expire_at: None,
            }
        );
        // format 1, ADD, now 1, delta -1, shard 0, shards 1, flags 0
        assert!(matches!(
            decode(&[1, 1, 2, 1, 0, 1, 0]).unwrap().op,
            CounterOp::Add(AddOp { delta: -1, .. })
        ));
        for kind in [0u8, 10, 255] {
            assert!(decode(&[1, kind, 2, 2, 0]).is_err(), "kind {kind}");
        }
    }
}
