//! The write operations of a counter. Each checks everything first and changes nothing when it
//! fails or is refused.

use super::floor::{draw, resize, split_evenly};
use super::tokens::LedgerEntry;
use super::{Counter, CounterError, Floor, MAX_SHARDS};

/// A token applied by a write: its fingerprint and when it stops being remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenStamp {
    pub fp: u64,
    pub expires_at: i64,
}

/// Add `delta` at shard `shard` after resizing to `shards` shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddOp {
    pub now: i64,
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

/// A working copy of the shard layout for one operation.
struct Layout {
    values: Vec<i64>,
    budgets: Option<Vec<i64>>,
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

    /// Takes `need` from the budgets starting at `shard`; false when they are short.
    fn debit_budgets(&mut self, shard: usize, need: i64) -> Result<bool, CounterError> {
        let Some(budgets) = &mut self.budgets else {
            return Err(CounterError::InvalidOperation("no budgets"));
        };
        let Some(takes) = draw(budgets, shard, need) else {
            return Ok(false);
        };
        for (j, take) in takes.into_iter().enumerate() {
            budgets[j] -= take;
            let v = &mut self.values[j];
            *v = v.checked_sub(take).ok_or(CounterError::Overflow)?;
        }
        Ok(true)
    }
}

impl Counter {
    fn layout(&self, shards: usize) -> Result<Layout, CounterError> {
        let values = resize(&self.shard_values(), shards)?;
        let budgets = match &self.floor {
            Some(f) => Some(resize(&f.budgets, shards)?),
            None => None,
        };
        Ok(Layout { values, budgets })
    }

    fn commit(&mut self, value: i64, layout: Layout) {
        self.value = value;
        self.shards = if layout.values.len() == 1 {
            Vec::new()
        } else {
            layout.values
        };
        if let (Some(f), Some(budgets)) = (&mut self.floor, layout.budgets) {
            f.budgets = budgets;
        }
    }

    /// The headroom after a change to `value`, checked to stay representable.
    fn check_headroom(&self, value: i64) -> Result<(), CounterError> {
        match &self.floor {
            Some(f) => value
                .checked_sub(f.floor)
                .map(|_| ())
                .ok_or(CounterError::Overflow),
            None => Ok(()),
        }
    }

    /// Applies an add: `Ok(Some(value))`, or `Ok(None)` when a negative add on a floored counter
    /// would cross the floor (nothing changes, the token is not remembered).
    pub fn apply_add(&mut self, op: &AddOp) -> Result<Option<i64>, CounterError> {
        check_shards(op.shard, op.shards)?;
        let value = self
            .value
            .checked_add(op.delta)
            .ok_or(CounterError::Overflow)?;
        if self.shards.is_empty() && op.shards == 1 && self.floor.is_none() {
            self.value = value; // the cold path: no layout to build
        } else {
            let mut layout = self.layout(op.shards)?;
            if op.delta < 0 && self.floor.is_some() {
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
        self.record_write(op.now);
        if let Some(t) = op.token {
            self.tokens.insert(t.fp, t.expires_at);
        }
        Ok(Some(value))
    }

    /// Applies a floored decrement: `Ok(Some(value))` when granted, `Ok(None)` when it would cross
    /// the floor (0 when none is set). With a token, the outcome is recorded in the ledger either
    /// way, so a retry replays it.
    pub fn apply_decrement(&mut self, op: &DecrOp) -> Result<Option<i64>, CounterError> {
        check_shards(op.shard, op.shards)?;
        if op.amount <= 0 {
            return Err(CounterError::InvalidOperation("amount must be positive"));
        }
        let mut layout = self.layout(op.shards)?;
        let floor = self.floor.as_ref().map_or(0, |f| f.floor);
        let granted = match self.value.checked_sub(op.amount) {
            Some(value) if value >= floor => {
                let covered = if self.floor.is_some() {
                    layout.debit_budgets(op.shard, op.amount)?
                } else {
                    let v = &mut layout.values[op.shard];
                    *v = v.checked_sub(op.amount).ok_or(CounterError::Overflow)?;
                    true
                };
                covered.then_some(value)
            }
            _ => None,
        };
        if granted.is_none() && op.token.is_none() {
            return Ok(None); // a refusal with nothing to remember changes nothing
        }
        if let Some(value) = granted {
            self.commit(value, layout);
        }
        self.record_write(op.now);
        if let Some(t) = op.token {
            let entry = LedgerEntry {
                expires_at: t.expires_at,
                outcome: granted,
            };
            self.ledger.insert(t.fp, entry);
        }
        Ok(granted)
    }

    /// Applies a reset to 0 and returns the value before it. Refused when the floor is above 0.
    pub fn apply_clear(&mut self, op: &ClearOp) -> Result<i64, CounterError> {
        let budgets = match &self.floor {
            Some(f) if f.floor > 0 => return Err(CounterError::BelowFloor),
            Some(f) => {
                let headroom = f.floor.checked_neg().ok_or(CounterError::Overflow)?;
                Some(split_evenly(headroom, self.shard_count()))
            }
            None => None,
        };
        let before = self.value;
        self.value = 0;
        self.shards.iter_mut().for_each(|s| *s = 0);
        if let (Some(f), Some(budgets)) = (&mut self.floor, budgets) {
            f.budgets = budgets;
        }
        self.record_write(op.now);
        if let Some(t) = op.token {
            self.tokens.insert(t.fp, t.expires_at);
        }
        Ok(before)
    }

    /// Sets (or with None removes) the floor; the headroom is spread evenly over the shards'
    /// budgets. Refused when the value is already below the floor.
    pub fn set_floor(&mut self, floor: Option<i64>) -> Result<(), CounterError> {
        self.floor = match floor {
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
        Ok(())
    }

    /// Every recorded write sweeps a few expired tokens from both windows.
    fn record_write(&mut self, now: i64) {
        self.tokens.sweep(now);
        self.ledger.sweep(now);
    }
}
