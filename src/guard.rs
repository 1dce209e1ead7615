//! Panic guards for the callbacks the server calls outside a command: timers, cluster bus
//! receivers, the server and keyspace events, the scan callbacks and a blocked read's reply,
//! timeout, disconnect and free callbacks, and the data types' callbacks but `rdb_save` and
//! `aof_rewrite` (the type's own `NULL`, 0 or nothing then). A panic there is a defect; unwinding out of an
//! `extern "C"` function aborts the server, so each callback runs its body through [`guard`],
//! which contains the panic and writes it to the server log at warning level
//! (`ctr: panic in callback <name> ...`). Commands have their own guard
//! (`commands::dispatch`: an error reply).
//!
//! `ctr.debug-panic-in` (a load argument only, for tests) names callbacks that panic on
//! their next run, so that a test can see each guard hold. Unset, the cost is one relaxed
//! atomic load per callback run.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::raw;

use crate::ffi::Ctx;

/// Every guarded callback, by the name the log and `ctr.debug-panic-in` use.
pub const CALLBACKS: &[&str] = &[
    // Timers.
    "sweep",
    "transfer-tick",
    "collect-tick",
    "audit-tick",
    "gather-resend",
    "gather-local-reads",
    "gather-start",
    // The read links' delivery timer, and their sockets' event loop callback.
    "link-deliver",
    "link-io",
    "floor-poll-timeout",
    "rebalance",
    "move-follow",
    // Scan callbacks (the idle sweep's, the flush event's walk of spread homes, the orphan
    // audit's walk of holders).
    "sweep-scan",
    "flush-scan",
    "audit-scan",
    // Server and keyspace events.
    "flush",
    "keyspace",
    "slot-migration",
    // A blocked gathered read's callbacks.
    "gather-reply",
    "gather-timeout",
    "gather-disconnect",
    "gather-free",
    // A holder check's timer (its writes wait in the waiter).
    "holder-check-timer",
    // A command waiting in the server for units in flight: the tick, and its blocked
    // client's callbacks.
    "waiter-timer",
    "waiter-reply",
    "waiter-disconnect",
    "waiter-free",
    // The listing gate's asks for the replicas' acknowledgement.
    "listing-gate-ask",
    // The tick of reads parked while a slot is handed over.
    "read-handoff-timer",
    // The job that judges a restored key (Redis 7.2+, Valkey; 7.0 judges it in the keyspace
    // event).
    "restore-judge",
    // Cluster bus receivers, one per file that owns message kinds.
    "bus-gather",
    "bus-collect",
    "bus-audit",
    "bus-transfer",
    "bus-floor-moves",
    "bus-holder-check",
    "bus-holder-admission",
    // The holder admission's timer (asks again, answers this master's own names).
    "admission-timer",
    // The data types' callbacks (CTR and PNC alike; `free` also guards `free_effort`). Not
    // `rdb_save` and `aof_rewrite`: a contained panic would write a wrong or unreadable value;
    // they run in the fork child of BGSAVE and BGREWRITEAOF, where an abort fails that save.
    "type-rdb-load",
    "type-mem-usage",
    "type-digest",
    "type-free",
    "type-copy",
    "type-unlink",
];

/// The load argument's name.
pub const DEBUG_PANIC_IN_CONFIG: &str = "debug-panic-in";

/// Bit i set: `CALLBACKS[i]` panics on its next run (then the bit is cleared).
static PANIC_IN: AtomicU64 = AtomicU64::new(0);

const _: () = assert!(CALLBACKS.len() <= 64);

/// Parses `ctr.debug-panic-in`: callback names separated by commas (or `all`); empty = none.
pub fn parse_panic_in(value: &str) -> Result<u64, String> {
    let mut bits = 0u64;
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name.eq_ignore_ascii_case("all") {
            bits |= u64::MAX >> (64 - CALLBACKS.len());
            continue;
        }
        let Some(i) = CALLBACKS.iter().position(|c| c.eq_ignore_ascii_case(name)) else {
            return Err(format!(
                "unknown callback {name:?} (known: {})",
                CALLBACKS.join(", ")
            ));
        };
        bits |= 1 << i;
    }
    Ok(bits)
}

/// Arms the callbacks `ctr.debug-panic-in` names (from the module's load).
pub fn set_panic_in(bits: u64) {
    PANIC_IN.store(bits, Relaxed);
}

/// Runs a callback's body; a panic in it is contained and logged at warning level. None when
/// it panicked (the callback then does what it must without the body's result).
#[inline]
pub fn guard<T>(
    ctx: *mut raw::RedisModuleCtx,
    name: &'static str,
    body: impl FnOnce() -> T,
) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(|| {
        if PANIC_IN.load(Relaxed) != 0 {
            debug_panic(name);
        }
        body()
    })) {
        Ok(v) => Some(v),
        Err(payload) => {
            log_panic(ctx, &format!("callback {name}"), payload.as_ref());
            None
        }
    }
}

/// Panics when `name` is armed, once.
#[cold]
#[inline(never)]
fn debug_panic(name: &str) {
    let Some(i) = CALLBACKS.iter().position(|c| *c == name) else {
        return;
    };
    let bit = 1u64 << i;
    if PANIC_IN.fetch_and(!bit, Relaxed) & bit != 0 {
        panic!("ctr.debug-panic-in {name}");
    }
}

thread_local! {
    /// Where the last panic on this thread happened (file:line), noted by the panic hook.
    static LAST_PANIC_AT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Replaces the default panic hook (from the module's load) with one that only notes where the
/// panic happened, for [`log_panic`]: the default hook writes to the server's stderr and, with
/// `RUST_BACKTRACE` set, symbolizes a backtrace inside the server process, which aborted
/// Valkey 8.1 (Debian 13's libraries) before the panic could be contained.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()));
        LAST_PANIC_AT.with(|last| *last.borrow_mut() = at);
    }));
}

/// Writes a contained panic to the server log at warning level: what panicked (`callback
/// <name>`, `command <name>`), its message and where.
#[cold]
#[inline(never)]
pub fn log_panic(ctx: *mut raw::RedisModuleCtx, what: &str, payload: &(dyn std::any::Any + Send)) {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    let at = LAST_PANIC_AT
        .with(|last| last.borrow_mut().take())
        .map_or(String::new(), |at| format!(" at {at}"));
    Ctx { ptr: ctx }.log_warning(&format!(
        "ctr: panic in {what}, contained (a defect in redis-ctr, please report it): {message}{at}"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_their_bits_and_unknown_names_are_refused() {
        assert_eq!(parse_panic_in(""), Ok(0));
        assert_eq!(parse_panic_in("sweep"), Ok(1));
        let rebalance = CALLBACKS.iter().position(|&n| n == "rebalance").unwrap();
        assert_eq!(parse_panic_in("sweep, rebalance"), Ok(1 | 1 << rebalance));
        assert_eq!(
            parse_panic_in("all").map(u64::count_ones),
            Ok(CALLBACKS.len() as u32)
        );
        assert!(parse_panic_in("sweep,nope").is_err());
        let mut sorted = CALLBACKS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), CALLBACKS.len());
    }
}
