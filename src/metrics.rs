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

/// Adds applied by CTR.ADD (not counting refused ones).
pub static ADDS: Counter = Counter::new();

/// PNC.MERGE calls that were accepted (including ones that changed nothing).
pub static PNC_MERGES: Counter = Counter::new();
/// Bytes of the state blobs those merges carried.
pub static PNC_MERGED_BYTES: Counter = Counter::new();
/// PN-Counter states refused: malformed or out-of-range PNC.MERGE / PNC.SETSTATE blobs, merges
/// whose result would leave the safe range, and corrupt RESTORE payloads.
pub static PNC_REFUSED_BLOBS: Counter = Counter::new();

/// (INFO field name, counter), in display order.
pub fn all() -> Vec<(&'static str, &'static Counter)> {
    vec![
        ("adds", &ADDS),
        ("pnc_merges", &PNC_MERGES),
        ("pnc_merged_bytes", &PNC_MERGED_BYTES),
        ("pnc_refused_blobs", &PNC_REFUSED_BLOBS),
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
