//! The strong tier: floors, CTR.DECRFLOOR with per-shard budgets, and the idempotency ledger,
//! through concurrency, every persistence path, failover and a hard crash.

mod common;

use std::time::Duration;

use common::{Conn, Server, Value};

const BELOW: &str = "ERR value below floor";

#[test]
fn floors_are_set_checked_and_removed() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD stock 10");
    assert_eq!(c.q("CTR.FLOOR stock 11").error(), BELOW);
    assert_eq!(c.q("CTR.FLOOR stock 4"), Value::Simple("OK".into()));
    let info = c.q("CTR.INFO stock");
    assert_eq!(info.field("floor"), Value::Int(4));
    assert_eq!(info.field("budgets"), Value::Array(vec![Value::Int(6)]));
    assert_eq!(
        c.q("CTR.FLOOR fresh 1").error(),
        BELOW,
        "a missing counter is 0"
    );
    assert_eq!(c.q("EXISTS fresh"), Value::Int(0));
    assert_eq!(c.q("CTR.FLOOR fresh -5"), Value::Simple("OK".into()));
    assert_eq!(c.q("CTR.GET fresh"), Value::Int(0));
    assert_eq!(c.q("CTR.FLOOR nothing NONE"), Value::Simple("OK".into()));
    assert_eq!(c.q("EXISTS nothing"), Value::Int(0));
    assert_eq!(c.q("CTR.FLOOR stock none"), Value::Simple("OK".into()));
    assert_eq!(c.q("CTR.INFO stock").field("floor"), Value::Nil);
    assert_eq!(
        c.q("CTR.FLOOR stock low").error(),
        "ERR value is not an integer or out of range"
    );
    assert!(c.q("CTR.FLOOR stock").is_error());
    c.q("SET s 1");
    assert!(c.q("CTR.FLOOR s 0").error().starts_with("WRONGTYPE"));
}

#[test]
fn decrfloor_grants_or_replies_nil_and_never_crosses_the_floor() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(
        c.q("CTR.DECRFLOOR missing 1"),
        Value::Nil,
        "missing is 0, floor 0"
    );
    assert_eq!(c.q("EXISTS missing"), Value::Int(0));
    c.q("CTR.ADD seats 5");
    assert_eq!(
        c.q("CTR.DECRFLOOR seats 3"),
        Value::Int(2),
        "no floor set: floor 0"
    );
    assert_eq!(c.q("CTR.DECRFLOOR seats 3"), Value::Nil);
    assert_eq!(c.q("CTR.GET seats"), Value::Int(2));
    c.q("CTR.FLOOR seats 1");
    assert_eq!(c.q("CTR.DECRFLOOR seats 2"), Value::Nil);
    assert_eq!(c.q("CTR.DECRFLOOR seats 1"), Value::Int(1));
    // A negative add on a floored counter follows the same rule.
    assert_eq!(c.q("CTR.ADD seats -1"), Value::Nil);
    c.q("CTR.ADD seats 10");
    assert_eq!(c.q("CTR.ADD seats -4"), Value::Int(7));
    for bad in ["0", "-3"] {
        assert_eq!(
            c.cmd(&["CTR.DECRFLOOR", "seats", bad]).error(),
            "ERR amount must be positive"
        );
    }
    assert_eq!(
        c.q("CTR.DECRFLOOR seats x").error(),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        c.q("CTR.DECRFLOOR seats 1 EX 5").error(),
        "ERR syntax error"
    );
    assert_eq!(c.q("CTR.GET seats"), Value::Int(7));
    assert_eq!(server.info_field("ctr", "ctr_decrements_granted"), "2");
    assert_eq!(server.info_field("ctr", "ctr_decrements_refused"), "3");
    assert_eq!(server.info_field("ctr", "ctr_adds_refused_by_floor"), "1");
}

#[test]
fn sixteen_buyers_never_oversell_a_thousand_units() {
    let server = Server::start_with(&[], &["promote-threshold", "50", "max-shards", "8"]);
    let mut c = server.conn();
    c.q("CTR.ADD stock 1000");
    c.q("CTR.FLOOR stock 0");
    let port = server.port;
    let buyers: Vec<_> = (0..16u64)
        .map(|b| {
            std::thread::spawn(move || {
                let mut c = Conn::connect(port).unwrap();
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (b + 1);
                let (mut granted, mut largest) = (0i64, 0i64);
                for _ in 0..200 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let amount = 1 + (seed % 9) as i64;
                    largest = largest.max(amount);
                    if let Value::Int(left) =
                        c.cmd(&["CTR.DECRFLOOR", "stock", &amount.to_string()])
                    {
                        assert!(left >= 0);
                        granted += amount;
                    }
                }
                (granted, largest)
            })
        })
        .collect();
    let results: Vec<(i64, i64)> = buyers.into_iter().map(|b| b.join().unwrap()).collect();
    let granted: i64 = results.iter().map(|r| r.0).sum();
    let largest = results.iter().map(|r| r.1).max().unwrap();
    let left = c.q("CTR.GET stock").int();
    assert_eq!(granted + left, 1000, "every unit sold once");
    assert!(
        left >= 0 && left < largest,
        "left {left}: no false refusal while stock remained"
    );
    let info = c.q("CTR.INFO stock");
    let budgets: i64 = info.field("budgets").array().iter().map(Value::int).sum();
    assert_eq!(budgets, left, "budgets sum to the headroom");
}

fn ledger_replays(c: &mut Conn) {
    // order-1 was granted (value 6), order-2 refused; a restock does not change their replies.
    assert_eq!(c.q("CTR.DECRFLOOR stock 4 TOKEN order-1"), Value::Int(6));
    assert_eq!(c.q("CTR.DECRFLOOR stock 50 TOKEN order-2"), Value::Nil);
    assert_eq!(c.q("CTR.GET stock"), Value::Int(106));
}

fn seed_ledger(c: &mut Conn) {
    c.q("CTR.ADD stock 10");
    c.q("CTR.FLOOR stock 0");
    assert_eq!(c.q("CTR.DECRFLOOR stock 4 TOKEN order-1"), Value::Int(6));
    assert_eq!(c.q("CTR.DECRFLOOR stock 50 TOKEN order-2"), Value::Nil);
    c.q("CTR.ADD stock 100"); // restock
}

#[test]
fn the_ledger_replays_the_first_outcome_after_restock_and_reload() {
    let mut server = Server::start();
    let mut c = server.conn();
    seed_ledger(&mut c);
    ledger_replays(&mut c);
    assert_eq!(c.q("CTR.INFO stock").field("ledger"), Value::Int(2));
    assert_eq!(server.info_field("ctr", "ctr_duplicates_ignored"), "2");
    let digest = c.q("DEBUG DIGEST-VALUE stock");
    c.q("DEBUG RELOAD");
    assert_eq!(c.q("DEBUG DIGEST-VALUE stock"), digest);
    ledger_replays(&mut c);
    server.restart_saving();
    ledger_replays(&mut server.conn());
    // The tokens gauge counts ledger entries too, through reloads, copies and frees.
    assert_eq!(server.info_field("ctr", "ctr_tokens_held"), "2");
    let mut c = server.conn();
    c.q("COPY stock stock2");
    assert_eq!(server.info_field("ctr", "ctr_tokens_held"), "4");
    c.q("DEL stock stock2");
    assert_eq!(server.info_field("ctr", "ctr_tokens_held"), "0");
}

#[test]
fn the_ledger_survives_aof_rewrite_and_replay() {
    let mut server = Server::start_with(&common::AOF_WITHOUT_PREAMBLE, &[]);
    let mut c = server.conn();
    seed_ledger(&mut c);
    server.rewrite_aof();
    c.q("CTR.DECRFLOOR stock 1 TOKEN order-3"); // after the rewrite: replayed from the AOF tail
    let digest = c.q("DEBUG DIGEST");
    server.restart();
    let mut c = server.conn();
    assert_eq!(c.q("DEBUG DIGEST"), digest);
    assert_eq!(c.q("CTR.DECRFLOOR stock 1 TOKEN order-3"), Value::Int(105));
    assert_eq!(c.q("CTR.DECRFLOOR stock 4 TOKEN order-1"), Value::Int(6));
    assert_eq!(c.q("CTR.DECRFLOOR stock 50 TOKEN order-2"), Value::Nil);
}

#[test]
fn wait_makes_a_decrement_survive_a_failover() {
    let master = Server::start();
    let replica = master.start_replica();
    let mut m = master.conn();
    seed_ledger(&mut m);
    // WAIT returns once the replica holds the writes: from then on they survive losing the master.
    assert_eq!(m.q("WAIT 1 5000"), Value::Int(1));
    let mut r = replica.conn();
    assert_eq!(
        r.q("DEBUG DIGEST-VALUE stock"),
        m.q("DEBUG DIGEST-VALUE stock")
    );
    drop(master);
    r.q("REPLICAOF NO ONE");
    ledger_replays(&mut r);
}

#[test]
fn acknowledged_decrements_survive_kill_9_with_appendfsync_always() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"], &[]);
    let mut c = server.conn();
    c.q("CTR.ADD stock 100000");
    c.q("CTR.FLOOR stock 0");
    let port = server.port;
    let writer = std::thread::spawn(move || {
        let mut c = Conn::connect(port).unwrap();
        let mut acked = Vec::new();
        for i in 0.. {
            let amount = 1 + i % 5;
            let token = format!("buy-{i}");
            c.send(&[
                "CTR.DECRFLOOR",
                "stock",
                &amount.to_string(),
                "TOKEN",
                &token,
            ]);
            match c.read() {
                Ok(Value::Int(v)) => acked.push((token, amount, v)),
                _ => return (acked, Some((format!("buy-{i}"), amount))),
            }
        }
        unreachable!()
    });
    std::thread::sleep(Duration::from_millis(400));
    server.kill();
    let (acked, in_flight) = writer.join().unwrap();
    assert!(
        acked.len() > 10,
        "the stream ran ({} acknowledged)",
        acked.len()
    );
    server.restart();
    let mut c = server.conn();
    let acked_total: i64 = acked.iter().map(|a| a.1 as i64).sum();
    let value = c.q("CTR.GET stock").int();
    let in_flight_amount = in_flight.as_ref().map_or(0, |f| f.1 as i64);
    assert!(
        value == 100_000 - acked_total || value == 100_000 - acked_total - in_flight_amount,
        "value {value}: every acknowledged decrement is there"
    );
    for (token, amount, first) in acked.iter().rev().take(50) {
        let reply = c.cmd(&[
            "CTR.DECRFLOOR",
            "stock",
            &amount.to_string(),
            "TOKEN",
            token,
        ]);
        assert_eq!(
            reply,
            Value::Int(*first),
            "retry of {token} replays its first outcome"
        );
    }
    assert_eq!(c.q("CTR.GET stock").int(), value, "retries changed nothing");
}

#[test]
fn floored_counters_reach_replicas_exactly() {
    let master = Server::start_with(&[], &["promote-threshold", "20", "max-shards", "4"]);
    let replica = master.start_replica();
    let mut m = master.conn();
    m.q("CTR.ADD stock 100000");
    m.q("CTR.FLOOR stock 10");
    for i in 0..60 {
        m.cmd(&["CTR.DECRFLOOR", "stock", "3", "TOKEN", &format!("o{i}")]);
        m.q("CTR.ADD stock 1");
        std::thread::sleep(Duration::from_millis(25));
    }
    master.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(
        r.q("DEBUG DIGEST-VALUE stock"),
        m.q("DEBUG DIGEST-VALUE stock")
    );
    assert_eq!(
        r.q("CTR.INFO stock").field("budgets"),
        m.q("CTR.INFO stock").field("budgets")
    );
}

/// A CTR state blob: VALUE, optional SHARDS, FLOOR with budgets, END.
fn floored_blob(value: i64, shards: &[i64], floor: i64, budgets: &[i64]) -> Vec<u8> {
    let mut b = vec![1, 1];
    b.extend(common::ivarint(value));
    if shards.len() > 1 {
        b.push(2);
        b.extend(common::uvarint(shards.len() as u64));
        shards.iter().for_each(|s| b.extend(common::ivarint(*s)));
    }
    b.push(4);
    b.extend(common::ivarint(floor));
    b.extend(common::uvarint(budgets.len() as u64));
    budgets.iter().for_each(|s| b.extend(common::ivarint(*s)));
    b.push(0);
    b
}

#[test]
fn forged_floors_and_budgets_are_refused() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD k 1");
    let dump = common::DumpFrame::of_key(&mut c, "k");
    let frame = |blob: &[u8]| dump.with_blob(blob);
    let good = floored_blob(10, &[4, 6], 2, &[3, 5]);
    assert_eq!(
        c.cmd(&[&b"RESTORE"[..], b"ok", b"0", &frame(&good)]),
        Value::Simple("OK".into())
    );
    assert_eq!(c.q("CTR.DECRFLOOR ok 8"), Value::Int(2));
    let cases = [
        (
            "budgets short of the headroom",
            floored_blob(10, &[4, 6], 2, &[3, 4]),
        ),
        (
            "budgets above the headroom",
            floored_blob(10, &[4, 6], 2, &[3, 6]),
        ),
        ("a negative budget", floored_blob(10, &[4, 6], 2, &[-1, 9])),
        ("value below the floor", floored_blob(1, &[1], 2, &[0])),
        (
            "budget count differs from shards",
            floored_blob(10, &[4, 6], 2, &[8]),
        ),
        (
            "headroom overflows",
            floored_blob(i64::MAX, &[i64::MAX], -1, &[0]),
        ),
    ];
    for (name, bad) in cases {
        let reply = c.cmd(&[&b"RESTORE"[..], b"forged", b"0", &frame(&bad)]);
        assert!(reply.is_error(), "{name}: {reply:?}");
        assert!(server.alive(), "{name}");
        assert_eq!(c.q("EXISTS forged"), Value::Int(0), "{name}");
    }
}
