//! Holder admission: a grow lists a new holder name only where no key sits yet.
//!
//! A grow of a spread keeps its id, and the names it plans follow from public facts (the id,
//! the home, the slot map, the names the home knows), so a key could be put at a planned name
//! before the grow (`SET`, `RESTORE`, a write inside MULTI or a script, which the holder check
//! cannot stop) and would then be counted in the total, or fail every read with WRONGTYPE. So
//! before a grow lists its new names, each name's master says whether a key sits there:
//! - free (no key of any type): the name may be listed;
//! - taken: the grow plans another attempt at that index (the name is avoided for
//!   [`TAKEN_MS`]);
//! - unsure, or no answer: nothing is concluded; the name is asked again.
//!
//! Outside a cluster every key is this server's and the grow reads the names itself, within the
//! command. In a cluster the names sit on other masters (or on this one, in slots a command must
//! not read on Valkey): the grow asks over the bus (0xD7, 0xD8, `persist::admission_msg`), or
//! from a timer for this master's own names, and the command waits in the server for the answers
//! (`waiter`, up to `ctr.gather-timeout-ms`), then runs again and lists them. A free answer is
//! trusted for [`FREE_MS`]: a key made at a free name after its answer and before the listing (a
//! window of one bus round trip) is adopted, as is whatever `RESTORE` writes under a listed
//! name ([threat model](../../docs/CLUSTER.md#who-may-do-what-threat-model)).
//!
//! A first spread draws a fresh random id: no key can sit at names no one could know, and it is
//! not asked about.

use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;

use super::ctr_store::is_missing;
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, NodeId};
use super::spread_collect::select_db;
use super::spread_transfer::{route, serves};
use super::waiter;
use crate::config;
use crate::ffi::{Ctx, Key, KeyName};
use crate::metrics;
use crate::persist::admission_msg::{self as msg, NameAnswer};
use crate::protocol::messages::MessageKind;
use crate::protocol::name_queries::{NameQueries, Opened, Query};

const MSG_REQUEST: MessageKind = MessageKind::AdmissionRequest;
const MSG_RESPONSE: MessageKind = MessageKind::AdmissionResponse;

/// How often unanswered asks are sent again and ended at their deadline.
const TICK_MS: i64 = 20;
/// How long a free answer lets a grow list the name.
const FREE_MS: i64 = 1_000;
/// How long a taken name is avoided by this node's grows.
const TAKEN_MS: i64 = 60_000;
/// The most names asked about at once, and the most answers kept.
const MAX_ASKS: usize = 10_000;
const MAX_ANSWERS: usize = 100_000;

/// What this node knows of a name, and until when.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Known {
    Free,
    Taken,
}

thread_local! {
    /// The names asked about (each for a grow of a home, a cluster's database 0, which its
    /// answer wakes), and what their masters said.
    static ADMISSION: RefCell<NameQueries<NodeId, Known>> =
        RefCell::new(NameQueries::new(MAX_ASKS, MAX_ANSWERS));
}

/// True when a grow's planner must avoid `name`: outside a cluster, a key sits there now; in a
/// cluster, its master said so lately.
pub fn is_taken(ctx: Ctx, name: &[u8], in_cluster: bool) -> bool {
    if in_cluster {
        return known(name, ctx.now_ms()) == Some(Known::Taken);
    }
    // One server: the key is read here and now; nothing is kept, the next plan reads again.
    let taken = answer_here(ctx, name) == NameAnswer::Taken;
    if taken {
        metrics::HOLDER_NAMES_TAKEN.incr();
    }
    taken
}

/// True when the master of each of the names a grow of `home` planned (in a cluster) has said
/// lately that it is free; asks about those not known, whose answers wake the grow. The
/// planner avoided the names known taken ([`is_taken`]), so what stays is what is not known.
pub fn all_known_free(ctx: Ctx, home: &[u8], names: &[Vec<u8>]) -> bool {
    let now = ctx.now_ms();
    let mut all_free = true;
    for name in names {
        if known(name, now) != Some(Known::Free) {
            ask(ctx, home, name);
            all_free = false;
        }
    }
    all_free
}

fn known(name: &[u8], now: i64) -> Option<Known> {
    ADMISSION.with(|a| a.borrow().known(name, now))
}

fn remember(name: &[u8], answer: NameAnswer, now: i64) {
    let (known, trusted_ms) = match answer {
        NameAnswer::Free => (Known::Free, FREE_MS),
        NameAnswer::Taken => {
            metrics::HOLDER_NAMES_TAKEN.incr();
            (Known::Taken, TAKEN_MS)
        }
        NameAnswer::Unsure => return, // nothing concluded: asked again
    };
    let until = now.saturating_add(trusted_ms);
    ADMISSION.with(|a| a.borrow_mut().keep(name, known, until, now));
}

/// What this master says of `name`: free when no key of any type is there.
fn answer_here(ctx: Ctx, name: &[u8]) -> NameAnswer {
    if cluster::in_cluster(ctx) {
        select_db(ctx, 0);
        if !serves(ctx, name) {
            return NameAnswer::Unsure;
        }
    }
    let key_name = KeyName::new(ctx, name);
    if is_missing(&Key::open(ctx, key_name.raw, false)) {
        NameAnswer::Free
    } else {
        NameAnswer::Taken
    }
}

/// Asks the master of `name` about it for a grow of `home`, unless an ask is under way.
fn ask(ctx: Ctx, home: &[u8], name: &[u8]) {
    let asked = match route(ctx, name) {
        Ok(asked) => asked,
        Err(_) => return, // no master known for the slot now: asked again by the waiting grow
    };
    let now = ctx.now_ms();
    let deadline_ms = now.saturating_add(config::GATHER_TIMEOUT_MS.load(Relaxed));
    let query = Query {
        name: name.to_vec(),
        asked,
        wake: home.to_vec(),
    };
    let random = || u64::from_le_bytes(crate::ffi::random_bytes());
    let opened = ADMISSION.with(|a| {
        a.borrow_mut()
            .open(random, query, now, TICK_MS, deadline_ms)
    });
    let Opened::Asked(id) = opened else {
        return; // asked already, or too many asks: the waiting grow asks again
    };
    metrics::HOLDER_NAMES_ASKED.incr();
    match asked {
        Some(node) => {
            cluster::send(ctx.ptr, &node, MSG_REQUEST, &msg::encode_request(id, name));
        }
        // This master's own name: read from a timer, outside the command.
        None => scheduler::arm(ctx.ptr, When::Now, &LOCAL, 0),
    }
    scheduler::arm_once(ctx.ptr, When::After(TICK_MS), &TICK);
}

/// Ends the ask `id` with `answer` when it came from the node asked (`from`; None: this one),
/// and wakes the grow waiting for it.
fn answered(ctx: Ctx, id: u64, from: Option<NodeId>, answer: NameAnswer) {
    let Some(query) = ADMISSION.with(|a| a.borrow_mut().answered(id, from)) else {
        return;
    };
    remember(&query.name, answer, ctx.now_ms());
    select_db(ctx, 0);
    waiter::key_written(ctx, &query.wake);
}

/// Answers the asks of this master's own names.
static LOCAL: Job = Job::once("admission-timer", |ctx, _| answer_local(ctx));

/// Sends again the asks unanswered for a tick (to the master serving the name now), ends those
/// past their deadline, and answers this master's own; armed while asks are under way.
static TICK: Job = Job::while_busy("admission-timer", tick, asking, TICK_MS);

fn asking() -> bool {
    ADMISSION.with(|a| !a.borrow().is_empty())
}

fn answer_local(ctx: Ctx) {
    let local = ADMISSION.with(|a| a.borrow().local());
    for (id, name) in local {
        answered(ctx, id, None, answer_here(ctx, &name));
    }
}

fn tick(ctx: Ctx) {
    let now = ctx.now_ms();
    ADMISSION.with(|a| a.borrow_mut().expired(now));
    answer_local(ctx);
    let due = ADMISSION.with(|a| a.borrow_mut().due(now, MAX_ASKS));
    for (id, query) in due {
        let Ok(now_asked) = route(ctx, &query.name) else {
            continue;
        };
        ADMISSION.with(|a| a.borrow_mut().reroute(id, now_asked));
        if let Some(node) = now_asked {
            let request = msg::encode_request(id, &query.name);
            cluster::send(ctx.ptr, &node, MSG_REQUEST, &request);
        }
    }
}

/// The bus messages: a request (answered with what this master holds at the name) and a
/// response (ends the ask it answers, when it comes from the master asked).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    match kind {
        MSG_REQUEST => {
            let Ok((id, name)) = msg::decode_request(payload) else {
                return; // malformed: the asker asks again
            };
            let response = msg::encode_response(id, answer_here(ctx, name));
            cluster::send(ctx.ptr, &from, MSG_RESPONSE, &response);
        }
        MSG_RESPONSE => {
            let Ok((id, answer)) = msg::decode_response(payload) else {
                return;
            };
            answered(ctx, id, Some(from), answer);
        }
        _ => {}
    }
}
