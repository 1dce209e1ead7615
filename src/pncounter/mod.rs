//! The PN-Counter CRDT: pure Rust, no Redis API. The Redis glue in `crate::commands::pnc` and
//! `crate::persist::pnc_*` drives it; everything here is unit-tested without a server.
//!
//! A PN-Counter holds, for every replica id that ever wrote it, two grow-only totals: P (the sum
//! of its positive adds) and N (the sum of the magnitudes of its negative adds). Its value is
//! `sum(P) - sum(N)`. Two states merge by taking, per replica id, the larger P and the larger N,
//! which is commutative, associative and idempotent, so deployments converge in any order.
//!
//! Safe range: every P and N total lies in `0..=i64::MAX` ([`SLOT_MAX`]), a counter has at most
//! [`MAX_REPLICAS`] replica ids (so the sums, taken in `i128`, can never overflow), and the value
//! must fit in an `i64`. An add that would leave that range fails with
//! [`PncError::Overflow`], a merge whose result would leave it is refused; both change nothing.

pub mod bound;
pub mod delta;
pub mod demand;
mod entries;
mod id;
pub mod identity;

pub use bound::{Bound, BoundError, Decrement, FloorMove, FloorSwitch, LedgerEntry, Transfer};
pub use id::{ConfiguredIdError, IdError, ReplicaId, MAX_CONFIGURED_ID_LEN, MAX_ID_LEN};
pub use identity::{identity, Home, Identity};

use std::fmt;

use entries::Entries;

/// Largest P or N total of one replica id.
pub const SLOT_MAX: u64 = i64::MAX as u64;
/// Most replica ids one counter may hold (also the decoder's bound).
pub const MAX_REPLICAS: usize = 1024;

/// Errors of the PN-Counter core, each rendered as the exact text a client sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PncError {
    /// A P or N total, or the value, would leave the safe range.
    Overflow,
    /// The counter would hold more than [`MAX_REPLICAS`] replica ids.
    TooManyReplicas,
}

impl PncError {
    pub const fn message(self) -> &'static str {
        match self {
            PncError::Overflow => "ERR counter overflow",
            PncError::TooManyReplicas => {
                "ERR too many replica ids in one PN-counter (at most 1024)"
            }
        }
    }
}

impl fmt::Display for PncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for PncError {}

/// One replica id's totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: ReplicaId,
    pub p: u64,
    pub n: u64,
}

/// A PN-Counter: entries sorted by id (unique), the cached value, and the home record (which of
/// this deployment's ids last wrote it locally; not part of the CRDT state, never merged).
///
/// One entry (a counter only this deployment wrote) lives inside the struct, so a local add on a
/// cold key reaches its slot without a second allocation; more live in an exactly sized boxed
/// slice ([`Entries`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PnCounter {
    entries: Entries,
    value: i64,
    home: Option<Home>,
    /// Index of the home record's entry, [`NO_SLOT`] when there is no home record or it has no
    /// entry yet: local adds find their slot without a search. Derived from `entries` and
    /// `home`, recomputed whenever either changes shape.
    home_slot: u32,
    /// The floor, the rights matrix and the token ledger of a bounded counter
    /// ([`bound`]); None for a plain PN-counter (the common case costs one pointer).
    bound: Option<Box<Bound>>,
}

/// `home_slot` when the home record has no entry.
const NO_SLOT: u32 = u32::MAX;

impl Default for PnCounter {
    fn default() -> Self {
        PnCounter {
            entries: Entries::default(),
            value: 0,
            home: None,
            home_slot: NO_SLOT,
            bound: None,
        }
    }
}

/// `sum(P) - sum(N)` when it fits in an i64. With at most [`MAX_REPLICAS`] totals of at most
/// [`SLOT_MAX`] each, the i128 sums cannot overflow.
fn value_of(entries: &[Entry]) -> Option<i64> {
    let mut sum: i128 = 0;
    for e in entries {
        sum = sum
            .checked_add(i128::from(e.p))?
            .checked_sub(i128::from(e.n))?;
    }
    i64::try_from(sum).ok()
}

impl PnCounter {
    pub fn new() -> Self {
        PnCounter::default()
    }

    /// Builds a counter from entries, checking every invariant: ids strictly increasing (so
    /// unique), totals within [`SLOT_MAX`], at most [`MAX_REPLICAS`] entries, value in range.
    pub fn from_entries(entries: Vec<Entry>, home: Option<Home>) -> Result<Self, StateError> {
        Self::from_parts(entries, home, None)
    }

    /// [`PnCounter::from_entries`] with a bounded part, validated too (an empty one is none).
    pub fn from_parts(
        entries: Vec<Entry>,
        home: Option<Home>,
        bound: Option<Bound>,
    ) -> Result<Self, StateError> {
        if let Some(b) = &bound {
            bound::validate(b).map_err(StateError::Bound)?;
        }
        if entries.len() > MAX_REPLICAS {
            return Err(StateError::TooManyReplicas);
        }
        for pair in entries.windows(2) {
            match pair[0].id.cmp(&pair[1].id) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Err(StateError::DuplicateId),
                std::cmp::Ordering::Greater => return Err(StateError::Unordered),
            }
        }
        if entries.iter().any(|e| e.p > SLOT_MAX || e.n > SLOT_MAX) {
            return Err(StateError::SlotOutOfRange);
        }
        let value = value_of(&entries).ok_or(StateError::ValueOutOfRange)?;
        let mut counter = PnCounter {
            entries: Entries::from_vec(entries),
            value,
            home,
            home_slot: NO_SLOT,
            bound: bound.filter(|b| !b.is_empty()).map(Box::new),
        };
        counter.locate_home();
        Ok(counter)
    }

    pub fn value(&self) -> i64 {
        self.value
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn home(&self) -> Option<&Home> {
        self.home.as_ref()
    }

    pub fn set_home(&mut self, home: Option<Home>) {
        self.home = home;
        self.locate_home();
    }

    /// Recomputes `home_slot` (after the entries or the home record changed shape).
    fn locate_home(&mut self) {
        self.home_slot = self
            .home
            .as_ref()
            .and_then(|h| self.entries.binary_search_by(|e| e.id.cmp(&h.id)).ok())
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or(NO_SLOT);
    }

    /// The merged state alone, what `PNC.STATE` ships: no home record, no token ledger.
    pub fn shipped(&self) -> PnCounter {
        let bound = self.bound.as_deref().map(|b| Bound {
            ledger: Vec::new(),
            ..b.clone()
        });
        PnCounter {
            entries: self.entries.clone(),
            value: self.value,
            home: None,
            home_slot: NO_SLOT,
            bound: bound.filter(|b| !b.is_empty()).map(Box::new),
        }
    }

    /// True when both hold the same CRDT state (the home record is not part of it).
    pub fn same_state(&self, other: &PnCounter) -> bool {
        let empty = Bound::default();
        let (a, b) = (
            self.bound.as_deref().unwrap_or(&empty),
            other.bound.as_deref().unwrap_or(&empty),
        );
        self.entries == other.entries && a.same_state(b)
    }

    /// The totals of `id`, if it has written this counter.
    pub fn slot(&self, id: &ReplicaId) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| e.id.cmp(id))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Adds `delta` to the slot of `id` (P when positive, N by its magnitude when negative) and
    /// returns the new value. Changes nothing when it fails. A zero delta changes nothing.
    pub fn add(&mut self, id: &ReplicaId, delta: i64) -> Result<i64, PncError> {
        match self.entries.binary_search_by(|e| e.id.cmp(id)) {
            Ok(i) => self.add_at(i, delta),
            Err(i) => self.insert_with(i, id, delta),
        }
    }

    /// Adds `delta` to the slot of the home record's id, found without a search: what a local
    /// write does on a counter it wrote last, and what its replicas and the AOF do when they
    /// replay that write. None when the counter has no home record.
    pub fn add_at_home(&mut self, delta: i64) -> Option<Result<i64, PncError>> {
        let home = self.home.as_ref()?;
        match self.entries.get(self.home_slot as usize) {
            Some(_) => Some(self.add_at(self.home_slot as usize, delta)),
            // A home record without an entry yet (its first write added 0): rare, so the id
            // may be copied.
            None => {
                let id = home.id.clone();
                Some(self.add(&id, delta))
            }
        }
    }

    /// The new value after adding `delta`, or the overflow.
    fn value_after(&self, delta: i64) -> Result<i64, PncError> {
        self.value.checked_add(delta).ok_or(PncError::Overflow)
    }

    /// Adds `delta` to the existing entry `i`.
    fn add_at(&mut self, i: usize, delta: i64) -> Result<i64, PncError> {
        let value = self.value_after(delta)?;
        let entry = &mut self.entries[i];
        if delta > 0 {
            entry.p = bump(entry.p, delta)?;
        } else if delta < 0 {
            entry.n = bump(entry.n, delta)?;
        }
        self.value = value;
        Ok(value)
    }

    /// Adds `delta` to a new entry for `id`, inserted at `i` (none for a zero delta).
    fn insert_with(&mut self, i: usize, id: &ReplicaId, delta: i64) -> Result<i64, PncError> {
        let value = self.value_after(delta)?;
        if delta == 0 {
            return Ok(value);
        }
        if self.entries.len() >= MAX_REPLICAS {
            return Err(PncError::TooManyReplicas);
        }
        let (p, n) = if delta > 0 {
            (bump(0, delta)?, 0)
        } else {
            (0, bump(0, delta)?)
        };
        // New replica ids are rare: the slice grows by exactly one entry.
        let mut entries = std::mem::take(&mut self.entries).into_vec();
        entries.reserve_exact(1);
        entries.insert(
            i,
            Entry {
                id: id.clone(),
                p,
                n,
            },
        );
        self.entries = Entries::from_vec(entries);
        self.value = value;
        self.locate_home();
        Ok(value)
    }

    /// Observed reset: adds minus the current value to the slot of `id`, so the value becomes 0
    /// here while adds made concurrently elsewhere survive the next merge. Returns the value
    /// before. Changes nothing when it fails.
    pub fn observed_reset(&mut self, id: &ReplicaId) -> Result<i64, PncError> {
        let before = self.value;
        let delta = before.checked_neg().ok_or(PncError::Overflow)?;
        self.add(id, delta)?;
        Ok(before)
    }

    /// The element-wise maximum of `self` and `other` (the home record stays `self`'s).
    /// Refused, with nothing built, when the result would hold too many ids or an out-of-range
    /// value.
    pub fn merged(&self, other: &PnCounter) -> Result<PnCounter, PncError> {
        let (a, b): (&[Entry], &[Entry]) = (&self.entries, &other.entries);
        let mut out = Vec::with_capacity(union_len(a, b));
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let next = match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) => match x.id.cmp(&y.id) {
                    std::cmp::Ordering::Less => {
                        i += 1;
                        x.clone()
                    }
                    std::cmp::Ordering::Greater => {
                        j += 1;
                        y.clone()
                    }
                    std::cmp::Ordering::Equal => {
                        i += 1;
                        j += 1;
                        Entry {
                            id: x.id.clone(),
                            p: x.p.max(y.p),
                            n: x.n.max(y.n),
                        }
                    }
                },
                (Some(x), None) => {
                    i += 1;
                    x.clone()
                }
                (None, Some(y)) => {
                    j += 1;
                    y.clone()
                }
                (None, None) => break,
            };
            if out.len() >= MAX_REPLICAS {
                return Err(PncError::TooManyReplicas);
            }
            out.push(next);
        }
        let value = value_of(&out).ok_or(PncError::Overflow)?;
        let bound = match (&self.bound, &other.bound) {
            (None, None) => None,
            (a, b) => {
                let empty = Bound::default();
                let (a, b) = (
                    a.as_deref().unwrap_or(&empty),
                    b.as_deref().unwrap_or(&empty),
                );
                let joined = a.merged(b).map_err(|e| match e {
                    BoundError::TooManyEntries => PncError::TooManyReplicas,
                    _ => PncError::Overflow,
                })?;
                (!joined.is_empty()).then(|| Box::new(joined))
            }
        };
        let mut merged = PnCounter {
            entries: Entries::from_vec(out),
            value,
            home: self.home.clone(),
            home_slot: NO_SLOT,
            bound,
        };
        merged.locate_home();
        Ok(merged)
    }

    /// Heap bytes owned beyond the struct itself.
    pub fn heap_bytes(&self) -> usize {
        self.entries.boxed_len() * std::mem::size_of::<Entry>()
            + self
                .entries
                .iter()
                .map(|e| e.id.heap_bytes())
                .sum::<usize>()
            + self.home.as_ref().map_or(0, |h| h.id.heap_bytes())
            + self.bound.as_deref().map_or(0, bound_bytes)
    }

    /// What a boxed counter really costs, its box included: each allocation as the allocator
    /// rounds it (see [`crate::memsize`]). What `MEMORY USAGE` reports for it.
    pub fn allocated_bytes(&self) -> usize {
        use crate::memsize::{usable_size, vec_bytes};
        usable_size(std::mem::size_of::<PnCounter>())
            + vec_bytes::<Entry>(self.entries.boxed_len())
            + self
                .entries
                .iter()
                .map(|e| e.id.allocated_bytes())
                .sum::<usize>()
            + self.home.as_ref().map_or(0, |h| h.id.allocated_bytes())
            + self
                .bound
                .as_deref()
                .map_or(0, |b| usable_size(bound_bytes(b)))
    }

    /// Separate heap allocations (for the lazy-free decision).
    pub fn allocations(&self) -> usize {
        let long_ids = self
            .entries
            .iter()
            .map(|e| &e.id)
            .chain(self.home.as_ref().map(|h| &h.id))
            .filter(|id| id.heap_bytes() > 0)
            .count();
        usize::from(self.entries.boxed_len() > 0)
            + long_ids
            + self.bound.as_deref().map_or(0, |b| 1 + b.ledger.len())
    }
}

/// Heap bytes of a bounded part, its box included (ids counted at their inline size).
fn bound_bytes(b: &Bound) -> usize {
    use std::mem::size_of;
    size_of::<Bound>()
        + b.moves.capacity() * size_of::<FloorMove>()
        + b.transfers.capacity() * size_of::<Transfer>()
        + b.ledger.capacity() * size_of::<LedgerEntry>()
        + b.ledger.iter().map(|e| e.token.len()).sum::<usize>()
}

/// `total` plus the magnitude of `delta`, within [`SLOT_MAX`].
fn bump(total: u64, delta: i64) -> Result<u64, PncError> {
    total
        .checked_add(delta.unsigned_abs())
        .filter(|t| *t <= SLOT_MAX)
        .ok_or(PncError::Overflow)
}

/// How many distinct ids two sorted entry lists hold together.
fn union_len(a: &[Entry], b: &[Entry]) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].id.cmp(&b[j].id) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                i += 1;
                j += 1;
            }
        }
        n += 1;
    }
    n + (a.len() - i) + (b.len() - j)
}

/// Why a decoded state is not a valid PN-Counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateError {
    TooManyReplicas,
    DuplicateId,
    Unordered,
    SlotOutOfRange,
    ValueOutOfRange,
    /// An invalid floor, transfer matrix or ledger.
    Bound(&'static str),
}

impl StateError {
    pub const fn message(self) -> &'static str {
        match self {
            StateError::TooManyReplicas => "more than 1024 replica ids",
            StateError::DuplicateId => "duplicate replica id",
            StateError::Unordered => "replica ids out of order",
            StateError::SlotOutOfRange => "a P or N total exceeds 9223372036854775807",
            StateError::ValueOutOfRange => "its value is outside the signed 64-bit range",
            StateError::Bound(why) => why,
        }
    }
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

#[cfg(test)]
mod simulator;
#[cfg(test)]
pub(crate) mod tests;
