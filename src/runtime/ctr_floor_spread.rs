//! Floored spread counters: `CTR.SPREAD` of a floored counter (on one server, and its shares
//! as budget moves across masters) and the floor fields of the home's `CTR.INFO`. The demand
//! holders record is `demand`'s, the rebalancing that follows it `floor_moves`'.
//!
//! Each holder is a floored counter of its own; spreading shares the home's headroom evenly:
//! the home's floor goes up by what it gives and each holder's floor goes down by its share,
//! values untouched (counter/rebalance.rs). On one server every holder is written in the same
//! command, so nothing is ever in flight. Across cluster masters each share is a budget move
//! from the home (a transfer, `dv = 0, df = -share`), delivered in the background.

use super::demand::{demand_of, selected_db};

use crate::ffi::{Ctx, RawString, Reply};

/// What the home of a floored spread counter adds to its `CTR.INFO`, read on one server.
pub struct FlooredView {
    /// The counter's floor F.
    pub floor: i64,
    /// Each holder's own floor, the home first (filled from the gathered read).
    pub holder_floors: Vec<i64>,
    /// Each holder's refused units since its master started (soft state), the home first.
    pub holder_refused: Vec<u64>,
}

/// The floored view of a home with these holders: the demand each holder recorded on this
/// master (holders served by other masters count what their refusals reported here); the
/// holder floors come with the gathered values.
pub fn floored_view(
    ctx: Ctx,
    home: RawString,
    spread_floor: i64,
    holders: &[Vec<u8>],
) -> FlooredView {
    let db = selected_db(ctx);
    let names =
        std::iter::once(crate::ffi::string_bytes(home)).chain(holders.iter().map(|h| &h[..]));
    FlooredView {
        floor: spread_floor,
        holder_floors: Vec::new(),
        holder_refused: names.map(|n| demand_of(db, n).refused_units).collect(),
    }
}

/// The fields a floored home's `CTR.INFO` shows, from the gathered `values` (the home first):
/// `floor` becomes F, and `headroom`, `holder_floors`, `holder_budgets`, `units_in_flight`
/// (headroom not in any holder's budget: budget moves under way) and `holder_refused_units`
/// are added. Figures beyond 64 bits (floors far below the values) show as the nearest limit.
pub fn info_fields(
    fields: &mut Vec<(&'static str, Reply)>,
    total: i64,
    values: &[i64],
    view: &FlooredView,
) {
    let clamp = |v: i128| Reply::Integer(v.clamp(i64::MIN.into(), i64::MAX.into()) as i64);
    let headroom = i128::from(total) - i128::from(view.floor);
    let budgets: Vec<i128> = values
        .iter()
        .zip(&view.holder_floors)
        .map(|(v, f)| i128::from(*v) - i128::from(*f))
        .collect();
    for (name, value) in fields.iter_mut() {
        if *name == "floor" {
            *value = Reply::Integer(view.floor);
        }
    }
    let integers = |v: &[i64]| Reply::Array(v.iter().copied().map(Reply::Integer).collect());
    fields.push(("headroom", clamp(headroom)));
    fields.push(("holder_floors", integers(&view.holder_floors)));
    let in_budgets: i128 = budgets.iter().sum();
    fields.push((
        "holder_budgets",
        Reply::Array(budgets.into_iter().map(clamp).collect()),
    ));
    fields.push(("units_in_flight", clamp(headroom - in_budgets)));
    let refused = view
        .holder_refused
        .iter()
        .map(|&u| i64::try_from(u).unwrap_or(i64::MAX));
    fields.push((
        "holder_refused_units",
        integers(&refused.collect::<Vec<_>>()),
    ));
}
