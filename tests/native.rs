//! Behaving like a native Redis command: writes that change nothing leave the key untouched
//! (WATCH holds, no keyspace event, nothing replicated), WRONGTYPE comes first, expire times
//! and events as `SET ... EX` has them, tokens that name one write, and keys that exist only
//! to remember refusals expire with them.

mod common;

use std::time::Duration;

use common::{Conn, Server, Value};

const TOKEN_REUSED: &str =
    "ERR token already used on this key for another write (another command or amount)";
const BAD_EXPIRE: &str = "ERR invalid expire time in 'ctr.add' command";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn offset(server: &Server) -> i64 {
    server
        .info_field("replication", "master_repl_offset")
        .parse()
        .unwrap()
}

/// The next keyspace notification's channel (a `pmessage` push).
fn next_event(sub: &mut Conn) -> String {
    let msg = sub.read().expect("a keyspace notification").array();
    format!("{} {}", msg[2].text(), msg[3].text())
}

/// Sets `fence` and reads notifications up to its own: every event sent before it is drained.
fn drain_up_to(sub: &mut Conn, c: &mut Conn, fence: &str) -> Vec<String> {
    c.cmd(&["SET", fence, "1"]);
    let mut seen = Vec::new();
    loop {
        let e = next_event(sub);
        if e.contains(fence) {
            return seen;
        }
        seen.push(e);
    }
}

/// Every write command of the contract in the forms that change nothing. Each row: the key,
/// the writes that set it up, and the no-op.
fn no_op_cases() -> Vec<(&'static str, Vec<&'static str>, &'static str)> {
    vec![
        ("w1", vec!["CTR.ADD w1 1 TOKEN a"], "CTR.ADD w1 1 TOKEN a"),
        ("w2", vec!["CTR.ADD w2 5 TOKEN a"], "CTR.ADD w2 5 TOKEN a"),
        ("w3", vec!["CTR.ADD w3 5"], "CTR.DECRFLOOR w3 100"),
        (
            "w4",
            vec!["CTR.ADD w4 5", "CTR.DECRFLOOR w4 2 TOKEN d"],
            "CTR.DECRFLOOR w4 2 TOKEN d",
        ),
        (
            "w5",
            vec!["CTR.ADD w5 5", "CTR.DECRFLOOR w5 9 TOKEN d"],
            "CTR.DECRFLOOR w5 9 TOKEN d",
        ),
        (
            "w6",
            vec!["CTR.ADD w6 5", "CTR.FLOOR w6 0"],
            "CTR.ADD w6 -100",
        ),
        (
            "w7",
            vec!["CTR.ADD w7 5", "CTR.FLOOR w7 0", "CTR.ADD w7 -100 TOKEN r"],
            "CTR.ADD w7 -100 TOKEN r",
        ),
        (
            "w8",
            vec!["CTR.ADD w8 5", "CTR.CLEAR w8 TOKEN c"],
            "CTR.CLEAR w8 TOKEN c",
        ),
        ("w9", vec!["CTR.ADD w9 5"], "CTR.FLOOR w9 NONE"),
        (
            "w10",
            vec!["CTR.ADD w10 5", "CTR.FLOOR w10 1"],
            "CTR.FLOOR w10 1",
        ),
        ("w11", vec![], "CTR.DECRFLOOR w11 5"),
        ("w12", vec![], "CTR.CLEAR w12"),
        ("w13", vec![], "CTR.FLOOR w13 NONE"),
        ("w14", vec!["CTR.RECONCILE w14 5"], "CTR.RECONCILE w14 5"),
        (
            "w15",
            vec!["CTR.DECRFLOOR w15 5 TOKEN t"],
            "CTR.DECRFLOOR w15 5 TOKEN t",
        ),
        ("p1", vec!["PNC.ADD p1 5"], "PNC.ADD p1 0"),
        ("p2", vec![], "PNC.CLEAR p2"),
        ("p3", vec!["PNC.ADD p3 5", "PNC.ADD p3 -5"], "PNC.CLEAR p3"),
    ]
}

#[test]
fn writes_that_change_nothing_leave_watch_events_and_replicas_alone() {
    let master = Server::start_with(
        &[
            "--notify-keyspace-events",
            "KEA",
            "--repl-ping-replica-period",
            "3600",
        ],
        &[],
    );
    let replica = master.start_replica();
    let (mut a, mut b, mut sub) = (master.conn(), master.conn(), master.conn());
    sub.q("PSUBSCRIBE __keyspace@0__:*");
    let mut cases: Vec<(String, Vec<String>, Vec<Vec<u8>>)> = no_op_cases()
        .into_iter()
        .map(|(k, setup, op)| {
            let words = op.split(' ').map(|w| w.as_bytes().to_vec()).collect();
            (
                k.to_string(),
                setup.iter().map(|s| s.to_string()).collect(),
                words,
            )
        })
        .collect();
    // A PNC.MERGE of the key's own state.
    b.q("PNC.ADD p4 5");
    let state = b.q("PNC.STATE p4").bytes();
    cases.push((
        "p4".into(),
        vec![],
        vec![b"PNC.MERGE".to_vec(), b"p4".to_vec(), state],
    ));
    for (i, (key, setup, no_op)) in cases.iter().enumerate() {
        for w in setup {
            assert!(!b.q(w).is_error(), "{w}");
        }
        drain_up_to(&mut sub, &mut b, &format!("fence:{i}"));
        master.wait_replicas(1);
        let before = offset(&master);
        a.cmd(&["WATCH", key]);
        let reply = b.cmd(no_op);
        assert!(!reply.is_error(), "{key}: {reply:?}");
        assert_eq!(offset(&master), before, "{key}: the no-op was replicated");
        a.q("MULTI");
        a.q("SET watched 1");
        assert_ne!(a.q("EXEC"), Value::Nil, "{key}: the no-op broke WATCH");
        let events = drain_up_to(&mut sub, &mut b, &format!("marker:{i}"));
        let leaked: Vec<_> = events.iter().filter(|e| e.contains(key.as_str())).collect();
        assert!(leaked.is_empty(), "{key}: events {leaked:?}");
    }
    // A write that does change the key still aborts the transaction and notifies.
    a.q("WATCH w1");
    b.q("CTR.ADD w1 1");
    a.q("MULTI");
    a.q("SET watched 1");
    assert_eq!(a.q("EXEC"), Value::Nil);
    master.wait_replicas(1);
    let mut r = replica.conn();
    for (key, _, _) in &cases {
        let digest = |c: &mut Conn| c.cmd(&["DEBUG", "DIGEST-VALUE", key]);
        assert_eq!(digest(&mut b), digest(&mut r), "{key}");
    }
}

#[test]
fn ttl_on_create_sends_the_generic_expire_event() {
    let server = Server::start_with(&["--notify-keyspace-events", "Eg"], &[]);
    let mut sub = server.conn();
    sub.q("SUBSCRIBE __keyevent@0__:expire");
    let mut c = server.conn();
    c.q("CTR.ADD fixed 1 EX 10");
    c.q("SET native 1 EX 10");
    c.q("CTR.DECRFLOOR refused 1 TOKEN t");
    for key in ["fixed", "native", "refused"] {
        let msg = sub.read().unwrap().array();
        assert_eq!(msg[2].text(), key);
    }
}

#[test]
fn expire_times_are_checked_like_set_does() {
    let server = Server::start();
    let mut c = server.conn();
    for bad in [
        "CTR.ADD e 1 PX 9223372036854775000",
        "CTR.ADD e 1 EX 9223372036854775",
        "CTR.ADD e 1 EX 0",
        "CTR.ADD e 1 PX -1",
    ] {
        assert_eq!(c.q(bad).error(), BAD_EXPIRE, "{bad}");
        let native = bad.replace("CTR.ADD e 1", "SET n 1");
        assert_eq!(
            c.q(&native).error(),
            "ERR invalid expire time in 'set' command"
        );
    }
    assert_eq!(c.q("EXISTS e"), Value::Int(0));
    c.q("CTR.ADD e 1");
    assert_eq!(
        c.q("CTR.ADD e 1 PX 9223372036854775000").error(),
        BAD_EXPIRE
    );
    assert_eq!(c.q("CTR.GET e"), Value::Int(1), "refused: nothing changed");
    assert_eq!(
        c.q("CTR.ADD n 1 AT -5").error(),
        "ERR AT must be a unix time in ms (not negative)"
    );
    assert_eq!(
        c.q("CTR.DECRFLOOR n 1 AT -1").error(),
        "ERR AT must be a unix time in ms (not negative)"
    );
    assert_eq!(c.q("EXISTS n"), Value::Int(0));
}

#[test]
fn wrongtype_comes_before_any_complaint_about_the_arguments() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("SET s x");
    c.q("CTR.ADD ctr 1");
    c.q("PNC.ADD pnc 1");
    let long = format!("CTR.ADD s 1 TOKEN {}", "t".repeat(300));
    let bad_args = [
        "CTR.ADD s x",
        "CTR.ADD s 1 BOGUS 1",
        "CTR.ADD s 1 PX 9223372036854775000",
        "CTR.ADD s 1 AT -5",
        "CTR.ADD s 1 TOKEN t AT 1",
        "CTR.ADD s 1 AT 99999999999999",
        long.as_str(),
        "CTR.DECRFLOOR s 0",
        "CTR.DECRFLOOR s x",
        "CTR.DECRFLOOR s 1 TOKEN t AT 1",
        "CTR.CLEAR s BOGUS",
        "CTR.FLOOR s low",
        "CTR.ADD pnc 1 EX 0",
        "CTR.FLOOR pnc NONE",
        "PNC.ADD s x",
        "PNC.ADD ctr x",
        "PNC.MERGE ctr x",
        "PNC.MERGE s \n",
        "PNC.CLEAR ctr",
        "CTR.RECONCILE s x",
        "CTR.RECONCILE s 1 AT",
        "CTR.RECONCILE s FROM LIST l",
        "CTR.RECONCILE s FROM SET l AT 60000",
        "CTR.RECONCILE pnc 1",
    ];
    for line in bad_args {
        let words: Vec<&str> = if line.starts_with("PNC.MERGE s") {
            vec!["PNC.MERGE", "s", "\n"]
        } else {
            line.split(' ').collect()
        };
        assert_eq!(c.cmd(&words).error(), WRONGTYPE, "{line}");
    }
}

#[test]
fn a_token_names_one_write_and_a_reuse_with_other_arguments_is_refused() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD stock 100");
    c.q("CTR.FLOOR stock 0");
    assert_eq!(c.q("CTR.DECRFLOOR stock 2 TOKEN o1"), Value::Int(98));
    for other in [
        "CTR.DECRFLOOR stock 50 TOKEN o1",
        "CTR.ADD stock 2 TOKEN o1",
        "CTR.ADD stock -2 TOKEN o1",
        "CTR.CLEAR stock TOKEN o1",
    ] {
        assert_eq!(c.q(other).error(), TOKEN_REUSED, "{other}");
    }
    assert_eq!(
        c.q("CTR.DECRFLOOR stock 2 TOKEN o1"),
        Value::Int(98),
        "same write: replayed"
    );
    c.q("CTR.ADD views 1 TOKEN v");
    c.q("CTR.ADD views 7 TOKEN w");
    assert_eq!(c.q("CTR.ADD views 2 TOKEN v").error(), TOKEN_REUSED);
    assert_eq!(c.q("CTR.ADD views 1 TOKEN w").error(), TOKEN_REUSED);
    assert_eq!(c.q("CTR.DECRFLOOR views 1 TOKEN v").error(), TOKEN_REUSED);
    assert_eq!(c.q("CTR.ADD views 7 TOKEN w"), Value::Int(8));
    assert_eq!(c.q("CTR.GET stock"), Value::Int(98));
    assert_eq!(c.q("CTR.GET views"), Value::Int(8));
    assert_eq!(server.info_field("ctr", "ctr_tokens_refused"), "7");
    let info = c.q("CTR.INFO views");
    assert_eq!(
        (info.field("tokens").int(), info.field("ledger").int()),
        (2, 0)
    );
}

#[test]
fn a_refused_tokened_add_is_refused_again_after_a_restock_everywhere() {
    let master = Server::start_with(&common::AOF_WITHOUT_PREAMBLE, &[]);
    let replica = master.start_replica();
    let mut c = master.conn();
    // Value 0 with only a ledger, but a key of the user's (no TTL), and a key that only
    // remembers a refusal (its own TTL): the AOF rewrite keeps both TTLs as they are.
    c.q("CTR.ADD zeroed 2 TOKEN z");
    c.q("CTR.CLEAR zeroed");
    c.q("CTR.DECRFLOOR typo 5 TOKEN t");
    let typo_ttl = c.q("PTTL typo").int();
    assert!(typo_ttl > 0);
    c.q("CTR.ADD stock 3");
    c.q("CTR.FLOOR stock 0");
    assert_eq!(c.q("CTR.ADD stock -5 TOKEN r1"), Value::Nil);
    c.q("CTR.ADD stock 100");
    assert_eq!(
        c.q("CTR.ADD stock -5 TOKEN r1"),
        Value::Nil,
        "the refusal replays"
    );
    assert_eq!(c.q("CTR.GET stock"), Value::Int(103));
    master.wait_replicas(1);
    let digest = |c: &mut Conn| c.q("DEBUG DIGEST-VALUE stock");
    assert_eq!(digest(&mut c), digest(&mut replica.conn()));
    let dump = c.q("DUMP stock").bytes();
    c.cmd(&[&b"RESTORE"[..], b"copy", b"0", &dump]);
    master.rewrite_aof();
    c.q("DEBUG LOADAOF");
    for key in ["stock", "copy"] {
        assert_eq!(
            c.cmd(&["CTR.ADD", key, "-5", "TOKEN", "r1"]),
            Value::Nil,
            "{key}"
        );
    }
    assert_eq!(c.q("PTTL zeroed"), Value::Int(-1));
    assert!((1..=typo_ttl).contains(&c.q("PTTL typo").int()));
    c.q("DEBUG RELOAD");
    assert_eq!(c.q("CTR.ADD stock -5 TOKEN r1"), Value::Nil);
    assert_eq!(c.q("CTR.ADD stock -6 TOKEN r1").error(), TOKEN_REUSED);
}

#[test]
fn a_key_that_only_remembers_refusals_expires_with_them() {
    let master = Server::start_with(&[], &["token-window-ms", "1500"]);
    let replica = master.start_replica();
    let mut c = master.conn();
    assert_eq!(c.q("CTR.DECRFLOOR typo 5 TOKEN t"), Value::Nil);
    let ttl = c.q("PTTL typo").int();
    assert!(ttl > 0 && ttl <= 1500, "ttl {ttl}");
    master.wait_replicas(1);
    let mut r = replica.conn();
    assert!(r.q("PTTL typo").int() > 0, "the replica has the same TTL");
    assert_eq!(
        c.q("DEBUG DIGEST-VALUE typo"),
        r.q("DEBUG DIGEST-VALUE typo")
    );
    // Another refusal pushes the expiry to its own end.
    std::thread::sleep(Duration::from_millis(300));
    c.q("CTR.DECRFLOOR typo 7 TOKEN u");
    assert!(c.q("PTTL typo").int() > ttl - 300 + 100);
    std::thread::sleep(Duration::from_millis(2_000));
    assert_eq!(
        c.q("EXISTS typo"),
        Value::Int(0),
        "gone with its last refusal"
    );

    // A write that gives it a value makes it an ordinary, persistent counter.
    c.q("CTR.DECRFLOOR real 5 TOKEN t");
    assert_eq!(c.q("CTR.ADD real 3"), Value::Int(3));
    assert_eq!(c.q("PTTL real"), Value::Int(-1));
    // ... or one with the TTL asked for, as on create.
    c.q("CTR.DECRFLOOR fixed 5 TOKEN t");
    c.q("CTR.ADD fixed 1 EX 100");
    assert!(c.q("PTTL fixed").int() > 90_000);
    // A TTL the user set is left alone.
    c.q("CTR.ADD day 0 EX 100");
    c.q("CTR.DECRFLOOR day 5 TOKEN t");
    assert!(c.q("PTTL day").int() > 90_000);
    master.wait_replicas(1);
    for key in ["real", "fixed", "day"] {
        let ttl = |c: &mut Conn| c.cmd(&["PTTL", key]).int() > 0;
        assert_eq!(ttl(&mut c), ttl(&mut r), "{key}");
    }
}

#[test]
fn errors_say_what_is_wrong() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD f 10");
    c.q("CTR.FLOOR f 3");
    assert_eq!(
        c.q("CTR.CLEAR f").error(),
        "ERR cannot clear to 0: the counter's floor is above 0 (lower it with CTR.FLOOR first)"
    );
    let merge = |c: &mut Conn, blob: &[u8]| c.cmd(&[&b"PNC.MERGE"[..], b"m", blob]).error();
    assert!(merge(&mut c, b"\n").contains("PNC.STATE of a missing key is nil"));
    c.q("PNC.ADD src 4");
    let mut state = c.q("PNC.STATE src").bytes();
    state.push(b'\n');
    assert!(merge(&mut c, &state).contains("strip the newline"));
    assert_eq!(c.q("EXISTS m"), Value::Int(0));
}

/// An inline counter owns no memory: `UNLINK` frees it on the spot, not on the lazy-free
/// thread (a free effort of 0 would mean "unlimited" to the server).
#[test]
fn unlinking_an_inline_counter_needs_no_background_job() {
    let server = Server::start();
    let mut c = server.conn();
    for i in 0..50 {
        c.cmd(&["CTR.ADD", &format!("cold:{i}"), "7"]);
        c.cmd(&["UNLINK", &format!("cold:{i}")]);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(server.info_field("memory", "lazyfreed_objects"), "0");
    assert_eq!(c.q("DBSIZE"), Value::Int(0));
}
