//! Waits in the server (issue 34 item 9; COMMANDS.md v4, "Waits happen in the server"): a
//! purchase that only budget still travelling keeps from an answer, and `CTR.FLOOR` while a
//! shrink's folds land, block their client up to `ctr.purchase-wait-ms` and are answered when
//! the units come; `TRYAGAIN` only past that bound, inside MULTI/EXEC or a script, or with the
//! bound at 0.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::cluster::{key_slot, Cluster};
use common::{assert_awaits_budget, names, Conn, Frozen, Server, Value};

/// Module arguments of a server that never applies a transfer credit: a holder's share never
/// lands, a shrink's folds never end.
const HOLD: &[&str] = &["debug-hold-credits", "yes"];

fn stat(server: &Server, field: &str) -> i64 {
    server
        .info_field("ctr", &format!("ctr_{field}"))
        .parse()
        .unwrap_or(0)
}

/// A key named as a holder of a floored spread (odd id) without a floor of its own: a holder
/// before its first credit, whose purchases wait for a share that never comes here (a
/// counter's dump restored under its name: on one server no home lists it).
fn holder_before_its_share(c: &mut Conn, name: &str) {
    common::restore_plain_counter(c, name);
}

/// A purchase on a holder whose share travels (a cluster, the home's replica asleep so the home
/// holds its credits back) waits in the server and is granted once the share lands: a plain
/// client, no retry of its own. Inside MULTI/EXEC the same purchase is answered at once with
/// `TRYAGAIN` (a transaction cannot wait), and nothing is recorded against its token.
#[test]
fn a_purchase_waits_in_the_server_for_its_share_and_is_granted() {
    let cluster = Cluster::start(3, &["purchase-wait-ms", "20000"]);
    let home = "{waits}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let replica = cluster.start_replica_of(home_node);
    let mut client = cluster.client();
    assert_eq!(client.cmd(&["CTR.ADD", home, "1000"]), Value::Int(1000));
    assert_eq!(client.q("CTR.FLOOR {waits} 100").text(), "OK");
    cluster.nodes[home_node].wait_replicas(1);
    // The home's replica frozen: the home holds its credits back until the replica holds the
    // debits, so every share travels until it wakes.
    let frozen = Frozen::freeze(replica.pid().expect("started here"));
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "6"]));
    let holder = &holders[1];
    let node = cluster.owner(key_slot(holder.as_bytes()));
    let mut master = cluster.nodes[node].conn();
    // The holder's master has a replica of its own (unless it is the home's), which must
    // hold what the purchase run again from the reply callback wrote.
    let holder_replica = (node != home_node).then(|| cluster.start_replica_of(node));

    let mut tx = cluster.nodes[node].conn();
    assert_eq!(tx.q("MULTI").text(), "OK");
    assert_eq!(
        tx.cmd(&["CTR.DECRFLOOR", holder, "1", "TOKEN", "w1"])
            .text(),
        "QUEUED"
    );
    let exec = tx.q("EXEC");
    assert_awaits_budget(exec.array()[0].clone(), holder);

    // The holder's first write waits for its holder check; a purchase run again from that
    // check's reply cannot wait (a reply callback cannot block again): it may answer TRYAGAIN
    // once, and its retry, checked already, waits in the server.
    let waited_before = stat(&cluster.nodes[node], "commands_waited");
    let checks_before = stat(&cluster.nodes[node], "holder_checks");
    let waker = thread::spawn(move || {
        thread::sleep(Duration::from_millis(1500));
        drop(frozen);
    });
    let started = Instant::now();
    let purchase = ["CTR.DECRFLOOR", holder.as_str(), "1", "TOKEN", "w1"];
    let mut reply = master.cmd(&purchase);
    if reply.is_error() {
        assert_awaits_budget(reply, holder);
        reply = master.cmd(&purchase);
    }
    let waited = started.elapsed();
    // Granted from the share (150 of the 900 above the floor): the holder can still sell 149.
    assert_eq!(reply, Value::Int(149), "after {waited:?}");
    // The holder check's own wait (in the same waiter) is counted there too.
    let checks = stat(&cluster.nodes[node], "holder_checks") - checks_before;
    assert_eq!(
        stat(&cluster.nodes[node], "commands_waited"),
        waited_before + 1 + checks,
        "it waited in the server ({waited:?})"
    );
    assert_eq!(stat(&cluster.nodes[node], "waits_past_bound"), 0);
    assert_eq!(
        master.cmd(&["CTR.DECRFLOOR", holder, "1", "TOKEN", "w1"]),
        Value::Int(149),
        "a retry replays the grant"
    );
    waker.join().unwrap();
    // Replicated as any purchase: the replica holds the same state (value and ledger).
    let replica_of_holder = holder_replica.as_ref().unwrap_or(&replica);
    cluster.nodes[node].wait_replicas(1);
    let digest = |c: &mut Conn| c.cmd(&["DEBUG", "DIGEST-VALUE", holder]);
    let mut r = replica_of_holder.conn();
    assert_eq!(digest(&mut r), digest(&mut master));
}

/// On one server: a purchase on a holder before its share waits up to `ctr.purchase-wait-ms`,
/// then answers `TRYAGAIN` (counted past the bound); `CTR.FLOOR` of a home whose folds have
/// not landed (credits held) the same; with the bound at 0 both answer at once; a client that
/// leaves while it waits is let go, and the server serves the next one.
#[test]
fn past_its_bound_a_wait_answers_tryagain_and_a_client_may_leave() {
    let server = Server::start_with(&[], &[HOLD, &["purchase-wait-ms", "300"]].concat());
    let mut c = server.conn();
    let holders: Vec<String> = (1..4)
        .map(|i| format!("{{ctr.00000000000000ab.{i}.0}}sale"))
        .collect();
    for h in &holders {
        holder_before_its_share(&mut c, h);
    }
    let holders = [vec![String::new()], holders].concat(); // holders[1..] as in a list

    let reply = c.cmd(&["CTR.DECRFLOOR", &holders[1], "1", "TOKEN", "b1"]);
    assert_awaits_budget(reply, &holders[1]);
    assert_eq!(stat(&server, "commands_waited"), 1);
    assert_eq!(stat(&server, "waits_past_bound"), 1);
    assert_eq!(
        c.cmd(&["CTR.INFO", &holders[1]]).field("tokens"),
        Value::Int(0),
        "nothing recorded against the token"
    );

    // A client that leaves while it waits.
    let mut leaving = server.conn();
    leaving.send(&["CTR.DECRFLOOR", &holders[2], "1"]);
    thread::sleep(Duration::from_millis(50));
    drop(leaving);
    thread::sleep(Duration::from_millis(400));
    assert_eq!(c.q("PING").text(), "PONG");

    // CTR.FLOOR while a shrink's folds have not landed.
    c.cmd(&["CTR.ADD", "views", "5"]);
    let spread = names(&c.cmd(&["CTR.SPREAD", "views", "3"]));
    for h in &spread {
        c.cmd(&["CTR.ADD", h, "5"]);
    }
    assert_eq!(names(&c.cmd(&["CTR.SPREAD", "views", "1"])).len(), 1);
    let past = stat(&server, "waits_past_bound");
    let refused = c.cmd(&["CTR.FLOOR", "views", "0"]);
    assert!(
        refused.is_error() && refused.error().starts_with("TRYAGAIN units in flight"),
        "{refused:?}"
    );
    assert_eq!(stat(&server, "waits_past_bound"), past + 1);

    // With the bound at 0 nothing waits.
    assert_eq!(c.q("CONFIG SET ctr.purchase-wait-ms 0").text(), "OK");
    let waited = stat(&server, "commands_waited");
    assert_awaits_budget(c.cmd(&["CTR.DECRFLOOR", &holders[3], "1"]), &holders[3]);
    assert!(c.cmd(&["CTR.FLOOR", "views", "0"]).is_error());
    assert_eq!(stat(&server, "commands_waited"), waited);
}
