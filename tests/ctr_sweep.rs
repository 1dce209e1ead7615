//! The idle sweep: expired tokens and ledger entries of counters that no write visits are
//! released in the background, and the release reaches replicas and the AOF.

mod common;

use std::time::{Duration, Instant};

use common::{Server, Value};

/// Waits (up to 20 s) until `INFO ctr` shows no token held.
fn wait_no_tokens(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.info_field("ctr", "ctr_tokens_held") != "0" {
        assert!(
            Instant::now() < deadline,
            "tokens never released:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn idle_counters_release_expired_entries_and_replicas_follow() {
    // A window long enough that no counter's own writes (all within a few ms) sweep it.
    let module = [
        "token-window-ms",
        "3000",
        "sweep-interval-ms",
        "10",
        "sweep-budget",
        "200",
    ];
    let mut server = Server::start_with(&common::AOF_WITHOUT_PREAMBLE, &module);
    let replica = server.start_replica();
    let mut c = server.conn();
    let keys: Vec<String> = (0..60).map(|i| format!("idle:{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        for t in 0..20 {
            c.cmd(&["CTR.ADD", key, "1", "TOKEN", &format!("t{t}")]);
        }
        if i % 3 == 0 {
            // Floored, with ledger entries (a granted and a refused decrement).
            c.cmd(&["CTR.FLOOR", key, "0"]);
            c.cmd(&["CTR.DECRFLOOR", key, "1", "TOKEN", "d1"]);
            c.cmd(&["CTR.DECRFLOOR", key, "100", "TOKEN", "d2"]);
        }
    }
    // A counter whose tokens are still live is left alone.
    c.q("CONFIG SET ctr.token-window-ms 600000");
    c.q("CTR.ADD live 1 TOKEN keep");
    c.q("CONFIG SET ctr.token-window-ms 3000");
    // Lots of other keys for the cursor to walk past.
    for i in 0..300 {
        c.cmd(&["SET", &format!("other:{i}"), "x"]);
    }
    // Nothing writes to them: the sweep must release everything but the live token.
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.info_field("ctr", "ctr_tokens_held") != "1" {
        assert!(Instant::now() < deadline, "tokens never released");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        server.info_field("ctr", "ctr_sweep_released"),
        (60 * 20 + 40).to_string()
    );
    let info = c.q("CTR.INFO idle:1");
    assert_eq!(info.field("value"), Value::Int(20));
    assert_eq!(info.field("tokens"), Value::Int(0));
    assert_eq!(
        info.field("encoding").text(),
        "inline",
        "back to its smallest form"
    );
    assert_eq!(c.q("CTR.INFO idle:0").field("ledger"), Value::Int(0));
    assert_eq!(c.q("CTR.INFO live").field("tokens"), Value::Int(1));
    // Replicas and the AOF saw the same sweeps.
    server.wait_replicas(1);
    wait_no_tokens_but(&replica, 1);
    let mut r = replica.conn();
    let digests: Vec<Value> = keys
        .iter()
        .chain(std::iter::once(&"live".to_string()))
        .map(|k| c.cmd(&["DEBUG", "DIGEST-VALUE", k]))
        .collect();
    for (k, d) in keys.iter().zip(&digests) {
        assert_eq!(&r.cmd(&["DEBUG", "DIGEST-VALUE", k]), d, "{k}");
    }
    drop(r);
    drop(replica);
    server.restart();
    let mut c = server.conn();
    for (k, d) in keys.iter().zip(&digests) {
        assert_eq!(
            &c.cmd(&["DEBUG", "DIGEST-VALUE", k]),
            d,
            "{k} after an AOF reload"
        );
    }
}

fn wait_no_tokens_but(server: &Server, left: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.info_field("ctr", "ctr_tokens_held") != left.to_string() {
        assert!(Instant::now() < deadline, "replica never caught up");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_zero_budget_turns_the_sweep_off_and_a_replica_never_sweeps() {
    let server = Server::start_with(
        &[],
        &[
            "token-window-ms",
            "200",
            "sweep-budget",
            "0",
            "sweep-interval-ms",
            "10",
        ],
    );
    let mut c = server.conn();
    c.q("CTR.ADD k 1 TOKEN a");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        server.info_field("ctr", "ctr_tokens_held"),
        "1",
        "budget 0: off"
    );
    c.q("CONFIG SET ctr.sweep-budget 100");
    wait_no_tokens(&server);
    // A replica made writable holds its master's tokens until the master's sweep says so.
    let replica = Server::start_with(&[], &["token-window-ms", "200", "sweep-interval-ms", "10"]);
    let mut r = replica.conn();
    r.q("CTR.ADD mine 1 TOKEN b");
    r.cmd(&["REPLICAOF", "127.0.0.1", &server.port.to_string()]);
    replica.wait_link_up();
    c.q("CONFIG SET ctr.sweep-budget 0");
    c.q("CONFIG SET ctr.token-window-ms 200");
    c.q("CTR.ADD m 1 TOKEN c");
    server.wait_replicas(1);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        replica.info_field("ctr", "ctr_tokens_held"),
        "1",
        "the replica did not sweep"
    );
    c.q("CONFIG SET ctr.sweep-budget 100");
    wait_no_tokens(&server);
    server.wait_replicas(1);
    assert_eq!(r.q("DEBUG DIGEST-VALUE m"), c.q("DEBUG DIGEST-VALUE m"));
}
