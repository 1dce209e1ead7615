//! Issue 22, finding 6, against real servers: a replica's gather cache never serves a value of
//! a holder that was folded or replaced. A READONLY read on a replica of the home's master, with
//! `ctr.gather-cache-ms` set, reads the exact total after a shrink 3 -> 2 and a growth back to
//! 3, and after the spread was deleted and made again (the cache used to match on the holder
//! count alone and read 2001 for 1001).

mod common;

use common::cluster::{key_slot, Cluster, ClusterClient};
use common::{eventually, names, Value};

fn ok() -> Value {
    Value::Simple("OK".into())
}

/// A home key served by master `node`.
fn home_on(cluster: &Cluster, node: usize, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| cluster.owner(key_slot(k.as_bytes())) == node)
        .unwrap()
}

/// How many holders of `home` are still folding back, as its master says.
fn leaving(client: &mut ClusterClient, home: &str) -> usize {
    let info = client.cmd(&["CTR.INFO", home]);
    info.field("leaving").array().len()
}

/// Holder names (holder 0 first) as the server behind `conn` reads them.
fn holders_at(conn: &mut common::Conn, home: &str) -> Vec<String> {
    names(&conn.cmd(&["CTR.INFO", home]).field("holders"))
}

#[test]
fn a_replica_never_serves_a_cached_value_of_a_folded_or_replaced_holder() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home_node = 0;
    let home = home_on(&cluster, home_node, "views");
    let replica = cluster.start_replica_of(home_node);
    let mut r = replica.conn();
    assert_eq!(r.q("READONLY"), ok());
    assert_eq!(r.q("CONFIG SET ctr.gather-cache-ms 60000"), ok());
    let mut m = cluster.nodes[home_node].conn();
    assert_eq!(m.q("CONFIG SET ctr.gather-cache-ms 60000"), ok());

    // Shrink 3 -> 2, then grow back to 3: the same count, another third holder.
    assert_eq!(client.cmd(&["CTR.ADD", &home, "1"]), Value::Int(1));
    let holders = names(&client.cmd(&["CTR.SPREAD", &home, "3"]));
    assert_eq!(
        client.cmd(&["CTR.ADD", &holders[2], "1000"]),
        Value::Int(1000)
    );
    cluster.nodes[home_node].wait_replicas(1);
    assert_eq!(r.cmd(&["CTR.GET", &home]), Value::Int(1001), "replica");
    assert_eq!(m.cmd(&["CTR.GET", &home]), Value::Int(1001), "master");
    assert_eq!(names(&client.cmd(&["CTR.SPREAD", &home, "2"])).len(), 2);
    eventually(20, || (leaving(&mut client, &home) == 0).then_some(()));
    let regrown = names(&client.cmd(&["CTR.SPREAD", &home, "3"]));
    assert_eq!(regrown.len(), 3);
    assert_ne!(regrown[2], holders[2], "a folded name is never reused");
    cluster.nodes[home_node].wait_replicas(1);
    assert_eq!(holders_at(&mut r, &home), regrown);
    assert_eq!(r.cmd(&["CTR.GET", &home]), Value::Int(1001), "replica");
    assert_eq!(m.cmd(&["CTR.GET", &home]), Value::Int(1001), "master");
    // A read through the cache stays exact too (nothing changed since the last gather).
    assert_eq!(
        r.cmd(&["CTR.GET", &home]),
        Value::Int(1001),
        "replica, cached"
    );

    // The spread deleted and made again: its new holders, not the orphaned ones, count.
    let home = home_on(&cluster, home_node, "likes");
    assert_eq!(client.cmd(&["CTR.ADD", &home, "1001"]), Value::Int(1001));
    let first = names(&client.cmd(&["CTR.SPREAD", &home, "3"]));
    assert_eq!(
        client.cmd(&["CTR.ADD", &first[2], "1000"]),
        Value::Int(1000)
    );
    cluster.nodes[home_node].wait_replicas(1);
    assert_eq!(r.cmd(&["CTR.GET", &home]), Value::Int(2001), "replica");
    assert_eq!(m.cmd(&["CTR.GET", &home]), Value::Int(2001), "master");
    assert_eq!(client.cmd(&["DEL", &home]), Value::Int(1));
    assert_eq!(client.cmd(&["CTR.ADD", &home, "1001"]), Value::Int(1001));
    let again = names(&client.cmd(&["CTR.SPREAD", &home, "3"]));
    assert!(again[1..].iter().all(|h| !first.contains(h)));
    cluster.nodes[home_node].wait_replicas(1);
    assert_eq!(holders_at(&mut r, &home), again);
    assert_eq!(r.cmd(&["CTR.GET", &home]), Value::Int(1001), "replica");
    assert_eq!(m.cmd(&["CTR.GET", &home]), Value::Int(1001), "master");
}
