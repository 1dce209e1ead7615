//! What a holder's master knows of the whole headroom of its floored spread counter, and the
//! rule that makes a purchase's refusal final or retryable.
//!
//! A holder refuses a purchase larger than its own budget. Whether that refusal is final (a
//! nil recorded against the purchase's token, replayed for the whole token window) depends on
//! the counter as a whole: the contract makes it final only when the counter could not cover
//! the purchase. A holder cannot see the other holders' budgets, so each rebalance round tells
//! every master it polled the whole headroom it saw (every holder's budget, plus the budget
//! moves still travelling): a **bound**, fresh for [`HEADROOM_FRESH_MS`].
//!
//! - A fresh bound below the amount: final (the counter as a whole could not cover it).
//! - A fresh bound that covers it: retryable; the refusal's demand makes the next round move
//!   budget to this holder (fragments gathered toward the largest refused purchase).
//! - No fresh bound (no round yet, or rounds that cannot finish: a master down): retryable for
//!   [`HEADROOM_WAIT_MS`] from the first such refusal, then final. Waiting longer would stall
//!   every sold-out walk behind a round that may never come; a final refusal errs low, it never
//!   sells a unit twice.

/// How long a round's bound decides refusals.
pub const HEADROOM_FRESH_MS: i64 = 1_000;

/// How long refusals wait for a round's bound when none is fresh, before they are final again.
pub const HEADROOM_WAIT_MS: i64 = 1_500;

/// What becomes of a purchase its holder could not cover (when nothing tells: final, which
/// errs low and never sells a unit twice).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Refusal {
    /// The counter as a whole could not cover it (or could not tell in time): recorded.
    #[default]
    Final,
    /// The counter may cover it once budget moves: `TRYAGAIN`, nothing recorded.
    Retry,
}

/// One master's view of one floored spread counter's whole headroom (soft state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeadroomView {
    /// The newest round's bound, when that round ran (the home master's clock), and when the
    /// bound arrived here.
    seen: Option<Seen>,
    /// The first refusal that found no fresh bound, since the last bound arrived.
    waiting_since: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    units: i64,
    round_ms: i64,
    arrived_ms: i64,
}

impl HeadroomView {
    /// A round that ran at `round_ms` saw `units` of headroom in the whole counter; its bound
    /// arrived here at `now_ms`. A bound from an older round than the one held (a message
    /// delayed past a later one) is ignored.
    pub fn saw(&mut self, units: i64, round_ms: i64, now_ms: i64) {
        if self.seen.is_some_and(|s| s.round_ms > round_ms) {
            return;
        }
        self.seen = Some(Seen {
            units,
            round_ms,
            arrived_ms: now_ms,
        });
        self.waiting_since = None;
    }

    /// True when a fresh bound shows that the whole counter could not cover a purchase of
    /// `amount` at `now_ms`: its refusal is a true one. False when no fresh bound tells (the
    /// refusal went final after waiting for one, or rebalancing is off): it may be false.
    pub fn proves_refusal(&self, amount: i64, now_ms: i64) -> bool {
        self.seen.is_some_and(|s| {
            now_ms.saturating_sub(s.arrived_ms) <= HEADROOM_FRESH_MS && amount > s.units
        })
    }

    /// The fate of a purchase of `amount` refused by a holder at `now_ms` (module docs).
    pub fn refusal(&mut self, amount: i64, now_ms: i64) -> Refusal {
        match self.seen {
            Some(s) if now_ms.saturating_sub(s.arrived_ms) <= HEADROOM_FRESH_MS => {
                if amount > s.units {
                    Refusal::Final
                } else {
                    Refusal::Retry
                }
            }
            _ => {
                let since = *self.waiting_since.get_or_insert(now_ms);
                if now_ms.saturating_sub(since) < HEADROOM_WAIT_MS {
                    Refusal::Retry
                } else {
                    Refusal::Final
                }
            }
        }
    }
}

/// The whole headroom a round saw: every holder's budget (a negative one counts 0) plus the
/// budget moving out of it and not yet acknowledged. A move already credited and not yet
/// acknowledged counts twice: the bound errs high, which costs a retry, never a false nil.
pub fn whole_headroom(holders: impl IntoIterator<Item = (i64, i64)>) -> i64 {
    holders
        .into_iter()
        .map(|(budget, moving_out)| budget.max(0).saturating_add(moving_out.max(0)))
        .fold(0, i64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_bound_decides_and_a_stale_one_waits_then_gives_up() {
        let mut view = HeadroomView::default();
        // No round yet: retry, for HEADROOM_WAIT_MS from the first refusal.
        assert_eq!(view.refusal(200, 1_000), Refusal::Retry);
        assert_eq!(
            view.refusal(200, 1_000 + HEADROOM_WAIT_MS - 1),
            Refusal::Retry
        );
        assert_eq!(view.refusal(200, 1_000 + HEADROOM_WAIT_MS), Refusal::Final);
        // A round saw 1,000 units: a purchase of 200 waits for budget, one of 1,001 is final.
        view.saw(1_000, 10_000, 10_000);
        assert_eq!(view.refusal(200, 10_500), Refusal::Retry);
        assert_eq!(view.refusal(1_001, 10_500), Refusal::Final);
        assert_eq!(
            view.refusal(1_000, 10_000 + HEADROOM_FRESH_MS),
            Refusal::Retry
        );
        // Sold out: final at once.
        view.saw(0, 20_000, 20_000);
        assert_eq!(view.refusal(1, 20_001), Refusal::Final);
        // The bound went stale: the wait starts over from the next refusal.
        let later = 20_000 + HEADROOM_FRESH_MS + 1;
        assert_eq!(view.refusal(1, later), Refusal::Retry);
        assert_eq!(view.refusal(1, later + HEADROOM_WAIT_MS), Refusal::Final);
        // A bound from an older round, arriving late, changes nothing.
        view.saw(5_000, 15_000, later + HEADROOM_WAIT_MS);
        assert_eq!(view.refusal(1, later + HEADROOM_WAIT_MS), Refusal::Final);
        view.saw(0, 30_000, 30_000);
        view.saw(5_000, 25_000, 30_001);
        assert_eq!(view.refusal(1, 30_002), Refusal::Final);
    }

    #[test]
    fn the_whole_headroom_counts_budgets_and_moves_in_flight_without_overflow() {
        assert_eq!(whole_headroom([(125, 0), (-3, 0), (0, 75)]), 200);
        assert_eq!(whole_headroom([(i64::MAX, 1), (1, 0)]), i64::MAX);
        assert_eq!(whole_headroom(std::iter::empty()), 0);
    }
}
