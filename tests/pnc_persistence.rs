//! The persistence and replication matrix for PN-Counters: DEBUG RELOAD, RDB restart, AOF
//! rewrite (no RDB preamble) + restart, AOF replay, replicas, DUMP/RESTORE, COPY, MEMORY USAGE,
//! forged RESTORE payloads with valid CRCs, and an empty RDB that loads without the module.

mod common;

use common::pnc::{state_blob, stored_blob, varint};
use common::{seal_dump, unseal_dump, Conn, DumpFrame, Server, Value};

const MAX: u64 = i64::MAX as u64;

fn with_id(args: &[&str], id: &str) -> Server {
    Server::start_with(args, &["replica-id", id])
}

fn merge(c: &mut Conn, key: &str, blob: &[u8]) -> Value {
    c.cmd(&[b"PNC.MERGE", key.as_bytes(), blob])
}

/// PN-counters in every shape: local only, several replicas, extreme totals, empty, merged
/// only (no home record), reset, with a TTL, and many small ones.
fn populate(c: &mut Conn) -> Vec<String> {
    c.q("PNC.ADD one 5");
    c.q("PNC.ADD multi 10");
    c.q("PNC.ADD multi -3");
    merge(c, "multi", &state_blob(&[("b", 4, 1), ("c-9.x", 0, 2)]));
    merge(c, "extreme", &state_blob(&[("b", MAX, 0), ("c", 0, MAX)]));
    c.cmd(&["PNC.ADD", "extreme", &i64::MAX.to_string()]);
    merge(c, "empty", &state_blob(&[]));
    merge(c, "merged-only", &state_blob(&[("z", 300, 70_000)]));
    c.q("PNC.ADD cleared 8");
    c.q("PNC.CLEAR cleared");
    c.q("PNC.ADD ttl 7");
    c.q("PEXPIRE ttl 600000");
    for i in 0..30 {
        c.cmd(&["PNC.ADD", &format!("many:{i}"), &(i * 37 - 500).to_string()]);
    }
    // Bounded counters (issue 36): a floor, rights given away, a token ledger with a grant
    // and a refusal; one created by its floor.
    c.q("PNC.ADD stock 100");
    assert_eq!(c.q("PNC.FLOOR stock 0").text(), "OK");
    assert_eq!(c.q("PNC.DECRFLOOR stock 7 TOKEN o1").int(), 93);
    assert_eq!(c.q("PNC.GIVE stock eu 20").int(), 73);
    assert_eq!(c.q("PNC.DECRFLOOR stock 1000 TOKEN o2"), Value::Nil);
    assert_eq!(c.q("PNC.FLOOR quota -50").text(), "OK");
    assert_eq!(c.q("PNC.DECRFLOOR quota 5").int(), -5);
    let mut keys: Vec<String> = [
        "one",
        "multi",
        "extreme",
        "empty",
        "merged-only",
        "cleared",
        "ttl",
        "stock",
        "quota",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    keys.extend((0..30).map(|i| format!("many:{i}")));
    keys
}

/// (key, state blob, value, home, digest) for each key.
type Snapshot = Vec<(String, Vec<u8>, i64, Value, Vec<u8>)>;

fn snapshot(c: &mut Conn, keys: &[String]) -> Snapshot {
    keys.iter()
        .map(|k| {
            let state = c.cmd(&["PNC.STATE", k]).bytes();
            let value = c.cmd(&["PNC.GET", k]).int();
            let home = c.cmd(&["PNC.INFO", k]).field("home");
            let digest = c.cmd(&["DEBUG", "DIGEST-VALUE", k]).array()[0].bytes();
            (k.clone(), state, value, home, digest)
        })
        .collect()
}

fn replica_id(c: &mut Conn) -> Value {
    c.q("PNC.INFO any").field("replica-id")
}

fn assert_ttl_kept(c: &mut Conn) {
    let ttl = c.q("PTTL ttl").int();
    assert!(ttl > 500_000 && ttl <= 600_000, "ttl {ttl}");
}

#[test]
fn populated_values_are_what_they_claim() {
    let server = with_id(&[], "a");
    let mut c = server.conn();
    populate(&mut c);
    assert_eq!(c.q("PNC.GET multi"), Value::Int(10 - 3 + 4 - 1 - 2));
    assert_eq!(c.q("PNC.GET extreme"), Value::Int(i64::MAX));
    assert_eq!(c.q("PNC.GET cleared"), Value::Int(0));
    assert_eq!(c.q("PNC.INFO merged-only").field("home"), Value::Nil);
    assert_eq!(c.q("PNC.INFO one").field("home").text(), "a");
}

#[test]
fn debug_reload_keeps_every_counter_and_the_replica_id() {
    let server = with_id(&[], "a");
    let mut c = server.conn();
    let keys = populate(&mut c);
    let before = snapshot(&mut c, &keys);
    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    assert_eq!(snapshot(&mut c, &keys), before);
    assert_ttl_kept(&mut c);
    assert_eq!(replica_id(&mut c).text(), "a");
}

#[test]
fn restart_from_rdb_keeps_every_counter() {
    let mut server = with_id(&[], "a");
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
    let mut server = with_id(&common::AOF_WITHOUT_PREAMBLE, "a");
    let mut c = server.conn();
    let mut keys = populate(&mut c);
    server.rewrite_aof();
    // Writes after the rewrite land in the incremental file and replay on top of it.
    c.q("PNC.ADD one 8");
    c.q("PNC.ADD after -3");
    merge(&mut c, "multi", &state_blob(&[("b", 40, 1)]));
    keys.push("after".into());
    let before = snapshot(&mut c, &keys);
    assert!(
        aof_text(&server, ".base.aof").contains("PNC.SETSTATE"),
        "the rewrite used the restore command"
    );
    let incr = aof_text(&server, ".incr.aof");
    assert!(
        incr.contains("PNC.APPLY"),
        "the add that stamps a new key replicates as its effect"
    );
    assert!(
        incr.contains("PNC.ADD"),
        "an add to a key already stamped with the id in use replicates as sent"
    );
    server.restart();
    let mut c = server.conn();
    assert_eq!(snapshot(&mut c, &keys), before);
    assert_ttl_kept(&mut c);
    assert_eq!(replica_id(&mut c).text(), "a");
}

#[test]
fn aof_replay_of_commands_reaches_the_same_state() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"], &[]);
    let mut c = server.conn();
    let keys = populate(&mut c);
    let before = snapshot(&mut c, &keys);
    let id = replica_id(&mut c);
    assert!(id.text().starts_with("r-"));
    server.restart();
    let mut c = server.conn();
    assert_eq!(snapshot(&mut c, &keys), before);
    assert_eq!(
        replica_id(&mut c),
        id,
        "the random id came back from the AOF"
    );
}

#[test]
fn replicas_hold_the_same_counters() {
    let master = with_id(&[], "a");
    let mut m = master.conn();
    let mut keys = populate(&mut m); // reaches the replica by full sync (RDB)
    let replica = master.start_replica();
    for i in 0..20 {
        m.cmd(&["PNC.ADD", "streamed", &(i - 7).to_string()]); // by the command stream
    }
    m.q("PNC.CLEAR one");
    merge(&mut m, "multi", &state_blob(&[("d", 6, 0)]));
    keys.push("streamed".into());
    master.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(snapshot(&mut r, &keys), snapshot(&mut m, &keys));
    assert_eq!(r.q("DEBUG DIGEST"), m.q("DEBUG DIGEST"));
    assert_eq!(r.q("PNC.GET streamed"), Value::Int(190 - 140));
    assert_eq!(
        replica_id(&mut r).text(),
        "a",
        "a replica follows its master's id"
    );
}

/// The AOF files of a server whose names end with `suffix`, concatenated.
fn aof_files(server: &Server, suffix: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(server.dir.join("appendonlydir"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect()
}

fn aof_text(server: &Server, suffix: &str) -> String {
    aof_files(server, suffix)
        .iter()
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect()
}

fn key_state(c: &mut Conn, key: &str) -> (Value, Value, Value) {
    (
        c.cmd(&["PNC.STATE", key]),
        c.cmd(&["PNC.INFO", key]).field("home"),
        c.cmd(&["DEBUG", "DIGEST-VALUE", key]),
    )
}

#[test]
fn replayed_adds_follow_the_home_record_across_a_failover_that_moves_the_id() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut a = with_id(&aof, "us");
    let mut b = with_id(&aof, "us");
    b.conn()
        .cmd(&["REPLICAOF", "127.0.0.1", &a.port.to_string()]);
    b.wait_link_up();
    b.wait_persistence_idle();
    let mut ca = a.conn();
    // The first add stamps the key (PNC.APPLY), the next ones replicate as sent.
    for i in 0..10 {
        ca.cmd(&["PNC.ADD", "k", &(i * 7 - 30).to_string()]);
    }
    ca.q("PNC.ADD other 4");
    a.wait_replicas(1);
    let mut cb = b.conn();
    assert_eq!(key_state(&mut cb, "k"), key_state(&mut ca, "k"));

    // Failover: b becomes the primary, on a fresh id; a follows it.
    assert_eq!(cb.q("REPLICAOF NO ONE"), Value::Simple("OK".into()));
    let promoted = replica_id(&mut cb).text();
    assert!(promoted.starts_with("us."), "{promoted}");
    ca.cmd(&["REPLICAOF", "127.0.0.1", &b.port.to_string()]);
    a.wait_link_up();
    // After its full sync the replica rewrites its AOF; writes that reach it before the rewrite
    // starts land only in the new base (an RDB preamble), not as commands: wait for it.
    a.wait_persistence_idle();
    // The first add of the new primary restamps the key; the next ones replicate as sent again
    // and must land in the new slot on the replica, not in the home slot it had before.
    for i in 0..10 {
        cb.cmd(&["PNC.ADD", "k", &(i * 11 - 20).to_string()]);
    }
    cb.q("PNC.ADD fresh 2");
    b.wait_replicas(1);
    let slots = cb.q("PNC.INFO k").field("replicas").array();
    assert_eq!(slots.len(), 2, "the old id and the new one");
    assert_eq!(cb.q("PNC.INFO k").field("home").text(), promoted);
    let keys = ["k", "other", "fresh"];
    let on_b: Vec<_> = keys.iter().map(|k| key_state(&mut cb, k)).collect();
    let on_a: Vec<_> = keys.iter().map(|k| key_state(&mut ca, k)).collect();
    assert_eq!(on_a, on_b, "the replica holds the new primary's state");
    assert_eq!(ca.q("DEBUG DIGEST"), cb.q("DEBUG DIGEST"));

    // Both AOF files hold the verbatim form, and both replay to the same state.
    for server in [&a, &b] {
        let text = aof_text(server, ".aof");
        assert!(text.contains("PNC.ADD") && text.contains("PNC.APPLY"));
    }
    drop((ca, cb));
    a.restart();
    b.restart();
    let (mut ca, mut cb) = (a.conn(), b.conn());
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(key_state(&mut ca, k), on_b[i], "{k} after a's AOF replay");
        assert_eq!(key_state(&mut cb, k), on_b[i], "{k} after b's AOF replay");
    }
    assert_eq!(replica_id(&mut cb).text(), promoted);
}

/// A RESP command as the AOF holds it.
fn resp(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
    out
}

#[test]
fn an_aof_of_the_older_effect_form_replays_and_a_replayed_add_needs_a_home_record() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut server = with_id(&aof, "a");
    let mut c = server.conn();
    merge(&mut c, "merged", &state_blob(&[("z", 3, 0)]));
    drop(c);
    let incr = aof_files(&server, ".incr.aof").remove(0);
    let mut text = std::fs::read(&incr).unwrap();
    // What modules before the verbatim form wrote for every add: one PNC.APPLY each.
    for delta in ["5", "-2", "9"] {
        text.extend(resp(&["PNC.APPLY", "old", "a", "1", delta]));
    }
    // A verbatim add for a key without a home record: a stream that disagrees with the data.
    // The replay must not guess a slot.
    text.extend(resp(&["PNC.ADD", "merged", "5"]));
    std::fs::write(&incr, text).unwrap();
    server.restart();
    let mut c = server.conn();
    assert_eq!(c.q("PNC.STATE old").bytes(), state_blob(&[("a", 14, 2)]));
    assert_eq!(c.q("PNC.INFO old").field("home").text(), "a");
    assert_eq!(c.q("PNC.GET merged"), Value::Int(3));
    assert_eq!(c.q("PNC.INFO merged").field("home"), Value::Nil);
    // The next local add finds the old key stamped with the id in use: verbatim from then on.
    assert_eq!(c.q("PNC.ADD old 1"), Value::Int(13));
    assert!(aof_text(&server, ".incr.aof")
        .ends_with(&String::from_utf8(resp(&["PNC.ADD", "old", "1"])).unwrap()));
}

#[test]
fn replicas_of_a_random_id_master_hold_the_same_id_and_state() {
    let master = Server::start();
    let mut m = master.conn();
    m.q("PNC.ADD k 3");
    let replica = master.start_replica();
    m.q("PNC.ADD k 4");
    master.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(replica_id(&mut r), replica_id(&mut m));
    assert_eq!(r.q("DEBUG DIGEST-VALUE k"), m.q("DEBUG DIGEST-VALUE k"));
    assert_eq!(r.q("PNC.STATE k"), m.q("PNC.STATE k"));
}

#[test]
fn dump_restore_keeps_the_state_but_not_the_home_and_copy_is_exact_and_deep() {
    let server = with_id(&[], "a");
    let mut c = server.conn();
    let keys = populate(&mut c);
    for key in &keys {
        let payload = c.cmd(&["DUMP", key]).bytes();
        let restored = format!("restored:{key}");
        let ttl = c.cmd(&["PTTL", key]).int().max(0).to_string();
        assert_eq!(
            c.cmd(&[b"RESTORE", restored.as_bytes(), ttl.as_bytes(), &payload]),
            Value::Simple("OK".into())
        );
        assert_eq!(c.cmd(&["PNC.STATE", &restored]), c.cmd(&["PNC.STATE", key]));
        assert_eq!(c.cmd(&["PNC.GET", &restored]), c.cmd(&["PNC.GET", key]));
        // A restored value may come from another deployment: it carries no home record.
        assert_eq!(c.cmd(&["PNC.INFO", &restored]).field("home"), Value::Nil);
        let digest =
            |c: &mut Conn, k: &str| c.cmd(&["DEBUG", "DIGEST-VALUE", k]).array()[0].clone();
        let had_home = c.cmd(&["PNC.INFO", key]).field("home") != Value::Nil;
        assert_eq!(
            digest(&mut c, &restored) == digest(&mut c, key),
            !had_home,
            "{key}: the digest covers the home record"
        );
        let copied = format!("copied:{key}");
        assert_eq!(c.cmd(&["COPY", key, &copied]), Value::Int(1));
        assert_eq!(digest(&mut c, &copied), digest(&mut c, key), "{key}");
        assert_eq!(
            c.cmd(&["PNC.INFO", &copied]).field("home"),
            c.cmd(&["PNC.INFO", key]).field("home")
        );
    }
    // A copy is deep: changing it leaves the original alone.
    c.q("PNC.ADD copied:multi 100");
    assert_eq!(c.q("PNC.GET multi"), Value::Int(8));
    assert_eq!(c.q("PNC.GET copied:multi"), Value::Int(108));
    // Restoring does not change which id this deployment uses.
    assert_eq!(replica_id(&mut c).text(), "a");
}

#[test]
fn restore_of_a_foreign_value_never_changes_the_replica_id() {
    // A foreign deployment whose id has a high generation (it was renamed twice).
    let foreign = with_id(&[], "eu");
    let mut f = foreign.conn();
    f.q("PNC.ADD warmup 1");
    f.q("CONFIG SET ctr.replica-id eu2");
    f.q("CONFIG SET ctr.replica-id eu3");
    f.q("PNC.ADD k 5");
    assert_eq!(f.q("PNC.INFO k").field("home").text(), "eu3");
    let payload = f.q("DUMP k").bytes();
    let mut here = Server::start();
    let mut c = here.conn();
    c.q("PNC.ADD own 1");
    let own = replica_id(&mut c);
    assert_eq!(
        c.cmd(&[&b"RESTORE"[..], b"k", b"0", &payload]),
        Value::Simple("OK".into())
    );
    assert_eq!(c.q("PNC.INFO k").field("home"), Value::Nil);
    assert_eq!(c.q("PNC.STATE k").bytes(), state_blob(&[("eu3", 5, 0)]));
    // Had the foreign home record been kept, this restart would adopt "eu3" (generation 3).
    here.restart_saving();
    let mut c = here.conn();
    assert_eq!(replica_id(&mut c), own);
    assert_eq!(c.q("PNC.GET k"), Value::Int(5));
}

#[test]
fn memory_usage_grows_with_the_replica_count() {
    let server = with_id(&[], "a");
    let mut c = server.conn();
    c.q("PNC.ADD small 1");
    let ids: Vec<String> = (0..64).map(|i| format!("replica-{i:03}")).collect();
    let entries: Vec<(&str, u64, u64)> = ids.iter().map(|id| (id.as_str(), 1, 0)).collect();
    merge(&mut c, "big", &state_blob(&entries));
    let small = c.q("MEMORY USAGE small").int();
    let big = c.q("MEMORY USAGE big").int();
    assert!(small > 0, "{small}");
    // 63 more entries of at least 32 bytes each.
    assert!(big > small + 63 * 32, "small {small} big {big}");
}

#[test]
fn forged_restore_payloads_are_refused_and_the_server_keeps_serving() {
    let server = with_id(&[], "a");
    let mut c = server.conn();
    c.q("PNC.ADD frame 1");
    let frame = DumpFrame::of_key(&mut c, "frame");
    let good_blob = stored_blob(&[("a", 5, 1), ("b", 7, 0)], Some(("a", 3)));
    let good = frame.with_blob(&good_blob);
    assert_eq!(
        c.cmd(&[&b"RESTORE"[..], b"good", b"0", &good]),
        Value::Simple("OK".into()),
        "the forging itself is right"
    );
    assert_eq!(c.q("PNC.GET good"), Value::Int(11));

    let mut huge_count = vec![1, 253];
    huge_count.extend((1u64 << 40).to_le_bytes());
    huge_count.push(0);
    let mut big_id_len = vec![1, 1, 253];
    big_id_len.extend((1u64 << 40).to_le_bytes());
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("unknown version", frame.with_blob(&[9, 0, 0])),
        ("empty blob", frame.with_blob(&[])),
        (
            "state without home record",
            frame.with_blob(&state_blob(&[("a", 1, 0)])),
        ),
        (
            "truncated blob",
            frame.with_blob(&good_blob[..good_blob.len() - 1]),
        ),
        (
            "trailing bytes",
            frame.with_blob(&[good_blob.clone(), vec![0]].concat()),
        ),
        ("huge count", frame.with_blob(&huge_count)),
        ("huge id length", frame.with_blob(&big_id_len)),
        (
            "duplicate ids",
            frame.with_blob(&stored_blob(&[("a", 1, 0), ("a", 1, 0)], None)),
        ),
        (
            "unordered ids",
            frame.with_blob(&stored_blob(&[("b", 1, 0), ("a", 1, 0)], None)),
        ),
        (
            "bad id",
            frame.with_blob(&stored_blob(&[("a%s", 1, 0)], None)),
        ),
        (
            "slot out of range",
            frame.with_blob(&stored_blob(&[("a", MAX + 1, 0)], None)),
        ),
        (
            "value out of range",
            frame.with_blob(&stored_blob(&[("a", MAX, 0), ("b", 1, 0)], None)),
        ),
        (
            "home generation 0",
            frame.with_blob(&stored_blob(&[], Some(("a", 0)))),
        ),
        (
            "bad home id",
            frame.with_blob(&stored_blob(&[], Some(("no way", 1)))),
        ),
        ("bad home tag", frame.with_blob(&[1, 0, 7])),
        ("unknown encoding version", frame.with_encver(2, &good_blob)),
        ("encoding version 0", frame.with_encver(0, &good_blob)),
    ];
    let mut wrong_opcode = unseal_dump(&good).0;
    wrong_opcode[10] = 2; // STRING -> UINT
    cases.push(("wrong opcode", seal_dump(&wrong_opcode, frame.rdb_version)));
    let body = unseal_dump(&good).0;
    cases.push((
        "truncated framing",
        seal_dump(&body[..body.len() - 3], frame.rdb_version),
    ));
    // Sanity: the varint helper agrees with the module (count 300 needs the 251 marker).
    assert_eq!(varint(300), vec![251, 44, 1]);

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
    assert_eq!(c.q("PNC.GET good"), Value::Int(11));
    assert_eq!(replica_id(&mut c).text(), "a");
}

#[test]
fn an_empty_rdb_saved_with_the_module_loads_without_it() {
    let server = Server::start();
    let mut c = server.conn();
    // Use the module fully (a random id is made and stamped), then empty the dataset.
    c.q("PNC.ADD k 1");
    assert!(replica_id(&mut c).text().starts_with("r-"));
    let with_key = {
        assert_eq!(c.q("SAVE"), Value::Simple("OK".into()));
        std::fs::read(server.dir.join("dump.rdb")).unwrap()
    };
    c.q("CTR.ADD n 1");
    c.q("PNC.ADD k 2");
    c.q("FLUSHALL");
    c.q("SAVE");
    let empty = std::fs::read(server.dir.join("dump.rdb")).unwrap();

    let plain = Server::try_start(&[], &[], false, &[("dump.rdb", &empty)])
        .unwrap_or_else(|log| panic!("a server without the module refused the RDB:\n{log}"));
    let mut p = plain.conn();
    assert_eq!(p.q("DBSIZE"), Value::Int(0));
    // Not our module (Valkey 9 lists its built-in Lua engine as a module named "lua").
    let modules = p.q("MODULE LIST").flat_text();
    assert!(!modules.contains("name ctr"), "{modules}");

    // The check is meaningful: an RDB holding a PN-counter does need the module.
    match Server::try_start(&[], &[], false, &[("dump.rdb", &with_key)]) {
        Ok(_) => panic!("an RDB with module values loaded without the module"),
        Err(log) => assert!(log.contains("ctr-pncnt"), "{log}"),
    }
}
