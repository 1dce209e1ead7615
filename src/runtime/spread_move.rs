//! `MOVE` of a spread home takes its holders along (one server only: a cluster has database 0
//! alone). The holders live in the home's database; a home moved to another one would read
//! its holders there, find none, and lose their units from its total. So when a counter with
//! holders (current or still folding back) arrives by `MOVE`, its holders follow it, each by a
//! `MOVE` replicated as such (replicas and the AOF see the same moves): in a post-notification
//! job of the same command where the server has them (Redis 7.2+, Valkey), else in the next
//! timer tick (Redis 7.0: until then, about a millisecond, a read of the home in its new
//! database misses the holders' units). A holder the new database already has a key for stays
//! behind (logged, counted in `ctr_holders_left_behind`).
//!
//! `MOVE` fires `move_from` in the source database, then `move_to` in the destination, for the
//! same key in the same command: the pair gives both databases (`keyspace` pairs them).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};

use redis_module::raw;

use super::ctr_store::{select_db, with_counter};
use super::scheduler::{self, Job, When};
use super::spread_transfer::{is_master, selected_db};
use crate::counter::CounterRef;
use crate::ffi::{rm, Ctx, RawString};
use crate::metrics;

/// Holders to move: from database, to database, their names.
struct Follow {
    from: c_int,
    to: c_int,
    holders: Vec<Vec<u8>>,
}

thread_local! {
    /// Holders waiting for the job or timer to move them.
    static DUE: RefCell<Vec<Follow>> = const { RefCell::new(Vec::new()) };
}

/// A key just arrived by `MOVE` from database `from` (its `move_to` event, in the selected
/// database): a spread home schedules its holders to follow.
pub fn on_moved(ctx: Ctx, key: RawString, from: c_int) {
    let Ok(holders) = with_counter(ctx, key, |c| match c {
        Some(CounterRef::Boxed(b)) => {
            let current = b.spread().map(|s| s.holders.clone()).unwrap_or_default();
            let leaving = b.leaving().iter().map(|l| l.name.clone());
            current.into_iter().chain(leaving).collect()
        }
        _ => Vec::new(),
    }) else {
        return;
    };
    if holders.is_empty() || !is_master(ctx) {
        return;
    }
    let to = selected_db(ctx);
    DUE.with(|d| d.borrow_mut().push(Follow { from, to, holders }));
    // Where the server has post-notification jobs (Redis 7.2+, Valkey), the holders move right
    // after the `MOVE`, in the same command: no read ever sees the home without them. Redis 7.0
    // moves them in the next timer tick (about a millisecond later).
    // SAFETY: reading a function pointer that the server filled in (or not) at module init.
    if let Some(add_job) = unsafe { raw::RedisModule_AddPostNotificationJob } {
        // SAFETY: ctx is the notification's live context; the job carries no data.
        let added = unsafe { add_job(ctx.ptr, Some(on_job), std::ptr::null_mut(), None) };
        if added == raw::REDISMODULE_OK as c_int {
            return;
        }
    }
    scheduler::arm(ctx.ptr, When::After(0), &MOVE_DUE, 0);
}

/// Post-notification job: moves every scheduled holder.
unsafe extern "C" fn on_job(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    move_due(Ctx { ptr: ctx });
}

/// Timer (Redis 7.0): moves every scheduled holder.
static MOVE_DUE: Job = Job::once("move-follow", |ctx, _| move_due(ctx));

/// Moves every scheduled holder, each by a replicated `MOVE`, and selects the context's
/// database again (a job may run on the client's own context).
fn move_due(ctx: Ctx) {
    let selected = selected_db(ctx);
    crate::guard::guard(ctx.ptr, "move-follow", || {
        for follow in DUE.with(|d| std::mem::take(&mut *d.borrow_mut())) {
            for holder in &follow.holders {
                move_holder(ctx, holder, follow.from, follow.to);
            }
        }
    });
    select_db(ctx, selected); // the database it had
}

/// `MOVE holder to` in database `from`, replicated; a holder that is not there (never written,
/// or collected) needs nothing, one the destination already has is left behind.
fn move_holder(ctx: Ctx, holder: &[u8], from: c_int, to: c_int) {
    if !select_db(ctx, from) {
        return;
    }
    // SAFETY: ctx is live; "!" replicates, "b" takes (pointer, length), "l" a long long.
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx.ptr,
            c"MOVE".as_ptr(),
            c"!bl".as_ptr(),
            holder.as_ptr().cast::<c_char>(),
            holder.len(),
            std::ffi::c_longlong::from(to),
        )
    };
    if reply.is_null() {
        return;
    }
    // SAFETY: a non-null reply of RM_Call, read then freed once.
    let moved = unsafe {
        let kind = rm!(RedisModule_CallReplyType)(reply);
        let n = rm!(RedisModule_CallReplyInteger)(reply);
        rm!(RedisModule_FreeCallReply)(reply);
        kind == raw::REDISMODULE_REPLY_INTEGER as c_int && n == 1
    };
    let exists = key_exists(ctx, holder);
    if !moved && exists {
        metrics::HOLDERS_LEFT_BEHIND.incr();
        ctx.log_warning(&format!(
            "ctr: holder '{}' stays in database {from}: database {to} already has that key",
            String::from_utf8_lossy(holder)
        ));
    }
}

/// True when `name` (in the selected database) holds a key.
fn key_exists(ctx: Ctx, name: &[u8]) -> bool {
    let key = crate::ffi::KeyName::new(ctx, name);
    with_counter(ctx, key.raw, |c| c.is_some()).unwrap_or(true)
}
