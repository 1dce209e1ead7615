//! The `ctr-count` native type: its registration and the callbacks Redis calls to save, load,
//! rewrite, measure, digest, copy and free a counter. Each callback only translates between
//! Redis and [`crate::persist::ctr_format`] / [`crate::counter`].

use std::ffi::{c_int, c_void};

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::{
    digest_blob, emit_aof_blob, load_blob, refuse_value, save_blob, type_methods, TypeCallbacks,
};

use super::ctr_format;
use crate::counter::collect::carried_by;
use crate::counter::spread::parse_holder_name;
use crate::counter::{CounterCell, CounterRef};
use crate::ffi::{rm, string_bytes};
use crate::guard::guard;
use crate::metrics;
use std::ptr::null_mut;

/// The type name stored in every RDB file: 9 characters, fixed forever.
pub const CTR_TYPE_NAME: &str = "ctr-count";
/// RDB encoding version of the type: 1 = one string buffer holding a `ctr_format` payload.
pub const CTR_ENCVER: i32 = 1;

pub static CTR_TYPE: RedisType = RedisType::new(
    CTR_TYPE_NAME,
    CTR_ENCVER,
    type_methods(TypeCallbacks {
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        free_effort: Some(free_effort),
        copy: Some(copy),
        unlink2: Some(unlink2),
    }),
);

/// The registered type handle (null before the module has loaded).
pub fn ctr_type() -> *mut raw::RedisModuleType {
    *CTR_TYPE.raw_type.borrow()
}

/// The name of the internal command the AOF rewrite emits.
pub const SETSTATE_COMMAND: &std::ffi::CStr = c"CTR.SETSTATE";

/// # Safety
/// `value` must be a live counter owned by the keyspace.
unsafe fn borrow<'a>(value: *const c_void) -> CounterRef<'a> {
    // SAFETY: per the caller's contract.
    unsafe { CounterCell::borrow(value.cast_mut()) }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a live value of this type.
    let blob = ctr_format::encode(&unsafe { borrow(value) }.to_counter());
    save_blob(rdb, &blob);
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    // A contained panic is a load error (NULL), as a refused value is.
    guard(null_mut(), "type-rdb-load", || {
        match load_counter(rdb, encver) {
            Ok(cell) => cell.into_raw(),
            Err(why) => refuse_value(rdb, "CTR", &why),
        }
    })
    .unwrap_or_else(null_mut)
}

thread_local! {
    /// Keys loaded (RDB, `RESTORE`) with transfers to send, until the transfer registry takes
    /// them at its next tick: loading only records them, so that the type's callbacks never
    /// call into the commands' glue.
    static LOADED_WITH_TRANSFERS: std::cell::RefCell<Vec<(c_int, Vec<u8>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The (db, key name) of every counter loaded with transfers to send since the last call.
pub fn take_loaded_with_transfers() -> Vec<(c_int, Vec<u8>)> {
    LOADED_WITH_TRANSFERS.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// A spread home loaded under a name other than the one its holders carry: its database and
/// name, the carried name and its spread id.
pub type LoadedHome = (c_int, Vec<u8>, Vec<u8>, u64);

thread_local! {
    /// Homes loaded under another name than their holders carry, until the renamed-home table
    /// of the glue (`runtime::home_names`) takes them.
    static LOADED_HOMES: std::cell::RefCell<std::collections::VecDeque<LoadedHome>> =
        const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
}

/// Loaded homes kept for the glue at most (past it the oldest go: the table is a hint).
const LOADED_HOMES_LIMIT: usize = 100_000;

/// Every home loaded under another name than its holders carry since the last call.
pub fn take_loaded_homes() -> std::collections::VecDeque<LoadedHome> {
    LOADED_HOMES.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

thread_local! {
    /// Counters loaded with a holder listing (RDB, `RESTORE`, `MIGRATE`, a slot migration's
    /// import), counted: the listing gate (`runtime::listing_gate`) closes when the count moves,
    /// since the replicas may not hold what was loaded yet.
    static LISTINGS_LOADED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many counters with a holder listing were loaded so far.
pub fn listings_loaded() -> u64 {
    LISTINGS_LOADED.get()
}

fn load_counter(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Result<CounterCell, String> {
    let buffer = load_blob(rdb, encver, CTR_ENCVER)?;
    let counter = ctr_format::decode(buffer.as_ref()).map_err(|e| e.0)?;
    metrics::TOKENS_HELD.add(counter.token_count() as u64);
    if counter.transfers().is_some_and(|t| t.listing.is_some()) {
        LISTINGS_LOADED.set(LISTINGS_LOADED.get().wrapping_add(1));
    }
    let with_transfers = counter.transfers().is_some_and(|t| t.has_pending());
    let home = carried_by(&counter);
    if with_transfers || home.is_some() {
        // SAFETY: rdb is the live IO handle of this load (RDB or RESTORE); the name is
        // borrowed for this call only.
        let (name, db) = unsafe {
            (
                rm!(RedisModule_GetKeyNameFromIO)(rdb),
                rm!(RedisModule_GetDbIdFromIO)(rdb),
            )
        };
        if !name.is_null() {
            let name = crate::ffi::string_bytes(name).to_vec();
            match home {
                Some((carried, spread_id)) if carried != name => LOADED_HOMES.with(|l| {
                    let mut loaded = l.borrow_mut();
                    if loaded.len() >= LOADED_HOMES_LIMIT {
                        loaded.pop_front();
                    }
                    loaded.push_back((db, name.clone(), carried, spread_id));
                }),
                _ => {}
            }
            if with_transfers {
                LOADED_WITH_TRANSFERS.with(|l| l.borrow_mut().push((db, name)));
            }
        }
    }
    Ok(CounterCell::new(counter))
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a live value of this type.
    let blob = ctr_format::encode(&unsafe { borrow(value) }.to_counter());
    emit_aof_blob(aof, SETSTATE_COMMAND, key, &blob);
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // Each allocation as the allocator rounds it: used_memory counts usable sizes.
    // SAFETY: Redis passes a live value of this type.
    guard(null_mut(), "type-mem-usage", || {
        unsafe { borrow(value) }.allocated_bytes()
    })
    .unwrap_or(0)
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // The canonical encoding is the state: equal digests mean equal counters.
    // SAFETY: Redis passes a live value of this type.
    guard(null_mut(), "type-digest", || {
        let blob = ctr_format::encode(&unsafe { borrow(value) }.to_counter());
        digest_blob(md, &blob);
    });
}

unsafe extern "C" fn free(value: *mut c_void) {
    // May run on a lazy-free thread: only Rust memory and atomics are touched here (and the
    // log, on a contained panic).
    guard(null_mut(), "type-free", || {
        // SAFETY: Redis hands over ownership of a value of this type.
        let cell = unsafe { CounterCell::from_raw(value) };
        // SAFETY: the cell is alive until dropped below.
        metrics::TOKENS_HELD.sub(unsafe { borrow(value) }.token_count() as u64);
        drop(cell);
    });
}

unsafe extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    // The box, the shard vector, and the token tables (freed in a few large blocks). An inline
    // counter owns nothing: 1, since 0 would mean "unlimited" and send it to the lazy-free
    // thread.
    // SAFETY: Redis passes a live value of this type.
    guard(null_mut(), "type-free", || match unsafe { borrow(value) } {
        CounterRef::Inline(_) | CounterRef::Limiter(_) => 1,
        CounterRef::Boxed(c) => 2 + c.token_count() / 8,
    })
    .unwrap_or(1)
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    // A contained panic refuses the copy (NULL), as a spread home's is.
    guard(null_mut(), "type-copy", || {
        // A holder exists because the spread protocol made it: a counter copied under a
        // holder's name would be counted in that spread's total (a floored one below its
        // floor, by a negative copy) without ever passing the holder check. Refused (NULL: the
        // server replies "ERR module key failed to copy" and writes nothing).
        if !to.is_null() && parse_holder_name(string_bytes(to)).is_some() {
            metrics::HOLDER_COPIES_REFUSED.incr();
            return null_mut();
        }
        copy_value(value)
    })
    .unwrap_or_else(null_mut)
}

fn copy_value(value: *const c_void) -> *mut c_void {
    // SAFETY: Redis passes a live value of this type.
    let original = unsafe { borrow(value) };
    // A spread home's total lives partly in its holders (current or still folding back): a
    // copy would be a second counter sharing them, so COPY is refused (NULL: Redis 7.0 replies
    // "ERR module key failed to copy" and writes nothing). So is a copy of a folded holder:
    // its units went home (or are on their way) with its grants' units, and a copy would be a
    // counter that gives back, on a refund, units it never had.
    if let CounterRef::Boxed(b) = original {
        if b.spread().is_some() || !b.leaving().is_empty() || b.is_sealed() {
            return std::ptr::null_mut();
        }
    }
    let mut counter = original.to_counter();
    // Units in flight and folds under way belong to the original key alone: a copy carrying
    // them would send the same units a second time under its own name.
    counter.forget_transfers();
    // A stray copied out (never to a holder's name: refused above) is a counter of its own.
    counter.set_stray(false);
    metrics::TOKENS_HELD.add(counter.token_count() as u64);
    CounterCell::new(counter).into_raw()
}

/// Homes unlinked and not yet taken by the collector, at most (each is taken at the keyspace
/// event that follows its unlink, in the same call).
const MAX_UNLINKED: usize = 1024;

thread_local! {
    /// What each home unlinked since the collector last looked leaves to collect.
    static UNLINKED: std::cell::RefCell<Vec<Unlinked>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A home unlinked from the keyspace: its database, its name, what it leaves to collect.
pub type Unlinked = (c_int, Vec<u8>, Vec<crate::counter::collect::Collection>);

/// The homes unlinked since the last call, oldest first.
pub fn take_unlinked() -> Vec<Unlinked> {
    UNLINKED.with(|u| std::mem::take(&mut *u.borrow_mut()))
}

/// Called by the server when a key holding a counter is unlinked from the keyspace. Only a
/// spread home (holders current or still folding back) matters: what it leaves to collect is
/// stashed for the keyspace event that follows, which says whether the counter is gone or
/// lives on under another name (the collector, `crate::runtime::spread_collect`, takes it
/// with [`take_unlinked`] at that event: the type's callbacks never call into the commands).
///
/// When the server calls it (read in the sources: Redis 7.0.15 `db.c`, `module.c`,
/// `cluster.c`, `expire.c`, `evict.c`; Valkey 8.0.1 the same files): `moduleNotifyKeyUnlink`,
/// which prefers `unlink2` to `unlink`, is called by `dbGenericDelete` (so by DEL and UNLINK,
/// by an `EXPIRE` or `RESTORE` whose time is already past, by active and lazy expiry, by
/// eviction, by `MIGRATE` on its source after the target took the key, by `delKeysInSlot` when
/// a node loses a slot, by `RM_DeleteKey`/`RM_UnlinkKey` and so by `RM_ModuleTypeSetValue` on
/// a key that holds a value) and by `dbOverwrite` (a key overwritten in place: SET over it).
/// `renameGenericCommand` calls it for an overwritten destination and then for the source (the
/// value already added under the new name); `moveCommand` for the source (already added to the
/// target database); `restoreCommand` and `copyCommand` for a destination replaced.
/// `FLUSHALL`/`FLUSHDB` (`emptyData`) and a replica's full sync empty the dictionaries without
/// it (only `free`). Valkey 8 passes the kind of unlink to a server event (`KEY` deleted,
/// expired, evicted, overwritten) that Redis 7.0 lacks; `unlink2` itself is the same. In
/// every case the keyspace event of the operation (`del`, `expired`, `evicted`, `rename_from`,
/// `move_from`, `restore`, ...) follows in the same call, before anything else runs.
///
/// No server API beyond reading the key's name and database runs here, nothing is written, and
/// a panic is contained.
unsafe extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guard(null_mut(), "type-unlink", || {
        // SAFETY: the server passes a live value of this type, still in the keyspace's hands.
        let CounterRef::Boxed(c) = (unsafe { borrow(value) }) else {
            return; // an inline counter is never a home
        };
        if c.spread().is_none() && c.leaving().is_empty() {
            return;
        }
        // SAFETY: ctx is the live key context of this call; the name is borrowed for it only.
        let (name, db) = unsafe {
            (
                rm!(RedisModule_GetKeyNameFromOptCtx)(ctx),
                rm!(RedisModule_GetDbIdFromOptCtx)(ctx),
            )
        };
        if name.is_null() {
            return;
        }
        let name = crate::ffi::string_bytes(name);
        let left = crate::counter::collect::left_by(name, c);
        if !left.is_empty() {
            UNLINKED.with(|u| {
                let mut u = u.borrow_mut();
                if u.len() >= MAX_UNLINKED {
                    u.remove(0);
                }
                u.push((db, name.to_vec(), left));
            });
        }
    });
}
