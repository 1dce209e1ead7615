//! Folded holders a home remembers by their place rather than by an inbox entry each, the pure
//! part (the home's side of `crate::counter::transfer`).
//!
//! A shrink that keeps the spread (8 -> 3 holders, then 8 again) folds holders whose spread id
//! stays the home's: their spread is never retired ([`super::Counter::retire_spread`]), and
//! each used to leave an inbox entry (about 1 KB with a long home name) for ever; about 64
//! cycles of 1,024 holders filled the inbox and every later credit was refused ("too many
//! givers").
//!
//! A holder's name places it: spread id, index, planner attempt (`{ctr.<id>.<i>.<k>}<home>`).
//! The planner gives a new holder at index `i` an attempt above every name its home knows at
//! that place ([`first_attempts`]), so the holders of one index are made in increasing
//! attempts. When the fold credit of the holder (S, i, k) lands and no holder of S at index i
//! with an attempt up to k is still a holder or leaving, the home keeps the mark (S, i, k) and
//! drops every inbox entry it covers (S, i, attempt <= k): every holder so covered was folded
//! here, and what a folded holder (or a copy of it) can still send is a copy of a credit
//! applied or answered already (it seals only once its own moves are answered, and sends
//! nothing after its seal but its fold credit): a credit from a covered name is a repeat. The
//! marks are one per index of a spread (at most `MAX_HOLDERS`), and go when the spread is
//! retired.

use std::collections::BTreeMap;

use super::spread::parse_holder_name;
use super::transfer::{Transfers, MAX_ENTRIES};
use super::CounterError;

/// Most marks a home keeps (a decoder's bound: a home has one per index of each spread whose
/// holders it folds, at most 1,023 per spread).
pub const MAX_MARKS: usize = MAX_ENTRIES;

/// The highest attempt of a holder folded back at index `index` of the spread `spread_id`:
/// every holder of that place with an attempt up to it was folded into this home.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FoldedMark {
    pub spread_id: u64,
    pub index: u64,
    pub attempt: u64,
}

/// The place of a holder name of a spread with an id (None: not a holder, or one from before
/// spread ids, which is never marked).
pub fn place(name: &[u8]) -> Option<FoldedMark> {
    let h = parse_holder_name(name)?;
    (h.spread_id != 0).then_some(FoldedMark {
        spread_id: h.spread_id,
        index: h.index as u64,
        attempt: h.attempt as u64,
    })
}

fn same_place(a: &FoldedMark, b: &FoldedMark) -> bool {
    (a.spread_id, a.index) == (b.spread_id, b.index)
}

/// True when `marks` cover the holder name `name`: it was folded into this home.
pub fn covers(marks: &[FoldedMark], name: &[u8]) -> bool {
    let Some(p) = place(name) else {
        return false;
    };
    marks
        .binary_search_by(|m| (m.spread_id, m.index).cmp(&(p.spread_id, p.index)))
        .is_ok_and(|i| p.attempt <= marks[i].attempt)
}

/// Per index of the spread `spread_id`, the first attempt a new holder may take: one above
/// every attempt `t` knows at that place (its inbox entries, leaving holders and marks), so
/// that the holders of one place are made in increasing attempts. One pass over what `t`
/// holds, for a whole grow.
pub fn first_attempts(t: &Transfers, spread_id: u64) -> BTreeMap<u64, u64> {
    let known = t.inbox.iter().map(|e| e.name.as_slice());
    let leaving = t.leaving.iter().map(|l| l.name.as_slice());
    let named = known.chain(leaving).filter_map(place);
    let mut first = BTreeMap::new();
    for p in named.chain(t.folded.iter().copied()) {
        if p.spread_id == spread_id {
            let next = p.attempt.saturating_add(1);
            let at = first.entry(p.index).or_insert(next);
            *at = next.max(*at);
        }
    }
    first
}

/// The first attempt at `index` in what [`first_attempts`] gave (0 when it names none).
pub fn first_attempt_at(first: &BTreeMap<u64, u64>, index: usize) -> u32 {
    let at = first.get(&(index as u64)).copied().unwrap_or(0);
    u32::try_from(at).unwrap_or(u32::MAX)
}

/// On a home whose current spread is `current` (its id) with the holders `holders`, once the
/// fold credit of `holder` was applied (it no longer leaves): marks its place and drops the
/// inbox entries the mark covers, unless a holder of that place with an attempt up to its own
/// is still a holder or leaving (then its entry stays until a later fold at that index).
/// Holders of another spread are left to its retirement. True when it marked.
pub fn fold_landed(
    t: &mut Transfers,
    current: Option<u64>,
    holders: &[Vec<u8>],
    holder: &[u8],
) -> bool {
    let Some(p) = place(holder).filter(|p| Some(p.spread_id) == current) else {
        return false;
    };
    let live = holders.iter().chain(t.leaving.iter().map(|l| &l.name));
    let older_live = live
        .filter_map(|n| place(n))
        .any(|q| same_place(&p, &q) && q.attempt <= p.attempt);
    if older_live {
        return false;
    }
    let slot = t
        .folded
        .binary_search_by(|m| (m.spread_id, m.index).cmp(&(p.spread_id, p.index)));
    match slot {
        Ok(i) => t.folded[i].attempt = t.folded[i].attempt.max(p.attempt),
        Err(_) if t.folded.len() >= MAX_MARKS => return false,
        Err(i) => t.folded.insert(i, p),
    }
    let marks = &t.folded;
    t.inbox.retain(|e| !covers(marks, &e.name));
    true
}

/// Drops the marks of the spread `spread_id` (retired: its id covers its holders now).
pub fn forget_spread(t: &mut Transfers, spread_id: u64) {
    t.folded.retain(|m| m.spread_id != spread_id);
}

/// What a decoder may carry: at most [`MAX_MARKS`] marks in strictly increasing place, none of
/// a spread before ids or of a retired spread, none covering a holder still leaving, and (for
/// the home's current holders) none covering `holders`.
pub fn validate(t: &Transfers, holders: &[Vec<u8>]) -> Result<(), CounterError> {
    let bad = |why| Err(CounterError::InvalidOperation(why));
    let marks = &t.folded;
    if marks.len() > MAX_MARKS {
        return bad("too many folded marks");
    }
    if marks
        .windows(2)
        .any(|w| (w[0].spread_id, w[0].index) >= (w[1].spread_id, w[1].index))
    {
        return bad("folded marks repeated or out of order");
    }
    if marks
        .iter()
        .any(|m| m.spread_id == 0 || m.index == 0 || t.retired.contains(&m.spread_id))
    {
        return bad("a folded mark of no spread");
    }
    let leaving = t.leaving.iter().map(|l| &l.name);
    if holders.iter().chain(leaving).any(|n| covers(marks, n)) {
        return bad("a holder both folded and still a holder");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::spread::holder_name;
    use crate::counter::transfer::{Applied, Leaving};

    fn name(index: usize, attempt: u32) -> Vec<u8> {
        holder_name(b"home", 6, index, attempt)
    }

    fn applied(n: Vec<u8>) -> Applied {
        Applied {
            giver_id: 0,
            name: n,
            seq: 1,
        }
    }

    #[test]
    fn a_landed_fold_marks_its_place_and_drops_the_entries_it_covers() {
        let mut t = Transfers {
            inbox: vec![
                applied(name(3, 0)),
                applied(name(3, 4)),
                applied(name(4, 1)),
            ],
            ..Transfers::default()
        };
        assert!(fold_landed(&mut t, Some(6), &[name(1, 0)], &name(3, 4)));
        assert_eq!(t.inbox, vec![applied(name(4, 1))]);
        assert!(covers(&t.folded, &name(3, 2)) && covers(&t.folded, &name(3, 4)));
        assert!(!covers(&t.folded, &name(3, 5)) && !covers(&t.folded, &name(4, 0)));
        // Another spread's holder, a name from before ids: never marked.
        assert!(!fold_landed(
            &mut t,
            Some(6),
            &[],
            &holder_name(b"home", 8, 4, 1)
        ));
        assert!(!fold_landed(
            &mut t,
            Some(6),
            &[],
            &holder_name(b"home", 0, 4, 1)
        ));
        assert!(validate(&t, &[name(1, 0), name(3, 5)]).is_ok());
        assert!(
            validate(&t, &[name(3, 1)]).is_err(),
            "a current holder covered"
        );
        forget_spread(&mut t, 6);
        assert!(t.folded.is_empty());
    }

    #[test]
    fn an_older_holder_still_at_the_place_holds_the_mark_back() {
        let mut t = Transfers {
            inbox: vec![applied(name(3, 7))],
            leaving: vec![Leaving {
                name: name(3, 2),
                fold_id: 9,
            }],
            ..Transfers::default()
        };
        assert!(
            !fold_landed(&mut t, Some(6), &[], &name(3, 7)),
            "3.2 still leaves"
        );
        assert!(!fold_landed(&mut t, Some(6), &[name(3, 5)], &name(3, 7)));
        assert_eq!(t.inbox.len(), 1);
        t.folded.push(FoldedMark {
            spread_id: 6,
            index: 4,
            attempt: 3,
        });
        let first = first_attempts(&t, 6);
        assert_eq!(first.into_iter().collect::<Vec<_>>(), vec![(3, 8), (4, 4)]);
        assert!(first_attempts(&t, 8).is_empty());
        t.folded.clear();
        t.leaving.clear();
        assert!(fold_landed(&mut t, Some(6), &[], &name(3, 7)));
        assert!(t.inbox.is_empty());
    }
}
