//! The persistence and replication matrix for CTR counters: DEBUG RELOAD, RDB restart, AOF
//! rewrite (no RDB preamble) + restart, AOF replay, replicas, DUMP/RESTORE, COPY, MEMORY USAGE,
//! and forged RESTORE payloads with valid CRCs.

mod common;

use common::{
    ivarint, lists_holders, seal_dump, sharded_state, unseal_dump, uvarint, Conn, DumpFrame,
    Server, Value,
};

/// Writes counters that exercise every representation: inline, boxed extremes, sharded, with TTL.
fn populate(c: &mut Conn) -> Vec<String> {
    c.q("CTR.ADD cold 42");
    c.q("CTR.ADD negative -1000000");
    c.cmd(&["CTR.ADD", "max", &i64::MAX.to_string()]);
    c.cmd(&["CTR.ADD", "min", &i64::MIN.to_string()]);
    c.cmd(&["CTR.ADD", "edge", "4611686018427387904"]);
    assert_eq!(
        c.cmd(&[&b"CTR.SETSTATE"[..], b"sharded", &sharded_state()]),
        Value::Simple("OK".into())
    );
    c.q("CTR.ADD ttl 7");
    c.q("PEXPIRE ttl 600000");
    for i in 0..50 {
        c.cmd(&["CTR.ADD", &format!("many:{i}"), &(i * 37 - 500).to_string()]);
    }
    // Every kind of state a counter can hold: tokens, a floor with budgets and a ledger (a
    // granted and a refused entry), and a bucket history with a watermark.
    c.q("CTR.ADD tokened 5 TOKEN t1");
    c.q("CTR.ADD tokened 5 TOKEN t2");
    c.q("CTR.ADD stock 10");
    c.q("CTR.FLOOR stock 2");
    c.q("CTR.DECRFLOOR stock 3 TOKEN o1");
    c.q("CTR.DECRFLOOR stock 30 TOKEN o2");
    c.q("CTR.RECONCILE recon 0");
    c.q("CTR.ADD recon 4");
    let t = c.q("TIME").array();
    let now: i64 = t[0].text().parse::<i64>().unwrap() * 1000;
    let w = now.div_euclid(60_000) * 60_000; // the default 60 s buckets
    c.q("CTR.ADD recon 1");
    let repair = c.cmd(&["CTR.RECONCILE", "recon", "3", "AT", &w.to_string()]);
    assert_eq!(repair.array().len(), 2, "{repair:?}");
    // A history started by START (no watermark yet), with an add in it.
    c.q("CTR.RECONCILE started START");
    c.q("CTR.ADD started 2");
    let mut keys: Vec<String> = [
        "cold", "negative", "max", "min", "edge", "sharded", "ttl", "tokened", "stock", "recon",
        "started",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    keys.extend((0..50).map(|i| format!("many:{i}")));
    // A spread counter: its holder names are state of the home key; a holder is a counter.
    c.q("CTR.ADD spread 3");
    let holders = c.q("CTR.SPREAD spread 4").array();
    assert_eq!(holders.len(), 4);
    c.cmd(&[b"CTR.ADD", holders[2].bytes().as_slice(), b"4"]);
    keys.push("spread".into());
    keys.push(holders[2].text());
    // A floored spread counter: the spread floor is state of the home (section 13), each
    // holder a floored counter with a ledger.
    c.q("CTR.ADD fstock 20");
    c.q("CTR.FLOOR fstock 2");
    let fholders = c.q("CTR.SPREAD fstock 3").array();
    c.cmd(&[
        b"CTR.DECRFLOOR",
        fholders[1].bytes().as_slice(),
        b"4",
        b"TOKEN",
        b"f1",
    ]);
    keys.extend(fholders.iter().map(Value::text));
    // A ceiled spread counter with a floor too: the spread's ceiling is state of the home
    // (section 26), each member a counter with a ceiling (its share) and a floor.
    c.q("CTR.ADD cstock 20");
    c.q("CTR.CEIL cstock 50");
    c.q("CTR.FLOOR cstock 0");
    let cholders = c.q("CTR.SPREAD cstock 3").array();
    let holder = cholders[2].bytes();
    let token_add = [&b"CTR.ADD"[..], &holder, b"4", b"TOKEN", b"c1"];
    assert_eq!(c.cmd(&token_add), Value::Int(4));
    keys.extend(cholders.iter().map(Value::text));
    keys
}

/// (key, value, digest) for each key.
fn snapshot(c: &mut Conn, keys: &[String]) -> Vec<(String, i64, Vec<u8>)> {
    keys.iter()
        .map(|k| {
            let v = c.cmd(&["CTR.GET", k]).int();
            let d = c.cmd(&["DEBUG", "DIGEST-VALUE", k]).array()[0].bytes();
            (k.clone(), v, d)
        })
        .collect()
}

fn assert_ttl_kept(c: &mut Conn) {
    let ttl = c.q("PTTL ttl").int();
    assert!(ttl > 500_000 && ttl <= 600_000, "ttl {ttl}");
}

#[test]
fn debug_reload_keeps_every_counter() {
    let server = Server::start();
    let mut c = server.conn();
    let keys = populate(&mut c);
    let before = snapshot(&mut c, &keys);
    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    assert_eq!(snapshot(&mut c, &keys), before);
    assert_ttl_kept(&mut c);
    assert_eq!(c.q("CTR.GET sharded"), Value::Int(6));
}

#[test]
fn restart_from_rdb_keeps_every_counter() {
    let mut server = Server::start();
    let mut c = server.conn();
    let keys = populate(&mut c);
    let before = snapshot(&mut c, &keys);
    let db_digest = c.q("DEBUG DIGEST");
    server.restart_saving();
    let mut c = server.conn();
    assert_eq!(snapshot(&mut c, &keys), before);
    assert_eq!(c.q("DEBUG DIGEST"), db_digest);
    assert_ttl_kept(&mut c);
}

#[test]
fn aof_rewrite_without_preamble_then_restart() {
    let mut server = Server::start_with(&common::AOF_WITHOUT_PREAMBLE, &[]);
    let mut c = server.conn();
    let mut keys = populate(&mut c);
    server.rewrite_aof();
    // Writes after the rewrite land in the incremental file and replay on top of it.
    c.q("CTR.ADD cold 8");
    c.q("CTR.ADD after 3");
    keys.push("after".into());
    // START replayed from the incremental file.
    c.q("CTR.RECONCILE after-start START");
    c.q("CTR.ADD after-start 3");
    keys.push("after-start".into());
    let before = snapshot(&mut c, &keys);
    let base = std::fs::read_dir(server.dir.join("appendonlydir"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains(".base.aof"))
        .expect("a base AOF file");
    let base_text = String::from_utf8_lossy(&std::fs::read(&base).unwrap()).into_owned();
    assert!(
        base_text.contains("CTR.SETSTATE"),
        "the rewrite used the restore command"
    );
    server.restart();
    let mut c = server.conn();
    assert_eq!(snapshot(&mut c, &keys), before);
    assert_ttl_kept(&mut c);
}

#[test]
fn aof_replay_of_commands_reaches_the_same_state() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"], &[]);
    let mut c = server.conn();
    let keys = populate(&mut c);
    let before = snapshot(&mut c, &keys);
    server.restart();
    let mut c = server.conn();
    assert_eq!(snapshot(&mut c, &keys), before);
}

#[test]
fn replicas_hold_the_same_counters() {
    let master = Server::start();
    let mut m = master.conn();
    let mut keys = populate(&mut m); // reaches the replica by full sync (RDB)
    let replica = master.start_replica();
    for i in 0..20 {
        m.cmd(&["CTR.ADD", "streamed", &i.to_string()]); // reaches it by the command stream
    }
    m.q("CTR.ADD cold -50");
    // Growing a spread counter reaches the replica as the resulting state, and so does
    // spreading a floored counter (the home and every holder).
    assert_eq!(m.q("CTR.SPREAD spread 6").array().len(), 6);
    m.q("CTR.ADD fresh-stock 9");
    m.q("CTR.FLOOR fresh-stock 1");
    let fresh = m.q("CTR.SPREAD fresh-stock 3").array();
    keys.extend(fresh.iter().map(Value::text));
    // And a ceiled one: every member's share of the ceiling, then an add that fills one.
    m.q("CTR.ADD fresh-cap 9");
    m.q("CTR.CEIL fresh-cap 30");
    let capped = m.q("CTR.SPREAD fresh-cap 3").array();
    assert_eq!(
        m.cmd(&[b"CTR.ADD", capped[1].bytes().as_slice(), b"7"]),
        Value::Int(7)
    );
    keys.extend(capped.iter().map(Value::text));
    keys.push("streamed".into());
    master.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(snapshot(&mut r, &keys), snapshot(&mut m, &keys));
    assert_eq!(r.q("DEBUG DIGEST"), m.q("DEBUG DIGEST"));
    assert_eq!(r.q("CTR.GET streamed"), Value::Int(190));
    assert!(r.q("CTR.ADD x 1").error().starts_with("READONLY"));
}

#[test]
fn dump_restore_and_copy_are_exact_and_independent() {
    let server = Server::start();
    let mut c = server.conn();
    let keys = populate(&mut c);
    for key in &keys {
        let payload = c.cmd(&["DUMP", key]).bytes();
        let copy = format!("restored:{key}");
        // The digest covers the TTL too, so restore with the same one.
        let ttl = c.cmd(&["PTTL", key]).int().max(0).to_string();
        assert_eq!(
            c.cmd(&[b"RESTORE", copy.as_bytes(), ttl.as_bytes(), &payload]),
            Value::Simple("OK".into())
        );
        let copied = format!("copied:{key}");
        if key == "spread" || key == "fstock" || key == "cstock" {
            // A spread home restored under another name while it lives is a copy of its own
            // units, without the holders (docs/CLUSTER.md).
            let own = c.cmd(&["CTR.INFO", key]).field("holder_values").array()[0].clone();
            assert_eq!(c.cmd(&["CTR.GET", &copy]), own, "{key}");
            assert!(!lists_holders(&c.cmd(&["CTR.INFO", &copy])), "{key}");
            // Nor is it ever copied: the copy would share its holders.
            let e = c.cmd(&["COPY", key, &copied]).error();
            assert!(e.contains("module key failed to copy"), "{e}");
            continue;
        }
        assert_eq!(c.cmd(&["CTR.GET", &copy]), c.cmd(&["CTR.GET", key]));
        assert_eq!(
            c.cmd(&["DEBUG", "DIGEST-VALUE", &copy]).array()[0],
            c.cmd(&["DEBUG", "DIGEST-VALUE", key]).array()[0]
        );
        assert_eq!(c.cmd(&["COPY", key, &copied]), Value::Int(1));
        assert_eq!(c.cmd(&["CTR.GET", &copied]), c.cmd(&["CTR.GET", key]));
    }
    // A copy is deep: changing it leaves the original alone.
    c.q("CTR.ADD copied:sharded 10");
    assert_eq!(c.q("CTR.GET sharded"), Value::Int(6));
    assert_eq!(c.q("CTR.GET copied:sharded"), Value::Int(16));
}

#[test]
fn memory_usage_reflects_the_representation() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD small 1");
    c.cmd(&["CTR.ADD", "big", &i64::MAX.to_string()]);
    c.cmd(&[&b"CTR.SETSTATE"[..], b"sharded", &sharded_state()]);
    let small = c.q("MEMORY USAGE small").int();
    let big = c.q("MEMORY USAGE big").int();
    let sharded = c.q("MEMORY USAGE sharded").int();
    assert!(small < big, "small {small} big {big}");
    if server.memory_usage_is_module_report_only() {
        assert_eq!(small, 0, "an inline counter allocates nothing of its own");
    } else {
        assert!(small > 0, "the key and object header count");
    }
    assert!(sharded > big, "sharded {sharded} big {big}");
}

fn blob(sections: &[&[u8]]) -> Vec<u8> {
    let mut b = vec![1u8];
    for s in sections {
        b.extend_from_slice(s);
    }
    b.push(0);
    b
}

fn value_section(v: i64) -> Vec<u8> {
    let mut s = vec![1];
    s.extend(ivarint(v));
    s
}

fn shards_section(count: u64, values: &[i64]) -> Vec<u8> {
    let mut s = vec![2];
    s.extend(uvarint(count));
    for v in values {
        s.extend(ivarint(*v));
    }
    s
}

#[test]
fn forged_restore_payloads_are_refused_and_the_server_keeps_serving() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD frame 1");
    let frame = DumpFrame::of_key(&mut c, "frame");

    // Sanity: the forging itself is right, a well-formed payload restores.
    let good = frame.with_blob(&blob(&[&value_section(6), &shards_section(3, &[1, 2, 3])]));
    assert_eq!(
        c.cmd(&[&b"RESTORE"[..], b"good", b"0", &good]),
        Value::Simple("OK".into())
    );
    assert_eq!(c.q("CTR.GET good"), Value::Int(6));

    let good_blob = blob(&[&value_section(6), &shards_section(3, &[1, 2, 3])]);
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("unknown format", {
            let mut b = good_blob.clone();
            b[0] = 9;
            frame.with_blob(&b)
        }),
        (
            "truncated blob",
            frame.with_blob(&good_blob[..good_blob.len() - 1]),
        ),
        ("empty blob", frame.with_blob(&[])),
        ("trailing bytes", {
            let mut b = good_blob.clone();
            b.push(0);
            frame.with_blob(&b)
        }),
        (
            "unknown section",
            frame.with_blob(&blob(&[&value_section(1), &[200, 0]])),
        ),
        ("missing value", frame.with_blob(&blob(&[]))),
        (
            "shards do not sum to the value",
            frame.with_blob(&blob(&[&value_section(7), &shards_section(3, &[1, 2, 3])])),
        ),
        (
            "huge shard count",
            frame.with_blob(&blob(&[&value_section(0), &shards_section(1 << 40, &[])])),
        ),
        (
            "shard count over the bound",
            frame.with_blob(&blob(&[
                &value_section(0),
                &shards_section(5000, &vec![0; 5000]),
            ])),
        ),
        (
            "shards overflow",
            frame.with_blob(&blob(&[
                &value_section(0),
                &shards_section(2, &[i64::MAX, 1]),
            ])),
        ),
        ("unknown encoding version", frame.with_encver(2, &good_blob)),
        ("encoding version 0", frame.with_encver(0, &good_blob)),
    ];
    // The module opcode changed from STRING to UINT: Redis's framing no longer matches.
    let mut wrong_opcode = unseal_dump(&good).0;
    wrong_opcode[10] = 2;
    cases.push(("wrong opcode", seal_dump(&wrong_opcode, frame.rdb_version)));
    // Cut inside the module data (before the EOF opcode), CRC fixed.
    let body = unseal_dump(&good).0;
    cases.push((
        "truncated framing",
        seal_dump(&body[..body.len() - 3], frame.rdb_version),
    ));

    for (name, payload) in cases {
        let reply = c.cmd(&[&b"RESTORE"[..], b"forged", b"0", &payload]);
        assert!(reply.is_error(), "{name}: {reply:?}");
        assert!(server.alive(), "{name}: server died");
        assert_eq!(
            c.q("EXISTS forged"),
            Value::Int(0),
            "{name}: nothing stored"
        );
    }
    assert_eq!(c.q("CTR.GET good"), Value::Int(6));
}

#[test]
fn setstate_validates_before_changing_anything() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD k 5");
    let bad = blob(&[&value_section(7), &shards_section(2, &[1, 2])]);
    let err = c.cmd(&[&b"CTR.SETSTATE"[..], b"k", &bad]).error();
    assert!(err.starts_with("ERR invalid CTR state"), "{err}");
    assert_eq!(c.q("CTR.GET k"), Value::Int(5));
    c.q("SET s x");
    let good = blob(&[&value_section(3)]);
    assert!(c
        .cmd(&[&b"CTR.SETSTATE"[..], b"s", &good])
        .error()
        .starts_with("WRONGTYPE"));
    assert_eq!(
        c.cmd(&[&b"CTR.SETSTATE"[..], b"k", &good]),
        Value::Simple("OK".into())
    );
    assert_eq!(c.q("CTR.GET k"), Value::Int(3));
}
