//! One node's part of the gather exchange: the rounds that read a home's holders from the
//! masters serving them (their table is `protocol::gather`), behind the [`Host`]. A round is
//! planned from the host's routes (the holders served here are read here, the others asked of
//! their masters, each request under an id of its own), sent, resent with a backoff until
//! answered, and settled once every holder is in; a holder a master says it does not serve is
//! asked once more where the host's routes, read afresh, say it is now. The answering side is
//! [`answer`]. The runtime (`runtime::spread_gather`) blocks and unblocks the clients, places
//! their reads in the table, and reads the local holders from a timer; the simulator runs the
//! same machine over its masters and network (`counter::simulator_reads`).

use std::hash::Hash;

use super::gather::{Effect, Gathers, HolderRead, Plan, Request, Round};
use super::host::{Event, Host, NodeMessage, Route};
use super::timeout::Timeout;
use crate::counter::spread::key_slot;
use crate::persist::gather_msg::HolderAnswer;

/// When a round first asks again the masters that have not answered yet: bus delivery is best
/// effort (a message queued on a link that drops is lost, and a link can be down for a moment).
/// Each resend waits twice as long as the one before, up to [`RESEND_MAX_MS`]: a master that
/// does not answer (asleep, or its link's buffer filling) is sent a round's requests about
/// log2(timeout / 100 ms) + 1 times, not ten times a second (4 sends in the default 1 s).
pub const RESEND_MS: i64 = 100;
pub const RESEND_MAX_MS: i64 = 1000;

/// Why a round fails its reads; the runtime makes its reply of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatherFailure {
    /// The holder was not where two slot maps in a row said (its slot is moving).
    Moving(Vec<u8>),
    /// The holder's read failed (its error's text).
    Failed(Vec<u8>, String),
    /// No master serves the holder's slot now.
    Unserved(u16),
}

/// A holder's answer as a read, or the failure it makes of the round.
pub fn read_of(name: &[u8], answer: HolderAnswer) -> Result<HolderRead, GatherFailure> {
    let read = |value, floor, ceiling| {
        Ok(HolderRead {
            value,
            floor,
            ceiling,
        })
    };
    match answer {
        HolderAnswer::Value(v) => read(v, None, None),
        HolderAnswer::Floored(v, f) => read(v, Some(f), None),
        HolderAnswer::Ceiled {
            value,
            ceiling,
            floor,
        } => read(value, floor, Some(ceiling)),
        HolderAnswer::NotHere => Err(GatherFailure::Moving(name.to_vec())),
        HolderAnswer::Failed(text) => Err(GatherFailure::Failed(name.to_vec(), text)),
    }
}

/// A request's answers on the node asked: each holder read as it is now.
pub fn answer<H: Host, N: AsRef<[u8]>>(host: &mut H, names: &[N]) -> Vec<HolderAnswer> {
    host.count(Event::GatherRequestServed);
    names
        .iter()
        .map(|name| host.read_holder(name.as_ref()))
        .collect()
}

/// The gathers of one node: the table of rounds and reads, and the rounds settled with their
/// values since the runtime last took them (for its cache).
pub(crate) struct GatherNode<F, E, P> {
    pub(crate) table: Gathers<F, E, P>,
    settled: Vec<Round<P>>,
}

impl<F, E, P> GatherNode<F, E, P>
where
    E: Clone + From<GatherFailure>,
    P: Clone + Eq + Hash,
{
    /// No gathers; request ids start from `random()` (see `protocol::exchange`).
    pub(crate) fn new(random: fn() -> u64) -> Self {
        GatherNode {
            table: Gathers::new(random),
            settled: Vec::new(),
        }
    }

    /// Where `holders` are read, from the host's routes: here, or of the master serving each.
    pub(crate) fn plan<H: Host<Peer = P>>(
        host: &mut H,
        holders: &[Vec<u8>],
    ) -> Result<Plan<P>, GatherFailure> {
        let mut plan = Plan::default();
        for (h, name) in holders.iter().enumerate() {
            match host.route(name) {
                Route::Here => plan.locals.push(h),
                Route::To(node) => {
                    let asked = node.clone();
                    plan.ask(node, || host.link_address(&asked), h);
                }
                Route::Unknown => return Err(GatherFailure::Unserved(key_slot(name))),
            }
        }
        Ok(plan)
    }

    /// A queued round whose turn came is planned now; a plan that fails settles it. True when
    /// it is to be launched.
    pub(crate) fn start<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        id: u64,
        effects: &mut Vec<Effect<F, E>>,
    ) -> bool {
        let Some(holders) = (self.table.rounds.get(id))
            .filter(|r| !r.started)
            .map(|r| r.holders.clone())
        else {
            return false;
        };
        match Self::plan(host, &holders) {
            Ok(plan) => {
                self.table.plan(id, plan);
                true
            }
            Err(failure) => {
                if let Some(round) = self.table.rounds.get_mut(id) {
                    round.started = true;
                }
                self.settle(id, Err(failure.into()), effects);
                false
            }
        }
    }

    /// Sends a started round's requests and arms its resends; false when the round is gone.
    /// Its local holders are read by [`GatherNode::read_locals`].
    pub(crate) fn launch<H: Host<Peer = P>>(&mut self, host: &mut H, id: u64) -> bool {
        let resend = Timeout::backoff(host.now_ms(), RESEND_MS, RESEND_MAX_MS);
        self.table.rounds.set_resend(id, resend);
        self.send_requests(host, id, false)
    }

    /// Sends (again) the requests of round `id` that have not been answered (`unsent_only`:
    /// those never sent): the first send of each may go on the master's read link, the others
    /// over the bus. False when the round is gone.
    fn send_requests<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        id: u64,
        unsent_only: bool,
    ) -> bool {
        let Some(round) = self.table.rounds.get_mut(id) else {
            return false;
        };
        let holders = &round.holders;
        let due = |r: &&mut Request<P>| !(r.answered || (unsent_only && r.sent));
        for request in round.requests.iter_mut().filter(due) {
            let first = !std::mem::replace(&mut request.sent, true);
            let link = if first { request.addr } else { None };
            host.send(&request.node, request_message(holders, request, link));
        }
        true
    }

    /// Sends again what is unanswered of every round due a resend.
    pub(crate) fn resend_due<H: Host<Peer = P>>(&mut self, host: &mut H) {
        // Only launched rounds have a resend due (queued ones never).
        for id in self.table.rounds.due(host.now_ms(), usize::MAX) {
            self.send_requests(host, id, false);
        }
    }

    /// A request a read link lost, sent again now over the bus.
    pub(crate) fn resend_lost<H: Host<Peer = P>>(&mut self, host: &mut H, node: &P, rid: u64) {
        let Some(round) = (self.table.requests.get(&rid)).and_then(|&id| self.table.rounds.get(id))
        else {
            return;
        };
        let Some(request) = (round.requests.iter()).find(|r| r.id == rid && r.node == *node) else {
            return;
        };
        if request.answered {
            return;
        }
        host.send(node, request_message(&round.holders, request, None));
    }

    /// Reads the holders of round `id` this node serves (the runtime calls it from a timer,
    /// outside any command), then settles the round if everything is in; a holder whose slot
    /// left this node since the round was planned is asked where it is now.
    pub(crate) fn read_locals<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        id: u64,
        effects: &mut Vec<Effect<F, E>>,
    ) {
        let Some((holders, locals)) = (self.table.rounds.get(id))
            .filter(|r| r.started && !r.locals_read)
            .map(|r| (r.holders.clone(), r.locals.clone()))
        else {
            return;
        };
        let mut moved = Vec::new();
        let read: Result<Vec<(usize, HolderRead)>, GatherFailure> = (locals.into_iter())
            .filter_map(|h| match host.read_holder(&holders[h]) {
                HolderAnswer::NotHere => {
                    moved.push(h);
                    None
                }
                answer => Some(read_of(&holders[h], answer).map(|read| (h, read))),
            })
            .collect();
        let Some(round) = self.table.rounds.get_mut(id) else {
            return;
        };
        let outcome = read.map(|values| {
            for (h, read) in values {
                round.record(h, read);
            }
            round.rerouted.extend_from_slice(&moved);
            round.locals_read = true;
        });
        if outcome.is_err() || (moved.is_empty() && round.complete()) {
            self.settle(id, outcome.map_err(E::from), effects);
        } else if !moved.is_empty() {
            self.reroute(host, id, moved, None, effects);
        }
    }

    /// A master's answers to request `rid`: recorded in its round, which settles once
    /// everything is in; holders the master does not serve are asked where they are now.
    pub(crate) fn on_response<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        from: &P,
        rid: u64,
        answers: Vec<HolderAnswer>,
        effects: &mut Vec<Effect<F, E>>,
    ) {
        let Some(&id) = self.table.requests.get(&rid) else {
            return; // a late or repeated answer, or one to a round that is gone
        };
        let Some(round) = self.table.rounds.get_mut(id) else {
            return;
        };
        let outcome = record_answers(round, rid, from, answers);
        let complete = round.complete();
        match outcome {
            Some(Err(failure)) => self.settle(id, Err(failure.into()), effects),
            Some(Ok(moved)) if !moved.is_empty() => {
                self.reroute(host, id, moved, Some(from.clone()), effects)
            }
            Some(Ok(_)) if complete => self.settle(id, Ok(()), effects),
            _ => {}
        }
    }

    /// Holders `asked` said it does not serve (None: this node): their slot moved since the
    /// round was planned, so they are asked once more where the routes, read afresh, say they
    /// are served now, within the same round and the reads' own timeouts. A route naming the
    /// same master again (the slot is migrating) or none fails the round (`Moving`).
    fn reroute<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        id: u64,
        moved: Vec<usize>,
        asked: Option<P>,
        effects: &mut Vec<Effect<F, E>>,
    ) {
        let Some(holders) = self.table.rounds.get(id).map(|r| r.holders.clone()) else {
            return;
        };
        host.refresh_routes();
        let mut plan = Plan::default();
        let mut locals: Vec<(usize, HolderAnswer)> = Vec::new();
        let mut asked_again = 0u64;
        for &h in &moved {
            match host.route(&holders[h]) {
                // Served here now (it moved to this node).
                Route::Here if asked.is_some() => {
                    asked_again += 1;
                    locals.push((h, host.read_holder(&holders[h])));
                }
                Route::To(node) if asked.as_ref() != Some(&node) => {
                    asked_again += 1;
                    let to = node.clone();
                    plan.ask(node, || host.link_address(&to), h);
                }
                _ => locals.push((h, HolderAnswer::NotHere)),
            }
        }
        host.count(Event::GatherReroutes(asked_again));
        self.table.add_requests(id, plan.asks);
        let Some(round) = self.table.rounds.get_mut(id) else {
            return;
        };
        let mut outcome = Ok(());
        for (h, answer) in locals {
            match read_of(&round.holders[h], answer) {
                Ok(read) => round.record(h, read),
                Err(failure) => outcome = Err(failure),
            }
        }
        if outcome.is_err() || round.complete() {
            self.settle(id, outcome.map_err(E::from), effects);
        }
        self.send_requests(host, id, true);
    }

    /// Ends round `id` (see `Gathers::settle`); a round that ended with its values is kept for
    /// [`GatherNode::take_settled`].
    pub(crate) fn settle(
        &mut self,
        id: u64,
        outcome: Result<(), E>,
        effects: &mut Vec<Effect<F, E>>,
    ) {
        if let Some(round) = self.table.settle(id, outcome, effects) {
            self.settled.push(round);
        }
    }

    /// The rounds settled with their values since the last call.
    pub(crate) fn take_settled(&mut self) -> Vec<Round<P>> {
        std::mem::take(&mut self.settled)
    }
}

/// Request `request` of a round reading `holders`, its names copied from the round's one list
/// (`link`: sent on the master's read link at that address, if it has one).
fn request_message<P>(
    holders: &[Vec<u8>],
    request: &Request<P>,
    link: Option<std::net::SocketAddr>,
) -> NodeMessage {
    NodeMessage::GatherRequest {
        id: request.id,
        names: request.asked.iter().map(|&h| holders[h].clone()).collect(),
        link,
    }
}

/// Stores one request's answers in its round. None when the sender was not asked that (or
/// answered already, or the answer does not fit the request); Some(Err) when an answer fails
/// the round; else the holders to ask again where they are served now.
fn record_answers<P: PartialEq>(
    round: &mut Round<P>,
    rid: u64,
    from: &P,
    answers: Vec<HolderAnswer>,
) -> Option<Result<Vec<usize>, GatherFailure>> {
    let request =
        (round.requests.iter_mut()).find(|r| r.id == rid && &r.node == from && !r.answered)?;
    if answers.len() != request.asked.len() {
        return None;
    }
    request.answered = true;
    let mut moved = Vec::new();
    for (&h, answer) in request.asked.iter().zip(answers) {
        if answer == HolderAnswer::NotHere && !round.rerouted.contains(&h) {
            round.rerouted.push(h);
            moved.push(h);
            continue;
        }
        // Field by field: `request` borrows the round's requests.
        match read_of(&round.holders[h], answer) {
            Ok(read) => {
                round.values[h] = Some(read.value);
                round.floors[h] = read.floor;
                round.ceilings[h] = read.ceiling;
            }
            Err(failure) => return Some(Err(failure)),
        }
    }
    Some(Ok(moved))
}
