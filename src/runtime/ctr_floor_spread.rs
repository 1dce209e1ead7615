//! Floored spread counters: `CTR.SPREAD` of a floored counter (on one server, and its shares
//! as budget moves across masters) and the floor fields of the home's `CTR.INFO`. The demand
//! holders record is `demand`'s, the rebalancing that follows it `floor_moves`'.
//!
//! Each holder is a floored counter of its own; spreading shares the home's headroom evenly:
//! the home's floor goes up by what it gives and each holder's floor goes down by its share,
//! values untouched (counter/rebalance.rs). On one server every holder is written in the same
//! command, so nothing is ever in flight. Across cluster masters each share is a budget move
//! from the home (a transfer, `dv = 0, df = -share`), delivered in the background.

use super::ctr_store::{list_change_clock, update_counter, value_and_floor, with_counter};
use super::demand::{demand_of, selected_db};

use crate::counter::rebalance::{apply_moves, initial_moves, Move};
use crate::counter::transfer::Units;
use crate::counter::{CounterRef, Spread};
use crate::ffi::{CommandError, Ctx, Key, KeyName, RawString, Reply};
use crate::persist::ctr_format;

const HOLDER_BELOW_FLOOR: CommandError =
    CommandError::fixed("ERR a holder key already holds a counter below its floor");

/// Records the holders `added` (after `current`) of the floored counter at `home`, on one
/// server: every new holder becomes a floored counter (floor 0 when it is missing); on the
/// first spread the home's headroom is shared evenly over all holders. Everything is checked
/// before anything is written; each written key is replicated as its resulting state.
pub fn spread_floored(
    ctx: Ctx,
    home: RawString,
    spread_id: u64,
    current: &[Vec<u8>],
    added: &[Vec<u8>],
) -> Result<(), CommandError> {
    let (home_value, home_floor, spread_floor) = with_counter(ctx, home, home_floor_state)?;
    let names: Vec<KeyName> = added.iter().map(|n| KeyName::new(ctx, n)).collect();
    let mut values = vec![home_value];
    let mut floors = vec![home_floor];
    for name in &names {
        let (value, floor) = with_counter(ctx, name.raw, value_and_floor)?;
        let floor = floor.unwrap_or(0);
        if value < floor {
            return Err(HOLDER_BELOW_FLOOR);
        }
        values.push(value);
        floors.push(floor);
    }
    let moves = spread_moves(current, home_value, home_floor, added.len());
    let after = apply_moves(&floors, &values, &moves)
        .map_err(|_| CommandError::fixed("ERR counter overflow"))?;
    for (name, &floor) in names.iter().zip(&after[1..]) {
        write_floor(ctx, name.raw, floor, None)?;
    }
    let spread = spread_record(spread_id, current, added, spread_floor, home_floor);
    write_floor(ctx, home, after[0], Some(spread))
}

/// What a spread starts from at the home: its value, its floor (0 when it has none) and the
/// floor F its holder list records (None before the first spread).
fn home_floor_state(c: Option<CounterRef>) -> (i64, i64, Option<i64>) {
    let (value, floor) = value_and_floor(c);
    let spread_floor = match c {
        Some(CounterRef::Boxed(b)) => b.spread().and_then(|s| s.floor),
        _ => None,
    };
    (value, floor.unwrap_or(0), spread_floor)
}

/// The first spread shares the home's headroom over the home and the `added` holders; a
/// growth moves nothing (the new holders start with what they hold).
fn spread_moves(current: &[Vec<u8>], home_value: i64, home_floor: i64, added: usize) -> Vec<Move> {
    if current.is_empty() {
        initial_moves(home_value.saturating_sub(home_floor), added + 1)
    } else {
        Vec::new()
    }
}

/// The holder list the home records: every holder, with the counter's floor F (the home's
/// floor at the first spread).
fn spread_record(
    id: u64,
    current: &[Vec<u8>],
    added: &[Vec<u8>],
    spread_floor: Option<i64>,
    home_floor: i64,
) -> Spread {
    Spread {
        id,
        holders: current.iter().chain(added).cloned().collect(),
        floor: Some(spread_floor.unwrap_or(home_floor)),
        ceiling: None,
    }
}

/// Records the holders `added` (after `current`) of the floored counter at `home` in a cluster,
/// where they live on other masters: the home records them with the counter's floor F, and on
/// the first spread starts one transfer per holder for its share (the home the giver: its
/// floor up by the share, the holder's floor down by it when the credit lands). The shares
/// arrive in the background; meanwhile they are in flight, in no holder's budget. A holder
/// given no share has no floor of its own, which `CTR.DECRFLOOR` reads as floor 0. Refused,
/// with nothing written, while the home still has a transfer to one of the new holders.
pub fn spread_floored_across_masters(
    ctx: Ctx,
    home: RawString,
    spread_id: u64,
    current: &[Vec<u8>],
    added: &[Vec<u8>],
) -> Result<(), CommandError> {
    let ((home_value, home_floor, spread_floor), busy) = with_counter(ctx, home, |c| {
        let busy = match c {
            Some(CounterRef::Boxed(b)) => added
                .iter()
                .any(|name| b.transfers().is_some_and(|t| t.outgoing_to(name).is_some())),
            _ => false,
        };
        (home_floor_state(c), busy)
    })?;
    if busy {
        return Err(CommandError::fixed(
            "ERR a budget move to one of the new holders is still in flight: retry shortly",
        ));
    }
    let moves = spread_moves(current, home_value, home_floor, added.len());
    let spread = spread_record(spread_id, current, added, spread_floor, home_floor);
    write_floor(ctx, home, home_floor, Some(spread))?;
    // Every new holder gets a move, of its share or of 0 units (a holder added by growing, or
    // when the headroom is smaller than the holder count): its credit makes it floored, so it
    // refuses to go below its floor (a negative CTR.ADD too) before it ever holds budget.
    for (i, receiver) in added.iter().enumerate() {
        let units = moves
            .iter()
            .find(|m| m.receiver == i + 1)
            .map_or(0, |m| m.units);
        super::spread_transfer::start(ctx, home, receiver, Units::floor(-units))?;
    }
    Ok(())
}

/// Sets the floor of the counter at `key` (and, for the home, its spread), replicating the
/// resulting state.
pub(crate) fn write_floor(
    ctx: Ctx,
    key_name: RawString,
    floor: i64,
    spread: Option<Spread>,
) -> Result<(), CommandError> {
    let key = Key::open(ctx, key_name, true);
    let state = update_counter(&key, |c, _| {
        c.set_floor(Some(floor))?;
        if let Some(spread) = spread {
            c.list_spread(spread, list_change_clock(ctx))?;
        }
        Ok(ctr_format::encode(c))
    })?;
    drop(key);
    super::ctr_store::publish_state(ctx, key_name, &state)
}

/// The names of the floored spread counter at `home`, the home first and then its holders;
/// None when `home` is not (or no longer) one.
pub fn floored_spread_names(ctx: Ctx, home: &[u8]) -> Result<Option<Vec<Vec<u8>>>, CommandError> {
    let home_name = KeyName::new(ctx, home);
    let holders = with_counter(ctx, home_name.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => b
            .spread()
            .filter(|s| s.floor.is_some())
            .map(|s| s.holders.clone()),
        _ => None,
    })?;
    Ok(holders.map(|h| std::iter::once(home.to_vec()).chain(h).collect()))
}

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
