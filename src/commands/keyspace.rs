//! The module's one keyspace subscription (generic, expired and evicted events), handed to
//! the glue that follows keys as they go, move or change names:
//! - every event: the collector of gone spreads claims or forgets what the unlink of a home
//!   just stashed (`spread_collect`);
//! - `rename_to`, `move_to`: the transfer registry tracks the key under its new name
//!   (`spread_transfer`);
//! - `restore`: a spread home restored under another name while the home lives is detached
//!   into a counter of its own (`spread_restore`).
//!
//! One subscriber at the top of the glue, so that none of those imports another for it.

use std::ffi::{c_char, c_int};

use redis_module::raw;

use crate::ffi::{rm, Ctx};

unsafe extern "C" fn on_keyspace(
    ctx: *mut raw::RedisModuleCtx,
    _class: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: the server passes a NUL-terminated event name.
    let event = unsafe { std::ffi::CStr::from_ptr(event) };
    let ctx = Ctx { ptr: ctx };
    crate::guard::guard(ctx.ptr, "keyspace", || {
        super::spread_collect::on_event(ctx, event.to_bytes(), key);
    });
    if event == c"rename_to" || event == c"move_to" {
        crate::guard::guard(ctx.ptr, "keyspace", || {
            super::spread_transfer::track_key(ctx, key);
        });
    }
    if event == c"restore" {
        crate::guard::guard(ctx.ptr, "keyspace", || {
            super::spread_restore::on_restored(ctx, key);
        });
    }
    0
}

/// Subscribes (from the module's load).
pub fn register(ctx: *mut raw::RedisModuleCtx) {
    // SAFETY: called from OnLoad with its live context.
    unsafe {
        rm!(RedisModule_SubscribeToKeyspaceEvents)(
            ctx,
            raw::REDISMODULE_NOTIFY_GENERIC
                | raw::REDISMODULE_NOTIFY_EXPIRED
                | raw::REDISMODULE_NOTIFY_EVICTED,
            Some(on_keyspace),
        )
    };
}
