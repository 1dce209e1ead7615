//! Floored spread counters, the pure part: how a floored counter's headroom is first shared
//! out over its holders, what a holder records about the purchases it refused (its demand),
//! and the policy that moves budget from holders with spare units toward holders that refuse.
//!
//! A holder `i` is a floored counter with floor `F_i` and value `v_i`; its budget is
//! `b_i = v_i - F_i >= 0`. A budget move of `n` units from giver `g` to receiver `r` raises
//! `F_g` by `n` and lowers `F_r` by `n`: values never move, so the gathered total is exact at
//! every step, and the floors always sum to at least the counter's floor `F` (exactly `F` once
//! no move is in flight). No holder ever goes below its own floor, so the total never goes
//! below `F` (docs/FLOORS.md).

use super::budget_kind::BudgetKind;
use super::floor::split_evenly;
use super::CounterError;

/// `n` units of budget to move from holder `giver` to holder `receiver` (indices into the
/// holder list, the home 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub giver: usize,
    pub receiver: usize,
    pub units: i64,
}

/// The first spread of a floored counter: the home's headroom shared evenly over `holders`
/// holders (the home keeps the first share, with the remainder); one move from the home to
/// each other holder with a share.
pub fn initial_moves(headroom: i64, holders: usize) -> Vec<Move> {
    split_evenly(headroom.max(0), holders)
        .into_iter()
        .enumerate()
        .skip(1)
        .filter(|&(_, units)| units > 0)
        .map(|(receiver, units)| Move {
            giver: 0,
            receiver,
            units,
        })
        .collect()
}

/// The bounds of `kind` after `moves`, applied all at once (one server, where nothing is in
/// flight): floors rise at each giver and fall at each receiver; ceilings fall at each giver and
/// rise at each receiver. An error, with nothing applied, when a giver would end past its new
/// bound (`values`), or a bound or a headroom would overflow.
pub fn apply_moves(
    kind: BudgetKind,
    bounds: &[i64],
    values: &[i64],
    moves: &[Move],
) -> Result<Vec<i64>, CounterError> {
    let mut after = bounds.to_vec();
    for m in moves {
        let (Some(&giver), Some(&receiver)) = (after.get(m.giver), after.get(m.receiver)) else {
            return Err(CounterError::InvalidOperation("move names no holder"));
        };
        if m.units <= 0 || m.giver == m.receiver {
            return Err(CounterError::InvalidOperation("empty move"));
        }
        // What the receiver applies (the giver the opposite): floor units down, ceiling up.
        let units = kind.bound_units(kind.units(m.units));
        after[m.giver] = giver.checked_sub(units).ok_or(CounterError::Overflow)?;
        after[m.receiver] = receiver.checked_add(units).ok_or(CounterError::Overflow)?;
    }
    for (bound, value) in after.iter().zip(values) {
        match i64::try_from(kind.room(*value, *bound)) {
            // A bounded counter holds its headroom in 64 bits.
            Err(_) => return Err(CounterError::Overflow),
            Ok(h) if h < 0 => {
                return Err(CounterError::InvalidOperation("a giver lacks the budget"))
            }
            Ok(_) => {}
        }
    }
    Ok(after)
}

/// What a holder's master records about the purchases the holder refused, counted since the
/// process started (soft state: not persisted, not replicated; a restart starts from 0, which
/// the coordinator reads as a reset). Only fresh refusals count: a retry replaying a recorded
/// refusal is the same purchase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DemandMeter {
    /// Units asked for by refused purchases.
    pub refused_units: u64,
    /// Refused purchases.
    pub refusals: u64,
    /// The largest refused amount since the last report (reset by [`DemandMeter::reported`]).
    pub largest_refused: u64,
    /// A purchase told to retry here while budget gathers (`counter::headroom`): its amount
    /// and until when it counts as waiting. Local only (never sent): it keeps the holder a
    /// demander between its buyer's retries, so a round never takes its budget away.
    pub waiting: Option<(u64, i64)>,
}

/// How long a purchase told to retry keeps its holder a demander after its last retry:
/// longer than a client's longest pause between retries (100 ms).
pub const WAITING_HOLD_MS: i64 = 250;

impl DemandMeter {
    /// A purchase of `amount` refused here at `now_ms` and told to retry: demand now, and
    /// again at each report while its buyer is still retrying ([`DemandMeter::renew_waiting`]).
    pub fn record_wait(&mut self, amount: i64, now_ms: i64) {
        self.record_refusal(amount);
        self.keep_waiting(amount, now_ms);
    }

    /// A purchase of `amount` still waiting here at `now_ms` (a buyer blocked in the server
    /// while budget gathers, no new refusal): it stays a demander, counted again at the next
    /// report ([`DemandMeter::renew_waiting`]) as a retrying buyer's would be.
    pub fn keep_waiting(&mut self, amount: i64, now_ms: i64) {
        let amount = amount.max(0) as u64;
        let held = self.waiting.map_or(0, |(a, _)| a);
        self.waiting = Some((amount.max(held), now_ms.saturating_add(WAITING_HOLD_MS)));
    }

    /// Before a report at `now_ms`: a purchase still waiting and not retried since the last
    /// report counts as a refusal again (the round would otherwise see a giver).
    pub fn renew_waiting(&mut self, now_ms: i64) {
        match self.waiting {
            Some((amount, until)) if now_ms <= until => {
                if self.largest_refused == 0 {
                    self.record_refusal(i64::try_from(amount).unwrap_or(i64::MAX));
                }
            }
            _ => self.waiting = None,
        }
    }

    pub fn record_refusal(&mut self, amount: i64) {
        let amount = amount.max(0) as u64;
        self.refused_units = self.refused_units.saturating_add(amount);
        self.refusals = self.refusals.saturating_add(1);
        self.largest_refused = self.largest_refused.max(amount);
    }

    /// The demand since `earlier` (a reading the coordinator kept); a meter behind it was
    /// restarted, and all it holds is new.
    pub fn since(&self, earlier: &DemandMeter) -> Demand {
        let restarted =
            self.refused_units < earlier.refused_units || self.refusals < earlier.refusals;
        let base = if restarted {
            DemandMeter::default()
        } else {
            *earlier
        };
        Demand {
            refused_units: self.refused_units - base.refused_units,
            refusals: self.refusals - base.refusals,
            largest_refused: self.largest_refused,
        }
    }

    /// After a report: the largest refused amount starts over (the totals keep counting).
    pub fn reported(&mut self) {
        self.largest_refused = 0;
    }
}

/// A holder's demand over one period of the coordinator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    pub refused_units: u64,
    pub refusals: u64,
    pub largest_refused: u64,
}

/// What the coordinator knows of one holder: its budget (value - floor; in-flight units are in
/// no holder's budget) and its demand over the last period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HolderReport {
    pub budget: i64,
    pub demand: Demand,
}

/// The rebalance policy: budget moves from holders that refused nothing to holders that
/// refused for want of units.
///
/// - A refusing holder wants what it refused over the period (`refused_units`), at least
///   enough for its largest refused purchase beyond what it holds, and at least what brings it
///   to an even share of the whole budget: a buyer waiting in the server asks one purchase at
///   a time, and its demand alone would move about one unit a round (a hot holder across
///   masters sold 397 units in 13 s so).
/// - A holder that refused nothing gives at most half its budget per period: it may be
///   selling too, and halving converges geometrically without draining a giver into refusing
///   (which would pull budget straight back).
/// - Largest wants are served first, from the largest spares, at most `max_moves` moves.
/// - When nobody has spare (every holder refused) but the whole headroom covers the largest
///   refused purchase, the holder with the largest budget gathers it from the others
///   (fragmentation: 4 holders of 3 units refusing a purchase of 10).
/// - No refusals, no moves: budgets stay where the sales put them.
pub fn plan_moves(holders: &[HolderReport], max_moves: usize) -> Vec<Move> {
    let whole_budget = holders
        .iter()
        .map(|h| h.budget.max(0))
        .fold(0, i64::saturating_add);
    let even_share = whole_budget / i64::try_from(holders.len().max(1)).unwrap_or(i64::MAX);
    let want = |h: &HolderReport| -> i64 {
        let d = h.demand;
        if d.refusals == 0 {
            return 0;
        }
        let largest_short = clamp(d.largest_refused).saturating_sub(h.budget.max(0));
        let to_even = even_share.saturating_sub(h.budget.max(0));
        clamp(d.refused_units).max(largest_short).max(to_even)
    };
    let mut wants: Vec<(usize, i64)> = holders
        .iter()
        .enumerate()
        .map(|(i, h)| (i, want(h)))
        .filter(|&(_, w)| w > 0)
        .collect();
    let mut spares: Vec<(usize, i64)> = holders
        .iter()
        .enumerate()
        .filter(|(_, h)| h.demand.refusals == 0)
        .map(|(i, h)| (i, h.budget.max(0) / 2))
        .filter(|&(_, s)| s > 0)
        .collect();
    if spares.is_empty() {
        return gather_for_largest(holders, max_moves);
    }
    wants.sort_by_key(|&(i, w)| (std::cmp::Reverse(w), i));
    spares.sort_by_key(|&(i, s)| (std::cmp::Reverse(s), i));
    let mut moves = Vec::new();
    for (receiver, mut wanted) in wants {
        for (giver, spare) in spares.iter_mut() {
            if moves.len() >= max_moves || wanted == 0 {
                break;
            }
            let units = wanted.min(*spare);
            if units > 0 {
                moves.push(Move {
                    giver: *giver,
                    receiver,
                    units,
                });
                *spare -= units;
                wanted -= units;
            }
        }
    }
    moves
}

/// The moves `planned` as they travel across masters: through the home (index 0). A move
/// between two holders becomes one from the giver to the home and one from the home to the
/// receiver (the home gives at most what it holds when the give reaches it: what the giver
/// sends refills it). The moves of one pair are merged into one (a pair has one move in flight
/// at a time), in the order first planned. Why: the home asks a holder to seal only once its
/// own move toward it is answered, so no move can outlive its receiver; a move between holders
/// could reach a holder folded and expired meanwhile, and be held there for good.
pub fn through_the_home(planned: &[Move]) -> Vec<Move> {
    let mut moves: Vec<Move> = Vec::new();
    let mut add = |giver: usize, receiver: usize, units: i64| match moves
        .iter_mut()
        .find(|m| (m.giver, m.receiver) == (giver, receiver))
    {
        Some(m) => m.units = m.units.saturating_add(units),
        None => moves.push(Move {
            giver,
            receiver,
            units,
        }),
    };
    for m in planned {
        if m.giver == 0 || m.receiver == 0 {
            add(m.giver, m.receiver, m.units);
        } else {
            add(m.giver, 0, m.units);
            add(0, m.receiver, m.units);
        }
    }
    moves
}

/// Every holder refused: the holder with the largest refused purchase that the headroom
/// covers and its own budget does not (of equals, the one holding most) takes from the others
/// (largest first) until it covers it. The buyer retries where it was refused (a `TRYAGAIN` is
/// retried at the same holder), so the budget goes there, not to whichever holder has most.
/// A refusal larger than the whole headroom (final, or about to be) never blocks the others.
fn gather_for_largest(holders: &[HolderReport], max_moves: usize) -> Vec<Move> {
    let headroom: i64 = holders
        .iter()
        .map(|h| h.budget.max(0))
        .fold(0, i64::saturating_add);
    let Some((receiver, largest, held)) = holders
        .iter()
        .enumerate()
        .map(|(i, h)| (i, clamp(h.demand.largest_refused), h.budget.max(0)))
        .filter(|&(_, largest, held)| largest > held && largest <= headroom)
        .max_by_key(|&(i, largest, held)| (largest, held, std::cmp::Reverse(i)))
    else {
        return Vec::new();
    };
    let mut others: Vec<(usize, i64)> = holders
        .iter()
        .enumerate()
        .filter(|&(i, h)| i != receiver && h.budget > 0)
        .map(|(i, h)| (i, h.budget))
        .collect();
    others.sort_by_key(|&(i, b)| (std::cmp::Reverse(b), i));
    let mut missing = largest - held;
    let mut moves = Vec::new();
    for (giver, budget) in others {
        if missing == 0 || moves.len() >= max_moves {
            break;
        }
        let units = budget.min(missing);
        moves.push(Move {
            giver,
            receiver,
            units,
        });
        missing -= units;
    }
    moves
}

fn clamp(units: u64) -> i64 {
    i64::try_from(units).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(budget: i64, refused_units: u64, refusals: u64, largest: u64) -> HolderReport {
        HolderReport {
            budget,
            demand: Demand {
                refused_units,
                refusals,
                largest_refused: largest,
            },
        }
    }

    fn budgets_after(holders: &[HolderReport], moves: &[Move]) -> Vec<i64> {
        let mut budgets: Vec<i64> = holders.iter().map(|h| h.budget).collect();
        for m in moves {
            budgets[m.giver] -= m.units;
            budgets[m.receiver] += m.units;
        }
        budgets
    }

    #[test]
    fn the_first_spread_shares_the_headroom_evenly_from_the_home() {
        let moves = initial_moves(10, 4);
        assert_eq!(
            moves
                .iter()
                .map(|m| (m.giver, m.receiver, m.units))
                .collect::<Vec<_>>(),
            vec![(0, 1, 3), (0, 2, 2), (0, 3, 2)]
        );
        assert!(initial_moves(2, 4).iter().all(|m| m.units == 1));
        assert_eq!(initial_moves(2, 4).len(), 1, "holder 3 gets nothing");
        assert!(initial_moves(0, 16).is_empty());
        assert!(initial_moves(-5, 16).is_empty());
        // Home floor 100, value 110: the home keeps 3 units, the others 3, 2, 2.
        let floors =
            apply_moves(BudgetKind::Down, &[100, 0, 0, 0], &[110, 0, 0, 0], &moves).unwrap();
        assert_eq!(floors, vec![107, -3, -2, -2]);
        assert_eq!(
            floors.iter().sum::<i64>(),
            100,
            "the floors sum to the floor"
        );
    }

    #[test]
    fn moves_that_a_giver_cannot_cover_or_that_overflow_change_nothing() {
        let give = |units| Move {
            giver: 0,
            receiver: 1,
            units,
        };
        assert!(apply_moves(BudgetKind::Down, &[0, 0], &[5, 0], &[give(6)]).is_err());
        assert!(apply_moves(BudgetKind::Down, &[0, 0], &[5, 0], &[give(0)]).is_err());
        assert!(apply_moves(BudgetKind::Down, &[0, i64::MIN], &[5, 0], &[give(1)]).is_err());
        let deep = apply_moves(BudgetKind::Down, &[0, -i64::MAX + 1], &[5, 5], &[give(1)]);
        assert!(deep.is_err(), "holder 1's headroom would not fit");
        let to_nobody = Move {
            giver: 0,
            receiver: 9,
            units: 1,
        };
        assert!(apply_moves(BudgetKind::Down, &[0, 0], &[5, 0], &[to_nobody]).is_err());
        assert_eq!(
            apply_moves(BudgetKind::Down, &[0, 0], &[5, 0], &[give(5)]).unwrap(),
            [5, -5]
        );
        // Ceilings, the mirror: the giver's falls, the receiver's rises; no more than its room.
        let up = |ceilings: &[i64], values: &[i64], n| {
            apply_moves(BudgetKind::Up, ceilings, values, &[give(n)])
        };
        assert_eq!(up(&[20, 0], &[5, -1], 15).unwrap(), [5, 15]);
        assert!(up(&[20, 0], &[5, -1], 16).is_err(), "15 units of room");
        assert!(up(&[i64::MIN + 1, 0], &[i64::MIN, 0], 2).is_err());
    }

    #[test]
    fn the_meter_counts_fresh_refusals_and_survives_a_restart() {
        let mut meter = DemandMeter::default();
        meter.record_refusal(3);
        meter.record_refusal(7);
        let kept = meter;
        meter.reported();
        meter.record_refusal(2);
        let d = meter.since(&kept);
        assert_eq!((d.refused_units, d.refusals, d.largest_refused), (2, 1, 2));
        let mut restarted = DemandMeter::default();
        restarted.record_refusal(4);
        let d = restarted.since(&kept);
        assert_eq!((d.refused_units, d.refusals), (4, 1), "all of it is new");
        let mut huge = DemandMeter {
            refused_units: u64::MAX,
            ..DemandMeter::default()
        };
        huge.record_refusal(i64::MAX);
        assert_eq!(huge.refused_units, u64::MAX, "saturates");
    }

    #[test]
    fn a_waiting_purchase_keeps_its_holder_a_demander_until_its_buyer_stops_retrying() {
        let mut meter = DemandMeter::default();
        meter.record_wait(200, 1_000);
        meter.reported();
        // No retry since the report: the wait still counts, once per report.
        meter.renew_waiting(1_100);
        assert_eq!((meter.refusals, meter.largest_refused), (2, 200));
        meter.renew_waiting(1_100);
        assert_eq!(meter.refusals, 2);
        meter.reported();
        // The buyer stopped retrying: past the hold, the holder is no demander any more.
        meter.renew_waiting(1_000 + WAITING_HOLD_MS + 1);
        assert_eq!((meter.refusals, meter.largest_refused), (2, 0));
        assert_eq!(meter.waiting, None);
    }

    #[test]
    fn no_refusals_no_moves() {
        let holders = [report(0, 0, 0, 0), report(100, 0, 0, 0)];
        assert!(plan_moves(&holders, 16).is_empty());
    }

    #[test]
    fn budget_moves_from_spare_toward_refusing_holders() {
        let holders = [
            report(100, 0, 0, 0),
            report(0, 12, 6, 2),
            report(40, 0, 0, 0),
            report(1, 30, 3, 10),
        ];
        let moves = plan_moves(&holders, 16);
        let after = budgets_after(&holders, &moves);
        assert_eq!(after.iter().sum::<i64>(), 141, "moves keep the headroom");
        // Each demander reaches an even share (141 / 4 = 35), more than it refused (12, 30).
        assert_eq!(after[1], 35, "the largest want first, in full");
        assert_eq!(after[3], 35);
        assert!(
            after[0] >= 50 && after[2] >= 20,
            "a giver keeps half: {after:?}"
        );
        assert!(moves.iter().all(|m| m.units > 0 && m.giver != m.receiver));
        assert!(plan_moves(&holders, 1).len() == 1, "bounded per period");
    }

    #[test]
    fn wants_beyond_the_spare_get_what_there_is() {
        let holders = [report(10, 0, 0, 0), report(0, 100, 50, 2)];
        let moves = plan_moves(&holders, 16);
        assert_eq!(
            moves,
            vec![Move {
                giver: 0,
                receiver: 1,
                units: 5
            }]
        );
    }

    #[test]
    fn sold_out_moves_nothing_and_fragments_are_gathered() {
        let sold_out = [report(0, 5, 5, 1), report(0, 9, 9, 1)];
        assert!(plan_moves(&sold_out, 16).is_empty());
        // Every holder refused a purchase of 10; 12 units in all: holder 1 (most in hand of
        // equals) gathers 10.
        let fragmented = [
            report(3, 10, 1, 10),
            report(4, 10, 1, 10),
            report(3, 10, 1, 10),
            report(2, 10, 1, 10),
        ];
        let moves = plan_moves(&fragmented, 16);
        let after = budgets_after(&fragmented, &moves);
        assert_eq!(after[1], 10, "{moves:?}");
        assert_eq!(after.iter().sum::<i64>(), 12);
        assert!(after.iter().all(|&b| b >= 0));
        // The largest purchase was refused at the poorest holder: the budget goes there,
        // where its buyer retries.
        let at_the_poorest = [report(5, 6, 1, 6), report(6, 7, 1, 7), report(1, 10, 1, 10)];
        let after = budgets_after(&at_the_poorest, &plan_moves(&at_the_poorest, 16));
        assert_eq!(
            after,
            [2, 0, 10],
            "the poorest holder gathers its buyer's 10"
        );
        // Near sold out: a refusal beyond the whole headroom (5) does not keep a purchase the
        // headroom covers from being gathered.
        let near_sold_out = [report(1, 9, 1, 9), report(2, 3, 1, 3), report(2, 1, 1, 1)];
        let after = budgets_after(&near_sold_out, &plan_moves(&near_sold_out, 16));
        assert_eq!(after[1], 3, "holder 1 gathers its buyer's 3: {after:?}");
        // More than the whole headroom: nothing to gather.
        let short = [report(3, 20, 1, 20), report(4, 20, 1, 20)];
        assert!(plan_moves(&short, 16).is_empty());
    }

    #[test]
    fn moves_between_holders_go_through_the_home_one_per_pair() {
        let mv = |giver, receiver, units| Move {
            giver,
            receiver,
            units,
        };
        let planned = [mv(1, 2, 5), mv(0, 3, 4), mv(3, 2, 1), mv(1, 0, 2)];
        assert_eq!(
            through_the_home(&planned),
            vec![mv(1, 0, 7), mv(0, 2, 6), mv(0, 3, 4), mv(3, 0, 1)]
        );
        assert_eq!(through_the_home(&[]), Vec::new());
        let total = |moves: &[Move], i: usize| -> i64 {
            moves
                .iter()
                .map(|m| match i {
                    _ if m.receiver == i => m.units,
                    _ if m.giver == i => -m.units,
                    _ => 0,
                })
                .sum()
        };
        let routed = through_the_home(&planned);
        for holder in 1..4 {
            assert_eq!(total(&routed, holder), total(&planned, holder), "{holder}");
        }
    }

    /// A buyer waiting in the server at a holder with nothing asks one unit at a time: the
    /// round brings that holder to an even share, not the one unit.
    #[test]
    fn a_holder_that_waits_for_one_unit_gets_an_even_share() {
        let holders = [
            report(100, 0, 0, 0),
            report(100, 0, 0, 0),
            report(100, 0, 0, 0),
            report(0, 1, 1, 1),
        ];
        let after = budgets_after(&holders, &plan_moves(&holders, 16));
        assert_eq!(after, vec![50, 75, 100, 75], "each giver keeps half");
    }
}
