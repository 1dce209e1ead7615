//! Unit and property tests of the PN-Counter core. The properties run on states built by random
//! operation histories from a small deterministic PRNG (xorshift64*), so failures reproduce.

use super::*;

/// xorshift64* (Vigna): deterministic, good enough to drive property tests.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn delta(&mut self) -> i64 {
        self.below(2001) as i64 - 1000
    }
}

fn id(s: &str) -> ReplicaId {
    ReplicaId::parse(s.as_bytes()).unwrap()
}

fn entry(s: &str, p: u64, n: u64) -> Entry {
    Entry { id: id(s), p, n }
}

#[test]
fn add_writes_p_or_n_of_one_slot() {
    let (a, b) = (id("a"), id("b"));
    let mut c = PnCounter::new();
    assert_eq!(c.add(&a, 5), Ok(5));
    assert_eq!(c.add(&a, -2), Ok(3));
    assert_eq!(c.add(&b, -10), Ok(-7));
    assert_eq!(c.add(&b, 0), Ok(-7));
    assert_eq!(c.entries(), &[entry("a", 5, 2), entry("b", 0, 10)]);
    assert_eq!(c.add(&id("c"), 0), Ok(-7));
    assert_eq!(c.entries().len(), 2, "a zero add creates no slot");
}

#[test]
fn overflow_of_a_slot_or_the_value_changes_nothing() {
    let a = id("a");
    let mut c = PnCounter::new();
    assert_eq!(c.add(&a, i64::MAX), Ok(i64::MAX));
    let before = c.clone();
    assert_eq!(c.add(&a, 1), Err(PncError::Overflow), "value");
    assert_eq!(c, before);
    // The value has room but the N slot of `a` would exceed SLOT_MAX.
    assert_eq!(c.add(&a, -i64::MAX), Ok(0));
    assert_eq!(c.add(&a, -1), Err(PncError::Overflow), "slot");
    assert_eq!(c.value(), 0);
    assert_eq!(c.entries(), &[entry("a", SLOT_MAX, SLOT_MAX)]);
    // i64::MIN's magnitude does not fit in one slot.
    let mut fresh = PnCounter::new();
    assert_eq!(fresh.add(&a, i64::MIN), Err(PncError::Overflow));
    assert_eq!(fresh, PnCounter::new());
}

#[test]
fn the_value_can_reach_both_ends_of_the_i64_range() {
    let mut c = PnCounter::new();
    c.add(&id("a"), -i64::MAX).unwrap();
    assert_eq!(c.add(&id("b"), -1), Ok(i64::MIN));
    assert_eq!(c.add(&id("b"), -1), Err(PncError::Overflow));
    // The observed reset of i64::MIN would need 2^63 in one slot.
    assert_eq!(c.observed_reset(&id("b")), Err(PncError::Overflow));
    assert_eq!(c.value(), i64::MIN);
}

#[test]
fn too_many_replicas_is_refused() {
    let mut c = PnCounter::new();
    for i in 0..MAX_REPLICAS {
        c.add(&id(&format!("r{i:04}")), 1).unwrap();
    }
    assert_eq!(c.add(&id("zzz"), 1), Err(PncError::TooManyReplicas));
    assert_eq!(c.add(&id("r0000"), 1), Ok(MAX_REPLICAS as i64 + 1));
    let mut other = PnCounter::new();
    other.add(&id("zzz"), 1).unwrap();
    assert_eq!(c.merged(&other), Err(PncError::TooManyReplicas));
    assert_eq!(other.merged(&c), Err(PncError::TooManyReplicas));
}

#[test]
fn observed_reset_keeps_concurrent_adds_elsewhere() {
    let (a, b) = (id("a"), id("b"));
    let mut here = PnCounter::new();
    here.add(&a, 10).unwrap();
    let mut there = here.clone();
    // Concurrently: a reset here, an add there.
    assert_eq!(here.observed_reset(&a), Ok(10));
    assert_eq!(here.value(), 0);
    there.add(&b, 3).unwrap();
    let merged = here.merged(&there).unwrap();
    assert_eq!(merged.value(), 3);
    assert_eq!(there.merged(&here).unwrap().value(), 3);
    // Resetting a negative value adds to P.
    let mut neg = PnCounter::new();
    neg.add(&a, -4).unwrap();
    assert_eq!(neg.observed_reset(&b), Ok(-4));
    assert_eq!(neg.entries(), &[entry("a", 0, 4), entry("b", 4, 0)]);
}

#[test]
fn merge_takes_the_elementwise_maximum() {
    let x = PnCounter::from_entries(vec![entry("a", 5, 1), entry("c", 2, 0)], None).unwrap();
    let y = PnCounter::from_entries(vec![entry("a", 3, 4), entry("b", 7, 7)], None).unwrap();
    let m = x.merged(&y).unwrap();
    assert_eq!(
        m.entries(),
        &[entry("a", 5, 4), entry("b", 7, 7), entry("c", 2, 0)]
    );
    assert_eq!(m.value(), 5 - 4 + 2);
}

#[test]
fn merge_refuses_an_out_of_range_value_and_keeps_home() {
    let x = PnCounter::from_entries(vec![entry("a", SLOT_MAX, 0)], None).unwrap();
    let y = PnCounter::from_entries(vec![entry("b", 1, 0)], None).unwrap();
    assert_eq!(x.merged(&y), Err(PncError::Overflow));
    let home = Home {
        id: id("h"),
        gen: 3,
    };
    let mut z = PnCounter::new();
    z.set_home(Some(home.clone()));
    assert_eq!(z.merged(&y).unwrap().home(), Some(&home));
    assert_eq!(y.merged(&z).unwrap().home(), None);
}

#[test]
fn from_entries_checks_every_invariant() {
    let ok = |v: Vec<Entry>| PnCounter::from_entries(v, None);
    assert!(ok(vec![]).is_ok());
    assert_eq!(
        ok(vec![entry("a", 1, 0), entry("a", 2, 0)]),
        Err(StateError::DuplicateId)
    );
    assert_eq!(
        ok(vec![entry("b", 1, 0), entry("a", 2, 0)]),
        Err(StateError::Unordered)
    );
    assert_eq!(
        ok(vec![entry("a", SLOT_MAX + 1, 0)]),
        Err(StateError::SlotOutOfRange)
    );
    assert_eq!(
        ok(vec![entry("a", SLOT_MAX, 0), entry("b", 1, 0)]),
        Err(StateError::ValueOutOfRange)
    );
    assert_eq!(
        ok(vec![entry("a", 0, SLOT_MAX), entry("b", 0, 1)])
            .unwrap()
            .value(),
        i64::MIN
    );
    let many = (0..=MAX_REPLICAS)
        .map(|i| entry(&format!("r{i:05}"), 0, 0))
        .collect();
    assert_eq!(ok(many), Err(StateError::TooManyReplicas));
}

/// A random state: a random history of adds, resets and merges among `ids` replicas.
fn random_state(rng: &mut Rng, ids: &[ReplicaId]) -> PnCounter {
    let mut c = PnCounter::new();
    for _ in 0..rng.below(12) {
        let who = &ids[rng.below(ids.len() as u64) as usize];
        match rng.below(10) {
            0 => {
                let _ = c.observed_reset(who);
            }
            _ => {
                c.add(who, rng.delta()).unwrap();
            }
        }
    }
    c
}

fn merge(a: &PnCounter, b: &PnCounter) -> PnCounter {
    a.merged(b).unwrap()
}

#[test]
fn merge_is_commutative_associative_and_idempotent() {
    let ids: Vec<ReplicaId> = ["a", "b", "c", "d", "e"].iter().map(|s| id(s)).collect();
    let mut rng = Rng::new(0x5eed);
    for round in 0..2000 {
        let sub = &ids[..1 + rng.below(ids.len() as u64) as usize];
        let (x, y, z) = (
            random_state(&mut rng, sub),
            random_state(&mut rng, &ids),
            random_state(&mut rng, sub),
        );
        assert!(
            merge(&x, &y).same_state(&merge(&y, &x)),
            "commutative #{round}"
        );
        assert!(
            merge(&merge(&x, &y), &z).same_state(&merge(&x, &merge(&y, &z))),
            "associative #{round}"
        );
        assert!(merge(&x, &x).same_state(&x), "idempotent #{round}");
        // Merging is monotone: the result dominates both inputs, so re-merging either is a no-op.
        let m = merge(&x, &y);
        assert!(merge(&m, &x).same_state(&m) && merge(&m, &y).same_state(&m));
        // The cached value always equals the entries' sum.
        assert_eq!(m.value(), value_of(m.entries()).unwrap());
    }
}

/// Replicas that each add locally and exchange partial states at random reach, after a full
/// exchange, the exact sum of every add, whatever the exchange order.
#[test]
fn value_equals_the_sum_of_all_adds_after_full_exchange() {
    let mut rng = Rng::new(42);
    for round in 0..200 {
        let n = 2 + rng.below(5) as usize;
        let ids: Vec<ReplicaId> = (0..n).map(|i| id(&format!("rep{i}"))).collect();
        let mut replicas = vec![PnCounter::new(); n];
        let mut expected: i64 = 0;
        for _ in 0..rng.below(300) {
            let r = rng.below(n as u64) as usize;
            match rng.below(20) {
                0 => {
                    // Partial exchange: one replica merges another's state.
                    let from = rng.below(n as u64) as usize;
                    replicas[r] = merge(&replicas[r], &replicas[from].clone());
                }
                1 => {
                    // An observed reset only removes what this replica has seen.
                    let seen = replicas[r].value();
                    replicas[r].observed_reset(&ids[r]).unwrap();
                    expected -= seen;
                }
                _ => {
                    let d = rng.delta();
                    replicas[r].add(&ids[r], d).unwrap();
                    expected += d;
                }
            }
        }
        // Full exchange in a random order, twice (one random pass may not carry everything).
        for _ in 0..2 {
            let mut pairs: Vec<(usize, usize)> = (0..n)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .filter(|(i, j)| i != j)
                .collect();
            for k in (1..pairs.len()).rev() {
                pairs.swap(k, rng.below(k as u64 + 1) as usize);
            }
            for (i, j) in pairs {
                replicas[i] = merge(&replicas[i], &replicas[j].clone());
            }
        }
        for (r, c) in replicas.iter().enumerate() {
            assert_eq!(c.value(), expected, "round {round} replica {r}");
            assert!(c.same_state(&replicas[0]));
        }
    }
}

#[test]
fn heap_accounting_grows_with_entries() {
    let mut c = PnCounter::new();
    assert_eq!(c.heap_bytes(), 0);
    assert_eq!(c.allocations(), 0);
    c.add(&id("abc"), 1).unwrap();
    assert_eq!(c.heap_bytes(), 0, "one entry lives inside the counter");
    assert_eq!(c.allocations(), 0);
    let one = std::mem::size_of::<Entry>();
    c.add(&id("abd"), 1).unwrap();
    assert_eq!(c.heap_bytes(), 2 * one, "exact capacity, inline ids");
    assert_eq!(c.allocations(), 1);
    let long = id(&"x".repeat(40));
    c.add(&long, 1).unwrap();
    assert_eq!(c.heap_bytes(), 3 * one + 40);
    assert_eq!(c.allocations(), 2);
    c.set_home(Some(Home { id: long, gen: 1 }));
    assert_eq!(c.allocations(), 3);
    let merged = c.merged(&PnCounter::new()).unwrap();
    assert_eq!(
        merged.heap_bytes(),
        3 * one + 80,
        "merged entries are exact too"
    );
}

#[test]
fn add_at_home_writes_the_home_slot_found_without_a_search() {
    let ids: Vec<ReplicaId> = ["b", "d", "f", "h"].iter().map(|s| id(s)).collect();
    let mut rng = Rng::new(0x40_4e);
    for _ in 0..2000 {
        // A random history that inserts ids before and after the home slot, merges, and moves
        // the home: the fast path must always agree with an add to the home record's id.
        let mut c = random_state(&mut rng, &ids);
        let home_id = ids[rng.below(ids.len() as u64) as usize].clone();
        c.set_home(Some(Home {
            id: home_id.clone(),
            gen: 1,
        }));
        for _ in 0..6 {
            match rng.below(4) {
                0 => {
                    let other = id(["a", "c", "e", "g", "i"][rng.below(5) as usize]);
                    c.add(&other, rng.delta()).unwrap();
                }
                1 => c = merge(&c, &random_state(&mut rng, &ids)),
                _ => {
                    let delta = rng.delta();
                    let mut expected = c.clone();
                    let want = expected.add(&home_id, delta);
                    assert_eq!(c.add_at_home(delta), Some(want));
                    assert_eq!(c, expected);
                }
            }
        }
    }
}

#[test]
fn add_at_home_needs_a_home_and_creates_its_slot() {
    let mut c = PnCounter::new();
    assert_eq!(c.add_at_home(5), None, "no home record: nothing to write");
    assert_eq!(c, PnCounter::new());
    c.set_home(Some(Home {
        id: id("m"),
        gen: 2,
    }));
    assert_eq!(c.add_at_home(0), Some(Ok(0)), "a zero add makes no slot");
    assert!(c.entries().is_empty());
    assert_eq!(c.add_at_home(-4), Some(Ok(-4)));
    assert_eq!(
        c.add(&id("a"), 1),
        Ok(-3),
        "an id inserted before the home slot"
    );
    assert_eq!(c.add_at_home(7), Some(Ok(4)));
    assert_eq!(c.entries(), &[entry("a", 1, 0), entry("m", 7, 4)]);
    assert_eq!(c.add_at_home(i64::MIN), Some(Err(PncError::Overflow)));
    assert_eq!(c.entries(), &[entry("a", 1, 0), entry("m", 7, 4)]);
}

/// 96 bytes (the 96-byte allocation class, 8 of them the bounded part's pointer) with its first
/// entry inside: one allocation of 96
/// bytes instead of 64 + 48 for a counter one deployment wrote.
#[test]
fn a_counter_holds_one_entry_inline_in_96_bytes() {
    assert_eq!(std::mem::size_of::<PnCounter>(), 96);
}
