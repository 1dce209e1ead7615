//! Atomic slot migration: Valkey 9.0+ (`CLUSTER MIGRATESLOTS ... NODE id`, run on the source)
//! and Redis 8.4+ (`CLUSTER MIGRATION IMPORT start end`, run on the target) move whole slots
//! between masters as a snapshot followed by a stream of the writes made meanwhile, and then
//! hand the slots over in one step. How each server does it, as read in their sources and
//! measured on Valkey 9.1.2 and Redis 8.6.3 (docs/CLUSTER.md, "Atomic slot migration"):
//!
//! - **Transfer.** Valkey's snapshot is in AOF form (a forked child runs the type's
//!   `aof_rewrite`: `CTR.SETSTATE`, `PNC.SETSTATE`); Redis's is `RESTORE` payloads (the type's
//!   `rdb_save`/`rdb_load`). Then the writes made on the source meanwhile arrive as the source
//!   propagated them (`CTR.APPLY`, `CTR.SETSTATE`, a verbatim `CTR.ADD`...). On the target one
//!   client runs all of it, and both servers mark it as a master's client (`REPLICATED`;
//!   Valkey adds `SLOT_IMPORT_CLIENT`), so the internal commands pass the module's gate and
//!   replayed writes decide nothing. The module's shortcut that skips the flags on a primary
//!   is off while an import runs on the node ([`crate::ffi::set_importing`]): with it, Valkey
//!   failed every migration of a slot holding a counter (`CTR.SETSTATE` refused as internal).
//! - **Events.** The source sees an export start, then its completion once it learns that the
//!   target owns the slots (or its abort); the target an import start, then its completion at
//!   the handoff (or its abort). Valkey then deletes the keys the node no longer owns with a
//!   `del` keyspace event each (the source after a completed export, the target after an
//!   aborted import); Redis trims them in the background without any per-key event (a module
//!   subscribed to `key_trimmed` would switch it to a slower trim with one such event per key;
//!   this module does not subscribe). Neither is a user's `DEL`: the collector of gone spread
//!   homes checks that the home's slot is still served here before it collects anything
//!   (`spread_collect`), and neither node serves the slot then.
//! - **Visibility.** Keys being imported are in the target's keyspace before the handoff, but
//!   every path of the module that reads or writes a key for another master goes through the
//!   server's routing check (`RM_Call`), which redirects them: they are not served there yet.
//!
//! The rules this file gives the rest of the glue (each a few lines where it applies):
//! 1. **Module work waits for the move** ([`moving_key`]): while a slot is exported or imported
//!    here, the module's own writes to its keys (seals, credits and their answers, budget
//!    gives, collections, a clear of a spread home, idle sweeps, a restored copy's detach) are
//!    not done, as for a key this node does not serve: their senders send again (every 100 ms
//!    to 2 s) to whichever master serves the slot then. A write the source made after the
//!    handoff began would be in no snapshot nor stream and be lost with the trimmed keys, after
//!    the source had acknowledged it.
//! 2. **Reads during the handoff** ([`handing_off`]): once the source pauses writes for the
//!    handoff it may already have lost the slots without knowing yet, and its copy of the keys
//!    stops being the counter's: a holder read there answers "not here" and a gathered read of
//!    a home there waits for the handoff's end (`read_handoff`), then fails with `TRYAGAIN`
//!    (retryable) past its bound, never with a stale or partial sum.
//! 3. **Nor are their messages sent** (`spread_transfer`): the seal requests and credits that
//!    keys of a moving slot have to send wait too, on both nodes; once the move has ended the
//!    slots' master sends them (the target after a completed move, the source after an
//!    aborted one).
//! 4. **A `PNC.ADD` made while its slot moves replicates as its effect** (`pnc`): Redis's
//!    `RESTORE` drops the home record that a verbatim add replays into (measured: the adds
//!    failed on the target and were lost). And `PNC.APPLY`/`PNC.SETSTATE` adopt the stamp
//!    they carry only while loading or on a replica, never from an import.
//!
//! The table of migrations under way comes from the servers' events; while it is not empty it
//! is checked once a second against the server's own list (`CLUSTER GETSLOTMIGRATIONS`,
//! `CLUSTER MIGRATION STATUS ALL`), so that a missed end never leaves the module's work on a
//! slot waiting for ever.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};

use redis_module::raw;

use super::scheduler::{self, When};
use crate::counter::spread::key_slot;
use crate::ffi::{rm, Ctx};
use crate::guard::guard;
use crate::metrics;

/// Which atomic slot migration the server has, if any.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Flavor {
    None = 0,
    Redis = 1,
    Valkey = 2,
}

static FLAVOR: AtomicU8 = AtomicU8::new(Flavor::None as u8);

/// The server's atomic slot migration, as [`detect`] found it.
pub fn flavor() -> Flavor {
    match FLAVOR.load(Relaxed) {
        1 => Flavor::Redis,
        2 => Flavor::Valkey,
        _ => Flavor::None,
    }
}

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (valkey-io/valkey#2593): without it a
/// loaded module switches atomic slot migration off for the whole cluster.
const VALKEY_OPTION_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;
/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` (on Redis 8.4+, event 19 is the trim event).
const VALKEY_EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;

/// Finds out, from the API the server exports, which atomic slot migration it has (from the
/// module's load, before anything else asks [`flavor`]): Redis 8.4+ exports its slot
/// migration API (`RedisModule_ClusterPropagateForSlotMigration`); Valkey 9.0+ lists the
/// option to handle it among its module options. Redis 7.0/8.0 and Valkey 8.1 have neither.
pub fn detect() -> Flavor {
    // SAFETY: reading function pointers that the server filled in at the module's init.
    let (redis_api, options_all) = unsafe {
        (
            (*std::ptr::addr_of!(raw::RedisModule_ClusterPropagateForSlotMigration)).is_some(),
            *std::ptr::addr_of!(raw::RedisModule_GetModuleOptionsAll),
        )
    };
    // SAFETY: a plain call of an API the server exports.
    let valkey_option = options_all
        .is_some_and(|all| unsafe { all() } & VALKEY_OPTION_HANDLE_ATOMIC_SLOT_MIGRATION != 0);
    let flavor = if redis_api {
        Flavor::Redis
    } else if valkey_option {
        Flavor::Valkey
    } else {
        Flavor::None
    };
    FLAVOR.store(flavor as u8, Relaxed);
    flavor
}

/// The module options to add at load: on Valkey 9, the declaration that the module handles
/// atomic slot migration (nothing elsewhere: Redis needs no declaration, older servers have
/// no such option).
pub fn module_options() -> c_int {
    match flavor() {
        Flavor::Valkey => VALKEY_OPTION_HANDLE_ATOMIC_SLOT_MIGRATION,
        Flavor::Redis | Flavor::None => 0,
    }
}

/// This node's side of a migration.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Import,
    Export,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Import => "import",
            Side::Export => "export",
        }
    }
}

/// What a server event says about a migration.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Change {
    Started(Side),
    /// Ended; `moved` when the slots changed owner.
    Ended {
        side: Side,
        moved: bool,
    },
    /// Another subevent (Redis asks modules, in the snapshot's child, for commands to send
    /// ahead of the snapshot: this module sends none).
    Other,
}

/// Valkey's `VALKEYMODULE_SUBEVENT_ATOMIC_SLOT_MIGRATION_*`.
fn valkey_change(subevent: u64) -> Change {
    match subevent {
        0 => Change::Started(Side::Import),
        1 => Change::Started(Side::Export),
        2 => Change::Ended {
            side: Side::Import,
            moved: false,
        },
        3 => Change::Ended {
            side: Side::Export,
            moved: false,
        },
        4 => Change::Ended {
            side: Side::Import,
            moved: true,
        },
        5 => Change::Ended {
            side: Side::Export,
            moved: true,
        },
        _ => Change::Other,
    }
}

/// Redis's `REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_*`.
fn redis_change(subevent: u64) -> Change {
    match subevent {
        raw::REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_IMPORT_STARTED => {
            Change::Started(Side::Import)
        }
        raw::REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_IMPORT_FAILED => Change::Ended {
            side: Side::Import,
            moved: false,
        },
        raw::REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_IMPORT_COMPLETED => Change::Ended {
            side: Side::Import,
            moved: true,
        },
        raw::REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_MIGRATE_STARTED => {
            Change::Started(Side::Export)
        }
        raw::REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_MIGRATE_FAILED => Change::Ended {
            side: Side::Export,
            moved: false,
        },
        raw::REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_MIGRATE_COMPLETED => Change::Ended {
            side: Side::Export,
            moved: true,
        },
        _ => Change::Other,
    }
}

/// A migration under way on this node.
struct Job {
    /// The server's job or task id (the same on both nodes).
    id: Vec<u8>,
    side: Side,
    /// Inclusive slot ranges.
    ranges: Vec<(u16, u16)>,
}

thread_local! {
    /// The migrations under way here (server events and every query run on the main thread).
    static JOBS: RefCell<Vec<Job>> = const { RefCell::new(Vec::new()) };
}

/// Some migration is under way here: the fast path of every query.
static ANY: AtomicBool = AtomicBool::new(false);

fn find(slot: u16, side: Option<Side>) -> bool {
    ANY.load(Relaxed)
        && JOBS.with(|jobs| {
            jobs.borrow()
                .iter()
                .any(|j| side.is_none_or(|s| s == j.side) && in_ranges(&j.ranges, slot))
        })
}

fn in_ranges(ranges: &[(u16, u16)], slot: u16) -> bool {
    ranges.iter().any(|&(a, b)| a <= slot && slot <= b)
}

/// True while `name`'s slot is being exported from or imported to this node (rule 1).
pub fn moving_key(name: &[u8]) -> bool {
    ANY.load(Relaxed) && find(key_slot(name), None)
}

/// True while `name`'s slot is being imported to this node (rule 3).
pub fn importing_key(name: &[u8]) -> bool {
    ANY.load(Relaxed) && find(key_slot(name), Some(Side::Import))
}

/// True while `name`'s slot is being exported from this node and the server pauses writes for
/// the handoff (rule 2): the slots may belong to the target already.
pub fn handing_off(name: &[u8]) -> bool {
    ANY.load(Relaxed) && find(key_slot(name), Some(Side::Export)) && crate::ffi::writes_paused()
}

/// Exports from this node that completed (the slots moved), with when: what a read that began
/// before one of them and ends after it must not take from here (`exported_since`). The last
/// [`EXPORTS_KEPT`] only, each for [`EXPORTS_KEPT_MS`].
const EXPORTS_KEPT: usize = 64;
const EXPORTS_KEPT_MS: i64 = 60_000;

/// A completed export: its slot ranges, and when it completed.
type Export = (Vec<(u16, u16)>, i64);

thread_local! {
    static EXPORTED: RefCell<std::collections::VecDeque<Export>> =
        const { RefCell::new(std::collections::VecDeque::new()) };
}

/// True when an export of `name`'s slot from this node completed at or after `since_ms`: the
/// slot is another master's now, and what this node read of the key before (or still holds of
/// it, until the trim) is not the counter's. An export older than a minute is forgotten (no
/// read waits that long).
pub fn exported_since(name: &[u8], since_ms: i64) -> bool {
    let slot = key_slot(name);
    EXPORTED.with(|e| {
        e.borrow()
            .iter()
            .any(|(ranges, at)| *at >= since_ms && in_ranges(ranges, slot))
    })
}

fn note_export(ranges: &[(u16, u16)], now: i64) {
    EXPORTED.with(|e| {
        let mut e = e.borrow_mut();
        while e.len() >= EXPORTS_KEPT || e.front().is_some_and(|(_, at)| now - at > EXPORTS_KEPT_MS)
        {
            e.pop_front();
        }
        e.push_back((ranges.to_vec(), now));
    });
}

/// How often the table is checked against the server's own list while it is not empty.
const CHECK_MS: i64 = 1000;

/// Checks the table against the migrations the server lists as under way, once a second while
/// it is not empty: a migration whose end event this module missed (a contained panic, or an
/// event the server did not send) is dropped, so that the module's work on its keys resumes
/// instead of waiting for ever. An entry the server does not list is dropped too; a call that
/// fails changes nothing.
fn check(ctx: Ctx) {
    let listed = match flavor() {
        Flavor::Valkey => listed_migrations(ctx, &[c"GETSLOTMIGRATIONS"], b"name"),
        Flavor::Redis => listed_migrations(ctx, &[c"MIGRATION", c"STATUS", c"ALL"], b"id"),
        Flavor::None => return,
    };
    let Some(listed) = listed else {
        return;
    };
    let ended = |state: &[u8]| {
        matches!(
            state,
            b"success" | b"failed" | b"cancelled" | b"completed" | b"canceled"
        )
    };
    let under_way = |id: &[u8]| listed.iter().any(|(i, s)| i == id && !ended(s));
    let dropped: Vec<Job> = JOBS.with(|jobs| {
        let mut jobs = jobs.borrow_mut();
        let (keep, drop): (Vec<Job>, Vec<Job>) = std::mem::take(&mut *jobs)
            .into_iter()
            .partition(|j| under_way(&j.id));
        *jobs = keep;
        drop
    });
    for job in &dropped {
        ctx.log_warning(&format!(
            "ctr: atomic slot migration: {} of slots {} is no longer under way on the server              (its end was not seen): the module's own work on their keys resumes",
            job.side.name(),
            slot_list(&job.ranges)
        ));
    }
    if !dropped.is_empty() {
        settle();
    }
}

/// `(id, state)` of every migration the server lists: `CLUSTER <args>` replies an array of
/// maps (flat `field value ...` arrays: `RM_Call` speaks RESP2) holding `id_field` and `state`.
/// None when the call fails or the reply is not such a list.
fn listed_migrations(
    ctx: Ctx,
    args: &[&std::ffi::CStr],
    id_field: &[u8],
) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    // SAFETY: ctx is live; "c" and "ccc" take one C string per argument.
    let reply = unsafe {
        match args {
            [a] => rm!(RedisModule_Call)(ctx.ptr, c"CLUSTER".as_ptr(), c"c".as_ptr(), a.as_ptr()),
            [a, b, c] => rm!(RedisModule_Call)(
                ctx.ptr,
                c"CLUSTER".as_ptr(),
                c"ccc".as_ptr(),
                a.as_ptr(),
                b.as_ptr(),
                c.as_ptr(),
            ),
            _ => return None,
        }
    };
    if reply.is_null() {
        return None;
    }
    // SAFETY (every call below): `reply` is live until it is freed at the end; its elements
    // and their strings belong to it.
    let kind = |r| unsafe { rm!(RedisModule_CallReplyType)(r) } as isize;
    let len = |r| unsafe { rm!(RedisModule_CallReplyLength)(r) };
    let at = |r, i| unsafe { rm!(RedisModule_CallReplyArrayElement)(r, i) };
    let bytes = |r| -> Vec<u8> {
        let mut n = 0usize;
        let p = unsafe { rm!(RedisModule_CallReplyStringPtr)(r, &mut n) };
        if p.is_null() {
            return Vec::new();
        }
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }.to_vec()
    };
    let field = |entry, name: &[u8]| -> Option<Vec<u8>> {
        (0..len(entry) / 2)
            .find(|&i| bytes(at(entry, 2 * i)) == name)
            .map(|i| bytes(at(entry, 2 * i + 1)))
    };
    let listed = (kind(reply) == raw::REDISMODULE_REPLY_ARRAY)
        .then(|| {
            (0..len(reply))
                .map(|i| {
                    let entry = at(reply, i);
                    if entry.is_null() || kind(entry) != raw::REDISMODULE_REPLY_ARRAY {
                        return None;
                    }
                    Some((field(entry, id_field)?, field(entry, b"state")?))
                })
                .collect::<Option<Vec<_>>>()
        })
        .flatten();
    // SAFETY: freed once, nothing of it used after.
    unsafe { rm!(RedisModule_FreeCallReply)(reply) };
    listed
}

/// The check of the migrations under way, armed while there are some.
static CHECK: scheduler::Job =
    scheduler::Job::while_busy("slot-migration", check, || ANY.load(Relaxed), CHECK_MS);

fn arm_check(ctx: *mut raw::RedisModuleCtx) {
    scheduler::arm_once(ctx, When::After(CHECK_MS), &CHECK);
}

/// Slot ranges as the log shows them (`5`, `100-200`).
fn slot_list(ranges: &[(u16, u16)]) -> String {
    ranges
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// After the table changed: the fast-path flag, the gauge, and the replay shortcut.
fn settle() {
    let (importing, jobs) = JOBS.with(|jobs| {
        let jobs = jobs.borrow();
        (jobs.iter().any(|j| j.side == Side::Import), jobs.len())
    });
    ANY.store(jobs > 0, Relaxed);
    metrics::SLOT_MIGRATIONS_IN_PROGRESS.set(jobs as u64);
    crate::ffi::set_importing(importing);
}

/// Applies one server event to the table, the metrics and the log.
fn record(ctx: Ctx, change: Change, id: Vec<u8>, ranges: Vec<(u16, u16)>) {
    let slots = slot_list(&ranges);
    match change {
        Change::Started(side) => {
            JOBS.with(|jobs| {
                let mut jobs = jobs.borrow_mut();
                jobs.retain(|j| j.id != id);
                jobs.push(Job { id, side, ranges });
            });
            match side {
                Side::Import => metrics::SLOT_IMPORTS.incr(),
                Side::Export => metrics::SLOT_EXPORTS.incr(),
            }
            ctx.log_notice(&format!(
                "ctr: atomic slot migration: {} of slots {slots} started; the module's own work \
                 on their keys waits for it",
                side.name()
            ));
            arm_check(ctx.ptr);
        }
        Change::Ended { side, moved } => {
            JOBS.with(|jobs| jobs.borrow_mut().retain(|j| j.id != id));
            if moved && side == Side::Export {
                note_export(&ranges, ctx.now_ms());
            }
            if !moved {
                match side {
                    Side::Import => metrics::SLOT_IMPORTS_ABORTED.incr(),
                    Side::Export => metrics::SLOT_EXPORTS_ABORTED.incr(),
                }
            }
            ctx.log_notice(&format!(
                "ctr: atomic slot migration: {} of slots {slots} {}",
                side.name(),
                if moved { "completed" } else { "aborted" }
            ));
        }
        Change::Other => return,
    }
    settle();
}

/// `ValkeyModuleSlotRange`.
#[repr(C)]
struct ValkeySlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfoV1`.
#[repr(C)]
struct ValkeyMigrationInfo {
    version: u64,
    job_name: [u8; 41],
    slot_ranges: *const ValkeySlotRange,
    num_slot_ranges: u32,
}

fn slot_range(start: i64, end: i64) -> Option<(u16, u16)> {
    let slots = 0..i64::from(crate::counter::spread::SLOTS);
    (slots.contains(&start) && slots.contains(&end) && start <= end)
        .then_some((start as u16, end as u16))
}

unsafe extern "C" fn on_valkey_event(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guard(ctx, "slot-migration", || {
        if data.is_null() {
            return;
        }
        // SAFETY: Valkey passes its migration info (version 1) with this event.
        let info = unsafe { &*data.cast::<ValkeyMigrationInfo>() };
        let mut ranges = Vec::new();
        if !info.slot_ranges.is_null() {
            for i in 0..info.num_slot_ranges as usize {
                // SAFETY: the array holds num_slot_ranges ranges.
                let r = unsafe { &*info.slot_ranges.add(i) };
                ranges.extend(slot_range(r.start.into(), r.end.into()));
            }
        }
        let id = info.job_name[..40].to_vec();
        record(Ctx { ptr: ctx }, valkey_change(subevent), id, ranges);
    });
}

unsafe extern "C" fn on_redis_event(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guard(ctx, "slot-migration", || {
        let change = redis_change(subevent);
        if data.is_null() || change == Change::Other {
            return; // (the module-propagate subevent runs in the snapshot's child)
        }
        // SAFETY: Redis passes its migration info (version 1) with this event.
        let info = unsafe { &*data.cast::<raw::RedisModuleClusterSlotMigrationInfo>() };
        let mut ranges = Vec::new();
        if !info.slots.is_null() {
            // SAFETY: a live array of num_ranges ranges, laid out as the header declares it.
            unsafe {
                let array = &*info.slots;
                let first = array.ranges.as_ptr();
                for i in 0..usize::try_from(array.num_ranges).unwrap_or(0) {
                    let r = &*first.add(i);
                    ranges.extend(slot_range(r.start.into(), r.end.into()));
                }
            }
        }
        let id = if info.task_id.is_null() {
            Vec::new()
        } else {
            // SAFETY: a NUL-terminated task id.
            unsafe { std::ffi::CStr::from_ptr(info.task_id) }
                .to_bytes()
                .to_vec()
        };
        record(Ctx { ptr: ctx }, change, id, ranges);
    });
}

/// Subscribes to the server's migration events, where it has them (from the module's load).
pub fn register(ctx: *mut raw::RedisModuleCtx) {
    let (id, callback): (u64, raw::RedisModuleEventCallback) = match flavor() {
        Flavor::Valkey => (VALKEY_EVENT_ATOMIC_SLOT_MIGRATION, Some(on_valkey_event)),
        Flavor::Redis => (
            raw::REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION,
            Some(on_redis_event),
        ),
        Flavor::None => return,
    };
    let event = raw::RedisModuleEvent { id, dataver: 1 };
    // SAFETY: called from OnLoad with its live context.
    unsafe { rm!(RedisModule_SubscribeToServerEvent)(ctx, event, callback) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subevents_map_to_sides() {
        assert_eq!(valkey_change(0), Change::Started(Side::Import));
        assert_eq!(valkey_change(1), Change::Started(Side::Export));
        assert_eq!(
            valkey_change(3),
            Change::Ended {
                side: Side::Export,
                moved: false
            }
        );
        assert_eq!(
            valkey_change(4),
            Change::Ended {
                side: Side::Import,
                moved: true
            }
        );
        assert_eq!(valkey_change(6), Change::Other);
        assert_eq!(redis_change(0), Change::Started(Side::Import));
        assert_eq!(redis_change(3), Change::Started(Side::Export));
        assert_eq!(
            redis_change(1),
            Change::Ended {
                side: Side::Import,
                moved: false
            }
        );
        assert_eq!(
            redis_change(5),
            Change::Ended {
                side: Side::Export,
                moved: true
            }
        );
        assert_eq!(redis_change(6), Change::Other);
    }

    #[test]
    fn slot_ranges_are_checked() {
        assert_eq!(slot_range(0, 16383), Some((0, 16383)));
        assert_eq!(slot_range(5, 4), None);
        assert_eq!(slot_range(-1, 3), None);
        assert_eq!(slot_range(0, 16384), None);
    }
}
