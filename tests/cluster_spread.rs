//! Spread counters on a real 3-master cluster: holders land evenly on every master, many
//! clients writing random holders leave an exact total that any node's CTR.GET of the home key
//! gathers, and reads during writes stay between the acknowledged and the sent total; a
//! replica reads a total; auto-spread under a pipelined load; reads inside MULTI are refused unless the cache bound allows them; a holder whose
//! slot is migrating fails the read with TRYAGAIN (never a partial sum) and the total is exact
//! after the move; a killed master makes reads fail clearly within the gather timeout; shrinking
//! during writes keeps the total exact, also when a holder's master and then the home's master
//! die in the middle of the fold; folds wait while the holders' masters pause writes; a read
//! right after a reshard asks where the moved holders are now instead of failing.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{key_slot, Cluster, ClusterClient};
use common::{eventually, names, Conn, Frozen, Lcg, Server, Value};

fn ok() -> Value {
    Value::Simple("OK".into())
}

/// The node index of each holder.
fn owners(cluster: &Cluster, holders: &[String]) -> Vec<usize> {
    holders
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .collect()
}

/// Writes `adds` random deltas to random holders from `clients` threads; returns their sum.
fn write_randomly(cluster: &Cluster, holders: &[String], clients: u64, adds: u64) -> i64 {
    let seed_port = cluster.nodes[0].port;
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let holders = holders.to_vec();
            std::thread::spawn(move || {
                let mut client = ClusterClient::connect(seed_port);
                let mut rng = Lcg(t + 1);
                let mut sum = 0i64;
                for _ in 0..adds {
                    let holder = &holders[rng.next(holders.len() as u64) as usize];
                    let delta = rng.next(200) as i64 - 50;
                    let reply = client.cmd(&["CTR.ADD", holder, &delta.to_string()]);
                    assert!(matches!(reply, Value::Int(_)), "{reply:?}");
                    sum += delta;
                }
                sum
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).sum()
}

/// While writers add positive deltas to random holders, every read of the total lies between
/// what was acknowledged before the read began and what was sent by the time it ended.
fn reads_during_writes_stay_within_bounds(cluster: &Cluster, holders: &[String], base: i64) {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::SeqCst};
    use std::sync::Arc;
    let (sent, acked, stop) = (
        Arc::new(AtomicI64::new(base)),
        Arc::new(AtomicI64::new(base)),
        Arc::new(AtomicBool::new(false)),
    );
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let (sent, acked, stop) = (sent.clone(), acked.clone(), stop.clone());
            let holders = holders.to_vec();
            let port = cluster.nodes[0].port;
            std::thread::spawn(move || {
                let mut client = ClusterClient::connect(port);
                let mut rng = Lcg(100 + t);
                while !stop.load(SeqCst) {
                    let holder = &holders[rng.next(holders.len() as u64) as usize];
                    let delta = 1 + rng.next(9) as i64;
                    sent.fetch_add(delta, SeqCst);
                    let reply = client.cmd(&["CTR.ADD", holder, &delta.to_string()]);
                    assert!(matches!(reply, Value::Int(_)), "{reply:?}");
                    acked.fetch_add(delta, SeqCst);
                }
            })
        })
        .collect();
    let mut reader = ClusterClient::connect(cluster.nodes[1].port);
    for _ in 0..40 {
        let low = acked.load(SeqCst);
        let total = reader.cmd(&["CTR.GET", &holders[0]]).int();
        let high = sent.load(SeqCst);
        assert!(low <= total && total <= high, "{low} <= {total} <= {high}");
    }
    stop.store(true, SeqCst);
    writers.into_iter().for_each(|w| w.join().unwrap());
    assert_eq!(
        reader.cmd(&["CTR.GET", &holders[0]]),
        Value::Int(acked.load(SeqCst))
    );
}

#[test]
fn holders_land_on_every_master_and_the_gathered_total_is_exact() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{page:1}:views";
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
    assert_eq!(holders.len(), 16);
    assert_eq!(holders[0], home);
    let mut per_node = [0usize; 3];
    for n in owners(&cluster, &holders) {
        per_node[n] += 1;
    }
    let mut sorted = per_node;
    sorted.sort_unstable();
    assert_eq!(sorted, [5, 5, 6], "per node: {per_node:?}");

    let expected = write_randomly(&cluster, &holders, 6, 200);
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(expected));
    reads_during_writes_stay_within_bounds(&cluster, &holders, expected);
    let expected = client.cmd(&["CTR.GET", home]).int();
    let info = client.cmd(&["CTR.INFO", home]);
    assert_eq!(info.field("value"), Value::Int(expected));
    assert_eq!(names(&info.field("holders")), holders);
    let parts: i64 = info
        .field("holder_values")
        .array()
        .iter()
        .map(Value::int)
        .sum();
    assert_eq!(parts, expected);
    // Each holder's own value is what its master says.
    for (h, v) in holders.iter().zip(info.field("holder_values").array()) {
        if h != home {
            assert_eq!(client.cmd(&["CTR.GET", h]), v, "{h}");
        }
    }
    assert_eq!(
        client.cmd(&["CTR.MGET", home, "{page:1}:other"]),
        Value::Array(vec![Value::Int(expected), Value::Int(0)])
    );
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let served: u64 = (0..3)
        .filter(|&n| n != home_node)
        .map(|n| {
            cluster.nodes[n]
                .info_field("ctr", "ctr_gather_requests_served")
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert!(served >= 4, "other masters answered the gathers: {served}");

    // Inside MULTI the client cannot wait for other masters: a clear error, unless the
    // cache bound allows the last gathered values.
    let mut h = cluster.nodes[home_node].conn();
    assert_eq!(h.q("MULTI"), ok());
    h.cmd(&["CTR.GET", home]);
    let exec = h.q("EXEC").array();
    assert!(exec[0].error().contains("MULTI"), "{exec:?}");
    assert_eq!(h.q("CONFIG SET ctr.gather-cache-ms 60000"), ok());
    assert_eq!(h.cmd(&["CTR.GET", home]), Value::Int(expected));
    assert_eq!(h.q("MULTI"), ok());
    h.cmd(&["CTR.GET", home]);
    assert_eq!(h.q("EXEC"), Value::Array(vec![Value::Int(expected)]));
    // CTR.INFO says how old each value is: the home's own is read afresh, the holders come
    // from the cache.
    std::thread::sleep(Duration::from_millis(100));
    let info = h.cmd(&["CTR.INFO", home]);
    for (name, age) in holders.iter().zip(info.field("holder_ages_ms").array()) {
        if name == home {
            assert_eq!(age, Value::Int(0), "{name} is read afresh");
        } else {
            assert!(age.int() >= 50, "{name} comes from the cache: {age:?}");
        }
    }
    assert_eq!(h.q("CONFIG SET ctr.gather-cache-ms 0"), ok());

    // Resharding a holder's slot: while the key is half-moved the read says TRYAGAIN (never a
    // sum without it); after the move the total is exact again.
    let (moved, from) = holders
        .iter()
        .zip(owners(&cluster, &holders))
        .find(|(_, n)| *n != home_node)
        .map(|(h, n)| (h.clone(), n))
        .unwrap();
    let to = (0..3).find(|&n| n != home_node && n != from).unwrap();
    let slot = key_slot(moved.as_bytes()).to_string();
    let mut src = cluster.nodes[from].conn();
    let mut dst = cluster.nodes[to].conn();
    let (from_id, to_id) = (cluster.ids[from].clone(), cluster.ids[to].clone());
    assert_eq!(
        dst.cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
        ok()
    );
    assert_eq!(
        src.cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
        ok()
    );
    // Still on the source: served there.
    assert_eq!(h.cmd(&["CTR.GET", home]), Value::Int(expected));
    let to_port = cluster.nodes[to].port.to_string();
    src.cmd(&["CTR.ADD", &moved, "0"]); // make sure the key exists to be migrated
    assert_eq!(
        src.cmd(&[
            "MIGRATE",
            "127.0.0.1",
            &to_port,
            "",
            "0",
            "5000",
            "KEYS",
            &moved
        ]),
        ok()
    );
    let e = h.cmd(&["CTR.GET", home]).error();
    assert!(e.starts_with("TRYAGAIN"), "{e}");
    for node in 0..3 {
        let reply = cluster.nodes[node]
            .conn()
            .cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
        assert_eq!(reply, ok());
    }
    cluster.wait_settled();
    let more = write_randomly(&cluster, &holders, 2, 50);
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(expected + more));

    // Auto-spread under a pipelined load: the counter spreads itself over every master.
    let auto = "auto";
    let auto_node = cluster.owner(key_slot(auto.as_bytes()));
    let mut a = cluster.nodes[auto_node].conn();
    assert_eq!(a.q("CONFIG SET ctr.spread-threshold 200"), ok());
    assert_eq!(a.q("CONFIG SET ctr.spread-holders 6"), ok());
    let started = Instant::now();
    let mut sent = 0i64;
    let auto_holders = loop {
        let info = a.cmd(&["CTR.INFO", auto]);
        if let Value::Array(items) = &info {
            if let Some(pair) = items.chunks(2).find(|p| p[0].bytes() == b"holders") {
                break names(&pair[1]);
            }
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never spread");
        for _ in 0..500 {
            a.send(&["CTR.ADD", auto, "1"]);
        }
        for _ in 0..500 {
            assert!(matches!(a.read().unwrap(), Value::Int(_)));
        }
        sent += 500;
    };
    assert_eq!(auto_holders.len(), 6);
    let mut on = owners(&cluster, &auto_holders);
    on.sort_unstable();
    on.dedup();
    assert_eq!(on.len(), 3, "auto-spread holders on every master");
    let more = write_randomly(&cluster, &auto_holders, 2, 50);
    assert_eq!(client.cmd(&["CTR.GET", auto]), Value::Int(sent + more));
}

/// A read right after a reshard, while the home's master still holds the slot map it read a
/// moment before, finds holders where they are now: a master that no longer serves a holder
/// says so, and the gather asks the master a fresh map names (here one holder moved to the
/// third master, one to the home's own master) instead of failing the read with `TRYAGAIN`.
#[test]
fn a_read_right_after_a_reshard_asks_where_the_holders_are_now() {
    let cluster = Cluster::start(3, &[]);
    let home = "{resharded}";
    let (home_node, holders, total) = common::cluster::spread_over_masters(&cluster, home);
    let on = owners(&cluster, &holders);
    let others: Vec<usize> = (0..3).filter(|&n| n != home_node).collect();
    let away = |node: usize| {
        let i = (1..holders.len()).find(|&i| on[i] == node)?;
        Some(holders[i].clone())
    };
    // One holder from a master that is not the home's to the third master, one from the
    // third master to the home's master.
    let (x, y) = (others[0], others[1]);
    let (to_third, to_home) = (away(x).unwrap(), away(y).unwrap());
    let mut h = cluster.nodes[home_node].conn();
    let reroutes = || {
        cluster.nodes[home_node]
            .info_field("ctr", "ctr_gather_reroutes")
            .parse::<u64>()
            .unwrap()
    };
    let before = reroutes();
    let started = Instant::now();
    assert_eq!(h.cmd(&["CTR.GET", home]), Value::Int(total)); // the map is read here
    for (key, from, to) in [(&to_third, x, y), (&to_home, y, home_node)] {
        cluster.migrate_key(key, from, to);
        cluster.give_slot(key, from, to);
    }
    let read = h.cmd(&["CTR.GET", home]);
    let elapsed = started.elapsed();
    assert_eq!(read, Value::Int(total), "exact, not TRYAGAIN");
    // The map read by the first CTR.GET is kept for 1 s: within it, both holders were asked
    // again (past it the second read read a fresh map, and nothing was stale).
    if elapsed < Duration::from_millis(900) {
        assert_eq!(reroutes() - before, 2, "both moved holders asked again");
    } else {
        eprintln!("note: the moves took {elapsed:?}: the second read found a fresh map");
    }
    // Writes follow the holders, and the total stays exact.
    let more = write_randomly(&cluster, &holders, 2, 30);
    assert_eq!(h.cmd(&["CTR.GET", home]), Value::Int(total + more));
}

#[test]
fn a_killed_master_makes_reads_fail_clearly_within_the_timeout() {
    let mut cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "hot";
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "6"]));
    let expected = write_randomly(&cluster, &holders, 2, 30);
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(expected));
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let victim = (0..3).find(|&n| n != home_node).unwrap();
    let mut h: Conn = cluster.nodes[home_node].conn();
    // The default timeout (1 s) while healthy, a short one for the failure.
    assert_eq!(h.q("CONFIG SET ctr.gather-timeout-ms 300"), ok());
    cluster.nodes[victim].kill();
    for _ in 0..3 {
        let started = Instant::now();
        let e = h.cmd(&["CTR.GET", home]).error();
        assert!(e.contains("unavailable"), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }
    assert!(cluster.nodes[home_node]
        .info_field("ctr", "ctr_gather_failures")
        .parse::<u64>()
        .is_ok_and(|n| n >= 3));
}

#[test]
fn replicas_read_the_total_and_after_a_failover_it_is_exact_again() {
    let mut cluster = Cluster::start_for_failovers(3, &[]);
    let mut client = cluster.client();
    // A home on one master; a replica of another master, which serves some holders.
    let home = "{views}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let victim = (0..3).find(|&n| n != home_node).unwrap();
    let replica = cluster.start_replica_of(victim);
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "9"]));
    assert!(owners(&cluster, &holders).contains(&victim));
    let expected = write_randomly(&cluster, &holders, 3, 60);
    cluster.nodes[victim].wait_replicas(1);

    // A replica-reading client of the victim's replica reads a home of the victim's slots:
    // the replica gathers from the masters.
    let replica_home = (0..)
        .map(|i| format!("r{i}"))
        .find(|k| cluster.owner(key_slot(k.as_bytes())) == victim)
        .unwrap();
    let replica_holders = names(&client.cmd(&["CTR.SPREAD", &replica_home, "4"]));
    let replica_expected = write_randomly(&cluster, &replica_holders, 1, 20);
    cluster.nodes[victim].wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(r.q("READONLY"), ok());
    assert_eq!(
        r.cmd(&["CTR.GET", &replica_home]),
        Value::Int(replica_expected)
    );

    // The victim dies: reads of the total fail clearly until its replica takes over, then the
    // total is exact again (every write had reached the replica).
    let mut h = cluster.nodes[home_node].conn();
    assert_eq!(h.q("CONFIG SET ctr.gather-timeout-ms 300"), ok());
    cluster.nodes[victim].kill();
    assert!(h.cmd(&["CTR.GET", home]).is_error());
    let total = eventually(40, || match h.cmd(&["CTR.GET", home]) {
        Value::Int(v) => Some(v),
        _ => None,
    });
    assert_eq!(total, expected);
}

/// A replica that takes over (`CLUSTER FAILOVER TAKEOVER`) from a frozen master, one the others
/// have not marked failed yet (15 s here), serves the slots it took at once. On Redis 7.2+ and
/// Valkey its `CLUSTER SHARDS` shows that shard without slots until the old master is marked
/// failed; the server's own routing check stands in for it there. Its read of the home it took
/// gathers the exact total, and an add there counts.
#[test]
fn a_takeover_serves_the_slots_it_took_before_its_old_master_is_failed() {
    let cluster = Cluster::start_patient(3, &[]);
    let mut client = cluster.client();
    let home = "{taken}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let replica = cluster.start_replica_of(home_node);
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "9"]));
    assert!(owners(&cluster, &holders).contains(&home_node));
    let expected = write_randomly(&cluster, &holders, 2, 30);
    cluster.nodes[home_node].wait_replicas(1);
    let frozen = Frozen::freeze(cluster.nodes[home_node].pid().expect("started here"));
    let mut r = replica.conn();
    assert_eq!(r.q("CLUSTER FAILOVER TAKEOVER").text(), "OK");
    // Well before the old master can be marked failed (PFAIL only after 15 s).
    let total = eventually(8, || match r.cmd(&["CTR.GET", home]) {
        Value::Int(v) => Some(v),
        _ => None,
    });
    assert_eq!(total, expected);
    let added = r.cmd(&["CTR.ADD", home, "5"]);
    assert!(matches!(added, Value::Int(_)), "{added:?}");
    assert_eq!(r.cmd(&["CTR.GET", home]), Value::Int(expected + 5));
    drop(frozen);
}

/// A field of a CTR.INFO reply (a flat array of names and values).
fn info_field(info: &Value, field: &str) -> Option<Value> {
    let items = info.array();
    let at = items
        .iter()
        .position(|v| matches!(v, Value::Bulk(b) if b == field.as_bytes()))?;
    Some(items[at + 1].clone())
}

/// The home's current holders, as a writer re-reads them after a sealed-holder error.
fn current_holders(client: &mut ClusterClient, home: &str) -> Vec<String> {
    let info = client.cmd(&["CTR.INFO", home]);
    info_field(&info, "holders").map_or_else(|| vec![home.to_string()], |h| names(&h))
}

fn still_leaving(client: &mut ClusterClient, home: &str) -> usize {
    let info = client.cmd(&["CTR.INFO", home]);
    info_field(&info, "leaving").map_or(0, |l| l.array().len())
}

#[test]
fn shrinking_during_writes_keeps_the_total_exact_and_reads_never_go_back() {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::SeqCst};
    use std::sync::Arc;
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "folding";
    names(&client.cmd(&["CTR.SPREAD", home, "9"]));
    let seed = cluster.nodes[0].port;
    let (acked, stop) = (
        Arc::new(AtomicI64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    // Writers add positive deltas to random holders of the list they know, re-reading it when
    // a holder says it was folded back.
    let writers: Vec<_> = (0..3u64)
        .map(|t| {
            let (acked, stop) = (acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut client = ClusterClient::connect(seed);
                let mut holders = current_holders(&mut client, home);
                let mut rng = Lcg(t + 7);
                let mut refreshed = 0;
                while !stop.load(SeqCst) {
                    let holder = holders[rng.next(holders.len() as u64) as usize].clone();
                    let delta = rng.next(9) as i64 + 1;
                    match client.cmd(&["CTR.ADD", &holder, &delta.to_string()]) {
                        Value::Int(_) => {
                            acked.fetch_add(delta, SeqCst);
                        }
                        Value::Error(e) if e.contains("folded back") => {
                            holders = current_holders(&mut client, home);
                            refreshed += 1;
                        }
                        other => panic!("{other:?}"),
                    }
                }
                refreshed
            })
        })
        .collect();
    let reader = {
        let (acked, stop) = (acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut client = ClusterClient::connect(seed);
            let mut reads = 0;
            while !stop.load(SeqCst) {
                let floor = acked.load(SeqCst);
                let total = client.cmd(&["CTR.GET", home]).int();
                assert!(
                    total >= floor,
                    "read {total} below the acknowledged {floor}"
                );
                reads += 1;
            }
            reads
        })
    };
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(names(&client.cmd(&["CTR.SPREAD", home, "3"])).len(), 3);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(names(&client.cmd(&["CTR.SPREAD", home, "1"])), vec![home]);
    std::thread::sleep(Duration::from_millis(400));
    stop.store(true, SeqCst);
    let refreshed: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(reader.join().unwrap() > 0);
    assert!(refreshed > 0, "some writer met a folded holder");
    eventually(20, || (still_leaving(&mut client, home) == 0).then_some(()));
    let expected = acked.load(SeqCst);
    for node in &cluster.nodes {
        let mut c = ClusterClient::connect(node.port);
        assert_eq!(c.cmd(&["CTR.GET", home]), Value::Int(expected));
    }
    assert_eq!(
        info_field(&client.cmd(&["CTR.INFO", home]), "holders"),
        None
    );
}

/// Credits are held on the first masters (a load-time debug hook), so the fold stops after
/// its holders are sealed. The master of some holders dies (its replica takes over and sends
/// their credits again), then the home's master dies: its replica, which does not hold
/// credits, applies them. The total is exact at every step and the fold completes.
#[test]
fn a_fold_survives_the_death_of_a_holders_master_and_of_the_homes_master() {
    let mut cluster = Cluster::start_for_failovers(3, &["debug-hold-credits", "yes"]);
    let mut client = cluster.client();
    let home = "{survivor}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let victim = (0..3).find(|&n| n != home_node).unwrap();
    let victim_replica = cluster.start_replica_of(victim);
    let home_replica = cluster.start_replica_of(home_node);
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "7"]));
    let mut expected = write_randomly(&cluster, &holders, 2, 40);
    let on_victim: Vec<String> = holders
        .iter()
        .filter(|h| cluster.owner(key_slot(h.as_bytes())) == victim)
        .cloned()
        .collect();
    assert!(!on_victim.is_empty());

    assert_eq!(names(&client.cmd(&["CTR.SPREAD", home, "1"])), vec![home]);
    // Sealed (writes refused), credit held: the total stays exact. Adds before the seal count.
    eventually(20, || match client.cmd(&["CTR.ADD", &on_victim[0], "1"]) {
        Value::Int(_) => {
            expected += 1;
            None
        }
        e => Some(e.error()),
    });
    let e = client.cmd(&["CTR.ADD", &on_victim[0], "1"]).error();
    assert!(e.contains("folded back"), "{e}");
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(expected));
    assert_eq!(still_leaving(&mut client, home), 6);

    // The holder's master dies after the seal, before any ack.
    cluster.nodes[victim].wait_replicas(1);
    cluster.nodes[victim].kill();
    let mut h = cluster.nodes[home_node].conn();
    let total = eventually(40, || match h.cmd(&["CTR.GET", home]) {
        Value::Int(v) => Some(v),
        _ => None,
    });
    assert_eq!(total, expected, "after the holder's master failed over");
    let mut promoted = victim_replica.conn();
    for holder in &on_victim {
        let e = promoted.cmd(&["CTR.ADD", holder, "1"]).error();
        assert!(e.contains("folded back"), "{e}");
    }

    // The home's master dies with every credit still held.
    cluster.nodes[home_node].wait_replicas(1);
    cluster.nodes[home_node].kill();
    let mut r = home_replica.conn();
    let leaving = |r: &mut Conn| {
        let info = r.cmd(&["CTR.INFO", home]);
        (!info.is_error()).then(|| info_field(&info, "leaving").map_or(0, |l| l.array().len()))
    };
    eventually(60, || (leaving(&mut r) == Some(0)).then_some(()));
    assert_eq!(r.cmd(&["CTR.GET", home]), Value::Int(expected));
    assert!(
        home_replica
            .info_field("ctr", "ctr_transfers_credited")
            .parse::<u64>()
            .is_ok_and(|n| n >= 6),
        "the promoted replica applied the credits"
    );
}

/// Transfer messages wait for the replicas of the master that sends them, so a failover to a
/// replica can neither lose a credit the giver was told about nor meet a credit of a debit the
/// new master never made. A frozen replica (DEBUG SLEEP: it stops acknowledging) holds back
/// what its master sends: first a holder's master keeps its sealed holders' credits, then the
/// home keeps the acks of the credits it applied; once they catch up, every fold completes.
#[test]
fn transfer_messages_wait_until_the_senders_replicas_hold_the_write() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{gated}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "6"]));
    let owner_of = owners(&cluster, &holders[1..]);
    let giver = (0..3)
        .find(|&n| n != home_node && owner_of.contains(&n))
        .unwrap();
    let on_giver = owner_of.iter().filter(|&&n| n == giver).count();
    let home_replica = cluster.start_replica_of(home_node);
    let giver_replica = cluster.start_replica_of(giver);
    let expected = write_randomly(&cluster, &holders, 1, 30);
    cluster.nodes[home_node].wait_replicas(1);
    cluster.nodes[giver].wait_replicas(1);
    let acked_by_giver = || -> u64 {
        cluster.nodes[giver]
            .info_field("ctr", "ctr_transfers_acked")
            .parse()
            .unwrap()
    };
    let freeze = |replica: &Server, secs: u32| {
        let mut conn = replica.conn();
        std::thread::spawn(move || conn.cmd(&["DEBUG", "SLEEP", &secs.to_string()]))
    };

    // The giver's replica is frozen: its holders are sealed, their credits held back.
    let giver_sleeps = freeze(&giver_replica, 8);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(names(&client.cmd(&["CTR.SPREAD", home, "1"])), vec![home]);
    eventually(6, || {
        (still_leaving(&mut client, home) == on_giver).then_some(())
    });
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(expected));

    // Now the home's replica freezes too: once the giver's replica wakes, its credits reach the
    // home and are applied, but the home acknowledges none of them yet.
    let home_sleeps = freeze(&home_replica, 10);
    std::thread::sleep(Duration::from_millis(300));
    let before = acked_by_giver();
    assert_eq!(giver_sleeps.join().unwrap(), ok());
    eventually(5, || (still_leaving(&mut client, home) == 0).then_some(()));
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(expected));
    assert_eq!(
        acked_by_giver(),
        before,
        "no ack while the home's replica lacks the credits"
    );

    assert_eq!(home_sleeps.join().unwrap(), ok());
    eventually(15, || {
        (acked_by_giver() == before + on_giver as u64).then_some(())
    });
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(expected));
}

/// Issue 23, item 3, on a 3-master cluster: a home spread to 16 and shrunk to 1, again and
/// again (one add on a holder each time). Each fold completes in the background, the total
/// is exact, and the home's state grows by one retired spread id a cycle at most (8 bytes,
/// the last 64 kept) and the listing of the token window (bounded), not by inbox entries: a spread whose folds have all landed is retired (its
/// holders' inbox entries go). Before, each cycle left 15 inbox entries in the home for ever.
#[test]
fn grow_and_shrink_cycles_complete_every_fold_and_keep_the_home_small() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "cycling";
    let cycles = 20;
    // Sizes of the state, not of its LZF packing (which follows how close the listing's
    // times are, so the machine's speed).
    for port in cluster.ports() {
        client.conn(port).q("CONFIG SET rdbcompression no");
    }
    let mut sizes = Vec::new();
    for cycle in 0..cycles {
        let holders = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
        assert_eq!(holders.len(), 16, "cycle {cycle}");
        client
            .cmd(&["CTR.ADD", &holders[1 + cycle % 15], "1"])
            .int();
        assert_eq!(names(&client.cmd(&["CTR.SPREAD", home, "1"])), vec![home]);
        eventually(20, || (still_leaving(&mut client, home) == 0).then_some(()));
        assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(cycle as i64 + 1));
        match client.cmd(&["DUMP", home]) {
            Value::Bulk(b) => sizes.push(b.len()),
            other => panic!("DUMP: {other:?}"),
        }
    }
    common::note(&format!("home DUMP bytes per cycle: {sizes:?}"));
    // The home keeps the id of each retired spread (8 bytes, the last 64), no inbox entry per
    // holder; and, for the token window, its listing (`counter::listing`: the 15 holders of
    // each cycle, 24 bytes each and 16 for the spread's home, at most 2,048 entries), which
    // purchases' retries walk.
    let grown = sizes.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(
        grown <= 9 + 15 * 24 + 16,
        "the home's state grew {grown} bytes a cycle: {sizes:?}"
    );
}

/// Writes paused on the holders' masters (`CLIENT PAUSE WRITE`, as a manual failover or the
/// handoff of an atomic slot migration pauses them) while a shrink's folds travel: the module's
/// bus receivers and timers there write nothing during the pause (each skip counted in
/// `ctr_paused_skips`: a write then would be replicated while the server holds replica traffic
/// back, which Redis 8.6 refuses with an assertion; before, the folds completed during the
/// pause), every master stays up, and the folds complete once writes go on, the total exact.
#[test]
fn folds_wait_while_writes_are_paused_and_complete_after() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{paused}";
    let (home_node, holders, total) = common::cluster::spread_over_masters(&cluster, home);
    let others: Vec<usize> = (0..3).filter(|&n| n != home_node).collect();
    for &n in &others {
        assert_eq!(cluster.nodes[n].conn().q("CLIENT PAUSE 1500 WRITE"), ok());
    }
    assert_eq!(names(&client.cmd(&["CTR.SPREAD", home, "1"])), vec![home]);
    // The folds toward the holders on the paused masters wait for them.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        still_leaving(&mut client, home) > 0,
        "the folds wait for the paused masters"
    );
    let skipped: u64 = others
        .iter()
        .map(|&n| {
            let field = cluster.nodes[n].info_field("ctr", "ctr_paused_skips");
            field.parse::<u64>().expect("ctr_paused_skips")
        })
        .sum();
    assert!(skipped > 0, "the paused masters skipped their work");
    eventually(30, || (still_leaving(&mut client, home) == 0).then_some(()));
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(total));
    for (i, node) in cluster.nodes.iter().enumerate() {
        assert_eq!(
            node.conn().q("PING"),
            Value::Simple("PONG".into()),
            "node {i}"
        );
    }
    // A folded holder keeps nothing back once the home's acknowledgement reached it.
    for holder in &holders[1..] {
        eventually(30, || {
            (client.cmd(&["CTR.GET", holder]) == Value::Int(0)).then_some(())
        });
    }
}
