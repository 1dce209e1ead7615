use super::*;

fn add(c: &mut Counter, delta: i64) -> Result<i64, CounterError> {
    let shards = c.shard_count();
    add_at(c, 0, shards, delta)
}

/// An add that is expected not to be refused by a floor.
fn add_at(c: &mut Counter, shard: usize, shards: usize, delta: i64) -> Result<i64, CounterError> {
    c.apply_add(&AddOp {
        now: 1_000,
        event: 1_000,
        delta,
        shard,
        shards,
        token: None,
    })
    .map(|v| v.expect("not refused"))
}

#[test]
fn add_returns_running_total() {
    let mut c = Counter::default();
    assert_eq!(add(&mut c, 5), Ok(5));
    assert_eq!(add(&mut c, -7), Ok(-2));
    assert_eq!(c.value(), -2);
    assert_eq!(c.shard_count(), 1);
    assert!(c.is_plain());
}

#[test]
fn overflow_changes_nothing() {
    let mut c = Counter::plain(i64::MAX - 1);
    assert_eq!(add(&mut c, 2), Err(CounterError::Overflow));
    assert_eq!(c.value(), i64::MAX - 1);
    let mut c = Counter::plain(i64::MIN);
    assert_eq!(add(&mut c, -1), Err(CounterError::Overflow));
    assert_eq!(c.value(), i64::MIN);
}

#[test]
fn sharded_add_keeps_sum_exact() {
    let mut c = Counter::from_shards(vec![1, 2, 3]).unwrap();
    assert_eq!(c.value(), 6);
    add_at(&mut c, 1, 3, 10).unwrap();
    assert_eq!(c.shard_values(), vec![1, 12, 3]);
    assert_eq!(c.value(), 16);
}

#[test]
fn shard_overflow_changes_nothing_even_when_total_fits() {
    let mut c = Counter::from_shards(vec![i64::MAX, -10]).unwrap();
    assert_eq!(add_at(&mut c, 0, 2, 1), Err(CounterError::Overflow));
    assert_eq!(c.shard_values(), vec![i64::MAX, -10]);
}

#[test]
fn from_shards_rejects_overflowing_sum() {
    assert_eq!(
        Counter::from_shards(vec![i64::MAX, 1]),
        Err(CounterError::Overflow)
    );
    assert!(Counter::from_shards(vec![7]).unwrap().is_plain());
}

#[test]
fn invalid_operations_are_refused() {
    let mut c = Counter::plain(1);
    assert!(add_at(&mut c, 2, 2, 1).is_err());
    assert!(add_at(&mut c, 0, 0, 1).is_err());
    assert!(add_at(&mut c, 0, MAX_SHARDS + 1, 1).is_err());
    assert_eq!(c, Counter::plain(1));
}

#[test]
fn promotion_and_demotion_keep_the_exact_value() {
    let mut c = Counter::plain(100);
    add_at(&mut c, 1, 2, 5).unwrap();
    assert_eq!(c.shard_values(), vec![100, 5]);
    add_at(&mut c, 3, 4, 1).unwrap();
    assert_eq!(c.shard_values(), vec![100, 5, 0, 1]);
    add_at(&mut c, 1, 2, 0).unwrap();
    assert_eq!(c.shard_values(), vec![100, 6]);
    add_at(&mut c, 0, 1, 0).unwrap();
    assert_eq!(c.value(), 106);
    assert!(c.is_plain());
}

#[test]
fn folding_shards_that_overflow_together_is_refused() {
    let mut c = Counter::from_shards(vec![i64::MAX, -1, 1, 0]).unwrap();
    // shards 0 and 2 fold together: MAX + 1 overflows, though the total fits.
    assert_eq!(add_at(&mut c, 0, 2, 0), Err(CounterError::Overflow));
    assert_eq!(c.shard_count(), 4);
}

#[test]
fn tokens_are_remembered_until_expiry_and_swept_deterministically() {
    let mut c = Counter::default();
    let op = |now, fp, expires_at| AddOp {
        now,
        event: now,
        delta: 1,
        shard: 0,
        shards: 1,
        token: Some(TokenStamp { fp, expires_at }),
    };
    c.apply_add(&op(0, 11, 100)).unwrap();
    assert_eq!(
        c.token_use(11, WriteKind::Add(1), 99),
        TokenUse::Retry(Some(1))
    );
    assert_eq!(c.token_use(11, WriteKind::Add(1), 100), TokenUse::New);
    assert!(!c.is_plain());
    // Writes after the expiry sweep the token away.
    for now in 101..110 {
        c.apply_add(&AddOp {
            now,
            event: now,
            delta: 0,
            shard: 0,
            shards: 1,
            token: None,
        })
        .unwrap();
    }
    assert!(c.tokens().is_empty());
    assert!(c.is_plain());
}

#[test]
fn clear_resets_every_shard_and_reports_the_old_value() {
    let mut c = Counter::from_shards(vec![4, 5, 6]).unwrap();
    assert_eq!(
        c.apply_clear(&ClearOp {
            now: 1,
            token: None
        }),
        Ok(15)
    );
    assert_eq!(c.shard_values(), vec![0, 0, 0]);
    assert_eq!(c.value(), 0);
}

/// A tiny deterministic PRNG for the property tests (no extra dependency).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn random_operations_keep_value_equal_to_the_sum_of_shards_and_of_adds() {
    let mut rng = XorShift(0x1234_5678_9abc_def1);
    for _ in 0..50 {
        let mut c = Counter::default();
        let mut expected: i64 = 0;
        for step in 0..400 {
            let shards = 1usize << (rng.next() % 5);
            let shard = (rng.next() as usize) % shards;
            let delta = (rng.next() % 2001) as i64 - 1000;
            let before = c.clone();
            match c.apply_add(&AddOp {
                now: step,
                event: step,
                delta,
                shard,
                shards,
                token: None,
            }) {
                Ok(Some(v)) => {
                    expected += delta;
                    assert_eq!(v, expected);
                }
                Ok(None) => unreachable!("no floor"),
                Err(_) => assert_eq!(c, before),
            }
            assert_eq!(c.shard_values().iter().sum::<i64>(), c.value());
            assert_eq!(c.shard_count(), shards);
        }
    }
}

#[test]
fn advice_promotes_a_hot_counter_and_respects_the_maximum() {
    let mut c = Counter::default();
    let mut shards = 1;
    for ms in 0..5_000 {
        let target = c.advise_shards(1_000_000 + ms, 100, 4);
        if target != shards {
            let shard = 0;
            c.apply_add(&AddOp {
                now: ms,
                event: ms,
                delta: 1,
                shard,
                shards: target,
                token: None,
            })
            .unwrap();
            shards = target;
        }
    }
    assert_eq!(shards, 4, "1000 adds/s at threshold 100 reach the max of 4");
}

fn decr(c: &mut Counter, shard: usize, amount: i64, token: Option<u64>) -> Option<i64> {
    let shards = c.shard_count();
    c.apply_decrement(&DecrOp {
        now: 1_000,
        event: 1_000,
        amount,
        shard,
        shards,
        token: token.map(|fp| TokenStamp {
            fp,
            expires_at: 10_000,
        }),
    })
    .unwrap()
}

fn budgets_sum(c: &Counter) -> i64 {
    c.floor().map_or(0, |f| f.budgets.iter().sum())
}

#[test]
fn decrements_never_cross_the_floor_and_draw_from_other_shards() {
    let mut c = Counter::from_shards(vec![5, 5]).unwrap();
    c.set_floor(Some(2)).unwrap();
    assert_eq!(c.floor().unwrap().budgets, vec![4, 4]);
    assert_eq!(
        decr(&mut c, 0, 6, None),
        Some(4),
        "shard 0 is short: shard 1 covers the rest"
    );
    assert_eq!(c.floor().unwrap().budgets, vec![0, 2]);
    assert_eq!(decr(&mut c, 0, 3, None), None, "only 2 above the floor");
    assert_eq!(c.value(), 4);
    assert_eq!(decr(&mut c, 0, 2, None), Some(2));
    assert_eq!(decr(&mut c, 1, 1, None), None);
    assert_eq!(c.shard_values().iter().sum::<i64>(), 2);
}

#[test]
fn unfloored_decrements_stop_at_zero() {
    let mut c = Counter::plain(3);
    assert_eq!(decr(&mut c, 0, 4, None), None);
    assert_eq!(decr(&mut c, 0, 3, None), Some(0));
    assert!(c
        .apply_decrement(&DecrOp {
            now: 0,
            event: 0,
            amount: 0,
            shard: 0,
            shards: 1,
            token: None
        })
        .is_err());
}

#[test]
fn the_ledger_replays_the_first_outcome_even_after_a_restock() {
    let mut c = Counter::plain(1);
    c.set_floor(Some(0)).unwrap();
    assert_eq!(decr(&mut c, 0, 5, Some(42)), None);
    let retry = |c: &Counter, fp| c.token_use(fp, WriteKind::Decr(5), 1_000);
    assert_eq!(
        retry(&c, 42),
        TokenUse::Retry(None),
        "the refusal is recorded"
    );
    add(&mut c, 10).unwrap();
    assert_eq!(retry(&c, 42), TokenUse::Retry(None));
    assert_eq!(decr(&mut c, 0, 5, Some(43)), Some(6));
    assert_eq!(retry(&c, 43), TokenUse::Retry(Some(6)));
}

/// Finding 11 of issue 26: a grant on a spread counter's holder replied the holder's value
/// (-100 while 700 units remained: its floor is -125). A key that takes part in a spread
/// replies, and its ledger replays, the units it can still sell; a counter that is not spread
/// replies its new value, as always.
#[test]
fn a_grant_on_a_spread_member_replies_its_headroom_and_replays_it() {
    let purchase = |c: &mut Counter, amount, fp, named_holder| {
        c.apply_purchase(
            &DecrOp {
                now: 1_000,
                event: 1_000,
                amount,
                shard: 0,
                shards: 1,
                token: Some(TokenStamp {
                    fp,
                    expires_at: 10_000,
                }),
            },
            named_holder,
        )
        .unwrap()
    };
    // A holder: value 0, its own floor -125 (its share of 125).
    let mut holder = Counter::plain(0);
    holder.set_floor(Some(-125)).unwrap();
    assert_eq!(purchase(&mut holder, 100, 1, true), Some(25));
    assert_eq!(holder.value(), -100);
    assert_eq!(
        holder.token_use(1, WriteKind::Decr(100), 1_000),
        TokenUse::Retry(Some(25)),
        "the ledger replays the reply, whatever budget moves do to the floor later"
    );
    holder.set_floor(Some(-200)).unwrap();
    assert_eq!(
        holder.token_use(1, WriteKind::Decr(100), 1_000),
        TokenUse::Retry(Some(25))
    );
    assert_eq!(purchase(&mut holder, 100, 2, true), Some(0));
    assert_eq!(purchase(&mut holder, 1, 3, true), None);
    // A holder of a floored spread before its first credit (no floor of its own: 0).
    let mut fresh = Counter::plain(7);
    assert_eq!(purchase(&mut fresh, 2, 4, true), Some(5));
    // A home: it lists holders; its own floor is above the counter's.
    let mut home = Counter::plain(800);
    home.set_floor(Some(700)).unwrap();
    home.set_spread(Spread {
        id: 3,
        holders: vec![spread::holder_name(b"stock", 3, 1, 0)],
        floor: Some(0),
        ceiling: None,
    })
    .unwrap();
    assert_eq!(purchase(&mut home, 30, 5, false), Some(70));
    // Not spread: the new value, floor or not.
    let mut one = Counter::plain(50);
    one.set_floor(Some(10)).unwrap();
    assert_eq!(purchase(&mut one, 5, 6, false), Some(45));
    assert_eq!(one.purchase_reply(45, false), 45);
    assert_eq!(one.purchase_reply(45, true), 35);
}

#[test]
fn a_token_names_one_write_and_refuses_any_other() {
    let mut c = Counter::plain(100);
    c.set_floor(Some(0)).unwrap();
    let stamp = |fp| {
        Some(TokenStamp {
            fp,
            expires_at: 1_000,
        })
    };
    assert_eq!(decr(&mut c, 0, 2, Some(7)), Some(98));
    assert_eq!(
        c.token_use(7, WriteKind::Decr(2), 0),
        TokenUse::Retry(Some(98))
    );
    for other in [
        WriteKind::Decr(50),
        WriteKind::Add(-2),
        WriteKind::Add(1),
        WriteKind::Clear,
    ] {
        assert_eq!(c.token_use(7, other, 0), TokenUse::Conflict, "{other:?}");
    }
    // Adds: delta 1 in the add-token window, any other delta in the ledger.
    for (fp, delta) in [(8u64, 1i64), (9, 5)] {
        let op = AddOp {
            now: 0,
            event: 0,
            delta,
            shard: 0,
            shards: 1,
            token: stamp(fp),
        };
        c.apply_add(&op).unwrap();
        assert_eq!(
            c.token_use(fp, WriteKind::Add(delta), 0),
            TokenUse::Retry(Some(c.value()))
        );
        assert_eq!(
            c.token_use(fp, WriteKind::Add(delta + 1), 0),
            TokenUse::Conflict
        );
        assert_eq!(
            c.token_use(fp, WriteKind::Decr(delta), 0),
            TokenUse::Conflict
        );
    }
    assert_eq!(c.tokens().len(), 1);
    assert_eq!(c.token_counts(), (2, 1));
}

#[test]
fn a_refused_tokened_add_is_refused_again_even_after_a_restock() {
    let mut c = Counter::plain(3);
    c.set_floor(Some(0)).unwrap();
    let op = |delta| AddOp {
        now: 0,
        event: 0,
        delta,
        shard: 0,
        shards: 1,
        token: Some(TokenStamp {
            fp: 5,
            expires_at: 5_000,
        }),
    };
    assert_eq!(c.apply_add(&op(-10)).unwrap(), None);
    assert_eq!(c.value(), 3);
    add(&mut c, 100).unwrap();
    assert_eq!(
        c.token_use(5, WriteKind::Add(-10), 0),
        TokenUse::Retry(None)
    );
    assert_eq!(
        c.token_use(5, WriteKind::Add(-10), 5_000),
        TokenUse::New,
        "window over"
    );
}

#[test]
fn negative_adds_on_a_floored_counter_follow_the_floor() {
    let mut c = Counter::plain(10);
    c.set_floor(Some(8)).unwrap();
    let refused = c.apply_add(&AddOp {
        now: 0,
        event: 0,
        delta: -3,
        shard: 0,
        shards: 1,
        token: None,
    });
    assert_eq!(refused, Ok(None));
    assert_eq!(c.value(), 10);
    assert_eq!(add(&mut c, -2), Ok(8));
    assert_eq!(budgets_sum(&c), 0);
    let min = c.apply_add(&AddOp {
        now: 0,
        event: 0,
        delta: i64::MIN,
        shard: 0,
        shards: 1,
        token: None,
    });
    assert_eq!(min, Ok(None));
}

#[test]
fn floors_refuse_what_would_break_them() {
    let mut c = Counter::plain(5);
    assert_eq!(c.set_floor(Some(6)), Err(CounterError::BelowFloor));
    assert_eq!(c.set_floor(Some(i64::MIN)), Err(CounterError::Overflow));
    c.set_floor(Some(1)).unwrap();
    assert_eq!(
        c.apply_clear(&ClearOp {
            now: 0,
            token: None
        }),
        Err(CounterError::ClearAboveFloor)
    );
    c.set_floor(Some(-4)).unwrap();
    assert_eq!(
        c.apply_clear(&ClearOp {
            now: 0,
            token: None
        }),
        Ok(5)
    );
    assert_eq!(budgets_sum(&c), 4);
    assert_eq!(
        add(&mut c, i64::MAX),
        Err(CounterError::Overflow),
        "headroom must stay representable"
    );
    c.set_floor(None).unwrap();
    assert!(c.is_plain());
}

#[test]
fn random_floored_histories_keep_every_invariant() {
    let mut rng = XorShift(0xdead_beef_cafe_f00d);
    for _ in 0..100 {
        let floor = (rng.next() % 100) as i64 - 50;
        let mut c = Counter::plain(floor + (rng.next() % 200) as i64);
        c.set_floor(Some(floor)).unwrap();
        for step in 0..300 {
            let shards = 1usize << (rng.next() % 4);
            let shard = (rng.next() as usize) % shards;
            let headroom = c.value() - floor;
            match rng.next() % 3 {
                0 => {
                    // restock
                    let delta = (rng.next() % 50) as i64;
                    let op = AddOp {
                        now: step,
                        event: step,
                        delta,
                        shard,
                        shards,
                        token: None,
                    };
                    assert_eq!(c.apply_add(&op).unwrap(), Some(c.value()));
                }
                1 => {
                    let amount = 1 + (rng.next() % 60) as i64;
                    let op = DecrOp {
                        now: step,
                        event: step,
                        amount,
                        shard,
                        shards,
                        token: None,
                    };
                    let before = c.clone();
                    let granted = c.apply_decrement(&op).unwrap();
                    // Refused exactly when the whole headroom is short: no false refusal.
                    assert_eq!(
                        granted.is_some(),
                        amount <= headroom,
                        "amount {amount} headroom {headroom}"
                    );
                    if granted.is_none() {
                        assert_eq!(c, before);
                    }
                }
                _ => {
                    let delta = -((rng.next() % 60) as i64);
                    let op = AddOp {
                        now: step,
                        event: step,
                        delta,
                        shard,
                        shards,
                        token: None,
                    };
                    let granted = c.apply_add(&op).unwrap();
                    assert_eq!(granted.is_some(), -delta <= headroom);
                }
            }
            assert!(c.value() >= floor);
            assert_eq!(
                budgets_sum(&c),
                c.value() - floor,
                "budgets sum to the headroom"
            );
            assert!(c.floor().unwrap().budgets.iter().all(|b| *b >= 0));
            assert_eq!(c.floor().unwrap().budgets.len(), c.shard_count());
            assert_eq!(c.shard_values().iter().sum::<i64>(), c.value());
        }
    }
}

#[test]
fn a_boxed_counter_stays_small() {
    // A hot or large counter without options is this struct and its shard vector only; the
    // options live in one box allocated when first needed.
    assert!(
        std::mem::size_of::<Counter>() <= 72,
        "{}",
        std::mem::size_of::<Counter>()
    );
    let mut c = Counter::plain(1);
    c.set_floor(Some(0)).unwrap();
    c.set_floor(None).unwrap();
    assert!(c.is_plain(), "removing the floor frees the box");
}

fn reconcile_op(now: i64, truth: i64, watermark: Option<i64>) -> ReconcileOp {
    ReconcileOp {
        now,
        truth,
        watermark,
        width: 1_000,
        retention: 60_000,
    }
}

fn add_event(c: &mut Counter, now: i64, event: i64, delta: i64) {
    c.apply_add(&AddOp {
        now,
        event,
        delta,
        shard: 0,
        shards: c.shard_count(),
        token: None,
    })
    .unwrap();
}

fn start_op(now: i64, created: bool) -> StartOp {
    StartOp {
        now,
        width: 1_000,
        retention: 60_000,
        created,
    }
}

#[test]
fn start_makes_the_first_reconcile_exact_and_keeps_racing_adds() {
    // A counter that counted for a while without history, and ran 3 high.
    let mut c = Counter::default();
    add_event(&mut c, 100_000, 100_000, 103);
    let watermark_error = CounterError::Watermark(history::WatermarkError::NotTracked);
    assert_eq!(
        c.apply_reconcile(&reconcile_op(100_000, 100, Some(100_000))),
        Err(watermark_error)
    );
    assert_eq!(c.value(), 103, "a refused reconcile changes nothing");
    // START at 100_500: the earliest watermark is the next boundary, the value unchanged.
    assert_eq!(c.apply_start(&start_op(100_500, false)), (101_000, true));
    assert_eq!(c.value(), 103);
    assert_eq!(
        c.apply_start(&start_op(100_900, false)),
        (101_000, false),
        "START again is a no-op with the same reply"
    );
    // Adds racing the job: 2 before the first watermark, 20 after it.
    add_event(&mut c, 100_600, 100_600, 2);
    add_event(&mut c, 101_500, 101_500, 20);
    let before = c.apply_reconcile(&reconcile_op(102_000, 102, Some(100_000)));
    assert!(before.is_err(), "before the first accepted watermark");
    let repair = c
        .apply_reconcile(&reconcile_op(102_000, 102, Some(101_000)))
        .unwrap();
    assert_eq!((repair.value, repair.drift), (122, 3));
}

#[test]
fn a_counter_tracked_from_creation_accepts_watermarks_before_it_existed() {
    let mut c = Counter::default();
    let (earliest, changed) = c.apply_start(&start_op(100_000, true));
    assert!(changed);
    assert_eq!(earliest, 40_000, "everything retained: now - retention");
    // Back-dated events, one of them before the watermark.
    add_event(&mut c, 100_000, 50_500, 4);
    add_event(&mut c, 100_000, 70_500, 6);
    let repair = c
        .apply_reconcile(&reconcile_op(100_000, 5, Some(60_000)))
        .unwrap();
    assert_eq!((repair.value, repair.drift), (11, -1));
}

#[test]
fn drift_beyond_the_i64_range_is_exact() {
    let mut c = Counter::from_shards(vec![i64::MAX - 5, 5]).unwrap();
    let repair = c
        .apply_reconcile(&reconcile_op(1_000, i64::MIN, None))
        .unwrap();
    assert_eq!(repair.value, i64::MIN);
    assert_eq!(repair.drift, i128::from(i64::MAX) - i128::from(i64::MIN));
    assert_eq!(c.value(), i64::MIN);
    let h = c.history().unwrap();
    assert_eq!((h.last_drift, h.total_abs_drift), (i64::MAX, u64::MAX));
    // Back up to the other end.
    let repair = c
        .apply_reconcile(&reconcile_op(2_000, i64::MAX, None))
        .unwrap();
    assert_eq!(repair.drift, i128::from(i64::MIN) - i128::from(i64::MAX));
    assert_eq!(c.value(), i64::MAX);
}

#[test]
fn an_overwrite_that_finds_the_truth_on_a_tracked_counter_changes_nothing() {
    let mut c = Counter::plain(5);
    let first = c.apply_reconcile(&reconcile_op(1_000, 5, None)).unwrap();
    assert!(first.changed, "it starts the history");
    let snapshot = c.clone();
    let again = c.apply_reconcile(&reconcile_op(9_000, 5, None)).unwrap();
    assert!(!again.changed);
    assert_eq!(c, snapshot);
}

#[test]
fn the_idle_sweep_drops_everything_once_it_has_all_expired() {
    let mut c = Counter::default();
    for fp in 0..20u64 {
        c.apply_add(&AddOp {
            now: 1_000,
            event: 1_000,
            delta: 1,
            shard: 0,
            shards: 1,
            token: Some(TokenStamp {
                fp,
                expires_at: 5_000 + fp as i64,
            }),
        })
        .unwrap();
    }
    assert!(!c.has_only_expired_tokens(5_010), "one is still live");
    assert!(c.has_only_expired_tokens(5_019));
    assert_eq!(c.apply_sweep(5_019), 20);
    assert_eq!(c.token_count(), 0);
    assert!(c.is_plain(), "back to a plain (inline) counter");
    assert_eq!(c.value(), 20);
    assert!(!Counter::plain(3).has_only_expired_tokens(i64::MAX));
}

#[test]
fn a_counter_holding_only_remembered_writes_says_until_when() {
    let mut c = Counter::default();
    assert_eq!(decr(&mut c, 0, 5, Some(1)), None);
    assert_eq!(c.value(), 0);
    let first = c.remembered_only_until().expect("only a refusal");
    assert_eq!(decr(&mut c, 0, 5, Some(2)), None);
    assert!(c.remembered_only_until() >= Some(first));
    add(&mut c, 3).unwrap();
    assert_eq!(c.remembered_only_until(), None, "it holds a value now");
}

/// What a holder of a floored spread's name holds it to before its first credit.
const FLOORED_BY_NAME: crate::counter::spread::NameBounds = crate::counter::spread::NameBounds {
    floor: Some(0),
    ceiling: None,
};

#[test]
fn a_counter_held_at_a_floor_it_does_not_have_refuses_to_go_below_it() {
    let mut c = Counter::default();
    let op = |delta, shards, token: Option<u64>| AddOp {
        now: 5,
        event: 5,
        delta,
        shard: 0,
        shards,
        token: token.map(|fp| TokenStamp {
            fp,
            expires_at: 100,
        }),
    };
    assert_eq!(
        c.apply_add_under(&op(-1, 1, None), FLOORED_BY_NAME),
        Ok(None)
    );
    assert_eq!(
        c.apply_add_under(&op(3, 1, None), FLOORED_BY_NAME),
        Ok(Some(3))
    );
    // Refused with a resize too, and recorded under its token.
    assert_eq!(
        c.apply_add_under(&op(-4, 2, None), FLOORED_BY_NAME),
        Ok(None)
    );
    assert_eq!(
        c.apply_add_under(&op(-4, 1, Some(9)), FLOORED_BY_NAME),
        Ok(None)
    );
    assert_eq!(c.token_use(9, WriteKind::Add(-4), 6), TokenUse::Retry(None));
    assert_eq!(c.value(), 3);
    assert_eq!(
        c.apply_add_under(&op(-3, 1, None), FLOORED_BY_NAME),
        Ok(Some(0))
    );
    assert!(c.floor().is_none(), "nothing is added to the counter");
    assert_eq!(
        c.apply_add_under(&op(i64::MIN, 1, None), FLOORED_BY_NAME),
        Ok(None)
    );
    // A floor of its own decides instead; without the rule it goes below 0.
    assert_eq!(c.apply_add(&op(-1, 1, None)), Ok(Some(-1)));
    let mut floored = Counter::default();
    floored.set_floor(Some(-5)).unwrap();
    assert_eq!(
        floored.apply_add_under(&op(-2, 1, None), FLOORED_BY_NAME),
        Ok(Some(-2))
    );
}

fn spread_home(value: i64, holders: &[&[u8]]) -> Counter {
    let mut c = Counter::plain(value);
    c.set_spread(Spread::of(holders.iter().map(|h| h.to_vec()).collect()))
        .unwrap();
    c
}

fn clear_total(c: &mut Counter, total: i64, token: Option<u64>) -> Result<i64, CounterError> {
    c.apply_clear_total(&ClearTotalOp {
        now: 1_000,
        total,
        token: token.map(|fp| TokenStamp {
            fp,
            expires_at: 10_000,
        }),
    })
}

#[test]
fn a_clear_of_a_spread_total_lowers_the_home_by_it_and_keeps_later_adds() {
    let (h1, h2, h3): (&[u8], &[u8], &[u8]) = (b"{ctr.1.0}x", b"{ctr.2.0}x", b"{ctr.3.0}x");
    let mut home = spread_home(5, &[h1, h2, h3]);
    // Holders read at 10, 20, 30; h2 gains 7 after it was read, the home 4 before the sum.
    add(&mut home, 4).unwrap();
    let total = home.total_at_clear([(h1, 10), (h2, 20), (h3, 30)]).unwrap();
    assert_eq!(total, 69);
    assert_eq!(clear_total(&mut home, total, Some(42)), Ok(69));
    assert_eq!(home.value(), -60);
    // The total now: the home plus every holder as it is (h2 gained 7 since it was read).
    let now = exact_sum([home.value(), 10, 27, 30]).unwrap();
    assert_eq!(now, 7);
    // A retry (as a plain clear or a clear of the total) replays the first reply.
    for kind in [WriteKind::Clear, WriteKind::ClearTotal] {
        assert_eq!(home.token_use(42, kind, 2_000), TokenUse::Retry(Some(69)));
    }
    assert_eq!(
        home.token_use(42, WriteKind::Add(1), 2_000),
        TokenUse::Conflict
    );
}

#[test]
fn a_clear_of_a_spread_total_counts_only_holders_still_listed() {
    let (h1, h2): (&[u8], &[u8]) = (b"{ctr.1.0}x", b"{ctr.2.0}x");
    let mut home = spread_home(1, &[h1]);
    home.begin_fold(&[h2.to_vec()], &mut || 77).unwrap();
    // h2 is leaving: its answer counts; a name the home no longer lists counts 0.
    assert_eq!(
        home.total_at_clear([(h1, 10), (h2, 100), (&b"{z}gone"[..], 1_000)]),
        Ok(111)
    );
    let plain = Counter::plain(3);
    assert_eq!(plain.total_at_clear([(h1, 10)]), Ok(3));
}

#[test]
fn a_clear_of_a_spread_total_spans_shards_and_overflow_changes_nothing() {
    let mut c = Counter::from_shards(vec![4, 5, 6]).unwrap();
    assert_eq!(clear_total(&mut c, 25, None), Ok(25));
    assert_eq!(c.value(), -10);
    assert_eq!(c.shard_values().iter().sum::<i64>(), -10);
    assert_eq!(c.shard_count(), 3);
    let mut c = Counter::plain(i64::MIN + 1);
    let untouched = c.clone();
    assert_eq!(clear_total(&mut c, 2, Some(1)), Err(CounterError::Overflow));
    assert_eq!(c, untouched);
    let home = spread_home(i64::MAX, &[b"{ctr.1.0}x"]);
    assert_eq!(
        home.total_at_clear([(&b"{ctr.1.0}x"[..], 1)]),
        Err(CounterError::Overflow)
    );
}

#[test]
fn a_floored_spread_is_not_cleared() {
    let mut home = spread_home(10, &[b"{ctr.1.0}x"]);
    home.set_floor(Some(2)).unwrap();
    assert!(home.is_floored_spread());
    let untouched = home.clone();
    assert_eq!(
        home.total_at_clear([(&b"{ctr.1.0}x"[..], 1)]),
        Err(CounterError::ClearFlooredSpread)
    );
    assert_eq!(
        clear_total(&mut home, 11, Some(1)),
        Err(CounterError::ClearFlooredSpread)
    );
    assert_eq!(home, untouched);
    // A plain floored counter is not a floored spread (CTR.CLEAR does what it always did).
    let mut plain = Counter::plain(10);
    plain.set_floor(Some(-5)).unwrap();
    assert!(!plain.is_floored_spread());
}

fn ceiling_budgets(c: &Counter) -> Vec<i64> {
    c.ceiling().map(|x| x.budgets.clone()).unwrap_or_default()
}

#[test]
fn a_ceiling_refuses_increments_past_it_and_keeps_its_budgets() {
    let mut c = Counter::from_shards(vec![2, 3]).unwrap();
    assert_eq!(c.set_ceiling(Some(4)), Err(CounterError::AboveCeiling));
    assert!(c.set_ceiling(Some(9)).unwrap());
    assert!(
        !c.set_ceiling(Some(9)).unwrap(),
        "the same ceiling changes nothing"
    );
    assert_eq!(ceiling_budgets(&c), vec![2, 2]);
    // An increment draws from the shard's budget, then the next one.
    assert_eq!(add_at(&mut c, 1, 2, 3), Ok(8));
    assert_eq!(ceiling_budgets(&c), vec![1, 0]);
    assert_eq!(c.shard_values(), vec![3, 5]);
    let refused = c.apply_add(&AddOp {
        now: 1_000,
        event: 1_000,
        delta: 2,
        shard: 0,
        shards: 2,
        token: None,
    });
    assert_eq!(refused, Ok(None), "one unit of headroom left");
    assert_eq!(c.value(), 8);
    // A decrement gives budget back where the units leave; a resize keeps the sum.
    assert_eq!(add_at(&mut c, 0, 4, -5), Ok(3));
    assert_eq!(ceiling_budgets(&c).iter().sum::<i64>(), 6);
    assert_eq!(c.shard_count(), 4);
    assert_eq!(add_at(&mut c, 0, 1, 6), Ok(9));
    assert_eq!(ceiling_budgets(&c), vec![0]);
    assert_eq!(
        c.apply_clear(&ClearOp {
            now: 0,
            token: None
        }),
        Ok(9)
    );
    assert_eq!(ceiling_budgets(&c), vec![9]);
    c.set_ceiling(None).unwrap();
    assert!(c.is_plain());
}

#[test]
fn floor_and_ceiling_budgets_move_together() {
    let mut c = Counter::from_shards(vec![5, 5]).unwrap();
    c.set_floor(Some(0)).unwrap();
    c.set_ceiling(Some(20)).unwrap();
    assert_eq!(add_at(&mut c, 0, 2, 8), Ok(18));
    assert_eq!(
        (budgets_sum(&c), ceiling_budgets(&c).iter().sum::<i64>()),
        (18, 2)
    );
    let taken = c.apply_decrement(&DecrOp {
        now: 1_000,
        event: 1_000,
        amount: 15,
        shard: 1,
        shards: 2,
        token: None,
    });
    assert_eq!(taken, Ok(Some(3)));
    assert_eq!(
        (budgets_sum(&c), ceiling_budgets(&c).iter().sum::<i64>()),
        (3, 17)
    );
    assert!(c.ceiling().unwrap().budgets.iter().all(|b| *b >= 0));
    // A clear below the ceiling is fine; a ceiling below 0 cannot be cleared to 0.
    let mut neg = Counter::plain(-10);
    neg.set_ceiling(Some(-5)).unwrap();
    let before = neg.clone();
    assert_eq!(
        neg.apply_clear(&ClearOp {
            now: 0,
            token: None
        }),
        Err(CounterError::AboveCeiling)
    );
    assert_eq!(neg, before);
    // A reconcile above the ceiling is refused; one below re-spreads the headroom.
    let overwrite = |truth| ReconcileOp {
        now: 5_000,
        truth,
        watermark: None,
        width: 1_000,
        retention: 10_000,
    };
    assert_eq!(
        c.apply_reconcile(&overwrite(21)),
        Err(CounterError::AboveCeiling)
    );
    assert_eq!(c.apply_reconcile(&overwrite(11)).map(|r| r.value), Ok(11));
    assert_eq!(ceiling_budgets(&c).iter().sum::<i64>(), 9);
    assert!(c.set_spread(Spread::of(vec![b"x".to_vec()])).is_err());
}
