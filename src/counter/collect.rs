//! Collecting the holders of a spread counter whose home is gone, the pure rules (the glue is
//! `crate::runtime::spread_collect`, the bus messages `crate::persist::collect_msg`).
//!
//! A home deleted (`DEL`, `UNLINK`, expiry, eviction, `FLUSHALL`/`FLUSHDB`) or overwritten
//! takes the whole counter with it; its holders, on every master, are then deleted too:
//!
//! - [`left_by`]: what a home leaves to collect, read from the value the server unlinked: its
//!   current and leaving holders, grouped by the spread id and the home name their names
//!   carry. A name without a spread id (a spread made before ids, whose identity is its home
//!   name alone) or naming the home itself is never collected.
//! - [`event_rule`]: which keyspace event after the unlink says the counter is gone (collect)
//!   and which says it lives on under another name or database (forget).
//! - [`still_to_collect`]: a collection is dropped on a doubt: the name it was left under holds
//!   a home of that spread again by the time it is sent (a `RESTORE` of its dump, a `DEBUG
//!   RELOAD`), or the deleted key was a copy of a home restored under another name.
//! - [`verdict`]: what a receiver does with each name it is asked about: it deletes a key only
//!   when the name is a holder of exactly that spread id and carried home, and holds a counter.
//! - [`Pending`]: the sender's collections, sent again until every name is answered or the
//!   timeout has passed, bounded in memory and in work per tick.

use super::spread::{key_slot, parse_holder_name};
use super::Counter;
use crate::protocol::timeout::Timeout;

/// The holders of one spread to collect: the spread's id and the home name its holders'
/// names carry (the home's name when it spread), and the holders' names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collection {
    pub spread_id: u64,
    pub home: Vec<u8>,
    pub holders: Vec<Vec<u8>>,
}

/// Bookkeeping bytes counted per name held (the vector and the allocator's rounding).
const NAME_OVERHEAD: usize = 32;

impl Collection {
    /// The memory a pending collection holds (what the cap of [`Pending`] counts).
    pub fn bytes(&self) -> usize {
        let names: usize = self.holders.iter().map(|n| n.len() + NAME_OVERHEAD).sum();
        names + self.home.len() + 2 * NAME_OVERHEAD
    }

    /// True when the name is one of this collection's to delete: a holder of exactly this
    /// spread id and carried home name (never a spread made before ids: id 0).
    pub fn names(&self, name: &[u8]) -> bool {
        self.spread_id != 0
            && parse_holder_name(name)
                .is_some_and(|h| h.spread_id == self.spread_id && h.home == self.home)
    }
}

/// What the home `home_name` holding `c` leaves to collect when it goes: its current and
/// leaving holders (a holder sealed or folding goes too: the whole counter is gone), grouped
/// by (spread id, carried home name), each name once.
pub fn left_by(home_name: &[u8], c: &Counter) -> Vec<Collection> {
    let current = c.spread().map_or(&[][..], |s| s.holders.as_slice());
    let leaving = c.leaving().iter().map(|l| l.name.as_slice());
    let mut out: Vec<Collection> = Vec::new();
    for name in current.iter().map(Vec::as_slice).chain(leaving) {
        if name == home_name {
            continue; // a home renamed onto one of its holders' names
        }
        let Some(h) = parse_holder_name(name) else {
            continue;
        };
        if h.spread_id == 0 {
            continue;
        }
        match out
            .iter_mut()
            .find(|g| g.spread_id == h.spread_id && g.home == h.home)
        {
            Some(g) if g.holders.iter().any(|n| n == name) => {}
            Some(g) => g.holders.push(name.to_vec()),
            None => out.push(Collection {
                spread_id: h.spread_id,
                home: h.home.to_vec(),
                holders: vec![name.to_vec()],
            }),
        }
    }
    out
}

/// The name a home's holders carry (its name when it spread) and its spread id, when `c` is a
/// home with holders, current or leaving, of a spread with an id.
pub fn carried_by(c: &Counter) -> Option<(Vec<u8>, u64)> {
    let current = c.spread().map(|s| s.holders.as_slice()).unwrap_or(&[]);
    let leaving = c.leaving().iter().map(|l| l.name.as_slice());
    let mut holders = current.iter().map(Vec::as_slice).chain(leaving);
    let h = holders.find_map(parse_holder_name)?;
    (h.spread_id != 0).then(|| (h.home.to_vec(), h.spread_id))
}

/// The spreads `c` is a home of (its spread, and those of the holders it still folds back).
pub fn spreads_of(c: &Counter) -> Vec<u64> {
    let leaving = c
        .leaving()
        .iter()
        .filter_map(|l| parse_holder_name(&l.name));
    let mut ids: Vec<u64> = (c.spread().map(|s| s.id).into_iter())
        .chain(leaving.map(|h| h.spread_id))
        .filter(|&id| id != 0)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// True when `c` is a home of the spread `spread_id`: it lists a holder of that spread, current
/// or leaving.
pub fn is_home_of(c: &Counter, spread_id: u64) -> bool {
    c.spread().is_some_and(|s| s.id == spread_id)
        || c.leaving()
            .iter()
            .any(|l| parse_holder_name(&l.name).is_some_and(|h| h.spread_id == spread_id))
}

/// True when `c`, a home, counts the units of the key `name`: `name` is one of its current
/// holders or a holder a shrink is still folding back (whose units the fold brings home).
pub fn lists_holder(c: &Counter, name: &[u8]) -> bool {
    c.spread()
        .is_some_and(|s| s.holders.iter().any(|h| h == name))
        || c.leaving().iter().any(|l| l.name == name)
}

/// What the home's master sees when it checks a claimed collection: the counter now under the
/// name the home was deleted from, the counter under the home name its holders carry or under
/// the name this master saw that home renamed to (when that is another name this master can
/// read), and whether it runs in a cluster.
pub struct Seen<'a> {
    pub deleted_name: &'a [u8],
    pub now_under_the_name: Option<&'a Counter>,
    pub other_home: Option<&'a Counter>,
    pub in_cluster: bool,
}

/// A collection is started unless there is a doubt that the counter is gone:
/// - the name holds a home of the same spread again (restored from its dump, reloaded);
/// - the deleted key was not the spread's first home (its holders carry another name) and
///   that name holds a home of the same spread: the deleted key was a copy restored under
///   another name (a second home of the same holders, docs/CLUSTER.md), the original lives;
/// - in a cluster, the holders carry a home name of another slot: RENAME keeps a key in its
///   slot, so the deleted key is a copy restored under another name, whose original this
///   master cannot see.
pub fn still_to_collect(c: &Collection, seen: &Seen) -> bool {
    let home_again = |k: Option<&Counter>| k.is_some_and(|home| is_home_of(home, c.spread_id));
    if home_again(seen.now_under_the_name) {
        return false;
    }
    let copy = Copy {
        name: seen.deleted_name,
        carried_home: &c.home,
        spread_id: c.spread_id,
        other_home: seen.other_home,
        in_cluster: seen.in_cluster,
    };
    !copy.is_copy()
}

/// A home of spread `spread_id` under `name`, whose holders carry the home name
/// `carried_home`, and what this master sees under that name or under the name it saw that
/// home renamed to (`other_home`: never `name` itself).
pub struct Copy<'a> {
    pub name: &'a [u8],
    pub carried_home: &'a [u8],
    pub spread_id: u64,
    pub other_home: Option<&'a Counter>,
    pub in_cluster: bool,
}

impl Copy<'_> {
    /// True when the home is a copy of another home of the same holders (restored under
    /// another name): it is not the spread's first home (its holders carry another name), and
    /// that name, or the name the first home was renamed to, holds a home of the same spread
    /// here, or, in a cluster, the carried name is in another slot (`RENAME` keeps a key in
    /// its slot, so only a copy can be elsewhere).
    pub fn is_copy(&self) -> bool {
        if self.carried_home == self.name {
            return false;
        }
        let other_slot = self.in_cluster && key_slot(self.carried_home) != key_slot(self.name);
        other_slot
            || self
                .other_home
                .is_some_and(|home| is_home_of(home, self.spread_id))
    }
}

/// What a keyspace event says of a home whose value the server unlinked just before it (in the
/// same call: the unlink callback, then the event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventRule {
    /// The counter is gone (deleted, expired, evicted, or its name overwritten): collect.
    Collect,
    /// The counter lives on under another name or database (`RENAME`, `MOVE` source): forget.
    Forget,
    /// Says nothing about it: the unlinked value is forgotten at the end of the command.
    Ignore,
}

/// The rule for a keyspace event name (Redis 7.0 and Valkey send these after unlinking a key:
/// `del` for DEL/UNLINK, an `EXPIRE` in the past and `MIGRATE`'s source; `expired`; `evicted`;
/// `rename_from`/`rename_to`, `move_from`, `restore`, `copy_to` and `set` around an unlink of
/// a source or an overwritten destination).
pub fn event_rule(event: &[u8]) -> EventRule {
    match event {
        b"del" | b"expired" | b"evicted" => EventRule::Collect,
        // The name was overwritten by another value (RENAME, RESTORE REPLACE, COPY REPLACE,
        // SET): the counter that was there is gone. If the new value is a home of the same
        // spread (the same dump restored), `still_to_collect` keeps its holders.
        b"rename_to" | b"restore" | b"copy_to" | b"set" => EventRule::Collect,
        b"rename_from" | b"move_from" => EventRule::Forget,
        _ => EventRule::Ignore,
    }
}

/// What a receiver holds under a name it is asked to collect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Missing,
    /// A counter of this module.
    Counter,
    /// A key of another type.
    Other,
}

/// What a receiver does with one name of a collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Delete the key (replicated), then answer.
    Delete,
    /// Nothing to delete: answer.
    Gone,
    /// Not a holder of this spread and carried home, or not a counter: never touched, and
    /// answered all the same (nothing there is the sender's to collect).
    Leave,
}

/// The receiver's rule: identity is the spread id and the home name carried in the holder's
/// name, never a home name alone, and only counters of this module are deleted.
pub fn verdict(c: &Collection, name: &[u8], found: Found) -> Verdict {
    match (c.names(name), found) {
        (true, Found::Counter) => Verdict::Delete,
        (true, Found::Missing) => Verdict::Gone,
        _ => Verdict::Leave,
    }
}

/// How often an unanswered collection is sent again.
pub const RESEND_MS: i64 = 100;

struct Entry {
    c: Collection,
    started_ms: i64,
    resend: Timeout,
}

/// The collections a master has started and not seen answered: each is sent again every
/// [`RESEND_MS`] until every name is answered, or dropped (abandoned) once the timeout has
/// passed. Memory is capped: past the cap a new collection is refused (abandoned at once).
pub struct Pending {
    entries: Vec<Entry>,
    bytes: usize,
    cap_bytes: usize,
}

impl Pending {
    pub const fn with_cap(cap_bytes: usize) -> Pending {
        Pending {
            entries: Vec::new(),
            bytes: 0,
            cap_bytes,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Starts a collection (due at once). The same spread and home already pending take the
    /// new names and a fresh deadline. False, keeping nothing, when it would pass the cap.
    pub fn add(&mut self, c: Collection, now: i64) -> bool {
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.c.spread_id == c.spread_id && e.c.home == c.home)
        {
            let new: Vec<Vec<u8>> = c
                .holders
                .into_iter()
                .filter(|n| !e.c.holders.contains(n))
                .collect();
            let added: usize = new.iter().map(|n| n.len() + NAME_OVERHEAD).sum();
            if self.bytes.saturating_add(added) > self.cap_bytes {
                return false;
            }
            self.bytes += added;
            e.c.holders.extend(new);
            e.started_ms = now;
            e.resend = Timeout::every_from(now, RESEND_MS);
            return true;
        }
        let size = c.bytes();
        if c.holders.is_empty() || self.bytes.saturating_add(size) > self.cap_bytes {
            return false;
        }
        self.bytes += size;
        self.entries.push(Entry {
            c,
            started_ms: now,
            resend: Timeout::every_from(now, RESEND_MS),
        });
        true
    }

    /// The collections due now, longest waiting first (so a collection nobody answers never
    /// starves the others), at most `max_names` names in all (at least one collection when any
    /// is due); each is due again [`RESEND_MS`] later.
    pub fn due(&mut self, now: i64, max_names: usize) -> Vec<Collection> {
        let mut waiting: Vec<usize> = (0..self.entries.len())
            .filter(|&i| self.entries[i].resend.fired(now))
            .collect();
        waiting.sort_by_key(|&i| self.entries[i].resend.due_ms());
        let mut out = Vec::new();
        let mut names = 0usize;
        for i in waiting {
            let e = &mut self.entries[i];
            if !out.is_empty() && names.saturating_add(e.c.holders.len()) > max_names {
                break;
            }
            names += e.c.holders.len();
            e.resend.fire(now);
            out.push(e.c.clone());
        }
        out
    }

    /// An answer: its names are collected (or were never the sender's); returns how many of
    /// them were pending. A collection with nothing left is done.
    pub fn answered(&mut self, answer: &Collection) -> usize {
        let mut removed = 0;
        let mut freed = 0;
        for e in self
            .entries
            .iter_mut()
            .filter(|e| e.c.spread_id == answer.spread_id && e.c.home == answer.home)
        {
            e.c.holders.retain(|n| {
                let done = answer.holders.contains(n);
                if done {
                    removed += 1;
                    freed += n.len() + NAME_OVERHEAD;
                }
                !done
            });
        }
        self.bytes = self.bytes.saturating_sub(freed);
        self.drop_where(|e| e.c.holders.is_empty());
        removed
    }

    /// Drops every collection (a master that became a replica: they are its new master's).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// Drops the collections started more than `timeout_ms` ago; returns how many.
    pub fn expire(&mut self, now: i64, timeout_ms: i64) -> usize {
        self.drop_where(|e| now.saturating_sub(e.started_ms) > timeout_ms)
    }

    /// True when a collection of one of the spreads `spread_ids` is pending.
    pub fn holds_any(&self, spread_ids: &[u64]) -> bool {
        self.entries
            .iter()
            .any(|e| spread_ids.contains(&e.c.spread_id))
    }

    /// Drops the collections of the spreads in `spread_ids` (their home is back: a doubt);
    /// returns how many.
    pub fn forget(&mut self, spread_ids: &[u64]) -> usize {
        self.drop_where(|e| spread_ids.contains(&e.c.spread_id))
    }

    fn drop_where(&mut self, gone: impl Fn(&Entry) -> bool) -> usize {
        let before = self.entries.len();
        let mut freed = 0;
        self.entries.retain(|e| {
            let g = gone(e);
            if g {
                freed += e.c.bytes();
            }
            !g
        });
        self.bytes = self.bytes.saturating_sub(freed);
        before - self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::spread::{holder_name, Spread};

    fn home_with(holders: &[Vec<u8>], id: u64) -> Counter {
        let mut c = Counter::plain(3);
        c.set_spread(Spread {
            id,
            holders: holders.to_vec(),
            floor: None,
            ceiling: None,
        })
        .unwrap();
        c
    }

    /// Item 7 of issue 26: a home counts its current holders' units, not a look-alike's.
    #[test]
    fn a_home_lists_its_holders_and_no_look_alike() {
        let holders = [holder_name(b"k", 0x10, 1, 0), holder_name(b"k", 0x10, 2, 5)];
        let home = home_with(&holders, 0x10);
        assert!(lists_holder(&home, &holders[0]) && lists_holder(&home, &holders[1]));
        for other in [
            holder_name(b"k", 0x10, 2, 3),
            holder_name(b"k", 0x12, 1, 0),
            holder_name(b"k", 0, 1, 0),
            b"k".to_vec(),
        ] {
            assert!(!lists_holder(&home, &other));
        }
        assert!(!lists_holder(&Counter::plain(1), &holders[0]));
    }

    /// A home under another name than its holders carry is a copy only when the carried name
    /// still holds a home of that spread here, or lies in another slot of a cluster; then it
    /// detaches into a counter of its own units.
    #[test]
    fn a_restored_copy_of_a_home_is_told_apart_and_detached() {
        let holders = [holder_name(b"k", 0x10, 1, 0)];
        let original = home_with(&holders, 0x10);
        let copy = |name: &'static [u8], under: Option<&'static Counter>, in_cluster| Copy {
            name,
            carried_home: b"k",
            spread_id: 0x10,
            other_home: under,
            in_cluster,
        };
        let original: &'static Counter = Box::leak(Box::new(original));
        assert!(
            !copy(b"k", Some(original), false).is_copy(),
            "the home itself"
        );
        assert!(
            copy(b"k2", Some(original), false).is_copy(),
            "the original lives"
        );
        assert!(
            !copy(b"k2", None, false).is_copy(),
            "renamed (or the original gone)"
        );
        let theirs = [holder_name(b"k", 0x12, 1, 0)];
        let other: &'static Counter = Box::leak(Box::new(home_with(&theirs, 0x12)));
        assert!(
            !copy(b"k2", Some(other), false).is_copy(),
            "another spread there"
        );
        assert!(
            copy(b"k2", None, true).is_copy(),
            "another slot in a cluster"
        );
        assert!(
            !copy(b"{k}2", None, true).is_copy(),
            "the same slot: a rename"
        );
        let mut detached = original.clone();
        detached.detach_from_spread();
        assert!(detached.spread().is_none() && detached.transfers().is_none());
        assert_eq!(detached.value(), original.value());
    }

    #[test]
    fn a_home_leaves_its_holders_grouped_by_spread_and_carried_home() {
        let a = holder_name(b"k", 0x10, 1, 0);
        let b = holder_name(b"k", 0x10, 2, 3);
        // Grown after a RENAME of the home from k to j: its holders carry both names.
        let c = holder_name(b"j", 0x10, 3, 0);
        let home = home_with(&[a.clone(), b.clone(), c.clone()], 0x10);
        let left = left_by(b"j", &home);
        assert_eq!(
            left,
            vec![
                Collection {
                    spread_id: 0x10,
                    home: b"k".to_vec(),
                    holders: vec![a.clone(), b.clone()]
                },
                Collection {
                    spread_id: 0x10,
                    home: b"j".to_vec(),
                    holders: vec![c]
                }
            ]
        );
        // A home renamed onto its own holder's name never collects itself.
        assert_eq!(left_by(&a, &home)[0].holders, vec![b.clone()]);
        // A spread made before ids: its identity is its home name alone, never collected.
        let legacy = home_with(&[b"{ctr.1.0}k".to_vec()], 0);
        assert!(left_by(b"k", &legacy).is_empty());
        assert!(left_by(b"k", &Counter::plain(5)).is_empty());
    }

    #[test]
    fn leaving_holders_go_too() {
        let mut home = home_with(
            &[holder_name(b"k", 0x20, 1, 0), holder_name(b"k", 0x20, 2, 0)],
            0x20,
        );
        let mut ids = 2u64;
        let gone = home
            .begin_shrink(2, &mut || {
                ids += 1;
                ids
            })
            .unwrap();
        assert_eq!(gone.len(), 1);
        let left = left_by(b"k", &home);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].holders.len(), 2, "the current and the leaving one");
        assert!(is_home_of(&home, 0x20));
        // Shrunk to one key with its fold still under way: still the home of its leaving one.
        home.begin_shrink(1, &mut || 9).unwrap();
        assert!(home.spread().is_none());
        assert!(is_home_of(&home, 0x20));
        assert!(!is_home_of(&home, 0x22));
        assert_eq!(left_by(b"k", &home)[0].holders.len(), 2);
    }

    #[test]
    fn a_name_holding_the_same_spread_again_keeps_its_holders() {
        let holders = vec![holder_name(b"k", 0x30, 1, 0)];
        let home = home_with(&holders, 0x30);
        let left = left_by(b"k", &home).remove(0);
        let check = |now: Option<&Counter>| {
            let seen = Seen {
                deleted_name: b"k",
                now_under_the_name: now,
                other_home: None,
                in_cluster: true,
            };
            still_to_collect(&left, &seen)
        };
        assert!(check(None), "deleted");
        assert!(check(Some(&Counter::plain(1))), "made again");
        let other = home_with(&[holder_name(b"k", 0x32, 1, 0)], 0x32);
        assert!(check(Some(&other)), "spread again: a new id");
        assert!(!check(Some(&home)), "restored");
    }

    #[test]
    fn a_copy_of_a_home_never_collects_the_holders_its_original_lists() {
        // k spread, then restored from its dump as "copy": its holders carry "k".
        let holders = vec![holder_name(b"k", 0x50, 1, 0)];
        let original = home_with(&holders, 0x50);
        let left = left_by(b"copy", &original).remove(0);
        assert_eq!(left.home, b"k".to_vec());
        let check = |carried: Option<&Counter>, in_cluster| {
            let seen = Seen {
                deleted_name: b"copy",
                now_under_the_name: None,
                other_home: carried,
                in_cluster,
            };
            still_to_collect(&left, &seen)
        };
        assert!(!check(Some(&original), false), "the original lives");
        assert!(check(None, false), "renamed on one server");
        // In a cluster a RENAME stays in its slot: a carried home in another slot is a copy.
        assert!(!check(None, true));
        let tagged = vec![holder_name(b"{t}k", 0x52, 1, 0)];
        let left = left_by(b"{t}renamed", &home_with(&tagged, 0x52)).remove(0);
        let renamed = Seen {
            deleted_name: b"{t}renamed",
            now_under_the_name: None,
            other_home: None,
            in_cluster: true,
        };
        assert!(still_to_collect(&left, &renamed), "renamed within its slot");
    }

    #[test]
    fn events_tell_a_gone_counter_from_a_moved_one() {
        for e in [
            "del",
            "expired",
            "evicted",
            "rename_to",
            "restore",
            "copy_to",
            "set",
        ] {
            assert_eq!(event_rule(e.as_bytes()), EventRule::Collect, "{e}");
        }
        for e in ["rename_from", "move_from"] {
            assert_eq!(event_rule(e.as_bytes()), EventRule::Forget, "{e}");
        }
        for e in ["move_to", "expire", "ctr.add", "hset", ""] {
            assert_eq!(event_rule(e.as_bytes()), EventRule::Ignore, "{e}");
        }
    }

    #[test]
    fn a_receiver_deletes_only_counters_named_as_holders_of_that_spread_and_home() {
        let c = Collection {
            spread_id: 0x40,
            home: b"k".to_vec(),
            holders: vec![],
        };
        let mine = holder_name(b"k", 0x40, 1, 0);
        assert_eq!(verdict(&c, &mine, Found::Counter), Verdict::Delete);
        assert_eq!(verdict(&c, &mine, Found::Missing), Verdict::Gone);
        assert_eq!(
            verdict(&c, &mine, Found::Other),
            Verdict::Leave,
            "another type"
        );
        for not_mine in [
            holder_name(b"k", 0x42, 1, 0), // another spread of the same home name
            holder_name(b"j", 0x40, 1, 0), // the same id under another carried home
            b"k".to_vec(),                 // the home name itself
            b"users".to_vec(),
            b"{ctr.1.0}k".to_vec(), // before ids
        ] {
            assert_eq!(verdict(&c, &not_mine, Found::Counter), Verdict::Leave);
            assert_eq!(verdict(&c, &not_mine, Found::Missing), Verdict::Leave);
        }
        let legacy = Collection {
            spread_id: 0,
            home: b"k".to_vec(),
            holders: vec![],
        };
        assert_eq!(
            verdict(&legacy, b"{ctr.1.0}k", Found::Counter),
            Verdict::Leave,
            "identity is never a home name alone"
        );
    }

    fn collection(id: u64, n: usize) -> Collection {
        Collection {
            spread_id: id,
            home: b"k".to_vec(),
            holders: (1..=n).map(|i| holder_name(b"k", id, i, 0)).collect(),
        }
    }

    #[test]
    fn pending_collections_are_resent_until_answered_or_expired() {
        let mut p = Pending::with_cap(1 << 20);
        assert!(p.add(collection(2, 3), 1000));
        assert_eq!(p.due(1000, 100).len(), 1);
        assert!(p.due(1050, 100).is_empty(), "resent after RESEND_MS");
        assert_eq!(p.due(1100, 100).len(), 1);
        // A partial answer: the rest is sent again.
        let mut part = collection(2, 3);
        part.holders.truncate(2);
        part.holders.push(b"not pending".to_vec());
        assert_eq!(p.answered(&part), 2);
        let again = p.due(1200, 100);
        assert_eq!(again[0].holders, vec![holder_name(b"k", 2, 3, 0)]);
        // Another spread's answer changes nothing.
        assert_eq!(p.answered(&collection(4, 3)), 0);
        assert_eq!(p.answered(&collection(2, 3)), 1);
        assert!(p.is_empty());
        assert_eq!(p.bytes, 0);
        // Unanswered past the timeout: abandoned.
        assert!(p.add(collection(6, 2), 5000));
        assert_eq!(p.expire(5000 + 10_000, 10_000), 0);
        assert_eq!(p.expire(5001 + 10_000, 10_000), 1);
        assert!(p.is_empty());
        assert_eq!(p.bytes, 0);
    }

    #[test]
    fn pending_memory_and_work_per_tick_are_bounded() {
        let one = collection(2, 10).bytes();
        let mut p = Pending::with_cap(3 * one);
        for id in [2, 4, 6] {
            assert!(p.add(collection(id, 10), 0));
        }
        assert!(!p.add(collection(8, 10), 0), "past the cap");
        assert_eq!(p.len(), 3);
        assert_eq!(p.due(0, 25).len(), 2, "20 names; a third would pass 25");
        assert_eq!(p.due(0, 25).len(), 1, "the rest, still due");
        assert_eq!(p.due(0, 1).len(), 0, "nothing due until the resend time");
        assert_eq!(p.due(RESEND_MS, 1).len(), 1, "one collection at least");
        // Past the first round, the longest waiting go first: none starves.
        let mut fair = Pending::with_cap(1 << 20);
        for id in [2, 4, 6] {
            assert!(fair.add(collection(id, 10), 0));
        }
        let ids = |due: Vec<Collection>| due.iter().map(|c| c.spread_id).collect::<Vec<_>>();
        assert_eq!(ids(fair.due(0, 10)), vec![2]);
        assert_eq!(ids(fair.due(RESEND_MS, 10)), vec![4], "never sent yet");
        assert_eq!(ids(fair.due(RESEND_MS, 10)), vec![6]);
        assert_eq!(ids(fair.due(2 * RESEND_MS, 10)), vec![2]);
        // Deleted again (restored and deleted): the names merge, the deadline is fresh.
        assert!(p.add(collection(2, 10), 50));
        assert_eq!(p.len(), 3);
        assert_eq!(p.expire(10_040, 10_000), 2);
        assert_eq!(p.len(), 1);
        assert!(!p.add(
            Collection {
                holders: vec![],
                ..collection(8, 1)
            },
            0
        ));
    }
}
