//! The gather's table, plain Rust with no Redis API: the rounds that read a home's holders
//! from the other masters (each a request/response exchange of `protocol::exchange`), how
//! reads of the same home share them (one round in flight and one queued behind it per holder
//! list, a read joining only a round that starts after it arrived), and what settling a round
//! does to the reads waiting for it. The runtime (`runtime::spread_gather`) sends the requests,
//! records the answers, blocks and unblocks the clients and replies; it hands this table its
//! reply type `F` and error type `E`.

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::rc::Rc;

use super::exchange::Exchange;
use super::timeout::Timeout;
use crate::counter::exact_sum;
use crate::persist::gather_msg;

/// One key being read: its own value and, for a home, its other holders.
pub(crate) struct Reading {
    pub(crate) home: Vec<u8>,
    /// The current holders, then (from `current` on) those still folding back; shared with
    /// the gather that reads them (a waiting read holds no copy of its own).
    pub(crate) holders: Rc<Vec<Vec<u8>>>,
    pub(crate) current: usize,
    /// Holder values, holder 0 (the key itself) first. Only holder 0 while a gather is
    /// awaited: the others arrive all at once with the gather's answer.
    pub(crate) values: Vec<Option<i64>>,
    /// How old each value is, in ms: 0 when read for this command, else its age in the cache.
    pub(crate) ages: Vec<i64>,
    /// Each holder's own floor as read with its value (None: no floor, or not read yet).
    pub(crate) floors: Vec<Option<i64>>,
    /// Each holder's own ceiling as read with its value (None: no ceiling, or not read yet).
    pub(crate) ceilings: Vec<Option<i64>>,
}

/// A holder's value and own bounds (None: it has none), as one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HolderRead {
    pub value: i64,
    pub floor: Option<i64>,
    pub ceiling: Option<i64>,
}

impl Reading {
    /// The sum of its values (a missing one counts 0); None past 64 bits.
    pub(crate) fn total(&self) -> Option<i64> {
        exact_sum(self.values.iter().map(|v| v.unwrap_or(0)))
    }
}

/// One request of a gather: some holders asked of one master (at most what a receiver takes).
pub(crate) struct Request<P> {
    pub(crate) id: u64,
    pub(crate) node: P,
    /// The master's plain client address, for its read link (None: over the bus only).
    pub(crate) addr: Option<SocketAddr>,
    /// Sent once already (on its read link or over the bus): resends go over the bus.
    pub(crate) sent: bool,
    /// Indexes into the gather's holders, in request order.
    pub(crate) asked: Vec<usize>,
    pub(crate) answered: bool,
}

/// One gather of a home's holders, shared by every read waiting for it.
pub(crate) struct Round<P> {
    pub(crate) db: i32,
    pub(crate) home: Vec<u8>,
    pub(crate) holders: Rc<Vec<Vec<u8>>>,
    /// False for a clear's gather, which no read joins (it is not listed in `homes`).
    pub(crate) shared: bool,
    /// Requests are sent (false while queued behind the home's gather in flight).
    pub(crate) started: bool,
    /// Each holder's value and own bounds (index: holder - 1), filled as answers come.
    pub(crate) values: Vec<Option<i64>>,
    pub(crate) floors: Vec<Option<i64>>,
    pub(crate) ceilings: Vec<Option<i64>>,
    pub(crate) requests: Vec<Request<P>>,
    /// Holders this node serves, in a cluster. They are read from a timer, not from inside the
    /// command: Valkey looks keys up in the slot of the command being executed (an
    /// optimisation that a nested `RM_Call` of another slot's key does not escape), so a holder
    /// read from inside `CTR.GET home` would be looked for in the home's slot and read as 0.
    pub(crate) locals: Vec<usize>,
    pub(crate) locals_read: bool,
    /// Holders asked once more after a master said they are not served there (their slot
    /// moved since this node read the slot map); a second "not here" fails the read.
    pub(crate) rerouted: Vec<usize>,
    /// The reads waiting for it (their blocked clients' addresses).
    pub(crate) waiters: Vec<usize>,
    pub(crate) name_bytes: usize,
}

impl<P> Round<P> {
    /// Holder `h`'s value and own bounds, as read.
    pub(crate) fn record(&mut self, h: usize, read: HolderRead) {
        self.values[h] = Some(read.value);
        self.floors[h] = read.floor;
        self.ceilings[h] = read.ceiling;
    }

    pub(crate) fn complete(&self) -> bool {
        self.started && self.locals_read && self.requests.iter().all(|r| r.answered)
    }

    pub(crate) fn silent_nodes(&self) -> impl Iterator<Item = &P> {
        self.requests
            .iter()
            .filter(|r| !r.answered)
            .map(|r| &r.node)
    }
}

/// A home's gathers: the one in flight and the one queued behind it, for one holder list.
pub(crate) struct HomeRounds {
    pub(crate) holders: Rc<Vec<Vec<u8>>>,
    pub(crate) current: usize,
    pub(crate) in_flight: Option<u64>,
    pub(crate) next: Option<u64>,
}

/// A blocked read.
pub(crate) struct Reader<F> {
    /// The blocked client, by address (the runtime's handle).
    pub(crate) bc: usize,
    pub(crate) started_ms: i64,
    pub(crate) readings: Vec<Reading>,
    /// (reading, gather) still awaited.
    pub(crate) waits: Vec<(usize, u64)>,
    /// How it replies once done (the runtime's).
    pub(crate) finish: F,
}

/// What must happen once the table is no longer borrowed.
pub(crate) enum Effect<F, E> {
    /// A queued gather whose turn came: plan and send its requests.
    Start(u64),
    /// A read with every value in: sum and reply.
    Done(Reader<F>),
    Fail(Reader<F>, E),
}

pub(crate) struct Gathers<F, E, P> {
    /// A request id's random start (drawn once per life, see `protocol::exchange`).
    random: fn() -> u64,
    pub(crate) rounds: Exchange<Round<P>>,
    /// Request id -> its gather.
    pub(crate) requests: HashMap<u64, u64>,
    /// (db, home) -> its gathers, one entry per holder list being read.
    pub(crate) homes: HashMap<(i32, Vec<u8>), Vec<HomeRounds>>,
    /// Blocked client address -> its read.
    pub(crate) readers: HashMap<usize, Reader<F>>,
    /// Bytes of holder names the pending gathers hold.
    pub(crate) name_bytes: usize,
    /// The error a settled round fails its reads with.
    errors: PhantomData<fn() -> E>,
}

impl<F, E: Clone, P: Clone + Eq + std::hash::Hash> Gathers<F, E, P> {
    /// No gathers; request ids start from `random()`.
    pub(crate) fn new(random: fn() -> u64) -> Gathers<F, E, P> {
        Gathers {
            random,
            rounds: Exchange::default(),
            requests: HashMap::new(),
            homes: HashMap::new(),
            readers: HashMap::new(),
            name_bytes: 0,
            errors: PhantomData,
        }
    }

    pub(crate) fn home_rounds(&self, db: i32, r: &Reading) -> Option<&HomeRounds> {
        self.homes
            .get(&(db, r.home.clone()))?
            .iter()
            .find(|h| h.current == r.current && *h.holders == *r.holders)
    }

    /// The round a read of `r` may join: one started by this very command (`started_now`), or
    /// the home's queued one; None when it must start one or queue one. Shares the round's
    /// holder names with the reading.
    pub(crate) fn join(&self, db: i32, r: &mut Reading, started_now: &[u64]) -> Option<u64> {
        let home = self.home_rounds(db, r)?;
        // The gather in flight may be joined only when it starts after this read arrived: it
        // was started by this very command, or its turn came and it has not started yet.
        let joinable =
            |id: &u64| started_now.contains(id) || self.rounds.get(*id).is_some_and(|r| !r.started);
        let id = match home.in_flight.filter(joinable) {
            Some(id) => id,
            None => home.next?,
        };
        r.holders = home.holders.clone();
        Some(id)
    }

    /// Lists round `id` as the home's gather in flight, or queued behind it.
    pub(crate) fn list(&mut self, db: i32, r: &mut Reading, id: u64, in_flight: bool) {
        let list = self.homes.entry((db, r.home.clone())).or_default();
        let pos = list
            .iter()
            .position(|h| h.current == r.current && *h.holders == *r.holders);
        let home = match pos {
            Some(p) => &mut list[p],
            None => {
                list.push(HomeRounds {
                    holders: r.holders.clone(),
                    current: r.current,
                    in_flight: None,
                    next: None,
                });
                let last = list.len() - 1;
                &mut list[last]
            }
        };
        if in_flight {
            home.in_flight = Some(id);
        } else {
            home.next = Some(id);
        }
        r.holders = home.holders.clone();
        if let Some(round) = self.rounds.get_mut(id) {
            round.holders = r.holders.clone();
        }
    }

    pub(crate) fn new_round(&mut self, db: i32, r: &Reading, shared: bool) -> u64 {
        let name_bytes = r.holders.iter().map(Vec::len).sum();
        self.name_bytes = self.name_bytes.saturating_add(name_bytes);
        // Resent once launched; no deadline of its own (each read waiting for it has one).
        self.rounds.open_unbounded(
            self.random,
            Round {
                db,
                home: r.home.clone(),
                holders: r.holders.clone(),
                shared,
                started: false,
                values: vec![None; r.holders.len()],
                floors: vec![None; r.holders.len()],
                ceilings: vec![None; r.holders.len()],
                requests: Vec::new(),
                locals: Vec::new(),
                locals_read: false,
                rerouted: Vec::new(),
                waiters: Vec::new(),
                name_bytes,
            },
            Timeout::NEVER,
            i64::MAX,
        )
    }

    /// Gives a started round its requests (ids registered) and local holders.
    pub(crate) fn plan(&mut self, id: u64, plan: Plan<P>) {
        self.add_requests(id, plan.asks);
        let Some(round) = self.rounds.get_mut(id) else {
            return;
        };
        round.locals_read = plan.locals.is_empty();
        round.locals = plan.locals;
        round.started = true;
    }

    /// Gives round `id` requests for `asks` (holders by master), each under an id of its own
    /// and within what a receiver takes.
    pub(crate) fn add_requests(&mut self, id: u64, asks: Vec<(P, Option<SocketAddr>, Vec<usize>)>) {
        let Some(round) = self.rounds.get(id) else {
            return;
        };
        let mut split = Vec::new();
        for (node, addr, asked) in asks {
            let lens: Vec<usize> = asked.iter().map(|&h| round.holders[h].len()).collect();
            for range in gather_msg::split_request(&lens) {
                split.push((node.clone(), addr, asked[range].to_vec()));
            }
        }
        let mut requests = Vec::with_capacity(split.len());
        for (node, addr, asked) in split {
            // The requests' ids come from the rounds' own: one id space per node life.
            let rid = self.rounds.draw_id(self.random);
            self.requests.insert(rid, id);
            requests.push(Request {
                id: rid,
                node,
                addr,
                sent: false,
                asked,
                answered: false,
            });
        }
        if let Some(round) = self.rounds.get_mut(id) {
            round.requests.extend(requests);
        }
    }

    /// Removes a round from every table; the home's queued round, if this one was in flight,
    /// moves up and is to be started.
    pub(crate) fn unlink(&mut self, id: u64, effects: &mut Vec<Effect<F, E>>) -> Option<Round<P>> {
        let round = self.rounds.end(id)?;
        self.name_bytes = self.name_bytes.saturating_sub(round.name_bytes);
        for r in &round.requests {
            self.requests.remove(&r.id);
        }
        if round.shared {
            let key = (round.db, round.home.clone());
            if let Some(list) = self.homes.get_mut(&key) {
                for h in list.iter_mut() {
                    if h.in_flight == Some(id) {
                        h.in_flight = h.next.take();
                        if let Some(next) = h.in_flight {
                            effects.push(Effect::Start(next));
                        }
                    } else if h.next == Some(id) {
                        h.next = None;
                    }
                }
                list.retain(|h| h.in_flight.is_some() || h.next.is_some());
                if list.is_empty() {
                    self.homes.remove(&key);
                }
            }
        }
        Some(round)
    }

    /// A read stops waiting for a round; a round no read waits for any more is dropped.
    pub(crate) fn leave(&mut self, bc: usize, id: u64, effects: &mut Vec<Effect<F, E>>) {
        let Some(round) = self.rounds.get_mut(id) else {
            return;
        };
        round.waiters.retain(|&w| w != bc);
        if round.waiters.is_empty() {
            self.unlink(id, effects);
        }
    }

    pub(crate) fn remove_reader(
        &mut self,
        bc: usize,
        effects: &mut Vec<Effect<F, E>>,
    ) -> Option<Reader<F>> {
        let reader = self.readers.remove(&bc)?;
        for &(_, id) in &reader.waits {
            self.leave(bc, id, effects);
        }
        Some(reader)
    }

    /// Ends round `id`: its reads get its values (and reply once they have every value they
    /// wait for), or all fail with its error. The round, when it ended with its values.
    pub(crate) fn settle(
        &mut self,
        id: u64,
        outcome: Result<(), E>,
        effects: &mut Vec<Effect<F, E>>,
    ) -> Option<Round<P>> {
        let round = self.unlink(id, effects)?;
        if let Err(e) = outcome {
            for &bc in &round.waiters {
                if let Some(reader) = self.remove_reader(bc, effects) {
                    effects.push(Effect::Fail(reader, e.clone()));
                }
            }
            return None;
        }
        for &bc in &round.waiters {
            let Some(reader) = self.readers.get_mut(&bc) else {
                continue;
            };
            for &(i, _) in reader.waits.iter().filter(|&&(_, w)| w == id) {
                let reading = &mut reader.readings[i];
                reading.values.truncate(1);
                reading.floors.truncate(1);
                reading.ceilings.truncate(1);
                reading.ages.truncate(1);
                reading.values.extend_from_slice(&round.values);
                reading.floors.extend_from_slice(&round.floors);
                reading.ceilings.extend_from_slice(&round.ceilings);
                reading.ages.resize(round.values.len() + 1, 0);
            }
            reader.waits.retain(|&(_, w)| w != id);
            if reader.waits.is_empty() {
                if let Some(reader) = self.readers.remove(&bc) {
                    effects.push(Effect::Done(reader));
                }
            }
        }
        Some(round)
    }

    /// The masters that have not answered what `reader` waits for: those of its gathers in
    /// flight, and, for a gather still queued, those of the home's gather in flight ahead.
    pub(crate) fn silent_for(&self, reader: &Reader<F>) -> usize {
        let mut silent: HashSet<&P> = HashSet::new();
        for &(_, id) in &reader.waits {
            let Some(round) = self.rounds.get(id) else {
                continue;
            };
            let ahead = if round.started {
                Some(round)
            } else {
                self.homes
                    .get(&(round.db, round.home.clone()))
                    .and_then(|l| l.iter().find(|h| h.next == Some(id)))
                    .and_then(|h| self.rounds.get(h.in_flight?))
            };
            silent.extend(ahead.into_iter().flat_map(Round::silent_nodes));
        }
        silent.len()
    }
}

/// Where a gather's holders are: the masters to ask (holder indexes by node) and the holders
/// this node serves.
pub(crate) struct Plan<P> {
    pub(crate) asks: Vec<(P, Option<SocketAddr>, Vec<usize>)>,
    pub(crate) locals: Vec<usize>,
}

impl<P> Default for Plan<P> {
    fn default() -> Plan<P> {
        Plan {
            asks: Vec::new(),
            locals: Vec::new(),
        }
    }
}

impl<P: PartialEq> Plan<P> {
    /// Holder `h` is asked of `node` (its read link's address, when the node is new here):
    /// with the other holders that node is asked for.
    pub(crate) fn ask(&mut self, node: P, addr: impl FnOnce() -> Option<SocketAddr>, h: usize) {
        match self.asks.iter_mut().find(|(n, _, _)| *n == node) {
            Some((_, _, asked)) => asked.push(h),
            None => self.asks.push((node, addr(), vec![h])),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The sharing rules of the gather table, without a server (request ids counted from 1).
    use super::*;

    /// The runtime's reply and error types, as plain values.
    type Gathers = super::Gathers<(), &'static str, [u8; 40]>;
    type Effect = super::Effect<(), &'static str>;
    const OVERFLOW: &str = "overflow";

    fn reading(home: &str, holders: usize) -> Reading {
        let names = (0..holders).map(|i| format!("{{ctr.{i}.0}}{home}").into_bytes());
        Reading {
            home: home.as_bytes().to_vec(),
            holders: Rc::new(names.collect()),
            current: holders,
            values: vec![Some(1)],
            ages: vec![0],
            floors: vec![None],
            ceilings: vec![None],
        }
    }

    /// Places a read as `wait_for_gathers` does (with a plan that asks one master for every
    /// holder when it must start a gather); returns the round it waits for and whether that
    /// round started now.
    fn arrive(g: &mut Gathers, bc: usize, readings: Vec<Reading>) -> Vec<(u64, bool)> {
        let mut started = Vec::new();
        let mut waits = Vec::new();
        let mut readings = readings;
        let mut placed = Vec::new();
        for (i, r) in readings.iter_mut().enumerate() {
            let start = g.home_rounds(0, r).is_none_or(|h| h.in_flight.is_none());
            let id = match g.join(0, r, &started) {
                Some(id) => id,
                None if start => {
                    let id = g.new_round(0, r, true);
                    let plan = Plan {
                        asks: vec![([b'n'; 40], None, (0..r.holders.len()).collect())],
                        locals: Vec::new(),
                    };
                    g.plan(id, plan);
                    started.push(id);
                    g.list(0, r, id, true);
                    id
                }
                None => {
                    let id = g.new_round(0, r, true);
                    g.list(0, r, id, false);
                    id
                }
            };
            g.rounds.get_mut(id).unwrap().waiters.push(bc);
            waits.push((i, id));
            placed.push((id, started.contains(&id)));
        }
        let reader = Reader {
            bc,
            started_ms: 0,
            readings,
            waits,
            finish: (),
        };
        g.readers.insert(bc, reader);
        placed
    }

    /// Gathers whose ids start at 1 (no server to draw a random start from).
    fn gathers() -> Gathers {
        Gathers::new(|| 1)
    }

    fn answer_all(g: &mut Gathers, id: u64, value: i64) -> Vec<Effect> {
        let round = g.rounds.get_mut(id).unwrap();
        round.values.iter_mut().for_each(|v| *v = Some(value));
        round.requests.iter_mut().for_each(|r| r.answered = true);
        assert!(round.complete());
        let mut effects = Vec::new();
        g.settle(id, Ok(()), &mut effects);
        effects
    }

    fn done(effects: &[Effect]) -> Vec<usize> {
        let mut bcs: Vec<usize> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Done(r) => Some(r.bc),
                _ => None,
            })
            .collect();
        bcs.sort_unstable();
        bcs
    }

    fn starts(effects: &[Effect]) -> Vec<u64> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Start(id) => Some(*id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn reads_arriving_during_a_gather_share_the_next_one_and_never_that_one() {
        let mut g = gathers();
        let first = arrive(&mut g, 8, vec![reading("h", 1000)])[0];
        assert!(first.1, "nothing in flight: the first read starts a gather");
        let second = arrive(&mut g, 16, vec![reading("h", 1000)])[0];
        let third = arrive(&mut g, 24, vec![reading("h", 1000)])[0];
        assert!(!second.1 && second.0 != first.0, "not the gather in flight");
        assert_eq!(second, third, "one queued gather for every later read");
        // The names are held once per gather, shared with the reads.
        let holders = &g.rounds.get(second.0).unwrap().holders;
        assert!(Rc::ptr_eq(holders, &g.readers[&24].readings[0].holders));
        assert_eq!(g.rounds.len(), 2);
        // The first gather answers: its read is done, the queued one starts.
        let effects = answer_all(&mut g, first.0, 5);
        assert_eq!(done(&effects), vec![8]);
        assert_eq!(starts(&effects), vec![second.0]);
        // A read arriving now queues behind the promoted gather (once it has started).
        g.plan(second.0, Plan::default());
        let fourth = arrive(&mut g, 32, vec![reading("h", 1000)])[0];
        assert!(fourth.0 != second.0);
        let effects = answer_all(&mut g, second.0, 7);
        assert_eq!(done(&effects), vec![16, 24]);
        let Some(Effect::Done(r)) = effects.iter().find(|e| matches!(e, Effect::Done(_))) else {
            unreachable!()
        };
        assert_eq!(r.readings[0].values.len(), 1001);
        assert_eq!(r.readings[0].total(), Some(1 + 7 * 1000));
        assert_eq!(starts(&effects), vec![fourth.0]);
        g.plan(fourth.0, Plan::default());
        assert_eq!(done(&answer_all(&mut g, fourth.0, 1)), vec![32]);
        assert!(g.rounds.is_empty() && g.homes.is_empty() && g.requests.is_empty());
        assert_eq!(g.name_bytes, 0);
    }

    #[test]
    fn a_read_that_leaves_drops_a_gather_nobody_waits_for_and_errors_fail_every_waiter() {
        let mut g = gathers();
        let a = arrive(&mut g, 8, vec![reading("a", 3)])[0];
        let queued = arrive(&mut g, 16, vec![reading("a", 3), reading("b", 2)]);
        assert_eq!(g.readers.len(), 2);
        // The first read times out: its gather is dropped, the queued one moves up.
        let mut effects = Vec::new();
        g.remove_reader(8, &mut effects);
        assert!(!g.rounds.contains(a.0));
        assert_eq!(starts(&effects), vec![queued[0].0]);
        assert!(g.requests.keys().all(|r| g.rounds.contains(g.requests[r])));
        // An error in one of its gathers fails the read, which leaves the other one.
        let mut effects = Vec::new();
        g.settle(queued[1].0, Err(OVERFLOW), &mut effects);
        assert!(matches!(effects.as_slice(), [Effect::Fail(r, _)] if r.bc == 16));
        assert!(g.rounds.is_empty() && g.homes.is_empty() && g.readers.is_empty());
        assert_eq!(g.name_bytes, 0);
    }

    #[test]
    fn an_mget_of_one_home_twice_waits_for_one_gather() {
        let mut g = gathers();
        let placed = arrive(&mut g, 8, vec![reading("h", 4), reading("h", 4)]);
        assert_eq!(placed[0], placed[1]);
        assert!(placed[0].1);
        assert_eq!(done(&answer_all(&mut g, placed[0].0, 2)), vec![8]);
    }

    #[test]
    fn another_holder_list_of_the_same_home_gathers_apart() {
        let mut g = gathers();
        let four = arrive(&mut g, 8, vec![reading("h", 4)])[0];
        let five = arrive(&mut g, 16, vec![reading("h", 5)])[0];
        assert!(four.1 && five.1 && four.0 != five.0);
    }
}
