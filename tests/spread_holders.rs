//! CTR.HOLDERS: a spread counter's holder names from the home's master alone. On one server:
//! the same names as CTR.SPREAD replies (after a grow and a shrink), `[key]` for a missing or
//! unspread key (never creating it), WRONGTYPE, the holder error on a holder's name. On a
//! 3-master cluster: the same names while another master is frozen (DEBUG SLEEP) or down,
//! answered in milliseconds where CTR.INFO of the same key waits for the frozen master.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{key_slot, spread_over_masters, Cluster};
use common::{names, Server, Value};

#[test]
fn holders_of_counters_on_one_server() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(names(&c.q("CTR.HOLDERS nothing")), vec!["nothing"]);
    assert_eq!(
        c.q("EXISTS nothing"),
        Value::Int(0),
        "a read never creates the key"
    );
    c.q("CTR.ADD plain 5");
    assert_eq!(names(&c.q("CTR.HOLDERS plain")), vec!["plain"]);

    let spread = names(&c.q("CTR.SPREAD views 4"));
    assert_eq!(spread.len(), 4);
    assert_eq!(names(&c.q("CTR.HOLDERS views")), spread);
    let grown = names(&c.q("CTR.SPREAD views 6"));
    assert_eq!(&grown[..4], &spread[..]);
    assert_eq!(names(&c.q("CTR.HOLDERS views")), grown);
    // A shrink: the holders kept, not those folded back.
    let kept = names(&c.q("CTR.SPREAD views 2"));
    assert_eq!(kept, grown[..2].to_vec());
    assert_eq!(names(&c.q("CTR.HOLDERS views")), kept);
    assert_eq!(names(&c.q("CTR.SPREAD views 1")), vec!["views"]);
    assert_eq!(names(&c.q("CTR.HOLDERS views")), vec!["views"]);

    c.q("SET text hello");
    assert!(c.q("CTR.HOLDERS text").error().starts_with("WRONGTYPE"));
    // A holder's name, live, folded or never made: a holder is never a home.
    let holder = &grown[1];
    let err = c.cmd(&["CTR.HOLDERS", holder]).error();
    assert_eq!(
        err,
        format!("ERR {holder} is a holder of the spread counter views: use the home key")
    );
    let err = c.q("CTR.HOLDERS {ctr.1.0}nobody").error();
    assert!(
        err.contains("is a holder of the spread counter nobody"),
        "{err}"
    );
    let err = c.q("CTR.HOLDERS a b").error();
    assert_eq!(
        err,
        "ERR wrong number of arguments for 'ctr.holders' command"
    );
}

/// Runs `CTR.HOLDERS home` on the home's master; returns the names and how long it took.
fn timed_holders(cluster: &Cluster, home_node: usize, home: &str) -> (Vec<String>, Duration) {
    let mut c = cluster.nodes[home_node].conn();
    let started = Instant::now();
    let reply = c.cmd(&["CTR.HOLDERS", home]);
    (names(&reply), started.elapsed())
}

#[test]
fn holders_answer_at_once_while_a_master_is_frozen_or_down() {
    let mut cluster = Cluster::start(3, &[]);
    let home = "hot:views";
    let (home_node, holders, _total) = spread_over_masters(&cluster, home);
    let (read, took) = timed_holders(&cluster, home_node, home);
    assert_eq!(read, holders);
    println!("CTR.HOLDERS, every master up: {took:?}");

    // Another master frozen for 3 s (less than the cluster's node timeout: no failover).
    let frozen = (home_node + 1) % 3;
    let (live_holder, live_owner) = holders[1..]
        .iter()
        .map(|h| (h.clone(), cluster.owner(key_slot(h.as_bytes()))))
        .find(|&(_, owner)| owner != frozen)
        .expect("holders on every master");
    let mut sleeper = cluster.nodes[frozen].conn();
    let sleeps = std::thread::spawn(move || sleeper.cmd(&["DEBUG", "SLEEP", "3"]));
    std::thread::sleep(Duration::from_millis(200));
    let (read, took) = timed_holders(&cluster, home_node, home);
    println!("CTR.HOLDERS, a master frozen: {took:?}");
    assert_eq!(read, holders);
    assert!(
        took < Duration::from_millis(250),
        "CTR.HOLDERS took {took:?}"
    );
    // The gathered read of the same key waits for the frozen master (ctr.gather-timeout-ms,
    // 1000 by default), then fails: what CTR.HOLDERS does not do.
    let mut c = cluster.nodes[home_node].conn();
    let started = Instant::now();
    let info = c.cmd(&["CTR.INFO", home]);
    let info_took = started.elapsed();
    println!("CTR.INFO, a master frozen: {info_took:?}");
    assert!(
        info.error().contains("spread counter total unavailable"),
        "{info:?}"
    );
    assert!(info_took >= Duration::from_millis(900), "{info_took:?}");
    assert_eq!(sleeps.join().unwrap(), Value::Simple("OK".into()));

    // Another master down (no replica): the same.
    cluster.nodes[frozen].kill();
    let (read, took) = timed_holders(&cluster, home_node, home);
    println!("CTR.HOLDERS, a master down: {took:?}");
    assert_eq!(read, holders);
    assert!(
        took < Duration::from_millis(250),
        "CTR.HOLDERS took {took:?}"
    );

    // On a holder's own master, a holder's name is refused as on one server.
    let err = cluster.nodes[live_owner]
        .conn()
        .cmd(&["CTR.HOLDERS", &live_holder])
        .error();
    assert!(
        err.contains("is a holder of the spread counter hot:views"),
        "{err}"
    );
}
