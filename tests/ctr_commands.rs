//! CTR.ADD / CTR.GET / CTR.MGET against a real server: values, errors, types, metadata and
//! keyspace notifications.

mod common;

use common::{Server, Value};

const NOT_INT: &str = "ERR value is not an integer or out of range";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn add_get_and_mget_follow_the_contract() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(c.q("CTR.GET missing"), Value::Int(0));
    assert_eq!(c.q("CTR.ADD views 5"), Value::Int(5));
    assert_eq!(c.q("CTR.ADD views -12"), Value::Int(-7));
    assert_eq!(c.q("CTR.ADD views 0"), Value::Int(-7));
    assert_eq!(c.q("CTR.GET views"), Value::Int(-7));
    assert_eq!(
        c.q("CTR.MGET views missing views"),
        Value::Array(vec![Value::Int(-7), Value::Int(0), Value::Int(-7)])
    );
    assert_eq!(c.q("TYPE views").text(), "ctr-count");
    assert_eq!(c.q("EXISTS missing"), Value::Int(0), "reads create nothing");
}

#[test]
fn extreme_values_are_exact_and_overflow_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let max = i64::MAX.to_string();
    let min = i64::MIN.to_string();
    assert_eq!(c.cmd(&["CTR.ADD", "k", &max]), Value::Int(i64::MAX));
    assert_eq!(c.q("CTR.ADD k 1").error(), "ERR counter overflow");
    assert_eq!(c.q("CTR.GET k"), Value::Int(i64::MAX));
    // Crossing the inline/boxed boundary in both directions keeps the exact value.
    assert_eq!(c.cmd(&["CTR.ADD", "k", &min]), Value::Int(-1));
    assert_eq!(
        c.cmd(&["CTR.ADD", "k", &min]).error(),
        "ERR counter overflow"
    );
    assert_eq!(
        c.q("CTR.ADD k -4611686018427387904"),
        Value::Int(-4611686018427387905)
    );
    assert_eq!(c.q("CTR.ADD k 1"), Value::Int(-4611686018427387904));
    assert_eq!(c.q("CTR.GET k"), Value::Int(-4611686018427387904));
}

#[test]
fn bad_arguments_get_clear_errors_and_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD k 3");
    for bad in ["abc", "1.5", "+1", " 1", "01", "99999999999999999999", ""] {
        assert_eq!(c.cmd(&["CTR.ADD", "k", bad]).error(), NOT_INT, "{bad:?}");
    }
    assert_eq!(c.cmd(&["CTR.ADD", "k", "1\0"]).error(), NOT_INT);
    assert_eq!(
        c.q("CTR.ADD k").error(),
        "ERR wrong number of arguments for 'ctr.add' command"
    );
    assert_eq!(c.q("CTR.ADD k 1 2").error(), "ERR syntax error");
    assert_eq!(
        c.q("CTR.GET").error(),
        "ERR wrong number of arguments for 'ctr.get' command"
    );
    assert_eq!(
        c.q("CTR.MGET").error(),
        "ERR wrong number of arguments for 'ctr.mget' command"
    );
    assert_eq!(c.q("CTR.GET k"), Value::Int(3));
    assert_eq!(c.q("CTR.ADD fresh abc").error(), NOT_INT);
    assert_eq!(
        c.q("EXISTS fresh"),
        Value::Int(0),
        "a refused add creates nothing"
    );
}

#[test]
fn other_types_get_wrongtype() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("SET s 1");
    c.q("CTR.ADD n 1");
    assert_eq!(c.q("CTR.ADD s 1").error(), WRONGTYPE);
    assert_eq!(c.q("CTR.GET s").error(), WRONGTYPE);
    assert_eq!(c.q("CTR.MGET n s").error(), WRONGTYPE);
    assert_eq!(c.q("GET s").text(), "1", "the string is untouched");
    assert!(c.q("INCR n").error().starts_with("WRONGTYPE"));
}

#[test]
fn binary_key_names_work() {
    let server = Server::start();
    let mut c = server.conn();
    let key: &[u8] = b"k\0\xff\r\n";
    assert_eq!(c.cmd(&[&b"CTR.ADD"[..], key, b"2"]), Value::Int(2));
    assert_eq!(c.cmd(&[&b"CTR.GET"[..], key]), Value::Int(2));
}

#[test]
fn command_metadata_routes_every_key() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(
        c.q("COMMAND GETKEYS CTR.MGET a b c"),
        Value::Array(vec![
            Value::Bulk(b"a".to_vec()),
            Value::Bulk(b"b".to_vec()),
            Value::Bulk(b"c".to_vec())
        ])
    );
    assert_eq!(
        c.q("COMMAND GETKEYS CTR.ADD k 1"),
        Value::Array(vec![Value::Bulk(b"k".to_vec())])
    );
    assert_eq!(
        c.q("COMMAND GETKEYS CTR.GET k"),
        Value::Array(vec![Value::Bulk(b"k".to_vec())])
    );
    assert_eq!(
        c.q("COMMAND GETKEYS CTR.SETSTATE k x"),
        Value::Array(vec![Value::Bulk(b"k".to_vec())])
    );
    let info = c.q("COMMAND INFO CTR.GET CTR.MGET CTR.ADD");
    let flat = info.flat_text();
    let entries = info.array();
    let text = |v: &Value| v.flat_text();
    // [name, arity, flags, first, last, step, acl, tips, key specs, subcommands]
    assert_eq!(entries[0].array()[1], Value::Int(2));
    assert!(text(&entries[0].array()[2]).contains("readonly"), "{flat}");
    assert!(text(&entries[0].array()[8]).contains("RO"), "{flat}");
    assert_eq!(entries[1].array()[1], Value::Int(-2));
    assert!(text(&entries[1].array()[8]).contains("RO"), "{flat}");
    assert_eq!(entries[2].array()[1], Value::Int(-3));
    assert!(text(&entries[2].array()[2]).contains("write"), "{flat}");
    assert!(text(&entries[2].array()[8]).contains("RW"), "{flat}");
    let docs = c.q("COMMAND DOCS CTR.ADD");
    assert!(docs.flat_text().contains("Adds a delta"), "{docs:?}");
}

#[test]
fn writes_emit_keyspace_notifications() {
    let server = Server::start_with(&["--notify-keyspace-events", "KEA"], &[]);
    let mut sub = server.conn();
    sub.q("PSUBSCRIBE __keyevent@0__:*");
    let mut c = server.conn();
    c.q("CTR.ADD k 1");
    c.q("CTR.GET k"); // reads notify nothing
    c.q("CTR.ADD k 2");
    let mut events = Vec::new();
    for _ in 0..2 {
        let msg = sub.read().unwrap().array();
        events.push((msg[2].text(), msg[3].text()));
    }
    assert_eq!(
        events,
        vec![
            ("__keyevent@0__:ctr.add".to_string(), "k".to_string()),
            ("__keyevent@0__:ctr.add".to_string(), "k".to_string())
        ]
    );
}

#[test]
fn resp3_clients_get_the_same_values() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("HELLO 3");
    assert_eq!(c.q("CTR.ADD k 4"), Value::Int(4));
    assert_eq!(
        c.q("CTR.MGET k x"),
        Value::Array(vec![Value::Int(4), Value::Int(0)])
    );
}

#[test]
fn many_clients_adding_concurrently_lose_nothing() {
    let server = Server::start();
    let port = server.port;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = common::Conn::connect(port).unwrap();
                for i in 0..500 {
                    let delta = if (t + i) % 3 == 0 { -2 } else { 3 };
                    c.cmd(&["CTR.ADD", "shared", &delta.to_string()]).int();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let expected: i64 = (0..8)
        .flat_map(|t| (0..500).map(move |i| if (t + i) % 3 == 0 { -2 } else { 3 }))
        .sum();
    assert_eq!(server.conn().q("CTR.GET shared"), Value::Int(expected));
}
