//! Spread counters, the pure part: cluster key slots (CRC16 with the hash-tag rule, computed here
//! because Redis 7.0 has no slot API for modules), and the choice of holder names so that every
//! holder sits in its own slot and the holders are spread evenly over the masters.
//!
//! A spread counter is its home key (holder 0) plus holder keys 1..N-1, each an ordinary
//! counter. The home records the names of holders 1..N-1 ([`Spread`]); the total is the home's
//! own value plus every holder's.

use super::CounterError;

/// Slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;
/// Largest number of holders of one spread counter, the home included.
pub const MAX_HOLDERS: usize = 1024;
/// Longest home key name that can be spread (holder names embed it).
pub const MAX_HOME_NAME: usize = 1024;
/// Longest holder name a decoder accepts (the home name plus the `{ctr.i.k}` tag).
pub const MAX_HOLDER_NAME: usize = MAX_HOME_NAME + 64;

/// The holders 1..N-1 of a spread counter (holder 0, the home key, is implicit).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spread {
    /// The spread's identity, carried in every holder's name ([`holder_name`]): made at random
    /// by the home's master when the counter first spreads, kept while it grows or shrinks,
    /// made afresh when it spreads again after being shrunk to 1. 0 for a spread made before
    /// ids, whose holders keep the older names.
    pub id: u64,
    pub holders: Vec<Vec<u8>>,
    /// A floored spread counter's floor `F` (each holder keeps its own floor, the floors
    /// summing to `F` when no budget move is in flight; docs/FLOORS.md). None when unfloored.
    pub floor: Option<i64>,
    /// A ceiled spread counter's ceiling `C`, the mirror of `floor` (each holder keeps its own
    /// ceiling, the ceilings summing to `C` when no move of ceiling units is in flight;
    /// docs/CLUSTER.md). None when unceiled. Its holders' names say it ([`ceiling_by_name`]).
    pub ceiling: Option<i64>,
}

impl Spread {
    /// An unbounded spread counter's holders.
    pub fn of(holders: Vec<Vec<u8>>) -> Spread {
        Spread {
            id: 0,
            holders,
            floor: None,
            ceiling: None,
        }
    }
}

/// A new spread id from 8 random bytes: never 0, which stands for "made before ids". Its
/// lowest bit says whether the spread is floored ([`is_floored_id`]): odd for a floored
/// counter, even (and nonzero) for an unfloored one.
pub fn spread_id_from(random: [u8; 8], floored: bool) -> u64 {
    let id = u64::from_le_bytes(random);
    if floored {
        id | 1
    } else {
        (id & !1).max(2)
    }
}

/// True when a spread of id `id` is floored: its id is odd. Spreads made before ids (0) and
/// unfloored spreads have even ids. The parity is set when the id is drawn and a spread home's
/// floor cannot change while it has holders (`CTR.FLOOR` refuses it), so it never lies.
pub fn is_floored_id(id: u64) -> bool {
    id & 1 == 1
}

/// The floor a key named `name` has while it has none of its own: 0 for a holder of a floored
/// spread (an odd spread id in its name), None for any other key. A holder of a floored spread
/// gets its own floor with its first budget credit, which may arrive later than the writes
/// sent to it (the replication gate delays it on masters with replicas); until then its name
/// alone keeps it from going below 0, so the total never goes below the counter's floor.
#[inline]
pub fn floor_by_name(name: &[u8]) -> Option<i64> {
    bounds_by_name(name).floor
}

/// The first search attempt of a ceiled spread's holder names: a holder of a ceiled spread is
/// named with an attempt from here on (`{ctr.<id>.<i>.<2147483648 + k>}<home>`), a holder of
/// any other spread with one below. A spread id has no bit free to say it (ids of spreads made
/// before ceilings are random), and an attempt this high is never reached by the planner's
/// search of an unceiled spread (each grow at a place takes a few attempts more).
pub const CEILED_ATTEMPTS: u32 = 1 << 31;

/// True when a holder named `h` belongs to a ceiled spread (its attempt is in the ceiled range).
pub fn is_ceiled_holder(h: &HolderName) -> bool {
    h.spread_id != 0 && h.attempt >= CEILED_ATTEMPTS as usize
}

/// The ceiling a key named `name` has while it has none of its own, the mirror of
/// [`floor_by_name`]: 0 for a holder of a ceiled spread, None for any other key. Until its
/// first credit of ceiling units lands, its name alone keeps it from going above 0, so the
/// total never goes above the counter's ceiling.
#[inline]
pub fn ceiling_by_name(name: &[u8]) -> Option<i64> {
    bounds_by_name(name).ceiling
}

/// The bounds a key's name holds it within while it has none of its own: a holder of a
/// floored spread at or above 0, of a ceiled one at or below 0, until its first credit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NameBounds {
    pub floor: Option<i64>,
    pub ceiling: Option<i64>,
}

impl NameBounds {
    pub fn is_none(&self) -> bool {
        self.floor.is_none() && self.ceiling.is_none()
    }

    /// True when adding `delta` to `value` would cross one of these bounds (a decrement below
    /// the floor, an increment above the ceiling), or overflow.
    pub fn refuses(&self, value: i64, delta: i64) -> bool {
        let floor = self.floor.filter(|_| delta < 0);
        let ceiling = self.ceiling.filter(|_| delta > 0);
        if floor.is_none() && ceiling.is_none() {
            return false;
        }
        value
            .checked_add(delta)
            .is_none_or(|v| floor.is_some_and(|f| v < f) || ceiling.is_some_and(|c| v > c))
    }
}

/// [`floor_by_name`] and [`ceiling_by_name`] from one parse (what every add asks): the one
/// place a name's bounds are read.
#[inline]
pub fn bounds_by_name(name: &[u8]) -> NameBounds {
    match parse_holder_name(name) {
        None => NameBounds::default(),
        Some(h) => NameBounds {
            floor: is_floored_id(h.spread_id).then_some(0),
            ceiling: is_ceiled_holder(&h).then_some(0),
        },
    }
}

/// The first attempt the planner may name holder `index` of a spread with: a ceiled spread's
/// names start at [`CEILED_ATTEMPTS`]; `known` is the first attempt the home's folded marks
/// allow at that place (`crate::counter::folded`).
pub fn first_attempt_for(ceiled: bool, known: u32) -> u32 {
    if ceiled {
        known.max(CEILED_ATTEMPTS)
    } else {
        known
    }
}

impl Spread {
    /// Holders including the home.
    pub fn count(&self) -> usize {
        self.holders.len() + 1
    }

    /// Checks what a decoder or a replicated state may carry: 1..MAX_HOLDERS-1 names, each
    /// non-empty and bounded, all in distinct slots; with an id, each a holder name carrying
    /// that id (a spread made before ids may name anything).
    pub fn validate(&self) -> Result<(), CounterError> {
        if self.holders.is_empty() || self.holders.len() >= MAX_HOLDERS {
            return Err(CounterError::InvalidOperation("holder count out of range"));
        }
        let mut slots: Vec<u16> = Vec::with_capacity(self.holders.len());
        for name in &self.holders {
            if name.is_empty() || name.len() > MAX_HOLDER_NAME {
                return Err(CounterError::InvalidOperation("holder name length"));
            }
            // Also a spread from before ids (id 0) names holders only (`{ctr.<i>.<k>}home`): a
            // holder list that names another key (a forged state) would let this home fold it.
            let Some(h) =
                parse_holder_name(name).filter(|h| h.spread_id == self.id || self.id == 0)
            else {
                return Err(CounterError::InvalidOperation(
                    "a holder name without the spread's id",
                ));
            };
            // A ceiled spread's holders are held at 0 from above by their names until their
            // first credit; a name without the mark would take adds past the ceiling.
            if is_ceiled_holder(&h) != self.ceiling.is_some() {
                return Err(CounterError::InvalidOperation(
                    "a holder name that does not say the spread's ceiling",
                ));
            }
            slots.push(key_slot(name));
        }
        slots.sort_unstable();
        if slots.windows(2).any(|w| w[0] == w[1]) {
            return Err(CounterError::InvalidOperation("two holders share a slot"));
        }
        Ok(())
    }

    pub fn heap_bytes(&self) -> usize {
        self.holders.capacity() * std::mem::size_of::<Vec<u8>>()
            + self.holders.iter().map(Vec::capacity).sum::<usize>()
    }
}

/// The home name a spread's holders carry (the home's name when it spread): what the home
/// signs its budget moves with, so that a home renamed since is still known to its holders.
pub fn carried_home<'a>(holders: impl IntoIterator<Item = &'a [u8]>) -> Option<&'a [u8]> {
    holders
        .into_iter()
        .find_map(|name| parse_holder_name(name).map(|h| h.home))
}

/// CRC16/XMODEM, the checksum Redis Cluster hashes keys with.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The cluster slot of a key: only the part inside the first `{...}` is hashed when that part
/// is not empty (the server's rule).
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

/// Every slot has a `{<n>}` name with n below this (the largest first one is 109,757).
const SLOT_NAME_BOUND: u32 = 110_000;

/// A key name in one of the slot ranges `ranges` (inclusive): `{<n>}` for the first n that
/// hashes into one. Something to ask the server's routing check about a set of slots with; a
/// third of the slots takes a few tries, a single slot up to [`SLOT_NAME_BOUND`]. None when the
/// ranges hold no slot.
pub fn name_in_slots(ranges: &[(usize, usize)]) -> Option<Vec<u8>> {
    (0..SLOT_NAME_BOUND)
        .map(|n| format!("{{{n}}}").into_bytes())
        .find(|name| {
            let slot = usize::from(key_slot(name));
            ranges
                .iter()
                .any(|&(first, last)| (first..=last).contains(&slot))
        })
}

/// Holder `index`'s name for search attempt `attempt`: a hash tag of its own in front of the
/// home's name, so the holder hashes on the tag alone whatever tag the home carries. The tag
/// carries the spread's id (`{ctr.<id as 16 hex digits>.<index>.<attempt>}<home>`), so a
/// spread made again under the same home name never names (and so never adopts) a holder of
/// an earlier one. `spread_id` 0 gives the names spreads had before ids (`{ctr.<i>.<k>}`).
pub fn holder_name(home: &[u8], spread_id: u64, index: usize, attempt: u32) -> Vec<u8> {
    let mut name = if spread_id == 0 {
        format!("{{ctr.{index}.{attempt}}}").into_bytes()
    } else {
        format!("{{ctr.{spread_id:016x}.{index}.{attempt}}}").into_bytes()
    };
    name.extend_from_slice(home);
    name
}

/// What a holder's name says of it: the spread it belongs to and that spread's home name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HolderName<'a> {
    /// The spread id in the tag; 0 for a name from before spread ids (`{ctr.<i>.<k>}`).
    pub spread_id: u64,
    pub index: usize,
    /// The planner's search attempt (the tag's last field).
    pub attempt: usize,
    pub home: &'a [u8],
}

/// Parses a holder name, `{ctr.<16 hex>.<i>.<k>}<home>` or the older `{ctr.<i>.<k>}<home>`
/// (decimal `i` >= 1 and `k`, lowercase hex). Any other key is not a holder: None. The
/// `{ctr.` tag prefix is reserved for holders, so a key so named is never a home.
#[inline]
pub fn parse_holder_name(name: &[u8]) -> Option<HolderName<'_>> {
    if !may_be_holder_name(name) {
        return None;
    }
    parse_tagged_name(name)
}

/// False for a name that cannot be a holder's, decided on its first byte: every ordinary
/// counter's name fails here, on the hot paths, with no call.
#[inline]
pub fn may_be_holder_name(name: &[u8]) -> bool {
    name.first() == Some(&b'{')
}

#[inline(never)]
fn parse_tagged_name(name: &[u8]) -> Option<HolderName<'_>> {
    let rest = name.strip_prefix(b"{ctr.")?;
    let close = rest.iter().position(|&b| b == b'}')?;
    let (tag, home) = (&rest[..close], &rest[close + 1..]);
    // No allocation: every add at a holder parses its name.
    let mut fields = tag.split(|&b| b == b'.');
    let (first, second, third) = (fields.next()?, fields.next()?, fields.next());
    if fields.next().is_some() {
        return None;
    }
    let (spread_id, index, attempt) = match third {
        None => (0, canonical_decimal(first)?, canonical_decimal(second)?),
        Some(third) => (
            spread_id_hex(first)?,
            canonical_decimal(second)?,
            canonical_decimal(third)?,
        ),
    };
    let id_ok = spread_id != 0 || third.is_none();
    (index >= 1 && !home.is_empty() && id_ok).then_some(HolderName {
        spread_id,
        index,
        attempt,
        home,
    })
}

/// A decimal field of a holder name in its one spelling: digits only, no leading zero (but
/// "0"), at most 10 digits. Anything else (a sign, a leading zero) would give one holder two
/// names.
fn canonical_decimal(f: &[u8]) -> Option<usize> {
    let canonical = !f.is_empty() && f.len() <= 10 && (f == b"0" || f[0] != b'0');
    if !canonical {
        return None;
    }
    f.iter().try_fold(0usize, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(usize::from(digit))
    })
}

/// A spread id as a holder name spells it: 16 lowercase hex digits.
fn spread_id_hex(f: &[u8]) -> Option<u64> {
    if f.len() != 16 {
        return None;
    }
    f.iter().try_fold(0u64, |n, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        Some(n << 4 | u64::from(digit))
    })
}

/// True when `a` and `b` are members of one spread: two holder names with the same spread id
/// and the same home, or a holder name and the home name it carries (either way round). Every
/// holder of one spread carries the home's name when it first spread (a grow after a `RENAME`
/// names its holders so too). The home is compared also with an id: ids are public (holder
/// names show them), and a user allowed to write `{ctr.*}<its own home>` names must not pass
/// for a member of another home's spread.
pub fn same_spread(a: &[u8], b: &[u8]) -> bool {
    match (parse_holder_name(a), parse_holder_name(b)) {
        (Some(x), Some(y)) => x.spread_id == y.spread_id && x.home == y.home,
        (Some(x), None) => x.home == b,
        (None, Some(y)) => y.home == a,
        (None, None) => false,
    }
}

/// Which master owns each slot, as the spreading node sees it.
pub trait SlotOwners {
    /// Number of masters (at least 1).
    fn masters(&self) -> usize;
    /// The master (0..masters) owning `slot`, None when unassigned.
    fn owner(&self, slot: u16) -> Option<usize>;
}

/// A server outside a cluster: every slot is its own.
pub struct Standalone;

impl SlotOwners for Standalone {
    fn masters(&self) -> usize {
        1
    }
    fn owner(&self, _slot: u16) -> Option<usize> {
        Some(0)
    }
}

/// Why holders could not be planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// No free slot of some master could be found for a new holder.
    NoSlot,
}

/// Names for holders `existing.len()+1 .. target-1`, appended to `existing`: each in a slot no
/// other holder (nor the home) uses, each placed on the master that holds the fewest holders
/// so far (ties to the lowest master index), so that the counts per master differ by at most
/// one when starting from an even spread.
pub fn plan_holders(
    home: &[u8],
    spread_id: u64,
    existing: &[Vec<u8>],
    target: usize,
    owners: &impl SlotOwners,
) -> Result<Vec<Vec<u8>>, PlanError> {
    plan_holders_avoiding(
        home,
        spread_id,
        existing,
        target,
        owners,
        &|_| false,
        &|_| 0,
    )
}

/// [`plan_holders`], never choosing a name `taken` refuses (a holder folded back earlier may
/// still exist, sealed, under its old name), and at each index no attempt below
/// `first_attempt(index)` (the home knows a name at that place with a later attempt: the
/// holders of one place are made in increasing attempts, `crate::counter::folded`).
pub fn plan_holders_avoiding(
    home: &[u8],
    spread_id: u64,
    existing: &[Vec<u8>],
    target: usize,
    owners: &impl SlotOwners,
    taken: &dyn Fn(&[u8]) -> bool,
    first_attempt: &dyn Fn(usize) -> u32,
) -> Result<Vec<Vec<u8>>, PlanError> {
    let masters = owners.masters().max(1);
    let mut used: Vec<bool> = vec![false; SLOTS as usize];
    let mut per_master = vec![0usize; masters];
    let home_slot = key_slot(home);
    used[home_slot as usize] = true;
    if let Some(m) = owners.owner(home_slot) {
        per_master[m] += 1;
    }
    for name in existing {
        let slot = key_slot(name);
        used[slot as usize] = true;
        if let Some(m) = owners.owner(slot) {
            per_master[m] += 1;
        }
    }
    let mut added = Vec::new();
    for index in existing.len() + 1..target {
        let master = (0..masters)
            .min_by_key(|&m| (per_master[m], m))
            .unwrap_or(0);
        // Each slot belongs to one master; 16384 attempts per master find one of its free
        // slots with overwhelming likelihood when it has any.
        let attempts = 16 * u32::from(SLOTS);
        let first = first_attempt(index).min(u32::MAX - attempts);
        let name = (first..first + attempts)
            .map(|attempt| holder_name(home, spread_id, index, attempt))
            .find(|name| {
                let slot = key_slot(name);
                !used[slot as usize] && owners.owner(slot) == Some(master) && !taken(name)
            })
            .ok_or(PlanError::NoSlot)?;
        used[key_slot(&name) as usize] = true;
        per_master[master] += 1;
        added.push(name);
    }
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_name_below_the_bound() {
        let mut first = vec![None; SLOTS as usize];
        for n in 0..SLOT_NAME_BOUND {
            let slot = key_slot(format!("{{{n}}}").as_bytes()) as usize;
            first[slot].get_or_insert(n);
        }
        assert!(first.iter().all(Option::is_some));
        for slot in [0usize, 1, 5461, 12333, SLOTS as usize - 1] {
            let name = name_in_slots(&[(slot, slot)]).expect("a name");
            assert_eq!(usize::from(key_slot(&name)), slot);
            let expected = format!("{{{}}}", first[slot].unwrap());
            assert_eq!(name, expected.into_bytes());
        }
    }

    #[test]
    fn a_name_in_slot_ranges_falls_in_one_of_them() {
        let ranges = [(10, 20), (5461, 10922)];
        let name = name_in_slots(&ranges).expect("a name");
        let slot = usize::from(key_slot(&name));
        assert!(ranges.iter().any(|&(a, b)| (a..=b).contains(&slot)));
        assert_eq!(name_in_slots(&[]), None);
        assert_eq!(name_in_slots(&[(9, 3)]), None);
    }

    /// `n` masters owning even slot ranges, like `redis-cli --cluster create`.
    struct Ranges(usize);

    impl SlotOwners for Ranges {
        fn masters(&self) -> usize {
            self.0
        }
        fn owner(&self, slot: u16) -> Option<usize> {
            Some(slot as usize * self.0 / SLOTS as usize)
        }
    }

    fn per_master(home: &[u8], holders: &[Vec<u8>], owners: &impl SlotOwners) -> Vec<usize> {
        let mut counts = vec![0; owners.masters()];
        for name in std::iter::once(home).chain(holders.iter().map(Vec::as_slice)) {
            counts[owners.owner(key_slot(name)).unwrap()] += 1;
        }
        counts
    }

    #[test]
    fn slots_follow_the_cluster_spec() {
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
    }

    #[test]
    fn sixteen_holders_on_three_masters_are_five_five_six() {
        for home in [&b"views"[..], b"{user:1}:views", b"{ctr.1.0}x", b""] {
            let holders = plan_holders(home, 7, &[], 16, &Ranges(3)).unwrap();
            assert_eq!(holders.len(), 15);
            let mut counts = per_master(home, &holders, &Ranges(3));
            counts.sort_unstable();
            assert_eq!(counts, vec![5, 5, 6], "{home:?}");
            let spread = Spread::of(holders);
            if !home.is_empty() {
                spread.validate().unwrap();
            }
            assert!(
                spread.holders.iter().all(|h| key_slot(h) != key_slot(home)),
                "no holder shares the home's slot"
            );
        }
    }

    #[test]
    fn growing_keeps_the_holders_and_stays_even() {
        let first = plan_holders(b"k", 7, &[], 4, &Ranges(3)).unwrap();
        let more = plan_holders(b"k", 7, &first, 9, &Ranges(3)).unwrap();
        assert_eq!(more.len(), 5);
        let all: Vec<Vec<u8>> = first.iter().chain(&more).cloned().collect();
        assert_eq!(per_master(b"k", &all, &Ranges(3)), vec![3, 3, 3]);
        Spread::of(all).validate().unwrap();
        assert!(plan_holders(b"k", 7, &first, 4, &Ranges(3))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn regrowing_never_reuses_a_folded_name() {
        let first = plan_holders(b"k", 7, &[], 4, &Ranges(3)).unwrap();
        let folded = first[1..].to_vec();
        let taken = |n: &[u8]| folded.iter().any(|f| f == n);
        let again =
            plan_holders_avoiding(b"k", 7, &first[..1], 4, &Ranges(3), &taken, &|_| 0).unwrap();
        assert!(again.iter().all(|n| !folded.contains(n)));
        let all: Vec<Vec<u8>> = first[..1].iter().chain(&again).cloned().collect();
        assert_eq!(per_master(b"k", &all, &Ranges(3)), vec![2, 1, 1]);
    }

    #[test]
    fn standalone_holders_take_distinct_slots() {
        let holders = plan_holders(b"k", 7, &[], 64, &Standalone).unwrap();
        assert_eq!(holders.len(), 63);
        Spread::of(holders).validate().unwrap();
    }

    #[test]
    fn a_master_without_free_slots_is_an_error() {
        struct Tiny;
        impl SlotOwners for Tiny {
            fn masters(&self) -> usize {
                2
            }
            fn owner(&self, slot: u16) -> Option<usize> {
                Some(usize::from(slot != 0))
            }
        }
        // Master 0 owns slot 0 only: the second holder of master 0 cannot be placed.
        assert_eq!(
            plan_holders(b"k", 7, &[], 4, &Tiny),
            Err(PlanError::NoSlot),
            "no slot left"
        );
    }

    #[test]
    fn holder_names_carry_their_spread_and_home() {
        let name = holder_name(b"{user:1}:views", 0xab, 3, 17);
        assert_eq!(name, b"{ctr.00000000000000ab.3.17}{user:1}:views".to_vec());
        let parsed = parse_holder_name(&name).unwrap();
        assert_eq!(
            (parsed.spread_id, parsed.index, parsed.home),
            (0xab, 3, &b"{user:1}:views"[..])
        );
        let legacy = parse_holder_name(b"{ctr.2.0}k").unwrap();
        assert_eq!(
            (legacy.spread_id, legacy.index, legacy.home),
            (0, 2, &b"k"[..])
        );
        assert_eq!(holder_name(b"k", 0, 2, 0), b"{ctr.2.0}k".to_vec());
        // The largest of each field parses back.
        let widest = holder_name(b"k", u64::MAX, 9_999_999_999, u32::MAX);
        let parsed = parse_holder_name(&widest).unwrap();
        assert_eq!(
            (parsed.spread_id, parsed.index, parsed.attempt),
            (u64::MAX, 9_999_999_999, u32::MAX as usize)
        );
        for not_a_holder in [
            &b"views"[..],
            b"{ctr.}k",
            b"{ctr.1}k",
            b"{ctr.0.0}k",
            b"{ctr.1.0}",
            b"{ctr.01.0}k",
            b"{ctr.1.0.0.0}k",
            b"{ctr.00000000000000AB.1.0}k",
            b"{ctr.0000000000000000.1.0}k",
            b"{ctr.abc.1.0}k",
            b"{ctr.1.x}k",
            b"{ctr.1.0k",
            b"x{ctr.1.0}k",
            // One spelling per holder: a sign would give holder 1 a second name.
            b"{ctr.+1.0}k",
            b"{ctr.1.+0}k",
            b"{ctr.00000000000000ab.+3.17}k",
            b"{ctr.1.12345678901}k",
            b"{ctr.00000000000000ab0.1.0}k",
        ] {
            assert_eq!(parse_holder_name(not_a_holder), None, "{not_a_holder:?}");
        }
    }

    #[test]
    fn members_of_one_spread_are_told_apart_from_others() {
        let a = holder_name(b"k", 5, 1, 0);
        let b = holder_name(b"k", 5, 2, 9);
        assert!(same_spread(&a, &b));
        assert!(same_spread(&a, b"k") && same_spread(b"k", &b));
        assert!(
            !same_spread(&a, &holder_name(b"k", 6, 2, 0)),
            "another spread"
        );
        assert!(
            !same_spread(&a, &holder_name(b"j", 5, 2, 0)),
            "the same (public) id carrying another home: not a member"
        );
        assert!(
            !same_spread(b"{ctr.1.0}k", b"{ctr.2.0}j"),
            "older names: by home"
        );
        assert!(same_spread(b"{ctr.1.0}k", b"{ctr.2.0}k"));
        assert!(!same_spread(&a, b"j"));
        assert!(!same_spread(b"k", b"k"), "two homes");
    }

    #[test]
    fn the_parity_of_a_spread_id_says_whether_it_is_floored() {
        for random in [0u64, 1, 2, 7, u64::MAX, u64::MAX - 1] {
            let floored = spread_id_from(random.to_le_bytes(), true);
            let unfloored = spread_id_from(random.to_le_bytes(), false);
            assert!(is_floored_id(floored) && floored != 0, "{random}");
            assert!(!is_floored_id(unfloored) && unfloored != 0, "{random}");
        }
        assert!(!is_floored_id(0), "spreads made before ids");
        assert_eq!(floor_by_name(&holder_name(b"k", 0xab, 1, 0)), Some(0));
        assert_eq!(floor_by_name(&holder_name(b"k", 0xac, 1, 0)), None);
        assert_eq!(
            floor_by_name(&holder_name(b"k", 0, 1, 0)),
            None,
            "before ids"
        );
        assert_eq!(floor_by_name(b"k"), None);
        assert_eq!(floor_by_name(b"{ctr.0000000000000003.0.0}k"), None);
    }

    /// A ceiled spread's holders are named with attempts from `CEILED_ATTEMPTS` on: their
    /// names hold them at 0 from above; every other name does not, and a spread's record
    /// refuses a holder whose name does not say its ceiling (or says one it does not have).
    #[test]
    fn a_ceiled_spreads_holder_names_say_its_ceiling() {
        let first = |_| first_attempt_for(true, 0);
        let ceiled =
            plan_holders_avoiding(b"k", 0xac, &[], 4, &Standalone, &|_| false, &first).unwrap();
        let plain = plan_holders(b"k", 0xac, &[], 4, &Standalone).unwrap();
        for name in &ceiled {
            assert_eq!(ceiling_by_name(name), Some(0), "{name:?}");
            let both = bounds_by_name(name);
            assert_eq!((both.floor, both.ceiling), (None, Some(0)));
        }
        assert!(plain.iter().all(|n| ceiling_by_name(n).is_none()));
        let marked_floored = holder_name(b"k", 0xab, 1, CEILED_ATTEMPTS + 3);
        let both = bounds_by_name(&marked_floored);
        assert_eq!((both.floor, both.ceiling), (Some(0), Some(0)));
        assert_eq!(
            ceiling_by_name(&holder_name(b"k", 0, 1, CEILED_ATTEMPTS)),
            None,
            "a name from before ids is never ceiled"
        );
        assert_eq!(
            first_attempt_for(true, CEILED_ATTEMPTS + 7),
            CEILED_ATTEMPTS + 7
        );
        assert_eq!(first_attempt_for(false, 7), 7);
        let record = |holders: &[Vec<u8>], ceiling| Spread {
            id: 0xac,
            holders: holders.to_vec(),
            floor: None,
            ceiling,
        };
        assert!(record(&ceiled, Some(50)).validate().is_ok());
        assert!(record(&plain, None).validate().is_ok());
        assert!(
            record(&plain, Some(50)).validate().is_err(),
            "unmarked names"
        );
        assert!(
            record(&ceiled, None).validate().is_err(),
            "marked names, no ceiling"
        );
        // A ceiled spread's home keeps a ceiling of its own (its share), an unceiled one none.
        let mut home = crate::counter::Counter::plain(5);
        assert!(home.set_spread(record(&ceiled, Some(50))).is_err());
        home.set_ceiling(Some(9)).unwrap();
        assert!(home.set_spread(record(&plain, None)).is_err());
        home.set_spread(record(&ceiled, Some(50))).unwrap();
        // Its share can neither change nor go: the shares would no longer sum to the ceiling.
        for ceiling in [None, Some(12)] {
            assert_eq!(
                home.set_ceiling(ceiling),
                Err(crate::counter::CounterError::CeilingOnSpread)
            );
        }
        assert_eq!(home.ceiling().map(|c| c.ceiling), Some(9));
    }

    #[test]
    fn spread_ids_are_never_zero_and_name_every_holder() {
        assert_eq!(spread_id_from([0; 8], true), 1, "0 means: made before ids");
        assert_eq!(spread_id_from([0; 8], false), 2, "0 means: made before ids");
        assert_eq!(spread_id_from(7u64.to_le_bytes(), true), 7);
        assert_eq!(spread_id_from(7u64.to_le_bytes(), false), 6);
        let holders = plan_holders(b"k", 0xfeed, &[], 4, &Standalone).unwrap();
        for (i, name) in holders.iter().enumerate() {
            let parsed = parse_holder_name(name).unwrap();
            assert_eq!(
                (parsed.spread_id, parsed.index, parsed.home),
                (0xfeed, i + 1, &b"k"[..])
            );
        }
        // Two spreads of the same home share no holder name.
        let other = plan_holders(b"k", 0xbeef, &[], 4, &Standalone).unwrap();
        assert!(holders.iter().all(|h| !other.contains(h)));
        // Growing a spread made before ids keeps its older names.
        let legacy = plan_holders(b"k", 0, &[], 3, &Standalone).unwrap();
        assert!(legacy
            .iter()
            .all(|h| h.starts_with(b"{ctr.") && parse_holder_name(h).unwrap().spread_id == 0));
        let spread = Spread {
            id: 0xfeed,
            holders: holders.clone(),
            floor: None,
            ceiling: None,
        };
        spread.validate().unwrap();
        let foreign = Spread {
            id: 0xbeef,
            ..spread.clone()
        };
        assert!(foreign.validate().is_err(), "names of another spread");
        let unnamed = Spread {
            id: 0xfeed,
            holders: vec![b"{a}1".to_vec()],
            floor: None,
            ceiling: None,
        };
        assert!(unnamed.validate().is_err(), "not a holder name");
        assert!(
            Spread::of(vec![b"{ctr.1.0}a".to_vec()]).validate().is_ok(),
            "before ids"
        );
        assert!(
            Spread::of(vec![b"{a}1".to_vec()]).validate().is_err(),
            "before ids too, a holder list names holders only (issue 23, item 2)"
        );
    }

    #[test]
    fn validation_refuses_shared_slots_and_bad_names() {
        assert!(Spread::default().validate().is_err());
        let same = vec![b"{a}1".to_vec(), b"{a}2".to_vec()];
        assert!(Spread::of(same).validate().is_err());
        assert!(Spread::of(vec![Vec::new()]).validate().is_err());
        assert!(Spread::of(vec![vec![b'x'; MAX_HOLDER_NAME + 1]])
            .validate()
            .is_err());
    }
}
