//! The demand each holder of a floored spread counter records on its master: the purchases it
//! refused afresh (soft state, in memory), read by the rebalancer (`floor_moves`) and shown in
//! the home's `CTR.INFO` (`holder_refused_units`). A leaf of the glue: it imports none of it.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::counter::rebalance::{Demand, DemandMeter};
use crate::ffi::{rm, Ctx};

/// Keys whose demand is remembered, at most; past it the table starts over (soft state).
pub const DEMAND_LIMIT: usize = 100_000;

thread_local! {
    /// The demand of each holder as of its home's last rebalance.
    static SEEN: RefCell<HashMap<DbKey, DemandMeter>> = RefCell::new(HashMap::new());
    static DEMAND: RefCell<HashMap<DbKey, DemandMeter>> = RefCell::new(HashMap::new());
}

/// Records a purchase of `amount` refused afresh by the counter at `key` in database `db`.
pub fn record(db: i32, key: &[u8], amount: i64) {
    DEMAND.with(|d| {
        let mut table = d.borrow_mut();
        let entry = (db, key.to_vec());
        if table.len() >= DEMAND_LIMIT && !table.contains_key(&entry) {
            table.clear();
        }
        table.entry(entry).or_default().record_refusal(amount);
    });
}

/// A key name in its database.
pub type DbKey = (i32, Vec<u8>);

pub fn selected_db(ctx: Ctx) -> i32 {
    // SAFETY: ctx is live.
    unsafe { rm!(RedisModule_GetSelectedDb)(ctx.ptr) }
}

/// The demand meter of `key` on this master, for a rebalance: its largest refused amount
/// starts over once read (the totals keep counting).
pub fn take_meter(db: i32, key: &[u8]) -> DemandMeter {
    let meter = demand_of(db, key);
    DEMAND.with(|d| {
        d.borrow_mut()
            .get_mut(&(db, key.to_vec()))
            .map(DemandMeter::reported)
    });
    meter
}

/// On the home's master: the demand of holder `key` since the last rebalance read its
/// `meter` (a meter that went backwards was restarted: all it holds is new).
pub fn since_last_rebalance(db: i32, key: &[u8], meter: DemandMeter) -> Demand {
    let entry = (db, key.to_vec());
    let seen = SEEN.with(|s| {
        let mut table = s.borrow_mut();
        if table.len() >= DEMAND_LIMIT && !table.contains_key(&entry) {
            table.clear();
        }
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
