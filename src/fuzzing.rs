//! Property checks for every decoder and argument parser, shared by the libFuzzer targets in
//! `tests/fuzz` and by plain `cargo test` (which replays the seed corpus and every input a
//! fuzzer ever crashed on, kept in `tests/fuzz/regressions/<target>/`).
//!
//! Each check takes arbitrary bytes and panics when a property fails:
//! - nothing panics, overflows (the fuzz build has overflow checks on) or allocates without
//!   bound, whatever the bytes;
//! - what a decoder accepts re-encodes to bytes that decode to an equal value, and that
//!   re-encoding is canonical (encoding it again gives the same bytes);
//! - what a decoder accepts is a value every operation can work on: each write applied to it
//!   either fails and changes nothing, or leaves a state that encodes and decodes back equal
//!   (so it can be saved and loaded again);
//! - what a parser accepts is what its grammar says, and parses the same from its canonical
//!   rendering.
//!
//! Compiled only for tests and for the fuzz crate (feature `fuzzing`): nothing here is part of
//! the module.

use crate::commands::ctr_args::{
    parse_add, parse_clear, parse_decrement, parse_floor, parse_increx, parse_reconcile, AddArgs,
    ClearArgs, DecrArgs, Expiry, ExpiryArgs, IncrexArgs, ReconcileArgs, TruthSource,
    AMOUNT_NOT_POSITIVE, BAD_EXPIRE, BAD_EXPIRE_INCREX, BAD_TOKEN, BOUNDS_CROSSED,
    ENX_NEEDS_EXPIRY, MAX_TOKEN_BYTES, NEGATIVE_AT, NO_FLOAT,
};
use crate::commands::parse::{parse_i64, NOT_AN_INTEGER, SYNTAX_ERROR};
use crate::counter::throttle::ThrottleReply;
use crate::counter::{
    AddOp, ClearOp, ClearTotalOp, Counter, CounterCell, CounterError, DecrOp, IncrexOp,
    ReconcileOp, RefundOp, StartOp, ThrottleOp, TokenStamp, WindowOp, MAX_SHARDS,
};
use crate::ffi::CommandError;
use crate::persist::effect::{self, CounterOp, Effect};
use crate::persist::{ctr_format, pnc_format, step_msg};
use crate::pncounter::{Home, PnCounter, ReplicaId, MAX_CONFIGURED_ID_LEN, MAX_ID_LEN};

/// A property check: panics when the input breaks a property.
pub type Check = fn(&[u8]);

/// Every target: (name, check). The fuzz crate has one binary per name.
pub const TARGETS: &[(&str, Check)] = &[
    ("ctr_state", ctr_state),
    ("ctr_apply", ctr_apply),
    ("ctr_step", ctr_step),
    ("effect", effect),
    ("pnc_state", pnc_state),
    ("ctr_args", ctr_args),
    ("pnc_args", pnc_args),
];

// ---------------------------------------------------------------------------------------------
// CTR state (RDB, DUMP/RESTORE, CTR.SETSTATE)

/// `ctr_format::decode`: round trip, then every operation on the decoded counter.
pub fn ctr_state(data: &[u8]) {
    let Ok(counter) = ctr_format::decode(data) else {
        return;
    };
    assert_reencodes(&counter, "decoded state");
    exercise(&counter);
}

/// The encoding of `c` decodes to `c`, and is canonical.
fn assert_reencodes(c: &Counter, what: &str) {
    let bytes = ctr_format::encode(c);
    let back = match ctr_format::decode(&bytes) {
        Ok(back) => back,
        Err(e) => panic!("{what}: its encoding does not decode ({e}): {c:?}"),
    };
    assert_eq!(&back, c, "{what}: round trip changed the state");
    assert_eq!(ctr_format::encode(&back), bytes, "{what}: not canonical");
    // The sum and floor invariants, and the representations the keyspace uses.
    let sum: i128 = c.shard_values().iter().map(|v| i128::from(*v)).sum();
    assert_eq!(
        sum,
        i128::from(c.value()),
        "{what}: shards do not sum to the value"
    );
    if let Some(ceiling) = c.ceiling() {
        assert!(
            c.value() <= ceiling.ceiling,
            "{what}: value above its ceiling"
        );
        assert_eq!(
            ceiling.budgets.len(),
            c.shard_count(),
            "{what}: ceiling budgets"
        );
        assert!(
            ceiling.budgets.iter().all(|b| *b >= 0),
            "{what}: negative budget"
        );
        let budgets: i128 = ceiling.budgets.iter().map(|v| i128::from(*v)).sum();
        assert_eq!(
            budgets,
            i128::from(ceiling.ceiling) - i128::from(c.value()),
            "{what}: ceiling budgets do not sum to the headroom"
        );
    }
    if let Some(f) = c.floor() {
        assert!(c.value() >= f.floor, "{what}: value below its floor");
        assert_eq!(f.budgets.len(), c.shard_count(), "{what}: budget count");
        assert!(f.budgets.iter().all(|b| *b >= 0), "{what}: negative budget");
        let budgets: i128 = f.budgets.iter().map(|v| i128::from(*v)).sum();
        assert_eq!(
            budgets,
            i128::from(c.value()) - i128::from(f.floor),
            "{what}: budgets do not sum to the headroom"
        );
    }
    let raw = CounterCell::new(c.clone()).into_raw();
    // SAFETY: raw was just made by into_raw and is owned here alone.
    let cell = unsafe { CounterCell::from_raw(raw) };
    // SAFETY: the cell is alive for the borrow.
    let view = unsafe { CounterCell::borrow(raw) };
    assert_eq!(
        &view.to_counter(),
        c,
        "{what}: stored form changed the state"
    );
    assert_eq!(view.token_count(), c.token_count());
    let _ = cell.heap_bytes();
    drop(cell);
}

/// What CTR.APPLY does with an effect (the pure part of `commands::ctr_internal::apply`).
pub fn apply_effect(c: &mut Counter, op: &CounterOp) -> Result<Option<i64>, CounterError> {
    match op {
        CounterOp::Add(op) => c.apply_add(op),
        CounterOp::Decr(op) => c.apply_decrement(op),
        CounterOp::Clear(op) => c.apply_clear(op).map(Some),
        CounterOp::Reconcile(op) => c.apply_reconcile(op).map(|r| Some(r.value)),
        CounterOp::Start(op) => Ok(Some(c.apply_start(op).0)),
        CounterOp::Sweep { now } => Ok(Some(c.apply_sweep(*now) as i64)),
        CounterOp::ClearTotal(op) => c.apply_clear_total(op).map(Some),
        CounterOp::Increx(op) => c.apply_increx(op).map(|(value, _)| Some(value)),
        CounterOp::Refund(op) => c.apply_refund(op).map(Some),
        CounterOp::Throttle(op) => {
            c.apply_throttle(op);
            Ok(None)
        }
        CounterOp::Window(op) => c.apply_window(op).map(|changed| Some(i64::from(changed))),
    }
}

/// Applies `op` to a copy of `c`: a failure changes nothing, a success leaves a valid state.
fn check_op(c: &Counter, op: &CounterOp) {
    let mut next = c.clone();
    match apply_effect(&mut next, op) {
        Err(_) => assert_eq!(&next, c, "a failed {op:?} changed the counter"),
        Ok(_) => assert_reencodes(&next, &format!("after {op:?}")),
    }
}

/// A bounded battery of operations around the times and values the counter itself holds.
fn exercise(c: &Counter) {
    let history = c.history();
    let width = history.map_or(60_000, |h| h.width);
    let mut times = vec![
        0,
        1_700_000_000_000,
        i64::MAX,
        i64::MIN,
        c.tokens().next_sweep(),
        c.ledger().next_sweep(),
    ];
    if let Some(h) = history {
        times.push(h.retained_since);
        times.push(h.retained_since.saturating_add(1));
        if let Some(w) = h.watermark {
            times.extend([w, w.saturating_add(1)]);
        }
        if let Some((end, _)) = h.buckets.last() {
            times.extend([*end, end.saturating_add(h.retention)]);
        }
    }
    times.sort_unstable();
    times.dedup();
    let value = c.value();
    let floor = c.floor().map_or(0, |f| f.floor);
    // Resizes to MAX_SHARDS are left to the `effect` and `ctr_apply` targets (costly here).
    let shard_counts = [c.shard_count(), 1, (c.shard_count() * 2).min(MAX_SHARDS)];
    for (i, &t) in times.iter().enumerate() {
        let token = Some(TokenStamp {
            fp: t as u64 ^ 0x9e37_79b9_7f4a_7c15,
            expires_at: t.saturating_add(3_600_000),
        });
        let token = if i % 2 == 0 { token } else { None };
        for &shards in &shard_counts[..if i == 0 { 3 } else { 1 }] {
            let shard = c.next_shard(shards);
            for delta in [1, -1, i64::MAX, i64::MIN, value.wrapping_neg()] {
                check_op(
                    c,
                    &CounterOp::Add(AddOp {
                        now: t,
                        event: t,
                        delta,
                        shard,
                        shards,
                        token,
                    }),
                );
            }
            for amount in [1, i64::MAX, value.wrapping_sub(floor), 0, -1] {
                check_op(
                    c,
                    &CounterOp::Decr(DecrOp {
                        now: t,
                        event: t,
                        amount,
                        shard,
                        shards,
                        token,
                    }),
                );
            }
        }
        check_op(c, &CounterOp::Clear(ClearOp { now: t, token }));
        for total in [value, value.wrapping_neg(), i64::MIN, i64::MAX, 1] {
            check_op(
                c,
                &CounterOp::ClearTotal(ClearTotalOp {
                    now: t,
                    total,
                    token,
                }),
            );
        }
        check_op(c, &CounterOp::Sweep { now: t });
        for created in [false, true] {
            let start = StartOp {
                now: t,
                width,
                retention: history.map_or(3_600_000, |h| h.retention),
                created,
            };
            check_op(c, &CounterOp::Start(start));
        }
        let aligned = crate::counter::history::bucket_of(t, width);
        for watermark in [
            None,
            Some(t),
            Some(aligned),
            Some(aligned.saturating_sub(width)),
        ] {
            for truth in [0, value, i64::MAX, i64::MIN] {
                check_op(
                    c,
                    &CounterOp::Reconcile(ReconcileOp {
                        now: t,
                        truth,
                        watermark,
                        width,
                        retention: history.map_or(3_600_000, |h| h.retention),
                    }),
                );
            }
        }
        let mut rated = c.clone();
        for _ in 0..3 {
            let shards = rated.advise_shards(t, 1, MAX_SHARDS);
            assert!((1..=MAX_SHARDS).contains(&shards));
        }
    }
    for f in [
        None,
        Some(i64::MIN),
        Some(value),
        Some(value.saturating_add(1)),
        Some(0),
    ] {
        let mut next = c.clone();
        match next.set_floor(f) {
            Err(_) => assert_eq!(&next, c, "a failed set_floor({f:?}) changed the counter"),
            Ok(_) => assert_reencodes(&next, &format!("after set_floor({f:?})")),
        }
        let mut next = c.clone();
        let ceiling = f.map(|f| f.saturating_add(value.saturating_sub(f).saturating_mul(2)));
        match next.set_ceiling(ceiling) {
            Err(_) => assert_eq!(&next, c, "a failed set_ceiling({ceiling:?}) changed it"),
            Ok(_) => assert_reencodes(&next, &format!("after set_ceiling({ceiling:?})")),
        }
    }
    let _ = c.heap_bytes();
}

// ---------------------------------------------------------------------------------------------
// Replicated effects (CTR.APPLY)

/// Counters an effect is applied to: a missing key (CTR.APPLY creates it at 0), an extreme
/// one, and one with every feature.
fn effect_bases() -> Vec<Counter> {
    vec![Counter::default(), Counter::plain(i64::MIN), rich_counter()]
}

/// `effect::decode`: round trip, then the effect applied to a few counters.
pub fn effect(data: &[u8]) {
    let Ok(e) = effect::decode(data) else {
        return;
    };
    assert_effect_reencodes(&e);
    for base in effect_bases() {
        check_op(&base, &e.op);
    }
}

fn assert_effect_reencodes(e: &Effect) {
    let bytes = effect::encode(e);
    let back = match effect::decode(&bytes) {
        Ok(back) => back,
        Err(err) => panic!("effect's encoding does not decode ({err}): {e:?}"),
    };
    assert_eq!(&back, e, "effect round trip");
    assert_eq!(
        effect::encode(&back),
        bytes,
        "effect encoding not canonical"
    );
}

/// A restored state and a replicated effect together: `u16 LE state length, state, effect`.
pub fn ctr_apply(data: &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let len = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (state, effect_bytes) = rest.split_at(len);
    let (Ok(c), Ok(e)) = (ctr_format::decode(state), effect::decode(effect_bytes)) else {
        return;
    };
    check_op(&c, &e.op);
    // And the same effect twice in a row, as a replica applying a replayed stream would.
    let mut once = c.clone();
    if apply_effect(&mut once, &e.op).is_ok() {
        check_op(&once, &e.op);
    }
}

/// A restored state, a key name and a replicated transfer step together (`CTR.STEP`):
/// `u16 LE state length, state, u8 key length, key, step`. The step re-encodes canonically;
/// applied to the state (and again, as a replayed stream would), it fails and changes nothing,
/// or leaves a state that round-trips.
pub fn ctr_step(data: &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let len = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (state, rest) = rest.split_at(len);
    let Some((key_len, rest)) = rest.split_first() else {
        return;
    };
    let (key, step_bytes) = rest.split_at(usize::from(*key_len).min(rest.len()));
    let (Ok(c), Ok(step)) = (ctr_format::decode(state), step_msg::decode(key, step_bytes)) else {
        return;
    };
    assert_eq!(
        step_msg::decode(key, &step_msg::encode(&step)).as_ref(),
        Ok(&step),
        "step round trip"
    );
    let mut once = c.clone();
    match once.apply_step(key, &step) {
        Err(_) => assert_eq!(once, c, "a failed {step:?} changed the counter"),
        Ok(_) => {
            assert_reencodes(&once, &format!("after {step:?}"));
            let mut twice = once.clone();
            if twice.apply_step(key, &step).is_err() {
                assert_eq!(
                    twice, once,
                    "a failed replay of {step:?} changed the counter"
                );
            } else {
                assert_reencodes(&twice, &format!("after {step:?} twice"));
            }
        }
    }
}

/// The input of `ctr_step` for a state, a key name and a step.
pub fn ctr_step_input(state: &[u8], key: &[u8], step: &[u8]) -> Vec<u8> {
    let mut out = ctr_apply_input(state, &[]);
    out.push(u8::try_from(key.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(key);
    out.extend_from_slice(step);
    out
}

/// Steps of every kind, for the seeds (their key: `k`).
fn step_samples() -> Vec<Vec<u8>> {
    use crate::counter::step::Step;
    use crate::counter::transfer::{Ack, Credit};
    let holder = crate::counter::spread::holder_name(b"k", 6, 1, 0);
    let steps = [
        Step::Move {
            receiver: holder.clone(),
            units: crate::counter::transfer::Units::value_and_floor(0, -3),
            now_ms: 1_700_000_000_000,
            new_id: 9,
        },
        Step::Shrink {
            target: 1,
            fold_ids: vec![41],
            clock: None,
        },
        Step::Shrink {
            target: 2,
            fold_ids: vec![42],
            clock: Some(crate::counter::listing::ListClock {
                now_ms: 1_700_000_000_000,
                window_ms: 3_600_000,
            }),
        },
        Step::Seal {
            home: b"k".to_vec(),
            fold_id: 41,
            now_ms: 1_700_000_000_000,
            new_id: 9,
        },
        Step::RetargetMoves {
            home: b"k2".to_vec(),
        },
        Step::Credit(Credit {
            giver: holder.clone(),
            from: holder.clone(),
            receiver: b"k".to_vec(),
            giver_id: 9,
            seq: 5,
            dv: 2,
            df: 0,
            dc: 0,
            fold_id: 41,
        }),
        Step::Answer(Ack {
            giver: b"k".to_vec(),
            receiver: holder.clone(),
            seq: 5,
            refused: false,
        }),
        Step::Move {
            receiver: holder.clone(),
            units: crate::counter::transfer::Units::ceiling(4),
            now_ms: 1_700_000_000_000,
            new_id: 9,
        },
        Step::Credit(Credit {
            giver: holder.clone(),
            from: holder,
            receiver: b"k".to_vec(),
            giver_id: 9,
            seq: 6,
            dv: 1,
            df: 0,
            dc: 7,
            fold_id: 41,
        }),
    ];
    steps.iter().map(step_msg::encode).collect()
}

/// The input of `ctr_apply` for a state and an effect.
pub fn ctr_apply_input(state: &[u8], effect_bytes: &[u8]) -> Vec<u8> {
    let mut out = u16::try_from(state.len())
        .unwrap_or(u16::MAX)
        .to_le_bytes()
        .to_vec();
    out.extend_from_slice(state);
    out.extend_from_slice(effect_bytes);
    out
}

// ---------------------------------------------------------------------------------------------
// PN-Counter states (PNC.MERGE, PNC.SETSTATE, RDB, DUMP/RESTORE)

fn pnc_id(s: &str) -> ReplicaId {
    match ReplicaId::parse(s.as_bytes()) {
        Ok(id) => id,
        Err(e) => panic!("test id {s:?}: {e}"),
    }
}

/// A PN-Counter with short, long and extreme slots.
fn pnc_sample() -> PnCounter {
    let mut c = PnCounter::new();
    for (id, delta) in [("eu", 5), ("us-east", -7), (&"l".repeat(40)[..], i64::MAX)] {
        let _ = c.add(&pnc_id(id), delta);
    }
    // A bounded part too: a floor lowered by eu, rights given to us-east.
    let _ = c.set_floor(&pnc_id("eu"), Some(-3));
    let _ = c.give(&pnc_id("eu"), &pnc_id("us-east"), 2);
    c
}

/// Decoders of both forms: round trip, merge laws against a sample, writes at the edges.
pub fn pnc_state(data: &[u8]) {
    if let Ok(c) = pnc_format::decode_state(data) {
        assert_eq!(c.home(), None, "a state blob carries no home record");
        let again = pnc_format::decode_state(&pnc_format::encode_state(&c));
        assert!(
            again.as_ref().is_ok_and(|a| a.same_state(&c)),
            "state blob round trip: {again:?} vs {c:?}"
        );
        exercise_pnc(&c);
    }
    if let Ok(c) = pnc_format::decode_stored(data) {
        assert_pnc_reencodes(&c, "decoded stored form");
        exercise_pnc(&c);
    }
}

fn assert_pnc_reencodes(c: &PnCounter, what: &str) {
    let bytes = pnc_format::encode_stored(c);
    match pnc_format::decode_stored(&bytes) {
        Ok(back) => assert_eq!(&back, c, "{what}: stored round trip"),
        Err(e) => panic!("{what}: its encoding does not decode ({e}): {c:?}"),
    }
    let sum = c
        .entries()
        .iter()
        .fold(0i128, |acc, e| acc + i128::from(e.p) - i128::from(e.n));
    assert_eq!(sum, i128::from(c.value()), "{what}: cached value");
    let _ = (c.heap_bytes(), c.allocations());
}

fn exercise_pnc(c: &PnCounter) {
    let sample = pnc_sample();
    for other in [c, &sample, &PnCounter::new()] {
        let ab = c.merged(other);
        let ba = other.merged(c);
        match (&ab, &ba) {
            (Ok(ab), Ok(ba)) => {
                assert!(ab.same_state(ba), "merge is not commutative");
                assert_reencodes_pnc_merge(ab, c, other);
            }
            (Err(_), Err(_)) => {}
            _ => panic!("merge refused one way only: {ab:?} / {ba:?}"),
        }
    }
    let ids = c
        .entries()
        .first()
        .map(|e| e.id.clone())
        .into_iter()
        .chain([pnc_id("zz-new"), pnc_id("a")]);
    for id in ids {
        for delta in [1, -1, i64::MAX, i64::MIN, c.value().wrapping_neg(), 0] {
            let mut next = c.clone();
            match next.add(&id, delta) {
                Ok(v) => {
                    assert_eq!(v, next.value());
                    assert_pnc_reencodes(&next, "after add");
                }
                Err(_) => assert_eq!(&next, c, "a failed add changed the counter"),
            }
        }
        exercise_bound(c, &id);
        let mut next = c.clone();
        match next.observed_reset(&id) {
            Ok(_) => {
                assert_eq!(next.value(), 0, "observed reset leaves 0");
                assert_pnc_reencodes(&next, "after reset");
            }
            Err(_) => assert_eq!(&next, c, "a failed reset changed the counter"),
        }
    }
}

/// The bounded counter's writes by `id`: each either changes the counter into one that
/// re-encodes, or (refused, failed) changes nothing.
fn exercise_bound(c: &PnCounter, id: &ReplicaId) {
    use crate::pncounter::Decrement;
    let other = pnc_id("zz-new");
    for amount in [1, 7, i64::MAX] {
        let mut next = c.clone();
        match next.decrement_within_rights(id, amount) {
            Ok(Decrement::Granted(v)) => {
                assert_eq!(v, next.value());
                assert!(next.rights(id) >= 0, "a grant beyond the rights");
                assert_pnc_reencodes(&next, "after decrfloor");
            }
            _ => assert_eq!(&next, c, "a refused decrement changed the counter"),
        }
        let mut next = c.clone();
        match next.give(id, &other, amount) {
            Ok(Some(_)) => assert_pnc_reencodes(&next, "after give"),
            _ => assert_eq!(&next, c, "a refused gift changed the counter"),
        }
    }
    let level = c.floor_level();
    for target in [
        Some(level.saturating_add(1)),
        Some(level.saturating_sub(5)),
        Some(i64::MIN),
        None,
    ] {
        let mut next = c.clone();
        match next.set_floor(id, target) {
            Ok(true) => assert_pnc_reencodes(&next, "after floor"),
            _ => assert_eq!(&next, c, "a refused floor changed the counter"),
        }
    }
}

fn assert_reencodes_pnc_merge(m: &PnCounter, a: &PnCounter, b: &PnCounter) {
    assert_pnc_reencodes(m, "merge result");
    for side in [a, b] {
        let again = m.merged(side);
        assert!(
            again.is_ok_and(|x| x.same_state(m)),
            "merge result does not dominate its inputs"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Argument parsers

const KNOWN_ERRORS: &[CommandError] = &[
    SYNTAX_ERROR,
    NOT_AN_INTEGER,
    BAD_TOKEN,
    BAD_EXPIRE,
    BAD_EXPIRE_INCREX,
    ENX_NEEDS_EXPIRY,
    BOUNDS_CROSSED,
    NO_FLOAT,
    AMOUNT_NOT_POSITIVE,
    NEGATIVE_AT,
];

fn known_error(e: &CommandError) {
    assert!(KNOWN_ERRORS.contains(e), "unexpected parser error {e:?}");
}

/// The words of a parser input: the bytes after the selector, split at spaces.
fn words(data: &[u8]) -> Vec<&[u8]> {
    if data.is_empty() {
        Vec::new()
    } else {
        data.split(|b| *b == b' ').collect()
    }
}

/// `data[0]` picks the parser, the rest are its arguments (space-separated).
pub fn ctr_args(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 7 {
        6 => check_increx(&words(rest)),
        0 => check_add(&words(rest)),
        1 => check_decrement(&words(rest)),
        2 => check_clear(&words(rest)),
        3 => check_reconcile(&words(rest)),
        4 => check_floor(rest),
        _ => check_integer(rest),
    }
}

/// `parse_i64` accepts exactly the canonical decimal form of an i64, as Redis's string2ll.
fn check_integer(bytes: &[u8]) {
    let canonical = std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|v| v.to_string().as_bytes() == bytes);
    assert_eq!(parse_i64(bytes), canonical, "parse_i64({bytes:?})");
}

fn int(v: i64) -> Vec<u8> {
    v.to_string().into_bytes()
}

fn render(words: &[Vec<u8>]) -> Vec<&[u8]> {
    words.iter().map(Vec::as_slice).collect()
}

/// Option names given, upper-cased; each may appear once.
fn option_names(options: &[&[u8]]) -> Vec<Vec<u8>> {
    options
        .iter()
        .step_by(2)
        .map(|n| n.to_ascii_uppercase())
        .collect()
}

fn assert_unique(names: &[Vec<u8>]) {
    for (i, n) in names.iter().enumerate() {
        assert!(!names[..i].contains(n), "option {n:?} accepted twice");
    }
}

fn check_token(token: Option<&[u8]>) {
    if let Some(t) = token {
        assert!((1..=MAX_TOKEN_BYTES).contains(&t.len()), "token length");
    }
}

fn check_add(args: &[&[u8]]) {
    let parsed = match parse_add(args) {
        Ok(p) => p,
        Err(e) => return known_error(&e),
    };
    assert_eq!(Some(parsed.delta), parse_i64(args[0]));
    check_token(parsed.token);
    // The canonical rendering parses to the same thing.
    let mut canon = vec![int(parsed.delta)];
    if let Some(t) = parsed.token {
        canon.extend([b"TOKEN".to_vec(), t.to_vec()]);
    }
    if let Some(at) = parsed.at {
        canon.extend([b"at".to_vec(), int(at)]);
    }
    canon.extend(expiry_words(parsed.expiry));
    let again: Result<AddArgs, _> = parse_add(&render(&canon));
    assert_eq!(again, Ok(parsed), "canonical CTR.ADD rendering");
}

/// The canonical words of expiry options; each time is positive, ENX goes with a time.
fn expiry_words(opts: ExpiryArgs) -> Vec<Vec<u8>> {
    let mut words = match opts.expiry {
        Some(Expiry::In(ms)) => vec![b"Px".to_vec(), int(ms)],
        Some(Expiry::At(ms)) => vec![b"pxat".to_vec(), int(ms)],
        Some(Expiry::Persist) => vec![b"PERSIST".to_vec()],
        None => vec![],
    };
    if let Some(Expiry::In(ms) | Expiry::At(ms)) = opts.expiry {
        assert!(ms > 0, "times must be positive");
    }
    if opts.only_if_none {
        assert!(
            matches!(opts.expiry, Some(Expiry::In(_) | Expiry::At(_))),
            "ENX without a time"
        );
        words.push(b"enx".to_vec());
    }
    words
}

/// CTR.INCREX's options: what parses renders canonically to the same thing.
fn check_increx(args: &[&[u8]]) {
    let parsed = match parse_increx(args) {
        Ok(p) => p,
        Err(e) => return known_error(&e),
    };
    check_token(parsed.token);
    if let (Some(lower), Some(upper)) = (parsed.lower, parsed.upper) {
        assert!(lower <= upper, "crossed bounds");
    }
    let mut canon = vec![b"BYINT".to_vec(), int(parsed.increment)];
    for (name, bound) in [(&b"LBOUND"[..], parsed.lower), (b"UBOUND", parsed.upper)] {
        if let Some(b) = bound {
            canon.extend([name.to_vec(), int(b)]);
        }
    }
    if parsed.saturate {
        canon.push(b"saturate".to_vec());
    }
    canon.extend(expiry_words(parsed.expiry));
    if let Some(t) = parsed.token {
        canon.extend([b"TOKEN".to_vec(), t.to_vec()]);
    }
    if let Some(at) = parsed.at {
        canon.extend([b"AT".to_vec(), int(at)]);
    }
    let again: Result<IncrexArgs, _> = parse_increx(&render(&canon));
    assert_eq!(again, Ok(parsed), "canonical CTR.INCREX rendering");
}

fn check_decrement(args: &[&[u8]]) {
    let parsed = match parse_decrement(args) {
        Ok(p) => p,
        Err(e) => return known_error(&e),
    };
    assert_eq!(Some(parsed.amount), parse_i64(args[0]));
    assert!(parsed.amount > 0);
    assert_eq!(args.len() % 2, 1, "options come in pairs");
    assert_unique(&option_names(&args[1..]));
    check_token(parsed.token);
    let mut canon = vec![int(parsed.amount)];
    if let Some(at) = parsed.at {
        canon.extend([b"AT".to_vec(), int(at)]);
    }
    if let Some(t) = parsed.token {
        canon.extend([b"token".to_vec(), t.to_vec()]);
    }
    let again: Result<DecrArgs, _> = parse_decrement(&render(&canon));
    assert_eq!(again, Ok(parsed), "canonical CTR.DECRFLOOR rendering");
}

fn check_clear(args: &[&[u8]]) {
    let parsed = match parse_clear(args) {
        Ok(p) => p,
        Err(e) => return known_error(&e),
    };
    assert!(args.is_empty() || args.len() == 2);
    assert_eq!(parsed.token.is_some(), args.len() == 2);
    check_token(parsed.token);
    let canon: Vec<&[u8]> = match parsed.token {
        Some(t) => vec![b"TOKEN", t],
        None => vec![],
    };
    let again: Result<ClearArgs, _> = parse_clear(&canon);
    assert_eq!(again, Ok(parsed), "canonical CTR.CLEAR rendering");
}

fn check_reconcile(args: &[&[u8]]) {
    let parsed = match parse_reconcile(args) {
        Ok(p) => p,
        Err(e) => return known_error(&e),
    };
    let mut canon: Vec<Vec<u8>> = match parsed.source {
        TruthSource::Given(n) => {
            assert_eq!(Some(n), parse_i64(args[0]));
            vec![int(n)]
        }
        TruthSource::Stream(k) => vec![b"FROM".to_vec(), b"STREAM".to_vec(), k.to_vec()],
        TruthSource::SortedSet(k) => vec![b"FROM".to_vec(), b"ZSET".to_vec(), k.to_vec()],
        TruthSource::Set(k) => {
            assert_eq!(parsed.at, None, "a set has no time");
            vec![b"FROM".to_vec(), b"SET".to_vec(), k.to_vec()]
        }
    };
    if let Some(at) = parsed.at {
        canon.extend([b"AT".to_vec(), int(at)]);
    }
    let again: Result<ReconcileArgs, _> = parse_reconcile(&render(&canon));
    assert_eq!(again, Ok(parsed), "canonical CTR.RECONCILE rendering");
}

fn check_floor(arg: &[u8]) {
    let expected = if arg.eq_ignore_ascii_case(b"NONE") {
        Ok(None)
    } else {
        parse_i64(arg).map(Some).ok_or(NOT_AN_INTEGER)
    };
    assert_eq!(parse_floor(arg), expected, "CTR.FLOOR argument {arg:?}");
}

/// `data[0]` picks: a replica id (any), a configured id, or `PNC.APPLY`'s `id gen delta`.
pub fn pnc_args(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 3 {
        0 => check_replica_id(rest),
        1 => check_configured_id(rest),
        _ => check_pnc_apply(&words(rest)),
    }
}

fn id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.'
}

fn check_replica_id(bytes: &[u8]) {
    let valid = (1..=MAX_ID_LEN).contains(&bytes.len()) && bytes.iter().all(|b| id_byte(*b));
    match ReplicaId::parse(bytes) {
        Ok(id) => {
            assert!(valid, "accepted a bad id {bytes:?}");
            assert_eq!(id.as_bytes(), bytes);
            assert_eq!(id.as_str().as_bytes(), bytes);
            assert!(id.descends_from(&id));
        }
        Err(_) => assert!(!valid, "refused a good id {bytes:?}"),
    }
}

fn check_configured_id(bytes: &[u8]) {
    let valid = bytes.len() <= MAX_CONFIGURED_ID_LEN
        && !bytes.contains(&b'.')
        && bytes.iter().all(|b| id_byte(*b));
    match crate::config::parse_replica_id(bytes) {
        Ok(None) => assert!(bytes.is_empty()),
        Ok(Some(id)) => {
            assert!(valid && !bytes.is_empty(), "accepted a bad id {bytes:?}");
            assert_eq!(id.as_bytes(), bytes);
            // Its failover successors are valid ids that descend from it.
            let next = ReplicaId::successor(&id, [0xff; 8]);
            assert!(ReplicaId::parse(next.as_bytes()).is_ok());
            assert!(next.descends_from(&id) && !id.descends_from(&next));
        }
        Err(_) => assert!(!valid || bytes.is_empty(), "refused a good id {bytes:?}"),
    }
}

/// `PNC.APPLY key id generation delta` parses its arguments as the handler does, and a write
/// with what it accepts stores a state that round-trips.
fn check_pnc_apply(args: &[&[u8]]) {
    let [id, gen, delta] = args else {
        return;
    };
    let (Ok(id), Some(gen), Some(delta)) = (
        ReplicaId::parse(id),
        parse_i64(gen)
            .filter(|g| *g > 0)
            .and_then(|g| u64::try_from(g).ok()),
        parse_i64(delta),
    ) else {
        return;
    };
    for mut c in [PnCounter::new(), pnc_sample()] {
        let before = c.clone();
        match c.add(&id, delta) {
            Ok(_) => {
                c.set_home(Some(Home {
                    id: id.clone(),
                    gen,
                }));
                assert_pnc_reencodes(&c, "after PNC.APPLY");
            }
            Err(_) => assert_eq!(c, before, "a failed PNC.APPLY changed the counter"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds: real encodings, made by the module's own encoders from counters built by its own
// operations.

/// A floored, sharded counter with add tokens, ledger entries and a reconciled bucket history.
pub fn rich_counter() -> Counter {
    let now = 1_700_000_000_000;
    let mut c = Counter::default();
    let reconcile = ReconcileOp {
        now,
        truth: 40,
        watermark: None,
        width: 60_000,
        retention: 3_600_000,
    };
    let _ = c.apply_reconcile(&reconcile);
    let _ = c.set_floor(Some(-5));
    for i in 0..6i64 {
        let t = now + i * 61_000;
        let token = Some(TokenStamp {
            fp: (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            expires_at: t + 3_600_000,
        });
        let _ = c.apply_add(&AddOp {
            now: t,
            event: t,
            delta: if i % 2 == 0 { 1 } else { 3 + i },
            shard: (i % 4) as usize,
            shards: 4,
            token,
        });
        let _ = c.apply_decrement(&DecrOp {
            now: t,
            event: t,
            amount: if i == 3 { 1_000 } else { 2 },
            shard: 1,
            shards: 4,
            token: token.map(|t| TokenStamp { fp: !t.fp, ..t }),
        });
    }
    let _ = c.apply_reconcile(&ReconcileOp {
        watermark: Some(now + 120_000),
        now: now + 400_000,
        ..reconcile
    });
    c
}

fn ctr_samples() -> Vec<Counter> {
    let mut tokens = Counter::default();
    for i in 0..40u64 {
        let _ = tokens.apply_add(&AddOp {
            now: 1_000,
            event: 1_000 + i as i64,
            delta: 1,
            shard: 0,
            shards: 1,
            token: Some(TokenStamp {
                fp: i.wrapping_mul(0x0123_4567_89ab_cdef),
                expires_at: 5_000 + i as i64,
            }),
        });
    }
    let mut floored = Counter::plain(10);
    let _ = floored.set_floor(Some(3));
    let mut ceiled = Counter::from_shards(vec![4, 5]).unwrap_or_default();
    let _ = ceiled.set_ceiling(Some(30));
    let sharded = Counter::from_shards(vec![300, -70_000, 12, i64::MAX, 0, -5]);
    [
        Counter::plain(0),
        Counter::plain(-1),
        Counter::plain(i64::MAX),
        Counter::plain(i64::MIN),
        sharded.unwrap_or_default(),
        floored,
        ceiled,
        sealed_ceiled_holder(),
        ceiled_spread_home(),
        tokens,
        limiter(),
        windowed(),
        rich_counter(),
    ]
    .into()
}

/// The home `k` of ceiled spread 6 (its own ceiling, holders named as a ceiled spread's) with
/// a move of ceiling units to its first holder in flight: the sections of a spread's ceiling
/// and of its outbox's ceiling units.
fn ceiled_spread_home() -> Counter {
    use crate::counter::spread::{plan_holders_avoiding, Spread, Standalone, CEILED_ATTEMPTS};
    use crate::counter::transfer::{Giver, Units};
    let mut c = Counter::from_shards(vec![4, 5]).unwrap_or_default();
    let _ = c.set_ceiling(Some(30));
    let first_attempt = |_| CEILED_ATTEMPTS;
    let holders = plan_holders_avoiding(b"k", 6, &[], 3, &Standalone, &|_| false, &first_attempt)
        .unwrap_or_default();
    let to = holders.first().cloned().unwrap_or_default();
    let spread = Spread {
        id: 6,
        holders,
        floor: None,
        ceiling: Some(40),
    };
    let _ = c.set_spread(spread);
    let giver = Giver {
        name: b"k",
        new_id: 9,
    };
    let _ = c.start_transfer(&to, Units::ceiling(5), 1_700_000_000_000, giver);
    c
}

/// A holder of ceiled spread 6 of `k`, sealed into it: its fold carries its ceiling.
fn sealed_ceiled_holder() -> Counter {
    use crate::counter::spread::{holder_name, CEILED_ATTEMPTS};
    let name = holder_name(b"k", 6, 1, CEILED_ATTEMPTS);
    let mut c = Counter::plain(3);
    let _ = c.set_ceiling(Some(7));
    let giver = crate::counter::transfer::Giver {
        name: &name,
        new_id: 9,
    };
    let _ = c.seal_into(b"k", 41, 1_700_000_000_000, giver);
    c
}

/// A `CTR.THROTTLE` limiter with an arrival time and remembered replies.
fn limiter() -> Counter {
    let mut c = Counter::default();
    for i in 0..5i64 {
        c.apply_throttle(&ThrottleOp {
            now: 1_700_000_000_000 + i,
            tat_ns: (i % 2 == 0).then_some(1_700_000_001_000_000_000 + i),
            token: Some(TokenStamp {
                fp: (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                expires_at: 1_700_003_600_000 + i,
            }),
            reply: ThrottleReply {
                limited: i == 3,
                limit: 5,
                remaining: 4 - i,
                retry_after: if i == 3 { 2 } else { -1 },
                reset_after: i,
            },
            intent: 0x7fff_ff00 + i as u32,
        });
    }
    c
}

/// A floored counter with a sliding window holding several buckets, over sub-shards.
fn windowed() -> Counter {
    let now = 1_700_000_000_000;
    let mut c = Counter::plain(7);
    let _ = c.set_floor(Some(-50));
    let _ = c.apply_window(&WindowOp {
        now,
        config: Some((60_000, 6)),
    });
    for i in 0..9i64 {
        let t = now + i * 7_000;
        let _ = c.apply_add(&AddOp {
            now: t,
            event: t,
            delta: if i % 3 == 0 { -4 } else { 2 + i },
            shard: (i % 2) as usize,
            shards: 2,
            token: None,
        });
    }
    c
}

fn effect_samples() -> Vec<Effect> {
    let token = Some(TokenStamp {
        fp: u64::MAX,
        expires_at: 1_700_000_060_000,
    });
    let now = 1_700_000_000_000;
    let ops = [
        CounterOp::Add(AddOp {
            now,
            event: now - 1_000,
            delta: -5,
            shard: 3,
            shards: 4,
            token,
        }),
        CounterOp::Add(AddOp {
            now,
            event: now,
            delta: i64::MAX,
            shard: 0,
            shards: 1,
            token: None,
        }),
        CounterOp::Clear(ClearOp { now, token }),
        CounterOp::Throttle(ThrottleOp {
            now,
            tat_ns: Some(now * 1_000_000 + 7),
            token,
            reply: ThrottleReply {
                limited: false,
                limit: 3,
                remaining: 1,
                retry_after: -1,
                reset_after: 6,
            },
            intent: 12_345,
        }),
        CounterOp::Window(WindowOp {
            now,
            config: Some((10_000, 10)),
        }),
        CounterOp::Window(WindowOp { now, config: None }),
        CounterOp::Decr(DecrOp {
            now,
            event: now,
            amount: 3,
            shard: 1,
            shards: 2,
            token,
        }),
        CounterOp::Reconcile(ReconcileOp {
            now,
            truth: -100,
            watermark: Some(now - 60_000 * 3),
            width: 60_000,
            retention: 3_600_000,
        }),
        CounterOp::Reconcile(ReconcileOp {
            now,
            truth: 5,
            watermark: None,
            width: 1,
            retention: 1,
        }),
        CounterOp::ClearTotal(ClearTotalOp {
            now,
            total: -7,
            token,
        }),
        CounterOp::Increx(IncrexOp {
            add: AddOp {
                now,
                event: now,
                delta: 4,
                shard: 0,
                shards: 2,
                token,
            },
            skipped: false,
            print: 9,
        }),
        CounterOp::Refund(RefundOp {
            now,
            fp: !u64::MAX,
            units: 2,
            shard: 0,
            shards: 1,
        }),
    ];
    ops.iter()
        .enumerate()
        .map(|(i, op)| Effect {
            op: *op,
            expire_at: (i == 0).then_some(now + 60_000),
        })
        .collect()
}

fn pnc_samples() -> Vec<PnCounter> {
    let mut homed = pnc_sample();
    homed.set_home(Some(Home {
        id: pnc_id("eu"),
        gen: 3,
    }));
    let mut many = PnCounter::new();
    for i in 0..30 {
        let _ = many.add(&pnc_id(&format!("r-{i:016x}")), i * 1_000 - 7_000);
    }
    vec![PnCounter::new(), pnc_sample(), homed, many]
}

/// The seed corpus of every target: (target, input).
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let states: Vec<Vec<u8>> = ctr_samples().iter().map(ctr_format::encode).collect();
    let effects: Vec<Vec<u8>> = effect_samples().iter().map(effect::encode).collect();
    out.extend(states.iter().map(|s| ("ctr_state", s.clone())));
    out.extend(effects.iter().map(|e| ("effect", e.clone())));
    for (i, s) in states.iter().enumerate() {
        for (j, e) in effects.iter().enumerate() {
            if (i + j) % 3 == 0 || i == states.len() - 1 {
                out.push(("ctr_apply", ctr_apply_input(s, e)));
            }
        }
    }
    for (i, s) in states.iter().enumerate() {
        for (j, step) in step_samples().iter().enumerate() {
            if (i + j) % 2 == 0 {
                out.push(("ctr_step", ctr_step_input(s, b"k", step)));
            }
        }
    }
    // Every step on a ceiled spread's home (also among the states above, for some steps).
    let ceiled_home = ctr_format::encode(&ceiled_spread_home());
    for step in step_samples() {
        out.push(("ctr_step", ctr_step_input(&ceiled_home, b"k", &step)));
    }
    for c in pnc_samples() {
        out.push(("pnc_state", pnc_format::encode_state(&c)));
        out.push(("pnc_state", pnc_format::encode_stored(&c)));
    }
    let args: &[(u8, &str)] = &[
        (0, "5"),
        (0, "-1 TOKEN order-17 AT 1700000000000 EX 10"),
        (0, "9223372036854775807 px 250 token t"),
        (0, "1 EX 1 PX 1"),
        (1, "3 TOKEN o1 AT 5"),
        (1, "0"),
        (2, "TOKEN x"),
        (2, ""),
        (3, "100 AT 60000"),
        (3, "FROM STREAM events AT 1700000040000"),
        (3, "from zset z"),
        (3, "FROM SET s"),
        (4, "NONE"),
        (4, "-9223372036854775808"),
        (5, "-0"),
        (5, "9223372036854775808"),
    ];
    for (selector, text) in args {
        let mut input = vec![*selector];
        input.extend_from_slice(text.as_bytes());
        out.push(("ctr_args", input));
    }
    let ids: &[(u8, &str)] = &[
        (0, "eu-west"),
        (0, "r-00ff00ff00ff00ff"),
        (0, "a.b_c-D"),
        (1, "region_1"),
        (1, ""),
        (2, "eu 1 -5"),
        (
            2,
            "us-east.0123456789ab 18446744073709551615 9223372036854775807",
        ),
    ];
    for (selector, text) in ids {
        let mut input = vec![*selector];
        input.extend_from_slice(text.as_bytes());
        out.push(("pnc_args", input));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn fuzz_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz")
    }

    fn check(target: &str) -> Check {
        match TARGETS.iter().find(|(name, _)| *name == target) {
            Some((_, f)) => *f,
            None => panic!("no fuzz target {target}"),
        }
    }

    #[test]
    fn every_seed_passes_its_check() {
        let seeds = seeds();
        for (target, _) in TARGETS {
            assert!(
                seeds.iter().any(|(t, _)| t == target),
                "no seed for {target}"
            );
        }
        for (target, input) in seeds {
            check(target)(&input);
        }
    }

    #[test]
    fn seeds_decode() {
        // The seeds are valid encodings, not noise the decoders refuse.
        for (target, input) in seeds() {
            match target {
                "ctr_state" => assert!(ctr_format::decode(&input).is_ok()),
                "effect" => assert!(effect::decode(&input).is_ok()),
                "pnc_state" => assert!(
                    pnc_format::decode_state(&input).is_ok()
                        || pnc_format::decode_stored(&input).is_ok()
                ),
                _ => {}
            }
        }
        let rich = rich_counter();
        assert!(rich.floor().is_some() && rich.shard_count() == 4);
        assert!(rich.token_count() == 12 && !rich.tokens().is_empty() && !rich.ledger().is_empty());
        assert!(rich.history().is_some_and(|h| !h.buckets.is_empty()));
        // The ceiled seeds reach the sections of a spread's ceiling and of ceiling units.
        let home = ceiled_spread_home();
        assert_eq!(home.spread().and_then(|s| s.ceiling), Some(40));
        let dcs = |c: &Counter| -> Vec<i64> {
            c.transfers()
                .map(|t| t.outbox.iter().map(|o| o.dc).collect())
                .unwrap_or_default()
        };
        assert_eq!(dcs(&home), vec![5]);
        assert_eq!(dcs(&sealed_ceiled_holder()), vec![7]);
    }

    /// Without libFuzzer: the `ctr_step` seeds with one to three bytes changed (20,000
    /// inputs, a fixed sequence), each through its check.
    #[test]
    fn mutated_step_seeds_pass_their_check() {
        let seeds: Vec<Vec<u8>> = seeds()
            .into_iter()
            .filter(|(t, _)| *t == "ctr_step")
            .map(|(_, input)| input)
            .collect();
        let mut x: u64 = 0x5EED;
        let mut next = move || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let z = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB) ^ (z >> 31)
        };
        for _ in 0..20_000 {
            let mut input = seeds[next() as usize % seeds.len()].clone();
            for _ in 0..1 + next() % 3 {
                let at = next() as usize % input.len();
                input[at] = next() as u8;
            }
            ctr_step(&input);
        }
    }

    /// Every input a fuzzer crashed on, kept in `tests/fuzz/regressions/<target>/`, passes now.
    #[test]
    fn fuzz_regressions_pass() {
        let root = fuzz_dir().join("regressions");
        let mut replayed = 0;
        for (target, f) in TARGETS {
            let Ok(entries) = std::fs::read_dir(root.join(target)) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "md") {
                    continue;
                }
                let input = std::fs::read(&path).unwrap_or_default();
                eprintln!("replaying {target}/{}", entry.file_name().to_string_lossy());
                f(&input);
                replayed += 1;
            }
        }
        eprintln!("{replayed} fuzz regression inputs replayed");
    }

    /// Writes the seed corpus to `$CTR_FUZZ_SEEDS/<target>/` (run by `make fuzz`).
    #[test]
    #[ignore = "writes files: run by `make fuzz`"]
    fn write_seed_corpus() {
        let Some(dir) = std::env::var_os("CTR_FUZZ_SEEDS") else {
            panic!("set CTR_FUZZ_SEEDS to the corpus directory");
        };
        let dir = PathBuf::from(dir);
        for (i, (target, input)) in seeds().into_iter().enumerate() {
            let sub = dir.join(target);
            std::fs::create_dir_all(&sub).expect("create corpus dir");
            std::fs::write(sub.join(format!("seed-{i:03}")), input).expect("write seed");
        }
    }
}
