//! The dedup window of a counter: which idempotency tokens it has applied, each remembered until
//! its event time plus the window.
//!
//! Tokens are stored as 64-bit fingerprints (see `siphash`) in a hash table keyed by the
//! fingerprint itself (already uniformly random), with their expiry time: one probe per lookup,
//! 12 bytes per slot (expiries are u32 ms after a base). Expiry is deterministic and cheap: a write whose time has reached
//! the window's next sweep time drops every expired entry, and schedules the next sweep a
//! sixteenth of the remaining window later. Between sweeps, an entry past its expiry is treated
//! as absent. The sweep time is part of the state and the time is the operation's own (the
//! master's, carried to replicas in the replicated effect), so master, replicas and an AOF reload
//! hold exactly the same entries; the table's layout never matters (the encoding sorts by
//! fingerprint). Amortized, each write visits about 16 entries; one sweep visits them all, at
//! most once per sixteenth of the window.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// How many sweeps a full window is split into.
pub const SWEEPS_PER_WINDOW: i64 = 16;

/// Fingerprints are SipHash outputs: use them as their own hash.
#[derive(Default, Clone, Copy)]
pub struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only fingerprints are hashed here (as u64); fold anything else in for completeness.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A fingerprint as two 4-byte halves, so that a slot needs only 4-byte alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fp([u32; 2]);

impl Fp {
    fn new(fp: u64) -> Self {
        Fp([fp as u32, (fp >> 32) as u32])
    }

    fn get(self) -> u64 {
        u64::from(self.0[0]) | (u64::from(self.0[1]) << 32)
    }
}

impl Hash for Fp {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.get());
    }
}

/// One remembered token: fingerprint, expiry relative to the window's base (ms), and what the
/// entry kind adds. 12 bytes for an add token, 20 for a ledger entry.
#[derive(Debug, Clone, Copy)]
struct Slot<P> {
    fp: Fp,
    expiry: u32,
    payload: P,
}

impl<P> PartialEq for Slot<P> {
    fn eq(&self, other: &Self) -> bool {
        self.fp == other.fp
    }
}

impl<P> Eq for Slot<P> {}

impl<P> Hash for Slot<P> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fp.hash(state);
    }
}

impl<P> Borrow<Fp> for Slot<P> {
    fn borrow(&self) -> &Fp {
        &self.fp
    }
}

/// What a window remembers per token: when it expires, and a small payload.
pub trait TokenEntry: Copy + Eq + std::fmt::Debug {
    /// Stored beside the fingerprint and the expiry; 4-byte aligned at most.
    type Payload: Copy + std::fmt::Debug;
    fn expires_at(&self) -> i64;
    fn payload(&self) -> Self::Payload;
    fn from_stored(expires_at: i64, payload: Self::Payload) -> Self;
}

/// Tokens of CTR.ADD and CTR.CLEAR remember only their expiry.
impl TokenEntry for i64 {
    type Payload = ();
    fn expires_at(&self) -> i64 {
        *self
    }
    fn payload(&self) {}
    fn from_stored(expires_at: i64, _: ()) -> Self {
        expires_at
    }
}

/// A CTR.DECRFLOOR ledger entry: the first outcome of the token (the new value, or None when
/// the decrement was refused), replayed to every retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerEntry {
    pub expires_at: i64,
    pub outcome: Option<i64>,
}

impl TokenEntry for LedgerEntry {
    /// The outcome as two halves and a granted flag.
    type Payload = ([u32; 2], bool);
    fn expires_at(&self) -> i64 {
        self.expires_at
    }
    fn payload(&self) -> Self::Payload {
        let v = self.outcome.unwrap_or(0) as u64;
        ([v as u32, (v >> 32) as u32], self.outcome.is_some())
    }
    fn from_stored(expires_at: i64, (halves, granted): Self::Payload) -> Self {
        let v = (u64::from(halves[0]) | (u64::from(halves[1]) << 32)) as i64;
        LedgerEntry {
            expires_at,
            outcome: granted.then_some(v),
        }
    }
}

type SlotSet<P> = HashSet<Slot<P>, BuildHasherDefault<FingerprintHasher>>;

/// Expiries are stored as u32 ms after `base`: about 49 days of range, several times the
/// longest window (7 days) plus the furthest future event time (1 day).
const SPAN: i64 = u32::MAX as i64;

#[derive(Debug, Clone)]
pub struct TokenWindow<E: TokenEntry = i64> {
    slots: SlotSet<E::Payload>,
    /// The time expiries are relative to (not part of the state: any base that fits all
    /// entries describes the same window).
    base: i64,
    /// When the next write sweeps the expired entries (ms).
    next_sweep: i64,
}

/// Equality of what the window remembers (the base is a storage detail).
impl<E: TokenEntry> PartialEq for TokenWindow<E> {
    fn eq(&self, other: &Self) -> bool {
        self.next_sweep == other.next_sweep && self.entries() == other.entries()
    }
}

impl<E: TokenEntry> Eq for TokenWindow<E> {}

impl<E: TokenEntry> Default for TokenWindow<E> {
    fn default() -> Self {
        Self::from_empty()
    }
}

impl<E: TokenEntry> TokenWindow<E> {
    pub const fn from_empty() -> Self {
        TokenWindow {
            slots: HashSet::with_hasher(BuildHasherDefault::new()),
            base: 0,
            next_sweep: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Entries held, live or expired-but-not-yet-swept.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    fn expiry_of(&self, slot: &Slot<E::Payload>) -> i64 {
        self.base + i64::from(slot.expiry)
    }

    fn entry_of(&self, slot: &Slot<E::Payload>) -> E {
        E::from_stored(self.expiry_of(slot), slot.payload)
    }

    /// True when `fp` was applied and has not expired at `now`.
    pub fn contains_live(&self, fp: u64, now: i64) -> bool {
        self.get_live(fp, now).is_some()
    }

    /// The entry of `fp` when it has not expired at `now`.
    pub fn get_live(&self, fp: u64, now: i64) -> Option<E> {
        let slot = self.slots.get(&Fp::new(fp))?;
        (self.expiry_of(slot) > now).then(|| self.entry_of(slot))
    }

    /// Remembers `fp` (replacing an expired entry for the same token). The first token of an
    /// empty window schedules the first sweep at its own expiry.
    pub fn insert(&mut self, fp: u64, entry: E) {
        let expires_at = entry.expires_at();
        if self.slots.is_empty() {
            self.next_sweep = expires_at;
            self.base = expires_at;
        }
        if !(self.base..=self.base.saturating_add(SPAN)).contains(&expires_at) {
            self.rebase(expires_at);
        }
        // After a rebase every expiry fits, unless this one lies beyond the span of all the
        // others (a window far longer than any config allows): clamp it into range.
        let offset = expires_at.saturating_sub(self.base).clamp(0, SPAN);
        self.slots.replace(Slot {
            fp: Fp::new(fp),
            expiry: offset as u32,
            payload: entry.payload(),
        });
    }

    /// Re-expresses every expiry relative to a base that also fits `expires_at`.
    fn rebase(&mut self, expires_at: i64) {
        let entries = self.entries();
        let lowest = entries
            .iter()
            .map(|(_, e)| e.expires_at())
            .chain([expires_at])
            .min()
            .unwrap_or(expires_at);
        self.slots.clear();
        self.base = lowest;
        for (fp, e) in entries {
            let offset = e.expires_at().saturating_sub(lowest).clamp(0, SPAN);
            self.slots.insert(Slot {
                fp: Fp::new(fp),
                expiry: offset as u32,
                payload: e.payload(),
            });
        }
    }

    /// At or after the scheduled time, drops every entry expired at `now` and schedules the next
    /// sweep a sixteenth of the remaining window later. Returns how many were dropped.
    pub fn sweep(&mut self, now: i64) -> usize {
        if self.slots.is_empty() || now < self.next_sweep {
            return 0;
        }
        let before = self.slots.len();
        let base = self.base;
        self.slots
            .retain(|slot| base + i64::from(slot.expiry) > now);
        let latest = self
            .slots
            .iter()
            .map(|slot| base + i64::from(slot.expiry))
            .max();
        self.next_sweep = match latest {
            Some(latest) => {
                let step = (latest.saturating_sub(now) / SWEEPS_PER_WINDOW).max(1);
                now.saturating_add(step)
            }
            None => 0,
        };
        if self.slots.capacity() > 64 && self.slots.len() < self.slots.capacity() / 4 {
            self.slots.shrink_to_fit();
        }
        before - self.slots.len()
    }

    /// The latest expiry held (None when empty): once it has passed, a sweep drops every
    /// entry. O(entries), without allocating.
    pub fn latest_expiry(&self) -> Option<i64> {
        let latest = self.slots.iter().map(|slot| slot.expiry).max()?;
        Some(self.base.saturating_add(i64::from(latest)))
    }

    /// Every held entry in fingerprint order (the canonical order of the encoding).
    pub fn entries(&self) -> Vec<(u64, E)> {
        let mut all: Vec<(u64, E)> = self
            .slots
            .iter()
            .map(|slot| (slot.fp.get(), self.entry_of(slot)))
            .collect();
        all.sort_unstable_by_key(|(fp, _)| *fp);
        all
    }

    /// When the next sweep runs (part of the encoded state).
    pub fn next_sweep(&self) -> i64 {
        self.next_sweep
    }

    /// Rebuilds a window from decoded parts.
    pub fn from_parts(entries: impl IntoIterator<Item = (u64, E)>, next_sweep: i64) -> Self {
        let mut window = Self::from_empty();
        for (fp, e) in entries {
            window.insert(fp, e);
        }
        window.next_sweep = next_sweep;
        window
    }

    /// Heap bytes: hashbrown's buckets (a slot and a control byte each).
    pub fn heap_bytes(&self) -> usize {
        if self.slots.capacity() == 0 {
            return 0;
        }
        // hashbrown rounds the bucket count up to a power of two above capacity * 8 / 7.
        let buckets = (self.slots.capacity() * 8 / 7).next_power_of_two();
        buckets * (std::mem::size_of::<Slot<E::Payload>>() + 1)
    }

    /// What the table's allocation really costs (see [`crate::memsize`]).
    pub fn allocated_bytes(&self) -> usize {
        crate::memsize::hash_table_bytes::<Slot<E::Payload>>(self.slots.capacity())
    }
}

/// Why a token cannot be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenTimeError {
    /// Older than the window: its duplicate could no longer be detected.
    TooOld,
    /// Further in the future than allowed.
    TooFarInFuture,
}

/// When a token with this event time stops being remembered, or why it is refused.
pub fn token_expiry(
    event_time: i64,
    now: i64,
    window_ms: i64,
    max_future_ms: i64,
) -> Result<i64, TokenTimeError> {
    if event_time < now.saturating_sub(window_ms) {
        return Err(TokenTimeError::TooOld);
    }
    if event_time > now.saturating_add(max_future_ms) {
        return Err(TokenTimeError::TooFarInFuture);
    }
    Ok(event_time.saturating_add(window_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_live_until_its_expiry() {
        let mut w: TokenWindow = TokenWindow::default();
        w.insert(7, 1_000);
        assert!(w.contains_live(7, 999));
        assert!(!w.contains_live(7, 1_000));
        assert!(!w.contains_live(8, 0));
    }

    #[test]
    fn expiry_window_and_refusals() {
        assert_eq!(token_expiry(100, 100, 50, 10), Ok(150));
        assert_eq!(
            token_expiry(50, 100, 50, 10),
            Ok(100),
            "exactly window old is fine"
        );
        assert_eq!(token_expiry(49, 100, 50, 10), Err(TokenTimeError::TooOld));
        assert_eq!(token_expiry(110, 100, 50, 10), Ok(160));
        assert_eq!(
            token_expiry(111, 100, 50, 10),
            Err(TokenTimeError::TooFarInFuture)
        );
        assert_eq!(token_expiry(i64::MAX, i64::MAX, 50, 10), Ok(i64::MAX));
        assert_eq!(
            token_expiry(i64::MIN, 0, 50, 10),
            Err(TokenTimeError::TooOld)
        );
    }

    #[test]
    fn sweeps_run_on_schedule_and_drop_every_expired_token() {
        let mut w: TokenWindow = TokenWindow::default();
        for fp in 0..100u64 {
            w.insert(fp * 1000, if fp % 2 == 0 { 10 } else { 1_000 });
        }
        assert_eq!(w.next_sweep(), 10, "the first token's expiry");
        assert_eq!(w.sweep(5), 0, "not due yet");
        assert_eq!(w.sweep(50), 50);
        assert_eq!(w.len(), 50);
        assert!(w.entries().iter().all(|(_, e)| *e == 1_000));
        // Next sweep a sixteenth of the remaining window later: (1000 - 50) / 16 = 59.
        assert_eq!(w.next_sweep(), 109);
        assert_eq!(w.sweep(100), 0);
    }

    #[test]
    fn sweeping_is_deterministic_from_the_encoded_state() {
        let mut a: TokenWindow = TokenWindow::default();
        for (i, fp) in [5u64, 9, 1, 77, 3, 40, 12].into_iter().enumerate() {
            a.insert(fp, fp as i64 * 3);
            a.sweep(i as i64 * 4);
        }
        let mut b = TokenWindow::from_parts(a.entries(), a.next_sweep());
        assert_eq!(a, b);
        for now in [10, 20, 80, 300] {
            a.sweep(now);
            b.sweep(now);
            assert_eq!(a, b);
            assert_eq!(a.entries(), b.entries());
        }
    }

    #[test]
    fn an_emptied_window_forgets_its_schedule() {
        let mut w: TokenWindow = TokenWindow::default();
        w.insert(u64::MAX, 1);
        assert_eq!(w.sweep(5), 1);
        assert!(w.is_empty());
        assert_eq!(w.next_sweep(), 0);
        assert!(w.heap_bytes() < 1024);
    }

    #[test]
    fn ledger_entries_keep_their_outcome() {
        let mut w: TokenWindow<LedgerEntry> = TokenWindow::default();
        w.insert(
            1,
            LedgerEntry {
                expires_at: 10,
                outcome: None,
            },
        );
        w.insert(
            2,
            LedgerEntry {
                expires_at: 10,
                outcome: Some(-4),
            },
        );
        assert_eq!(w.get_live(1, 5).map(|e| e.outcome), Some(None));
        assert_eq!(w.get_live(2, 5).map(|e| e.outcome), Some(Some(-4)));
        assert_eq!(w.get_live(2, 10), None);
    }
}
