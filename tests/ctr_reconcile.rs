//! CTR.RECONCILE: repairs at a watermark, FROM STREAM/ZSET/SET, refused watermarks, late adds,
//! drift statistics, and the persistence/replication of buckets and drift.

mod common;

use common::{Conn, Server, Value};

const WIDTH: i64 = 1_000;

const NO_SOURCE: &str = "ERR no such source key: it would count 0 and set the counter to 0 (add EMPTYOK if an empty source is meant)";

const NOT_TRACKED: &str = "ERR counter keeps no bucket history: run CTR.RECONCILE key START once, then reconcile AT a watermark";

/// A server with 1 s buckets, 60 s retention and no settle delay.
fn server_with(args: &[&str]) -> Server {
    let mut module = vec![
        "bucket-ms",
        "1000",
        "bucket-retention-ms",
        "60000",
        "settle-ms",
        "0",
    ];
    module.extend_from_slice(args);
    Server::start_with(&[], &module)
}

fn server_now(c: &mut Conn) -> i64 {
    let t = c.q("TIME").array();
    t[0].text().parse::<i64>().unwrap() * 1000 + t[1].text().parse::<i64>().unwrap() / 1000
}

/// The newest bucket boundary at or before the server's clock.
fn boundary(c: &mut Conn) -> i64 {
    server_now(c).div_euclid(WIDTH) * WIDTH
}

fn add_at(c: &mut Conn, key: &str, delta: i64, at: i64) -> Value {
    c.cmd(&["CTR.ADD", key, &delta.to_string(), "AT", &at.to_string()])
}

fn reconcile(c: &mut Conn, key: &str, truth: i64, at: i64) -> Value {
    c.cmd(&[
        "CTR.RECONCILE",
        key,
        &truth.to_string(),
        "AT",
        &at.to_string(),
    ])
}

/// The refusal of a watermark before a history that starts at `earliest`.
fn before_history(earliest: i64) -> String {
    format!(
        "ERR watermark is before the counter's history, which starts at {earliest} (the reply \
         of CTR.RECONCILE key START): reconcile at {earliest} or later, once it is \
         ctr.settle-ms old"
    )
}

/// Issue 38, item 5: right after START, the default watermark of FROM STREAM (the newest
/// boundary ctr.settle-ms old) lies before the history; the refusal named retention
/// (`older than the retained buckets (ctr.bucket-retention-ms)`), not START.
#[test]
fn right_after_start_a_watermark_before_the_history_is_refused_naming_its_start() {
    let server = server_with(&["settle-ms", "5000"]);
    let mut c = server.conn();
    c.q("CTR.ADD {o}:count 3");
    c.q("XADD {o}:log * order 1");
    let earliest = c.q("CTR.RECONCILE {o}:count START").int();
    let refused = c.q("CTR.RECONCILE {o}:count FROM STREAM {o}:log");
    assert_eq!(refused.error(), before_history(earliest));
    assert_eq!(c.q("CTR.GET {o}:count"), Value::Int(3), "nothing changed");
    // A watermark the retention folded away still names retention, and the earliest accepted:
    // a counter tracked from its first write (5 s kept) keeps nothing from a minute ago.
    let tracked = server_with(&["track-history", "yes", "bucket-retention-ms", "5000"]);
    let mut c = tracked.conn();
    c.q("CTR.ADD k 1");
    let old = boundary(&mut c) - 60_000;
    let refused = reconcile(&mut c, "k", 1, old).error();
    assert!(
        refused.starts_with(
            "ERR watermark is older than the retained buckets (ctr.bucket-retention-ms): the \
             earliest watermark accepted is "
        ),
        "{refused}"
    );
}

fn pair(value: i64, drift: i64) -> Value {
    Value::Array(vec![Value::Int(value), Value::Int(drift)])
}

#[test]
fn racing_adds_survive_and_drift_before_the_watermark_is_repaired() {
    let server = server_with(&[]);
    let mut c = server.conn();
    // The first reconcile of a counter is a plain overwrite and starts its bucket history.
    assert_eq!(c.q("CTR.RECONCILE views 0"), pair(0, 0));
    let w = boundary(&mut c);
    for _ in 0..103 {
        add_at(&mut c, "views", 1, w - 1); // recorded before the watermark
    }
    for i in 0..20 {
        add_at(&mut c, "views", 1, w + 1 + i); // adds that race the reconcile job
    }
    assert_eq!(reconcile(&mut c, "views", 100, w), pair(120, 3));
    assert_eq!(c.q("CTR.GET views"), Value::Int(120));
    // A retry of the job (same watermark and truth) changes nothing.
    assert_eq!(reconcile(&mut c, "views", 100, w), pair(120, 0));
    let info = c.q("CTR.INFO views");
    assert_eq!(info.field("last_watermark"), Value::Int(w));
    assert_eq!(info.field("last_drift"), Value::Int(3));
    assert_eq!(info.field("total_abs_drift"), Value::Int(3));
    assert_eq!(info.field("reconciles"), Value::Int(2));
    assert!(info.field("bucket_count").int() >= 1);
    // A late add stamped at or before the watermark is refused and counted.
    assert_eq!(
        add_at(&mut c, "views", 1, w).error(),
        "ERR event time is at or before the counter's reconciled watermark"
    );
    assert_eq!(c.q("CTR.GET views"), Value::Int(120));
    assert_eq!(server.info_field("ctr", "ctr_late_adds"), "1");
    assert_eq!(server.info_field("ctr", "ctr_reconciles"), "2");
    assert_eq!(server.info_field("ctr", "ctr_drift_total_abs"), "3");
    assert_eq!(server.info_field("ctr", "ctr_drift_largest_abs"), "3");
    assert_eq!(server.info_field("ctr", "ctr_drift_1_9"), "1");
}

#[test]
fn bad_watermarks_are_refused_and_change_nothing() {
    let server = server_with(&["bucket-retention-ms", "5000"]);
    let mut c = server.conn();
    c.q("CTR.ADD k 10");
    let w = boundary(&mut c);
    assert_eq!(reconcile(&mut c, "k", 5, w).error(), NOT_TRACKED);
    let w = c.q("CTR.RECONCILE k START").int();
    wait_past(&mut c, w);
    assert_eq!(
        reconcile(&mut c, "k", 5, w + 1).error(),
        "ERR watermark must be a multiple of the bucket width (ctr.bucket-ms)"
    );
    // Before the history START began: the error says so, and where it starts.
    assert_eq!(
        reconcile(&mut c, "k", 5, w - 60_000).error(),
        before_history(w)
    );
    assert_eq!(
        reconcile(&mut c, "k", 5, w - WIDTH).error(),
        before_history(w),
        "START's reply is the earliest watermark accepted"
    );
    assert_eq!(
        reconcile(&mut c, "k", 5, w + 3_600_000).error(),
        "ERR watermark is in the future"
    );
    assert_eq!(reconcile(&mut c, "k", 10, w), pair(10, 0));
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let later = boundary(&mut c);
    assert_eq!(reconcile(&mut c, "k", 10, later), pair(10, 0));
    assert_eq!(
        reconcile(&mut c, "k", 10, w).error(),
        "ERR watermark is older than the counter's last reconciled watermark"
    );
    assert_eq!(c.q("CTR.GET k"), Value::Int(10));
    for bad in [
        "CTR.RECONCILE k",
        "CTR.RECONCILE k x",
        "CTR.RECONCILE k 1 AT",
        "CTR.RECONCILE k FROM LIST l",
        "CTR.RECONCILE k FROM SET s AT",
    ] {
        assert!(c.q(bad).is_error(), "{bad}");
    }
    c.q("SET s 1");
    assert!(c.q("CTR.RECONCILE s 1").error().starts_with("WRONGTYPE"));
    assert!(c
        .q("CTR.RECONCILE k FROM STREAM s")
        .error()
        .starts_with("WRONGTYPE"));
}

#[test]
fn from_stream_counts_entries_up_to_the_watermark() {
    let server = server_with(&[]);
    let mut c = server.conn();
    c.q("CTR.RECONCILE orders 0");
    let w = boundary(&mut c);
    // The event log: 50 orders at or before w, 10 after it.
    for i in 0..60i64 {
        let ms = if i < 50 { w - 900 + i } else { w + 1 + i };
        c.cmd(&[
            "XADD",
            "events",
            &format!("{ms}-0"),
            "order",
            &i.to_string(),
        ]);
    }
    // The counter lost 2 of the early orders and counted one late order twice.
    for _ in 0..48 {
        add_at(&mut c, "orders", 1, w - 500);
    }
    for _ in 0..11 {
        add_at(&mut c, "orders", 1, w + 5);
    }
    let reply = c.cmd(&[
        "CTR.RECONCILE",
        "orders",
        "FROM",
        "STREAM",
        "events",
        "AT",
        &w.to_string(),
    ]);
    assert_eq!(reply, pair(50 + 11, -2));
    // Without AT, the watermark is the newest boundary at least ctr.settle-ms old.
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let reply = c.q("CTR.RECONCILE orders FROM STREAM events");
    let value = reply.array()[0].int();
    assert_eq!(
        value, 60,
        "every event is now before the watermark: value = stream length"
    );
    // A long tail after the watermark is counted page by page.
    let w2 = boundary(&mut c);
    for i in 0..2_500i64 {
        c.send(&["XADD", "events", &format!("{}-{i}", w2 + 500), "late", "1"]);
    }
    for _ in 0..2_500 {
        c.read().unwrap();
    }
    let reply = c.cmd(&[
        "CTR.RECONCILE",
        "orders",
        "FROM",
        "STREAM",
        "events",
        "AT",
        &w2.to_string(),
    ]);
    assert_eq!(
        reply,
        pair(60, 0),
        "the 2500 entries after the watermark are not truth yet"
    );
    // Without AT on a counter without history: everything in the source, a plain overwrite
    // (a source that is rightly missing says so: EMPTYOK).
    assert_eq!(
        c.q("CTR.RECONCILE fresh FROM STREAM missing EMPTYOK"),
        pair(0, 0)
    );
}

/// Issue 38, item 6: a reconcile FROM a missing source (a typo in the stream's name) set the
/// counter to 0 silently. Now it is refused, nothing changes, unless the call says EMPTYOK.
#[test]
fn a_missing_source_is_refused_unless_the_call_says_emptyok() {
    let server = server_with(&[]);
    let mut c = server.conn();
    c.q("CTR.ADD {o}:count 22");
    c.q("XADD {o}:log * order 1");
    let w = c.q("CTR.RECONCILE {o}:tracked START").int();
    wait_past(&mut c, w);
    for call in [
        "CTR.RECONCILE {o}:count FROM STREAM {o}:lgo",
        "CTR.RECONCILE {o}:count FROM ZSET {o}:lgo",
        "CTR.RECONCILE {o}:count FROM SET {o}:lgo",
    ] {
        assert_eq!(c.q(call).error(), NO_SOURCE, "{call}");
        assert_eq!(
            c.q("CTR.GET {o}:count"),
            Value::Int(22),
            "{call} changed it"
        );
    }
    let at = format!("CTR.RECONCILE {{o}}:tracked FROM STREAM {{o}}:lgo AT {w}");
    assert_eq!(c.q(&at).error(), NO_SOURCE);
    assert_eq!(server.info_field("ctr", "ctr_reconciles"), "0");
    // The same source, really there: counted.
    assert_eq!(
        c.q("CTR.RECONCILE {o}:count FROM STREAM {o}:log"),
        pair(1, 21)
    );
    // EMPTYOK: a source that may rightly be missing counts 0, at a watermark too.
    assert_eq!(
        c.q("CTR.RECONCILE {o}:count FROM SET {o}:none EMPTYOK"),
        pair(0, 1)
    );
    assert_eq!(c.q(&format!("{at} EMPTYOK")), pair(0, 0));
    // A source of another type is still WRONGTYPE, EMPTYOK or not.
    c.q("SET {o}:string x");
    assert!(c
        .q("CTR.RECONCILE {o}:count FROM STREAM {o}:string EMPTYOK")
        .error()
        .starts_with("WRONGTYPE"));
    assert_eq!(
        c.q("CTR.RECONCILE {o}:count 5 EMPTYOK").error(),
        "ERR syntax error",
        "a given truth has no source"
    );
}

#[test]
fn from_zset_and_set() {
    let server = server_with(&[]);
    let mut c = server.conn();
    c.q("CTR.RECONCILE signups 0");
    let w = boundary(&mut c);
    for i in 0..30i64 {
        let score = if i < 25 { w - 100 } else { w + 10 };
        c.cmd(&[
            "ZADD",
            "signup-log",
            &score.to_string(),
            &format!("user{i}"),
        ]);
    }
    for _ in 0..27 {
        add_at(&mut c, "signups", 1, w - 100); // 2 doubled
    }
    for _ in 0..5 {
        add_at(&mut c, "signups", 1, w + 10);
    }
    let reply = c.cmd(&[
        "CTR.RECONCILE",
        "signups",
        "FROM",
        "ZSET",
        "signup-log",
        "AT",
        &w.to_string(),
    ]);
    assert_eq!(reply, pair(30, 2));
    // A set has no time: its cardinality overwrites the counter.
    c.q("SADD members a b c d");
    c.q("CTR.ADD member-count 7");
    assert_eq!(
        c.q("CTR.RECONCILE member-count FROM SET members"),
        pair(4, 3)
    );
    assert_eq!(c.q("CTR.GET member-count"), Value::Int(4));
}

#[test]
fn command_getkeys_declares_the_source() {
    let server = server_with(&[]);
    let mut c = server.conn();
    let keys = |c: &mut Conn, line: &str| c.q(line).flat_text();
    assert_eq!(
        keys(&mut c, "COMMAND GETKEYS CTR.RECONCILE views 100 AT 5"),
        "views"
    );
    assert_eq!(
        keys(
            &mut c,
            "COMMAND GETKEYS CTR.RECONCILE views FROM STREAM ev AT 5"
        ),
        "views ev"
    );
    assert_eq!(
        keys(&mut c, "COMMAND GETKEYS CTR.RECONCILE views FROM ZSET z"),
        "views z"
    );
    assert_eq!(
        keys(&mut c, "COMMAND GETKEYS CTR.RECONCILE views FROM SET s"),
        "views s"
    );
}

fn seed_history(c: &mut Conn) -> i64 {
    c.q("CTR.RECONCILE h 0");
    let w = boundary(c);
    for i in 0..30 {
        add_at(c, "h", 2, w - 1 - i * 10);
        add_at(c, "h", 1, w + 1 + i);
    }
    c.cmd(&["XADD", "log", "1-0", "x", "1"]);
    c.cmd(&[
        "CTR.RECONCILE",
        "h",
        "FROM",
        "STREAM",
        "log",
        "AT",
        &w.to_string(),
    ]);
    w
}

#[test]
fn buckets_and_drift_survive_reload_aof_and_reach_replicas() {
    let mut server = Server::start_with(
        &["--appendonly", "yes", "--aof-use-rdb-preamble", "no"],
        &[
            "bucket-ms",
            "1000",
            "bucket-retention-ms",
            "60000",
            "settle-ms",
            "0",
        ],
    );
    let replica = server.start_replica();
    let mut c = server.conn();
    let w = seed_history(&mut c);
    server.wait_replicas(1);
    let digest = c.q("DEBUG DIGEST-VALUE h");
    let mut r = replica.conn();
    assert_eq!(
        r.q("DEBUG DIGEST-VALUE h"),
        digest,
        "the replica got the computed truth"
    );
    assert_eq!(r.q("CTR.INFO h").field("last_watermark"), Value::Int(w));
    c.q("DEBUG RELOAD");
    assert_eq!(c.q("DEBUG DIGEST-VALUE h"), digest);
    server.rewrite_aof();
    drop(replica);
    server.restart();
    let mut c = server.conn();
    assert_eq!(c.q("DEBUG DIGEST-VALUE h"), digest);
    let info = c.q("CTR.INFO h");
    assert_eq!(info.field("last_watermark"), Value::Int(w));
    assert_eq!(info.field("last_drift"), Value::Int(59));
    assert_eq!(c.q("CTR.GET h"), Value::Int(31));
    assert!(
        add_at(&mut c, "h", 1, w).is_error(),
        "still late after a restart"
    );
}

#[test]
fn forged_history_sections_are_refused() {
    let server = server_with(&[]);
    let mut c = server.conn();
    c.q("CTR.ADD k 1");
    let dump = common::DumpFrame::of_key(&mut c, "k");
    let frame = |blob: &[u8]| dump.with_blob(blob);
    // VALUE 3, HISTORY width 1000 retention 60000 since 1000, no watermark, drift 0, 0, 0,
    // buckets as given.
    let history = |width: i64, since: i64, buckets: &[(i64, i64)], count: u64| {
        let mut b = vec![1, 1];
        b.extend(common::ivarint(3));
        b.push(6);
        for v in [width, 60_000, since] {
            b.extend(common::ivarint(v));
        }
        b.push(0);
        b.extend(common::ivarint(0));
        b.extend(common::uvarint(0));
        b.extend(common::uvarint(0));
        b.extend(common::uvarint(count));
        for (end, sum) in buckets {
            b.extend(common::ivarint(*end));
            b.extend(common::ivarint(*sum));
        }
        b.push(0);
        b
    };
    let good = history(1000, 1000, &[(2000, 1), (3000, 2)], 2);
    assert_eq!(
        c.cmd(&[&b"RESTORE"[..], b"ok", b"0", &frame(&good)]),
        Value::Simple("OK".into())
    );
    let cases = [
        ("zero width", history(0, 0, &[], 0)),
        ("unaligned bucket", history(1000, 1000, &[(2500, 1)], 1)),
        (
            "unordered buckets",
            history(1000, 1000, &[(3000, 1), (2000, 1)], 2),
        ),
        (
            "bucket before the retained bound",
            history(1000, 5000, &[(2000, 1)], 1),
        ),
        (
            "bucket count over the bound",
            history(1000, 1000, &[], 5000),
        ),
        (
            "bucket sums overflow",
            history(1000, 1000, &[(2000, i64::MAX), (3000, 1)], 2),
        ),
    ];
    for (name, bad) in cases {
        let reply = c.cmd(&[&b"RESTORE"[..], b"forged", b"0", &frame(&bad)]);
        assert!(reply.is_error(), "{name}: {reply:?}");
        assert!(server.alive(), "{name}");
    }
}

/// Waits until the server's clock is past `t` (ms).
fn wait_past(c: &mut Conn, t: i64) {
    while server_now(c) <= t {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The done-when: a counter that counted for a while without history, repaired exactly
/// at its first watermark after START, with adds racing from another client while the job
/// runs, on a master and its replica.
#[test]
fn start_then_the_first_watermark_is_exact_with_racing_adds_on_master_and_replica() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::{Arc, Mutex};
    let server = server_with(&[]);
    let replica = server.start_replica();
    let mut c = server.conn();
    // Counting for a while without history: 103 bumps for 100 real events.
    c.q("CTR.ADD orders 103");
    // Another client keeps adding, each add stamped with the server's time, noted once applied.
    let stop = Arc::new(AtomicBool::new(false));
    let stamps = Arc::new(Mutex::new(Vec::new()));
    let racer = {
        let (stop, stamps) = (stop.clone(), stamps.clone());
        let mut r = server.conn();
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                let at = server_now(&mut r);
                assert!(!add_at(&mut r, "orders", 1, at).is_error());
                stamps.lock().unwrap().push(at);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    // The job: START first (once, idempotent), then the truth at the first watermark once it
    // has settled, while the racer keeps adding.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let w = c.q("CTR.RECONCILE orders START").int();
    assert_eq!(w % WIDTH, 0);
    assert_eq!(c.q("CTR.RECONCILE orders START").int(), w, "idempotent");
    wait_past(&mut c, w + 200);
    // Every add stamped at or before w has landed and been noted: the source of truth would
    // hold 100 old events plus those.
    let truth = 100 + stamps.lock().unwrap().iter().filter(|t| **t <= w).count() as i64;
    let reply = reconcile(&mut c, "orders", truth, w);
    assert_eq!(
        reply.array()[1],
        Value::Int(3),
        "drift: exactly the 3 extra bumps"
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    stop.store(true, Relaxed);
    racer.join().unwrap();
    let raced = stamps.lock().unwrap().len() as i64;
    assert!(raced > 20, "the racer ran: {raced}");
    assert_eq!(
        c.q("CTR.GET orders").int(),
        100 + raced,
        "every racing add is kept"
    );
    server.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(
        r.q("DEBUG DIGEST-VALUE orders"),
        c.q("DEBUG DIGEST-VALUE orders")
    );
    assert_eq!(r.q("CTR.GET orders").int(), 100 + raced);
}

#[test]
fn with_track_history_back_dated_events_are_repaired_before_the_first_write() {
    let server = server_with(&["track-history", "yes"]);
    let replica = server.start_replica(); // keeps the default (no): the master decides
    let mut c = server.conn();
    assert_eq!(
        c.q("CONFIG GET ctr.track-history").flat_text(),
        "ctr.track-history yes"
    );
    let b = boundary(&mut c);
    // The first write of the counter is a back-dated event, 30 s ago; one of them doubled.
    for _ in 0..5 {
        add_at(&mut c, "signups", 1, b - 30_000);
    }
    for _ in 0..3 {
        add_at(&mut c, "signups", 1, b - 10_000);
    }
    // Truth at a watermark 20 s before the counter existed: 4 events.
    assert_eq!(reconcile(&mut c, "signups", 4, b - 20_000), pair(7, 1));
    server.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(
        r.q("DEBUG DIGEST-VALUE signups"),
        c.q("DEBUG DIGEST-VALUE signups")
    );
    // A counter that existed before the config was set starts its history at its next write,
    // as START would: a watermark before that write is refused.
    c.q("CONFIG SET ctr.track-history no");
    c.q("CTR.ADD old 10");
    assert_eq!(c.q("CTR.INFO old").field("encoding").text(), "inline");
    c.q("CONFIG SET ctr.track-history yes");
    // A bare add (the command's fast path otherwise) starts the history, on an existing counter
    // and on a new one.
    c.q("CTR.ADD old 1");
    c.q("CTR.ADD new 1");
    for key in ["old", "new"] {
        let info = c.cmd(&["CTR.INFO", key]);
        assert_ne!(
            info.field("encoding").text(),
            "inline",
            "{key} keeps a history"
        );
    }
    let earliest = c.q("CTR.RECONCILE old START").int();
    assert!(earliest >= b, "{earliest} {b}");
    assert!(reconcile(&mut c, "old", 5, b - 20_000).is_error());
    // A write that changes nothing (a retry) starts nothing.
    c.q("CONFIG SET ctr.track-history no");
    c.q("CTR.ADD tok 1 TOKEN t1");
    c.q("CONFIG SET ctr.track-history yes");
    c.q("CTR.ADD tok 1 TOKEN t1");
    assert_eq!(c.q("CTR.INFO tok").field("bucket_count"), Value::Int(0));
    assert!(reconcile(&mut c, "tok", 1, b).error().contains("START"));
    server.wait_replicas(1);
    for key in ["old", "new", "tok"] {
        assert_eq!(
            r.cmd(&["DEBUG", "DIGEST-VALUE", key]),
            c.cmd(&["DEBUG", "DIGEST-VALUE", key])
        );
    }
    assert!(c.q("CONFIG SET ctr.track-history maybe").is_error());
    assert!(Server::try_start_with(&[], &["track-history", "maybe"]).is_err());
}

#[test]
fn reconcile_errors_come_in_order_and_change_nothing() {
    let server = server_with(&[]);
    let mut c = server.conn();
    c.q("CTR.ADD cnt 7");
    c.q("XADD ev * a 1");
    let w = boundary(&mut c);
    // AT (also with FROM) on a counter without history.
    assert_eq!(reconcile(&mut c, "cnt", 5, w).error(), NOT_TRACKED);
    let line = format!("CTR.RECONCILE cnt FROM STREAM ev AT {w}");
    assert_eq!(c.q(&line).error(), NOT_TRACKED);
    let info = c.q("CTR.INFO cnt");
    assert_eq!(
        (info.field("value"), info.field("encoding").text()),
        (Value::Int(7), "inline".into())
    );
    // The source's type before anything about the watermark: untracked, misaligned, or the
    // default watermark of a counter STARTed just now (older than its earliest).
    let line = format!("CTR.RECONCILE cnt FROM ZSET ev AT {}", w + 1);
    assert!(c.q(&line).error().starts_with("WRONGTYPE"));
    c.q("CTR.RECONCILE cnt START");
    assert!(c.q(&line).error().starts_with("WRONGTYPE"));
    assert!(c
        .q("CTR.RECONCILE cnt FROM ZSET ev")
        .error()
        .starts_with("WRONGTYPE"));
    assert_eq!(
        c.q("CTR.RECONCILE q FROM SET s AT 60000").error(),
        "ERR FROM SET takes no AT: a set has no time (its cardinality is the truth now)"
    );
    // A drift that does not fit in 64 bits is reported exactly, not as an overflow.
    c.q("CTR.ADD dr 9223372036854775807");
    assert_eq!(
        c.q("CTR.RECONCILE dr -9223372036854775808"),
        Value::Array(vec![
            Value::Int(i64::MIN),
            Value::Bulk(b"18446744073709551615".to_vec())
        ])
    );
    assert_eq!(c.q("CTR.GET dr").int(), i64::MIN);
    // ctr_reconciles counts the reconciles that changed a counter: a repeat does not.
    let before: i64 = server.info_field("ctr", "ctr_reconciles").parse().unwrap();
    c.q("CTR.RECONCILE same 5");
    c.q("CTR.RECONCILE same 5");
    let after: i64 = server.info_field("ctr", "ctr_reconciles").parse().unwrap();
    assert_eq!(after - before, 1);
}

#[test]
fn a_repeated_start_or_reconcile_touches_nothing() {
    let server = server_with(&[]);
    let replica = server.start_replica();
    let mut c = server.conn();
    let w = c.q("CTR.RECONCILE fresh START").int();
    assert_eq!(c.q("CTR.GET fresh").int(), 0, "created at 0");
    server.wait_replicas(1);
    let offset = server.info_field("replication", "master_repl_offset");
    let mut watcher = server.conn();
    watcher.q("WATCH fresh");
    assert_eq!(c.q("CTR.RECONCILE fresh START").int(), w);
    watcher.q("MULTI");
    watcher.q("CTR.GET fresh");
    assert_eq!(
        watcher.q("EXEC"),
        Value::Array(vec![Value::Int(0)]),
        "WATCH still holds"
    );
    assert_eq!(
        server.info_field("replication", "master_repl_offset"),
        offset,
        "nothing replicated"
    );
    // A reconcile job's retry (same watermark, same truth), and a repeated overwrite.
    wait_past(&mut c, w);
    add_at(&mut c, "fresh", 5, w);
    assert_eq!(reconcile(&mut c, "fresh", 4, w), pair(4, 1));
    c.q("CTR.RECONCILE other 7");
    server.wait_replicas(1);
    let offset = server.info_field("replication", "master_repl_offset");
    watcher.q("WATCH fresh other");
    assert_eq!(reconcile(&mut c, "fresh", 4, w), pair(4, 0));
    assert_eq!(c.q("CTR.RECONCILE other 7"), pair(7, 0));
    watcher.q("MULTI");
    watcher.q("CTR.GET fresh");
    assert_eq!(
        watcher.q("EXEC"),
        Value::Array(vec![Value::Int(4)]),
        "WATCH still holds"
    );
    assert_eq!(
        server.info_field("replication", "master_repl_offset"),
        offset,
        "nothing replicated"
    );
    let mut r = replica.conn();
    assert_eq!(
        r.q("DEBUG DIGEST-VALUE fresh"),
        c.q("DEBUG DIGEST-VALUE fresh")
    );
    c.q("SET str x");
    assert!(c
        .q("CTR.RECONCILE str START")
        .error()
        .starts_with("WRONGTYPE"));
}
