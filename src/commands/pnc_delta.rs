//! `PNC.STATE key SINCE version`: delta states for `pnc-sync` (issue 36). The rules (what a
//! delta holds, when a version is still answerable) are `crate::pncounter::delta`; this file
//! keeps the table of recent snapshots and replies.
//!
//! The snapshots live in module memory, not in the keyspace: a read-only command records them,
//! nothing is saved or replicated, and a restart (a new epoch) or a table past
//! [`MAX_TABLE_BYTES`] (emptied, a new epoch) only makes the next requests full states.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::pnc_store::read;
use crate::ffi::{random_bytes, Args, CommandError, CommandResult, Ctx, Reply};
use crate::persist::pnc_format::encode_state;
use crate::pncounter::delta::{History, Version};
use crate::pncounter::{identity, PnCounter, ReplicaId};

/// Bytes of snapshots (as encoded states, counted when recorded) before the table starts over.
const MAX_TABLE_BYTES: usize = 64 << 20;

struct Table {
    epoch: u64,
    bytes: usize,
    keys: HashMap<Vec<u8>, History>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<Table>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn fresh() -> u64 {
    u64::from_le_bytes(random_bytes())
}

const BAD_VERSION: CommandError =
    CommandError::fixed("ERR invalid version (give 0, or a version PNC.STATE key SINCE replied)");

/// PNC.STATE key SINCE version: `[version, "delta" | "full", state or nil]`.
pub fn state_since(ctx: Ctx, args: &Args) -> CommandResult {
    let since = match args.bytes(3) {
        b"0" => None,
        text => Some(Version::parse(text).ok_or(BAD_VERSION)?),
    };
    let current = read(ctx, args.raw(1), |c| c.map(PnCounter::shipped))?;
    let mut guard = table();
    let table = guard.get_or_insert_with(|| Table {
        epoch: fresh(),
        bytes: 0,
        keys: HashMap::new(),
    });
    if table.bytes > MAX_TABLE_BYTES {
        *table = Table {
            epoch: fresh(),
            bytes: 0,
            keys: HashMap::new(),
        };
    }
    // This deployment's ids: the parts it wrote are the ones it ships (delta::delta).
    let ident = identity();
    // (the id in use, and with a configured id its failover successors; a random id's earlier
    // ids are left to the whole states pnc-sync ships from time to time).
    let own = |id: &ReplicaId| {
        ident.current().is_some_and(|h| h.id == *id)
            || (ident.configured().is_some() && ident.is_own_lineage(id))
    };
    let empty = PnCounter::new();
    let history = table.keys.entry(args.bytes(1).to_vec()).or_default();
    let answer = history.answer(
        table.epoch,
        current.as_ref().unwrap_or(&empty),
        since,
        fresh,
        |c| encode_state(c).len(),
        own,
    );
    drop(ident);
    table.bytes = table.bytes.saturating_add(answer.grew);
    drop(guard);
    let (kind, blob) = match (&current, &answer.delta) {
        (None, _) => ("full", Reply::Null),
        (Some(_), Some(d)) => ("delta", Reply::Bulk(encode_state(d))),
        (Some(c), None) => ("full", Reply::Bulk(encode_state(c))),
    };
    Ok(Reply::Array(vec![
        Reply::Bulk(answer.version.render().into_bytes()),
        Reply::Bulk(kind.as_bytes().to_vec()),
        blob,
    ]))
}
