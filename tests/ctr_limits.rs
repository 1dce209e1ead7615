//! The rate limiters on real servers: `CTR.THROTTLE` (replies equal to redis-cell's
//! `CL.THROTTLE` on the same calls and clock, tokens, expiry, replication, persistence, bad
//! input) and `CTR.WINDOW` (sliding windows).

mod common;

use common::{Conn, Server, Value};

/// The server's time, unix ms, rounded down to a second (a clock for `AT` that the key's real
/// TTL will not overtake during a test).
fn server_now_ms(c: &mut Conn) -> i64 {
    let t = c.q("TIME").array();
    t[0].text().parse::<i64>().unwrap() * 1000
}

fn ints(v: &Value) -> Vec<i64> {
    v.array().iter().map(Value::int).collect()
}

fn throttle(c: &mut Conn, key: &str, args: &str, at: i64) -> Vec<i64> {
    let line = format!("CTR.THROTTLE {key} {args} AT {at}");
    let reply = c.q(&line);
    assert!(!reply.is_error(), "{line}: {reply:?}");
    ints(&reply)
}

/// redis-cell 0.2.2's algorithm, written out for the expected replies: the arrival time in ns,
/// `[limited, limit, remaining, retry_after, reset_after]`.
fn redis_cell(
    tat: &mut Option<i64>,
    now: i64,
    (burst, count, period, quantity): (i64, i64, i64, i64),
) -> Vec<i64> {
    let emission = ((period * 1_000_000_000) as f64 / count as f64) as i64;
    let tolerance = emission * (burst + 1);
    let increment = emission * quantity;
    // redis-cell's key has expired once the arrival time has passed.
    let stored = tat.filter(|t| *t > now).unwrap_or(now);
    let new_tat = stored.max(now) + increment;
    let allow_at = new_tat - tolerance;
    let (limited, retry, ttl) = if now < allow_at {
        let retry = if increment <= tolerance {
            allow_at - now
        } else {
            -1_000_000_000
        };
        (1, retry, stored - now)
    } else {
        *tat = Some(new_tat);
        (0, -1_000_000_000, new_tat - now)
    };
    let next = tolerance - ttl;
    let remaining = if next > -emission {
        ((next / 1000) as f64 / (emission / 1000) as f64) as i64
    } else {
        0
    };
    vec![
        limited,
        burst + 1,
        remaining,
        retry / 1_000_000_000,
        ttl / 1_000_000_000,
    ]
}

/// redis-cell's own test sequence (5 per burst, 1 a second), replayed through `AT`.
const CELL_SEQUENCE: [(i64, i64, [i64; 5]); 15] = [
    (0, 6, [1, 5, 5, -1, 0]),
    (0, 1, [0, 5, 4, -1, 1]),
    (0, 1, [0, 5, 3, -1, 2]),
    (0, 1, [0, 5, 2, -1, 3]),
    (0, 1, [0, 5, 1, -1, 4]),
    (0, 1, [0, 5, 0, -1, 5]),
    (0, 1, [1, 5, 0, 1, 5]),
    (3000, 1, [0, 5, 2, -1, 3]),
    (3100, 1, [0, 5, 1, -1, 3]),
    (4000, 1, [0, 5, 1, -1, 4]),
    (8000, 1, [0, 5, 4, -1, 1]),
    (9500, 1, [0, 5, 4, -1, 1]),
    (9500, 0, [0, 5, 4, -1, 1]),
    (9500, 2, [0, 5, 2, -1, 3]),
    (9500, 5, [1, 5, 2, 3, 3]),
];

fn run_cell_sequence(c: &mut Conn, key: &str, base: i64) {
    for (i, (offset, quantity, expected)) in CELL_SEQUENCE.iter().enumerate() {
        let got = throttle(c, key, &format!("4 1 1 {quantity}"), base + offset);
        assert_eq!(got, expected.to_vec(), "call {i}");
    }
}

#[test]
fn throttle_replies_as_cl_throttle_on_the_same_calls_and_clock() {
    let server = Server::start();
    let mut c = server.conn();
    let base = server_now_ms(&mut c);
    run_cell_sequence(&mut c, "cell", base);
    // A rate with partial seconds everywhere (3 per 2 s, a burst of 2, mixed quantities), every
    // reply against the algorithm written out.
    let mut tat = None;
    let calls = [
        (0, 1),
        (0, 2),
        (10, 1),
        (250, 1),
        (700, 0),
        (700, 3),
        (1400, 1),
        (1401, 1),
        (2900, 2),
        (9000, 1),
        (9000, 4),
    ];
    for (i, (offset, quantity)) in calls.into_iter().enumerate() {
        let at = base + offset;
        let expected = redis_cell(&mut tat, at * 1_000_000, (2, 3, 2, quantity));
        let got = throttle(&mut c, "fractional", &format!("2 3 2 {quantity}"), at);
        assert_eq!(got, expected, "call {i} at +{offset} ms");
    }
}

#[test]
fn a_limited_call_or_a_read_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let base = server_now_ms(&mut c);
    assert_eq!(
        throttle(&mut c, "peek", "4 1 60 0", base),
        vec![0, 5, 5, -1, 0]
    );
    assert_eq!(c.q("EXISTS peek"), Value::Int(0), "a read makes no key");
    assert_eq!(
        throttle(&mut c, "big", "4 1 60 6", base),
        vec![1, 5, 5, -1, 0]
    );
    assert_eq!(c.q("EXISTS big"), Value::Int(0), "a refusal makes no key");
    throttle(&mut c, "k", "0 1 60", base);
    let digest = c.q("DEBUG DIGEST-VALUE k");
    let ttl = c.q("PEXPIRETIME k").int();
    assert_eq!(throttle(&mut c, "k", "0 1 60", base)[0], 1);
    assert_eq!(throttle(&mut c, "k", "0 1 60 0", base + 10)[0], 0);
    assert_eq!(c.q("DEBUG DIGEST-VALUE k"), digest);
    assert_eq!(c.q("PEXPIRETIME k").int(), ttl);
}

#[test]
fn a_tokened_retry_replays_its_first_reply_and_consumes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    // A second behind the server's clock: `base + 60_000` below stays within
    // ctr.token-max-future-ms of the module's (coarse) clock, which can trail TIME's second.
    let base = server_now_ms(&mut c) - 1_000;
    let first = ints(&c.q(&format!("CTR.THROTTLE t 2 1 60 TOKEN a AT {base}")));
    assert_eq!(first, vec![0, 3, 2, -1, 60]);
    for later in [0, 5_000] {
        let again = c.q(&format!(
            "CTR.THROTTLE t 2 1 60 TOKEN a AT {}",
            base + later
        ));
        assert_eq!(ints(&again), first, "a retry {later} ms later");
    }
    // Nothing was consumed by the retries: the next call finds 2 left, then 1.
    assert_eq!(
        throttle(&mut c, "t", "2 1 60", base),
        vec![0, 3, 1, -1, 120]
    );
    // A limited call's refusal is replayed too, even once there is room again.
    throttle(&mut c, "t", "2 1 60", base);
    let refused = ints(&c.q(&format!("CTR.THROTTLE t 2 1 60 TOKEN b AT {base}")));
    assert_eq!(refused[0], 1);
    let later = base + 60_000;
    assert_eq!(
        ints(&c.q(&format!("CTR.THROTTLE t 2 1 60 TOKEN b AT {later}"))),
        refused
    );
    assert_eq!(throttle(&mut c, "t", "2 1 60", later)[0], 0, "room again");
    // A token names one call: other arguments, or another command, are refused.
    let other = c.q(&format!("CTR.THROTTLE t 2 1 60 2 TOKEN a AT {base}"));
    assert!(other.error().contains("token already used"), "{other:?}");
    let add = c.q("CTR.ADD t 1 TOKEN a");
    assert!(add.is_error(), "{add:?}");
    assert_eq!(c.q("CTR.GET t"), Value::Int(0));
}

#[test]
fn an_idle_limiter_expires() {
    let server = Server::start();
    let mut c = server.conn();
    // A clock a little ahead of the server's: the deadlines are exactly the arrival times.
    let base = server_now_ms(&mut c) + 5000;
    throttle(&mut c, "idle", "9 1 10", base);
    // Its key lives until the arrival time: one emission interval (10 s) after the call.
    assert_eq!(c.q("PEXPIRETIME idle").int(), base + 10_000);
    throttle(&mut c, "idle", "9 1 10 3", base);
    assert_eq!(c.q("PEXPIRETIME idle").int(), base + 40_000);
    // A limiter used at the server's clock, a tenth of a second apart, goes away by itself.
    c.q("CTR.THROTTLE short 0 10 1");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while c.q("EXISTS short") == Value::Int(1) {
        assert!(
            std::time::Instant::now() < deadline,
            "the limiter never expired"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A caller's clock behind the server's: the key lives as long, on the server's clock.
    let behind = server_now_ms(&mut c) - 3_000;
    throttle(&mut c, "lagging", "9 1 1", behind);
    let deadline = c.q("PEXPIRETIME lagging").int();
    let now = c.q("TIME").array()[0].text().parse::<i64>().unwrap() * 1000;
    assert!(deadline > now, "deadline {deadline} at {now}");
    // State whose arrival time has passed is no state: the whole burst is there again.
    assert_eq!(
        throttle(&mut c, "idle", "9 1 10 0", base + 40_000),
        vec![0, 10, 10, -1, 0]
    );
}

#[test]
fn bad_throttle_input_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let cases = [
        ("CTR.THROTTLE k -1 1 60", "must not be negative"),
        ("CTR.THROTTLE k 1 -1 60", "must not be negative"),
        ("CTR.THROTTLE k 1 1 60 -1", "must not be negative"),
        ("CTR.THROTTLE k 1 0 60", "must be positive"),
        ("CTR.THROTTLE k 1 1 0", "must be positive"),
        ("CTR.THROTTLE k 1 1 9223372036854775807", "overflow"),
        ("CTR.THROTTLE k 9223372036854775807 1 1", "overflow"),
        ("CTR.THROTTLE k 1 1 1 9223372036854775807", "overflow"),
        (
            "CTR.THROTTLE k 1 1000000000000 1",
            "more than one per nanosecond",
        ),
        ("CTR.THROTTLE k x 1 60", "not an integer"),
        ("CTR.THROTTLE k 1 1 60 1 TOKEN", "syntax error"),
        ("CTR.THROTTLE k 1 1 60 BURST 2", "syntax error"),
        ("CTR.THROTTLE k 1 1 60 AT 1 AT 2", "syntax error"),
        ("CTR.THROTTLE k 1 1 60 AT -5", "AT must be"),
        ("CTR.THROTTLE k 1 1", "wrong number of arguments"),
    ];
    assert_refused(&mut c, &cases);
    assert_eq!(c.q("EXISTS k"), Value::Int(0));
    // WRONGTYPE comes first; a counter with a value is not a limiter's key.
    c.q("SET s x");
    assert!(c
        .q("CTR.THROTTLE s -1 1 60")
        .error()
        .starts_with("WRONGTYPE"));
    c.q("CTR.ADD counted 3");
    let digest = c.q("DEBUG DIGEST-VALUE counted");
    assert!(c
        .q("CTR.THROTTLE counted 1 1 60")
        .error()
        .contains("needs a key of its own"));
    assert_eq!(c.q("DEBUG DIGEST-VALUE counted"), digest);
}

/// Limiters in every state: with an arrival time, with remembered replies, both.
fn populate_limiters(c: &mut Conn, base: i64) -> Vec<&'static str> {
    throttle(c, "lim:plain", "4 1 60 3", base);
    c.q(&format!(
        "CTR.THROTTLE lim:tokened 1 2 60 TOKEN x AT {base}"
    ));
    c.q(&format!(
        "CTR.THROTTLE lim:tokened 1 2 60 TOKEN y AT {base}"
    ));
    c.q(&format!(
        "CTR.THROTTLE lim:tokened 1 2 60 TOKEN z AT {base}"
    ));
    c.q(&format!(
        "CTR.THROTTLE lim:refused 0 1 60 5 TOKEN r AT {base}"
    ));
    vec!["lim:plain", "lim:tokened", "lim:refused"]
}

fn digests(c: &mut Conn, keys: &[&str]) -> Vec<(Value, i64)> {
    keys.iter()
        .map(|k| {
            (
                c.cmd(&["DEBUG", "DIGEST-VALUE", k]),
                c.cmd(&["PEXPIRETIME", k]).int(),
            )
        })
        .collect()
}

/// Each key DUMPed and RESTOREd under another name (with its deadline) holds the same state.
fn assert_dump_restore_is_exact(c: &mut Conn, keys: &[&str]) {
    for key in keys {
        let payload = c.cmd(&["DUMP", key]).bytes();
        let copy = format!("copy:{key}");
        let at = c.cmd(&["PEXPIRETIME", key]).int().max(0).to_string();
        let restored = c.cmd(&[
            b"RESTORE",
            copy.as_bytes(),
            at.as_bytes(),
            &payload,
            b"ABSTTL",
        ]);
        assert_eq!(restored, Value::Simple("OK".into()), "{key}");
        assert_eq!(
            c.cmd(&["DEBUG", "DIGEST-VALUE", &copy]),
            c.cmd(&["DEBUG", "DIGEST-VALUE", key]),
            "{key}"
        );
    }
}

/// Each line is refused with an error that says its text.
fn assert_refused(c: &mut Conn, cases: &[(&str, &str)]) {
    for (line, expected) in cases {
        let reply = c.q(line);
        assert!(reply.error().contains(expected), "{line}: {reply:?}");
    }
}

/// What the limiters answer next (a retry of each token, and a plain call).
fn next_replies(c: &mut Conn, base: i64) -> Vec<Vec<i64>> {
    let mut out = vec![throttle(c, "lim:plain", "4 1 60", base + 100)];
    for token in ["x", "y", "z"] {
        let line = format!("CTR.THROTTLE lim:tokened 1 2 60 TOKEN {token} AT {base}");
        out.push(ints(&c.q(&line)));
    }
    out.push(ints(&c.q(&format!(
        "CTR.THROTTLE lim:refused 0 1 60 5 TOKEN r AT {base}"
    ))));
    out.push(throttle(c, "lim:tokened", "1 2 60", base + 100));
    out
}

#[test]
fn limiters_survive_reload_aof_rewrite_and_dump_restore() {
    let mut server = Server::start_with(&common::AOF_WITHOUT_PREAMBLE, &[]);
    let mut c = server.conn();
    let base = server_now_ms(&mut c);
    let keys = populate_limiters(&mut c, base);
    let before = digests(&mut c, &keys);
    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    assert_eq!(digests(&mut c, &keys), before, "DEBUG RELOAD");
    server.rewrite_aof();
    server.restart();
    let mut c = server.conn();
    assert_eq!(digests(&mut c, &keys), before, "AOF rewrite and restart");
    assert_dump_restore_is_exact(&mut c, &keys);
    let expected = {
        let fresh = Server::start();
        let mut f = fresh.conn();
        populate_limiters(&mut f, base);
        next_replies(&mut f, base)
    };
    assert_eq!(next_replies(&mut c, base), expected);
}

#[test]
fn replicas_and_the_aof_hold_the_masters_limiter() {
    let mut master = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"], &[]);
    let replica = master.start_replica();
    let mut m = master.conn();
    let base = server_now_ms(&mut m);
    let mut keys = populate_limiters(&mut m, base);
    // Calls at the master's own clock: the replica applies the master's decision.
    for _ in 0..5 {
        m.q("CTR.THROTTLE lim:clock 3 10 1");
    }
    m.q("CTR.THROTTLE lim:clock 3 10 1 TOKEN c");
    keys.push("lim:clock");
    master.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(digests(&mut r, &keys), digests(&mut m, &keys));
    let before = digests(&mut m, &keys);
    drop(r);
    drop(replica);
    master.restart();
    let mut m = master.conn();
    assert_eq!(digests(&mut m, &keys), before, "AOF replay");
}

/// When redis-cell 0.2.2 was built for the bench (`make bench`), its `CL.THROTTLE` answers the
/// same calls in the same server as `CTR.THROTTLE` (both at the server's clock, a slow rate so
/// that the microseconds between the two calls never cross a second).
#[test]
fn equal_to_redis_cells_own_module_when_it_is_built() {
    let cell =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/redis-cell/libredis_cell.so");
    if !cell.exists() {
        common::note("redis-cell not built (make bench builds it): comparison skipped");
        return;
    }
    let cell = cell.to_string_lossy().into_owned();
    let server = Server::start_with(&["--loadmodule", &cell], &[]);
    let mut c = server.conn();
    for (i, args) in [
        "3 1 3600",
        "3 1 3600",
        "3 1 3600 2",
        "3 1 3600",
        "3 1 3600 0",
        "0 5 7 9",
    ]
    .iter()
    .enumerate()
    {
        let ours = ints(&c.q(&format!("CTR.THROTTLE ours {args}")));
        let theirs = ints(&c.q(&format!("CL.THROTTLE theirs {args}")));
        assert_eq!(ours, theirs, "call {i}: {args}");
    }
}

/// One field of `CTR.INFO key` (a flat field-value array under RESP2).
fn info_field(c: &mut Conn, key: &str, name: &str) -> Value {
    let info = c.cmd(&["CTR.INFO", key]).array();
    let pair = info.chunks(2).find(|p| p[0].text() == name);
    pair.map(|p| p[1].clone()).expect("the field")
}

fn add_at(c: &mut Conn, key: &str, delta: i64, at: i64) -> Value {
    c.q(&format!("CTR.ADD {key} {delta} AT {at}"))
}

#[test]
fn a_windowed_counter_is_the_sum_of_its_last_window() {
    let server = Server::start();
    let mut c = server.conn();
    let base = server_now_ms(&mut c);
    // 10 s in buckets of 1 s; the adds carry their own clock (AT) a little ahead of the server's.
    assert_eq!(c.q("CTR.WINDOW w 10000"), Value::Simple("OK".into()));
    assert_eq!(c.q("CTR.GET w"), Value::Int(0), "created at 0");
    for second in 0..25 {
        let expected = (second + 1).min(10) * 2;
        assert_eq!(
            add_at(&mut c, "w", 2, base + second * 1000),
            Value::Int(expected),
            "second {second}"
        );
    }
    // Reads see the window as the newest write left it (its clock is ahead of the server's).
    assert_eq!(c.q("CTR.GET w"), Value::Int(20));
    assert_eq!(c.q("CTR.MGET w missing").array()[0], Value::Int(20));
    assert_eq!(info_field(&mut c, "w", "value"), Value::Int(20));
    assert_eq!(info_field(&mut c, "w", "window_ms"), Value::Int(10_000));
    assert_eq!(info_field(&mut c, "w", "window_buckets"), Value::Int(10));
    // A quiet stretch: 6 s later only the last 4 seconds' adds are in the window.
    assert_eq!(add_at(&mut c, "w", 0, base + 30_000), Value::Int(8));
    // NONE keeps the value the window holds and stops the sliding.
    assert_eq!(c.q("CTR.WINDOW w NONE"), Value::Simple("OK".into()));
    assert_eq!(add_at(&mut c, "w", 1, base + 50_000), Value::Int(9));
    assert_eq!(info_field(&mut c, "w", "window_ms"), Value::Nil);
    // A counter that had a value: what it held counts as added when the window came (at the
    // server's clock, in the bucket of `t`: read away from a second's edge, since the module's
    // coarse clock may lag `TIME` by a few milliseconds there).
    let t = server_now_ms_inside_a_second(&mut c);
    c.q("CTR.ADD old 5");
    c.q("CTR.WINDOW old 2000 BUCKETS 2");
    assert_eq!(add_at(&mut c, "old", 1, t + 1000), Value::Int(6));
    assert_eq!(add_at(&mut c, "old", 1, t + 2000), Value::Int(2));
}

/// The server's clock in milliseconds, read between 100 and 800 ms into a second (waiting for
/// the next second when it is not).
fn server_now_ms_inside_a_second(c: &mut Conn) -> i64 {
    loop {
        let t = c.q("TIME").array();
        let seconds = t[0].text().parse::<i64>().unwrap();
        let millis = t[1].text().parse::<i64>().unwrap() / 1000;
        if (100..800).contains(&millis) {
            return seconds * 1000 + millis;
        }
        let to_next = (1000 - millis + 150) % 1000;
        std::thread::sleep(std::time::Duration::from_millis(to_next as u64));
    }
}

#[test]
fn a_window_composes_with_tokens_and_floors() {
    let server = Server::start();
    let mut c = server.conn();
    let base = server_now_ms(&mut c);
    c.q("CTR.WINDOW hits 10000");
    assert_eq!(
        c.q(&format!("CTR.ADD hits 1 TOKEN r1 AT {base}")),
        Value::Int(1)
    );
    assert_eq!(
        c.q(&format!("CTR.ADD hits 1 TOKEN r1 AT {base}")),
        Value::Int(1),
        "a retry"
    );
    assert_eq!(
        c.q(&format!("CTR.ADD hits 1 TOKEN r2 AT {base}")),
        Value::Int(2)
    );
    let later = base + 10_000;
    assert_eq!(add_at(&mut c, "hits", 0, later), Value::Int(0));
    assert_eq!(
        c.q(&format!("CTR.ADD hits 1 TOKEN r1 AT {later}")),
        Value::Int(0),
        "a retry after its add left the window adds nothing, and replies the window's value"
    );
    // A sliding-window limit of 3 calls per 10 s: a floor of -3, one decrement per call.
    c.q("CTR.FLOOR calls -3");
    assert_eq!(c.q("CTR.WINDOW calls 10000"), Value::Simple("OK".into()));
    let call = |c: &mut Conn, at: i64| c.q(&format!("CTR.DECRFLOOR calls 1 AT {at}"));
    assert_eq!(call(&mut c, base), Value::Int(-1));
    assert_eq!(call(&mut c, base + 4000), Value::Int(-2));
    assert_eq!(call(&mut c, base + 5000), Value::Int(-3));
    let digest = c.q("DEBUG DIGEST-VALUE calls");
    assert_eq!(call(&mut c, base + 9000), Value::Nil, "the fourth in 10 s");
    assert_eq!(
        c.q("DEBUG DIGEST-VALUE calls"),
        digest,
        "a refusal changes nothing"
    );
    assert_eq!(
        call(&mut c, base + 10_000),
        Value::Int(-3),
        "the first call left the window"
    );
    assert_eq!(call(&mut c, base + 10_500), Value::Nil);
    assert_eq!(call(&mut c, base + 14_000), Value::Int(-3));
    // A token replays a refusal of a windowed decrement too.
    let t = format!("CTR.DECRFLOOR calls 1 TOKEN o1 AT {}", base + 14_100);
    assert_eq!(c.q(&t), Value::Nil);
    assert_eq!(c.q(&t), Value::Nil);
}

#[test]
fn bad_window_input_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let cases = [
        ("CTR.WINDOW k 0", "window-ms must be positive"),
        ("CTR.WINDOW k -1000", "window-ms must be positive"),
        ("CTR.WINDOW k 1000 BUCKETS 0", "BUCKETS must be 1 to 4096"),
        (
            "CTR.WINDOW k 100000 BUCKETS 5000",
            "BUCKETS must be 1 to 4096",
        ),
        (
            "CTR.WINDOW k 1000 BUCKETS 3",
            "must be a multiple of BUCKETS",
        ),
        ("CTR.WINDOW k 1000 BUCKETS", "syntax error"),
        ("CTR.WINDOW k 1000 SLOTS 10", "syntax error"),
        ("CTR.WINDOW k x", "not an integer"),
        ("CTR.WINDOW k", "wrong number of arguments"),
    ];
    assert_refused(&mut c, &cases);
    assert_eq!(c.q("EXISTS k"), Value::Int(0));
    assert_eq!(c.q("CTR.WINDOW k NONE"), Value::Simple("OK".into()));
    assert_eq!(c.q("EXISTS k"), Value::Int(0), "NONE creates nothing");
    c.q("SET s x");
    assert!(c.q("CTR.WINDOW s 0").error().starts_with("WRONGTYPE"));
    // What a window does not go with: a floor set afterwards, a reconcile, a spread.
    c.q("CTR.WINDOW w 60000");
    let digest = c.q("DEBUG DIGEST-VALUE w");
    for line in [
        "CTR.FLOOR w 0",
        "CTR.RECONCILE w 5",
        "CTR.RECONCILE w START",
        "CTR.SPREAD w 2",
    ] {
        assert!(c.q(line).is_error(), "{line}");
    }
    assert_eq!(c.q("DEBUG DIGEST-VALUE w"), digest);
    c.q("CTR.RECONCILE h START");
    assert!(c
        .q("CTR.WINDOW h 60000")
        .error()
        .contains("windowed counter"));
}

#[test]
fn a_windows_memory_is_bounded_by_its_buckets() {
    let server = Server::start();
    let mut c = server.conn();
    let base = server_now_ms(&mut c);
    c.q("CTR.WINDOW m 2000 BUCKETS 20");
    let mut usage = Vec::new();
    for step in 0..400 {
        add_at(&mut c, "m", 1, base + step * 100);
        if step == 40 || step == 399 {
            usage.push(c.q("MEMORY USAGE m").int());
        }
    }
    assert_eq!(c.q("CTR.GET m"), Value::Int(20));
    assert!(
        usage[1] <= usage[0],
        "{usage:?}: 400 adds over 40 s hold 20 buckets"
    );
}

/// Windowed counters in every state: plain, sharded by a later resize, floored with tokens.
fn populate_windows(c: &mut Conn, base: i64) -> Vec<&'static str> {
    c.q("CTR.WINDOW win:plain 60000");
    for i in 0..30 {
        add_at(c, "win:plain", i, base + i * 1500);
    }
    c.q("CTR.FLOOR win:floored -100");
    c.q("CTR.WINDOW win:floored 30000 BUCKETS 30");
    for i in 0..10 {
        c.q(&format!(
            "CTR.DECRFLOOR win:floored 3 TOKEN d{i} AT {}",
            base + i * 2000
        ));
    }
    c.q("CTR.ADD win:none 4");
    c.q("CTR.WINDOW win:none 1000");
    vec!["win:plain", "win:floored", "win:none"]
}

#[test]
fn windows_survive_reload_aof_rewrite_dump_restore_and_replication() {
    let mut server = Server::start_with(&common::AOF_WITHOUT_PREAMBLE, &[]);
    let replica = server.start_replica();
    let mut c = server.conn();
    let base = server_now_ms(&mut c);
    let keys = populate_windows(&mut c, base);
    // Writes at the master's own clock too.
    for _ in 0..50 {
        c.q("CTR.ADD win:plain 1");
    }
    let before = digests(&mut c, &keys);
    server.wait_replicas(1);
    assert_eq!(digests(&mut replica.conn(), &keys), before, "replica");
    drop(replica);
    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    assert_eq!(digests(&mut c, &keys), before, "DEBUG RELOAD");
    assert_dump_restore_is_exact(&mut c, &keys);
    server.rewrite_aof();
    c.q("CTR.ADD win:plain 2"); // replayed from the incremental file on top of the rewrite
    let before = digests(&mut c, &keys);
    server.restart();
    let mut c = server.conn();
    assert_eq!(digests(&mut c, &keys), before, "AOF rewrite and restart");
}

/// Calls that change nothing: `WATCH` on the key holds and nothing reaches the replica.
#[test]
fn calls_that_change_nothing_leave_watch_and_replicate_nothing() {
    let master = Server::start();
    let _replica = master.start_replica();
    let (mut a, mut b) = (master.conn(), master.conn());
    let base = server_now_ms(&mut b) + 5000;
    b.q(&format!("CTR.THROTTLE t 0 1 60 AT {base}"));
    b.q("CTR.WINDOW w 60000");
    // A floor of -1 and a window, +5 then -6: once the +5 has left, the floor holds the value at
    // -1 and a decrement is refused; the slide that came with it is put back.
    b.q("CTR.FLOOR f -1");
    b.q("CTR.WINDOW f 10000");
    add_at(&mut b, "f", 5, base);
    b.q(&format!("CTR.DECRFLOOR f 6 AT {}", base + 1000));
    let cases = [
        ("t", format!("CTR.THROTTLE t 0 1 60 AT {base}"), "limited"),
        ("t", format!("CTR.THROTTLE t 0 1 60 0 AT {base}"), "a read"),
        ("w", "CTR.WINDOW w 60000".to_string(), "the same window"),
        ("m", "CTR.WINDOW m NONE".to_string(), "no window to remove"),
        (
            "f",
            format!("CTR.DECRFLOOR f 1 AT {}", base + 10_500),
            "refused",
        ),
    ];
    for (key, no_op, what) in cases {
        master.wait_replicas(1);
        let offset = master.info_field("replication", "master_repl_offset");
        let digest = b.cmd(&["DEBUG", "DIGEST-VALUE", key]);
        a.cmd(&["WATCH", key]);
        let reply = b.q(&no_op);
        assert!(!reply.is_error(), "{what}: {reply:?}");
        assert_eq!(
            master.info_field("replication", "master_repl_offset"),
            offset,
            "{what}: replicated"
        );
        assert_eq!(b.cmd(&["DEBUG", "DIGEST-VALUE", key]), digest, "{what}");
        a.q("MULTI");
        a.q("PING");
        assert_ne!(a.q("EXEC"), Value::Nil, "{what}: WATCH broke");
    }
}

/// `CTR.INCREX ... UBOUND` on a windowed counter is a sliding-window limit in one call: the
/// bound sees the window's sum at the call's time, a skipped call changes nothing, and once the
/// first calls leave the window more are allowed; a replica holds the same state. A ceiling and
/// a window are refused together (either order), changing nothing.
#[test]
fn increx_with_a_bound_on_a_window_is_a_sliding_window_limit() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    // Every call's time ahead of the server's clock (read to the second), so that it decides.
    let t = server_now_ms(&mut c) + 5_000;
    assert_eq!(
        c.q("CTR.WINDOW rl 1000 BUCKETS 10"),
        Value::Simple("OK".into())
    );
    let call = |c: &mut Conn, at: i64| {
        ints(&c.cmd(&["CTR.INCREX", "rl", "UBOUND", "3", "AT", &at.to_string()]))
    };
    assert_eq!(call(&mut c, t), [1, 1]);
    assert_eq!(call(&mut c, t + 500), [2, 1]);
    assert_eq!(call(&mut c, t + 600), [3, 1]);
    assert_eq!(call(&mut c, t + 700), [3, 0], "the limit holds");
    // The call at t has left the window 1,000 ms (to the bucket) later, the others not: one
    // more is allowed.
    assert_eq!(call(&mut c, t + 1150), [3, 1]);
    assert_eq!(call(&mut c, t + 1160), [3, 0]);
    server.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(
        r.q("DEBUG DIGEST-VALUE rl"),
        c.q("DEBUG DIGEST-VALUE rl"),
        "the replica holds the master's window"
    );
    let e = c.q("CTR.CEIL rl 10").error();
    assert!(e.contains("windowed counter takes no ceiling"), "{e}");
    c.q("CTR.ADD capped 1");
    assert_eq!(c.q("CTR.CEIL capped 5"), Value::Simple("OK".into()));
    let e = c.q("CTR.WINDOW capped 1000").error();
    assert!(e.contains("windowed counter takes no ceiling"), "{e}");
    assert_eq!(info_field(&mut c, "capped", "window_ms"), Value::Nil);
}
