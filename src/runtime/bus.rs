//! The one cluster-bus receiver of the spread node: registered for every kind of the message
//! table (`crate::protocol::messages`), it drops what a receiver that writes must not take
//! while the server pauses writes (the senders resend), contains a panic under the receiving
//! machine's name, and hands each message to the machine the table names.

use std::ffi::c_char;

use redis_module::raw;

use super::spread_cluster::on_bus_message;
use super::{floor_moves, holder_admission, holder_check, replication_gate};
use super::{spread_audit, spread_collect};
use super::{spread_gather, spread_transfer};
use crate::ffi::rm;
use crate::protocol::messages::{MessageKind, Receiver};

/// Registers the receiver for every kind (from the module's load; harmless outside a cluster).
pub fn register(ctx: *mut raw::RedisModuleCtx) {
    for kind in MessageKind::ALL {
        // SAFETY: called from OnLoad with its live context.
        unsafe { rm!(RedisModule_RegisterClusterMessageReceiver)(ctx, kind.byte(), Some(receive)) };
    }
}

/// The server's callback for this module's bus messages.
unsafe extern "C" fn receive(
    ctx: *mut raw::RedisModuleCtx,
    sender: *const c_char,
    kind: u8,
    payload: *const std::ffi::c_uchar,
    len: u32,
) {
    let Some(kind) = MessageKind::from_byte(kind) else {
        return;
    };
    let receiver = kind.receiver();
    if receiver.writes() && replication_gate::paused() {
        return;
    }
    // SAFETY: the server passes the sender's 40-byte id and len payload bytes.
    unsafe {
        on_bus_message(
            ctx,
            receiver.callback(),
            sender,
            payload,
            len,
            |c, from, bytes| match receiver {
                Receiver::Gather => spread_gather::receive(c, from, kind, bytes),
                Receiver::Transfer => spread_transfer::receive(c, from, kind, bytes),
                Receiver::Collect => spread_collect::receive(c, from, kind, bytes),
                Receiver::Audit => spread_audit::receive(c, from, kind, bytes),
                Receiver::BudgetMoves => floor_moves::receive(c, from, kind, bytes),
                Receiver::HolderCheck => holder_check::receive(c, from, kind, bytes),
                Receiver::HolderAdmission => holder_admission::receive(c, from, kind, bytes),
            },
        )
    }
}
