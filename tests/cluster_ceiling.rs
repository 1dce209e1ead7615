//! Ceiled spread counters across the masters of a real 3-master cluster: spreading shares the
//! room (ceiling - value) over 16 members through moves of ceiling units; the members' own
//! ceilings never sum above the counter's ceiling (units in flight make up the rest) and, once
//! settled, sum to it exactly; adders on every master walking the members never take the
//! total past the ceiling, fill it exactly, and every tokened retry replays its first answer;
//! room moves toward a holder whose adds it refuses; a shrink folds the ceilings home; a kill -9
//! and failover of the giver's master mid-move credits every share once.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{key_slot, Cluster, ClusterClient};
use common::{eventually, names, Value};

/// Each member's own ceiling (0 for one without a ceiling yet), read from its master.
fn member_ceilings(client: &mut ClusterClient, members: &[String]) -> Option<Vec<i64>> {
    members
        .iter()
        .map(|m| match client.cmd(&["CTR.INFO", m]) {
            Value::Error(_) => None,
            Value::Nil => Some(0),
            info => Some(common::own_ceiling(&info).unwrap_or(0)),
        })
        .collect()
}

/// Each member's own value, as the home's gathered read shows them (the home first; folded
/// members are gone from `members` once their folds landed).
fn member_values(client: &mut ClusterClient, members: &[String]) -> Vec<i64> {
    let info = eventually(30, || {
        let info = client.cmd(&["CTR.INFO", &members[0]]);
        (!info.is_error()).then_some(info)
    });
    let listed = names(&info.field("holders"));
    let values = info.field("holder_values").array();
    members
        .iter()
        .map(|m| {
            let i = listed.iter().position(|l| l == m).expect("a listed member");
            values[i].int()
        })
        .collect()
}

/// What every reading of a ceiled spread must show: no member above its own ceiling, and the
/// ceilings never summing above the counter's (room available twice).
fn check_caps(values: &[i64], ceilings: &[i64], ceiling: i64) {
    for (v, c) in values.iter().zip(ceilings) {
        assert!(
            v <= c,
            "a member above its ceiling: {values:?} {ceilings:?}"
        );
    }
    assert!(ceilings.iter().sum::<i64>() <= ceiling, "{ceilings:?}");
}

/// Waits until the members' ceilings sum to `ceiling` (nothing in flight); returns them.
fn settled(client: &mut ClusterClient, members: &[String], ceiling: i64) -> Vec<i64> {
    eventually(60, || {
        let ceilings = member_ceilings(client, members)?;
        check_caps(&member_values(client, members), &ceilings, ceiling);
        (ceilings.iter().sum::<i64>() == ceiling).then_some(ceilings)
    })
}

/// One add walking the members from `start` on until one counts it: Some(true) counted,
/// Some(false) refused by every member, None when a member failed (retried later with the
/// same token). A member whose room is on its way (`TRYAGAIN`) is asked again.
fn walk_add(
    client: &mut ClusterClient,
    members: &[String],
    start: usize,
    amount: i64,
    token: &str,
) -> Option<bool> {
    let amount = amount.to_string();
    for i in 0..members.len() {
        let member = &members[(start + i) % members.len()];
        let began = Instant::now();
        loop {
            match client.cmd(&["CTR.ADD", member, &amount, "TOKEN", token]) {
                Value::Int(_) => return Some(true),
                Value::Nil => break,
                Value::Error(e) if e.starts_with("TRYAGAIN") => {
                    if began.elapsed() > Duration::from_secs(20) {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => return None,
            }
        }
    }
    Some(false)
}

#[test]
fn a_ceiled_spread_shares_its_room_across_masters_and_adders_never_pass_the_ceiling() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{cap}";
    assert_eq!(client.cmd(&["CTR.ADD", home, "100"]), Value::Int(100));
    assert_eq!(client.cmd(&["CTR.CEIL", home, "1000"]).text(), "OK");
    let members = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
    assert_eq!(members.len(), 16);
    let masters: std::collections::HashSet<usize> = members
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .collect();
    assert_eq!(masters.len(), 3, "members on every master");
    let shares = settled(&mut client, &members, 1000);
    let rooms: Vec<i64> = shares[1..]
        .iter()
        .copied()
        .chain([shares[0] - 100])
        .collect();
    assert!(
        rooms.iter().max().unwrap() - rooms.iter().min().unwrap() <= 1,
        "{rooms:?}"
    );
    // The members' ceilings (set by credits) survive a reload of every master's RDB.
    for node in &cluster.nodes {
        assert_eq!(node.conn().q("DEBUG RELOAD").text(), "OK");
    }
    assert_eq!(member_ceilings(&mut client, &members), Some(shares.clone()));

    // Adders on every master walk the members from a random one; each add is retried with
    // its token, and the retry replays its first answer.
    let seed_ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
    let adders: Vec<_> = (0..6u64)
        .map(|a| {
            let members = members.clone();
            let port = seed_ports[a as usize % seed_ports.len()];
            std::thread::spawn(move || {
                let mut client = ClusterClient::connect(port);
                let mut seed = a * 7919 + 1;
                let mut counted = 0i64;
                for i in 0.. {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let amount = 1 + (seed >> 33) as i64 % 9;
                    let start = (seed >> 20) as usize % members.len();
                    let token = format!("a{a}-{i}");
                    let first = walk_add(&mut client, &members, start, amount, &token).unwrap();
                    let retry = walk_add(&mut client, &members, start, amount, &token).unwrap();
                    assert_eq!(retry, first, "{token}: a retry replays its first answer");
                    if first {
                        counted += amount;
                    } else if amount == 1 {
                        return counted; // no member has one unit of room left
                    }
                }
                unreachable!()
            })
        })
        .collect();
    let counted: i64 = adders.into_iter().map(|a| a.join().unwrap()).sum();
    eprintln!("3 masters, 16 members: {counted} of 900 units of room taken by walking adders");
    assert_eq!(counted, 900, "every unit of room taken, none twice");
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(1000));
    let ceilings = member_ceilings(&mut client, &members).unwrap();
    check_caps(&member_values(&mut client, &members), &ceilings, 1000);

    // Shrinking folds the removed members' values and ceilings home across masters: the
    // total and the ceiling stay, and the counter is still full.
    client.cmd(&["CTR.ADD", &members[5], "-40"]);
    assert_eq!(names(&client.cmd(&["CTR.SPREAD", home, "4"])).len(), 4);
    eventually(60, || {
        let info = client.cmd(&["CTR.INFO", home]);
        (!info.is_error() && info.field("leaving").array().is_empty()).then_some(())
    });
    let kept = names(&client.cmd(&["CTR.HOLDERS", home]));
    assert_eq!(kept.len(), 4);
    settled(&mut client, &kept, 1000);
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(960));
    let start = 0;
    let refill = walk_add(&mut client, &kept, start, 40, "refill");
    // 40 units of room, maybe over several members: a walk of 40 may find no member with all
    // of it (then the rebalancer gathers it, or the walk is refused), never more than 40.
    if refill == Some(false) {
        for i in 0..40 {
            assert_eq!(
                walk_add(&mut client, &kept, i, 1, &format!("r{i}")),
                Some(true)
            );
        }
    }
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(1000));
    assert_eq!(walk_add(&mut client, &kept, 0, 1, "past"), Some(false));
}

/// An adder that only ever adds at one holder, on another master than the home's: its
/// refusals reach the home's master, which polls the members and asks the others to give
/// room, until almost all the room is taken through that one holder.
#[test]
fn room_moves_across_masters_toward_a_holder_whose_adds_it_refuses() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{gate}";
    assert_eq!(client.cmd(&["CTR.ADD", home, "0"]), Value::Int(0));
    assert_eq!(client.cmd(&["CTR.CEIL", home, "400"]).text(), "OK");
    let members = names(&client.cmd(&["CTR.SPREAD", home, "4"]));
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let hot = members
        .iter()
        .find(|h| cluster.owner(key_slot(h.as_bytes())) != home_node)
        .expect("a holder on another master")
        .clone();
    settled(&mut client, &members, 400);
    let (mut counted, mut refused) = (0, 0);
    let start = Instant::now();
    while counted < 397 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "counted {counted}, refused {refused}"
        );
        match client.cmd(&["CTR.ADD", &hot, "1"]) {
            Value::Int(_) => counted += 1,
            Value::Nil => {
                refused += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            Value::Error(e) if e.starts_with("TRYAGAIN") => {}
            other => panic!("{other:?}"),
        }
    }
    eprintln!(
        "one hot holder across masters: {counted} of 400 units of room taken through it in \
         {:?}, {refused} refusals",
        start.elapsed()
    );
    let ceilings = settled(&mut client, &members, 400);
    check_caps(&member_values(&mut client, &members), &ceilings, 400);
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(counted));
}

/// The home's master (the giver of every share) dies after debiting the moves and before any
/// credit is applied (every master holds credits); its replica takes over and resends: the
/// members it now serves are credited exactly once, the others' shares stay in flight (their
/// ceilings 0: no room), and no member's ceiling is ever above its share.
#[test]
fn a_failover_of_the_givers_master_mid_move_credits_each_ceiling_share_once() {
    let mut cluster = Cluster::start_for_failovers(3, &["debug-hold-credits", "yes"]);
    let mut client = cluster.client();
    let home = "{seats}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let replica = cluster.start_replica_of(home_node);
    assert_eq!(client.cmd(&["CTR.ADD", home, "0"]), Value::Int(0));
    assert_eq!(client.cmd(&["CTR.CEIL", home, "1600"]).text(), "OK");
    let members = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
    // Every share is in flight: the home kept its own, the holders have none yet.
    let held = member_ceilings(&mut client, &members).unwrap();
    assert_eq!(held[0], 100);
    assert!(held[1..].iter().all(|&c| c == 0), "{held:?}");
    // A holder before its credit is held at 0: its add waits for its share (TRYAGAIN here,
    // the credit held), and is never counted past it.
    assert_eq!(
        client.cmd(&["CTR.ADD", home, "7", "TOKEN", "before-kill"]),
        Value::Int(7)
    );
    let waiting = client.cmd_once(&["CTR.ADD", &members[3], "1"]);
    assert!(
        matches!(&waiting, Value::Error(e) if e.starts_with("TRYAGAIN budget in flight")),
        "{waiting:?}"
    );

    let on_home_master: Vec<usize> = (1..16)
        .filter(|&i| cluster.owner(key_slot(members[i].as_bytes())) == home_node)
        .collect();
    assert!(!on_home_master.is_empty());
    cluster.nodes[home_node].wait_replicas(1);
    cluster.nodes[home_node].kill();
    // The replica takes over (and its gathered read of the home answers) before a cluster
    // client's map of the slots, read from it, leaves the dead master out.
    let mut r = replica.conn();
    eventually(60, || {
        let info = r.cmd(&["CTR.INFO", home]);
        (!info.is_error()).then_some(())
    });
    let mut after = ClusterClient::connect(replica.port);
    let credited = eventually(60, || {
        let ceilings = member_ceilings(&mut after, &members)?;
        on_home_master
            .iter()
            .all(|&i| ceilings[i] == 100)
            .then_some(ceilings)
    });
    // Credited once each; the shares held on the other masters are still in flight.
    for (i, c) in credited.iter().enumerate().skip(1) {
        let expected = if on_home_master.contains(&i) { 100 } else { 0 };
        assert_eq!(*c, expected, "member {i}: {credited:?}");
    }
    assert_eq!(credited[0], 100);
    assert_eq!(
        after.cmd(&["CTR.ADD", home, "7", "TOKEN", "before-kill"]),
        Value::Int(7),
        "the retry replays its first answer"
    );
    assert_eq!(after.cmd(&["CTR.GET", home]), Value::Int(7), "counted once");
    // A credited member takes its share; the total never passes the room the members hold.
    let h = on_home_master[0];
    assert_eq!(after.cmd(&["CTR.ADD", &members[h], "100"]), Value::Int(100));
    let ceilings = member_ceilings(&mut after, &members).unwrap();
    check_caps(&member_values(&mut after, &members), &ceilings, 1600);
}

/// True for the retryable answer of an add whose room is still on its way.
fn awaits_room(reply: &Value) -> bool {
    matches!(reply, Value::Error(e) if e.starts_with("TRYAGAIN budget in flight") && e.ends_with("retry the add"))
}

/// While the shares travel (held back by the home's frozen replica: the home sends no credit
/// until its replica holds the debits), a holder is held at 0 from above: every positive add
/// at it, tokened or not, answers `TRYAGAIN` with nothing recorded against its token, and
/// the home takes no add past its own share. Once the credits land, the adds that waited are
/// decided afresh; an add beyond the whole room is refused for good once a round has seen it.
#[test]
fn holders_of_a_ceiled_spread_take_no_add_before_their_first_credit() {
    // No wait in the server: an add that waits for its share answers TRYAGAIN at once.
    let cluster = Cluster::start(3, &["purchase-wait-ms", "0"]);
    let replicas: Vec<common::Server> = (0..3).map(|n| cluster.start_replica_of(n)).collect();
    let mut client = cluster.client();
    let home = "{gate2}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    assert_eq!(client.cmd(&["CTR.ADD", home, "100"]), Value::Int(100));
    assert_eq!(client.cmd(&["CTR.CEIL", home, "1000"]).text(), "OK");
    cluster.nodes[home_node].wait_replicas(1);
    let frozen = replicas[home_node].port;
    let sleeper = std::thread::spawn(move || {
        let mut c = common::Conn::connect(frozen).unwrap();
        c.q("DEBUG SLEEP 3")
    });
    std::thread::sleep(Duration::from_millis(200));
    let members = names(&client.cmd(&["CTR.SPREAD", home, "6"]));
    assert_eq!(members.len(), 6);
    for (i, h) in members.iter().enumerate().skip(1) {
        let mut master = cluster.nodes[cluster.owner(key_slot(h.as_bytes()))].conn();
        assert!(awaits_room(&master.cmd(&["CTR.ADD", h, "1"])), "{h}");
        let token = format!("t{i}");
        let tokened = ["CTR.ADD", h, "100", "TOKEN", &token];
        assert!(awaits_room(&master.cmd(&tokened)), "{h}");
        assert!(awaits_room(&master.cmd(&tokened)), "{h}: not recorded");
        assert_eq!(master.cmd(&["CTR.GET", h]), Value::Int(0), "{h}");
        assert_eq!(
            master.cmd(&["CTR.ADD", h, "-3"]),
            Value::Int(-3),
            "room grows below"
        );
        assert_eq!(
            master.cmd(&["CTR.ADD", h, "3"]),
            Value::Int(0),
            "{h}: up to 0"
        );
        assert!(awaits_room(&master.cmd(&["CTR.ADD", h, "1"])), "{h}");
    }
    // The home's own share is 150 of the 900 units of room; past it, it waits too.
    let mut home_master = cluster.nodes[home_node].conn();
    assert!(awaits_room(
        &home_master.cmd(&["CTR.ADD", home, "151", "TOKEN", "h1"])
    ));
    assert_eq!(home_master.cmd(&["CTR.ADD", home, "150"]), Value::Int(250));
    sleeper.join().unwrap();
    let ceilings = settled(&mut client, &members, 1000);
    assert_eq!(&ceilings[1..], [150; 5]);
    // The adds that waited are decided afresh, and their answer is final.
    let t2 = ["CTR.ADD", &members[2], "100", "TOKEN", "t2"];
    assert_eq!(client.cmd(&t2), Value::Int(100));
    assert_eq!(client.cmd(&t2), Value::Int(100), "a retry replays it");
    // 1000 - (250 + 100) = 650 units of room left: an add of 651 at the home is refused for
    // good once a round has seen the whole room, and its token replays the refusal.
    let beyond = ["CTR.ADD", home, "651", "TOKEN", "h2"];
    let refused = eventually(20, || match home_master.cmd(&beyond) {
        Value::Error(e) if e.starts_with("TRYAGAIN") => None,
        other => Some(other),
    });
    assert_eq!(refused, Value::Nil);
    assert_eq!(home_master.cmd(&beyond), Value::Nil, "a replay");
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(350));
}
