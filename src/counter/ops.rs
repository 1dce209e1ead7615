//! The write operations of a counter. Each checks everything first and changes nothing when it
//! fails or is refused.

use super::floor::{debit, resize, split_evenly, walk};
use super::history::{bucket_of, BucketPlan, History, Repair, WatermarkError};
use super::spread::NameBounds;
use super::tokens::WriteKind;
use super::window::{Window, WindowOp};
use super::{exact_sum, Ceiling, Counter, CounterError, Extras, Floor, MAX_SHARDS};

/// What `CTR.FLOOR` says on a windowed counter.
pub const FLOOR_BEFORE_WINDOW: &str =
    "ERR set a windowed counter's floor before its window (CTR.WINDOW key NONE, CTR.FLOOR, CTR.WINDOW)";
/// A ceiling and a window do not go together yet: a window's slide moves the value with the
/// clock and keeps a floor's budgets in step, not a ceiling's. `CTR.INCREX ... UBOUND` is the
/// sliding-window limit.
pub const CEILING_AND_WINDOW: &str =
    "ERR a windowed counter takes no ceiling (use CTR.INCREX ... UBOUND for a sliding-window limit)";

/// True when a write's result says it changed the counter: applied, or refused with the
/// refusal remembered under its token.
pub(super) fn wrote<R>(result: &Result<Option<R>, CounterError>, tokened: bool) -> bool {
    match result {
        Ok(Some(_)) => true,
        Ok(None) => tokened,
        Err(_) => false,
    }
}

/// What a window's slide changed, to put back when its write changes nothing.
pub(super) struct SlideUndo {
    value: i64,
    shards: Vec<i64>,
    budgets: Option<Vec<i64>>,
    window: Window,
}

/// A token applied by a write: its fingerprint and when it stops being remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenStamp {
    pub fp: u64,
    pub expires_at: i64,
}

/// Add `delta` at shard `shard` after resizing to `shards` shards; `event` is the add's own
/// time (its bucket on a reconciled counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddOp {
    pub now: i64,
    pub event: i64,
    pub delta: i64,
    pub shard: usize,
    pub shards: usize,
    pub token: Option<TokenStamp>,
}

/// Take `amount` (> 0) starting at shard `shard`, after resizing to `shards` shards, unless that
/// would cross the floor (0 when none is set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecrOp {
    pub now: i64,
    pub event: i64,
    pub amount: i64,
    pub shard: usize,
    pub shards: usize,
    pub token: Option<TokenStamp>,
}

/// Reset every shard to 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClearOp {
    pub now: i64,
    pub token: Option<TokenStamp>,
}

/// Clear a spread counter's total (`CTR.CLEAR` of a spread home, on its master, in the step
/// that summed `total` from the home's own units and its gathered holders): lower the home's
/// value by `total`, so that the total reads 0 and what the holders gained since they were read
/// stays, and remember the token with `total` as the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClearTotalOp {
    pub now: i64,
    pub total: i64,
    pub token: Option<TokenStamp>,
}

/// Repair the counter from its source of truth: `truth` events at or before `watermark` (or in
/// all, without one). `width` and `retention` are the master's bucket configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileOp {
    pub now: i64,
    pub truth: i64,
    pub watermark: Option<i64>,
    pub width: i64,
    pub retention: i64,
}

/// Start keeping time buckets (`CTR.RECONCILE key START`, or a write under
/// `ctr.track-history yes`). `created`: the counter was created by this write, so it held
/// nothing before and every retained watermark is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartOp {
    pub now: i64,
    pub width: i64,
    pub retention: i64,
    pub created: bool,
}

/// A working copy of the shard layout for one operation.
struct Layout {
    values: Vec<i64>,
    budgets: Option<Vec<i64>>,
    /// The ceiling's budgets, when the counter has a ceiling.
    ceiling: Option<Vec<i64>>,
}

/// `amount` added to (`sign` 1) or taken from (`sign` -1) the slot, checked.
fn shift(slot: &mut i64, amount: i64, sign: i64) -> Result<(), CounterError> {
    let moved = if sign >= 0 {
        slot.checked_add(amount)
    } else {
        slot.checked_sub(amount)
    };
    *slot = moved.ok_or(CounterError::Overflow)?;
    Ok(())
}

fn check_shards(shard: usize, shards: usize) -> Result<(), CounterError> {
    if shards == 0 || shards > MAX_SHARDS || shard >= shards {
        return Err(CounterError::InvalidOperation("shard out of range"));
    }
    Ok(())
}

impl Layout {
    /// Adds `delta` (>= 0, or any sign when unfloored) at `shard`.
    fn credit(&mut self, shard: usize, delta: i64) -> Result<(), CounterError> {
        let v = &mut self.values[shard];
        *v = v.checked_add(delta).ok_or(CounterError::Overflow)?;
        if let Some(budgets) = &mut self.budgets {
            let b = &mut budgets[shard];
            *b = b.checked_add(delta).ok_or(CounterError::Overflow)?;
        }
        Ok(())
    }

    /// Makes the shards sum to `total` (an unfloored counter), moving the difference to shard 0;
    /// when that shard cannot hold it (the difference spans more than the i64 range), shard 0
    /// takes the whole total and the others are zeroed: the sum is what matters.
    fn set_total(&mut self, total: i64) -> Result<(), CounterError> {
        if self.budgets.is_some() {
            return Err(CounterError::InvalidOperation(
                "budgets on an unfloored counter",
            ));
        }
        let rest: i128 = self.values.iter().skip(1).map(|v| i128::from(*v)).sum();
        match i64::try_from(i128::from(total) - rest) {
            Ok(first) => self.values[0] = first,
            Err(_) => {
                self.values.iter_mut().for_each(|v| *v = 0);
                self.values[0] = total;
            }
        }
        Ok(())
    }

    /// Raises the value by `amount` (>= 0) on a ceiled counter: the units come out of the
    /// ceiling's budgets, from shard `shard` on (false, with the layout unusable, when they are
    /// short); each shard that gives them gains them in value and floor budget.
    fn raise(&mut self, shard: usize, amount: i64) -> Result<bool, CounterError> {
        let takes = match &self.ceiling {
            Some(ceiling) => match walk(ceiling, shard, amount) {
                Some(takes) => takes,
                None => return Ok(false),
            },
            None => vec![(shard, amount)],
        };
        self.move_units(&takes, 1)?;
        Ok(true)
    }

    /// Lowers the value by `amount` (>= 0) on a ceiled counter: the units come out of the
    /// floor's budgets, from shard `shard` on (false when they are short), or out of shard
    /// `shard` alone without a floor; each shard that gives them gains them in ceiling budget.
    fn lower(&mut self, shard: usize, amount: i64) -> Result<bool, CounterError> {
        let takes = match &self.budgets {
            Some(floor) => match walk(floor, shard, amount) {
                Some(takes) => takes,
                None => return Ok(false),
            },
            None => vec![(shard, amount)],
        };
        self.move_units(&takes, -1)?;
        Ok(true)
    }

    /// Moves each take's units into (`sign` 1) or out of (`sign` -1) its shard's value: the
    /// floor budget follows the value, the ceiling budget goes the other way.
    fn move_units(&mut self, takes: &[(usize, i64)], sign: i64) -> Result<(), CounterError> {
        for &(j, t) in takes {
            shift(&mut self.values[j], t, sign)?;
            if let Some(b) = &mut self.budgets {
                shift(&mut b[j], t, sign)?;
            }
            if let Some(c) = &mut self.ceiling {
                shift(&mut c[j], t, -sign)?;
            }
        }
        Ok(())
    }

    /// Takes `need` from the budgets starting at `shard`; false when they are short.
    fn debit_budgets(&mut self, shard: usize, need: i64) -> Result<bool, CounterError> {
        match &mut self.budgets {
            Some(budgets) => debit(budgets, &mut self.values, shard, need),
            None => Err(CounterError::InvalidOperation("no budgets")),
        }
    }
}

impl Counter {
    fn layout(&self, shards: usize) -> Result<Layout, CounterError> {
        let values = resize(&self.shard_values(), shards)?;
        let budgets = match self.floor() {
            Some(f) => Some(resize(&f.budgets, shards)?),
            None => None,
        };
        let ceiling = match self.ceiling() {
            Some(c) => Some(resize(&c.budgets, shards)?),
            None => None,
        };
        Ok(Layout {
            values,
            budgets,
            ceiling,
        })
    }

    fn commit(&mut self, value: i64, layout: Layout) {
        self.value = value;
        self.shards = if layout.values.len() == 1 {
            Vec::new()
        } else {
            layout.values
        };
        if let (Some(f), Some(budgets)) = (self.floor_mut(), layout.budgets) {
            f.budgets = budgets;
        }
        if let (Some(c), Some(budgets)) = (self.ceiling_mut(), layout.ceiling) {
            c.budgets = budgets;
        }
    }

    /// The headroom after a change to `value`, checked to stay representable.
    fn check_headroom(&self, value: i64) -> Result<(), CounterError> {
        let below = self.floor().map(|f| value.checked_sub(f.floor));
        let above = self.ceiling().map(|c| c.ceiling.checked_sub(value));
        match (below, above) {
            (Some(None), _) | (_, Some(None)) => Err(CounterError::Overflow),
            _ => Ok(()),
        }
    }

    /// Where a change at `event` goes in the buckets (None when the counter keeps none); a late
    /// event is refused.
    fn plan_bucket(&self, event: i64, delta: i64) -> Result<Option<BucketPlan>, CounterError> {
        let Some(h) = self.history() else {
            return Ok(None);
        };
        if h.is_late(event) {
            return Err(CounterError::Late);
        }
        h.plan_add(event, delta).map(Some)
    }

    fn record_bucket(&mut self, plan: Option<BucketPlan>, now: i64) {
        if let (Some(h), Some(plan)) = (self.history_mut(), plan) {
            h.record(plan, now);
        }
    }

    /// Applies an add: `Ok(Some(value))`, or `Ok(None)` when a negative add on a floored counter
    /// would cross the floor (nothing changes but, with a token, the refusal is remembered so
    /// that a retry is refused again).
    pub fn apply_add(&mut self, op: &AddOp) -> Result<Option<i64>, CounterError> {
        self.apply_add_under(op, NameBounds::default())
    }

    /// [`Counter::apply_add`] on a counter that, while it has no floor (no ceiling) of its own,
    /// is held at or above `by_name.floor` (at or below `by_name.ceiling`): a holder of a
    /// bounded spread, by its name ([`crate::counter::spread::bounds_by_name`]). An add that
    /// would cross such a bound is refused as a bounded counter refuses it.
    pub fn apply_add_under(
        &mut self,
        op: &AddOp,
        by_name: NameBounds,
    ) -> Result<Option<i64>, CounterError> {
        let undo = self.slide_window(op.now.max(op.event))?;
        let result = self.add_under(op, by_name);
        self.keep_slide_if(undo, wrote(&result, op.token.is_some()));
        result
    }

    fn add_under(&mut self, op: &AddOp, by_name: NameBounds) -> Result<Option<i64>, CounterError> {
        let outcome = if self.crosses_name_bounds(op.delta, by_name) {
            None
        } else {
            self.try_add(op)?
        };
        if outcome.is_none() && op.token.is_none() {
            return Ok(None);
        }
        if outcome.is_none() {
            self.record_write(op.now);
        }
        if let Some(t) = op.token {
            self.remember(t.fp, t.expires_at, WriteKind::Add(op.delta), outcome);
            if op.delta < 0 {
                // A granted negative add is refundable, as a decrement is.
                self.keep_grant(op.token, outcome.and(op.delta.checked_neg()));
            }
        }
        Ok(outcome)
    }

    /// True when adding `delta` would take the value past a bound its name holds it within
    /// (one it has no bound of its own for), or overflow.
    pub fn crosses_name_bounds(&self, delta: i64, by_name: NameBounds) -> bool {
        let unbounded = NameBounds {
            floor: by_name.floor.filter(|_| self.floor().is_none()),
            ceiling: by_name.ceiling.filter(|_| self.ceiling().is_none()),
        };
        unbounded.refuses(self.value, delta)
    }

    /// The add itself; the token is the caller's.
    pub(super) fn try_add(&mut self, op: &AddOp) -> Result<Option<i64>, CounterError> {
        check_shards(op.shard, op.shards)?;
        let value = self
            .value
            .checked_add(op.delta)
            .ok_or(CounterError::Overflow)?;
        let bucket = self.plan_bucket(op.event, op.delta)?;
        let at = op.now.max(op.event);
        if let Some(w) = self.window() {
            w.check_record(at, op.delta)?;
        }
        let floor = self.floor().map(|f| f.floor);
        if self.ceiling().is_some() {
            if !self.add_between_bounds(op, value)? {
                return Ok(None);
            }
        } else if op.shards == self.shard_count() && (floor.is_none() || op.delta >= 0) {
            // No resize, nothing to draw from other shards: change in place.
            self.check_headroom(value)?;
            self.credit_in_place(op.shard, op.delta)?;
            self.value = value;
        } else if op.shards == self.shard_count() {
            // A negative add on a floored counter follows the floor.
            match (op.delta.checked_neg(), floor) {
                (Some(need), Some(f)) if value >= f => self.debit_in_place(op.shard, need)?,
                _ => return Ok(None),
            }
            self.value = value;
        } else {
            let mut layout = self.layout(op.shards)?;
            if op.delta < 0 && self.floor().is_some() {
                let Some(need) = op.delta.checked_neg() else {
                    return Ok(None); // more than any headroom can hold
                };
                if !layout.debit_budgets(op.shard, need)? {
                    return Ok(None);
                }
            } else {
                self.check_headroom(value)?;
                layout.credit(op.shard, op.delta)?;
            }
            self.commit(value, layout);
        }
        self.record_bucket(bucket, op.now);
        self.record_window(at, op.delta)?;
        self.record_write(op.now);
        Ok(Some(value))
    }

    /// The add of [`Counter::try_add`] on a ceiled counter, through a working copy of the
    /// layout: an increment draws on the ceiling's budgets (refused, false, when they are short),
    /// a decrement on the floor's when there is one. Changes nothing when refused or failing.
    fn add_between_bounds(&mut self, op: &AddOp, value: i64) -> Result<bool, CounterError> {
        let mut layout = self.layout(op.shards)?;
        let covered = match op.delta.checked_neg() {
            _ if op.delta >= 0 => layout.raise(op.shard, op.delta)?,
            Some(need) => layout.lower(op.shard, need)?,
            None => false, // more than any headroom can hold
        };
        if covered {
            self.check_headroom(value)?;
            self.commit(value, layout);
        }
        Ok(covered)
    }

    /// Applies a floored decrement: `Ok(Some(value))` when granted, `Ok(None)` when it would cross
    /// the floor (0 when none is set). With a token, the outcome is recorded in the ledger either
    /// way, so a retry replays it. A counter that takes no part in a spread: see
    /// [`Counter::apply_purchase`].
    pub fn apply_decrement(&mut self, op: &DecrOp) -> Result<Option<i64>, CounterError> {
        self.apply_purchase(op, false)
    }

    /// [`Counter::apply_decrement`] on a key that may take part in a spread counter
    /// (`named_holder`: its name is a holder's). A grant replies, and records for a retry,
    /// [`Counter::purchase_reply`]: on a spread counter's home or holder the units the key can
    /// still sell, never its raw value (a holder's value sits below its own floor, which may be
    /// far below 0, and reads like negative stock).
    pub fn apply_purchase(
        &mut self,
        op: &DecrOp,
        named_holder: bool,
    ) -> Result<Option<i64>, CounterError> {
        let undo = self.slide_window(op.now.max(op.event))?;
        let result = self.purchase(op, named_holder);
        self.keep_slide_if(undo, wrote(&result, op.token.is_some()));
        result
    }

    fn purchase(&mut self, op: &DecrOp, named_holder: bool) -> Result<Option<i64>, CounterError> {
        check_shards(op.shard, op.shards)?;
        if op.amount <= 0 {
            return Err(CounterError::InvalidOperation("amount must be positive"));
        }
        let bucket = self.plan_bucket(op.event, op.amount.checked_neg().unwrap_or(i64::MIN))?;
        let at = op.now.max(op.event);
        if let Some(w) = self.window() {
            // amount > 0, so its negation fits.
            w.check_record(at, -op.amount)?;
        }
        let floor = self.floor().map_or(0, |f| f.floor);
        let new_value = self.value.checked_sub(op.amount).filter(|v| *v >= floor);
        let granted = match new_value {
            None => None,
            Some(value) if self.ceiling().is_some() => {
                // A ceiled counter gains ceiling budget where the units leave.
                let mut layout = self.layout(op.shards)?;
                let covered = layout.lower(op.shard, op.amount)?;
                if covered {
                    self.check_headroom(value)?;
                    self.commit(value, layout);
                }
                covered.then_some(value)
            }
            Some(value) if op.shards == self.shard_count() => {
                // The common case: no resize, so debit in place without a working copy.
                self.debit_in_place(op.shard, op.amount)?;
                self.value = value;
                Some(value)
            }
            Some(value) => {
                let mut layout = self.layout(op.shards)?;
                let covered = if self.floor().is_some() {
                    layout.debit_budgets(op.shard, op.amount)?
                } else {
                    let v = &mut layout.values[op.shard];
                    *v = v.checked_sub(op.amount).ok_or(CounterError::Overflow)?;
                    true
                };
                if covered {
                    self.commit(value, layout);
                }
                covered.then_some(value)
            }
        };
        if granted.is_none() && op.token.is_none() {
            return Ok(None); // a refusal with nothing to remember changes nothing
        }
        if granted.is_some() {
            self.record_bucket(bucket, op.now);
            self.record_window(at, -op.amount)?;
        }
        self.record_write(op.now);
        let reply = granted.map(|value| self.purchase_reply(value, named_holder));
        if let Some(t) = op.token {
            self.remember(t.fp, t.expires_at, WriteKind::Decr(op.amount), reply);
            self.keep_grant(op.token, reply.map(|_| op.amount));
        }
        Ok(reply)
    }

    /// What a granted purchase leaving the counter at `value` replies. On a counter that takes no
    /// part in a spread: `value`, the counter's new value (the stock left, for the usual floor
    /// 0). On a spread counter's home (it lists holders, or holders still folding back) or a key
    /// named as a holder (`named_holder`): the key's headroom, `value` minus its own floor (0
    /// when it has none), the units this key can still sell alone: never below 0, and a lower
    /// bound of the whole counter's headroom (the others' budgets and what is in flight come on
    /// top). On one key with floor 0 both are the same number.
    pub fn purchase_reply(&self, value: i64, named_holder: bool) -> i64 {
        let in_spread = named_holder || self.spread().is_some() || !self.leaving().is_empty();
        if !in_spread {
            return value;
        }
        let floor = self.floor().map_or(0, |f| f.floor);
        value.saturating_sub(floor)
    }

    /// Adds `delta` to shard `shard`'s value and, when floored, its budget, without changing the
    /// layout; both are checked before either changes.
    fn credit_in_place(&mut self, shard: usize, delta: i64) -> Result<(), CounterError> {
        let Counter { shards, ext, .. } = self;
        let mut floor = ext.as_mut().and_then(|e| e.floor.as_mut());
        let value = match shards.get(shard) {
            Some(v) => Some(v.checked_add(delta).ok_or(CounterError::Overflow)?),
            None => None,
        };
        let budget = match floor.as_ref().and_then(|f| f.budgets.get(shard)) {
            Some(b) => Some(b.checked_add(delta).ok_or(CounterError::Overflow)?),
            None => None,
        };
        if let (Some(slot), Some(v)) = (shards.get_mut(shard), value) {
            *slot = v;
        }
        if let (Some(f), Some(b)) = (floor.as_mut(), budget) {
            f.budgets[shard] = b;
        }
        Ok(())
    }

    /// Takes `need` from the shard values (and, when floored, the budgets) starting at shard
    /// `start`, without changing the layout. The caller has checked that the headroom covers
    /// `need` (budgets sum to it). Everything is checked before anything changes. The value
    /// itself is the caller's to update.
    fn debit_in_place(&mut self, start: usize, need: i64) -> Result<(), CounterError> {
        let Counter { shards, ext, .. } = self;
        let mut floor = ext.as_mut().and_then(|e| e.floor.as_mut());
        let Some(f) = floor.take() else {
            if let Some(v) = shards.get_mut(start) {
                *v = v.checked_sub(need).ok_or(CounterError::Overflow)?;
            }
            return Ok(());
        };
        if debit(&mut f.budgets, shards, start, need)? {
            Ok(())
        } else {
            Err(CounterError::InvalidOperation(
                "budgets out of step with the value",
            ))
        }
    }

    /// Applies a reset to 0 and returns the value before it. Refused when the floor is above 0.
    pub fn apply_clear(&mut self, op: &ClearOp) -> Result<i64, CounterError> {
        let undo = self.slide_window(op.now)?;
        let result = self.clear(op);
        self.keep_slide_if(undo, result.is_ok());
        result
    }

    fn clear(&mut self, op: &ClearOp) -> Result<i64, CounterError> {
        let budgets = match self.floor() {
            Some(f) if f.floor > 0 => return Err(CounterError::ClearAboveFloor),
            Some(f) => {
                let headroom = f.floor.checked_neg().ok_or(CounterError::Overflow)?;
                Some(split_evenly(headroom, self.shard_count()))
            }
            None => None,
        };
        let ceiling_budgets = match self.ceiling() {
            Some(c) if c.ceiling < 0 => return Err(CounterError::AboveCeiling),
            Some(c) => Some(split_evenly(c.ceiling, self.shard_count())),
            None => None,
        };
        let before = self.value;
        self.value = 0;
        self.shards.iter_mut().for_each(|s| *s = 0);
        if let (Some(f), Some(budgets)) = (self.floor_mut(), budgets) {
            f.budgets = budgets;
        }
        if let (Some(c), Some(budgets)) = (self.ceiling_mut(), ceiling_budgets) {
            c.budgets = budgets;
        }
        if let Some(h) = self.history_mut() {
            // The reset discards the bucket history: everything up to now is base (zero).
            h.buckets.clear();
            h.retained_since = h.retained_since.max(bucket_of(op.now, h.width));
        }
        if let Some(w) = self.window_mut() {
            w.clear();
        }
        self.record_write(op.now);
        if let Some(t) = op.token {
            self.remember(t.fp, t.expires_at, WriteKind::Clear, Some(before));
        }
        Ok(before)
    }

    /// On a spread home: the total a clear lowers it by, at the moment it is applied. `gathered`
    /// holds each holder's answer (its value plus what it has sent and not had acknowledged), by
    /// name, read earlier. The home's own units are taken now; a gathered holder counts only
    /// while the home still lists it (current or leaving): one that has been folded back since
    /// it answered has its units in the home's value now. So every unit is counted once, as a
    /// gathered read counts it ([`crate::counter::transfer`]). A floored spread is refused.
    pub fn total_at_clear<'a>(
        &self,
        gathered: impl IntoIterator<Item = (&'a [u8], i64)>,
    ) -> Result<i64, CounterError> {
        if self.is_floored_spread() {
            return Err(CounterError::ClearFlooredSpread);
        }
        let own = self.units_in_hand().ok_or(CounterError::Overflow)?;
        let listed = |name: &[u8]| {
            self.spread()
                .is_some_and(|s| s.holders.iter().any(|h| h == name))
                || self.leaving().iter().any(|l| l.name == name)
        };
        let holders = gathered
            .into_iter()
            .filter(|(name, _)| listed(name))
            .map(|(_, v)| v);
        exact_sum(std::iter::once(own).chain(holders)).ok_or(CounterError::Overflow)
    }

    /// True for the home of a floored spread counter, or a floored counter still folding holders
    /// back: its holders hold budgets, which a clear of the home's value cannot take back.
    pub fn is_floored_spread(&self) -> bool {
        let spread = self.spread();
        spread.is_some_and(|s| s.floor.is_some())
            || (self.floor().is_some() && (spread.is_some() || !self.leaving().is_empty()))
    }

    /// Applies a clear of a spread counter's total and returns `total` (the reply). The value
    /// falls by `total` (the difference lands on shard 0, as [`Layout::set_total`] places it);
    /// the bucket history is discarded as a reset discards it. Refused on a floored counter.
    pub fn apply_clear_total(&mut self, op: &ClearTotalOp) -> Result<i64, CounterError> {
        if self.floor().is_some() || self.is_floored_spread() {
            return Err(CounterError::ClearFlooredSpread);
        }
        if self.ceiling().is_some() {
            return Err(CounterError::ClearCeiledSpread);
        }
        let value = self
            .value
            .checked_sub(op.total)
            .ok_or(CounterError::Overflow)?;
        let mut layout = self.layout(self.shard_count())?;
        layout.set_total(value)?;
        self.commit(value, layout);
        if let Some(h) = self.history_mut() {
            h.buckets.clear();
            h.retained_since = h.retained_since.max(bucket_of(op.now, h.width));
        }
        self.record_write(op.now);
        if let Some(t) = op.token {
            self.remember(t.fp, t.expires_at, WriteKind::ClearTotal, Some(op.total));
        }
        Ok(op.total)
    }

    /// Sets (or with None removes) the floor; the headroom is spread evenly over the shards'
    /// budgets. Refused when the value is already below the floor. Returns false when nothing
    /// changed (the same floor with the same budgets, or no floor to remove).
    pub fn set_floor(&mut self, floor: Option<i64>) -> Result<bool, CounterError> {
        if self.window().is_some() {
            // The value moves with the clock; CTR.FLOOR replicates as sent, without one.
            return Err(CounterError::Window(FLOOR_BEFORE_WINDOW));
        }
        let floor = match floor {
            None => None,
            Some(f) if self.value < f => return Err(CounterError::BelowFloor),
            Some(f) => {
                let headroom = self.value.checked_sub(f).ok_or(CounterError::Overflow)?;
                Some(Floor {
                    floor: f,
                    budgets: split_evenly(headroom, self.shard_count()),
                })
            }
        };
        Ok(self.replace_extra(floor, |e| &mut e.floor))
    }

    /// Puts `new` in the optional state's field `field` (a floor, a ceiling), making that state
    /// when needed and dropping it once empty; false when the field already held `new`.
    fn replace_extra<T: PartialEq>(
        &mut self,
        new: Option<T>,
        field: fn(&mut Extras) -> &mut Option<T>,
    ) -> bool {
        let held = match &mut self.ext {
            Some(e) => &*field(e),
            None => &None,
        };
        if *held == new {
            return false;
        }
        match new {
            Some(_) => *field(self.ext_mut()) = new,
            None => {
                if let Some(e) = &mut self.ext {
                    *field(e) = None;
                }
                self.trim_ext();
            }
        }
        true
    }

    /// Sets (or with None removes) the ceiling, the mirror of [`Counter::set_floor`]: the
    /// headroom below it is spread evenly over the shards' budgets. Refused when the value is
    /// already above it, and on a spread counter. Returns false when nothing changed.
    pub fn set_ceiling(&mut self, ceiling: Option<i64>) -> Result<bool, CounterError> {
        if ceiling.is_some() && self.window().is_some() {
            return Err(CounterError::Window(CEILING_AND_WINDOW));
        }
        // A spread's member: its ceiling is its share of a ceiled spread's (set or taken off,
        // the shares would no longer sum to the spread's ceiling), and an unceiled spread's
        // takes none.
        if self.takes_part_in_a_spread() && (ceiling.is_some() || self.ceiling().is_some()) {
            return Err(CounterError::CeilingOnSpread);
        }
        self.place_ceiling(ceiling)
    }

    /// Makes this counter's bounds its share of a bounded spread's (`floor`, `ceiling`: each
    /// None to leave that bound as it is), both or neither: what `CTR.SPREAD` on one server
    /// writes on the home and on each new holder, where nothing is in flight.
    pub fn take_share(
        &mut self,
        floor: Option<i64>,
        ceiling: Option<i64>,
    ) -> Result<(), CounterError> {
        let before = self.clone();
        let result = floor
            .map_or(Ok(false), |f| self.set_floor(Some(f)))
            .and_then(|_| ceiling.map_or(Ok(false), |c| self.place_ceiling(Some(c))));
        if result.is_err() {
            *self = before;
        }
        result.map(|_| ())
    }

    /// Puts the ceiling in place, its headroom spread evenly over the shards' budgets: what
    /// [`Counter::set_ceiling`] does once allowed, and what a credit of ceiling units does to a
    /// holder of a ceiled spread. Refused when the value is above it.
    pub(crate) fn place_ceiling(&mut self, ceiling: Option<i64>) -> Result<bool, CounterError> {
        let ceiling = match ceiling {
            None => None,
            Some(c) if self.value > c => return Err(CounterError::AboveCeiling),
            Some(c) => {
                let headroom = c.checked_sub(self.value).ok_or(CounterError::Overflow)?;
                Some(Ceiling {
                    ceiling: c,
                    budgets: split_evenly(headroom, self.shard_count()),
                })
            }
        };
        Ok(self.replace_extra(ceiling.map(Box::new), |e| &mut e.ceiling))
    }

    /// Spreads the ceiling's headroom evenly over the shards again (after a reconcile set the
    /// value outright).
    fn resplit_ceiling(&mut self) {
        let value = self.value;
        let shards = self.shard_count();
        if let Some(c) = self.ceiling_mut() {
            // check_headroom passed for this value: the difference fits.
            c.budgets = split_evenly(c.ceiling.saturating_sub(value), shards);
        }
    }

    /// The repair of a reconcile that would change nothing (a retry of the last watermark's
    /// repair, or an overwrite of a counter that keeps a history and already holds the truth),
    /// or None. Lets a command answer such a retry without touching the key.
    pub fn unchanged_by(&self, op: &ReconcileOp) -> Option<Repair> {
        let h = self.history()?;
        let unchanged = match op.watermark {
            Some(w) => {
                h.watermark == Some(w)
                    && h.check_watermark(w, op.now).is_ok()
                    && h.held_until(self.value, w).ok() == Some(i128::from(op.truth))
            }
            None => self.value == op.truth,
        };
        unchanged.then_some(Repair {
            value: self.value,
            drift: 0,
            changed: false,
        })
    }

    /// Repairs the counter from its source of truth and returns what it did. A reconcile at a
    /// watermark needs a history (`CTR.RECONCILE key START`, or `ctr.track-history yes`); one
    /// without starts (or restarts) it, unless the counter already holds the truth and keeps a
    /// history, which makes it a no-op.
    pub fn apply_reconcile(&mut self, op: &ReconcileOp) -> Result<Repair, CounterError> {
        self.apply_reconcile_under(op, NameBounds::default())
    }

    /// [`Counter::apply_reconcile`] on a counter held within `by_name` while it has no bound of
    /// its own (see [`Counter::apply_add_under`]): a repair past it is refused.
    pub fn apply_reconcile_under(
        &mut self,
        op: &ReconcileOp,
        by_name: NameBounds,
    ) -> Result<Repair, CounterError> {
        if self.window().is_some() {
            return Err(CounterError::Window(super::WINDOW_ALONE));
        }
        if let Some(unchanged) = self.unchanged_by(op) {
            return Ok(unchanged);
        }
        let history = match self.history() {
            Some(h) => History {
                retention: op.retention.max(1),
                ..h.clone()
            },
            None if op.watermark.is_some() => {
                return Err(CounterError::Watermark(WatermarkError::NotTracked))
            }
            None => History::starting_at(op.now, op.width, op.retention),
        };
        let (repair, mut next) = match op.watermark {
            Some(w) => {
                history
                    .check_watermark(w, op.now)
                    .map_err(CounterError::Watermark)?;
                history.reconcile_at(self.value, op.truth, w)?
            }
            None => history.overwrite(self.value, op.truth, op.now)?,
        };
        if !repair.changed {
            return Ok(repair);
        }
        let ceiling = self.ceiling().map(|c| c.ceiling).or(by_name.ceiling);
        if ceiling.is_some_and(|c| repair.value > c) {
            return Err(CounterError::AboveCeiling);
        }
        self.check_headroom(repair.value)?;
        let mut layout = self.layout(self.shard_count())?;
        match self.floor() {
            Some(f) if repair.value < f.floor => return Err(CounterError::BelowFloor),
            Some(_) => {
                self.check_headroom(repair.value)?;
                // Both headrooms fit an i64, so the difference of the values does too.
                let delta = repair
                    .value
                    .checked_sub(self.value)
                    .ok_or(CounterError::Overflow)?;
                if delta < 0 {
                    let need = delta.checked_neg().ok_or(CounterError::Overflow)?;
                    if !layout.debit_budgets(0, need)? {
                        return Err(CounterError::BelowFloor);
                    }
                } else {
                    layout.credit(0, delta)?;
                }
            }
            None if by_name.floor.is_some_and(|f| repair.value < f) => {
                return Err(CounterError::BelowFloor)
            }
            None => layout.set_total(repair.value)?,
        }
        self.commit(repair.value, layout);
        self.resplit_ceiling();
        next.fold(op.now);
        self.ext_mut().history = Some(Box::new(next));
        Ok(repair)
    }

    /// `CTR.RECONCILE key START` (and the start of `ctr.track-history yes`): the counter keeps
    /// buckets from now on, its value unchanged. Returns the earliest watermark it accepts and
    /// whether anything changed (a counter that already keeps a history is left as it is).
    pub fn apply_start(&mut self, op: &StartOp) -> (i64, bool) {
        if let Some(h) = self.history() {
            return (h.earliest_watermark(), false);
        }
        if self.window().is_some() {
            // A window keeps no history (CTR.RECONCILE refuses it before it gets here).
            return (op.now, false);
        }
        let history = if op.created {
            History::created_at(op.now, op.width, op.retention)
        } else {
            History::started_at(op.now, op.width, op.retention)
        };
        let earliest = history.earliest_watermark();
        self.ext_mut().history = Some(Box::new(history));
        (earliest, true)
    }

    /// Forgets a history started by the write that is being undone (see `apply_start`).
    pub fn drop_history(&mut self) {
        if let Some(e) = &mut self.ext {
            e.history = None;
        }
        self.trim_ext();
    }

    /// True when every token and ledger entry the counter holds has expired at `now` (and it
    /// holds some): what the idle sweep looks for. O(entries held).
    pub fn has_only_expired_tokens(&self, now: i64) -> bool {
        let latest = [
            self.tokens().latest_expiry(),
            self.ledger().latest_expiry(),
            self.records().latest_expiry(),
        ]
        .into_iter()
        .flatten()
        .max();
        latest.is_some_and(|latest| latest <= now)
    }

    /// The idle sweep: drops the tokens and ledger entries expired at `now`, as a write at `now`
    /// would (same schedule, so replicas replaying it hold the same entries). Returns how many
    /// were dropped.
    pub fn apply_sweep(&mut self, now: i64) -> usize {
        // Records go with their ledger entries; only tokens count as released.
        let dropped = self.remembered_mut_if_any().map_or(0, |r| r.sweep(now));
        self.trim_ext();
        dropped
    }

    /// Every recorded write sweeps a few expired tokens from both windows.
    /// The bare add on a counter that holds only sub-shards ([`Counter::holds_only_shards`]):
    /// `delta` to the value and to shard `shard`, in place. What [`Counter::apply_add`] does for
    /// such a counter (no floor to respect, no bucket or token to record), without the
    /// generality. Changes nothing when it fails.
    pub fn add_to_shard(&mut self, shard: usize, delta: i64) -> Result<i64, CounterError> {
        if !self.holds_only_shards() {
            return Err(CounterError::InvalidOperation(
                "not a counter of sub-shards alone",
            ));
        }
        let value = self
            .value
            .checked_add(delta)
            .ok_or(CounterError::Overflow)?;
        let slot = self
            .shards
            .get_mut(shard)
            .ok_or(CounterError::InvalidOperation("shard out of range"))?;
        *slot = slot.checked_add(delta).ok_or(CounterError::Overflow)?;
        self.value = value;
        Ok(value)
    }

    /// Slides the window to `at`: the buckets that left it leave the value (which stays at or
    /// above the floor: what the floor holds back goes into the oldest bucket left, so the
    /// buckets still sum to the value and it leaves with them). Returns what puts it back when
    /// the write then changes nothing ([`Counter::keep_slide_if`]).
    pub(super) fn slide_window(&mut self, at: i64) -> Result<Option<SlideUndo>, CounterError> {
        let Some(w) = self.window() else {
            return Ok(None);
        };
        if !w.has_expired(at) {
            return Ok(None);
        }
        let value = self.value_at(at);
        let remaining = i128::from(self.value) - w.expired_sum(at);
        let held_by_floor =
            i64::try_from(i128::from(value) - remaining).map_err(|_| CounterError::Overflow)?;
        let mut slid = w.clone();
        slid.slide(at);
        slid.hold_in_oldest(at, held_by_floor)?;
        let mut layout = self.layout(self.shard_count())?;
        if self.floor().is_some() {
            self.check_headroom(value)?;
            let delta = value
                .checked_sub(self.value)
                .ok_or(CounterError::Overflow)?;
            if delta >= 0 {
                layout.credit(0, delta)?;
            } else if !layout
                .debit_budgets(0, delta.checked_neg().ok_or(CounterError::Overflow)?)?
            {
                return Err(CounterError::InvalidOperation(
                    "budgets out of step with the value",
                ));
            }
        } else {
            layout.set_total(value)?;
        }
        let (before, shards, budgets) = (
            self.value,
            self.shards.clone(),
            self.floor().map(|f| f.budgets.clone()),
        );
        let Some(current) = self.window_mut() else {
            return Ok(None);
        };
        let window = std::mem::replace(current, slid);
        self.commit(value, layout);
        Ok(Some(SlideUndo {
            value: before,
            shards,
            budgets,
            window,
        }))
    }

    /// Keeps a window's slide when the write it came with changed the counter (applied, or a
    /// refusal remembered under its token); puts it back otherwise, so that a write that changes
    /// nothing leaves the state, and its digest, as they were.
    pub(super) fn keep_slide_if(&mut self, undo: Option<SlideUndo>, changed: bool) {
        if let (Some(u), false) = (undo, changed) {
            self.value = u.value;
            self.shards = u.shards;
            if let (Some(f), Some(b)) = (self.floor_mut(), u.budgets) {
                f.budgets = b;
            }
            if let Some(w) = self.window_mut() {
                *w = u.window;
            }
        }
    }

    /// Runs a write on the counter as its window stands at `at` (the later of the write's time
    /// and its event time): `write` sees the window's value in `self.value()`, and reports
    /// whether it changed the counter; the slide is kept only then. For a write operation
    /// outside this file that reads the value before it changes it (a bound, say); the changes
    /// it makes through [`Counter::apply_add`] land in the window by themselves.
    pub fn with_window_at<R>(
        &mut self,
        at: i64,
        write: impl FnOnce(&mut Self) -> Result<(R, bool), CounterError>,
    ) -> Result<R, CounterError> {
        let undo = self.slide_window(at)?;
        match write(self) {
            Ok((result, changed)) => {
                self.keep_slide_if(undo, changed);
                Ok(result)
            }
            Err(e) => {
                self.keep_slide_if(undo, false);
                Err(e)
            }
        }
    }

    /// Adds an applied change to the window's current bucket ([`Window::check_record`] passed).
    pub(super) fn record_window(&mut self, at: i64, delta: i64) -> Result<(), CounterError> {
        match self.window_mut() {
            Some(w) => w.record(at, delta),
            None => Ok(()),
        }
    }

    /// `CTR.WINDOW`: gives the counter a window (its value now counts as added now), changes
    /// its configuration (the value now counts as added now), or with None removes it (the
    /// value stays what the window holds now). Returns false when nothing changed.
    pub fn apply_window(&mut self, op: &WindowOp) -> Result<bool, CounterError> {
        let same = match (self.window(), op.config) {
            (None, None) => true,
            (Some(w), Some((width, n))) => w.width_ms == width && w.buckets == n,
            _ => false,
        };
        if same {
            return Ok(false);
        }
        if op.config.is_some()
            && (self.history().is_some()
                || self.spread().is_some()
                || self.transfers().is_some()
                || !self.leaving().is_empty())
        {
            return Err(CounterError::Window(super::WINDOW_ALONE));
        }
        if op.config.is_some() && self.ceiling().is_some() {
            return Err(CounterError::Window(CEILING_AND_WINDOW));
        }
        let undo = self.slide_window(op.now)?;
        let window = match op.config {
            None => None,
            Some((width, n)) => match Window::new(width, n, op.now, self.value) {
                Ok(w) => Some(Box::new(w)),
                Err(e) => {
                    self.keep_slide_if(undo, false);
                    return Err(e);
                }
            },
        };
        self.ext_mut().window = window;
        self.trim_ext();
        Ok(true)
    }

    pub(super) fn record_write(&mut self, now: i64) {
        if let Some(r) = self.remembered_mut_if_any() {
            r.sweep(now);
        }
        self.trim_ext();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_to_shard_is_apply_add_on_a_counter_of_sub_shards_alone() {
        let shards = vec![5, -3, i64::MAX - 10, 0];
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut fast = Counter::from_shards(shards.clone()).unwrap();
            let delta = match rng % 4 {
                0 => 20,
                1 => i64::MIN,
                _ => (rng >> 8) as i64 % 1_000_000,
            };
            let shard = (rng >> 40) as usize % 5; // one past the end now and then
            let mut general = fast.clone();
            let want = general
                .apply_add(&AddOp {
                    now: 0,
                    event: 0,
                    delta,
                    shard,
                    shards: 4,
                    token: None,
                })
                .map(|v| v.expect("no floor: never refused"));
            let got = fast.add_to_shard(shard, delta);
            assert_eq!(got.is_ok(), want.is_ok(), "{shard} {delta}");
            assert_eq!(got.ok(), want.ok());
            assert_eq!(fast, general);
            assert_eq!(fast.shard_values(), general.shard_values());
        }
        let mut floored = Counter::from_shards(vec![1, 2]).unwrap();
        floored.set_floor(Some(0)).unwrap();
        let before = floored.clone();
        assert!(
            floored.add_to_shard(0, 1).is_err(),
            "a floor needs the general path"
        );
        assert_eq!(floored, before);
    }
}
