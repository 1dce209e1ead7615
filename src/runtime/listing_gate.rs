//! The listing gate's runtime (`crate::protocol::listing_gate`): this server's gate (closed by
//! the holder list changes this master makes, role changes, loads, and listings loaded by
//! `RESTORE`, `MIGRATE` or a slot migration's import), the replication offsets read for it
//! (`INFO replication`), and the ask for acknowledgements.
//! `CTR.HOLDERS ... AT` blocked by a closed gate waits in the server (`waiter`) up to
//! `ctr.purchase-wait-ms`, asked again at the waiter's ticks, which ask the replicas to
//! acknowledge at once (one `REPLCONF GETACK` round trip); a client that cannot wait (MULTI, a
//! script) or still waiting at the bound gets a `TRYAGAIN`.

use std::cell::Cell;

use super::replication_gate;
use crate::ffi::Ctx;
use crate::persist::ctr_type::listings_loaded;
use crate::protocol::listing_gate::ListingGate;

thread_local! {
    static GATE: Cell<ListingGate> = Cell::new(ListingGate::default());
    /// The count of loaded listings the gate last took in (`ctr_type::listings_loaded`).
    static LOADS_SEEN: Cell<u64> = const { Cell::new(0) };
}

/// This server changed a holder list, or its lists may no longer be on its replicas (a role
/// change, a load): the next `CTR.HOLDERS ... AT` waits for the replicas first.
pub fn lists_changed() {
    GATE.with(|g| {
        let mut gate = g.get();
        gate.changed();
        g.set(gate);
    });
}

/// True when every online replica holds the holder lists this master answers from. Otherwise,
/// when `ask` (never inside a command: its replication would be wrapped in the command's),
/// asks the replicas to acknowledge at once.
pub fn replicas_hold_lists(ctx: Ctx, ask: bool) -> bool {
    // A listing loaded (`RESTORE`, `MIGRATE`, an import) is a change the replicas may not hold.
    let loads = listings_loaded();
    if LOADS_SEEN.replace(loads) != loads {
        lists_changed();
    }
    let mut gate = GATE.get();
    if gate.is_open() {
        return true;
    }
    let Some(now) = replication_gate::read(ctx) else {
        return false;
    };
    let open = gate.open(now.master_offset, now.slowest_replica);
    GATE.set(gate);
    if !open && ask {
        replication_gate::ask_replicas_to_acknowledge(ctx, &now);
    }
    open
}
