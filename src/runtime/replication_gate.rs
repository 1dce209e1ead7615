//! Sends that wait for the replicas: a transfer step (a giver's debit, a receiver's credit) is
//! announced to the other master only once every online replica of this master holds it, so a
//! failover to any of them can neither lose an acknowledged credit nor resend a debit the new
//! master never made. A write's place in the replication stream is `master_repl_offset` as read
//! after it was propagated (from a timer, never inside the callback that wrote it); a replica
//! holds it once its acknowledged offset (`INFO replication`, `slaveN:...,offset=`) reaches
//! that. Replicas acknowledge about once a second, which bounds the wait when they are healthy.
//! A master without online replicas has nothing to wait for.

use std::ffi::c_char;

use crate::ffi::{rm, Ctx};
use crate::metrics;
use crate::protocol::replicas::parse_info;
pub use crate::protocol::replicas::Replication;

/// True while the server pauses writes and so what they replicate (`CLIENT PAUSE WRITE`, a
/// manual failover, the handoff of an atomic slot migration), counted: the module's own work
/// outside commands (timers, bus receivers) that writes skips that run or drops that message
/// (its sender resends it, as for a lost one). A write made then would be propagated while the
/// server holds replica traffic back, which Redis 8.6 refuses with an assertion (seen: a credit
/// received during a slot migration's handoff crashed the server).
pub fn paused() -> bool {
    let paused = crate::ffi::writes_paused();
    if paused {
        metrics::PAUSED_SKIPS.incr();
    }
    paused
}

/// This master's replication state, read with `INFO replication`. None when it cannot be read
/// (then nothing is sent: the next tick asks again).
pub fn read(ctx: Ctx) -> Option<Replication> {
    // SAFETY: ctx is live; "c" takes a NUL-terminated string.
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx.ptr,
            c"INFO".as_ptr(),
            c"c".as_ptr(),
            c"replication".as_ptr().cast::<c_char>(),
        )
    };
    if reply.is_null() {
        return None;
    }
    let mut len = 0usize;
    // SAFETY: a live reply; the pointer covers len bytes until the reply is freed below.
    let parsed = unsafe {
        let p = rm!(RedisModule_CallReplyStringPtr)(reply, &mut len);
        if p.is_null() {
            None
        } else {
            let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len);
            parse_info(&String::from_utf8_lossy(bytes))
        }
    };
    // SAFETY: returned by RM_Call above, freed once.
    unsafe { rm!(RedisModule_FreeCallReply)(reply) };
    parsed
}

/// The least time between two requests for acknowledgements.
const ACK_REQUEST_MS: i64 = 5;

thread_local! {
    /// When this master last asked its replicas to acknowledge (timers run on the main thread).
    static LAST_ACK_REQUEST: std::cell::Cell<i64> = const { std::cell::Cell::new(i64::MIN) };
}

/// Asks this master's online replicas to acknowledge what they hold now, instead of waiting for
/// their once-a-second acknowledgement: `REPLCONF GETACK *` down the replication stream only
/// (not the AOF), the request `WAIT` has the server send, which a replica answers at once with
/// `REPLCONF ACK <offset>`. Called by a tick that found a send held by its gate, at most once
/// every [`ACK_REQUEST_MS`]; the send then goes at the tick after the answer, milliseconds
/// later, where it waited up to a second. Never while writes are paused (what it replicates
/// would be held back with them).
pub fn ask_replicas_to_acknowledge(ctx: Ctx, replication: &Replication) {
    if replication.slowest_replica.is_none() || crate::ffi::writes_paused() {
        return;
    }
    let now = ctx.now_ms();
    let due = LAST_ACK_REQUEST.with(|last| {
        let due = now.saturating_sub(last.get()) >= ACK_REQUEST_MS;
        if due {
            last.set(now);
        }
        due
    });
    if !due {
        return;
    }
    // SAFETY: ctx is live; "ccA": two C strings, and not to the AOF.
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx.ptr,
            c"REPLCONF".as_ptr(),
            c"ccA".as_ptr(),
            c"GETACK".as_ptr(),
            c"*".as_ptr(),
        );
    }
    metrics::ACK_REQUESTS.incr();
}
