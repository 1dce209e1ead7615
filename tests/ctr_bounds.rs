//! Bounds as users write them: CTR.CEIL (the mirror of CTR.FLOOR), CTR.INCREX (Redis 8.8's
//! INCREX on a counter, with tokens), CTR.REFUND, and CTR.ADD's expiry forms, on real servers:
//! replies, refusals, token retries, TTLs read back, replication and persistence.

mod common;

use common::{Conn, Server, Value};

const ABOVE: &str = "ERR value above ceiling";

fn ok() -> Value {
    Value::Simple("OK".into())
}

fn pair(value: i64, applied: i64) -> Value {
    Value::Array(vec![Value::Int(value), Value::Int(applied)])
}

/// The server's clock, unix ms.
fn now_ms(c: &mut Conn) -> i64 {
    let t = c.q("TIME").array();
    t[0].text().parse::<i64>().unwrap() * 1000 + t[1].text().parse::<i64>().unwrap() / 1000
}

#[test]
fn ceilings_are_set_checked_and_removed() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD seats 10");
    assert_eq!(c.q("CTR.CEIL seats 9").error(), ABOVE);
    assert_eq!(c.q("CTR.CEIL seats 12"), ok());
    let info = c.q("CTR.INFO seats");
    assert_eq!(info.field("ceiling"), Value::Int(12));
    assert_eq!(
        info.field("ceiling_budgets"),
        Value::Array(vec![Value::Int(2)])
    );
    assert_eq!(
        c.q("CTR.CEIL fresh -1").error(),
        ABOVE,
        "a missing counter is 0"
    );
    assert_eq!(c.q("EXISTS fresh"), Value::Int(0));
    assert_eq!(c.q("CTR.CEIL fresh 5"), ok());
    assert_eq!(c.q("CTR.GET fresh"), Value::Int(0));
    assert_eq!(c.q("CTR.CEIL nothing NONE"), ok());
    assert_eq!(c.q("EXISTS nothing"), Value::Int(0));
    assert_eq!(
        c.q("CTR.CEIL seats high").error(),
        "ERR value is not an integer or out of range"
    );
    assert!(c.q("CTR.CEIL seats").is_error());
    c.q("SET s 1");
    assert!(c.q("CTR.CEIL s 0").error().starts_with("WRONGTYPE"));
    assert_eq!(
        c.q("CTR.INFO seats").field("ceiling"),
        Value::Int(12),
        "unchanged"
    );
    assert_eq!(c.q("CTR.CEIL seats none"), ok());
    assert_eq!(c.q("CTR.INFO seats").field("ceiling"), Value::Nil);
}

#[test]
fn no_write_takes_a_counter_above_its_ceiling() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD stock 8");
    c.q("CTR.CEIL stock 10");
    assert_eq!(
        c.q("CTR.ADD stock 3"),
        Value::Nil,
        "refused, as a floor refuses"
    );
    assert_eq!(c.q("CTR.ADD stock 2"), Value::Int(10));
    assert_eq!(c.q("CTR.ADD stock 1 TOKEN late"), Value::Nil);
    assert_eq!(c.q("CTR.ADD stock -5"), Value::Int(5));
    assert_eq!(
        c.q("CTR.ADD stock 1 TOKEN late"),
        Value::Nil,
        "a refusal is remembered with its token"
    );
    assert_eq!(c.q("CTR.GET stock"), Value::Int(5));
    assert_eq!(c.q("CTR.DECRFLOOR stock 5"), Value::Int(0));
    assert_eq!(c.q("CTR.CLEAR stock"), Value::Int(0));
    let budgets = c.q("CTR.INFO stock").field("ceiling_budgets").array();
    assert_eq!(budgets.iter().map(Value::int).sum::<i64>(), 10);
    // A floor and a ceiling together.
    c.q("CTR.FLOOR stock 0");
    assert_eq!(c.q("CTR.ADD stock 11"), Value::Nil);
    assert_eq!(c.q("CTR.ADD stock -1"), Value::Nil);
    assert_eq!(c.q("CTR.ADD stock 10"), Value::Int(10));
    // A ceiling below 0 cannot be cleared to 0.
    c.q("CTR.ADD neg -10");
    c.q("CTR.CEIL neg -5");
    assert_eq!(c.q("CTR.CLEAR neg").error(), ABOVE);
    assert_eq!(c.q("CTR.GET neg"), Value::Int(-10));
}

#[test]
fn a_spread_counter_takes_no_new_ceiling_until_the_spread_ends() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD hot 5");
    let holders = c.q("CTR.SPREAD hot 3").array();
    let refused = c.q("CTR.CEIL hot 100").error();
    assert!(refused.contains("set before it spreads"), "{refused}");
    let holder = holders[1].text();
    assert!(c.cmd(&["CTR.CEIL", &holder, "100"]).is_error());
    let increx = c.cmd(&["CTR.INCREX", &holder]).error();
    assert!(
        increx.starts_with("ERR CTR.INCREX takes a counter that is not spread"),
        "{increx}"
    );
    assert!(c.q("CTR.INCREX hot").is_error());
    assert_eq!(c.q("CTR.INFO hot").field("ceiling"), Value::Nil);
    // A counter with a ceiling spreads (tests/ceiled_spread.rs).
    c.q("CTR.ADD capped 1");
    c.q("CTR.CEIL capped 100");
    assert_eq!(c.q("CTR.SPREAD capped 3").array().len(), 3);
    // Shrunk to 1, its holders folded back (at once on one server), the home is a counter of
    // its own again and takes a ceiling; a holder's name still takes none.
    assert_eq!(c.q("CTR.SPREAD hot 1").array().len(), 1);
    assert_eq!(c.q("CTR.CEIL hot 100"), ok());
    assert_eq!(c.q("CTR.ADD hot 96"), Value::Nil);
    assert_eq!(c.q("CTR.ADD hot 95"), Value::Int(100));
    assert_eq!(c.q("CTR.INFO hot").field("ceiling"), Value::Int(100));
    assert!(c.cmd(&["CTR.CEIL", &holder, "100"]).is_error());
}

#[test]
fn increx_follows_redis_8_8() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(c.q("CTR.INCREX k"), pair(1, 1), "1 by default");
    assert_eq!(c.q("CTR.INCREX k BYINT 5"), pair(6, 5));
    assert_eq!(c.q("CTR.INCREX k BYINT -10"), pair(-4, -10));
    // Out of bounds: skipped, key and TTL untouched; a missing key is not made.
    assert_eq!(c.q("CTR.INCREX miss BYINT 5 UBOUND 3"), pair(0, 0));
    assert_eq!(c.q("EXISTS miss"), Value::Int(0));
    c.q("CTR.ADD r 99");
    c.q("PEXPIRE r 500000");
    assert_eq!(c.q("CTR.INCREX r BYINT 5 UBOUND 100 EX 10"), pair(99, 0));
    assert!(c.q("PTTL r").int() > 400_000, "the TTL is untouched");
    assert_eq!(
        c.q("CTR.INCREX r BYINT 5 UBOUND 100 SATURATE"),
        pair(100, 1)
    );
    assert_eq!(c.q("CTR.INCREX r BYINT -500 LBOUND 0"), pair(100, 0));
    assert_eq!(
        c.q("CTR.INCREX r BYINT -500 LBOUND 0 SATURATE"),
        pair(0, -100)
    );
    // A value already outside the bounds moves to the nearest one.
    c.q("CTR.ADD out 150");
    assert_eq!(
        c.q("CTR.INCREX out BYINT 5 UBOUND 100 SATURATE"),
        pair(100, -50)
    );
    // Past 64 bits: skipped, or saturated at the limit.
    c.cmd(&["CTR.ADD", "big", &(i64::MAX - 1).to_string()]);
    assert_eq!(c.q("CTR.INCREX big BYINT 5"), pair(i64::MAX - 1, 0));
    assert_eq!(c.q("CTR.INCREX big BYINT 5 SATURATE"), pair(i64::MAX, 1));
    // The counter's own floor and ceiling hold too: the stricter wins.
    c.q("CTR.ADD b 5");
    c.q("CTR.FLOOR b 2");
    c.q("CTR.CEIL b 8");
    assert_eq!(c.q("CTR.INCREX b BYINT 10 UBOUND 100"), pair(5, 0));
    assert_eq!(c.q("CTR.INCREX b BYINT 10 UBOUND 100 SATURATE"), pair(8, 3));
    assert_eq!(
        c.q("CTR.INCREX b BYINT -10 LBOUND -50 SATURATE"),
        pair(2, -6)
    );
    assert_eq!(c.q("CTR.INCREX b BYINT 1 UBOUND 6"), pair(3, 1));
}

#[test]
fn increx_sets_expiry_as_increx_does() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.INCREX w EX 100");
    let ttl = c.q("PTTL w").int();
    assert!(ttl > 90_000 && ttl <= 100_000, "{ttl}");
    c.q("CTR.INCREX w PX 5000");
    assert!(c.q("PTTL w").int() <= 5_000, "set again on every write");
    c.q("CTR.INCREX w EX 100 ENX");
    assert!(
        c.q("PTTL w").int() <= 5_000,
        "ENX: the key already has a TTL"
    );
    c.q("CTR.INCREX w PERSIST");
    assert_eq!(c.q("PTTL w"), Value::Int(-1));
    c.q("CTR.INCREX w EX 100 ENX");
    assert!(c.q("PTTL w").int() > 90_000, "ENX: no TTL, so set");
    let at = now_ms(&mut c) + 200_000;
    c.cmd(&["CTR.INCREX", "w", "PXAT", &at.to_string()]);
    assert_eq!(c.q("PEXPIRETIME w"), Value::Int(at));
    let secs = at / 1000 + 100;
    c.cmd(&["CTR.INCREX", "w", "EXAT", &secs.to_string()]);
    assert_eq!(c.q("EXPIRETIME w"), Value::Int(secs));
    assert_eq!(c.q("CTR.GET w"), Value::Int(7));
    // A time already past deletes the key, as SET ... PXAT does.
    assert_eq!(c.q("CTR.INCREX w PXAT 1"), pair(8, 1));
    assert_eq!(c.q("EXISTS w"), Value::Int(0));
    assert_eq!(c.q("CTR.ADD gone 5 EXAT 1"), Value::Int(5));
    assert_eq!(c.q("EXISTS gone"), Value::Int(0));
}

#[test]
fn increx_refuses_bad_input_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD k 5");
    let syntax = "ERR syntax error";
    for (line, err) in [
        (
            "CTR.INCREX k BYFLOAT 1.5",
            "ERR BYFLOAT is not supported: counters hold 64-bit integers (use BYINT)",
        ),
        (
            "CTR.INCREX k BYINT 1.5",
            "ERR value is not an integer or out of range",
        ),
        (
            "CTR.INCREX k LBOUND 5 UBOUND 4",
            "ERR LBOUND must not be greater than UBOUND",
        ),
        (
            "CTR.INCREX k EX 0",
            "ERR invalid expire time in 'ctr.increx' command",
        ),
        (
            "CTR.INCREX k EXAT -1",
            "ERR invalid expire time in 'ctr.increx' command",
        ),
        (
            "CTR.INCREX k ENX",
            "ERR ENX requires one of EX, PX, EXAT or PXAT",
        ),
        ("CTR.INCREX k PERSIST ENX", syntax),
        ("CTR.INCREX k EX 5 PX 5", syntax),
        ("CTR.INCREX k SATURATE SATURATE", syntax),
        ("CTR.INCREX k BYINT", syntax),
        ("CTR.INCREX k NOPE", syntax),
        ("CTR.INCREX k TOKEN", syntax),
        (
            "CTR.INCREX k AT -1",
            "ERR AT must be a unix time in ms (not negative)",
        ),
    ] {
        assert_eq!(c.q(line).error(), err, "{line}");
    }
    assert_eq!(c.q("CTR.GET k"), Value::Int(5));
    assert_eq!(c.q("PTTL k"), Value::Int(-1));
    c.q("SET s x");
    assert!(c
        .q("CTR.INCREX s BYFLOAT 1")
        .error()
        .starts_with("WRONGTYPE"));
    assert!(c.q("CTR.INCREX").is_error());
}

#[test]
fn a_tokened_increx_replays_its_first_reply() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(c.q("CTR.INCREX rl UBOUND 2 TOKEN a"), pair(1, 1));
    assert_eq!(c.q("CTR.INCREX rl UBOUND 2 TOKEN b"), pair(2, 1));
    assert_eq!(
        c.q("CTR.INCREX rl UBOUND 2 TOKEN c"),
        pair(2, 0),
        "over the cap"
    );
    c.q("CTR.ADD rl -2");
    assert_eq!(c.q("CTR.INCREX rl UBOUND 2 TOKEN a"), pair(1, 1), "a retry");
    assert_eq!(
        c.q("CTR.INCREX rl UBOUND 2 TOKEN c"),
        pair(2, 0),
        "a skip is final"
    );
    assert_eq!(c.q("CTR.GET rl"), Value::Int(0));
    assert_eq!(
        c.q("CTR.INCREX rl UBOUND 3 TOKEN a").error(),
        "ERR token already used on this key for another write (another command or amount)"
    );
    assert!(c.q("CTR.ADD rl 1 TOKEN a").is_error());
    assert_eq!(
        c.q("CTR.INFO rl").field("duplicates_ignored"),
        Value::Int(2)
    );
    // A tokened skip on a missing key remembers its reply, in a key that reads 0 and expires
    // with that memory.
    assert_eq!(c.q("CTR.INCREX gone BYINT 5 UBOUND 1 TOKEN t"), pair(0, 0));
    assert_eq!(c.q("CTR.GET gone"), Value::Int(0));
    assert!(c.q("PTTL gone").int() > 0);
}

#[test]
fn refunds_give_a_grant_back_once() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD stock 10");
    c.q("CTR.FLOOR stock 0");
    assert_eq!(c.q("CTR.DECRFLOOR stock 4 TOKEN order-1"), Value::Int(6));
    assert_eq!(c.q("CTR.DECRFLOOR stock 40 TOKEN order-2"), Value::Nil);
    assert_eq!(c.q("CTR.REFUND stock TOKEN order-1"), Value::Int(4));
    assert_eq!(c.q("CTR.GET stock"), Value::Int(10));
    assert_eq!(
        c.q("CTR.REFUND stock TOKEN order-1"),
        Value::Int(4),
        "a retry"
    );
    assert_eq!(c.q("CTR.GET stock"), Value::Int(10), "given back once");
    assert_eq!(c.q("CTR.REFUND stock TOKEN order-2"), Value::Nil, "refused");
    assert_eq!(c.q("CTR.REFUND stock TOKEN nobody"), Value::Nil, "unknown");
    assert_eq!(c.q("CTR.REFUND missing TOKEN x"), Value::Nil);
    assert_eq!(c.q("EXISTS missing"), Value::Int(0));
    // The purchase's own retry still replays its first answer.
    assert_eq!(c.q("CTR.DECRFLOOR stock 4 TOKEN order-1"), Value::Int(6));
    assert_eq!(c.q("CTR.GET stock"), Value::Int(10));
    // A tokened negative add is a grant too; a ceiling caps what comes back.
    c.q("CTR.ADD wallet 10");
    assert_eq!(c.q("CTR.ADD wallet -6 TOKEN pay"), Value::Int(4));
    c.q("CTR.CEIL wallet 12");
    c.q("CTR.ADD wallet 6");
    assert_eq!(
        c.q("CTR.REFUND wallet TOKEN pay"),
        Value::Int(2),
        "up to the ceiling"
    );
    assert_eq!(c.q("CTR.GET wallet"), Value::Int(12));
    assert_eq!(c.q("CTR.REFUND wallet TOKEN pay"), Value::Int(2));
    // Bad input.
    assert!(c
        .q("CTR.REFUND stock TOKEN")
        .error()
        .contains("wrong number"));
    assert_eq!(c.q("CTR.REFUND stock TOKENS x").error(), "ERR syntax error");
    let long = "t".repeat(257);
    assert_eq!(
        c.cmd(&["CTR.REFUND", "stock", "TOKEN", &long]).error(),
        "ERR token must be 1 to 256 bytes"
    );
    c.q("SET s x");
    assert!(c.q("CTR.REFUND s TOKEN x").error().starts_with("WRONGTYPE"));
}

#[test]
fn add_takes_every_expiry_form() {
    let server = Server::start();
    let mut c = server.conn();
    let at = now_ms(&mut c) + 300_000;
    c.cmd(&["CTR.ADD", "a", "1", "PXAT", &at.to_string()]);
    assert_eq!(c.q("PEXPIRETIME a"), Value::Int(at));
    c.cmd(&["CTR.ADD", "a", "1", "PXAT", &(at + 5_000).to_string()]);
    assert_eq!(c.q("PEXPIRETIME a"), Value::Int(at), "only on create");
    let secs = at / 1000;
    c.cmd(&["CTR.ADD", "b", "1", "EXAT", &secs.to_string()]);
    assert_eq!(c.q("EXPIRETIME b"), Value::Int(secs));
    c.q("CTR.ADD a 1 PERSIST");
    assert_eq!(c.q("PTTL a"), Value::Int(-1));
    // ENX repairs a fixed-window key written once without a TTL, and leaves one that has it.
    c.q("CTR.ADD win 1");
    c.q("CTR.ADD win 1 EX 60");
    assert_eq!(c.q("PTTL win"), Value::Int(-1), "EX alone: only on create");
    c.q("CTR.ADD win 1 EX 60 ENX");
    let ttl = c.q("PTTL win").int();
    assert!(ttl > 50_000 && ttl <= 60_000, "{ttl}");
    c.q("CTR.ADD win 1 EX 500 ENX");
    assert!(c.q("PTTL win").int() <= 60_000, "it has one now");
    // A time already past, with ENX, on a key that has a TTL: nothing to set, nothing deleted.
    assert_eq!(c.q("CTR.ADD win 1 ENX PXAT 1"), Value::Int(5));
    assert!(c.q("PTTL win").int() > 50_000, "the TTL it had");
    assert_eq!(c.q("CTR.GET win"), Value::Int(5));
    assert_eq!(
        c.q("CTR.ADD win 1 ENX").error(),
        "ERR ENX requires one of EX, PX, EXAT or PXAT"
    );
    assert_eq!(c.q("CTR.ADD win 1 PERSIST ENX").error(), "ERR syntax error");
    assert_eq!(
        c.q("CTR.ADD win 1 EXAT 0").error(),
        "ERR invalid expire time in 'ctr.add' command"
    );
    // On a key that exists an expiry sets nothing, and a bad one is refused all the same.
    for bad in ["EX 0", "EX -5", "PX 9223372036854775807", "EXAT 0"] {
        let add = format!("CTR.ADD win 1 {bad}");
        let e = c.q(&add).error();
        assert_eq!(e, "ERR invalid expire time in 'ctr.add' command", "{add}");
    }
    assert_eq!(
        c.q("CTR.ADD win 1 EX abc").error(),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(c.q("CTR.ADD win 1 EX").error(), "ERR syntax error");
    assert_eq!(
        c.q("CTR.GET win"),
        Value::Int(5),
        "refused: nothing changed"
    );
    let ttl = c.q("PTTL win").int();
    c.q("CTR.ADD win 1 EX 5");
    assert!(
        c.q("PTTL win").int() <= ttl,
        "EX on a key that exists: nothing set"
    );
    assert_eq!(c.q("CTR.GET win"), Value::Int(6));
}

/// Every new write reaches a replica as its effect (and the TTLs as PEXPIREAT/PERSIST): equal
/// digests and TTLs on the replica, which decides nothing.
#[test]
fn replicas_reach_the_masters_state() {
    let master = Server::start();
    let replica = master.start_replica();
    let mut m = master.conn();
    let keys = write_everything(&mut m);
    master.wait_replicas(1);
    let mut r = replica.conn();
    for k in &keys {
        assert_eq!(
            r.cmd(&["DEBUG", "DIGEST-VALUE", k]),
            m.cmd(&["DEBUG", "DIGEST-VALUE", k]),
            "{k}"
        );
        assert_eq!(
            r.cmd(&["PEXPIRETIME", k]),
            m.cmd(&["PEXPIRETIME", k]),
            "{k}"
        );
    }
    assert_eq!(r.q("DEBUG DIGEST"), m.q("DEBUG DIGEST"));
    assert_eq!(
        r.q("EXISTS past"),
        Value::Int(0),
        "deleted by a time already past"
    );
    // A retry on the master replays; the replica answers the same reads.
    assert_eq!(m.q("CTR.INCREX rl BYINT 3 UBOUND 10 TOKEN t1"), pair(3, 3));
    assert_eq!(r.q("CTR.GET rl"), m.q("CTR.GET rl"));
}

/// Writes every new kind of state: a ceiling, tokened INCREX (applied and skipped) with TTLs,
/// grants, a refund, CTR.ADD's new expiry forms. Returns the keys.
fn write_everything(c: &mut Conn) -> Vec<String> {
    c.q("CTR.ADD capped 3");
    c.q("CTR.CEIL capped 20");
    c.q("CTR.ADD capped 4 TOKEN x");
    c.q("CTR.INCREX rl BYINT 3 UBOUND 10 EX 100 TOKEN t1");
    c.q("CTR.INCREX rl BYINT 30 UBOUND 10 TOKEN t2");
    c.q("CTR.INCREX rl BYINT 30 UBOUND 10 SATURATE PERSIST TOKEN t3");
    c.q("CTR.INCREX plain PX 50000");
    c.q("CTR.INCREX plain EX 100 ENX");
    // Untokened with an expiry: replicated as sent, the TTL after it as PEXPIREAT.
    c.q("CTR.INCREX plain BYINT 2 UBOUND 100 EX 200");
    c.q("CTR.INCREX plain BYINT 2 UBOUND 100 EX 300 ENX");
    c.q("CTR.INCREX skipped BYINT 2 LBOUND 5 TOKEN t");
    c.q("CTR.ADD stock 10");
    c.q("CTR.FLOOR stock 0");
    c.q("CTR.DECRFLOOR stock 3 TOKEN o1");
    c.q("CTR.DECRFLOOR stock 2 TOKEN o2");
    c.q("CTR.REFUND stock TOKEN o1");
    c.q("CTR.ADD win 1");
    c.q("CTR.ADD win 1 EX 60 ENX");
    // ENX on a key that has a TTL: the bare add's fast path, replicated as sent.
    c.q("CTR.ADD win 1 EX 90 ENX");
    c.q("CTR.ADD win 1 ENX PXAT 1");
    c.q("CTR.ADD gone 1 EX 60");
    c.q("CTR.ADD gone 1 PERSIST");
    // A fixed window: its first add sets the TTL; the next ones (the bare add's fast path)
    // replicate as sent and set nothing; a tokened one (a boxed counter) takes the general path.
    c.q("CTR.ADD fixed 1 EX 600");
    c.q("CTR.ADD fixed 1 EX 600");
    c.q("CTR.ADD fixed 1 PXAT 1");
    c.q("CTR.ADD boxed 1 EX 600");
    c.q("CTR.ADD boxed 1 EX 600 TOKEN first");
    c.q("CTR.ADD boxed 1 EX 300");
    // Without a token or a TTL, on a counter without tokens: replicated as sent.
    c.q("CTR.ADD lim 5");
    c.q("CTR.FLOOR lim 0");
    c.q("CTR.CEIL lim 8");
    c.q("CTR.INCREX lim BYINT 10 SATURATE");
    c.q("CTR.INCREX lim BYINT -20 LBOUND -5 SATURATE");
    c.q("CTR.ADD past 1");
    c.q("CTR.INCREX past PXAT 1"); // gone at once, as SET ... PXAT 1 would be
    [
        "capped", "rl", "plain", "skipped", "stock", "win", "gone", "lim", "fixed", "boxed",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn every_new_state_survives_reload_aof_and_restore() {
    let mut server = Server::start_with(&common::AOF_WITHOUT_PREAMBLE, &[]);
    let mut c = server.conn();
    let keys = write_everything(&mut c);
    let snapshot = |c: &mut Conn| -> Vec<(Value, Value)> {
        keys.iter()
            .map(|k| {
                (
                    c.cmd(&["DEBUG", "DIGEST-VALUE", k]),
                    c.cmd(&["PEXPIRETIME", k]),
                )
            })
            .collect()
    };
    let before = snapshot(&mut c);
    assert_eq!(c.q("DEBUG RELOAD"), ok());
    assert_eq!(snapshot(&mut c), before, "RDB");
    // The AOF as written (commands and effects), then rewritten.
    server.restart();
    let mut c = server.conn();
    assert_eq!(snapshot(&mut c), before, "AOF replay");
    server.rewrite_aof();
    server.restart();
    let mut c = server.conn();
    assert_eq!(snapshot(&mut c), before, "AOF rewrite");
    for k in &keys {
        let payload = c.cmd(&["DUMP", k]).bytes();
        let copy = format!("copy:{k}");
        // The digest covers the TTL too, so restore with the same one.
        let ttl = c.cmd(&["PTTL", k]).int().max(0).to_string();
        c.cmd(&[b"RESTORE", copy.as_bytes(), ttl.as_bytes(), &payload]);
        assert_eq!(
            c.cmd(&["DEBUG", "DIGEST-VALUE", &copy]),
            c.cmd(&["DEBUG", "DIGEST-VALUE", k]),
            "{k}"
        );
    }
    for k in &keys {
        let copy = format!("dup:{k}");
        assert_eq!(c.cmd(&["COPY", k, &copy]), Value::Int(1));
        assert_eq!(
            c.cmd(&["DEBUG", "DIGEST-VALUE", &copy]),
            c.cmd(&["DEBUG", "DIGEST-VALUE", k]),
            "COPY of {k}"
        );
    }
    assert_eq!(
        c.q("CTR.ADD dup:capped 100"),
        Value::Nil,
        "a copy keeps the ceiling"
    );
    // The restored state still behaves: a refund replays, a ceiling refuses, a token replays.
    assert_eq!(c.q("CTR.REFUND copy:stock TOKEN o1"), Value::Int(3));
    assert_eq!(c.q("CTR.REFUND copy:stock TOKEN o2"), Value::Int(2));
    assert_eq!(c.q("CTR.ADD copy:capped 100"), Value::Nil);
    assert_eq!(
        c.q("CTR.INCREX copy:rl BYINT 30 UBOUND 10 TOKEN t2"),
        pair(3, 0)
    );
}

/// A write that changes nothing (a skipped INCREX without a token, a retry, a refund without a
/// grant, a refused add) leaves WATCH holding and replicates nothing.
#[test]
fn writes_that_change_nothing_leave_watch_alone() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD k 5");
    c.q("CTR.CEIL k 5");
    c.q("CTR.INCREX k TOKEN t1 UBOUND 9");
    c.q("CTR.ADD k -1");
    for no_op in [
        "CTR.INCREX k BYINT 50 UBOUND 9",
        "CTR.INCREX k TOKEN t1 UBOUND 9",
        "CTR.REFUND k TOKEN none",
        "CTR.ADD k 10",
        "CTR.CEIL k 5",
    ] {
        let mut other = server.conn();
        assert_eq!(other.q("WATCH k"), ok());
        other.q(no_op);
        assert_eq!(other.q("MULTI"), ok());
        other.q("CTR.GET k");
        assert_eq!(
            other.q("EXEC"),
            Value::Array(vec![Value::Int(4)]),
            "{no_op}"
        );
    }
    let mut other = server.conn();
    other.q("WATCH k");
    other.q("CTR.INCREX k BYINT 1 UBOUND 9");
    other.q("MULTI");
    other.q("CTR.GET k");
    assert_eq!(other.q("EXEC"), Value::Nil, "an applied INCREX is a change");
}
