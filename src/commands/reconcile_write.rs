//! Writing a reconcile and its reply, shared by `CTR.RECONCILE` of a counter
//! (`ctr_reconcile.rs`) and of a spread home (`spread_reconcile.rs`), which each import it, so
//! that neither imports the other.

use crate::counter::{ReconcileOp, Repair};
use crate::ffi::{CommandError, Key, Reply};
use crate::metrics;
use crate::persist::effect::{CounterOp, Effect};
use crate::runtime::ctr_store::{update_counter, Write};

/// `[value, drift]`: the drift is an integer, or its exact decimal text (a bulk string, which
/// every client reads) in the rare case that it lies outside the i64 range: a counter near one
/// end of the range repaired to the other end.
pub(super) fn reply(repair: Repair) -> Reply {
    let drift = match i64::try_from(repair.drift) {
        Ok(d) => Reply::Integer(d),
        Err(_) => Reply::Bulk(repair.drift.to_string().into_bytes()),
    };
    Reply::Array(vec![Reply::Integer(repair.value), drift])
}

/// Applies `op` to the counter in `key` (open for writing), then replicates, notifies and
/// counts the drift when it changed something.
pub(super) fn write_reconcile(
    w: &Write,
    key: Key,
    op: ReconcileOp,
) -> Result<Repair, CommandError> {
    let by_name = crate::counter::spread::bounds_by_name(crate::ffi::string_bytes(w.key_name));
    let (repair, before) = update_counter(&key, |c, before| {
        Ok((c.apply_reconcile_under(&op, by_name)?, before))
    })?;
    drop(key); // closed before the keyspace event fires
    if repair.changed {
        let effect = Effect {
            op: CounterOp::Reconcile(op),
            expire_at: None,
        };
        w.finish(&effect, before, c"ctr.reconcile")?;
        metrics::record_drift(repair.drift);
    }
    Ok(repair)
}
