//! A spread counter is one counter: its holders carry the spread's id in their names, so a
//! spread made again under a name (after DEL, UNLINK, expiry, FLUSHALL or RENAME) never adopts
//! an earlier spread's holders; a holder is never a home (CTR.SPREAD, CTR.FLOOR and CTR.CLEAR
//! on it are refused, auto-spread skips it); a read of a holder never recurses into holders
//! it may list; COPY of a spread home is refused; the id survives every kind of persistence.
//! One server each: spreading works the same without a cluster.

mod common;

use common::{eventually, lists_holders, names, Conn, Server, Value};

fn spread(c: &mut Conn, key: &str, holders: usize) -> Vec<String> {
    names(&c.cmd(&["CTR.SPREAD", key, &holders.to_string()]))
}

/// The spread id in a holder name `{ctr.<16 hex>.<i>.<k>}home`.
fn spread_id_of(holder: &str) -> String {
    let tag = holder
        .strip_prefix("{ctr.")
        .and_then(|rest| rest.split('}').next())
        .unwrap_or_else(|| panic!("not a holder name: {holder}"));
    let fields: Vec<&str> = tag.split('.').collect();
    assert_eq!(fields.len(), 3, "{holder}");
    assert_eq!(fields[0].len(), 16, "{holder}");
    assert!(fields[0]
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_ne!(fields[0], "0000000000000000");
    fields[0].to_string()
}

fn info_field(c: &mut Conn, key: &str, field: &str) -> Value {
    c.cmd(&["CTR.INFO", key]).field(field)
}

/// Spreads `reset:views` to 4, adds 50 to a holder, lets `remove` end the counter, spreads the
/// name again: the new counter reads only its own adds (the old spread's holder is an
/// orphan, adopted by nobody).
fn respread_after(c: &mut Conn, remove: impl FnOnce(&mut Conn)) {
    let first = spread(c, "reset:views", 4);
    assert_eq!(first.len(), 4);
    c.cmd(&["CTR.ADD", &first[2], "50"]);
    assert_eq!(c.q("CTR.GET reset:views"), Value::Int(50));
    remove(c);
    assert_eq!(c.q("EXISTS reset:views"), Value::Int(0));
    let again = spread(c, "reset:views", 4);
    assert_ne!(spread_id_of(&again[1]), spread_id_of(&first[1]), "a new id");
    assert!(
        again[1..].iter().all(|h| !first.contains(h)),
        "{again:?} {first:?}"
    );
    assert_eq!(c.q("CTR.GET reset:views"), Value::Int(0));
    c.q("CTR.ADD reset:views 3");
    assert_eq!(c.q("CTR.GET reset:views"), Value::Int(3));
    c.q("DEL reset:views");
}

#[test]
fn a_deleted_spread_spread_again_reads_only_its_new_adds() {
    let server = Server::start();
    let mut c = server.conn();
    respread_after(&mut c, |c| {
        assert_eq!(c.q("DEL reset:views"), Value::Int(1))
    });
    respread_after(&mut c, |c| {
        assert_eq!(c.q("UNLINK reset:views"), Value::Int(1))
    });
    respread_after(&mut c, |c| {
        assert_eq!(c.q("PEXPIRE reset:views 50"), Value::Int(1));
        eventually(5, || {
            (c.q("EXISTS reset:views") == Value::Int(0)).then_some(())
        });
    });
    respread_after(&mut c, |c| {
        assert_eq!(c.q("EXPIRE reset:views 1"), Value::Int(1));
        eventually(5, || {
            (c.q("EXISTS reset:views") == Value::Int(0)).then_some(())
        });
    });
    respread_after(&mut c, |c| {
        assert_eq!(c.q("FLUSHALL"), Value::Simple("OK".into()))
    });
}

/// Buys 1 unit at a time from every holder until each refuses; returns the units bought.
fn buy_everything(c: &mut Conn, holders: &[String]) -> i64 {
    let mut bought = 0;
    for holder in holders {
        for _ in 0..1_000 {
            // A holder out of budget while the counter is not waits for budget to gather.
            match common::purchase_until_final(c, &["CTR.DECRFLOOR", holder, "1"]).0 {
                Value::Int(_) => bought += 1,
                Value::Nil => break,
                other => panic!("{holder}: {other:?}"),
            }
        }
    }
    bought
}

#[test]
fn a_floored_counter_made_again_sells_at_most_its_own_stock() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD stock 100");
    c.q("CTR.FLOOR stock 0");
    let old = spread(&mut c, "stock", 4);
    c.q("DEL stock");
    // The same product stocked again: 100 units, floor 0, spread over 4 holders.
    c.q("CTR.ADD stock 100");
    c.q("CTR.FLOOR stock 0");
    let holders = spread(&mut c, "stock", 4);
    assert!(holders[1..].iter().all(|h| !old.contains(h)));
    // Walk the new holders, then the old ones (orphans: they sell the old stock, not this one).
    let bought = buy_everything(&mut c, &holders);
    assert!(bought <= 100, "sold {bought} of 100");
    assert_eq!(c.q("CTR.GET stock"), Value::Int(100 - bought));
    assert!(c.q("CTR.GET stock").int() >= 0);
}

#[test]
fn a_renamed_spread_keeps_its_total_and_the_old_name_shares_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD x 5");
    let before = spread(&mut c, "x", 3);
    c.cmd(&["CTR.ADD", &before[1], "7"]);
    assert_eq!(c.q("RENAME x y"), Value::Simple("OK".into()));
    assert_eq!(c.q("CTR.GET y"), Value::Int(12));
    let after = spread(&mut c, "x", 3);
    let y_holders = names(&info_field(&mut c, "y", "holders"));
    assert!(
        after[1..].iter().all(|h| !y_holders.contains(h)),
        "{after:?} {y_holders:?}"
    );
    c.q("CTR.ADD x 2");
    c.cmd(&["CTR.ADD", &after[2], "1"]);
    assert_eq!(c.q("CTR.GET x"), Value::Int(3), "x reads only its own adds");
    assert_eq!(c.q("CTR.GET y"), Value::Int(12), "y keeps its total");
}

#[test]
fn a_home_renamed_onto_its_holder_reads_its_own_units_and_the_server_lives() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD k 5");
    let holders = spread(&mut c, "k", 2);
    let holder = holders[1].clone();
    assert_eq!(c.cmd(&["RENAME", "k", &holder]), Value::Simple("OK".into()));
    // Renamed onto a holder's name it is not that holder (a stray): nothing reads it, nothing
    // recurses, and the server lives.
    for read in [
        vec!["CTR.GET", &holder],
        vec!["CTR.MGET", &holder, "k"],
        vec!["CTR.INFO", &holder],
    ] {
        let e = c.cmd(&read).error();
        assert!(e.contains("is not that holder"), "{read:?}: {e}");
    }
    assert!(server.alive());
    // Renamed back, it is the home it was, with its holder list (the holder it sat on, gone
    // with the RENAME, counts 0).
    assert_eq!(c.cmd(&["RENAME", &holder, "k"]), Value::Simple("OK".into()));
    assert_eq!(c.cmd(&["CTR.GET", "k"]), Value::Int(5));
    assert_eq!(
        info_field(&mut c, "k", "holders"),
        c.cmd(&["CTR.HOLDERS", "k"])
    );
}

#[test]
fn a_gather_through_a_holder_that_lists_holders_never_recurses() {
    // Two counters each naming the other as its holder (only a forged state can). A holder
    // list names holders only (issue 23, item 2: before ids too), so two plain keys naming
    // each other are refused; two holder-named keys naming each other read their own units
    // (a key named like a holder never gathers), once.
    let server = Server::start_with(&[], &["expose-internal-commands", "yes"]);
    let mut c = server.conn();
    let state = |value: u8, holder: &str| {
        // format 1, VALUE (zigzag), SPREAD with one name, END
        let mut s = vec![1, 1, value * 2, 11, 1, holder.len() as u8];
        s.extend_from_slice(holder.as_bytes());
        s.push(0);
        s
    };
    for (key, value, holder) in [("loop:a", 2, "loop:b"), ("loop:b", 3, "loop:a")] {
        let reply = c.cmd(&[b"CTR.SETSTATE", key.as_bytes(), &state(value, holder)]);
        assert!(reply.is_error(), "{reply:?}");
    }
    let (a, b) = ("{ctr.1.0}loop", "{ctr.2.0}loop");
    for (key, value, holder) in [(a, 2, b), (b, 3, a)] {
        let reply = c.cmd(&[b"CTR.SETSTATE", key.as_bytes(), &state(value, holder)]);
        assert!(!reply.is_error(), "{reply:?}");
    }
    assert_eq!(c.cmd(&["CTR.GET", a]), Value::Int(2));
    assert_eq!(c.cmd(&["CTR.GET", b]), Value::Int(3));
    assert_eq!(
        c.cmd(&["CTR.MGET", a, b]),
        Value::Array(vec![Value::Int(2), Value::Int(3)])
    );
    assert_eq!(info_field(&mut c, a, "value"), Value::Int(2));
    // A real spread whose holder was overwritten by a home listing holders: the same.
    let holders = spread(&mut c, "outer", 2);
    c.q("CTR.ADD inner 4");
    let inner = spread(&mut c, "inner", 2);
    c.cmd(&["CTR.ADD", &inner[1], "6"]);
    assert_eq!(
        c.cmd(&["RENAME", "inner", &holders[1]]),
        Value::Simple("OK".into())
    );
    assert_eq!(
        c.q("CTR.GET outer"),
        Value::Int(0),
        "a counter renamed onto a holder's name is a stray, counted 0"
    );
    assert!(server.alive());
}

#[test]
fn copy_of_a_spread_home_is_refused_and_changes_nothing() {
    let server = Server::start_with(&[], &["expose-internal-commands", "yes"]);
    let mut c = server.conn();
    c.q("CTR.ADD v 5");
    let holders = spread(&mut c, "v", 3);
    c.cmd(&["CTR.ADD", &holders[1], "7"]);
    let e = c.q("COPY v vsnap").error();
    assert!(e.contains("module key failed to copy"), "{e}");
    assert_eq!(c.q("EXISTS vsnap"), Value::Int(0));
    assert_eq!(c.q("CTR.GET v"), Value::Int(12));
    // Shrunk to 1 (on one server the folds complete within the command): an ordinary
    // counter again, which copies as before.
    spread(&mut c, "v", 1);
    assert_eq!(c.q("COPY v vsnap"), Value::Int(1));
    assert_eq!(c.q("CTR.GET vsnap"), Value::Int(12));
    // A home whose holders are still folding back (`leaving`, as in a cluster between a
    // shrink and the folds' credits): refused too.
    let mut folding = vec![1u8, 1, 6, 12, 0, 0, 0, 0, 1];
    folding.push(b"{ctr.1.0}folding".len() as u8);
    folding.extend_from_slice(b"{ctr.1.0}folding");
    folding.push(0);
    let reply = c.cmd(&[&b"CTR.SETSTATE"[..], b"folding", &folding]);
    assert!(!reply.is_error(), "{reply:?}");
    assert_eq!(info_field(&mut c, "folding", "leaving").array().len(), 1);
    assert!(c
        .q("COPY folding fsnap")
        .error()
        .contains("module key failed to copy"));
    assert_eq!(c.q("EXISTS fsnap"), Value::Int(0));
    assert_eq!(c.q("CTR.GET folding"), Value::Int(3));
    // An unspread counter copies as before.
    c.q("CTR.ADD plain 4");
    assert_eq!(c.q("COPY plain plain2"), Value::Int(1));
    assert_eq!(c.q("CTR.GET plain2"), Value::Int(4));
}

#[test]
fn whole_counter_commands_on_a_holder_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD home 5");
    let holders = spread(&mut c, "home", 3);
    let holder = holders[1].clone();
    c.cmd(&["CTR.ADD", &holder, "4"]);
    let expected = format!("ERR {holder} is a holder of the spread counter home: use the home key");
    for command in [
        vec!["CTR.SPREAD", &holder, "3"],
        vec!["CTR.FLOOR", &holder, "0"],
        vec!["CTR.FLOOR", &holder, "NONE"],
        vec!["CTR.CLEAR", &holder],
        vec!["CTR.CLEAR", &holder, "TOKEN", "t1"],
    ] {
        assert_eq!(c.cmd(&command).error(), expected, "{command:?}");
    }
    assert_eq!(c.cmd(&["CTR.GET", &holder]), Value::Int(4));
    assert_eq!(info_field(&mut c, &holder, "floor"), Value::Nil);
    assert_eq!(c.q("CTR.GET home"), Value::Int(9));
    // A missing key named as a holder is refused too, and stays missing.
    let orphan = holders[2].replace(".2.", ".9.");
    let e = c.cmd(&["CTR.SPREAD", &orphan, "2"]).error();
    assert!(
        e.ends_with("is a holder of the spread counter home: use the home key"),
        "{e}"
    );
    assert_eq!(c.cmd(&["EXISTS", &orphan]), Value::Int(0));
    // The older name form is a holder name as well.
    let e = c.q("CTR.CLEAR {ctr.1.0}home").error();
    assert_eq!(
        e,
        "ERR {ctr.1.0}home is a holder of the spread counter home: use the home key"
    );
}

#[test]
fn a_hot_holder_is_never_spread_by_itself() {
    let server = Server::start_with(&[], &["spread-threshold", "200", "spread-holders", "4"]);
    let mut c = server.conn();
    let holders = spread(&mut c, "hot", 2);
    let holder = holders[1].clone();
    // Hot enough, several seconds running: a home would have spread.
    let started = std::time::Instant::now();
    let mut sent = 0;
    while started.elapsed() < std::time::Duration::from_millis(3_000) {
        for _ in 0..500 {
            c.send(&["CTR.ADD", &holder, "1"]);
        }
        for _ in 0..500 {
            assert!(matches!(c.read().unwrap(), Value::Int(_)));
        }
        sent += 500;
    }
    let info = c.cmd(&["CTR.INFO", &holder]);
    let has_holders = info.array().chunks(2).any(|p| p[0].bytes() == b"holders");
    assert!(!has_holders, "{info:?}");
    assert_eq!(server.info_field("ctr", "ctr_auto_spreads"), "0");
    assert_eq!(c.q("CTR.GET hot"), Value::Int(sent));
}

/// (holder names, digest) of a home.
fn identity_of(c: &mut Conn, home: &str) -> (Vec<String>, Value) {
    let holders = names(&info_field(c, home, "holders"));
    let digest = c.cmd(&["DEBUG", "DIGEST-VALUE", home]).array()[0].clone();
    (holders, digest)
}

#[test]
fn the_spread_id_survives_reload_rewrite_restore_and_replication() {
    let mut server = Server::start_with(&common::AOF_WITHOUT_PREAMBLE, &[]);
    let mut c = server.conn();
    c.q("CTR.ADD kept 5");
    let holders = spread(&mut c, "kept", 3);
    let id = spread_id_of(&holders[1]);
    c.cmd(&["CTR.ADD", &holders[2], "1"]);
    let before = identity_of(&mut c, "kept");

    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    assert_eq!(identity_of(&mut c, "kept"), before, "DEBUG RELOAD");

    server.rewrite_aof();
    server.restart();
    let mut c = server.conn();
    assert_eq!(
        identity_of(&mut c, "kept"),
        before,
        "AOF rewrite and restart"
    );

    // Restored over itself (a DEL first would end the counter: its holders are collected,
    // and the dump holds the home key only; tests/spread_collect.rs).
    let payload = c.q("DUMP kept").bytes();
    assert_eq!(
        c.cmd(&[&b"RESTORE"[..], b"kept", b"0", &payload, b"REPLACE"]),
        Value::Simple("OK".into())
    );
    assert_eq!(identity_of(&mut c, "kept"), before, "DUMP/RESTORE");
    assert_eq!(c.q("CTR.GET kept"), Value::Int(6));

    // Growing keeps the id; the replica gets the same state.
    let grown = spread(&mut c, "kept", 5);
    assert!(grown[1..].iter().all(|h| spread_id_of(h) == id));
    let replica = server.start_replica();
    c.q("CTR.ADD later 1");
    let later = spread(&mut c, "later", 3);
    server.wait_replicas(1);
    let mut r = replica.conn();
    for home in ["kept", "later"] {
        assert_eq!(
            identity_of(&mut r, home),
            identity_of(&mut c, home),
            "{home}"
        );
    }
    assert_ne!(spread_id_of(&later[1]), id);
}

#[test]
fn a_counter_spread_again_after_shrinking_to_one_gets_a_new_id() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD again 5");
    let first = spread(&mut c, "again", 3);
    c.cmd(&["CTR.ADD", &first[1], "2"]);
    spread(&mut c, "again", 1);
    let second = spread(&mut c, "again", 3);
    assert_ne!(spread_id_of(&second[1]), spread_id_of(&first[1]));
    eventually(10, || (c.q("CTR.GET again") == Value::Int(7)).then_some(()));
}

#[test]
fn a_moved_spread_home_takes_its_holders_along() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    assert_eq!(c.cmd(&["CTR.ADD", "views", "5"]), Value::Int(5));
    let holders = spread(&mut c, "views", 3);
    assert_eq!(c.cmd(&["CTR.ADD", &holders[1], "4"]), Value::Int(4));
    assert_eq!(c.cmd(&["CTR.ADD", &holders[2], "6"]), Value::Int(6));
    assert_eq!(c.cmd(&["CTR.GET", "views"]), Value::Int(15));
    assert_eq!(c.cmd(&["MOVE", "views", "1"]), Value::Int(1));
    // The connection stays in its database (Valkey 8.1 would leave it in database 1, and
    // propagate its next writes there, without the module's repair).
    assert_eq!(c.cmd(&["CTR.ADD", "after", "1"]), Value::Int(1));
    assert_eq!(
        server.conn().cmd(&["EXISTS", "after"]),
        Value::Int(1),
        "in database 0"
    );
    // The holders follow (in the same command, or the next timer tick on Redis 7.0); the
    // total is whole again in database 1.
    assert_eq!(c.q("SELECT 1"), Value::Simple("OK".into()));
    eventually(5, || {
        (c.cmd(&["CTR.GET", "views"]) == Value::Int(15)).then_some(())
    });
    for h in &holders[1..] {
        assert_eq!(c.cmd(&["EXISTS", h]), Value::Int(1), "{h} in database 1");
    }
    assert_eq!(c.q("SELECT 0"), Value::Simple("OK".into()));
    for h in holders.iter() {
        assert_eq!(c.cmd(&["EXISTS", h]), Value::Int(0), "{h} left database 0");
    }
    // The old database's name is free and shares nothing.
    assert_eq!(c.cmd(&["CTR.GET", "views"]), Value::Int(0));
    // Replicas follow the same moves.
    server.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(
        r.cmd(&["EXISTS", "after"]),
        Value::Int(1),
        "the replica's database 0"
    );
    assert_eq!(r.q("SELECT 1"), Value::Simple("OK".into()));
    assert_eq!(r.cmd(&["CTR.GET", "views"]), Value::Int(15));
    // A holder the destination already has a key for stays behind, and says so.
    assert_eq!(c.cmd(&["CTR.ADD", "likes", "1"]), Value::Int(1));
    let likes = spread(&mut c, "likes", 2);
    assert_eq!(c.cmd(&["CTR.ADD", &likes[1], "2"]), Value::Int(2));
    assert_eq!(c.q("SELECT 2"), Value::Simple("OK".into()));
    assert_eq!(
        c.cmd(&["SET", &likes[1], "squatter"]),
        Value::Simple("OK".into())
    );
    assert_eq!(c.q("SELECT 0"), Value::Simple("OK".into()));
    assert_eq!(c.cmd(&["MOVE", "likes", "2"]), Value::Int(1));
    eventually(5, || {
        (server.info_field("ctr", "ctr_holders_left_behind") == "1").then_some(())
    });
    assert_eq!(
        c.cmd(&["EXISTS", &likes[1]]),
        Value::Int(1),
        "stayed behind"
    );
}

#[test]
fn a_home_restored_under_another_name_is_a_counter_of_its_own_units() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    assert_eq!(c.cmd(&["CTR.ADD", "h", "5"]), Value::Int(5));
    let holders = spread(&mut c, "h", 3);
    assert_eq!(c.cmd(&["CTR.ADD", &holders[1], "4"]), Value::Int(4));
    assert_eq!(c.cmd(&["CTR.ADD", &holders[2], "6"]), Value::Int(6));
    let dump = c.cmd(&["DUMP", "h"]).bytes();
    assert_eq!(
        c.cmd(&[b"RESTORE".as_slice(), b"h2", b"0", &dump]),
        Value::Simple("OK".into())
    );
    // Not a second home of the same holders (which would count them twice and could take
    // the real home's folds): a counter of the home's own units.
    assert_eq!(c.cmd(&["CTR.GET", "h2"]), Value::Int(5));
    assert_eq!(c.cmd(&["CTR.GET", "h"]), Value::Int(15));
    // Restored over a key that exists (REPLACE): detached too. Before, the detached state
    // reached the replica before the RESTORE, which the replica then ran over it (a second
    // home there).
    assert_eq!(c.cmd(&["CTR.ADD", "h3", "1"]), Value::Int(1));
    assert_eq!(
        c.cmd(&[b"RESTORE".as_slice(), b"h3", b"0", &dump, b"REPLACE"]),
        Value::Simple("OK".into())
    );
    assert_eq!(c.cmd(&["CTR.GET", "h3"]), Value::Int(5));
    assert_eq!(c.cmd(&["CTR.GET", "h"]), Value::Int(15));
    assert_eq!(
        server.info_field("ctr", "ctr_restored_copies_detached"),
        "2"
    );
    // The real home folds its holders back, whole (at once on one server).
    spread(&mut c, "h", 1);
    assert_eq!(info_field(&mut c, "h", "value"), Value::Int(15));
    assert_eq!(c.cmd(&["CTR.GET", "h"]), Value::Int(15));
    assert_eq!(c.cmd(&["CTR.GET", "h2"]), Value::Int(5));
    // The replica holds the copies as the master detached them.
    server.wait_replicas(1);
    for copy in ["h2", "h3"] {
        let digest = |conn: &mut Conn| conn.cmd(&["DEBUG", "DIGEST-VALUE", copy]);
        assert_eq!(digest(&mut replica.conn()), digest(&mut c), "{copy}");
    }
    // Restored over itself (MIGRATE, RESTORE ... REPLACE) a home keeps its holders.
    assert_eq!(c.cmd(&["CTR.ADD", "k", "1"]), Value::Int(1));
    let k_holders = spread(&mut c, "k", 2);
    assert_eq!(c.cmd(&["CTR.ADD", &k_holders[1], "2"]), Value::Int(2));
    let dump = c.cmd(&["DUMP", "k"]).bytes();
    assert_eq!(
        c.cmd(&[b"RESTORE".as_slice(), b"k", b"0", &dump, b"REPLACE"]),
        Value::Simple("OK".into())
    );
    assert_eq!(c.cmd(&["CTR.GET", "k"]), Value::Int(3));
}

/// A home renamed (its holders still carry the old name), then restored under a third name of
/// its slot: a copy of its own units, not a second home, also once the server restarted (the
/// renamed home is known again from what it loads), and on a replica promoted since.
#[test]
fn a_renamed_home_restored_under_a_third_name_is_a_copy() {
    let mut server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    assert_eq!(c.cmd(&["CTR.ADD", "{r}h", "5"]), Value::Int(5));
    let holders = spread(&mut c, "{r}h", 3);
    assert_eq!(c.cmd(&["CTR.ADD", &holders[1], "4"]), Value::Int(4));
    assert_eq!(
        c.cmd(&["RENAME", "{r}h", "{r}h2"]),
        Value::Simple("OK".into())
    );
    let dump = c.cmd(&["DUMP", "{r}h2"]).bytes();
    let restore_copy = |c: &mut Conn, name: &str| {
        let reply = c.cmd(&[b"RESTORE".as_slice(), name.as_bytes(), b"0", &dump]);
        assert_eq!(reply, Value::Simple("OK".into()));
        assert_eq!(
            c.cmd(&["CTR.GET", name]),
            Value::Int(5),
            "{name}: its own units"
        );
        assert!(
            !lists_holders(&c.cmd(&["CTR.INFO", name])),
            "{name} lists no holder"
        );
        assert_eq!(
            c.cmd(&["CTR.GET", "{r}h2"]),
            Value::Int(9),
            "the home whole"
        );
    };
    restore_copy(&mut c, "{r}h3");
    server.restart_saving();
    let mut c = server.conn();
    restore_copy(&mut c, "{r}h4");
    // A replica knows the renamed home too (it replayed the RENAME, then resynced): promoted,
    // it tells a copy apart the same way.
    server.wait_replicas(1);
    let mut r = replica.conn();
    assert_eq!(r.q("REPLICAOF NO ONE"), Value::Simple("OK".into()));
    restore_copy(&mut r, "{r}h5");
    // The home folds its holders back, whole, and no copy took any of it.
    spread(&mut c, "{r}h2", 1);
    assert_eq!(c.cmd(&["CTR.GET", "{r}h2"]), Value::Int(9));
    assert_eq!(c.cmd(&["CTR.GET", "{r}h3"]), Value::Int(5));
}
