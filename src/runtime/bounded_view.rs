//! The bound fields of a bounded spread home's `CTR.INFO` (a floor, a ceiling, or both), made
//! from a gathered read: each member (the home, then each holder) keeps its own share of each
//! bound, and the home's spread record keeps the spread's floor `F` and ceiling `C`. Spreading a
//! bounded counter is `bounded_spread`'s, the rebalancing that follows demand `floor_moves`'.
//!
//! Floored: `floor` becomes `F`, with `headroom` (total - F), `holder_floors`, `holder_budgets`
//! (each member's value - its floor) and `units_in_flight` (headroom in no member's budget).
//! Ceiled, the mirror: `ceiling` becomes `C`, with `room` (C - total), `holder_ceilings`,
//! `holder_rooms` (each member's ceiling - its value) and `room_in_flight` (room in no member's
//! room). Either way `holder_refused_units`. Moves between masters under way are what is in
//! flight; on one server nothing ever is.

use super::demand::{demand_of, selected_db};

use crate::counter::budget_kind::{clamp_to_i64, BudgetKind};
use crate::counter::exact_sum;
use crate::ffi::{Ctx, RawString, Reply};

/// What the home of a bounded spread counter adds to its `CTR.INFO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundedView {
    /// The counter's floor F (None: the spread is not floored).
    pub floor: Option<i64>,
    /// The counter's ceiling C (None: the spread is not ceiled).
    pub ceiling: Option<i64>,
    /// Each member's own floor, the home first (filled from the gathered read).
    pub holder_floors: Vec<i64>,
    /// Each member's own ceiling, the home first (filled from the gathered read).
    pub holder_ceilings: Vec<i64>,
    /// Each member's refused units since its master started (soft state), the home first.
    pub holder_refused: Vec<u64>,
}

impl BoundedView {
    /// The view of a spread with these bounds, before the read fills the members' own bounds;
    /// None for an unbounded spread.
    pub fn of(floor: Option<i64>, ceiling: Option<i64>, refused: Vec<u64>) -> Option<Self> {
        (floor.is_some() || ceiling.is_some()).then_some(BoundedView {
            floor,
            ceiling,
            holder_floors: Vec::new(),
            holder_ceilings: Vec::new(),
            holder_refused: refused,
        })
    }

    /// Fills the members' own bounds as read; a member without one of its own (never given
    /// a share yet) counts as 0.
    pub fn read(&mut self, floors: &[Option<i64>], ceilings: &[Option<i64>]) {
        let own = |b: &[Option<i64>]| b.iter().map(|x| x.unwrap_or(0)).collect();
        self.holder_floors = own(floors);
        self.holder_ceilings = own(ceilings);
    }
}

/// The bounded view of a home with these holders, for a spread bounded by `floor` and
/// `ceiling` (None when neither): the demand each member recorded on this master (holders
/// served by other masters count what their refusals reported here); the members' own bounds
/// come with the gathered values ([`BoundedView::read`]).
pub fn bounded_view(
    ctx: Ctx,
    home: RawString,
    floor: Option<i64>,
    ceiling: Option<i64>,
    holders: &[Vec<u8>],
) -> Option<BoundedView> {
    floor.or(ceiling)?;
    let db = selected_db(ctx);
    let names =
        std::iter::once(crate::ffi::string_bytes(home)).chain(holders.iter().map(|h| &h[..]));
    let refused = names.map(|n| demand_of(db, n).refused_units).collect();
    BoundedView::of(floor, ceiling, refused)
}

/// A bound of a counter shrunk to one key whose folds are under way (no spread record, so no
/// view; its leaving holders read after the home): the home's own bound plus what its leaving
/// holders hold of that bound (each sealed holder's share is in hand until the home has it),
/// not the home's part alone. None when the home has no such bound of its own, or past 64 bits.
pub fn folding_bound(bounds: &[Option<i64>]) -> Option<i64> {
    bounds.first().copied().flatten()?;
    exact_sum(bounds.iter().map(|b| b.unwrap_or(0)))
}

/// The fields a bounded home's `CTR.INFO` shows, from the gathered `values` (the home first).
/// Floored: `floor` becomes F, and `headroom`, `holder_floors`, `holder_budgets` and
/// `units_in_flight` (headroom in no member's budget: moves under way) are added. Ceiled:
/// `ceiling` becomes C, and `room`, `holder_ceilings`, `holder_rooms` and `room_in_flight`
/// (room in no member's room) are added. Then `holder_refused_units`. Figures beyond 64 bits
/// (bounds far from the values) show as the nearest limit.
pub fn info_fields(
    fields: &mut Vec<(&'static str, Reply)>,
    total: i64,
    values: &[i64],
    view: &BoundedView,
) {
    let integers = |v: &[i64]| Reply::Array(v.iter().copied().map(Reply::Integer).collect());
    let mut set = |field: &str, to: i64| {
        for (name, value) in fields.iter_mut() {
            if *name == field {
                *value = Reply::Integer(to);
            }
        }
    };
    if let Some(floor) = view.floor {
        set("floor", floor);
    }
    if let Some(ceiling) = view.ceiling {
        set("ceiling", ceiling);
    }
    if let Some(floor) = view.floor {
        // Below the floor: the member's value over its own floor.
        let (headroom, budgets, in_flight) =
            room(BudgetKind::Down, total, floor, values, &view.holder_floors);
        fields.push(("headroom", headroom));
        fields.push(("holder_floors", integers(&view.holder_floors)));
        fields.push(("holder_budgets", budgets));
        fields.push(("units_in_flight", in_flight));
    }
    if let Some(ceiling) = view.ceiling {
        // Under the ceiling: the member's own ceiling over its value.
        let (room, rooms, in_flight) = room(
            BudgetKind::Up,
            total,
            ceiling,
            values,
            &view.holder_ceilings,
        );
        fields.push(("room", room));
        fields.push(("holder_ceilings", integers(&view.holder_ceilings)));
        fields.push(("holder_rooms", rooms));
        fields.push(("room_in_flight", in_flight));
    }
    let refused = view
        .holder_refused
        .iter()
        .map(|&u| i64::try_from(u).unwrap_or(i64::MAX));
    fields.push((
        "holder_refused_units",
        integers(&refused.collect::<Vec<_>>()),
    ));
}

/// The whole room of `kind` between `total` and the spread's `bound`, each member's room between
/// its value and its own bound, and the room in no member's (in flight), each clamped to 64
/// bits.
fn room(
    kind: BudgetKind,
    total: i64,
    bound: i64,
    values: &[i64],
    own: &[i64],
) -> (Reply, Reply, Reply) {
    let clamp = |v: i128| Reply::Integer(clamp_to_i64(v));
    let whole = kind.room(total, bound);
    let members: Vec<i128> = values
        .iter()
        .zip(own)
        .map(|(v, b)| kind.room(*v, *b))
        .collect();
    let in_members: i128 = members.iter().sum();
    let members = Reply::Array(members.into_iter().map(clamp).collect());
    (clamp(whole), members, clamp(whole - in_members))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The base fields of `CTR.INFO` of a home (its own floor and ceiling, as `commands::ctr`
    /// builds them) with the bound fields added.
    fn fields_of(total: i64, values: &[i64], view: &BoundedView) -> Vec<(&'static str, Reply)> {
        let mut fields = vec![
            ("value", Reply::Integer(values[0])),
            ("floor", Reply::Integer(-1)),
            ("ceiling", Reply::Integer(-2)),
            ("ceiling_budgets", Reply::Array(vec![Reply::Integer(7)])),
        ];
        info_fields(&mut fields, total, values, view);
        fields
    }

    fn field<'a>(fields: &'a [(&'static str, Reply)], name: &str) -> &'a Reply {
        let mut found = fields.iter().filter(|(n, _)| *n == name);
        let (_, value) = found.next().unwrap_or_else(|| panic!("no {name}"));
        assert!(found.next().is_none(), "{name} twice");
        value
    }

    fn int(r: &Reply) -> i64 {
        match r {
            Reply::Integer(v) => *v,
            other => panic!("{other:?}"),
        }
    }

    fn ints(r: &Reply) -> Vec<i64> {
        match r {
            Reply::Array(items) => items.iter().map(int).collect(),
            other => panic!("{other:?}"),
        }
    }

    fn names(fields: &[(&'static str, Reply)]) -> Vec<&'static str> {
        fields.iter().map(|(n, _)| *n).collect()
    }

    fn view(
        floors: &[Option<i64>],
        ceilings: &[Option<i64>],
        f: Option<i64>,
        c: Option<i64>,
    ) -> BoundedView {
        let mut v = BoundedView::of(f, c, vec![0, 3, u64::MAX]).unwrap();
        v.read(floors, ceilings);
        v
    }

    #[test]
    fn an_unbounded_spread_has_no_view() {
        assert_eq!(BoundedView::of(None, None, vec![1, 2]), None);
        assert!(BoundedView::of(Some(0), None, vec![]).is_some());
        assert!(BoundedView::of(None, Some(0), vec![]).is_some());
    }

    /// `CTR.ADD k 10`, `CTR.CEIL k 100`, `CTR.SPREAD k 3` on one server: the room (90) shared
    /// 30 each, the home keeping its value under its share.
    #[test]
    fn a_ceiled_spread_shows_its_ceiling_room_and_the_members_rooms() {
        let values = [10, 0, 0];
        let v = view(&[None; 3], &[Some(40), Some(30), Some(30)], None, Some(100));
        let fields = fields_of(10, &values, &v);
        assert_eq!(int(field(&fields, "ceiling")), 100, "C, not the home's 40");
        assert_eq!(
            int(field(&fields, "floor")),
            -1,
            "the home's own floor, untouched"
        );
        assert_eq!(
            ints(field(&fields, "ceiling_budgets")),
            [7],
            "the home key's own"
        );
        assert_eq!(int(field(&fields, "room")), 90);
        assert_eq!(ints(field(&fields, "holder_ceilings")), [40, 30, 30]);
        assert_eq!(ints(field(&fields, "holder_rooms")), [30, 30, 30]);
        assert_eq!(int(field(&fields, "room_in_flight")), 0);
        assert_eq!(
            ints(field(&fields, "holder_refused_units")),
            [0, 3, i64::MAX]
        );
        assert!(!names(&fields).contains(&"headroom"), "no floor fields");
        assert!(!names(&fields).contains(&"units_in_flight"));
        assert_eq!(
            names(&fields)[4..],
            [
                "room",
                "holder_ceilings",
                "holder_rooms",
                "room_in_flight",
                "holder_refused_units"
            ]
        );
    }

    /// Across masters a holder's share of the ceiling travels: until it lands the holder has no
    /// ceiling of its own (0) and the share is room in flight, never room twice.
    #[test]
    fn room_whose_move_travels_is_in_flight() {
        let values = [10, 0, 0];
        let v = view(&[None; 3], &[Some(40), None, Some(30)], None, Some(100));
        let fields = fields_of(10, &values, &v);
        assert_eq!(int(field(&fields, "room")), 90);
        assert_eq!(ints(field(&fields, "holder_ceilings")), [40, 0, 30]);
        assert_eq!(ints(field(&fields, "holder_rooms")), [30, 0, 30]);
        assert_eq!(int(field(&fields, "room_in_flight")), 30);
    }

    /// A floored-only spread shows exactly the fields it showed before ceilings, in order.
    #[test]
    fn a_floored_spread_shows_its_floor_fields_only() {
        let values = [1000, 0, 0];
        let v = view(&[Some(700), Some(-300), None], &[None; 3], Some(100), None);
        let fields = fields_of(1000, &values, &v);
        assert_eq!(int(field(&fields, "floor")), 100);
        assert_eq!(
            int(field(&fields, "ceiling")),
            -2,
            "the home's own ceiling, untouched"
        );
        assert_eq!(int(field(&fields, "headroom")), 900);
        assert_eq!(ints(field(&fields, "holder_floors")), [700, -300, 0]);
        assert_eq!(ints(field(&fields, "holder_budgets")), [300, 300, 0]);
        assert_eq!(int(field(&fields, "units_in_flight")), 300);
        assert_eq!(
            names(&fields)[4..],
            [
                "headroom",
                "holder_floors",
                "holder_budgets",
                "units_in_flight",
                "holder_refused_units"
            ]
        );
    }

    /// Both bounds: both sets of fields, the floor's first, one `holder_refused_units`.
    #[test]
    fn a_spread_with_both_bounds_shows_both() {
        let values = [50, 20, -10];
        let v = view(
            &[Some(30), Some(-10), Some(-20)],
            &[Some(100), Some(60), Some(40)],
            Some(0),
            Some(200),
        );
        let fields = fields_of(60, &values, &v);
        assert_eq!(
            (int(field(&fields, "floor")), int(field(&fields, "ceiling"))),
            (0, 200)
        );
        assert_eq!(int(field(&fields, "headroom")), 60);
        assert_eq!(ints(field(&fields, "holder_budgets")), [20, 30, 10]);
        assert_eq!(int(field(&fields, "units_in_flight")), 0);
        assert_eq!(int(field(&fields, "room")), 140);
        assert_eq!(ints(field(&fields, "holder_rooms")), [50, 40, 50]);
        assert_eq!(int(field(&fields, "room_in_flight")), 0);
        assert_eq!(
            names(&fields)[4..],
            [
                "headroom",
                "holder_floors",
                "holder_budgets",
                "units_in_flight",
                "room",
                "holder_ceilings",
                "holder_rooms",
                "room_in_flight",
                "holder_refused_units"
            ]
        );
    }

    /// Rooms beyond 64 bits (a ceiling far above a value far below 0) clamp to the limit.
    #[test]
    fn figures_beyond_64_bits_clamp() {
        let values = [i64::MIN, i64::MIN, 0];
        let v = view(
            &[None; 3],
            &[Some(i64::MAX), Some(i64::MAX), Some(0)],
            None,
            Some(i64::MAX),
        );
        let total = i64::MIN; // the gathered total, as it would be had it fit
        let fields = fields_of(total, &values, &v);
        assert_eq!(int(field(&fields, "room")), i64::MAX);
        assert_eq!(
            ints(field(&fields, "holder_rooms")),
            [i64::MAX, i64::MAX, 0]
        );
        assert_eq!(int(field(&fields, "room_in_flight")), i64::MIN);
        let v = view(
            &[Some(i64::MAX), None, None],
            &[None; 3],
            Some(i64::MAX),
            None,
        );
        let fields = fields_of(i64::MIN, &[i64::MIN, 0, 0], &v);
        assert_eq!(int(field(&fields, "headroom")), i64::MIN);
        assert_eq!(ints(field(&fields, "holder_budgets")), [i64::MIN, 0, 0]);
    }

    #[test]
    fn a_folding_bound_is_the_homes_plus_its_leaving_holders() {
        assert_eq!(
            folding_bound(&[Some(40), Some(30), None, Some(30)]),
            Some(100)
        );
        assert_eq!(folding_bound(&[Some(-5), Some(-3)]), Some(-8));
        assert_eq!(
            folding_bound(&[None, Some(30)]),
            None,
            "the home has no such bound"
        );
        assert_eq!(folding_bound(&[]), None);
        assert_eq!(
            folding_bound(&[Some(i64::MAX), Some(1)]),
            None,
            "past 64 bits"
        );
    }
}
