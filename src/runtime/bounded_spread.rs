//! `CTR.SPREAD` of a bounded counter (a floor, a ceiling, or both): each holder is a bounded
//! counter of its own, and the first spread shares the home's room evenly, its headroom above
//! the floor and its room below the ceiling (counter/rebalance.rs): the home's floor goes up by
//! what it gives and each holder's down by its share; the home's ceiling goes down by what it
//! gives and each holder's up by its share; values are untouched. On one server every holder is
//! written in the same command, so nothing is ever in flight. Across cluster masters each
//! share is a budget move from the home (a transfer of `df = -floor share, dc = ceiling share`),
//! delivered in the background. A grow moves nothing: each new holder gets a move of 0 units,
//! whose credit bounds it (its name holds it meanwhile).

use super::ctr_store::{list_change_clock, update_counter, with_counter};

use crate::counter::budget_kind::BudgetKind;
use crate::counter::rebalance::{apply_moves, initial_moves, Move};
use crate::counter::transfer::Units;
use crate::counter::{CounterRef, Spread};
use crate::ffi::{CommandError, Ctx, Key, KeyName, RawString};
use crate::persist::ctr_format;

const HOLDER_PAST_ITS_BOUND: CommandError =
    CommandError::fixed("ERR a holder key already holds a counter past its floor or ceiling");

/// A counter's value and bounds as a spread (and a rebalance on one server) reads them.
#[derive(Clone, Copy)]
pub struct Bounded {
    pub value: i64,
    floor: Option<i64>,
    ceiling: Option<i64>,
}

impl Bounded {
    pub fn of(c: Option<CounterRef>) -> Bounded {
        match c {
            Some(CounterRef::Boxed(b)) => Bounded {
                value: b.value(),
                floor: b.floor().map(|f| f.floor),
                ceiling: b.ceiling().map(|c| c.ceiling),
            },
            Some(c) => Bounded {
                value: c.value(),
                floor: None,
                ceiling: None,
            },
            None => Bounded {
                value: 0,
                floor: None,
                ceiling: None,
            },
        }
    }

    /// The bound of `kind`.
    pub fn bound(self, kind: BudgetKind) -> Option<i64> {
        match kind {
            BudgetKind::Down => self.floor,
            BudgetKind::Up => self.ceiling,
        }
    }

    fn set_bound(&mut self, kind: BudgetKind, bound: i64) {
        match kind {
            BudgetKind::Down => self.floor = Some(bound),
            BudgetKind::Up => self.ceiling = Some(bound),
        }
    }

    /// Its room under the bound of `kind` (0 when it has none), saturated.
    fn room(self, kind: BudgetKind) -> i64 {
        self.bound(kind)
            .map_or(0, |bound| kind.room_clamped(self.value, bound))
    }
}

/// The home of a bounded spread: its own state, and the spread's bounds its holder list records
/// (None before the first spread: then the home's own).
struct Home {
    own: Bounded,
    spread_floor: Option<i64>,
    spread_ceiling: Option<i64>,
}

fn home_of(c: Option<CounterRef>) -> Home {
    let spread = match c {
        Some(CounterRef::Boxed(b)) => b.spread().cloned(),
        _ => None,
    };
    Home {
        own: Bounded::of(c),
        spread_floor: spread.as_ref().and_then(|s| s.floor),
        spread_ceiling: spread.and_then(|s| s.ceiling),
    }
}

/// The kinds of bound the spread of `home` shares: its floor's, its ceiling's.
fn kinds(home: &Home) -> Vec<BudgetKind> {
    [BudgetKind::Down, BudgetKind::Up]
        .into_iter()
        .filter(|k| home.own.bound(*k).is_some())
        .collect()
}

/// The first spread shares the home's room of `kind` over the home and the `added` holders; a
/// growth moves nothing (the new holders start with what they hold).
fn shares(current: &[Vec<u8>], home: Bounded, kind: BudgetKind, added: usize) -> Vec<Move> {
    match current.is_empty() {
        true => initial_moves(home.room(kind), added + 1),
        false => Vec::new(),
    }
}

/// The holder list the home records, with the spread's bounds (the home's own at the first
/// spread).
fn record(id: u64, current: &[Vec<u8>], added: &[Vec<u8>], home: &Home) -> Spread {
    Spread {
        id,
        holders: current.iter().chain(added).cloned().collect(),
        floor: home.spread_floor.or(home.own.floor),
        ceiling: home.spread_ceiling.or(home.own.ceiling),
    }
}

/// Records the holders `added` (after `current`) of the bounded counter at `home`, on one
/// server: every new holder becomes bounded as the home is (at 0 when it is missing or has no
/// such bound); on the first spread the home's room is shared evenly over all holders.
/// Everything is checked before anything is written; each written key is replicated as its
/// resulting state.
pub fn spread_bounded(
    ctx: Ctx,
    home_key: RawString,
    spread_id: u64,
    current: &[Vec<u8>],
    added: &[Vec<u8>],
) -> Result<(), CommandError> {
    let home = with_counter(ctx, home_key, home_of)?;
    let names: Vec<KeyName> = added.iter().map(|n| KeyName::new(ctx, n)).collect();
    let mut members = vec![home.own];
    for name in &names {
        let mut holder = with_counter(ctx, name.raw, Bounded::of)?;
        for kind in kinds(&home) {
            holder.set_bound(kind, holder.bound(kind).unwrap_or(0));
            if holder.room(kind) < 0 {
                return Err(HOLDER_PAST_ITS_BOUND);
            }
        }
        members.push(holder);
    }
    let overflow = |_| CommandError::fixed("ERR counter overflow");
    let values: Vec<i64> = members.iter().map(|m| m.value).collect();
    let mut after: Vec<Bounded> = members.clone();
    for kind in kinds(&home) {
        let bounds: Vec<i64> = members.iter().map(|m| m.bound(kind).unwrap_or(0)).collect();
        let moves = shares(current, home.own, kind, added.len());
        let moved = apply_moves(kind, &bounds, &values, &moves).map_err(overflow)?;
        for (member, bound) in after.iter_mut().zip(moved) {
            member.set_bound(kind, bound);
        }
    }
    for (name, holder) in names.iter().zip(&after[1..]) {
        write_share(ctx, name.raw, *holder, None)?;
    }
    let spread = record(spread_id, current, added, &home);
    write_share(ctx, home_key, after[0], Some(spread))
}

/// Records the holders `added` (after `current`) of the bounded counter at `home` in a cluster,
/// where they live on other masters: the home records them with the spread's bounds, and starts
/// one transfer per new holder: its shares on the first spread (the home the giver), 0 units on
/// a growth (the credit bounds the holder). The shares arrive in the background; meanwhile they
/// are in flight, in no holder's room. Refused, with nothing written, while the home still has
/// a transfer to one of the new holders.
pub fn spread_bounded_across_masters(
    ctx: Ctx,
    home_key: RawString,
    spread_id: u64,
    current: &[Vec<u8>],
    added: &[Vec<u8>],
) -> Result<(), CommandError> {
    let (home, busy) = with_counter(ctx, home_key, |c| {
        let busy = match c {
            Some(CounterRef::Boxed(b)) => added
                .iter()
                .any(|name| b.transfers().is_some_and(|t| t.outgoing_to(name).is_some())),
            _ => false,
        };
        (home_of(c), busy)
    })?;
    if busy {
        return Err(CommandError::fixed(
            "ERR a budget move to one of the new holders is still in flight: retry shortly",
        ));
    }
    let spread = record(spread_id, current, added, &home);
    write_share(ctx, home_key, home.own, Some(spread))?;
    let planned: Vec<(BudgetKind, Vec<Move>)> = kinds(&home)
        .into_iter()
        .map(|kind| (kind, shares(current, home.own, kind, added.len())))
        .collect();
    for (i, receiver) in added.iter().enumerate() {
        let mut units = Units::default();
        for (kind, moves) in &planned {
            let share = moves
                .iter()
                .find(|m| m.receiver == i + 1)
                .map_or(0, |m| m.units);
            let moved = kind.units(share);
            (units.df, units.dc) = (units.df + moved.df, units.dc + moved.dc);
        }
        super::spread_transfer::start(ctx, home_key, receiver, units)?;
    }
    Ok(())
}

/// A bounded spread counter's members, the home first, and the kind of budget it moves.
pub type Members = (BudgetKind, Vec<Vec<u8>>);

/// The kind of budget the bounded spread counter at `home` moves, and its names, the home first
/// and then its holders; None when `home` is not (or no longer) one.
pub fn bounded_spread_names(ctx: Ctx, home: &[u8]) -> Result<Option<Members>, CommandError> {
    let home_name = KeyName::new(ctx, home);
    let found = with_counter(ctx, home_name.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => {
            let (_, kind) = BudgetKind::of_member(home, Some(b))?;
            Some((kind, b.spread()?.holders.clone()))
        }
        _ => None,
    })?;
    Ok(found.map(|(kind, holders)| {
        (
            kind,
            std::iter::once(home.to_vec()).chain(holders).collect(),
        )
    }))
}

/// Sets the bound of `kind` of the counter at `key` (a rebalance on one server, where nothing
/// is in flight), replicating the resulting state.
pub fn write_bound(
    ctx: Ctx,
    key_name: RawString,
    kind: BudgetKind,
    bound: i64,
) -> Result<(), CommandError> {
    let mut bounds = Bounded::of(None);
    bounds.set_bound(kind, bound);
    write_share(ctx, key_name, bounds, None)
}

/// Sets the counter at `key` to its share `bounds` (and, for the home, records its spread),
/// replicating the resulting state.
fn write_share(
    ctx: Ctx,
    key_name: RawString,
    bounds: Bounded,
    spread: Option<Spread>,
) -> Result<(), CommandError> {
    let key = Key::open(ctx, key_name, true);
    let state = update_counter(&key, |c, _| {
        c.take_share(bounds.floor, bounds.ceiling)?;
        if let Some(spread) = spread {
            c.list_spread(spread, list_change_clock(ctx))?;
        }
        Ok(ctr_format::encode(c))
    })?;
    drop(key);
    super::ctr_store::publish_state(ctx, key_name, &state)
}
