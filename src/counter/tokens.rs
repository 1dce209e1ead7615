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

/// Fingerprints are SipHash outputs, but a decoded payload (RESTORE, CTR.SETSTATE) chooses
/// them freely: fingerprints that share their low bits would all probe one group of the table,
/// making a load quadratic. So they are mixed with a per-process random seed (a folded
/// multiply) before use. The table's layout never matters to the state (the encoding sorts).
#[derive(Default, Clone, Copy)]
pub struct FingerprintHasher(u64);

fn table_seed() -> u64 {
    use std::sync::OnceLock;
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        use std::hash::BuildHasher;
        std::collections::hash_map::RandomState::new().hash_one(0x6374_725f_7365_6564u64)
    })
}

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        // A 64 x 64-bit product: it always fits in 128 bits.
        let m = u128::from(self.0 ^ table_seed()) * u128::from(0x9e37_79b9_7f4a_7c15u64);
        (m as u64) ^ ((m >> 64) as u64)
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

/// A write named by a token, as far as a retry must match it: its command and its amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    Add(i64),
    Decr(i64),
    Clear,
    /// A clear of a spread counter's total (`CTR.CLEAR` of a spread home): a clear whose retry
    /// replays its first reply, the total before, since the home's own value says nothing of
    /// it. A retry matches it as any clear (a retry sent as `Clear` finds it, and the reverse).
    ClearTotal,
    /// `CTR.INCREX` with a print of its arguments (increment, bounds, SATURATE): its retry
    /// replays its first reply (the new value here, the applied increment in the counter's
    /// records).
    Increx(i64),
}

/// What a remembered write was, in 31 bits: its command (2 bits) and a 29-bit fingerprint of
/// its amount (0: any amount). A token reused for a write that does not match is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intent(u32);

const INTENT_KIND_SHIFT: u32 = 29;
const INTENT_AMOUNT_MASK: u32 = (1 << INTENT_KIND_SHIFT) - 1;
const KIND_DECR: u32 = 0;
const KIND_ADD: u32 = 1;
const KIND_CLEAR: u32 = 2;
/// An add or clear token from an encoding that predates intents: matches any add or clear.
const KIND_ADD_OR_CLEAR: u32 = 3;
/// A clear's amount print is 1; a clear of a spread counter's total has print 2 (its retry
/// replays the recorded reply). A module from before it matches the entry to no clear, so
/// there a retry is refused as a reused token: nothing is cleared twice.
const CLEAR_TOTAL: u32 = (KIND_CLEAR << INTENT_KIND_SHIFT) | 2;
/// Later writes and records take clear-kind prints of 2^24 and up, as `sub << 24 | print`
/// (sub 1..31): a print of 24 bits. They match only themselves (a module from before them
/// would take one for a clear's entry: nothing a current module writes under a clear).
const EXTENDED_SHIFT: u32 = 24;
const EXTENDED_PRINT_MASK: u32 = (1 << EXTENDED_SHIFT) - 1;
const fn extended(sub: u32) -> u32 {
    (KIND_CLEAR << INTENT_KIND_SHIFT) | (sub << EXTENDED_SHIFT)
}
const SUB_INCREX: u32 = 1;

impl Intent {
    /// The intent of a write.
    pub fn of(write: WriteKind) -> Self {
        let (kind, amount) = match write {
            WriteKind::Decr(a) => (KIND_DECR, Some(a)),
            WriteKind::Add(d) => (KIND_ADD, Some(d)),
            WriteKind::Clear => (KIND_CLEAR, None),
            WriteKind::ClearTotal => return Intent(CLEAR_TOTAL),
            WriteKind::Increx(print) => {
                let h = super::siphash::token_fingerprint(&print.to_le_bytes());
                let print = (h & u64::from(EXTENDED_PRINT_MASK)) as u32;
                return Intent(extended(SUB_INCREX) | print);
            }
        };
        // Never 0 (which means "any amount").
        let print = amount.map_or(1, |a| {
            let h = super::siphash::token_fingerprint(&a.to_le_bytes());
            (h % u64::from(INTENT_AMOUNT_MASK)) as u32 + 1
        });
        Intent((kind << INTENT_KIND_SHIFT) | print)
    }

    /// A ledger entry decoded from an encoding without intents: a decrement of any amount.
    pub const LEGACY_DECREMENT: Intent = Intent(KIND_DECR << INTENT_KIND_SHIFT);
    /// An add token decoded from an encoding without intents: any add or clear.
    pub const LEGACY_ADD_OR_CLEAR: Intent = Intent(KIND_ADD_OR_CLEAR << INTENT_KIND_SHIFT);
    /// A record (`Counter::records`): the increment a tokened `CTR.INCREX` applied.
    pub const APPLIED: Intent = Intent(extended(2));
    /// A record: the units a tokened grant (a decrement, a negative add) took, refundable.
    pub const GRANT: Intent = Intent(extended(3));
    /// A record: a grant given back by `CTR.REFUND`, with the units returned.
    pub const REFUNDED: Intent = Intent(extended(4));

    /// True for the writes and records that match only themselves.
    fn is_extended(self) -> bool {
        self.0 >> INTENT_KIND_SHIFT == KIND_CLEAR
            && self.0 & INTENT_AMOUNT_MASK >= 1 << EXTENDED_SHIFT
    }

    /// True for a `CTR.INCREX`'s intent.
    fn is_increx(self) -> bool {
        self.is_extended() && (self.0 & INTENT_AMOUNT_MASK) >> EXTENDED_SHIFT == SUB_INCREX
    }

    /// True when `write` is the write this intent remembers.
    pub fn matches(self, write: WriteKind) -> bool {
        let kind = self.0 >> INTENT_KIND_SHIFT;
        let wanted = Intent::of(write);
        if self.is_extended() || wanted.is_extended() {
            return self == wanted;
        }
        let wanted_kind = wanted.0 >> INTENT_KIND_SHIFT;
        if kind == KIND_ADD_OR_CLEAR {
            return wanted_kind == KIND_ADD || wanted_kind == KIND_CLEAR;
        }
        // Clears carry no amount: any clear matches any clear.
        kind == wanted_kind
            && (kind == KIND_CLEAR || self.0 & INTENT_AMOUNT_MASK == 0 || self == wanted)
    }

    /// True for a decrement's intent (a retry replays its recorded outcome).
    pub fn is_decrement(self) -> bool {
        self.0 >> INTENT_KIND_SHIFT == KIND_DECR
    }

    /// True when a retry replays the recorded outcome: a decrement's, or a clear of a spread
    /// counter's total (other writes reply with the current value).
    pub fn replays_outcome(self) -> bool {
        self.is_decrement() || self.0 == CLEAR_TOTAL || self.is_increx()
    }

    /// The 31 bits as stored and encoded.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// An intent from its 31 stored bits (None when wider).
    pub fn from_bits(bits: u32) -> Option<Self> {
        (bits < 1 << 31).then_some(Intent(bits))
    }
}

/// A ledger entry: a tokened write other than the common `CTR.ADD key 1 TOKEN t` (those sit in
/// the smaller add-token window), with its first outcome (the new value, or None when it was
/// refused) and its intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerEntry {
    pub expires_at: i64,
    pub outcome: Option<i64>,
    pub intent: Intent,
}

impl TokenEntry for LedgerEntry {
    /// The outcome as two halves, and the intent with the granted flag in bit 31 (12 bytes: a
    /// 24-byte slot, like the ledger before intents).
    type Payload = ([u32; 2], u32);
    fn expires_at(&self) -> i64 {
        self.expires_at
    }
    fn payload(&self) -> Self::Payload {
        let v = self.outcome.unwrap_or(0) as u64;
        let granted = u32::from(self.outcome.is_some()) << 31;
        ([v as u32, (v >> 32) as u32], granted | self.intent.0)
    }
    fn from_stored(expires_at: i64, (halves, meta): Self::Payload) -> Self {
        let v = (u64::from(halves[0]) | (u64::from(halves[1]) << 32)) as i64;
        LedgerEntry {
            expires_at,
            outcome: (meta >> 31 == 1).then_some(v),
            intent: Intent(meta & !(1 << 31)),
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
    /// The latest expiry held (derived from the entries, so not part of the state).
    latest: i64,
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
            latest: i64::MIN,
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
        self.put(fp, entry);
    }

    /// Stores an entry relative to the current base. After a rebase every expiry fits, unless
    /// this one lies beyond the span of all the others (a window far longer than any config
    /// allows, or a forged payload): it is clamped into range.
    fn put(&mut self, fp: u64, entry: E) {
        let offset = entry.expires_at().saturating_sub(self.base).clamp(0, SPAN);
        self.latest = self.latest.max(self.base + offset);
        self.slots.replace(Slot {
            fp: Fp::new(fp),
            expiry: offset as u32,
            payload: entry.payload(),
        });
    }

    /// Re-expresses every expiry relative to a base that also fits `expires_at`. The new base
    /// leaves half the unused span below the lowest expiry, so writes whose expiries keep
    /// falling (event times stepping back) rebase a logarithmic number of times, not per write.
    fn rebase(&mut self, expires_at: i64) {
        let entries = self.entries();
        let times = entries
            .iter()
            .map(|(_, e)| e.expires_at())
            .chain([expires_at]);
        let (lowest, highest) = times.fold((expires_at, expires_at), |(lo, hi), t| {
            (lo.min(t), hi.max(t))
        });
        let slack = (SPAN - highest.saturating_sub(lowest).min(SPAN)) / 2;
        self.slots.clear();
        self.base = lowest.saturating_sub(slack);
        for (fp, e) in entries {
            self.put(fp, e);
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
        self.latest = latest.unwrap_or(i64::MIN);
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

    /// How many held entries satisfy `pred`.
    pub fn count_where(&self, pred: impl Fn(&E) -> bool) -> usize {
        self.slots
            .iter()
            .filter(|s| pred(&self.entry_of(s)))
            .count()
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

    /// The latest expiry of the entries held (None when empty).
    pub fn latest_expiry(&self) -> Option<i64> {
        (!self.slots.is_empty()).then_some(self.latest)
    }

    /// When the next sweep runs (part of the encoded state).
    pub fn next_sweep(&self) -> i64 {
        self.next_sweep
    }

    /// Rebuilds a window from decoded parts, in linear time whatever their order: the base is
    /// the lowest expiry, found first, so no insert has to rebase the table.
    pub fn from_parts(entries: Vec<(u64, E)>, next_sweep: i64) -> Self {
        let mut window = Self::from_empty();
        if let Some(lowest) = entries.iter().map(|(_, e)| e.expires_at()).min() {
            window.base = lowest;
            window.slots.reserve(entries.len());
        }
        for (fp, e) in entries {
            window.put(fp, e);
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
                intent: Intent::of(WriteKind::Decr(3)),
            },
        );
        w.insert(
            2,
            LedgerEntry {
                expires_at: 10,
                outcome: Some(-4),
                intent: Intent::LEGACY_DECREMENT,
            },
        );
        assert_eq!(w.get_live(1, 5).map(|e| e.outcome), Some(None));
        assert_eq!(w.get_live(2, 5).map(|e| e.outcome), Some(Some(-4)));
        assert_eq!(w.get_live(2, 10), None);
        let first = w.get_live(1, 5).unwrap().intent;
        assert!(first.matches(WriteKind::Decr(3)) && !first.matches(WriteKind::Decr(4)));
        let legacy = w.get_live(2, 5).unwrap().intent;
        assert!(legacy.matches(WriteKind::Decr(9)) && !legacy.matches(WriteKind::Add(9)));
        assert!(Intent::LEGACY_ADD_OR_CLEAR.matches(WriteKind::Clear));
        assert!(Intent::LEGACY_ADD_OR_CLEAR.matches(WriteKind::ClearTotal));
    }

    #[test]
    fn a_clear_of_a_total_is_a_clear_that_replays_its_reply() {
        let total = Intent::of(WriteKind::ClearTotal);
        let clear = Intent::of(WriteKind::Clear);
        assert_ne!(total, clear);
        for kind in [WriteKind::Clear, WriteKind::ClearTotal] {
            assert!(total.matches(kind) && clear.matches(kind));
        }
        for other in [WriteKind::Add(1), WriteKind::Decr(1)] {
            assert!(!total.matches(other));
        }
        assert!(total.replays_outcome() && !clear.replays_outcome());
        assert_eq!(Intent::from_bits(total.bits()), Some(total));
    }

    /// Loading is linear whatever the order of the entries: expiries falling while
    /// fingerprints rise (which once rebuilt the table per entry), and fingerprints that share
    /// their low bits (which would all probe one group of an unmixed table).
    #[test]
    fn loading_is_linear_in_adversarial_orders() {
        let n = 200_000u64;
        type Order = (&'static str, fn(u64) -> (u64, i64));
        let orders: [Order; 3] = [
            ("falling expiries", |i| (i, 10_000_000 - i as i64)),
            ("shared low bits", |i| (i << 32, 5_000 + i as i64)),
            ("both", |i| ((i << 40) | 7, 9_000_000 - i as i64 * 3)),
        ];
        for (name, entry) in orders {
            let entries: Vec<(u64, i64)> = (0..n).map(entry).collect();
            let start = std::time::Instant::now();
            let w: TokenWindow = TokenWindow::from_parts(entries, 0);
            assert_eq!(w.len(), n as usize);
            // Linear: a few tens of ms; quadratic would take minutes.
            assert!(
                start.elapsed().as_secs() < 5,
                "{name}: {:?}",
                start.elapsed()
            );
        }
    }

    /// Hashing never overflows (the fuzz build checks arithmetic), whatever the fingerprint.
    #[test]
    fn hashing_any_fingerprint_is_defined() {
        use std::hash::Hasher;
        for fp in [0, 1, u64::MAX, u64::MAX / 3, 1 << 63] {
            let mut h = FingerprintHasher::default();
            h.write_u64(fp);
            let _ = h.finish();
        }
    }

    #[test]
    fn increx_intents_and_records_match_only_themselves() {
        let a = Intent::of(WriteKind::Increx(7));
        assert!(a.matches(WriteKind::Increx(7)) && a.replays_outcome());
        assert!(!a.matches(WriteKind::Increx(8)));
        for other in [
            WriteKind::Clear,
            WriteKind::ClearTotal,
            WriteKind::Add(7),
            WriteKind::Decr(7),
        ] {
            assert!(!a.matches(other), "{other:?}");
            assert!(
                !Intent::of(other).matches(WriteKind::Increx(7)),
                "{other:?}"
            );
        }
        assert!(!Intent::LEGACY_ADD_OR_CLEAR.matches(WriteKind::Increx(7)));
        for record in [Intent::APPLIED, Intent::GRANT, Intent::REFUNDED] {
            assert!(!record.matches(WriteKind::Clear) && !record.replays_outcome());
            assert_eq!(Intent::from_bits(record.bits()), Some(record));
        }
        assert_ne!(Intent::GRANT, Intent::REFUNDED);
    }

    /// The per-token memory target holds: an add token is 12 bytes, a ledger entry (with its
    /// intent) 24, as before intents.
    #[test]
    fn slots_stay_small() {
        assert_eq!(std::mem::size_of::<Slot<()>>(), 12);
        assert_eq!(
            std::mem::size_of::<Slot<<LedgerEntry as TokenEntry>::Payload>>(),
            24
        );
    }

    #[test]
    fn falling_expiries_rebase_rarely() {
        let mut w: TokenWindow = TokenWindow::default();
        let start = std::time::Instant::now();
        for i in 0..100_000u64 {
            w.insert(i, 1_000_000_000 - i as i64 * 7);
        }
        assert_eq!(w.len(), 100_000);
        assert!(start.elapsed().as_secs() < 5, "{:?}", start.elapsed());
        assert!(w.contains_live(99_999, 1_000_000_000 - 99_999 * 7 - 1));
    }
}
