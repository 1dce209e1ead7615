//! The listing gate's runtime (`crate::protocol::listing_gate`): this server's gate (closed by
//! the holder list changes this master makes, role changes, loads, and listings loaded by
//! `RESTORE`, `MIGRATE` or a slot migration's import, the last three also dating list changes
//! past the clock skew allowed), the replication offsets read for it (`INFO replication`), and
//! the ask for acknowledgements.
//! `CTR.HOLDERS ... AT` blocked by a closed gate waits in the server (`waiter`) up to
//! `ctr.purchase-wait-ms`, while a timer of the gate reads the replicas' state once for all the
//! waiting commands, asks them to acknowledge at once (one `REPLCONF GETACK` round trip) and runs
//! the waiting commands again when it opens; a client that cannot wait (MULTI, a script) or still
//! waiting at the bound gets a `TRYAGAIN`.

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::replication_gate;
use super::scheduler::{self, Job, When};
use crate::ffi::Ctx;
use crate::persist::ctr_type::listings_loaded;
use crate::protocol::listing_gate::ListingGate;

thread_local! {
    static GATE: Cell<ListingGate> = Cell::new(ListingGate::default());
    /// The count of loaded listings the gate last took in (`ctr_type::listings_loaded`).
    static LOADS_SEEN: Cell<u64> = const { Cell::new(0) };
    /// Until when a waiting command may still need the replicas' acknowledgement.
    static ASK_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// This server changed a holder list: the next `CTR.HOLDERS ... AT` waits for the replicas
/// first.
pub fn lists_changed() {
    update(ListingGate::changed);
}

/// This server took homes over (a role change, a load, a listing loaded by `RESTORE`,
/// `MIGRATE` or an import): its lists may not be on its replicas, and its clock may be behind
/// the one that answered for them before. The next `CTR.HOLDERS ... AT` waits for the replicas,
/// and list changes are dated past `ctr.clock-skew-ms` from now.
pub fn took_over() {
    let skew = crate::config::CLOCK_SKEW_MS.load(std::sync::atomic::Ordering::Relaxed);
    update(|gate| gate.took_over(crate::ffi::coarse_now_ms(), skew));
}

/// The clock a holder list change made at `now` is dated by (`ListingGate::dating_clock`).
pub fn dating_clock(now: i64) -> i64 {
    take_in_loads(); // a listing loaded since the gate last looked is a take-over too
    GATE.get().dating_clock(now)
}

fn update(change: impl FnOnce(&mut ListingGate)) {
    let mut gate = GATE.get();
    change(&mut gate);
    GATE.set(gate);
}

/// How often a closed gate is tested while commands wait for it (the replicas are asked to
/// acknowledge at most every 5 ms, `replication_gate::ask_replicas_to_acknowledge`).
const ASK_MS: i64 = 1;

/// The asks, from a timer of their own: a timer's replication is its own, where a command's or
/// a transfer step's (which tests the waiting commands of its key) would wrap the request with
/// its writes.
static ASK: Job = Job::while_busy("listing-gate-ask", ask_tick, closed, ASK_MS);

fn ask_tick(ctx: Ctx) {
    if replicas_hold_lists(ctx, true) {
        // Opened: the waiting commands run again now, not at the waiter's next tick.
        super::waiter::test_waiting(ctx);
    }
}

/// The asks go on while the gate is closed and a command may still wait for it.
fn closed() -> bool {
    !GATE.get().is_open() && ASK_UNTIL.get().is_some_and(|until| Instant::now() < until)
}

/// A command started waiting for the gate, for up to `bound_ms`: the replicas are asked to
/// acknowledge until it opens or the wait ends.
pub fn ask_until_open(ctx: Ctx, bound_ms: i64) {
    let until = Instant::now() + Duration::from_millis(bound_ms.max(0) as u64);
    ASK_UNTIL.set(Some(ASK_UNTIL.get().map_or(until, |u| u.max(until))));
    scheduler::arm_once(ctx.ptr, When::After(0), &ASK);
}

/// True when every online replica holds the holder lists this master answers from. Otherwise,
/// when `ask` (from [`ASK`]'s timer only), asks the replicas to acknowledge at once.
fn replicas_hold_lists(ctx: Ctx, ask: bool) -> bool {
    take_in_loads();
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

/// A listing loaded since the last look (`RESTORE`, `MIGRATE`, an import) is a change the
/// replicas may not hold: it closes the gate.
fn take_in_loads() {
    let loads = listings_loaded();
    if LOADS_SEEN.replace(loads) != loads {
        took_over();
    }
}

/// True when every online replica holds the holder lists this master answers from (read in a
/// command: the replication state is read when the gate is closed).
pub fn lists_held(ctx: Ctx) -> bool {
    replicas_hold_lists(ctx, false)
}

/// True when the gate is open as last proven, without reading the replication state: what a
/// waiting command tests at the waiter's ticks and transfer steps, while the gate's own timer
/// reads the replicas for all of them.
pub fn open_as_proven() -> bool {
    take_in_loads();
    GATE.get().is_open()
}
