//! The Redis runtime of the spread node: what runs between commands (the cluster bus and its
//! routing, read links, timers, blocked clients waiting in the server, keyspace events) and the
//! key access it shares with the commands. It drives the pure rules (`crate::counter`,
//! `crate::protocol`) and never calls into `crate::commands`: data flows from the handlers
//! down, and from the runtime's callbacks into the same core.

// Raw pointers here come from Redis itself (contexts, keys, blocked clients), never from clients.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub(crate) mod bounded_spread;
pub(crate) mod bounded_view;
pub(crate) mod bus;
pub(crate) mod ctr_store;
pub(crate) mod decide;
pub(crate) mod demand;
pub(crate) mod floor_moves;
pub(crate) mod holder_admission;
pub(crate) mod holder_check;
pub(crate) mod home_names;
pub(crate) mod keyspace;
pub(crate) mod listing_gate;
pub(crate) mod pnc_refusals;
pub(crate) mod pnc_snapshots;
pub(crate) mod read_handoff;
pub(crate) mod read_links;
pub(crate) mod replication_gate;
pub(crate) mod scheduler;
pub mod slot_migration;
pub mod spread_audit;
pub(crate) mod spread_cluster;
pub mod spread_collect;
pub(crate) mod spread_gather;
pub(crate) mod spread_move;
pub(crate) mod spread_restore;
pub mod spread_transfer;
pub(crate) mod strays;
pub mod sweep;
pub(crate) mod waiter;

/// Starts the runtime (from the module's load, after the commands): the one bus receiver, the
/// read links, the transfer registry's, collector's and audit's timers, the keyspace and flush
/// events, and atomic slot migration's events.
pub fn register(ctx: *mut redis_module::raw::RedisModuleCtx) {
    bus::register(ctx);
    spread_gather::register(ctx);
    spread_transfer::register(ctx);
    spread_collect::register(ctx);
    spread_audit::register(ctx);
    keyspace::register(ctx);
    slot_migration::register(ctx);
}
