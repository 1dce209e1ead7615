//! Idempotency tokens, AT, EX/PX and CTR.CLEAR against real servers, through every persistence
//! path and a failover.

mod common;

use std::time::Duration;

use common::{Conn, Server, Value};

const TOO_OLD: &str = "ERR token event time is older than the dedup window (ctr.token-window-ms)";
const TOO_NEW: &str = "ERR token event time is too far in the future (ctr.token-max-future-ms)";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn info_int(c: &mut Conn, key: &str, field: &str) -> i64 {
    c.cmd(&["CTR.INFO", key]).field(field).int()
}

#[test]
fn a_retried_token_changes_nothing_and_replies_the_current_value() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(c.q("CTR.ADD k 5 TOKEN order-1"), Value::Int(5));
    assert_eq!(c.q("CTR.ADD k 7"), Value::Int(12));
    assert_eq!(
        c.q("CTR.ADD k 5 TOKEN order-1"),
        Value::Int(12),
        "retry: current value"
    );
    assert_eq!(c.q("CTR.ADD k 1 TOKEN order-2"), Value::Int(13));
    assert_eq!(
        c.q("CTR.ADD other 5 TOKEN order-1"),
        Value::Int(5),
        "tokens are per key"
    );
    assert_eq!(info_int(&mut c, "k", "tokens"), 2);
    assert_eq!(info_int(&mut c, "k", "duplicates_ignored"), 1);
    assert_eq!(server.info_field("ctr", "ctr_duplicates_ignored"), "1");
    assert_eq!(server.info_field("ctr", "ctr_tokens_held"), "3");
}

#[test]
fn ten_clients_retrying_the_same_200_tokens_three_times_count_200() {
    let server = Server::start();
    let port = server.port;
    let workers: Vec<_> = (0..10)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = Conn::connect(port).unwrap();
                for round in 0..3 {
                    for t in 0..200 {
                        // Each client walks the tokens in its own order.
                        let token = format!("tok-{}", (t * 7 + w * 13 + round * 31) % 200);
                        c.cmd(&["CTR.ADD", "views", "1", "TOKEN", &token]).int();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let mut c = server.conn();
    assert_eq!(c.q("CTR.GET views"), Value::Int(200));
    assert_eq!(server.info_field("ctr", "ctr_duplicates_ignored"), "5800");
}

#[test]
fn tokens_outside_the_window_are_refused_and_expire_after_it() {
    let server = Server::start_with(
        &[],
        &["token-window-ms", "300", "token-max-future-ms", "1000"],
    );
    let mut c = server.conn();
    let now = now_ms();
    let old = (now - 5_000).to_string();
    let future = (now + 60_000).to_string();
    assert_eq!(
        c.cmd(&["CTR.ADD", "k", "1", "TOKEN", "a", "AT", &old])
            .error(),
        TOO_OLD
    );
    assert_eq!(
        c.cmd(&["CTR.ADD", "k", "1", "TOKEN", "a", "AT", &future])
            .error(),
        TOO_NEW
    );
    assert_eq!(
        c.q("EXISTS k"),
        Value::Int(0),
        "refused adds create nothing"
    );
    assert_eq!(server.info_field("ctr", "ctr_tokens_refused"), "2");
    assert_eq!(c.q("CTR.ADD k 1 TOKEN a"), Value::Int(1));
    assert_eq!(c.q("CTR.ADD k 1 TOKEN a"), Value::Int(1));
    std::thread::sleep(Duration::from_millis(400));
    // Past the window the token is no longer remembered: the same token counts again.
    assert_eq!(c.q("CTR.ADD k 1 TOKEN a"), Value::Int(2));
    // An event stamped inside the future allowance is fine and remembered from its own time.
    let soon = (now_ms() + 500).to_string();
    assert_eq!(
        c.cmd(&["CTR.ADD", "k", "1", "TOKEN", "b", "AT", &soon])
            .int(),
        3
    );
    assert_eq!(c.cmd(&["CTR.ADD", "k", "1", "TOKEN", "b"]).int(), 3);
}

#[test]
fn expired_tokens_are_swept_by_later_writes_and_the_counter_shrinks_back() {
    let server = Server::start_with(&[], &["token-window-ms", "50"]);
    let mut c = server.conn();
    for i in 0..40 {
        c.cmd(&["CTR.ADD", "k", "1", "TOKEN", &format!("t{i}")]);
    }
    assert_eq!(server.info_field("ctr", "ctr_tokens_held"), "40");
    std::thread::sleep(Duration::from_millis(100));
    for _ in 0..20 {
        c.q("CTR.ADD k 0");
    }
    assert_eq!(info_int(&mut c, "k", "tokens"), 0);
    assert_eq!(server.info_field("ctr", "ctr_tokens_held"), "0");
    assert_eq!(c.q("CTR.INFO k").field("encoding").text(), "inline");
    assert_eq!(c.q("CTR.GET k"), Value::Int(40));
}

#[test]
fn tokens_held_gauge_returns_to_zero_after_del_flush_and_expiry() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD a 1 TOKEN x");
    c.q("CTR.ADD b 1 TOKEN x");
    c.q("CTR.ADD b 1 TOKEN y");
    c.q("CTR.ADD e 1 TOKEN z PX 50");
    assert_eq!(server.info_field("ctr", "ctr_tokens_held"), "4");
    // Valkey may free deleted, expired and flushed values on a background thread: the gauge
    // follows shortly after the command.
    c.q("DEL a");
    server.wait_tokens_held(3, "after DEL");
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(c.q("EXISTS e"), Value::Int(0));
    server.wait_tokens_held(2, "after the expiry");
    c.q("FLUSHALL");
    server.wait_tokens_held(0, "after FLUSHALL");
}

#[test]
fn ex_and_px_apply_only_when_the_call_creates_the_key() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(c.q("CTR.ADD rl:user1 1 EX 100"), Value::Int(1));
    let ttl = c.q("PTTL rl:user1").int();
    assert!(ttl > 99_000 && ttl <= 100_000, "{ttl}");
    assert_eq!(c.q("CTR.ADD rl:user1 1 EX 5"), Value::Int(2));
    assert!(
        c.q("PTTL rl:user1").int() > 99_000,
        "EX on an existing key changes nothing"
    );
    assert_eq!(c.q("CTR.ADD plain 1"), Value::Int(1));
    assert_eq!(c.q("CTR.ADD plain 1 PX 500"), Value::Int(2));
    assert_eq!(c.q("PTTL plain"), Value::Int(-1));
    assert_eq!(c.q("CTR.ADD short 1 PX 60"), Value::Int(1));
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(
        c.q("CTR.GET short"),
        Value::Int(0),
        "the fixed window ended"
    );
    assert_eq!(
        c.q("CTR.ADD short 1 PX 60"),
        Value::Int(1),
        "a new window starts"
    );
    for bad in ["EX 0", "PX -1", "EX 9223372036854775807"] {
        let line = format!("CTR.ADD x 1 {bad}");
        assert_eq!(
            c.q(&line).error(),
            "ERR invalid expire time in 'ctr.add' command"
        );
    }
    assert_eq!(c.q("CTR.ADD x 1 EX 1 PX 1").error(), "ERR syntax error");
    assert_eq!(c.q("EXISTS x"), Value::Int(0));
}

#[test]
fn clear_resets_and_is_idempotent_with_a_token() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(c.q("CTR.CLEAR missing"), Value::Int(0));
    assert_eq!(c.q("EXISTS missing"), Value::Int(0));
    c.q("CTR.ADD k 10 EX 1000");
    assert_eq!(c.q("CTR.CLEAR k"), Value::Int(10));
    assert_eq!(c.q("CTR.GET k"), Value::Int(0));
    assert!(c.q("PTTL k").int() > 0, "clear keeps the key's TTL");
    c.q("CTR.ADD k 4");
    assert_eq!(c.q("CTR.CLEAR k TOKEN reset-1"), Value::Int(4));
    c.q("CTR.ADD k 3");
    assert_eq!(
        c.q("CTR.CLEAR k TOKEN reset-1"),
        Value::Int(3),
        "retry: current value, no reset"
    );
    assert_eq!(c.q("CTR.GET k"), Value::Int(3));
    assert_eq!(c.q("CTR.CLEAR k AT 5").error(), "ERR syntax error");
    assert_eq!(c.q("CTR.CLEAR k TOKEN").error(), "ERR syntax error");
    c.q("SET s 1");
    assert!(c.q("CTR.CLEAR s").error().starts_with("WRONGTYPE"));
}

#[test]
fn option_errors_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD k 1");
    for bad in [
        "CTR.ADD k 1 TOKEN",
        "CTR.ADD k 1 TOKEN a TOKEN b",
        "CTR.ADD k 1 NOPE 1",
        "CTR.ADD k 1 AT x",
    ] {
        assert!(c.q(bad).is_error(), "{bad}");
    }
    let long = "t".repeat(257);
    assert_eq!(
        c.cmd(&["CTR.ADD", "k", "1", "TOKEN", &long]).error(),
        "ERR token must be 1 to 256 bytes"
    );
    assert_eq!(
        c.cmd(&[&b"CTR.ADD"[..], b"k", b"1", b"TOKEN", b"\0bin\xff"]),
        Value::Int(2)
    );
    assert_eq!(
        c.cmd(&[&b"CTR.ADD"[..], b"k", b"1", b"TOKEN", b"\0bin\xff"]),
        Value::Int(2)
    );
    assert_eq!(c.q("CTR.GET k"), Value::Int(2));
}

fn tokens_are_still_recognised(c: &mut Conn) {
    assert_eq!(c.q("CTR.ADD k 1 TOKEN t1"), Value::Int(3));
    assert_eq!(c.q("CTR.ADD k 2 TOKEN t2"), Value::Int(3));
    assert!(
        c.q("CTR.ADD k 100 TOKEN t2").is_error(),
        "the token still names its own write"
    );
    assert_eq!(
        c.q("CTR.ADD k 1 TOKEN t3"),
        Value::Int(4),
        "a new token still counts"
    );
}

fn seed_tokens(c: &mut Conn) {
    c.q("CTR.ADD k 1 TOKEN t1");
    c.q("CTR.ADD k 2 TOKEN t2");
}

#[test]
fn tokens_survive_debug_reload_and_restart() {
    let mut server = Server::start();
    let mut c = server.conn();
    seed_tokens(&mut c);
    let digest = c.q("DEBUG DIGEST-VALUE k");
    c.q("DEBUG RELOAD");
    assert_eq!(c.q("DEBUG DIGEST-VALUE k"), digest);
    server.restart_saving();
    let mut c = server.conn();
    assert_eq!(c.q("DEBUG DIGEST-VALUE k"), digest);
    tokens_are_still_recognised(&mut c);
}

#[test]
fn tokens_survive_aof_rewrite_and_restart() {
    let mut server = Server::start_with(&common::AOF_WITHOUT_PREAMBLE, &[]);
    let mut c = server.conn();
    seed_tokens(&mut c);
    c.q("CTR.ADD ttl 1 TOKEN z EX 1000");
    server.rewrite_aof();
    let digest = c.q("DEBUG DIGEST");
    server.restart();
    let mut c = server.conn();
    assert_eq!(c.q("DEBUG DIGEST"), digest);
    tokens_are_still_recognised(&mut c);
    assert!(c.q("PTTL ttl").int() > 990_000);
}

#[test]
fn tokens_replay_from_the_aof_stream() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"], &[]);
    let mut c = server.conn();
    seed_tokens(&mut c);
    c.q("CTR.ADD r 1 EX 1000");
    let digest = c.q("DEBUG DIGEST");
    let expire_at = c.q("PEXPIRETIME r");
    server.restart();
    let mut c = server.conn();
    assert_eq!(c.q("DEBUG DIGEST"), digest);
    assert_eq!(
        c.q("PEXPIRETIME r"),
        expire_at,
        "the absolute deadline was replayed"
    );
    tokens_are_still_recognised(&mut c);
}

#[test]
fn tokens_reach_replicas_and_survive_a_failover() {
    let master = Server::start();
    let mut m = master.conn();
    seed_tokens(&mut m);
    let replica = master.start_replica();
    m.q("CTR.ADD k 0 TOKEN t0");
    m.q("CTR.ADD fixed 1 EX 1000");
    m.q("CTR.CLEAR cleared TOKEN c1");
    master.wait_replicas(1);
    let mut r = replica.conn();
    for key in ["k", "fixed", "cleared"] {
        assert_eq!(
            r.cmd(&["DEBUG", "DIGEST-VALUE", key]),
            m.cmd(&["DEBUG", "DIGEST-VALUE", key]),
            "{key}"
        );
    }
    assert_eq!(
        r.q("PEXPIRETIME fixed"),
        m.q("PEXPIRETIME fixed"),
        "same absolute deadline"
    );
    // Failover: the promoted replica still recognises the master's tokens.
    r.q("REPLICAOF NO ONE");
    tokens_are_still_recognised(&mut r);
}

/// A CTR state blob (format 1): VALUE, then a TOKENS section with `count` declared and the
/// given entries, then END.
fn tokens_blob(value: i64, count: u64, entries: &[(u64, i64)]) -> Vec<u8> {
    let mut b = vec![1, 1];
    b.extend(common::ivarint(value));
    b.push(3);
    b.extend(common::uvarint(0)); // sweep cursor
    b.extend(common::uvarint(count));
    for (fp, expires) in entries {
        b.extend(fp.to_le_bytes());
        b.extend(common::ivarint(*expires));
    }
    b.push(0);
    b
}

#[test]
fn forged_payloads_with_bad_token_sections_are_refused() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD k 1");
    let dump = common::DumpFrame::of_key(&mut c, "k");
    let frame = |blob: &[u8]| dump.with_blob(blob);
    let later = now_ms() + 3_600_000;
    let good = tokens_blob(1, 2, &[(5, later), (9, later)]);
    assert_eq!(
        c.cmd(&[&b"RESTORE"[..], b"ok", b"0", &frame(&good)]),
        Value::Simple("OK".into())
    );
    assert_eq!(c.q("CTR.INFO ok").field("tokens"), Value::Int(2));
    let cases = [
        (
            "duplicate fingerprint",
            tokens_blob(1, 2, &[(5, later), (5, later)]),
        ),
        (
            "unordered fingerprints",
            tokens_blob(1, 2, &[(9, later), (5, later)]),
        ),
        ("empty section", tokens_blob(1, 0, &[])),
        (
            "count beyond the payload",
            tokens_blob(1, 1 << 40, &[(5, later)]),
        ),
        (
            "count short of the entries",
            tokens_blob(1, 1, &[(5, later), (9, later)]),
        ),
    ];
    for (name, bad) in cases {
        let reply = c.cmd(&[&b"RESTORE"[..], b"forged", b"0", &frame(&bad)]);
        assert!(reply.is_error(), "{name}: {reply:?}");
        assert!(server.alive(), "{name}");
        assert_eq!(c.q("EXISTS forged"), Value::Int(0), "{name}");
    }
    assert_eq!(
        server.info_field("ctr", "ctr_tokens_held"),
        "2",
        "only the good restore holds tokens"
    );
}
