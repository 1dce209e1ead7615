//! Spread counters on one server: CTR.SPREAD names holders in distinct slots, reads of the home
//! key give the total over every holder (also inside MULTI/EXEC and scripts), growing keeps the
//! value, floors and bad input are refused and change nothing. Persistence of the holder
//! list is in ctr_persistence.rs; shrinking in ctr_fold.rs; the cluster behaviour in
//! cluster_spread.rs.

mod common;

use common::cluster::key_slot;
use common::{names, Conn, Server, Value};

fn info_field(c: &mut Conn, key: &str, field: &str) -> Value {
    c.cmd(&["CTR.INFO", key]).field(field)
}

#[test]
fn spread_names_holders_in_distinct_slots_and_reads_give_the_total() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD {user:1}:views 5");
    let holders = names(&c.q("CTR.SPREAD {user:1}:views 4"));
    assert_eq!(holders.len(), 4);
    assert_eq!(holders[0], "{user:1}:views", "holder 0 is the home");
    let mut slots: Vec<u16> = holders.iter().map(|h| key_slot(h.as_bytes())).collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 4, "each holder in its own slot: {holders:?}");

    // Holders are ordinary counters: any client writes any of them.
    assert_eq!(c.cmd(&["CTR.ADD", &holders[1], "7"]), Value::Int(7));
    assert_eq!(c.cmd(&["CTR.ADD", &holders[3], "-2"]), Value::Int(-2));
    assert_eq!(c.q("CTR.GET {user:1}:views"), Value::Int(10));
    assert_eq!(
        c.q("CTR.MGET {user:1}:views missing"),
        Value::Array(vec![Value::Int(10), Value::Int(0)])
    );
    assert_eq!(
        info_field(&mut c, "{user:1}:views", "value"),
        Value::Int(10)
    );
    assert_eq!(
        names(&info_field(&mut c, "{user:1}:views", "holders")),
        holders
    );
    assert_eq!(
        info_field(&mut c, "{user:1}:views", "holder_values"),
        Value::Array([5, 7, 0, -2].into_iter().map(Value::Int).collect())
    );
    assert_eq!(
        info_field(&mut c, "{user:1}:views", "holder_ages_ms"),
        Value::Array(vec![Value::Int(0); 4]),
        "every value read for this command"
    );

    // The same count again changes nothing and replies the same names; growing keeps them.
    assert_eq!(names(&c.q("CTR.SPREAD {user:1}:views 4")), holders);
    let grown = names(&c.q("CTR.SPREAD {user:1}:views 9"));
    assert_eq!(grown.len(), 9);
    assert_eq!(grown[..4], holders[..]);
    assert_eq!(c.q("CTR.GET {user:1}:views"), Value::Int(10));
    assert_eq!(server.info_field("ctr", "ctr_spreads"), "2");
    assert!(
        server
            .info_field("ctr", "ctr_gathers")
            .parse::<u64>()
            .unwrap()
            >= 5
    );
}

#[test]
fn reads_inside_multi_and_scripts_give_the_total() {
    let server = Server::start();
    let mut c = server.conn();
    let holders = names(&c.q("CTR.SPREAD hot 3"));
    c.cmd(&["CTR.ADD", &holders[2], "4"]);
    c.q("CTR.ADD hot 1");
    assert_eq!(c.q("MULTI"), Value::Simple("OK".into()));
    c.q("CTR.GET hot");
    c.q("CTR.MGET hot");
    assert_eq!(
        c.q("EXEC"),
        Value::Array(vec![Value::Int(5), Value::Array(vec![Value::Int(5)])])
    );
    assert_eq!(
        c.cmd(&["EVAL", "return redis.call('CTR.GET', KEYS[1])", "1", "hot"]),
        Value::Int(5)
    );
}

#[test]
fn floors_and_bad_input_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let holders = names(&c.q("CTR.SPREAD k 3"));
    for bad in ["0", "-1", "1025", "abc", "99999999999999999999"] {
        assert!(
            c.cmd(&["CTR.SPREAD", "k", bad]).error().starts_with("ERR"),
            "{bad}"
        );
    }
    assert_eq!(names(&c.q("CTR.SPREAD k 3")), holders);
    assert!(c.q("CTR.SPREAD k").error().contains("wrong number"));
    assert!(c.q("CTR.SPREAD k 2 3").error().contains("wrong number"));

    c.q("SET plain x");
    assert!(c.q("CTR.SPREAD plain 3").error().starts_with("WRONGTYPE"));
    // A holder that is not a counter fails the read instead of being skipped.
    c.cmd(&["SET", &holders[1], "x"]);
    let e = c.q("CTR.GET k").error();
    assert!(e.contains("WRONGTYPE"), "{e}");

    // A missing key spread to 1 stays missing; spread further it becomes a home at 0.
    assert_eq!(names(&c.q("CTR.SPREAD fresh 1")), vec!["fresh".to_string()]);
    assert_eq!(c.q("EXISTS fresh"), Value::Int(0));
    assert_eq!(names(&c.q("CTR.SPREAD fresh 2")).len(), 2);
    assert_eq!(c.q("CTR.GET fresh"), Value::Int(0));
}

#[test]
fn configs_for_gathers_are_settable() {
    let server = Server::start_with(&[], &["gather-timeout-ms", "250"]);
    let mut c = server.conn();
    let get = |c: &mut Conn, name: &str| c.cmd(&["CONFIG", "GET", name]).array()[1].text();
    assert_eq!(get(&mut c, "ctr.gather-timeout-ms"), "250");
    assert_eq!(get(&mut c, "ctr.gather-cache-ms"), "0");
    assert_eq!(
        c.q("CONFIG SET ctr.gather-cache-ms 100"),
        Value::Simple("OK".into())
    );
    assert_eq!(get(&mut c, "ctr.gather-cache-ms"), "100");
    assert!(c
        .q("CONFIG SET ctr.gather-timeout-ms 0")
        .error()
        .starts_with("ERR"));
}

/// A field of a CTR.INFO reply (None when absent or the key is missing).
fn field_opt(info: &Value, name: &str) -> Option<Value> {
    let Value::Array(items) = info else {
        return None;
    };
    items
        .chunks(2)
        .find(|pair| pair[0].bytes() == name.as_bytes())
        .map(|pair| pair[1].clone())
}

/// Sends `n` adds of 1 in one pipeline; returns the replies.
fn pipelined_adds(c: &mut Conn, key: &str, n: usize) -> Vec<Value> {
    for _ in 0..n {
        c.send(&["CTR.ADD", key, "1"]);
    }
    (0..n).map(|_| c.read().unwrap()).collect()
}

#[test]
fn a_counter_adding_above_the_threshold_spreads_itself() {
    let server = Server::start_with(&[], &["spread-threshold", "200", "spread-holders", "5"]);
    let mut c = server.conn();
    let mut sent = 0i64;
    // A slow counter never spreads.
    for _ in 0..20 {
        c.q("CTR.ADD slow 1");
    }
    let started = std::time::Instant::now();
    while field_opt(&c.q("CTR.INFO hot"), "holders").is_none_or(|h| h.array().len() != 5) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "never spread"
        );
        for reply in pipelined_adds(&mut c, "hot", 500) {
            assert!(matches!(reply, Value::Int(_)), "{reply:?}");
        }
        sent += 500;
    }
    // Spreading kept every add; writers learn the holders from CTR.INFO.
    assert_eq!(c.q("CTR.GET hot"), Value::Int(sent));
    let holders = names(&info_field(&mut c, "hot", "holders"));
    c.cmd(&["CTR.ADD", &holders[4], "10"]);
    assert_eq!(c.q("CTR.GET hot"), Value::Int(sent + 10));
    assert_eq!(server.info_field("ctr", "ctr_auto_spreads"), "1");
    assert_eq!(field_opt(&c.q("CTR.INFO slow"), "holders"), None);
}

/// The documented token rule: a tokened add goes to `holders[crc16(token) mod N]` (CRC16/XMODEM,
/// the cluster's key-slot checksum, over the whole token), and its retries to the same holder,
/// so each token counts once in the total.
#[test]
fn tokened_adds_routed_by_the_token_rule_count_once() {
    let server = Server::start();
    let mut c = server.conn();
    let holders = names(&c.q("CTR.SPREAD orders 5"));
    let holder_for = |token: &str| {
        let h = common::cluster::crc16(token.as_bytes());
        holders[usize::from(h) % holders.len()].clone()
    };
    let mut used = std::collections::HashSet::new();
    for i in 0..100 {
        let token = format!("order-{i}");
        let holder = holder_for(&token);
        used.insert(holder.clone());
        for _attempt in 0..3 {
            c.cmd(&["CTR.ADD", &holder, "2", "TOKEN", &token]);
        }
    }
    assert!(used.len() > 1, "tokens spread over several holders");
    assert_eq!(c.q("CTR.GET orders"), Value::Int(200));
    // The trap the rule avoids: the same token sent to another holder counts again.
    let other = holders
        .iter()
        .find(|h| **h != holder_for("order-0"))
        .unwrap();
    c.cmd(&["CTR.ADD", other, "2", "TOKEN", "order-0"]);
    assert_eq!(c.q("CTR.GET orders"), Value::Int(202));
}
