//! PNC.* commands against a real server: values, the safe range, errors, MERGE validation,
//! observed reset, INFO in RESP2 and RESP3, metadata, notifications, configs and metrics.

mod common;

use common::pnc::{state_blob, stored_blob, Rng};
use common::{Conn, Server, Value};

const NOT_INT: &str = "ERR value is not an integer or out of range";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const OVERFLOW: &str = "ERR counter overflow";
const MAX: u64 = i64::MAX as u64;

fn with_id(id: &str) -> Server {
    Server::start_with(&[], &["replica-id", id])
}

fn ok() -> Value {
    Value::Simple("OK".into())
}

fn state(c: &mut Conn, key: &str) -> Vec<u8> {
    c.cmd(&["PNC.STATE", key]).bytes()
}

fn merge(c: &mut Conn, key: &str, blob: &[u8]) -> Value {
    c.cmd(&[b"PNC.MERGE", key.as_bytes(), blob])
}

fn info_field(c: &mut Conn, key: &str, field: &str) -> Value {
    c.cmd(&["PNC.INFO", key]).field(field)
}

#[test]
fn add_get_and_state_follow_the_contract() {
    let server = with_id("us-east");
    let mut c = server.conn();
    assert_eq!(c.q("PNC.GET likes"), Value::Int(0));
    assert_eq!(c.q("PNC.STATE likes"), Value::Nil);
    assert_eq!(c.q("EXISTS likes"), Value::Int(0), "reads create nothing");
    assert_eq!(c.q("PNC.ADD likes 5"), Value::Int(5));
    assert_eq!(c.q("PNC.ADD likes -7"), Value::Int(-2));
    assert_eq!(c.q("PNC.ADD likes 0"), Value::Int(-2));
    assert_eq!(c.q("PNC.GET likes"), Value::Int(-2));
    assert_eq!(c.q("TYPE likes").text(), "ctr-pncnt");
    // Only this deployment's slot was written: P = 5, N = 7.
    assert_eq!(state(&mut c, "likes"), state_blob(&[("us-east", 5, 7)]));
    // A zero add on a missing key creates it, like INCRBY 0.
    assert_eq!(c.q("PNC.ADD zero 0"), Value::Int(0));
    assert_eq!(c.q("EXISTS zero"), Value::Int(1));
    assert_eq!(state(&mut c, "zero"), state_blob(&[]));
}

#[test]
fn the_safe_range_holds_and_overflow_changes_nothing() {
    let server = with_id("a");
    let mut c = server.conn();
    let max = i64::MAX.to_string();
    assert_eq!(c.cmd(&["PNC.ADD", "k", &max]), Value::Int(i64::MAX));
    assert_eq!(c.q("PNC.ADD k 1").error(), OVERFLOW, "value");
    let neg_max = (-i64::MAX).to_string();
    assert_eq!(c.cmd(&["PNC.ADD", "k", &neg_max]), Value::Int(0));
    // The value has room, but P of this slot is already i64::MAX.
    assert_eq!(c.q("PNC.ADD k 1").error(), OVERFLOW, "P slot");
    assert_eq!(c.q("PNC.ADD k -1").error(), OVERFLOW, "N slot");
    assert_eq!(state(&mut c, "k"), state_blob(&[("a", MAX, MAX)]));
    // i64::MIN cannot be held by one slot; a refused add creates nothing.
    let min = i64::MIN.to_string();
    assert_eq!(c.cmd(&["PNC.ADD", "fresh", &min]).error(), OVERFLOW);
    assert_eq!(c.q("EXISTS fresh"), Value::Int(0));
    // Another slot can still move the value anywhere in range.
    merge(&mut c, "low", &state_blob(&[("b", 0, MAX)]));
    assert_eq!(c.q("PNC.ADD low -1"), Value::Int(i64::MIN));
    assert_eq!(c.q("PNC.ADD low -1").error(), OVERFLOW);
    assert_eq!(
        c.q("PNC.CLEAR low").error(),
        OVERFLOW,
        "resetting i64::MIN needs 2^63 in one slot"
    );
    assert_eq!(c.q("PNC.GET low"), Value::Int(i64::MIN));
}

#[test]
fn bad_arguments_and_other_types_are_refused() {
    let server = with_id("a");
    let mut c = server.conn();
    c.q("PNC.ADD k 3");
    for bad in ["abc", "1.5", "+1", " 1", "01", "99999999999999999999", ""] {
        assert_eq!(c.cmd(&["PNC.ADD", "k", bad]).error(), NOT_INT, "{bad:?}");
    }
    for (line, name) in [
        ("PNC.ADD k", "pnc.add"),
        ("PNC.ADD k 1 2", "pnc.add"),
        ("PNC.GET", "pnc.get"),
        ("PNC.GET k k", "pnc.get"),
        ("PNC.STATE", "pnc.state"),
        ("PNC.MERGE k", "pnc.merge"),
        ("PNC.CLEAR", "pnc.clear"),
        ("PNC.INFO k x", "pnc.info"),
        ("PNC.APPLY k a 1", "pnc.apply"),
        ("PNC.SETSTATE k", "pnc.setstate"),
    ] {
        assert_eq!(
            c.q(line).error(),
            format!("ERR wrong number of arguments for '{name}' command"),
            "{line}"
        );
    }
    c.q("SET s x");
    c.q("CTR.ADD n 1");
    let blob = state_blob(&[("b", 1, 0)]);
    for key in ["s", "n"] {
        assert_eq!(c.cmd(&["PNC.ADD", key, "1"]).error(), WRONGTYPE);
        assert_eq!(c.cmd(&["PNC.GET", key]).error(), WRONGTYPE);
        assert_eq!(c.cmd(&["PNC.STATE", key]).error(), WRONGTYPE);
        assert_eq!(c.cmd(&["PNC.CLEAR", key]).error(), WRONGTYPE);
        assert_eq!(c.cmd(&["PNC.INFO", key]).error(), WRONGTYPE);
        assert_eq!(merge(&mut c, key, &blob).error(), WRONGTYPE);
    }
    assert_eq!(c.q("GET s").text(), "x");
    assert_eq!(c.q("CTR.GET n"), Value::Int(1));
    assert!(c.q("CTR.ADD k 1").is_error(), "CTR refuses a PN-counter");
    assert_eq!(c.q("PNC.GET k"), Value::Int(3));
    // Internal commands validate their arguments too.
    assert!(c
        .q("PNC.APPLY k bad! 1 1")
        .error()
        .starts_with("ERR invalid replica id"));
    assert!(c.q("PNC.APPLY k a 0 1").error().contains("generation"));
    assert_eq!(c.q("PNC.APPLY k a 1 x").error(), NOT_INT);
    assert!(c
        .cmd(&[&b"PNC.SETSTATE"[..], b"k", &state_blob(&[])])
        .error()
        .starts_with("ERR invalid PNC state"));
    assert_eq!(c.q("PNC.GET k"), Value::Int(3));
}

#[test]
fn merge_takes_the_elementwise_maximum_and_creates_the_key() {
    let server = with_id("a");
    let mut c = server.conn();
    c.q("PNC.ADD k 10");
    c.q("PNC.ADD k -3");
    // b: +4, and a stale view of a (P 2 < 10, N 5 > 3).
    let other = state_blob(&[("a", 2, 5), ("b", 4, 0)]);
    assert_eq!(merge(&mut c, "k", &other), Value::Int(10 - 5 + 4));
    assert_eq!(state(&mut c, "k"), state_blob(&[("a", 10, 5), ("b", 4, 0)]));
    // Idempotent: merging again, or merging our own state, changes nothing.
    assert_eq!(merge(&mut c, "k", &other), Value::Int(9));
    let own = state(&mut c, "k");
    assert_eq!(merge(&mut c, "k", &own), Value::Int(9));
    // Creates a missing key, even from an empty state.
    assert_eq!(merge(&mut c, "new", &other), Value::Int(-3 + 4));
    assert_eq!(state(&mut c, "new"), other);
    assert_eq!(merge(&mut c, "empty", &state_blob(&[])), Value::Int(0));
    assert_eq!(c.q("EXISTS empty"), Value::Int(1));
    // Merging in a different order gives the same state (commutative).
    let x = state_blob(&[("a", 1, 0), ("c", 9, 9)]);
    let y = state_blob(&[("a", 3, 2), ("b", 1, 1)]);
    merge(&mut c, "xy", &x);
    merge(&mut c, "xy", &y);
    merge(&mut c, "yx", &y);
    merge(&mut c, "yx", &x);
    assert_eq!(state(&mut c, "xy"), state(&mut c, "yx"));
}

#[test]
fn merge_refuses_bad_or_out_of_range_states_and_changes_nothing() {
    let server = with_id("a");
    let mut c = server.conn();
    c.q("PNC.ADD k 7");
    let before = state(&mut c, "k");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "ERR invalid PNC state: empty (PNC.STATE of a missing key is nil, which a shell passes on as an empty line: there is nothing to merge)"),
        (
            "future version",
            vec![3, 0],
            "ERR invalid PNC state: unsupported version 3 (this module reads versions 1 to 2)",
        ),
        (
            "truncated",
            state_blob(&[("b", 300, 1)])[..5].to_vec(),
            "ERR invalid PNC state: truncated",
        ),
        (
            "trailing",
            [state_blob(&[("b", 1, 0)]), vec![0]].concat(),
            "ERR invalid PNC state: 1 trailing byte(s)",
        ),
        (
            "duplicate",
            state_blob(&[("b", 1, 0), ("b", 2, 0)]),
            "ERR invalid PNC state: duplicate replica id",
        ),
        (
            "unordered",
            state_blob(&[("c", 1, 0), ("b", 2, 0)]),
            "ERR invalid PNC state: replica ids out of order",
        ),
        (
            "bad id",
            state_blob(&[("b c", 1, 0)]),
            "ERR invalid PNC state: replica id may only hold A-Z a-z 0-9 _ - .",
        ),
        (
            "slot over i64::MAX",
            state_blob(&[("b", MAX + 1, 0)]),
            "ERR invalid PNC state: a P or N total exceeds 9223372036854775807",
        ),
        (
            "value over i64::MAX",
            state_blob(&[("b", MAX, 0), ("c", 1, 0)]),
            "ERR invalid PNC state: its value is outside the signed 64-bit range",
        ),
        (
            "huge count",
            [vec![1, 253], (1u64 << 40).to_le_bytes().to_vec()].concat(),
            "ERR invalid PNC state: 1099511627776 replica ids (at most 1024)",
        ),
        (
            "a stored form, not a state",
            stored_blob(&[("b", 1, 0)], Some(("b", 1))),
            "ERR invalid PNC state: 4 trailing byte(s)",
        ),
        (
            "merged value out of range",
            state_blob(&[("b", MAX - 3, 0)]),
            OVERFLOW,
        ),
    ];
    let refused_before: u64 = server
        .info_field("ctr", "ctr_pnc_refused_blobs")
        .parse()
        .unwrap();
    for (name, blob, expected) in &cases {
        assert_eq!(merge(&mut c, "k", blob).error(), *expected, "{name}");
        if expected.starts_with("ERR invalid PNC state") {
            assert_eq!(merge(&mut c, "absent", blob).error(), *expected, "{name}");
        }
    }
    assert_eq!(state(&mut c, "k"), before);
    assert_eq!(c.q("EXISTS absent"), Value::Int(0));
    let refused_after: u64 = server
        .info_field("ctr", "ctr_pnc_refused_blobs")
        .parse()
        .unwrap();
    // "merged value out of range" was only tried against k (7 + MAX - 3 overflows).
    assert_eq!(refused_after - refused_before, 2 * cases.len() as u64 - 1);
}

#[test]
fn three_hundred_mutated_or_truncated_blobs_are_refused_and_change_nothing() {
    let server = with_id("a");
    let mut c = server.conn();
    c.q("PNC.ADD k 42");
    merge(
        &mut c,
        "k",
        &state_blob(&[("b", 300, 7), ("c", 70_000, 1), ("d", 0, 5)]),
    );
    let good = state(&mut c, "k");
    let before_value = c.q("PNC.GET k");
    let mut rng = Rng::new(0xb10b);
    let mut refused = 0;
    let mut tried = 0;
    while refused < 300 {
        tried += 1;
        assert!(tried < 3000, "mutations kept producing valid states");
        let mut blob = good.clone();
        match rng.below(4) {
            0 => blob.truncate(rng.below(blob.len() as u64) as usize),
            1 => {
                let at = rng.below(blob.len() as u64) as usize;
                blob[at] ^= 1 << rng.below(8);
            }
            2 => {
                let at = rng.below(blob.len() as u64 + 1) as usize;
                blob.insert(at, rng.next() as u8);
            }
            _ => {
                let at = rng.below(blob.len() as u64) as usize;
                blob[at] = rng.next() as u8;
            }
        }
        let target = format!("copy{tried}");
        c.cmd(&[b"PNC.MERGE", target.as_bytes(), &good]);
        let reply = merge(&mut c, &target, &blob);
        if reply.is_error() {
            refused += 1;
            let msg = reply.error();
            assert!(
                msg.starts_with("ERR invalid PNC state: ") || msg == OVERFLOW,
                "{msg}"
            );
            assert_eq!(
                state(&mut c, &target),
                good,
                "a refused merge changed nothing"
            );
        }
        // A mutation that is still a valid state merges like any other; either way the
        // original key is untouched.
    }
    assert!(server.alive());
    assert_eq!(state(&mut c, "k"), good);
    assert_eq!(c.q("PNC.GET k"), before_value);
}

#[test]
fn clear_is_an_observed_reset() {
    let server = with_id("a");
    let mut c = server.conn();
    assert_eq!(c.q("PNC.CLEAR missing"), Value::Int(0));
    assert_eq!(c.q("EXISTS missing"), Value::Int(0));
    c.q("PNC.ADD k 10");
    merge(&mut c, "k", &state_blob(&[("b", 5, 1)]));
    assert_eq!(c.q("PNC.CLEAR k"), Value::Int(14));
    assert_eq!(c.q("PNC.GET k"), Value::Int(0));
    // The reset went into this deployment's N: b's slot is untouched.
    assert_eq!(
        state(&mut c, "k"),
        state_blob(&[("a", 10, 14), ("b", 5, 1)])
    );
    // A concurrent add at b (not yet seen here) survives the merge.
    assert_eq!(
        merge(&mut c, "k", &state_blob(&[("b", 8, 1)])),
        Value::Int(3)
    );
    assert_eq!(c.q("PNC.CLEAR k"), Value::Int(3));
    assert_eq!(c.q("PNC.CLEAR k"), Value::Int(0));
    // A negative value is reset through P.
    c.q("PNC.ADD neg -4");
    assert_eq!(c.q("PNC.CLEAR neg"), Value::Int(-4));
    assert_eq!(state(&mut c, "neg"), state_blob(&[("a", 4, 4)]));
}

fn replicas_of(info: &Value) -> Vec<(String, i64, i64)> {
    info.field("replicas")
        .array()
        .iter()
        .map(|r| (r.field("id").text(), r.field("p").int(), r.field("n").int()))
        .collect()
}

#[test]
fn info_is_a_map_in_resp3_and_a_flat_array_in_resp2() {
    let server = with_id("us-east");
    let mut c = server.conn();
    assert_eq!(info_field(&mut c, "k", "value"), Value::Int(0));
    assert_eq!(info_field(&mut c, "k", "replicas"), Value::Array(vec![]));
    assert_eq!(info_field(&mut c, "k", "home"), Value::Nil);
    c.q("PNC.ADD k 3");
    merge(&mut c, "k", &state_blob(&[("eu", 2, 9)]));
    let resp2 = c.q("PNC.INFO k");
    assert!(matches!(resp2, Value::Array(_)), "{resp2:?}");
    assert_eq!(resp2.field("value"), Value::Int(-4));
    assert_eq!(resp2.field("replica-id").text(), "us-east");
    assert_eq!(resp2.field("home").text(), "us-east");
    assert_eq!(
        replicas_of(&resp2),
        vec![("eu".into(), 2, 9), ("us-east".into(), 3, 0)]
    );
    c.q("HELLO 3");
    let resp3 = c.q("PNC.INFO k");
    let Value::Map(pairs) = &resp3 else {
        panic!("RESP3 map expected: {resp3:?}")
    };
    let names: Vec<String> = pairs.iter().map(|(k, _)| k.text()).collect();
    assert_eq!(names, ["value", "replica-id", "home", "replicas"]);
    assert!(matches!(resp3.field("replicas").array()[0], Value::Map(_)));
    assert_eq!(replicas_of(&resp3), replicas_of(&resp2));
    assert_eq!(c.q("PNC.GET k"), Value::Int(-4));
}

#[test]
fn command_metadata_declares_every_key() {
    let server = Server::start();
    let mut c = server.conn();
    for line in [
        "PNC.ADD k 1",
        "PNC.GET k",
        "PNC.STATE k",
        "PNC.MERGE k x",
        "PNC.CLEAR k",
        "PNC.INFO k",
        "PNC.APPLY k a 1 1",
        "PNC.SETSTATE k x",
    ] {
        assert_eq!(
            c.q(&format!("COMMAND GETKEYS {line}")),
            Value::Array(vec![Value::Bulk(b"k".to_vec())]),
            "{line}"
        );
    }
    let info = c.q("COMMAND INFO PNC.ADD PNC.GET PNC.STATE PNC.MERGE PNC.CLEAR PNC.INFO");
    let entries = info.array();
    // [name, arity, flags, first, last, step, acl, tips, key specs, subcommands]
    let expect = [
        (3, "write", "RW"),
        (2, "readonly", "RO"),
        (-2, "readonly", "RO"),
        (3, "write", "RW"),
        (2, "write", "RW"),
        (2, "readonly", "RO"),
    ];
    for (entry, (arity, flag, spec)) in entries.iter().zip(expect) {
        let e = entry.array();
        let name = e[0].text();
        assert_eq!(e[1], Value::Int(arity), "{name}");
        assert!(e[2].flat_text().contains(flag), "{name}");
        assert!(e[8].flat_text().contains(spec), "{name}");
        if flag == "write" {
            assert!(e[2].flat_text().contains("denyoom"), "{name}");
        }
    }
    assert!(c
        .q("COMMAND DOCS PNC.MERGE")
        .flat_text()
        .contains("Merges a PNC.STATE blob"));
}

#[test]
fn every_write_emits_a_keyspace_notification_and_no_ops_emit_none() {
    let server = Server::start_with(&["--notify-keyspace-events", "KEA"], &["replica-id", "a"]);
    let mut sub = server.conn();
    sub.q("PSUBSCRIBE __keyevent@0__:*");
    let mut c = server.conn();
    c.q("PNC.ADD k 1");
    c.q("PNC.ADD k 0"); // no change: no event
    c.q("PNC.GET k");
    c.q("PNC.INFO k");
    let own = state(&mut c, "k");
    merge(&mut c, "k", &own); // no change: no event
    merge(&mut c, "k", &state_blob(&[("b", 1, 0)]));
    c.q("PNC.CLEAR k");
    c.q("PNC.CLEAR k"); // already 0: no event
    c.q("PNC.APPLY k a 1 5");
    c.cmd(&[
        &b"PNC.SETSTATE"[..],
        b"k",
        &stored_blob(&[("a", 1, 0)], None),
    ]);
    c.q("SET done 1");
    let mut events = Vec::new();
    loop {
        let msg = sub.read().unwrap().array();
        let event = msg[2].text().replace("__keyevent@0__:", "");
        if event == "set" {
            break;
        }
        events.push((event, msg[3].text()));
    }
    let expected: Vec<(String, String)> = [
        "pnc.add",
        "pnc.merge",
        "pnc.clear",
        "pnc.apply",
        "pnc.setstate",
    ]
    .iter()
    .map(|e| (e.to_string(), "k".to_string()))
    .collect();
    assert_eq!(events, expected);
}

#[test]
fn replica_id_config_validates_and_moves_the_id() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(
        c.q("CONFIG GET ctr.replica-id"),
        Value::Array(vec![
            Value::Bulk(b"ctr.replica-id".to_vec()),
            Value::Bulk(vec![])
        ])
    );
    for bad in [
        "has space",
        "dot.ted",
        "slash/",
        "percent%s",
        &"x".repeat(49),
        "caf\u{e9}",
    ] {
        let err = c.cmd(&["CONFIG", "SET", "ctr.replica-id", bad]).error();
        assert!(
            err.contains("ctr.replica-id must be empty (automatic) or 1 to 48 characters"),
            "{bad:?}: {err}"
        );
    }
    assert!(c
        .cmd(&[&b"CONFIG"[..], b"SET", b"ctr.replica-id", b"a\0b"])
        .is_error());
    assert_eq!(c.q("CONFIG GET ctr.replica-id").array()[1].text(), "");
    // Unset: the first write makes a random id.
    c.q("PNC.ADD k 1");
    let random = info_field(&mut c, "k", "replica-id").text();
    assert!(random.starts_with("r-") && random.len() == 18, "{random}");
    // Setting it moves this deployment's writes to the new id.
    assert_eq!(c.q("CONFIG SET ctr.replica-id eu-west_2"), ok());
    assert_eq!(
        c.q("CONFIG GET ctr.replica-id").array()[1].text(),
        "eu-west_2"
    );
    c.q("PNC.ADD k 2");
    assert_eq!(info_field(&mut c, "k", "replica-id").text(), "eu-west_2");
    assert_eq!(
        state(&mut c, "k"),
        state_blob(&[("eu-west_2", 2, 0), (&random, 1, 0)])
    );
    let long = "x".repeat(48);
    assert_eq!(c.cmd(&["CONFIG", "SET", "ctr.replica-id", &long]), ok());
    // Back to empty: a fresh random id, never the old one.
    assert_eq!(c.cmd(&["CONFIG", "SET", "ctr.replica-id", ""]), ok());
    c.q("PNC.ADD k 4");
    let fresh = info_field(&mut c, "k", "replica-id").text();
    assert!(fresh.starts_with("r-") && fresh != random, "{fresh}");
}

#[test]
fn replica_id_load_argument_is_validated() {
    let server = Server::start_with(&[], &["replica-id", "ap-south"]);
    let mut c = server.conn();
    assert_eq!(
        c.q("CONFIG GET ctr.replica-id").array()[1].text(),
        "ap-south"
    );
    c.q("PNC.ADD k 1");
    assert_eq!(info_field(&mut c, "k", "replica-id").text(), "ap-south");
    let err = match Server::try_start(&[], &["replica-id", "no.dots"], true, &[]) {
        Ok(_) => panic!("a bad replica id must stop the module from loading"),
        Err(log) => log,
    };
    assert!(err.contains("replica-id"), "{err}");
}

#[test]
fn info_ctr_counts_merges_bytes_and_refusals() {
    let server = with_id("a");
    let mut c = server.conn();
    let get = |f: &str| -> u64 { server.info_field("ctr", f).parse().unwrap() };
    assert_eq!(
        (
            get("ctr_pnc_merges"),
            get("ctr_pnc_merged_bytes"),
            get("ctr_pnc_refused_blobs")
        ),
        (0, 0, 0)
    );
    let blob = state_blob(&[("b", 1, 0)]);
    merge(&mut c, "k", &blob);
    merge(&mut c, "k", &blob);
    merge(&mut c, "k", &[9]);
    c.q("SET s x");
    merge(&mut c, "s", &blob); // WRONGTYPE: not a blob refusal, not a merge
    assert_eq!(get("ctr_pnc_merges"), 2);
    assert_eq!(get("ctr_pnc_merged_bytes"), 2 * blob.len() as u64);
    assert_eq!(get("ctr_pnc_refused_blobs"), 1);
}

#[test]
fn a_writable_replica_refuses_local_adds_but_follows_its_master() {
    let master = with_id("m");
    let replica = master.start_replica();
    let mut r = replica.conn();
    r.q("CONFIG SET replica-read-only no");
    let mut m = master.conn();
    m.q("PNC.ADD k 5");
    master.wait_replicas(1);
    for line in ["PNC.ADD k 1", "PNC.CLEAR k"] {
        let err = r.q(line).error();
        assert!(err.contains("must run on a primary"), "{line}: {err}");
    }
    assert_eq!(r.q("PNC.GET k"), Value::Int(5));
    assert_eq!(info_field(&mut r, "k", "replica-id").text(), "m");
}

/// A primary that has served local adds, turned into a replica of a master it never reaches
/// (no sync, so no loading): its next local add is refused. The module remembers that the
/// server is a primary so that adds need not ask the server's context flags; the role change
/// alone must make it forget.
#[test]
fn a_primary_turned_replica_without_a_sync_refuses_local_adds() {
    let server = with_id("m");
    let mut c = server.conn();
    assert_eq!(c.q("PNC.ADD k 5"), Value::Int(5));
    assert_eq!(c.q("PNC.ADD k 1"), Value::Int(6));
    c.q("CONFIG SET replica-read-only no");
    let nowhere = common::free_port().to_string();
    c.cmd(&["REPLICAOF", "127.0.0.1", &nowhere]);
    for line in ["PNC.ADD k 1", "PNC.CLEAR k"] {
        let err = c.q(line).error();
        assert!(err.contains("must run on a primary"), "{line}: {err}");
    }
    assert_eq!(c.q("PNC.GET k"), Value::Int(6));
    assert_eq!(c.q("REPLICAOF NO ONE"), Value::Simple("OK".into()));
    assert_eq!(c.q("PNC.ADD k 1"), Value::Int(7));
}
