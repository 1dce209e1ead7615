//! Typed commands for the [redis-ctr](../../README.md) module on the `redis` crate, in the style
//! of redis-rs's `JsonCommands`: [`CtrCommands`] on every sync connection (a `Connection`, a
//! `cluster::ClusterConnection`, ...) and, with the `aio` feature, [`AsyncCtrCommands`] on every
//! async one (multiplexed, `cluster_async`, ...). Replies are the same whatever the protocol
//! (RESP2 flat arrays or RESP3 maps): `CTR.INFO` is a [`CounterInfo`], refusals are `None`,
//! and the module's errors are a [`ModuleError`] inside [`CtrError`].
//!
//! [`CoalescingWriter`] sums adds locally and flushes each key's sum as one tokened `CTR.ADD`,
//! retried with the same token until acknowledged, so each sum counts exactly once.
//!
//! ```no_run
//! use redis_ctr_client::{AddOptions, CtrCommands};
//! # fn main() -> Result<(), redis_ctr_client::CtrError> {
//! let mut con = redis::Client::open("redis://127.0.0.1:6379/")?.get_connection()?;
//! let paid = con.ctr_add_with("orders:paid", 1, &AddOptions::new().token("order-1001"))?;
//! let stock = con.ctr_decrfloor("sale:stock", 4)?; // None: refused by the floor
//! # Ok(()) }
//! ```

mod calls;
mod commands;
mod error;
mod reply;
pub mod spread;
mod types;
pub mod writer;

pub use calls::Rate;
#[cfg(feature = "aio")]
pub use commands::AsyncCtrCommands;
pub use commands::{CtrCommands, CtrPipelineCommands};
pub use error::{CtrError, ModuleError};
pub use spread::SpreadRouter;
pub use types::{
    AddOptions, CounterInfo, IncrexOptions, Increxed, PncInfo, PncReplica, Reconciled, Source,
    Throttled,
};
pub use writer::{CoalescingWriter, Connector, WriterConfig, WriterError, WriterStats};
