//! A deterministic simulator of the bounded PN-counter across deployments (the house style of
//! `crate::counter::simulator`): seeded random schedules over 3 to 5 deployments, each holding
//! its own copy of one counter, driven through the pure core as the Redis glue and `pnc-sync`
//! drive it:
//!
//! - increments, `PNC.DECRFLOOR` (most of them at one deployment: skewed demand), tokened
//!   decrements retried later, floor raises and lowerings, the floor switched off and on;
//! - states shipped between deployments as messages that are lost, duplicated, reordered and
//!   held back by partitions (links cut, healed later);
//! - rights moves by the demand rule ([`super::demand`]) among the deployments one side of a
//!   partition reaches, each gift made by its giver and shipped like any state;
//! - restarts (what was waiting to be sent is lost) and a deployment moving to a fresh replica
//!   id (what a failover does: the old id's rights are stranded, never reused).
//!
//! After every step it checks, on the union of every deployment's state (each id's own writer
//! holds its latest totals): the value is at or above the floor, and every id's rights are
//! non-negative. Every acknowledged grant and increment is in an oracle: after healing (no more
//! faults, full exchanges), every deployment holds the same state, whose value is exactly the
//! increments minus the grants (a retried token counted once) and whose floor is every move.
//!
//! A failing schedule panics with its seed and steps; `CTR_SIM_SEED=<seed>` replays it,
//! `CTR_SIM_SCHEDULES` sets how many run (10,000 by default).

use std::fmt::Write as _;

use super::demand::{self, Holder};
use super::tests::Rng;
use super::{Decrement, LedgerEntry, PnCounter, ReplicaId};

const STEPS: usize = 120;

/// The core's test PRNG, with the two draws the schedules use.
trait Draws {
    fn pick(&mut self, n: usize) -> usize;
    fn percent(&mut self, p: u64) -> bool;
}

impl Draws for Rng {
    fn pick(&mut self, n: usize) -> usize {
        self.below(n.max(1) as u64) as usize
    }
    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

/// How a schedule is shaped.
#[derive(Clone, Copy)]
pub struct Shape {
    pub deployments: usize,
    /// Percent of the decrements that go to deployment 0.
    pub skew: u64,
    /// Whether links are cut and messages lost, duplicated, reordered.
    pub faults: bool,
    /// Whether rights move by the demand rule.
    pub rebalance: bool,
    /// Percent of steps that are decrements (the rest: increments, syncs, faults...).
    pub decrement_share: u64,
}

struct Deployment {
    id: ReplicaId,
    state: PnCounter,
    /// Units decremented or refused since the last rebalance (the demand the rule reads).
    demand: u64,
    /// Tokens this deployment used, for retries: (token, amount).
    tokens: Vec<(Vec<u8>, i64)>,
    renames: u32,
}

struct Message {
    from: usize,
    to: usize,
    state: PnCounter,
}

/// What a schedule counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub decrements: u64,
    pub refused: u64,
    /// Refusals while the whole system's value minus floor covered the amount.
    pub false_refusals: u64,
}

struct World {
    rng: Rng,
    shape: Shape,
    nodes: Vec<Deployment>,
    /// Per ordered pair: whether the link is cut.
    cut: Vec<bool>,
    in_flight: Vec<Message>,
    incremented: i128,
    granted: i128,
    floor_moved: i128,
    tally: Tally,
    log: String,
}

fn replica(name: &str) -> ReplicaId {
    // Names built here are always valid ids.
    ReplicaId::parse(name.as_bytes()).unwrap_or_else(|_| ReplicaId::random([0; 8]))
}

impl World {
    fn new(seed: u64, shape: Shape) -> World {
        let nodes = (0..shape.deployments)
            .map(|i| Deployment {
                id: replica(&format!("r{i}")),
                state: PnCounter::new(),
                demand: 0,
                tokens: Vec::new(),
                renames: 0,
            })
            .collect();
        World {
            rng: Rng::new(seed.wrapping_add(1)),
            shape,
            nodes,
            cut: vec![false; shape.deployments * shape.deployments],
            in_flight: Vec::new(),
            incremented: 0,
            granted: 0,
            floor_moved: 0,
            tally: Tally::default(),
            log: String::new(),
        }
    }

    fn note(&mut self, line: String) {
        let _ = writeln!(self.log, "{line}");
    }

    /// Every deployment's state merged: each id's latest totals, the whole system's truth.
    fn union(&self) -> PnCounter {
        self.nodes.iter().fold(PnCounter::new(), |acc, n| {
            acc.merged(&n.state.shipped()).unwrap_or(acc)
        })
    }

    fn linked(&self, a: usize, b: usize) -> bool {
        !self.cut[a * self.shape.deployments + b]
    }

    fn send(&mut self, from: usize, to: usize) {
        if from != to {
            let state = self.nodes[from].state.shipped();
            self.in_flight.push(Message { from, to, state });
        }
    }

    fn increment(&mut self, at: usize) {
        let amount = 1 + self.rng.pick(20) as i64;
        let node = &mut self.nodes[at];
        if node.state.add(&node.id, amount).is_ok() {
            self.incremented += i128::from(amount);
            self.note(format!("r{at} +{amount}"));
        }
    }

    /// The deployment a decrement lands on: `skew` percent at deployment 0.
    fn demand_site(&mut self) -> usize {
        if self.rng.percent(self.shape.skew) {
            0
        } else {
            self.rng.pick(self.shape.deployments)
        }
    }

    fn decrement(&mut self, at: usize) {
        let amount = 1 + self.rng.pick(5) as i64;
        let token = format!("t{}", self.rng.next()).into_bytes();
        let node = &mut self.nodes[at];
        let decided = node.state.decrement_within_rights(&node.id, amount);
        node.demand += amount as u64;
        node.tokens.push((token.clone(), amount));
        self.tally.decrements += 1;
        let reply = match decided {
            Ok(Decrement::Granted(value)) => {
                self.granted += i128::from(amount);
                Some(value)
            }
            _ => {
                self.tally.refused += 1;
                let truth = self.union();
                let headroom = i128::from(truth.value()) - i128::from(truth.floor_level());
                if headroom >= i128::from(amount) {
                    self.tally.false_refusals += 1;
                }
                None
            }
        };
        let node = &mut self.nodes[at];
        node.state.record_token(LedgerEntry {
            token: token.into(),
            amount,
            reply,
        });
        self.note(format!("r{at} decrfloor {amount} -> {reply:?}"));
    }

    /// A retried token: replays its first outcome, changes nothing.
    fn retry(&mut self, at: usize) -> Result<(), String> {
        let node = &self.nodes[at];
        if node.tokens.is_empty() {
            return Ok(());
        }
        let (token, amount) = node.tokens[self.rng.pick(node.tokens.len())].clone();
        let before = node.state.clone();
        match node.state.recorded_token(&token) {
            Some(e) if e.amount == amount => {
                self.note(format!("r{at} retry -> {:?}", e.reply));
                Ok(())
            }
            // Forgotten (past the ledger's capacity): a schedule never gets there.
            _ => Err(format!("r{at} lost a token it recorded: {before:?}")),
        }
    }

    fn move_floor(&mut self, at: usize) {
        let node = &mut self.nodes[at];
        let level = node.state.floor_level();
        let step = self.rng.pick(21) as i64 - 10;
        let target = if self.rng.percent(10) {
            None
        } else {
            Some(level + step)
        };
        if let Ok(true) = node.state.set_floor(&node.id, target) {
            if let Some(t) = target {
                self.floor_moved += i128::from(t - level);
            }
            self.note(format!("r{at} floor {target:?} (level was {level})"));
        }
    }

    /// The deployments `at` reaches (its side of the partition).
    fn reachable(&self, at: usize) -> Vec<usize> {
        (0..self.shape.deployments)
            .filter(|j| *j == at || (self.linked(at, *j) && self.linked(*j, at)))
            .collect()
    }

    /// One `pnc-sync` round among what `at` reaches: rights move by the demand rule, each gift
    /// made by its giver, then its state shipped to the receiver.
    fn rebalance(&mut self, at: usize) {
        let group = self.reachable(at);
        let holders: Vec<Holder> = group
            .iter()
            .map(|i| {
                let n = &self.nodes[*i];
                let rights = n.state.rights(&n.id);
                Holder {
                    rights: i64::try_from(rights).unwrap_or(if rights > 0 { i64::MAX } else { 0 }),
                    demand: n.demand,
                }
            })
            .collect();
        for gift in demand::plan(&holders) {
            let (from, to) = (group[gift.from], group[gift.to]);
            let to_id = self.nodes[to].id.clone();
            let giver = &mut self.nodes[from];
            if let Ok(Some(_)) = giver.state.give(&giver.id.clone(), &to_id, gift.amount) {
                self.note(format!("r{from} gives {} to r{to}", gift.amount));
                self.send(from, to);
            }
        }
        for i in group {
            self.nodes[i].demand = 0;
        }
    }

    fn deliver(&mut self) {
        if self.in_flight.is_empty() {
            return;
        }
        let pick = self.rng.pick(self.in_flight.len());
        let (from, to) = (self.in_flight[pick].from, self.in_flight[pick].to);
        if self.shape.faults && !self.linked(from, to) {
            return; // held back by the partition
        }
        let duplicate = self.shape.faults && self.rng.percent(15);
        let message = if duplicate {
            Message {
                from,
                to,
                state: self.in_flight[pick].state.clone(),
            }
        } else {
            self.in_flight.swap_remove(pick)
        };
        let node = &mut self.nodes[to];
        if let Ok(merged) = node.state.merged(&message.state) {
            node.state = merged;
        }
    }

    fn fault(&mut self) {
        let d = self.shape.deployments;
        match self.rng.pick(5) {
            0 => {
                let (a, b) = (self.rng.pick(d), self.rng.pick(d));
                self.cut[a * d + b] = true;
                self.cut[b * d + a] = true;
                self.note(format!("cut r{a} - r{b}"));
            }
            1 => {
                self.cut.iter_mut().for_each(|c| *c = false);
                self.note("heal".into());
            }
            2 if !self.in_flight.is_empty() => {
                let lost = self.rng.pick(self.in_flight.len());
                self.in_flight.swap_remove(lost);
            }
            3 => {
                let at = self.rng.pick(d);
                self.in_flight.retain(|m| m.from != at);
                self.note(format!("r{at} restarts (its unsent states lost)"));
            }
            _ => {
                let at = self.rng.pick(d);
                let node = &mut self.nodes[at];
                node.renames += 1;
                node.id = replica(&format!("r{at}.{}", node.renames));
                let id = node.id.clone();
                self.note(format!("r{at} moves to replica id {id}"));
            }
        }
    }

    /// One random step; true when it spent rights somewhere (what the safety check follows).
    fn step(&mut self) -> bool {
        let d = self.shape.deployments;
        let roll = self.rng.pick(100) as u64;
        let share = self.shape.decrement_share;
        if roll < share {
            let at = self.demand_site();
            self.decrement(at);
        } else if roll < share + 12 {
            let at = self.rng.pick(d);
            self.increment(at);
            return false;
        } else if roll < share + 14 {
            let at = self.rng.pick(d);
            self.move_floor(at);
        } else if roll < share + 26 {
            let (from, to) = (self.rng.pick(d), self.rng.pick(d));
            self.send(from, to);
            return false;
        } else if roll < share + 32 && self.shape.rebalance {
            let at = self.rng.pick(d);
            self.rebalance(at);
        } else if roll < share + 38 && self.shape.faults {
            self.fault();
        } else {
            // A merge only ever raises what an id is known to have written.
            self.deliver();
            return false;
        }
        true
    }

    fn check_safety(&self) -> Result<(), String> {
        let truth = self.union();
        if truth.value() < truth.floor_level() {
            return Err(format!(
                "value {} below the floor {}",
                truth.value(),
                truth.floor_level()
            ));
        }
        for n in &self.nodes {
            for id in ids(&truth).chain(std::iter::once(n.id.clone())) {
                if truth.rights(&id) < 0 {
                    return Err(format!("{id} holds {} rights", truth.rights(&id)));
                }
            }
        }
        Ok(())
    }

    /// Heals everything, delivers what is in flight, then every deployment sends its state to
    /// every other: all must then hold one state, the oracle's.
    fn heal_and_check(&mut self) -> Result<(), String> {
        self.cut.iter_mut().for_each(|c| *c = false);
        self.shape.faults = false;
        while !self.in_flight.is_empty() {
            self.deliver();
        }
        for from in 0..self.shape.deployments {
            for to in 0..self.shape.deployments {
                self.send(from, to);
            }
        }
        while !self.in_flight.is_empty() {
            self.deliver();
        }
        for from in 0..self.shape.deployments {
            for to in 0..self.shape.deployments {
                self.send(from, to);
            }
        }
        while !self.in_flight.is_empty() {
            self.deliver();
        }
        let first = &self.nodes[0].state;
        if let Some(n) = self.nodes.iter().find(|n| !n.state.same_state(first)) {
            return Err(format!("{} did not converge", n.id));
        }
        let expected = self.incremented - self.granted;
        if i128::from(first.value()) != expected {
            return Err(format!(
                "converged value {} but the acknowledged writes make {expected}",
                first.value()
            ));
        }
        if i128::from(first.floor_level()) != self.floor_moved {
            return Err(format!(
                "converged floor {} but the moves make {}",
                first.floor_level(),
                self.floor_moved
            ));
        }
        Ok(())
    }
}

fn ids(c: &PnCounter) -> impl Iterator<Item = ReplicaId> + '_ {
    let bound = c.bound();
    c.entries()
        .iter()
        .map(|e| e.id.clone())
        .chain(bound.into_iter().flat_map(|b| {
            b.transfers
                .iter()
                .flat_map(|t| [t.from.clone(), t.to.clone()])
                .chain(b.moves.iter().map(|m| m.id.clone()))
        }))
}

/// Runs one schedule; on failure, the report (seed, steps, what broke).
pub fn run(seed: u64, shape: Shape, steps: usize) -> Result<Tally, String> {
    let mut world = World::new(seed, shape);
    for n in 0..steps {
        let spent = world.step();
        if world.rng.percent(3) {
            let at = world.rng.pick(shape.deployments);
            world.retry(at).map_err(|e| report(seed, &world, n, &e))?;
        }
        if spent {
            world
                .check_safety()
                .map_err(|e| report(seed, &world, n, &e))?;
        }
    }
    world
        .heal_and_check()
        .map_err(|e| report(seed, &world, steps, &e))?;
    Ok(world.tally)
}

fn report(seed: u64, world: &World, step: usize, what: &str) -> String {
    format!(
        "bounded-counter schedule {seed} broke at step {step}: {what}\nsteps:\n{}",
        world.log
    )
}

/// The random shape of schedule `seed`.
fn shape_of(seed: u64) -> Shape {
    let mut rng = Rng::new(seed ^ 0x5EED);
    Shape {
        deployments: 3 + rng.pick(3),
        skew: 60,
        faults: true,
        rebalance: rng.percent(70),
        decrement_share: 30,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_number(name: &str) -> Option<u64> {
        std::env::var(name).ok()?.parse().ok()
    }

    #[test]
    fn every_bounded_counter_schedule_keeps_the_floor_and_converges() {
        if let Some(seed) = env_number("CTR_SIM_SEED") {
            if let Err(report) = run(seed, shape_of(seed), STEPS) {
                panic!("{report}");
            }
            return;
        }
        let schedules = env_number("CTR_SIM_SCHEDULES").unwrap_or(10_000);
        for seed in 0..schedules {
            if let Err(report) = run(seed, shape_of(seed), STEPS) {
                panic!(
                    "{report}\nreplay: CTR_SIM_SEED={seed} cargo test --release --lib pncounter::simulator"
                );
            }
        }
    }

    /// False refusals (a local refusal while the whole system could cover it) under skewed
    /// demand (80% at one of three deployments), with and without partitions, with and
    /// without the demand rule: the figures of docs/PNC.md and docs/BENCHMARKS.md
    /// (`cargo test --release --lib false_refusal_figures -- --nocapture`).
    #[test]
    fn false_refusal_figures() {
        let mut rows = Vec::new();
        for faults in [false, true] {
            for rebalance in [false, true] {
                let shape = Shape {
                    deployments: 3,
                    skew: 80,
                    faults,
                    rebalance,
                    decrement_share: 40,
                };
                let mut total = Tally::default();
                for seed in 0..500 {
                    let t = run(seed, shape, 300).unwrap_or_else(|r| panic!("{r}"));
                    total.decrements += t.decrements;
                    total.refused += t.refused;
                    total.false_refusals += t.false_refusals;
                }
                println!(
                    "partitions {faults:5} demand rule {rebalance:5}: {} decrements, {} refused, {} false refusals ({:.1}% of decrements)",
                    total.decrements,
                    total.refused,
                    total.false_refusals,
                    100.0 * total.false_refusals as f64 / total.decrements.max(1) as f64
                );
                rows.push(total);
            }
        }
        // The rule moves rights to where the demand is: fewer false refusals, partitions or not.
        assert!(rows[1].false_refusals < rows[0].false_refusals, "{rows:?}");
        assert!(rows[3].false_refusals < rows[2].false_refusals, "{rows:?}");
    }
}
