//! Module-wide counters shown by `INFO ctr` (section `ctr_stats`). Each is changed in exactly
//! one place, by the command or callback that does the thing it counts.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    pub fn incr(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }

    /// For gauges: never wraps below zero.
    pub fn sub(&self, n: u64) {
        let _ = self
            .0
            .fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_sub(n)));
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Adds applied by CTR.ADD (not counting refused ones or ignored retries).
pub static ADDS: Counter = Counter::new();
/// Retries recognised by their token and ignored (CTR.ADD, CTR.CLEAR).
pub static DUPLICATES_IGNORED: Counter = Counter::new();
/// Tokens refused because their event time was too old or too far in the future.
pub static TOKENS_REFUSED: Counter = Counter::new();
/// Gauge: tokens held in memory by all counters (live or awaiting their sweep).
pub static TOKENS_HELD: Counter = Counter::new();
/// Shard-count doublings and halvings decided by this server.
pub static PROMOTIONS: Counter = Counter::new();
pub static DEMOTIONS: Counter = Counter::new();
/// Resets applied by CTR.CLEAR.
pub static CLEARS: Counter = Counter::new();
/// CTR.DECRFLOOR decrements granted and refused (retries replayed from the ledger count as
/// duplicates instead).
pub static DECREMENTS_GRANTED: Counter = Counter::new();
pub static DECREMENTS_REFUSED: Counter = Counter::new();
/// Negative CTR.ADDs refused because they would cross a counter's floor.
pub static ADDS_REFUSED_BY_FLOOR: Counter = Counter::new();

/// (INFO field name, counter), in display order.
pub fn all() -> Vec<(&'static str, &'static Counter)> {
    vec![
        ("adds", &ADDS),
        ("duplicates_ignored", &DUPLICATES_IGNORED),
        ("tokens_refused", &TOKENS_REFUSED),
        ("tokens_held", &TOKENS_HELD),
        ("promotions", &PROMOTIONS),
        ("demotions", &DEMOTIONS),
        ("clears", &CLEARS),
        ("decrements_granted", &DECREMENTS_GRANTED),
        ("decrements_refused", &DECREMENTS_REFUSED),
        ("adds_refused_by_floor", &ADDS_REFUSED_BY_FLOOR),
    ]
}

#[cfg(all(feature = "module", not(test)))]
mod info {
    use redis_module::{InfoContext, RedisResult};
    use redis_module_macros::info_command_handler;

    #[info_command_handler]
    fn ctr_info(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
        let mut section = ctx.builder().add_section("stats");
        for (name, counter) in super::all() {
            section = section.field(name, counter.get().to_string())?;
        }
        section.build_section()?.build_info()?;
        Ok(())
    }
}
