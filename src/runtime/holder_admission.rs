//! Holder admission: a grow lists a new holder name only where no key sits yet.
//!
//! A grow of a spread keeps its id, and the names it plans follow from public facts (the id,
//! the home, the slot map, the names the home knows), so a key could be put at a planned name
//! before the grow (`SET`, `RESTORE`, a write inside MULTI or a script, which the holder check
//! cannot stop) and would then be counted in the total, or fail every read with WRONGTYPE. So
//! before a grow lists its new names, each name's master says whether a key sits there:
//! - free (no key of any type): the name may be listed;
//! - taken: the grow plans another attempt at that index (the name is avoided for
//!   `TAKEN_MS`);
//! - unsure, or no answer: nothing is concluded; the name is asked again.
//!
//! Outside a cluster every key is this server's and the grow reads the names itself, within the
//! command. In a cluster the names sit on other masters (or on this one, in slots a command must
//! not read on Valkey): the grow asks over the bus (0xD7, 0xD8, `persist::admission_msg`), or
//! from a timer for this master's own names, and the command waits in the server for the answers
//! (`waiter`, up to `ctr.gather-timeout-ms`), then runs again and lists them. A free answer is
//! trusted for `FREE_MS`: a key made at a free name after its answer and before the listing (a
//! window of one bus round trip) is adopted, as is whatever `RESTORE` writes under a listed
//! name ([threat model](../../docs/CLUSTER.md#who-may-do-what-threat-model)).
//!
//! The machine is `protocol::admission_node`, run here over the node's host.
//!
//! A first spread draws a fresh random id: no key can sit at names no one could know, and it is
//! not asked about.

use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;

use super::ctr_store::is_missing;
use super::scheduler::{self, Job, When};
use super::spread_cluster::NodeId;
use super::spread_transfer::{decode_message, run_and_wake, RedisHost};
use crate::config;
use crate::ffi::{Ctx, Key, KeyName};
use crate::metrics;
use crate::protocol::admission_node::{AdmissionNode, Known, TICK_MS};
use crate::protocol::messages::MessageKind;

thread_local! {
    /// The names asked about (each for a grow of a home, a cluster's database 0, which its
    /// answer wakes), and what their masters said (`protocol::admission_node`).
    static NODE: RefCell<AdmissionNode<NodeId>> = RefCell::new(AdmissionNode::default());
}

/// Runs the admission over this server, then wakes the grows whose questions ended.
fn run<R: Default>(ctx: Ctx, f: impl FnOnce(&mut AdmissionNode<NodeId>, &mut RedisHost) -> R) -> R {
    run_and_wake(
        ctx,
        &NODE,
        "the holder admission",
        f,
        AdmissionNode::take_ended,
    )
}

/// True when a grow's planner must avoid `name`: outside a cluster, a key sits there now; in a
/// cluster, its master said so lately.
pub fn is_taken(ctx: Ctx, name: &[u8], in_cluster: bool) -> bool {
    if in_cluster {
        let known = NODE.with(|n| n.try_borrow().ok()?.known(name, ctx.now_ms()));
        return known == Some(Known::Taken);
    }
    // One server: the key is read here and now; nothing is kept, the next plan reads again.
    let key_name = KeyName::new(ctx, name);
    let taken = !is_missing(&Key::open(ctx, key_name.raw, false));
    if taken {
        metrics::HOLDER_NAMES_TAKEN.incr();
    }
    taken
}

/// True when the master of each of the names a grow of `home` planned (in a cluster) has said
/// lately that it is free; asks about those not known, whose answers wake the grow. The
/// planner avoided the names known taken ([`is_taken`]), so what stays is what is not known.
pub fn all_known_free(ctx: Ctx, home: &[u8], names: &[Vec<u8>]) -> bool {
    let timeout = config::GATHER_TIMEOUT_MS.load(Relaxed);
    let asked = |node: &mut AdmissionNode<NodeId>, host: &mut RedisHost| {
        node.all_known_free(host, home, names, timeout)
    };
    let (all_free, local) = run(ctx, asked);
    if local {
        // This master's own name: read from a timer, outside the command.
        scheduler::arm(ctx.ptr, When::Now, &LOCAL, 0);
    }
    if !all_free {
        scheduler::arm_once(ctx.ptr, When::After(TICK_MS), &TICK);
    }
    all_free
}

/// Answers the asks of this master's own names.
static LOCAL: Job = Job::once("admission-timer", |ctx, _| tick(ctx));

/// Sends again the asks unanswered for a tick (to the master serving the name now), ends those
/// past their deadline, and answers this master's own; armed while asks are under way.
static TICK: Job = Job::while_busy("admission-timer", tick, asking, TICK_MS);

fn asking() -> bool {
    NODE.with(|n| n.try_borrow().map_or(true, |n| n.asking()))
}

fn tick(ctx: Ctx) {
    run(ctx, |node, host| node.tick(host));
}

/// The bus messages: a request (answered with what this master holds at the name) and a
/// response (ends the ask it answers, when it comes from the master asked).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    if let Some(m) = decode_message(kind, payload) {
        run(ctx, |node, host| node.receive(host, from, m));
    }
}
