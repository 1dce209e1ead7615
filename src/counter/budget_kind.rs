//! Which budget of a bounded spread counter the rebalancer moves: **down-budget**, the room
//! above a floor (what purchases take), moved as floor units; or **up-budget**, the room below
//! a ceiling (what positive adds take), moved as ceiling units. A spread's kind is read from
//! what every master sees alike: a holder's name (an odd spread id: floored; else a ceiled
//! holder's attempt: ceiled), a home's spread record. A spread with both bounds moves its
//! down-budget; its holders keep the up-budget of their first shares (a fold takes a holder's
//! share home).

use super::headroom::Refusal;
use super::spread::{is_ceiled_holder, is_floored_id, parse_holder_name, NameBounds};
use super::transfer::{
    add_refused_by_ceiling, add_waits_for_up_budget, purchase_refused, purchase_waits_for_budget,
    Units,
};
use super::Counter;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetKind {
    /// The room above a floor (floor units).
    Down,
    /// The room below a ceiling (ceiling units).
    Up,
}

impl BudgetKind {
    /// The budget a `CTR.ADD` of `delta` takes, and how much of it: a positive add takes room
    /// below a ceiling, a negative one units above a floor as a purchase of `-delta` does. None
    /// for 0 (and for `i64::MIN`, whose amount is no i64).
    pub fn of_add(delta: i64) -> Option<(BudgetKind, i64)> {
        match delta {
            d if d > 0 => Some((BudgetKind::Up, d)),
            d if d < 0 => d.checked_neg().map(|amount| (BudgetKind::Down, amount)),
            _ => None,
        }
    }

    /// The spread the counter `c` at `key` is a member of, and the budget its rebalancer
    /// moves: a holder's by its name, a home's by its spread record. None for any other key (a
    /// bounded counter that is not spread is the whole counter: its refusals are final).
    pub fn of_member(key: &[u8], c: Option<&Counter>) -> Option<(u64, BudgetKind)> {
        if let Some(h) = parse_holder_name(key) {
            let kind = match () {
                () if is_floored_id(h.spread_id) => BudgetKind::Down,
                () if is_ceiled_holder(&h) => BudgetKind::Up,
                () => return None,
            };
            return Some((h.spread_id, kind));
        }
        let spread = c?.spread()?;
        match (spread.floor, spread.ceiling) {
            (Some(_), _) => Some((spread.id, BudgetKind::Down)),
            (None, Some(_)) => Some((spread.id, BudgetKind::Up)),
            (None, None) => None,
        }
    }

    /// The spread the counter `c` at `key` (None: a missing key, known by its name) is a member
    /// of, when that spread's rebalancer moves this budget.
    pub fn moving_spread(self, key: &[u8], c: Option<&Counter>) -> Option<u64> {
        BudgetKind::of_member(key, c)
            .filter(|&(_, kind)| kind == self)
            .map(|(id, _)| id)
    }

    /// True when a refusal of a write of this kind (a purchase, a positive add) by the counter
    /// `c` at `key` (None: a missing key, known by its name) is demand: `key` is a member of a
    /// spread whose rebalancer moves this budget. Any other refusal asks no round for anything.
    pub fn refusal_is_demand(self, key: &[u8], c: Option<&Counter>) -> bool {
        self.moving_spread(key, c).is_some()
    }

    /// What the counter `c` can still give of this budget as a round reads it: its value above
    /// its floor, or its ceiling above its value (a bound it has not had yet counts as 0, where
    /// a holder's name holds it). Negative when a member is past the bound its name gives it.
    pub fn budget(self, c: &Counter) -> i64 {
        match self {
            BudgetKind::Down => c.budget(),
            BudgetKind::Up => self.room_clamped(c.value(), self.bound(c).unwrap_or(0)),
        }
    }

    /// The units of this budget a transfer carries to its receiver (negative: from it).
    pub fn moved(self, u: Units) -> i64 {
        match self {
            BudgetKind::Down => u.df.saturating_neg(),
            BudgetKind::Up => u.dc,
        }
    }

    /// The bound this budget is the room to: a counter's own floor, or its own ceiling.
    pub fn bound(self, c: &Counter) -> Option<i64> {
        match self {
            BudgetKind::Down => c.floor().map(|f| f.floor),
            BudgetKind::Up => c.ceiling().map(|x| x.ceiling),
        }
    }

    /// The units of that bound a transfer carries (floor units, ceiling units).
    pub fn bound_units(self, u: Units) -> i64 {
        match self {
            BudgetKind::Down => u.df,
            BudgetKind::Up => u.dc,
        }
    }

    /// A move of `n` units of this budget, as its receiver applies it.
    pub fn units(self, n: i64) -> Units {
        match self {
            BudgetKind::Down => Units::floor(n.saturating_neg()),
            BudgetKind::Up => Units::ceiling(n),
        }
    }

    /// True when the counter `c` alone cannot take a write of `amount` units of this budget (a
    /// purchase of `amount`, a positive add of `amount`) under its own bound, or the one its name
    /// gives it (`by_name`) while it has none.
    pub fn refuses(self, c: &Counter, amount: i64, by_name: NameBounds) -> bool {
        match self {
            BudgetKind::Down => purchase_refused(c, amount, by_name.floor),
            BudgetKind::Up => add_refused_by_ceiling(c, amount, by_name.ceiling),
        }
    }

    /// True when a write of `amount` units of this budget that the counter `c` at `key` refuses
    /// (under its bounds, or `by_name`'s) waits for budget a rebalance round is to gather to it
    /// (`TRYAGAIN`, its demand recorded) rather than being refused for good: `key` is a member of
    /// a spread whose rebalancer moves this budget and runs (`rebalancing`), and the view of that
    /// spread's whole headroom (`fate`, asked with the spread's id) says it may cover the write.
    /// The glue and the simulator both decide with it.
    pub fn waits_to_gather(
        self,
        (key, by_name): (&[u8], NameBounds),
        c: &Counter,
        amount: i64,
        rebalancing: bool,
        fate: impl FnOnce(u64) -> Refusal,
    ) -> bool {
        rebalancing
            && self.refuses(c, amount, by_name)
            && self
                .moving_spread(key, Some(c))
                .is_some_and(|id| fate(id) == Refusal::Retry)
    }

    /// True when such a write at the counter `c` (None: a missing key) is refused only for want
    /// of budget of this kind still travelling to it at `now_ms`: its answer is `TRYAGAIN`,
    /// nothing recorded against its token.
    pub fn waits_in_flight(
        self,
        c: Option<&Counter>,
        amount: i64,
        by_name: NameBounds,
        now_ms: i64,
    ) -> bool {
        match self {
            BudgetKind::Down => purchase_waits_for_budget(c, amount, by_name.floor, now_ms),
            BudgetKind::Up => add_waits_for_up_budget(c, amount, by_name.ceiling, now_ms),
        }
    }

    /// The room of this kind between `value` and `bound` (value - floor, ceiling - value),
    /// exact: bounds far from the value take it past 64 bits.
    pub fn room(self, value: i64, bound: i64) -> i128 {
        let (value, bound) = (i128::from(value), i128::from(bound));
        match self {
            BudgetKind::Down => value - bound,
            BudgetKind::Up => bound - value,
        }
    }

    /// [`BudgetKind::room`] at the nearest 64-bit limit when past them.
    pub fn room_clamped(self, value: i64, bound: i64) -> i64 {
        clamp_to_i64(self.room(value, bound))
    }

    /// The budget of this kind the counter `r` has once `moved` more units land.
    pub fn budget_after(self, r: &Counter, moved: i64) -> i64 {
        self.budget(r).saturating_add(moved)
    }
}

/// `v` at the nearest 64-bit limit when past them.
pub fn clamp_to_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::spread::{holder_name, Spread, CEILED_ATTEMPTS};

    #[test]
    fn a_members_kind_is_read_from_its_name_or_its_spread() {
        let floored = holder_name(b"k", 7, 1, 0);
        let both = holder_name(b"k", 7, 1, CEILED_ATTEMPTS);
        let ceiled = holder_name(b"k", 8, 1, CEILED_ATTEMPTS);
        let plain = holder_name(b"k", 8, 1, 0);
        assert_eq!(
            BudgetKind::of_member(&floored, None),
            Some((7, BudgetKind::Down))
        );
        assert_eq!(
            BudgetKind::of_member(&both, None),
            Some((7, BudgetKind::Down))
        );
        assert_eq!(
            BudgetKind::of_member(&ceiled, None),
            Some((8, BudgetKind::Up))
        );
        assert_eq!(BudgetKind::of_member(&plain, None), None);
        let mut home = Counter::plain(3);
        assert_eq!(BudgetKind::of_member(b"k", Some(&home)), None);
        home.set_ceiling(Some(10)).unwrap();
        home.set_spread(Spread {
            id: 8,
            holders: vec![ceiled],
            floor: None,
            ceiling: Some(20),
        })
        .unwrap();
        assert_eq!(
            BudgetKind::of_member(b"k", Some(&home)),
            Some((8, BudgetKind::Up))
        );
        assert_eq!(BudgetKind::Up.budget(&home), 7);
        assert_eq!(
            BudgetKind::Up.budget(&Counter::plain(-2)),
            2,
            "held at 0 by its name"
        );
        assert_eq!(BudgetKind::Up.units(4), Units::ceiling(4));
        assert_eq!(BudgetKind::Down.units(4), Units::floor(-4));
        assert_eq!(BudgetKind::Down.moved(Units::floor(-4)), 4);
        assert_eq!(BudgetKind::Up.moved(Units::floor(-4)), 0);
        assert_eq!(BudgetKind::Down.room(7, 3), 4);
        assert_eq!(BudgetKind::Up.room(7, 3), -4);
        assert_eq!(BudgetKind::Up.room_clamped(i64::MIN, i64::MAX), i64::MAX);
        assert_eq!(BudgetKind::Up.room_clamped(i64::MAX, i64::MIN), i64::MIN);
    }

    #[test]
    fn a_write_is_refused_and_waits_by_the_bound_of_its_kind() {
        let ceiled =
            crate::counter::spread::bounds_by_name(&holder_name(b"k", 8, 1, CEILED_ATTEMPTS));
        let floored = crate::counter::spread::bounds_by_name(&holder_name(b"k", 7, 1, 0));
        let mut c = Counter::plain(5);
        c.set_ceiling(Some(9)).unwrap();
        assert!(!BudgetKind::Up.refuses(&c, 4, NameBounds::default()));
        assert!(BudgetKind::Up.refuses(&c, 5, NameBounds::default()));
        assert!(
            !BudgetKind::Down.refuses(&c, 5, NameBounds::default()),
            "floor 0 by default"
        );
        assert!(BudgetKind::Down.refuses(&c, 6, NameBounds::default()));
        // Before its first credit a holder is held at 0 by its name, and waits for its share.
        assert!(BudgetKind::Up.refuses(&Counter::plain(0), 1, ceiled));
        assert!(BudgetKind::Up.waits_in_flight(None, 1, ceiled, 1));
        assert!(!BudgetKind::Up.waits_in_flight(None, 1, floored, 1));
        assert!(BudgetKind::Down.waits_in_flight(None, 1, floored, 1));
        assert!(!BudgetKind::Down.waits_in_flight(None, 1, ceiled, 1));
        assert!(!BudgetKind::Up.waits_in_flight(Some(&c), 5, NameBounds::default(), 1));
    }

    #[test]
    fn a_refused_write_waits_to_gather_only_at_a_member_moving_its_kind_while_a_round_may_cover_it()
    {
        let name = holder_name(b"k", 8, 1, CEILED_ATTEMPTS);
        let named = (&name[..], crate::counter::spread::bounds_by_name(&name));
        let mut c = Counter::plain(5);
        c.set_ceiling(Some(9)).unwrap();
        let retry = |id: u64| {
            assert_eq!(id, 8, "the fate is asked of the member's spread");
            Refusal::Retry
        };
        let up = BudgetKind::Up;
        assert!(up.waits_to_gather(named, &c, 5, true, retry));
        assert!(!up.waits_to_gather(named, &c, 4, true, retry), "taken here");
        assert!(
            !up.waits_to_gather(named, &c, 5, false, retry),
            "no round comes"
        );
        assert!(!up.waits_to_gather(named, &c, 5, true, |_| Refusal::Final));
        // A purchase at the ceiled member: its rebalancer moves no down-budget.
        assert!(!BudgetKind::Down.waits_to_gather(named, &c, 6, true, retry));
        // A ceiled counter that is no member: its refusals are final.
        let alone = (&b"k"[..], NameBounds::default());
        assert!(!up.waits_to_gather(alone, &c, 5, true, |_| unreachable!()));
    }
}
