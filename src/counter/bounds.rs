//! Bounds as `CTR.INCREX` writes them (Redis 8.8's `INCREX` rules on a counter, with the
//! counter's own floor and ceiling), and refunds of tokened grants (`CTR.REFUND`).
//!
//! A tokened `CTR.INCREX` remembers its reply pair: the new value in its ledger entry, the
//! applied increment in a record under the same token ([`Intent::APPLIED`]). A tokened grant (a
//! `CTR.DECRFLOOR`, or a negative `CTR.ADD` that was applied) keeps the units it took in a
//! record ([`Intent::GRANT`]); `CTR.REFUND` gives them back once and turns the record into
//! [`Intent::REFUNDED`] with the units returned, which a retry replays.

use super::ops::{AddOp, TokenStamp};
use super::tokens::WriteKind;
use super::{Counter, CounterError, Intent};

/// Where `current + increment` lands between `lower` and `upper` (INCREX's rule): the new value,
/// or None when the result is outside the bounds (or past 64 bits) and the write is skipped.
/// With `saturate`, an outside result is clamped to the nearest bound instead (a value already
/// outside moves to it, whatever the increment's sign); an applied increment past 64 bits is an
/// overflow. Bounds that hold no value (`lower > upper`) skip every write.
pub fn bounded_result(
    current: i64,
    increment: i64,
    lower: i64,
    upper: i64,
    saturate: bool,
) -> Result<Option<i64>, CounterError> {
    if lower > upper {
        return Ok(None);
    }
    let result = i128::from(current) + i128::from(increment);
    let (low, high) = (i128::from(lower), i128::from(upper));
    let target = if (low..=high).contains(&result) {
        result
    } else if saturate {
        result.clamp(low, high)
    } else {
        return Ok(None);
    };
    if i64::try_from(target - i128::from(current)).is_err() {
        return Err(CounterError::Overflow);
    }
    // Between two i64 bounds: fits.
    Ok(i64::try_from(target).ok())
}

/// One `CTR.INCREX` as the master decided it: the add of the applied increment (`add.delta`;
/// its token is the write's), or a skip (`skipped`: nothing changes but, with a token, the
/// reply is remembered). `print` names the arguments, for retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncrexOp {
    pub add: AddOp,
    pub skipped: bool,
    pub print: i64,
}

/// Give back the grant of token `fp`: `units` of it (the grant, or less under a ceiling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefundOp {
    pub now: i64,
    pub fp: u64,
    pub units: i64,
    pub shard: usize,
    pub shards: usize,
}

/// What a refund of a token finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundPlan {
    /// No grant of this token in the window (refused, unknown, expired): nil.
    NoGrant,
    /// Already refunded: the units it returned.
    Replay(i64),
    /// A grant to give back: this many units (all of it, or what fits under the ceiling).
    Give(i64),
    /// A grant on a holder folded back into its home: its units went home with the fold, and
    /// the sealed holder writes nothing. Once the fold has `landed` (its credit acknowledged,
    /// so the home holds the units and the seal is on this key's replicas), the refund is an
    /// add of `units` at the home under the token [`home_refund_token`]; before, it waits.
    Folded { units: i64, landed: bool },
}

/// The token under which the refund of a grant of token `fp` that a fold carried home is added
/// at the home (`CTR.ADD home units TOKEN <this>`): one per grant, so a retried refund replays
/// there. The home remembers it a token window from the add, which comes after the grant: past
/// the grant's own window the folded holder has no grant to send there any more.
pub fn home_refund_token(fp: u64) -> String {
    format!("ctr-refund:{fp:016x}")
}

impl Counter {
    /// The new value of `CTR.INCREX` (None: skipped) under the request's bounds and the
    /// counter's own floor and ceiling, the stricter of each pair winning.
    pub fn increx_target(
        &self,
        increment: i64,
        lower: Option<i64>,
        upper: Option<i64>,
        saturate: bool,
    ) -> Result<Option<i64>, CounterError> {
        let floor = self.floor().map(|f| f.floor);
        let ceiling = self.ceiling().map(|c| c.ceiling);
        let lower = lower.into_iter().chain(floor).max().unwrap_or(i64::MIN);
        let upper = upper.into_iter().chain(ceiling).min().unwrap_or(i64::MAX);
        bounded_result(self.value(), increment, lower, upper, saturate)
    }

    /// [`Counter::increx_target`] and the value it starts from, as the counter's sliding window
    /// stands at `at` (a counter without one, as it is): `(target, current value)`.
    pub fn increx_target_at(
        &self,
        at: i64,
        increment: i64,
        lower: Option<i64>,
        upper: Option<i64>,
        saturate: bool,
    ) -> Result<(Option<i64>, i64), CounterError> {
        let decide = |c: &Counter| -> Result<(Option<i64>, i64), CounterError> {
            Ok((
                c.increx_target(increment, lower, upper, saturate)?,
                c.value(),
            ))
        };
        if self.window().is_none() {
            return decide(self);
        }
        // Decided on a copy slid to `at`: the window's buckets that left it count no more.
        let mut slid = self.clone();
        slid.with_window_at(at, |c| Ok((decide(c)?, false)))
    }

    /// Applies a `CTR.INCREX` decided on this state (see [`Counter::increx_target_at`]) and
    /// returns its reply, `[new value, applied increment]`. With a token, the reply is
    /// remembered. A windowed counter slides to the write's time first.
    pub fn apply_increx(&mut self, op: &IncrexOp) -> Result<(i64, i64), CounterError> {
        let at = op.add.now.max(op.add.event);
        let changed = !op.skipped || op.add.token.is_some();
        self.with_window_at(at, |c| Ok((c.increx_slid(op)?, changed)))
    }

    fn increx_slid(&mut self, op: &IncrexOp) -> Result<(i64, i64), CounterError> {
        let reply = if op.skipped {
            self.record_write(op.add.now);
            (self.value(), 0)
        } else {
            let add = AddOp {
                token: None,
                ..op.add
            };
            match self.try_add(&add)? {
                Some(value) => (value, op.add.delta),
                None => {
                    return Err(CounterError::InvalidOperation(
                        "an increment outside the counter's bounds",
                    ))
                }
            }
        };
        if let Some(t) = op.add.token {
            self.remember(
                t.fp,
                t.expires_at,
                WriteKind::Increx(op.print),
                Some(reply.0),
            );
            self.keep_record(t.fp, t.expires_at, Intent::APPLIED, reply.1);
        }
        Ok(reply)
    }

    /// The reply pair a tokened `CTR.INCREX` first gave, when `fp` names one (the new value is
    /// the ledger's, the applied increment the record's).
    pub fn increx_reply(&self, fp: u64, value: Option<i64>, now: i64) -> (i64, i64) {
        let applied = self
            .record(fp, now)
            .filter(|r| r.intent == Intent::APPLIED)
            .and_then(|r| r.outcome);
        (value.unwrap_or(self.value()), applied.unwrap_or(0))
    }

    /// Keeps the units a tokened write was granted, for a refund.
    pub(super) fn keep_grant(&mut self, token: Option<TokenStamp>, units: Option<i64>) {
        if let (Some(t), Some(units)) = (token, units.filter(|u| *u > 0)) {
            self.keep_record(t.fp, t.expires_at, Intent::GRANT, units);
        }
    }

    /// What `CTR.REFUND` of token `fp` does on this state at `now`.
    pub fn refund_plan(&self, fp: u64, now: i64) -> Result<RefundPlan, CounterError> {
        let Some(record) = self.record(fp, now) else {
            return Ok(RefundPlan::NoGrant);
        };
        let units = record.outcome.unwrap_or(0);
        match record.intent {
            Intent::REFUNDED => Ok(RefundPlan::Replay(units)),
            Intent::GRANT if self.is_sealed() => Ok(RefundPlan::Folded {
                units,
                landed: self.fold_landed(),
            }),
            Intent::GRANT => {
                let room = self
                    .ceiling()
                    .map_or(i64::MAX, |c| c.ceiling.saturating_sub(self.value()).max(0));
                let units = units.min(room);
                self.value()
                    .checked_add(units)
                    .ok_or(CounterError::Overflow)?;
                Ok(RefundPlan::Give(units))
            }
            _ => Ok(RefundPlan::NoGrant),
        }
    }

    /// Gives back `op.units` of the grant of token `op.fp` and remembers the refund (its retry
    /// replays `op.units`). Refused, changing nothing, when the token holds no grant of at least
    /// that many units.
    pub fn apply_refund(&mut self, op: &RefundOp) -> Result<i64, CounterError> {
        self.with_window_at(op.now, |c| Ok((c.refund_slid(op)?, true)))
    }

    fn refund_slid(&mut self, op: &RefundOp) -> Result<i64, CounterError> {
        let grant = self
            .record(op.fp, op.now)
            .filter(|r| r.intent == Intent::GRANT && r.outcome.unwrap_or(0) >= op.units)
            .ok_or(CounterError::InvalidOperation("a refund without its grant"))?;
        if op.units < 0 {
            return Err(CounterError::InvalidOperation("a negative refund"));
        }
        let add = AddOp {
            now: op.now,
            event: op.now,
            delta: op.units,
            shard: op.shard,
            shards: op.shards,
            token: None,
        };
        if self.try_add(&add)?.is_none() {
            return Err(CounterError::AboveCeiling);
        }
        self.keep_record(op.fp, grant.expires_at, Intent::REFUNDED, op.units);
        Ok(op.units)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_the_bounds_the_increment_applies() {
        assert_eq!(bounded_result(5, 3, 0, 10, false), Ok(Some(8)));
        assert_eq!(bounded_result(5, -5, 0, 10, false), Ok(Some(0)));
        assert_eq!(bounded_result(5, 5, 0, 10, false), Ok(Some(10)));
    }

    #[test]
    fn outside_the_bounds_the_write_is_skipped_or_saturated() {
        assert_eq!(bounded_result(99, 5, i64::MIN, 100, false), Ok(None));
        assert_eq!(bounded_result(99, 5, i64::MIN, 100, true), Ok(Some(100)));
        assert_eq!(bounded_result(3, -5, 0, 100, false), Ok(None));
        assert_eq!(bounded_result(3, -5, 0, 100, true), Ok(Some(0)));
        // Past 64 bits without explicit bounds: skipped, or saturated at the type's limit.
        assert_eq!(
            bounded_result(i64::MAX, 1, i64::MIN, i64::MAX, false),
            Ok(None)
        );
        assert_eq!(
            bounded_result(i64::MAX - 1, 5, i64::MIN, i64::MAX, true),
            Ok(Some(i64::MAX))
        );
        assert_eq!(
            bounded_result(i64::MIN, -1, i64::MIN, i64::MAX, false),
            Ok(None)
        );
    }

    #[test]
    fn a_value_already_outside_moves_to_the_nearest_bound_when_saturating() {
        assert_eq!(bounded_result(150, 5, 0, 100, true), Ok(Some(100)), "down");
        assert_eq!(bounded_result(150, -10, 0, 100, false), Ok(None));
        assert_eq!(bounded_result(-20, -1, 0, 100, true), Ok(Some(0)), "up");
    }

    #[test]
    fn an_applied_increment_past_64_bits_is_an_overflow() {
        assert_eq!(
            bounded_result(i64::MIN, 0, i64::MAX, i64::MAX, true),
            Err(CounterError::Overflow)
        );
        assert_eq!(bounded_result(0, 0, 5, 1, true), Ok(None), "empty bounds");
    }

    #[test]
    fn the_stricter_of_the_stored_and_the_given_bounds_wins() {
        let mut c = Counter::plain(5);
        c.set_floor(Some(2)).unwrap();
        c.set_ceiling(Some(8)).unwrap();
        assert_eq!(c.increx_target(10, None, Some(100), false), Ok(None));
        assert_eq!(c.increx_target(10, None, Some(100), true), Ok(Some(8)));
        assert_eq!(c.increx_target(10, None, Some(6), true), Ok(Some(6)));
        assert_eq!(c.increx_target(-10, Some(-50), None, true), Ok(Some(2)));
        assert_eq!(c.increx_target(-10, Some(4), None, true), Ok(Some(4)));
        assert_eq!(
            c.increx_target(1, Some(9), None, true),
            Ok(None),
            "9 > ceiling 8"
        );
    }

    fn increx(c: &mut Counter, delta: i64, skipped: bool, token: u64) -> (i64, i64) {
        let op = IncrexOp {
            add: AddOp {
                now: 1_000,
                event: 1_000,
                delta,
                shard: 0,
                shards: c.shard_count(),
                token: Some(TokenStamp {
                    fp: token,
                    expires_at: 9_000,
                }),
            },
            skipped,
            print: 42,
        };
        c.apply_increx(&op).unwrap()
    }

    #[test]
    fn a_tokened_increx_remembers_its_reply_pair() {
        let mut c = Counter::plain(10);
        assert_eq!(increx(&mut c, 3, false, 1), (13, 3));
        assert_eq!(increx(&mut c, 0, true, 2), (13, 0));
        c.set_floor(Some(0)).unwrap();
        for (fp, pair) in [(1, (13, 3)), (2, (13, 0))] {
            match c.token_use(fp, WriteKind::Increx(42), 2_000) {
                super::super::TokenUse::Retry(v) => assert_eq!(c.increx_reply(fp, v, 2_000), pair),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            c.token_use(1, WriteKind::Increx(43), 2_000),
            super::super::TokenUse::Conflict
        );
        assert_eq!(c.token_counts(), (2, 0), "records are not tokens");
    }

    fn decrement(c: &mut Counter, amount: i64, fp: u64) -> Option<i64> {
        c.apply_decrement(&super::super::DecrOp {
            now: 1_000,
            event: 1_000,
            amount,
            shard: 0,
            shards: c.shard_count(),
            token: Some(TokenStamp {
                fp,
                expires_at: 9_000,
            }),
        })
        .unwrap()
    }

    fn refund(c: &mut Counter, fp: u64, now: i64) -> Option<i64> {
        match c.refund_plan(fp, now).unwrap() {
            RefundPlan::NoGrant => None,
            RefundPlan::Replay(units) => Some(units),
            RefundPlan::Folded { .. } => panic!("a refund on a folded holder"),
            RefundPlan::Give(units) => {
                let op = RefundOp {
                    now,
                    fp,
                    units,
                    shard: 0,
                    shards: c.shard_count(),
                };
                Some(c.apply_refund(&op).unwrap())
            }
        }
    }

    #[test]
    fn a_grant_is_refunded_once_and_a_retry_replays_it() {
        let mut c = Counter::plain(10);
        c.set_floor(Some(0)).unwrap();
        assert_eq!(decrement(&mut c, 4, 7), Some(6));
        assert_eq!(decrement(&mut c, 40, 8), None, "refused: nothing to refund");
        assert_eq!(refund(&mut c, 7, 2_000), Some(4));
        assert_eq!(c.value(), 10);
        assert_eq!(refund(&mut c, 7, 2_000), Some(4), "a retry");
        assert_eq!(c.value(), 10);
        assert_eq!(refund(&mut c, 8, 2_000), None);
        assert_eq!(refund(&mut c, 99, 2_000), None, "unknown");
        assert_eq!(decrement(&mut c, 1, 9), Some(9));
        assert_eq!(refund(&mut c, 9, 9_000), None, "expired with the token");
        // The decrement's own retry still replays its first reply.
        assert_eq!(
            c.token_use(7, WriteKind::Decr(4), 2_000),
            super::super::TokenUse::Retry(Some(6))
        );
    }

    /// A holder folded back into its home (its units, grants included, gone home with the
    /// fold) gives nothing back itself: a refund given before the fold replays, a grant still
    /// held waits for the fold to land and then goes to the home, a token without a grant is
    /// nil.
    #[test]
    fn a_folded_holder_replays_its_refunds_and_sends_the_rest_home() {
        let name = crate::counter::spread::holder_name(b"{p}stock", 7, 1, 0);
        let mut c = Counter::plain(10);
        assert_eq!(decrement(&mut c, 4, 1), Some(6));
        assert_eq!(decrement(&mut c, 2, 2), Some(4));
        assert_eq!(refund(&mut c, 1, 2_000), Some(4));
        let giver = crate::counter::transfer::Giver {
            name: &name,
            new_id: 9,
        };
        c.seal_into(b"{p}stock", 5, 2_000, giver).unwrap();
        assert!(c.is_sealed());
        assert_eq!(c.refund_plan(1, 3_000), Ok(RefundPlan::Replay(4)));
        let waits = RefundPlan::Folded {
            units: 2,
            landed: false,
        };
        assert_eq!(c.refund_plan(2, 3_000), Ok(waits));
        assert!(c.fold_travels(), "new purchases wait too");
        assert_eq!(c.refund_plan(3, 3_000), Ok(RefundPlan::NoGrant));
        let fold = c.transfers().unwrap().outbox[0].clone();
        assert!(c.apply_ack(&fold.receiver, fold.seq));
        let landed = RefundPlan::Folded {
            units: 2,
            landed: true,
        };
        assert_eq!(c.refund_plan(2, 3_000), Ok(landed));
        assert!(!c.fold_travels(), "new purchases are passed on");
        assert_eq!(c.refund_plan(1, 3_000), Ok(RefundPlan::Replay(4)));
        assert_eq!(
            super::home_refund_token(0xab),
            "ctr-refund:00000000000000ab"
        );
    }

    #[test]
    fn a_refund_gives_back_what_fits_under_the_ceiling() {
        let mut c = Counter::plain(10);
        assert_eq!(decrement(&mut c, 6, 1), Some(4));
        c.set_ceiling(Some(12)).unwrap();
        c.apply_add(&AddOp {
            now: 1_000,
            event: 1_000,
            delta: 6,
            shard: 0,
            shards: 1,
            token: None,
        })
        .unwrap();
        assert_eq!(refund(&mut c, 1, 2_000), Some(2), "10 + 2 = the ceiling");
        assert_eq!(c.value(), 12);
        assert_eq!(refund(&mut c, 1, 2_000), Some(2));
        let forged = RefundOp {
            now: 2_000,
            fp: 1,
            units: 1,
            shard: 0,
            shards: 1,
        };
        let before = c.clone();
        assert!(c.apply_refund(&forged).is_err(), "refunded already");
        assert_eq!(c, before);
    }
}
