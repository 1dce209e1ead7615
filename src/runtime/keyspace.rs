//! The module's one keyspace subscription (generic, expired and evicted events), handed to
//! the glue that follows keys as they go, move or change names:
//! - every event: the collector of gone spreads claims or forgets what the unlink of a home
//!   just stashed (`spread_collect`);
//! - `rename_to`, `move_to`: the transfer registry tracks the key under its new name
//!   (`spread_transfer`);
//! - `rename_to`, `move_to`: a spread home renamed is remembered under the name its holders carry
//!   (`home_names`: its holders' demand reaches it, a copy of it is told apart);
//! - `move_from`, `move_to` (paired here): a spread home moved to another database takes its
//!   holders along (`spread_move`), and the client's database is selected again (Valkey 8.1);
//! - `restore`: a spread home restored under another name while the home lives is detached
//!   into a counter of its own (`spread_restore`);
//! - `rename_to`, `restore`: a counter renamed onto a holder's name is marked a stray, and one
//!   renamed or restored under another name unmarked (`strays`).
//!
//! One subscriber at the top of the glue, so that none of those imports another for it.

use std::cell::RefCell;
use std::ffi::{c_char, c_int};

use redis_module::raw;

use crate::ffi::{rm, string_bytes, Ctx, RawString};

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
    if event == c"rename_to" || event == c"move_to" {
        crate::guard::guard(ctx.ptr, "keyspace", || {
            super::home_names::note_key(ctx, key);
        });
    }
    if event == c"rename_to" {
        crate::guard::guard(ctx.ptr, "keyspace", || super::strays::on_renamed(ctx, key));
    }
    if event == c"restore" {
        crate::guard::guard(ctx.ptr, "keyspace", || {
            super::strays::on_restored(ctx, key);
            super::spread_restore::on_restored(ctx, key);
        });
    }
    if event == c"move_from" {
        let db = super::spread_transfer::selected_db(ctx);
        MOVED_FROM.with(|m| *m.borrow_mut() = Some((string_bytes(key).to_vec(), db)));
    } else if event == c"move_to" {
        on_move_to(ctx, key);
    }
    0
}

thread_local! {
    /// The key and database of the last `move_from` event, until its `move_to`.
    static MOVED_FROM: RefCell<Option<(Vec<u8>, c_int)>> = const { RefCell::new(None) };
}

/// `MOVE` fires `move_from` in the client's database, then `move_to` in the destination: the
/// pair gives both. The home's holders follow it (`spread_move`), and the client's database is
/// selected again: Valkey 8.1 runs keyspace subscribers on the client that runs the command
/// and selects the event's database on it without selecting the client's own back
/// (valkey-io/valkey#4024), so after `MOVE` the client, and what the server propagates for it
/// (replicas, the AOF), would go on in the destination database. Elsewhere the subscriber's
/// context is a client of its own, and selecting on it changes nothing.
fn on_move_to(ctx: Ctx, key: RawString) {
    let Some((name, from)) = MOVED_FROM.with(|m| m.borrow_mut().take()) else {
        return;
    };
    if name == string_bytes(key) {
        crate::guard::guard(ctx.ptr, "keyspace", || {
            super::spread_move::on_moved(ctx, key, from);
        });
    }
    // SAFETY: ctx is the notification's live context; `from` is a database it just had.
    unsafe { rm!(RedisModule_SelectDb)(ctx.ptr, from) };
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
