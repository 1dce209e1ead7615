//! One step of a transfer or a fold as a key's master took it, the pure part: what the master
//! decided (its time, the random ids it drew, the message it applied), so that a replica and
//! the AOF replay the step through the same function ([`Counter::apply_step`]) and reach the
//! master's state, without the whole state travelling (`CTR.STEP key <step>`, encoded by
//! `crate::persist::step_msg`). The key's name is the step's subject: the giver of a move or a
//! seal, the receiver of a credit, the giver an answer is for.

use super::listing::ListClock;
use super::transfer::{
    Ack, AckEffect, Credit, CreditOutcome, Giver, Outgoing, TransferError, Units, MAX_NAME,
};
use super::{Counter, CounterError};

/// A step, with every decision its master made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// [`Counter::start_transfer`]: a budget move (or any debit) toward `receiver`.
    Move {
        receiver: Vec<u8>,
        units: Units,
        now_ms: i64,
        new_id: u64,
    },
    /// [`Counter::shrink_listed`] to `target` holders, with the fold ids the master drew (one
    /// per holder that starts leaving, in holder order) and the clock it dated the change with
    /// (None in a step from a version that did not: the listing is forgotten, not guessed).
    Shrink {
        target: usize,
        fold_ids: Vec<u64>,
        clock: Option<ListClock>,
    },
    /// [`Counter::seal_into`] `home` for the fold `fold_id`.
    Seal {
        home: Vec<u8>,
        fold_id: u64,
        now_ms: i64,
        new_id: u64,
    },
    /// [`Counter::retarget_moves_to`] `home`.
    RetargetMoves { home: Vec<u8> },
    /// [`Counter::apply_credit`] (its receiver is the key).
    Credit(Credit),
    /// [`Counter::apply_answer`] (its giver is the key).
    Answer(Ack),
}

/// What a step did (the result of the function it ran).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    Moved(Outgoing),
    /// The holders that leave.
    Shrunk(Vec<Vec<u8>>),
    Sealed(Option<Outgoing>),
    Retargeted(bool),
    Credited(CreditOutcome),
    Answered(AckEffect),
}

fn invalid(why: &'static str) -> TransferError {
    CounterError::InvalidOperation(why).into()
}

impl Counter {
    /// How many holders a shrink to `target` starts folding (the fold ids it draws).
    pub fn folds_needed(&self, target: usize) -> usize {
        let Some(spread) = self.spread() else {
            return 0;
        };
        let keep = target.saturating_sub(1).min(spread.holders.len());
        let leaving = self.leaving();
        spread.holders[keep..]
            .iter()
            .filter(|h| !leaving.iter().any(|l| &l.name == *h))
            .count()
    }

    /// Applies `step` to the counter at the key `key`: the master's write, and its replay on
    /// replicas and from the AOF. Err changes nothing (as each step's function), also for a
    /// step that does not fit this key (a credit for another receiver, fold ids that do not
    /// match the shrink).
    pub fn apply_step(&mut self, key: &[u8], step: &Step) -> Result<StepOutcome, TransferError> {
        if key.is_empty() || key.len() > MAX_NAME {
            return Err(invalid("step key name length"));
        }
        if self.window().is_some() {
            // A windowed counter is never spread: no master sends it a step.
            return Err(invalid("a step on a windowed counter"));
        }
        let giver = |new_id| Giver { name: key, new_id };
        Ok(match step {
            Step::Move {
                receiver,
                units,
                now_ms,
                new_id,
            } => StepOutcome::Moved(self.start_transfer(
                receiver,
                *units,
                *now_ms,
                giver(*new_id),
            )?),
            Step::Shrink {
                target,
                fold_ids,
                clock,
            } => {
                if fold_ids.len() != self.folds_needed(*target) {
                    return Err(invalid("fold ids that do not match the shrink"));
                }
                let mut ids = fold_ids.iter().copied();
                let gone = self.shrink_listed(*target, &mut || ids.next().unwrap_or(0), *clock)?;
                StepOutcome::Shrunk(gone)
            }
            Step::Seal {
                home,
                fold_id,
                now_ms,
                new_id,
            } => StepOutcome::Sealed(self.seal_into(home, *fold_id, *now_ms, giver(*new_id))?),
            Step::RetargetMoves { home } => StepOutcome::Retargeted(self.retarget_moves_to(home)),
            Step::Credit(c) if c.receiver == key => StepOutcome::Credited(self.apply_credit(c)?),
            Step::Answer(a) if a.giver == key => StepOutcome::Answered(self.apply_answer(a)?),
            Step::Credit(_) | Step::Answer(_) => {
                return Err(invalid("a step for another key"));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::spread::holder_name;
    use crate::counter::Spread;
    use crate::persist::ctr_format::encode;

    const HOME: &[u8] = b"k";

    fn spread_home(n: usize) -> Counter {
        let mut c = Counter::plain(10);
        let holders = (1..n).map(|i| holder_name(HOME, 6, i, 0)).collect();
        c.set_spread(Spread {
            id: 6,
            holders,
            floor: None,
            ceiling: None,
        })
        .unwrap();
        c
    }

    #[test]
    fn a_replayed_fold_reaches_the_masters_state_step_by_step() {
        let (mut master, mut replica) = (spread_home(4), spread_home(4));
        let shrink = Step::Shrink {
            target: 2,
            fold_ids: vec![41, 42],
            clock: Some(ListClock {
                now_ms: 5_000,
                window_ms: 60_000,
            }),
        };
        let gone = master.apply_step(HOME, &shrink).unwrap();
        assert_eq!(replica.apply_step(HOME, &shrink).unwrap(), gone);
        assert_eq!(encode(&master), encode(&replica));
        // Each holder seals and credits the home; the credits replay on the home's replica.
        for (i, fold_id) in [(2, 41), (3, 42)] {
            let name = holder_name(HOME, 6, i, 0);
            let mut holder = Counter::plain(i as i64);
            let seal = Step::Seal {
                home: HOME.to_vec(),
                fold_id,
                now_ms: 1_000,
                new_id: 77 + i as u64,
            };
            let mut holder_replica = holder.clone();
            holder.apply_step(&name, &seal).unwrap();
            holder_replica.apply_step(&name, &seal).unwrap();
            assert_eq!(encode(&holder), encode(&holder_replica));
            let (_, credits) = holder.messages_due(&name);
            let credit = Step::Credit(credits[0].clone());
            let out = master.apply_step(HOME, &credit).unwrap();
            assert_eq!(out, StepOutcome::Credited(CreditOutcome::Applied));
            assert_eq!(replica.apply_step(HOME, &credit).unwrap(), out);
            assert_eq!(encode(&master), encode(&replica));
        }
        assert_eq!(master.value(), 15);
        assert!(master.leaving().is_empty());
    }

    #[test]
    fn a_step_that_does_not_fit_changes_nothing() {
        let mut c = spread_home(4);
        let before = encode(&c);
        let bad = [
            Step::Shrink {
                target: 2,
                fold_ids: vec![41],
                clock: None,
            },
            Step::Shrink {
                target: 2,
                fold_ids: vec![41, 42, 43],
                clock: None,
            },
            Step::Shrink {
                target: 2,
                fold_ids: vec![41, 1],
                clock: None,
            },
            Step::Credit(Credit {
                giver: b"g".to_vec(),
                from: b"g".to_vec(),
                receiver: b"other".to_vec(),
                giver_id: 5,
                seq: 1,
                dv: 1,
                df: 0,
                dc: 0,
                fold_id: 0,
            }),
            Step::Answer(Ack {
                giver: b"other".to_vec(),
                receiver: HOME.to_vec(),
                seq: 1,
                refused: false,
            }),
            Step::Move {
                receiver: Vec::new(),
                units: Units::value_and_floor(1, 0),
                now_ms: 1,
                new_id: 5,
            },
            Step::Move {
                receiver: b"r".to_vec(),
                units: Units::value_and_floor(i64::MIN, 0),
                now_ms: 1,
                new_id: 5,
            },
        ];
        for step in &bad {
            assert!(c.apply_step(HOME, step).is_err(), "{step:?}");
            assert_eq!(encode(&c), before, "{step:?}");
        }
        assert!(c.apply_step(b"", &bad[0]).is_err());
    }
}
