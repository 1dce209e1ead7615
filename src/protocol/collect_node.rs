//! The collector: one node's part of collecting the holders of a spread whose home is gone
//! (`counter::collect` holds the rules: what a home leaves, when there is a doubt, what a
//! receiver may delete, the pending collections). Its owner claims what a home left once the
//! home's own master saw it end (the runtime from the server's unlink and keyspace events, the
//! simulator at its `DEL`); the collector then, on a master:
//! 1. waits until the replicas hold the deletion (a failover that lost it brings the home
//!    back, and its holders must be there then), and in a cluster until the home's slot is
//!    served here (not for a slot migration's `MIGRATE`, a slot this node lost);
//! 2. checks that the home is still gone (`collect::still_to_collect`);
//! 3. asks the master serving each holder (this one directly) to delete the names the rule
//!    allows (`collect::verdict`), again every 100 ms until every name is answered or the
//!    collection's timeout passed;
//! 4. as a receiver, answers once its replicas hold the deletions it answers.
//!
//! A replica claims nothing (a replicated `DEL` may be a `MIGRATE`'s) and drops what it held
//! as a master. What no collection reaches is the orphan audit's (`counter::audit`).

use super::host::{Event, Host, NodeMessage, Route};
use super::replicas::{take_open, Gate};
use crate::counter::collect::{self, Collection, Found, Pending, Seen, Verdict};
use crate::counter::spread::key_slot;
use crate::counter::Counter;

const MAX_CLAIM_BYTES: usize = 8 << 20;
const MAX_PENDING_BYTES: usize = 8 << 20;
const MAX_NAMES_PER_TICK: usize = 4096;
/// Names a receiver handles per message at most (the rest are asked again).
pub const MAX_NAMES_PER_MESSAGE: usize = 4096;
/// Answers held for the replicas, at most (past it a request goes unanswered: asked again).
const MAX_HELD_ANSWERS: usize = 1024;

/// What a gone home left, claimed at `at_ms` (the collection's timeout counts from there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub db: i32,
    pub name: Vec<u8>,
    pub collections: Vec<Collection>,
    pub at_ms: i64,
}

/// A claim waiting for the replicas to hold the deletion that made it.
struct Claimed {
    claim: Claim,
    gate: Gate,
}

/// A receiver's answer, held until this master's replicas hold the deletions it answers: a
/// failover to a replica that never got them would bring the holders back after the sender
/// stopped asking.
struct HeldAnswer<P> {
    to: P,
    answered: Vec<Collection>,
    gate: Gate,
}

/// One node's collections: soft state of its process (a restart or a failover starts empty;
/// the audit finds what was left).
pub struct CollectNode<P> {
    claims: Vec<Claimed>,
    claim_bytes: usize,
    pending: Pending,
    held: Vec<HeldAnswer<P>>,
    /// An answer was held since the owner last asked ([`CollectNode::take_soon`]).
    soon: bool,
}

impl<P> Default for CollectNode<P> {
    fn default() -> Self {
        CollectNode {
            claims: Vec::new(),
            claim_bytes: 0,
            pending: Pending::with_cap(MAX_PENDING_BYTES),
            held: Vec::new(),
            soon: false,
        }
    }
}

fn bytes_of(collections: &[Collection]) -> usize {
    collections.iter().map(Collection::bytes).sum()
}

impl<P: Clone + PartialEq> CollectNode<P> {
    /// Nothing claimed, pending or held.
    pub fn is_idle(&self) -> bool {
        self.claims.is_empty() && self.pending.is_empty() && self.held.is_empty()
    }

    /// The name `name` holds a home of the spreads `spread_ids` again (its dump restored, a
    /// reload): the claims its deletion made and the collections of those spreads are dropped
    /// (the spread lives; what a started collection deleted already is lost with the `DEL`
    /// the user made, never more).
    pub fn unclaim(&mut self, db: i32, name: &[u8], spread_ids: &[u64]) {
        for c in &mut self.claims {
            if c.claim.db == db && c.claim.name == name {
                (c.claim.collections).retain(|col| !spread_ids.contains(&col.spread_id));
            }
        }
        self.claims.retain(|c| !c.claim.collections.is_empty());
        self.claim_bytes = self
            .claims
            .iter()
            .map(|c| bytes_of(&c.claim.collections))
            .sum();
        self.pending.forget(spread_ids);
    }

    /// True while a claim of the home `name` of the spreads `spread_ids` waits to start (its
    /// deletion not yet held by the replicas, or the cluster down), and no collection of them
    /// started.
    pub fn waits(&self, db: i32, name: &[u8], spread_ids: &[u64]) -> bool {
        let claimed = |c: &Claimed| {
            c.claim.db == db
                && c.claim.name == name
                && (c.claim.collections.iter()).any(|col| spread_ids.contains(&col.spread_id))
        };
        self.claims.iter().any(claimed) && !self.pending.holds_any(spread_ids)
    }

    /// True once when something was queued since the last call: the owner ticks soon.
    pub fn take_soon(&mut self) -> bool {
        std::mem::take(&mut self.soon)
    }

    /// Claims what gone homes left; returns how many collections were abandoned at once
    /// (past the memory cap).
    pub fn claim(&mut self, claims: Vec<Claim>) -> u64 {
        let mut abandoned = 0;
        for claim in claims {
            let size = bytes_of(&claim.collections);
            if self.claim_bytes.saturating_add(size) > MAX_CLAIM_BYTES {
                abandoned += claim.collections.len() as u64;
                continue;
            }
            self.claim_bytes += size;
            self.claims.push(Claimed {
                claim,
                gate: Gate::default(),
            });
            self.soon = true;
        }
        abandoned
    }

    /// One pass: checks the claims whose deletion the replicas hold and starts their
    /// collections, sends the held answers and what is due, drops what is past the timeout.
    pub fn tick<H: Host<Peer = P>>(&mut self, host: &mut H) {
        if self.is_idle() {
            return;
        }
        if !host.is_master() {
            self.claims.clear();
            self.claim_bytes = 0;
            self.pending.clear();
            self.held.clear(); // the senders ask the new master
            host.count(Event::CollectionsPending(0));
            return;
        }
        let now = host.now_ms();
        let timeout = host.collect_timeout_ms();
        let in_cluster = host.in_cluster();
        // Read once per tick, after the deletions of earlier commands were propagated.
        let replication = host.replication();
        if let Some(r) = &replication {
            for h in take_open(&mut self.held, r, |h| &mut h.gate) {
                host.send(&h.to, NodeMessage::Collected(h.answered));
            }
        }
        let mut abandoned = 0u64;
        let mut started: Vec<(Collection, i64)> = Vec::new();
        let mut waiting: Vec<Claimed> = Vec::new();
        for mut c in std::mem::take(&mut self.claims) {
            if now.saturating_sub(c.claim.at_ms) > timeout {
                abandoned += c.claim.collections.len() as u64;
                continue;
            }
            // Not before the replicas hold the deletion.
            if !replication.as_ref().is_some_and(|r| c.gate.open(r)) {
                waiting.push(c);
                continue;
            }
            if !host.select_db(c.claim.db) {
                continue;
            }
            // The home's slot is not served here now (a slot migration's MIGRATE, a slot this
            // node lost): a doubt, so nothing is collected. A cluster down (a node that just
            // restarted and has not heard from the others yet) says nothing: the claim waits.
            if in_cluster {
                match host.slot_served_here(&c.claim.name) {
                    Some(true) => {}
                    None => {
                        waiting.push(c);
                        continue;
                    }
                    Some(false) => continue,
                }
            }
            let Claim {
                name,
                collections,
                at_ms,
                ..
            } = c.claim;
            let todo: Vec<Collection> = (collections.into_iter())
                .filter(|col| still_to_collect(host, col, &name, in_cluster))
                .collect();
            if in_cluster {
                started.extend(todo.into_iter().map(|col| (col, at_ms)));
            } else {
                // One server: every holder is here, in the home's database.
                host.count(Event::Collections(todo.len() as u64));
                collect_here(host, &todo, usize::MAX);
            }
        }
        host.select_db(0);
        self.claim_bytes = waiting.iter().map(|c| bytes_of(&c.claim.collections)).sum();
        self.claims = waiting;
        for (c, at) in started {
            if self.pending.add(c, at) {
                host.count(Event::Collections(1));
            } else {
                abandoned += 1;
            }
        }
        abandoned += self.pending.expire(now, timeout) as u64;
        if abandoned > 0 {
            host.count(Event::CollectionsAbandoned(abandoned));
        }
        let due = self.pending.due(now, MAX_NAMES_PER_TICK);
        if !due.is_empty() {
            self.send(host, due);
        }
        host.count(Event::CollectionsPending(self.pending.len() as u64));
    }

    /// A message from node `from`.
    pub fn receive<H: Host<Peer = P>>(&mut self, host: &mut H, from: P, m: NodeMessage) {
        match m {
            NodeMessage::Collect(collections) => {
                host.select_db(0);
                let answered = collect_here(host, &collections, MAX_NAMES_PER_MESSAGE);
                if !answered.is_empty() && self.held.len() < MAX_HELD_ANSWERS {
                    self.held.push(HeldAnswer {
                        to: from,
                        answered,
                        gate: Gate::default(),
                    });
                    self.soon = true;
                }
            }
            NodeMessage::Collected(answered) => self.on_answer(host, &answered),
            _ => {}
        }
    }

    /// Asks the master serving each name (this one directly) to collect it.
    fn send<H: Host<Peer = P>>(&mut self, host: &mut H, due: Vec<Collection>) {
        let mut local: Vec<Collection> = Vec::new();
        let mut remote: Vec<(P, Vec<Collection>)> = Vec::new();
        for c in &due {
            for name in &c.holders {
                match host.route(name) {
                    Route::Here => push_name(&mut local, c, name.clone()),
                    Route::To(node) => {
                        let at = match remote.iter().position(|(n, _)| *n == node) {
                            Some(at) => at,
                            None => {
                                remote.push((node, Vec::new()));
                                remote.len() - 1
                            }
                        };
                        push_name(&mut remote[at].1, c, name.clone());
                    }
                    Route::Unknown => {} // asked again at the next resend
                }
            }
        }
        if !local.is_empty() {
            let answered = collect_here(host, &local, usize::MAX);
            self.on_answer(host, &answered);
        }
        for (node, collections) in remote {
            host.send(&node, NodeMessage::Collect(collections));
        }
    }

    fn on_answer<H: Host<Peer = P>>(&mut self, host: &mut H, answered: &[Collection]) {
        for c in answered {
            self.pending.answered(c);
        }
        host.count(Event::CollectionsPending(self.pending.len() as u64));
    }
}

/// The checks of `collect::still_to_collect`, on this master (the selected database), after
/// one of its own: a home of the spread that this master sees living (under the name its
/// holders carry, or a name it saw that home renamed to) is a doubt, whatever the deleted name
/// holds now (the home's dump restored there and renamed away before the claim started).
fn still_to_collect<H: Host>(
    host: &H,
    c: &Collection,
    deleted_name: &[u8],
    in_cluster: bool,
) -> bool {
    if host.living_home(&c.home, c.spread_id).is_some() {
        return false;
    }
    // The carried home, when it is another name whose slot this master serves (in a
    // cluster, another slot is itself a reason not to collect).
    let carried_here =
        c.home != deleted_name && (!in_cluster || key_slot(&c.home) == key_slot(deleted_name));
    let check = |now_under_the_name: Option<&Counter>, other_home: Option<&Counter>| {
        let seen = Seen {
            deleted_name,
            now_under_the_name,
            other_home,
            in_cluster,
        };
        collect::still_to_collect(c, &seen)
    };
    let read_under = |name: &[u8], f: &mut dyn FnMut(Option<&Counter>) -> bool| {
        // Another type under the name: no counter there.
        host.read(name, &mut *f).unwrap_or_else(|| f(None))
    };
    read_under(deleted_name, &mut |now_under_the_name| {
        if carried_here {
            read_under(&c.home, &mut |carried| check(now_under_the_name, carried))
        } else {
            check(now_under_the_name, None)
        }
    })
}

/// Appends `name` to the collection of `c`'s spread at the end of `to`.
fn push_name(to: &mut Vec<Collection>, c: &Collection, name: Vec<u8>) {
    match to.last_mut() {
        Some(last) if last.spread_id == c.spread_id && last.home == c.home => {
            last.holders.push(name)
        }
        _ => to.push(Collection {
            spread_id: c.spread_id,
            home: c.home.clone(),
            holders: vec![name],
        }),
    }
}

/// The receiver's side, on this node: deletes each name the rule allows, at most `budget`
/// names; returns the names handled (deleted, gone, or never the sender's), by collection.
/// A name whose slot this master does not serve is not answered (the sender re-routes it).
fn collect_here<H: Host>(
    host: &mut H,
    collections: &[Collection],
    budget: usize,
) -> Vec<Collection> {
    let mut answered = Vec::new();
    let mut left = budget;
    for c in collections {
        let mut done = Collection {
            spread_id: c.spread_id,
            home: c.home.clone(),
            holders: Vec::new(),
        };
        for name in &c.holders {
            if left == 0 {
                break;
            }
            left -= 1;
            if !host.serves(name) {
                continue;
            }
            let found = match host.read(name, |k| k.is_some()) {
                Some(true) => Found::Counter,
                Some(false) => Found::Missing,
                None => Found::Other,
            };
            let handled = match collect::verdict(c, name, found) {
                Verdict::Delete => host.delete(name),
                Verdict::Gone | Verdict::Leave => true,
            };
            if handled {
                done.holders.push(name.clone());
            }
        }
        if !done.holders.is_empty() {
            answered.push(done);
        }
    }
    answered
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collection(spread_id: u64) -> Collection {
        let holder = format!("{{ctr.{spread_id:016x}.1.0}}h").into_bytes();
        Collection {
            spread_id,
            home: b"h".to_vec(),
            holders: vec![holder],
        }
    }

    #[test]
    fn a_home_back_under_its_name_undoes_the_claims_of_its_spreads_only() {
        let mut node: CollectNode<usize> = CollectNode::default();
        let claim = Claim {
            db: 0,
            name: b"h".to_vec(),
            collections: vec![collection(7), collection(9)],
            at_ms: 1,
        };
        assert_eq!(node.claim(vec![claim]), 0);
        assert!(node.waits(0, b"h", &[7]) && node.waits(0, b"h", &[9]));
        node.unclaim(0, b"other", &[7]);
        node.unclaim(1, b"h", &[7]);
        assert!(
            node.waits(0, b"h", &[7]),
            "another name or database: nothing undone"
        );
        node.unclaim(0, b"h", &[7]);
        assert!(!node.waits(0, b"h", &[7]));
        assert!(node.waits(0, b"h", &[9]), "another spread's claim stays");
        node.unclaim(0, b"h", &[9]);
        assert!(node.is_idle());
    }
}
