//! Spread homes that live under a name other than the one their holders carry (a `RENAME`, a
//! renamed home restored on another node by `MIGRATE`): (database, carried name) to (spread id,
//! current name), on this node. Read where a home is looked up by the name its holders carry:
//! the rebalancer (a holder's demand reaches the renamed home) and the restore check (a copy
//! of a renamed home, restored under a third name of the same slot, is told apart from the
//! home and detached, `spread_restore`).
//!
//! Soft state that a restart and a failover keep: every home loaded under such a name (RDB,
//! `DEBUG RELOAD`, a replica's full sync: recorded by the type's load, `persist::ctr_type`)
//! and every state set by `CTR.SETSTATE` (the AOF, the replication stream) is entered, as are
//! `RENAME`s, `MOVE`s and restores, on masters and replicas alike. Entries are hints: a reader
//! checks that the name still holds a home of that spread id. At most [`HOME_NAMES_LIMIT`]
//! entries; past it the table starts over (a copy of a home renamed long ago would then be a
//! second home, the case before this table). Of the glue it imports only key access
//! (`ctr_store`) and the selected database (`demand`).

use std::cell::RefCell;
use std::collections::HashMap;

use super::ctr_store::with_counter;
use super::demand::selected_db;
use crate::counter::collect::{carried_by, is_home_of};
use crate::counter::{Counter, CounterRef};
use crate::ffi::{string_bytes, Ctx, KeyName, RawString};

/// Renamed homes remembered, at most.
pub const HOME_NAMES_LIMIT: usize = 100_000;

/// A name in its database.
type DbName = (i32, Vec<u8>);

thread_local! {
    static HOME_NAMES: RefCell<HashMap<DbName, (u64, Vec<u8>)>> = RefCell::new(HashMap::new());
}

/// The home `c` now lives under `name` in `db`: remembered when its holders carry another name,
/// forgotten when they carry this one. `replace`: false keeps an entry already there (what a
/// load records: the first home loaded is the home, a later one a copy).
pub fn note(db: i32, name: &[u8], c: &Counter, replace: bool) {
    if let Some((carried, spread_id)) = carried_by(c) {
        note_carried(db, name, carried, spread_id, replace);
    }
}

fn note_carried(db: i32, name: &[u8], carried: Vec<u8>, spread_id: u64, replace: bool) {
    HOME_NAMES.with(|t| {
        let mut table = t.borrow_mut();
        let entry = (db, carried);
        if entry.1 == name {
            table.remove(&entry);
            return;
        }
        if !replace && table.contains_key(&entry) {
            return;
        }
        if table.len() >= HOME_NAMES_LIMIT && !table.contains_key(&entry) {
            table.clear();
        }
        table.insert(entry, (spread_id, name.to_vec()));
    });
}

/// After an event that put a value under `key` (`rename_to`, `move_to`, a restore that is
/// not a copy): notes it when it is a home living under another name than its holders carry.
pub fn note_key(ctx: Ctx, key: RawString) {
    let db = selected_db(ctx);
    let _ = with_counter(ctx, key, |c| {
        if let Some(CounterRef::Boxed(b)) = c {
            note(db, string_bytes(key), b, true);
        }
    });
}

/// Enters the homes loaded (RDB, `RESTORE`) since the last look; an entry already there stays.
pub fn take_loaded() {
    for (db, name, carried, spread_id) in crate::persist::ctr_type::take_loaded_homes() {
        note_carried(db, &name, carried, spread_id, false);
    }
}

/// The name this node saw the home of spread `spread_id` whose holders carry `carried` renamed
/// to in `db` (a hint: check it holds that home).
fn renamed_to(db: i32, carried: &[u8], spread_id: u64) -> Option<Vec<u8>> {
    take_loaded();
    HOME_NAMES.with(|t| {
        let table = t.borrow();
        let (id, name) = table.get(&(db, carried.to_vec()))?;
        (*id == spread_id).then(|| name.clone())
    })
}

/// Where the home of spread `spread_id` whose holders carry `carried` lives in the selected
/// database, as far as this node knows: the carried name when it holds that home, else the
/// name it was renamed to here when that holds it.
pub fn living_home(ctx: Ctx, carried: &[u8], spread_id: u64) -> Option<Vec<u8>> {
    let renamed = renamed_to(selected_db(ctx), carried, spread_id);
    std::iter::once(carried.to_vec())
        .chain(renamed)
        .find(|name| holds_home(ctx, name, spread_id))
}

/// True when `name` holds a home of the spread `spread_id` (in the selected database).
pub fn holds_home(ctx: Ctx, name: &[u8], spread_id: u64) -> bool {
    let key = KeyName::new(ctx, name);
    let home = with_counter(
        ctx,
        key.raw,
        |c| matches!(c, Some(CounterRef::Boxed(b)) if is_home_of(b, spread_id)),
    );
    home == Ok(true)
}

/// The current name of the home whose holders carry `carried`, in the selected database: the
/// name it was renamed to here when that holds it, else `carried`.
pub fn current_home(ctx: Ctx, carried: Vec<u8>) -> Vec<u8> {
    take_loaded();
    let entry = HOME_NAMES.with(|t| {
        t.borrow()
            .get(&(selected_db(ctx), carried.clone()))
            .cloned()
    });
    match entry {
        Some((spread_id, _)) => living_home(ctx, &carried, spread_id).unwrap_or(carried),
        None => carried,
    }
}
