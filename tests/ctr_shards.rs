//! Auto-promoted sub-shards: a hot counter doubles its shards, a cold one halves them, the value
//! stays exact, and replicas, reloads and the AOF hold the same layout.

mod common;

use std::time::{Duration, Instant};

use common::{Conn, Server, Value};

fn shards(c: &mut Conn, key: &str) -> i64 {
    match c.cmd(&["CTR.INFO", key]) {
        Value::Nil => 0,
        info => info.field("shards").int(),
    }
}

/// Adds 1 to `key` about 200 times a second until it has `want` shards; returns the total added.
fn heat_until(c: &mut Conn, key: &str, want: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut added = 0;
    while shards(c, key) < want {
        assert!(
            Instant::now() < deadline,
            "{key} never reached {want} shards"
        );
        for _ in 0..20 {
            c.cmd(&["CTR.ADD", key, "1"]).int();
            added += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    added
}

#[test]
fn a_hot_counter_is_promoted_and_stays_exact_everywhere() {
    let master = Server::start_with(&[], &["promote-threshold", "20", "max-shards", "4"]);
    let replica = master.start_replica();
    let mut m = master.conn();
    let added = heat_until(&mut m, "hot", 4);
    assert_eq!(m.q("CTR.GET hot"), Value::Int(added));
    let info = m.q("CTR.INFO hot");
    let parts: i64 = info
        .field("shard_values")
        .array()
        .iter()
        .map(Value::int)
        .sum();
    assert_eq!(parts, added, "the shards sum to the exact value");
    assert_eq!(master.info_field("ctr", "ctr_promotions"), "2");
    // The cap holds: more hot seconds do not go past max-shards.
    for _ in 0..25 {
        for _ in 0..20 {
            m.q("CTR.ADD hot 1");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(shards(&mut m, "hot"), 4);
    assert_eq!(m.q("CTR.GET hot"), Value::Int(added + 500));
    master.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(r.q("DEBUG DIGEST-VALUE hot"), m.q("DEBUG DIGEST-VALUE hot"));
    assert_eq!(shards(&mut r, "hot"), 4);
    let digest = m.q("DEBUG DIGEST-VALUE hot");
    m.q("DEBUG RELOAD");
    assert_eq!(m.q("DEBUG DIGEST-VALUE hot"), digest);
    assert_eq!(shards(&mut m, "hot"), 4);
    assert_eq!(
        replica.info_field("ctr", "ctr_promotions"),
        "0",
        "replicas decide nothing"
    );
}

#[test]
fn a_promoted_counter_survives_aof_rewrite_and_restart() {
    let mut server = Server::start_with(
        &["--appendonly", "yes", "--aof-use-rdb-preamble", "no"],
        &["promote-threshold", "20", "max-shards", "2"],
    );
    let mut c = server.conn();
    let added = heat_until(&mut c, "hot", 2);
    let digest = c.q("DEBUG DIGEST-VALUE hot");
    server.rewrite_aof();
    c.q("CTR.ADD hot 5"); // lands in the incremental AOF as an effect
    let digest_after = c.q("DEBUG DIGEST-VALUE hot");
    assert_ne!(digest, digest_after);
    server.restart();
    let mut c = server.conn();
    assert_eq!(c.q("DEBUG DIGEST-VALUE hot"), digest_after);
    assert_eq!(c.q("CTR.GET hot"), Value::Int(added + 5));
}

#[test]
fn a_counter_gone_cold_is_demoted_at_its_next_write() {
    let master = Server::start_with(&[], &["promote-threshold", "20", "max-shards", "2"]);
    let replica = master.start_replica();
    let mut m = master.conn();
    let added = heat_until(&mut m, "k", 2);
    // Ten quiet seconds make it cold; the next add halves it back to one shard (inline again).
    std::thread::sleep(Duration::from_millis(11_500));
    assert_eq!(m.q("CTR.ADD k 1"), Value::Int(added + 1));
    assert_eq!(shards(&mut m, "k"), 1);
    assert_eq!(m.q("CTR.INFO k").field("encoding").text(), "inline");
    assert_eq!(master.info_field("ctr", "ctr_demotions"), "1");
    master.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(r.q("DEBUG DIGEST-VALUE k"), m.q("DEBUG DIGEST-VALUE k"));
    assert_eq!(shards(&mut r, "k"), 1);
}

#[test]
fn info_describes_a_counter() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(c.q("CTR.INFO missing"), Value::Nil);
    c.q("CTR.ADD k 5 TOKEN a");
    c.q("CTR.ADD k 5 TOKEN a");
    let info = c.q("CTR.INFO k");
    assert_eq!(info.field("value"), Value::Int(5));
    assert_eq!(info.field("shards"), Value::Int(1));
    assert_eq!(
        info.field("shard_values"),
        Value::Array(vec![Value::Int(5)])
    );
    assert_eq!(info.field("tokens"), Value::Int(1));
    assert_eq!(info.field("duplicates_ignored"), Value::Int(1));
    assert_eq!(info.field("encoding").text(), "boxed");
    // RESP3 clients get a real map.
    c.q("HELLO 3");
    assert!(matches!(c.q("CTR.INFO k"), Value::Map(_)));
    c.q("SET s 1");
    assert!(c.q("CTR.INFO s").error().starts_with("WRONGTYPE"));
}
