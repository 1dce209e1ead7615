//! Delta states: what changed in a PN-counter since an earlier state of the same deployment.
//!
//! Every part of the state only grows (per id P and N, per id the floor moves, per pair the
//! transfers; the floor switch is a register ordered by (epoch, setter, on)). A peer that has
//! merged an earlier state `base` needs only the parts of `current` that differ from `base`:
//! for every part left out, `current` equals `base`, which the peer already dominates, so
//! merging the delta gives exactly what merging `current` would (the unit tests check it on
//! random histories).

use super::{Bound, PnCounter, ReplicaId};

/// The parts of `current` that differ from `base` and that ids `own` accepts wrote, as a state
/// of their own; None when that partial state is not a valid counter (its value alone out of
/// the i64 range: ship `current`).
///
/// `own` is this deployment's ids: a part another deployment wrote reached this one from that
/// deployment, which ships it to the others itself; forwarding it again from every deployment
/// would send each change once per deployment (`pnc-sync` ships whole states after a partition,
/// which carries anything a deployment missed from one that is gone).
pub fn delta(
    current: &PnCounter,
    base: &PnCounter,
    own: impl Fn(&ReplicaId) -> bool,
) -> Option<PnCounter> {
    let entries = current
        .entries()
        .iter()
        .filter(|e| own(&e.id) && base.slot(&e.id) != Some(e))
        .cloned()
        .collect();
    let empty = Bound::default();
    let (now, then) = (
        current.bound().unwrap_or(&empty),
        base.bound().unwrap_or(&empty),
    );
    let bound = Bound {
        switch: now
            .switch
            .clone()
            .filter(|s| own(&s.setter) && then.switch.as_ref() != Some(s)),
        moves: changed(&now.moves, &then.moves, |m| own(&m.id)),
        transfers: changed(&now.transfers, &then.transfers, |t| own(&t.from)),
        ledger: Vec::new(),
    };
    PnCounter::from_parts(entries, None, Some(bound)).ok()
}

/// The items of `now` that `then` does not hold as they are and that `keep` accepts.
fn changed<T: Clone + PartialEq>(now: &[T], then: &[T], keep: impl Fn(&T) -> bool) -> Vec<T> {
    now.iter()
        .filter(|x| keep(x) && !then.contains(x))
        .cloned()
        .collect()
}

/// True when `current` holds at least everything `base` holds (a later state of the same
/// history); false after a deletion, a flush or a restore of an older value.
pub fn dominates(current: &PnCounter, base: &PnCounter) -> bool {
    current
        .merged(base)
        .is_ok_and(|joined| joined.same_state(current))
}

/// A version a deployment hands out for one key: `epoch.incarnation.seq`. The epoch names the
/// table of snapshots (a new one after a restart or when the table was emptied), the
/// incarnation the key's history (a new one when the key no longer dominates its last
/// snapshot: deleted, flushed, restored older), the seq one snapshot in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    pub epoch: u64,
    pub incarnation: u64,
    pub seq: u64,
}

impl Version {
    pub fn render(&self) -> String {
        format!("{:x}.{:x}.{}", self.epoch, self.incarnation, self.seq)
    }

    /// None for anything else (`0` included: the caller asks for the full state).
    pub fn parse(text: &[u8]) -> Option<Version> {
        let text = std::str::from_utf8(text).ok()?;
        let mut parts = text.split('.');
        let epoch = u64::from_str_radix(parts.next()?, 16).ok()?;
        let incarnation = u64::from_str_radix(parts.next()?, 16).ok()?;
        let seq = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some(Version {
            epoch,
            incarnation,
            seq,
        })
    }
}

/// Snapshots a key keeps (the versions a peer may still ask a delta from).
pub const SNAPSHOTS_PER_KEY: usize = 4;

/// One key's recent states, as handed out with their versions.
#[derive(Debug, Default)]
pub struct History {
    incarnation: u64,
    next_seq: u64,
    snapshots: Vec<(u64, PnCounter)>,
}

/// What a `PNC.STATE key SINCE v` answers: the version of `current`, and the delta from `v`
/// (None: the full state, because `v` is unknown, from another epoch or incarnation, or
/// forgotten).
pub struct Answer {
    pub version: Version,
    pub delta: Option<PnCounter>,
    /// Bytes the history grew by (for the table's bound).
    pub grew: usize,
}

impl History {
    /// Records `current` (a shipped state: no home, no ledger) as a version if it changed,
    /// and answers `since`. `fresh` gives a new incarnation when the history is lost.
    pub fn answer(
        &mut self,
        epoch: u64,
        current: &PnCounter,
        since: Option<Version>,
        fresh: impl FnOnce() -> u64,
        size: impl Fn(&PnCounter) -> usize,
        own: impl Fn(&ReplicaId) -> bool,
    ) -> Answer {
        let last = self.snapshots.last().map(|(_, s)| s);
        if last.is_some_and(|s| !dominates(current, s)) || self.next_seq == 0 {
            self.incarnation = fresh();
            self.snapshots.clear();
        }
        let mut grew = 0;
        let unchanged = self
            .snapshots
            .last()
            .is_some_and(|(_, s)| s.same_state(current));
        if !unchanged {
            self.next_seq += 1;
            if self.snapshots.len() >= SNAPSHOTS_PER_KEY {
                self.snapshots.remove(0);
            }
            grew = size(current);
            self.snapshots.push((self.next_seq, current.clone()));
        }
        let seq = self.snapshots.last().map_or(0, |(seq, _)| *seq);
        let delta = since
            .filter(|v| v.epoch == epoch && v.incarnation == self.incarnation)
            .and_then(|v| self.snapshots.iter().find(|(seq, _)| *seq == v.seq))
            .and_then(|(_, base)| delta(current, base, own));
        Answer {
            version: Version {
                epoch,
                incarnation: self.incarnation,
                seq,
            },
            delta,
            grew,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pncounter::tests::Rng;

    fn id(i: u64) -> ReplicaId {
        ReplicaId::parse(format!("r{i}").as_bytes()).unwrap()
    }

    /// A few random writes by random ids (increments, decrements, floor moves, gifts).
    fn write(c: &mut PnCounter, rng: &mut Rng, n: u64) {
        for _ in 0..n {
            let (who, other) = (id(rng.below(6)), id(rng.below(6)));
            let amount = 1 + rng.below(50) as i64;
            match rng.below(4) {
                0 | 1 => drop(c.add(&who, amount)),
                2 => drop(c.decrement_within_rights(&who, amount)),
                _ => drop(c.give(&who, &other, amount)),
            }
            if rng.below(10) == 0 {
                let target = c.floor_level() + rng.below(11) as i64 - 5;
                let _ = c.set_floor(&who, Some(target));
            }
        }
    }

    #[test]
    fn merging_the_delta_into_any_peer_that_has_the_base_equals_merging_everything() {
        let mut rng = Rng::new(36);
        for _ in 0..3_000 {
            let mut base = PnCounter::new();
            let n = rng.below(20);
            write(&mut base, &mut rng, n);
            let mut current = base.clone();
            let n = rng.below(20);
            write(&mut current, &mut rng, n);
            let mut elsewhere = PnCounter::new();
            let n = rng.below(20);
            write(&mut elsewhere, &mut rng, n);
            let peer = elsewhere.merged(&base).unwrap();
            let d = delta(&current, &base, |_| true).unwrap();
            assert!(dominates(&current, &base));
            let by_delta = peer.merged(&d).unwrap();
            let by_full = peer.merged(&current).unwrap();
            assert!(by_delta.same_state(&by_full), "{d:?}");
            assert!(d.entries().len() <= current.entries().len());
        }
    }

    #[test]
    fn a_history_answers_deltas_from_versions_it_holds_and_full_states_otherwise() {
        let mut h = History::default();
        let mut incarnations = 10..;
        let mut fresh = || incarnations.next().unwrap();
        let size = |_: &PnCounter| 1;
        let mut c = PnCounter::new();
        c.add(&id(1), 5).unwrap();
        let first = h.answer(7, &c, None, &mut fresh, size, |_| true);
        assert!(first.delta.is_none());
        assert_eq!(
            Version::parse(first.version.render().as_bytes()),
            Some(first.version)
        );
        assert_eq!(Version::parse(b"0"), None);
        c.add(&id(2), 3).unwrap();
        let second = h.answer(7, &c, Some(first.version), &mut fresh, size, |_| true);
        assert_eq!(second.delta.unwrap().entries().len(), 1, "only r2 changed");
        let same = h.answer(7, &c, Some(second.version), &mut fresh, size, |_| true);
        assert_eq!(same.version, second.version, "nothing new, same version");
        assert!(same.delta.unwrap().entries().is_empty());
        // Another epoch (a restart): the full state.
        assert!(h
            .answer(8, &c, Some(second.version), &mut fresh, size, |_| true)
            .delta
            .is_none());
        // The key deleted and made again: a new incarnation, and the full state.
        let mut again = PnCounter::new();
        again.add(&id(3), 1).unwrap();
        let lost = h.answer(7, &again, Some(second.version), &mut fresh, size, |_| true);
        assert!(lost.delta.is_none());
        assert_ne!(lost.version.incarnation, second.version.incarnation);
        // Only the last few versions are kept.
        let mut last = lost.version;
        for i in 0..SNAPSHOTS_PER_KEY as i64 + 1 {
            again.add(&id(3), 1 + i).unwrap();
            last = h
                .answer(7, &again, None, &mut fresh, size, |_| true)
                .version;
        }
        assert!(h
            .answer(7, &again, Some(lost.version), &mut fresh, size, |_| true)
            .delta
            .is_none());
        assert!(h
            .answer(7, &again, Some(last), &mut fresh, size, |_| true)
            .delta
            .is_some());
    }

    #[test]
    fn an_unchanged_state_has_an_empty_delta_and_a_shrunk_one_is_not_dominating() {
        let mut c = PnCounter::new();
        c.add(&id(1), 5).unwrap();
        c.add(&id(2), 7).unwrap();
        let d = delta(&c, &c, |_| true).unwrap();
        assert!(d.entries().is_empty() && d.bound().is_none());
        let mut later = c.clone();
        later.add(&id(2), 1).unwrap();
        assert_eq!(delta(&later, &c, |_| true).unwrap().entries().len(), 1);
        assert!(
            delta(&later, &c, |i| *i == id(1))
                .unwrap()
                .entries()
                .is_empty(),
            "r2 is not ours"
        );
        assert!(!dominates(&PnCounter::new(), &c), "deleted and made again");
    }
}
