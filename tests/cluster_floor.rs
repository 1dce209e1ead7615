//! Floored spread counters across the masters of a real 3-master cluster: spreading shares
//! the headroom over 16 holders through budget moves (transfers from the home); once settled
//! the holders' floors sum to the counter's floor exactly and the total is exact at every
//! step; buyers on several masters walking the probe rule never oversell and every retry
//! replays its first answer; a kill -9 and failover of the giver's master and of the receiver's
//! master (a move debited and not credited, or credited and not acknowledged) and of the
//! coordinator (the home's master, in the middle
//! of a rebalance between two other holders) credits every move once, keeps budgets plus units
//! in flight equal to the headroom, and grants no token twice. A granted purchase replies the
//! units its holder can still sell (never a holder's raw value, which reads like negative
//! stock), and a retry replays that reply after budget moves changed the holder's floor.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{key_slot, Cluster, ClusterClient};
use common::{assert_awaits_budget, eventually, names, Conn, FloorView, Server, Value};
use redis_ctr_client::spread::probe_order;

fn ints(v: &Value) -> Vec<i64> {
    v.array().iter().map(Value::int).collect()
}

fn floor_view(client: &mut ClusterClient, home: &str) -> Option<FloorView> {
    floor_view_of(&client.cmd(&["CTR.INFO", home]))
}

/// The floor view of the home's master read directly (no redirections to follow: during a
/// failover a gather can answer TRYAGAIN for a while, which a cluster client gives up on).
fn floor_view_at(port: u16, home: &str) -> Option<FloorView> {
    floor_view_of(&Conn::connect(port).ok()?.cmd(&["CTR.INFO", home]))
}

fn floor_view_of(info: &Value) -> Option<FloorView> {
    FloorView::of(info)
}

/// The shares of the first spread: `headroom` split evenly over `n` holders, the home keeping
/// the remainder (as `CTR.FLOOR` splits budgets).
fn shares(headroom: i64, n: i64) -> Vec<i64> {
    (0..n)
        .map(|i| headroom / n + i64::from(i < headroom % n))
        .collect()
}

/// What every reading of a floored spread counter must show: the exact total, headroom
/// total - F, no budget negative, and nothing in flight the wrong way (the holders' floors
/// never sum below F: that would be budget available twice).
fn check_accounting(v: &FloorView, total: i64, floor: i64) {
    assert_eq!(v.total, total);
    assert_eq!(v.headroom, total - floor);
    assert!(v.budgets.iter().all(|&b| b >= 0), "{:?}", v.budgets);
    assert!(v.floors.iter().sum::<i64>() >= floor, "{:?}", v.floors);
    assert!(v.in_flight >= 0, "{}", v.in_flight);
}

/// One purchase by the probe rule: the holders in the token's order, stopping at the first
/// grant. Some(true) granted, Some(false) refused by every holder, None when a holder failed
/// (the walk stops there: the purchase is retried later with the same token).
fn purchase(
    client: &mut ClusterClient,
    holders: &[String],
    amount: i64,
    token: &str,
) -> Option<bool> {
    for i in probe_order(token.as_bytes(), holders.len()) {
        let amount = amount.to_string();
        match client.cmd(&["CTR.DECRFLOOR", &holders[i], &amount, "TOKEN", token]) {
            Value::Int(_) => return Some(true),
            Value::Nil => continue,
            _ => return None,
        }
    }
    Some(false)
}

#[test]
fn a_spread_shares_the_headroom_across_masters_and_buyers_never_oversell() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{sale}";
    assert_eq!(client.cmd(&["CTR.ADD", home, "1000"]), Value::Int(1000));
    assert_eq!(client.cmd(&["CTR.FLOOR", home, "100"]).text(), "OK");
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
    assert_eq!(holders.len(), 16);
    let masters: std::collections::HashSet<usize> = holders
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .collect();
    assert_eq!(masters.len(), 3, "holders on every master");

    // While the shares travel, every reading is exact; once settled, each holder has its share.
    let settled = eventually(30, || {
        let v = floor_view(&mut client, home)?;
        check_accounting(&v, 1000, 100);
        (v.in_flight == 0).then_some(v)
    });
    assert_eq!(settled.budgets, shares(900, 16));
    assert_eq!(settled.floors.iter().sum::<i64>(), 100);
    // The holders' floors (set by credits) survive a reload of every master's RDB.
    for node in &cluster.nodes {
        assert_eq!(node.conn().q("DEBUG RELOAD").text(), "OK");
    }
    let reloaded = eventually(30, || floor_view(&mut client, home));
    assert_eq!(
        (reloaded.floors, reloaded.total),
        (settled.floors.clone(), 1000)
    );

    // Buyers on every master walk the probe rule; each purchase is retried with its token.
    let seed_ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
    let buyers: Vec<_> = (0..6u64)
        .map(|b| {
            let holders = holders.clone();
            let port = seed_ports[b as usize % seed_ports.len()];
            std::thread::spawn(move || {
                let mut client = ClusterClient::connect(port);
                let mut seed = b * 7919 + 1;
                let (mut granted, mut refused) = (0i64, 0u32);
                for i in 0..60 {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let amount = 1 + (seed >> 33) as i64 % 5;
                    let token = format!("b{b}-{i}");
                    let first = purchase(&mut client, &holders, amount, &token).unwrap();
                    let retry = purchase(&mut client, &holders, amount, &token).unwrap();
                    assert_eq!(retry, first, "{token}: a retry replays its first answer");
                    if first {
                        granted += amount;
                    } else {
                        refused += 1;
                    }
                }
                (granted, refused)
            })
        })
        .collect();
    let (mut granted, mut refused) = (0, 0);
    for buyer in buyers {
        let (g, r) = buyer.join().unwrap();
        (granted, refused) = (granted + g, refused + r);
    }
    eprintln!(
        "3 masters, 16 holders, 360 purchases: {granted} of 900 units granted, {refused} refused"
    );
    assert!(granted <= 900, "granted {granted} of 900");
    let after = floor_view(&mut client, home).unwrap();
    check_accounting(&after, 1000 - granted, 100);
    assert_eq!(after.in_flight, 0);
    // Every holder is visited before a refusal: what is left are fragments under 5 units.
    assert!(
        refused == 0 || 900 - granted < 16 * 5,
        "{granted} granted, {refused} refused"
    );

    // Shrinking folds the removed holders' values and floors home across masters: the floor,
    // the total and the headroom stay.
    assert_eq!(names(&client.cmd(&["CTR.SPREAD", home, "4"])).len(), 4);
    let folded = eventually(30, || {
        let info = client.cmd(&["CTR.INFO", home]);
        let done = !info.is_error() && info.field("leaving").array().is_empty();
        done.then(|| floor_view(&mut client, home)).flatten()
    });
    check_accounting(&folded, 1000 - granted, 100);
    assert_eq!((folded.floors.len(), folded.in_flight), (4, 0));
    assert_eq!(folded.floors.iter().sum::<i64>(), 100);
}

/// The home's master (the giver of every share) dies after debiting the moves and before any
/// credit is applied (every master holds credits); its replica takes over and resends: the
/// holders it now serves are credited exactly once, the others' shares stay in flight, and the
/// floors' accounting and the total are exact throughout. A purchase made before the kill
/// replays its answer after it.
#[test]
fn a_failover_of_the_givers_master_mid_move_credits_each_share_once() {
    let mut cluster = Cluster::start_for_failovers(3, &["debug-hold-credits", "yes"]);
    let mut client = cluster.client();
    let home = "{stock}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let replica = cluster.start_replica_of(home_node);
    assert_eq!(client.cmd(&["CTR.ADD", home, "1000"]), Value::Int(1000));
    assert_eq!(client.cmd(&["CTR.FLOOR", home, "100"]).text(), "OK");
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
    let share = shares(900, 16);
    // Every share is in flight (debited at the home, credits held everywhere).
    let v = floor_view(&mut client, home).unwrap();
    check_accounting(&v, 1000, 100);
    assert_eq!(v.in_flight, 900 - share[0]);
    assert_eq!(v.budgets[0], share[0]);
    // A purchase from the home's own budget, before the kill (a walk reaching a holder whose
    // share is held would wait there: TRYAGAIN).
    let before_kill = ["CTR.DECRFLOOR", home, "7", "TOKEN", "before-kill"];
    let granted = Value::Int(share[0] - 7); // what the home can still sell
    assert_eq!(client.cmd(&before_kill), granted);

    let on_home_master: Vec<usize> = (1..16)
        .filter(|&i| cluster.owner(key_slot(holders[i].as_bytes())) == home_node)
        .collect();
    assert!(!on_home_master.is_empty());
    cluster.nodes[home_node].wait_replicas(1);
    // The replica holds the home as its master does: the raised floor and every move.
    let digest = |c: &mut common::Conn| c.cmd(&["DEBUG", "DIGEST-VALUE", home]);
    let on_master = digest(&mut cluster.nodes[home_node].conn());
    assert!(
        matches!(&on_master, Value::Array(d) if d.len() == 1),
        "{on_master:?}"
    );
    assert_eq!(digest(&mut replica.conn()), on_master);
    cluster.nodes[home_node].kill();
    // The promoted replica (which holds no credits) resends the moves; it applies the credits
    // of the holders in its own slots, once; the other masters still hold theirs.
    let still_held: i64 = (1..16)
        .filter(|i| !on_home_master.contains(i))
        .map(|i| share[i])
        .sum();
    let mut r = replica.conn();
    let settled = eventually(60, || {
        let info = r.cmd(&["CTR.INFO", home]);
        if info.is_error() {
            return None;
        }
        let in_flight = info.field("units_in_flight").int();
        (in_flight == still_held).then(|| ints(&info.field("holder_floors")))
    });
    for &i in &on_home_master {
        assert_eq!(settled[i], -share[i], "holder {i} credited exactly once");
    }
    let mut after = ClusterClient::connect(replica.port);
    let v = floor_view(&mut after, home).unwrap();
    check_accounting(&v, 993, 100);
    assert_eq!(
        after.cmd(&before_kill),
        granted,
        "the retry replays the grant"
    );
    assert_eq!(
        floor_view(&mut after, home).unwrap().total,
        993,
        "not granted twice"
    );
}

/// A buyer that only ever asks one holder, on another master than the home's: its refusals
/// reach the home's master, which polls the holders and asks the others to give (at most half
/// their budget each time), until almost everything is sold through that one holder. The
/// total is exact and nothing is in flight once it settles.
#[test]
fn budget_moves_across_masters_toward_a_holder_that_refuses() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{hot}";
    assert_eq!(client.cmd(&["CTR.ADD", home, "400"]), Value::Int(400));
    assert_eq!(client.cmd(&["CTR.FLOOR", home, "0"]).text(), "OK");
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "4"]));
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let hot = holders
        .iter()
        .find(|h| cluster.owner(key_slot(h.as_bytes())) != home_node)
        .expect("a holder on another master")
        .clone();
    eventually(30, || {
        let v = floor_view(&mut client, home)?;
        (v.in_flight == 0).then_some(())
    });
    let (mut granted, mut refused) = (0, 0);
    // How long each run of refusals lasted: from a refusal to budget arriving.
    let (mut refusing_since, mut waits) = (None, Vec::new());
    let start = Instant::now();
    while granted < 397 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "granted {granted}, refused {refused}"
        );
        match client.cmd(&["CTR.DECRFLOOR", &hot, "1"]) {
            Value::Int(_) => {
                granted += 1;
                waits.extend(refusing_since.take().map(|t: Instant| t.elapsed()));
            }
            Value::Nil => {
                refused += 1;
                refusing_since.get_or_insert_with(Instant::now);
                std::thread::sleep(Duration::from_millis(5));
            }
            other => panic!("{other:?}"),
        }
    }
    waits.sort();
    eprintln!(
        "one hot holder across masters: {granted} of 400 sold through it in {:?}, {refused} \
         refusals; from a refusal to budget arriving: median {:?}, max {:?} over {} moves",
        start.elapsed(),
        waits.get(waits.len() / 2).copied().unwrap_or_default(),
        waits.last().copied().unwrap_or_default(),
        waits.len()
    );
    let v = eventually(30, || {
        let v = floor_view(&mut client, home)?;
        (v.in_flight == 0).then_some(v)
    });
    check_accounting(&v, 400 - granted, 0);
    assert_eq!(v.floors.iter().sum::<i64>(), 0);
}

/// One buyer's view of the cluster that survives a master's death: a command that meets a
/// dead connection (the test client panics on it) reconnects from a live seed and reports a
/// failure, so the purchase is retried later with the same token.
struct Buyer {
    seeds: Vec<u16>,
    client: Option<ClusterClient>,
    /// The master with a replica (killed mid-sale): a decision there is made durable with WAIT
    /// before the buyer relies on it (docs/FLOORS.md, the strong tier).
    replicated_port: u16,
}

/// Keeps the expected panics of a dead connection (caught by `Buyer::cmd`) out of the output.
fn quiet_connection_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let text = info.to_string();
            let dead_link = ["read reply", "write to server", "connect to a cluster node"];
            if !dead_link.iter().any(|m| text.contains(m)) {
                default(info);
            }
        }));
    });
}

impl Buyer {
    fn cmd(&mut self, args: &[&str]) -> Option<Value> {
        let seeds = self.seeds.clone();
        let replicated = self.replicated_port;
        let client = &mut self.client;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let c = match client {
                Some(c) => c,
                None => client.insert(ClusterClient::connect(
                    seeds[std::process::id() as usize % seeds.len()],
                )),
            };
            let reply = c.cmd(args);
            let port = c.port_for(args[1].as_bytes());
            if port == replicated && !reply.is_error() {
                let acked = c.conn(port).cmd(&["WAIT", "1", "2000"]);
                if acked != Value::Int(1) {
                    return None; // not durable yet: retried with the same token
                }
            }
            Some(reply)
        }));
        match outcome {
            Ok(Some(reply)) if !reply.is_error() => Some(reply),
            Ok(_) => None,
            Err(_) => {
                self.client = None; // a dead connection: reconnect next time
                None
            }
        }
    }

    /// A purchase by the probe rule (see `purchase`); None when a holder failed.
    fn purchase(&mut self, holders: &[String], amount: i64, token: &str) -> Option<bool> {
        let amount = amount.to_string();
        for i in probe_order(token.as_bytes(), holders.len()) {
            match self.cmd(&["CTR.DECRFLOOR", &holders[i], &amount, "TOKEN", token])? {
                Value::Int(_) => return Some(true),
                Value::Nil => continue,
                other => panic!("{other:?}"),
            }
        }
        Some(false)
    }

    /// The purchase, retried with its token until a walk completes.
    fn purchase_until_answered(&mut self, holders: &[String], amount: i64, token: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(answer) = self.purchase(holders, amount, token) {
                return answer;
            }
            assert!(Instant::now() < deadline, "{token} never answered");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One purchase of the flash sale, as its buyer saw it.
struct Attempt {
    start: Instant,
    end: Instant,
    /// The stock not yet granted when it started (from the buyers' shared count).
    stock_before: i64,
    /// The units granted, 0 when refused.
    granted: i64,
    /// Refused while the gathered total read right after still covered the amount.
    false_refusal: bool,
}

/// The flash sale: 10,000 units over 16 holders on 3 masters, 30 buyers with random
/// amounts, each purchase retried with its token; a holder master is killed and fails over to
/// its replica in the middle. Nothing is oversold, every retry replays its first answer, the
/// total is exact, and the false-refusal rate (refusals while the gathered headroom read right
/// after still covered the amount) is printed.
#[test]
fn flash_sale_with_a_failover_never_oversells_and_retries_replay() {
    use std::sync::atomic::{AtomicI64, Ordering::SeqCst};
    use std::sync::Arc;
    quiet_connection_panics();
    let mut cluster = Cluster::start_for_failovers(3, &[]);
    let mut client = cluster.client();
    let home = "{flash}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let victim = (0..3).find(|&n| n != home_node).unwrap();
    let replica = cluster.start_replica_of(victim);
    assert_eq!(client.cmd(&["CTR.ADD", home, "10000"]), Value::Int(10000));
    assert_eq!(client.cmd(&["CTR.FLOOR", home, "0"]).text(), "OK");
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
    eventually(30, || {
        (floor_view(&mut client, home)?.in_flight == 0).then_some(())
    });
    cluster.nodes[victim].wait_replicas(1);

    let victim_port = cluster.nodes[victim].port;
    let seeds: Vec<u16> = (0..3)
        .filter(|&n| n != victim)
        .map(|n| cluster.nodes[n].port)
        .chain([replica.port])
        .collect();
    let granted_so_far = Arc::new(AtomicI64::new(0));
    let buyers: Vec<_> = (0..30u64)
        .map(|b| {
            let holders = holders.clone();
            let seeds = seeds.clone();
            let granted_so_far = granted_so_far.clone();
            std::thread::spawn(move || {
                let mut buyer = Buyer {
                    seeds,
                    client: None,
                    replicated_port: victim_port,
                };
                let mut seed = b * 104_729 + 7;
                let mut attempts = Vec::with_capacity(80);
                for i in 0..80 {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let amount = 1 + (seed >> 33) as i64 % 10;
                    let token = format!("flash-{b}-{i}");
                    let (start, stock_before) = (Instant::now(), granted_so_far.load(SeqCst));
                    let first = buyer.purchase_until_answered(&holders, amount, &token);
                    let mut attempt = Attempt {
                        start,
                        end: Instant::now(),
                        stock_before: 10_000 - stock_before,
                        granted: if first { amount } else { 0 },
                        false_refusal: false,
                    };
                    if first {
                        granted_so_far.fetch_add(amount, SeqCst);
                    } else if let Some(Value::Int(left)) = buyer.cmd(&["CTR.GET", "{flash}"]) {
                        attempt.false_refusal = left >= amount;
                    }
                    attempts.push(attempt);
                    let retry = buyer.purchase_until_answered(&holders, amount, &token);
                    assert_eq!(retry, first, "{token}: the retry replays the first answer");
                }
                attempts
            })
        })
        .collect();
    // Mid-sale, the victim master dies and its replica takes over; the failover window lasts
    // until the replica is master and the home's master gathers again, plus a second for the
    // buyers to find it.
    eventually(120, || (granted_so_far.load(SeqCst) >= 3_000).then_some(()));
    let killed_at = Instant::now();
    cluster.nodes[victim].kill();
    let mut home_conn = cluster.nodes[home_node].conn();
    eventually(60, || {
        let promoted = replica.info_field("replication", "role") == "master";
        (promoted && !home_conn.cmd(&["CTR.INFO", home]).is_error()).then_some(())
    });
    let window = killed_at..Instant::now() + Duration::from_secs(1);
    let attempts: Vec<Attempt> = buyers.into_iter().flat_map(|b| b.join().unwrap()).collect();
    let granted: i64 = attempts.iter().map(|a| a.granted).sum();
    let refused = attempts.iter().filter(|a| a.granted == 0).count();
    let false_refusals = attempts.iter().filter(|a| a.false_refusal).count();
    // Settled: purchases that neither overlap the failover window nor start with under 1% of
    // the stock left (the last fragments sit on holders the walk may not reach in time).
    let settled: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| a.end < window.start || a.start > window.end)
        .filter(|a| a.stock_before >= 100)
        .collect();
    let settled_false = settled.iter().filter(|a| a.false_refusal).count();
    let purchases = attempts.len();
    let percent = |n: usize, of: usize| n as f64 * 100.0 / of.max(1) as f64;
    eprintln!(
        "flash sale, 3 masters, 16 holders, 30 buyers, a failover mid-sale: {granted} of 10000 \
         units granted, {refused} of {purchases} purchases refused, {false_refusals} false \
         refusals ({:.2}% of purchases); settled phase (outside the failover window of {:?}, \
         and with at least 100 units left): {settled_false} false refusals in {} purchases \
         ({:.2}%)",
        percent(false_refusals, purchases),
        window.end - window.start,
        settled.len(),
        percent(settled_false, settled.len())
    );
    assert!(granted <= 10_000, "oversold: {granted}");
    let mut after = ClusterClient::connect(replica.port);
    let v = eventually(60, || {
        let v = floor_view(&mut after, home)?;
        (v.in_flight == 0).then_some(v)
    });
    check_accounting(&v, 10_000 - granted, 0);
    assert_eq!(v.floors.iter().sum::<i64>(), 0);
}

/// A holder that gets no share (the headroom is smaller than the holder count, or it was added
/// by growing) is still made floored by its move of 0 units: it refuses to go below its floor,
/// a negative CTR.ADD too, so the counter never goes below its floor whatever a holder is sent.
#[test]
fn holders_without_a_share_refuse_to_go_below_their_floor() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{few}";
    assert_eq!(client.cmd(&["CTR.ADD", home, "2"]), Value::Int(2));
    assert_eq!(client.cmd(&["CTR.FLOOR", home, "0"]).text(), "OK");
    assert_eq!(names(&client.cmd(&["CTR.SPREAD", home, "4"])).len(), 4);
    // Growing is refused while a move to a new holder is in flight: retried until it goes.
    let holders = eventually(20, || {
        let reply = client.cmd(&["CTR.SPREAD", home, "6"]);
        (!reply.is_error()).then(|| names(&reply))
    });
    // The first spread gave the home and holder 1 a unit each; holders 2..5 hold nothing.
    for h in &holders[2..] {
        eventually(20, || {
            // Nil until the holder's credit has made its key.
            let info = client.cmd(&["CTR.INFO", h]);
            (info != Value::Nil && info.field("floor") != Value::Nil).then_some(())
        });
        // Beyond the whole counter's 2 units: refused for good (a purchase the counter
        // covers would wait for budget to gather here and be granted), and so is a negative
        // add of that size.
        assert_eq!(client.cmd(&["CTR.ADD", h, "-3"]), Value::Nil, "{h}");
        assert_eq!(client.cmd(&["CTR.DECRFLOOR", h, "3"]), Value::Nil, "{h}");
    }
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(2));
}

/// What must hold whatever has failed: the budgets plus the units in flight are the headroom,
/// and the holders' floors are the counter's floor plus what is in flight (a debit raised the
/// giver's floor; its credit lowers the receiver's once applied).
fn check_conservation(v: &FloorView, total: i64, floor: i64) {
    check_accounting(v, total, floor);
    assert_eq!(v.budgets.iter().sum::<i64>() + v.in_flight, total - floor);
    assert_eq!(v.floors.iter().sum::<i64>(), floor + v.in_flight);
}

/// A token whose probe order visits holder `first` before the home (index 0).
fn token_visiting_first(prefix: &str, holders: &[String], first: usize) -> String {
    (0..)
        .map(|n| format!("{prefix}-{n}"))
        .find(|t| {
            let order = probe_order(t.as_bytes(), holders.len());
            order.iter().position(|&i| i == first) < order.iter().position(|&i| i == 0)
        })
        .unwrap()
}

/// The receiver's master dies in the middle of a move: the home has debited every share and
/// the credits are held on every master. A purchase before the kill reached a holder of the
/// victim first (no budget yet): it waits (TRYAGAIN, nothing recorded). The victim's replica,
/// which does not hold credits, takes over: the home resends, the victim's holders are
/// credited once, the others' shares stay in flight, budgets plus units in flight stay the
/// headroom, and the retry is granted from that holder's share, once.
#[test]
fn a_failover_of_the_receivers_master_mid_move_credits_each_share_once() {
    let mut cluster = Cluster::start_for_failovers(3, &["debug-hold-credits", "yes"]);
    let mut client = cluster.client();
    let home = "{receiver}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let victim = (0..3).find(|&n| n != home_node).unwrap();
    let replica = cluster.start_replica_of(victim);
    assert_eq!(client.cmd(&["CTR.ADD", home, "1000"]), Value::Int(1000));
    assert_eq!(client.cmd(&["CTR.FLOOR", home, "100"]).text(), "OK");
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
    let share = shares(900, 16);
    let on_victim: Vec<usize> = (1..16)
        .filter(|&i| cluster.owner(key_slot(holders[i].as_bytes())) == victim)
        .collect();
    assert!(!on_victim.is_empty());
    let v = floor_view(&mut client, home).unwrap();
    check_conservation(&v, 1000, 100);
    assert_eq!(v.in_flight, 900 - share[0]);

    // A token whose walk starts at a holder of the victim.
    let token = (0..)
        .map(|n| format!("recv-{n}"))
        .find(|t| probe_order(t.as_bytes(), holders.len())[0] == on_victim[0])
        .unwrap();
    let first = &holders[on_victim[0]];
    let waits = cluster.nodes[victim]
        .conn()
        .cmd(&["CTR.DECRFLOOR", first, "7", "TOKEN", &token]);
    assert_awaits_budget(waits, first);
    cluster.nodes[victim].wait_replicas(1);
    cluster.nodes[victim].kill();

    let still_held: i64 = (1..16)
        .filter(|i| !on_victim.contains(i))
        .map(|i| share[i])
        .sum();
    let mut after = ClusterClient::connect(cluster.nodes[home_node].port);
    let v = eventually(60, || {
        floor_view(&mut after, home).filter(|v| v.in_flight == still_held)
    });
    check_conservation(&v, 1000, 100);
    for &i in &on_victim {
        assert_eq!(v.floors[i], -share[i], "holder {i} credited exactly once");
        assert_eq!(v.budgets[i], share[i]);
    }
    assert!(
        replica
            .info_field("ctr", "ctr_transfers_credited")
            .parse::<usize>()
            .is_ok_and(|n| n >= on_victim.len()),
        "the promoted replica applied the credits"
    );
    // A client that learns the slot map now (the one above still knows the dead master).
    let mut after = ClusterClient::connect(cluster.nodes[home_node].port);
    for attempt in ["the retry is granted", "and replays its grant"] {
        assert_eq!(
            purchase(&mut after, &holders, 7, &token),
            Some(true),
            "{attempt}"
        );
    }
    let v = floor_view(&mut after, home).unwrap();
    check_conservation(&v, 993, 100);
    assert_eq!(
        v.budgets[on_victim[0]],
        share[on_victim[0]] - 7,
        "granted once, by the holder the walk waited at"
    );
}

/// The coordinator (the home's master) dies in the middle of a rebalance between two holders
/// on the other masters: the giver has debited the move but its credit waits behind the
/// giver's frozen replica (the replication gate). The home's replica takes over; the move,
/// which never needed the coordinator past its give, completes; budgets plus units in flight
/// are the headroom throughout, the floors sum to F once settled, a purchase made before the
/// kill replays, and the new home's master coordinates the next rebalance.
#[test]
fn a_failover_of_the_coordinator_mid_rebalance_keeps_the_move_exact() {
    // No wait in the server: a purchase waiting for budget answers TRYAGAIN at once, so that
    // the test sees the hot holder refuse before its budget comes.
    let mut cluster = Cluster::start_for_failovers(3, &["purchase-wait-ms", "0"]);
    let mut client = cluster.client();
    let home = "{coordinator}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    assert_eq!(client.cmd(&["CTR.ADD", home, "400"]), Value::Int(400));
    assert_eq!(client.cmd(&["CTR.FLOOR", home, "40"]).text(), "OK");
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "8"]));
    let owner_of: Vec<usize> = holders
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .collect();
    let hot = (1..8).find(|&i| owner_of[i] != home_node).unwrap();
    let giver = (0..3)
        .find(|&n| n != home_node && n != owner_of[hot])
        .unwrap();
    assert!(owner_of.contains(&giver), "a holder on the third master");
    let home_replica = cluster.start_replica_of(home_node);
    let giver_replica = cluster.start_replica_of(giver);
    eventually(30, || {
        (floor_view(&mut client, home)?.in_flight == 0).then_some(())
    });
    let before = token_visiting_first("coord", &holders, hot);
    assert_eq!(purchase(&mut client, &holders, 3, &before), Some(true));
    let mut sold = 3;
    cluster.nodes[home_node].wait_replicas(1);
    cluster.nodes[giver].wait_replicas(1);

    // The giver's replica stops acknowledging: a move it gives stays debited, in flight.
    let mut frozen = giver_replica.conn();
    let wakes = std::thread::spawn(move || frozen.cmd(&["DEBUG", "SLEEP", "10"]));
    std::thread::sleep(Duration::from_millis(300));
    // The hot holder sells out, then refuses until the home's master plans a move to it; the
    // moves from the giver's master stay in flight.
    let held = eventually(10, || {
        match client.cmd_once(&["CTR.DECRFLOOR", &holders[hot], "1"]) {
            Value::Int(_) => sold += 1,
            // Refused, or (the counter covers it) waiting for budget: either is demand.
            Value::Nil => std::thread::sleep(Duration::from_millis(20)),
            Value::Error(e) if e.starts_with("TRYAGAIN") => {
                std::thread::sleep(Duration::from_millis(20))
            }
            other => panic!("{other:?}"),
        }
        let v = floor_view(&mut client, home)?;
        check_conservation(&v, 400 - sold, 40);
        let giver_debited =
            (0..8).any(|i| owner_of[i] == giver && v.floors[i] > -shares(360, 8)[i]);
        (giver_debited && v.in_flight > 0).then_some(v.in_flight)
    });
    eprintln!("coordinator killed with {held} units in flight from the giver's master");
    cluster.nodes[home_node].kill();

    assert_eq!(wakes.join().unwrap().text(), "OK");
    eventually(60, || {
        let promoted = home_replica.info_field("replication", "role") == "master";
        let ok = home_replica
            .conn()
            .q("CLUSTER INFO")
            .text()
            .contains("cluster_state:ok");
        (promoted && ok).then_some(())
    });
    let mut after = ClusterClient::connect(home_replica.port);
    let v = eventually(60, || {
        floor_view(&mut after, home).filter(|v| v.in_flight == 0)
    });
    check_conservation(&v, 400 - sold, 40);
    assert_eq!(v.floors.iter().sum::<i64>(), 40);
    assert_eq!(purchase(&mut after, &holders, 3, &before), Some(true));
    assert_eq!(
        floor_view(&mut after, home).unwrap().total,
        400 - sold,
        "not granted twice"
    );

    // The promoted home's master coordinates: once the hot holder refuses again, its refusals
    // bring it budget again.
    let mut refused = false;
    eventually(30, || {
        match after.cmd_once(&["CTR.DECRFLOOR", &holders[hot], "1"]) {
            Value::Int(_) => {
                sold += 1;
                refused.then_some(())
            }
            Value::Nil => {
                refused = true;
                std::thread::sleep(Duration::from_millis(20));
                None
            }
            Value::Error(e) if e.starts_with("TRYAGAIN") => {
                refused = true;
                std::thread::sleep(Duration::from_millis(20));
                None
            }
            _ => None,
        }
    });
    let v = eventually(30, || {
        floor_view(&mut after, home).filter(|v| v.in_flight == 0)
    });
    check_conservation(&v, 400 - sold, 40);
}

/// The step between a credit and its acknowledgement, for both sides of a move: the receiver's
/// master has applied every share the home sent it, but its replica is frozen (DEBUG SLEEP), so
/// the replication gate holds its acknowledgements back. Then one side's master dies:
/// - the receiver's: the home's moves to it are unacknowledged, so the home sends them again
///   to the replica that takes over, which applies each once whether or not the replication
///   stream had already brought it the credit (bytes in its socket when it froze are read when
///   it wakes);
/// - the giver's (the home's): its replica takes over with the moves still unacknowledged and
///   sends them again; the receiver answers the repeats as repeats (nothing applied twice) and
///   acknowledges them once its own replica holds the credits.
///
/// Either way each holder there is credited exactly once, budgets plus units in flight are the
/// headroom throughout, and every move ends acknowledged.
fn failover_between_credit_and_ack(kill_the_receiver: bool) {
    let mut cluster = Cluster::start_for_failovers(3, &[]);
    let mut client = cluster.client();
    let home = "{unacked}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let receiver = (0..3).find(|&n| n != home_node).unwrap();
    let receiver_replica = cluster.start_replica_of(receiver);
    let home_replica = cluster.start_replica_of(home_node);
    cluster.nodes[receiver].wait_replicas(1);
    cluster.nodes[home_node].wait_replicas(1);
    assert_eq!(client.cmd(&["CTR.ADD", home, "1000"]), Value::Int(1000));
    assert_eq!(client.cmd(&["CTR.FLOOR", home, "100"]).text(), "OK");
    let mut frozen = receiver_replica.conn();
    let sleeper = std::thread::spawn(move || frozen.cmd(&["DEBUG", "SLEEP", "8"]));
    std::thread::sleep(Duration::from_millis(300));

    let holders = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
    let share = shares(900, 16);
    let on_receiver: Vec<usize> = (1..16)
        .filter(|&i| cluster.owner(key_slot(holders[i].as_bytes())) == receiver)
        .collect();
    assert!(!on_receiver.is_empty());
    // The receiver's holders have their shares (credited), their acks held back.
    let v = eventually(5, || {
        floor_view(&mut client, home)
            .filter(|v| on_receiver.iter().all(|&i| v.budgets[i] == share[i]))
    });
    check_conservation(&v, 1000, 100);
    let acked = |server: &Server| -> usize {
        server
            .info_field("ctr", "ctr_transfers_acked")
            .parse()
            .unwrap()
    };
    let others = 15 - on_receiver.len();
    eventually(4, || {
        (acked(&cluster.nodes[home_node]) == others).then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        acked(&cluster.nodes[home_node]),
        others,
        "the receiver's acks are held back"
    );

    let victim = if kill_the_receiver {
        receiver
    } else {
        home_node
    };
    cluster.nodes[victim].kill();
    let _ = sleeper.join();
    // Read on the master serving the home after the failover (its replica if it died).
    let home_port = if kill_the_receiver {
        cluster.nodes[home_node].port
    } else {
        home_replica.port
    };
    let v = eventually(60, || {
        floor_view_at(home_port, home).filter(|v| v.in_flight == 0)
    });
    check_conservation(&v, 1000, 100);
    assert_eq!(v.floors.iter().sum::<i64>(), 100);
    for &i in &on_receiver {
        assert_eq!(v.floors[i], -share[i], "holder {i} credited exactly once");
        assert_eq!(v.budgets[i], share[i]);
    }
    // Every move ends acknowledged at the giver that now serves the home.
    if kill_the_receiver {
        eventually(30, || {
            (acked(&cluster.nodes[home_node]) == 15).then_some(())
        });
        let answered: u64 = ["ctr_transfers_credited", "ctr_transfers_duplicate_credits"]
            .iter()
            .map(|f| {
                receiver_replica
                    .info_field("ctr", f)
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        assert!(
            answered > 0,
            "the promoted replica answered the credits sent again"
        );
    } else {
        eventually(30, || {
            (acked(&home_replica) >= on_receiver.len()).then_some(())
        });
        let repeats: usize = cluster.nodes[receiver]
            .info_field("ctr", "ctr_transfers_duplicate_credits")
            .parse()
            .unwrap();
        assert!(
            repeats >= on_receiver.len(),
            "the resent credits were repeats"
        );
    }
}

#[test]
fn a_failover_of_the_receivers_master_between_credit_and_ack_credits_each_share_once() {
    failover_between_credit_and_ack(true);
}

#[test]
fn a_failover_of_the_givers_master_between_credit_and_ack_credits_each_share_once() {
    failover_between_credit_and_ack(false);
}

/// Finding 11 of issue 26: a grant on a holder of a spread counter replied the holder's own
/// value, `-100` while 700 units remained (its floor is -125 once its share of 125 landed). It
/// replies the units the granting key can still sell (value minus its own floor), as one key
/// with floor 0 replies its new value; a retry with the token replays that first reply, also
/// once a rebalance moved the holder's floor.
#[test]
fn a_granted_purchase_replies_the_units_its_holder_can_still_sell() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{stock}";
    assert_eq!(client.cmd(&["CTR.ADD", home, "1000"]), Value::Int(1000));
    assert_eq!(client.cmd(&["CTR.FLOOR", home, "0"]).text(), "OK");
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "8"]));
    let settled = eventually(30, || {
        let v = floor_view(&mut client, home)?;
        (v.in_flight == 0).then_some(v)
    });
    assert_eq!(settled.budgets, shares(1000, 8));
    // A holder on another master than the home's.
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let i = (1..holders.len())
        .find(|&i| cluster.owner(key_slot(holders[i].as_bytes())) != home_node)
        .expect("a holder on another master");
    let buy = ["CTR.DECRFLOOR", &holders[i], "100", "TOKEN", "order-1"];
    assert_eq!(
        client.cmd(&buy),
        Value::Int(25),
        "125 - 100 left at that holder"
    );
    assert_eq!(client.cmd(&["CTR.GET", &holders[i]]), Value::Int(-100));
    assert_eq!(client.cmd(&buy), Value::Int(25), "a retry replays");
    // The home's own budget, the same way.
    assert_eq!(client.cmd(&["CTR.DECRFLOOR", home, "5"]), Value::Int(120));
    let v = eventually(30, || floor_view(&mut client, home));
    assert_eq!((v.total, v.headroom), (895, 895));
    // More than holder i holds: it waits while budget gathers there (its floor moves), then
    // is granted; every reply is what the holder could still sell, never below 0.
    let mut holder_master = cluster.nodes[cluster.owner(key_slot(holders[i].as_bytes()))].conn();
    let (granted, _) = common::purchase_until_final(
        &mut holder_master,
        &["CTR.DECRFLOOR", &holders[i], "60", "TOKEN", "order-2"],
    );
    let left = granted.int();
    assert!((0..=895 - 60).contains(&left), "{left}");
    let floors = eventually(30, || {
        let v = floor_view(&mut client, home)?;
        (v.in_flight == 0).then_some(v.floors)
    });
    assert_ne!(floors[i], settled.floors[i], "budget moved to holder {i}");
    assert_eq!(
        client.cmd(&buy),
        Value::Int(25),
        "the first reply, whatever moved since"
    );
    let retried = ["CTR.DECRFLOOR", &holders[i], "60", "TOKEN", "order-2"];
    assert_eq!(client.cmd(&retried), Value::Int(left));
}

/// A refund by the probe rule: the holders in the token's order, stopping at the first that
/// answers a number (the units it gave back, or replays). None when no holder had a grant of
/// the token.
fn refund(client: &mut ClusterClient, holders: &[String], token: &str) -> Option<i64> {
    for i in probe_order(token.as_bytes(), holders.len()) {
        match client.cmd(&["CTR.REFUND", &holders[i], "TOKEN", token]) {
            Value::Int(units) => return Some(units),
            Value::Nil => continue,
            other => panic!("refund of {token} at {}: {other:?}", holders[i]),
        }
    }
    None
}

/// Cancelled orders restock exactly once (issue 35, item 3) on a floored spread counter across
/// three masters: each refund walks the purchase's probe order to the holder that granted it
/// and gives the units back there, where they are budget again; a retried refund replays, the
/// refund of a refused or unknown token finds nothing, and the total and the conservation of
/// budgets hold at every step.
#[test]
fn cancelled_purchases_restock_once_at_the_holders_that_granted_them() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{stock}";
    assert_eq!(client.cmd(&["CTR.ADD", home, "400"]), Value::Int(400));
    assert_eq!(client.cmd(&["CTR.FLOOR", home, "0"]).text(), "OK");
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "8"]));
    eventually(30, || {
        let v = floor_view(&mut client, home)?;
        (v.in_flight == 0).then_some(())
    });
    let tokens: Vec<String> = (0..20).map(|n| format!("order-{n}")).collect();
    for token in &tokens {
        assert_eq!(purchase(&mut client, &holders, 7, token), Some(true));
    }
    let sold = eventually(30, || floor_view(&mut client, home));
    assert_eq!(sold.total, 400 - 20 * 7);
    // Half the orders are cancelled, each refund sent twice.
    for token in &tokens[..10] {
        assert_eq!(refund(&mut client, &holders, token), Some(7), "{token}");
        assert_eq!(
            refund(&mut client, &holders, token),
            Some(7),
            "{token} again"
        );
    }
    assert_eq!(refund(&mut client, &holders, "never-sold"), None);
    let v = eventually(30, || {
        let v = floor_view(&mut client, home)?;
        (v.in_flight == 0).then_some(v)
    });
    assert_eq!(v.total, 400 - 10 * 7);
    check_conservation(&v, v.total, 0);
    // The purchases' retries replay their grants; the refunded units sell again.
    for token in &tokens {
        assert_eq!(purchase(&mut client, &holders, 7, token), Some(true));
    }
    assert_eq!(
        purchase(&mut client, &holders, 5, "after-refunds"),
        Some(true)
    );
    let v = eventually(30, || floor_view(&mut client, home));
    assert_eq!(v.total, 400 - 10 * 7 - 5);
}
