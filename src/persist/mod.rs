//! Encodings and the Redis type callbacks that persist the module's values.

// Raw pointers here come from Redis itself (IO handles, keys, digests).
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod admission_msg;
pub mod audit_msg;
pub mod codec;
pub mod collect_msg;
pub mod ctr_format;
pub mod ctr_type;
pub mod demand_msg;
pub mod effect;
pub mod gather_msg;
pub mod holder_check_msg;
pub mod name_query;
pub mod pnc_format;
pub mod pnc_type;
pub mod resp;
pub mod step_msg;
pub mod transfer_msg;
#[cfg(test)]
mod wire_bytes;

use redis_module::raw;

/// The callbacks every native type of the module provides.
pub struct TypeCallbacks {
    pub rdb_load: raw::RedisModuleTypeLoadFunc,
    pub rdb_save: raw::RedisModuleTypeSaveFunc,
    pub aof_rewrite: raw::RedisModuleTypeRewriteFunc,
    pub mem_usage: raw::RedisModuleTypeMemUsageFunc,
    pub digest: raw::RedisModuleTypeDigestFunc,
    pub free: raw::RedisModuleTypeFreeFunc,
    pub free_effort: raw::RedisModuleTypeFreeEffortFunc,
    pub copy: raw::RedisModuleTypeCopyFunc,
    /// Called when a key holding the value is unlinked from the keyspace (see `ctr_type`).
    pub unlink2: raw::RedisModuleTypeUnlinkFunc2,
}

/// The method table of a native type. Left out on purpose, for every type: aux data (on Redis
/// 7.0 `aux_save` runs on every save, so any aux field would make every RDB need the module)
/// and `defrag` (values are small: a few allocations each). Freeing only releases Rust memory
/// (safe on the lazy-free thread); `unlink2` is there only to see spread homes go.
pub const fn type_methods(c: TypeCallbacks) -> raw::RedisModuleTypeMethods {
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: c.rdb_load,
        rdb_save: c.rdb_save,
        aof_rewrite: c.aof_rewrite,
        mem_usage: c.mem_usage,
        digest: c.digest,
        free: c.free,
        aux_load: None,
        aux_save: None,
        aux_save2: None,
        aux_save_triggers: 0,
        free_effort: c.free_effort,
        unlink: None,
        copy: c.copy,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: c.unlink2,
        copy2: None,
    }
}

/// Writes a value's encoding as one RDB string.
pub fn save_blob(rdb: *mut raw::RedisModuleIO, blob: &[u8]) {
    // SAFETY: rdb is the live IO handle Redis passed to rdb_save; blob outlives the call.
    unsafe { crate::ffi::rm!(RedisModule_SaveStringBuffer)(rdb, blob.as_ptr().cast(), blob.len()) };
}

/// Emits `command key blob` into a rewritten AOF.
pub fn emit_aof_blob(
    aof: *mut raw::RedisModuleIO,
    command: &std::ffi::CStr,
    key: *mut raw::RedisModuleString,
    blob: &[u8],
) {
    // SAFETY: aof and key are live; "sb" takes a RedisModuleString then (ptr, len).
    unsafe {
        crate::ffi::rm!(RedisModule_EmitAOF)(
            aof,
            command.as_ptr(),
            c"sb".as_ptr(),
            key,
            blob.as_ptr(),
            blob.len(),
        )
    };
}

/// Adds a value's canonical encoding to a digest: equal encodings, equal digests.
pub fn digest_blob(md: *mut raw::RedisModuleDigest, blob: &[u8]) {
    // SAFETY: md is the live digest Redis passed to the callback.
    unsafe {
        crate::ffi::rm!(RedisModule_DigestAddStringBuffer)(md, blob.as_ptr().cast(), blob.len());
        crate::ffi::rm!(RedisModule_DigestEndSequence)(md);
    }
}

/// Reads the one string a value is stored as, after checking its encoding version.
pub fn load_blob(
    rdb: *mut raw::RedisModuleIO,
    encver: std::ffi::c_int,
    expected: i32,
) -> Result<redis_module::RedisBuffer, String> {
    if encver != expected {
        return Err(format!("unknown encoding version {encver}"));
    }
    raw::load_string_buffer(rdb).map_err(|e| e.to_string())
}

/// Logs why a value was refused and returns the null pointer that tells Redis so (a failed
/// RESTORE, or a corrupt RDB).
pub fn refuse_value(rdb: *mut raw::RedisModuleIO, kind: &str, why: &str) -> *mut std::ffi::c_void {
    // The reason is ours, never client bytes; escape `%` all the same (printf format).
    let msg = format!("ctr: refusing a {kind} value: {why}").replace('%', "%%");
    redis_module::logging::log_io_error(rdb, redis_module::logging::RedisLogLevel::Warning, &msg);
    std::ptr::null_mut()
}
