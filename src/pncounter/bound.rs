//! The bounded PN-Counter (AntidoteDB's bounded counter, Balegas et al. 2015): a floor for the
//! sum over every deployment, kept without coordination by *rights*.
//!
//! Every deployment `i` holds `rights(i) = P_i - N_i + received_i - sent_i + lowered_i -
//! raised_i`:
//!
//! - an increment (`P_i`) creates rights where it happens; a decrement (`N_i`) spends them;
//! - `sent`/`received` come from the transfer matrix: per ordered pair `(from, to)` the
//!   cumulative units `from` ever gave `to`, grow-only, merged by max (so a carrier may resend,
//!   duplicate or reorder states forever);
//! - the floor itself is a PN-counter: `floor = sum(raised) - sum(lowered)`. A deployment that
//!   lowers the floor gains the difference as rights; one that raises it spends rights, exactly
//!   like a decrement. Two deployments that move the floor concurrently both move it: their
//!   moves add up, each backed by its own rights.
//!
//! Summed over every deployment the transfers cancel, so `sum(rights) = value - floor`.
//! A deployment writes only its own P, N, raised, lowered and outgoing transfers, all of which
//! it knows exactly; what it received may be more than it has seen (units in flight count low).
//! It decrements, gives or raises only while its own view of its rights covers the amount, so
//! its true rights never go negative, and neither does the sum: the value never goes below the
//! floor, whatever was lost, duplicated or reordered. The one exception is a decrement made
//! while no floor was in force there ([`FloorSwitch`] off, with plain `PNC.ADD`), which may
//! leave that deployment's rights negative: the floor holds again once they are back.
//!
//! Whether a floor is in force (`PNC.FLOOR key NONE` switches it off) is a last-writer-wins
//! flag ordered by (epoch, setter, on); its level stays in the moves.

use std::cmp::Ordering;

use super::{PnCounter, ReplicaId, MAX_REPLICAS, SLOT_MAX};

/// Most entries of the transfer matrix one counter may hold.
pub const MAX_TRANSFERS: usize = 4 * MAX_REPLICAS;
/// Tokens a counter remembers for `PNC.DECRFLOOR` (oldest forgotten first).
pub const LEDGER_CAPACITY: usize = 1024;

/// Whether a floor is in force: the latest switch by (epoch, setter, on) wins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FloorSwitch {
    pub epoch: u64,
    pub setter: ReplicaId,
    pub on: bool,
}

/// How far one deployment raised and lowered the floor (grow-only totals).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloorMove {
    pub id: ReplicaId,
    pub raised: u64,
    pub lowered: u64,
}

/// Units `from` ever gave `to` (cumulative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub from: ReplicaId,
    pub to: ReplicaId,
    pub amount: u64,
}

/// A `PNC.DECRFLOOR` token's first outcome: its amount and its reply (None: refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub token: Box<[u8]>,
    pub amount: i64,
    pub reply: Option<i64>,
}

/// The floor, the rights matrix and (local, never merged) the token ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bound {
    pub switch: Option<FloorSwitch>,
    /// Sorted by id, unique.
    pub moves: Vec<FloorMove>,
    /// Sorted by (from, to), unique, from != to.
    pub transfers: Vec<Transfer>,
    /// This deployment's tokens, oldest first. Not part of the merged state.
    pub ledger: Vec<LedgerEntry>,
}

/// Why a bounded-counter operation is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundError {
    Overflow,
    ValueBelowFloor,
    NotEnoughRights,
    GiveToSelf,
    TooManyEntries,
}

impl BoundError {
    pub const fn message(self) -> &'static str {
        match self {
            BoundError::Overflow => "ERR counter overflow",
            BoundError::ValueBelowFloor => "ERR value below floor",
            BoundError::NotEnoughRights => {
                "ERR not enough rights in this deployment (move rights here with PNC.GIVE elsewhere)"
            }
            BoundError::GiveToSelf => "ERR cannot give rights to this deployment's own replica id",
            BoundError::TooManyEntries => {
                "ERR too many floor or transfer entries in one PN-counter"
            }
        }
    }
}

/// Why a decoded bound is invalid.
pub fn validate(bound: &Bound) -> Result<(), &'static str> {
    if bound.moves.len() > MAX_REPLICAS || bound.transfers.len() > MAX_TRANSFERS {
        return Err("too many floor or transfer entries");
    }
    if !bound.moves.windows(2).all(|w| w[0].id < w[1].id) {
        return Err("floor moves not strictly ordered by id");
    }
    if !bound
        .transfers
        .windows(2)
        .all(|w| (&w[0].from, &w[0].to) < (&w[1].from, &w[1].to))
    {
        return Err("transfers not strictly ordered");
    }
    if bound.transfers.iter().any(|t| t.from == t.to) {
        return Err("a transfer to its own giver");
    }
    let totals = bound.moves.iter().flat_map(|m| [m.raised, m.lowered]);
    if totals
        .chain(bound.transfers.iter().map(|t| t.amount))
        .any(|v| v > SLOT_MAX)
    {
        return Err("a floor move or transfer exceeds 9223372036854775807");
    }
    if floor_level(&bound.moves).is_none() {
        return Err("floor outside the signed 64-bit range");
    }
    if bound.ledger.len() > LEDGER_CAPACITY {
        return Err("too many ledger tokens");
    }
    Ok(())
}

/// `sum(raised) - sum(lowered)` when it fits in an i64.
fn floor_level(moves: &[FloorMove]) -> Option<i64> {
    let level: i128 = moves
        .iter()
        .map(|m| i128::from(m.raised) - i128::from(m.lowered))
        .sum();
    i64::try_from(level).ok()
}

impl Bound {
    /// True when it holds nothing (the counter then encodes as before floors existed).
    pub fn is_empty(&self) -> bool {
        self.switch.is_none()
            && self.moves.is_empty()
            && self.transfers.is_empty()
            && self.ledger.is_empty()
    }

    /// The same merged state (the ledger is local).
    pub fn same_state(&self, other: &Bound) -> bool {
        self.switch == other.switch
            && self.moves == other.moves
            && self.transfers == other.transfers
    }

    /// The element-wise join with `other`, keeping `self`'s ledger.
    pub fn merged(&self, other: &Bound) -> Result<Bound, BoundError> {
        let moves = merge_sorted(
            &self.moves,
            &other.moves,
            |m| m.id.clone(),
            |a, b| FloorMove {
                id: a.id.clone(),
                raised: a.raised.max(b.raised),
                lowered: a.lowered.max(b.lowered),
            },
        );
        let transfers = merge_sorted(
            &self.transfers,
            &other.transfers,
            |t| (t.from.clone(), t.to.clone()),
            |a, b| Transfer {
                amount: a.amount.max(b.amount),
                ..a.clone()
            },
        );
        if moves.len() > MAX_REPLICAS || transfers.len() > MAX_TRANSFERS {
            return Err(BoundError::TooManyEntries);
        }
        floor_level(&moves).ok_or(BoundError::Overflow)?;
        Ok(Bound {
            switch: self.switch.clone().max(other.switch.clone()),
            moves,
            transfers,
            ledger: self.ledger.clone(),
        })
    }

    /// The first outcome recorded for `token`.
    pub fn recorded(&self, token: &[u8]) -> Option<&LedgerEntry> {
        self.ledger.iter().find(|e| &*e.token == token)
    }

    /// Records a token's first outcome, forgetting the oldest past [`LEDGER_CAPACITY`].
    pub fn record(&mut self, entry: LedgerEntry) {
        if self.ledger.len() >= LEDGER_CAPACITY {
            self.ledger.remove(0);
        }
        self.ledger.push(entry);
    }
}

/// Joins two lists sorted by `key` (unique keys), combining equal keys with `join`.
fn merge_sorted<T: Clone, K: Ord>(
    a: &[T],
    b: &[T],
    key: impl Fn(&T) -> K,
    join: impl Fn(&T, &T) -> T,
) -> Vec<T> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let order = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => key(x).cmp(&key(y)),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        match order {
            Ordering::Less => {
                out.push(a[i].clone());
                i += 1;
            }
            Ordering::Greater => {
                out.push(b[j].clone());
                j += 1;
            }
            Ordering::Equal => {
                out.push(join(&a[i], &b[j]));
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// What `PNC.DECRFLOOR` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decrement {
    /// Granted: the new value.
    Granted(i64),
    /// Refused locally: this deployment's rights do not cover it.
    Refused,
}

impl PnCounter {
    fn bound_or_empty(&self) -> &Bound {
        static EMPTY: Bound = Bound {
            switch: None,
            moves: Vec::new(),
            transfers: Vec::new(),
            ledger: Vec::new(),
        };
        self.bound.as_deref().unwrap_or(&EMPTY)
    }

    /// The bounded part, if any.
    pub fn bound(&self) -> Option<&Bound> {
        self.bound.as_deref()
    }

    fn bound_mut(&mut self) -> &mut Bound {
        self.bound.get_or_insert_with(Box::default)
    }

    /// The floor's level (0 until a floor was ever set), whether or not it is in force.
    pub fn floor_level(&self) -> i64 {
        // Validated on every change: the level always fits.
        floor_level(&self.bound_or_empty().moves).unwrap_or(0)
    }

    /// The floor in force, None when none is (never set, or removed with `NONE`).
    pub fn floor(&self) -> Option<i64> {
        let on = self.bound_or_empty().switch.as_ref().is_some_and(|s| s.on);
        on.then(|| self.floor_level())
    }

    /// The rights `id` holds as this state sees them.
    pub fn rights(&self, id: &ReplicaId) -> i128 {
        let bound = self.bound_or_empty();
        let own = self
            .slot(id)
            .map_or(0, |e| i128::from(e.p) - i128::from(e.n));
        let moved = bound
            .moves
            .iter()
            .find(|m| &m.id == id)
            .map_or(0, |m| i128::from(m.lowered) - i128::from(m.raised));
        let transferred: i128 = bound
            .transfers
            .iter()
            .map(|t| {
                let amount = i128::from(t.amount);
                match (&t.to == id, &t.from == id) {
                    (true, _) => amount,
                    (_, true) => -amount,
                    _ => 0,
                }
            })
            .sum();
        own + moved + transferred
    }

    fn covers(&self, id: &ReplicaId, amount: i64) -> bool {
        self.rights(id) >= i128::from(amount)
    }

    /// `PNC.DECRFLOOR`: decrements by `amount` (> 0) from the rights of `id` alone.
    pub fn decrement_within_rights(
        &mut self,
        id: &ReplicaId,
        amount: i64,
    ) -> Result<Decrement, BoundError> {
        if !self.covers(id, amount) {
            return Ok(Decrement::Refused);
        }
        let negated = amount.checked_neg().ok_or(BoundError::Overflow)?;
        let value = self.add(id, negated).map_err(|_| BoundError::Overflow)?;
        Ok(Decrement::Granted(value))
    }

    /// True when a decrement of `amount` by `id` may run: no floor in force, or rights cover it.
    pub fn may_decrement(&self, id: &ReplicaId, amount: i64) -> bool {
        self.floor().is_none() || self.covers(id, amount)
    }

    /// `PNC.FLOOR key floor | NONE` by `id`. Returns whether anything changed. Lowering the
    /// floor gives `id` the difference as rights; raising it spends that many of `id`'s rights
    /// (refused when they do not cover it, or when the value seen here is below the target).
    pub fn set_floor(&mut self, id: &ReplicaId, target: Option<i64>) -> Result<bool, BoundError> {
        let outcome = self.try_set_floor(id, target);
        self.drop_empty_bound();
        outcome
    }

    /// A bounded part that holds nothing is none (the canonical form, as decoded).
    fn drop_empty_bound(&mut self) {
        if self.bound.as_ref().is_some_and(|b| b.is_empty()) {
            self.bound = None;
        }
    }

    fn try_set_floor(&mut self, id: &ReplicaId, target: Option<i64>) -> Result<bool, BoundError> {
        let Some(target) = target else {
            return Ok(self.switch_floor(id, false));
        };
        if self.value() < target {
            return Err(BoundError::ValueBelowFloor);
        }
        let current = self.floor_level();
        let step = i128::from(target) - i128::from(current);
        if step > 0 && self.rights(id) < step {
            return Err(BoundError::NotEnoughRights);
        }
        if step != 0 {
            self.move_floor(id, step)?;
        }
        let switched = self.switch_floor(id, true);
        Ok(step != 0 || switched)
    }

    /// Adds `step` (raise > 0, lower < 0) to the floor moves of `id`; nothing changes when
    /// it fails.
    fn move_floor(&mut self, id: &ReplicaId, step: i128) -> Result<(), BoundError> {
        let moves = &mut self.bound_mut().moves;
        let found = moves.binary_search_by(|m| m.id.cmp(id));
        let (raised, lowered) = found.map_or((0, 0), |at| (moves[at].raised, moves[at].lowered));
        let grow = |total: u64| {
            u64::try_from(step.unsigned_abs())
                .ok()
                .and_then(|s| total.checked_add(s))
                .filter(|t| *t <= SLOT_MAX)
                .ok_or(BoundError::Overflow)
        };
        let (raised, lowered) = if step > 0 {
            (grow(raised)?, lowered)
        } else {
            (raised, grow(lowered)?)
        };
        match found {
            Ok(at) => {
                moves[at].raised = raised;
                moves[at].lowered = lowered;
            }
            Err(at) => {
                if moves.len() >= MAX_REPLICAS {
                    return Err(BoundError::TooManyEntries);
                }
                let id = id.clone();
                moves.insert(
                    at,
                    FloorMove {
                        id,
                        raised,
                        lowered,
                    },
                );
            }
        }
        Ok(())
    }

    /// Turns the floor on or off by `id` (a new epoch), when it is not already so.
    fn switch_floor(&mut self, id: &ReplicaId, on: bool) -> bool {
        let current = self.bound_or_empty().switch.clone();
        if current.as_ref().map_or(!on, |s| s.on == on) {
            return false;
        }
        let epoch = current.map_or(0, |s| s.epoch).saturating_add(1);
        self.bound_mut().switch = Some(FloorSwitch {
            epoch,
            setter: id.clone(),
            on,
        });
        true
    }

    /// `PNC.GIVE`: moves `amount` (> 0) of `from`'s rights to `to`. Returns the rights `from`
    /// keeps, or None when its rights do not cover `amount` (nothing changes).
    pub fn give(
        &mut self,
        from: &ReplicaId,
        to: &ReplicaId,
        amount: i64,
    ) -> Result<Option<i128>, BoundError> {
        if from == to {
            return Err(BoundError::GiveToSelf);
        }
        if !self.covers(from, amount) {
            return Ok(None);
        }
        let outcome = self.add_transfer(from, to, amount);
        self.drop_empty_bound();
        outcome?;
        Ok(Some(self.rights(from)))
    }

    /// Adds `amount` to the cumulative transfer `from` -> `to`; nothing changes when it fails.
    fn add_transfer(
        &mut self,
        from: &ReplicaId,
        to: &ReplicaId,
        amount: i64,
    ) -> Result<(), BoundError> {
        let amount = u64::try_from(amount).map_err(|_| BoundError::Overflow)?;
        let transfers = &mut self.bound_mut().transfers;
        match transfers.binary_search_by(|t| (&t.from, &t.to).cmp(&(from, to))) {
            Ok(at) => {
                let t = &mut transfers[at];
                t.amount = t
                    .amount
                    .checked_add(amount)
                    .filter(|a| *a <= SLOT_MAX)
                    .ok_or(BoundError::Overflow)?;
            }
            Err(at) => {
                if transfers.len() >= MAX_TRANSFERS {
                    return Err(BoundError::TooManyEntries);
                }
                transfers.insert(
                    at,
                    Transfer {
                        from: from.clone(),
                        to: to.clone(),
                        amount,
                    },
                );
            }
        }
        Ok(())
    }

    /// Records a `PNC.DECRFLOOR` token's first outcome.
    pub fn record_token(&mut self, entry: LedgerEntry) {
        self.bound_mut().record(entry);
    }

    /// The recorded first outcome of `token`, if remembered.
    pub fn recorded_token(&self, token: &[u8]) -> Option<&LedgerEntry> {
        self.bound.as_deref().and_then(|b| b.recorded(token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pncounter::tests::Rng;

    fn id(s: &str) -> ReplicaId {
        ReplicaId::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn increments_create_rights_where_they_happen_and_decrements_spend_only_those() {
        let (a, b) = (id("a"), id("b"));
        let mut c = PnCounter::new();
        c.add(&a, 10).unwrap();
        assert_eq!(c.set_floor(&a, Some(0)), Ok(true));
        assert_eq!(c.floor(), Some(0));
        assert_eq!((c.rights(&a), c.rights(&b)), (10, 0));
        assert_eq!(c.decrement_within_rights(&b, 1), Ok(Decrement::Refused));
        assert_eq!(c.decrement_within_rights(&a, 4), Ok(Decrement::Granted(6)));
        assert_eq!(c.give(&a, &b, 5), Ok(Some(1)));
        assert_eq!(c.give(&a, &b, 2), Ok(None), "only 1 left");
        assert_eq!(c.give(&a, &a, 1), Err(BoundError::GiveToSelf));
        assert_eq!(c.decrement_within_rights(&b, 5), Ok(Decrement::Granted(1)));
        assert_eq!(c.decrement_within_rights(&b, 1), Ok(Decrement::Refused));
        assert_eq!(c.value() - c.floor_level(), 1);
        assert_eq!(c.rights(&a) + c.rights(&b), 1);
    }

    #[test]
    fn lowering_the_floor_grants_rights_and_raising_spends_them() {
        let (a, b) = (id("a"), id("b"));
        let mut c = PnCounter::new();
        assert_eq!(c.set_floor(&a, Some(5)), Err(BoundError::ValueBelowFloor));
        assert_eq!(c.set_floor(&a, Some(-100)), Ok(true));
        assert_eq!((c.floor(), c.rights(&a)), (Some(-100), 100));
        assert_eq!(c.set_floor(&a, Some(-100)), Ok(false), "nothing to change");
        assert_eq!(c.set_floor(&b, Some(-50)), Err(BoundError::NotEnoughRights));
        assert_eq!(c.set_floor(&a, Some(-60)), Ok(true));
        assert_eq!(c.rights(&a), 60);
        assert_eq!(c.set_floor(&b, None), Ok(true));
        assert_eq!((c.floor(), c.floor_level()), (None, -60));
        assert_eq!(c.set_floor(&b, None), Ok(false));
        assert!(c.may_decrement(&b, 1_000), "no floor in force");
        assert_eq!(c.set_floor(&b, Some(-60)), Ok(true), "switched back on");
        assert!(!c.may_decrement(&b, 1));
    }

    #[test]
    fn floors_moved_in_two_places_add_up() {
        let (a, b) = (id("a"), id("b"));
        let mut base = PnCounter::new();
        base.add(&a, 100).unwrap();
        base.give(&a, &b, 40).unwrap();
        base.set_floor(&a, Some(0)).unwrap();
        let (mut x, mut y) = (base.clone(), base.clone());
        x.set_floor(&a, Some(30)).unwrap();
        y.set_floor(&b, Some(20)).unwrap();
        let m = x.merged(&y).unwrap();
        assert_eq!(m.floor(), Some(50));
        assert_eq!((m.rights(&a), m.rights(&b)), (30, 20));
    }

    fn random_bounded(rng: &mut Rng) -> PnCounter {
        let ids = [id("a"), id("b"), id("c")];
        let mut c = PnCounter::new();
        for _ in 0..rng.below(30) {
            let who = &ids[rng.below(3) as usize];
            let other = &ids[rng.below(3) as usize];
            let amount = 1 + rng.below(20) as i64;
            match rng.below(5) {
                0 | 1 => drop(c.add(who, amount)),
                2 => drop(c.decrement_within_rights(who, amount)),
                3 => drop(c.give(who, other, amount)),
                _ => drop(c.set_floor(who, Some(c.floor_level() + amount - 10))),
            }
        }
        c
    }

    #[test]
    fn bounded_merge_is_commutative_associative_idempotent_and_keeps_the_rights_sum() {
        let mut rng = Rng::new(11);
        for _ in 0..2_000 {
            let (x, y, z) = (
                random_bounded(&mut rng),
                random_bounded(&mut rng),
                random_bounded(&mut rng),
            );
            let xy = x.merged(&y).unwrap();
            assert!(xy.same_state(&y.merged(&x).unwrap()));
            assert!(xy.same_state(&xy.merged(&y).unwrap()));
            let left = xy.merged(&z).unwrap();
            assert!(left.same_state(&x.merged(&y.merged(&z).unwrap()).unwrap()));
            for c in [&x, &left] {
                let sum: i128 = ["a", "b", "c"].iter().map(|s| c.rights(&id(s))).sum();
                assert_eq!(sum, i128::from(c.value()) - i128::from(c.floor_level()));
            }
        }
    }

    #[test]
    fn the_ledger_is_local_and_bounded() {
        let a = id("a");
        let mut c = PnCounter::new();
        for i in 0..LEDGER_CAPACITY + 5 {
            c.record_token(LedgerEntry {
                token: format!("t{i}").into_bytes().into(),
                amount: 1,
                reply: None,
            });
        }
        assert!(c.recorded_token(b"t0").is_none(), "the oldest forgotten");
        assert!(c.recorded_token(b"t5").is_some());
        let shipped = c.shipped();
        assert!(shipped.bound().is_none());
        assert!(shipped.same_state(&c));
        c.add(&a, 1).unwrap();
        assert_eq!(
            c.merged(&shipped).unwrap().bound().unwrap().ledger.len(),
            LEDGER_CAPACITY
        );
    }
}
