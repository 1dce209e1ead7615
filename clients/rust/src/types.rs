//! Options and replies of the typed commands.

use std::collections::HashMap;

use redis::Value;

/// Options of `CTR.ADD`: a token, an event time, an expiry (a TTL or a unix time set on create,
/// or also on a key without a TTL with `enx`), `PERSIST`.
///
/// At most one of `ex`, `px`, `exat` and `pxat` is sent: each replaces the one given before.
/// As for [`IncrexOptions`], the combinations the module refuses are sent and refused there,
/// changing nothing: `persist` with a time or with `enx` is [`ModuleError::Syntax`], `enx`
/// without a time too (`ERR ENX requires one of EX, PX, EXAT or PXAT`).
///
/// [`ModuleError::Syntax`]: crate::ModuleError::Syntax
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddOptions {
    pub(crate) token: Option<Vec<u8>>,
    pub(crate) at: Option<i64>,
    pub(crate) expiry: Option<(&'static str, i64)>,
    pub(crate) persist: bool,
    pub(crate) enx: bool,
}

impl AddOptions {
    pub fn new() -> AddOptions {
        AddOptions::default()
    }

    /// `TOKEN`: a retry with the same token counts once (inside `ctr.token-window-ms`).
    pub fn token(mut self, token: impl AsRef<[u8]>) -> AddOptions {
        self.token = Some(token.as_ref().to_vec());
        self
    }

    /// `AT`: the event's own time, unix milliseconds.
    pub fn at(mut self, unix_ms: i64) -> AddOptions {
        self.at = Some(unix_ms);
        self
    }

    /// `EX`: a time to live in seconds, set only when this call creates the key (see `enx`).
    pub fn ex(mut self, seconds: i64) -> AddOptions {
        self.expiry = Some(("EX", seconds));
        self
    }

    /// `PX`: a time to live in milliseconds, set only when this call creates the key (see
    /// `enx`).
    pub fn px(mut self, millis: i64) -> AddOptions {
        self.expiry = Some(("PX", millis));
        self
    }

    /// `EXAT`: an expiry at a unix time in seconds, set only when this call creates the key
    /// (see `enx`). A time already past deletes the key right after the add.
    pub fn exat(mut self, unix_seconds: i64) -> AddOptions {
        self.expiry = Some(("EXAT", unix_seconds));
        self
    }

    /// `PXAT`: an expiry at a unix time in milliseconds, set only when this call creates the
    /// key (see `enx`). A time already past deletes the key right after the add.
    pub fn pxat(mut self, unix_ms: i64) -> AddOptions {
        self.expiry = Some(("PXAT", unix_ms));
        self
    }

    /// `PERSIST`: removes the key's TTL (not with a time nor `enx`).
    pub fn persist(mut self) -> AddOptions {
        self.persist = true;
        self
    }

    /// `ENX`, with one of `ex`/`px`/`exat`/`pxat`: the time is also set on an existing key
    /// that has no TTL, and never changes one the key has.
    pub fn enx(mut self) -> AddOptions {
        self.enx = true;
        self
    }

    /// True for an add that may set or remove the key's TTL: on a spread counter it goes to
    /// the home key (a TTL set on a holder would expire that holder alone).
    pub(crate) fn changes_ttl(&self) -> bool {
        self.expiry.is_some() || self.persist || self.enx
    }
}

/// Options of `CTR.INCREX`: the increment (1 by default), bounds, `SATURATE`, an expiry, a
/// token and an event time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrexOptions {
    pub(crate) by: i64,
    pub(crate) lbound: Option<i64>,
    pub(crate) ubound: Option<i64>,
    pub(crate) saturate: bool,
    pub(crate) expiry: Option<(&'static str, i64)>,
    pub(crate) persist: bool,
    pub(crate) enx: bool,
    pub(crate) token: Option<Vec<u8>>,
    pub(crate) at: Option<i64>,
}

impl Default for IncrexOptions {
    fn default() -> Self {
        IncrexOptions {
            by: 1,
            lbound: None,
            ubound: None,
            saturate: false,
            expiry: None,
            persist: false,
            enx: false,
            token: None,
            at: None,
        }
    }
}

impl IncrexOptions {
    pub fn new() -> IncrexOptions {
        IncrexOptions::default()
    }

    /// `BYINT`: the increment (may be negative).
    pub fn by(mut self, increment: i64) -> IncrexOptions {
        self.by = increment;
        self
    }

    /// `LBOUND`: a result below it is skipped (or, with `saturate`, clamped to it).
    pub fn lbound(mut self, bound: i64) -> IncrexOptions {
        self.lbound = Some(bound);
        self
    }

    /// `UBOUND`: a result above it is skipped (or, with `saturate`, clamped to it).
    pub fn ubound(mut self, bound: i64) -> IncrexOptions {
        self.ubound = Some(bound);
        self
    }

    /// `SATURATE`: clamp an outside result to the nearest bound instead of skipping.
    pub fn saturate(mut self) -> IncrexOptions {
        self.saturate = true;
        self
    }

    /// `EX`: a time to live in seconds, set on every applied call (see `enx`).
    pub fn ex(mut self, seconds: i64) -> IncrexOptions {
        self.expiry = Some(("EX", seconds));
        self
    }

    /// `PX`: a time to live in milliseconds.
    pub fn px(mut self, millis: i64) -> IncrexOptions {
        self.expiry = Some(("PX", millis));
        self
    }

    /// `EXAT`: an expiry at a unix time in seconds.
    pub fn exat(mut self, unix_seconds: i64) -> IncrexOptions {
        self.expiry = Some(("EXAT", unix_seconds));
        self
    }

    /// `PXAT`: an expiry at a unix time in milliseconds.
    pub fn pxat(mut self, unix_ms: i64) -> IncrexOptions {
        self.expiry = Some(("PXAT", unix_ms));
        self
    }

    /// `PERSIST`: remove the key's TTL.
    pub fn persist(mut self) -> IncrexOptions {
        self.persist = true;
        self
    }

    /// `ENX`: set the expiry only on a key without a TTL.
    pub fn enx(mut self) -> IncrexOptions {
        self.enx = true;
        self
    }

    /// `TOKEN`: a retry replies the first reply and changes nothing.
    pub fn token(mut self, token: impl AsRef<[u8]>) -> IncrexOptions {
        self.token = Some(token.as_ref().to_vec());
        self
    }

    /// `AT`: the event's own time, unix milliseconds.
    pub fn at(mut self, unix_ms: i64) -> IncrexOptions {
        self.at = Some(unix_ms);
        self
    }
}

/// The reply of `CTR.INCREX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Increxed {
    /// The value after the call (the current one when it was skipped).
    pub value: i64,
    /// The increment applied: 0 when skipped, the clamped delta with `SATURATE`.
    pub applied: i64,
}

/// The source kind of `CTR.RECONCILE key FROM <kind> source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Stream entries with an id time part at or before the watermark.
    Stream,
    /// Sorted-set members with a score at or before the watermark.
    Zset,
    /// The set's cardinality (no watermark).
    Set,
}

impl Source {
    pub(crate) fn keyword(self) -> &'static str {
        match self {
            Source::Stream => "STREAM",
            Source::Zset => "ZSET",
            Source::Set => "SET",
        }
    }
}

/// The reply of `CTR.RECONCILE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconciled {
    /// The value after the repair.
    pub value: i64,
    /// What the counter held for events up to the watermark minus the truth (positive: it ran
    /// high).
    pub drift: i64,
}

/// The reply of `CTR.THROTTLE`: redis-cell's `CL.THROTTLE` reply, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    /// True when the call was refused (nothing taken).
    pub limited: bool,
    /// `max_burst + 1`.
    pub limit: i64,
    /// Units that could be taken right now.
    pub remaining: i64,
    /// Seconds until a refused call would be allowed; -1 when allowed (or never).
    pub retry_after: i64,
    /// Seconds until the limiter is back at its full burst.
    pub reset_after: i64,
}

/// `CTR.INFO`, whatever the protocol.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CounterInfo {
    pub value: i64,
    /// None when no floor is set.
    pub floor: Option<i64>,
    pub shards: i64,
    /// One per shard; they sum to `value`.
    pub shard_values: Vec<i64>,
    /// Per-shard reservation budgets of a floored counter (they sum to value - floor).
    pub budgets: Option<Vec<i64>>,
    /// None when no ceiling is set.
    pub ceiling: Option<i64>,
    /// Per-shard budgets below the ceiling (they sum to ceiling - value).
    pub ceiling_budgets: Option<Vec<i64>>,
    /// Adds in the last full second, as this server saw them.
    pub add_rate: i64,
    /// `CTR.ADD`/`CTR.CLEAR` tokens remembered.
    pub tokens: i64,
    /// `CTR.DECRFLOOR` tokens remembered with their first outcome.
    pub ledger: i64,
    pub duplicates_ignored: i64,
    pub bucket_count: i64,
    pub last_watermark: Option<i64>,
    pub last_drift: Option<i64>,
    pub total_abs_drift: i64,
    pub reconciles: i64,
    /// A sliding window's length in ms (`CTR.WINDOW`), None without one.
    pub window_ms: Option<i64>,
    /// A sliding window's bucket count, None without one.
    pub window_buckets: Option<i64>,
    /// `inline`, `limiter` (a key that is nothing but a `CTR.THROTTLE` limiter) or `boxed`.
    pub encoding: String,
    /// The holders' names of a spread counter's home key, the home first (None otherwise).
    pub holders: Option<Vec<String>>,
    /// Each holder's value, in the order of `holders` (they sum to `value`).
    pub holder_values: Option<Vec<i64>>,
    /// How old each holder's value is, in ms (0: read for this command; else from the cache).
    pub holder_ages_ms: Option<Vec<i64>>,
    /// A floored spread counter's home (read on one server): total - floor.
    pub headroom: Option<i64>,
    /// Each holder's own floor, in the order of `holders`.
    pub holder_floors: Option<Vec<i64>>,
    /// Each holder's budget (its value - its floor): what it can grant alone.
    pub holder_budgets: Option<Vec<i64>>,
    /// Headroom in no holder's budget (budget moves under way).
    pub units_in_flight: Option<i64>,
    /// Units each holder refused since its server started (soft state).
    pub holder_refused_units: Option<Vec<i64>>,
    /// Fields a newer module replies that this crate does not know yet, as the server sent
    /// them.
    pub other: HashMap<String, Value>,
}

/// `PNC.INFO`, whatever the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PncInfo {
    pub value: i64,
    /// The replica id this deployment writes to (None before its first local write).
    pub replica_id: Option<String>,
    /// The id of the last local write to this key.
    pub home: Option<String>,
    /// Every replica id's slot, sorted by id.
    pub replicas: Vec<PncReplica>,
}

/// One replica id's slot of a PN-counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PncReplica {
    pub id: String,
    pub p: i64,
    pub n: i64,
}
