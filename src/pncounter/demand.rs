//! Rights follow demand: the rule `pnc-sync` (and the bounded counter's simulator) use to move
//! decrement rights from the deployments with slack to those that spend or refuse.
//!
//! Each round, every deployment reports its rights now and its *demand* since the previous
//! round: the units it decremented plus the units it refused. The rights all deployments hold
//! together are shared out in proportion to `demand + slack`, where the slack term,
//! `max(1, total demand / (2 x deployments))`, keeps a share at every deployment (a quiet one
//! can still serve a burst before the next round). Deployments above their share give the
//! surplus to those below, largest need first; moves smaller than 1% of the rights are skipped
//! (churn). The rule only ever plans gifts a giver's own rights cover.
//!
//! Plain Rust without dependencies: `pnc-sync` includes this file as its own module.

/// One deployment as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    /// Its rights now (may be negative after decrements made without a floor in force).
    pub rights: i64,
    /// Units it decremented plus units it refused since the previous round.
    pub demand: u64,
}

/// A planned gift: `amount` rights from deployment `from` to deployment `to` (indexes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gift {
    pub from: usize,
    pub to: usize,
    pub amount: i64,
}

/// Each deployment's share of the rights held in total, by demand plus slack.
pub fn shares(holders: &[Holder]) -> Vec<i64> {
    let total: i128 = holders.iter().map(|h| i128::from(h.rights.max(0))).sum();
    let n = holders.len().max(1) as u128;
    let demand: u128 = holders.iter().map(|h| u128::from(h.demand)).sum();
    let slack = (demand / (2 * n)).max(1);
    let weights: Vec<u128> = holders
        .iter()
        .map(|h| u128::from(h.demand) + slack)
        .collect();
    let sum: u128 = weights.iter().sum::<u128>().max(1);
    weights
        .iter()
        .map(|w| {
            let share = (total.max(0) as u128).saturating_mul(*w) / sum;
            i64::try_from(share).unwrap_or(i64::MAX)
        })
        .collect()
}

/// The gifts that bring every deployment toward its share.
pub fn plan(holders: &[Holder]) -> Vec<Gift> {
    let targets = shares(holders);
    let total: i128 = holders.iter().map(|h| i128::from(h.rights.max(0))).sum();
    let smallest = i64::try_from(total / 100).unwrap_or(i64::MAX).max(1);
    let mut surplus: Vec<(usize, i64)> = Vec::new();
    let mut needs: Vec<(usize, i64)> = Vec::new();
    for (i, (h, target)) in holders.iter().zip(&targets).enumerate() {
        let gap = i128::from(*target) - i128::from(h.rights);
        let gap = i64::try_from(gap).unwrap_or(if gap > 0 { i64::MAX } else { i64::MIN });
        if gap > 0 {
            needs.push((i, gap));
        } else if gap < 0 {
            // Never more than it holds.
            surplus.push((i, gap.saturating_neg().min(h.rights.max(0))));
        }
    }
    needs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    surplus.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut gifts = Vec::new();
    for (to, mut need) in needs {
        for (from, left) in surplus.iter_mut() {
            if need == 0 {
                break;
            }
            let amount = need.min(*left);
            if amount >= smallest {
                gifts.push(Gift {
                    from: *from,
                    to,
                    amount,
                });
                *left -= amount;
                need -= amount;
            }
        }
    }
    gifts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holders(list: &[(i64, u64)]) -> Vec<Holder> {
        list.iter()
            .map(|&(rights, demand)| Holder { rights, demand })
            .collect()
    }

    #[test]
    fn rights_move_from_slack_to_demand() {
        let h = holders(&[(900, 0), (0, 300), (100, 0)]);
        let gifts = plan(&h);
        assert!(gifts.iter().all(|g| g.from == 0), "{gifts:?}");
        let received: i64 = gifts.iter().filter(|g| g.to == 1).map(|g| g.amount).sum();
        // Demand 300 of 300, slack 50 each: the busy one's share is 1000 * 350 / 450.
        assert_eq!(received, 777);
    }

    #[test]
    fn every_deployment_keeps_a_share_and_nobody_gives_what_it_lacks() {
        let h = holders(&[(-50, 0), (10, 1000), (990, 0)]);
        let s = shares(&h);
        assert!(s.iter().all(|x| *x > 0), "{s:?}");
        for g in plan(&h) {
            assert!(g.amount > 0);
            assert!(h[g.from].rights >= g.amount);
        }
        let given: i64 = plan(&h)
            .iter()
            .filter(|g| g.from == 0)
            .map(|g| g.amount)
            .sum();
        assert_eq!(given, 0, "negative rights give nothing");
    }

    #[test]
    fn balanced_or_empty_plans_nothing() {
        assert!(plan(&holders(&[(100, 10), (100, 10), (100, 10)])).is_empty());
        assert!(plan(&holders(&[(0, 5), (0, 0)])).is_empty());
        assert!(plan(&[]).is_empty());
    }
}
