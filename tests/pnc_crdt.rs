//! PN-Counters across independent deployments (each its own redis-server with its own replica
//! id): convergence to the exact sum, observed reset, replica-id stability across restarts,
//! failover to a replica that missed writes, and the pnc-sync tool.

mod common;

use std::process::Command;

use common::pnc::{state_blob, Rng};
use common::{free_port, Conn, Server, Value};

fn with_id(id: &str) -> Server {
    Server::start_with(&[], &["replica-id", id])
}

/// Ships `key`'s state from one deployment to another.
fn ship(from: &mut Conn, to: &mut Conn, key: &str) {
    match from.cmd(&["PNC.STATE", key]) {
        Value::Nil => {}
        Value::Bulk(state) => {
            let reply = to.cmd(&[b"PNC.MERGE", key.as_bytes(), &state]);
            assert!(!reply.is_error(), "{reply:?}");
        }
        other => panic!("unexpected PNC.STATE reply {other:?}"),
    }
}

fn replica_id(c: &mut Conn) -> String {
    c.q("PNC.INFO any").field("replica-id").text()
}

#[test]
fn three_deployments_converge_to_the_exact_sum() {
    let servers: Vec<Server> = ["a", "b", "c"].iter().map(|id| with_id(id)).collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::conn).collect();
    let keys = ["k1", "k2", "k3"];
    let mut expected = [0i64; 3];
    let mut rng = Rng::new(0xc0ffee);
    let (mut partial, mut clears) = (0, 0);
    for _ in 0..600 {
        let d = rng.below(3) as usize;
        let k = rng.below(3) as usize;
        if rng.below(40) == 0 {
            // An observed reset removes what this deployment has seen.
            expected[k] -= conns[d].cmd(&["PNC.CLEAR", keys[k]]).int();
            clears += 1;
        } else {
            let delta = rng.below(2001) as i64 - 1000;
            conns[d]
                .cmd(&["PNC.ADD", keys[k], &delta.to_string()])
                .int();
            expected[k] += delta;
        }
        if rng.below(8) == 0 {
            let from = rng.below(3) as usize;
            let to = (from + 1 + rng.below(2) as usize) % 3;
            let k = rng.below(3) as usize;
            let (a, b) = pair(&mut conns, from, to);
            ship(a, b, keys[k]);
            partial += 1;
        }
    }
    assert!(
        partial > 30 && clears > 5,
        "partial {partial} clears {clears}"
    );
    // Full exchange, every (from, to, key) in a random order, twice.
    for _ in 0..2 {
        let mut moves: Vec<(usize, usize, usize)> = (0..3)
            .flat_map(|f| (0..3).flat_map(move |t| (0..3).map(move |k| (f, t, k))))
            .filter(|(f, t, _)| f != t)
            .collect();
        rng.shuffle(&mut moves);
        for (from, to, k) in moves {
            let (a, b) = pair(&mut conns, from, to);
            ship(a, b, keys[k]);
        }
    }
    for (k, key) in keys.iter().enumerate() {
        let reference = conns[0].cmd(&["PNC.STATE", key]);
        for c in conns.iter_mut() {
            assert_eq!(c.cmd(&["PNC.GET", key]), Value::Int(expected[k]), "{key}");
            assert_eq!(c.cmd(&["PNC.STATE", key]), reference, "{key}");
        }
    }
}

/// Two distinct connections of a slice, mutably.
fn pair(conns: &mut [Conn], a: usize, b: usize) -> (&mut Conn, &mut Conn) {
    assert_ne!(a, b);
    if a < b {
        let (left, right) = conns.split_at_mut(b);
        (&mut left[a], &mut right[0])
    } else {
        let (left, right) = conns.split_at_mut(a);
        (&mut right[0], &mut left[b])
    }
}

#[test]
fn an_observed_reset_keeps_a_concurrent_add_made_elsewhere() {
    let (a, b) = (with_id("a"), with_id("b"));
    let (mut ca, mut cb) = (a.conn(), b.conn());
    ca.q("PNC.ADD cart 10");
    ship(&mut ca, &mut cb, "cart");
    assert_eq!(cb.q("PNC.GET cart"), Value::Int(10));
    // Concurrently: a resets what it has seen, b adds.
    assert_eq!(ca.q("PNC.CLEAR cart"), Value::Int(10));
    assert_eq!(cb.q("PNC.ADD cart 5"), Value::Int(15));
    ship(&mut ca, &mut cb, "cart");
    ship(&mut cb, &mut ca, "cart");
    assert_eq!(ca.q("PNC.GET cart"), Value::Int(5));
    assert_eq!(cb.q("PNC.GET cart"), Value::Int(5));
    // The reset went into a's own N; b's slot is whole.
    assert_eq!(
        ca.q("PNC.STATE cart").bytes(),
        state_blob(&[("a", 10, 10), ("b", 5, 0)])
    );
}

#[test]
fn the_replica_id_is_stable_across_restarts_configured_or_random() {
    for configured in [Some("eu-central"), None] {
        let mut server = match configured {
            Some(id) => with_id(id),
            None => Server::start(),
        };
        let mut c = server.conn();
        assert_eq!(c.q("PNC.INFO k").field("replica-id"), Value::Nil);
        c.q("PNC.ADD k 1");
        let id = replica_id(&mut c);
        match configured {
            Some(expected) => assert_eq!(id, expected),
            None => assert!(id.starts_with("r-"), "{id}"),
        }
        c.q("DEBUG RELOAD");
        assert_eq!(replica_id(&mut c), id, "after DEBUG RELOAD");
        server.restart_saving();
        let mut c = server.conn();
        assert_eq!(replica_id(&mut c), id, "after a restart");
        c.q("PNC.ADD k 2");
        // Still one slot: the restarted deployment wrote to the same id.
        assert_eq!(c.q("PNC.STATE k").bytes(), state_blob(&[(&id, 3, 0)]));
        // Saving again without further writes keeps it too.
        server.restart_saving();
        let mut c = server.conn();
        assert_eq!(replica_id(&mut c), id, "after a second restart");
    }
}

#[test]
fn a_promoted_replica_that_missed_writes_keeps_its_new_increments() {
    let master = with_id("us");
    let mut replica = with_id("us");
    let eu = with_id("eu");
    let (mut m, mut r, mut e) = (master.conn(), replica.conn(), eu.conn());
    r.cmd(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]);
    replica.wait_link_up();
    m.q("PNC.ADD likes 10");
    master.wait_replicas(1);
    assert_eq!(r.q("PNC.GET likes"), Value::Int(10));
    // The replica loses its link and misses the master's next writes...
    r.cmd(&["REPLICAOF", "127.0.0.1", &free_port().to_string()]);
    m.q("PNC.ADD likes 5");
    // ...which the master still shipped to eu before it died.
    ship(&mut m, &mut e, "likes");
    e.q("PNC.ADD likes 100");
    drop(m);
    drop(master);

    // Failover: the replica becomes the primary and must not reuse "us".
    assert_eq!(r.q("REPLICAOF NO ONE"), Value::Simple("OK".into()));
    let promoted = replica_id(&mut r);
    assert!(
        promoted.starts_with("us.") && promoted.len() == "us.".len() + 12,
        "{promoted}"
    );
    assert_eq!(r.q("PNC.ADD likes 7"), Value::Int(17));
    ship(&mut r, &mut e, "likes");
    ship(&mut e, &mut r, "likes");
    // 10 + 5 (missed by the replica, kept by eu) + 100 + 7: nothing lost. Had the promoted
    // replica kept writing "us" (P 10 -> 17), the max with eu's "us" P 15 would drop 5.
    assert_eq!(r.q("PNC.GET likes"), Value::Int(122));
    assert_eq!(e.q("PNC.GET likes"), Value::Int(122));

    // The new id survives a restart of the promoted deployment.
    replica.restart_saving();
    let mut r = replica.conn();
    assert_eq!(replica_id(&mut r), promoted);
    r.q("PNC.ADD likes 1");
    let slots = r.q("PNC.INFO likes").field("replicas").array();
    let ids: Vec<String> = slots.iter().map(|s| s.field("id").text()).collect();
    assert_eq!(ids, ["eu", "us", promoted.as_str()]);
}

#[test]
fn a_random_id_deployment_also_moves_on_failover() {
    let master = Server::start();
    let replica = master.start_replica();
    let (mut m, mut r) = (master.conn(), replica.conn());
    m.q("PNC.ADD k 1");
    master.wait_replicas(1);
    let old = replica_id(&mut m);
    assert_eq!(replica_id(&mut r), old, "the replica follows its master");
    r.q("REPLICAOF NO ONE");
    let new = replica_id(&mut r);
    assert!(new.starts_with("r-") && new != old, "{old} -> {new}");
    r.q("PNC.ADD k 1");
    assert_eq!(r.q("PNC.INFO k").field("replicas").array().len(), 2);
}

/// pnc-sync's success and output.
fn sync_tool(args: &[String]) -> (bool, String) {
    let (status, out) = common::pnc::sync_tool(args);
    (status == 0, out)
}

#[test]
fn the_sync_tool_converges_keys_by_name_and_by_pattern() {
    let servers: Vec<Server> = ["a", "b", "c"].iter().map(|id| with_id(id)).collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::conn).collect();
    let endpoints: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let mut expected = [0i64; 4];
    for (d, c) in conns.iter_mut().enumerate() {
        for (k, total) in expected.iter_mut().enumerate() {
            // Key 3 only exists in deployment 2.
            if k == 3 && d != 2 {
                continue;
            }
            let delta = (d as i64 + 1) * 10 - k as i64 * 7;
            c.cmd(&["PNC.ADD", &format!("sync:{k}"), &delta.to_string()]);
            *total += delta;
        }
        c.q("SET sync:plain-string x"); // not a PN-counter: SCAN skips it
        c.q("PNC.ADD other 1"); // does not match the pattern
    }
    let mut args = vec!["--pattern".to_string(), "sync:*".to_string(), "-v".into()];
    args.extend(endpoints.iter().cloned());
    let (ok, out) = sync_tool(&args);
    assert!(ok, "{out}");
    assert!(out.contains("4 key(s)"), "{out}");
    for c in conns.iter_mut() {
        for (k, value) in expected.iter().enumerate() {
            assert_eq!(
                c.cmd(&["PNC.GET", &format!("sync:{k}")]),
                Value::Int(*value)
            );
        }
        assert_eq!(c.q("PNC.GET other"), Value::Int(1), "outside the pattern");
        assert_eq!(c.q("GET sync:plain-string").text(), "x");
    }
    // A second run has nothing left to do.
    let (ok, out) = sync_tool(&args);
    assert!(ok && out.contains("0 merge(s)"), "{out}");

    // By name, two deployments only.
    let mut args = vec!["--key".to_string(), "other".to_string()];
    args.extend(endpoints[..2].iter().cloned());
    let (ok, out) = sync_tool(&args);
    assert!(ok, "{out}");
    assert_eq!(conns[0].q("PNC.GET other"), Value::Int(2));
    assert_eq!(conns[2].q("PNC.GET other"), Value::Int(1));

    // A key of another type in one deployment fails that key, with exit status 1.
    let mut args = vec!["--key".to_string(), "sync:plain-string".to_string()];
    args.extend(endpoints.iter().cloned());
    let (ok, out) = sync_tool(&args);
    assert!(!ok && out.contains("WRONGTYPE"), "{out}");

    // Usage and connection errors.
    let (ok, out) = sync_tool(&["--key".into(), "x".into(), endpoints[0].clone()]);
    assert!(!ok && out.contains("at least two"), "{out}");
    let dead = format!("127.0.0.1:{}", free_port());
    let (ok, _) = sync_tool(&["--key".into(), "x".into(), endpoints[0].clone(), dead]);
    assert!(!ok);
}

/// The README's redis-cli pipeline, run as written (with test ports).
#[test]
fn the_documented_redis_cli_pipeline_ships_a_state() {
    let (a, b) = (with_id("us-east"), with_id("eu-west"));
    let (mut ca, mut cb) = (a.conn(), b.conn());
    // An N of 10 makes the blob end in a newline byte: only the one redis-cli adds may go.
    ca.q("PNC.ADD page:likes 20");
    ca.q("PNC.ADD page:likes -10");
    cb.q("PNC.ADD page:likes 3");
    let pipeline = format!(
        "redis-cli -p {} --raw PNC.STATE page:likes | head -c -1 \
         | redis-cli -p {} -x PNC.MERGE page:likes",
        a.port, b.port
    );
    let out = Command::new("bash")
        .args(["-c", &pipeline])
        .output()
        .expect("run bash");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "13");
    assert_eq!(cb.q("PNC.GET page:likes"), Value::Int(13));
    assert_eq!(
        cb.q("PNC.STATE page:likes").bytes(),
        state_blob(&[("eu-west", 3, 0), ("us-east", 20, 10)])
    );
}

/// `PNC.STATE key SINCE version`: a version, and only what this deployment wrote since it (the
/// whole state for 0, an unknown version, or a key whose history restarted); merging the delta
/// where the earlier state was merged gives what merging the whole state gives.
#[test]
fn state_since_a_version_is_what_changed_and_merges_like_the_whole_state() {
    let (a, b) = (with_id("a"), with_id("b"));
    let (mut ca, mut cb) = (a.conn(), b.conn());
    ca.q("PNC.ADD k 5");
    cb.q("PNC.ADD k 7");
    cb.cmd(&[b"PNC.MERGE".as_slice(), b"k", &ca.q("PNC.STATE k").bytes()]);
    ca.cmd(&[b"PNC.MERGE".as_slice(), b"k", &cb.q("PNC.STATE k").bytes()]);
    let first = ca.q("PNC.STATE k SINCE 0").array();
    assert_eq!(first[1].text(), "full");
    assert_eq!(first[2].bytes(), ca.q("PNC.STATE k").bytes());
    let version = first[0].text();
    ca.q("PNC.ADD k 1");
    let next = ca.cmd(&["PNC.STATE", "k", "SINCE", &version]).array();
    assert_eq!(next[1].text(), "delta");
    // Only a's own entry (b's came from b, which ships it itself).
    assert_eq!(next[2].bytes(), state_blob(&[("a", 6, 0)]));
    cb.cmd(&[b"PNC.MERGE".as_slice(), b"k", &next[2].bytes()]);
    assert_eq!(cb.q("PNC.STATE k").bytes(), ca.q("PNC.STATE k").bytes());
    let same = ca
        .cmd(&["PNC.STATE", "k", "SINCE", &next[0].text()])
        .array();
    assert_eq!(
        (same[0].text(), same[2].bytes()),
        (next[0].text(), state_blob(&[]))
    );
    // The key deleted and made again: its history restarted, the whole state.
    ca.q("DEL k");
    ca.q("PNC.ADD k 2");
    let again = ca
        .cmd(&["PNC.STATE", "k", "SINCE", &next[0].text()])
        .array();
    assert_eq!(again[1].text(), "full");
    assert_ne!(again[0].text(), next[0].text());
    // A missing key, and bad input.
    let none = ca.q("PNC.STATE none SINCE 0").array();
    assert_eq!(
        (none[1].text(), &none[2]),
        ("full".to_string(), &Value::Nil)
    );
    assert!(ca
        .q("PNC.STATE k SINCE x")
        .error()
        .contains("invalid version"));
    assert!(ca.q("PNC.STATE k UNTIL 0").error().contains("syntax error"));
    ca.q("SET s x");
    assert!(ca.q("PNC.STATE s SINCE 0").error().starts_with("WRONGTYPE"));
}

/// In continuous mode pnc-sync ships deltas once every deployment has a deployment's state:
/// runs after the first read and send a fraction of the bytes, and everything converges.
#[test]
fn the_sync_tool_ships_deltas_between_runs_and_converges() {
    let servers: Vec<Server> = ["a", "b", "c"].iter().map(|id| with_id(id)).collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::conn).collect();
    for c in conns.iter_mut() {
        for k in 0..20 {
            c.cmd(&["PNC.ADD", &format!("d:{k}"), "3"]);
        }
    }
    let mut args: Vec<String> = ["--pattern", "d:*", "--interval", "0.01", "--runs", "3"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(servers.iter().map(|s| format!("127.0.0.1:{}", s.port)));
    let (ok, out) = sync_tool(&args);
    assert!(ok, "{out}");
    let bytes: Vec<usize> = out
        .lines()
        .filter_map(|l| l.split(", ").find(|p| p.ends_with("bytes of state")))
        .map(|p| p.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(bytes.len(), 3, "{out}");
    // Nothing changed after the first run: each later run reads one empty delta per key and
    // deployment (2 bytes) and sends nothing.
    assert_eq!(bytes[1], 3 * 20 * 2, "{out}");
    assert_eq!(bytes[2], 3 * 20 * 2, "{out}");
    for c in conns.iter_mut() {
        for k in 0..20 {
            assert_eq!(c.cmd(&["PNC.GET", &format!("d:{k}")]), Value::Int(9));
        }
    }
}
