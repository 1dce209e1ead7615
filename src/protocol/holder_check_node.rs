//! The holder check: one node's part of asking, before a client's first write of a key named
//! like a holder (`{ctr.<id>.<i>.<k>}<home>`) creates it, whether the home that name carries
//! lists it (the runtime's `holder_check` runs it from the command, its timer and its bus
//! receiver; the simulator from its schedules). The shape is `name_queries`:
//!
//! - **Asker**: one question per name, of the master serving the home's slot (or this node,
//!   which reads it at its next tick), asked again every [`TICK_MS`] of the master serving the
//!   slot then, ended by that master's answer only, or with nothing concluded (`Unsure`) at
//!   its deadline. Each answer is trusted for [`VERDICT_MS`]; the writes waiting on the name run
//!   again once it ends ([`HolderCheckNode::take_ended`]).
//! - **Home side**: `Listed` when the home lives here under the name carried or a name this
//!   node saw it renamed to, or under any name of its slot (a home renamed, restored or moved
//!   in unseen stays in its slot), and lists the holder, current or folding back; `NotListed`
//!   when not; `Unsure` when this node does not serve the home's slot, or may not read all of
//!   it now (at most [`MAX_SLOT_KEYS`] keys per [`TICK_MS`] for every check together: a flood
//!   of look-alikes cannot make the home's master read its slots over and over).
//!
//! Only a definite `NotListed` refuses a write; anything unsure lets it go on (a slot move or a
//! master down never refuses a real holder).

use super::host::{Event, Host, NodeMessage};
use super::name_queries::{NameQueries, Opened, Query};
use crate::counter::collect::lists_holder;
use crate::counter::spread::parse_holder_name;
use crate::persist::holder_check_msg::Verdict;

/// How often pending checks are looked at (resends, deadlines, local answers).
pub const TICK_MS: i64 = 100;
/// The most unanswered checks asked again at one tick (the others at the next ones).
const RESENDS_PER_TICK: usize = 256;
/// The most writes' names checked at once on this node; past it a write goes on unchecked.
pub const MAX_PENDING: usize = 10_000;
/// The most keys of the homes' slots read in one [`TICK_MS`] window for every check together.
pub const MAX_SLOT_KEYS: i64 = 20_000;
/// How long a verdict is trusted by this node's later first writes of the same name.
pub const VERDICT_MS: i64 = 1_000;

/// What [`HolderCheckNode::ask`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Asked {
    /// The home's master was asked (or is being asked already): the write waits.
    Remote,
    /// This node serves the home's slot: it answers at its next tick; the write waits.
    Here,
    /// Nothing asked (no master known for the home's slot, too many checks): the write goes on.
    #[default]
    No,
}

/// One node's holder checks: soft state of its process.
pub struct HolderCheckNode<P> {
    checks: NameQueries<P, Verdict>,
    /// The window the home side reads slot keys in: when it began and how many are left.
    slot_keys: (i64, i64),
    /// The names whose checks ended since the last take: their writes run again.
    ended: Vec<Vec<u8>>,
}

impl<P: Copy + PartialEq> Default for HolderCheckNode<P> {
    fn default() -> HolderCheckNode<P> {
        HolderCheckNode {
            checks: NameQueries::new(MAX_PENDING, MAX_PENDING),
            slot_keys: (i64::MIN, 0),
            ended: Vec::new(),
        }
    }
}

impl<P: Copy + PartialEq> HolderCheckNode<P> {
    /// What the home's master said of `name` lately.
    pub fn known(&self, name: &[u8], now: i64) -> Option<Verdict> {
        self.checks.known(name, now)
    }

    /// True while a check is under way.
    pub fn checking(&self) -> bool {
        !self.checks.is_empty()
    }

    /// The names whose checks ended (answered, or past their deadline) since the last call.
    pub fn take_ended(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.ended)
    }

    /// Asks the master of the home `name` carries whether it lists `name`, unless it is being
    /// asked already; the check ends unsure after `timeout_ms`.
    pub fn ask<H: Host<Peer = P>>(&mut self, host: &mut H, name: &[u8], timeout_ms: i64) -> Asked {
        let Some(holder) = parse_holder_name(name) else {
            return Asked::No;
        };
        let Some(asked) = host.route(holder.home).destination() else {
            return Asked::No; // no master known for the home's slot now
        };
        let now = host.now_ms();
        let query = Query {
            name: name.to_vec(),
            asked,
            wake: name.to_vec(),
        };
        let deadline = now.saturating_add(timeout_ms);
        let random = || host.new_id();
        let id = match self.checks.open(random, query, now, TICK_MS, deadline) {
            Opened::Asked(id) => id,
            Opened::AlreadyAsked => {
                return if asked.is_some() {
                    Asked::Remote
                } else {
                    Asked::Here
                }
            }
            Opened::Full => return Asked::No,
        };
        match asked {
            Some(node) => {
                let m = NodeMessage::HolderCheckRequest {
                    id,
                    holder: name.to_vec(),
                };
                host.send(&node, m);
                Asked::Remote
            }
            None => Asked::Here,
        }
    }

    /// The tick: ends the checks past their deadline (unsure: their writes go on), answers
    /// those of homes this node serves, and asks again those silent for a tick (a message may
    /// be lost; the home's slot may have moved).
    pub fn tick<H: Host<Peer = P>>(&mut self, host: &mut H) {
        let now = host.now_ms();
        let expired = self.checks.expired(now);
        if !expired.is_empty() {
            host.count(Event::HolderCheckTimeouts(expired.len() as u64));
        }
        for query in expired {
            self.settle(host, query, Verdict::Unsure);
        }
        for (id, holder) in self.checks.local() {
            let verdict = self.verdict(host, &holder);
            self.resolve(host, id, None, verdict);
        }
        for (id, query) in self.checks.due(now, RESENDS_PER_TICK) {
            if let Some(asked) = query.asked {
                self.ask_again(host, id, asked, &query.name);
            }
        }
    }

    /// Asks again for the check `id` of `holder`, unanswered from `asked`: of the master that
    /// serves the home's slot now (only its answer ends the check then), or at the next tick
    /// from here when that is this node.
    fn ask_again<H: Host<Peer = P>>(&mut self, host: &mut H, id: u64, asked: P, holder: &[u8]) {
        let home = parse_holder_name(holder).map_or(&[][..], |h| h.home);
        // No master known for the slot now: the one asked before.
        let now_asked = host.route(home).destination().unwrap_or(Some(asked));
        self.checks.reroute(id, now_asked);
        if let Some(node) = now_asked {
            host.count(Event::HolderCheckResent);
            let m = NodeMessage::HolderCheckRequest {
                id,
                holder: holder.to_vec(),
            };
            host.send(&node, m);
        }
    }

    /// A check's message from `from`: a request (answered with this node's verdict) or a
    /// response (ends the check it answers, when it comes from the master asked).
    pub fn receive<H: Host<Peer = P>>(&mut self, host: &mut H, from: P, m: NodeMessage) {
        match m {
            NodeMessage::HolderCheckRequest { id, holder } => {
                let verdict = self.verdict(host, &holder);
                host.send(&from, NodeMessage::HolderCheckResponse { id, verdict });
            }
            NodeMessage::HolderCheckResponse { id, verdict } => {
                self.resolve(host, id, Some(from), verdict);
            }
            _ => {}
        }
    }

    /// Ends the check `id` with `verdict`, when it came from the node asked (`from`; None:
    /// this one).
    fn resolve<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        id: u64,
        from: Option<P>,
        verdict: Verdict,
    ) {
        if let Some(query) = self.checks.answered(id, from) {
            self.settle(host, query, verdict);
        }
    }

    /// Keeps `verdict` of the name of `query` for the writes waiting on it, which run again.
    fn settle<H: Host<Peer = P>>(&mut self, host: &mut H, query: Query<P>, verdict: Verdict) {
        let now = host.now_ms();
        let until = now.saturating_add(VERDICT_MS);
        self.checks.keep(&query.name, verdict, until, now);
        self.ended.push(query.wake);
    }

    /// The home side: what this node says of `holder` (database 0, a cluster's only one).
    fn verdict<H: Host<Peer = P>>(&mut self, host: &mut H, holder: &[u8]) -> Verdict {
        let Some(h) = parse_holder_name(holder) else {
            return Verdict::NotListed;
        };
        if !host.select_db(0) || !host.serves(h.home) {
            return Verdict::Unsure;
        }
        if let Some(home) = host.living_home(h.home, h.spread_id) {
            let lists = host.read(&home, |c| c.is_some_and(|c| lists_holder(c, holder)));
            return listed(lists == Some(true));
        }
        // A home renamed, restored or moved in under a name this node did not see stays in its
        // slot: looked for among the slot's keys, within the window's budget.
        let now = host.now_ms();
        if now.saturating_sub(self.slot_keys.0) >= TICK_MS {
            self.slot_keys = (now, MAX_SLOT_KEYS);
        }
        match host.slot_home_lists(h.home, h.spread_id, holder, self.slot_keys.1) {
            Some((lists, read)) => {
                self.slot_keys.1 -= read;
                listed(lists)
            }
            None => Verdict::Unsure,
        }
    }
}

fn listed(lists: bool) -> Verdict {
    if lists {
        Verdict::Listed
    } else {
        Verdict::NotListed
    }
}
