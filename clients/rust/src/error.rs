//! The module's errors as an enum, recognised by the stable start of their text.

use std::fmt;

use redis::RedisError;

/// An error the redis-ctr module replies. The server's text goes with it in
/// [`CtrError::Module`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModuleError {
    /// The result would leave the signed 64-bit range; nothing changed.
    Overflow,
    /// The value would be, or already is, below the counter's floor.
    BelowFloor,
    /// A token's event time is older than the dedup window (`ctr.token-window-ms`).
    TokenTooOld,
    /// An event time more than `ctr.token-max-future-ms` ahead of the server's clock.
    TooFarInFuture,
    /// An add stamped at or before the counter's reconciled watermark.
    LateAdd,
    /// `CTR.RECONCILE ... AT` on a counter that keeps no bucket history yet.
    HistoryMissing,
    /// A token that already named another write on this key (another command or amount).
    TokenReused,
    /// A reconcile watermark the counter cannot use.
    BadWatermark,
    /// A token outside 1 to 256 bytes.
    InvalidToken,
    /// A `CTR.DECRFLOOR` amount that is not positive.
    InvalidAmount,
    /// An `EX`/`PX` time `SET` would refuse too.
    InvalidExpire,
    /// A CTR or PNC state blob that does not decode.
    InvalidState,
    /// A merge that would give a PN-counter more than 1024 replica ids.
    TooManyReplicas,
    /// A PN-counter write sent to a replica.
    NotPrimary,
    /// An unknown, repeated or valueless option.
    Syntax,
    /// An argument that should be a 64-bit integer is not.
    NotAnInteger,
    /// The key holds another type.
    WrongType,
    /// A spread counter's total could not be gathered: a master serving some holders did not
    /// answer within `ctr.gather-timeout-ms`. Retry later.
    SpreadUnavailable,
    /// `TRYAGAIN`: a holder of the spread counter read is being resharded (cluster clients
    /// retry it by themselves first).
    HolderMoving,
    /// `TRYAGAIN`: a purchase that only budget still travelling keeps from being granted (a
    /// holder of a floored spread before its share landed, a holder whose budget move is
    /// unacknowledged). Nothing was recorded against the token: retry the same holder with the
    /// same token. [`crate::SpreadRouter::decrfloor`] does, for up to its purchase wait.
    BudgetInFlight,
    /// A holder of the spread counter read replied an error (its text follows its name).
    HolderError,
    /// A spread counter's total read inside MULTI/EXEC or a script, in a cluster, when other
    /// masters' values are needed and not cached (`ctr.gather-cache-ms`).
    GatherInTransaction,
    /// `CTR.SPREAD` with fewer holders than the counter has, on a module from before folds.
    CannotShrink,
    /// A write to a spread counter holder that a shrink folded back into its home: nothing
    /// changed. Re-read the holders (`CTR.INFO` of the home) and write the home or a current
    /// holder (a tokened add that may already have landed must not be sent elsewhere).
    HolderFolded,
    /// `CTR.SPREAD` of a floored counter across cluster masters, refused by modules from before
    /// budget moves between masters (a current module spreads it).
    FlooredSpread,
    /// `CTR.SPREAD` that cannot be done: a holder count outside 1 to 1024, a key name too long
    /// to spread, no free slot for a holder on some master.
    SpreadRefused,
}

/// (start of the error text without its `ERR ` code, kind), tried in order.
const BY_PREFIX: &[(&str, ModuleError)] = &[
    ("counter overflow", ModuleError::Overflow),
    ("value below floor", ModuleError::BelowFloor),
    (
        "token event time is older than the dedup window",
        ModuleError::TokenTooOld,
    ),
    (
        "token event time is too far in the future",
        ModuleError::TooFarInFuture,
    ),
    (
        "event time is too far in the future",
        ModuleError::TooFarInFuture,
    ),
    (
        "event time is at or before the counter's reconciled watermark",
        ModuleError::LateAdd,
    ),
    (
        "counter keeps no bucket history",
        ModuleError::HistoryMissing,
    ),
    (
        "token already used on this key for another write",
        ModuleError::TokenReused,
    ),
    ("watermark ", ModuleError::BadWatermark),
    ("token must be 1 to 256 bytes", ModuleError::InvalidToken),
    ("amount must be positive", ModuleError::InvalidAmount),
    ("invalid expire time", ModuleError::InvalidExpire),
    ("invalid PNC state", ModuleError::InvalidState),
    ("invalid CTR state", ModuleError::InvalidState),
    ("too many replica ids", ModuleError::TooManyReplicas),
    ("syntax error", ModuleError::Syntax),
    ("FROM SET takes no AT", ModuleError::Syntax),
    (
        "spread counter total unavailable",
        ModuleError::SpreadUnavailable,
    ),
    (
        "spread counter read lost its result",
        ModuleError::SpreadUnavailable,
    ),
    ("TRYAGAIN budget in flight", ModuleError::BudgetInFlight),
    ("TRYAGAIN spread counter holder", ModuleError::HolderMoving),
    ("spread counter holder '", ModuleError::HolderError),
    (
        "spread counter total needs a gather",
        ModuleError::GatherInTransaction,
    ),
    (
        "a spread counter cannot shrink yet",
        ModuleError::CannotShrink,
    ),
    (
        "this key was a spread counter holder and has been folded back",
        ModuleError::HolderFolded,
    ),
    (
        "a floored counter cannot be spread yet",
        ModuleError::FlooredSpread,
    ),
    ("holders must be between", ModuleError::SpreadRefused),
    ("key name too long to spread", ModuleError::SpreadRefused),
    (
        "no free slot found for a holder",
        ModuleError::SpreadRefused,
    ),
    (
        "value is not an integer or out of range",
        ModuleError::NotAnInteger,
    ),
    ("WRONGTYPE", ModuleError::WrongType),
];

/// `<COMMAND> must run on a primary: ...` starts with the command's name.
const NOT_PRIMARY: &str = " must run on a primary";

impl ModuleError {
    /// The kind of a server error text (with or without its `ERR` code); None when it is not
    /// one of the module's errors.
    pub fn from_text(text: &str) -> Option<ModuleError> {
        let text = text.strip_prefix("ERR ").unwrap_or(text);
        BY_PREFIX
            .iter()
            .find(|(prefix, _)| text.starts_with(prefix))
            .map(|&(_, kind)| kind)
            .or_else(|| {
                text.contains(NOT_PRIMARY)
                    .then_some(ModuleError::NotPrimary)
            })
    }
}

/// What a typed command can fail with.
#[derive(Debug)]
#[non_exhaustive]
pub enum CtrError {
    /// One of the module's errors, with the server's text.
    Module(ModuleError, String),
    /// Anything else from the `redis` crate: I/O, other server errors, a closed connection.
    Redis(RedisError),
    /// A reply of a shape the command never gives (e.g. a proxy in the way).
    Reply(String),
}

impl CtrError {
    /// The module error kind, when it is one.
    pub fn module_error(&self) -> Option<ModuleError> {
        match self {
            CtrError::Module(kind, _) => Some(*kind),
            _ => None,
        }
    }

    /// True for errors after which the command may or may not have run (a lost connection or
    /// a timeout): what a retry with the same token is for.
    pub fn is_connection_error(&self) -> bool {
        match self {
            CtrError::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
            }
            _ => false,
        }
    }
}

impl From<RedisError> for CtrError {
    fn from(e: RedisError) -> CtrError {
        let text = match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            _ => return CtrError::Redis(e),
        };
        match ModuleError::from_text(&text) {
            Some(kind) => CtrError::Module(kind, text),
            None => CtrError::Redis(e),
        }
    }
}

impl fmt::Display for CtrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CtrError::Module(_, text) => f.write_str(text),
            CtrError::Redis(e) => write!(f, "{e}"),
            CtrError::Reply(what) => write!(f, "unexpected reply: {what}"),
        }
    }
}

impl std::error::Error for CtrError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CtrError::Redis(e) => Some(e),
            _ => None,
        }
    }
}
