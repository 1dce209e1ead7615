//! The demand each holder of a floored spread counter records on its master: the purchases it
//! refused afresh (soft state, in memory), read by the rebalancer (`floor_moves`) and shown in
//! the home's `CTR.INFO` (`holder_refused_units`); and the whole headroom the last rebalance
//! round saw, which decides whether a holder's refusal is final
//! (`counter::headroom`). A leaf of the glue: it imports none of it.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::counter::headroom::{HeadroomView, Refusal};
use crate::counter::rebalance::{Demand, DemandMeter};
use crate::ffi::{rm, Ctx};

/// Keys whose demand is remembered, at most; past it the table starts over (soft state).
pub const DEMAND_LIMIT: usize = 100_000;

thread_local! {
    /// The demand of each holder as of its home's last rebalance.
    static SEEN: RefCell<HashMap<DbKey, DemandMeter>> = RefCell::new(HashMap::new());
    static DEMAND: RefCell<HashMap<DbKey, DemandMeter>> = RefCell::new(HashMap::new());
    /// What this master knows of each floored spread counter's whole headroom.
    static HEADROOM: RefCell<HashMap<SpreadKey, HeadroomView>> = RefCell::new(HashMap::new());
}

/// A floored spread counter on this master: its database and spread id (its identity: a home
/// name alone could be a later spread of the same name, and a renamed home keeps its id).
pub type SpreadKey = (i32, u64);

/// A rebalance round that ran at `round_ms` saw `units` of headroom in the whole counter; its
/// bound arrived here at `now_ms`.
pub fn saw_headroom(spread: SpreadKey, units: i64, round_ms: i64, now_ms: i64) {
    with_headroom(spread, |view| view.saw(units, round_ms, now_ms));
}

/// The fate of a purchase of `amount` that a holder of `spread` refused at `now_ms`.
pub fn refusal_fate(spread: SpreadKey, amount: i64, now_ms: i64) -> Refusal {
    with_headroom(spread, |view| view.refusal(amount, now_ms))
}

/// True when this master's fresh view of `spread`'s whole headroom shows that a purchase of
/// `amount` at `now_ms` was beyond it (read only: no entry is made).
pub fn refusal_proven(spread: SpreadKey, amount: i64, now_ms: i64) -> bool {
    HEADROOM.with(|h| {
        h.borrow()
            .get(&spread)
            .is_some_and(|view| view.proves_refusal(amount, now_ms))
    })
}

fn with_headroom<R>(spread: SpreadKey, f: impl FnOnce(&mut HeadroomView) -> R) -> R {
    HEADROOM.with(|h| {
        let mut table = h.borrow_mut();
        make_room(&mut table, &spread); // a counter forgotten waits for its next round
        f(table.entry(spread).or_default())
    })
}

/// Records a purchase of `amount` refused afresh by the counter at `key` in database `db`:
/// for good, or (`waiting_since`) told to retry while budget gathers.
pub fn record(db: i32, key: &[u8], amount: i64, waiting_since: Option<i64>) {
    DEMAND.with(|d| {
        let mut table = d.borrow_mut();
        let entry = (db, key.to_vec());
        make_room(&mut table, &entry);
        let meter = table.entry(entry).or_default();
        match waiting_since {
            Some(now) => meter.record_wait(amount, now),
            None => meter.record_refusal(amount),
        }
    });
}

/// Before an entry for `key` is added to one of these soft-state tables: a table at
/// [`DEMAND_LIMIT`] entries without it starts over (what it forgets only costs a round).
fn make_room<K: Eq + std::hash::Hash, V>(table: &mut HashMap<K, V>, key: &K) {
    if table.len() >= DEMAND_LIMIT && !table.contains_key(key) {
        table.clear();
    }
}

/// A key name in its database.
pub type DbKey = (i32, Vec<u8>);

pub fn selected_db(ctx: Ctx) -> i32 {
    // SAFETY: ctx is live.
    unsafe { rm!(RedisModule_GetSelectedDb)(ctx.ptr) }
}

/// The demand meter of `key` on this master, for a rebalance: its largest refused amount
/// starts over once read (the totals keep counting).
pub fn take_meter(db: i32, key: &[u8], now_ms: i64) -> DemandMeter {
    DEMAND.with(|d| {
        let mut table = d.borrow_mut();
        let Some(meter) = table.get_mut(&(db, key.to_vec())) else {
            return DemandMeter::default();
        };
        meter.renew_waiting(now_ms);
        let read = *meter;
        meter.reported();
        read
    })
}

/// On the home's master: the demand of holder `key` since the last rebalance read its
/// `meter` (a meter that went backwards was restarted: all it holds is new).
pub fn since_last_rebalance(db: i32, key: &[u8], meter: DemandMeter) -> Demand {
    let entry = (db, key.to_vec());
    let seen = SEEN.with(|s| {
        let mut table = s.borrow_mut();
        make_room(&mut table, &entry);
        table.insert(entry, meter)
    });
    meter.since(&seen.unwrap_or_default())
}

/// The demand recorded for `key` in database `db` since this process started.
pub fn demand_of(db: i32, key: &[u8]) -> DemandMeter {
    DEMAND.with(|d| {
        let table = d.borrow();
        table.get(&(db, key.to_vec())).copied().unwrap_or_default()
    })
}
