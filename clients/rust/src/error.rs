//! The module's errors as an enum, recognised by the stable start of their text: one table,
//! [`ERROR_TABLE`], checked by a test against every error text in the module's source, so a new
//! module error cannot go unmapped.

use std::fmt;

use redis::RedisError;

/// An error the redis-ctr module replies. The server's text goes with it in
/// [`CtrError::Module`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModuleError {
    /// The result would leave the signed 64-bit range; nothing changed.
    Overflow,
    /// The value would be, or already is, below the counter's floor; also `CTR.CLEAR` of a
    /// counter whose floor is above 0 (0 would be below it: lower the floor first).
    BelowFloor,
    /// The value would be, or already is, above the counter's ceiling (`CTR.CEIL` below the
    /// value, `CTR.CLEAR` of a counter whose ceiling is below 0).
    AboveCeiling,
    /// A ceiling, or one key's bounds, on a spread counter: `CTR.CEIL` on a spread home or
    /// holder (set a ceiling before `CTR.SPREAD`: a ceiled counter spreads its room in shares),
    /// `CTR.CLEAR` or `CTR.RECONCILE` of a ceiled spread counter (shrink it to 1 first),
    /// `CTR.INCREX` on a spread counter (add to it with `CTR.ADD`). Nothing changed.
    CeilingOnSpread,
    /// `CTR.REFUND` on a spread counter's holder that a shrink folded back into its home after
    /// it granted the token: the grant's units went home with the fold (nothing changed at the
    /// holder), and the error names the add that gives them back at the home, once
    /// ([`CtrError::refund_sent_home`]). [`crate::SpreadRouter::refund`] makes that add.
    RefundFolded,
    /// `TRYAGAIN`: `CTR.REFUND` on a spread counter's holder that a shrink is folding back into
    /// its home: the grant's units are on their way home, nothing changed. Retry the refund;
    /// [`crate::SpreadRouter::refund`] asks again for up to its purchase wait.
    RefundAwaitsFold,
    /// `TRYAGAIN`: `CTR.ADD` with a token new to a spread counter's holder that a shrink is
    /// folding back: the holder passes the token on (the folded-back error) only once its fold
    /// landed, nothing changed. Retry with the same token at the same holder;
    /// [`crate::SpreadRouter::add`] asks again for up to its purchase wait.
    AddAwaitsFold,
    /// A token's event time is older than the dedup window (`ctr.token-window-ms`).
    TokenTooOld,
    /// An event time more than `ctr.token-max-future-ms` ahead of the server's clock.
    TooFarInFuture,
    /// An `AT` that is not a unix time in ms (a negative one).
    InvalidTime,
    /// An add stamped at or before the counter's reconciled watermark.
    LateAdd,
    /// `CTR.RECONCILE ... AT` on a counter that keeps no bucket history yet.
    HistoryMissing,
    /// A token that already named another write on this key (another command or amount).
    TokenReused,
    /// A reconcile watermark the counter cannot use.
    BadWatermark,
    /// `CTR.RECONCILE ... FROM` a source key that does not exist, without `EMPTYOK`: nothing
    /// changed (a mistyped name would have set the counter to 0).
    SourceMissing,
    /// A token outside 1 to 256 bytes.
    InvalidToken,
    /// A `CTR.DECRFLOOR` amount that is not positive.
    InvalidAmount,
    /// An `EX`/`PX` time `SET` would refuse too.
    InvalidExpire,
    /// A CTR or PNC state blob that does not decode; also what only the internal commands meet
    /// (`CTR.APPLY`, `PNC.APPLY`, `*.SETSTATE`): an effect, replica id or replicated operation
    /// that no master would produce.
    InvalidState,
    /// A merge that would give a PN-counter more than 1024 replica ids.
    TooManyReplicas,
    /// A PN-counter write sent to a replica; `CTR.HOLDERS key AT ms` sent to a replica (a
    /// replica may not hold its master's latest grow or shrink yet).
    NotPrimary,
    /// An unknown, repeated or valueless option, an option a form does not take (`FROM SET`
    /// with `AT`, `ENX` without a time, `BYFLOAT`), crossed `LBOUND`/`UBOUND`, or a wrong
    /// number of arguments.
    Syntax,
    /// An argument that should be a 64-bit integer is not.
    NotAnInteger,
    /// The key holds another type.
    WrongType,
    /// A spread counter's total could not be gathered: a master serving some holders did not
    /// answer within `ctr.gather-timeout-ms`, or (`CLUSTERDOWN`) no master serves a holder's
    /// slot. Retry later.
    SpreadUnavailable,
    /// `TRYAGAIN`: a holder of the spread counter read is being resharded, or the home's own
    /// slot moved (or failed over) while a clear of its total read the holders, or a
    /// `CTR.FLOOR` met units still moving (a shrink's holders folding back); nothing changed
    /// (cluster clients retry it by themselves first).
    HolderMoving,
    /// `TRYAGAIN`: a purchase that only budget still travelling keeps from being granted (a
    /// holder of a floored spread before its share landed, a holder whose budget move is
    /// unacknowledged), or an add at a member of a ceiled or floored spread whose share of the
    /// room is still on its way. Nothing was recorded against the token: retry the same holder
    /// with the same token. [`crate::SpreadRouter::decrfloor`] and
    /// [`crate::SpreadRouter::add`] do, for up to the purchase wait.
    BudgetInFlight,
    /// A holder of the spread counter read replied an error (its text follows its name).
    HolderError,
    /// A spread counter's total read inside MULTI/EXEC or a script, in a cluster, when other
    /// masters' values are needed and not cached (`ctr.gather-cache-ms`).
    GatherInTransaction,
    /// `CTR.SPREAD` with fewer holders than the counter has, on a module from before folds.
    CannotShrink,
    /// `CTR.HOLDERS key AT ms` with `ms` ahead of the home master's clock: a grow or a shrink
    /// may still be dated before it, so its holders are not decided yet. The text gives the
    /// clock (`(now <ms>)`): ask again once it has reached `ms` ([`crate::SpreadRouter`] does,
    /// for up to its purchase wait).
    HoldersAhead,
    /// `CTR.HOLDERS key AT ms` of a time the home's record of its holders does not reach: a
    /// home spread by an earlier module version (until its next grow or shrink), or one past
    /// the record's size. [`crate::SpreadRouter`] then walks the current holders.
    HoldersUnknown,
    /// `TRYAGAIN`: `CTR.HOLDERS key AT ms` waited its bound (`ctr.purchase-wait-ms`) for the
    /// home master's replicas to hold its latest grow or shrink (a failover could lose it, and
    /// the list at `ms` with it), or was sent where it cannot wait (MULTI). Nothing changed: ask
    /// again ([`crate::SpreadRouter`] does, for up to its purchase wait).
    HoldersUnreplicated,
    /// A write to a spread counter holder that a shrink folded back into its home: nothing
    /// changed (a folded holder answers a retry of a write it did count with that write's
    /// reply, so this refusal means the write never counted there). Re-read the holders
    /// (`CTR.HOLDERS` of the home) and write the home or a current holder:
    /// [`crate::SpreadRouter`] and the writer do. Also a write that would create a key named
    /// like a holder that its home does not list (`ERR <key> is not a holder of the spread
    /// counter <home> ...`, a stale or made-up name), or any command on a counter renamed onto
    /// a holder's name, which is not that holder (`ERR '<key>' was renamed onto the name of a
    /// holder ...`): nothing changed, handled the same way.
    HolderFolded,
    /// `CTR.SPREAD`, `CTR.FLOOR` or `CTR.CLEAR` on a key named as a holder of a spread counter:
    /// those are the whole counter's, sent to its home key (the error names it).
    UseHomeKey,
    /// What floors and spreads do not combine into: `CTR.FLOOR` on a spread counter's home (set
    /// the floor before spreading), `CTR.CLEAR` of a floored spread counter (shrink it to 1
    /// first), and, on modules from before budget moves between masters, `CTR.SPREAD` of a
    /// floored counter.
    FlooredSpread,
    /// `CTR.SPREAD` that cannot be done: a holder count outside 1 to 1024, a key name too long
    /// to spread, no free slot for a holder on some master, a holder key that already holds a
    /// counter below its floor; or not now (a budget move or transfer to a holder still
    /// unacknowledged: retry shortly).
    SpreadRefused,
    /// A rate limiter's configuration or call that is out of range: `CTR.THROTTLE`'s
    /// `max_burst`, count, period or quantity, `CTR.WINDOW`'s window or buckets.
    InvalidLimit,
    /// `CTR.THROTTLE` on a counter that holds a value or other state, or what a windowed
    /// counter does not take (a floor set after the window, a reconcile, a spread).
    LimitRefused,
    /// The module could not finish a command for a reason that is not the caller's: it could
    /// not store or replicate a write, read the cluster's slot map, or got a reply it did not
    /// expect from a command it ran inside the server. Report it with the text.
    Internal,
}

/// Every module error: the start of its text, with its code (`{}` stands for any text), and its
/// kind, tried in order. The one error text of the module that is not here is the text of an
/// error a command run inside the server (`ZCOUNT`, `XREVRANGE` for `CTR.RECONCILE ... FROM`)
/// replied, passed on as it is.
pub const ERROR_TABLE: &[(&str, ModuleError)] = {
    use ModuleError::*;
    &[
        ("ERR counter overflow", Overflow),
        ("ERR value below floor", BelowFloor),
        ("ERR value above ceiling", AboveCeiling),
        (
            "ERR the ceiling of a spread counter is set before it spreads",
            CeilingOnSpread,
        ),
        (
            "ERR CTR.INCREX takes a counter that is not spread",
            CeilingOnSpread,
        ),
        ("ERR cannot clear a ceiled spread counter", CeilingOnSpread),
        (
            "ERR cannot reconcile a ceiled spread counter",
            CeilingOnSpread,
        ),
        ("ERR refund after a fold", RefundFolded),
        (
            "ERR cannot clear to 0: the counter's floor is above 0",
            BelowFloor,
        ),
        ("ERR not enough rights in this deployment", BelowFloor),
        ("ERR PNC.CLEAR of a floored PN-counter", BelowFloor),
        (
            "ERR token event time is older than the dedup window",
            TokenTooOld,
        ),
        (
            "ERR token event time is too far in the future",
            TooFarInFuture,
        ),
        ("ERR event time is too far in the future", TooFarInFuture),
        ("ERR AT must be a unix time in ms", InvalidTime),
        (
            "ERR event time is at or before the counter's reconciled watermark",
            LateAdd,
        ),
        ("ERR counter keeps no bucket history", HistoryMissing),
        (
            "ERR token already used on this key for another write",
            TokenReused,
        ),
        ("ERR watermark ", BadWatermark),
        (
            "ERR CTR.RECONCILE at a watermark is not supported",
            BadWatermark,
        ),
        ("ERR no such source key", SourceMissing),
        ("ERR token must be 1 to 256 bytes", InvalidToken),
        ("ERR amount must be positive", InvalidAmount),
        ("ERR invalid expire time", InvalidExpire),
        ("ERR invalid PNC state", InvalidState),
        ("ERR invalid CTR state", InvalidState),
        ("ERR invalid CTR effect", InvalidState),
        ("ERR {} is an internal command", InvalidState),
        ("ERR invalid counter operation", InvalidState),
        ("ERR invalid replica id", InvalidState),
        ("ERR malformed gather request", InvalidState),
        (
            "ERR PNC.ADD replayed on a PN-counter without a home record",
            InvalidState,
        ),
        (
            "ERR cannot give rights to this deployment's own replica id",
            InvalidState,
        ),
        (
            "ERR {} is replicated as its effect and never replayed",
            InvalidState,
        ),
        ("ERR invalid version", InvalidState),
        ("ERR too many replica ids", TooManyReplicas),
        ("ERR too many floor or transfer entries", TooManyReplicas),
        ("ERR {} must run on a primary", NotPrimary),
        (
            "ERR CTR.HOLDERS AT is answered by the home's master only",
            NotPrimary,
        ),
        ("ERR syntax error", Syntax),
        ("ERR invalid spread id", Syntax),
        ("ERR FROM SET takes no AT", Syntax),
        ("ERR ENX requires one of EX, PX, EXAT or PXAT", Syntax),
        ("ERR LBOUND must not be greater than UBOUND", Syntax),
        ("ERR BYFLOAT is not supported", Syntax),
        ("ERR wrong number of arguments for ", Syntax),
        ("ERR value is not an integer or out of range", NotAnInteger),
        ("WRONGTYPE ", WrongType),
        ("ERR spread counter total unavailable", SpreadUnavailable),
        ("ERR spread counter read lost its result", SpreadUnavailable),
        ("CLUSTERDOWN spread counter holder slot ", SpreadUnavailable),
        ("TRYAGAIN budget in flight", BudgetInFlight),
        ("TRYAGAIN refund awaits a fold", RefundAwaitsFold),
        ("TRYAGAIN add awaits a fold", AddAwaitsFold),
        ("TRYAGAIN spread counter holder", HolderMoving),
        ("TRYAGAIN spread counter '", HolderMoving),
        ("TRYAGAIN spread counter is moving", HolderMoving),
        ("TRYAGAIN units in flight", HolderMoving),
        ("ERR spread counter holder '", HolderError),
        (
            "ERR spread counter total needs a gather",
            GatherInTransaction,
        ),
        ("ERR a spread counter cannot shrink yet", CannotShrink),
        ("ERR AT is ahead of the home's clock", HoldersAhead),
        (
            "ERR the holder list at that time is not known",
            HoldersUnknown,
        ),
        (
            "TRYAGAIN the replicas of the home's master do not hold",
            HoldersUnreplicated,
        ),
        (
            "ERR this key was a spread counter holder and has been folded back",
            HolderFolded,
        ),
        (
            "ERR {} is not a holder of the spread counter ",
            HolderFolded,
        ),
        (
            "ERR '{}' was renamed onto the name of a holder",
            HolderFolded,
        ),
        (
            "ERR this key was renamed onto the name of a spread counter's holder",
            HolderFolded,
        ),
        ("ERR {} is a holder of the spread counter ", UseHomeKey),
        (
            "ERR the floor of a spread counter is set before it spreads",
            FlooredSpread,
        ),
        ("ERR cannot clear a floored spread counter", FlooredSpread),
        (
            "ERR cannot reconcile a floored spread counter",
            FlooredSpread,
        ),
        ("ERR a floored counter cannot be spread yet", FlooredSpread),
        ("ERR holders must be between", SpreadRefused),
        ("ERR key name too long to spread", SpreadRefused),
        ("ERR no free slot found for a holder", SpreadRefused),
        ("ERR no orphaned spread ", SpreadRefused),
        (
            "ERR a holder key already holds a counter below its floor",
            SpreadRefused,
        ),
        (
            "ERR a holder key already holds a counter past its floor or ceiling",
            SpreadRefused,
        ),
        (
            "ERR a budget move to one of the new holders is still in flight",
            SpreadRefused,
        ),
        (
            "ERR a transfer to that key is still unacknowledged",
            SpreadRefused,
        ),
        (
            "ERR max_burst and quantity must not be negative",
            InvalidLimit,
        ),
        (
            "ERR count_per_period and period_seconds must be positive",
            InvalidLimit,
        ),
        (
            "ERR count_per_period is more than one per nanosecond",
            InvalidLimit,
        ),
        ("ERR window-ms must be", InvalidLimit),
        ("ERR BUCKETS must be 1 to 4096", InvalidLimit),
        ("ERR CTR.THROTTLE needs a key of its own", LimitRefused),
        (
            "ERR a windowed counter keeps no reconcile history",
            LimitRefused,
        ),
        (
            "ERR set a windowed counter's floor before its window",
            LimitRefused,
        ),
        ("ERR a windowed counter takes no ceiling", LimitRefused),
        ("ERR could not store the ", Internal),
        ("ERR could not replicate the write", Internal),
        ("ERR could not read the cluster slot map", Internal),
        ("ERR internal error in redis-ctr", Internal),
        ("ERR unexpected ", Internal),
    ]
};

/// The codes the module's errors start with; a text without one is an `ERR` error whose code
/// was left out.
const CODES: [&str; 4] = ["ERR ", "TRYAGAIN ", "WRONGTYPE ", "CLUSTERDOWN "];

/// True when `text` starts with `pattern`, each `{}` in it standing for any text.
fn starts_like(text: &str, pattern: &str) -> bool {
    let mut parts = pattern.split("{}");
    let Some(rest) = parts.next().and_then(|first| text.strip_prefix(first)) else {
        return false;
    };
    let mut rest = rest;
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

impl ModuleError {
    /// The kind of a server error text (with its code, or without an `ERR` code); None when it
    /// is not one of the module's errors.
    pub fn from_text(text: &str) -> Option<ModuleError> {
        let with_code;
        let text = if CODES.iter().any(|code| text.starts_with(code)) {
            text
        } else {
            with_code = format!("ERR {text}");
            &with_code
        };
        ERROR_TABLE
            .iter()
            .find(|(pattern, _)| starts_like(text, pattern))
            .map(|&(_, kind)| kind)
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
    /// A durable purchase ([`SpreadRouter::with_durable_purchases`](crate::SpreadRouter::with_durable_purchases))
    /// whose grant fewer replicas of the granting master acknowledged in time than asked for:
    /// the grant stands on the master (`value` is its reply, `holder` the key that granted it;
    /// a retry with its token replays it), but a failover before a replica has it may lose it.
    NotDurable {
        /// The key that granted it (the home or a holder of a spread counter).
        holder: Vec<u8>,
        /// The purchase's reply.
        value: i64,
        /// Replicas that acknowledged it (`WAIT`'s reply).
        acknowledged: i64,
        /// Replicas asked for.
        replicas: u32,
    },
    /// A tokened add that was not sent: its token's holder, or the next member of its walk
    /// after a refusal, is on a master that refused a connection, or timed out, moments ago
    /// (left out for a while). A tokened add never passes over a holder (a retry of its token,
    /// from here or another process, must reach the holder that may count it), so it is
    /// refused at once instead of costing a timeout. Nothing was sent to that holder: retry
    /// later with the same token. Also what an untokened add's walk returns, instead of None,
    /// when every member refused but this one, left out, was not asked.
    HolderAway {
        /// The holder not asked.
        holder: Vec<u8>,
    },
}

impl CtrError {
    /// The module error kind, when it is one.
    pub fn module_error(&self) -> Option<ModuleError> {
        match self {
            CtrError::Module(kind, _) => Some(*kind),
            _ => None,
        }
    }

    /// For [`ModuleError::RefundFolded`]: the add that gives the grant's units back at the
    /// home, once, which the error's text ends with (`CTR.ADD <home> <units> TOKEN <token>`):
    /// `(units, token)`. None for another error, or the text of a module from before it.
    pub fn refund_sent_home(&self) -> Option<(i64, String)> {
        let CtrError::Module(ModuleError::RefundFolded, text) = self else {
            return None;
        };
        let mut words = text.rsplit(' ');
        let (token, keyword, units) = (words.next()?, words.next()?, words.next()?);
        let units = units.parse().ok().filter(|u: &i64| *u > 0)?;
        (keyword == "TOKEN" && token.starts_with("ctr-refund:")).then(|| (units, token.to_string()))
    }

    /// True for errors after which the command may or may not have run (a lost connection or
    /// a timeout), and for a tokened add not sent because its holder is out of reach
    /// ([`CtrError::HolderAway`]): what a retry with the same token is for.
    pub fn is_connection_error(&self) -> bool {
        match self {
            CtrError::HolderAway { .. } => true,
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
            CtrError::NotDurable {
                holder,
                value,
                acknowledged,
                replicas,
            } => write!(
                f,
                "purchase granted on '{}' (value {value}) but acknowledged by {acknowledged} of \
                 the {replicas} replicas asked for in time: a failover may still lose it",
                String::from_utf8_lossy(holder)
            ),
            CtrError::HolderAway { holder } => write!(
                f,
                "not sent: the holder '{}' is on a master out of reach for now; retry later \
                 (with the same token, if any)",
                String::from_utf8_lossy(holder)
            ),
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

#[cfg(test)]
mod tests {
    use super::*;

    const MODULE_SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../src");
    /// Error codes a Redis server replies with: a string literal starting with one and a space
    /// is an error text.
    const REDIS_ERROR_CODES: &[&str] = &[
        "ERR",
        "TRYAGAIN",
        "WRONGTYPE",
        "CLUSTERDOWN",
        "BUSY",
        "BUSYKEY",
        "NOPERM",
        "LOADING",
        "READONLY",
        "MASTERDOWN",
        "CROSSSLOT",
        "NOSCRIPT",
        "EXECABORT",
        "NOAUTH",
        "MISCONF",
        "OOM",
        "NOREPLICAS",
        "NOTBUSY",
        "MOVED",
        "ASK",
        "UNBLOCKED",
    ];
    /// An error of a command the module runs inside the server, passed on as it replied.
    /// Texts that are no module error of their own: an error passed on, and the server's own
    /// redirection (`MOVED`, which the `redis` crate reads as `ErrorKind::Moved`).
    const PASSED_ON: &[&str] = &["ERR {e}", "MOVED {slot} {}:{}"];

    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("the module's source") {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    rust_files(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Every error text in the module's source (outside tests and the separate binaries), as
    /// written (with its format placeholders), with the file it is in.
    fn module_error_texts() -> Vec<(String, String)> {
        let mut files = Vec::new();
        rust_files(std::path::Path::new(MODULE_SRC), &mut files);
        files.sort();
        let mut texts = Vec::new();
        for file in files {
            let source = std::fs::read_to_string(&file).unwrap();
            let source = source.split("#[cfg(test)]").next().unwrap_or_default();
            let code: String = source
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n")
                .replace("\\\n", "\u{0}");
            // A literal continued on the next line (a `\` before the line break).
            let code: String = code
                .split('\u{0}')
                .enumerate()
                .map(|(i, piece)| if i == 0 { piece } else { piece.trim_start() })
                .collect();
            for code_word in REDIS_ERROR_CODES {
                let opening = format!("\"{code_word} ");
                for (at, _) in code.match_indices(&opening) {
                    let body = &code[at + 1..];
                    let mut end = 0;
                    let mut escaped = false;
                    for (i, c) in body.char_indices() {
                        match c {
                            '\\' if !escaped => escaped = true,
                            '"' if !escaped => {
                                end = i;
                                break;
                            }
                            _ => escaped = false,
                        }
                    }
                    let name = file.strip_prefix(MODULE_SRC).unwrap_or(&file);
                    texts.push((body[..end].to_string(), name.display().to_string()));
                }
            }
        }
        texts
    }

    /// `text` with each `{...}` placeholder filled.
    fn sample(text: &str) -> String {
        let mut out = String::new();
        let mut depth = 0;
        for c in text.chars() {
            match c {
                '{' => {
                    if depth == 0 {
                        out.push('x');
                    }
                    depth += 1;
                }
                '}' if depth > 0 => depth -= 1,
                c if depth == 0 => out.push(c),
                _ => {}
            }
        }
        out
    }

    #[test]
    fn every_module_error_text_has_its_kind() {
        let texts = module_error_texts();
        assert!(
            texts.len() > 40,
            "the module's error texts were found: {texts:?}"
        );
        let mut unmapped = Vec::new();
        for (text, file) in &texts {
            if PASSED_ON.contains(&text.as_str()) {
                continue;
            }
            let sample = sample(text);
            match ModuleError::from_text(&sample) {
                None => unmapped.push(format!("{file}: {text}")),
                Some(kind) => {
                    if let Some(bare) = sample.strip_prefix("ERR ") {
                        assert_eq!(ModuleError::from_text(bare), Some(kind), "{text}");
                    }
                }
            }
        }
        assert!(
            unmapped.is_empty(),
            "module errors without a kind: {unmapped:#?}"
        );
    }

    /// The variants, read from this file's enum.
    fn variants() -> Vec<String> {
        let source = include_str!("error.rs");
        let body = source
            .split("pub enum ModuleError {")
            .nth(1)
            .and_then(|rest| rest.split("\n}").next())
            .unwrap();
        body.lines()
            .map(str::trim)
            .filter(|line| !line.starts_with("//") && line.ends_with(','))
            .map(|line| line.trim_end_matches(',').to_string())
            .collect()
    }

    #[test]
    fn every_kind_is_in_the_table_and_the_readme() {
        let variants = variants();
        assert!(variants.len() > 20, "{variants:?}");
        let readme = include_str!("../README.md");
        for variant in &variants {
            assert!(
                ERROR_TABLE
                    .iter()
                    .any(|(_, kind)| format!("{kind:?}") == *variant),
                "{variant} is in no entry of ERROR_TABLE"
            );
            assert!(
                readme.contains(&format!("`{variant}`")),
                "{variant} is not in the README"
            );
        }
    }

    #[test]
    fn patterns_match_with_placeholders_and_codes() {
        assert!(starts_like(
            "ERR PNC.ADD must run on a primary: x",
            "ERR {} must run on a primary"
        ));
        assert!(!starts_like(
            "ERR PNC.ADD ran",
            "ERR {} must run on a primary"
        ));
        assert_eq!(
            ModuleError::from_text("ERR k is a holder of the spread counter h: use the home key"),
            Some(ModuleError::UseHomeKey)
        );
        assert_eq!(
            ModuleError::from_text("AT must be a unix time in ms (not negative)"),
            Some(ModuleError::InvalidTime)
        );
        assert_eq!(ModuleError::from_text("ERR unknown command 'x'"), None);
    }

    #[test]
    fn a_folded_holders_refund_names_the_add_at_the_home() {
        let text = "ERR refund after a fold: the grant's 3 units went home with the fold; give \
                    them back there, once: CTR.ADD {my home} 3 TOKEN ctr-refund:00000000000000ab";
        let e = CtrError::Module(ModuleError::RefundFolded, text.into());
        let add = (3, "ctr-refund:00000000000000ab".to_string());
        assert_eq!(e.refund_sent_home(), Some(add));
        let older = "ERR refund after a fold: this holder was folded back (add the units)";
        let e = CtrError::Module(ModuleError::RefundFolded, older.into());
        assert_eq!(e.refund_sent_home(), None, "a module from before");
        let e = CtrError::Module(ModuleError::BudgetInFlight, text.into());
        assert_eq!(e.refund_sent_home(), None, "another error");
    }
}
