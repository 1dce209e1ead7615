//! `CTR.THROTTLE`: a GCRA limiter whose replies equal redis-cell 0.2.2's `CL.THROTTLE` on the
//! same calls and clock. Pure: the glue reads the clock, this decides; the state (the
//! theoretical arrival time, and the replies of tokened calls) is a section of the counter.
//!
//! The arithmetic is redis-cell's, in integer nanoseconds:
//! - emission interval `T = period_ns / count` (as redis-cell computes it, through an f64);
//!   tolerance `tau = T * (max_burst + 1)`; limit `max_burst + 1`.
//! - `tat` is the stored arrival time, or `now` when there is none; `new_tat = max(tat, now) +
//!   T * quantity`. The call is limited when `now < new_tat - tau`; then `retry_after = new_tat -
//!   tau - now` (or -1 s when the quantity alone is larger than the tolerance) and `ttl = tat -
//!   now`; allowed, `tat` becomes `new_tat` and `ttl = new_tat - now`.
//! - `remaining = (tau - ttl) / T` in whole microseconds through an f64, or 0 when `tau - ttl <=
//!   -T`; `reset_after = ttl`; both seconds in the reply are truncated toward zero (0.2.2's
//!   `num_seconds`; later redis-cell versions round a partial second up).
//!
//! One deliberate difference: redis-cell's key expires at the whole millisecond below `tat`, so
//! for less than a millisecond a stale `tat` may still be read there; here a `tat` at or
//! before `now` is no state at all (the two agree whenever `T` is a whole number of ms).

use super::siphash::token_fingerprint;
use super::tokens::{TokenEntry, TokenWindow};
use super::TokenStamp;

const NS_PER_SEC: i64 = 1_000_000_000;
pub const NS_PER_MS: i64 = 1_000_000;

/// Why a throttle call is refused before anything is read (its text is the client's error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThrottleError {
    Negative,
    ZeroRate,
    TooFast,
    Overflow,
}

impl ThrottleError {
    pub fn message(self) -> &'static str {
        match self {
            ThrottleError::Negative => {
                "ERR max_burst and quantity must not be negative, count_per_period and period_seconds must be positive"
            }
            ThrottleError::ZeroRate => "ERR count_per_period and period_seconds must be positive",
            ThrottleError::TooFast => {
                "ERR count_per_period is more than one per nanosecond of period_seconds"
            }
            ThrottleError::Overflow => "ERR counter overflow",
        }
    }
}

/// A limiter's configuration: what redis-cell derives from `max_burst count period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// `T`, ns between two units at the nominal rate.
    pub emission_ns: i64,
    /// `tau`, how far ahead of now the arrival time may run.
    pub tolerance_ns: i64,
    /// `max_burst + 1`.
    pub limit: i64,
}

/// What a call replies: `[limited, limit, remaining, retry_after, reset_after]`, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThrottleReply {
    pub limited: bool,
    pub limit: i64,
    pub remaining: i64,
    pub retry_after: i64,
    pub reset_after: i64,
}

/// One call decided: the reply, and the new arrival time when the call consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub reply: ThrottleReply,
    /// Some when the stored arrival time changes (an allowed call with a quantity above 0).
    pub new_tat_ns: Option<i64>,
    /// The reply's durations before they are rounded to seconds.
    pub retry_after_ns: i64,
    pub reset_after_ns: i64,
}

impl Gcra {
    pub fn new(max_burst: i64, count: i64, period_s: i64) -> Result<Gcra, ThrottleError> {
        if max_burst < 0 || count < 0 || period_s < 0 {
            return Err(ThrottleError::Negative);
        }
        if count == 0 || period_s == 0 {
            return Err(ThrottleError::ZeroRate);
        }
        let period_ns = period_s
            .checked_mul(NS_PER_SEC)
            .ok_or(ThrottleError::Overflow)?;
        // redis-cell divides in f64 and truncates; both operands are positive and the quotient
        // is at most period_ns, so the cast is exact in range.
        let emission_ns = (period_ns as f64 / count as f64) as i64;
        if emission_ns == 0 {
            return Err(ThrottleError::TooFast);
        }
        let limit = max_burst.checked_add(1).ok_or(ThrottleError::Overflow)?;
        let tolerance_ns = emission_ns
            .checked_mul(limit)
            .ok_or(ThrottleError::Overflow)?;
        Ok(Gcra {
            emission_ns,
            tolerance_ns,
            limit,
        })
    }

    /// Decides a call of `quantity` units at `now_ns` on a limiter whose stored arrival time is
    /// `tat_ns` (None: no state, or a stale one).
    pub fn decide(
        &self,
        tat_ns: Option<i64>,
        now_ns: i64,
        quantity: i64,
    ) -> Result<Decision, ThrottleError> {
        if quantity < 0 {
            return Err(ThrottleError::Negative);
        }
        let overflow = ThrottleError::Overflow;
        let increment = self.emission_ns.checked_mul(quantity).ok_or(overflow)?;
        let tat = tat_ns.filter(|t| *t > now_ns).unwrap_or(now_ns);
        let new_tat = tat.checked_add(increment).ok_or(overflow)?;
        let allow_at = new_tat.checked_sub(self.tolerance_ns).ok_or(overflow)?;
        let limited = now_ns < allow_at;
        let (ttl, retry_after_ns) = if limited {
            let retry = if increment <= self.tolerance_ns {
                allow_at - now_ns
            } else {
                -NS_PER_SEC
            };
            (tat - now_ns, retry)
        } else {
            (new_tat - now_ns, -NS_PER_SEC)
        };
        let next = self.tolerance_ns.checked_sub(ttl).ok_or(overflow)?;
        let remaining = if next > -self.emission_ns {
            ((next / 1000) as f64 / (self.emission_ns / 1000) as f64) as i64
        } else {
            0
        };
        let consumes = !limited && new_tat != tat;
        Ok(Decision {
            reply: ThrottleReply {
                limited,
                limit: self.limit,
                remaining,
                retry_after: retry_after_ns / NS_PER_SEC,
                reset_after: ttl / NS_PER_SEC,
            },
            new_tat_ns: consumes.then_some(new_tat),
            retry_after_ns,
            reset_after_ns: ttl,
        })
    }
}

/// The 31-bit print of a call's arguments: a token names one call (`max_burst count period
/// quantity`); reused for another, it is refused.
pub fn throttle_intent(max_burst: i64, count: i64, period_s: i64, quantity: i64) -> u32 {
    let mut bytes = [0u8; 32];
    for (i, v) in [max_burst, count, period_s, quantity].iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    (token_fingerprint(&bytes) & 0x7fff_ffff) as u32
}

/// A tokened call remembered: its first reply and the print of its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleEntry {
    pub expires_at: i64,
    pub reply: ThrottleReply,
    pub intent: u32,
}

fn halves(v: i64) -> [u32; 2] {
    [v as u32, ((v as u64) >> 32) as u32]
}

fn whole(h: &[u32]) -> i64 {
    (u64::from(h[0]) | (u64::from(h[1]) << 32)) as i64
}

impl TokenEntry for ThrottleEntry {
    /// Four i64 as halves, then the intent with the limited flag in bit 31.
    type Payload = [u32; 9];
    fn expires_at(&self) -> i64 {
        self.expires_at
    }
    fn payload(&self) -> Self::Payload {
        let r = &self.reply;
        let mut p = [0u32; 9];
        for (i, v) in [r.limit, r.remaining, r.retry_after, r.reset_after]
            .into_iter()
            .enumerate()
        {
            p[i * 2..i * 2 + 2].copy_from_slice(&halves(v));
        }
        p[8] = (u32::from(r.limited) << 31) | (self.intent & 0x7fff_ffff);
        p
    }
    fn from_stored(expires_at: i64, p: Self::Payload) -> Self {
        ThrottleEntry {
            expires_at,
            reply: ThrottleReply {
                limited: p[8] >> 31 == 1,
                limit: whole(&p[0..2]),
                remaining: whole(&p[2..4]),
                retry_after: whole(&p[4..6]),
                reset_after: whole(&p[6..8]),
            },
            intent: p[8] & 0x7fff_ffff,
        }
    }
}

/// A counter's limiter state: the arrival time (unix ns) and the replies of tokened calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Throttle {
    pub tat_ns: Option<i64>,
    /// None while no tokened call is remembered (never an empty window): most limiters never
    /// see a token, and a window costs 56 bytes.
    replies: Option<Box<TokenWindow<ThrottleEntry>>>,
}

static NO_REPLIES: TokenWindow<ThrottleEntry> = TokenWindow::from_empty();

impl Throttle {
    pub fn new(tat_ns: Option<i64>, replies: TokenWindow<ThrottleEntry>) -> Self {
        Throttle {
            tat_ns,
            replies: (!replies.is_empty()).then(|| Box::new(replies)),
        }
    }

    /// The replies of tokened calls the limiter remembers.
    pub fn replies(&self) -> &TokenWindow<ThrottleEntry> {
        self.replies.as_deref().unwrap_or(&NO_REPLIES)
    }

    pub fn is_empty(&self) -> bool {
        self.tat_ns.is_none() && self.replies.is_none()
    }

    /// Heap bytes beyond the struct itself, and as the allocator rounds them.
    pub fn heap_bytes(&self) -> usize {
        self.replies.as_ref().map_or(0, |r| {
            std::mem::size_of::<TokenWindow<ThrottleEntry>>() + r.heap_bytes()
        })
    }

    pub fn allocated_bytes(&self) -> usize {
        self.replies.as_ref().map_or(0, |r| {
            crate::memsize::usable_size(std::mem::size_of::<TokenWindow<ThrottleEntry>>())
                + r.allocated_bytes()
        })
    }

    /// When the key holding only this state is no different from a missing one: the later of
    /// the arrival time (rounded up to a ms) and the last remembered reply's expiry. The
    /// arrival time is on the calls' clock (`AT`); `lag_ms`, how far that clock runs behind the
    /// server's (0 when it does not), moves it onto the server's, so that a caller whose clock
    /// lags never sees its limiter expire before it is idle (as redis-cell sets its TTL from
    /// the arrival time minus now, on the server's clock).
    pub fn idle_at_ms(&self, lag_ms: i64) -> Option<i64> {
        let tat = self.tat_ns.map(|t| {
            let ms = t.div_euclid(NS_PER_MS) + i64::from(t.rem_euclid(NS_PER_MS) != 0);
            ms.saturating_add(lag_ms.max(0))
        });
        [tat, self.replies().latest_expiry()]
            .into_iter()
            .flatten()
            .max()
    }
}

/// What a tokened call finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThrottleRetry {
    New,
    Replay(ThrottleReply),
    Conflict,
}

/// A throttle call as applied (by the master, and by replicas and the AOF from its effect):
/// the arrival time it leaves (None: unchanged) and the token it remembers with its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleOp {
    /// The master's time, ms (the token window sweeps at it).
    pub now: i64,
    pub tat_ns: Option<i64>,
    pub token: Option<TokenStamp>,
    pub reply: ThrottleReply,
    pub intent: u32,
}

impl Throttle {
    pub fn retry(&self, fp: u64, intent: u32, now: i64) -> ThrottleRetry {
        match self.replies().get_live(fp, now) {
            None => ThrottleRetry::New,
            Some(e) if e.intent == intent => ThrottleRetry::Replay(e.reply),
            Some(_) => ThrottleRetry::Conflict,
        }
    }

    pub fn apply(&mut self, op: &ThrottleOp) {
        if let Some(r) = &mut self.replies {
            r.sweep(op.now);
            if r.is_empty() {
                self.replies = None;
            }
        }
        if let Some(tat) = op.tat_ns {
            self.tat_ns = Some(tat);
        }
        if let Some(t) = op.token {
            let entry = ThrottleEntry {
                expires_at: t.expires_at,
                reply: op.reply,
                intent: op.intent & 0x7fff_ffff,
            };
            self.replies
                .get_or_insert_with(Box::default)
                .insert(t.fp, entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = NS_PER_MS;
    const S: i64 = NS_PER_SEC;

    /// redis-cell's own sequence (its `it_rate_limits` cases): 5 per burst, 1 per second, one
    /// clock, the state carried from call to call as its store carries it.
    #[test]
    fn replies_as_redis_cell_on_its_own_sequence() {
        let g = Gcra::new(4, 1, 1).unwrap();
        let start = 1_700_000_000_000 * MS;
        // (now after start, quantity, remaining, reset_after ns, retry_after ns, limited)
        let cases: [(i64, i64, i64, i64, i64, bool); 15] = [
            (0, 6, 5, 0, -S, true),
            (0, 1, 4, S, -S, false),
            (0, 1, 3, 2 * S, -S, false),
            (0, 1, 2, 3 * S, -S, false),
            (0, 1, 1, 4 * S, -S, false),
            (0, 1, 0, 5 * S, -S, false),
            (0, 1, 0, 5 * S, S, true),
            (3000 * MS, 1, 2, 3000 * MS, -S, false),
            (3100 * MS, 1, 1, 3900 * MS, -S, false),
            (4000 * MS, 1, 1, 4000 * MS, -S, false),
            (8000 * MS, 1, 4, 1000 * MS, -S, false),
            (9500 * MS, 1, 4, 1000 * MS, -S, false),
            (9500 * MS, 0, 4, S, -S, false),
            (9500 * MS, 2, 2, 3 * S, -S, false),
            (9500 * MS, 5, 2, 3 * S, 3 * S, true),
        ];
        let mut tat = None;
        for (i, (at, q, remaining, reset, retry, limited)) in cases.into_iter().enumerate() {
            let d = g.decide(tat, start + at, q).unwrap();
            assert_eq!(d.reply.limited, limited, "case {i}");
            assert_eq!(d.reply.limit, 5, "case {i}");
            assert_eq!(d.reply.remaining, remaining, "case {i}");
            assert_eq!(d.reset_after_ns, reset, "case {i}");
            assert_eq!(d.retry_after_ns, retry, "case {i}");
            assert_eq!(d.reply.retry_after, retry / S, "case {i}");
            if let Some(t) = d.new_tat_ns {
                tat = Some(t);
            }
        }
    }

    #[test]
    fn a_zero_quantity_reads_without_consuming() {
        let g = Gcra::new(2, 10, 60).unwrap();
        let d = g.decide(None, 1000 * S, 0).unwrap();
        assert_eq!(d.new_tat_ns, None);
        assert_eq!(d.reply.remaining, 3);
        let d = g.decide(Some(1006 * S), 1000 * S, 0).unwrap();
        assert_eq!(d.new_tat_ns, None, "the arrival time stays");
        assert_eq!((d.reply.remaining, d.reply.reset_after), (2, 6));
    }

    #[test]
    fn seconds_are_truncated_as_in_0_2_2() {
        // 3 per 2 s: T = 666_666_666 ns, a partial second in every reply.
        let g = Gcra::new(0, 3, 2).unwrap();
        assert_eq!(g.emission_ns, 666_666_666);
        let d = g.decide(None, 10 * S, 1).unwrap();
        assert_eq!(d.reply.reset_after, 0, "0.67 s reads 0");
        let d = g.decide(d.new_tat_ns, 10 * S, 1).unwrap();
        assert!(d.reply.limited);
        assert_eq!((d.reply.retry_after, d.reply.reset_after), (0, 0));
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert_eq!(Gcra::new(-1, 1, 1), Err(ThrottleError::Negative));
        assert_eq!(Gcra::new(1, 0, 1), Err(ThrottleError::ZeroRate));
        assert_eq!(Gcra::new(1, 1, 0), Err(ThrottleError::ZeroRate));
        assert_eq!(Gcra::new(1, 1, i64::MAX), Err(ThrottleError::Overflow));
        assert_eq!(Gcra::new(1, i64::MAX, 1), Err(ThrottleError::TooFast));
        assert_eq!(Gcra::new(i64::MAX, 1, 1), Err(ThrottleError::Overflow));
        let g = Gcra::new(1, 1, 1).unwrap();
        assert_eq!(g.decide(None, 0, -1), Err(ThrottleError::Negative));
        assert_eq!(g.decide(None, 0, i64::MAX), Err(ThrottleError::Overflow));
        assert_eq!(
            g.decide(None, i64::MAX - 10, 1),
            Err(ThrottleError::Overflow)
        );
    }

    #[test]
    fn a_stale_arrival_time_is_no_state() {
        let g = Gcra::new(1, 1, 1).unwrap();
        assert_eq!(
            g.decide(Some(5 * S), 9 * S, 1).unwrap(),
            g.decide(None, 9 * S, 1).unwrap()
        );
    }

    #[test]
    fn entries_round_trip_their_reply() {
        let e = ThrottleEntry {
            expires_at: 77,
            reply: ThrottleReply {
                limited: true,
                limit: i64::MAX,
                remaining: -3,
                retry_after: i64::MIN,
                reset_after: 12,
            },
            intent: throttle_intent(1, 2, 3, 4),
        };
        assert_eq!(ThrottleEntry::from_stored(77, e.payload()), e);
        assert_ne!(throttle_intent(1, 2, 3, 4), throttle_intent(1, 2, 3, 5));
    }

    #[test]
    fn a_token_replays_and_refuses_other_arguments() {
        let mut t = Throttle::default();
        let reply = ThrottleReply {
            limit: 5,
            remaining: 4,
            retry_after: -1,
            ..ThrottleReply::default()
        };
        let op = ThrottleOp {
            now: 0,
            tat_ns: Some(S),
            token: Some(TokenStamp {
                fp: 9,
                expires_at: 100,
            }),
            reply,
            intent: 7,
        };
        t.apply(&op);
        assert_eq!(t.retry(9, 7, 50), ThrottleRetry::Replay(reply));
        assert_eq!(t.retry(9, 8, 50), ThrottleRetry::Conflict);
        assert_eq!(t.retry(9, 7, 100), ThrottleRetry::New, "expired");
        assert_eq!(t.idle_at_ms(0), Some(1000));
        assert_eq!(t.idle_at_ms(-5), Some(1000), "a clock ahead moves nothing");
        assert_eq!(t.idle_at_ms(200), Some(1200), "a clock behind the server's");
    }
}
