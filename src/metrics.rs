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

    /// For counters only ever changed by commands (the main thread, one writer): a plain load
    /// and store, without the locked read-modify-write of `incr`.
    pub fn incr_from_command(&self) {
        self.0.store(self.0.load(Relaxed).wrapping_add(1), Relaxed);
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

    /// For gauges recomputed by their one writer.
    pub fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
    }

    /// For maxima.
    pub fn raise_to(&self, v: u64) {
        self.0.fetch_max(v, Relaxed);
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
/// CTR.DECRFLOOR refusals answered TRYAGAIN because budget was still travelling (not final,
/// not recorded against a token).
pub static DECREMENTS_AWAITING_BUDGET: Counter = Counter::new();
/// Commands that waited in the server for units in flight (`ctr.purchase-wait-ms`), and those
/// of them that reached the bound (then answered as they answer: `TRYAGAIN` if still waiting).
pub static COMMANDS_WAITED: Counter = Counter::new();
pub static WAITS_PAST_BOUND: Counter = Counter::new();
/// Final CTR.DECRFLOOR refusals that may be false: by a holder of a floored spread counter,
/// with no fresh bound of the whole counter's headroom showing the amount beyond it (what the
/// CtrFalseRefusals alert reads). Also counted in `DECREMENTS_REFUSED`.
pub static DECREMENTS_REFUSED_UNPROVEN: Counter = Counter::new();
/// Holders of a spread home moved to another database (`MOVE`) that could not follow it: the
/// destination already had a key of that name.
pub static HOLDERS_LEFT_BEHIND: Counter = Counter::new();
/// Spread homes restored under another name while the home lived, detached into counters of
/// their own units.
pub static RESTORED_COPIES_DETACHED: Counter = Counter::new();
/// Outbox entries dropped from keys restored (`RESTORE`) under a name they were not debited at
/// (`Counter::drop_foreign_transfers`).
pub static RESTORED_TRANSFERS_DROPPED: Counter = Counter::new();
/// Negative CTR.ADDs refused because they would cross a counter's floor.
pub static ADDS_REFUSED_BY_FLOOR: Counter = Counter::new();
/// Writes refused because their event time was at or before a reconciled watermark.
pub static LATE_ADDS: Counter = Counter::new();
/// Reconciles that changed a counter (a retry that changes nothing, or a START, is not
/// counted), the total and largest absolute drift they found, and a
/// histogram of drift sizes (|drift| = 0, 1-9, 10-99, 100-999, >= 1000).
pub static RECONCILES: Counter = Counter::new();
pub static DRIFT_TOTAL_ABS: Counter = Counter::new();
pub static DRIFT_LARGEST_ABS: Counter = Counter::new();
pub static DRIFT_HISTOGRAM: [Counter; 5] = [
    Counter::new(),
    Counter::new(),
    Counter::new(),
    Counter::new(),
    Counter::new(),
];

/// Records one reconcile's drift in the module-wide figures.
pub fn record_drift(drift: i128) {
    let size = u64::try_from(drift.unsigned_abs()).unwrap_or(u64::MAX);
    RECONCILES.incr();
    DRIFT_TOTAL_ABS.add(size);
    DRIFT_LARGEST_ABS.raise_to(size);
    let bucket = match size {
        0 => 0,
        1..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        _ => 4,
    };
    DRIFT_HISTOGRAM[bucket].incr();
}

/// Tokens and ledger entries released by the idle sweep, and the counters it swept.
pub static SWEEP_RELEASED: Counter = Counter::new();
pub static SWEEP_COUNTERS: Counter = Counter::new();
/// The longest tick of the idle sweep (µs of the main thread's CPU time) and the number of ticks that did
/// any work.
pub static SWEEP_LONGEST_TICK_US: Counter = Counter::new();
pub static SWEEP_TICKS: Counter = Counter::new();

/// PNC.MERGE calls that were accepted (including ones that changed nothing).
pub static PNC_MERGES: Counter = Counter::new();
/// Bytes of the state blobs those merges carried.
pub static PNC_MERGED_BYTES: Counter = Counter::new();
/// PN-Counter states refused: malformed or out-of-range PNC.MERGE / PNC.SETSTATE blobs, merges
/// whose result would leave the safe range, and corrupt RESTORE payloads.
pub static PNC_REFUSED_BLOBS: Counter = Counter::new();
/// PNC.DECRFLOOR decrements granted from this deployment's rights, and refused for lack of
/// them (token replays not counted).
pub static PNC_DECR_GRANTED: Counter = Counter::new();
pub static PNC_DECR_REFUSED: Counter = Counter::new();

/// Spread counters: CTR.SPREAD calls that added holders; gathered reads of a home key (started,
/// failed for any reason, failed by timeout); gather requests this node answered for other
/// masters; and a histogram of gather latencies (< 1 ms, 1-9, 10-99, 100-999, >= 1000 ms).
pub static SPREADS: Counter = Counter::new();
/// Of those, the ones a counter did itself (auto-spread).
pub static AUTO_SPREADS: Counter = Counter::new();
pub static GATHERS: Counter = Counter::new();
pub static GATHER_FAILURES: Counter = Counter::new();
pub static GATHER_TIMEOUTS: Counter = Counter::new();
pub static GATHER_REQUESTS_SERVED: Counter = Counter::new();
/// Holders a gather asked once more where a fresh slot map says they are served now, after a
/// master said it does not serve them (`runtime::spread_gather`).
pub static GATHER_REROUTES: Counter = Counter::new();
/// Reads that gathered again a moment later, a holder's slot being handed over between two
/// masters when they first gathered (`runtime::read_handoff`).
pub static GATHER_RETRIES: Counter = Counter::new();
/// `COPY`s of a counter under a holder's name refused (`persist::ctr_type`): a holder is made
/// by the spread protocol only.
pub static HOLDER_COPIES_REFUSED: Counter = Counter::new();
/// Counters renamed onto a holder's name, marked strays; and strays renamed or restored under
/// another name, unmarked (`runtime::strays`).
pub static STRAYS_MARKED: Counter = Counter::new();
pub static STRAYS_UNMARKED: Counter = Counter::new();
/// Read links (`runtime::read_links`): gather requests sent on them, requests that went over
/// the bus after their link failed, and links made.
pub static LINK_REQUESTS: Counter = Counter::new();
pub static LINK_FALLBACKS: Counter = Counter::new();
pub static LINKS_OPENED: Counter = Counter::new();
/// Holder checks (`runtime::holder_check`): first writes of holders that asked the home's
/// master, those refused as look-alikes, and those that went on unchecked at their deadline.
pub static HOLDER_CHECKS: Counter = Counter::new();
/// Timer runs skipped and bus messages dropped while the server paused writes
/// (`runtime::replication_gate::paused`).
pub static PAUSED_SKIPS: Counter = Counter::new();
pub static HOLDER_CHECKS_REFUSED: Counter = Counter::new();
pub static HOLDER_CHECK_TIMEOUTS: Counter = Counter::new();
/// Holder check requests asked again at the check's tick (no answer yet: a message may be lost).
pub static HOLDER_CHECK_RESENDS: Counter = Counter::new();
/// Holder admission (`runtime::holder_admission`): planned holder names a grow asked about,
/// those found taken (the grow named others), and the grows that waited for the answers.
pub static HOLDER_NAMES_ASKED: Counter = Counter::new();
pub static HOLDER_NAMES_TAKEN: Counter = Counter::new();
pub static GROWS_WAITED: Counter = Counter::new();
pub static GATHER_LATENCY_HISTOGRAM: [Counter; 5] = [
    Counter::new(),
    Counter::new(),
    Counter::new(),
    Counter::new(),
    Counter::new(),
];

/// Folds: holders a shrinking CTR.SPREAD sent back to their home. Transfers (see
/// `counter::transfer`): started on this master (debits, seals included), credits applied
/// here, outbox entries acknowledged here, credits sent again after no answer, and credits
/// received again after they had been applied (acknowledged, changing nothing).
pub static FOLDS: Counter = Counter::new();
pub static TRANSFERS_STARTED: Counter = Counter::new();
pub static TRANSFERS_CREDITED: Counter = Counter::new();
pub static TRANSFERS_ACKED: Counter = Counter::new();
pub static TRANSFERS_RESENT: Counter = Counter::new();
pub static TRANSFERS_DUPLICATE_CREDITS: Counter = Counter::new();
/// Credits this node refused as a receiver (not a transfer it expects: forged, copied, or for
/// a fold its home no longer lists).
pub static TRANSFERS_REFUSED: Counter = Counter::new();
/// Budget moves rolled back by their giver after the receiver refused them.
pub static TRANSFERS_ROLLED_BACK: Counter = Counter::new();
/// Budget moves of floored spread counters across masters: started here by a giver asked to
/// give, and asks dropped because the pair still had a move unacknowledged (or the debit
/// failed); the next refusal asks again.
pub static BUDGET_MOVES: Counter = Counter::new();
pub static BUDGET_MOVES_SKIPPED: Counter = Counter::new();
/// Collections of a gone spread home's holders (see `runtime::spread_collect`): started on
/// this master (one per spread and carried home name), pending now (a gauge), abandoned (not
/// every holder answered within `ctr.collect-timeout-ms`, or past the memory cap), and holder
/// keys this master deleted for one (as the receiver).
pub static COLLECTIONS: Counter = Counter::new();
pub static COLLECTIONS_PENDING: Counter = Counter::new();
pub static COLLECTIONS_ABANDONED: Counter = Counter::new();
pub static HOLDERS_COLLECTED: Counter = Counter::new();
/// The orphan audit (see `runtime::spread_audit`): walks of this master's keys finished,
/// questions it asked about the spreads of the holders it found, spreads it reported as
/// orphans (answered gone past the grace; their holders stay), the spreads reported now (a
/// gauge), and holder keys deleted on an operator's `CTR.ORPHANS DELETE` (they count in
/// `HOLDERS_COLLECTED` too).
pub static AUDIT_PASSES: Counter = Counter::new();
pub static AUDIT_QUESTIONS: Counter = Counter::new();
pub static AUDIT_ORPHANS: Counter = Counter::new();
pub static ORPHANS_REPORTED: Counter = Counter::new();
pub static ORPHAN_HOLDERS_DELETED: Counter = Counter::new();
/// Requests for acknowledgements this master sent its replicas because a send waited for them
/// (`runtime::replication_gate`).
pub static ACK_REQUESTS: Counter = Counter::new();
/// Atomic slot migrations (Valkey 9 `CLUSTER MIGRATESLOTS`, Redis 8.4+ `CLUSTER MIGRATION
/// IMPORT`, see `runtime::slot_migration`) this node took part in: imports and exports
/// started, and of those, ended without moving the slots (failed or cancelled); a gauge of
/// the ones under way (module work on keys of their slots waits for them).
pub static SLOT_IMPORTS: Counter = Counter::new();
pub static SLOT_IMPORTS_ABORTED: Counter = Counter::new();
pub static SLOT_EXPORTS: Counter = Counter::new();
pub static SLOT_EXPORTS_ABORTED: Counter = Counter::new();
pub static SLOT_MIGRATIONS_IN_PROGRESS: Counter = Counter::new();

/// Records the latency of one successful gather.
pub fn record_gather_latency(ms: i64) {
    let bucket = match ms {
        ..=0 => 0,
        1..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        _ => 4,
    };
    GATHER_LATENCY_HISTOGRAM[bucket].incr();
}

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
        ("decrements_awaiting_budget", &DECREMENTS_AWAITING_BUDGET),
        ("commands_waited", &COMMANDS_WAITED),
        ("waits_past_bound", &WAITS_PAST_BOUND),
        ("decrements_refused_unproven", &DECREMENTS_REFUSED_UNPROVEN),
        ("holders_left_behind", &HOLDERS_LEFT_BEHIND),
        ("restored_copies_detached", &RESTORED_COPIES_DETACHED),
        ("restored_transfers_dropped", &RESTORED_TRANSFERS_DROPPED),
        ("adds_refused_by_floor", &ADDS_REFUSED_BY_FLOOR),
        ("late_adds", &LATE_ADDS),
        ("reconciles", &RECONCILES),
        ("drift_total_abs", &DRIFT_TOTAL_ABS),
        ("drift_largest_abs", &DRIFT_LARGEST_ABS),
        ("drift_0", &DRIFT_HISTOGRAM[0]),
        ("drift_1_9", &DRIFT_HISTOGRAM[1]),
        ("drift_10_99", &DRIFT_HISTOGRAM[2]),
        ("drift_100_999", &DRIFT_HISTOGRAM[3]),
        ("drift_1000_plus", &DRIFT_HISTOGRAM[4]),
        ("sweep_released", &SWEEP_RELEASED),
        ("sweep_counters", &SWEEP_COUNTERS),
        ("sweep_ticks", &SWEEP_TICKS),
        ("sweep_longest_tick_us", &SWEEP_LONGEST_TICK_US),
        ("pnc_merges", &PNC_MERGES),
        ("pnc_merged_bytes", &PNC_MERGED_BYTES),
        ("pnc_refused_blobs", &PNC_REFUSED_BLOBS),
        ("pnc_decrements_granted", &PNC_DECR_GRANTED),
        ("pnc_decrements_refused", &PNC_DECR_REFUSED),
        ("spreads", &SPREADS),
        ("auto_spreads", &AUTO_SPREADS),
        ("gathers", &GATHERS),
        ("gather_failures", &GATHER_FAILURES),
        ("gather_timeouts", &GATHER_TIMEOUTS),
        ("gather_requests_served", &GATHER_REQUESTS_SERVED),
        ("gather_reroutes", &GATHER_REROUTES),
        ("gather_retries", &GATHER_RETRIES),
        ("holder_copies_refused", &HOLDER_COPIES_REFUSED),
        ("strays_marked", &STRAYS_MARKED),
        ("strays_unmarked", &STRAYS_UNMARKED),
        ("read_link_requests", &LINK_REQUESTS),
        ("read_link_fallbacks", &LINK_FALLBACKS),
        ("read_links_opened", &LINKS_OPENED),
        ("holder_checks", &HOLDER_CHECKS),
        ("paused_skips", &PAUSED_SKIPS),
        ("holder_checks_refused", &HOLDER_CHECKS_REFUSED),
        ("holder_check_timeouts", &HOLDER_CHECK_TIMEOUTS),
        ("holder_check_resends", &HOLDER_CHECK_RESENDS),
        ("holder_names_asked", &HOLDER_NAMES_ASKED),
        ("holder_names_taken", &HOLDER_NAMES_TAKEN),
        ("grows_waited", &GROWS_WAITED),
        ("gather_latency_0ms", &GATHER_LATENCY_HISTOGRAM[0]),
        ("gather_latency_1_9ms", &GATHER_LATENCY_HISTOGRAM[1]),
        ("gather_latency_10_99ms", &GATHER_LATENCY_HISTOGRAM[2]),
        ("gather_latency_100_999ms", &GATHER_LATENCY_HISTOGRAM[3]),
        ("gather_latency_1000ms_plus", &GATHER_LATENCY_HISTOGRAM[4]),
        ("folds", &FOLDS),
        ("transfers_started", &TRANSFERS_STARTED),
        ("transfers_credited", &TRANSFERS_CREDITED),
        ("transfers_acked", &TRANSFERS_ACKED),
        ("transfers_resent", &TRANSFERS_RESENT),
        ("transfers_duplicate_credits", &TRANSFERS_DUPLICATE_CREDITS),
        ("transfers_refused", &TRANSFERS_REFUSED),
        ("transfers_rolled_back", &TRANSFERS_ROLLED_BACK),
        ("budget_moves", &BUDGET_MOVES),
        ("budget_moves_skipped", &BUDGET_MOVES_SKIPPED),
        ("collections", &COLLECTIONS),
        ("collections_pending", &COLLECTIONS_PENDING),
        ("collections_abandoned", &COLLECTIONS_ABANDONED),
        ("holders_collected", &HOLDERS_COLLECTED),
        ("audit_passes", &AUDIT_PASSES),
        ("audit_questions", &AUDIT_QUESTIONS),
        ("audit_orphans", &AUDIT_ORPHANS),
        ("orphans_reported", &ORPHANS_REPORTED),
        ("orphan_holders_deleted", &ORPHAN_HOLDERS_DELETED),
        ("replica_ack_requests", &ACK_REQUESTS),
        ("slot_imports", &SLOT_IMPORTS),
        ("slot_imports_aborted", &SLOT_IMPORTS_ABORTED),
        ("slot_exports", &SLOT_EXPORTS),
        ("slot_exports_aborted", &SLOT_EXPORTS_ABORTED),
        ("slot_migrations_in_progress", &SLOT_MIGRATIONS_IN_PROGRESS),
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
        // The metrics script's watch list (`ctr.metrics-keys`), in a section of its own: the
        // stats are all integers. Line breaks cannot be in it (a key name with one cannot be
        // listed), so the INFO text stays one field per line.
        let watched = crate::config::METRICS_KEYS.get().replace(['\r', '\n'], " ");
        section
            .build_section()?
            .add_section("watch")
            .field("watch_keys", watched)?
            .build_section()?
            .build_info()?;
        Ok(())
    }
}
