//! CTR.HOLDERS: a spread counter's holder names from the home's master alone. On one server:
//! the same names as CTR.SPREAD replies (after a grow and a shrink), `[key]` for a missing or
//! unspread key (never creating it), WRONGTYPE, the holder error on a holder's name. On a
//! 3-master cluster: the same names while another master is frozen (DEBUG SLEEP) or down,
//! answered in milliseconds where CTR.INFO of the same key waits for the frozen master.
//! Look-alike holders (issue 26, item 7): on one server a write that would create a key named
//! like a holder that its home does not list is refused and creates nothing; in a cluster too,
//! once the home's master has said so (the holder check), and the first write of a real holder
//! waits for that answer, replicates, and goes on unchecked when the home's master is asleep.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{key_slot, spread_over_masters, Cluster};
use common::{eventually, names, Conn, Frozen, Server, Value};

#[test]
fn holders_of_counters_on_one_server() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(names(&c.q("CTR.HOLDERS nothing")), vec!["nothing"]);
    assert_eq!(
        c.q("EXISTS nothing"),
        Value::Int(0),
        "a read never creates the key"
    );
    c.q("CTR.ADD plain 5");
    assert_eq!(names(&c.q("CTR.HOLDERS plain")), vec!["plain"]);

    let spread = names(&c.q("CTR.SPREAD views 4"));
    assert_eq!(spread.len(), 4);
    assert_eq!(names(&c.q("CTR.HOLDERS views")), spread);
    let grown = names(&c.q("CTR.SPREAD views 6"));
    assert_eq!(&grown[..4], &spread[..]);
    assert_eq!(names(&c.q("CTR.HOLDERS views")), grown);
    // A shrink: the holders kept, not those folded back.
    let kept = names(&c.q("CTR.SPREAD views 2"));
    assert_eq!(kept, grown[..2].to_vec());
    assert_eq!(names(&c.q("CTR.HOLDERS views")), kept);
    assert_eq!(names(&c.q("CTR.SPREAD views 1")), vec!["views"]);
    assert_eq!(names(&c.q("CTR.HOLDERS views")), vec!["views"]);

    c.q("SET text hello");
    assert!(c.q("CTR.HOLDERS text").error().starts_with("WRONGTYPE"));
    // A holder's name, live, folded or never made: a holder is never a home.
    let holder = &grown[1];
    let err = c.cmd(&["CTR.HOLDERS", holder]).error();
    assert_eq!(
        err,
        format!("ERR {holder} is a holder of the spread counter views: use the home key")
    );
    let err = c.q("CTR.HOLDERS {ctr.1.0}nobody").error();
    assert!(
        err.contains("is a holder of the spread counter nobody"),
        "{err}"
    );
    let err = c.q("CTR.HOLDERS a b").error();
    assert_eq!(
        err,
        "ERR wrong number of arguments for 'ctr.holders' command"
    );
}

/// Runs `CTR.HOLDERS home` on the home's master; returns the names and how long it took.
fn timed_holders(cluster: &Cluster, home_node: usize, home: &str) -> (Vec<String>, Duration) {
    let mut c = cluster.nodes[home_node].conn();
    let started = Instant::now();
    let reply = c.cmd(&["CTR.HOLDERS", home]);
    (names(&reply), started.elapsed())
}

#[test]
fn holders_answer_at_once_while_a_master_is_frozen_or_down() {
    let mut cluster = Cluster::start(3, &[]);
    let home = "hot:views";
    let (home_node, holders, _total) = spread_over_masters(&cluster, home);
    let (read, took) = timed_holders(&cluster, home_node, home);
    assert_eq!(read, holders);
    println!("CTR.HOLDERS, every master up: {took:?}");

    // Another master frozen for 3 s (less than the cluster's node timeout: no failover).
    let frozen = (home_node + 1) % 3;
    let (live_holder, live_owner) = holders[1..]
        .iter()
        .map(|h| (h.clone(), cluster.owner(key_slot(h.as_bytes()))))
        .find(|&(_, owner)| owner != frozen)
        .expect("holders on every master");
    let mut sleeper = cluster.nodes[frozen].conn();
    let sleeps = std::thread::spawn(move || sleeper.cmd(&["DEBUG", "SLEEP", "3"]));
    std::thread::sleep(Duration::from_millis(200));
    let (read, took) = timed_holders(&cluster, home_node, home);
    println!("CTR.HOLDERS, a master frozen: {took:?}");
    assert_eq!(read, holders);
    assert!(
        took < Duration::from_millis(250),
        "CTR.HOLDERS took {took:?}"
    );
    // The gathered read of the same key waits for the frozen master (ctr.gather-timeout-ms,
    // 1000 by default), then fails: what CTR.HOLDERS does not do.
    let mut c = cluster.nodes[home_node].conn();
    let started = Instant::now();
    let info = c.cmd(&["CTR.INFO", home]);
    let info_took = started.elapsed();
    println!("CTR.INFO, a master frozen: {info_took:?}");
    assert!(
        info.error().contains("spread counter total unavailable"),
        "{info:?}"
    );
    assert!(info_took >= Duration::from_millis(900), "{info_took:?}");
    assert_eq!(sleeps.join().unwrap(), Value::Simple("OK".into()));

    // Another master down (no replica): the same.
    cluster.nodes[frozen].kill();
    let (read, took) = timed_holders(&cluster, home_node, home);
    println!("CTR.HOLDERS, a master down: {took:?}");
    assert_eq!(read, holders);
    assert!(
        took < Duration::from_millis(250),
        "CTR.HOLDERS took {took:?}"
    );

    // On a holder's own master, a holder's name is refused as on one server.
    let err = cluster.nodes[live_owner]
        .conn()
        .cmd(&["CTR.HOLDERS", &live_holder])
        .error();
    assert!(
        err.contains("is a holder of the spread counter hot:views"),
        "{err}"
    );
}

/// The look-alike refusal's error text, for `key` named like a holder of `home`.
fn look_alike(key: &str, home: &str) -> String {
    format!(
        "ERR {key} is not a holder of the spread counter {home} (only named like one): write \
         the home key, or a holder CTR.HOLDERS lists"
    )
}

/// The names a made-up holder of `home` may take that are not `real` (a holder of its spread):
/// another attempt number, another spread id, the names from before ids, an index it lacks.
fn look_alikes(real: &str, home: &str) -> Vec<String> {
    let tag = &real[1..real.find('}').expect("a holder's tag")];
    let parts: Vec<&str> = tag.split('.').collect(); // ctr, id, i, k
    let k: u32 = parts[3].parse().expect("k");
    vec![
        format!("{{ctr.{}.{}.{}}}{home}", parts[1], parts[2], k + 1),
        format!("{{ctr.00000000000000a2.{}.{k}}}{home}", parts[2]),
        format!("{{ctr.2.3}}{home}"),
        format!("{{ctr.{}.9.0}}{home}", parts[1]),
    ]
}

/// Item 7 of issue 26: `CTR.ADD {ctr.2.3}{page:1}:views 5` (CLUSTER.md's old transcript) was
/// accepted with no holder of that name: the total stayed 0. On one server every home is at
/// hand, so every look-alike is refused (CTR.ADD, CTR.DECRFLOOR, CTR.RECONCILE), with an error
/// that names the home, and nothing is created; the real holders and a renamed home's holders
/// are written as before, and a counter renamed onto a holder-shaped name is a stray, refused.
#[test]
fn a_write_to_a_look_alike_holder_is_refused_on_one_server() {
    let server = Server::start();
    let mut c = server.conn();
    let home = "{page:1}:views";
    let holders = names(&c.cmd(&["CTR.SPREAD", home, "4"]));
    let keys_before = c.q("DBSIZE");
    let mut fakes = look_alikes(&holders[2], home);
    fakes.push("{ctr.1.0}ghost".to_string());
    for fake in &fakes {
        let fake = fake.as_str();
        let named = if fake.ends_with("ghost") {
            "ghost"
        } else {
            home
        };
        for write in [
            vec!["CTR.ADD", fake, "5"],
            vec!["CTR.ADD", fake, "5", "TOKEN", "t"],
            vec!["CTR.DECRFLOOR", fake, "1", "TOKEN", "t"],
            vec!["CTR.RECONCILE", fake, "3"],
            vec!["CTR.RECONCILE", fake, "START"],
        ] {
            assert_eq!(
                c.cmd(&write),
                Value::Error(look_alike(fake, named)),
                "{write:?}"
            );
        }
        assert_eq!(c.cmd(&["EXISTS", fake]), Value::Int(0), "{fake}");
    }
    assert_eq!(c.q("DBSIZE"), keys_before, "nothing was created");
    assert_eq!(c.cmd(&["CTR.GET", home]), Value::Int(0));
    // The holders CTR.SPREAD named are written, and count.
    for holder in &holders[1..] {
        assert_eq!(c.cmd(&["CTR.ADD", holder, "5"]), Value::Int(5));
    }
    assert_eq!(c.cmd(&["CTR.GET", home]), Value::Int(15));
    // A renamed home still lists its holders (they carry the old name).
    let grown = names(&c.cmd(&["CTR.SPREAD", home, "6"]));
    assert_eq!(c.cmd(&["RENAME", home, "renamed"]).text(), "OK");
    assert_eq!(c.cmd(&["CTR.ADD", &grown[5], "2"]), Value::Int(2));
    assert_eq!(c.cmd(&["CTR.GET", "renamed"]), Value::Int(17));
    // A counter renamed onto a holder-shaped name is a stray: refused, counted nowhere.
    let fake = format!("{{ctr.2.3}}{home}");
    assert_eq!(c.cmd(&["CTR.ADD", "made{ctr.2.3}x", "1"]), Value::Int(1));
    assert_eq!(c.cmd(&["RENAME", "made{ctr.2.3}x", &fake]).text(), "OK");
    let e = c.cmd(&["CTR.ADD", &fake, "1"]).error();
    assert!(e.contains("is not that holder"), "{e}");
    // Whole-counter commands keep their own error on a holder's name.
    let e = c.cmd(&["CTR.CLEAR", "{ctr.7.0}nobody"]).error();
    assert!(
        e.contains("is a holder of the spread counter nobody"),
        "{e}"
    );
}

/// Issue 34, item 2: a counter `COPY`d under a holder's name was that holder from then on,
/// counted in its spread's total without any holder check (a negative copy took a floored
/// spread's total below its floor: -1,000 under a floor of 50). A holder is made by the spread
/// protocol only: `COPY` of a counter to a holder-shaped name is refused, whatever the source
/// and whether the holder exists (`REPLACE`), and writes nothing; a holder copied out to
/// another name still copies.
#[test]
fn a_counter_copied_under_a_holders_name_is_refused() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    c.q("CTR.ADD stock 100");
    c.q("CTR.FLOOR stock 50");
    let holders = names(&c.q("CTR.SPREAD stock 4"));
    common::eventually(10, || {
        (c.q("CTR.INFO stock").field("units_in_flight") == Value::Int(0)).then_some(())
    });
    c.q("CTR.ADD negative -1000");
    // An unfloored spread's holder exists from its first write: not written yet.
    let fresh = names(&c.q("CTR.SPREAD views 3"))[2].clone();
    assert_eq!(c.cmd(&["EXISTS", &fresh]), Value::Int(0), "not written yet");
    let before = c.q("DEBUG DIGEST");
    for copy in [
        vec!["COPY", "negative", &fresh],
        vec!["COPY", "negative", &holders[1], "REPLACE"],
        vec!["COPY", &holders[2], &holders[3], "REPLACE"],
    ] {
        let e = c.cmd(&copy).error();
        assert!(e.contains("failed to copy"), "{copy:?}: {e}");
    }
    assert_eq!(c.q("DEBUG DIGEST"), before, "nothing was written");
    assert_eq!(c.q("CTR.GET stock"), Value::Int(100));
    assert_eq!(c.cmd(&["EXISTS", &fresh]), Value::Int(0));
    assert_eq!(server.info_field("ctr", "ctr_holder_copies_refused"), "3");
    let info = c.q("CTR.INFO stock");
    assert_eq!(
        (info.field("value"), info.field("floor")),
        (Value::Int(100), Value::Int(50))
    );
    // A holder copied out under a plain name: a counter of its own units.
    assert_eq!(c.cmd(&["COPY", &holders[1], "kept"]), Value::Int(1));
    server.wait_replicas(1);
    assert_eq!(replica.conn().q("DEBUG DIGEST"), c.q("DEBUG DIGEST"));
}

/// Issue 34, item 2: a counter `RENAME`d onto a holder's name was that holder from then on,
/// counted in its spread's total without any holder check: a negative counter renamed onto a
/// floored spread's holder took the total to -900 under a floor of 50. Now it is a stray: not
/// that holder. The total counts it as a missing holder (0); no command reads or writes it
/// (each says why); the protocol takes nothing from it. Renamed to any other name, or its dump
/// restored under one, it is a counter of its own again. The mark survives a reload, and
/// reaches the replica.
#[test]
fn a_counter_renamed_onto_a_holders_name_is_a_stray() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    // An unfloored spread whose third holder was never written.
    let views = names(&c.q("CTR.SPREAD views 3"));
    c.cmd(&["CTR.ADD", &views[1], "7"]);
    c.q("CTR.ADD negative -1000");
    assert_eq!(c.cmd(&["RENAME", "negative", &views[2]]).text(), "OK");
    assert_eq!(c.q("CTR.GET views"), Value::Int(7), "a stray counts 0");
    let refused = c.cmd(&["CTR.ADD", &views[2], "1"]).error();
    assert!(refused.contains("is not that holder"), "{refused}");
    assert!(refused.contains("'views'"), "{refused}");
    for read in [vec!["CTR.GET", &views[2]], vec!["CTR.INFO", &views[2]]] {
        assert!(
            c.cmd(&read).error().contains("is not that holder"),
            "{read:?}"
        );
    }
    // A floored spread: a negative counter renamed over one of its holders.
    c.q("CTR.ADD stock 100");
    c.q("CTR.FLOOR stock 50");
    let stock = names(&c.q("CTR.SPREAD stock 4"));
    common::eventually(10, || {
        (c.q("CTR.INFO stock").field("units_in_flight") == Value::Int(0)).then_some(())
    });
    let held = c.cmd(&["CTR.INFO", &stock[1]]);
    let (lost, lost_floor) = (held.field("value").int(), held.field("floor").int());
    c.q("CTR.ADD negative2 -1000");
    assert_eq!(c.cmd(&["RENAME", "negative2", &stock[1]]).text(), "OK");
    let info = c.q("CTR.INFO stock");
    let (value, floor) = (info.field("value").int(), info.field("floor").int());
    assert_eq!(
        value,
        100 - lost,
        "the renamed-over holder's units went with it, as by DEL"
    );
    assert!(
        value >= floor,
        "never below the floor: {value} < {floor} (lost floor {lost_floor})"
    );
    assert_eq!(server.info_field("ctr", "ctr_strays_marked"), "2");
    // It survives a reload, and the replica has it.
    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    assert!(c
        .cmd(&["CTR.GET", &views[2]])
        .error()
        .contains("is not that holder"));
    assert_eq!(c.q("CTR.GET views"), Value::Int(7));
    server.wait_replicas(1);
    assert_eq!(replica.conn().q("DEBUG DIGEST"), c.q("DEBUG DIGEST"));
    // Renamed away: a counter of its own; the holder's name is free for the real holder.
    assert_eq!(c.cmd(&["RENAME", &views[2], "back"]).text(), "OK");
    assert_eq!(c.q("CTR.GET back"), Value::Int(-1000));
    assert_eq!(c.cmd(&["CTR.ADD", &views[2], "5"]), Value::Int(5));
    assert_eq!(c.q("CTR.GET views"), Value::Int(12));
    // A stray's dump restored under another name: a counter of its own too.
    let dump = c.cmd(&["DUMP", &stock[1]]);
    let Value::Bulk(dump) = dump else {
        panic!("{dump:?}")
    };
    let restored = c.cmd(&[&b"RESTORE"[..], b"restored", b"0", &dump]);
    assert_eq!(restored, Value::Simple("OK".into()));
    assert_eq!(c.q("CTR.GET restored"), Value::Int(-1000));
    assert_eq!(server.info_field("ctr", "ctr_strays_unmarked"), "2");
    server.wait_replicas(1);
    assert_eq!(replica.conn().q("DEBUG DIGEST"), c.q("DEBUG DIGEST"));
}

/// A holder of `home` on another master than the home's.
fn holder_elsewhere(cluster: &Cluster, home: &str, holders: &[String]) -> String {
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    holders[1..]
        .iter()
        .find(|h| cluster.owner(key_slot(h.as_bytes())) != home_node)
        .expect("a holder on another master")
        .clone()
}

/// A name in `holder`'s slot (its hash tag after `prefix`) that is not a holder's name.
fn slot_mate(prefix: &str, holder: &str) -> String {
    let tag_end = holder.find('}').expect("a hash tag") + 1;
    format!("{prefix}{}", &holder[..tag_end])
}

/// A stray outlives its spread as the user's own counter: deleting the home collects the real
/// holders and leaves the stray, and the orphan audit, which reports holders of a spread gone,
/// never reports it (it is no holder), so no operator's `CTR.ORPHANS DELETE` can take it.
#[test]
fn a_stray_is_neither_collected_nor_reported_as_an_orphan() {
    let audit = ["audit-interval-ms", "200", "orphan-grace-ms", "300"];
    let cluster = Cluster::start(3, &audit);
    let mut client = cluster.client();
    let home = "{home}views";
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "6"]));
    let far = holder_elsewhere(&cluster, home, &holders);
    let mine = slot_mate("mine", &far);
    assert_eq!(client.cmd(&["CTR.ADD", &mine, "40"]), Value::Int(40));
    assert_eq!(client.cmd(&["RENAME", &mine, &far]).text(), "OK");
    assert_eq!(client.cmd(&["DEL", home]), Value::Int(1));
    // Two audit answers, a grace apart, report what a collection left of a spread gone.
    std::thread::sleep(Duration::from_millis(2000));
    let owner = &cluster.nodes[cluster.owner(key_slot(far.as_bytes()))];
    assert_eq!(owner.conn().q("CTR.ORPHANS"), Value::Array(vec![]));
    assert_eq!(client.cmd(&["RENAME", &far, &mine]).text(), "OK");
    assert_eq!(client.cmd(&["CTR.GET", &mine]), Value::Int(40));
}

/// In a cluster too: a counter renamed onto a holder's name (the same slot: the holder's hash
/// tag) on another master than the home's is counted 0 by the home's gather, and refused.
#[test]
fn a_stray_on_another_master_is_counted_zero_in_a_cluster() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{home}views";
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "6"]));
    for h in &holders {
        assert_eq!(client.cmd(&["CTR.ADD", h, "1"]), Value::Int(1));
    }
    let far = holder_elsewhere(&cluster, home, &holders);
    let source = slot_mate("neg", &far);
    assert_eq!(
        client.cmd(&["CTR.ADD", &source, "-1000"]),
        Value::Int(-1000)
    );
    assert_eq!(client.cmd(&["RENAME", &source, &far]).text(), "OK");
    // Its own 1 went with the RENAME (as by DEL); the stray counts 0.
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(5));
    let e = client.cmd(&["CTR.ADD", &far, "1"]).error();
    assert!(e.contains("is not that holder"), "{e}");
    let owner = &cluster.nodes[cluster.owner(key_slot(far.as_bytes()))];
    assert_eq!(owner.info_field("ctr", "ctr_strays_marked"), "1");
}

/// In a cluster the first write of a key named like a holder asks the home's master whether
/// the home lists it (the holder check): a look-alike on any master, the home's own included,
/// is refused (CTR.ADD, CTR.DECRFLOOR, CTR.RECONCILE) and creates nothing; every holder
/// CTR.SPREAD named is written, replicated (the write runs from the check's reply), and counts;
/// a renamed home's new holders pass; inside MULTI (which cannot wait) nothing is checked; and
/// with the home's master asleep past `ctr.gather-timeout-ms` the write goes on unchecked.
#[test]
fn a_write_to_a_look_alike_holder_is_refused_in_a_cluster() {
    let cluster = Cluster::start(3, &["gather-timeout-ms", "500"]);
    let mut client = cluster.client();
    let home = "{page:1}:views";
    let home_master = cluster.owner(key_slot(home.as_bytes()));
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "10"]));
    let on = |name: &str| cluster.owner(key_slot(name.as_bytes()));
    // Holders 6 to 9 are first written later: one after a rename, one with the home asleep.
    let last = holders[6..]
        .iter()
        .find(|h| on(h) != home_master)
        .expect("a holder on another master");
    let after_rename = holders[6..].iter().find(|h| *h != last).expect("another");
    let replicated = (0..3)
        .find(|&m| m != home_master && holders[1..6].iter().any(|h| on(h) == m))
        .expect("a holder on another master");
    let replica = cluster.start_replica_of(replicated);
    // Plain adds replicate as sent, tokened ones as their effect: both from the reply callback.
    for (i, holder) in holders[1..6].iter().enumerate() {
        let token = format!("t{i}");
        let mut add = vec!["CTR.ADD", holder, "1"];
        if i % 2 == 1 {
            add.extend(["TOKEN", &token]);
        }
        assert_eq!(client.cmd(&add), Value::Int(1), "{holder}");
    }
    let id = &holders[1][5..21];
    let mut fakes = Vec::new();
    for node in 0..3 {
        let fake = (0..)
            .map(|k| format!("{{ctr.{id}.1.{k}}}{home}"))
            .find(|n| !holders.contains(n) && on(n) == node)
            .expect("a name on every master");
        for write in [
            vec!["CTR.ADD", &fake, "5"],
            vec!["CTR.ADD", &fake, "5", "TOKEN", "t"],
            vec!["CTR.DECRFLOOR", &fake, "1", "TOKEN", "t"],
            vec!["CTR.RECONCILE", &fake, "3"],
        ] {
            assert_eq!(
                client.cmd(&write),
                Value::Error(look_alike(&fake, home)),
                "{write:?} on master {node} (the home's: {home_master})"
            );
        }
        assert_eq!(client.cmd(&["EXISTS", &fake]), Value::Int(0), "{fake}");
        fakes.push(fake);
    }
    let from_other_cluster = format!("{{ctr.00000000000000a2.2.3}}{home}");
    assert_eq!(
        client.cmd(&["CTR.ADD", &from_other_cluster, "5"]),
        Value::Error(look_alike(&from_other_cluster, home))
    );
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(5));
    let checks: u64 = (0..3)
        .map(|m| {
            let field = cluster.nodes[m].info_field("ctr", "ctr_holder_checks_refused");
            field.parse::<u64>().expect("ctr_holder_checks_refused")
        })
        .sum();
    assert_eq!(
        checks, 13,
        "4 writes of 3 look-alikes and one from another cluster"
    );

    // The checked first writes reached the replica (run again from the check's reply).
    let mut master = cluster.nodes[replicated].conn();
    assert_eq!(master.q("WAIT 1 5000"), Value::Int(1));
    let mut r = replica.conn();
    assert_eq!(r.q("READONLY").text(), "OK");
    for holder in holders[1..6].iter().filter(|h| on(h) == replicated) {
        // WAIT counts the offset when it runs; the replica may apply the last write a moment
        // later (seen once on Valkey 8.1).
        common::eventually(10, || {
            (r.cmd(&["CTR.GET", holder]) == Value::Int(1)).then_some(())
        });
        let digest = ["DEBUG", "DIGEST-VALUE", holder.as_str()];
        assert_eq!(r.cmd(&digest), master.cmd(&digest), "{holder}");
    }

    // A renamed home (same slot) still lists the holders it had not written yet.
    let renamed = "{page:1}:renamed";
    assert_eq!(client.cmd(&["RENAME", home, renamed]).text(), "OK");
    assert_eq!(client.cmd(&["CTR.ADD", after_rename, "1"]), Value::Int(1));
    assert_eq!(client.cmd(&["CTR.GET", renamed]), Value::Int(6));

    // MULTI cannot wait: a look-alike there is written unchecked, as before the check, unless
    // its master heard the verdict on that name within the last second (refused then).
    let refused_fake = &fakes[(home_master + 1) % 3];
    let node = on(refused_fake);
    let mut m = cluster.nodes[node].conn();
    m.q("MULTI");
    m.cmd(&["CTR.ADD", refused_fake, "2"]);
    assert_eq!(
        m.q("EXEC"),
        Value::Array(vec![Value::Error(look_alike(refused_fake, home))])
    );
    let multi_fake = (0..)
        .map(|k| format!("{{ctr.{id}.1.{k}}}{home}"))
        .find(|n| !holders.contains(n) && !fakes.contains(n) && on(n) == node)
        .expect("a name never checked");
    m.q("MULTI");
    m.cmd(&["CTR.ADD", &multi_fake, "2"]);
    assert_eq!(m.q("EXEC"), Value::Array(vec![Value::Int(2)]));

    // The home's master asleep: the last holder's first write waits out the gather timeout
    // (500 ms) and goes on unchecked.
    let mut sleeper = cluster.nodes[home_master].conn();
    sleeper.send(&["DEBUG", "SLEEP", "1.5"]);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(client.cmd(&["CTR.ADD", last, "1"]), Value::Int(1));
    assert_eq!(sleeper.read().expect("DEBUG SLEEP replies").text(), "OK");
    let timeouts = cluster.nodes[on(last)].info_field("ctr", "ctr_holder_check_timeouts");
    assert_eq!(timeouts, "1");
    common::eventually(10, || {
        (client.cmd(&["CTR.GET", renamed]) == Value::Int(7)).then_some(())
    });
}

/// A holder check whose request is lost (the link to the home's master dropped just before it
/// was sent: `DEBUG CLUSTERLINK KILL`) is asked again at the check's next tick and passes: the
/// first write is applied, well before `ctr.gather-timeout-ms` would let it go on unchecked.
#[test]
fn a_lost_holder_check_request_is_asked_again() {
    let cluster = Cluster::start(3, &["gather-timeout-ms", "30000"]);
    let mut client = cluster.client();
    let home = "{lost}:views";
    let home_master = cluster.owner(key_slot(home.as_bytes()));
    let home_id = cluster.nodes[home_master].conn().q("CLUSTER MYID").text();
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "12"]));
    let on = |name: &str| cluster.owner(key_slot(name.as_bytes()));
    let stat = |node: usize, field: &str| -> u64 {
        let value = cluster.nodes[node].info_field("ctr", field);
        value.parse().unwrap_or(0)
    };
    let (mut resent, mut written) = (0, 0);
    let elsewhere = holders[1..].iter().filter(|h| on(h) != home_master);
    // Whether the link is down when the request goes out is a race with the cluster's own
    // reconnect (every 100 ms): tried on holders in turn until one request was lost.
    for holder in elsewhere.take(6) {
        let node = on(holder);
        let mut master = cluster.nodes[node].conn();
        let kill = ["DEBUG", "CLUSTERLINK", "KILL", "to", home_id.as_str()];
        assert_eq!(master.cmd(&kill).text(), "OK");
        assert_eq!(
            master.cmd(&["CTR.ADD", holder, "1"]),
            Value::Int(1),
            "{holder}"
        );
        written += 1;
        assert_eq!(stat(node, "ctr_holder_check_timeouts"), 0);
        resent += stat(node, "ctr_holder_check_resends");
        if resent > 0 {
            break;
        }
    }
    assert!(resent > 0, "no request was lost in six tries");
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(written));
}

/// A holder check waiting on a home's master that stops answering (frozen) while its replica
/// takes over (`CLUSTER FAILOVER TAKEOVER`) is asked again of the new master, which answers:
/// the first write is applied and counted, not let go unchecked at the timeout.
#[test]
fn a_holder_check_follows_the_homes_failover() {
    let cluster = Cluster::start(3, &["gather-timeout-ms", "30000"]);
    let mut client = cluster.client();
    let home = "{fails}:views";
    let home_master = cluster.owner(key_slot(home.as_bytes()));
    let replica = cluster.start_replica_of(home_master);
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "6"]));
    cluster.nodes[home_master].wait_replicas(1);
    let holder = holders[1..]
        .iter()
        .find(|h| cluster.owner(key_slot(h.as_bytes())) != home_master)
        .expect("a holder on another master")
        .clone();
    let node = cluster.owner(key_slot(holder.as_bytes()));
    let frozen = Frozen::freeze(cluster.nodes[home_master].pid().expect("started here"));
    let port = cluster.nodes[node].port;
    let write = holder.clone();
    // As a cluster client does, the writer retries a CLUSTERDOWN (seen once on a loaded
    // machine while the nodes learned of the takeover); the token makes a retry count once.
    let writer = std::thread::spawn(move || {
        let mut c = Conn::connect(port).expect("connect");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match c.cmd(&["CTR.ADD", &write, "1", "TOKEN", "once"]) {
                Value::Error(e) if e.starts_with("CLUSTERDOWN") && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                reply => return reply,
            }
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut r = replica.conn();
    assert_eq!(r.q("CLUSTER FAILOVER TAKEOVER").text(), "OK");
    assert_eq!(writer.join().expect("the writer"), Value::Int(1));
    let timeouts = cluster.nodes[node].info_field("ctr", "ctr_holder_check_timeouts");
    assert_eq!(
        timeouts, "0",
        "answered by the new master, not let go at the timeout"
    );
    drop(frozen);
    let mut holder_master = cluster.nodes[node].conn();
    assert_eq!(holder_master.cmd(&["CTR.GET", &holder]), Value::Int(1));
}

/// The spread id a holder name carries (`{ctr.<id>.<i>.<k>}<home>`).
fn spread_id_of(holder: &str) -> String {
    holder["{ctr.".len()..]
        .split('.')
        .next()
        .unwrap()
        .to_string()
}

/// Keys a tenant put where a grow of `home` (spread `id`) may plan its holders 2 to 5, before
/// the grow: a string, a counter restored with 1,000 units, and (where `multi` opens one for
/// its name) a counter written inside MULTI, which the holder check cannot stop. Returns them.
fn occupy_planned_names(
    id: &str,
    home: &str,
    attempts: usize,
    conn_for: &mut dyn FnMut(&str) -> Conn,
    multi: bool,
) -> Vec<String> {
    let mut source = conn_for("{src}made");
    assert_eq!(
        source.cmd(&["CTR.ADD", "{src}made", "1000"]),
        Value::Int(1000)
    );
    let dump = source.cmd(&["DUMP", "{src}made"]).bytes();
    let mut occupied = Vec::new();
    for i in 2..6 {
        for k in 0..attempts {
            let name = format!("{{ctr.{id}.{i}.{k}}}{home}");
            let mut c = conn_for(&name);
            match (k % 3, multi) {
                (0, _) => assert_eq!(c.cmd(&["SET", &name, "x"]), Value::Simple("OK".into())),
                (_, false) | (1, true) => assert_eq!(
                    c.cmd(&[b"RESTORE".as_slice(), name.as_bytes(), b"0", &dump]),
                    Value::Simple("OK".into())
                ),
                (_, true) => {
                    c.cmd(&["MULTI"]);
                    c.cmd(&["CTR.ADD", &name, "-700"]);
                    assert_eq!(c.cmd(&["EXEC"]), Value::Array(vec![Value::Int(-700)]));
                }
            }
            occupied.push(name);
        }
    }
    occupied
}

/// Issue 34, item 2: a grow lists a new holder only where no key sits. A tenant who can write
/// holder names (any spread writer) put keys at the names a grow would plan (the spread id is
/// public): before, the grow listed them, so every read of the total failed with WRONGTYPE, or
/// it counted a restored counter's 1,000 units. On one server the grow reads each name and plans
/// another attempt around a taken one.
#[test]
fn a_grow_on_one_server_never_lists_a_name_where_a_key_sits() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(c.cmd(&["CTR.ADD", "gh", "5"]), Value::Int(5));
    let first = names(&c.cmd(&["CTR.SPREAD", "gh", "2"]));
    let id = spread_id_of(&first[1]);
    let port = server.port;
    let occupied = occupy_planned_names(&id, "gh", 6, &mut |_| Conn::connect(port).unwrap(), false);
    let grown = names(&c.cmd(&["CTR.SPREAD", "gh", "6"]));
    assert_eq!(grown.len(), 6);
    assert!(grown.iter().all(|n| !occupied.contains(n)), "{grown:?}");
    assert_eq!(c.cmd(&["CTR.GET", "gh"]), Value::Int(5));
    for h in &grown[1..] {
        assert_eq!(c.cmd(&["CTR.ADD", h, "1"]), Value::Int(1), "{h}");
    }
    assert_eq!(c.cmd(&["CTR.GET", "gh"]), Value::Int(10));
    let taken: u64 = server
        .info_field("ctr", "ctr_holder_names_taken")
        .parse()
        .unwrap();
    assert!(taken >= 4, "{taken}");
    // The occupied keys are left as they were.
    assert_eq!(c.cmd(&["GET", &occupied[0]]), Value::Bulk(b"x".to_vec()));
}

/// The same in a cluster of 3 masters: the grow asks each new name's master (over the bus, or
/// from a timer for its own) and waits in the server for the answers, then plans again around
/// the taken names; a counter written inside MULTI (where the holder check cannot wait) is
/// avoided too. A grow inside MULTI cannot wait: it asks, refuses with `TRYAGAIN`, and a retry
/// lists the names found free.
#[test]
fn a_grow_in_a_cluster_never_lists_a_name_where_a_key_sits() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{gc}h";
    assert_eq!(client.cmd(&["CTR.ADD", home, "5"]), Value::Int(5));
    let first = names(&client.cmd(&["CTR.SPREAD", home, "2"]));
    let id = spread_id_of(&first[1]);
    let mut conn_for = |name: &str| {
        let node = cluster.owner(key_slot(name.as_bytes()));
        Conn::connect(cluster.nodes[node].port).unwrap()
    };
    let occupied = occupy_planned_names(&id, home, 9, &mut conn_for, true);
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let mut at_home = Conn::connect(cluster.nodes[home_node].port).unwrap();
    // The grow waits for its answers up to ctr.gather-timeout-ms, whatever the purchases' bound
    // (0 here: purchases never wait), planning again at each round of taken names.
    let no_purchase_waits = at_home.cmd(&["CONFIG", "SET", "ctr.purchase-wait-ms", "0"]);
    assert_eq!(no_purchase_waits, Value::Simple("OK".into()));
    let grown = names(&at_home.cmd(&["CTR.SPREAD", home, "6"]));
    assert_eq!(grown.len(), 6);
    assert!(grown.iter().all(|n| !occupied.contains(n)), "{grown:?}");
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(5));
    for h in &grown[1..] {
        assert_eq!(client.cmd(&["CTR.ADD", h, "1"]), Value::Int(1), "{h}");
    }
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(10));
    let field = |name| {
        cluster.nodes[home_node]
            .info_field("ctr", name)
            .parse::<u64>()
            .unwrap()
    };
    assert!(field("ctr_holder_names_taken") >= 4);
    assert!(field("ctr_grows_waited") >= 1);
    // Inside MULTI the grow cannot wait: TRYAGAIN, and the names are asked meanwhile.
    at_home.cmd(&["MULTI"]);
    at_home.cmd(&["CTR.SPREAD", home, "8"]);
    let in_multi = at_home.cmd(&["EXEC"]);
    let first_reply = &in_multi.array()[0];
    assert!(
        matches!(first_reply, Value::Error(e) if e.contains("is checking that the names of its new holders are free")),
        "{in_multi:?}"
    );
    let grown = common::eventually(20, || {
        let reply = at_home.cmd(&["CTR.SPREAD", home, "8"]);
        (!reply.is_error()).then(|| names(&reply))
    });
    assert_eq!(grown.len(), 8);
    assert!(grown.iter().all(|n| !occupied.contains(n)), "{grown:?}");
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(10));
}

/// The server's clock (unix ms) by `TIME`.
fn server_ms(c: &mut Conn) -> i64 {
    match c.q("TIME") {
        Value::Array(parts) => {
            let secs: i64 = parts[0].text().parse().expect("seconds");
            let micros: i64 = parts[1].text().parse().expect("microseconds");
            secs * 1000 + micros / 1000
        }
        other => panic!("TIME -> {other:?}"),
    }
}

/// A time of the server's clock past every change made so far: the module dates a change
/// one millisecond after its coarse clock, which may lag `TIME` by a few milliseconds.
fn settled_time(c: &mut Conn) -> i64 {
    std::thread::sleep(Duration::from_millis(20));
    let at = server_ms(c);
    std::thread::sleep(Duration::from_millis(20));
    at
}

/// `CTR.HOLDERS home AT at`.
fn holders_at(c: &mut Conn, home: &str, at: i64) -> Vec<String> {
    names(&c.cmd(&["CTR.HOLDERS", home, "AT", &at.to_string()]))
}

/// A purchase by the probe rule over `list`, stopping at the first grant; a holder folded back
/// (it never grants again) is passed, as a refusal.
fn purchase_over(c: &mut Conn, list: &[String], amount: i64, token: &str, at: i64) -> Value {
    let (amount, at) = (amount.to_string(), at.to_string());
    for i in redis_ctr_client::spread::probe_order(token.as_bytes(), list.len()) {
        let args = [
            "CTR.DECRFLOOR",
            &list[i],
            &amount,
            "TOKEN",
            token,
            "AT",
            &at,
        ];
        match c.cmd(&args) {
            Value::Nil => continue,
            Value::Error(e) if e.contains("folded back") => continue,
            other => return other,
        }
    }
    Value::Nil
}

/// A token whose walk over `to` holders starts at another of the first `from` than its walk
/// over `from`: after a grow from `from` to `to` (which keeps the first `from` names), a retry
/// over the current list would be granted a second time there (issue 34, item 5).
fn token_moved_by_grow(from: usize, to: usize) -> String {
    let first = |t: &str, n| redis_ctr_client::spread::probe_order(t.as_bytes(), n)[0];
    (0..1000)
        .map(|i| format!("order-{i}"))
        .find(|t| first(t, to) < from && first(t, to) != first(t, from))
        .expect("a token whose first holder moves")
}

/// A purchase retried after a grow and after a shrink walks the holders in force at its time
/// (`CTR.HOLDERS key AT ms`), not the current list: the same holders in the same order, each
/// replaying what it recorded, so the token is granted once (issue 34, item 5). Before, the
/// only list was the current one: after the grow the retry's first holder was another one,
/// with budget, which granted the token a second time.
#[test]
fn a_purchase_retried_after_a_grow_or_a_shrink_walks_the_list_at_its_time() {
    let server = Server::start_with(
        &["--appendonly", "yes", "--aof-use-rdb-preamble", "no"],
        &[],
    );
    let mut c = server.conn();
    c.q("CTR.ADD stock 300");
    c.q("CTR.FLOOR stock 0");
    let before_spread = settled_time(&mut c);
    let three = names(&c.q("CTR.SPREAD stock 3"));
    let at = settled_time(&mut c);
    assert_eq!(holders_at(&mut c, "stock", at), three);
    assert_eq!(holders_at(&mut c, "stock", before_spread), ["stock"]);
    let token = token_moved_by_grow(3, 5);
    let first = purchase_over(&mut c, &three, 7, &token, at);
    let Value::Int(left) = first else {
        panic!("a purchase of 7 from 300: {first:?}")
    };
    assert_eq!(c.q("CTR.GET stock"), Value::Int(293));
    let five = names(&c.q("CTR.SPREAD stock 5"));
    assert_eq!(five[..3], three[..]);
    let after_grow = settled_time(&mut c);
    assert_eq!(
        holders_at(&mut c, "stock", at),
        three,
        "the list at its time"
    );
    assert_eq!(holders_at(&mut c, "stock", after_grow), five);
    let walked = holders_at(&mut c, "stock", at);
    let retry = purchase_over(&mut c, &walked, 7, &token, at);
    assert_eq!(retry, Value::Int(left), "the retry replays");
    c.q("CTR.SPREAD stock 1");
    let after_shrink = settled_time(&mut c);
    assert_eq!(holders_at(&mut c, "stock", after_shrink), ["stock"]);
    assert_eq!(
        holders_at(&mut c, "stock", after_grow),
        five,
        "folded ones stay listed"
    );
    let walked = holders_at(&mut c, "stock", at);
    let retry = purchase_over(&mut c, &walked, 7, &token, at);
    assert_eq!(
        retry,
        Value::Int(left),
        "the retry replays on a folded holder"
    );
    assert_eq!(c.q("CTR.GET stock"), Value::Int(293), "sold once");
    // Every way the home's state travels keeps its listing.
    let lists = |c: &mut Conn| [at, after_grow, after_shrink].map(|t| holders_at(c, "stock", t));
    let expected = lists(&mut c);
    let replica = server.start_replica();
    server.wait_replicas(1);
    let mut on_replica = replica.conn();
    assert_eq!(
        on_replica.cmd(&["DUMP", "stock"]),
        c.cmd(&["DUMP", "stock"]),
        "the replica holds the listing"
    );
    // Only the master answers: a replica may lag behind its latest grow or shrink.
    match on_replica.cmd(&["CTR.HOLDERS", "stock", "AT", &at.to_string()]) {
        Value::Error(e) => assert!(e.contains("answered by the home's master only"), "{e}"),
        other => panic!("CTR.HOLDERS AT on a replica: {other:?}"),
    }
    drop(replica);
    let mut server = server;
    server.restart();
    let mut c = server.conn();
    assert_eq!(lists(&mut c), expected, "the AOF's commands and steps");
    assert_eq!(c.q("DEBUG RELOAD").text(), "OK");
    assert_eq!(lists(&mut c), expected, "RDB");
    let dump = c.cmd(&["DUMP", "stock"]);
    let Value::Bulk(payload) = dump else {
        panic!("DUMP -> {dump:?}")
    };
    let restore: [&[u8]; 5] = [b"RESTORE", b"stock", b"0", &payload, b"REPLACE"];
    assert_eq!(c.cmd(&restore).text(), "OK");
    assert_eq!(lists(&mut c), expected, "DUMP/RESTORE");
    server.rewrite_aof();
    server.restart();
    let mut c = server.conn();
    assert_eq!(lists(&mut c), expected, "AOF rewrite");
}

#[test]
fn holders_at_a_time_refuse_what_they_cannot_know() {
    let server = Server::start();
    let mut c = server.conn();
    let now = settled_time(&mut c);
    assert_eq!(holders_at(&mut c, "missing", now), ["missing"]);
    assert_eq!(c.q("EXISTS missing"), Value::Int(0), "not created");
    c.q("CTR.ADD plain 1");
    assert_eq!(holders_at(&mut c, "plain", now), ["plain"]);
    let ahead = (now + 60_000).to_string();
    let old = (now - 4_000_000).to_string();
    for (args, error) in [
        (
            vec!["CTR.HOLDERS", "plain", "AT", &ahead],
            "ahead of the home's clock",
        ),
        (
            vec!["CTR.HOLDERS", "missing", "AT", &ahead],
            "ahead of the home's clock",
        ),
        (
            vec!["CTR.HOLDERS", "plain", "AT", &old],
            "older than the dedup window",
        ),
        (
            vec!["CTR.HOLDERS", "plain", "AT", "-1"],
            "AT must be a unix time",
        ),
        (vec!["CTR.HOLDERS", "plain", "AT", "soon"], "not an integer"),
        (vec!["CTR.HOLDERS", "plain", "AS", "5"], "syntax error"),
        (
            vec!["CTR.HOLDERS", "plain", "AT"],
            "wrong number of arguments",
        ),
    ] {
        match c.cmd(&args) {
            Value::Error(e) => assert!(e.contains(error), "{args:?}: {e}"),
            other => panic!("{args:?} -> {other:?}"),
        }
    }
    c.q("SET text x");
    match c.cmd(&["CTR.HOLDERS", "text", "AT", &now.to_string()]) {
        Value::Error(e) => assert!(e.starts_with("WRONGTYPE"), "{e}"),
        other => panic!("WRONGTYPE expected: {other:?}"),
    }
    let holder = names(&c.q("CTR.SPREAD plain 2"))[1].clone();
    match c.cmd(&["CTR.HOLDERS", &holder, "AT", &now.to_string()]) {
        Value::Error(e) => assert!(e.contains("is a holder of the spread counter"), "{e}"),
        other => panic!("a holder's name: {other:?}"),
    }
}

/// In a cluster the home's master keeps the listing: a floored grow across masters and a
/// shrink change the list from their time on, and the list at an earlier time stays as it was.
#[test]
fn holders_at_a_time_follow_grows_and_shrinks_across_masters() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let home = "{sale}listed";
    client.cmd(&["CTR.ADD", home, "900"]);
    client.cmd(&["CTR.FLOOR", home, "0"]);
    let mut spread = |n: &str| {
        eventually(20, || match client.cmd(&["CTR.SPREAD", home, n]) {
            Value::Array(names) => Some(names.iter().map(Value::text).collect::<Vec<_>>()),
            _ => None, // budget still moving: asked again
        })
    };
    let three = spread("3");
    let mut clock = cluster.nodes[cluster.owner(key_slot(home.as_bytes()))].conn();
    let at = settled_time(&mut clock);
    let five = spread("5");
    let after_grow = settled_time(&mut clock);
    let two = spread("2");
    let after_shrink = settled_time(&mut clock);
    let mut client = cluster.client();
    let mut listed = |t: i64| names(&client.cmd(&["CTR.HOLDERS", home, "AT", &t.to_string()]));
    assert_eq!(listed(at), three);
    assert_eq!(listed(after_grow), five);
    assert_eq!(listed(after_shrink), two);
    assert_eq!(two[..], five[..2]);
}

/// A failover loses what its replica does not hold, and a holder list lost that way would
/// change the list at the times after it: `CTR.HOLDERS AT` answers only once the home's
/// replicas hold its latest grow or shrink, so no purchase walks a list a failover can take back.
#[test]
fn holders_at_a_time_wait_until_the_replicas_hold_the_list() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    c.q("CTR.ADD sale 100");
    let two = names(&c.q("CTR.SPREAD sale 2"));
    server.wait_replicas(1);
    let before = settled_time(&mut c);
    assert_eq!(
        holders_at(&mut c, "sale", before),
        two,
        "held: answered at once"
    );

    // The replica frozen, the master grows the counter: the replica does not hold the grow.
    let mut sleeper = replica.conn();
    sleeper.send(&["DEBUG", "SLEEP", "2"]);
    std::thread::sleep(Duration::from_millis(100));
    let four = names(&c.q("CTR.SPREAD sale 4"));
    assert_eq!(four.len(), 4);
    let after = settled_time(&mut c);
    c.q("CONFIG SET ctr.purchase-wait-ms 100");
    let ask = ["CTR.HOLDERS", "sale", "AT", &after.to_string()];
    let not_held = |reply: &Value| match reply {
        Value::Error(e) => e.starts_with("TRYAGAIN") && e.contains("replicas"),
        _ => false,
    };
    let reply = c.cmd(&ask);
    assert!(not_held(&reply), "waited 100 ms, then refused: {reply:?}");
    // A client that cannot wait (MULTI) is refused at once.
    c.q("MULTI");
    c.cmd(&ask);
    match c.q("EXEC") {
        Value::Array(replies) => assert!(not_held(&replies[0]), "{replies:?}"),
        other => panic!("EXEC: {other:?}"),
    }

    // Given time, the answer comes once the replica woke and acknowledged: the grown list,
    // which the replica then holds.
    c.q("CONFIG SET ctr.purchase-wait-ms 5000");
    assert_eq!(names(&c.cmd(&ask)), four);
    assert_eq!(names(&replica.conn().q("CTR.HOLDERS sale")), four);
    assert_eq!(sleeper.read().expect("DEBUG SLEEP replies").text(), "OK");

    // Held: the next answers come at once, the replica frozen again.
    sleeper.send(&["DEBUG", "SLEEP", "1"]);
    std::thread::sleep(Duration::from_millis(100));
    c.q("CONFIG SET ctr.purchase-wait-ms 100");
    assert_eq!(names(&c.cmd(&ask)), four);
    assert_eq!(holders_at(&mut c, "sale", before), two);
    assert_eq!(sleeper.read().expect("DEBUG SLEEP replies").text(), "OK");

    // A listing restored (`RESTORE`, as `MIGRATE` and imports load it) is not on the replica
    // either until it acknowledges.
    let dump = c.cmd(&["DUMP", "sale"]).bytes();
    sleeper.send(&["DEBUG", "SLEEP", "2"]);
    std::thread::sleep(Duration::from_millis(100));
    let restore: [&[u8]; 5] = [b"RESTORE", b"sale", b"0", &dump, b"REPLACE"];
    assert_eq!(c.cmd(&restore), Value::Simple("OK".into()));
    let reply = c.cmd(&ask);
    assert!(not_held(&reply), "a restored listing: {reply:?}");
    c.q("CONFIG SET ctr.purchase-wait-ms 5000");
    assert_eq!(names(&c.cmd(&ask)), four);
    assert_eq!(sleeper.read().expect("DEBUG SLEEP replies").text(), "OK");
}

/// Waits until the server's clock is past `t`, then a little more (the module's coarse clock).
fn wait_server_past(c: &mut Conn, t: i64) {
    while server_ms(c) <= t {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(20));
}

/// A master that takes homes over (a load, a home's listing restored, a replica promoted) may
/// have a clock behind the one that answered `CTR.HOLDERS ... AT x` before: a grow or shrink
/// dated by its own clock could fall before `x` and change the list a retry at `x` walks (the
/// token granted twice). So for `ctr.clock-skew-ms` after a take-over its changes are dated
/// past that window: a list read at a time inside it never changes, and readers see the
/// change once the window has passed.
#[test]
fn list_changes_after_a_take_over_are_dated_past_the_clock_skew() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD sale 100");
    c.q("CTR.SPREAD sale 2");
    // Without an allowance (past any window of the start), a grow is in the list at once.
    c.q("CONFIG SET ctr.clock-skew-ms 0");
    std::thread::sleep(Duration::from_millis(1_100));
    let three = names(&c.q("CTR.SPREAD sale 3"));
    let now = settled_time(&mut c);
    assert_eq!(holders_at(&mut c, "sale", now), three);

    // After each take-over (the default allowance, 1 s), a change made at once is dated past
    // it: the list at a time inside the window stays the list before it.
    c.q("CONFIG SET ctr.clock-skew-ms 1000");
    // The answers wait for the replica to hold the lists (the listing gate), not the point here.
    c.q("CONFIG SET ctr.purchase-wait-ms 5000");
    let replica = server.start_replica();
    server.wait_replicas(1);
    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    let four = grown_past_the_window(&mut c, "DEBUG RELOAD", &three);
    let dump = c.cmd(&["DUMP", "sale"]).bytes();
    let restore: [&[u8]; 5] = [b"RESTORE", b"sale", b"0", &dump, b"REPLACE"];
    assert_eq!(c.cmd(&restore), Value::Simple("OK".into()));
    let five = grown_past_the_window(&mut c, "RESTORE of the home", &four);
    server.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(r.q("REPLICAOF NO ONE"), Value::Simple("OK".into()));
    grown_past_the_window(&mut r, "a replica promoted", &five);
}

/// Grows the spread `sale` by one holder on `m` right after a take-over, and checks that the
/// grow is dated past the 1 s window: not in the list at a time inside it, in the list once it
/// passed. Returns the grown list.
fn grown_past_the_window(m: &mut Conn, what: &str, before: &[String]) -> Vec<String> {
    let took_over_at = server_ms(m);
    let size = before.len() + 1;
    let grown = names(&m.q(&format!("CTR.SPREAD sale {size}")));
    assert_eq!(grown.len(), size, "{what}");
    let inside = settled_time(m);
    let (then, now) = (
        holders_at(m, "sale", inside),
        names(&m.q("CTR.HOLDERS sale")),
    );
    assert_eq!(
        (then, now),
        (before.to_vec(), grown.clone()),
        "{what}: inside the window, and now"
    );
    wait_server_past(m, took_over_at + 1_000);
    let past = settled_time(m);
    let (after, then) = (holders_at(m, "sale", past), holders_at(m, "sale", inside));
    assert_eq!(
        (after, then),
        (grown.clone(), before.to_vec()),
        "{what}: past it, and inside it"
    );
    grown
}
