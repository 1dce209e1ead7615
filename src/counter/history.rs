//! Time buckets and reconciliation: what lets `CTR.RECONCILE` repair a counter from its source
//! of truth without clobbering the adds that race the repair job.
//!
//! A tracked counter keeps its recent adds by event time in sparse buckets. Bucket `b` (a
//! multiple of the width) holds the adds with event time in `(b - width, b]`, so "at or before an
//! aligned watermark `w`" is exactly the buckets `<= w`. Buckets at or before `retained_since`
//! have been folded away: their adds are only part of the value (the *base* is the value minus
//! the retained buckets). Reconciling at `w` replaces everything at or before `w` by the truth and
//! keeps the buckets after `w`: value = truth + adds after `w`.
//!
//! Storing "base + live delta" and reconciling with `base = truth; live -= truth - old_base`
//! leaves base + live unchanged: it repairs nothing. The buckets are what tells the adds after
//! the watermark from the ones before it.

use super::CounterError;

/// Most buckets a counter keeps; beyond it the oldest are folded early (documented bound:
/// 16 bytes per bucket, so at most 64 KiB per counter).
pub const MAX_BUCKETS: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// Bucket width (ms), fixed while the counter holds buckets.
    pub width: i64,
    /// How long buckets are kept (ms) before they fold into the base; set from
    /// `ctr.bucket-retention-ms` by each reconcile.
    pub retention: i64,
    /// Events at or before this time are folded into the base (a multiple of `width`).
    pub retained_since: i64,
    /// (bucket end, sum of adds), ends strictly increasing, all > `retained_since`.
    pub buckets: Vec<(i64, i64)>,
    /// The last reconciled watermark: adds at or before it are refused as late.
    pub watermark: Option<i64>,
    pub last_drift: i64,
    pub total_abs_drift: u64,
    pub reconciles: u64,
}

/// The bucket (its end) that holds an event at `t`: the smallest multiple of `width` >= `t`.
/// Past the last multiple that fits in an i64, the last one: every bucket end stays aligned
/// (a misaligned one would make the state refuse to load).
pub fn bucket_of(t: i64, width: i64) -> i64 {
    let width = i128::from(width.max(1));
    let t = i128::from(t);
    let end = -((-t).div_euclid(width)) * width;
    let last = i128::from(i64::MAX) - i128::from(i64::MAX) % width;
    // end >= t >= i64::MIN, and end <= last <= i64::MAX: the cast is exact.
    end.min(last) as i64
}

/// The bucket before `end` (an aligned end), or `end` itself when none fits in an i64.
fn previous_bucket(end: i64, width: i64) -> i64 {
    end.checked_sub(width.max(1)).unwrap_or(end)
}

/// Where an add goes in the buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketPlan {
    BaseOnly,
    /// Set bucket `i`'s sum.
    Update(usize, i64),
    /// Insert a new bucket (end, sum) at `i`.
    Insert(usize, i64, i64),
}

/// What a reconcile did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repair {
    pub value: i64,
    /// What the counter held for events up to the watermark minus the truth (positive: high).
    /// The difference of two i64 values, so it is taken in i128: it never overflows.
    pub drift: i128,
    /// False when it was an exact re-application (same watermark, no drift): nothing changed.
    pub changed: bool,
}

/// Why a watermark is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatermarkError {
    Misaligned,
    /// Before the buckets still kept: retention (or the bucket bound) folded them into the
    /// base. Carries the earliest watermark accepted.
    OlderThanRetained(i64),
    /// Before the history began (START, a counter's first tracked write, or an overwrite that
    /// restarted it): nothing was ever kept there. Carries the earliest watermark accepted.
    BeforeHistory(i64),
    BeforeLastWatermark,
    InTheFuture,
    NotTracked,
}

impl WatermarkError {
    pub fn message(self) -> String {
        match self {
            WatermarkError::Misaligned => {
                "ERR watermark must be a multiple of the bucket width (ctr.bucket-ms)".into()
            }
            WatermarkError::OlderThanRetained(earliest) => format!(
                "ERR watermark is older than the retained buckets (ctr.bucket-retention-ms): \
                 the earliest watermark accepted is {earliest}"
            ),
            WatermarkError::BeforeHistory(earliest) => format!(
                "ERR watermark is before the counter's history, which starts at {earliest} \
                 (the reply of CTR.RECONCILE key START): reconcile at {earliest} or later, once \
                 it is ctr.settle-ms old"
            ),
            WatermarkError::BeforeLastWatermark => {
                "ERR watermark is older than the counter's last reconciled watermark".into()
            }
            WatermarkError::InTheFuture => "ERR watermark is in the future".into(),
            WatermarkError::NotTracked => {
                "ERR counter keeps no bucket history: run CTR.RECONCILE key START once, then reconcile AT a watermark".into()
            }
        }
    }
}

impl History {
    /// A history that starts now: everything before `now`'s bucket is base.
    pub fn starting_at(now: i64, width: i64, retention: i64) -> Self {
        let width = width.max(1);
        History {
            width,
            retention: retention.max(1),
            retained_since: previous_bucket(bucket_of(now, width), width),
            buckets: Vec::new(),
            watermark: None,
            last_drift: 0,
            total_abs_drift: 0,
            reconciles: 0,
        }
    }

    /// The history `CTR.RECONCILE key START` gives a counter that kept none: everything the
    /// counter holds counts as at or before the first bucket boundary at or after `now`, so
    /// that boundary is the earliest watermark it accepts, and the first reconcile at it is
    /// exact.
    pub fn started_at(now: i64, width: i64, retention: i64) -> Self {
        let width = width.max(1);
        History {
            retained_since: bucket_of(now, width),
            ..History::starting_at(now, width, retention)
        }
    }

    /// The history of a counter created at `now` with `ctr.track-history yes`: it held nothing
    /// before, so every retained watermark is exact, also one before it existed.
    pub fn created_at(now: i64, width: i64, retention: i64) -> Self {
        let width = width.max(1);
        let retention = retention.max(1);
        History {
            retained_since: bucket_of(now.saturating_sub(retention), width),
            ..History::starting_at(now, width, retention)
        }
    }

    /// The earliest watermark a reconcile may use now (it must also be a multiple of the
    /// width and not in the future).
    pub fn earliest_watermark(&self) -> i64 {
        self.watermark
            .map_or(self.retained_since, |w| w.max(self.retained_since))
    }

    /// Checks a decoded history: positive width and retention, aligned bounds, bucket ends
    /// strictly increasing and after `retained_since`, at most MAX_BUCKETS, sums representable.
    pub fn validate(&self) -> Result<(), CounterError> {
        let bad = |why| Err(CounterError::InvalidOperation(why));
        if self.width <= 0 || self.retention <= 0 {
            return bad("bucket width and retention must be positive");
        }
        if self.buckets.len() > MAX_BUCKETS {
            return bad("too many buckets");
        }
        if self.retained_since.rem_euclid(self.width) != 0 {
            return bad("retained bound is not aligned");
        }
        let mut previous = self.retained_since;
        for (end, _) in &self.buckets {
            if *end <= previous || end.rem_euclid(self.width) != 0 {
                return bad("buckets unaligned, repeated or out of order");
            }
            previous = *end;
        }
        self.retained_sum().map(|_| ())
    }

    /// Sum of the retained buckets.
    pub fn retained_sum(&self) -> Result<i64, CounterError> {
        super::exact_sum(self.buckets.iter().map(|(_, s)| *s)).ok_or(CounterError::Overflow)
    }

    /// Sum of the buckets after `w`.
    fn sum_after(&self, w: i64) -> Result<i64, CounterError> {
        super::exact_sum(
            self.buckets
                .iter()
                .filter(|(end, _)| *end > w)
                .map(|(_, s)| *s),
        )
        .ok_or(CounterError::Overflow)
    }

    /// What a counter holding `value` holds for events at or before `w` (exact: in i128).
    pub fn held_until(&self, value: i64, w: i64) -> Result<i128, CounterError> {
        Ok(i128::from(value) - i128::from(self.sum_after(w)?))
    }

    /// True when an add stamped `event` falls at or before the reconciled watermark.
    pub fn is_late(&self, event: i64) -> bool {
        self.watermark.is_some_and(|w| event <= w)
    }

    /// Checks that `delta` can be recorded at `event`; the plan is applied with [`History::record`]
    /// once the whole write is known to succeed.
    pub fn plan_add(&self, event: i64, delta: i64) -> Result<BucketPlan, CounterError> {
        let end = bucket_of(event, self.width);
        if end <= self.retained_since {
            // Older than what is retained: it only changes the base.
            return Ok(BucketPlan::BaseOnly);
        }
        // The retained sum must stay representable (the base is value minus it).
        self.retained_sum()?
            .checked_add(delta)
            .ok_or(CounterError::Overflow)?;
        Ok(match self.buckets.binary_search_by_key(&end, |(e, _)| *e) {
            Ok(i) => BucketPlan::Update(
                i,
                self.buckets[i]
                    .1
                    .checked_add(delta)
                    .ok_or(CounterError::Overflow)?,
            ),
            Err(i) => BucketPlan::Insert(i, end, delta),
        })
    }

    /// Applies a plan from [`History::plan_add`], then folds what `now` no longer retains.
    pub fn record(&mut self, plan: BucketPlan, now: i64) {
        match plan {
            BucketPlan::BaseOnly => {}
            BucketPlan::Update(i, sum) => self.buckets[i].1 = sum,
            BucketPlan::Insert(i, end, delta) => self.buckets.insert(i, (end, delta)),
        }
        self.fold(now);
    }

    /// Checks and records in one step.
    pub fn with_add(&self, event: i64, delta: i64, now: i64) -> Result<History, CounterError> {
        let plan = self.plan_add(event, delta)?;
        let mut next = self.clone();
        next.record(plan, now);
        Ok(next)
    }

    /// Folds the buckets that end before `now - retention`, and the oldest beyond MAX_BUCKETS.
    pub fn fold(&mut self, now: i64) {
        let horizon = bucket_of(now.saturating_sub(self.retention), self.width);
        let expired = self.buckets.partition_point(|(end, _)| *end <= horizon);
        let excess = self.buckets.len().saturating_sub(MAX_BUCKETS);
        let drop = expired.max(excess);
        if drop > 0 {
            self.retained_since = self.retained_since.max(self.buckets[drop - 1].0);
            self.buckets.drain(..drop);
        }
        if horizon > self.retained_since && self.buckets.first().is_none_or(|(e, _)| *e > horizon) {
            self.retained_since = horizon;
        }
    }

    /// Checks a watermark for a reconcile at `now`.
    pub fn check_watermark(&self, w: i64, now: i64) -> Result<(), WatermarkError> {
        if w.rem_euclid(self.width) != 0 {
            return Err(WatermarkError::Misaligned);
        }
        if w > now {
            return Err(WatermarkError::InTheFuture);
        }
        if self.watermark.is_some_and(|last| w < last) {
            return Err(WatermarkError::BeforeLastWatermark);
        }
        if w < self.retained_since {
            let earliest = self.earliest_watermark();
            return Err(if self.folded_away(now) {
                WatermarkError::OlderThanRetained(earliest)
            } else {
                WatermarkError::BeforeHistory(earliest)
            });
        }
        Ok(())
    }

    /// True when what lies before `retained_since` was folded away (by retention at `now`, or
    /// by the bucket bound), false when the history simply starts there.
    fn folded_away(&self, now: i64) -> bool {
        let horizon = bucket_of(now.saturating_sub(self.retention), self.width);
        self.retained_since <= horizon || self.buckets.len() >= MAX_BUCKETS
    }

    /// Reconciles at `w`: the counter held `value`; the events at or before `w` truly number
    /// `truth`. Returns the repair and the new history (committed by the caller).
    pub fn reconcile_at(
        &self,
        value: i64,
        truth: i64,
        w: i64,
    ) -> Result<(Repair, History), CounterError> {
        let after = self.sum_after(w)?;
        let drift = self.held_until(value, w)? - i128::from(truth);
        let new_value = truth.checked_add(after).ok_or(CounterError::Overflow)?;
        let mut next = self.clone();
        if self.watermark == Some(w) && drift == 0 {
            return Ok((
                Repair {
                    value,
                    drift,
                    changed: false,
                },
                next,
            ));
        }
        let keep_from = next.buckets.partition_point(|(end, _)| *end <= w);
        next.buckets.drain(..keep_from);
        next.retained_since = next.retained_since.max(w);
        next.watermark = Some(w);
        next.record_drift(drift);
        Ok((
            Repair {
                value: new_value,
                drift,
                changed: true,
            },
            next,
        ))
    }

    /// Reconciles without a watermark: value = truth, the history restarts at `now`.
    pub fn overwrite(
        &self,
        value: i64,
        truth: i64,
        now: i64,
    ) -> Result<(Repair, History), CounterError> {
        let drift = i128::from(value) - i128::from(truth);
        let mut next = History::starting_at(now, self.width, self.retention);
        next.retained_since = next.retained_since.max(self.retained_since);
        next.watermark = self.watermark;
        next.last_drift = self.last_drift;
        next.total_abs_drift = self.total_abs_drift;
        next.reconciles = self.reconciles;
        next.record_drift(drift);
        Ok((
            Repair {
                value: truth,
                drift,
                changed: true,
            },
            next,
        ))
    }

    /// Records a reconcile's drift. The stored last drift saturates at the i64 range (a drift
    /// beyond it needs values at both ends of the range); |drift| always fits a u64.
    fn record_drift(&mut self, drift: i128) {
        self.last_drift =
            i64::try_from(drift).unwrap_or(if drift < 0 { i64::MIN } else { i64::MAX });
        let size = u64::try_from(drift.unsigned_abs()).unwrap_or(u64::MAX);
        self.total_abs_drift = self.total_abs_drift.saturating_add(size);
        self.reconciles = self.reconciles.saturating_add(1);
    }

    /// Bytes on the heap.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<History>() + self.buckets.capacity() * 16
    }

    /// What its buckets really cost (see [`crate::memsize`]); the struct itself lives inside
    /// the counter's optional box.
    pub fn allocated_bytes(&self) -> usize {
        crate::memsize::vec_bytes::<(i64, i64)>(self.buckets.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: i64 = 1_000;

    fn tracked(now: i64) -> History {
        History::starting_at(now, W, 3_600_000)
    }

    #[test]
    fn buckets_end_at_the_next_multiple() {
        assert_eq!(bucket_of(0, W), 0);
        assert_eq!(bucket_of(1, W), 1_000);
        assert_eq!(bucket_of(1_000, W), 1_000);
        assert_eq!(bucket_of(1_001, W), 2_000);
        assert_eq!(bucket_of(-1, W), 0);
        assert_eq!(bucket_of(-1_000, W), -1_000);
        // Past the last aligned end: that end, never a misaligned clamp.
        assert_eq!(bucket_of(i64::MAX, W), i64::MAX - 807);
        assert_eq!(bucket_of(i64::MAX - 807, W), i64::MAX - 807);
        assert_eq!(bucket_of(i64::MIN, W), i64::MIN + 808);
        assert_eq!(bucket_of(i64::MAX, i64::MAX), i64::MAX);
        assert_eq!(bucket_of(i64::MIN, i64::MAX), -i64::MAX);
        assert_eq!(previous_bucket(i64::MIN + 808, W), i64::MIN + 808);
    }

    #[test]
    fn the_counter_example_repairs_nothing_and_buckets_do() {
        // "base + live" with base = truth; live -= truth - old_base: the sum never moves.
        let (old_base, live, truth) = (0i64, 123i64, 100i64);
        let (base, live) = (truth, live - (truth - old_base));
        assert_eq!(
            base + live,
            123,
            "the widely copied design leaves the value as it was"
        );
        // Buckets: 103 adds at or before w, 20 after.
        let mut h = tracked(10_000);
        for i in 0..103 {
            h = h.with_add(10_001 + i % 900, 1, 12_000).unwrap();
        }
        for i in 0..20 {
            h = h.with_add(11_001 + i, 1, 12_000).unwrap();
        }
        let (repair, after) = h.reconcile_at(123, 100, 11_000).unwrap();
        assert_eq!(
            repair,
            Repair {
                value: 120,
                drift: 3,
                changed: true
            }
        );
        assert_eq!(after.watermark, Some(11_000));
        assert_eq!(after.retained_sum().unwrap(), 20);
        // Re-applying the same watermark and truth changes nothing.
        let (again, _) = after.reconcile_at(120, 100, 11_000).unwrap();
        assert_eq!(
            again,
            Repair {
                value: 120,
                drift: 0,
                changed: false
            }
        );
    }

    #[test]
    fn adds_at_the_watermark_count_before_it() {
        let h = tracked(0).with_add(2_000, 5, 3_000).unwrap();
        let h = h.with_add(2_001, 7, 3_000).unwrap();
        let (repair, _) = h.reconcile_at(12, 5, 2_000).unwrap();
        assert_eq!(repair.value, 12);
        assert_eq!(repair.drift, 0);
    }

    #[test]
    fn watermarks_are_checked() {
        let mut h = tracked(100_000);
        assert_eq!(
            h.check_watermark(100_500, 200_000),
            Err(WatermarkError::Misaligned)
        );
        assert_eq!(
            h.check_watermark(300_000, 200_000),
            Err(WatermarkError::InTheFuture)
        );
        assert_eq!(
            h.check_watermark(50_000, 200_000),
            Err(WatermarkError::BeforeHistory(99_000))
        );
        assert_eq!(h.check_watermark(100_000, 200_000), Ok(()));
        h.watermark = Some(150_000);
        assert_eq!(
            h.check_watermark(149_000, 200_000),
            Err(WatermarkError::BeforeLastWatermark)
        );
        assert_eq!(h.check_watermark(150_000, 200_000), Ok(()));
    }

    #[test]
    fn a_watermark_before_the_history_says_where_it_starts_not_retention() {
        // Right after START (at 100.5 s): the history starts at 101 s, an hour of retention.
        let h = History::started_at(100_500, W, 3_600_000);
        let refused = h.check_watermark(100_000, 101_200);
        assert_eq!(refused, Err(WatermarkError::BeforeHistory(101_000)));
        let text = CounterError::Watermark(refused.unwrap_err()).message();
        assert!(
            text.contains("before the counter's history, which starts at 101000"),
            "{text}"
        );
        assert!(!text.contains("retention"), "{text}");
        assert_eq!(h.check_watermark(101_000, 101_200), Ok(()));
        // An hour and more later, with buckets folded, the same watermark is past retention.
        let later = h
            .with_add(101_500, 1, 101_500)
            .unwrap()
            .with_add(3_800_000, 1, 3_800_000);
        let later = later.unwrap();
        assert_eq!(
            later.check_watermark(100_000, 3_800_000),
            Err(WatermarkError::OlderThanRetained(later.retained_since))
        );
    }

    #[test]
    fn bucket_sums_are_exact_whatever_their_order() {
        // An add inserted before two large buckets of opposite signs: partial sums overflow,
        // the total does not.
        let mut h = tracked(0);
        h.buckets = vec![(2_000, i64::MAX), (3_000, -i64::MAX)];
        let h = h.with_add(500, 1, 3_000).unwrap();
        assert_eq!(h.buckets.len(), 3);
        assert_eq!(h.validate(), Ok(()));
        assert_eq!(h.retained_sum(), Ok(1));
    }

    #[test]
    fn old_buckets_fold_into_the_base() {
        let mut h = History::starting_at(0, W, 5_000);
        for t in [500, 1_500, 2_500, 9_500] {
            h = h.with_add(t, 1, 10_000).unwrap();
        }
        // Retention 5s at now 10s: buckets ending at or before 5s are folded.
        assert_eq!(h.buckets, vec![(10_000, 1)]);
        assert_eq!(h.retained_since, 5_000);
        // An add older than the retention goes to the base only.
        let h = h.with_add(100, 1, 10_000).unwrap();
        assert_eq!(h.buckets, vec![(10_000, 1)]);
        assert_eq!(
            h.check_watermark(4_000, 10_000),
            Err(WatermarkError::OlderThanRetained(5_000))
        );
    }

    #[test]
    fn bucket_count_is_bounded() {
        let mut h = History::starting_at(0, 1, i64::MAX);
        for t in 1..=(MAX_BUCKETS as i64 + 10) {
            h = h.with_add(t, 1, t).unwrap();
        }
        assert_eq!(h.buckets.len(), MAX_BUCKETS);
        assert_eq!(h.retained_since, 10);
    }

    #[test]
    fn overwrite_sets_the_value_and_records_the_drift() {
        let h = tracked(0).with_add(500, 9, 600).unwrap();
        let (repair, after) = h.overwrite(9, 4, 600).unwrap();
        assert_eq!(
            repair,
            Repair {
                value: 4,
                drift: 5,
                changed: true
            }
        );
        assert!(after.buckets.is_empty());
        assert_eq!((after.reconciles, after.total_abs_drift), (1, 5));
    }
}
