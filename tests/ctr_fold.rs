//! Shrinking a spread counter on one server: the removed holders fold back into the home with
//! every unit counted once (at each step and at the end), a folded holder refuses writes with
//! a clear error, regrowing never reuses a folded name, and the transfer state (outbox, inbox,
//! leaving, sealed) survives DEBUG RELOAD, AOF rewrite + restart, DUMP/RESTORE and replication.
//! Folds interrupted by a failover are in cluster_spread.rs.

mod common;

use std::time::{Duration, Instant};

use common::{names, Conn, Server, Value};

fn info_field(c: &mut Conn, key: &str, field: &str) -> Option<Value> {
    let info = c.cmd(&["CTR.INFO", key]).array();
    let at = info
        .iter()
        .position(|v| matches!(v, Value::Bulk(b) if b == field.as_bytes()))?;
    Some(info[at + 1].clone())
}

/// Polls until `key` lists no holder as leaving (its folds are complete).
fn wait_folded(c: &mut Conn, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_field(c, key, "leaving").is_some_and(|l| !l.array().is_empty()) {
        assert!(Instant::now() < deadline, "the folds never completed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stat(server: &Server, field: &str) -> u64 {
    server
        .info_field("ctr", &format!("ctr_{field}"))
        .parse()
        .unwrap()
}

/// Spreads `home` to `n` holders and writes `i + 1` to holder i (the home included).
fn spread_with_values(c: &mut Conn, home: &str, n: usize) -> (Vec<String>, i64) {
    let holders = names(&c.cmd(&["CTR.SPREAD", home, &n.to_string()]));
    let mut total = 0;
    for (i, h) in holders.iter().enumerate() {
        c.cmd(&["CTR.ADD", h, &(i as i64 + 1).to_string()]);
        total += i as i64 + 1;
    }
    (holders, total)
}

#[test]
fn shrinking_8_to_3_to_1_folds_every_unit_back_once() {
    let server = Server::start();
    let mut c = server.conn();
    let (holders, total) = spread_with_values(&mut c, "views", 8);
    assert_eq!(c.q("CTR.GET views"), Value::Int(total));

    let kept = names(&c.q("CTR.SPREAD views 3"));
    assert_eq!(kept, holders[..3], "the first holders stay, at once");
    assert_eq!(
        c.q("CTR.GET views"),
        Value::Int(total),
        "exact during the fold"
    );
    wait_folded(&mut c, "views");
    assert_eq!(c.q("CTR.GET views"), Value::Int(total));
    assert_eq!(
        names(&info_field(&mut c, "views", "holders").unwrap()),
        kept
    );
    for gone in &holders[3..] {
        let e = c.cmd(&["CTR.ADD", gone, "1"]).error();
        assert!(
            e.contains("folded back") && e.contains("CTR.HOLDERS"),
            "{e}"
        );
        for write in [
            vec!["CTR.DECRFLOOR", gone, "1"],
            vec!["CTR.RECONCILE", gone, "5"],
        ] {
            let e = c.cmd(&write).error();
            assert!(e.contains("folded back"), "{write:?}: {e}");
        }
        // Whole-counter commands refuse any holder, sealed or not, naming its home.
        for write in [
            vec!["CTR.CLEAR", gone],
            vec!["CTR.FLOOR", gone, "0"],
            vec!["CTR.SPREAD", gone, "2"],
        ] {
            let e = c.cmd(&write).error();
            assert!(
                e.ends_with("is a holder of the spread counter views: use the home key"),
                "{write:?}: {e}"
            );
        }
        assert_eq!(
            c.cmd(&["CTR.GET", gone]),
            Value::Int(0),
            "its units are home"
        );
        let ttl = c.cmd(&["PTTL", gone]).int();
        assert!(
            ttl > 60_000 && ttl <= 3_600_000,
            "a folded holder expires after the token window (1 h by default): {ttl}"
        );
    }
    assert_eq!(c.q("CTR.GET views"), Value::Int(total));

    c.q("CTR.ADD views 100");
    assert_eq!(names(&c.q("CTR.SPREAD views 1")), vec!["views".to_string()]);
    wait_folded(&mut c, "views");
    assert_eq!(c.q("CTR.GET views"), Value::Int(total + 100));
    assert_eq!(
        info_field(&mut c, "views", "holders"),
        None,
        "a plain counter"
    );
    assert_eq!(stat(&server, "folds"), 7);
    assert_eq!(stat(&server, "transfers_started"), 7);
    assert_eq!(stat(&server, "transfers_credited"), 7);
    assert_eq!(stat(&server, "transfers_acked"), 7);

    // Growing again names fresh holders (the folded ones may still be sealed).
    let regrown = names(&c.q("CTR.SPREAD views 8"));
    assert!(
        regrown[1..].iter().all(|h| !holders.contains(h)),
        "{regrown:?}"
    );
    c.cmd(&["CTR.ADD", &regrown[5], "3"]);
    assert_eq!(c.q("CTR.GET views"), Value::Int(total + 103));
}

/// States with a fold under way (credits held by the debug hook): a home listing leaving
/// holders, sealed holders with an outbox entry each.
fn folding(c: &mut Conn) -> (Vec<String>, i64) {
    let (holders, total) = spread_with_values(c, "hot", 4);
    names(&c.q("CTR.SPREAD hot 2"));
    // Writers that still use the old holder list: their adds count until the seal.
    let mut total = total;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.cmd(&["CTR.ADD", &holders[3], "1"]).is_error() {
        total += 1;
        assert!(Instant::now() < deadline, "never sealed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.q("CTR.GET hot").int(), total, "sealed, credit held");
    (holders, total)
}

/// Every key of `keys` dumped from `from` and restored on `to`.
fn move_keys(from: &mut Conn, to: &mut Conn, keys: &[String]) {
    for k in keys {
        let dump = from.cmd(&["DUMP", k]).bytes();
        let restored = to.cmd(&[b"RESTORE", k.as_bytes(), b"0", dump.as_slice()]);
        assert_eq!(restored, Value::Simple("OK".into()));
    }
}

fn digests(c: &mut Conn, keys: &[String]) -> Vec<(Value, Value)> {
    keys.iter()
        .map(|k| (c.cmd(&["CTR.GET", k]), c.cmd(&["DEBUG", "DIGEST-VALUE", k])))
        .collect()
}

#[test]
fn a_fold_under_way_survives_reload_rewrite_restore_and_replication() {
    let mut server = Server::start_with(
        &["--appendonly", "yes", "--aof-use-rdb-preamble", "no"],
        &["debug-hold-credits", "yes"],
    );
    let mut c = server.conn();
    let (holders, total) = folding(&mut c);
    let leaving = names(&info_field(&mut c, "hot", "leaving").unwrap());
    assert_eq!(leaving, holders[2..]);
    let keys: Vec<String> = holders.clone();
    let before = digests(&mut c, &keys);

    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    assert_eq!(digests(&mut c, &keys), before, "DEBUG RELOAD");

    server.rewrite_aof();
    server.restart();
    let mut c = server.conn();
    assert_eq!(digests(&mut c, &keys), before, "AOF rewrite + restart");
    assert!(c
        .cmd(&["CTR.ADD", &holders[3], "1"])
        .error()
        .contains("folded back"));

    // Restored over itself: a home restored under another name while it lives would be a
    // copy, detached into a counter of its own (tests/spread_identity.rs).
    for k in [&holders[0], &holders[3]] {
        let dump = c.cmd(&["DUMP", k]).bytes();
        let digest = c.cmd(&["DEBUG", "DIGEST-VALUE", k]);
        assert_eq!(
            c.cmd(&[b"RESTORE", k.as_bytes(), b"0", dump.as_slice(), b"REPLACE"]),
            Value::Simple("OK".into())
        );
        assert_eq!(
            c.cmd(&["DEBUG", "DIGEST-VALUE", k]),
            digest,
            "DUMP/RESTORE of {k}"
        );
    }

    let replica = server.start_replica();
    server.wait_replicas(1);
    let mut r = replica.conn();
    let on_replica: Vec<Value> = keys
        .iter()
        .map(|k| r.cmd(&["DEBUG", "DIGEST-VALUE", k]))
        .collect();
    let on_master: Vec<Value> = before.iter().map(|(_, d)| d.clone()).collect();
    assert_eq!(on_replica, on_master, "replica digests");
    assert_eq!(r.q("CTR.GET hot").int(), total);
}

#[test]
fn a_restarted_server_resumes_a_fold_and_a_folding_holder_is_never_copied() {
    // One server holds the credits; its RDB, loaded by a server that does not, finishes the
    // fold: pending transfers are found again on load.
    let held = Server::start_with(&[], &["debug-hold-credits", "yes"]);
    let mut c = held.conn();
    let (holders, total) = folding(&mut c);
    // A copy of a sealed holder is refused: its units are on their way home, and a copy
    // would hold its grants without their units (a refund there would make units).
    let copy = c.cmd(&["COPY", &holders[3], "copied"]).error();
    assert!(copy.contains("failed to copy"), "{copy}");
    assert_eq!(c.cmd(&["EXISTS", "copied"]), Value::Int(0));
    let dumps: Vec<(String, Vec<u8>)> = holders
        .iter()
        .map(|k| (k.clone(), c.cmd(&["DUMP", k]).bytes()))
        .collect();
    let free = Server::start();
    let mut f = free.conn();
    for (k, dump) in &dumps {
        assert_eq!(
            f.cmd(&[b"RESTORE", k.as_bytes(), b"0", dump.as_slice()]),
            Value::Simple("OK".into())
        );
    }
    assert_eq!(
        f.q("CTR.GET hot").int(),
        total,
        "exact before the fold ends"
    );
    wait_folded(&mut f, "hot");
    assert_eq!(f.q("CTR.GET hot").int(), total);
    assert!(stat(&free, "transfers_credited") >= 2);
}

/// A refund at a holder being folded back (sealed, its credit held at the home) waits: its
/// grant's units are on their way home, so it answers `TRYAGAIN` and changes nothing; so do
/// a purchase and an add of a new token (a retry of a token it counted replays at once). Once
/// the fold lands (here on a server restored from the dumps,
/// which does not hold credits), the holder sends the refund home: its error names the add,
/// which gives the units back there once; the holder itself still changes nothing, and passes
/// the purchase and the add on (the folded-back error).
#[test]
fn a_folding_holder_holds_refunds_and_new_tokens_until_its_fold_lands_then_sends_refunds_home() {
    let held = Server::start_with(&[], &["debug-hold-credits", "yes"]);
    let mut c = held.conn();
    let (holders, total) = spread_with_values(&mut c, "hot", 4);
    let sold = c.cmd(&["CTR.ADD", &holders[3], "-3", "TOKEN", "order-1"]);
    assert_eq!(sold, Value::Int(1));
    let restocked = c.cmd(&["CTR.ADD", &holders[3], "5", "TOKEN", "restock-1"]);
    assert_eq!(restocked, Value::Int(6));
    let total = total - 3 + 5;
    names(&c.q("CTR.SPREAD hot 2"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.cmd(&["CTR.ADD", &holders[3], "0"]).is_error() {
        assert!(Instant::now() < deadline, "never sealed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let refund = |c: &mut Conn| c.cmd(&["CTR.REFUND", &holders[3], "TOKEN", "order-1"]);
    let digest = c.cmd(&["DEBUG", "DIGEST-VALUE", &holders[3]]);
    // Both wait in the server (the credit is held: up to ctr.purchase-wait-ms), then answer.
    let waited = |s: &Server| {
        s.info_field("ctr", "ctr_waits_past_bound")
            .parse()
            .unwrap_or(0)
    };
    let past = waited(&held);
    let waits = refund(&mut c).error();
    assert!(
        waits.starts_with("TRYAGAIN refund awaits a fold"),
        "{waits}"
    );
    assert_eq!(waited(&held), past + 1, "the refund waited in the server");
    // A purchase of a token it does not know waits too: passed on now, it could be granted
    // further on and, by a promoted replica without the seal, here as well.
    let purchase = [
        "CTR.DECRFLOOR",
        holders[3].as_str(),
        "1",
        "TOKEN",
        "order-2",
    ];
    let waits = c.cmd(&purchase).error();
    assert!(waits.starts_with("TRYAGAIN budget in flight"), "{waits}");
    assert!(waits.contains("waits for its fold to land"), "{waits}");
    assert_eq!(waited(&held), past + 2, "the purchase waited in the server");
    // So does an add of a new token (a restock whose retry a stale holder list could send
    // back here), while a retry of one it counted replays at once.
    let restock = |c: &mut Conn, token: &str| c.cmd(&["CTR.ADD", &holders[3], "5", "TOKEN", token]);
    let waits = restock(&mut c, "restock-2").error();
    assert!(waits.starts_with("TRYAGAIN add awaits a fold"), "{waits}");
    assert_eq!(waited(&held), past + 3, "the add waited in the server");
    // A retry replies the current value: the sealed holder's units are on their way home.
    assert_eq!(
        restock(&mut c, "restock-1"),
        Value::Int(0),
        "a retry changes nothing"
    );
    assert_eq!(waited(&held), past + 3, "without waiting");
    // A copy would be a counter that gives back, on a refund, units it never had: refused.
    let copy = c.cmd(&["COPY", &holders[3], "copied"]).error();
    assert!(copy.contains("failed to copy"), "{copy}");
    assert_eq!(c.cmd(&["EXISTS", "copied"]), Value::Int(0));
    assert_eq!(c.cmd(&["DEBUG", "DIGEST-VALUE", &holders[3]]), digest);
    assert_eq!(c.q("CTR.GET hot").int(), total);

    let free = Server::start();
    let mut f = free.conn();
    move_keys(&mut c, &mut f, &holders);
    wait_folded(&mut f, "hot");
    let sent_home = refund(&mut f).error();
    let prefix = "ERR refund after a fold: the grant's 3 units went home with the fold; \
                  give them back there, once: ";
    let add = sent_home.strip_prefix(prefix).unwrap_or_default();
    assert!(
        add.starts_with("CTR.ADD hot 3 TOKEN ctr-refund:"),
        "{sent_home}"
    );
    assert_eq!(
        f.q("CTR.GET hot").int(),
        total,
        "the holder changed nothing"
    );
    let words: Vec<&str> = add.split(' ').collect();
    let home_value = f.cmd(&words).int();
    assert_eq!(f.cmd(&words).int(), home_value, "a retry replays");
    assert_eq!(f.q("CTR.GET hot").int(), total + 3);
    assert_eq!(refund(&mut f).error(), sent_home);
    let passed = f.cmd(&purchase).error();
    assert!(
        passed.starts_with("ERR this key was a spread counter holder"),
        "{passed}"
    );
    let passed = restock(&mut f, "restock-2").error();
    assert!(
        passed.starts_with("ERR this key was a spread counter holder"),
        "{passed}"
    );
    assert_eq!(
        restock(&mut f, "restock-1"),
        Value::Int(0),
        "still changes nothing"
    );
    assert_eq!(f.q("CTR.GET hot").int(), total + 3);
    let copy = f.cmd(&["COPY", &holders[3], "copied"]).error();
    assert!(copy.contains("failed to copy"), "landed: {copy}");
}

/// On one server a shrink is all or nothing: a holder that cannot be folded now (another
/// type under its name, or units the home cannot take without overflow) refuses the shrink
/// with that error, and nothing changes, so no fold is left to finish in the background.
#[test]
fn a_shrink_that_cannot_fold_every_holder_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let (holders, total) = spread_with_values(&mut c, "views", 4);
    let before = c.cmd(&["DEBUG", "DIGEST-VALUE", "views"]);

    assert_eq!(
        c.cmd(&["SET", &holders[3], "not a counter"]),
        Value::Simple("OK".into())
    );
    let e = c.q("CTR.SPREAD views 2").error();
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(
        names(&c.q("CTR.SPREAD views 4")),
        holders,
        "the holders stay"
    );
    assert_eq!(c.cmd(&["DEBUG", "DIGEST-VALUE", "views"]), before);
    assert_eq!(
        c.cmd(&["CTR.ADD", &holders[2], "1"]),
        Value::Int(4),
        "not sealed"
    );

    c.cmd(&["DEL", &holders[3]]);
    c.cmd(&["CTR.ADD", &holders[3], &i64::MAX.to_string()]);
    let e = c.q("CTR.SPREAD views 1").error();
    assert!(e.contains("overflow"), "{e}");
    assert_eq!(names(&c.q("CTR.SPREAD views 4")), holders);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST-VALUE", "views"]), before);

    c.cmd(&["CTR.ADD", &holders[3], &(-i64::MAX).to_string()]);
    assert_eq!(names(&c.q("CTR.SPREAD views 1")), vec!["views"]);
    assert_eq!(c.q("CTR.GET views"), Value::Int(total - 4 + 1));
}

/// A home's state once its listing is full: 2,048 entries of 24 bytes (spread id 8, index 1,
/// attempt 2, two times of 6 and a flag), and 2 KB for the rest.
const LISTING_BOUND: usize = 2_048 * 24 + 2_048;

/// The bytes of a key's DUMP. A test that bounds a state with it runs its server with
/// `--rdbcompression no`: LZF packs the listing's times better the closer they are, so a
/// compressed size follows the machine's speed (CI saw 13,725 to 14,492 bytes for the same
/// state), not the state's.
fn dump_len(c: &mut Conn, key: &str) -> usize {
    match c.cmd(&["DUMP", key]) {
        Value::Bulk(b) => b.len(),
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// Issue 23, item 3: every folded holder used to leave an entry in its home's inbox for ever;
/// past 65,536 of them every fold credit was refused ("too many givers") and the shrink
/// failed (about 950 cycles of 70 holders here; before, the home's DUMP grew by about 3 KB a
/// cycle). A spread shrunk to 1 whose folds have all landed is retired now: its holders'
/// entries go and the home keeps its id only (the last 64). 1,000 cycles: every shrink
/// completes, the total is exact, the home's state stops growing (at the listing's bound).
#[test]
fn a_thousand_grow_and_shrink_cycles_never_stall_a_fold_and_the_home_stays_small() {
    let server = Server::start_with(&["--rdbcompression", "no"], &[]);
    let mut c = server.conn();
    let (cycles, holders) = (1_000, 70);
    let mut sizes = Vec::new();
    for cycle in 0..cycles {
        let spread = names(&c.cmd(&["CTR.SPREAD", "cycling", &holders.to_string()]));
        assert_eq!(spread.len(), holders, "cycle {cycle}");
        // One unit a cycle, on the home or on one of its holders.
        c.cmd(&["CTR.ADD", &spread[cycle % holders], "1"]).int();
        match c.cmd(&["CTR.SPREAD", "cycling", "1"]) {
            Value::Array(kept) => assert_eq!(kept.len(), 1, "cycle {cycle}"),
            other => panic!("cycle {cycle}: the shrink failed: {other:?}"),
        }
        assert!(
            info_field(&mut c, "cycling", "leaving").is_none_or(|l| l.array().is_empty()),
            "cycle {cycle}: a fold did not complete"
        );
        if cycle % 100 == 99 {
            sizes.push(dump_len(&mut c, "cycling"));
        }
    }
    assert_eq!(c.q("CTR.GET cycling"), Value::Int(cycles as i64));
    common::note(&format!("home DUMP bytes every 100 cycles: {sizes:?}"));
    let (first, last) = (sizes[0], *sizes.last().unwrap());
    assert!(last <= first + 16, "the home's state grew: {sizes:?}");
    // Bounded by the listing's 2,048 entries (the lists of the token window, for purchases'
    // retries: `counter::listing`), full after 30 cycles of 70 holders; 1.2 KB without it.
    assert!(last < LISTING_BOUND, "the home's state: {last} bytes");
    // The state survives a reload, and a folded name is still never reused.
    c.q("DEBUG RELOAD");
    assert_eq!(c.q("CTR.GET cycling"), Value::Int(cycles as i64));
    assert_eq!(dump_len(&mut c, "cycling"), last);
}

/// Bytes in the server's AOF files (the base and the increments).
fn aof_bytes(server: &Server) -> u64 {
    std::fs::read_dir(server.dir.join("appendonlydir"))
        .expect("an AOF folder")
        .map(|e| e.expect("an AOF file").metadata().expect("its size").len())
        .sum()
}

/// Issue 23, finding 2: every step of a fold (the home's shrink, each holder's seal, each
/// credit, each acknowledgement) was replicated as the whole state of the key it wrote, so a
/// home with a 1 KB name and 256 holders wrote about 70 MB to the AOF for one `CTR.SPREAD home
/// 1` (each of the 256 credits carried the home's whole holder and inbox lists). Each step is
/// replicated as what it did now (`CTR.STEP`): the shrink writes less than 10 times the
/// home's state, and a replica and the AOF replay every step to the master's state.
#[test]
fn a_shrink_of_256_holders_writes_to_the_aof_what_changed_not_the_whole_home() {
    let mut server = Server::start_with(
        &[
            "--appendonly",
            "yes",
            "--aof-use-rdb-preamble",
            "no",
            "--auto-aof-rewrite-percentage",
            "0",
        ],
        &[],
    );
    let replica = server.start_replica();
    let mut c = server.conn();
    let home = format!("fold:{}", "n".repeat(1019));
    assert_eq!(home.len(), 1024);
    let (holders, total) = spread_with_values(&mut c, &home, 257);
    assert_eq!(holders.len(), 257);
    // DUMP compresses the holder names (which repeat the home name): the state's size is
    // what the home takes in memory.
    let dump = dump_len(&mut c, &home);
    let state = c.cmd(&["MEMORY", "USAGE", &home]).int() as u64;
    let before = aof_bytes(&server);
    assert_eq!(
        names(&c.cmd(&["CTR.SPREAD", &home, "1"])),
        vec![home.clone()]
    );
    wait_folded(&mut c, &home);
    assert_eq!(c.cmd(&["CTR.GET", &home]).int(), total);
    let written = aof_bytes(&server) - before;
    common::note(&format!(
        "shrink of 256 holders, 1 KB home name: {written} AOF bytes; home MEMORY USAGE {state} \
         bytes, DUMP {dump}"
    ));
    assert!(
        written <= 10 * state,
        "the shrink wrote {written} AOF bytes for a home of {state}"
    );

    // Every step replays to the master's state: on the replica, and from the AOF.
    server.wait_replicas(1);
    let on_master = digests(&mut c, &holders);
    assert_eq!(digests(&mut replica.conn(), &holders), on_master, "replica");
    server.restart();
    assert_eq!(digests(&mut server.conn(), &holders), on_master, "AOF load");
}

/// Issue 23, the inbox: spread/shrink cycles that keep the spread id (8 -> 3 -> 8 holders)
/// left one inbox entry per folded holder in the home for ever (a spread is retired only once
/// shrunk to 1); about 64 cycles of 1,024 holders would have filled the inbox and stalled every
/// fold ("too many givers"). A folded holder of the current spread is remembered by its place
/// (its index's highest folded attempt) once no holder at that index is older: 1,000 cycles
/// keep the home's state bounded, every fold completes, the total is exact.
#[test]
fn a_thousand_shrinks_that_keep_the_spread_id_keep_the_inbox_bounded() {
    let server = Server::start_with(&["--rdbcompression", "no"], &[]);
    let mut c = server.conn();
    let (cycles, wide, narrow) = (1_000, 8, 3);
    let mut sizes = Vec::new();
    let first = names(&c.cmd(&["CTR.SPREAD", "keeping", &wide.to_string()]));
    for cycle in 0..cycles {
        let spread = names(&c.cmd(&["CTR.SPREAD", "keeping", &wide.to_string()]));
        assert_eq!(spread.len(), wide, "cycle {cycle}");
        assert_eq!(
            spread[..narrow],
            first[..narrow],
            "the id and the first holders stay"
        );
        c.cmd(&["CTR.ADD", &spread[wide - 1 - cycle % (wide - narrow)], "1"])
            .int();
        match c.cmd(&["CTR.SPREAD", "keeping", &narrow.to_string()]) {
            Value::Array(kept) => assert_eq!(kept.len(), narrow, "cycle {cycle}"),
            other => panic!("cycle {cycle}: the shrink failed: {other:?}"),
        }
        assert!(
            info_field(&mut c, "keeping", "leaving").is_none_or(|l| l.array().is_empty()),
            "cycle {cycle}: a fold did not complete"
        );
        if cycle % 100 == 99 {
            sizes.push(dump_len(&mut c, "keeping"));
        }
    }
    assert_eq!(c.q("CTR.GET keeping"), Value::Int(cycles as i64));
    common::note(&format!(
        "home DUMP bytes every 100 cycles (id kept): {sizes:?}"
    ));
    // The listing (`counter::listing`) fills up to its 2,048 entries (5 a cycle here, so by
    // about cycle 410), then stays; without it the state stays under 2 KB. Its attempts'
    // varints are 2 bytes from attempt 128 to 16,383, its times' 6 bytes for centuries.
    let (filled, last) = (sizes[5], *sizes.last().unwrap());
    assert!(last <= filled + 16, "the home's state grew: {sizes:?}");
    assert!(last < LISTING_BOUND, "the home's state: {last} bytes");
    c.q("DEBUG RELOAD");
    assert_eq!(c.q("CTR.GET keeping"), Value::Int(cycles as i64));
    assert_eq!(dump_len(&mut c, "keeping"), last);
}

/// `CTR.FLOOR` on a home whose shrink is still folding holders back (credits held by the
/// debug hook) is refused with a retryable error and changes nothing; once the folds are in
/// (the keys restored on a server that applies credits), the floor is set on the whole total
/// and a sale sells exactly the stock above it. Before: the floor was accepted on the home's
/// own units while the folds' units were in flight.
#[test]
fn a_floor_set_while_holders_fold_back_waits_for_the_folds() {
    let held = Server::start_with(&[], &["debug-hold-credits", "yes"]);
    let mut c = held.conn();
    let home = "sale:stock";
    let (holders, total) = spread_with_values(&mut c, home, 4);
    c.cmd(&["CTR.ADD", home, &(300 - total).to_string()]);
    assert_eq!(c.cmd(&["CTR.GET", home]), Value::Int(300));
    assert_eq!(names(&c.cmd(&["CTR.SPREAD", home, "1"])), vec![home]);
    assert!(!info_field(&mut c, home, "leaving")
        .unwrap()
        .array()
        .is_empty());
    let digest = c.cmd(&["DEBUG", "DIGEST-VALUE", home]);
    let refused = c.cmd(&["CTR.FLOOR", home, "50"]).error();
    assert!(refused.starts_with("TRYAGAIN units in flight"), "{refused}");
    assert_eq!(info_field(&mut c, home, "floor"), Some(Value::Nil));
    assert_eq!(
        c.cmd(&["DEBUG", "DIGEST-VALUE", home]),
        digest,
        "nothing changed"
    );
    let free = Server::start();
    let mut f = free.conn();
    move_keys(&mut c, &mut f, &holders);
    wait_folded(&mut f, home);
    assert_eq!(
        f.cmd(&["CTR.FLOOR", home, "50"]),
        Value::Simple("OK".into())
    );
    let mut sold = 0;
    while f.cmd(&["CTR.DECRFLOOR", home, "1"]) != Value::Nil {
        sold += 1;
        assert!(sold <= 300, "sold past the stock");
    }
    assert_eq!(sold, 250);
    assert_eq!(f.cmd(&["CTR.GET", home]), Value::Int(50));
}
