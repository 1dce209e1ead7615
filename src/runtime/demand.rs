//! This master's rebalancer (`protocol::rebalance_node`) and what it remembers of demand and
//! headroom (`protocol::demand_book`): the one machine `floor_moves` runs, read by the
//! commands for a refusal's fate and by `CTR.INFO` (`holder_refused_units`). A leaf of the
//! glue: it imports none of it but the cluster's node ids.

use std::cell::RefCell;

use super::spread_cluster::NodeId;
use crate::counter::headroom::Refusal;
use crate::counter::rebalance::DemandMeter;
use crate::ffi::{rm, Ctx};
use crate::protocol::demand_book::SpreadKey;
use crate::protocol::rebalance_node::RebalanceNode;

thread_local! {
    /// Soft state of this process: a restart starts from nothing (a round forgotten costs one).
    pub static NODE: RefCell<RebalanceNode<NodeId>> = RefCell::new(RebalanceNode::default());
}

/// Reads or writes the book outside the node's own runs (a command's refusal, `CTR.INFO`).
/// Never entered from inside the node (the node calls no command): a re-entry would find it
/// borrowed, and then the book is left alone (`default`).
fn with_book<R: Default>(f: impl FnOnce(&mut crate::protocol::demand_book::DemandBook) -> R) -> R {
    NODE.with(|n| {
        n.try_borrow_mut()
            .map_or_else(|_| R::default(), |mut n| f(&mut n.book))
    })
}

/// The fate of a purchase of `amount` that a holder of `spread` refused at `now_ms`.
pub fn refusal_fate(spread: SpreadKey, amount: i64, now_ms: i64) -> Refusal {
    with_book(|b| b.refusal_fate(spread, amount, now_ms))
}

/// True when this master's fresh view of `spread`'s whole headroom shows that a purchase of
/// `amount` at `now_ms` was beyond it.
pub fn refusal_proven(spread: SpreadKey, amount: i64, now_ms: i64) -> bool {
    with_book(|b| b.refusal_proven(spread, amount, now_ms))
}

/// Records a purchase of `amount` refused afresh by the counter at `key` in database `db`
/// (for good, or told to retry while budget gathers): its home is due a rebalance while
/// `rebalancing`.
pub fn record(db: i32, key: &[u8], amount: i64, waiting_since: Option<i64>, rebalancing: bool) {
    NODE.with(|n| {
        if let Ok(mut n) = n.try_borrow_mut() {
            n.record_refusal((db, key.to_vec()), amount, waiting_since, rebalancing);
        }
    });
}

/// A purchase (or add) of `amount` at `key` in database `db` still waits at `now_ms` for budget
/// a round gathers (see [`RebalanceNode::keep_waiting`]).
pub fn keep_waiting(db: i32, key: &[u8], amount: i64, now_ms: i64) {
    NODE.with(|n| {
        if let Ok(mut n) = n.try_borrow_mut() {
            n.keep_waiting((db, key.to_vec()), amount, now_ms);
        }
    });
}

/// The demand recorded for `key` in database `db` since this process started.
pub fn demand_of(db: i32, key: &[u8]) -> DemandMeter {
    with_book(|b| b.demand_of(&(db, key.to_vec())))
}

pub fn selected_db(ctx: Ctx) -> i32 {
    // SAFETY: ctx is live.
    unsafe { rm!(RedisModule_GetSelectedDb)(ctx.ptr) }
}
