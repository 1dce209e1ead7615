//! When each holder of a spread home was listed and unlisted, kept for the token window, so
//! that the holder list in force at any moment of the window can be read again
//! (`CTR.HOLDERS key AT ms`). A purchase walks the list in force at its token's time: its
//! first send and every retry, from any process, walk the same holders in the same order (the
//! probe rule), each replaying what it recorded, so a token is granted at most once whatever
//! grows and shrinks happened between them.
//!
//! Times are the home master's clock. A change is dated one millisecond after the clock
//! reading that made it (and never before an earlier change), so a list read at time `t`
//! (every `at <= t`) is never changed afterwards by a change made in the same millisecond.

use super::spread::{holder_name, parse_holder_name, MAX_HOLDERS, MAX_HOME_NAME};
use super::CounterError;

/// Most entries kept: two full holder lists (a shrink of the largest spread to 1 stays
/// answerable for the window). Past it the oldest unlisted entries go, and the listing stops
/// answering for the times they covered.
pub const MAX_LISTED: usize = 2 * MAX_HOLDERS;

/// One holder as listed by its home, by the parts of its name (its spread's home name is
/// kept once per spread in [`Listing::homes`]): 20 to 30 bytes, whatever the name's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    pub spread_id: u64,
    pub index: u32,
    pub attempt: u32,
    /// In force from this time on (included).
    pub listed_at: i64,
    /// No longer in force from this time on (a shrink); None while listed.
    pub unlisted_at: Option<i64>,
}

/// A home's listing history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The earliest time it answers for: `i64::MIN` when it holds every list the counter ever
    /// had; else the time of the first change it saw (a spread made by a version without
    /// listings) or the end of the oldest entry it dropped.
    pub known_since: i64,
    /// The home name each spread's holders carry, by spread id (one per spread with entries).
    pub homes: Vec<(u64, Vec<u8>)>,
    /// In the order they were listed.
    pub entries: Vec<Listed>,
}

/// Why the list at a time cannot be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListedAtError {
    /// The time is after the home's clock: changes may still be made before it.
    Ahead { now: i64 },
    /// The listing does not reach back that far.
    Unknown { known_since: i64 },
}

/// The clock and the token window a list change is dated and pruned with: the master's, and
/// carried in the change's replication so that replicas and the AOF keep the same entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListClock {
    pub now_ms: i64,
    pub window_ms: i64,
}

/// A holder name's parts as a listing keeps them; None for a name the planner never makes.
fn parts(name: &[u8]) -> Option<(u64, u32, u32, &[u8])> {
    let h = parse_holder_name(name)?;
    Some((
        h.spread_id,
        u32::try_from(h.index).ok()?,
        u32::try_from(h.attempt).ok()?,
        h.home,
    ))
}

impl Listed {
    fn is(&self, (spread_id, index, attempt, _): (u64, u32, u32, &[u8])) -> bool {
        (self.spread_id, self.index, self.attempt) == (spread_id, index, attempt)
    }
}

impl Listing {
    /// A listing for a counter that has had no holders yet: it knows every list.
    pub fn complete() -> Listing {
        Listing {
            known_since: i64::MIN,
            homes: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// A listing started at a change on a home whose earlier history is unknown: `current`
    /// were listed at some earlier time. None when a name cannot be kept.
    pub fn started(current: &[Vec<u8>], clock: ListClock) -> Option<Listing> {
        let mut listing = Listing::complete();
        listing.known_since = listing.change_time(clock.now_ms);
        for name in current {
            listing.list(name, i64::MIN)?;
        }
        Some(listing)
    }

    /// The date of a change read at `now`: just after it, and after every earlier change.
    fn change_time(&self, now: i64) -> i64 {
        let latest = self
            .entries
            .iter()
            .map(|e| e.unlisted_at.unwrap_or(e.listed_at))
            .max()
            .unwrap_or(i64::MIN);
        now.max(latest).max(self.known_since).saturating_add(1)
    }

    fn list(&mut self, name: &[u8], at: i64) -> Option<()> {
        let p = parts(name)?;
        if !self.homes.iter().any(|(id, _)| *id == p.0) {
            self.homes.push((p.0, p.3.to_vec()));
        }
        self.entries.push(Listed {
            spread_id: p.0,
            index: p.1,
            attempt: p.2,
            listed_at: at,
            unlisted_at: None,
        });
        Some(())
    }

    /// Records a change of the holder list from what it lists now to `holders`: names not
    /// listed are listed, listed names not in `holders` are unlisted; then prunes. None (the
    /// listing must be forgotten) when a name cannot be kept.
    pub fn record(&mut self, holders: &[Vec<u8>], clock: ListClock) -> Option<()> {
        let at = self.change_time(clock.now_ms);
        let wanted = holders
            .iter()
            .map(|n| parts(n))
            .collect::<Option<Vec<_>>>()?;
        for e in self.entries.iter_mut().filter(|e| e.unlisted_at.is_none()) {
            if !wanted.iter().any(|p| e.is(*p)) {
                e.unlisted_at = Some(at);
            }
        }
        for (name, p) in holders.iter().zip(&wanted) {
            let listed = self
                .entries
                .iter()
                .any(|e| e.unlisted_at.is_none() && e.is(*p));
            if !listed {
                self.list(name, at)?;
            }
        }
        self.prune(clock);
        Some(())
    }

    /// Drops the entries unlisted before the token window (no admissible time needs them),
    /// then the oldest unlisted ones past [`MAX_LISTED`], answering for less.
    fn prune(&mut self, clock: ListClock) {
        let horizon = clock.now_ms.saturating_sub(clock.window_ms);
        let mut known_since = self.known_since;
        self.entries.retain(|e| match e.unlisted_at {
            Some(end) if end <= horizon => {
                known_since = known_since.max(end);
                false
            }
            _ => true,
        });
        while self.entries.len() > MAX_LISTED {
            let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .filter_map(|(i, e)| e.unlisted_at.map(|end| (end, i)))
                .min()
            else {
                break;
            };
            known_since = known_since.max(oldest.0);
            self.entries.remove(oldest.1);
        }
        self.known_since = known_since;
        let entries = &self.entries;
        self.homes
            .retain(|(id, _)| entries.iter().any(|e| e.spread_id == *id));
    }

    /// The holders in force at `at` (the home not included), by holder index: the list a
    /// purchase of that time walks. `now` is the home's clock.
    pub fn at(&self, at: i64, now: i64) -> Result<Vec<Vec<u8>>, ListedAtError> {
        if at > now {
            return Err(ListedAtError::Ahead { now });
        }
        if at < self.known_since {
            return Err(ListedAtError::Unknown {
                known_since: self.known_since,
            });
        }
        let mut listed: Vec<&Listed> = self
            .entries
            .iter()
            .filter(|e| e.listed_at <= at && e.unlisted_at.is_none_or(|end| at < end))
            .collect();
        listed.sort_unstable_by_key(|e| e.index);
        Ok(listed.into_iter().map(|e| self.name_of(e)).collect())
    }

    fn name_of(&self, e: &Listed) -> Vec<u8> {
        let home = self
            .homes
            .iter()
            .find(|(id, _)| *id == e.spread_id)
            .map_or(&[][..], |(_, home)| home.as_slice());
        holder_name(home, e.spread_id, e.index as usize, e.attempt)
    }

    /// Checks what a decoder or a replicated state may carry.
    pub fn validate(&self) -> Result<(), CounterError> {
        let bad = |why| Err(CounterError::InvalidOperation(why));
        if self.entries.len() > MAX_LISTED || self.homes.len() > MAX_LISTED {
            return bad("too many listed holders");
        }
        for (i, (id, home)) in self.homes.iter().enumerate() {
            if home.is_empty() || home.len() > MAX_HOME_NAME {
                return bad("a listed spread's home name length");
            }
            if self.homes[..i].iter().any(|(other, _)| other == id) {
                return bad("a listed spread's home twice");
            }
        }
        for (i, e) in self.entries.iter().enumerate() {
            if e.index == 0 || !self.homes.iter().any(|(id, _)| *id == e.spread_id) {
                return bad("a listed holder of no listed spread");
            }
            if e.unlisted_at.is_some_and(|end| end < e.listed_at) {
                return bad("a holder unlisted before it was listed");
            }
            let twice = self.entries[..i].iter().any(|o| {
                (o.spread_id, o.index, o.attempt) == (e.spread_id, e.index, e.attempt)
                    && o.unlisted_at.is_none_or(|end| end > e.listed_at)
            });
            if twice {
                return bad("a holder listed twice at once");
            }
        }
        Ok(())
    }

    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Listed>()
            + self.homes.capacity() * std::mem::size_of::<(u64, Vec<u8>)>()
            + self.homes.iter().map(|(_, h)| h.capacity()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::spread::holder_name;

    const CLOCK: ListClock = ListClock {
        now_ms: 1_000,
        window_ms: 100,
    };

    fn at(now_ms: i64) -> ListClock {
        ListClock { now_ms, ..CLOCK }
    }

    fn names(n: usize, attempt: u32) -> Vec<Vec<u8>> {
        (1..n).map(|i| holder_name(b"h", 7, i, attempt)).collect()
    }

    fn list_at(l: &Listing, t: i64, now: i64) -> Vec<Vec<u8>> {
        l.at(t, now).unwrap()
    }

    #[test]
    fn a_grow_and_a_shrink_change_the_list_from_just_after_their_time() {
        let mut l = Listing::complete();
        l.record(&names(3, 0), at(1_000)).unwrap();
        assert_eq!(list_at(&l, 1_000, 1_000), Vec::<Vec<u8>>::new());
        assert_eq!(list_at(&l, 1_001, 1_001), names(3, 0));
        l.record(&names(5, 0), at(1_010)).unwrap();
        assert_eq!(list_at(&l, 1_010, 1_020), names(3, 0));
        assert_eq!(list_at(&l, 1_011, 1_020), names(5, 0));
        l.record(&names(2, 0), at(1_020)).unwrap();
        assert_eq!(list_at(&l, 1_015, 1_030), names(5, 0), "unlisted ones stay");
        assert_eq!(list_at(&l, 1_021, 1_030), names(2, 0));
        assert_eq!(
            list_at(&l, 5, 1_030),
            Vec::<Vec<u8>>::new(),
            "before the spread"
        );
    }

    #[test]
    fn an_index_made_again_under_another_attempt_is_ordered_by_index() {
        let mut l = Listing::complete();
        l.record(&names(3, 0), at(1_000)).unwrap();
        l.record(&names(2, 0), at(1_001)).unwrap();
        let mut again = names(2, 0);
        again.push(holder_name(b"h", 7, 2, 1));
        l.record(&again, at(1_002)).unwrap();
        assert_eq!(list_at(&l, 1_001, 1_005), names(3, 0));
        assert_eq!(list_at(&l, 1_003, 1_005), again);
        l.validate().unwrap();
    }

    #[test]
    fn times_ahead_of_the_clock_and_before_the_listing_are_refused() {
        let mut l = Listing::started(&names(3, 0), at(1_000)).unwrap();
        assert_eq!(l.at(1_002, 1_001), Err(ListedAtError::Ahead { now: 1_001 }));
        assert_eq!(
            l.at(1_000, 1_001),
            Err(ListedAtError::Unknown { known_since: 1_001 })
        );
        assert_eq!(list_at(&l, 1_001, 1_001), names(3, 0));
        l.record(&names(2, 0), at(1_001)).unwrap();
        assert_eq!(list_at(&l, 1_001, 1_002), names(3, 0));
        assert_eq!(list_at(&l, 1_002, 1_002), names(2, 0));
    }

    #[test]
    fn a_change_never_dates_itself_before_an_earlier_one() {
        let mut l = Listing::complete();
        l.record(&names(3, 0), at(2_000)).unwrap();
        // A clock that went back (a failover to a master behind): still after the first.
        l.record(&names(4, 0), at(1_500)).unwrap();
        assert_eq!(list_at(&l, 2_001, 2_001), names(3, 0));
        assert_eq!(list_at(&l, 2_002, 2_002), names(4, 0));
    }

    #[test]
    fn entries_past_the_window_go_and_the_listing_answers_from_their_end() {
        let mut l = Listing::complete();
        l.record(&names(4, 0), at(1_000)).unwrap();
        l.record(&names(2, 0), at(1_010)).unwrap();
        l.record(&names(3, 1)[..1], at(1_200)).unwrap();
        assert_eq!(l.entries.len(), 2, "{l:?}");
        assert_eq!(l.known_since, 1_011);
        assert!(l.at(1_005, 1_200).is_err());
        assert_eq!(list_at(&l, 1_011, 1_200), names(2, 0));
    }

    #[test]
    fn past_its_size_the_oldest_unlisted_entries_go_first() {
        let mut l = Listing::complete();
        let big = ListClock {
            now_ms: 0,
            window_ms: i64::MAX,
        };
        for round in 0..5u32 {
            l.record(
                &names(MAX_HOLDERS, round),
                ListClock {
                    now_ms: i64::from(round) * 10,
                    ..big
                },
            );
        }
        assert!(l.entries.len() <= MAX_LISTED);
        assert_eq!(l.known_since, 31, "the third list's end");
        assert_eq!(list_at(&l, 45, 50), names(MAX_HOLDERS, 4));
        l.validate().unwrap();
    }

    #[test]
    fn forged_entries_are_refused() {
        let listed = |index, listed_at, unlisted_at| Listed {
            spread_id: 7,
            index,
            attempt: 0,
            listed_at,
            unlisted_at,
        };
        let with = |homes: Vec<(u64, Vec<u8>)>, entries| Listing {
            known_since: i64::MIN,
            homes,
            entries,
        };
        let home = || vec![(7, b"h".to_vec())];
        let bad = [
            with(Vec::new(), vec![listed(1, 1, None)]),
            with(vec![(7, Vec::new())], vec![listed(1, 1, None)]),
            with(
                vec![(7, b"h".to_vec()), (7, b"g".to_vec())],
                vec![listed(1, 1, None)],
            ),
            with(home(), vec![listed(0, 1, None)]),
            with(home(), vec![listed(1, 5, Some(4))]),
            with(home(), vec![listed(1, 1, None), listed(1, 2, None)]),
            with(home(), vec![listed(1, 1, Some(5)), listed(1, 4, None)]),
        ];
        for l in bad {
            assert!(l.validate().is_err(), "{l:?}");
        }
        let ok = with(home(), vec![listed(1, 1, Some(5)), listed(1, 5, None)]);
        ok.validate().unwrap();
        assert_eq!(ok.at(5, 9).unwrap(), [holder_name(b"h", 7, 1, 0)]);
    }

    #[test]
    fn a_name_the_planner_never_makes_is_not_kept() {
        let mut l = Listing::complete();
        let odd = b"{ctr.0000000000000007.1.99999999999}h".to_vec();
        assert!(l.record(&[odd], CLOCK).is_none());
        assert!(Listing::started(&[b"plain".to_vec()], CLOCK).is_none());
    }
}
