//! Holder admission across masters: one node's part of asking, before a grow lists a new
//! holder name, whether a key sits there (the runtime's `holder_admission` runs it from the
//! grow, its timer and its bus receiver; the simulator from its schedules). The shape is
//! `name_queries`:
//!
//! - **Asker**: one question per name, of the master serving the name (or this node, which
//!   reads it at its next tick), asked again every [`TICK_MS`] of the master serving it then,
//!   ended by that master's answer only, or with nothing concluded at its deadline. A free
//!   answer is trusted for [`FREE_MS`], a taken one for [`TAKEN_MS`] (the grow's planner avoids
//!   the name); an unsure one is not kept (the name is asked again). The grow waiting on a
//!   question runs again once it ends ([`AdmissionNode::take_ended`]).
//! - **Answer**: free when no key of any type sits at the name; taken when one does; unsure
//!   when this node does not serve the name's slot.

use super::host::{Event, Host, NodeMessage};
use super::name_queries::{NameQueries, Opened, Query};
use crate::persist::admission_msg::NameAnswer;

/// How often unanswered asks are sent again and ended at their deadline.
pub const TICK_MS: i64 = 20;
/// How long a free answer lets a grow list the name.
pub const FREE_MS: i64 = 1_000;
/// How long a taken name is avoided by this node's grows.
pub const TAKEN_MS: i64 = 60_000;
/// The most names asked about at once, and the most answers kept.
const MAX_ASKS: usize = 10_000;
/// How long a name answered unsure is asked again before its grow is woken anyway.
const UNSURE_ASKED_MS: i64 = 1_000;
const MAX_ANSWERS: usize = 100_000;

/// What this node knows of a name, while its answer is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    Free,
    Taken,
}

/// One node's admission questions: soft state of its process.
pub struct AdmissionNode<P> {
    asks: NameQueries<P, Known>,
    /// The homes whose grows wait on a question that ended since the last take.
    ended: Vec<Vec<u8>>,
}

impl<P: Copy + PartialEq> Default for AdmissionNode<P> {
    fn default() -> AdmissionNode<P> {
        AdmissionNode {
            asks: NameQueries::new(MAX_ASKS, MAX_ANSWERS),
            ended: Vec::new(),
        }
    }
}

impl<P: Copy + PartialEq> AdmissionNode<P> {
    /// What the name's master said of `name` lately.
    pub fn known(&self, name: &[u8], now: i64) -> Option<Known> {
        self.asks.known(name, now)
    }

    /// True while a question is under way.
    pub fn asking(&self) -> bool {
        !self.asks.is_empty()
    }

    /// The homes whose grows wait on a question that ended since the last call.
    pub fn take_ended(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.ended)
    }

    /// True when the master of each of `names` (planned by a grow of `home`) said lately that
    /// it is free; asks about those not known (their answers wake the grow), each question
    /// ending after `timeout_ms`. True in the second place when one is this node's own name
    /// (read at its next tick).
    pub fn all_known_free<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        home: &[u8],
        names: &[Vec<u8>],
        timeout_ms: i64,
    ) -> (bool, bool) {
        let now = host.now_ms();
        let (mut all_free, mut local) = (true, false);
        for name in names {
            if self.known(name, now) != Some(Known::Free) {
                local |= self.ask(host, home, name, timeout_ms);
                all_free = false;
            }
        }
        (all_free, local)
    }

    /// Asks the master of `name` about it for a grow of `home`, unless an ask is under way;
    /// true when the name is this node's (answered at its next tick).
    fn ask<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        home: &[u8],
        name: &[u8],
        timeout_ms: i64,
    ) -> bool {
        let Some(asked) = host.route(name).destination() else {
            return false; // asked again by the waiting grow
        };
        let now = host.now_ms();
        let query = Query {
            name: name.to_vec(),
            asked,
            wake: home.to_vec(),
        };
        let deadline = now.saturating_add(timeout_ms);
        let random = || host.new_id();
        let Opened::Asked(id) = self.asks.open(random, query, now, TICK_MS, deadline) else {
            return false; // asked already, or too many asks: the waiting grow asks again
        };
        host.count(Event::HolderNameAsked);
        match asked {
            Some(node) => {
                let m = NodeMessage::AdmissionRequest {
                    id,
                    name: name.to_vec(),
                };
                host.send(&node, m);
                false
            }
            None => true,
        }
    }

    /// Ends the ask `id` with `answer` when it came from the node asked (`from`; None: this
    /// one); the grow waiting for it runs again.
    fn answered<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        id: u64,
        from: Option<P>,
        answer: NameAnswer,
    ) {
        let Some(query) = self.asks.answered(id, from) else {
            return;
        };
        let now = host.now_ms();
        let kept = match answer {
            NameAnswer::Free => Some((Known::Free, FREE_MS)),
            NameAnswer::Taken => {
                host.count(Event::HolderNameTaken);
                Some((Known::Taken, TAKEN_MS))
            }
            NameAnswer::Unsure => {
                // Nothing concluded (the name's slot is moving, or this node's slot map is
                // behind): asked again at the next ticks, of the master serving it then. Waking
                // the grow now would ask again at once, as fast as the bus answers, for as
                // long as the slot moves (the simulator spun there, seed 23384).
                let random = || host.new_id();
                let deadline = now.saturating_add(UNSURE_ASKED_MS);
                if let Opened::Asked(_) =
                    self.asks
                        .open(random, query.clone(), now, TICK_MS, deadline)
                {
                    return;
                }
                None
            }
        };
        if let Some((known, trusted_ms)) = kept {
            self.asks
                .keep(&query.name, known, now.saturating_add(trusted_ms), now);
        }
        self.ended.push(query.wake);
    }

    /// The tick: ends the asks past their deadline, answers this node's own, and sends again
    /// those unanswered for a tick (to the master serving the name now).
    pub fn tick<H: Host<Peer = P>>(&mut self, host: &mut H) {
        let now = host.now_ms();
        // Nothing concluded: the grow waiting asks again when its own wait ends.
        self.asks.expired(now);
        for (id, name) in self.asks.local() {
            let answer = answer_here(host, &name);
            self.answered(host, id, None, answer);
        }
        for (id, query) in self.asks.due(now, MAX_ASKS) {
            let Some(now_asked) = host.route(&query.name).destination() else {
                continue;
            };
            self.asks.reroute(id, now_asked);
            if let Some(node) = now_asked {
                let m = NodeMessage::AdmissionRequest {
                    id,
                    name: query.name,
                };
                host.send(&node, m);
            }
        }
    }

    /// A request (answered with what this node holds at the name) or a response (ends the ask
    /// it answers, when it comes from the master asked).
    pub fn receive<H: Host<Peer = P>>(&mut self, host: &mut H, from: P, m: NodeMessage) {
        match m {
            NodeMessage::AdmissionRequest { id, name } => {
                let answer = answer_here(host, &name);
                host.send(&from, NodeMessage::AdmissionResponse { id, answer });
            }
            NodeMessage::AdmissionResponse { id, answer } => {
                self.answered(host, id, Some(from), answer)
            }
            _ => {}
        }
    }
}

/// What this node says of `name` (database 0, a cluster's only one): free when no key of any
/// type is there, unsure when it does not serve the name's slot.
pub fn answer_here<H: Host>(host: &mut H, name: &[u8]) -> NameAnswer {
    if !host.select_db(0) || !host.serves(name) {
        return NameAnswer::Unsure;
    }
    match host.read(name, |c| c.is_none()) {
        Some(true) => NameAnswer::Free,
        _ => NameAnswer::Taken, // a counter, or a key of another type
    }
}
