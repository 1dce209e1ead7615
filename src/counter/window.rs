//! Sliding windows (`CTR.WINDOW`): a counter whose value is the sum of what was added in the
//! last `width_ms`, exact to the bucket width (`width_ms / buckets`). Pure: every operation takes
//! its time from the caller (the master's, carried by the replicated effect).
//!
//! The window keeps at most `buckets` sums, one per bucket width, keyed by the bucket's index
//! (`time / bucket width`). At time `t` a bucket is live when its index is above `index(t) -
//! buckets`: the last `buckets` bucket widths, the current one included. The counter's value is
//! always the sum of the live buckets it holds (`Counter::value`); a write first slides the
//! window to its time (the buckets that left it leave the value), then lands in the bucket of
//! that time, or of the newest bucket when an earlier time comes after it (the window never
//! runs backwards). A read slides nothing: it leaves out what has left the window by then.

use std::collections::VecDeque;

use super::CounterError;

/// Buckets when `CTR.WINDOW` names none.
pub const DEFAULT_BUCKETS: i64 = 10;
/// The most buckets a window may have (its memory bound: 8 bytes each).
pub const MAX_BUCKETS: i64 = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub width_ms: i64,
    pub buckets: i64,
    /// The index of the oldest bucket held (`sums[0]`); 0 when none is.
    first: i64,
    /// The sums of the consecutive buckets `first`, `first + 1`, ...: the first and the last
    /// never 0 (one between them may be), at most `buckets` of them (8 bytes a bucket).
    sums: VecDeque<i64>,
}

/// Why a window's configuration is refused (its text is the client's error).
pub const BAD_WIDTH: &str = "ERR window-ms must be positive";
pub const BAD_BUCKETS: &str = "ERR BUCKETS must be 1 to 4096";
pub const NOT_A_MULTIPLE: &str = "ERR window-ms must be a multiple of BUCKETS";

/// Checks a window's configuration.
pub fn check_config(width_ms: i64, buckets: i64) -> Result<(), &'static str> {
    if width_ms <= 0 {
        return Err(BAD_WIDTH);
    }
    if !(1..=MAX_BUCKETS).contains(&buckets) {
        return Err(BAD_BUCKETS);
    }
    if width_ms % buckets != 0 {
        return Err(NOT_A_MULTIPLE);
    }
    Ok(())
}

impl Window {
    /// An empty window, or one holding `value` in the bucket of `at`.
    pub fn new(width_ms: i64, buckets: i64, at: i64, value: i64) -> Result<Window, CounterError> {
        check_config(width_ms, buckets).map_err(CounterError::Window)?;
        let mut w = Window {
            width_ms,
            buckets,
            first: 0,
            sums: VecDeque::new(),
        };
        if value != 0 {
            w.first = w.index(at);
            w.push_newest(value);
        }
        Ok(w)
    }

    /// A window holding the buckets `held` ((index, sum), what the encoding carries): indices
    /// strictly increasing, no zero sum, spanning fewer than `buckets`.
    pub fn from_buckets(
        width_ms: i64,
        buckets: i64,
        held: &[(i64, i64)],
    ) -> Result<Window, CounterError> {
        check_config(width_ms, buckets).map_err(CounterError::InvalidOperation)?;
        let bad = |why| Err(CounterError::InvalidOperation(why));
        if held.iter().any(|(_, s)| *s == 0) {
            return bad("an empty window bucket");
        }
        let ordered = held.windows(2).all(|p| p[0].0 < p[1].0);
        let span = match (held.first(), held.last()) {
            (Some(f), Some(l)) => l.0.checked_sub(f.0).and_then(|d| d.checked_add(1)),
            _ => Some(0),
        };
        let Some(span) = span.filter(|n| ordered && *n <= buckets) else {
            return bad("window buckets out of order or wider than the window");
        };
        let mut w = Window {
            width_ms,
            buckets,
            first: held.first().map_or(0, |b| b.0),
            sums: VecDeque::new(),
        };
        // span <= buckets <= MAX_BUCKETS: it fits.
        w.sums.reserve_exact(span as usize);
        w.sums.resize(span as usize, 0);
        for (index, sum) in held {
            w.sums[(index - w.first) as usize] = *sum;
        }
        Ok(w)
    }

    /// The buckets held, oldest first, as (index, sum), empty ones left out (what the encoding
    /// writes).
    pub fn buckets_held(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.sums
            .iter()
            .enumerate()
            .filter(|(_, sum)| **sum != 0)
            .map(|(k, sum)| (self.first + k as i64, *sum))
    }

    /// Bucket slots allocated (what the window's memory grows with).
    pub fn capacity(&self) -> usize {
        self.sums.capacity()
    }

    /// Drops every bucket (`CTR.CLEAR`).
    pub fn clear(&mut self) {
        self.sums.clear();
        self.first = 0;
    }

    /// Appends the newest bucket, growing the deque to at most `buckets` entries: a limit that
    /// sees its requests in one bucket holds one (8 bytes, where the deque's own growth starts
    /// at 4), a full window `buckets` (never the next power of two).
    fn push_newest(&mut self, sum: i64) {
        let len = self.sums.len();
        if len == self.sums.capacity() {
            let bound = usize::try_from(self.buckets).unwrap_or(1).max(len + 1);
            self.sums.reserve_exact((len * 2).clamp(1, bound) - len);
        }
        self.sums.push_back(sum);
    }

    /// Drops the empty buckets at either end (so the first and the last held are never 0).
    fn trim(&mut self) {
        while self.sums.back() == Some(&0) {
            self.sums.pop_back();
        }
        // Never past the newest bucket (a nonzero one is left): `first` stays an index held.
        while self.sums.front() == Some(&0) {
            self.sums.pop_front();
            self.first += 1;
        }
        if self.sums.is_empty() {
            self.first = 0;
        }
    }

    pub fn bucket_ms(&self) -> i64 {
        self.width_ms / self.buckets
    }

    fn index(&self, t: i64) -> i64 {
        t.div_euclid(self.bucket_ms())
    }

    /// The index of the newest bucket held.
    fn newest(&self) -> Option<i64> {
        (!self.sums.is_empty()).then(|| self.first + (self.sums.len() as i64 - 1))
    }

    /// The index writes at `at` land in: the bucket of `at`, or the newest one when later.
    fn current(&self, at: i64) -> i64 {
        let i = self.index(at);
        self.newest().map_or(i, |newest| i.max(newest))
    }

    /// The oldest index still live when the window stands at `at`.
    fn oldest_live(&self, at: i64) -> i64 {
        self.current(at).saturating_sub(self.buckets - 1)
    }

    /// How many of the buckets held have left the window by `at` (they are the oldest).
    fn gone_by(&self, at: i64) -> usize {
        let gone = i128::from(self.oldest_live(at)) - i128::from(self.first);
        // Clamped to the buckets held: it fits.
        gone.clamp(0, self.sums.len() as i128) as usize
    }

    /// The sum of the buckets that have left the window by `at` (they are the oldest).
    pub fn expired_sum(&self, at: i64) -> i128 {
        let gone = self.gone_by(at);
        self.sums.iter().take(gone).map(|s| i128::from(*s)).sum()
    }

    /// True when some bucket has left the window by `at`.
    pub fn has_expired(&self, at: i64) -> bool {
        self.gone_by(at) > 0
    }

    /// Drops the buckets that left the window by `at`.
    pub fn slide(&mut self, at: i64) {
        let gone = self.gone_by(at);
        if gone == self.sums.len() {
            self.clear();
            return;
        }
        self.sums.drain(..gone);
        self.first += gone as i64; // at most the newest index held: it fits
        self.trim();
    }

    /// Adds `delta` to the bucket writes at `at` land in (after [`Window::slide`], so that
    /// bucket is within `buckets` of the oldest held).
    pub fn record(&mut self, at: i64, delta: i64) -> Result<(), CounterError> {
        if delta == 0 {
            return Ok(());
        }
        let current = self.current(at);
        if self.sums.is_empty() {
            self.first = current;
            self.push_newest(delta);
            return Ok(());
        }
        let offset = i128::from(current) - i128::from(self.first);
        if offset >= i128::from(self.buckets) {
            return Err(CounterError::InvalidOperation(
                "a window write before its slide",
            ));
        }
        // 0 <= offset < buckets <= MAX_BUCKETS: it fits.
        let offset = offset as usize;
        while self.sums.len() <= offset {
            self.push_newest(0);
        }
        let sum = &mut self.sums[offset];
        *sum = sum.checked_add(delta).ok_or(CounterError::Overflow)?;
        self.trim();
        Ok(())
    }

    /// Adds `delta` to the oldest bucket held (the current one when there is none), after
    /// [`Window::slide`]: what the floor holds back when a slide would take the value below it
    /// leaves the window with the buckets that took the value down.
    pub fn hold_in_oldest(&mut self, at: i64, delta: i64) -> Result<(), CounterError> {
        let Some(sum) = self.sums.front_mut() else {
            return self.record(at, delta);
        };
        *sum = sum.checked_add(delta).ok_or(CounterError::Overflow)?;
        self.trim();
        Ok(())
    }

    /// Fails, changing nothing, when [`Window::record`] of `delta` at `at` would overflow its
    /// bucket (the value itself may still fit: other buckets may be negative).
    pub fn check_record(&self, at: i64, delta: i64) -> Result<(), CounterError> {
        let current = self.current(at);
        match self.newest() {
            Some(newest) if newest == current => self
                .sums
                .back()
                .map_or(Some(0), |sum| sum.checked_add(delta))
                .map(|_| ())
                .ok_or(CounterError::Overflow),
            _ => Ok(()),
        }
    }

    /// The sum of the buckets held (what the value is, between writes).
    pub fn total(&self) -> Option<i64> {
        super::exact_sum(self.sums.iter().copied())
    }

    /// The buckets' shape: at most `buckets` held, the first and the last not empty.
    pub fn validate(&self) -> Result<(), CounterError> {
        check_config(self.width_ms, self.buckets).map_err(CounterError::InvalidOperation)?;
        let bad = |why| Err(CounterError::InvalidOperation(why));
        if self.sums.len() as i64 > self.buckets {
            return bad("more window buckets than the window has");
        }
        let ends_held = self.sums.front() != Some(&0) && self.sums.back() != Some(&0);
        if !ends_held || (self.sums.is_empty() && self.first != 0) {
            return bad("an empty window bucket");
        }
        Ok(())
    }

    pub fn heap_bytes(&self) -> usize {
        self.sums.capacity() * std::mem::size_of::<i64>()
    }
}

/// `CTR.WINDOW key window-ms [BUCKETS n]` (`width_ms` Some) or `CTR.WINDOW key NONE`, at the
/// master's time `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowOp {
    pub now: i64,
    /// (window-ms, buckets); None removes the window.
    pub config: Option<(i64, i64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(w: &Window) -> Vec<(i64, i64)> {
        w.buckets_held().collect()
    }

    #[test]
    fn buckets_leave_the_window_one_width_at_a_time() {
        // 1 s in 10 buckets of 100 ms.
        let mut w = Window::new(1000, 10, 0, 0).unwrap();
        for t in [0, 50, 150, 950] {
            w.slide(t);
            w.record(t, 1).unwrap();
        }
        assert_eq!(held(&w), [(0, 2), (1, 1), (9, 1)]);
        assert_eq!(w.expired_sum(999), 0);
        assert_eq!(w.expired_sum(1000), 2, "bucket 0 leaves at 1000");
        assert_eq!(w.expired_sum(1100), 3);
        assert_eq!(w.expired_sum(1899), 3);
        assert_eq!(w.expired_sum(1900), 4, "bucket 9 leaves at 1900");
        w.slide(1100);
        assert_eq!(held(&w), [(9, 1)]);
        // A write from before the newest bucket lands in it: the window never runs backwards.
        w.record(0, 5).unwrap();
        assert_eq!(held(&w), [(9, 6)]);
        w.validate().unwrap();
    }

    #[test]
    fn the_buckets_held_never_outgrow_the_window() {
        let mut w = Window::new(10_000, 10, 0, 0).unwrap();
        w.record(5, 1).unwrap();
        assert_eq!(w.capacity(), 1, "one bucket, one entry");
        for t in (0..30_000).step_by(500) {
            w.slide(t);
            w.record(t, 1).unwrap();
            assert!(w.sums.len() <= 10 && w.capacity() <= 10, "at {t}");
        }
        assert_eq!(w.sums.len(), 10);
        assert_eq!(w.total(), Some(20));
    }

    #[test]
    fn buckets_at_the_end_of_time_slide_and_empty_without_overflow() {
        let top = i64::MAX;
        let mut w = Window::from_buckets(10, 10, &[(top - 1, 1), (top, 2)]).unwrap();
        assert_eq!(w.check_record(top, i64::MAX), Err(CounterError::Overflow));
        w.record(top, -2).unwrap();
        assert_eq!(held(&w), [(top - 1, 1)]);
        w.hold_in_oldest(top, -1).unwrap();
        assert!(held(&w).is_empty());
        let mut w = Window::from_buckets(10, 10, &[(top, 5)]).unwrap();
        w.slide(i64::MAX);
        assert_eq!(w.total(), Some(5), "the newest bucket stays");
        w.validate().unwrap();
    }

    #[test]
    fn a_bucket_summing_to_zero_is_dropped() {
        let mut w = Window::new(60_000, 6, 0, 3).unwrap();
        w.record(10, -3).unwrap();
        assert!(w.sums.is_empty());
        assert_eq!(w.total(), Some(0));
    }

    #[test]
    fn configurations_are_checked() {
        assert_eq!(check_config(0, 10), Err(BAD_WIDTH));
        assert_eq!(check_config(1000, 0), Err(BAD_BUCKETS));
        assert_eq!(check_config(100_000, 4097), Err(BAD_BUCKETS));
        assert_eq!(check_config(1000, 3), Err(NOT_A_MULTIPLE));
        assert_eq!(check_config(4096, 4096), Ok(()));
        let from = |held: &[(i64, i64)]| Window::from_buckets(1000, 10, held);
        assert!(from(&[(0, 1), (10, 1)]).is_err(), "wider than the window");
        assert!(from(&[(1, 1), (0, 1)]).is_err(), "out of order");
        assert!(from(&[(-1, 0), (0, 1)]).is_err(), "a zero bucket");
        let w = from(&[(-1, 2), (8, -1)]).unwrap();
        assert_eq!((w.sums.len(), w.total()), (10, Some(1)));
        assert_eq!(held(&w), [(-1, 2), (8, -1)]);
        w.validate().unwrap();
    }
}

/// A windowed counter through the counter's own operations.
#[cfg(test)]
mod counter_tests {
    use crate::counter::{AddOp, ClearOp, Counter, CounterError, DecrOp, TokenStamp, WindowOp};

    fn windowed(width: i64, buckets: i64) -> Counter {
        let mut c = Counter::default();
        let op = WindowOp {
            now: 0,
            config: Some((width, buckets)),
        };
        assert!(c.apply_window(&op).unwrap());
        c
    }

    fn add(c: &mut Counter, now: i64, delta: i64) -> Result<Option<i64>, CounterError> {
        add_on(c, now, delta, 1, None)
    }

    fn add_on(
        c: &mut Counter,
        now: i64,
        delta: i64,
        shards: usize,
        token: Option<TokenStamp>,
    ) -> Result<Option<i64>, CounterError> {
        let shard = c.next_shard(shards);
        c.apply_add(&AddOp {
            now,
            event: now,
            delta,
            shard,
            shards,
            token,
        })
    }

    #[test]
    fn the_value_is_the_sum_of_the_last_window() {
        // 10 s in 10 buckets of 1 s.
        let mut c = windowed(10_000, 10);
        for t in 0..20 {
            assert_eq!(
                add(&mut c, t * 1000, 1),
                Ok(Some((t + 1).min(10))),
                "second {t}"
            );
        }
        assert_eq!(c.value_at(19_999), 10);
        assert_eq!(
            c.value_at(25_000),
            4,
            "a read leaves out what left the window"
        );
        assert_eq!(c.value(), 10, "and changes nothing");
        assert_eq!(c.value_at(40_000), 0);
        // On sub-shards too: the shards keep summing to the value.
        assert_eq!(add_on(&mut c, 25_000, 5, 4, None), Ok(Some(9)));
        assert_eq!(c.shard_values().iter().sum::<i64>(), 9);
    }

    #[test]
    fn a_write_that_changes_nothing_leaves_the_window_unslid() {
        let mut c = windowed(10_000, 10);
        add(&mut c, 0, i64::MAX - 5).unwrap();
        add(&mut c, 5_000, 5).unwrap();
        let before = c.clone();
        // At 12 s the first bucket has left, and the add then overflows: the slide goes back.
        assert_eq!(add(&mut c, 12_000, i64::MAX), Err(CounterError::Overflow));
        assert_eq!(c, before);
        assert!(
            c.set_floor(Some(0)).is_err(),
            "a floor comes before the window"
        );
        let mut floored = Counter::plain(0);
        floored.set_floor(Some(-3)).unwrap();
        floored
            .apply_window(&WindowOp {
                now: 0,
                config: Some((10_000, 10)),
            })
            .unwrap();
        let decr = |now, token| DecrOp {
            now,
            event: now,
            amount: 2,
            shard: 0,
            shards: 1,
            token,
        };
        assert_eq!(floored.apply_decrement(&decr(0, None)), Ok(Some(-2)));
        let before = floored.clone();
        assert_eq!(floored.apply_decrement(&decr(1_000, None)), Ok(None));
        assert_eq!(floored, before, "a refusal without a token changes nothing");
        // Once the decrement has left the window there is room again.
        assert_eq!(floored.apply_decrement(&decr(10_000, None)), Ok(Some(-2)));
    }

    #[test]
    fn the_floor_holds_what_leaves_the_window() {
        let mut c = Counter::plain(0);
        c.set_floor(Some(0)).unwrap();
        c.apply_window(&WindowOp {
            now: 0,
            config: Some((10_000, 10)),
        })
        .unwrap();
        add(&mut c, 0, 5).unwrap();
        let take = DecrOp {
            now: 3_000,
            event: 3_000,
            amount: 5,
            shard: 0,
            shards: 1,
            token: None,
        };
        assert_eq!(c.apply_decrement(&take), Ok(Some(0)));
        // The +5 leaves at 10 s and the -5 stays: the sum would be -5, the floor holds it at 0.
        assert_eq!(c.value_at(10_000), 0);
        assert_eq!(add(&mut c, 10_000, 1), Ok(Some(1)));
        assert_eq!(c.floor().unwrap().budgets, vec![1]);
        assert_eq!(c.window().unwrap().total(), Some(1));
        // ... and the 5 the floor held back leaves with the -5 it made up for: at 13 s the
        // window holds the 1 alone.
        assert_eq!(c.value_at(13_000), 1);
        assert_eq!(add(&mut c, 13_000, 0), Ok(Some(1)));
    }

    #[test]
    fn windows_go_and_change_and_clear() {
        let mut c = windowed(10_000, 10);
        add(&mut c, 0, 4).unwrap();
        let none = WindowOp {
            now: 15_000,
            config: None,
        };
        assert!(c.apply_window(&none).unwrap());
        assert_eq!(c.value(), 0, "the value the window held then");
        assert!(c.is_plain());
        assert!(!c.apply_window(&none).unwrap());
        let mut c = Counter::plain(7);
        let set = |config| WindowOp { now: 0, config };
        assert!(c.apply_window(&set(Some((1000, 10)))).unwrap());
        assert!(!c.apply_window(&set(Some((1000, 10)))).unwrap(), "the same");
        assert_eq!(c.value_at(999), 7);
        assert_eq!(
            c.value_at(1000),
            0,
            "what it held counts as added when the window came"
        );
        assert!(c.apply_window(&set(Some((2000, 4)))).unwrap());
        assert_eq!(c.value_at(1999), 7);
        assert_eq!(
            c.apply_clear(&ClearOp {
                now: 10,
                token: None
            }),
            Ok(7)
        );
        assert_eq!(c.value_at(0), 0);
        assert!(
            c.apply_window(&set(Some((2000, 3)))).is_err(),
            "not a multiple"
        );
    }

    #[test]
    fn a_write_outside_sees_the_windows_value_and_keeps_its_slide_only_when_it_wrote() {
        let mut c = windowed(10_000, 10);
        add(&mut c, 0, 5).unwrap();
        add(&mut c, 3_000, 2).unwrap();
        let before = c.clone();
        // A bounded add of 1 at 12 s, bound 2: the window holds 2 there, so it is skipped.
        let skipped = c.with_window_at(12_000, |c| Ok((c.value(), false)));
        assert_eq!(skipped, Ok(2));
        assert_eq!(c, before, "nothing written: the slide is put back");
        let added = c.with_window_at(12_000, |c| {
            let value = add(c, 12_000, 1)?;
            Ok((value, true))
        });
        assert_eq!(added, Ok(Some(3)));
        assert_eq!(c.value(), 3);
    }

    #[test]
    fn a_tokened_retry_replies_the_windows_value() {
        let mut c = windowed(10_000, 10);
        let token = Some(TokenStamp {
            fp: 7,
            expires_at: 100_000,
        });
        add_on(&mut c, 0, 3, 1, token).unwrap();
        assert_eq!(
            c.token_use(7, crate::counter::WriteKind::Add(3), 12_000),
            crate::counter::TokenUse::Retry(Some(0))
        );
    }
}
