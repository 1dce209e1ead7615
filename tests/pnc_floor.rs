//! The bounded PN-counter on real servers (issue 36): PNC.FLOOR, PNC.DECRFLOOR, PNC.GIVE, their
//! replies, errors, token ledger and replication; pnc-sync skipping a deployment that is down
//! or frozen while the others converge, its metrics and its rights moves; and a sale across
//! three standalone servers as three regions with a partition in the middle.

mod common;

use common::pnc::{sync_tool, Rng};
use common::{free_port, note, Conn, Frozen, Server, Value};

fn region(id: &str) -> Server {
    Server::start_with(&[], &["replica-id", id])
}

fn endpoint(s: &Server) -> String {
    format!("127.0.0.1:{}", s.port)
}

fn info(c: &mut Conn, key: &str, field: &str) -> Value {
    c.cmd(&["PNC.INFO", key]).field(field)
}

#[test]
fn rights_come_from_increments_and_floor_moves_and_decrements_spend_only_local_rights() {
    let (us, eu) = (region("us"), region("eu"));
    let (mut u, mut e) = (us.conn(), eu.conn());
    assert_eq!(u.q("PNC.ADD stock 10").int(), 10);
    assert_eq!(u.q("PNC.FLOOR stock 0").text(), "OK");
    assert_eq!(info(&mut u, "stock", "floor"), Value::Int(0));
    assert_eq!(info(&mut u, "stock", "rights"), Value::Int(10));
    // eu sees the stock but holds no rights: refused locally, nothing changes.
    e.cmd(&[
        b"PNC.MERGE".as_slice(),
        b"stock",
        &u.q("PNC.STATE stock").bytes(),
    ]);
    assert_eq!(e.q("PNC.GET stock").int(), 10);
    let digest = e.q("DEBUG DIGEST-VALUE stock");
    assert_eq!(e.q("PNC.DECRFLOOR stock 1"), Value::Nil);
    assert_eq!(
        e.q("DEBUG DIGEST-VALUE stock"),
        digest,
        "a refusal changes nothing"
    );
    assert_eq!(info(&mut e, "stock", "refused"), Value::Int(1));
    assert!(e
        .q("PNC.ADD stock -1")
        .error()
        .contains("not enough rights"));
    assert!(e.q("PNC.CLEAR stock").error().contains("floored"));
    // us gives 4 to eu; once eu merges that, it may sell 4 and no more.
    assert_eq!(u.q("PNC.GIVE stock eu 4").int(), 6);
    assert_eq!(u.q("PNC.GIVE stock eu 7"), Value::Nil, "6 left");
    e.cmd(&[
        b"PNC.MERGE".as_slice(),
        b"stock",
        &u.q("PNC.STATE stock").bytes(),
    ]);
    assert_eq!(info(&mut e, "stock", "rights"), Value::Int(4));
    assert_eq!(e.q("PNC.DECRFLOOR stock 3 TOKEN o1").int(), 7);
    assert_eq!(
        e.q("PNC.DECRFLOOR stock 3 TOKEN o1").int(),
        7,
        "a retry replays"
    );
    assert!(e
        .q("PNC.DECRFLOOR stock 2 TOKEN o1")
        .error()
        .contains("another write"));
    assert_eq!(e.q("PNC.DECRFLOOR stock 2 TOKEN o2"), Value::Nil);
    assert_eq!(
        e.q("PNC.DECRFLOOR stock 2 TOKEN o2"),
        Value::Nil,
        "so does a refusal"
    );
    assert_eq!(e.q("PNC.DECRFLOOR stock 1").int(), 6);
    // Raising the floor spends rights, lowering it grants them; NONE switches it off.
    assert!(u
        .q("PNC.FLOOR stock 11")
        .error()
        .contains("value below floor"));
    assert!(
        u.q("PNC.FLOOR stock 7")
            .error()
            .contains("not enough rights"),
        "6 here"
    );
    assert!(e
        .q("PNC.FLOOR stock 1")
        .error()
        .contains("not enough rights"));
    assert_eq!(u.q("PNC.FLOOR stock 2").text(), "OK");
    assert_eq!(info(&mut u, "stock", "rights"), Value::Int(4));
    assert_eq!(u.q("PNC.FLOOR stock NONE").text(), "OK");
    assert_eq!(info(&mut u, "stock", "floor"), Value::Nil);
    assert_eq!(info(&mut u, "stock", "floor-level"), Value::Int(2));
    // A floor on a missing key creates it at 0, and a negative floor is rights to spend.
    assert_eq!(u.q("PNC.FLOOR quota -3").text(), "OK");
    assert_eq!(u.q("PNC.DECRFLOOR quota 3").int(), -3);
    assert_eq!(u.q("PNC.DECRFLOOR quota 1"), Value::Nil);
    assert!(u
        .q("PNC.FLOOR fresh 1")
        .error()
        .contains("value below floor"));
    assert_eq!(u.q("EXISTS fresh").int(), 0);
    // Bad input.
    for (line, error) in [
        ("PNC.DECRFLOOR k 0", "amount must be positive"),
        ("PNC.DECRFLOOR k x", "not an integer"),
        ("PNC.DECRFLOOR k 1 AT 5", "syntax error"),
        ("PNC.DECRFLOOR k 1 TOKEN", "syntax error"),
        ("PNC.GIVE stock us 1", "own replica id"),
        ("PNC.GIVE stock bad! 1", "invalid replica id"),
        ("PNC.GIVE stock eu -1", "amount must be positive"),
        ("PNC.FLOOR stock x", "not an integer"),
    ] {
        assert!(u.q(line).error().contains(error), "{line}");
    }
    u.q("SET plain x");
    assert!(u
        .q("PNC.DECRFLOOR plain 1")
        .error()
        .starts_with("WRONGTYPE"));
    assert!(u.q("PNC.FLOOR plain 0").error().starts_with("WRONGTYPE"));
    assert!(u
        .q("INFO ctr")
        .text()
        .contains("ctr_pnc_decrements_refused:"));
}

#[test]
fn a_replica_holds_the_masters_bounded_counters_bit_for_bit() {
    let master = region("us");
    let replica = master.start_replica();
    let (mut m, mut r) = (master.conn(), replica.conn());
    m.q("PNC.ADD stock 50");
    m.q("PNC.FLOOR stock 0");
    m.q("PNC.GIVE stock eu 10");
    m.q("PNC.DECRFLOOR stock 5 TOKEN a");
    m.q("PNC.DECRFLOOR stock 500 TOKEN b");
    m.q("PNC.DECRFLOOR stock 1");
    m.q("PNC.ADD stock -2");
    master.wait_replicas(1);
    assert_eq!(
        m.q("DEBUG DIGEST-VALUE stock"),
        r.q("DEBUG DIGEST-VALUE stock")
    );
    assert_eq!(r.q("PNC.GET stock").int(), 42);
    assert!(
        r.q("PNC.DECRFLOOR stock 1").is_error(),
        "a replica decides nothing"
    );
}

/// Before issue 36 a deployment down made pnc-sync merge nothing and exit 3: the two it
/// reached stayed apart. Now it skips the stopped and the frozen one with a line each, the
/// others converge, the summary counts them, and the metrics file says so.
#[test]
fn pnc_sync_converges_what_it_reaches_and_counts_the_rest() {
    let servers: Vec<Server> = ["a", "b", "c"].iter().map(|id| region(id)).collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::conn).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.cmd(&["PNC.ADD", "k", &(100 + i).to_string()]);
    }
    let dir = std::env::temp_dir().join(format!("pnc-sync-metrics-{}", free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let metrics = dir.join("pnc_sync.prom").display().to_string();
    let dead = format!("127.0.0.1:{}", free_port());
    let mut args: Vec<String> = ["--key", "k", "--timeout", "0.5", "--metrics-file", &metrics]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend([endpoint(&servers[0]), endpoint(&servers[1]), dead.clone()]);
    let (status, out) = sync_tool(&args);
    assert_eq!(status, 3, "{out}");
    assert!(out.contains(&dead) && out.contains("unreachable"), "{out}");
    assert!(out.contains("1 unreachable of 3"), "{out}");
    assert_eq!(conns[0].q("PNC.GET k").int(), 201);
    assert_eq!(conns[1].q("PNC.GET k").int(), 201);
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(text.contains("pnc_sync_unreachable 1"), "{text}");
    assert!(
        text.contains("pnc_sync_last_full_sync_timestamp_seconds 0.000"),
        "{text}"
    );

    // A frozen deployment: connected, silent. Skipped after the timeout.
    let frozen = frozen_server(&servers[2]);
    conns[0].q("PNC.ADD k 1000");
    let mut args: Vec<String> = ["--key", "k", "--timeout", "0.5"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(servers.iter().map(endpoint));
    let (status, out) = sync_tool(&args);
    assert_eq!(status, 3, "{out}");
    assert!(
        out.contains(&endpoint(&servers[2])) && out.contains("1 unreachable of 3"),
        "{out}"
    );
    assert_eq!(conns[1].q("PNC.GET k").int(), 1201);
    drop(frozen);
    let (status, out) = sync_tool(&args);
    assert_eq!(status, 0, "{out}");
    for c in conns.iter_mut() {
        assert_eq!(c.q("PNC.GET k").int(), 1303);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--rebalance` moves rights to the deployment that refused, from the one with slack.
#[test]
fn pnc_sync_moves_rights_toward_the_deployment_that_refuses() {
    let (us, eu) = (region("us"), region("eu"));
    let (mut u, mut e) = (us.conn(), eu.conn());
    u.q("PNC.ADD stock 100");
    u.q("PNC.FLOOR stock 0");
    let args: Vec<String> = vec![
        "--key".into(),
        "stock".into(),
        "--rebalance".into(),
        endpoint(&us),
        endpoint(&eu),
    ];
    let (status, out) = sync_tool(&args);
    assert_eq!(status, 0, "{out}");
    for _ in 0..20 {
        assert_eq!(e.q("PNC.DECRFLOOR stock 2"), Value::Nil);
    }
    let (status, out) = sync_tool(&args);
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("rights from us to eu"), "{out}");
    let eu_rights = info(&mut e, "stock", "rights").int();
    assert!(
        eu_rights >= 50,
        "eu asked for 40 units and got {eu_rights} rights: {out}"
    );
    assert_eq!(
        eu_rights + info(&mut u, "stock", "rights").int(),
        100,
        "rights moved, none made"
    );
}

/// One region's buyers: tokened purchases, every acknowledged one remembered.
struct Buyers {
    granted: i64,
    refused: u64,
    false_refusals: u64,
    orders: Vec<(String, i64, Value)>,
}

/// A flash sale of 300 units in three regions (three standalone servers), rights moved by
/// pnc-sync --rebalance between rounds; in the middle one region is frozen (SIGSTOP: the sync
/// skips it), then partitioned (it sells from its own rights, no sync reaches it); then
/// everything heals. Nothing is oversold at any moment, every acknowledged purchase is counted
/// once everywhere after healing (retried tokens replay), and the false refusals are reported.
#[test]
fn a_sale_across_three_regions_through_a_partition_never_oversells() {
    const STOCK: i64 = 300;
    let names = ["us", "eu", "ap"];
    let servers: Vec<Server> = names.iter().map(|id| region(id)).collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::conn).collect();
    conns[0].cmd(&["PNC.ADD", "sale", &STOCK.to_string()]);
    conns[0].q("PNC.FLOOR sale 0");
    let mut buyers: Vec<Buyers> = (0..3)
        .map(|_| Buyers {
            granted: 0,
            refused: 0,
            false_refusals: 0,
            orders: Vec::new(),
        })
        .collect();
    let sync = |reach: &[usize]| {
        let mut args: Vec<String> = ["--key", "sale", "--rebalance", "--timeout", "0.5"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(reach.iter().map(|i| endpoint(&servers[*i])));
        sync_tool(&args)
    };
    let mut rng = Rng::new(36);
    let mut round = |conns: &mut Vec<Conn>, buyers: &mut Vec<Buyers>, open: &[usize], n: u64| {
        for _ in 0..n {
            // Skewed demand: half the buyers in us.
            let r = if rng.below(2) == 0 {
                0
            } else {
                open[rng.below(open.len() as u64) as usize]
            };
            if !open.contains(&r) {
                continue;
            }
            let amount = 1 + rng.below(3) as i64;
            let token = format!("{}-{}", names[r], buyers[r].orders.len());
            let reply = conns[r].cmd(&[
                "PNC.DECRFLOOR",
                "sale",
                &amount.to_string(),
                "TOKEN",
                &token,
            ]);
            let sold: i64 = buyers.iter().map(|b| b.granted).sum();
            match reply {
                Value::Int(_) => buyers[r].granted += amount,
                Value::Nil => {
                    buyers[r].refused += 1;
                    if STOCK - sold >= amount {
                        buyers[r].false_refusals += 1;
                    }
                }
                other => panic!("{other:?}"),
            }
            let sold: i64 = buyers.iter().map(|b| b.granted).sum();
            assert!(sold <= STOCK, "oversold: {sold} of {STOCK}");
            buyers[r].orders.push((token, amount, reply));
        }
    };
    // Phase 1: all connected.
    for _ in 0..3 {
        let (status, out) = sync(&[0, 1, 2]);
        assert_eq!(status, 0, "{out}");
        round(&mut conns, &mut buyers, &[0, 1, 2], 20);
    }
    // Phase 2: ap frozen; the sync skips it and the others go on.
    {
        let _frozen = frozen_server(&servers[2]);
        for _ in 0..2 {
            let (status, out) = sync(&[0, 1, 2]);
            assert_eq!(status, 3, "{out}");
            assert!(out.contains("1 unreachable of 3"), "{out}");
            round(&mut conns, &mut buyers, &[0, 1], 20);
        }
    }
    // Phase 3: ap awake but partitioned: it sells from its own rights, nothing reaches it.
    for _ in 0..3 {
        let (status, out) = sync(&[0, 1]);
        assert_eq!(status, 0, "{out}");
        round(&mut conns, &mut buyers, &[0, 1, 2], 30);
    }
    // Phase 4: healed, the sale goes on until the stock is gone.
    for _ in 0..4 {
        let (status, out) = sync(&[0, 1, 2]);
        assert_eq!(status, 0, "{out}");
        round(&mut conns, &mut buyers, &[0, 1, 2], 40);
    }
    for _ in 0..2 {
        let (status, out) = sync(&[0, 1, 2]);
        assert_eq!(status, 0, "{out}");
    }
    // Every acknowledged purchase counted once, everywhere; retries replay their first reply.
    let sold: i64 = buyers.iter().map(|b| b.granted).sum();
    for (r, c) in conns.iter_mut().enumerate() {
        assert_eq!(c.q("PNC.GET sale").int(), STOCK - sold, "{}", names[r]);
        for (token, amount, reply) in &buyers[r].orders {
            let again = c.cmd(&["PNC.DECRFLOOR", "sale", &amount.to_string(), "TOKEN", token]);
            assert_eq!(&again, reply, "{token}");
        }
        assert_eq!(
            c.q("PNC.GET sale").int(),
            STOCK - sold,
            "retries changed nothing"
        );
    }
    let digest = conns[0].q("PNC.STATE sale").bytes();
    assert!(conns
        .iter_mut()
        .all(|c| c.q("PNC.STATE sale").bytes() == digest));
    let attempts: usize = buyers.iter().map(|b| b.orders.len()).sum();
    let refused: u64 = buyers.iter().map(|b| b.refused).sum();
    let false_refusals: u64 = buyers.iter().map(|b| b.false_refusals).sum();
    note(&format!(
        "sale: {sold} of {STOCK} sold in {attempts} purchases, {refused} refused, {false_refusals} of them false (the stock covered them)"
    ));
    assert!(sold > STOCK / 2, "the sale sold most of its stock: {sold}");
}

/// SIGSTOP of a server this test started; SIGCONT when dropped (also on a failed assertion).
fn frozen_server(server: &Server) -> Frozen {
    Frozen::freeze(server.pid().expect("the test's own server"))
}
