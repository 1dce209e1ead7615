//! The dedup window of a counter: which idempotency tokens it has applied, each remembered until
//! its event time plus the window.
//!
//! Tokens are stored as 64-bit fingerprints (see `siphash`) in a hash table keyed by the
//! fingerprint itself (already uniformly random), with their expiry time: one probe per lookup,
//! about 26 bytes per token. Expiry is deterministic and cheap: a write whose time has reached
//! the window's next sweep time drops every expired entry, and schedules the next sweep a
//! sixteenth of the remaining window later. Between sweeps, an entry past its expiry is treated
//! as absent. The sweep time is part of the state and the time is the operation's own (the
//! master's, carried to replicas in the replicated effect), so master, replicas and an AOF reload
//! hold exactly the same entries; the table's layout never matters (the encoding sorts by
//! fingerprint). Amortized, each write visits about 16 entries; one sweep visits them all, at
//! most once per sixteenth of the window.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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
        // Only u64 keys are hashed here; fold anything else in for completeness.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type FingerprintMap<E> = HashMap<u64, E, BuildHasherDefault<FingerprintHasher>>;

/// What a window remembers per token: at least when it expires.
pub trait TokenEntry: Copy + Eq + std::fmt::Debug {
    fn expires_at(&self) -> i64;
}

/// Tokens of CTR.ADD and CTR.CLEAR remember only their expiry.
impl TokenEntry for i64 {
    fn expires_at(&self) -> i64 {
        *self
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
    fn expires_at(&self) -> i64 {
        self.expires_at
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenWindow<E: TokenEntry = i64> {
    /// fingerprint -> entry
    entries: FingerprintMap<E>,
    /// When the next write sweeps the expired entries (ms).
    next_sweep: i64,
}

impl<E: TokenEntry> Default for TokenWindow<E> {
    fn default() -> Self {
        Self::from_empty()
    }
}

impl<E: TokenEntry> TokenWindow<E> {
    pub const fn from_empty() -> Self {
        TokenWindow {
            entries: HashMap::with_hasher(BuildHasherDefault::new()),
            next_sweep: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries held, live or expired-but-not-yet-swept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when `fp` was applied and has not expired at `now`.
    pub fn contains_live(&self, fp: u64, now: i64) -> bool {
        self.get_live(fp, now).is_some()
    }

    /// The entry of `fp` when it has not expired at `now`.
    pub fn get_live(&self, fp: u64, now: i64) -> Option<E> {
        self.entries
            .get(&fp)
            .copied()
            .filter(|e| e.expires_at() > now)
    }

    /// Remembers `fp` (replacing an expired entry for the same token). The first token of an
    /// empty window schedules the first sweep at its own expiry.
    pub fn insert(&mut self, fp: u64, entry: E) {
        if self.entries.is_empty() {
            self.next_sweep = entry.expires_at();
        }
        self.entries.insert(fp, entry);
    }

    /// At or after the scheduled time, drops every entry expired at `now` and schedules the next
    /// sweep a sixteenth of the remaining window later. Returns how many were dropped.
    pub fn sweep(&mut self, now: i64) -> usize {
        if self.entries.is_empty() || now < self.next_sweep {
            return 0;
        }
        let before = self.entries.len();
        self.entries.retain(|_, e| e.expires_at() > now);
        let latest = self.entries.values().map(|e| e.expires_at()).max();
        self.next_sweep = match latest {
            Some(latest) => {
                let step = (latest.saturating_sub(now) / SWEEPS_PER_WINDOW).max(1);
                now.saturating_add(step)
            }
            None => 0,
        };
        if self.entries.capacity() > 64 && self.entries.len() < self.entries.capacity() / 4 {
            self.entries.shrink_to_fit();
        }
        before - self.entries.len()
    }

    /// Every held entry in fingerprint order (the canonical order of the encoding).
    pub fn entries(&self) -> Vec<(u64, E)> {
        let mut all: Vec<(u64, E)> = self.entries.iter().map(|(&fp, &e)| (fp, e)).collect();
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
        window.entries.extend(entries);
        window.next_sweep = next_sweep;
        window
    }

    /// Heap bytes: one slot per capacity unit (fingerprint + entry) plus a control byte.
    pub fn heap_bytes(&self) -> usize {
        if self.entries.capacity() == 0 {
            return 0;
        }
        // hashbrown rounds the bucket count up to a power of two above capacity * 8 / 7.
        let buckets = (self.entries.capacity() * 8 / 7).next_power_of_two();
        buckets * (std::mem::size_of::<(u64, E)>() + 1)
    }

    /// What the table's allocation really costs (see [`crate::memsize`]).
    pub fn allocated_bytes(&self) -> usize {
        crate::memsize::hash_table_bytes::<(u64, E)>(self.entries.capacity())
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
