//! The rebalancer: one master's part of moving budget toward demand between the holders of a
//! floored spread counter across masters (the policy is the pure `counter::rebalance`; the
//! runtime's `floor_moves` runs this machine from its timer and bus receiver, the simulator
//! from its schedules).
//!
//! 1. A holder that refuses a purchase afresh records it on its master ([`DemandBook`]), which
//!    marks its home due; a due home is rebalanced `ctr.rebalance-delay-ms` later (the
//!    runtime's timer): refusals of one burst make one **notice** to the home's master, not one
//!    message each.
//! 2. The home's master, on a notice or on its own holders' refusals, reads the holders it
//!    serves and **polls** the masters of the others (one message per master) for each
//!    holder's budget, budget moving out and demand meter; they **answer**.
//! 3. With every answer in (within [`POLL_TIMEOUT_MS`], else the poll is dropped), and the
//!    counter's holders unchanged since the poll began, it plans (`plan_moves`), routes each
//!    move through the home (`through_the_home`) and sends each giver's master a **give**; it
//!    tells every master it polled the whole headroom seen (the bound that makes a holder's
//!    refusal final or retryable: `counter::headroom`).
//! 4. The giver's master decides alone: a budget move (a transfer: replicated, resent until
//!    acknowledged) of at most the giver's budget at that moment, so a stale plan never
//!    oversells; a pair with a move unacknowledged is busy and the give is dropped.
//!
//! Nothing here is durable: a lost notice, poll, answer or give costs one round.

use std::collections::BTreeSet;

use super::demand_book::{DbKey, DemandBook, DEMAND_LIMIT};
use super::exchange::Exchange;
use super::host::{Event, Host, NodeMessage, Route};
use super::timeout::Timeout;
use crate::counter::budget_kind::BudgetKind;
use crate::counter::headroom::whole_headroom;
use crate::counter::rebalance::{plan_moves, through_the_home, HolderReport};
use crate::counter::spread::parse_holder_name;
use crate::counter::step::{Step, StepOutcome};
use crate::counter::Counter;
use crate::persist::demand_msg::{Give, Headroom, HolderDemand, PollRequest};

/// How long the home's master waits for every master's answer before dropping a poll.
pub const POLL_TIMEOUT_MS: i64 = 1_000;
/// The most polls under way on one master (one per home at a time).
const MAX_POLLS: usize = 10_000;
/// Budget moves planned per rebalance, at most.
pub const MAX_MOVES: usize = 16;

/// A poll of the holders of `home` under way on its master.
struct Poll<P> {
    db: i32,
    home: Vec<u8>,
    /// The home first, then its holders, as the poll began.
    names: Vec<Vec<u8>>,
    /// The credits the home had applied as the poll began ([`home_credits`]).
    home_credits: Vec<u64>,
    reports: Vec<Option<HolderDemand>>,
    /// Masters asked, with the holder indices each was asked for; None once answered.
    asks: Vec<(P, Option<Vec<usize>>)>,
}

/// One master's rebalancer: soft state of its process (a restart starts empty).
pub struct RebalanceNode<P> {
    /// The demand and headroom this master remembers.
    pub book: DemandBook,
    /// Polls this master began, never resent, dropped at their deadline.
    polls: Exchange<Poll<P>>,
    /// Homes with refusals (or notices) since their last rebalance, in order (a simulated
    /// schedule replays).
    due: BTreeSet<DbKey>,
    /// Givers whose budget move a give started, for the transfer node to send at once (its
    /// registry would otherwise wait out the backoff of the giver's older sends).
    moves_started: Vec<DbKey>,
}

impl<P> Default for RebalanceNode<P> {
    fn default() -> RebalanceNode<P> {
        RebalanceNode {
            book: DemandBook::default(),
            polls: Exchange::new(MAX_POLLS),
            due: BTreeSet::new(),
            moves_started: Vec::new(),
        }
    }
}

/// The names a round of `home` reads (the home first, then its holders), if it is a floored
/// spread counter folding none back: while it folds, units travel to the home in folds, in no
/// current holder's budget, and a round's bound would be low.
fn round_names(home: &[u8], c: Option<&Counter>) -> Option<(Vec<Vec<u8>>, Vec<u64>)> {
    let c = c.filter(|c| c.leaving().is_empty())?;
    BudgetKind::of_member(home, Some(c))?;
    let spread = c.spread()?;
    let names = std::iter::once(home.to_vec())
        .chain(spread.holders.iter().cloned())
        .collect();
    Some((names, home_credits(c)))
}

/// The budget a member's rounds move (a key of no bounded spread: down-budget, its value).
fn kind_of(name: &[u8], c: Option<&Counter>) -> BudgetKind {
    BudgetKind::of_member(name, c).map_or(BudgetKind::Down, |(_, kind)| kind)
}

/// The credits the home applied (giver id, seq). Every move of a round's units goes through
/// the home. A holder's move to the home that lands between the home's report (taken as the
/// poll began) and the holder's (taken after its acknowledgement) would be counted by neither
/// side, so a round whose home applied a credit meanwhile tells nothing. The home's own moves
/// need no such record: its report counts them as moving out until acknowledged, so a holder
/// that reports after the credit counts them twice (the bound errs high, a retry), never not at
/// all.
fn home_credits(c: &Counter) -> Vec<u64> {
    let Some(t) = c.transfers() else {
        return Vec::new();
    };
    t.inbox.iter().flat_map(|a| [a.giver_id, a.seq]).collect()
}

impl<P: Clone + PartialEq> RebalanceNode<P> {
    /// A purchase refused afresh by the counter at `key` (not a replay), for good or
    /// (`waiting_since`) told to retry while budget gathers: the demand the rebalancer moves
    /// budget toward. Marks the home of `key` due while `rebalancing` (the demand is kept for
    /// `CTR.INFO` either way).
    pub fn record_refusal(
        &mut self,
        key: DbKey,
        amount: i64,
        waiting_since: Option<i64>,
        rebalancing: bool,
    ) {
        if rebalancing {
            self.mark_home_due(&key);
        }
        self.book.record(key, amount, waiting_since);
    }

    /// A purchase of `amount` at `key` told to wait for budget to gather is still waiting at
    /// `now_ms` (its buyer blocked in the server, where a client would have retried): it stays
    /// demand, and its home is due another round, as a retry would make it. A round that gave
    /// it only part of what it waits for (a giver gives at most half its budget a round) is
    /// followed by another, until the wait ends.
    pub fn keep_waiting(&mut self, key: DbKey, amount: i64, now_ms: i64) {
        self.mark_home_due(&key);
        self.book.keep_waiting(key, amount, now_ms);
    }

    /// A holder's demand is rebalanced by its home; any other key is a home itself.
    fn mark_home_due(&mut self, key: &DbKey) {
        let home = parse_holder_name(&key.1).map_or_else(|| key.1.clone(), |h| h.home.to_vec());
        self.mark_due((key.0, home));
    }

    /// One insert per refusal: a burst of refusals over many keys costs no scan of the others.
    fn mark_due(&mut self, home: DbKey) {
        if self.due.len() < DEMAND_LIMIT {
            self.due.insert(home);
        }
    }

    /// True when some home waits for a rebalance.
    pub fn has_due(&self) -> bool {
        !self.due.is_empty()
    }

    /// The homes due a rebalance, taken.
    pub fn take_due(&mut self) -> Vec<DbKey> {
        std::mem::take(&mut self.due).into_iter().collect()
    }

    /// The givers whose moves started since the last call (see `moves_started`).
    pub fn take_moves_started(&mut self) -> Vec<DbKey> {
        std::mem::take(&mut self.moves_started)
    }

    /// True while a poll is under way.
    pub fn polling(&self) -> bool {
        !self.polls.is_empty()
    }

    /// A rebalance of `home` (in the selected database) is due on this master: the home's
    /// master polls; any other master sends it a notice.
    pub fn rebalance<H: Host<Peer = P>>(&mut self, host: &mut H, home: &[u8]) {
        match host.route(home) {
            Route::Here => self.start_poll(host, home),
            Route::To(node) => host.send(&node, NodeMessage::DemandNotice(home.to_vec())),
            Route::Unknown => {}
        }
    }

    /// On the home's master: reads the holders it serves and polls the other masters.
    fn start_poll<H: Host<Peer = P>>(&mut self, host: &mut H, home: &[u8]) {
        let db = host.db();
        let busy = (self.polls.iter()).any(|(_, p)| p.db == db && p.home == home);
        if busy || !host.serves(home) {
            return; // a poll of this home is under way; the refusal's demand waits for the next
        }
        let Some(Some((names, home_credits))) = host.read(home, |c| round_names(home, c)) else {
            return; // not (or no longer) a floored spread counter, or folding holders back
        };
        let mut poll = Poll {
            db,
            home: home.to_vec(),
            reports: vec![None; names.len()],
            names,
            home_credits,
            asks: Vec::new(),
        };
        for i in 0..poll.names.len() {
            match host.route(&poll.names[i]) {
                Route::Here => poll.reports[i] = Some(self.local_demand(host, &poll.names[i])),
                Route::To(node) => match poll.asks.iter_mut().find(|(n, _)| *n == node) {
                    Some((_, Some(asked))) => asked.push(i),
                    _ => poll.asks.push((node, Some(vec![i]))),
                },
                Route::Unknown => return,
            }
        }
        if poll.asks.is_empty() {
            return self.finish(host, poll);
        }
        let asks: Vec<(P, Vec<Vec<u8>>)> = (poll.asks.iter())
            .map(|(node, asked)| {
                let names = asked.iter().flatten().map(|&i| poll.names[i].clone());
                (node.clone(), names.collect())
            })
            .collect();
        let deadline = host.now_ms().saturating_add(POLL_TIMEOUT_MS);
        let random = || host.new_id();
        let Ok(id) = self.polls.open(random, poll, Timeout::NEVER, deadline) else {
            return; // too many polls under way: this refusal's demand waits for the next round
        };
        for (node, names) in asks {
            let home = home.to_vec();
            host.send(
                &node,
                NodeMessage::DemandPoll(PollRequest { id, home, names }),
            );
        }
    }

    /// Drops the polls unanswered past their deadline (their homes may be polled again).
    pub fn expire<H: Host<Peer = P>>(&mut self, host: &mut H) {
        self.polls.expired(host.now_ms());
    }

    /// A holder's budget, budget moving out and demand meter on this master (NotHere unless
    /// it serves it).
    fn local_demand<H: Host<Peer = P>>(&mut self, host: &mut H, name: &[u8]) -> HolderDemand {
        if !host.serves(name) {
            return HolderDemand::NotHere;
        }
        let now = host.now_ms();
        let read = host.read(name, |c| {
            let kind = kind_of(name, c);
            c.map_or((0, 0), |c| (kind.budget(c), c.budget_moving_out(kind, now)))
        });
        let Some((budget, moving_out)) = read else {
            return HolderDemand::NotHere;
        };
        HolderDemand::Here {
            budget,
            moving_out,
            meter: self.book.take_meter(&(host.db(), name.to_vec()), now),
        }
    }

    /// Every report is in: unless the counter's holders changed meanwhile (a grow, a shrink,
    /// folds landing: units the reports may have missed or counted twice), tells every master
    /// polled the whole headroom seen, then plans and sends each giver's master its give.
    fn finish<H: Host<Peer = P>>(&mut self, host: &mut H, poll: Poll<P>) {
        let mut reports = Vec::with_capacity(poll.names.len());
        let mut in_hand = Vec::with_capacity(poll.names.len());
        for (name, report) in poll.names.iter().zip(&poll.reports) {
            let Some(HolderDemand::Here {
                budget,
                moving_out,
                meter,
            }) = *report
            else {
                return; // a holder moving between masters: plan at the next refusal
            };
            let demand = (self.book).since_last_rebalance((poll.db, name.clone()), meter);
            reports.push(HolderReport { budget, demand });
            in_hand.push((budget, moving_out));
        }
        if !self.unchanged(host, &poll) {
            return;
        }
        self.tell_headroom(host, &poll, whole_headroom(in_hand));
        for m in through_the_home(&plan_moves(&reports, MAX_MOVES)) {
            let give = Give {
                giver: poll.names[m.giver].clone(),
                receiver: poll.names[m.receiver].clone(),
                units: m.units,
            };
            match host.route(&give.giver) {
                Route::Here => self.on_give(host, give),
                Route::To(node) => host.send(&node, NodeMessage::DemandGive(give)),
                Route::Unknown => {}
            }
        }
    }

    /// True when the home still lists the poll's holders, folds none back, and applied no
    /// credit since the poll began.
    fn unchanged<H: Host<Peer = P>>(&self, host: &mut H, poll: &Poll<P>) -> bool {
        let same = |c: Option<&Counter>| {
            round_names(&poll.home, c)
                .is_some_and(|(names, credits)| names == poll.names && credits == poll.home_credits)
        };
        host.select_db(poll.db) && host.read(&poll.home, same) == Some(true)
    }

    /// Records the round's bound here and sends it to every master polled.
    fn tell_headroom<H: Host<Peer = P>>(&mut self, host: &mut H, poll: &Poll<P>, units: i64) {
        let Some(holder) = poll.names.get(1).and_then(|n| parse_holder_name(n)) else {
            return;
        };
        let now = host.now_ms();
        let spread_id = holder.spread_id;
        (self.book).saw_headroom((poll.db, spread_id), units, now, now);
        let bound = Headroom {
            home: poll.home.clone(),
            spread_id,
            units,
            round_ms: now,
        };
        for (node, _) in &poll.asks {
            host.send(node, NodeMessage::Headroom(bound.clone()));
        }
    }

    /// On the giver's master: moves at most what the giver holds now (it decides alone).
    fn on_give<H: Host<Peer = P>>(&mut self, host: &mut H, give: Give) {
        if !host.serves(&give.giver) {
            return;
        }
        let read = host.read(&give.giver, |c| {
            let kind = kind_of(&give.giver, c);
            (kind, c.map_or(0, |c| kind.budget(c)))
        });
        let Some((kind, budget)) = read else {
            return;
        };
        let units = give.units.min(budget);
        if units <= 0 {
            return;
        }
        let step = Step::Move {
            receiver: give.receiver,
            units: kind.units(units),
            now_ms: host.now_ms(),
            new_id: host.new_id(),
        };
        match host.write_step(&give.giver, step) {
            Ok(StepOutcome::Moved(_)) => {
                host.count(Event::BudgetMove);
                self.moves_started.push((host.db(), give.giver));
            }
            _ => host.count(Event::BudgetMoveSkipped), // busy pair: the next round retries
        }
    }

    /// On another master: answers a poll for the holders it serves.
    fn on_poll<H: Host<Peer = P>>(&mut self, host: &mut H, from: P, poll: PollRequest) {
        let reports = (poll.names.iter())
            .map(|n| self.local_demand(host, n))
            .collect();
        host.send(
            &from,
            NodeMessage::DemandAnswer {
                id: poll.id,
                reports,
            },
        );
    }

    /// On the home's master: records a master's answer; plans once every master answered.
    fn on_answer<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        from: P,
        id: u64,
        answers: Vec<HolderDemand>,
    ) {
        let Some(poll) = self.polls.get_mut(id) else {
            return; // late, repeated or never ours
        };
        let Some((_, asked)) = poll.asks.iter_mut().find(|(n, _)| *n == from) else {
            return;
        };
        let Some(indices) = asked.take_if(|a| a.len() == answers.len()) else {
            return;
        };
        for (i, report) in indices.into_iter().zip(answers) {
            poll.reports[i] = Some(report);
        }
        if poll.asks.iter().all(|(_, a)| a.is_none()) {
            if let Some(poll) = self.polls.end(id) {
                self.finish(host, poll);
            }
        }
    }

    /// A message of the rebalancer from `from` (in the cluster's database).
    pub fn receive<H: Host<Peer = P>>(&mut self, host: &mut H, from: P, m: NodeMessage) {
        let db = host.db();
        match m {
            NodeMessage::DemandNotice(home) => self.mark_due((db, home)),
            NodeMessage::DemandPoll(poll) => self.on_poll(host, from, poll),
            NodeMessage::DemandAnswer { id, reports } => self.on_answer(host, from, id, reports),
            NodeMessage::DemandGive(give) => self.on_give(host, give),
            NodeMessage::Headroom(m) => {
                let now = host.now_ms();
                self.book
                    .saw_headroom((db, m.spread_id), m.units, m.round_ms, now);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::spread::holder_name;

    #[test]
    fn a_wait_kept_makes_its_home_due_again_without_counting_a_refusal() {
        let mut node = RebalanceNode::<usize>::default();
        let holder = (0, holder_name(b"sale", 7, 1, 0));
        node.record_refusal(holder.clone(), 5, Some(0), true);
        assert_eq!(node.take_due(), vec![(0, b"sale".to_vec())]);
        assert!(!node.has_due(), "taken by the round");
        node.keep_waiting(holder.clone(), 5, 10);
        assert_eq!(node.take_due(), vec![(0, b"sale".to_vec())], "due again");
        assert_eq!(
            node.book.demand_of(&holder).refusals,
            1,
            "one refusal, kept"
        );
    }
}
