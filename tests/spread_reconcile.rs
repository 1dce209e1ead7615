//! CTR.RECONCILE of a spread counter's home sets the counter's total (every holder gathered),
//! replies `[truth, drift]` with the drift of the whole counter, replicates and persists as a
//! plain reconcile of the home; the holders keep their units and later adds count on top. A
//! watermark (`AT`) and a floored spread are refused, changing nothing. On one server and on a
//! 3-master cluster. Before: only the home's own units were set (reply `[500, -490]`, total
//! 700).

mod common;

use common::cluster::{spread_over_masters, Cluster};
use common::{names, Server, Value};

#[test]
fn reconciling_a_spread_home_sets_its_total_on_one_server() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    c.q("CTR.ADD views 5");
    let h = names(&c.q("CTR.SPREAD views 4"));
    for (holder, delta) in h[1..].iter().zip(["7", "10", "-2"]) {
        c.cmd(&["CTR.ADD", holder, delta]);
    }
    assert_eq!(c.q("CTR.GET views"), Value::Int(20));
    let reply = c.q("CTR.RECONCILE views 500").array();
    assert_eq!(reply, vec![Value::Int(500), Value::Int(-480)]);
    assert_eq!(c.q("CTR.GET views"), Value::Int(500));
    for (holder, units) in h[1..].iter().zip([7, 10, -2]) {
        assert_eq!(
            c.cmd(&["CTR.GET", holder]),
            Value::Int(units),
            "{holder} kept"
        );
    }
    let info = c.q("CTR.INFO views");
    assert_eq!(info.field("last_drift"), Value::Int(-480));
    c.cmd(&["CTR.ADD", &h[2], "1"]);
    assert_eq!(c.q("CTR.GET views"), Value::Int(501));
    // The same truth again: the total is already it, nothing changes.
    assert_eq!(
        c.q("CTR.RECONCILE views 501").array(),
        vec![Value::Int(501), Value::Int(0)]
    );
    server.wait_replicas(1);
    let mut r = replica.conn();
    for k in &h {
        assert_eq!(
            r.cmd(&["DEBUG", "DIGEST-VALUE", k]),
            c.cmd(&["DEBUG", "DIGEST-VALUE", k]),
            "{k} on the replica"
        );
    }
    assert_eq!(r.q("CTR.GET views"), Value::Int(501));
    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    assert_eq!(c.q("CTR.GET views"), Value::Int(501));
}

#[test]
fn a_watermark_or_a_floor_on_a_spread_home_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD views 5");
    let h = names(&c.q("CTR.SPREAD views 3"));
    c.cmd(&["CTR.ADD", &h[1], "4"]);
    let digest = c.q("DEBUG DIGEST-VALUE views");
    let e = c.q("CTR.RECONCILE views 100 AT 0").error();
    assert!(e.contains("not supported on a spread counter"), "{e}");
    assert_eq!(c.q("DEBUG DIGEST-VALUE views"), digest);
    assert_eq!(c.q("CTR.GET views"), Value::Int(9));

    c.q("CTR.ADD stock 100");
    assert_eq!(c.q("CTR.FLOOR stock 0"), Value::Simple("OK".into()));
    names(&c.q("CTR.SPREAD stock 3"));
    let e = c.q("CTR.RECONCILE stock 50").error();
    assert!(
        e.contains("cannot reconcile a floored spread counter"),
        "{e}"
    );
    assert_eq!(c.q("CTR.GET stock"), Value::Int(100));
}

#[test]
fn reconciling_a_spread_home_across_masters_sets_its_total() {
    let cluster = Cluster::start(3, &[]);
    let home = "{truth}views";
    let (_, holders, total) = spread_over_masters(&cluster, home);
    let mut client = cluster.client();
    let reply = client.cmd(&["CTR.RECONCILE", home, "1000"]).array();
    assert_eq!(reply, vec![Value::Int(1000), Value::Int(total - 1000)]);
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(1000));
    client.cmd(&["CTR.ADD", &holders[3], "2"]);
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(1002));
}
