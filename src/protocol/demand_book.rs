//! What one master remembers for the rebalancer (soft state, in memory): the purchases each
//! holder of a floored spread counter refused afresh (its demand meter), each holder's meter as
//! of its home's last rebalance, and the whole headroom the last round told this master, which
//! decides whether a holder's refusal is final (`counter::headroom`). Owned by the rebalance
//! node (`rebalance_node.rs`); the commands read it for refusals and `CTR.INFO`.

use std::collections::HashMap;

use crate::counter::headroom::{HeadroomView, Refusal};
use crate::counter::rebalance::{Demand, DemandMeter};

/// Keys whose demand is remembered, at most; past it a table starts over (soft state).
pub const DEMAND_LIMIT: usize = 100_000;

/// A key name in its database.
pub type DbKey = (i32, Vec<u8>);

/// A floored spread counter on this master: its database and spread id (its identity: a home
/// name alone could be a later spread of the same name, and a renamed home keeps its id).
pub type SpreadKey = (i32, u64);

#[derive(Default)]
pub struct DemandBook {
    /// Each key's refusals since this process started.
    demand: HashMap<DbKey, DemandMeter>,
    /// Each holder's meter as of its home's last rebalance (on the home's master).
    seen: HashMap<DbKey, DemandMeter>,
    /// What this master knows of each floored spread counter's whole headroom.
    headroom: HashMap<SpreadKey, HeadroomView>,
}

impl DemandBook {
    /// A round that ran at `round_ms` saw `units` of headroom in the whole counter; its bound
    /// arrived here at `now_ms`.
    pub fn saw_headroom(&mut self, spread: SpreadKey, units: i64, round_ms: i64, now_ms: i64) {
        self.view(spread).saw(units, round_ms, now_ms);
    }

    /// The fate of a purchase of `amount` that a holder of `spread` refused at `now_ms`.
    pub fn refusal_fate(&mut self, spread: SpreadKey, amount: i64, now_ms: i64) -> Refusal {
        self.view(spread).refusal(amount, now_ms)
    }

    /// True when this master's fresh view of `spread`'s whole headroom shows that a purchase
    /// of `amount` at `now_ms` was beyond it (read only: no entry is made).
    pub fn refusal_proven(&self, spread: SpreadKey, amount: i64, now_ms: i64) -> bool {
        (self.headroom.get(&spread)).is_some_and(|v| v.proves_refusal(amount, now_ms))
    }

    fn view(&mut self, spread: SpreadKey) -> &mut HeadroomView {
        make_room(&mut self.headroom, &spread); // a counter forgotten waits for its next round
        self.headroom.entry(spread).or_default()
    }

    /// Records a purchase of `amount` refused afresh by the counter at `key`: for good, or
    /// (`waiting_since`) told to retry while budget gathers.
    pub fn record(&mut self, key: DbKey, amount: i64, waiting_since: Option<i64>) {
        make_room(&mut self.demand, &key);
        let meter = self.demand.entry(key).or_default();
        match waiting_since {
            Some(now) => meter.record_wait(amount, now),
            None => meter.record_refusal(amount),
        }
    }

    /// A purchase of `amount` at `key` still waiting at `now_ms` for budget to gather (its buyer
    /// blocked in the server): see [`DemandMeter::keep_waiting`].
    pub fn keep_waiting(&mut self, key: DbKey, amount: i64, now_ms: i64) {
        make_room(&mut self.demand, &key);
        self.demand
            .entry(key)
            .or_default()
            .keep_waiting(amount, now_ms);
    }

    /// The demand meter of `key` for a rebalance: its largest refused amount starts over once
    /// read (the totals keep counting).
    pub fn take_meter(&mut self, key: &DbKey, now_ms: i64) -> DemandMeter {
        let Some(meter) = self.demand.get_mut(key) else {
            return DemandMeter::default();
        };
        meter.renew_waiting(now_ms);
        let read = *meter;
        meter.reported();
        read
    }

    /// On the home's master: the demand of holder `key` since the last rebalance read its
    /// `meter` (a meter that went backwards was restarted: all it holds is new).
    pub fn since_last_rebalance(&mut self, key: DbKey, meter: DemandMeter) -> Demand {
        make_room(&mut self.seen, &key);
        let seen = self.seen.insert(key, meter);
        meter.since(&seen.unwrap_or_default())
    }

    /// The demand recorded for `key` since this process started.
    pub fn demand_of(&self, key: &DbKey) -> DemandMeter {
        self.demand.get(key).copied().unwrap_or_default()
    }
}

/// Before an entry for `key` is added to one of these tables: a table at [`DEMAND_LIMIT`]
/// entries without it starts over (what it forgets only costs a round).
pub fn make_room<K: Eq + std::hash::Hash, V>(table: &mut HashMap<K, V>, key: &K) {
    if table.len() >= DEMAND_LIMIT && !table.contains_key(key) {
        table.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::rebalance::WAITING_HOLD_MS;

    #[test]
    fn a_meter_read_by_a_rebalance_reports_only_what_came_after() {
        let mut book = DemandBook::default();
        let key = (0, b"h".to_vec());
        book.record(key.clone(), 5, None);
        let first = book.take_meter(&key, 0);
        assert_eq!(
            book.since_last_rebalance(key.clone(), first).refused_units,
            5
        );
        book.record(key.clone(), 3, None);
        let second = book.take_meter(&key, 0);
        assert_eq!(
            book.since_last_rebalance(key.clone(), second).refused_units,
            3
        );
        assert_eq!(book.demand_of(&key).refused_units, 8);
    }

    #[test]
    fn a_purchase_still_waiting_is_demand_again_at_the_next_report_without_a_new_refusal() {
        let mut book = DemandBook::default();
        let key = (0, b"h".to_vec());
        book.record(key.clone(), 300, Some(0));
        let first = book.take_meter(&key, 10);
        assert_eq!((first.refusals, first.largest_refused), (1, 300));
        // Its buyer still blocked in the server: no refusal counted, but the next report
        // counts its amount again, as a retry's would be.
        book.keep_waiting(key.clone(), 300, 100);
        assert_eq!(book.demand_of(&key).refusals, 1);
        let second = book.take_meter(&key, 200);
        assert_eq!((second.refusals, second.largest_refused), (2, 300));
        // Not kept waiting past the hold: no more demand.
        let third = book.take_meter(&key, 200 + WAITING_HOLD_MS + 1);
        assert_eq!((third.refusals, third.largest_refused), (2, 0));
    }

    #[test]
    fn a_fresh_bound_below_the_amount_proves_a_refusal() {
        let mut book = DemandBook::default();
        assert!(!book.refusal_proven((0, 7), 10, 0));
        book.saw_headroom((0, 7), 4, 0, 0);
        assert!(book.refusal_proven((0, 7), 10, 10));
        assert_eq!(book.refusal_fate((0, 7), 3, 10), Refusal::Retry);
        assert_eq!(book.refusal_fate((0, 7), 10, 10), Refusal::Final);
    }
}
