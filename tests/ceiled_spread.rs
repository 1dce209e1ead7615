//! Ceiled spread counters on one server: `CTR.SPREAD` of a counter with a ceiling shares its
//! room (ceiling - value) over the members' own ceilings, no member takes an add past its
//! share, the rebalancer gathers room to a member whose adds it refuses, and the cap holds
//! exactly under concurrent adders. Across masters: tests/cluster_ceiling.rs. Persistence of
//! a ceiled spread (RDB, AOF, DUMP/RESTORE, replicas) is in ctr_persistence.rs.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{Conn, Server, Value};

const SET_BEFORE: &str =
    "ERR the ceiling of a spread counter is set before it spreads (its holders keep ceilings of their own)";

fn names(reply: &Value) -> Vec<String> {
    reply.array().iter().map(Value::text).collect()
}

fn ceiling_of(c: &mut Conn, key: &str) -> i64 {
    common::own_ceiling(&c.cmd(&["CTR.INFO", key])).expect("a ceiling")
}

fn total(c: &mut Conn, home: &str) -> i64 {
    c.cmd(&["CTR.GET", home]).int()
}

/// An add of `amount` at `key`, asked again while the server answers that room is on its way.
fn add_retrying(c: &mut Conn, key: &str, amount: i64) -> Value {
    let start = Instant::now();
    loop {
        let reply = c.cmd(&["CTR.ADD", key, &amount.to_string()]);
        match &reply {
            Value::Error(e) if e.starts_with("TRYAGAIN budget in flight") => {
                assert!(start.elapsed().as_secs() < 20, "{key}: {e}");
                thread::sleep(Duration::from_millis(10));
            }
            _ => return reply,
        }
    }
}

/// Spreads a counter at `value` capped at `ceiling` to `n` members; their names, home first.
fn spread_capped(c: &mut Conn, home: &str, value: i64, ceiling: i64, n: usize) -> Vec<String> {
    c.cmd(&["CTR.ADD", home, &value.to_string()]);
    assert_eq!(
        c.cmd(&["CTR.CEIL", home, &ceiling.to_string()]),
        Value::Simple("OK".into())
    );
    let members = names(&c.cmd(&["CTR.SPREAD", home, &n.to_string()]));
    assert_eq!(members.len(), n);
    members
}

#[test]
fn a_ceiled_counter_shares_its_room_and_each_member_holds_its_share() {
    // Rebalancing off: a member's refusal is final, so each share shows alone.
    let server = Server::start_with(&[], &["rebalance-delay-ms", "0"]);
    let mut c = server.conn();
    let members = spread_capped(&mut c, "cap", 10, 100, 4);
    let ceilings: Vec<i64> = members.iter().map(|m| ceiling_of(&mut c, m)).collect();
    // The room (90) is shared evenly: the home keeps its value plus its share.
    let rooms: Vec<i64> = ceilings[1..]
        .iter()
        .copied()
        .chain([ceilings[0] - 10])
        .collect();
    assert_eq!(rooms.iter().sum::<i64>(), 90, "{ceilings:?}");
    assert!(rooms.iter().max().unwrap() - rooms.iter().min().unwrap() <= 1);
    assert_eq!(ceilings.iter().sum::<i64>(), 100);

    // A holder takes adds up to its own ceiling, and no further.
    let h1 = &members[1];
    let share = ceilings[1];
    assert_eq!(
        c.cmd(&["CTR.ADD", h1, &(share + 1).to_string()]),
        Value::Nil
    );
    assert_eq!(
        c.cmd(&["CTR.ADD", h1, &share.to_string()]),
        Value::Int(share)
    );
    assert_eq!(c.cmd(&["CTR.ADD", h1, "1"]), Value::Nil);
    // Refused with a token: remembered, and its retry replays the refusal.
    assert_eq!(c.cmd(&["CTR.ADD", h1, "1", "TOKEN", "t1"]), Value::Nil);
    c.cmd(&["CTR.ADD", h1, "-3"]);
    assert_eq!(c.cmd(&["CTR.ADD", h1, "1", "TOKEN", "t1"]), Value::Nil);
    assert_eq!(c.cmd(&["CTR.ADD", h1, "3"]), Value::Int(share));
    // Every member filled: the total is the ceiling, and no member takes one more unit.
    for (m, ceiling) in members.iter().zip(&ceilings).skip(2) {
        assert_eq!(
            c.cmd(&["CTR.ADD", m, &ceiling.to_string()]),
            Value::Int(*ceiling)
        );
    }
    let home_room = ceilings[0] - 10;
    assert_eq!(
        c.cmd(&["CTR.ADD", "cap", &home_room.to_string()]),
        Value::Int(ceilings[0])
    );
    assert_eq!(total(&mut c, "cap"), 100);
    for m in &members {
        assert_eq!(c.cmd(&["CTR.ADD", m, "1"]), Value::Nil, "{m}");
    }
    // A negative add gives room back where it lands.
    assert_eq!(c.cmd(&["CTR.ADD", h1, "-5"]), Value::Int(share - 5));
    assert_eq!(c.cmd(&["CTR.ADD", h1, "5"]), Value::Int(share));

    // The ceiling of a spread counter is set before it spreads: it neither changes nor goes
    // away on any member, and the commands built on one key's bounds refuse it.
    assert_eq!(c.q("CTR.CEIL cap 200").error(), SET_BEFORE);
    assert_eq!(c.q("CTR.CEIL cap NONE").error(), SET_BEFORE);
    assert_eq!(c.cmd(&["CTR.CEIL", h1, "200"]).error(), SET_BEFORE);
    assert!(c
        .q("CTR.INCREX cap")
        .error()
        .starts_with("ERR CTR.INCREX takes a counter that is not spread"));
    assert!(c
        .cmd(&["CTR.INCREX", h1])
        .error()
        .starts_with("ERR CTR.INCREX takes a counter that is not spread"));
    assert!(c
        .q("CTR.CLEAR cap")
        .error()
        .starts_with("ERR cannot clear a ceiled spread counter"));
    let reconcile = c.q("CTR.RECONCILE cap 90").error();
    assert!(
        reconcile.starts_with("ERR cannot reconcile a ceiled spread counter"),
        "{reconcile}"
    );
    assert_eq!(total(&mut c, "cap"), 100, "nothing changed");

    // Shrunk back to one key, the home's ceiling is the counter's again, and the spread over,
    // it takes a new one.
    c.cmd(&["CTR.ADD", h1, "-30"]);
    assert_eq!(c.q("CTR.SPREAD cap 1").array().len(), 1);
    assert_eq!(ceiling_of(&mut c, "cap"), 100);
    assert_eq!(total(&mut c, "cap"), 70);
    assert_eq!(c.q("CTR.ADD cap 31"), Value::Nil);
    assert_eq!(c.q("CTR.ADD cap 30"), Value::Int(100));
    assert_eq!(c.q("CTR.CEIL cap 150"), Value::Simple("OK".into()));
    assert_eq!(c.q("CTR.ADD cap 50"), Value::Int(150));
}

/// An add larger than any member's share, while the counter as a whole has the room, waits
/// (in the server, then `TRYAGAIN`, nothing recorded against its token) until the rebalancer
/// gathers room to its member, and is then counted once. An add beyond the whole room is
/// refused for good once a round has seen it, and its token replays the refusal.
#[test]
fn an_add_larger_than_any_share_is_counted_once_room_gathers() {
    let server = Server::start();
    let mut c = server.conn();
    let members = spread_capped(&mut c, "gate", 0, 100, 4);
    let h2 = &members[2];
    assert!(ceiling_of(&mut c, h2) < 40);
    let added = add_retrying(&mut c, h2, 40);
    assert_eq!(added, Value::Int(40), "room gathered to the holder");
    assert!(ceiling_of(&mut c, h2) >= 40);
    assert_eq!(total(&mut c, "gate"), 40);
    let members_total: i64 = members.iter().map(|m| ceiling_of(&mut c, m)).sum();
    assert_eq!(members_total, 100, "room moved, never made");
    // 60 units of room left: 61 is beyond the whole counter, once a round has seen it.
    let refused = |c: &mut Conn| {
        let start = Instant::now();
        loop {
            let r = c.cmd(&["CTR.ADD", h2, "61", "TOKEN", "big"]);
            match &r {
                Value::Error(e) if e.starts_with("TRYAGAIN budget in flight") => {
                    assert!(start.elapsed().as_secs() < 20, "{e}");
                    thread::sleep(Duration::from_millis(10));
                }
                _ => return r,
            }
        }
    };
    assert_eq!(refused(&mut c), Value::Nil);
    assert_eq!(refused(&mut c), Value::Nil, "its token replays the refusal");
    assert_eq!(add_retrying(&mut c, h2, 60), Value::Int(100));
    assert_eq!(total(&mut c, "gate"), 100);
}

/// An add that one rebalance round covers only in part (a member that refused nothing gives at
/// most half its room a round: 4 x 40 here, for 300 at a member with 80) waits in the server
/// through as many rounds as it takes and is counted in one call, the client asking once.
/// Before, the wait ended in `TRYAGAIN` at `ctr.purchase-wait-ms` (200 ms) with 240 of room
/// gathered, or, with the longer wait here, in a false final refusal (nil) once the round's
/// view of the room had aged.
#[test]
fn an_add_one_round_covers_in_part_is_counted_in_one_call() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CONFIG SET ctr.purchase-wait-ms 10000");
    let members = spread_capped(&mut c, "seats", 0, 400, 5);
    assert!(members.iter().all(|m| ceiling_of(&mut c, m) == 80));
    let add = ["CTR.ADD", &members[1], "300", "TOKEN", "t-300"];
    assert_eq!(c.cmd(&add), Value::Int(300), "counted: the member's value");
    assert_eq!(total(&mut c, "seats"), 300);
    assert_eq!(c.cmd(&add), Value::Int(300), "its token replays the add");
    let ceilings: i64 = members.iter().map(|m| ceiling_of(&mut c, m)).sum();
    assert_eq!(ceilings, 400, "room moved, never made");
}

/// A purchase (`CTR.DECRFLOOR`) refused at a member of a spread with a ceiling and no floor is
/// no demand: that spread's rebalancer moves room for adds, which a purchase does not ask for.
/// Before, the refusal was recorded (`holder_refused_units`) and a round moved ceiling room
/// toward the member that refused it.
#[test]
fn a_purchase_refused_at_a_ceiled_member_moves_no_room() {
    let server = Server::start();
    let mut c = server.conn();
    let members = spread_capped(&mut c, "seats", 0, 400, 4);
    assert_eq!(c.cmd(&["CTR.ADD", &members[1], "10"]), Value::Int(10));
    let ceilings =
        |c: &mut Conn| -> Vec<i64> { members.iter().map(|m| ceiling_of(c, m)).collect() };
    let before = ceilings(&mut c);
    for _ in 0..5 {
        assert_eq!(c.cmd(&["CTR.DECRFLOOR", &members[1], "50"]), Value::Nil);
    }
    thread::sleep(Duration::from_millis(300)); // well past ctr.rebalance-delay-ms (20)
    assert_eq!(ceilings(&mut c), before, "no room moved");
    let info = c.cmd(&["CTR.INFO", "seats"]);
    let refused = common::info_entry(&info, "holder_refused_units").expect("the field");
    assert!(
        refused.array().iter().all(|v| v.int() == 0),
        "no demand recorded: {refused:?}"
    );
    assert_eq!(total(&mut c, "seats"), 10);
}

/// Concurrent adders at random members, walking on past a member that refuses (the clients'
/// walk), fill the counter to its ceiling exactly and never past it.
#[test]
fn concurrent_adders_fill_a_ceiled_spread_exactly_to_its_ceiling() {
    let server = Server::start();
    let mut c = server.conn();
    let members = spread_capped(&mut c, "seats", 0, 500, 5);
    let adders: Vec<_> = (0..4u64)
        .map(|t| {
            let mut conn = server.conn();
            let members = members.clone();
            thread::spawn(move || {
                let mut seed = t * 7919 + 13;
                let mut next = |n: u64| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (seed >> 33) % n
                };
                let mut counted = 0;
                loop {
                    let amount = 1 + next(5) as i64;
                    let start = next(members.len() as u64) as usize;
                    let walk = (0..members.len()).map(|i| &members[(start + i) % members.len()]);
                    let mut taken = false;
                    for m in walk {
                        if let Value::Int(_) = add_retrying(&mut conn, m, amount) {
                            counted += amount;
                            taken = true;
                            break;
                        }
                    }
                    if !taken && amount == 1 {
                        return counted; // no member has one unit of room left
                    }
                }
            })
        })
        .collect();
    let mut watcher = server.conn();
    let mut counted = 0;
    for a in adders {
        while !a.is_finished() {
            assert!(total(&mut watcher, "seats") <= 500);
            thread::sleep(Duration::from_millis(5));
        }
        counted += a.join().unwrap();
    }
    assert_eq!(counted, 500);
    assert_eq!(total(&mut c, "seats"), 500);
    let ceilings: i64 = members.iter().map(|m| ceiling_of(&mut c, m)).sum();
    assert_eq!(ceilings, 500);
}

/// Adds 1 at a time, walking `members`, until every member refuses; the units counted.
fn fill(c: &mut Conn, members: &[String]) -> i64 {
    let mut counted = 0;
    loop {
        let before = counted;
        for m in members {
            while let Value::Int(_) = add_retrying(c, m, 1) {
                counted += 1;
            }
        }
        if counted == before {
            return counted;
        }
    }
}

/// Key operations on a ceiled spread's home keep the counter and its cap whole: `RENAME`
/// (the rebalancer still gathers room for a renamed home, whose holders name it by its old
/// name), `MOVE` and `SWAPDB` (the holders go along); a counter made again under the name of
/// a deleted one is capped at its own ceiling and shares no member with the old one.
#[test]
fn key_operations_keep_a_ceiled_spread_whole_and_capped() {
    let server = Server::start();
    let mut c = server.conn();
    let members = spread_capped(&mut c, "a", 0, 100, 4);
    assert_eq!(c.cmd(&["CTR.ADD", &members[1], "10"]), Value::Int(10));
    assert_eq!(c.q("RENAME a b"), Value::Simple("OK".into()));
    assert_eq!(total(&mut c, "b"), 10);
    assert_eq!(total(&mut c, "a"), 0, "the old name shares nothing");
    // More than any member's share, at a holder: room gathers to it for the renamed home.
    assert_eq!(add_retrying(&mut c, &members[2], 60), Value::Int(60));
    let renamed: Vec<String> = ["b".to_string()]
        .into_iter()
        .chain(members[1..].iter().cloned())
        .collect();
    assert_eq!(fill(&mut c, &renamed), 30);
    assert_eq!(total(&mut c, "b"), 100);

    assert_eq!(c.q("MOVE b 1"), Value::Int(1));
    assert_eq!(c.q("SELECT 1"), Value::Simple("OK".into()));
    common::eventually(5, || (total(&mut c, "b") == 100).then_some(()));
    assert_eq!(fill(&mut c, &renamed), 0, "still capped in database 1");
    assert!(!c.cmd(&["CTR.ADD", &members[3], "-5"]).is_error());
    assert_eq!(fill(&mut c, &renamed), 5);
    assert_eq!(c.q("SWAPDB 0 1"), Value::Simple("OK".into()));
    assert_eq!(c.q("SELECT 0"), Value::Simple("OK".into()));
    assert_eq!(
        total(&mut c, "b"),
        100,
        "swapped whole, holders with their home"
    );
    assert_eq!(fill(&mut c, &renamed), 0);
    let ceilings: i64 = renamed.iter().map(|m| ceiling_of(&mut c, m)).sum();
    assert_eq!(ceilings, 100);

    assert_eq!(c.q("DEL b"), Value::Int(1));
    let again = spread_capped(&mut c, "b", 0, 50, 4);
    assert!(again[1..].iter().all(|m| !members.contains(m)), "{again:?}");
    assert_eq!(fill(&mut c, &again), 50);
    assert_eq!(total(&mut c, "b"), 50);
}
