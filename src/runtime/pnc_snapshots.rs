//! The recent snapshots `PNC.STATE key SINCE version` answers deltas from (issue 36), kept in
//! module memory, not in the keyspace: a read-only command records them, nothing is saved or
//! replicated, and a restart (a new epoch) or a table past [`MAX_TABLE_BYTES`] (emptied, a new
//! epoch) only makes the next requests full states. The rules (what a delta holds, when a
//! version is still answerable) are `crate::pncounter::delta`.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::ffi::random_bytes;
use crate::persist::pnc_format::encode_state;
use crate::pncounter::delta::{Answer, History, Version};
use crate::pncounter::{PnCounter, ReplicaId};

/// Bytes of snapshots (as encoded states, counted when recorded) before the table starts over.
const MAX_TABLE_BYTES: usize = 64 << 20;

struct Table {
    epoch: u64,
    bytes: usize,
    keys: HashMap<Vec<u8>, History>,
}

impl Table {
    fn new() -> Table {
        Table {
            epoch: fresh(),
            bytes: 0,
            keys: HashMap::new(),
        }
    }
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<Table>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn fresh() -> u64 {
    u64::from_le_bytes(random_bytes())
}

/// Records `current` (the key's shipped state) as a version of `key` if it changed, and
/// answers `since` (None: a whole state); `own` tells this deployment's ids, whose parts a
/// delta ships.
pub fn answer(
    key: &[u8],
    current: &PnCounter,
    since: Option<Version>,
    own: impl Fn(&ReplicaId) -> bool,
) -> Answer {
    let mut guard = table();
    let table = guard.get_or_insert_with(Table::new);
    if table.bytes > MAX_TABLE_BYTES {
        *table = Table::new();
    }
    let history = table.keys.entry(key.to_vec()).or_default();
    let answer = history.answer(
        table.epoch,
        current,
        since,
        fresh,
        |c| encode_state(c).len(),
        own,
    );
    table.bytes = table.bytes.saturating_add(answer.grew);
    answer
}
