//! The CTR counter: pure Rust, no Redis API. The Redis glue in `crate::commands` and
//! `crate::persist` drives it; everything here is unit-tested without a server.

mod cell;
mod error;

pub use cell::{CounterCell, CounterRef};
pub use error::CounterError;

/// Largest number of sub-shards a counter may hold (also the decoder's bound).
pub const MAX_SHARDS: usize = 1024;

/// A counter. `value` is always the exact sum of `shards`; a counter with a single shard keeps
/// `shards` empty so that it costs no heap allocation beyond itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Counter {
    value: i64,
    /// Per-shard values when the counter has more than one shard; empty otherwise.
    shards: Vec<i64>,
}

impl Counter {
    /// A single-shard counter holding `value`.
    pub const fn plain(value: i64) -> Self {
        Counter {
            value,
            shards: Vec::new(),
        }
    }

    /// Builds a counter from per-shard values, checking that their sum fits.
    pub fn from_shards(shards: Vec<i64>) -> Result<Self, CounterError> {
        let value = checked_sum(&shards)?;
        let shards = if shards.len() <= 1 {
            Vec::new()
        } else {
            shards
        };
        Ok(Counter { value, shards })
    }

    pub const fn value(&self) -> i64 {
        self.value
    }

    /// Number of sub-shards (at least 1).
    pub fn shard_count(&self) -> usize {
        self.shards.len().max(1)
    }

    /// Per-shard values, in shard order.
    pub fn shard_values(&self) -> Vec<i64> {
        if self.shards.is_empty() {
            vec![self.value]
        } else {
            self.shards.clone()
        }
    }

    /// True when the counter carries nothing but its value, so it can be stored inline.
    pub fn is_plain(&self) -> bool {
        self.shards.is_empty()
    }

    /// Adds `delta` to shard `shard` (taken modulo the shard count) and returns the new value.
    /// Changes nothing when the total or the shard would overflow.
    pub fn add(&mut self, shard: usize, delta: i64) -> Result<i64, CounterError> {
        let value = self
            .value
            .checked_add(delta)
            .ok_or(CounterError::Overflow)?;
        if !self.shards.is_empty() {
            let index = shard % self.shards.len();
            let slot = &mut self.shards[index];
            *slot = slot.checked_add(delta).ok_or(CounterError::Overflow)?;
        }
        self.value = value;
        Ok(value)
    }

    /// Heap bytes owned by the counter beyond its own struct.
    pub fn heap_bytes(&self) -> usize {
        self.shards.capacity() * std::mem::size_of::<i64>()
    }
}

fn checked_sum(values: &[i64]) -> Result<i64, CounterError> {
    values
        .iter()
        .try_fold(0i64, |acc, v| acc.checked_add(*v))
        .ok_or(CounterError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_returns_running_total() {
        let mut c = Counter::default();
        assert_eq!(c.add(0, 5), Ok(5));
        assert_eq!(c.add(0, -7), Ok(-2));
        assert_eq!(c.value(), -2);
        assert_eq!(c.shard_count(), 1);
    }

    #[test]
    fn overflow_changes_nothing() {
        let mut c = Counter::plain(i64::MAX - 1);
        assert_eq!(c.add(0, 2), Err(CounterError::Overflow));
        assert_eq!(c.value(), i64::MAX - 1);
        let mut c = Counter::plain(i64::MIN);
        assert_eq!(c.add(0, -1), Err(CounterError::Overflow));
        assert_eq!(c.value(), i64::MIN);
    }

    #[test]
    fn sharded_add_keeps_sum_exact() {
        let mut c = Counter::from_shards(vec![1, 2, 3]).unwrap();
        assert_eq!(c.value(), 6);
        c.add(4, 10).unwrap(); // 4 % 3 == shard 1
        assert_eq!(c.shard_values(), vec![1, 12, 3]);
        assert_eq!(c.value(), 16);
    }

    #[test]
    fn shard_overflow_changes_nothing_even_when_total_fits() {
        let mut c = Counter::from_shards(vec![i64::MAX, -10]).unwrap();
        assert_eq!(c.add(0, 1), Err(CounterError::Overflow));
        assert_eq!(c.shard_values(), vec![i64::MAX, -10]);
    }

    #[test]
    fn from_shards_rejects_overflowing_sum() {
        assert_eq!(
            Counter::from_shards(vec![i64::MAX, 1]),
            Err(CounterError::Overflow)
        );
        assert!(Counter::from_shards(vec![7]).unwrap().is_plain());
    }
}
