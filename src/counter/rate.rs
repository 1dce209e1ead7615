//! Add-rate tracking and the promotion rule for sub-shards.
//!
//! Rates are counted in one-second windows of the command's own time. The threshold is per
//! shard: a counter with `s` shards is hot when it takes more than `s x threshold` adds in a
//! second, and it doubles its shards after two hot seconds in a row (up to the configured
//! maximum). It is cold when a second passes with fewer than a quarter of that, and halves its
//! shards after ten cold seconds in a row (seconds with no add at all count as cold). The gap
//! between the two thresholds keeps a counter from flapping.
//!
//! Boxed counters carry a [`RateTracker`]. Cold inline counters have no room for one, so they
//! are watched by [`HotKeys`], a small fixed table shared by all keys: a counter that turns hot
//! there is promoted and from then on tracks itself. Rate state is advisory and local: it is
//! neither persisted nor replicated; the promotions it causes are (as explicit shard counts).

const WINDOW_MS: i64 = 1_000;
const HOT_SECONDS_TO_PROMOTE: u8 = 2;
const COLD_SECONDS_TO_DEMOTE: u8 = 10;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateTracker {
    /// Start of the current window (ms, a multiple of WINDOW_MS).
    window_start: i64,
    adds_in_window: u32,
    /// Adds in the last completed window (what CTR.INFO reports as the add rate).
    last_rate: u32,
    hot_streak: u8,
    cold_streak: u8,
    /// Retries of this copy of the counter recognised and ignored (what CTR.INFO reports as
    /// `duplicates_ignored`). Not about the rate, but local and advisory like it, and kept here
    /// because this struct's padding holds it: a boxed counter stays at 64 bytes.
    duplicates: u32,
}

/// What the rate says the shard count should become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardAdvice {
    Keep,
    Double,
    Halve,
}

impl RateTracker {
    pub const fn new() -> Self {
        RateTracker {
            window_start: 0,
            adds_in_window: 0,
            last_rate: 0,
            hot_streak: 0,
            cold_streak: 0,
            duplicates: 0,
        }
    }

    /// Counts a retry recognised and ignored (saturating at 2^32 - 1).
    pub fn note_duplicate(&mut self) {
        self.duplicates = self.duplicates.saturating_add(1);
    }

    pub fn duplicates(&self) -> u32 {
        self.duplicates
    }

    /// Records one add at `now` for a counter with `shards` shards and returns the advice.
    #[inline]
    pub fn record(&mut self, now: i64, shards: usize, threshold: i64) -> ShardAdvice {
        let window = window_of(now);
        if window != self.window_start {
            self.close_window(window, shards, threshold);
        }
        self.adds_in_window = self.adds_in_window.saturating_add(1);
        let hot_limit = hot_limit(shards, threshold);
        if i64::from(self.adds_in_window) > hot_limit
            && self.hot_streak.saturating_add(1) >= HOT_SECONDS_TO_PROMOTE
        {
            // Already hot for the previous second(s) and over the limit in this one.
            self.hot_streak = 0;
            self.cold_streak = 0;
            self.adds_in_window = 0;
            return ShardAdvice::Double;
        }
        if self.cold_streak >= COLD_SECONDS_TO_DEMOTE {
            self.cold_streak = 0;
            return ShardAdvice::Halve;
        }
        ShardAdvice::Keep
    }

    #[inline(never)]
    fn close_window(&mut self, new_start: i64, shards: usize, threshold: i64) {
        let adds = i64::from(self.adds_in_window);
        let idle_windows = new_start.saturating_sub(self.window_start) / WINDOW_MS - 1;
        let was_fresh = self.window_start == 0 && adds == 0;
        if !was_fresh {
            if adds > hot_limit(shards, threshold) && idle_windows == 0 {
                self.hot_streak = self.hot_streak.saturating_add(1);
                self.cold_streak = 0;
            } else {
                self.hot_streak = 0;
                let cold = adds < cold_limit(shards, threshold);
                let cold_windows =
                    (idle_windows.clamp(0, 255) as u8).saturating_add(u8::from(cold));
                self.cold_streak = if cold || idle_windows > 0 {
                    self.cold_streak.saturating_add(cold_windows)
                } else {
                    0
                };
            }
        }
        self.last_rate = if idle_windows == 0 {
            self.adds_in_window
        } else {
            0
        };
        self.window_start = new_start;
        self.adds_in_window = 0;
    }

    /// Adds per second over the last completed second.
    pub fn rate(&self) -> u32 {
        self.last_rate
    }
}

/// The start of the window holding `now` (saturating at the edge of the i64 range).
fn window_of(now: i64) -> i64 {
    now.div_euclid(WINDOW_MS).saturating_mul(WINDOW_MS)
}

fn hot_limit(shards: usize, threshold: i64) -> i64 {
    threshold.saturating_mul(shards as i64)
}

fn cold_limit(shards: usize, threshold: i64) -> i64 {
    hot_limit(shards, threshold) / 4
}

/// Watches cold (inline) counters by a hash of their key name. A slot belongs to one key at a
/// time; a colliding key takes it over only once the holder's window is stale, so a hot key is
/// not starved by a cold neighbour.
pub struct HotKeys {
    slots: Vec<HotSlot>,
}

#[derive(Debug, Clone, Copy, Default)]
struct HotSlot {
    key_hash: u64,
    tracker: RateTracker,
}

impl HotKeys {
    pub fn new(slots: usize) -> Self {
        HotKeys {
            slots: vec![HotSlot::default(); slots.max(1)],
        }
    }

    fn slot(&mut self, key_hash: u64) -> &mut HotSlot {
        let index = (key_hash % self.slots.len() as u64) as usize;
        &mut self.slots[index]
    }

    /// Records an add to the single-shard counter whose key hashes to `key_hash`; true when it
    /// should be promoted.
    pub fn record(&mut self, key_hash: u64, now: i64, threshold: i64) -> bool {
        let slot = self.slot(key_hash);
        if slot.key_hash != key_hash {
            let current = window_of(now);
            let stale = current.saturating_sub(slot.tracker.window_start) > WINDOW_MS;
            if !stale {
                return false;
            }
            *slot = HotSlot {
                key_hash,
                tracker: RateTracker::default(),
            };
        }
        let promote = slot.tracker.record(now, 1, threshold) == ShardAdvice::Double;
        if promote {
            // The counter tracks itself from now on.
            *slot = HotSlot::default();
        }
        promote
    }

    /// The last-second rate of the key, when this table is tracking it.
    pub fn rate(&self, key_hash: u64) -> u32 {
        let index = (key_hash % self.slots.len() as u64) as usize;
        let slot = &self.slots[index];
        if slot.key_hash == key_hash {
            slot.tracker.rate()
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_idle_gap_after_a_quiet_second_counts_as_cold() {
        // 299 idle seconds plus one quiet one: the cold streak saturates instead of wrapping
        // back to 0 (which left such a counter undemoted).
        let mut t = RateTracker::new();
        assert_eq!(t.record(1_000, 2, 100), ShardAdvice::Keep);
        assert_eq!(t.record(301_000, 2, 100), ShardAdvice::Halve);
    }

    #[test]
    fn times_at_the_edges_of_the_range_do_not_overflow() {
        let mut t = RateTracker::new();
        for now in [i64::MIN, -1, 0, i64::MAX, i64::MIN] {
            let _ = t.record(now, 1024, i64::MAX);
        }
        let mut keys = HotKeys::new(4);
        for now in [i64::MAX, i64::MIN, 0] {
            let _ = keys.record(1, now, 1);
            let _ = keys.record(5, now, 1);
        }
    }

    /// Feeds `per_second` adds evenly for `seconds` seconds starting at `start`; returns the
    /// advice of every add.
    fn feed(
        t: &mut RateTracker,
        start: i64,
        seconds: i64,
        per_second: i64,
        shards: usize,
        threshold: i64,
    ) -> Vec<ShardAdvice> {
        let mut out = Vec::new();
        for s in 0..seconds {
            for i in 0..per_second {
                out.push(t.record(
                    start + s * 1000 + i * 1000 / per_second.max(1),
                    shards,
                    threshold,
                ));
            }
        }
        out
    }

    #[test]
    fn a_sustained_hot_counter_is_promoted_once_per_two_seconds() {
        let mut t = RateTracker::default();
        let advice = feed(&mut t, 1_000_000, 2, 50, 1, 10);
        assert_eq!(
            advice.iter().filter(|a| **a == ShardAdvice::Double).count(),
            1
        );
        assert_eq!(
            advice[..50]
                .iter()
                .filter(|a| **a == ShardAdvice::Double)
                .count(),
            0,
            "one hot second is not enough"
        );
    }

    #[test]
    fn a_brief_burst_is_not_promoted() {
        let mut t = RateTracker::default();
        let mut advice = feed(&mut t, 1_000_000, 1, 100, 1, 10);
        advice.extend(feed(&mut t, 1_001_000, 1, 2, 1, 10));
        advice.extend(feed(&mut t, 1_002_000, 1, 100, 1, 10));
        assert!(advice.iter().all(|a| *a == ShardAdvice::Keep));
    }

    #[test]
    fn threshold_is_per_shard() {
        let mut t = RateTracker::default();
        // 30 adds/s: hot for 2 shards at threshold 10 (limit 20), not for 4 (limit 40).
        assert!(feed(&mut t, 1_000_000, 3, 30, 2, 10).contains(&ShardAdvice::Double));
        let mut t = RateTracker::default();
        assert!(!feed(&mut t, 1_000_000, 3, 30, 4, 10).contains(&ShardAdvice::Double));
    }

    #[test]
    fn a_counter_gone_cold_is_halved_at_its_next_add() {
        let mut t = RateTracker::default();
        feed(&mut t, 1_000_000, 2, 100, 4, 10);
        // Long silence, then one add.
        assert_eq!(t.record(1_000_000 + 60_000, 4, 10), ShardAdvice::Halve);
        assert_eq!(t.record(1_000_000 + 60_001, 2, 10), ShardAdvice::Keep);
    }

    #[test]
    fn rate_reports_the_last_full_second() {
        let mut t = RateTracker::default();
        feed(&mut t, 5_000, 1, 7, 1, 1_000);
        t.record(6_500, 1, 1_000);
        assert_eq!(t.rate(), 7);
        t.record(9_000, 1, 1_000);
        assert_eq!(t.rate(), 0, "an idle gap means no recent rate");
    }

    #[test]
    fn hot_keys_promote_a_hot_key_and_ignore_a_colliding_cold_one() {
        let mut hk = HotKeys::new(1); // everything collides
        let mut promoted = false;
        for s in 0..3 {
            for i in 0..20 {
                promoted |= hk.record(42, 1_000_000 + s * 1000 + i * 50, 10);
                // A cold neighbour touching the same slot does not steal it.
                assert!(!hk.record(7, 1_000_000 + s * 1000 + i * 50, 10));
            }
        }
        assert!(promoted);
    }
}
