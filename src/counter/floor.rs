//! Floors and per-shard reservation budgets.
//!
//! A floored counter holds its headroom (value - floor) as one budget per shard; the budgets
//! are never negative and always sum to the headroom. A decrement takes from the budget of the
//! shard the master picked and, when that one is short, from the next shards in turn, so it is
//! refused only when the whole headroom is short: no false refusal on one server, and never an
//! oversell. Each shard is a *holder* that could decide alone within its own budget; that is what
//! lets a floored counter spread later across cluster nodes and regions (docs/FLOORS.md).

use super::CounterError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Floor {
    pub floor: i64,
    /// One per shard, each >= 0, summing to value - floor.
    pub budgets: Vec<i64>,
}

/// A ceiling, the mirror of a floor: no write takes the value above `ceiling`. Its headroom
/// (ceiling - value) is held as one budget per shard, each >= 0, summing to the headroom: an
/// increment takes from the budgets as a decrement takes from a floor's, a decrement gives back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ceiling {
    pub ceiling: i64,
    /// One per shard, each >= 0, summing to ceiling - value.
    pub budgets: Vec<i64>,
}

/// The amounts a walk over `budgets` takes to cover `need`: from shard `start`, then the next
/// shards in turn, each giving what it holds. None when the budgets together are short.
pub fn walk(budgets: &[i64], start: usize, need: i64) -> Option<Vec<(usize, i64)>> {
    let n = budgets.len();
    let mut takes = Vec::new();
    let mut remaining = need;
    for offset in 0..n {
        if remaining <= 0 {
            break;
        }
        let j = (start + offset) % n;
        let take = budgets[j].clamp(0, remaining);
        if take > 0 {
            takes.push((j, take));
            remaining -= take;
        }
    }
    (remaining <= 0).then_some(takes)
}

/// `headroom` split over `n` shards as evenly as integers allow (the first shards get the
/// remainder).
pub fn split_evenly(headroom: i64, n: usize) -> Vec<i64> {
    let n = n.max(1);
    let share = headroom / n as i64;
    let extra = (headroom % n as i64) as usize;
    (0..n).map(|i| share + i64::from(i < extra)).collect()
}

/// Takes `need` from the budgets starting at shard `start` and moving on to the next shards in
/// turn, and the same amounts from the matching shard `values` (empty for a single-shard counter,
/// whose only value is the counter's own). Ok(false), with nothing changed, when the budgets
/// together are short; everything is checked before anything changes.
pub fn debit(
    budgets: &mut [i64],
    values: &mut [i64],
    start: usize,
    need: i64,
) -> Result<bool, CounterError> {
    let n = budgets.len();
    // Two passes over the same walk: check everything, then change it.
    for apply in [false, true] {
        let mut remaining = need;
        for offset in 0..n {
            if remaining <= 0 {
                break;
            }
            let j = (start + offset) % n;
            let take = budgets[j].min(remaining);
            remaining -= take;
            if apply {
                budgets[j] -= take;
                if let Some(v) = values.get_mut(j) {
                    *v -= take;
                }
            } else if values.get(j).is_some_and(|v| v.checked_sub(take).is_none()) {
                return Err(CounterError::Overflow);
            }
        }
        if remaining != 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Values resized to `target` slots: new slots start at 0; a shrink folds slot `i` into
/// `i % target`, so the sum never changes.
pub fn resize(values: &[i64], target: usize) -> Result<Vec<i64>, CounterError> {
    if values.len() == target {
        return Ok(values.to_vec());
    }
    let mut resized = vec![0i64; target.max(1)];
    let len = resized.len();
    for (i, v) in values.iter().enumerate() {
        let slot = &mut resized[i % len];
        *slot = slot.checked_add(*v).ok_or(CounterError::Overflow)?;
    }
    Ok(resized)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_split_sums_to_the_headroom() {
        assert_eq!(split_evenly(10, 3), vec![4, 3, 3]);
        assert_eq!(split_evenly(0, 4), vec![0, 0, 0, 0]);
        assert_eq!(
            split_evenly(i64::MAX, 2)
                .iter()
                .map(|b| *b as i128)
                .sum::<i128>(),
            i64::MAX as i128
        );
        assert_eq!(split_evenly(5, 1), vec![5]);
    }

    #[test]
    fn debit_takes_from_the_chosen_shard_then_the_next() {
        let take = |budgets: &[i64], start, need| {
            let mut b = budgets.to_vec();
            let mut v = vec![100i64; b.len()];
            let ok = debit(&mut b, &mut v, start, need).unwrap();
            (ok, b, v)
        };
        assert_eq!(
            take(&[2, 5, 1], 0, 4),
            (true, vec![0, 3, 1], vec![98, 98, 100])
        );
        assert_eq!(
            take(&[2, 5, 1], 2, 4),
            (true, vec![0, 4, 0], vec![98, 99, 99])
        );
        assert_eq!(
            take(&[2, 5, 1], 2, 8),
            (true, vec![0, 0, 0], vec![98, 95, 99])
        );
        assert_eq!(
            take(&[2, 5, 1], 1, 9),
            (false, vec![2, 5, 1], vec![100; 3]),
            "short: unchanged"
        );
        let mut b = vec![3];
        assert!(
            debit(&mut b, &mut [], 0, 3).unwrap(),
            "a single shard has no values to adjust"
        );
        assert_eq!(b, vec![0]);
        let mut v = vec![i64::MIN];
        assert!(
            debit(&mut [1], &mut v, 0, 1).is_err(),
            "a shard value cannot underflow"
        );
        assert_eq!(v, vec![i64::MIN]);
    }

    #[test]
    fn a_walk_takes_from_the_start_then_the_next_shards() {
        assert_eq!(walk(&[2, 5, 1], 0, 4), Some(vec![(0, 2), (1, 2)]));
        assert_eq!(walk(&[2, 5, 1], 2, 4), Some(vec![(2, 1), (0, 2), (1, 1)]));
        assert_eq!(walk(&[2, 5, 1], 1, 9), None, "short");
        assert_eq!(walk(&[0, 0], 1, 0), Some(vec![]), "nothing needed");
        assert_eq!(
            walk(&[i64::MAX, i64::MAX], 0, i64::MAX),
            Some(vec![(0, i64::MAX)])
        );
    }

    #[test]
    fn resize_keeps_the_sum() {
        assert_eq!(resize(&[1, 2], 4).unwrap(), vec![1, 2, 0, 0]);
        assert_eq!(resize(&[1, 2, 3, 4], 2).unwrap(), vec![4, 6]);
        assert_eq!(resize(&[1, 2, 3, 4], 1).unwrap(), vec![10]);
        assert!(resize(&[i64::MAX, 0, 1, 0], 2).is_err());
    }
}
