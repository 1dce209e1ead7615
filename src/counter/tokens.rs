//! The dedup window of a counter: which idempotency tokens it has applied, each remembered until
//! its event time plus the window.
//!
//! Tokens are stored as 64-bit fingerprints (see `siphash`) in a B-tree ordered by fingerprint,
//! with their expiry time: about 24-27 bytes per token. Expiry is deterministic and cheap: each
//! write examines the next few entries after a cursor (in fingerprint order) and drops the expired
//! ones, using the command's own time (the master's, carried to replicas in the replicated
//! effect). So master, replicas and an AOF reload hold exactly the same entries, and no write
//! ever scans the whole window. An entry past its expiry that is still held is treated as absent.

use std::collections::BTreeMap;

/// Entries examined for expiry per write. Each write adds at most one token, so sweeping more
/// than one keeps the number of expired-but-held entries bounded (here at most a third of the
/// live ones, in steady state).
pub const SWEEP_PER_WRITE: usize = 4;

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
    entries: BTreeMap<u64, E>,
    /// Where the next expiry sweep starts (a fingerprint; wraps around).
    cursor: u64,
}

impl<E: TokenEntry> Default for TokenWindow<E> {
    fn default() -> Self {
        Self::from_empty()
    }
}

impl<E: TokenEntry> TokenWindow<E> {
    pub const fn from_empty() -> Self {
        TokenWindow {
            entries: BTreeMap::new(),
            cursor: 0,
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

    /// Remembers `fp` (replacing an expired entry for the same token).
    pub fn insert(&mut self, fp: u64, entry: E) {
        self.entries.insert(fp, entry);
    }

    /// Examines up to `SWEEP_PER_WRITE` entries from the cursor and drops those expired at
    /// `now`. Returns how many were dropped.
    pub fn sweep(&mut self, now: i64) -> usize {
        if self.entries.is_empty() {
            self.cursor = 0;
            return 0;
        }
        let mut examined = [(0u64, 0i64); SWEEP_PER_WRITE];
        let mut count = 0;
        let wrapped = self
            .entries
            .range(self.cursor..)
            .chain(self.entries.range(..self.cursor));
        for (slot, (&fp, entry)) in examined.iter_mut().zip(wrapped) {
            *slot = (fp, entry.expires_at());
            count += 1;
        }
        if count == 0 {
            self.cursor = 0;
            return 0;
        }
        self.cursor = examined[count - 1].0.wrapping_add(1);
        let mut dropped = 0;
        for &(fp, expires) in &examined[..count] {
            if expires <= now {
                self.entries.remove(&fp);
                dropped += 1;
            }
        }
        dropped
    }

    /// Every held entry in fingerprint order (the canonical order of the encoding).
    pub fn entries(&self) -> impl Iterator<Item = (u64, E)> + '_ {
        self.entries.iter().map(|(&fp, &e)| (fp, e))
    }

    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Rebuilds a window from decoded parts (entries strictly increasing by fingerprint).
    pub fn from_parts(entries: impl IntoIterator<Item = (u64, E)>, cursor: u64) -> Self {
        TokenWindow {
            entries: entries.into_iter().collect(),
            cursor,
        }
    }

    /// Approximate heap bytes: B-tree nodes hold up to 11 pairs and run about two-thirds full
    /// (27 bytes per add token measured, 8-byte fingerprint + 8-byte expiry).
    pub fn heap_bytes(&self) -> usize {
        self.entries.len() * (8 + std::mem::size_of::<E>()) * 27 / 16
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
    fn sweeping_is_bounded_and_eventually_drops_every_expired_token() {
        let mut w: TokenWindow = TokenWindow::default();
        for fp in 0..100u64 {
            w.insert(fp * 1000, if fp % 2 == 0 { 10 } else { 1_000 });
        }
        assert!(w.sweep(50) <= SWEEP_PER_WRITE);
        for _ in 0..100 {
            w.sweep(50);
        }
        assert_eq!(w.len(), 50);
        assert!(w.entries().all(|(_, e)| e == 1_000));
    }

    #[test]
    fn sweeping_is_deterministic_from_the_encoded_state() {
        let mut a: TokenWindow = TokenWindow::default();
        for fp in [5u64, 9, 1, 77, 3, 40, 12] {
            a.insert(fp, fp as i64);
            a.sweep(4);
        }
        let mut b = TokenWindow::from_parts(a.entries().collect::<Vec<_>>(), a.cursor());
        for now in [10, 20, 80] {
            a.sweep(now);
            b.sweep(now);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn empty_window_sweep_resets_cursor() {
        let mut w: TokenWindow = TokenWindow::default();
        w.insert(u64::MAX, 1);
        w.sweep(5);
        assert!(w.is_empty());
        assert_eq!(w.sweep(5), 0);
        assert_eq!(w.cursor(), 0);
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
