//! The `ctr-pncnt` native type: its registration and the callbacks Redis calls to save, load,
//! rewrite, measure, digest, copy and free a PN-Counter. Each callback only translates between
//! Redis and [`crate::persist::pnc_format`] / [`crate::pncounter`].
//!
//! No `aux_save`: on Redis 7.0 it would run on every save and make even an empty RDB need the
//! module. The deployment's replica id lives in the values instead (their home records).

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::guard::guard;
use std::ptr::null_mut;

use super::{
    digest_blob, emit_aof_blob, load_blob, refuse_value, save_blob, type_methods, TypeCallbacks,
};

use super::pnc_format;
use crate::pncounter::{identity, PnCounter};

/// The type name stored in every RDB file: 9 characters, fixed forever.
pub const PNC_TYPE_NAME: &str = "ctr-pncnt";
/// RDB encoding version: 1 = one string buffer holding the `pnc_format` stored form.
pub const PNC_ENCVER: i32 = 1;

/// The internal command the AOF rewrite emits.
pub const SETSTATE_COMMAND: &CStr = c"PNC.SETSTATE";

/// True while Redis loads a dataset (startup, DEBUG RELOAD, replica sync, AOF): values loaded
/// then are this deployment's own, and their home records say which id it used. Set by the
/// loading event handler in `crate::commands::pnc`.
pub static DATASET_LOADING: AtomicBool = AtomicBool::new(false);

pub static PNC_TYPE: RedisType = RedisType::new(
    PNC_TYPE_NAME,
    PNC_ENCVER,
    type_methods(TypeCallbacks {
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        free_effort: Some(free_effort),
        copy: Some(copy),
        unlink2: None,
    }),
);

/// The registered type handle (null before the module has loaded).
pub fn pnc_type() -> *mut raw::RedisModuleType {
    *PNC_TYPE.raw_type.borrow()
}

/// Moves a counter into a value pointer the keyspace owns.
pub fn into_raw(counter: PnCounter) -> *mut c_void {
    Box::into_raw(Box::new(counter)).cast()
}

/// Takes a value pointer back.
///
/// # Safety
/// `raw` must come from [`into_raw`] and be owned by nobody else afterwards.
pub unsafe fn from_raw(raw: *mut c_void) -> Box<PnCounter> {
    // SAFETY: per the caller's contract.
    unsafe { Box::from_raw(raw.cast::<PnCounter>()) }
}

/// # Safety
/// `value` must be a live PN-Counter owned by the keyspace, unmodified for `'a`.
pub unsafe fn borrow<'a>(value: *const c_void) -> &'a PnCounter {
    // SAFETY: per the caller's contract.
    unsafe { &*value.cast::<PnCounter>() }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a live value of this type.
    let blob = pnc_format::encode_stored(unsafe { borrow(value) });
    save_blob(rdb, &blob);
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    // A contained panic is a load error (NULL), as a refused value is.
    guard(null_mut(), "type-rdb-load", || {
        match load_counter(rdb, encver) {
            Ok(counter) => into_raw(counter),
            Err(why) => {
                crate::metrics::PNC_REFUSED_BLOBS.incr();
                refuse_value(rdb, "PNC", &why)
            }
        }
    })
    .unwrap_or_else(null_mut)
}

fn load_counter(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Result<PnCounter, String> {
    let buffer = load_blob(rdb, encver, PNC_ENCVER)?;
    let mut counter = pnc_format::decode_stored(buffer.as_ref()).map_err(|e| e.0)?;
    if DATASET_LOADING.load(Relaxed) {
        // Our own dataset: its home records tell which replica id we were using.
        if let Some(home) = counter.home() {
            identity().observe(home);
        }
    } else {
        // RESTORE (or MIGRATE): a value from elsewhere says nothing about who we are, and its
        // home record must never make us adopt another deployment's id.
        counter.set_home(None);
    }
    Ok(counter)
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a live value of this type.
    let blob = pnc_format::encode_stored(unsafe { borrow(value) });
    emit_aof_blob(aof, SETSTATE_COMMAND, key, &blob);
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // Each allocation as the allocator rounds it, the box included: used_memory counts
    // usable sizes.
    // SAFETY: Redis passes a live value of this type.
    guard(null_mut(), "type-mem-usage", || {
        unsafe { borrow(value) }.allocated_bytes()
    })
    .unwrap_or(0)
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // Entries are always kept sorted by id, so the stored form is canonical: equal digests
    // mean equal states and equal home records.
    // SAFETY: Redis passes a live value of this type.
    guard(null_mut(), "type-digest", || {
        let blob = pnc_format::encode_stored(unsafe { borrow(value) });
        digest_blob(md, &blob);
    });
}

unsafe extern "C" fn free(value: *mut c_void) {
    // May run on a lazy-free thread: only Rust memory is released here.
    // SAFETY: Redis hands over ownership of a value of this type.
    guard(null_mut(), "type-free", || drop(unsafe { from_raw(value) }));
}

unsafe extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    // SAFETY: Redis passes a live value of this type.
    guard(null_mut(), "type-free", || {
        1 + unsafe { borrow(value) }.allocations()
    })
    .unwrap_or(1)
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    // A deep copy, home record included: COPY stays inside this deployment.
    // A contained panic refuses the copy (NULL).
    // SAFETY: Redis passes a live value of this type.
    guard(null_mut(), "type-copy", || {
        into_raw(unsafe { borrow(value) }.clone())
    })
    .unwrap_or_else(null_mut)
}
