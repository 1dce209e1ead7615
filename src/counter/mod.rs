//! The CTR counter: pure Rust, no Redis API. The Redis glue in `crate::commands` and
//! `crate::persist` drives it; everything here is unit-tested without a server.
//!
//! A write is described by an operation ([`AddOp`], [`ClearOp`]) that carries every decision
//! (the time, the shard, the shard count, the token's fingerprint and expiry). The master makes
//! the decisions, applies the operation, and replicates the same operation, so replicas and
//! the AOF reach the same state bit for bit.

mod cell;
mod error;
pub mod rate;
pub mod siphash;
pub mod tokens;

pub use cell::{CounterCell, CounterRef};
pub use error::CounterError;
pub use rate::{HotKeys, RateTracker, ShardAdvice};
pub use tokens::{token_expiry, TokenTimeError, TokenWindow};

/// Largest number of sub-shards a counter may hold (also the decoder's bound).
pub const MAX_SHARDS: usize = 1024;

/// A token applied by a write: its fingerprint and when it stops being remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenStamp {
    pub fp: u64,
    pub expires_at: i64,
}

/// Add `delta` to shard `shard` after resizing to `shards` shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddOp {
    pub now: i64,
    pub delta: i64,
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

/// A counter. `value` is always the exact sum of `shards`; a counter with a single shard keeps
/// `shards` empty so that it costs no heap allocation beyond itself.
#[derive(Debug, Clone, Default)]
pub struct Counter {
    value: i64,
    /// Per-shard values when the counter has more than one shard; empty otherwise.
    shards: Vec<i64>,
    tokens: TokenWindow,
    /// Local and advisory: not persisted, not replicated, not part of the digest.
    rate: RateTracker,
    /// Retries ignored since this copy of the counter was loaded (local, like `rate`).
    duplicates: u64,
}

/// Equality of the persistent state (what the encoding and the digest cover).
impl PartialEq for Counter {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value && self.shards == other.shards && self.tokens == other.tokens
    }
}

impl Eq for Counter {}

impl Counter {
    /// A single-shard counter holding `value`.
    pub const fn plain(value: i64) -> Self {
        Counter {
            value,
            shards: Vec::new(),
            tokens: TokenWindow::from_empty(),
            rate: RateTracker::new(),
            duplicates: 0,
        }
    }

    /// Builds a counter from decoded parts, checking that the shards sum to a 64-bit value.
    pub fn from_parts(shards: Vec<i64>, tokens: TokenWindow) -> Result<Self, CounterError> {
        let value = checked_sum(&shards)?;
        if shards.len() > MAX_SHARDS {
            return Err(CounterError::InvalidOperation("too many shards"));
        }
        let shards = if shards.len() <= 1 {
            Vec::new()
        } else {
            shards
        };
        Ok(Counter {
            value,
            shards,
            tokens,
            ..Counter::default()
        })
    }

    /// Builds a counter from per-shard values.
    pub fn from_shards(shards: Vec<i64>) -> Result<Self, CounterError> {
        Counter::from_parts(shards, TokenWindow::default())
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

    pub fn tokens(&self) -> &TokenWindow {
        &self.tokens
    }

    /// True when the counter carries nothing but its value, so it can be stored inline.
    pub fn is_plain(&self) -> bool {
        self.shards.is_empty() && self.tokens.is_empty()
    }

    /// True when `fp` was applied and is still remembered at `now`.
    pub fn has_token(&self, fp: u64, now: i64) -> bool {
        self.tokens.contains_live(fp, now)
    }

    /// Counts a retry that was recognised and ignored.
    pub fn note_duplicate(&mut self) {
        self.duplicates = self.duplicates.saturating_add(1);
    }

    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Adds per second over the last full second (as this server saw them).
    pub fn add_rate(&self) -> u32 {
        self.rate.rate()
    }

    /// Records an add at `now` and returns the shard count the counter should have.
    pub fn advise_shards(&mut self, now: i64, threshold: i64, max_shards: usize) -> usize {
        let current = self.shard_count();
        let max = max_shards.clamp(1, MAX_SHARDS);
        let target = match self.rate.record(now, current, threshold) {
            ShardAdvice::Double => current.saturating_mul(2),
            ShardAdvice::Halve => current / 2,
            ShardAdvice::Keep => current,
        };
        target.clamp(1, max)
    }

    /// Applies an add. Everything is checked first: on error nothing changes.
    pub fn apply_add(&mut self, op: &AddOp) -> Result<i64, CounterError> {
        if op.shards == 0 || op.shards > MAX_SHARDS || op.shard >= op.shards {
            return Err(CounterError::InvalidOperation("shard out of range"));
        }
        let value = self
            .value
            .checked_add(op.delta)
            .ok_or(CounterError::Overflow)?;
        let mut shards = self.resized_shards(op.shards)?;
        if let Some(slot) = shards.get_mut(op.shard) {
            *slot = slot.checked_add(op.delta).ok_or(CounterError::Overflow)?;
        }
        self.value = value;
        self.shards = shards;
        self.record_write(op.now, op.token);
        Ok(value)
    }

    /// Applies a reset to 0 and returns the value before it.
    pub fn apply_clear(&mut self, op: &ClearOp) -> Result<i64, CounterError> {
        let before = self.value;
        self.value = 0;
        self.shards.iter_mut().for_each(|s| *s = 0);
        self.record_write(op.now, op.token);
        Ok(before)
    }

    fn record_write(&mut self, now: i64, token: Option<TokenStamp>) {
        self.tokens.sweep(now);
        if let Some(t) = token {
            self.tokens.insert(t.fp, t.expires_at);
        }
    }

    /// The shard vector after resizing to `target` shards (empty for one shard): new shards
    /// start at 0; a shrink folds shard `i` into `i % target`. The sum never changes.
    fn resized_shards(&self, target: usize) -> Result<Vec<i64>, CounterError> {
        let current = self.shard_values();
        if target == current.len() {
            return Ok(if target == 1 { Vec::new() } else { current });
        }
        let mut resized = vec![0i64; target];
        for (i, v) in current.iter().enumerate() {
            let slot = &mut resized[i % target];
            *slot = slot.checked_add(*v).ok_or(CounterError::Overflow)?;
        }
        Ok(if target == 1 { Vec::new() } else { resized })
    }

    /// Heap bytes owned by the counter beyond its own struct.
    pub fn heap_bytes(&self) -> usize {
        self.shards.capacity() * std::mem::size_of::<i64>() + self.tokens.heap_bytes()
    }
}

fn checked_sum(values: &[i64]) -> Result<i64, CounterError> {
    values
        .iter()
        .try_fold(0i64, |acc, v| acc.checked_add(*v))
        .ok_or(CounterError::Overflow)
}

#[cfg(test)]
mod tests;
