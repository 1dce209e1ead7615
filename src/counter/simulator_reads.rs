//! Gathered reads in the simulator, run by the gather node the runtime runs
//! (`protocol::gather_node` over its table, `protocol::gather`) on one master, the one the
//! reads' clients are connected to (the home's master when the first of them arrived): it
//! places each read in a round shared with the other reads of the home (one in flight and one
//! queued), plans the round from that master's routes (its own holders read at a later step,
//! as the runtime reads them from a timer), sends the requests over the simulated network
//! (lost, duplicated, reordered, resent at the node's ticks), has them answered by the masters
//! asked (`gather_node::answer`, each holder as it is at that moment), asks again where a
//! holder's slot moved, and settles. Folds, budget moves, grows, shrinks and slot migrations
//! land between the answers. A finished read takes the home as its master has it then and
//! counts 0 for a holder the home no longer lists (the runtime's `sum_time_view`); a read
//! older than the gather timeout fails, as its client would be answered. In 2% of the steps
//! with faults a scripted read has a holder's slot handed over twice under it (the read must
//! fail, never count the holder as 0).
//!
//! The check: a read whose whole window saw no client write and no fault (failover, restart,
//! restore, rename, deletion) gives exactly the total the checks read at once at its end. Reads
//! draw from a random stream of their own, so the schedule's own steps stay what they were.

use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{describe, key_slot, show, Message, Migration, Rng, Sim, SimHost, MASTERS};
use crate::counter::Counter;
use crate::persist::gather_msg::HolderAnswer;
use crate::protocol::gather::{Effect, Reader, Reading};
use crate::protocol::gather_node::{GatherFailure, GatherNode};
use crate::protocol::host::NodeMessage;

/// Reads checked against the total (quiet windows), reads finished, and reads failed (a
/// holder moving twice, the timeout), over every schedule of the run (the summary line).
pub(super) static CHECKED: AtomicU64 = AtomicU64::new(0);
pub(super) static FINISHED: AtomicU64 = AtomicU64::new(0);
pub(super) static FAILED: AtomicU64 = AtomicU64::new(0);
pub(super) static TIMED_OUT: AtomicU64 = AtomicU64::new(0);
pub(super) static REDIRECTED: AtomicU64 = AtomicU64::new(0);

/// How long a read waits before it fails. The server's bound (`ctr.gather-timeout-ms`) is 1 s
/// for gathers that take about a millisecond; the model's steps are milliseconds apart, its
/// messages wait behind many others, and a timeout only fails a read: 5 s keeps most reads.
const GATHER_TIMEOUT_MS: i64 = 5_000;

/// What a read remembers of its start: the disturbances seen until then.
pub(super) struct Started {
    disturbances: u64,
}

/// Why a read failed (the runtime's reply error).
#[derive(Debug, Clone)]
pub(super) struct ReadFailed(GatherFailure);

impl From<GatherFailure> for ReadFailed {
    fn from(failure: GatherFailure) -> ReadFailed {
        ReadFailed(failure)
    }
}

type Node = GatherNode<Started, ReadFailed, usize>;

thread_local! {
    /// Where the next life of a reads node starts its ids: the runtime draws a random start
    /// per process life, so that an answer to a request of an earlier life never matches a
    /// request of this one. Set per schedule (replays draw the same ids).
    static LIFE_START: std::cell::Cell<u64> = const { std::cell::Cell::new(1) };
}

/// A new life's id start (the runtime's `random_id`).
fn life_start() -> u64 {
    LIFE_START.with(|l| {
        let start = l.get();
        l.set(start.wrapping_add(1 << 40));
        start
    })
}

/// The reads under way and what they need.
pub(super) struct Reads {
    rng: Rng,
    /// The master the reads' clients are connected to, and its gather node (soft state: a
    /// failover or a restart of that master loses it, and the reads' connections).
    pub(super) master: usize,
    node: Node,
    next_client: usize,
    /// Client writes and faults so far.
    pub(super) disturbances: u64,
}

impl Reads {
    pub(super) fn new(seed: u64) -> Reads {
        LIFE_START.with(|l| l.set(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1));
        Reads {
            rng: Rng(seed ^ 0x9EAD_5EED_0000_0001),
            master: 0,
            node: GatherNode::new(life_start),
            next_client: 1,
            disturbances: 0,
        }
    }
}

/// A holder's units in hand (the runtime reads a holder as a client's `CTR.GET`).
fn held(c: &Counter) -> i64 {
    c.units_in_hand().unwrap_or(c.value())
}

/// A holder as a master serving it answers a gather (the runtime's `read_holder`): its units
/// in hand, and its own floor and ceiling when it has them.
pub(super) fn holder_answer(c: Option<&Counter>) -> HolderAnswer {
    match c {
        None => HolderAnswer::Value(0),
        Some(c) => match (c.floor(), c.ceiling()) {
            (floor, Some(x)) => HolderAnswer::Ceiled {
                value: held(c),
                ceiling: x.ceiling,
                floor: floor.map(|f| f.floor),
            },
            (Some(f), None) => HolderAnswer::Floored(held(c), f.floor),
            (None, None) => HolderAnswer::Value(held(c)),
        },
    }
}

/// True for a gather request or answer.
fn is_gather(m: &Message) -> bool {
    let Message::Node { m, .. } = m;
    matches!(
        m,
        NodeMessage::GatherRequest { .. } | NodeMessage::GatherResponse { .. }
    )
}

/// The id of `m` when it is a gather request asking for `key`.
fn request_for(m: &Message, key: &[u8]) -> Option<u64> {
    let Message::Node { m, .. } = m;
    match m {
        NodeMessage::GatherRequest { id, names, .. } if names.iter().any(|n| n == key) => Some(*id),
        _ => None,
    }
}

impl Sim {
    /// Runs the reads' gather node on its master; then carries out what it settled.
    pub(super) fn with_reads<R>(
        &mut self,
        f: impl FnOnce(&mut Node, &mut SimHost, &mut Vec<Effect<Started, ReadFailed>>) -> R,
    ) -> Result<R, String> {
        let mut node = std::mem::replace(&mut self.reads.node, GatherNode::new(|| 1));
        let master = self.reads.master;
        let mut effects = Vec::new();
        let r = f(&mut node, &mut SimHost { sim: self, master }, &mut effects);
        node.take_settled(); // the runtime's cache: not simulated
        self.reads.node = node;
        self.run_read_effects(effects)?;
        Ok(r)
    }

    fn run_read_effects(
        &mut self,
        mut effects: Vec<Effect<Started, ReadFailed>>,
    ) -> Result<(), String> {
        while let Some(effect) = effects.pop() {
            match effect {
                Effect::Start(id) => {
                    let more = self.with_reads(|node, host, effects| {
                        if node.start(host, id, effects) {
                            node.launch(host, id);
                        }
                    });
                    more?;
                }
                Effect::Done(reader) => self.finish_read(reader)?,
                Effect::Fail(reader, why) => {
                    FAILED.fetch_add(1, Relaxed);
                    self.note(format_args!("read {} failed: {:?}", reader.bc, why.0));
                }
            }
        }
        Ok(())
    }

    /// One step of the gathered reads: a read arrives, a round reads its local holders, or
    /// nothing; reads past the timeout fail.
    pub(super) fn read_step(&mut self) -> Result<(), String> {
        self.expire_reads()?;
        match self.reads.rng.below(100) {
            0..=9 => self.start_read(),
            10..=29 => self.read_some_locals(),
            30..=59 => {
                self.deliver_gather_message();
                Ok(())
            }
            60 | 61 => self.read_across_two_handoffs(),
            _ => Ok(()),
        }
    }

    /// A read during which a holder's slot moves twice: its request reaches the holder's
    /// former master after an atomic slot migration handed the slot on (the answer: not
    /// here), and the request the read sends again where the holder is now finds it moved on
    /// once more. The read fails then (the holder is moving: the client retries); counting
    /// the holder as 0 would give a total short by its units. Scripted within one step, every
    /// gather message delivered in order, so that no client write comes between and a read
    /// that answers is checked against the total (slot migrations run with faults only).
    fn read_across_two_handoffs(&mut self) -> Result<(), String> {
        if !self.faults || self.migration.is_some() || !self.reads.node.table.readers.is_empty() {
            return Ok(());
        }
        let home_master = self.master_of(&self.home);
        let moving: Vec<Vec<u8>> = (self.members().into_iter())
            .filter(|k| *k != self.home && self.master_of(k) != home_master)
            .filter(|k| self.get(k).is_some_and(|c| held(c) != 0))
            .collect();
        if moving.is_empty() {
            return Ok(());
        }
        let key = moving[self.reads.rng.below(moving.len())].clone();
        self.start_read()?;
        let first: Vec<u64> = (self.network.iter())
            .filter_map(|m| request_for(m, &key))
            .collect();
        if first.is_empty() {
            return Ok(()); // no request for it (the home not on its master: redirected)
        }
        self.hand_over_under_a_read(&key);
        let mut moved_again = false;
        for _ in 0..64 {
            if self.reads.node.table.readers.is_empty() {
                break;
            }
            self.read_some_locals()?;
            let Some(i) = (self.network.iter()).position(is_gather) else {
                break;
            };
            let m = self.network.remove(i);
            let asked_again = request_for(&m, &key).is_some_and(|id| !first.contains(&id));
            if asked_again && !moved_again {
                moved_again = true;
                self.hand_over_under_a_read(&key);
            }
            self.handle(m);
        }
        Ok(())
    }

    /// An atomic slot migration of `key`'s slot, handed over at once to another master.
    fn hand_over_under_a_read(&mut self, key: &[u8]) {
        let from = self.master_of(key);
        let to = (from + 1 + self.reads.rng.below(MASTERS - 1)) % MASTERS;
        let slot = key_slot(key);
        self.note(format_args!(
            "slot {slot} ({}) handed over from master {from} to {to} under a read",
            show(key)
        ));
        self.hand_over(Migration { slot, from, to });
    }

    /// One gather request or answer on the network delivered now (gathers are quick next to
    /// the other traffic), lost or duplicated as any message is.
    fn deliver_gather_message(&mut self) {
        let waiting: Vec<usize> = (self.network.iter().enumerate())
            .filter(|(_, m)| is_gather(m))
            .map(|(i, _)| i)
            .collect();
        if waiting.is_empty() {
            return;
        }
        let i = waiting[self.reads.rng.below(waiting.len())];
        let m = if self.faults && self.reads.rng.percent(10) {
            self.network[i].clone()
        } else {
            self.network.swap_remove(i)
        };
        if self.faults && self.reads.rng.percent(15) {
            self.note(format_args!("lost {}", describe(&m)));
            return;
        }
        self.handle(m);
    }

    /// The reads' master failed over or restarted: its node is gone, with its clients.
    pub(super) fn reads_lost(&mut self, master: usize) {
        if master == self.reads.master && !self.reads.node.table.readers.is_empty() {
            self.note(format_args!(
                "the reads on master {master} lose their clients"
            ));
            self.reads.node = GatherNode::new(life_start);
        }
    }

    /// A read past the gather timeout leaves its rounds (the runtime's `timed_out`).
    fn expire_reads(&mut self) -> Result<(), String> {
        let now = self.now;
        let mut late: Vec<usize> = (self.reads.node.table.readers.iter())
            .filter(|(_, r)| now - r.started_ms > GATHER_TIMEOUT_MS)
            .map(|(&bc, _)| bc)
            .collect();
        late.sort_unstable(); // the table's own order is a hash map's
        for bc in late {
            TIMED_OUT.fetch_add(1, Relaxed);
            self.note(format_args!("read {bc} timed out"));
            self.with_reads(|node, _, effects| node.table.remove_reader(bc, effects))?;
        }
        Ok(())
    }

    /// A read of the home's total arrives, as `wait_for_gathers` places it: joining a round
    /// that has not started, else starting one, else queued behind the one in flight.
    fn start_read(&mut self) -> Result<(), String> {
        if self.reads.node.table.readers.len() >= 3 {
            return Ok(());
        }
        if self.reads.node.table.readers.is_empty() {
            self.reads.master = self.master_of(&self.home);
        }
        let home_name = self.home.clone();
        let Some(home) = self.masters[self.reads.master].keys.get(&home_name) else {
            return Ok(()); // not here: the client is redirected
        };
        let mut holders: Vec<Vec<u8>> = home.spread().map_or(Vec::new(), |s| s.holders.clone());
        let current = holders.len();
        holders.extend(home.leaving().iter().map(|l| l.name.clone()));
        if holders.is_empty() {
            return Ok(());
        }
        let mut reading = Reading {
            home: home_name,
            holders: Rc::new(holders),
            current,
            values: vec![Some(held(home))],
            ages: vec![0],
            floors: vec![None],
            ceilings: vec![None],
        };
        let client = self.reads.next_client;
        self.reads.next_client += 1;
        let started = Started {
            disturbances: self.reads.disturbances,
        };
        let now = self.now;
        let placed = self.with_reads(|node, _, _| {
            let table = &mut node.table;
            let (id, start) = match table.join(0, &mut reading, &[]) {
                Some(id) => (id, false),
                None => {
                    let in_flight = table
                        .home_rounds(0, &reading)
                        .is_some_and(|h| h.in_flight.is_some());
                    let id = table.new_round(0, &reading, true);
                    table.list(0, &mut reading, id, !in_flight);
                    (id, !in_flight)
                }
            };
            if let Some(round) = table.rounds.get_mut(id) {
                round.waiters.push(client);
            }
            table.readers.insert(
                client,
                Reader {
                    bc: client,
                    started_ms: now,
                    readings: vec![reading],
                    waits: vec![(0, id)],
                    finish: started,
                },
            );
            (id, start)
        })?;
        let (id, start) = placed;
        self.note(format_args!("read {client} waits for round {id}"));
        if start {
            self.with_reads(|node, host, effects| {
                if node.start(host, id, effects) {
                    node.launch(host, id);
                }
            })?;
        }
        Ok(())
    }

    /// A started round reads the holders its master serves (the runtime's timer).
    fn read_some_locals(&mut self) -> Result<(), String> {
        let mut due: Vec<u64> = (self.reads.node.table.rounds.iter())
            .filter(|(_, r)| r.started && !r.locals_read)
            .map(|(id, _)| id)
            .collect();
        due.sort_unstable();
        if due.is_empty() {
            return Ok(());
        }
        let id = due[self.reads.rng.below(due.len())];
        self.note(format_args!("round {id} reads its local holders"));
        self.with_reads(|node, host, effects| node.read_locals(host, id, effects))
    }

    /// A read with every value in: the home as its master has it now, 0 for a holder it no
    /// longer lists; the home read at the start when it is gone. A home whose slot this
    /// master no longer serves is not summed: the read is redirected (`sum_time_view`).
    fn finish_read(&mut self, reader: Reader<Started>) -> Result<(), String> {
        let reading = &reader.readings[0];
        if self.master_of(&reading.home) != self.reads.master {
            REDIRECTED.fetch_add(1, Relaxed);
            self.note(format_args!(
                "read {}: its home moved, redirected",
                reader.bc
            ));
            return Ok(());
        }
        let mut total = reading.values[0].unwrap_or(0);
        let mut listed: Option<Vec<Vec<u8>>> = None;
        if let Some(home) = self.masters[self.reads.master].keys.get(&reading.home) {
            total = held(home);
            let names = home
                .spread()
                .map_or(&[][..], |s| &s.holders[..])
                .iter()
                .cloned();
            listed = Some(
                names
                    .chain(home.leaving().iter().map(|l| l.name.clone()))
                    .collect(),
            );
        }
        for (name, value) in reading.holders.iter().zip(&reading.values[1..]) {
            if listed.as_ref().is_none_or(|l| l.contains(name)) {
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
        if quiet && self.home == reading.home && total != at_once {
            return Err(format!(
                "a gathered read gave {total}, the total read at once is {at_once}"
            ));
        }
        Ok(())
    }
}
