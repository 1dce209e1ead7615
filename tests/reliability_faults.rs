//! Faults: kill -9 of a server in the middle of an AOF rewrite and of a replica full sync (the
//! replica, and the master), then restart and resync: every acknowledged write is there and
//! the digests are equal. And `maxmemory` reached: every write command of the module answers
//! the OOM error and changes nothing, while the reads keep working.
//!
//! The slow phases are made long on purpose with Redis's `rdb-key-save-delay` (a pause per key
//! in the child that writes the AOF rewrite or the replication RDB), so that the kill lands
//! inside them; each test checks that it did.

mod common;

use std::time::{Duration, Instant};

use common::pnc::{state_blob, Rng};
use common::{ivarint, uvarint, Conn, Server, Value};

const KEYS: usize = 1_500;

fn ok() -> Value {
    Value::Simple("OK".into())
}

fn now_ms(c: &mut Conn) -> i64 {
    c.q("TIME").array()[0].text().parse::<i64>().unwrap() * 1000
}

/// A `CTR.APPLY` add effect (format 1) that leaves the counter with `shards` shards.
fn sharded_add(now: i64, shards: u64) -> Vec<u8> {
    let mut e = vec![1u8, 1];
    e.extend(ivarint(now));
    e.extend(ivarint(3));
    e.extend(uvarint(0));
    e.extend(uvarint(shards));
    e.push(0);
    e
}

/// `KEYS` keys of every shape, pipelined.
fn populate(c: &mut Conn) {
    let now = now_ms(c);
    let mut commands: Vec<Vec<Vec<u8>>> = Vec::new();
    let w = |parts: &[&str]| {
        parts
            .iter()
            .map(|p| p.as_bytes().to_vec())
            .collect::<Vec<_>>()
    };
    for i in 0..KEYS {
        let k = format!("k:{i}");
        match i % 6 {
            0 => commands.push(w(&["CTR.ADD", &k, &i.to_string()])),
            1 => {
                commands.push(w(&["CTR.ADD", &k, "100", "TOKEN", &format!("t{i}")]));
                commands.push(w(&["CTR.FLOOR", &k, "0"]));
                commands.push(w(&["CTR.DECRFLOOR", &k, "7", "TOKEN", &format!("d{i}")]));
            }
            2 => commands.push(vec![
                b"CTR.APPLY".to_vec(),
                k.into_bytes(),
                sharded_add(now, 8),
            ]),
            3 => {
                commands.push(w(&["CTR.RECONCILE", &k, "10"]));
                let at = (now - 120_000).to_string();
                commands.push(w(&["CTR.ADD", &k, "2", "AT", &at]));
            }
            4 => commands.push(w(&["PNC.ADD", &k, "5"])),
            _ => {
                let blob = state_blob(&[("eu", i as u64, 1), ("us", 3, 0)]);
                commands.push(vec![b"PNC.MERGE".to_vec(), k.into_bytes(), blob]);
            }
        }
    }
    for batch in commands.chunks(1_000) {
        for cmd in batch {
            c.send(cmd);
        }
        for cmd in batch {
            let reply = c.read().expect("reply");
            assert!(
                !reply.is_error(),
                "{:?}: {reply:?}",
                String::from_utf8_lossy(&cmd[0])
            );
        }
    }
}

/// One acknowledged write of a random kind on one of the populated keys (or a new one).
fn write(c: &mut Conn, rng: &mut Rng, n: usize) -> Value {
    let i = rng.below(KEYS as u64 + 50) as usize;
    let k = format!("k:{i}");
    let reply = match rng.below(7) {
        0 => c.cmd(&["CTR.ADD", &k, "1"]),
        1 => c.cmd(&["CTR.ADD", &k, "2", "TOKEN", &format!("w{n}")]),
        2 => c.cmd(&["CTR.DECRFLOOR", &k, "1", "TOKEN", &format!("x{n}")]),
        3 => c.cmd(&["CTR.CLEAR", &k]),
        4 => c.cmd(&["CTR.RECONCILE", &k, &n.to_string()]),
        5 => c.cmd(&["PNC.ADD", &k, "-2"]),
        _ => c.cmd(&[
            b"PNC.MERGE".to_vec(),
            k.into_bytes(),
            state_blob(&[("ap", n as u64, 0)]),
        ]),
    };
    // A key of the other family answers WRONGTYPE, which is fine: nothing was written.
    assert!(
        !reply.is_error() || reply.error().starts_with("WRONGTYPE"),
        "{reply:?}"
    );
    reply
}

fn info(c: &mut Conn, section: &str, field: &str) -> String {
    let text = c.cmd(&["INFO", section]).text();
    common::info_value(&text, field)
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn kill_9_during_an_aof_rewrite_loses_no_acknowledged_write() {
    let mut server = Server::start_with(
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--aof-use-rdb-preamble",
            "no",
        ],
        &[],
    );
    let mut c = server.conn();
    populate(&mut c);
    // About 1.5 s of rewrite: 1 ms per key in the rewriting child.
    assert_eq!(c.q("CONFIG SET rdb-key-save-delay 1000"), ok());
    c.q("BGREWRITEAOF");
    let started = Instant::now();
    while info(&mut c, "persistence", "aof_rewrite_in_progress") != "1" {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no rewrite started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut rng = Rng::new(8);
    let mut acknowledged = 0;
    while started.elapsed() < Duration::from_millis(600) {
        write(&mut c, &mut rng, acknowledged);
        acknowledged += 1;
    }
    let digest = c.q("DEBUG DIGEST");
    assert_eq!(
        info(&mut c, "persistence", "aof_rewrite_in_progress"),
        "1",
        "the kill must land inside the rewrite"
    );
    server.kill();
    server.restart();
    let mut c = server.conn();
    assert_eq!(
        c.q("DEBUG DIGEST"),
        digest,
        "after {acknowledged} writes acknowledged during the rewrite"
    );
    assert_eq!(
        info(&mut c, "persistence", "aof_last_bgrewrite_status"),
        "ok"
    );
    eprintln!("{acknowledged} acknowledged writes during the rewrite, all there after kill -9");
    // And the interrupted rewrite can be done again.
    server.rewrite_aof();
    server.restart();
    assert_eq!(server.conn().q("DEBUG DIGEST"), digest);
}

/// A replica started against `master` while its full sync is made slow; returns once the sync
/// is under way.
fn start_syncing_replica(master: &Server, m: &mut Conn) -> Server {
    assert_eq!(m.q("CONFIG SET rdb-key-save-delay 1000"), ok());
    let port = master.port.to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port], &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while info(m, "persistence", "rdb_bgsave_in_progress") != "1" {
        assert!(Instant::now() < deadline, "no full sync started");
        std::thread::sleep(Duration::from_millis(5));
    }
    replica
}

fn master_args() -> Vec<&'static str> {
    vec![
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--repl-diskless-sync-delay",
        "0",
    ]
}

#[test]
fn kill_9_of_a_replica_during_its_full_sync_then_resync() {
    let master = Server::start_with(&master_args(), &[]);
    let mut m = master.conn();
    populate(&mut m);
    let mut replica = start_syncing_replica(&master, &mut m);
    let mut rng = Rng::new(9);
    for n in 0..200 {
        write(&mut m, &mut rng, n);
    }
    assert_eq!(
        info(&mut m, "persistence", "rdb_bgsave_in_progress"),
        "1",
        "the kill must land inside the full sync"
    );
    assert_eq!(
        info(
            &mut replica.conn(),
            "replication",
            "master_sync_in_progress"
        ),
        "1"
    );
    replica.kill();
    assert_eq!(m.q("CONFIG SET rdb-key-save-delay 0"), ok());
    for n in 200..400 {
        write(&mut m, &mut rng, n);
    }
    replica.restart();
    replica.wait_link_up();
    for n in 400..500 {
        write(&mut m, &mut rng, n);
    }
    master.wait_replicas(1);
    assert_eq!(replica.conn().q("DEBUG DIGEST"), m.q("DEBUG DIGEST"));
}

#[test]
fn kill_9_of_the_master_during_a_full_sync_then_restart_and_resync() {
    let mut master = Server::start_with(&master_args(), &[]);
    let mut m = master.conn();
    populate(&mut m);
    let replica = start_syncing_replica(&master, &mut m);
    let mut rng = Rng::new(10);
    for n in 0..200 {
        write(&mut m, &mut rng, n);
    }
    let digest = m.q("DEBUG DIGEST");
    assert_eq!(
        info(&mut m, "persistence", "rdb_bgsave_in_progress"),
        "1",
        "the kill must land inside the full sync"
    );
    master.kill();
    // Same port and directory: the AOF holds every acknowledged write.
    master.restart();
    let mut m = master.conn();
    assert_eq!(
        m.q("DEBUG DIGEST"),
        digest,
        "acknowledged writes survive kill -9"
    );
    for n in 200..300 {
        write(&mut m, &mut rng, n);
    }
    replica.wait_link_up();
    master.wait_replicas(1);
    assert_eq!(replica.conn().q("DEBUG DIGEST"), m.q("DEBUG DIGEST"));
}

/// Every write command of the module, internal ones included, on existing keys of both types
/// and on a missing key.
fn every_write(now: i64) -> Vec<Vec<Vec<u8>>> {
    let w = |parts: &[&str]| {
        parts
            .iter()
            .map(|p| p.as_bytes().to_vec())
            .collect::<Vec<_>>()
    };
    let mut out = Vec::new();
    for k in ["c", "missing"] {
        out.push(w(&["CTR.ADD", k, "1"]));
        out.push(w(&["CTR.ADD", k, "1", "TOKEN", "oom", "EX", "100"]));
        out.push(w(&["CTR.CLEAR", k]));
        out.push(w(&["CTR.CLEAR", k, "TOKEN", "oom2"]));
        out.push(w(&["CTR.FLOOR", k, "-5"]));
        out.push(w(&["CTR.DECRFLOOR", k, "1"]));
        out.push(w(&["CTR.DECRFLOOR", k, "1", "TOKEN", "oom3"]));
        out.push(w(&["CTR.RECONCILE", k, "3"]));
        out.push(vec![b"CTR.APPLY".to_vec(), k.into(), sharded_add(now, 2)]);
        out.push(vec![b"CTR.SETSTATE".to_vec(), k.into(), vec![1, 1, 2, 0]]);
    }
    for k in ["p", "missing"] {
        out.push(w(&["PNC.ADD", k, "1"]));
        out.push(w(&["PNC.CLEAR", k]));
        out.push(vec![
            b"PNC.MERGE".to_vec(),
            k.into(),
            state_blob(&[("z", 9, 0)]),
        ]);
        out.push(w(&["PNC.APPLY", k, "z", "1", "4"]));
        out.push(vec![b"PNC.SETSTATE".to_vec(), k.into(), vec![1, 0, 0]]);
    }
    out
}

#[test]
fn at_maxmemory_writes_are_refused_unchanged_and_reads_work() {
    let server = Server::start_with(&["--maxmemory-policy", "noeviction"], &[]);
    let mut c = server.conn();
    c.q("CTR.ADD c 10 TOKEN a");
    c.q("CTR.FLOOR c 0");
    c.q("PNC.ADD p 5");
    let now = now_ms(&mut c);
    let digests = |c: &mut Conn| {
        (
            c.q("DEBUG DIGEST-VALUE c"),
            c.q("DEBUG DIGEST-VALUE p"),
            c.q("DBSIZE"),
        )
    };
    // A 1 MiB string, then a limit 256 KiB below what the server uses: well over it.
    let filler = vec![b'x'; 1024 * 1024];
    assert_eq!(c.cmd(&[&b"SET"[..], b"filler", &filler]), ok());
    let used: i64 = info(&mut c, "memory", "used_memory").parse().unwrap();
    let limit = (used - 256 * 1024).to_string();
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory", &limit]), ok());
    let filler_digest = c.q("DEBUG DIGEST-VALUE filler");
    let before = digests(&mut c);
    for cmd in every_write(now) {
        let reply = c.cmd(&cmd);
        assert!(
            reply.is_error() && reply.error().starts_with("OOM"),
            "{:?} {:?}: {reply:?}",
            String::from_utf8_lossy(&cmd[0]),
            String::from_utf8_lossy(&cmd[1])
        );
    }
    assert_eq!(digests(&mut c), before, "refused writes changed nothing");
    assert_eq!(c.q("DEBUG DIGEST-VALUE filler"), filler_digest);
    // Reads keep working.
    assert_eq!(c.q("CTR.GET c"), Value::Int(10));
    assert_eq!(
        c.q("CTR.MGET c missing"),
        Value::Array(vec![Value::Int(10), Value::Int(0)])
    );
    assert_eq!(c.q("CTR.INFO c").field("floor"), Value::Int(0));
    assert_eq!(c.q("PNC.GET p"), Value::Int(5));
    assert!(!c.q("PNC.STATE p").is_error());
    assert!(!c.q("PNC.INFO p").is_error());
    // Below the limit again, the same writes go through.
    c.q("DEL filler");
    for cmd in every_write(now).iter().take(3) {
        assert!(!c.cmd(cmd).is_error());
    }
    assert_eq!(c.q("CTR.GET c"), Value::Int(0), "the CLEAR went through");
}
