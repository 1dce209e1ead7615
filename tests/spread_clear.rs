//! CTR.CLEAR of a spread counter's home clears the total, not the home's own value: the reply
//! is the total before, CTR.GET reads 0 after, later adds count; a TOKEN replays the first
//! reply and clears nothing again. On one server and on a 3-master cluster (holders on the
//! other masters), where the home's replica, an AOF replay, an AOF rewrite and DEBUG RELOAD
//! give the same total, MULTI refuses a clear that would wait, and a holder's master that
//! does not answer fails the clear with the gather's error and changes nothing. A floored
//! spread home refuses the clear and changes nothing.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{key_slot, spread_over_masters, Cluster, ClusterClient};
use common::{names, Conn, Server, Value};

fn ok() -> Value {
    Value::Simple("OK".into())
}

fn holder_values(c: &mut Conn, home: &str) -> Value {
    c.cmd(&["CTR.INFO", home]).field("holder_values")
}

fn clears(server: &Server) -> u64 {
    server
        .info_field("ctr", "ctr_clears")
        .parse()
        .expect("ctr_clears")
}

#[test]
fn clearing_a_spread_home_clears_the_total_on_one_server() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    c.q("CTR.ADD views 5");
    let h = names(&c.q("CTR.SPREAD views 4"));
    assert_eq!(h.len(), 4);
    for (holder, delta) in h[1..].iter().zip(["7", "10", "-2"]) {
        c.cmd(&["CTR.ADD", holder, delta]);
    }
    assert_eq!(c.q("CTR.GET views"), Value::Int(20));

    // The whole total is cleared: the reply is the total before, the total reads 0.
    assert_eq!(c.q("CTR.CLEAR views"), Value::Int(20));
    assert_eq!(c.q("CTR.GET views"), Value::Int(0));
    // The holders keep their units; the home holds minus their sum.
    assert_eq!(
        holder_values(&mut c, "views"),
        Value::Array([-15, 7, 10, -2].into_iter().map(Value::Int).collect())
    );
    // Adds after the clear count, on any holder.
    c.cmd(&["CTR.ADD", &h[1], "3"]);
    c.q("CTR.ADD views 1");
    assert_eq!(c.q("CTR.GET views"), Value::Int(4));
    assert_eq!(c.q("CTR.CLEAR views"), Value::Int(4));
    assert_eq!(c.q("CTR.GET views"), Value::Int(0));

    // Inside MULTI every holder is local: the clear is exact there too.
    assert_eq!(c.q("MULTI"), ok());
    c.cmd(&["CTR.ADD", &h[2], "6"]);
    c.q("CTR.CLEAR views");
    c.q("CTR.GET views");
    assert_eq!(
        c.q("EXEC"),
        Value::Array(vec![Value::Int(16), Value::Int(6), Value::Int(0)])
    );

    // The replica applied the same effects (it never gathers to clear): same state, same total.
    server.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(r.q("CTR.GET views"), Value::Int(0));
    assert_eq!(
        r.q("DEBUG DIGEST-VALUE views"),
        c.q("DEBUG DIGEST-VALUE views")
    );
    assert_eq!(c.q("DEBUG RELOAD"), ok());
    assert_eq!(c.q("CTR.GET views"), Value::Int(0));

    // A plain key, and a spread shrunk back to one key, clear as they always did.
    c.q("CTR.ADD plain 9");
    assert_eq!(c.q("CTR.CLEAR plain"), Value::Int(9));
    c.cmd(&["CTR.ADD", &h[3], "2"]);
    assert_eq!(names(&c.q("CTR.SPREAD views 1")), vec!["views".to_string()]);
    assert_eq!(c.q("CTR.CLEAR views"), Value::Int(2));
    assert_eq!(c.q("CTR.GET views"), Value::Int(0));
}

#[test]
fn a_tokened_clear_of_a_spread_home_replays_its_first_reply() {
    let server = Server::start();
    let mut c = server.conn();
    let h = names(&c.q("CTR.SPREAD views 4"));
    for (i, holder) in h.iter().enumerate() {
        c.cmd(&["CTR.ADD", holder, &(10 * (i + 1)).to_string()]);
    }
    assert_eq!(c.q("CTR.CLEAR views TOKEN t1"), Value::Int(100));
    assert_eq!(c.q("CTR.GET views"), Value::Int(0));
    c.cmd(&["CTR.ADD", &h[2], "5"]);
    let cleared = clears(&server);
    // The retry replays the first reply and clears nothing: the later add stays.
    assert_eq!(c.q("CTR.CLEAR views TOKEN t1"), Value::Int(100));
    assert_eq!(c.q("CTR.GET views"), Value::Int(5));
    assert_eq!(clears(&server), cleared);
    assert!(c.q("CTR.ADD views 1 TOKEN t1").error().contains("token"));
    // Also after a reload, and inside MULTI.
    assert_eq!(c.q("DEBUG RELOAD"), ok());
    assert_eq!(c.q("CTR.CLEAR views TOKEN t1"), Value::Int(100));
    assert_eq!(c.q("MULTI"), ok());
    c.q("CTR.CLEAR views TOKEN t1");
    assert_eq!(c.q("EXEC"), Value::Array(vec![Value::Int(100)]));
    assert_eq!(c.q("CTR.GET views"), Value::Int(5));
    // A new token clears again.
    assert_eq!(c.q("CTR.CLEAR views TOKEN t2"), Value::Int(5));
    assert_eq!(c.q("CTR.GET views"), Value::Int(0));
}

#[test]
fn a_floored_spread_home_refuses_the_clear_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD stock 100");
    assert_eq!(c.q("CTR.FLOOR stock 0"), ok());
    let h = names(&c.q("CTR.SPREAD stock 4"));
    c.cmd(&["CTR.ADD", &h[1], "5"]);
    let values = holder_values(&mut c, "stock");
    let digest = c.q("DEBUG DIGEST-VALUE stock");
    for clear in ["CTR.CLEAR stock", "CTR.CLEAR stock TOKEN t"] {
        let e = c.q(clear).error();
        assert!(e.contains("floored spread counter"), "{clear}: {e}");
        assert!(e.contains("CTR.SPREAD key 1"), "{clear}: {e}");
    }
    assert_eq!(c.q("CTR.GET stock"), Value::Int(105));
    assert_eq!(holder_values(&mut c, "stock"), values);
    assert_eq!(c.q("DEBUG DIGEST-VALUE stock"), digest);
    assert_eq!(clears(&server), 0);
    // Shrunk to one key it is a floored counter again, cleared as one (its floor is 0).
    c.q("CTR.SPREAD stock 1");
    assert_eq!(c.q("CTR.CLEAR stock TOKEN t"), Value::Int(105));
    assert_eq!(c.q("CTR.GET stock"), Value::Int(0));
}

#[test]
fn clearing_a_spread_home_across_masters_clears_the_total_everywhere() {
    let cluster = Cluster::start(3, &[]);
    let home = "{views}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let replica = cluster.start_replica_of(home_node);
    let master = &cluster.nodes[home_node];
    let mut m = master.conn();
    // The AOF on from the start: the clear's effect is appended to it as it is applied.
    assert_eq!(m.q("CONFIG SET appendonly yes"), ok());
    master.wait_persistence_idle();
    let (_, holders, total) = spread_over_masters(&cluster, home);
    let mut client = cluster.client();

    assert_eq!(
        client.cmd(&["CTR.CLEAR", home, "TOKEN", "t1"]),
        Value::Int(total)
    );
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(0));
    // A later add on another master counts; the retry replays and clears nothing.
    let far = holders
        .iter()
        .find(|h| cluster.owner(key_slot(h.as_bytes())) != home_node)
        .unwrap();
    client.cmd(&["CTR.ADD", far, "5"]);
    assert_eq!(
        client.cmd(&["CTR.CLEAR", home, "TOKEN", "t1"]),
        Value::Int(total)
    );
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(5));
    assert_eq!(clears(master), 1);

    // Two clears with one token at once: one applies, the other replays its reply.
    client.cmd(&["CTR.ADD", far, "2"]);
    let port = master.port;
    let racers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::connect(port).unwrap();
                c.cmd(&["CTR.CLEAR", "{views}", "TOKEN", "t2"])
            })
        })
        .collect();
    let replies: Vec<Value> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(replies, vec![Value::Int(7), Value::Int(7)]);
    assert_eq!(clears(master), 2, "applied once");
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(0));

    // Inside MULTI the home's master cannot wait for the other masters: a clear error, and
    // nothing changes.
    client.cmd(&["CTR.ADD", far, "3"]);
    assert_eq!(m.q("MULTI"), ok());
    m.cmd(&["CTR.CLEAR", home]);
    let exec = m.q("EXEC").array();
    let e = exec[0].error();
    assert!(e.contains("MULTI") && e.contains("clear it outside"), "{e}");
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(3));

    // The replica applied the effects (it never gathers to clear): same state, same total.
    master.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(
        r.cmd(&["DEBUG", "DIGEST-VALUE", home]),
        m.cmd(&["DEBUG", "DIGEST-VALUE", home])
    );
    assert_eq!(r.q("READONLY"), ok());
    assert_eq!(r.cmd(&["CTR.GET", home]), Value::Int(3));

    // The AOF as appended (the clears' effects), then as rewritten, then an RDB reload: the
    // same total, and the tokens still replay.
    let digest = m.cmd(&["DEBUG", "DIGEST-VALUE", home]);
    let check = |m: &mut Conn, client: &mut ClusterClient, what: &str| {
        assert_eq!(m.cmd(&["DEBUG", "DIGEST-VALUE", home]), digest, "{what}");
        assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(3), "{what}");
        let retry = client.cmd(&["CTR.CLEAR", home, "TOKEN", "t1"]);
        assert_eq!(retry, Value::Int(total), "{what}");
    };
    assert_eq!(m.q("DEBUG LOADAOF"), ok());
    check(&mut m, &mut client, "AOF replay");
    master.rewrite_aof();
    assert_eq!(m.q("DEBUG LOADAOF"), ok());
    check(&mut m, &mut client, "AOF rewrite");
    assert_eq!(m.q("DEBUG RELOAD"), ok());
    check(&mut m, &mut client, "DEBUG RELOAD");
    assert_eq!(client.cmd(&["CTR.CLEAR", home]), Value::Int(3));
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(0));
}

#[test]
fn a_holders_master_that_does_not_answer_fails_the_clear_and_changes_nothing() {
    let cluster = Cluster::start(3, &[]);
    let home = "hot";
    let (home_node, holders, total) = spread_over_masters(&cluster, home);
    let victim = holders
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .find(|&n| n != home_node)
        .unwrap();
    let master = &cluster.nodes[home_node];
    let mut m = master.conn();
    assert_eq!(m.q("CONFIG SET ctr.gather-timeout-ms 300"), ok());
    let digest = m.cmd(&["DEBUG", "DIGEST-VALUE", home]);
    let read_error = {
        // The victim, a server this test started, is paused (DEBUG SLEEP) for the clears.
        let port = cluster.nodes[victim].port;
        let sleeper = std::thread::spawn(move || Conn::connect(port).unwrap().q("DEBUG SLEEP 2"));
        std::thread::sleep(Duration::from_millis(200));
        let read_error = m.cmd(&["CTR.GET", home]).error();
        for clear in [
            vec!["CTR.CLEAR", home],
            vec!["CTR.CLEAR", home, "TOKEN", "t"],
        ] {
            let started = Instant::now();
            let e = m.cmd(&clear).error();
            assert_eq!(e, read_error, "{clear:?}: the read's error");
            assert!(started.elapsed() < Duration::from_secs(1), "{clear:?}");
        }
        sleeper.join().unwrap();
        read_error
    };
    assert!(read_error.contains("unavailable"), "{read_error}");
    // Nothing changed, and the failed tokened clear remembered nothing.
    assert_eq!(m.cmd(&["DEBUG", "DIGEST-VALUE", home]), digest);
    assert_eq!(clears(master), 0);
    let mut client = cluster.client();
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(total));
    assert_eq!(
        client.cmd(&["CTR.CLEAR", home, "TOKEN", "t"]),
        Value::Int(total)
    );
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(0));
}

/// A replica reads what its master reads: a clear replicated to a replica that cached the
/// home's total (`ctr.gather-cache-ms` set everywhere) drops that cached total, so a `READONLY`
/// read on the replica gives 0 at once. Before: it answered the total before the clear from
/// its cache.
#[test]
fn a_replicated_clear_drops_the_replicas_cached_total() {
    let cluster = Cluster::start(3, &[]);
    let home = "{cached}views";
    let (home_node, _, total) = spread_over_masters(&cluster, home);
    let replica = cluster.start_replica_of(home_node);
    cluster.nodes[home_node].wait_replicas(1);
    let mut r = replica.conn();
    for n in &cluster.nodes {
        assert_eq!(n.conn().q("CONFIG SET ctr.gather-cache-ms 60000"), ok());
    }
    assert_eq!(r.q("CONFIG SET ctr.gather-cache-ms 60000"), ok());
    assert_eq!(r.q("READONLY"), ok());
    assert_eq!(r.cmd(&["CTR.GET", home]), Value::Int(total));
    assert_eq!(
        r.cmd(&["CTR.GET", home]),
        Value::Int(total),
        "from the cache"
    );
    let mut client = cluster.client();
    assert_eq!(client.cmd(&["CTR.CLEAR", home]), Value::Int(total));
    cluster.nodes[home_node].wait_replicas(1);
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(0));
    assert_eq!(r.cmd(&["CTR.GET", home]), Value::Int(0));
}
