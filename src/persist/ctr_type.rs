//! The `ctr-count` native type: its registration and the callbacks Redis calls to save, load,
//! rewrite, measure, digest, copy and free a counter. Each callback only translates between
//! Redis and [`crate::persist::ctr_format`] / [`crate::counter`].

use std::ffi::{c_int, c_void};

use redis_module::logging::{log_io_error, RedisLogLevel};
use redis_module::native_types::RedisType;
use redis_module::raw;

use super::ctr_format;
use crate::counter::{CounterCell, CounterRef};
use crate::ffi::rm;
use crate::metrics;

/// The type name stored in every RDB file: 9 characters, fixed forever.
pub const CTR_TYPE_NAME: &str = "ctr-count";
/// RDB encoding version of the type: 1 = one string buffer holding a `ctr_format` payload.
pub const CTR_ENCVER: i32 = 1;

pub static CTR_TYPE: RedisType = RedisType::new(
    CTR_TYPE_NAME,
    CTR_ENCVER,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        // No module-global state needs saving beside the keys.
        aux_load: None,
        aux_save: None,
        aux_save2: None,
        aux_save_triggers: 0,
        free_effort: Some(free_effort),
        // Freeing is pure Rust memory release; nothing to do on the main thread first.
        unlink: None,
        copy: Some(copy),
        // Values are tiny (often inline): defragmenting them is not worth a callback.
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
    },
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
    // SAFETY: rdb is a live IO handle; blob outlives the call.
    unsafe { rm!(RedisModule_SaveStringBuffer)(rdb, blob.as_ptr().cast(), blob.len()) };
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    match load_counter(rdb, encver) {
        Ok(cell) => cell.into_raw(),
        Err(msg) => {
            // The message is ours, never client bytes; escape `%` all the same (printf format).
            let msg = format!("ctr: refusing a CTR value: {msg}").replace('%', "%%");
            log_io_error(rdb, RedisLogLevel::Warning, &msg);
            std::ptr::null_mut()
        }
    }
}

fn load_counter(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Result<CounterCell, String> {
    if encver != CTR_ENCVER {
        return Err(format!("unknown encoding version {encver}"));
    }
    let buffer = raw::load_string_buffer(rdb).map_err(|e| e.to_string())?;
    let counter = ctr_format::decode(buffer.as_ref()).map_err(|e| e.0)?;
    metrics::TOKENS_HELD.add(counter.token_count() as u64);
    Ok(CounterCell::new(counter))
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a live value of this type.
    let blob = ctr_format::encode(&unsafe { borrow(value) }.to_counter());
    // SAFETY: aof and key are live; "sb" takes a RedisModuleString then (ptr, len).
    unsafe {
        rm!(RedisModule_EmitAOF)(
            aof,
            SETSTATE_COMMAND.as_ptr(),
            c"sb".as_ptr(),
            key,
            blob.as_ptr(),
            blob.len(),
        )
    };
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // Each allocation as the allocator rounds it: used_memory counts usable sizes.
    // SAFETY: Redis passes a live value of this type.
    unsafe { borrow(value) }.allocated_bytes()
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // The canonical encoding is the state: equal digests mean equal counters.
    // SAFETY: Redis passes a live value of this type.
    let blob = ctr_format::encode(&unsafe { borrow(value) }.to_counter());
    // SAFETY: md is a live digest.
    unsafe {
        rm!(RedisModule_DigestAddStringBuffer)(md, blob.as_ptr().cast(), blob.len());
        rm!(RedisModule_DigestEndSequence)(md);
    }
}

unsafe extern "C" fn free(value: *mut c_void) {
    // May run on a lazy-free thread: only Rust memory and atomics are touched here.
    // SAFETY: Redis hands over ownership of a value of this type.
    let cell = unsafe { CounterCell::from_raw(value) };
    // SAFETY: the cell is alive until dropped below.
    metrics::TOKENS_HELD.sub(unsafe { borrow(value) }.token_count() as u64);
    drop(cell);
}

unsafe extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    // The box, the shard vector, and the token tables (freed in a few large blocks).
    // SAFETY: Redis passes a live value of this type.
    match unsafe { borrow(value) } {
        CounterRef::Inline(_) => 0,
        CounterRef::Boxed(c) => 2 + c.tokens().len() / 8,
    }
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    // SAFETY: Redis passes a live value of this type.
    let counter = unsafe { borrow(value) }.to_counter();
    metrics::TOKENS_HELD.add(counter.token_count() as u64);
    CounterCell::new(counter).into_raw()
}
