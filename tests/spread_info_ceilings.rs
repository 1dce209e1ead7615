//! `CTR.INFO` of a ceiled spread counter's home: `ceiling` is the spread's ceiling C (not the
//! home key's own share), with `room` (C - total), `holder_ceilings`, `holder_rooms` and
//! `room_in_flight`, and `holder_refused_units`; a spread with a floor too shows both sets. On
//! one server (nothing in flight), while a ceiled spread shrinks to one key with its folds held
//! (its ceiling is the home's share plus what the leaving holders hold), and across the masters
//! of a real 3-master cluster, where the gather carries each holder's ceiling (answer kind 4)
//! and the shares travel as moves of ceiling units until `room_in_flight` is 0.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{key_slot, Cluster, ClusterClient};
use common::{eventually, names, Server, Value};

/// Holds every credit (a test-only load argument): a shrink's folds stay under way.
const HOLD: &[&str] = &["debug-hold-credits", "yes"];

fn ints(v: &Value) -> Vec<i64> {
    v.array().iter().map(Value::int).collect()
}

/// A field of a CTR.INFO reply, None when the reply is not a map or lacks it.
fn field_of(reply: &Value, field: &str) -> Option<Value> {
    let items = match reply {
        Value::Array(items) => items.clone(),
        Value::Map(pairs) => pairs
            .iter()
            .flat_map(|(k, v)| [k.clone(), v.clone()])
            .collect(),
        _ => return None,
    };
    let at = items
        .iter()
        .step_by(2)
        .position(|v| matches!(v, Value::Bulk(b) if b == field.as_bytes()))?;
    Some(items[2 * at + 1].clone())
}

/// The ceiling fields of a ceiled spread home's `CTR.INFO`.
#[derive(Debug)]
struct CeilingView {
    total: i64,
    ceiling: i64,
    room: i64,
    ceilings: Vec<i64>,
    rooms: Vec<i64>,
    in_flight: i64,
    values: Vec<i64>,
    refused: Vec<i64>,
}

impl CeilingView {
    /// None when the reply is an error (a gather that failed).
    fn of(info: &Value) -> Option<CeilingView> {
        if info.is_error() {
            return None;
        }
        Some(CeilingView {
            total: info.field("value").int(),
            ceiling: info.field("ceiling").int(),
            room: info.field("room").int(),
            ceilings: ints(&info.field("holder_ceilings")),
            rooms: ints(&info.field("holder_rooms")),
            in_flight: info.field("room_in_flight").int(),
            values: ints(&info.field("holder_values")),
            refused: ints(&info.field("holder_refused_units")),
        })
    }

    /// What every reading of a ceiled spread must show: room C - total, each member's room
    /// its ceiling - its value and never negative, the rooms plus the room in flight the whole
    /// room, and nothing in flight the wrong way (the members' ceilings never sum past C: that
    /// would be room available twice).
    fn check(&self, ceiling: i64, members: usize) {
        assert_eq!(self.ceiling, ceiling, "C, not the home's share");
        assert_eq!(self.room, ceiling - self.total, "{self:?}");
        assert_eq!(self.ceilings.len(), members, "{self:?}");
        assert_eq!(self.rooms.len(), members, "{self:?}");
        assert_eq!(self.refused.len(), members, "{self:?}");
        for i in 0..members {
            assert_eq!(self.rooms[i], self.ceilings[i] - self.values[i], "{self:?}");
        }
        assert!(self.rooms.iter().all(|&r| r >= 0), "{self:?}");
        assert_eq!(self.rooms.iter().sum::<i64>() + self.in_flight, self.room);
        assert!(self.in_flight >= 0, "{self:?}");
        assert!(self.ceilings.iter().sum::<i64>() <= ceiling, "{self:?}");
    }
}

#[test]
fn a_ceiled_spread_home_shows_its_ceiling_and_each_members_room() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(c.q("CTR.ADD k 10"), Value::Int(10));
    assert_eq!(c.q("CTR.CEIL k 100").text(), "OK");
    let members = names(&c.q("CTR.SPREAD k 4"));
    assert_eq!(members.len(), 4);
    let info = c.q("CTR.INFO k");
    let v = CeilingView::of(&info).unwrap();
    v.check(100, 4);
    assert_eq!((v.total, v.room, v.in_flight), (10, 90, 0));
    assert_eq!(v.ceilings.iter().sum::<i64>(), 100);
    assert_eq!(v.rooms.iter().sum::<i64>(), 90);
    assert_eq!(v.refused, [0; 4]);
    // `ceiling_budgets` stays the home key's own: its room under its share.
    assert_eq!(
        ints(&info.field("ceiling_budgets")).iter().sum::<i64>(),
        v.rooms[0]
    );
    // A ceiled-only spread shows no floor fields.
    assert_eq!(info.field("floor"), Value::Nil);
    assert!(field_of(&info, "headroom").is_none());
    assert!(field_of(&info, "units_in_flight").is_none());

    // An add takes room where it lands.
    assert_eq!(c.cmd(&["CTR.ADD", &members[2], "5"]), Value::Int(5));
    let after = CeilingView::of(&c.q("CTR.INFO k")).unwrap();
    after.check(100, 4);
    assert_eq!((after.total, after.room), (15, 85));
    assert_eq!(after.rooms[2], v.rooms[2] - 5);
    assert_eq!(after.ceilings, v.ceilings, "no ceiling moved");
}

#[test]
fn a_spread_with_both_bounds_shows_both_sets_of_fields() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD b 50");
    assert_eq!(c.q("CTR.FLOOR b 0").text(), "OK");
    assert_eq!(c.q("CTR.CEIL b 200").text(), "OK");
    assert_eq!(names(&c.q("CTR.SPREAD b 3")).len(), 3);
    let info = c.q("CTR.INFO b");
    let v = CeilingView::of(&info).unwrap();
    v.check(200, 3);
    assert_eq!((v.room, v.in_flight), (150, 0));
    assert_eq!(v.ceilings.iter().sum::<i64>(), 200);
    assert_eq!(info.field("floor"), Value::Int(0));
    assert_eq!(info.field("headroom"), Value::Int(50));
    assert_eq!(ints(&info.field("holder_floors")).iter().sum::<i64>(), 0);
    assert_eq!(ints(&info.field("holder_budgets")).iter().sum::<i64>(), 50);
    assert_eq!(info.field("units_in_flight"), Value::Int(0));
}

/// The mirror of issue 22's floor (tests/spread_transfers.rs): a ceiled spread shrunk with its
/// folds held. Mid-shrink the leaving holders' ceilings are in hand, in `holder_ceilings`, so
/// nothing shows in flight; shrunk to one key (no spread record), `ceiling` is the home's share
/// plus what its leaving holders hold: the counter's ceiling, not the home's part alone.
#[test]
fn a_ceiled_spread_shrinking_with_its_folds_under_way_shows_the_counters_ceiling() {
    let held = Server::start_with(&[], HOLD);
    let mut c = held.conn();
    c.q("CTR.ADD k 10");
    c.q("CTR.CEIL k 100");
    let members = names(&c.q("CTR.SPREAD k 4"));
    assert_eq!(names(&c.q("CTR.SPREAD k 2")).len(), 2);
    let info = c.q("CTR.INFO k");
    assert_eq!(names(&info.field("leaving")), members[2..]);
    let v = CeilingView::of(&info).unwrap();
    v.check(100, 4);
    assert_eq!((v.ceilings.iter().sum::<i64>(), v.in_flight), (100, 0));

    assert_eq!(names(&c.q("CTR.SPREAD k 1")).len(), 1);
    let info = c.q("CTR.INFO k");
    let mut leaving = names(&info.field("leaving"));
    leaving.sort();
    assert_eq!(leaving, members[1..], "credits held");
    assert_eq!(info.field("value"), Value::Int(10));
    assert_eq!(info.field("ceiling"), Value::Int(100), "mid-fold");
    assert!(
        field_of(&info, "room").is_none(),
        "no spread record: no view"
    );

    // Released: a server without the hold applies the folds.
    assert_eq!(held.conn().q("SAVE"), Value::Simple("OK".into()));
    let rdb = std::fs::read(held.dir.join("dump.rdb")).expect("the held server's RDB");
    let free = Server::try_start(&[], &[], true, &[("dump.rdb", &rdb)])
        .unwrap_or_else(|log| panic!("the releasing server did not start:\n{log}"));
    let mut f = free.conn();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !field_of(&f.q("CTR.INFO k"), "leaving").is_none_or(|l| l.array().is_empty()) {
        assert!(Instant::now() < deadline, "the folds never completed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(f.q("CTR.INFO k").field("ceiling"), Value::Int(100));
    assert_eq!(f.q("CTR.GET k"), Value::Int(10));
}

fn ceiling_view(client: &mut ClusterClient, home: &str) -> Option<CeilingView> {
    CeilingView::of(&client.cmd(&["CTR.INFO", home]))
}

/// Across masters each holder's share of the ceiling is a move of ceiling units from the home:
/// every reading shows the whole room (in members' rooms or in flight, never twice), and once
/// the moves land the ceilings sum to C and the rooms to C - total, the gather carrying the
/// ceilings of the holders on the other masters. With a floor too, the gather carries both.
#[test]
fn a_ceiled_spread_across_masters_shows_its_ceilings_once_the_moves_land() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{ceiled}";
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    assert_eq!(client.cmd(&["CTR.ADD", home, "10"]), Value::Int(10));
    assert_eq!(client.cmd(&["CTR.CEIL", home, "100"]).text(), "OK");
    let members = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
    assert_eq!(members.len(), 16);
    let elsewhere: Vec<usize> = (1..16)
        .filter(|&i| cluster.owner(key_slot(members[i].as_bytes())) != home_node)
        .collect();
    let masters: std::collections::BTreeSet<usize> = members
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .collect();
    assert_eq!(masters.len(), 3, "holders on every master: {members:?}");

    // While the moves travel: the whole room, never room twice.
    let first = ceiling_view(&mut client, home).unwrap();
    first.check(100, 16);
    assert_eq!((first.total, first.room), (10, 90));
    let settled = eventually(30, || {
        let v = ceiling_view(&mut client, home)?;
        v.check(100, 16);
        (v.in_flight == 0).then_some(v)
    });
    assert_eq!(settled.ceilings.iter().sum::<i64>(), 100);
    assert_eq!(settled.rooms.iter().sum::<i64>(), 90);
    assert_eq!(settled.refused, [0; 16]);
    // 90 units of room over 16 members: every holder elsewhere has a share, read over the bus.
    for &i in &elsewhere {
        assert!(settled.ceilings[i] > 0, "holder {i}: {settled:?}");
    }

    // An add on another master takes room there, read afresh even with the cache on (ceiled
    // holders are never served from it).
    let mut home_master = cluster.nodes[home_node].conn();
    assert_eq!(
        home_master.q("CONFIG SET ctr.gather-cache-ms 60000"),
        Value::Simple("OK".into())
    );
    let before = CeilingView::of(&home_master.cmd(&["CTR.INFO", home])).unwrap();
    let far = elsewhere[0];
    let value = client.cmd(&["CTR.ADD", &members[far], "3"]).int();
    assert_eq!(value, before.values[far] + 3);
    let after = CeilingView::of(&home_master.cmd(&["CTR.INFO", home])).unwrap();
    after.check(100, 16);
    assert_eq!((after.total, after.room, after.in_flight), (13, 87, 0));
    assert_eq!(after.rooms[far], before.rooms[far] - 3);
    assert_eq!(
        home_master.q("CONFIG SET ctr.gather-cache-ms 0"),
        Value::Simple("OK".into())
    );

    // Both bounds: each holder elsewhere answers its floor and its ceiling.
    let both = "{both}";
    assert_eq!(client.cmd(&["CTR.ADD", both, "50"]), Value::Int(50));
    assert_eq!(client.cmd(&["CTR.FLOOR", both, "0"]).text(), "OK");
    assert_eq!(client.cmd(&["CTR.CEIL", both, "200"]).text(), "OK");
    let members = names(&client.cmd(&["CTR.SPREAD", both, "8"]));
    let both_node = cluster.owner(key_slot(both.as_bytes()));
    let (v, info) = eventually(30, || {
        let info = client.cmd(&["CTR.INFO", both]);
        let v = CeilingView::of(&info)?;
        v.check(200, 8);
        let settled = v.in_flight == 0 && info.field("units_in_flight") == Value::Int(0);
        settled.then_some((v, info))
    });
    assert_eq!((v.room, v.ceilings.iter().sum::<i64>()), (150, 200));
    assert_eq!(info.field("floor"), Value::Int(0));
    assert_eq!(info.field("headroom"), Value::Int(50));
    let floors = ints(&info.field("holder_floors"));
    assert_eq!(floors.iter().sum::<i64>(), 0);
    let far: Vec<usize> = (1..8)
        .filter(|&i| cluster.owner(key_slot(members[i].as_bytes())) != both_node)
        .collect();
    assert!(!far.is_empty(), "{members:?}");
    for &i in &far {
        // 50 units of headroom and 150 of room over 8 members: a share of each.
        assert!(
            floors[i] < 0 && v.ceilings[i] > 0,
            "holder {i}: {floors:?} {v:?}"
        );
    }
}
