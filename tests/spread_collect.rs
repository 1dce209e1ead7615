//! The holders of a gone spread counter are collected: DEL, UNLINK, expiry and FLUSHALL of a
//! home delete its holders on every master (and so on their replicas), within a bound far
//! under `ctr.collect-timeout-ms`; a RENAME of a home keeps them (and the total), and a DEL of
//! the renamed home collects them; a home deleted and restored from its dump in one MULTI, or
//! restored over itself, keeps them; a spread made again under the name keeps its new holders
//! and counts only its new adds; nothing is collected before the home's replicas hold the
//! deletion. Holders still folding back (sealed, credits in flight) go too; a holder's master
//! paused when the home goes is collected once it wakes, and one that does not answer within
//! the timeout is counted abandoned.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{key_slot, spread_over_masters, Cluster};
use common::{eventually, names, note, Conn, Server, Value};

fn ok() -> Value {
    Value::Simple("OK".into())
}

fn info_u64(server: &Server, field: &str) -> u64 {
    server
        .info_field("ctr", field)
        .parse()
        .unwrap_or_else(|_| panic!("{field}"))
}

/// Spreads `home` to 4 and writes `1..=3` units on its holders; returns the holders (home
/// first) and the total.
fn spread_one_server(c: &mut Conn, home: &str) -> (Vec<String>, i64) {
    c.cmd(&["CTR.ADD", home, "5"]);
    let holders = names(&c.cmd(&["CTR.SPREAD", home, "4"]));
    assert_eq!(holders.len(), 4);
    for (i, h) in holders[1..].iter().enumerate() {
        c.cmd(&["CTR.ADD", h, &(i + 1).to_string()]);
    }
    assert_eq!(c.cmd(&["CTR.GET", home]), Value::Int(11));
    (holders, 11)
}

fn existing(c: &mut Conn, keys: &[String]) -> Vec<String> {
    keys.iter()
        .filter(|k| c.cmd(&["EXISTS", k.as_str()]) == Value::Int(1))
        .cloned()
        .collect()
}

fn wait_gone_here(c: &mut Conn, keys: &[String]) {
    eventually(5, || existing(c, keys).is_empty().then_some(()));
}

/// How a test makes a home go.
type Remove = fn(&mut Conn, &str);

#[test]
fn a_gone_home_takes_its_holders_with_it_on_one_server() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    let gone: [(&str, Remove); 4] = [
        ("DEL", |c, k| assert_eq!(c.cmd(&["DEL", k]), Value::Int(1))),
        ("UNLINK", |c, k| {
            assert_eq!(c.cmd(&["UNLINK", k]), Value::Int(1))
        }),
        ("PEXPIRE", |c, k| {
            assert_eq!(c.cmd(&["PEXPIRE", k, "50"]), Value::Int(1));
            eventually(5, || (c.cmd(&["EXISTS", k]) == Value::Int(0)).then_some(()));
        }),
        ("FLUSHALL", |c, _| assert_eq!(c.q("FLUSHALL"), ok())),
    ];
    let mut collected = 0;
    for (what, remove) in gone {
        let (holders, _) = spread_one_server(&mut c, "views");
        c.q("CTR.ADD bystander 1");
        remove(&mut c, "views");
        wait_gone_here(&mut c, &holders[1..]);
        if what != "FLUSHALL" {
            collected += 3;
            assert_eq!(c.q("CTR.GET bystander"), Value::Int(1), "{what}");
            assert_eq!(c.q("DEL bystander"), Value::Int(1));
        }
        assert_eq!(c.q("DBSIZE"), Value::Int(0), "{what}: nothing else left");
        assert_eq!(
            info_u64(&server, "ctr_holders_collected"),
            collected,
            "{what}"
        );
    }
    assert_eq!(info_u64(&server, "ctr_collections"), 3);
    assert_eq!(info_u64(&server, "ctr_collections_abandoned"), 0);
    assert_eq!(info_u64(&server, "ctr_collections_pending"), 0);
    // The deletions were replicated.
    server.wait_replicas(1);
    assert_eq!(replica.conn().q("DBSIZE"), Value::Int(0));
}

/// A home overwritten by a command of another type (`SET`, `SORT ... STORE`, `SUNIONSTORE`,
/// whose events are not the generic ones the module follows) is gone like a deleted one: its
/// holders are collected, and the new value stays.
#[test]
fn a_home_overwritten_by_another_type_takes_its_holders_with_it() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    c.q("RPUSH src 3 1 2");
    c.q("SADD members a b");
    let overwrite: [(&str, Remove); 3] = [
        ("SET", |c, k| assert_eq!(c.cmd(&["SET", k, "text"]), ok())),
        ("SORT STORE", |c, k| {
            assert_eq!(c.cmd(&["SORT", "src", "STORE", k]), Value::Int(3))
        }),
        ("SUNIONSTORE", |c, k| {
            assert_eq!(c.cmd(&["SUNIONSTORE", k, "members"]), Value::Int(2))
        }),
    ];
    for (i, (what, write)) in overwrite.into_iter().enumerate() {
        let (holders, _) = spread_one_server(&mut c, "views");
        write(&mut c, "views");
        wait_gone_here(&mut c, &holders[1..]);
        assert_eq!(
            info_u64(&server, "ctr_holders_collected"),
            3 * (i as u64 + 1)
        );
        assert_eq!(
            c.q("EXISTS views"),
            Value::Int(1),
            "{what}: the new value stays"
        );
        assert_eq!(c.q("DEL views"), Value::Int(1));
    }
    assert_eq!(c.q("DBSIZE"), Value::Int(2), "src and members only");
    server.wait_replicas(1);
    assert_eq!(replica.conn().q("DBSIZE"), Value::Int(2));
}

#[test]
fn holders_are_collected_only_once_the_replicas_hold_the_deletion() {
    // A failover that lost the DEL would bring the home back: its holders must still be there.
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    let (holders, _) = spread_one_server(&mut c, "views");
    server.wait_replicas(1);
    let port = replica.port;
    let sleeper = std::thread::spawn(move || Conn::connect(port).unwrap().q("DEBUG SLEEP 1.5"));
    std::thread::sleep(Duration::from_millis(200));
    let deleted = Instant::now();
    assert_eq!(c.q("DEL views"), Value::Int(1));
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        existing(&mut c, &holders[1..]).len(),
        3,
        "the replica is frozen"
    );
    sleeper.join().unwrap();
    wait_gone_here(&mut c, &holders[1..]);
    note(&format!(
        "spread_collect: one server, its replica frozen 1.5 s: collected {:?} after the DEL",
        deleted.elapsed()
    ));
    server.wait_replicas(1);
    assert_eq!(replica.conn().q("DBSIZE"), Value::Int(0));
}

#[test]
fn a_home_restored_and_renamed_before_its_claim_starts_keeps_its_holders() {
    // The claim of a DEL waits for the replicas; a RESTORE of the home's dump under its name
    // undoes it, even once the restored home is renamed away before the collector looks (the
    // simulator found it: the collector read the deleted name empty and took the holders).
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    let (holders, total) = spread_one_server(&mut c, "views");
    let dump = c.q("DUMP views").bytes();
    server.wait_replicas(1);
    let port = replica.port;
    let sleeper = std::thread::spawn(move || Conn::connect(port).unwrap().q("DEBUG SLEEP 1"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.q("DEL views"), Value::Int(1));
    assert_eq!(c.cmd(&[b"RESTORE".as_slice(), b"views", b"0", &dump]), ok());
    assert_eq!(c.q("RENAME views renamed"), ok());
    sleeper.join().unwrap();
    // The replica acknowledges now (WAIT asks it): the claim's gate opens at the next tick.
    assert_eq!(c.q("WAIT 1 5000"), Value::Int(1));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        existing(&mut c, &holders[1..]).len(),
        3,
        "no holder collected"
    );
    assert_eq!(c.q("CTR.GET renamed"), Value::Int(total));
    assert_eq!(info_u64(&server, "ctr_holders_collected"), 0);
    // Deleted for good: its holders go.
    assert_eq!(c.q("DEL renamed"), Value::Int(1));
    wait_gone_here(&mut c, &holders[1..]);
}

#[test]
fn a_renamed_home_keeps_its_holders_until_it_is_deleted_itself() {
    let server = Server::start();
    let mut c = server.conn();
    let (holders, total) = spread_one_server(&mut c, "old");
    assert_eq!(c.q("RENAME old new"), ok());
    // A tick or two later, nothing of the counter was collected.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(existing(&mut c, &holders[1..]).len(), 3);
    assert_eq!(c.q("CTR.GET new"), Value::Int(total));
    // MOVE (one server only) keeps them too: the counter lives on in the other database.
    assert_eq!(c.q("MOVE new 1"), Value::Int(1));
    assert_eq!(c.q("SELECT 1"), ok());
    assert_eq!(c.q("MOVE new 0"), Value::Int(1));
    assert_eq!(c.q("SELECT 0"), ok());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.q("CTR.GET new"), Value::Int(total));
    // A home renamed over another home: the overwritten counter is gone, its holders with it.
    let (other, _) = spread_one_server(&mut c, "other");
    assert_eq!(c.q("RENAME new other"), ok());
    wait_gone_here(&mut c, &other[1..]);
    assert_eq!(existing(&mut c, &holders[1..]).len(), 3);
    assert_eq!(c.q("CTR.GET other"), Value::Int(total));
    // The renamed home deleted: its holders go.
    assert_eq!(c.q("DEL other"), Value::Int(1));
    wait_gone_here(&mut c, &holders[1..]);
    assert_eq!(c.q("DBSIZE"), Value::Int(0));
}

#[test]
fn a_home_that_comes_back_from_its_dump_keeps_its_holders() {
    let server = Server::start();
    let mut c = server.conn();
    let (holders, total) = spread_one_server(&mut c, "kept");
    let dump = c.q("DUMP kept").bytes();
    // Restored over itself.
    let restore = |c: &mut Conn, extra: &[&[u8]]| {
        let mut args: Vec<&[u8]> = vec![b"RESTORE", b"kept", b"0", &dump];
        args.extend_from_slice(extra);
        c.cmd(&args)
    };
    assert_eq!(restore(&mut c, &[b"REPLACE"]), ok());
    // Deleted and restored in one transaction (the check runs after it).
    assert_eq!(c.q("MULTI"), ok());
    c.q("DEL kept");
    restore(&mut c, &[]);
    assert_eq!(c.q("EXEC"), Value::Array(vec![Value::Int(1), ok()]));
    // DEBUG RELOAD empties the keyspace and loads it again.
    assert_eq!(c.q("DEBUG RELOAD"), ok());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(existing(&mut c, &holders[1..]).len(), 3);
    assert_eq!(c.q("CTR.GET kept"), Value::Int(total));
    assert_eq!(info_u64(&server, "ctr_holders_collected"), 0);
    // A copy restored under another name while the home lives is detached into a counter of
    // its own units; deleting it leaves the holders the original lists.
    assert_eq!(c.cmd(&[b"RESTORE".as_slice(), b"copy", b"0", &dump]), ok());
    assert_eq!(
        c.q("CTR.GET copy"),
        Value::Int(5),
        "the home's own units only"
    );
    assert_eq!(c.q("DEL copy"), Value::Int(1));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(existing(&mut c, &holders[1..]).len(), 3);
    assert_eq!(c.q("CTR.GET kept"), Value::Int(total));
    // Deleted, then restored later: the dump holds the home key only, its holders are gone.
    assert_eq!(c.q("DEL kept"), Value::Int(1));
    wait_gone_here(&mut c, &holders[1..]);
    assert_eq!(restore(&mut c, &[]), ok());
    assert_eq!(c.q("CTR.GET kept"), Value::Int(5));
}

/// The keys of `keys` that still exist on the master serving them.
fn existing_in(cluster: &Cluster, keys: &[String]) -> Vec<String> {
    keys.iter()
        .filter(|k| {
            let owner = cluster.owner(key_slot(k.as_bytes()));
            cluster.nodes[owner].conn().cmd(&["EXISTS", k.as_str()]) == Value::Int(1)
        })
        .cloned()
        .collect()
}

/// Waits until none of `keys` exists on its master; returns how long since `since`.
fn wait_collected(cluster: &Cluster, keys: &[String], since: Instant, bound: Duration) -> Duration {
    wait_gone_from(serving(cluster, keys), since, bound)
}

/// A connection to the master serving each key, with the key.
fn serving(cluster: &Cluster, keys: &[String]) -> Vec<(Conn, String)> {
    keys.iter()
        .map(|k| {
            let owner = cluster.owner(key_slot(k.as_bytes()));
            (cluster.nodes[owner].conn(), k.clone())
        })
        .collect()
}

/// Waits until no key exists on its connection's server; returns how long since `since`.
fn wait_gone_from(mut conns: Vec<(Conn, String)>, since: Instant, bound: Duration) -> Duration {
    loop {
        conns.retain_mut(|(c, k)| c.cmd(&["EXISTS", k.as_str()]) == Value::Int(1));
        if conns.is_empty() {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < bound,
            "not collected within {bound:?}: {:?}",
            conns.iter().map(|(_, k)| k).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn sum_info(cluster: &Cluster, field: &str) -> u64 {
    cluster.nodes.iter().map(|n| info_u64(n, field)).sum()
}

#[test]
fn a_deleted_home_is_collected_on_every_master_and_their_replicas() {
    let cluster = Cluster::start(3, &[]);
    let replicas: Vec<Server> = (0..3).map(|i| cluster.start_replica_of(i)).collect();
    let home = "{page}views";
    let (home_node, holders, _) = spread_over_masters(&cluster, home);
    let mut client = cluster.client();

    let deleted = Instant::now();
    assert_eq!(client.cmd(&["DEL", home]), Value::Int(1));
    let took = wait_collected(&cluster, &holders[1..], deleted, Duration::from_secs(3));
    note(&format!(
        "spread_collect: {} holders on 3 masters with replicas collected {took:?} after the DEL (ctr.collect-timeout-ms 10000)",
        holders.len() - 1
    ));
    assert_eq!(sum_info(&cluster, "ctr_holders_collected"), 5);
    assert_eq!(info_u64(&cluster.nodes[home_node], "ctr_collections"), 1);
    assert_eq!(sum_info(&cluster, "ctr_collections_abandoned"), 0);
    eventually(5, || {
        (sum_info(&cluster, "ctr_collections_pending") == 0).then_some(())
    });
    // The replicas followed their masters' deletions.
    for (i, replica) in replicas.iter().enumerate() {
        cluster.nodes[i].wait_replicas(1);
        let mut r = replica.conn();
        assert_eq!(r.q("READONLY"), ok());
        for h in &holders {
            if cluster.owner(key_slot(h.as_bytes())) == i {
                assert_eq!(r.cmd(&["EXISTS", h.as_str()]), Value::Int(0), "{h}");
            }
        }
    }

    // Spread again under the name: new holders, only the new adds, and nothing collects them.
    let again = names(&client.cmd(&["CTR.SPREAD", home, "6"]));
    assert!(again[1..].iter().all(|h| !holders.contains(h)));
    for h in &again {
        client.cmd(&["CTR.ADD", h, "2"]);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(existing_in(&cluster, &again[1..]).len(), 5);
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(12));

    // RENAME within the slot keeps the holders and the total; the renamed home deleted takes
    // them.
    let renamed = "{page}views:renamed";
    assert_eq!(client.cmd(&["RENAME", home, renamed]), ok());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(existing_in(&cluster, &again[1..]).len(), 5);
    assert_eq!(client.cmd(&["CTR.GET", renamed]), Value::Int(12));
    let deleted = Instant::now();
    assert_eq!(client.cmd(&["DEL", renamed]), Value::Int(1));
    wait_collected(&cluster, &again[1..], deleted, Duration::from_secs(3));

    // FLUSHALL on the home's master: the holders it serves go with the flush, the others are
    // collected.
    let (home_node, third, _) = spread_over_masters(&cluster, home);
    let flushed = Instant::now();
    assert_eq!(cluster.nodes[home_node].conn().q("FLUSHALL"), ok());
    let took = wait_collected(&cluster, &third[1..], flushed, Duration::from_secs(3));
    note(&format!(
        "spread_collect: FLUSHALL on a master with a replica collected in {took:?}"
    ));
}

#[test]
fn holders_still_folding_back_go_with_their_home() {
    // This server holds fold credits: a shrink leaves every removed holder sealed (refusing
    // writes) with its credit in flight, listed by the home as leaving.
    let server = Server::start_with(&[], &["debug-hold-credits", "yes"]);
    let mut c = server.conn();
    let (holders, total) = spread_one_server(&mut c, "stock");
    assert_eq!(names(&c.q("CTR.SPREAD stock 2")), holders[..2].to_vec());
    for h in &holders[2..] {
        let e = c.cmd(&["CTR.ADD", h.as_str(), "1"]);
        assert!(e.is_error() && e.error().contains("folded back"), "{e:?}");
    }
    assert_eq!(
        names(&c.cmd(&["CTR.INFO", "stock"]).field("leaving")),
        holders[2..].to_vec()
    );
    assert_eq!(c.q("CTR.GET stock"), Value::Int(total));
    assert_eq!(c.q("DEL stock"), Value::Int(1));
    wait_gone_here(&mut c, &holders[1..]);
    assert_eq!(c.q("DBSIZE"), Value::Int(0));
    // Shrunk to one key with its folds still under way: the leaving holders go all the same.
    let (holders, _) = spread_one_server(&mut c, "stock");
    assert_eq!(names(&c.q("CTR.SPREAD stock 1")), holders[..1].to_vec());
    assert_eq!(c.q("UNLINK stock"), Value::Int(1));
    wait_gone_here(&mut c, &holders[1..]);
    assert_eq!(c.q("DBSIZE"), Value::Int(0));
}

#[test]
fn an_expired_home_is_collected_and_a_paused_master_once_it_wakes() {
    let cluster = Cluster::start(3, &[]);
    let home = "stock";
    let (home_node, holders, _) = spread_over_masters(&cluster, home);
    let deleted = Instant::now();
    let mut m = cluster.nodes[home_node].conn();
    assert_eq!(m.cmd(&["PEXPIRE", home, "20"]), Value::Int(1));
    let took = wait_collected(&cluster, &holders[1..], deleted, Duration::from_secs(2));
    note(&format!(
        "spread_collect: 5 holders collected {took:?} after a PEXPIRE of 20 ms"
    ));

    // A master of some holders paused (DEBUG SLEEP) when the home goes: collected once it
    // wakes, well within the timeout.
    let home = "paused";
    let (home_node, holders, _) = spread_over_masters(&cluster, home);
    let mut m = cluster.nodes[home_node].conn();
    let victim = holders
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .find(|&n| n != home_node)
        .unwrap();
    let port = cluster.nodes[victim].port;
    let sleeper = std::thread::spawn(move || Conn::connect(port).unwrap().q("DEBUG SLEEP 1.5"));
    std::thread::sleep(Duration::from_millis(200));
    let deleted = Instant::now();
    assert_eq!(m.cmd(&["UNLINK", home]), Value::Int(1));
    sleeper.join().unwrap();
    let took = wait_collected(&cluster, &holders[1..], deleted, Duration::from_secs(5));
    note(&format!(
        "spread_collect: a master paused 1.5 s: its holders collected {took:?} after the UNLINK"
    ));
    assert_eq!(sum_info(&cluster, "ctr_collections_abandoned"), 0);

    // Paused longer than the timeout: the collection is abandoned (counted); the requests
    // already queued to the paused master may still be applied when it wakes.
    assert_eq!(m.q("CONFIG SET ctr.collect-timeout-ms 300"), ok());
    let (_, holders, _) = spread_over_masters(&cluster, home);
    let sleeper = std::thread::spawn(move || Conn::connect(port).unwrap().q("DEBUG SLEEP 1"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(m.cmd(&["DEL", home]), Value::Int(1));
    sleeper.join().unwrap();
    eventually(5, || {
        (info_u64(&cluster.nodes[home_node], "ctr_collections_abandoned") == 1).then_some(())
    });
    assert_eq!(
        info_u64(&cluster.nodes[home_node], "ctr_collections_pending"),
        0
    );
    let served_elsewhere: Vec<String> = holders[1..]
        .iter()
        .filter(|h| cluster.owner(key_slot(h.as_bytes())) != victim)
        .cloned()
        .collect();
    assert!(existing_in(&cluster, &served_elsewhere).is_empty());
}

/// A receiver answers a collection only once its replicas hold the deletions: with the
/// replica of a holder's master frozen, the holder is deleted at once but the home's master
/// keeps the collection pending (a failover to that replica would bring the holder back, and
/// the collection must still be asking then) until the replica wakes.
#[test]
fn a_receiver_answers_only_once_its_replicas_hold_the_deletion() {
    let cluster = Cluster::start(3, &[]);
    let home = "watched";
    let (home_node, holders, _) = spread_over_masters(&cluster, home);
    let receiver = holders
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .find(|&n| n != home_node)
        .expect("a holder on another master");
    let replica = cluster.start_replica_of(receiver);
    cluster.nodes[receiver].wait_replicas(1);
    let port = replica.port;
    let sleeper = std::thread::spawn(move || Conn::connect(port).unwrap().q("DEBUG SLEEP 2"));
    std::thread::sleep(Duration::from_millis(200));
    let deleted = Instant::now();
    assert_eq!(cluster.client().cmd(&["DEL", home]), Value::Int(1));
    let on_receiver: Vec<String> = holders[1..]
        .iter()
        .filter(|h| cluster.owner(key_slot(h.as_bytes())) == receiver)
        .cloned()
        .collect();
    wait_collected(&cluster, &on_receiver, deleted, Duration::from_secs(1));
    let home_master = &cluster.nodes[home_node];
    assert_eq!(
        info_u64(home_master, "ctr_collections_pending"),
        1,
        "answered before the receiver's replica holds the deletion"
    );
    sleeper.join().unwrap();
    eventually(5, || {
        (info_u64(home_master, "ctr_collections_pending") == 0).then_some(())
    });
    let answered_after = deleted.elapsed();
    assert!(
        answered_after >= Duration::from_millis(1500),
        "{answered_after:?}"
    );
    cluster.nodes[receiver].wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(r.q("READONLY"), ok());
    for h in &on_receiver {
        assert_eq!(r.cmd(&["EXISTS", h.as_str()]), Value::Int(0), "{h}");
    }
    assert_eq!(sum_info(&cluster, "ctr_collections_abandoned"), 0);
}

/// The orphan audit, fast for a test: a walk every 200 ms, and a spread answered gone twice,
/// 300 ms apart, before its holders go.
const AUDIT_FAST: &[&str] = &["audit-interval-ms", "200", "orphan-grace-ms", "300"];

/// The holders on other masters than the home's.
fn elsewhere(cluster: &Cluster, holders: &[String], home_node: usize) -> Vec<String> {
    holders
        .iter()
        .filter(|h| cluster.owner(key_slot(h.as_bytes())) != home_node)
        .cloned()
        .collect()
}

/// A home's master that restarts with a collection still claimed (its replica frozen, so the
/// claim waited) does not claim the deletion again from its AOF: a replayed `DEL` may be a
/// `MIGRATE`'s, no proof that the spread ended. The audit reports the holders left behind, and
/// they go on the operator's `CTR.ORPHANS DELETE`.
#[test]
fn a_collection_lost_to_a_restart_is_reported_not_claimed_from_the_aof() {
    let mut cluster = Cluster::start(3, AUDIT_FAST);
    let home = "restarted";
    let (home_node, holders, _) = spread_over_masters(&cluster, home);
    let mut m = cluster.nodes[home_node].conn();
    assert_eq!(m.q("CONFIG SET appendonly yes"), ok());
    cluster.nodes[home_node].wait_persistence_idle();
    let replica = cluster.start_replica_of(home_node);
    cluster.nodes[home_node].wait_replicas(1);
    let port = replica.port;
    let sleeper = std::thread::spawn(move || Conn::connect(port).unwrap().q("DEBUG SLEEP 2"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(m.cmd(&["DEL", home]), Value::Int(1));
    std::thread::sleep(Duration::from_millis(300));
    let others = elsewhere(&cluster, &holders[1..], home_node);
    assert_eq!(
        existing_in(&cluster, &others).len(),
        others.len(),
        "the claim waits for the frozen replica"
    );
    cluster.nodes[home_node].restart_adding(&["--appendonly", "yes"]);
    sleeper.join().unwrap();
    operator_deletes_what_the_audit_reports(&cluster, &others);
}

/// The holders of `others` (on masters other than their home's) stay while the audit walks:
/// each master that serves one reports their spread as an orphan (`CTR.ORPHANS`, INFO);
/// `CTR.ORPHANS DELETE` then deletes them, and a second one is refused.
fn operator_deletes_what_the_audit_reports(cluster: &Cluster, others: &[String]) {
    assert!(!others.is_empty());
    let id = others[0].split('.').nth(1).unwrap().to_string();
    let masters: Vec<usize> = others
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .collect();
    for &n in &masters {
        let node = &cluster.nodes[n];
        eventually(20, || {
            (info_u64(node, "ctr_orphans_reported") >= 1).then_some(())
        });
    }
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        existing_in(cluster, others).len(),
        others.len(),
        "the audit reports, it never deletes"
    );
    let mut deleted = 0;
    for &n in masters.iter().collect::<std::collections::BTreeSet<_>>() {
        let mut c = cluster.nodes[n].conn();
        let listed = c.cmd(&["CTR.ORPHANS"]);
        let entry = listed
            .array()
            .iter()
            .find(|e| e.array()[0].text() == id)
            .unwrap_or_else(|| panic!("spread {id} not listed: {listed:?}"))
            .clone();
        let here: Vec<String> = others
            .iter()
            .filter(|h| cluster.owner(key_slot(h.as_bytes())) == n)
            .cloned()
            .collect();
        let mut names: Vec<String> = entry.array()[2].array().iter().map(Value::text).collect();
        names.sort();
        let mut expected = here.clone();
        expected.sort();
        assert_eq!(names, expected);
        match c.cmd(&["CTR.ORPHANS", "DELETE", &id]) {
            Value::Int(k) => deleted += k,
            other => panic!("CTR.ORPHANS DELETE: {other:?}"),
        }
        let again = c.cmd(&["CTR.ORPHANS", "DELETE", &id]).error();
        assert!(again.contains("no orphaned spread"), "{again}");
        assert_eq!(info_u64(&cluster.nodes[n], "ctr_orphans_reported"), 0);
    }
    assert_eq!(deleted, others.len() as i64);
    assert!(existing_in(cluster, others).is_empty());
    let counted: u64 = masters
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|&n| info_u64(&cluster.nodes[n], "ctr_orphan_holders_deleted"))
        .sum();
    assert_eq!(counted, others.len() as u64);
}

/// A home's master that restarts from an RDB alone, with its collection still waiting for a
/// frozen replica, loses the claim (nothing records it): the other masters' audit reports the
/// holders of a spread whose home is not found, keeps them, and the operator deletes them.
#[test]
fn holders_a_restart_from_an_rdb_left_are_reported_by_the_audit() {
    let mut cluster = Cluster::start(3, AUDIT_FAST);
    let home = "lost:rdb";
    let (home_node, holders, _) = spread_over_masters(&cluster, home);
    let replica = cluster.start_replica_of(home_node);
    cluster.nodes[home_node].wait_replicas(1);
    let port = replica.port;
    let sleeper = std::thread::spawn(move || Conn::connect(port).unwrap().q("DEBUG SLEEP 2"));
    std::thread::sleep(Duration::from_millis(200));
    let mut m = cluster.nodes[home_node].conn();
    assert_eq!(m.cmd(&["DEL", home]), Value::Int(1));
    assert_eq!(m.q("SAVE"), ok());
    let others = elsewhere(&cluster, &holders[1..], home_node);
    assert_eq!(
        existing_in(&cluster, &others).len(),
        others.len(),
        "the claim waits for the frozen replica"
    );
    cluster.nodes[home_node].kill();
    cluster.nodes[home_node].restart();
    sleeper.join().unwrap();
    operator_deletes_what_the_audit_reports(&cluster, &others);
    assert!(sum_info(&cluster, "ctr_audit_orphans") >= 1);
}

/// A `FLUSHALL` whose master dies before its replicas acknowledged it: the promoted replica
/// applied the flush but claims nothing (a replica never does), so no collection is left; the
/// audit reports the flushed spread's holders on the other masters, and they stay until the
/// operator deletes them.
#[test]
fn holders_a_flush_left_behind_a_failover_are_reported_by_the_audit() {
    let mut cluster = Cluster::start_for_failovers(3, AUDIT_FAST);
    let home = "lost:flush";
    let (home_node, holders, total) = spread_over_masters(&cluster, home);
    let others = elsewhere(&cluster, &holders[1..], home_node);
    let replica = cluster.start_replica_of(home_node);
    cluster.nodes[home_node].wait_replicas(1);
    assert_eq!(cluster.client().cmd(&["CTR.GET", home]), Value::Int(total));
    assert_eq!(cluster.nodes[home_node].conn().q("FLUSHALL"), ok());
    let mut r = replica.conn();
    eventually(5, || (r.q("DBSIZE") == Value::Int(0)).then_some(()));
    // The replica holds the flush but acknowledges nothing while it sleeps: the master's
    // claims wait for it, and die with the master.
    let port = replica.port;
    let sleeper = std::thread::spawn(move || Conn::connect(port).unwrap().q("DEBUG SLEEP 1"));
    std::thread::sleep(Duration::from_millis(100));
    cluster.nodes[home_node].kill();
    sleeper.join().unwrap();
    eventually(30, || {
        (replica.info_field("replication", "role") == "master").then_some(())
    });
    operator_deletes_what_the_audit_reports(&cluster, &others);
}

/// A reshard of the home's slot cancelled after its `MIGRATE` (`SETSLOT ... STABLE` on both
/// sides) leaves the home on the target, in a slot its master does not serve, while the
/// source serves the slot without it. Absence is no proof: neither the collector (the
/// `MIGRATE`'s own `del`) nor the audit (the home is not in its slot) deletes a holder. The
/// audit reports the spread; the operator puts the reshard right (the slot given to the master
/// holding the home) and the total is whole. Before: the audit deleted the holders (the total was the home's units).
#[test]
fn a_reshard_cancelled_after_migrating_the_home_loses_no_holder() {
    let cluster = Cluster::start(3, AUDIT_FAST);
    let home = "{cancelled}views";
    let (source, holders, total) = spread_over_masters(&cluster, home);
    let target = (source + 1) % 3;
    let slot = key_slot(home.as_bytes()).to_string();
    cluster.migrate_key(home, source, target);
    let mut src = cluster.nodes[source].conn();
    let mut dst = cluster.nodes[target].conn();
    // The operator cancels the reshard.
    assert_eq!(src.cmd(&["CLUSTER", "SETSLOT", &slot, "STABLE"]), ok());
    assert_eq!(dst.cmd(&["CLUSTER", "SETSLOT", &slot, "STABLE"]), ok());
    let others = elsewhere(&cluster, &holders[1..], source);
    for &n in &others
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .collect::<std::collections::BTreeSet<_>>()
    {
        let node = &cluster.nodes[n];
        eventually(20, || {
            (info_u64(node, "ctr_orphans_reported") >= 1).then_some(())
        });
    }
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        existing_in(&cluster, &holders[1..]).len(),
        holders.len() - 1,
        "no holder deleted"
    );
    assert_eq!(sum_info(&cluster, "ctr_holders_collected"), 0);
    // The operator puts it right: the slot goes to the master that holds the home.
    cluster.give_slot(home, source, target);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        existing_in(&cluster, &holders[1..]).len(),
        holders.len() - 1
    );
    assert_eq!(cluster.client().cmd(&["CTR.GET", home]), Value::Int(total));
    assert_eq!(sum_info(&cluster, "ctr_holders_collected"), 0);
}

/// The audit never takes a holder of a living spread: a home renamed within its slot keeps
/// its holders through many passes, and a home restored after its holders (as a tool that
/// copies keys in any order does), within the grace, finds them all there.
#[test]
fn the_audit_keeps_the_holders_of_a_living_home() {
    let cluster = Cluster::start(3, &["audit-interval-ms", "100", "orphan-grace-ms", "3000"]);
    let home = "{keep}views";
    let (_, holders, total) = spread_over_masters(&cluster, home);
    let mut client = cluster.client();
    let renamed = "{keep}views:renamed";
    assert_eq!(client.cmd(&["RENAME", home, renamed]), ok());
    let passes = |c: &Cluster| {
        c.nodes
            .iter()
            .map(|n| info_u64(n, "ctr_audit_passes"))
            .min()
            .unwrap_or(0)
    };
    let before = passes(&cluster);
    eventually(10, || (passes(&cluster) >= before + 5).then_some(()));
    assert!(sum_info(&cluster, "ctr_audit_questions") >= 2);
    assert_eq!(
        existing_in(&cluster, &holders[1..]).len(),
        holders.len() - 1
    );
    assert_eq!(client.cmd(&["CTR.GET", renamed]), Value::Int(total));
    assert_eq!(sum_info(&cluster, "ctr_audit_orphans"), 0);

    // Every key dumped; the home deleted (its holders collected); the holders restored first,
    // the home a second later: within the grace, so nothing goes and the total is whole.
    let dump = |c: &mut common::cluster::ClusterClient, k: &str| match c.cmd(&["DUMP", k]) {
        Value::Bulk(b) => b,
        other => panic!("DUMP {k}: {other:?}"),
    };
    let home_dump = dump(&mut client, renamed);
    let holder_dumps: Vec<Vec<u8>> = holders[1..].iter().map(|h| dump(&mut client, h)).collect();
    let deleted = Instant::now();
    assert_eq!(client.cmd(&["DEL", renamed]), Value::Int(1));
    wait_collected(&cluster, &holders[1..], deleted, Duration::from_secs(3));
    for (h, d) in holders[1..].iter().zip(&holder_dumps) {
        let r = client.cmd(&[b"RESTORE".as_slice(), h.as_bytes(), b"0".as_slice(), d]);
        assert_eq!(r, ok(), "{h}");
    }
    std::thread::sleep(Duration::from_millis(1000));
    let r = client.cmd(&[
        b"RESTORE".as_slice(),
        renamed.as_bytes(),
        b"0".as_slice(),
        &home_dump,
    ]);
    assert_eq!(r, ok());
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(
        existing_in(&cluster, &holders[1..]).len(),
        holders.len() - 1
    );
    assert_eq!(client.cmd(&["CTR.GET", renamed]), Value::Int(total));
    assert_eq!(sum_info(&cluster, "ctr_audit_orphans"), 0);
}
