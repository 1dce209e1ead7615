//! What every CTR write shares: reading and updating the counter in a key (keeping its stored
//! form and the tokens gauge right), the master's decisions (time, token stamp, shards), and the
//! replication of the resulting effect.

use std::ffi::CStr;

use super::decide;
use crate::config::Settings;
use crate::counter::listing::ListClock;
use crate::counter::spread::parse_holder_name;
use crate::counter::{
    siphash::token_fingerprint, token_expiry, Counter, CounterCell, CounterError, CounterRef,
    StartOp, TokenStamp, TokenTimeError, TokenUse, WriteKind,
};
use crate::ffi::{
    rm, string_bytes, Args, CommandError, CommandResult, Ctx, Key, KeyContent, RawString, Reply,
    WRONG_TYPE,
};
use crate::metrics;
use crate::persist::ctr_type::ctr_type;
use crate::persist::effect::{self, CounterOp, Effect};

const APPLY_COMMAND: &CStr = c"CTR.APPLY";

thread_local! {
    static EFFECT_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl From<CounterError> for CommandError {
    fn from(e: CounterError) -> Self {
        match e {
            CounterError::Overflow => CommandError::fixed("ERR counter overflow"),
            CounterError::BelowFloor => CommandError::fixed("ERR value below floor"),
            CounterError::Late => {
                metrics::LATE_ADDS.incr();
                CommandError(e.message().into())
            }
            other => CommandError(other.message().into()),
        }
    }
}

impl From<TokenTimeError> for CommandError {
    fn from(e: TokenTimeError) -> Self {
        metrics::TOKENS_REFUSED.incr();
        CommandError::fixed(match e {
            TokenTimeError::TooOld => {
                "ERR token event time is older than the dedup window (ctr.token-window-ms)"
            }
            TokenTimeError::TooFarInFuture => {
                "ERR token event time is too far in the future (ctr.token-max-future-ms)"
            }
        })
    }
}

pub const TOKEN_REUSED: CommandError = CommandError::fixed(
    "ERR token already used on this key for another write (another command or amount)",
);

const FUTURE_EVENT: CommandError =
    CommandError::fixed("ERR event time is too far in the future (ctr.token-max-future-ms)");

/// What the key held before a write.
#[derive(Debug, Clone, Copy)]
pub struct Before {
    /// The key was missing, or held only remembered writes that expire with it: the write
    /// makes it anew (a TTL option applies).
    pub created: bool,
    pub inline: bool,
    pub shards: usize,
    /// No tokens, ledger or buckets: a write's outcome does not depend on the clock.
    pub timeless: bool,
}

/// Opens `key` for a write, refusing a key of another type before anything else is checked
/// (WRONGTYPE comes before any complaint about the arguments).
pub fn open_for_write(ctx: Ctx, key: RawString) -> Result<Key, CommandError> {
    open_for_write_as(ctx, key).map(|(k, _)| k)
}

/// [`open_for_write`], also handing back what the key holds (asked once).
pub fn open_for_write_as(ctx: Ctx, key: RawString) -> Result<(Key, KeyContent), CommandError> {
    let k = Key::open(ctx, key, true);
    match k.content(ctr_type()) {
        KeyContent::Other => Err(WRONG_TYPE),
        KeyContent::Mine(raw) => {
            // SAFETY: the key is open and holds a live counter for the duration of this borrow.
            let c = unsafe { CounterCell::borrow(raw) };
            refuse_stray(c, string_bytes(key))?;
            refuse_sealed(c)?;
            Ok((k, KeyContent::Mine(raw)))
        }
        content => Ok((k, content)),
    }
}

/// Opens `key` for a tokened write that may be a retry: WRONGTYPE is refused at once, a sealed
/// holder only by [`refuse_sealed_unless_retry`] once the token is known (a folded holder
/// replays the writes it remembers for the whole token window).
pub fn open_for_retry_as(ctx: Ctx, key: RawString) -> Result<(Key, KeyContent), CommandError> {
    let k = Key::open(ctx, key, true);
    match k.content(ctr_type()) {
        KeyContent::Other => Err(WRONG_TYPE),
        // SAFETY: the key is open and holds a live counter for the duration of this borrow.
        KeyContent::Mine(raw) if is_stray(unsafe { CounterCell::borrow(raw) }) => {
            Err(stray_error(string_bytes(key)))
        }
        content => Ok((k, content)),
    }
}

/// On a key opened with [`open_for_retry_as`]: a sealed holder (folded back into its home)
/// answers a retry of a write it remembers with that write's first reply, and refuses any
/// other write with the folded-back error. None: the key is not sealed. A tokened write of a
/// token it does not remember, while its fold has not landed, is [`FOLD_IN_FLIGHT`]: passed on
/// (the folded-back error) only on a seal its replicas hold, since before that a failover
/// could give the holder back unsealed, to count or grant the token again after a holder
/// further on did; the caller waits for the fold.
pub fn refuse_sealed_unless_retry(
    w: &Write,
    key: &Key,
    write: WriteKind,
) -> Result<Option<Option<i64>>, CommandError> {
    let KeyContent::Mine(raw) = key.content(ctr_type()) else {
        return Ok(None);
    };
    // SAFETY: the key is open and holds a live counter for the duration of this borrow.
    let c = unsafe { CounterCell::borrow(raw) };
    let CounterRef::Boxed(b) = c else {
        return Ok(None);
    };
    if !b.is_sealed() {
        return Ok(None);
    }
    match w.retry_of(b, write)? {
        Some(first) => Ok(Some(first)),
        None if w.token.is_some() && b.fold_travels() => Err(FOLD_IN_FLIGHT),
        None => Err(SEALED),
    }
}

/// [`refuse_sealed_unless_retry`]'s way of saying a new token waits for the holder's fold to
/// land (never replied: the caller waits, then answers its own `TRYAGAIN`). Its text, were it
/// ever sent, is a budget in flight's, which every client already retries.
pub const FOLD_IN_FLIGHT: CommandError =
    CommandError::fixed("TRYAGAIN budget in flight: this holder's fold has not landed");

/// A user write's check on a key it opens itself: WRONGTYPE, then a sealed holder's refusal.
pub fn refuse_unwritable(ctx: Ctx, key: RawString) -> Result<(), CommandError> {
    open_for_write_as(ctx, key).map(|_| ())
}

/// True when the write made the key anew with a time to live (`EX`/`PX`, or the TTL of a key
/// that only remembers refusals): it sends the generic `expire` event, as `SET ... EX` does.
pub fn created_with_ttl(key: &Key, before: Before) -> bool {
    before.created && key.abs_expire().is_some()
}

/// True when the key holds nothing.
pub fn is_missing(key: &Key) -> bool {
    matches!(key.content(ctr_type()), KeyContent::Empty)
}

/// A view of the counter at `key` (None when missing), or WRONGTYPE, or the refusal of a
/// stray (a counter renamed onto a holder's name is no counter any command reads or writes
/// until it is renamed away, `strays`).
pub fn with_counter<R>(
    ctx: Ctx,
    key: RawString,
    f: impl FnOnce(Option<CounterRef>) -> R,
) -> Result<R, CommandError> {
    let k = Key::open(ctx, key, false);
    match k.content(ctr_type()) {
        KeyContent::Empty => Ok(f(None)),
        KeyContent::Mine(raw) => {
            // SAFETY: the key is open and holds a live counter for the duration of this borrow.
            let c = unsafe { CounterCell::borrow(raw) };
            refuse_stray(c, string_bytes(key))?;
            Ok(f(Some(c)))
        }
        KeyContent::Other => Err(WRONG_TYPE),
    }
}

/// True for a stray (`Counter::is_stray`).
pub fn is_stray(c: CounterRef) -> bool {
    matches!(c, CounterRef::Boxed(b) if b.is_stray())
}

/// True when `key` holds a stray.
pub fn holds_stray(ctx: Ctx, key: RawString) -> bool {
    let k = Key::open(ctx, key, false);
    match k.content(ctr_type()) {
        // SAFETY: the key is open and holds a live counter for the duration of this borrow.
        KeyContent::Mine(raw) => is_stray(unsafe { CounterCell::borrow(raw) }),
        _ => false,
    }
}

/// The refusal of any command on a stray named `name`.
pub fn stray_error(name: &[u8]) -> CommandError {
    let home = parse_holder_name(name).map_or(&b""[..], |h| h.home);
    CommandError(
        format!(
            "ERR '{}' was renamed onto the name of a holder of the spread counter '{}' and is not that holder: rename it to another name or delete it",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(home)
        )
        .into(),
    )
}

fn refuse_stray(c: CounterRef, name: &[u8]) -> Result<(), CommandError> {
    if is_stray(c) {
        return Err(stray_error(name));
    }
    Ok(())
}

/// The refusal of a write to a stray by a path that does not know its name.
const STRAY: CommandError = CommandError::fixed(
    "ERR this key was renamed onto the name of a spread counter's holder and is not that holder: rename it to another name or delete it",
);

/// Applies `f` to the counter in `key` (opened for writing), creating it at 0 when missing.
/// Nothing is stored when `f` fails. Keeps the stored form (inline or boxed) right and the
/// tokens-held gauge exact. A stray is refused (`with_counter`).
pub fn update_counter<R>(
    key: &Key,
    f: impl FnOnce(&mut Counter, Before) -> Result<R, CommandError>,
) -> Result<R, CommandError> {
    if let KeyContent::Mine(raw) = key.content(ctr_type()) {
        // SAFETY: the key is open and holds a live counter for the duration of this borrow.
        if is_stray(unsafe { CounterCell::borrow(raw) }) {
            return Err(STRAY);
        }
    }
    update_counter_even_stray(key, f)
}

/// [`update_counter`], also on a stray: for the marking and unmarking of strays alone.
pub fn update_counter_even_stray<R>(
    key: &Key,
    f: impl FnOnce(&mut Counter, Before) -> Result<R, CommandError>,
) -> Result<R, CommandError> {
    match key.content(ctr_type()) {
        KeyContent::Empty => {
            let mut counter = Counter::default();
            let before = Before {
                created: true,
                inline: true,
                shards: 1,
                timeless: true,
            };
            let result = f(&mut counter, before)?;
            let tokens = counter.token_count();
            let remembered_until = counter.remembered_only_until();
            let raw = CounterCell::new(counter).into_raw();
            if !key.set_value(ctr_type(), raw) {
                // SAFETY: the keyspace refused the value; we still own it.
                drop(unsafe { CounterCell::from_raw(raw) });
                return Err(CommandError::fixed("ERR could not store the counter"));
            }
            if let Some(at) = remembered_until {
                key.set_abs_expire(at);
            }
            metrics::TOKENS_HELD.add(tokens as u64);
            Ok(result)
        }
        KeyContent::Mine(raw) => {
            // SAFETY: the key is open for writing and holds a live counter we access alone.
            let view = unsafe { CounterCell::borrow(raw) };
            let tokens_before = view.token_count();
            let remembered_until = match view {
                CounterRef::Boxed(c) => c.remembered_only_until(),
                CounterRef::Inline(_) | CounterRef::Limiter(_) => None,
            };
            // The key expires with what it remembers only when it got that TTL from us.
            let expires_with_entries =
                remembered_until.is_some() && key.abs_expire() == remembered_until;
            let before = Before {
                created: expires_with_entries,
                inline: view.is_inline(),
                shards: view.shard_count(),
                timeless: match view {
                    CounterRef::Inline(_) | CounterRef::Limiter(_) => true,
                    CounterRef::Boxed(c) => {
                        c.token_count() == 0 && c.history().is_none() && c.window().is_none()
                    }
                },
            };
            // SAFETY: as above.
            let (result, new_cell) = unsafe { CounterCell::update(raw, |c| f(c, before)) };
            let live = match new_cell {
                None => raw,
                Some(cell) => {
                    let new_raw = cell.into_raw();
                    match key.replace_value(ctr_type(), new_raw) {
                        Some(old) => {
                            // SAFETY: the keyspace handed the old value back to us.
                            drop(unsafe { CounterCell::from_raw(old) });
                            new_raw
                        }
                        None => {
                            // SAFETY: refused: the new value is still ours.
                            drop(unsafe { CounterCell::from_raw(new_raw) });
                            raw
                        }
                    }
                }
            };
            // SAFETY: `live` is the key's current value.
            let after = unsafe { CounterCell::borrow(live) };
            if expires_with_entries {
                keep_expiring_with_entries(key, remembered_until, after);
            }
            let tokens_after = after.token_count();
            // Only touch the shared gauge when it changes (a locked instruction otherwise).
            if tokens_after > tokens_before {
                metrics::TOKENS_HELD.add((tokens_after - tokens_before) as u64);
            } else if tokens_after < tokens_before {
                metrics::TOKENS_HELD.sub((tokens_before - tokens_after) as u64);
            }
            result
        }
        KeyContent::Other => Err(WRONG_TYPE),
    }
}

/// A key that expires with its remembered writes keeps doing so while that is all it holds
/// (its TTL follows the latest entry), and becomes persistent once a write gives it more. The
/// TTL is a function of the state, so replicas and the AOF, running the same write, agree.
fn keep_expiring_with_entries(key: &Key, until_before: Option<i64>, after: CounterRef) {
    let until_after = match after {
        CounterRef::Boxed(c) => c.remembered_only_until(),
        CounterRef::Inline(_) | CounterRef::Limiter(_) => None,
    };
    match until_after {
        Some(at) if until_after != until_before => {
            key.set_abs_expire(at);
        }
        Some(_) => {}
        // Its entries all swept at the very ms of its expiry: nothing left to keep it for.
        None if matches!(after, CounterRef::Inline(0)) => {}
        None => {
            key.persist();
        }
    }
}

/// The shard count an inline counter should have after this write: 2 when the hot-key table
/// says it turned hot (and sub-shards are allowed), else 1.
pub fn inline_advice(key: &[u8], now: i64, threshold: i64, max_shards: usize) -> usize {
    if decide::inline_counter_is_hot(key, now, threshold) && max_shards >= 2 {
        2
    } else {
        1
    }
}

/// Stores the inline `cell` at `key`, which held nothing (`old` None) or the inline counter
/// `old`: the fast paths' write. An inline cell owns no memory, so nothing is taken back when
/// the keyspace refuses it, and an unchanged value writes nothing.
pub fn store_inline(
    key: &Key,
    old: Option<*mut std::ffi::c_void>,
    cell: CounterCell,
) -> Result<(), CommandError> {
    let stored = match old {
        None => key.set_value(ctr_type(), cell.into_raw()),
        Some(raw) if raw != cell.as_raw() => {
            key.replace_value(ctr_type(), cell.into_raw()).is_some()
        }
        Some(_) => true,
    };
    if stored {
        Ok(())
    } else {
        Err(CommandError::fixed("ERR could not store the counter"))
    }
}

/// One write command as the master runs it: its time, configs and token stamp, and the
/// decisions it makes. A command replayed from our master or the AOF decides nothing.
pub struct Write<'a> {
    pub ctx: Ctx,
    pub key_name: RawString,
    key_bytes: &'a [u8],
    pub now: i64,
    /// The write's event time: `AT`, or `now`.
    pub event: i64,
    pub settings: Settings,
    pub token: Option<TokenStamp>,
    /// The bucket history this write started (`ctr.track-history yes`), replicated ahead of it.
    started: std::cell::Cell<Option<StartOp>>,
    /// The shard count the write rate advised, when the add's fast path already asked (asking
    /// twice would count the write twice and lose the advice).
    pub advised_shards: Option<usize>,
}

impl<'a> Write<'a> {
    /// Reads the clock and stamps the token (refusing one outside the window).
    pub fn new(
        ctx: Ctx,
        args: &Args<'a>,
        token: Option<&[u8]>,
        at: Option<i64>,
    ) -> Result<Self, CommandError> {
        let now = ctx.now_ms();
        let settings = Settings::current();
        let event = at.unwrap_or(now);
        let token = match token {
            None if event > now.saturating_add(settings.token_max_future_ms) => {
                return Err(FUTURE_EVENT);
            }
            None => None,
            Some(t) => Some(TokenStamp {
                fp: token_fingerprint(t),
                expires_at: token_expiry(
                    event,
                    now,
                    settings.token_window_ms,
                    settings.token_max_future_ms,
                )?,
            }),
        };
        Ok(Write {
            ctx,
            key_name: args.raw(1),
            key_bytes: args.bytes(1),
            now,
            event,
            settings,
            token,
            started: std::cell::Cell::new(None),
            advised_shards: None,
        })
    }

    /// A write decided after its command returned (a clear of a spread total, applied once its
    /// gather is in): the clock read now, the token as the command stamped it.
    pub fn resumed(
        ctx: Ctx,
        key_name: RawString,
        key_bytes: &'a [u8],
        token: Option<TokenStamp>,
    ) -> Self {
        let now = ctx.now_ms();
        Write {
            ctx,
            key_name,
            key_bytes,
            now,
            event: now,
            settings: Settings::current(),
            token,
            started: std::cell::Cell::new(None),
            advised_shards: None,
        }
    }

    /// Runs the write `f` on the counter in `key` (see [`update_counter`]). With
    /// `ctr.track-history yes`, a counter that keeps no buckets starts keeping them first (from
    /// its creation when this write creates it), so the write lands in its bucket; the start is
    /// undone when the write fails or changes nothing, and is replicated ahead of the write.
    pub fn update<R>(
        &self,
        key: &Key,
        f: impl FnOnce(&mut Counter, Before) -> Result<R, CommandError>,
    ) -> Result<R, CommandError> {
        if !self.settings.track_history || self.ctx.is_replaying() {
            return update_counter(key, f);
        }
        update_counter(key, |c, before| {
            // A windowed counter keeps no history.
            if c.history().is_some() || c.window().is_some() {
                return f(c, before);
            }
            let untouched = c.clone();
            let op = StartOp {
                now: self.now,
                width: self.settings.bucket_ms,
                retention: self.settings.bucket_retention_ms,
                created: before.created,
            };
            c.apply_start(&op);
            // The write now depends on the clock (its bucket): it replicates as its effect.
            let result = f(
                c,
                Before {
                    timeless: false,
                    ..before
                },
            );
            let changed = result.is_ok()
                && (before.created || {
                    let mut rest = c.clone();
                    rest.drop_history();
                    rest != untouched
                });
            if changed {
                self.started.set(Some(op));
            } else {
                c.drop_history();
            }
            result
        })
    }

    /// Replicates the start of a bucket history made by [`Write::update`], ahead of the write
    /// (`effect`). When the write created the key, the start creates it on the replica: it
    /// carries the write's TTL.
    fn replicate_started_history(&self, effect: &Effect) -> Result<(), CommandError> {
        match self.started.take() {
            Some(op) => self.replicate_effect(&Effect {
                op: effect::CounterOp::Start(op),
                expire_at: effect.expire_at,
            }),
            None => Ok(()),
        }
    }

    /// When this write's token is remembered on `c`: `Some(reply)` for a retry of the same
    /// write (nothing changes), an error when the token named another write. None: a new write.
    pub fn retry_of(
        &self,
        c: &Counter,
        write: WriteKind,
    ) -> Result<Option<Option<i64>>, CommandError> {
        let Some(t) = self.token else {
            return Ok(None);
        };
        match c.token_use(t.fp, write, self.now) {
            TokenUse::New => Ok(None),
            TokenUse::Retry(reply) => Ok(Some(reply)),
            TokenUse::Conflict => {
                metrics::TOKENS_REFUSED.incr();
                Err(TOKEN_REUSED)
            }
        }
    }

    /// The shard count this write should leave, decided from the write rate. A command replayed
    /// from our master or the AOF decides nothing: it keeps the count it finds.
    pub fn shards(&self, c: &mut Counter, before: Before) -> usize {
        let s = &self.settings;
        let advised = match self.advised_shards {
            Some(advised) => advised,
            None if before.inline => {
                inline_advice(self.key_bytes, self.now, s.promote_threshold, s.max_shards)
            }
            None => c.advise_shards(self.now, s.promote_threshold, s.max_shards),
        };
        if advised != before.shards && self.ctx.is_replaying() {
            return before.shards;
        }
        advised
    }

    /// Replicates a write: the command as sent when it is deterministic (its bare form, on a
    /// counter whose outcome does not depend on the clock, with no resize and no TTL: the shard
    /// is a function of the state), else the effect with every decision the master made.
    pub fn replicate(
        &self,
        bare_form: bool,
        before: Before,
        effect: &Effect,
        event: &CStr,
    ) -> Result<(), CommandError> {
        self.replicate_started_history(effect)?;
        let resized = effect.op.shards().is_some_and(|n| n != before.shards);
        if bare_form && before.timeless && !resized && effect.expire_at.is_none() {
            self.ctx.replicate_verbatim();
            self.announce(before, before.shards, event);
            Ok(())
        } else {
            self.finish(effect, before, event)
        }
    }

    /// Replicates the effect, counts a resize, emits the keyspace event.
    pub fn finish(
        &self,
        effect: &Effect,
        before: Before,
        event: &CStr,
    ) -> Result<(), CommandError> {
        self.replicate_started_history(effect)?;
        self.replicate_effect(effect)?;
        self.announce(before, effect.op.shards().unwrap_or(before.shards), event);
        Ok(())
    }

    /// Propagates one effect as `CTR.APPLY key <effect>`.
    fn replicate_effect(&self, effect: &Effect) -> Result<(), CommandError> {
        // Effects are encoded into one buffer kept for the life of the main thread.
        let replicated = EFFECT_BUFFER.with(|cell| {
            let buf = effect::encode_into(effect, cell.take());
            let ok = self
                .ctx
                .replicate_effect(APPLY_COMMAND, self.key_name, &buf);
            cell.set(buf);
            ok
        });
        if !replicated {
            return Err(CommandError::fixed("ERR could not replicate the write"));
        }
        Ok(())
    }

    /// Counts a resize and emits the keyspace event of a write already replicated.
    pub fn announce(&self, before: Before, shards_after: usize, event: &CStr) {
        if shards_after > before.shards {
            metrics::PROMOTIONS.incr();
        } else if shards_after < before.shards {
            metrics::DEMOTIONS.incr();
        }
        self.ctx.key_changed(event, self.key_name);
    }
}

/// The refusal of a write to a holder a shrink folded back into its home.
pub const SEALED: CommandError = CommandError::fixed(
    "ERR this key was a spread counter holder and has been folded back into its home: re-read the holders (CTR.HOLDERS home) and write the home or a current holder",
);

/// Every user write's first check: a sealed holder takes no write.
pub fn refuse_sealed(c: CounterRef) -> Result<(), CommandError> {
    match c {
        CounterRef::Boxed(b) if b.is_sealed() => Err(SEALED),
        _ => Ok(()),
    }
}

/// (value, floor) of a counter: a missing key is 0 with no floor.
pub fn value_and_floor(c: Option<CounterRef>) -> (i64, Option<i64>) {
    match c {
        None => (0, None),
        Some(CounterRef::Boxed(b)) => (b.value(), b.floor().map(|f| f.floor)),
        Some(c) => (c.value(), None),
    }
}

/// A holder's floor as a gather counts it: its own floor plus the floor units of a fold it
/// has in flight (`Counter::floor_in_hand`), so a sealed holder's floor counts until its home
/// has it, as its value does.
pub fn floor_in_hand(ctx: Ctx, key: RawString) -> Result<Option<i64>, CommandError> {
    with_counter(ctx, key, |c| match c {
        Some(CounterRef::Boxed(b)) => b.floor_in_hand(),
        other => value_and_floor(other).1,
    })
}

/// The clock a change of a home's holder list this master makes is dated with: the change is
/// counted, so `CTR.HOLDERS ... AT` answers again once the replicas hold it
/// (`super::listing_gate`).
pub fn list_change_clock(ctx: Ctx) -> ListClock {
    super::listing_gate::lists_changed();
    let clock = list_clock(ctx);
    ListClock {
        now_ms: super::listing_gate::dating_clock(clock.now_ms),
        ..clock
    }
}

/// This master's clock, and the token window a home's listing keeps entries for
/// (`crate::counter::listing`).
pub fn list_clock(ctx: Ctx) -> ListClock {
    ListClock {
        now_ms: ctx.now_ms(),
        window_ms: crate::config::TOKEN_WINDOW_MS.load(std::sync::atomic::Ordering::Relaxed),
    }
}

/// Replicates the resulting `state` of a spread (or budget) write of `key_name` and sends its
/// event: the names depend on this master's view of the cluster, so replicas and the AOF get
/// the state rather than the command.
pub fn publish_state(ctx: Ctx, key_name: RawString, state: &[u8]) -> Result<(), CommandError> {
    if !ctx.replicate_effect(c"CTR.SETSTATE", key_name, state) {
        return Err(CommandError::fixed("ERR could not replicate the write"));
    }
    ctx.key_changed(c"ctr.spread", key_name);
    Ok(())
}

/// The end of a clear (of a counter, or of a spread home's total), once its key is closed:
/// `Err` is a retry, which replies its first answer; `Ok` is the applied clear, whose effect
/// replicates (with the `expire` event when the write made the key with a TTL) and whose reply
/// is the value before.
pub fn finish_clear(
    w: &Write,
    outcome: Result<(CounterOp, Before, i64), Option<i64>>,
    expires: bool,
) -> CommandResult {
    match outcome {
        Err(first) => {
            metrics::DUPLICATES_IGNORED.incr();
            Ok(first.map_or(Reply::Null, Reply::Integer))
        }
        Ok((op, before, value_before)) => {
            let effect = Effect {
                op,
                expire_at: None,
            };
            w.finish(&effect, before, c"ctr.clear")?;
            if expires {
                w.ctx.expire_set(w.key_name);
            }
            metrics::CLEARS.incr();
            Ok(Reply::Integer(value_before))
        }
    }
}

/// `DEL name` through the server (`!`: replicated to the replicas and the AOF, with its
/// keyspace event, and the type's unlink callback); true when it ran. A holder it deleted is
/// counted collected.
pub(crate) fn delete(ctx: Ctx, name: &[u8]) -> bool {
    // SAFETY: ctx is live; "b" takes (pointer, length).
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx.ptr,
            c"DEL".as_ptr(),
            c"b!".as_ptr(),
            name.as_ptr().cast::<std::ffi::c_char>(),
            name.len(),
        )
    };
    if reply.is_null() {
        return false;
    }
    // SAFETY: a live reply, freed once below.
    let (kind, n) = unsafe {
        (
            rm!(RedisModule_CallReplyType)(reply),
            rm!(RedisModule_CallReplyInteger)(reply),
        )
    };
    // SAFETY: as above.
    unsafe { rm!(RedisModule_FreeCallReply)(reply) };
    let ran = kind as isize == redis_module::raw::REDISMODULE_REPLY_INTEGER;
    if ran && n == 1 {
        metrics::HOLDERS_COLLECTED.incr();
    }
    ran
}

/// Selects database `db` on `ctx` (a timer's or a receiver's context); false when there is no
/// such database.
pub(crate) fn select_db(ctx: Ctx, db: std::ffi::c_int) -> bool {
    // SAFETY: ctx is live.
    unsafe {
        rm!(RedisModule_SelectDb)(ctx.ptr, db)
            == redis_module::raw::REDISMODULE_OK as std::ffi::c_int
    }
}
