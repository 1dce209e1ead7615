//! The transfer node: one node's part of the transfer protocol of folds and budget moves
//! (`counter::transfer` decides when a credit applies; this machine decides what a node does
//! with each message and what it sends when). It owns the registry of keys with something to
//! send (seal requests, credits), resent with a backoff until answered, and the
//! acknowledgements waiting for the replicas to hold their credit. Its effects go through its
//! [`Host`]: the runtime runs it in Redis (`runtime::spread_transfer`), the simulator on its
//! simulated masters, the same code.
//!
//! Delivery: every message is idempotent (a seal by its fold, a credit and its answer by
//! sequence), so any may be lost, repeated or late. A node sends nothing about a write before
//! its replicas hold it (the key's gate, fixed at the first tick after the write), and
//! acknowledges a credit only once its replicas hold the credit: a promoted replica has every
//! write another node was told about.

use std::collections::BTreeMap;

use super::host::{Event, Host, NodeMessage, Route, TransferMessage};
use super::replicas::{take_open, Gate};
use super::timeout::Timeout;
use crate::counter::spread::parse_holder_name;
use crate::counter::step::{Step, StepOutcome};
use crate::counter::transfer::{Ack, AckEffect, Credit, CreditOutcome, Seal};
use crate::counter::Counter;

/// The registry's tick period, the first resend delay, and the longest one.
pub const TICK_MS: i64 = 100;
pub const MAX_BACKOFF_MS: i64 = 2_000;

/// How long a folded holder stays (sealed, refusing writes) after its credit is acknowledged,
/// at least: long enough for every writer's holder cache (1 s in the client libraries) to
/// learn the new holder list, so a late write meets the sealed error instead of making the key
/// anew. It stays the token window when that is longer, so that a retried token replays its
/// first answer there for as long as a token is remembered.
pub const SEALED_GRACE_MS: i64 = 60_000;

/// Acknowledgements waiting at most (a giver whose ack was dropped sends its credit again).
const MAX_PENDING_ACKS: usize = 4096;

/// When a key is due to send (at once, then backing off while unanswered), whether it sent
/// before, and the replication its last write must reach before anything about it is sent.
struct Due {
    resend: Timeout,
    sent_before: bool,
    gate: Gate,
}

/// An acknowledgement waiting for the replicas to hold its credit.
struct PendingAck<P> {
    to: P,
    ack: Ack,
    gate: Gate,
}

/// One node's transfer state: soft state of its process (a restart or a promotion starts
/// from the keys the host notes as loaded).
pub struct TransferNode<P> {
    /// (db, key name) of every key with something to send.
    registry: BTreeMap<(i32, Vec<u8>), Due>,
    acks: Vec<PendingAck<P>>,
    /// Something was queued since the host last asked ([`TransferNode::take_soon`]).
    soon: bool,
}

impl<P> Default for TransferNode<P> {
    fn default() -> Self {
        TransferNode {
            registry: BTreeMap::new(),
            acks: Vec::new(),
            soon: false,
        }
    }
}

impl<P: Clone + PartialEq> TransferNode<P> {
    /// True once when something was queued since the last call: the host ticks soon.
    pub fn take_soon(&mut self) -> bool {
        std::mem::take(&mut self.soon)
    }

    /// Takes what the host noted into the registry: a new write's sends wait for the replicas
    /// to hold it.
    fn take_noted<H: Host<Peer = P>>(&mut self, host: &mut H) {
        for key in host.take_noted() {
            self.soon = true;
            self.registry
                .entry(key)
                .and_modify(|d| d.gate = Gate::default())
                .or_insert(Due {
                    resend: Timeout::backoff_from_now(TICK_MS, MAX_BACKOFF_MS),
                    sent_before: false,
                    gate: Gate::default(),
                });
        }
    }

    /// A new credit of `name` goes at the next tick, not after its backoff for older ones.
    pub fn hurry<H: Host<Peer = P>>(&mut self, host: &mut H, name: &[u8]) {
        self.take_noted(host);
        if let Some(d) = self.registry.get_mut(&(host.db(), name.to_vec())) {
            d.resend.hurry();
        }
    }

    /// A message from `from` (None: this node, delivered directly).
    pub fn receive<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        from: Option<P>,
        m: TransferMessage,
    ) {
        self.take_noted(host);
        match m {
            TransferMessage::Seal(s) => self.on_seal(host, s),
            TransferMessage::Credit(c) => self.on_credit(host, from, c),
            TransferMessage::Ack(a) => self.on_ack(host, a),
        }
        self.take_noted(host);
    }

    /// One pass over the registry: sends what is due; forgets keys with nothing left to send.
    /// A replica only drops the keys its master has finished with (it resumes the others once
    /// promoted).
    pub fn tick<H: Host<Peer = P>>(&mut self, host: &mut H) {
        if host.paused() {
            return; // the next tick does this one's work
        }
        self.take_noted(host);
        if self.registry.is_empty() && self.acks.is_empty() {
            return; // nothing to send: the replicas' offsets are not read (a server call)
        }
        let master = host.is_master();
        let now = host.now_ms();
        let replication = if master {
            host.replication()
        } else {
            self.acks.clear();
            None
        };
        if let Some(r) = &replication {
            for a in take_open(&mut self.acks, r, |a| &mut a.gate) {
                host.send(&a.to, NodeMessage::Transfer(TransferMessage::Ack(a.ack)));
            }
        }
        let due: Vec<(i32, Vec<u8>, bool)> = (self.registry.iter())
            .filter(|(_, d)| d.resend.fired(now))
            .map(|((db, name), d)| (*db, name.clone(), d.sent_before))
            .collect();
        let mut held_by_gate = false;
        for (db, name, resend) in due {
            let key = (db, name);
            if !host.select_db(db) {
                self.registry.remove(&key);
                continue;
            }
            if !master {
                if !has_pending(host, &key.1) {
                    self.registry.remove(&key);
                }
                continue;
            }
            let replicas_hold_it = replication
                .as_ref()
                .is_some_and(|r| (self.registry.get_mut(&key)).is_some_and(|d| d.gate.open(r)));
            if !replicas_hold_it {
                held_by_gate = true;
                continue; // asked again next tick
            }
            // A key whose slot moves sends nothing until the move ends: then its new master
            // sends (kept here, it goes on from here if the move was aborted).
            if host.moving(&key.1) {
                continue;
            }
            let sent = self.send_seals(host, &key.1) + self.send_credits(host, &key.1, resend);
            self.take_noted(host);
            if sent == 0 {
                self.registry.remove(&key);
            } else if let Some(d) = self.registry.get_mut(&key) {
                d.sent_before = true;
                d.resend.fire(now);
            }
        }
        host.select_db(0);
        if let (Some(r), true) = (&replication, held_by_gate || !self.acks.is_empty()) {
            host.wait_for_replicas(r);
        }
    }

    /// Asks (again) the master of every holder still leaving `home` to seal it.
    pub fn send_seals<H: Host<Peer = P>>(&mut self, host: &mut H, home: &[u8]) -> usize {
        let (seals, _) = messages_due(host, home);
        for seal in &seals {
            self.deliver(host, &seal.holder, TransferMessage::Seal(seal.clone()));
        }
        seals.len()
    }

    /// Sends (again) every credit in `giver`'s outbox; returns how many went.
    fn send_credits<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        giver: &[u8],
        resend: bool,
    ) -> usize {
        let (_, credits) = messages_due(host, giver);
        for credit in &credits {
            if resend {
                host.count(Event::Resent);
            }
            self.deliver(
                host,
                &credit.receiver,
                TransferMessage::Credit(credit.clone()),
            );
        }
        credits.len()
    }

    /// Sends one message toward the master of `to_key`, or handles it here when that is us.
    fn deliver<H: Host<Peer = P>>(&mut self, host: &mut H, to_key: &[u8], m: TransferMessage) {
        match host.route(to_key) {
            Route::Here => self.receive(host, None, m),
            Route::To(node) => host.send(&node, NodeMessage::Transfer(m)),
            Route::Unknown => {}
        }
    }

    /// On the holder's master: seals the holder into its home (once), then sends the credit.
    /// Fold id 0: only re-targets a move toward a former name of the home.
    fn on_seal<H: Host<Peer = P>>(&mut self, host: &mut H, m: Seal) {
        // Only a key named as a holder is ever sealed (a home's state that names another key
        // is refused when it is decoded; this holds also for a request from an older version).
        if !host.serves(&m.holder) || parse_holder_name(&m.holder).is_none() {
            return;
        }
        if m.fold_id == 0 {
            return retarget_stale_move(host, &m);
        }
        match host.read(&m.holder, |c| c.is_none()) {
            None => return, // another type under the holder's name: nothing of ours to fold
            // The holder was sealed and then renamed (or restored under another name): the
            // key under its new name carries the fold. Sealing a new key at 0 under the old
            // name would send the home an empty credit for the same fold, which could end it
            // first and leave the holder's units refused for ever.
            Some(true) if self.retarget_carried_fold(host, &m) => return,
            Some(_) => {}
        }
        retarget_stale_move(host, &m);
        // Its own moves still unanswered: it seals later (the home asks again). The core
        // would refuse the seal too (`Busy`); asked here, nothing is written nor logged.
        let busy = host.read(&m.holder, |c| {
            c.is_some_and(|c| !c.is_sealed() && c.transfers().is_some_and(|t| !t.outbox.is_empty()))
        });
        if busy == Some(true) {
            return;
        }
        let seal = seal_step(host, &m.home, m.fold_id);
        if let Some(StepOutcome::Sealed(Some(_))) = write(host, &m.holder, seal, "seal a holder") {
            host.count(Event::Sealed);
        }
        // Sealed now or earlier: its credit goes (a repeat is harmless). Within one server's
        // command, at once (every step is in that command's replication); in a cluster, from
        // the registry's tick once the replicas hold the seal.
        if !host.in_cluster() {
            self.send_credits(host, &m.holder, false);
        }
    }

    /// True when a key this node tracks (in the selected database) is the holder `name` sealed
    /// and renamed away, its fold still unacknowledged: a key made anew under `name` would be
    /// sealed into the same fold by the home's next seal request, and the home takes one
    /// credit per fold (the simulator's seed 203,771 of a soak: the new key's 13 units lost).
    /// A client's write that would make it is refused as the sealed holder's would be.
    pub fn fold_carried_elsewhere<H: Host<Peer = P>>(&mut self, host: &mut H, name: &[u8]) -> bool {
        self.take_noted(host);
        !(self.tracked_where(host, |c| c.carries_a_fold_of(name))).is_empty()
    }

    /// The keys this node tracks in the selected database (the registry holds every key with
    /// a transfer in flight) whose counter satisfies `test`.
    fn tracked_where<H: Host<Peer = P>>(
        &self,
        host: &H,
        test: impl Fn(&Counter) -> bool,
    ) -> Vec<Vec<u8>> {
        let db = host.db();
        (self.registry.keys())
            .filter(|(d, n)| *d == db && host.read(n, |c| c.is_some_and(&test)) == Some(true))
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// The keys this node tracks (the registry holds every key with a transfer in flight)
    /// that are sealed holders carrying the fold of `m`: each re-targets its fold to the home
    /// that asks (it may have been renamed too). True when there was one.
    fn retarget_carried_fold<H: Host<Peer = P>>(&mut self, host: &mut H, m: &Seal) -> bool {
        let carriers = self.tracked_where(host, |c| c.carries_fold(m.fold_id, &m.holder));
        // A carrier whose slot moves is written by no one now (its write could be lost with
        // the source's keys): the home's next seal request finds it where it serves then.
        for carrier in &carriers {
            if !host.serves(carrier) {
                continue;
            }
            let moved_home = host.read(carrier, |c| {
                c.and_then(|c| c.transfers().and_then(|t| t.sealed_into.clone()))
            });
            if moved_home.flatten().is_some_and(|into| into != m.home) {
                let seal = seal_step(host, &m.home, m.fold_id);
                write(host, carrier, seal, "re-target a fold");
            }
        }
        !carriers.is_empty()
    }

    /// On the receiver's master: applies a credit it expects, once, then acknowledges it (also
    /// a repeat); answers a credit it does not expect with a refusal. Nothing is answered while
    /// the credit cannot be applied (the giver sends it again).
    fn on_credit<H: Host<Peer = P>>(&mut self, host: &mut H, from: Option<P>, m: Credit) {
        if host.holds_credits() || !host.serves(&m.receiver) {
            return;
        }
        // Decided on a read first: a repeat or a refusal writes nothing (and replicates
        // nothing).
        let read = host.read(&m.receiver, |c| {
            let missing_home = c.is_none() && parse_holder_name(&m.receiver).is_none();
            (Counter::credit_outcome_at(c, &m), missing_home)
        });
        let Some((decided, missing_home)) = read else {
            return; // another type under the receiver's name
        };
        // A home name missing here (not yet, for the core): the home renamed on this master
        // answers a credit it applied under that name, and asks the giver of a budget move it
        // never applied to send it to its name now.
        let decided = if missing_home {
            let (outcome, renamed) = outcome_at_renamed_home(host, &m);
            if let Some(home) = renamed.filter(|_| outcome == CreditOutcome::NotYet) {
                self.ask_to_retarget(host, &m, home);
            }
            Some(outcome)
        } else {
            decided
        };
        let outcome = match decided {
            Some(outcome) => outcome,
            None => match write(host, &m.receiver, Step::Credit(m.clone()), "apply a credit") {
                Some(StepOutcome::Credited(outcome)) => outcome,
                _ => return,
            },
        };
        match outcome {
            CreditOutcome::Applied => host.count(Event::Credited),
            CreditOutcome::Repeat => host.count(Event::DuplicateCredit),
            CreditOutcome::Refused => host.count(Event::Refused),
            CreditOutcome::NotYet => return, // sent again by the giver
        }
        let ack = Ack {
            giver: m.giver,
            receiver: m.receiver,
            seq: m.seq,
            refused: outcome == CreditOutcome::Refused,
        };
        match from {
            None => self.on_ack(host, ack),
            Some(node) => self.queue_ack(node, ack),
        }
    }

    /// A budget move's credit toward a former name of `home` (renamed here), not applied: its
    /// giver is asked to re-target it (a seal request for fold 0). Without it the move stays in
    /// flight for good: a give planned before the `RENAME` and started after it names the old
    /// name, and only a seal request re-targets (the simulator's seed 2761 of its first run
    /// with the rebalancer: a holder's budget move stuck, its buyers told to wait).
    fn ask_to_retarget<H: Host<Peer = P>>(&mut self, host: &mut H, m: &Credit, home: Vec<u8>) {
        if m.fold_id != 0 {
            return; // a fold is re-targeted by its home's own seal requests
        }
        let seal = Seal {
            home,
            holder: m.giver.clone(),
            fold_id: 0,
        };
        self.deliver(host, &m.giver, TransferMessage::Seal(seal));
    }

    /// Queues an acknowledgement for the tick, which sends it once the replicas hold the
    /// credit.
    fn queue_ack(&mut self, to: P, ack: Ack) {
        let queued = self.acks.iter().any(|q| q.to == to && q.ack == ack);
        if !queued && self.acks.len() < MAX_PENDING_ACKS {
            self.acks.push(PendingAck {
                to,
                ack,
                gate: Gate::default(),
            });
        }
        self.soon = true;
    }

    /// On the giver's master: an acknowledgement forgets the outbox entry (a sealed holder
    /// with nothing left to send expires after the grace period); a refusal rolls a budget
    /// move back.
    fn on_ack<H: Host<Peer = P>>(&mut self, host: &mut H, m: Ack) {
        if !host.serves(&m.giver) {
            return;
        }
        let matters = host.read(&m.giver, |c| c.is_some_and(|c| c.answer_matters(&m)));
        if matters != Some(true) {
            return;
        }
        let giver = m.giver.clone();
        let Some(StepOutcome::Answered(effect)) =
            write(host, &giver, Step::Answer(m), "apply a transfer answer")
        else {
            return;
        };
        match effect {
            AckEffect::Nothing => {}
            AckEffect::RolledBack => host.count(Event::RolledBack),
            AckEffect::Acknowledged { sealed_and_done } => {
                host.count(Event::Acked);
                if sealed_and_done {
                    // Kept for the token window at least: a retried token replays there.
                    let grace = SEALED_GRACE_MS.max(host.token_window_ms());
                    let at = host.now_ms().saturating_add(grace);
                    host.expire_at(&giver, at);
                }
            }
        }
    }
}

/// One protocol write; a failure is logged (the message is sent again by its sender).
fn write<H: Host>(host: &mut H, name: &[u8], step: Step, what: &str) -> Option<StepOutcome> {
    match host.write_step(name, step) {
        Ok(outcome) => Some(outcome),
        Err(e) => {
            host.warn(&format!("ctr: could not {what}: {e}"));
            None
        }
    }
}

/// Sealing a key into `home` for the fold `fold_id`, now.
fn seal_step<H: Host>(host: &mut H, home: &[u8], fold_id: u64) -> Step {
    Step::Seal {
        home: home.to_vec(),
        fold_id,
        now_ms: host.now_ms(),
        new_id: host.new_id(),
    }
}

/// A credit to a home name missing here: the home renamed on this master (the renamed-home
/// rule) answers it as a repeat when it applied it under that name; else it is not yet (see
/// [`Counter::credit_outcome_at_renamed_home`]). With the renamed home's name, if any.
fn outcome_at_renamed_home<H: Host>(host: &H, m: &Credit) -> (CreditOutcome, Option<Vec<u8>>) {
    let renamed = parse_holder_name(&m.from)
        .filter(|h| h.spread_id != 0)
        .and_then(|h| host.living_home(&m.receiver, h.spread_id));
    let Some(home) = renamed else {
        return (CreditOutcome::NotYet, None);
    };
    let outcome = host.read(&home, |c| {
        c.map_or(CreditOutcome::NotYet, |c| {
            Counter::credit_outcome_at_renamed_home(c, m)
        })
    });
    (outcome.unwrap_or(CreditOutcome::NotYet), Some(home))
}

/// On a holder asked by its home under `m.home`: a budget move of its own toward the home
/// under a name it had before a RENAME goes to this name (same seq: the renamed home applies
/// it once).
fn retarget_stale_move<H: Host>(host: &mut H, m: &Seal) {
    let stale_move = host.read(&m.holder, |c| {
        c.is_some_and(|c| c.has_move_to_former_home(&m.home))
    });
    if stale_move == Some(true) {
        let home = m.home.clone();
        write(
            host,
            &m.holder,
            Step::RetargetMoves { home },
            "re-target a move",
        );
    }
}

/// What the counter at `name` has to send (seal requests and credits; none when missing).
fn messages_due<H: Host>(host: &H, name: &[u8]) -> (Vec<Seal>, Vec<Credit>) {
    host.read(name, |c| {
        c.map(|c| c.messages_due(name)).unwrap_or_default()
    })
    .unwrap_or_default()
}

fn has_pending<H: Host>(host: &H, name: &[u8]) -> bool {
    host.read(name, |c| {
        c.is_some_and(|c| c.transfers().is_some_and(|t| t.has_pending()))
    })
    .unwrap_or(false)
}
