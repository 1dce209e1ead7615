//! Gathered reads in the simulator. The gather's own table (`protocol::gather`, the code the
//! runtime runs) plans each read's round, shares rounds between reads of the home (one in
//! flight and one queued), and settles them; the simulator answers one request at a time, each
//! at a different moment of the schedule (the holders of one master read together, as a
//! master answers a request), so folds, budget moves, grows and shrinks land between the
//! answers. A finished read takes the home as it is then and counts 0 for a holder the home no
//! longer lists (the runtime's `sum_time_view`).
//!
//! The check: a read whose whole window saw no client write and no fault (failover, restart,
//! restore, rename, deletion) gives exactly the total the checks read at once at its end. Reads
//! draw from a random stream of their own, so the schedule's own steps stay what they were.

use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{show, Rng, Sim};
use crate::counter::Counter;
use crate::protocol::gather::{Effect, Gathers, Plan, Reader, Reading};
use crate::protocol::messages::NodeId;

/// Reads checked against the total (quiet windows) and reads finished, over every schedule
/// of the run (the summary line).
pub(super) static CHECKED: AtomicU64 = AtomicU64::new(0);
pub(super) static FINISHED: AtomicU64 = AtomicU64::new(0);

/// What a read remembers of its start: the disturbances seen until then.
pub(super) struct Started {
    disturbances: u64,
}

/// The reads under way and what they need.
pub(super) struct Reads {
    rng: Rng,
    table: Gathers<Started, String>,
    next_client: usize,
    /// Client writes and faults so far.
    pub(super) disturbances: u64,
}

impl Reads {
    pub(super) fn new(seed: u64) -> Reads {
        Reads {
            rng: Rng(seed ^ 0x9EAD_5EED_0000_0001),
            table: Gathers::new(|| 1),
            next_client: 1,
            disturbances: 0,
        }
    }
}

/// A holder's answer: its units in hand (the runtime reads a holder as a client's `CTR.GET`).
fn held(c: &Counter) -> i64 {
    c.units_in_hand().unwrap_or(c.value())
}

/// Every holder asked of the master serving it (a node id per master).
fn plan_of(sim: &Sim, holders: &[Vec<u8>]) -> Plan {
    let mut plan = Plan::default();
    for (h, name) in holders.iter().enumerate() {
        let node: NodeId = [b'0' + sim.master_of(name) as u8; 40];
        plan.ask(node, || None, h);
    }
    plan
}

impl Sim {
    /// One step of the gathered reads: start one, answer one request, or nothing.
    pub(super) fn read_step(&mut self) -> Result<(), String> {
        match self.reads.rng.below(100) {
            0..=9 => self.start_read(),
            10..=49 => return self.answer_read(),
            _ => {}
        }
        Ok(())
    }

    /// A read of the home's total arrives, as `wait_for_gathers` places it: joining a round
    /// that has not started, else starting one, else queued behind the one in flight.
    fn start_read(&mut self) {
        if self.reads.table.readers.len() >= 3 {
            return;
        }
        let Some(home) = self.home_counter() else {
            return;
        };
        let mut holders: Vec<Vec<u8>> = home.spread().map_or(Vec::new(), |s| s.holders.clone());
        let current = holders.len();
        holders.extend(home.leaving().iter().map(|l| l.name.clone()));
        if holders.is_empty() {
            return;
        }
        let mut reading = Reading {
            home: self.home.clone(),
            holders: Rc::new(holders),
            current,
            values: vec![None],
            ages: vec![0],
            floors: vec![None],
        };
        let plan = plan_of(self, &reading.holders);
        let table = &mut self.reads.table;
        let id = match table.join(0, &mut reading, &[]) {
            Some(id) => id,
            None => {
                let in_flight = table
                    .home_rounds(0, &reading)
                    .is_some_and(|h| h.in_flight.is_some());
                let id = table.new_round(0, &reading, true);
                if !in_flight {
                    table.plan(id, plan);
                }
                table.list(0, &mut reading, id, !in_flight);
                id
            }
        };
        let client = self.reads.next_client;
        self.reads.next_client += 1;
        if let Some(round) = table.rounds.get_mut(id) {
            round.waiters.push(client);
        }
        let reader = Reader {
            bc: client,
            started_ms: self.now,
            readings: vec![reading],
            waits: vec![(0, id)],
            finish: Started {
                disturbances: self.reads.disturbances,
            },
        };
        table.readers.insert(client, reader);
        self.note(format_args!("read {client} waits for round {id}"));
    }

    /// One unanswered request of a started round is answered now: each holder it asks, as
    /// it is at this moment.
    fn answer_read(&mut self) -> Result<(), String> {
        let mut pending: Vec<(u64, usize)> = Vec::new();
        for (id, round) in self.reads.table.rounds.iter().filter(|(_, r)| r.started) {
            let unanswered = round
                .requests
                .iter()
                .enumerate()
                .filter(|(_, q)| !q.answered);
            pending.extend(unanswered.map(|(i, _)| (id, i)));
        }
        pending.sort_unstable(); // the table's own order is a hash map's
        if pending.is_empty() {
            return Ok(());
        }
        let (id, i) = pending[self.reads.rng.below(pending.len())];
        let Some(round) = self.reads.table.rounds.get(id) else {
            return Ok(());
        };
        let asked = round.requests[i].asked.clone();
        let answers: Vec<(usize, i64)> = asked
            .into_iter()
            .map(|h| (h, self.get(&round.holders[h]).map_or(0, held)))
            .collect();
        let Some(round) = self.reads.table.rounds.get_mut(id) else {
            return Ok(());
        };
        for (h, value) in answers {
            round.values[h] = Some(value);
        }
        round.requests[i].answered = true;
        let complete = round.complete();
        self.note(format_args!("round {id} request {i} answered"));
        if !complete {
            return Ok(());
        }
        let mut effects = Vec::new();
        self.reads.table.settle(id, Ok(()), &mut effects);
        for effect in effects {
            match effect {
                Effect::Start(next) => {
                    let Some(round) = self.reads.table.rounds.get(next) else {
                        continue;
                    };
                    let plan = plan_of(self, &round.holders);
                    self.reads.table.plan(next, plan);
                }
                Effect::Done(reader) => self.finish_read(reader)?,
                Effect::Fail(_, why) => return Err(why),
            }
        }
        Ok(())
    }

    /// A read with every value in: the home as it is now, 0 for a holder it no longer lists.
    fn finish_read(&mut self, reader: Reader<Started>) -> Result<(), String> {
        let reading = &reader.readings[0];
        let Some(home) = self.home_counter().filter(|_| self.home == reading.home) else {
            return Ok(()); // the home went or was renamed: the glue's read fails or re-reads
        };
        let listed: Vec<&[u8]> = home
            .spread()
            .map_or(&[][..], |s| &s.holders[..])
            .iter()
            .map(Vec::as_slice)
            .chain(home.leaving().iter().map(|l| l.name.as_slice()))
            .collect();
        let mut total = held(home);
        for (name, value) in reading.holders.iter().zip(&reading.values[1..]) {
            if listed.contains(&name.as_slice()) {
                total += value.unwrap_or(0);
            }
        }
        let quiet = reader.finish.disturbances == self.reads.disturbances;
        self.note(format_args!(
            "read {} of {} gave {total} (quiet: {quiet})",
            reader.bc,
            show(&reading.home)
        ));
        let at_once = self.total();
        FINISHED.fetch_add(1, Relaxed);
        CHECKED.fetch_add(u64::from(quiet), Relaxed);
        if quiet && total != at_once {
            return Err(format!(
                "a gathered read gave {total}, the total read at once is {at_once}"
            ));
        }
        Ok(())
    }
}
