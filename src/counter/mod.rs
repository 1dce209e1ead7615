//! The CTR counter: pure Rust, no Redis API. The Redis glue in `crate::commands` and
//! `crate::persist` drives it; everything here is unit-tested without a server.
//!
//! A write is described by an operation ([`AddOp`], [`DecrOp`], [`ClearOp`]) that carries every
//! decision (the time, the shard, the shard count, the token's fingerprint and expiry). The
//! master makes the decisions, applies the operation, and replicates the same operation, so
//! replicas and the AOF reach the same state bit for bit.

pub mod audit;
pub mod bounds;
pub mod budget_kind;
mod cell;
pub mod collect;
mod error;
pub mod floor;
pub mod folded;
pub mod headroom;
pub mod history;
pub mod listing;
mod ops;
pub mod rate;
pub mod rebalance;
#[cfg(test)]
mod simulator;
pub mod siphash;
pub mod spread;
pub mod step;
pub mod throttle;
pub mod tokens;
pub mod transfer;
pub mod window;

pub use bounds::{IncrexOp, RefundOp, RefundPlan};
pub use cell::{CounterCell, CounterRef};
pub use error::CounterError;
pub use floor::{Ceiling, Floor};
pub use history::{History, Repair};
pub use ops::{AddOp, ClearOp, ClearTotalOp, DecrOp, ReconcileOp, StartOp, TokenStamp};
pub use rate::{HotKeys, RateTracker, ShardAdvice};
pub use spread::Spread;
pub use throttle::{Throttle, ThrottleOp, ThrottleRetry};
pub use window::{Window, WindowOp};

/// Why a window and a history, or a spread, do not go together on one counter.
pub const WINDOW_ALONE: &str =
    "ERR a windowed counter keeps no reconcile history and is not spread";
pub use tokens::{token_expiry, Intent, LedgerEntry, TokenTimeError, TokenWindow, WriteKind};
pub use transfer::{Outgoing, TransferError, Transfers};

/// What a tokened write finds among the remembered tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenUse {
    New,
    /// A retry of the same write: it changes nothing and replies this.
    Retry(Option<i64>),
    /// The token named another write on this key.
    Conflict,
}

/// The write whose tokens sit in the small add-token window.
const UNIT_ADD: WriteKind = WriteKind::Add(1);

/// Largest number of sub-shards a counter may hold (also the decoder's bound).
pub const MAX_SHARDS: usize = 1024;

/// A counter. `value` is always the exact sum of `shards`; a counter with a single shard keeps
/// `shards` empty so that it costs no heap allocation beyond itself. What only some counters
/// have (a floor, tokens, a ledger, buckets) lives in one optional box, so that a hot or large
/// counter without them stays small.
#[derive(Debug, Clone, Default)]
pub struct Counter {
    value: i64,
    /// Per-shard values when the counter has more than one shard; empty otherwise.
    shards: Vec<i64>,
    /// None when the counter has no floor, tokens, ledger or buckets.
    ext: Option<Box<Extras>>,
    /// Local and advisory: not persisted, not replicated, not part of the digest. Also counts
    /// the retries ignored since this copy of the counter was loaded.
    rate: RateTracker,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Extras {
    /// The floor and the per-shard budgets of its headroom, when a floor is set.
    floor: Option<Floor>,
    /// The ceiling and the per-shard budgets of its headroom, when a ceiling is set (boxed:
    /// few counters have one).
    ceiling: Option<Box<Ceiling>>,
    /// The tokened writes it remembers, when it remembers any. Boxed, as every part below:
    /// every counter with a floor, a window or a limiter pays for this struct (88 bytes, a
    /// 96-byte allocation, with the parts boxed; it was 272, a 320-byte one, with the three
    /// token windows and the ceiling inline).
    remembered: Option<Box<Remembered>>,
    /// Time buckets and reconcile state, once the counter has been reconciled.
    history: Option<Box<History>>,
    /// The other holders of a spread counter whose home this is.
    spread: Option<Box<Spread>>,
    /// Transfers sent, applied, and folds under way (see [`transfer`]).
    transfers: Option<Box<Transfers>>,
    /// A `CTR.THROTTLE` limiter's state (see [`throttle`]).
    throttle: Option<Box<Throttle>>,
    /// A sliding window (`CTR.WINDOW`): the value is the sum of its live buckets.
    window: Option<Box<Window>>,
    /// A counter renamed onto a holder's name by a client (`RENAME`): not that holder, never
    /// counted in its spread, written by no command until it is renamed away (a stray).
    stray: bool,
}

/// The tokened writes a counter remembers (never held empty: see [`Counter::trim_ext`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Remembered {
    /// Tokens of `CTR.ADD key 1 TOKEN t`, the common form (12 bytes each).
    tokens: TokenWindow,
    /// Every other tokened write (decrements, other adds, refused adds, clears) with its first
    /// outcome and its intent (24 bytes each).
    ledger: TokenWindow<LedgerEntry>,
    /// What some tokened writes keep beside their ledger entry, under the same fingerprint and
    /// expiry: the increment a `CTR.INCREX` applied ([`Intent::APPLIED`]), the units a grant
    /// took ([`Intent::GRANT`], refundable once) or gave back ([`Intent::REFUNDED`]). Not
    /// tokens of their own: the tokens gauge and `CTR.INFO` do not count them.
    records: TokenWindow<LedgerEntry>,
}

impl Remembered {
    fn is_empty(&self) -> bool {
        self.tokens.is_empty() && self.ledger.is_empty() && self.records.is_empty()
    }

    /// Drops the entries expired at `now` from the three windows; returns how many tokens and
    /// ledger entries went (records go with their ledger entries, uncounted).
    fn sweep(&mut self, now: i64) -> usize {
        self.records.sweep(now);
        self.tokens.sweep(now) + self.ledger.sweep(now)
    }
}

impl Extras {
    fn is_empty(&self) -> bool {
        self.throttle.is_none() && self.holds_nothing_but_a_limiter()
    }

    /// True when nothing is held but a limiter's state (if even that).
    fn holds_nothing_but_a_limiter(&self) -> bool {
        self.floor.is_none()
            && self.ceiling.is_none()
            && self.remembered.as_ref().is_none_or(|r| r.is_empty())
            && self.history.is_none()
            && self.spread.is_none()
            && self.transfers.is_none()
            && self.window.is_none()
            && !self.stray
    }
}

static NO_TOKENS: TokenWindow = TokenWindow::from_empty();
static NO_LEDGER: TokenWindow<LedgerEntry> = TokenWindow::from_empty();

/// Everything a decoded counter is made of (the value is the sum of the shards).
#[derive(Debug, Default)]
pub struct CounterParts {
    pub shards: Vec<i64>,
    pub floor: Option<Floor>,
    pub ceiling: Option<Ceiling>,
    pub tokens: TokenWindow,
    pub ledger: TokenWindow<LedgerEntry>,
    pub records: TokenWindow<LedgerEntry>,
    pub history: Option<History>,
    pub spread: Option<Spread>,
    pub transfers: Option<Transfers>,
    pub throttle: Option<Throttle>,
    pub window: Option<Window>,
    /// See [`Counter::is_stray`].
    pub stray: bool,
}

/// Equality of the persistent state (what the encoding and the digest cover).
impl PartialEq for Counter {
    fn eq(&self, other: &Self) -> bool {
        let empty = Extras::default();
        self.value == other.value
            && self.shards == other.shards
            && self.ext.as_deref().unwrap_or(&empty) == other.ext.as_deref().unwrap_or(&empty)
    }
}

impl Eq for Counter {}

impl Counter {
    /// A single-shard counter holding `value`.
    pub const fn plain(value: i64) -> Self {
        Counter {
            value,
            shards: Vec::new(),
            ext: None,
            rate: RateTracker::new(),
        }
    }

    /// Builds a counter from decoded parts, checking every invariant: the shards sum to a 64-bit
    /// value; with a floor, value >= floor and one non-negative budget per shard summing to the
    /// headroom; buckets well formed.
    pub fn from_parts(parts: CounterParts) -> Result<Self, CounterError> {
        let CounterParts {
            shards,
            floor,
            ceiling,
            tokens,
            ledger,
            records,
            history,
            spread,
            transfers,
            throttle,
            window,
            stray,
        } = parts;
        if shards.is_empty() || shards.len() > MAX_SHARDS {
            return Err(CounterError::InvalidOperation("shard count out of range"));
        }
        let value = checked_sum(&shards)?;
        if let Some(f) = &floor {
            check_floor(value, f, shards.len())?;
        }
        if let Some(c) = &ceiling {
            check_ceiling(value, c, shards.len())?;
        }
        if let Some(s) = &spread {
            check_spread_bounds(s, ceiling.is_some())?;
        }
        if let Some(h) = &history {
            h.validate()?;
        }
        if let Some(s) = &spread {
            s.validate()?;
        }
        if let Some(w) = &window {
            w.validate()?;
            if w.total() != Some(value) {
                return Err(CounterError::InvalidOperation(
                    "window buckets do not sum to the value",
                ));
            }
            if history.is_some() || spread.is_some() || transfers.is_some() {
                return Err(CounterError::Window(WINDOW_ALONE));
            }
        }
        if let Some(t) = &transfers {
            t.validate()?;
            if spread.as_ref().is_some_and(|s| t.retired.contains(&s.id)) {
                return Err(CounterError::InvalidOperation("a retired spread id"));
            }
            if let Some(s) = &spread {
                folded::validate(t, &s.holders)?;
            }
        }
        let transfers = transfers.filter(|t| !t.is_empty());
        let shards = if shards.len() == 1 {
            Vec::new()
        } else {
            shards
        };
        let remembered = Remembered {
            tokens,
            ledger,
            records,
        };
        let ext = Extras {
            floor,
            ceiling: ceiling.map(Box::new),
            remembered: (!remembered.is_empty()).then(|| Box::new(remembered)),
            history: history.map(Box::new),
            spread: spread.map(Box::new),
            transfers: transfers.map(Box::new),
            throttle: throttle.filter(|t| !t.is_empty()).map(Box::new),
            window: window.map(Box::new),
            stray,
        };
        Ok(Counter {
            value,
            shards,
            ext: (!ext.is_empty()).then(|| Box::new(ext)),
            ..Counter::default()
        })
    }

    /// Builds an unfloored counter from per-shard values.
    pub fn from_shards(shards: Vec<i64>) -> Result<Self, CounterError> {
        Counter::from_parts(CounterParts {
            shards,
            ..CounterParts::default()
        })
    }

    pub const fn value(&self) -> i64 {
        self.value
    }

    /// What this key can still sell as a rebalance round reads it: its value above its own
    /// floor (the whole value when it has none).
    pub fn budget(&self) -> i64 {
        self.value
            .saturating_sub(self.floor().map_or(0, |f| f.floor))
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

    pub fn floor(&self) -> Option<&Floor> {
        self.ext.as_ref()?.floor.as_ref()
    }

    /// True for a counter a client renamed onto a holder's name (a stray): the spread protocol
    /// did not make it, so it is not that holder. It keeps its own state; the glue counts it
    /// in no total and lets no command write it until it is renamed to another name.
    pub fn is_stray(&self) -> bool {
        self.ext.as_ref().is_some_and(|e| e.stray)
    }

    /// Marks (or clears) the counter as a stray ([`Counter::is_stray`]).
    pub fn set_stray(&mut self, stray: bool) {
        if stray {
            self.ext.get_or_insert_with(Default::default).stray = true;
        } else if let Some(e) = self.ext.as_deref_mut() {
            e.stray = false;
            self.trim_ext();
        }
    }

    pub fn ceiling(&self) -> Option<&Ceiling> {
        self.ext.as_ref()?.ceiling.as_deref()
    }

    fn remembered(&self) -> Option<&Remembered> {
        self.ext.as_ref()?.remembered.as_deref()
    }

    fn remembered_mut_if_any(&mut self) -> Option<&mut Remembered> {
        self.ext.as_deref_mut()?.remembered.as_deref_mut()
    }

    fn remembered_mut(&mut self) -> &mut Remembered {
        self.ext_mut().remembered.get_or_insert_with(Box::default)
    }

    pub fn tokens(&self) -> &TokenWindow {
        self.remembered().map_or(&NO_TOKENS, |r| &r.tokens)
    }

    pub fn ledger(&self) -> &TokenWindow<LedgerEntry> {
        self.remembered().map_or(&NO_LEDGER, |r| &r.ledger)
    }

    pub fn records(&self) -> &TokenWindow<LedgerEntry> {
        self.remembered().map_or(&NO_LEDGER, |r| &r.records)
    }

    /// The live record of token `fp` (see [`Extras::records`]).
    pub fn record(&self, fp: u64, now: i64) -> Option<LedgerEntry> {
        self.records().get_live(fp, now)
    }

    /// Keeps a record beside a tokened write.
    fn keep_record(&mut self, fp: u64, expires_at: i64, intent: Intent, value: i64) {
        let entry = LedgerEntry {
            expires_at,
            outcome: Some(value),
            intent,
        };
        self.remembered_mut().records.insert(fp, entry);
    }

    pub fn history(&self) -> Option<&History> {
        self.ext.as_ref()?.history.as_deref()
    }

    /// The other holders when this counter is the home of a spread counter.
    pub fn spread(&self) -> Option<&Spread> {
        self.ext.as_ref()?.spread.as_deref()
    }

    /// Makes this counter the home of a spread counter with these other holders.
    pub fn set_spread(&mut self, spread: Spread) -> Result<(), CounterError> {
        check_spread_bounds(&spread, self.ceiling().is_some())?;
        spread.validate()?;
        if self.window().is_some() {
            return Err(CounterError::Window(WINDOW_ALONE));
        }
        if self.has_retired(spread.id) {
            return Err(CounterError::InvalidOperation("a retired spread id"));
        }
        if let Some(t) = self.transfers() {
            folded::validate(t, &spread.holders)?;
        }
        self.ext_mut().spread = Some(Box::new(spread));
        Ok(())
    }

    /// The sliding window, when the counter has one.
    pub fn window(&self) -> Option<&Window> {
        self.ext.as_ref()?.window.as_deref()
    }

    /// The value as a read at `now` sees it: on a windowed counter, without what has left the
    /// window by then (never below the floor); otherwise the value.
    pub fn value_at(&self, now: i64) -> i64 {
        match self.window() {
            Some(w) if w.has_expired(now) => {
                let slid = i128::from(self.value) - w.expired_sum(now);
                let floor = self.floor().map_or(i128::MIN, |f| i128::from(f.floor));
                // The live buckets sum to an i64 (the window's invariant), so this fits.
                i64::try_from(slid.max(floor)).unwrap_or(self.value)
            }
            _ => self.value,
        }
    }

    /// The `CTR.THROTTLE` limiter's state, when the counter has one.
    pub fn throttle(&self) -> Option<&Throttle> {
        self.ext.as_ref()?.throttle.as_deref()
    }

    /// True when the counter is nothing but a limiter (or nothing at all): value 0, one shard,
    /// no other state. `CTR.THROTTLE` keeps its state only in such a key, which it expires.
    pub fn is_throttle_only(&self) -> bool {
        self.value == 0
            && self.shards.is_empty()
            && self
                .ext
                .as_ref()
                .is_none_or(|e| e.holds_nothing_but_a_limiter())
    }

    /// A counter that is nothing but a limiter's arrival time (`tat_ns`), with no remembered
    /// reply: what a compact cell holds ([`cell::CounterRef::Limiter`]).
    pub fn bare_limiter(tat_ns: i64) -> Counter {
        Counter {
            ext: Some(Box::new(Extras {
                throttle: Some(Box::new(Throttle::new(
                    Some(tat_ns),
                    TokenWindow::default(),
                ))),
                ..Extras::default()
            })),
            ..Counter::default()
        }
    }

    /// The arrival time of a counter that is exactly [`Counter::bare_limiter`] (its add rate,
    /// local and advisory, aside); None for any other counter.
    pub fn bare_limiter_tat(&self) -> Option<i64> {
        let e = self.ext.as_deref()?;
        let t = e.throttle.as_deref()?;
        let only_the_limiter = self.value == 0
            && self.shards.is_empty()
            && t.replies().is_empty()
            && e.holds_nothing_but_a_limiter();
        t.tat_ns.filter(|_| only_the_limiter)
    }

    /// Applies a throttle call (the master's decision, or its replicated effect). A call that
    /// leaves nothing (a read of an idle limiter) leaves no state.
    pub fn apply_throttle(&mut self, op: &ThrottleOp) {
        let ext = self.ext_mut();
        let t = ext.throttle.get_or_insert_with(Box::default);
        t.apply(op);
        if t.is_empty() {
            ext.throttle = None;
        }
        self.trim_ext();
    }

    fn window_mut(&mut self) -> Option<&mut Window> {
        self.ext.as_mut()?.window.as_deref_mut()
    }

    fn floor_mut(&mut self) -> Option<&mut Floor> {
        self.ext.as_mut()?.floor.as_mut()
    }

    fn ceiling_mut(&mut self) -> Option<&mut Ceiling> {
        self.ext.as_mut()?.ceiling.as_deref_mut()
    }

    fn history_mut(&mut self) -> Option<&mut History> {
        self.ext.as_mut()?.history.as_deref_mut()
    }

    /// The optional state, created on first use.
    fn ext_mut(&mut self) -> &mut Extras {
        self.ext.get_or_insert_with(Box::default)
    }

    /// Drops the optional state once nothing is left in it (so the counter can go inline).
    fn trim_ext(&mut self) {
        if let Some(e) = self.ext.as_deref_mut() {
            if e.remembered.as_ref().is_some_and(|r| r.is_empty()) {
                e.remembered = None;
            }
        }
        if self.ext.as_ref().is_some_and(|e| e.is_empty()) {
            self.ext = None;
        }
    }

    /// Tokens held for adds and clears, and ledger entries of decrements (what `CTR.INFO`
    /// reports as `tokens` and `ledger`).
    pub fn token_counts(&self) -> (usize, usize) {
        let decrements = self.ledger().count_where(|e| e.intent.is_decrement());
        (self.token_count() - decrements, decrements)
    }

    /// Tokens held by both windows.
    pub fn token_count(&self) -> usize {
        self.tokens().len() + self.ledger().len()
    }

    /// When the counter is 0 and holds nothing but remembered writes in its ledger (a key made
    /// by a refused `CTR.DECRFLOOR ... TOKEN t` on a missing key, say): the time the last of
    /// them expires, after which the key would be no different from a missing one.
    pub fn remembered_only_until(&self) -> Option<i64> {
        let e = self.ext.as_ref()?;
        let bare = self.value == 0
            && self.shards.is_empty()
            && e.floor.is_none()
            && e.ceiling.is_none()
            && self.tokens().is_empty()
            && e.history.is_none()
            && e.window.is_none()
            && e.throttle.is_none();
        if bare {
            // Records expire with the ledger entries they stand beside.
            self.ledger()
                .latest_expiry()
                .max(self.records().latest_expiry())
        } else {
            None
        }
    }

    /// True when the counter carries sub-shards and nothing else (no floor, tokens, ledger or
    /// buckets): a bare add on it stays in place, whatever its value.
    pub fn holds_only_shards(&self) -> bool {
        !self.shards.is_empty() && self.ext.is_none()
    }

    /// True when the counter carries nothing but its value, so it can be stored inline.
    pub fn is_plain(&self) -> bool {
        self.shards.is_empty() && self.ext.is_none()
    }

    /// What a tokened write finds: nothing (a new write), its own earlier attempt (a retry,
    /// with what it replies now), or another write under the same token (refused). A token
    /// names one write on a key, whichever command made it.
    pub fn token_use(&self, fp: u64, write: WriteKind, now: i64) -> TokenUse {
        if self
            .throttle()
            .is_some_and(|t| t.replies().contains_live(fp, now))
        {
            return TokenUse::Conflict;
        }
        if self.tokens().contains_live(fp, now) {
            return if write == UNIT_ADD {
                TokenUse::Retry(Some(self.value_at(now)))
            } else {
                TokenUse::Conflict
            };
        }
        match self.ledger().get_live(fp, now) {
            None => TokenUse::New,
            Some(e) if !e.intent.matches(write) => TokenUse::Conflict,
            // A decrement or a clear of a spread total replays its first outcome; a refused add
            // replays its refusal; any other write replies the current value.
            Some(e) if e.intent.replays_outcome() => TokenUse::Retry(e.outcome),
            Some(e) if e.outcome.is_none() => TokenUse::Retry(None),
            Some(_) => TokenUse::Retry(Some(self.value_at(now))),
        }
    }

    /// Remembers a tokened write: the common `CTR.ADD key 1` that was applied in the add-token
    /// window, any other in the ledger with its outcome and intent.
    pub(super) fn remember(
        &mut self,
        fp: u64,
        expires_at: i64,
        write: WriteKind,
        outcome: Option<i64>,
    ) {
        let remembered = self.remembered_mut();
        // A refused `CTR.ADD key 1` (by a ceiling) keeps its refusal in the ledger.
        if write == UNIT_ADD && outcome.is_some() {
            remembered.tokens.insert(fp, expires_at);
        } else {
            let entry = LedgerEntry {
                expires_at,
                outcome,
                intent: Intent::of(write),
            };
            remembered.ledger.insert(fp, entry);
        }
    }

    /// Counts a retry that was recognised and ignored.
    pub fn note_duplicate(&mut self) {
        self.rate.note_duplicate();
    }

    pub fn duplicates(&self) -> u64 {
        u64::from(self.rate.duplicates())
    }

    /// Adds per second over the last full second (as this server saw them).
    pub fn add_rate(&self) -> u32 {
        self.rate.rate()
    }

    /// The shard a write lands on (or starts drawing from), a function of the state alone so
    /// that a replica replaying the same command picks the same one: successive adds of 1 walk
    /// the shards in turn, other deltas spread them.
    pub fn next_shard(&self, shards: usize) -> usize {
        (self.value as u64 % shards.max(1) as u64) as usize
    }

    /// Records a write at `now` and returns the shard count the counter should have.
    #[inline]
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

    /// Heap bytes owned by the counter beyond its own struct.
    pub fn heap_bytes(&self) -> usize {
        let budgets = self.floor().map_or(0, |f| f.budgets.capacity())
            + self.ceiling().map_or(0, |c| c.budgets.capacity());
        let ceiling = self.ceiling().map_or(0, |_| std::mem::size_of::<Ceiling>());
        let ext = self
            .ext
            .as_ref()
            .map_or(0, |_| std::mem::size_of::<Extras>());
        let remembered = self
            .remembered()
            .map_or(0, |_| std::mem::size_of::<Remembered>());
        (self.shards.capacity() + budgets) * std::mem::size_of::<i64>()
            + ext
            + remembered
            + ceiling
            + self.tokens().heap_bytes()
            + self.ledger().heap_bytes()
            + self.records().heap_bytes()
            + self
                .history()
                .map_or(0, |h| std::mem::size_of::<History>() + h.heap_bytes())
            + self
                .spread()
                .map_or(0, |s| std::mem::size_of::<Spread>() + s.heap_bytes())
            + self
                .transfers()
                .map_or(0, |t| std::mem::size_of::<Transfers>() + t.heap_bytes())
            + self
                .throttle()
                .map_or(0, |t| std::mem::size_of::<Throttle>() + t.heap_bytes())
            + self
                .window()
                .map_or(0, |w| std::mem::size_of::<Window>() + w.heap_bytes())
    }

    /// What a boxed counter really costs, its box included: each allocation as the allocator
    /// rounds it (see [`crate::memsize`]). What `MEMORY USAGE` reports for it.
    pub fn allocated_bytes(&self) -> usize {
        use crate::memsize::{usable_size, vec_bytes};
        let ext = self
            .ext
            .as_ref()
            .map_or(0, |_| usable_size(std::mem::size_of::<Extras>()));
        let remembered = self
            .remembered()
            .map_or(0, |_| usable_size(std::mem::size_of::<Remembered>()));
        usable_size(std::mem::size_of::<Counter>())
            + vec_bytes::<i64>(self.shards.capacity())
            + ext
            + remembered
            + self
                .floor()
                .map_or(0, |f| vec_bytes::<i64>(f.budgets.capacity()))
            + self.ceiling().map_or(0, |c| {
                usable_size(std::mem::size_of::<Ceiling>()) + vec_bytes::<i64>(c.budgets.capacity())
            })
            + self.tokens().allocated_bytes()
            + self.ledger().allocated_bytes()
            + self.records().allocated_bytes()
            + self.history().map_or(0, |h| {
                usable_size(std::mem::size_of::<History>()) + h.allocated_bytes()
            })
            + self.spread().map_or(0, |s| {
                usable_size(std::mem::size_of::<Spread>())
                    + vec_bytes::<Vec<u8>>(s.holders.capacity())
                    + s.holders
                        .iter()
                        .map(|h| vec_bytes::<u8>(h.capacity()))
                        .sum::<usize>()
            })
            + self.transfers().map_or(0, |t| {
                usable_size(std::mem::size_of::<Transfers>()) + usable_size(t.heap_bytes())
            })
            + self.throttle().map_or(0, |t| {
                usable_size(std::mem::size_of::<Throttle>()) + t.allocated_bytes()
            })
            + self.window().map_or(0, |w| {
                usable_size(std::mem::size_of::<Window>()) + vec_bytes::<i64>(w.capacity())
            })
    }
}

fn checked_sum(values: &[i64]) -> Result<i64, CounterError> {
    exact_sum(values.iter().copied()).ok_or(CounterError::Overflow)
}

/// The sum of `values` when it fits in an i64, whatever the order: partial sums may leave the
/// range (shards [i64::MAX, 1, -1] are a valid counter, and writes can produce them), so they
/// are taken in i128. Callers pass at most a few thousand values, far from i128's limits.
pub(crate) fn exact_sum(values: impl IntoIterator<Item = i64>) -> Option<i64> {
    let total: i128 = values.into_iter().map(i128::from).sum();
    i64::try_from(total).ok()
}

fn check_floor(value: i64, f: &Floor, shards: usize) -> Result<(), CounterError> {
    if value < f.floor {
        return Err(CounterError::BelowFloor);
    }
    let headroom = value.checked_sub(f.floor).ok_or(CounterError::Overflow)?;
    check_budgets(&f.budgets, headroom, shards)
}

/// A spread home has a ceiling of its own (its share) exactly when its spread is ceiled: a
/// ceiling on the home of an unceiled spread would cap one holder only, and a ceiled spread's
/// home without one would take adds past the counter's ceiling.
fn check_spread_bounds(spread: &Spread, home_ceiled: bool) -> Result<(), CounterError> {
    match (spread.ceiling.is_some(), home_ceiled) {
        (false, true) => Err(CounterError::CeilingOnSpread),
        (true, false) => Err(CounterError::InvalidOperation(
            "a ceiled spread's home without a ceiling",
        )),
        _ => Ok(()),
    }
}

/// A ceiling's invariants: value <= ceiling, one non-negative budget per shard, summing to the
/// headroom (ceiling - value).
fn check_ceiling(value: i64, c: &Ceiling, shards: usize) -> Result<(), CounterError> {
    if value > c.ceiling {
        return Err(CounterError::AboveCeiling);
    }
    let headroom = c.ceiling.checked_sub(value).ok_or(CounterError::Overflow)?;
    check_budgets(&c.budgets, headroom, shards)
}

/// A bound's budgets: one per shard, none negative, summing to its headroom.
fn check_budgets(budgets: &[i64], headroom: i64, shards: usize) -> Result<(), CounterError> {
    if budgets.len() != shards || budgets.iter().any(|b| *b < 0) {
        return Err(CounterError::InvalidOperation(
            "budgets do not match the shards",
        ));
    }
    if checked_sum(budgets)? != headroom {
        return Err(CounterError::InvalidOperation(
            "budgets do not sum to the headroom",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
