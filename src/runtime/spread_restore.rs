//! `RESTORE` of a spread home under another name while the home lives makes a copy, not a
//! second home: a second home of the same holders would read their units into its own total
//! (counted twice) and could take a fold's credit meant for the real one. So when a counter
//! arrives by `RESTORE` and [`Copy::is_copy`] says it is a copy (its holders carry another
//! home name, which holds a home of the same spread on this master, or was renamed on this
//! master to a name that still does (`home_names`), or, in a cluster, lies in another slot,
//! where only a copy can be), it is detached into an independent counter of its
//! own units (`Counter::detach_from_spread`), replicated as its resulting state. A restore
//! under the home's own name (`RESTORE ... REPLACE`, `MIGRATE`), or after the home is gone,
//! keeps the holders. Counted in `ctr_restored_copies_detached`.
//!
//! First, whatever its name: a restored key keeps only the transfers it debited under that
//! name (`Counter::drop_foreign_transfers`). A payload is the restorer's to write, and a
//! receiver judges a credit by the name it was debited at: a kept outbox entry signed with a
//! name the restorer cannot write would be a credit from that key. Counted in
//! `ctr_restored_transfers_dropped`.

use std::ffi::{c_int, c_void};

use redis_module::raw;

use super::ctr_store::{publish_state, select_db, update_counter, with_counter};
use super::home_names;
use super::spread_cluster::in_cluster;
use super::spread_transfer::{is_master, selected_db};
use crate::counter::collect::{carried_by, Copy};
use crate::counter::{Counter, CounterRef};
use crate::ffi::{string_bytes, Ctx, Key, KeyName, RawString};
use crate::metrics;
use crate::persist::ctr_format;

/// After the `restore` event of `key`: detaches it when it is a copy of a living home;
/// otherwise a home restored under another name than its holders carry is remembered
/// (`home_names`: the `MIGRATE` of a renamed home).
///
/// Replication: a state written from inside the event reaches the stream *before* the
/// `RESTORE` that fired it, and a replica (or the AOF) would then run the `RESTORE ...
/// REPLACE` over the detached state (measured on Redis 7.0, 8.6 and Valkey 9.1: the replica
/// kept a second home). Where the server has post-notification jobs (Redis 7.2+, Valkey) the
/// master judges the key in a job, which runs right after the `RESTORE`, in the same command,
/// and replicates the resulting state after it. Redis 7.0 has none: there every node that runs
/// the `RESTORE` (the master, its replicas replaying it, a server loading its AOF) judges it in
/// place, from the same keys (7.0 has no atomic slot migration, whose imports replicas could
/// not tell).
pub fn on_restored(ctx: Ctx, key: RawString) {
    let name = string_bytes(key);
    // A key arriving by an atomic slot import (Redis sends its snapshot as RESTOREs): the
    // source judged it, and this master does not serve its slot yet.
    if super::slot_migration::importing_key(name) {
        return;
    }
    // SAFETY: reading a function pointer that the server filled in (or not) at module init.
    let Some(add_job) = (unsafe { raw::RedisModule_AddPostNotificationJob }) else {
        judge(ctx, key, Publish::No);
        return;
    };
    if !is_master(ctx) {
        return; // the master's judgement reaches replicas and the AOF as a state
    }
    let job = Box::new((selected_db(ctx), name.to_vec()));
    // SAFETY: ctx is the notification's live context; the job owns its boxed data, freed by
    // `free_job` whether or not it runs.
    let added = unsafe {
        add_job(
            ctx.ptr,
            Some(on_job),
            Box::into_raw(job).cast::<c_void>(),
            Some(free_job),
        )
    };
    if added != raw::REDISMODULE_OK as c_int {
        judge(ctx, key, Publish::No); // refused (the server is loading): in place
    }
}

/// Whether a judged key's rewrite is replicated as its state.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Publish {
    Yes,
    No,
}

/// The post-notification job: judges the restored key, named in its data, and replicates.
unsafe extern "C" fn on_job(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: the data is the boxed (database, name) given to AddPostNotificationJob, alive
    // until `free_job`.
    let Some((db, name)) = (unsafe { data.cast::<(c_int, Vec<u8>)>().as_ref() }) else {
        return;
    };
    let ctx = Ctx { ptr: ctx };
    let selected = selected_db(ctx);
    crate::guard::guard(ctx.ptr, "restore-judge", || {
        select_db(ctx, *db); // the database the RESTORE ran in
        let key = KeyName::new(ctx, name);
        judge(ctx, key.raw, Publish::Yes);
    });
    select_db(ctx, selected); // the database it had
}

unsafe extern "C" fn free_job(data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: the box given to AddPostNotificationJob, freed once here.
        drop(unsafe { Box::from_raw(data.cast::<(c_int, Vec<u8>)>()) });
    }
}

/// Drops what a restored key may not send and detaches a copy of a living home (see
/// [`on_restored`]).
fn judge(ctx: Ctx, key: RawString, publish: Publish) {
    let name = string_bytes(key);
    drop_foreign_transfers(ctx, key, name, publish);
    let Ok(Some((carried, spread_id))) = with_counter(ctx, key, |c| match c {
        Some(CounterRef::Boxed(b)) => carried_by(b),
        _ => None,
    }) else {
        return;
    };
    if !is_copy(ctx, name, &carried, spread_id) {
        home_names::note_key(ctx, key);
        return;
    }
    if rewrite_restored(ctx, key, publish, |c| c.detach_from_spread()).is_some() && is_master(ctx) {
        metrics::RESTORED_COPIES_DETACHED.incr();
        ctx.log_warning(&format!(
            "ctr: '{}' was restored as a copy of the spread counter '{}': it is now a counter of its own units",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(&carried)
        ));
    }
}

/// Changes the restored counter at `key` with `f`, replicated as its resulting state when
/// `publish` says so; None when it could not be written or published.
fn rewrite_restored<R>(
    ctx: Ctx,
    key: RawString,
    publish: Publish,
    f: impl FnOnce(&mut Counter) -> R,
) -> Option<R> {
    let opened = Key::open(ctx, key, true);
    let written = update_counter(&opened, |c, _| {
        let r = f(c);
        Ok((r, ctr_format::encode(c)))
    });
    drop(opened);
    let (r, state) = written.ok()?;
    if publish == Publish::Yes {
        publish_state(ctx, key, &state).ok()?;
    }
    Some(r)
}

/// Drops the restored key's outbox entries it did not debit under `name`, replicated as its
/// resulting state.
fn drop_foreign_transfers(ctx: Ctx, key: RawString, name: &[u8], publish: Publish) {
    let foreign = with_counter(ctx, key, |c| match c {
        Some(CounterRef::Boxed(b)) => b.has_foreign_transfers(name),
        _ => false,
    });
    if foreign != Ok(true) {
        return;
    }
    let dropped = rewrite_restored(ctx, key, publish, |c| c.drop_foreign_transfers(name));
    if let Some(dropped) = dropped.filter(|_| is_master(ctx)) {
        metrics::RESTORED_TRANSFERS_DROPPED.add(dropped as u64);
        ctx.log_warning(&format!(
            "ctr: '{}' was restored with {dropped} transfer(s) debited under another name: dropped, never sent",
            String::from_utf8_lossy(name)
        ));
    }
}

/// `collect::Copy` on this master: the home `name` of spread `spread_id` whose holders carry
/// `carried` is a copy when the carried name, or the name this master saw that home renamed
/// to, holds a home of that spread (or, in a cluster, the carried name is in another slot).
fn is_copy(ctx: Ctx, name: &[u8], carried: &[u8], spread_id: u64) -> bool {
    let other = home_names::living_home(ctx, carried, spread_id).filter(|h| h != name);
    let read = |other_home: Option<&Counter>| {
        Copy {
            name,
            carried_home: carried,
            spread_id,
            other_home,
            in_cluster: in_cluster(ctx),
        }
        .is_copy()
    };
    match other {
        Some(home_name) => {
            let home_key = KeyName::new(ctx, &home_name);
            let copy = with_counter(ctx, home_key.raw, |c| match c {
                Some(CounterRef::Boxed(b)) => read(Some(b)),
                _ => read(None),
            });
            copy == Ok(true)
        }
        None => read(None),
    }
}
