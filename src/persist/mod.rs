//! Encodings and the Redis type callbacks that persist the module's values.

pub mod codec;
pub mod ctr_format;
pub mod ctr_type;
pub mod effect;
pub mod pnc_format;
pub mod pnc_type;

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
}

/// The method table of a native type. Left out on purpose, for every type: aux data (on Redis
/// 7.0 `aux_save` runs on every save, so any aux field would make every RDB need the module),
/// `unlink` (freeing only releases Rust memory, safe on the lazy-free thread) and `defrag`
/// (values are small: a few allocations each).
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
        unlink2: None,
        copy2: None,
    }
}
