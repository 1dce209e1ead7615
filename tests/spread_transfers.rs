//! Transfers between spread members (folds and budget moves) against real servers, one test per
//! finding of issue 22 about them: a budget move into the home while a holder folds, copies
//! of a sealed holder (DUMP/RESTORE under another name, RENAME and a restart), forged states
//! (CTR.SETSTATE of an outbox nobody expects), a home renamed in the middle of a fold, and the
//! floor CTR.INFO shows while a floored spread shrinks to one key.
//!
//! Credits are held with the test-only load argument `debug-hold-credits`; it cannot be changed
//! at run time, so "releasing" them means handing the keys to a server that does not hold
//! them: on one server, its RDB loaded by a fresh server ([`release`]); in a cluster, a manual
//! failover to a replica started without it.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{key_slot, Cluster, ClusterClient, SLOTS};
use common::forge::DumpFrame;
use common::{eventually, names, Conn, Server, Value};

const HOLD: &[&str] = &["debug-hold-credits", "yes"];

/// A field of CTR.INFO, None when the key is missing or the field absent.
fn info(c: &mut Conn, key: &str, field: &str) -> Option<Value> {
    field_of(c.cmd(&["CTR.INFO", key]), field)
}

/// A field of a CTR.INFO reply, None when the reply is not a map or lacks it.
fn field_of(reply: Value, field: &str) -> Option<Value> {
    let items = match reply {
        Value::Array(items) => items,
        Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => return None,
    };
    let at = items
        .iter()
        .step_by(2)
        .position(|v| matches!(v, Value::Bulk(b) if b == field.as_bytes()))?;
    Some(items[2 * at + 1].clone())
}

fn setstate(c: &mut Conn, key: &str, state: &[u8]) -> Value {
    c.cmd(&[b"CTR.SETSTATE".as_slice(), key.as_bytes(), state])
}

fn leaving(c: &mut Conn, key: &str) -> Vec<String> {
    info(c, key, "leaving").map_or_else(Vec::new, |l| names(&l))
}

/// Polls (at most 20 s) until `home` lists no holder as leaving.
fn wait_folded(c: &mut Conn, home: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !leaving(c, home).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the folds of {home} never completed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `ctr_transfers_*` field of INFO ctr (0 where the module has no such field: the old build
/// the tests are checked against lacks the refusal counters).
fn stat(server: &Server, field: &str) -> u64 {
    server
        .info_field("ctr", &format!("ctr_transfers_{field}"))
        .parse()
        .unwrap_or(0)
}

/// Spreads `home` to `n` holders and writes `10 * (i + 1)` to holder i (the home included).
fn spread_with_values(c: &mut Conn, home: &str, n: usize) -> (Vec<String>, i64) {
    let holders = names(&c.cmd(&["CTR.SPREAD", home, &n.to_string()]));
    assert_eq!(holders.len(), n, "{holders:?}");
    let mut total = 0;
    for (i, h) in holders.iter().enumerate() {
        let v = 10 * (i as i64 + 1);
        c.cmd(&["CTR.ADD", h, &v.to_string()]);
        total += v;
    }
    (holders, total)
}

/// Shrinks `home` on a server holding credits and returns once the removed holders are
/// sealed (they refuse writes) with their credits pending.
fn shrink_held(c: &mut Conn, home: &str, to: usize, gone: &[String]) {
    let kept = names(&c.cmd(&["CTR.SPREAD", home, &to.to_string()]));
    assert_eq!(kept.len(), to);
    for h in gone {
        let e = c.cmd(&["CTR.ADD", h, "1"]);
        assert!(
            e.is_error() && e.error().contains("folded back"),
            "{h} sealed: {e:?}"
        );
    }
    assert_eq!(leaving(c, home), gone, "credits held");
}

/// The keys of `held` handed to a fresh server that applies credits: `held` saves its RDB and
/// a server without `debug-hold-credits` starts from it (and resumes every pending transfer).
fn release(held: &Server, args: &[&str]) -> Server {
    assert_eq!(held.conn().q("SAVE"), Value::Simple("OK".into()));
    let rdb = std::fs::read(held.dir.join("dump.rdb")).expect("the held server's RDB");
    Server::try_start(args, &[], true, &[("dump.rdb", &rdb)])
        .unwrap_or_else(|log| panic!("the releasing server did not start:\n{log}"))
}

/// Issue 22, "DUMP of a sealed holder with a credit pending, RESTORE under another name: the
/// home applies its credit twice". A copy of a sealed holder keeps the holder's outbox (RESTORE
/// does not know the old name) and sends the same credit under its new name; the home must
/// apply the units once. Copies under a plain name (since issue 34 it keeps no outbox entry:
/// it sends nothing) and under another holder-shaped name of the same spread. On the old build
/// (5835e1b) receivers deduplicated by the giver's name, so each copy's credit was applied
/// again: the total read 180 instead of 100.
#[test]
fn a_restored_copy_of_a_sealed_holder_is_credited_once() {
    let held = Server::start_with(&[], HOLD);
    let mut c = held.conn();
    let (holders, total) = spread_with_values(&mut c, "views", 4);
    shrink_held(&mut c, "views", 2, &holders[2..]);
    assert_eq!(c.q("CTR.GET views").int(), total, "exact while held");

    let sealed = &holders[3];
    let dump = c.cmd(&["DUMP", sealed]).bytes();
    // A holder-shaped name of the same spread that is not one of its holders.
    let (tag, _) = sealed.split_once('}').expect("a holder name");
    let prefix = tag.rsplitn(3, '.').nth(2).expect("{ctr.<id>");
    let shaped = format!("{prefix}.7.0}}views");
    assert!(!holders.contains(&shaped));
    for copy in ["views-copy", shaped.as_str()] {
        assert_eq!(
            c.cmd(&[b"RESTORE", copy.as_bytes(), b"0", dump.as_slice()]),
            Value::Simple("OK".into()),
            "RESTORE {copy}"
        );
    }

    // The copy under a plain name keeps nothing to send (issue 34: a restored key sends only
    // what it debited under its own name); the holder-shaped one keeps its entry.
    assert_eq!(
        held.info_field("ctr", "ctr_restored_transfers_dropped"),
        "1"
    );

    let free = release(&held, &[]);
    let mut f = free.conn();
    wait_folded(&mut f, "views");
    // The holder-shaped copy's credit is answered too (a repeat or a refusal), not applied; a
    // total that moves (its credit applied) ends the wait early.
    eventually(20, || {
        let answered = stat(&free, "duplicate_credits") + stat(&free, "refused") >= 1;
        (answered || f.q("CTR.GET views").int() != total).then_some(())
    });
    assert_eq!(f.q("CTR.GET views").int(), total, "each unit counted once");
    assert_eq!(info(&mut f, "views", "value"), Some(Value::Int(total)));
    assert_eq!(
        stat(&free, "credited"),
        2,
        "the two folded holders, once each"
    );
}

/// Issue 22, "RENAME of a giver followed by a restart": a sealed holder renamed with its
/// credit pending, the server restarted from its RDB (DEBUG RELOAD first, then a fresh server
/// that applies credits): the home applies the credit once and the fold completes. On the old
/// build (5835e1b) the home's seal requests made a key at 0 under the old name and its credit
/// was applied besides the renamed holder's (3 credits for 2 holders). With ec86dd0 alone the
/// same empty key's credit usually ended the fold first and the renamed holder's units were
/// refused for ever (the total read 30 of 60, 5 runs in 6; the "no key made" check fails
/// there every time): a seal request for a missing holder whose fold another key carries now
/// makes no key.
/// `views` spread to 3 with values, shrunk to 1 with its credits held (the two holders sealed),
/// and the last sealed holder renamed to `renamed`: the holders and the total.
fn sealed_holder_renamed(c: &mut Conn) -> (Vec<String>, i64) {
    let (holders, total) = spread_with_values(c, "views", 3);
    shrink_held(c, "views", 1, &holders[1..]);
    assert_eq!(
        c.cmd(&["RENAME", &holders[2], "renamed"]),
        Value::Simple("OK".into())
    );
    (holders, total)
}

#[test]
fn a_renamed_sealed_holder_is_credited_once_after_a_restart() {
    let held = Server::start_with(&[], HOLD);
    let mut c = held.conn();
    let (holders, total) = sealed_holder_renamed(&mut c);
    // The home asks for the seal again (every 100 ms to 2 s): the renamed key carries the
    // fold, so no empty key is sealed under the old name.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        c.cmd(&["EXISTS", &holders[2]]),
        Value::Int(0),
        "no key made"
    );
    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    // While held, the home's read misses the renamed holder's units (it reads leaving holders
    // by name), so the total is checked once the fold is done.

    let free = release(&held, &[]);
    let mut f = free.conn();
    wait_folded(&mut f, "views");
    assert_eq!(f.q("CTR.GET views").int(), total, "each unit counted once");
    assert_eq!(
        info(&mut f, "views", "holders"),
        None,
        "a plain counter again"
    );
    // Nothing left in flight: a second look after the resend period finds the same total.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(f.q("CTR.GET views").int(), total);
    assert_eq!(stat(&free, "credited"), 2);
}

/// Issue 34, found by the simulator once writes waited for their holder check (seed 203,771 of
/// a soak: 13 units lost): a sealed holder renamed away before its fold landed, then a client's
/// write to the old name. The home still lists the name as folding back, so the write made a
/// new key there; the home's next seal request sealed that key into the same fold, and the home
/// takes one credit per fold: the write's units were counted nowhere. Now the write is refused
/// as a write to the sealed holder is (the folded-back error, which the clients' routers read
/// as "go on to another holder"), and nothing is made at the old name.
#[test]
fn a_write_to_a_sealed_holder_renamed_away_is_refused_as_folded_back() {
    let held = Server::start_with(&[], HOLD);
    let mut c = held.conn();
    let (holders, total) = sealed_holder_renamed(&mut c);
    let e = c.cmd(&["CTR.ADD", &holders[2], "5"]);
    assert!(
        e.is_error() && e.error().contains("folded back"),
        "a write to the old name: {e:?}"
    );
    assert_eq!(
        c.cmd(&["EXISTS", &holders[2]]),
        Value::Int(0),
        "no key made"
    );

    let free = release(&held, &[]);
    let mut f = free.conn();
    wait_folded(&mut f, "views");
    assert_eq!(
        f.q("CTR.GET views").int(),
        total,
        "every unit of the holders home"
    );
}

/// Issue 22, "A home renamed in the middle of a fold sends late credits to the old name": the
/// holders sealed into `home`, credits held, the home renamed to `home2`: once released the
/// fold completes into home2 (its seal requests re-target the folds) and nothing is made at
/// the old name. On the old build (5835e1b) home2 kept listing its holders as leaving: its
/// folds never completed (the credits went to the old name).
#[test]
fn a_home_renamed_mid_fold_receives_its_folds_under_the_new_name() {
    let held = Server::start_with(&[], HOLD);
    let mut c = held.conn();
    let (holders, total) = spread_with_values(&mut c, "home", 4);
    shrink_held(&mut c, "home", 2, &holders[2..]);
    assert_eq!(c.q("RENAME home home2"), Value::Simple("OK".into()));
    assert_eq!(c.q("CTR.GET home2").int(), total);

    let free = release(&held, &[]);
    let mut f = free.conn();
    wait_folded(&mut f, "home2");
    assert_eq!(f.q("CTR.GET home2").int(), total, "every unit at home2");
    assert_eq!(f.q("EXISTS home"), Value::Int(0), "nothing at the old name");
    // Later resends change nothing.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(f.q("EXISTS home"), Value::Int(0));
    assert_eq!(f.q("CTR.GET home2").int(), total);
    for gone in &holders[2..] {
        let e = f.cmd(&["CTR.ADD", gone, "1"]);
        assert!(e.is_error() && e.error().contains("folded back"), "{e:?}");
    }
}

/// Issue 22, forged states: CTR.SETSTATE of a key whose outbox credits a key that expects
/// nothing from it. A fold credit toward a plain counter, and toward a spread home that does
/// not list the forger: nothing credited, `ctr_transfers_refused` grows. A forged budget move
/// toward a holder of another spread: refused and rolled back at the forger (its floor back
/// where it was before the move). On the old build (5835e1b) every credit was applied: the plain
/// counter read 25 instead of 5 (the first check to fail there).
#[test]
fn forged_outboxes_credit_nothing_and_a_forged_move_is_rolled_back() {
    // Real states with a transfer in flight, made on a server that holds credits.
    let held = Server::start_with(&["--rdbcompression", "no"], HOLD);
    let mut c = held.conn();
    let (holders, _) = spread_with_values(&mut c, "victim", 2);
    shrink_held(&mut c, "victim", 1, &holders[1..]);
    let fold_blob = DumpFrame::parse(&c.cmd(&["DUMP", &holders[1]]).bytes())
        .expect("an uncompressed DUMP")
        .blob;
    let free = Server::start();
    let mut f = free.conn();
    // A fold credit toward a plain counter.
    f.q("CTR.ADD victim 5");
    assert_eq!(
        setstate(&mut f, "forger", &fold_blob),
        Value::Simple("OK".into())
    );
    eventually(10, || {
        (stat(&free, "refused") >= 1 || f.q("CTR.GET victim") != Value::Int(5)).then_some(())
    });
    assert_eq!(f.q("CTR.GET victim"), Value::Int(5), "nothing credited");
    // The same toward a spread home that does not list the forger.
    f.q("DEL victim forger");
    f.q("CTR.ADD victim 5");
    let theirs = names(&f.q("CTR.SPREAD victim 2"));
    let refused = stat(&free, "refused");
    assert_eq!(
        setstate(&mut f, "forger2", &fold_blob),
        Value::Simple("OK".into())
    );
    eventually(10, || {
        (stat(&free, "refused") > refused || f.q("CTR.GET victim") != Value::Int(5)).then_some(())
    });
    assert_eq!(f.q("CTR.GET victim"), Value::Int(5), "nothing credited");
    assert_eq!(leaving(&mut f, "victim"), Vec::<String>::new());
    assert_eq!(names(&info(&mut f, "victim", "holders").unwrap()), theirs);

    // A budget move toward a holder of another spread: "mover" (floor 20, then raised by the
    // 10 it claims to have given) credits holder 1 of stock 10 units of budget.
    f.q("CTR.ADD stock 1000");
    f.q("CTR.FLOOR stock 100");
    let stock = names(&f.q("CTR.SPREAD stock 4"));
    let budgets_before = info(&mut f, "stock", "holder_budgets").unwrap();
    let moved = forged_move(&mut f, "mover", &stock[1]);
    assert_eq!(info(&mut f, "mover", "floor"), Some(Value::Int(30)));
    eventually(10, || {
        let given = info(&mut f, "stock", "holder_budgets").unwrap() != budgets_before;
        (stat(&free, "rolled_back") >= 1 || given).then_some(())
    });
    assert_eq!(
        info(&mut f, "mover", "floor"),
        Some(Value::Int(20)),
        "rolled back at the forger ({moved})"
    );
    assert_eq!(f.q("CTR.DECRFLOOR mover 80"), Value::Int(20));
    assert_eq!(
        info(&mut f, "stock", "holder_budgets").unwrap(),
        budgets_before,
        "the holder was given nothing"
    );
    assert_eq!(
        info(&mut f, "stock", "units_in_flight"),
        Some(Value::Int(0))
    );
}

/// Issue 34: budget moves between holders go through the home, and a holder refuses a
/// sibling's move (what a node of an earlier version sends), whatever the receiver is: a
/// floored holder the home lists, or a fresh key at a holder name (as one folded and expired
/// while a move toward it waited out a partition). Each rolls back at its giver. On the build
/// before this, the listed holder took the move (10 units of budget from a key no read
/// counts) and the fresh name held it "not yet" for good, its giver never answered.
#[test]
fn a_holder_refuses_a_siblings_budget_move_and_it_rolls_back() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD stock 1000");
    c.q("CTR.FLOOR stock 100");
    let stock = names(&c.q("CTR.SPREAD stock 4"));
    let budgets_before = info(&mut c, "stock", "holder_budgets").unwrap();
    // Siblings of the same spread (its id and home), not listed by the home.
    let sibling = |index: usize| stock[1].replacen(".1.0}", &format!(".{index}.0}}"), 1);
    for (giver, receiver) in [(sibling(9), stock[2].clone()), (sibling(8), sibling(7))] {
        let rolled_back = stat(&server, "rolled_back");
        forged_move(&mut c, &giver, &receiver);
        assert_eq!(info(&mut c, &giver, "floor"), Some(Value::Int(30)));
        eventually(10, || {
            (stat(&server, "rolled_back") > rolled_back).then_some(())
        });
        assert_eq!(
            info(&mut c, &giver, "floor"),
            Some(Value::Int(20)),
            "rolled back at {giver}"
        );
        assert_eq!(
            c.q(&format!("EXISTS {receiver}")),
            Value::Int(i64::from(receiver == stock[2]))
        );
    }
    assert_eq!(
        info(&mut c, "stock", "holder_budgets").unwrap(),
        budgets_before,
        "no holder was given anything"
    );
    assert_eq!(c.q("CTR.GET stock"), Value::Int(1000));
}

/// A budget move of `units` floor units from `giver` to `receiver` started as the master
/// starts one (`CTR.STEP giver <move>`, src/persist/step_msg.rs).
fn start_move(c: &mut Conn, giver: &str, receiver: &str, units: i64) -> Value {
    use common::{ivarint, uvarint};
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut step = vec![1u8, 1]; // version 1, MOVE
    step.extend(uvarint(receiver.len() as u64));
    step.extend(receiver.as_bytes());
    step.extend(ivarint(0)); // dv
    step.extend(ivarint(-units)); // df: the receiver's floor falls by `units`
    step.extend(ivarint(now_ms));
    step.extend(0x5eed_u64.to_le_bytes()); // a new giver id
    c.cmd(&[b"CTR.STEP".as_slice(), giver.as_bytes(), &step])
}

/// Issue 34, found by the simulator once it ran the rebalancer (seed 720 of its first run: 13
/// floor units lost): a holder's budget move to its home unanswered, the home renamed, then a
/// second move from that holder to the new name (a rebalance round planned after the
/// `RENAME`). The home keeps one high-water seq per giver: the later move applied first made
/// the earlier one, sent to the old name, look applied, and its units were gone from every
/// budget; and nothing but a fold's seal request ever sent the earlier move to the new name,
/// so without a fold it stayed in flight for good. Now a holder moves budget to its home one
/// move at a time whatever the home's name (the second is refused as busy), and the renamed
/// home asks the holder to send the move to its new name (a seal request for fold 0).
#[test]
fn a_holders_move_to_its_renamed_home_lands_and_a_second_waits_for_it() {
    let held = Server::start_with(&[], HOLD);
    let mut c = held.conn();
    c.q("CTR.ADD stock 1000");
    c.q("CTR.FLOOR stock 100");
    let members = names(&c.q("CTR.SPREAD stock 3"));
    let holder = members[1].clone();
    // A key's own floor (a home's `floor` is the counter's: its own is the first of
    // `holder_floors`).
    let floor_of = |c: &mut Conn, key: &str| {
        let (field, home) = match key.starts_with("stock") {
            true => ("holder_floors", true),
            false => ("floor", false),
        };
        match (info(c, key, field), home) {
            (Some(Value::Array(floors)), true) => floors[0].int(),
            (Some(Value::Int(f)), false) => f,
            (other, _) => panic!("the floor of {key}: {other:?}"),
        }
    };
    let (home_floor, holder_floor) = (floor_of(&mut c, "stock"), floor_of(&mut c, &holder));
    assert!(matches!(
        start_move(&mut c, &holder, "stock", 5),
        Value::Simple(_)
    ));
    assert_eq!(
        floor_of(&mut c, &holder),
        holder_floor + 5,
        "debited, credit held"
    );
    assert_eq!(c.q("RENAME stock stock2"), Value::Simple("OK".into()));
    let second = start_move(&mut c, &holder, "stock2", 3);
    assert!(
        second.is_error() && second.error().contains("still unacknowledged"),
        "a second move to the renamed home waits for the first: {second:?}"
    );
    assert_eq!(
        floor_of(&mut c, &holder),
        holder_floor + 5,
        "nothing more debited"
    );

    let free = release(&held, &[]);
    let mut f = free.conn();
    eventually(10, || {
        (floor_of(&mut f, "stock2") == home_floor - 5).then_some(())
    });
    assert_eq!(floor_of(&mut f, &holder), holder_floor + 5);
    assert_eq!(
        f.q("EXISTS stock"),
        Value::Int(0),
        "nothing made at the old name"
    );
    // The move answered: the holder moves to its home again.
    eventually(10, || {
        matches!(start_move(&mut f, &holder, "stock2", 3), Value::Simple(_)).then_some(())
    });
    eventually(10, || {
        (floor_of(&mut f, "stock2") == home_floor - 8).then_some(())
    });
    assert_eq!(f.q("CTR.GET stock2"), Value::Int(1000));
}

/// Writes at `key` a forged state: value 100, floor 30, and an outbox entry claiming a budget
/// move of 10 floor units to `receiver` (its floor raised from 20 by the debit), encoded as
/// section 16 (src/persist/ctr_format.rs), or as section 12 where the module predates it (the
/// old build the test is checked against). Returns the section used.
fn forged_move(c: &mut Conn, key: &str, receiver: &str) -> &'static str {
    use common::{ivarint, uvarint};
    let seq = 1u64 << 40;
    let with_ids = |ids: bool| {
        let mut s = vec![1u8, 1];
        s.extend(ivarint(100));
        s.push(4);
        s.extend(ivarint(30));
        s.extend(uvarint(1));
        s.extend(ivarint(70));
        s.push(if ids { 16 } else { 12 });
        if ids {
            s.extend(0x5eed_u64.to_le_bytes()); // giver id
        }
        s.extend(uvarint(seq));
        s.push(0); // not sealed
        s.extend(uvarint(1));
        s.extend(uvarint(receiver.len() as u64));
        s.extend(receiver.as_bytes());
        s.extend(uvarint(seq));
        s.extend(ivarint(0)); // dv
        s.extend(ivarint(-10)); // df: the receiver's floor falls by 10
        if ids {
            s.extend(0u64.to_le_bytes()); // fold id: a budget move
        }
        s.extend(uvarint(0)); // inbox
        s.extend(uvarint(0)); // leaving
        s.push(0); // END
        s
    };
    if setstate(c, key, &with_ids(true)) == Value::Simple("OK".into()) {
        return "section 16";
    }
    assert_eq!(
        setstate(c, key, &with_ids(false)),
        Value::Simple("OK".into())
    );
    "section 12"
}

/// Issue 22: after a floored spread shrinks to one key, CTR.INFO shows the counter's floor,
/// also while the folds are under way (the home is no longer spread but still lists leaving
/// holders whose floors are part of the counter's). On the old build (5835e1b), and until
/// 8b6f4f1, it showed the home's own part mid-fold: 775 for a floor of 100.
#[test]
fn a_floored_spread_shrunk_to_one_key_shows_the_counters_floor() {
    let held = Server::start_with(&[], HOLD);
    let mut c = held.conn();
    c.q("CTR.ADD stock 1000");
    c.q("CTR.FLOOR stock 100");
    let holders = names(&c.q("CTR.SPREAD stock 4"));
    shrink_held(&mut c, "stock", 1, &holders[1..]);
    assert_eq!(info(&mut c, "stock", "value"), Some(Value::Int(1000)));
    assert_eq!(
        info(&mut c, "stock", "floor"),
        Some(Value::Int(100)),
        "mid-fold"
    );

    let free = release(&held, &[]);
    let mut f = free.conn();
    wait_folded(&mut f, "stock");
    assert_eq!(info(&mut f, "stock", "value"), Some(Value::Int(1000)));
    assert_eq!(info(&mut f, "stock", "floor"), Some(Value::Int(100)));
    assert_eq!(f.q("CTR.DECRFLOOR stock 900"), Value::Int(100));
    assert_eq!(f.q("CTR.DECRFLOOR stock 1"), Value::Nil);
}

/// Issue 22, finding 4: a sealed holder expired 60 s after its fold was acknowledged, so a
/// purchase token retried after that walked on to the next holder and was granted twice. Now a
/// folded holder stays for the token window and replays every write it remembers (a grant, a
/// refusal, a tokened add) while refusing any other write. On the old build the retry got the
/// folded-back error (and, once the key had expired, a second grant).
#[test]
fn a_retried_token_replays_on_a_folded_holder_for_the_token_window() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD stock 300");
    c.q("CTR.FLOOR stock 0");
    let holders = names(&c.q("CTR.SPREAD stock 3"));
    let h = holders[1].as_str();
    let budget = match info(&mut c, h, "budgets") {
        Some(Value::Array(b)) => b.iter().map(Value::int).sum::<i64>(),
        other => panic!("budgets of {h}: {other:?}"),
    };
    assert!(budget >= 10, "{h} holds a share: {budget}");
    // A grant replies what the holder can still sell (issue 26, finding 11).
    let granted = c.cmd(&["CTR.DECRFLOOR", h, "7", "TOKEN", "order-1"]);
    assert_eq!(granted, Value::Int(budget - 7));
    let value = c.cmd(&["CTR.GET", h]).int();
    // Beyond the whole stock: final once a rebalance round has seen the headroom.
    let (refused, _) =
        common::purchase_until_final(&mut c, &["CTR.DECRFLOOR", h, "100000", "TOKEN", "order-2"]);
    assert_eq!(refused, Value::Nil);
    let restocked = c.cmd(&["CTR.ADD", h, "5", "TOKEN", "restock-1"]);
    assert_eq!(restocked, Value::Int(value + 5));
    // One server: the shrink folds within the command; the holder is sealed and acknowledged.
    c.q("CTR.SPREAD stock 1");
    assert!(leaving(&mut c, "stock").is_empty());
    let ttl = c.cmd(&["PTTL", h]).int();
    assert!(
        ttl > 60_000,
        "a folded holder stays for the token window (1 h by default): {ttl} ms"
    );
    let total = c.q("CTR.GET stock");
    assert_eq!(total, Value::Int(300 - 7 + 5));
    // Every retry replays its first answer, changing nothing.
    assert_eq!(
        c.cmd(&["CTR.DECRFLOOR", h, "7", "TOKEN", "order-1"]),
        granted
    );
    assert_eq!(
        c.cmd(&["CTR.DECRFLOOR", h, "100000", "TOKEN", "order-2"]),
        Value::Nil
    );
    // An add's retry replies the key's current value (the contract): the folded holder's 0.
    assert_eq!(
        c.cmd(&["CTR.ADD", h, "5", "TOKEN", "restock-1"]),
        Value::Int(0)
    );
    assert_eq!(c.q("CTR.GET stock"), total);
    // Anything else is refused as folded back.
    for write in [
        vec!["CTR.DECRFLOOR", h, "7", "TOKEN", "order-3"],
        vec!["CTR.DECRFLOOR", h, "1"],
        vec!["CTR.ADD", h, "1"],
        vec!["CTR.ADD", h, "5", "TOKEN", "restock-2"],
    ] {
        match c.cmd(&write) {
            Value::Error(e) => assert!(e.contains("folded back into its home"), "{write:?}: {e}"),
            other => panic!("{write:?} on a folded holder: {other:?}"),
        }
    }
    // A token reused for another write is still refused as such.
    match c.cmd(&["CTR.DECRFLOOR", h, "8", "TOKEN", "order-1"]) {
        Value::Error(e) => assert!(!e.contains("folded back"), "{e}"),
        other => panic!("a reused token: {other:?}"),
    }
    assert_eq!(c.q("CTR.GET stock"), total);
}

/// A 3-master cluster whose master `home_node` holds credits, a replica of that master
/// started without holding them (a failover to it releases them), and a client.
fn holding_at(home_node: usize) -> (Cluster, Server, ClusterClient) {
    let args: Vec<&[&str]> = (0..3)
        .map(|i| if i == home_node { HOLD } else { &[][..] })
        .collect();
    let cluster = Cluster::start_each(&args);
    let replica = cluster.start_replica_of(home_node);
    let client = cluster.client();
    (cluster, replica, client)
}

/// A manual failover to `replica` (started without held credits, so it releases them once it
/// is the master); a cluster client through it.
fn take_over(replica: &Server) -> ClusterClient {
    let mut r = replica.conn();
    assert_eq!(r.q("CLUSTER FAILOVER"), Value::Simple("OK".into()));
    eventually(20, || {
        r.q("INFO replication")
            .text()
            .contains("role:master")
            .then_some(())
    });
    ClusterClient::connect(replica.port)
}

/// The index of the master that owns `slot` when `n` masters split the slots evenly in ranges
/// (as `Cluster::start` assigns them).
fn range_owner(slot: u16, n: usize) -> usize {
    (0..n)
        .find(|&i| (slot as usize) < SLOTS as usize * (i + 1) / n)
        .unwrap()
}

/// Issue 22, "A budget move into the home cancels a holder's fold". A floored counter spread
/// to 3 across masters; the home's master holds credits (the others do not). The home sells
/// its budget and refuses a purchase, so holders give it budget (moves holder -> home, their
/// credits held); then `CTR.SPREAD home 1` while those moves are unanswered. A manual failover
/// to a replica that applies credits releases them: the moves land, then the holders seal
/// and fold. The fold completes (no leaving holders, the holders refuse writes as folded
/// back) and the total, floor and headroom are exact. On the old build (5835e1b) a holder
/// sealed with its move unanswered: here the fold ended with the total exact but the floor
/// read 112 instead of 19 (the move's floor units counted twice); the run saw the
/// total read 230 instead of 281 and the holder never sealed.
#[test]
fn a_budget_move_into_the_home_does_not_cancel_a_holders_fold() {
    let home_node = 0;
    let (_cluster, replica, mut client) = holding_at(home_node);
    // A home on the holding master whose two holders are on the other masters.
    let mut attempt = 0;
    let (home, holders) = loop {
        attempt += 1;
        assert!(attempt < 200, "no home with both holders elsewhere");
        let home = format!("{{s{attempt}}}");
        if range_owner(key_slot(home.as_bytes()), 3) != home_node {
            continue;
        }
        client.cmd(&["CTR.ADD", &home, "300"]);
        assert_eq!(client.cmd(&["CTR.FLOOR", &home, "19"]).text(), "OK");
        let holders = names(&client.cmd(&["CTR.SPREAD", &home, "3"]));
        if holders[1..]
            .iter()
            .all(|h| range_owner(key_slot(h.as_bytes()), 3) != home_node)
        {
            break (home, holders);
        }
    };
    // The shares reach the holders (their masters apply credits).
    let budgets = eventually(20, || {
        let info = client.cmd(&["CTR.INFO", &home]);
        (info.field("units_in_flight").int() == 0).then(|| info.field("holder_budgets"))
    });
    let budgets: Vec<i64> = budgets.array().iter().map(Value::int).collect();
    assert_eq!(budgets.iter().sum::<i64>(), 281);
    // The home sells its whole budget, then refuses: holders give it budget.
    // (A grant on a spread home replies what it can still sell: nothing.)
    let sold = budgets[0];
    assert_eq!(
        client
            .cmd(&["CTR.DECRFLOOR", &home, &sold.to_string()])
            .int(),
        0
    );
    // The holders still hold 281 - sold units: the purchase waits for budget to gather
    // (`TRYAGAIN`), and its refusal is demand.
    let refused = client.cmd_once(&["CTR.DECRFLOOR", &home, "1"]);
    assert!(
        matches!(&refused, Value::Error(e) if e.starts_with("TRYAGAIN budget in flight")),
        "{refused:?}"
    );
    let total = 300 - sold;
    eventually(20, || {
        let info = client.cmd(&["CTR.INFO", &home]);
        (info.field("units_in_flight").int() > 0).then_some(())
    });
    // Shrink while the moves' credits are held at the home's master.
    assert_eq!(
        names(&client.cmd(&["CTR.SPREAD", &home, "1"])),
        vec![home.clone()]
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        client.cmd(&["CTR.GET", &home]).int(),
        total,
        "exact mid-fold"
    );

    // Release: the replica (which applies credits) takes over the home's master.
    let mut client = take_over(&replica);
    eventually(30, || {
        let info = client.cmd(&["CTR.INFO", &home]);
        let folded = field_of(info.clone(), "leaving").is_none_or(|l| l.array().is_empty());
        let exact = field_of(info, "value") == Some(Value::Int(total));
        (folded && exact).then_some(())
    });
    assert_eq!(client.cmd(&["CTR.GET", &home]).int(), total);
    let mut h = replica.conn();
    assert_eq!(info(&mut h, &home, "floor"), Some(Value::Int(19)));
    assert_eq!(
        client.cmd(&["CTR.DECRFLOOR", &home, &(total - 19).to_string()]),
        Value::Int(19),
        "the whole headroom is at the home"
    );
    assert_eq!(client.cmd(&["CTR.DECRFLOOR", &home, "1"]), Value::Nil);
    for gone in &holders[1..] {
        let e = client.cmd(&["CTR.ADD", gone, "1"]);
        assert!(
            e.is_error() && e.error().contains("folded back"),
            "{gone}: {e:?}"
        );
    }
}

/// Issue 22, "A home renamed in the middle of a fold" across masters: the home's master holds
/// credits, its holders on the other masters are sealed, the home is renamed (same hash tag,
/// so the same slot); a manual failover to a replica that applies credits releases them. The
/// credits sent to the old name are refused, the new name's seal requests re-target the folds,
/// and the fold completes into the new name with the exact total; nothing is made at the old.
/// Checked at bbe6931 (two-sided transfers, before f8f0636): the fold never completed, since a
/// renamed home stayed tracked under its old name only and sent no seal requests until a
/// restart (a promoted replica included). Not run against 5835e1b.
#[test]
fn a_home_renamed_mid_fold_across_masters_receives_its_folds() {
    let home_node = 0;
    let (cluster, replica, mut client) = holding_at(home_node);
    let tag = (0..)
        .map(|n| format!("{{h{n}}}"))
        .find(|t| range_owner(key_slot(t.as_bytes()), 3) == home_node)
        .unwrap();
    let (home, home2) = (format!("{tag}old"), format!("{tag}new"));
    let holders = names(&client.cmd(&["CTR.SPREAD", &home, "6"]));
    let mut total = 0;
    for (i, h) in holders.iter().enumerate() {
        let v = 10 * (i as i64 + 1);
        assert_eq!(client.cmd(&["CTR.ADD", h, &v.to_string()]).int(), v);
        total += v;
    }
    assert_eq!(names(&client.cmd(&["CTR.SPREAD", &home, "2"])).len(), 2);
    // The holders on other masters seal (writes refused); their credits are held at the home.
    for h in holders[2..]
        .iter()
        .filter(|h| range_owner(key_slot(h.as_bytes()), 3) != home_node)
    {
        eventually(20, || {
            let e = client.cmd(&["CTR.ADD", h, "0"]);
            (e.is_error() && e.error().contains("folded back")).then_some(())
        });
    }
    assert_eq!(
        client.cmd(&["RENAME", &home, &home2]),
        Value::Simple("OK".into())
    );
    assert_eq!(client.cmd(&["CTR.GET", &home2]).int(), total);

    cluster.nodes[home_node].wait_replicas(1);
    let mut client = take_over(&replica);
    eventually(30, || {
        let info = client.cmd(&["CTR.INFO", &home2]);
        field_of(info, "leaving")
            .is_some_and(|l| l.array().is_empty())
            .then_some(())
    });
    assert_eq!(client.cmd(&["CTR.GET", &home2]).int(), total, "every unit");
    assert_eq!(
        client.cmd(&["EXISTS", &home]),
        Value::Int(0),
        "nothing at the old name"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(client.cmd(&["EXISTS", &home]), Value::Int(0));
    assert_eq!(client.cmd(&["CTR.GET", &home2]).int(), total);
}

/// A home's state with section 16 alone: nothing sent, nothing applied, `leaving` the given
/// names (each with its own fold id).
fn forged_leaving(leaving: &[&str]) -> Vec<u8> {
    use common::{ivarint, uvarint};
    let mut s = vec![1u8, 1];
    s.extend(ivarint(0));
    s.push(16);
    s.extend(0u64.to_le_bytes()); // giver id
    s.extend(uvarint(0)); // last seq
    s.push(0); // not sealed
    s.extend(uvarint(0)); // outbox
    s.extend(uvarint(0)); // inbox
    s.extend(uvarint(leaving.len() as u64));
    for (i, name) in leaving.iter().enumerate() {
        s.extend(uvarint(name.len() as u64));
        s.extend(name.as_bytes());
        s.extend((0x7700 + i as u64).to_le_bytes()); // fold id
    }
    s.push(0); // END
    s
}

/// A spread home's state from before spread ids (id 0, section 11 without 15) whose holder
/// list names `holders`.
fn forged_spread(holders: &[&str]) -> Vec<u8> {
    use common::{ivarint, uvarint};
    let mut s = vec![1u8, 1];
    s.extend(ivarint(0));
    s.push(11);
    s.extend(uvarint(holders.len() as u64));
    for name in holders {
        s.extend(uvarint(name.len() as u64));
        s.extend(name.as_bytes());
    }
    s.push(0); // END
    s
}

/// Item 2 of issue 23: a restored payload carries no power over other keys. A RESTORE of a
/// crafted DUMP whose `leaving` names another counter (`bank`), or whose holder list (a spread
/// from before ids) names it and is then shrunk, must not seal `bank`: `bank` keeps its 1,000
/// units and takes writes, the forger is credited nothing. Before, the home's seal request
/// sealed `bank` and its fold credit moved every unit of it into the forger.
#[test]
fn a_restored_payload_naming_another_key_seals_and_credits_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD bank 1000");
    c.q("CTR.ADD frame 1");
    let frame = common::dump::DumpFrame::of_key(&mut c, "frame");
    let restored = c.cmd(&[
        b"RESTORE".as_slice(),
        b"atk:x",
        b"0",
        &frame.with_blob(&forged_leaving(&["bank"])),
    ]);
    let spread = c.cmd(&[
        b"RESTORE".as_slice(),
        b"atk:y",
        b"0",
        &frame.with_blob(&forged_spread(&["bank"])),
    ]);
    if spread == Value::Simple("OK".into()) {
        c.q("CTR.SPREAD atk:y 1");
    }
    // The transfer registry's tick (every 100 ms) would send the seal requests by now.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        c.q("CTR.GET bank"),
        Value::Int(1000),
        "bank untouched ({restored:?}, {spread:?})"
    );
    assert_eq!(c.q("CTR.ADD bank 1"), Value::Int(1001), "bank takes writes");
    // A holder of another spread named in `leaving` (the forged state claims to fold it):
    // the restored key is told apart as a copy of that spread's home and detached, so the
    // holder is never asked to seal.
    c.q("CTR.ADD vic 1");
    let vic = names(&c.q("CTR.SPREAD vic 3"));
    c.cmd(&["CTR.ADD", &vic[1], "50"]);
    let z = c.cmd(&[
        b"RESTORE".as_slice(),
        b"atk:z",
        b"0",
        &frame.with_blob(&forged_leaving(&[vic[1].as_str()])),
    ]);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(c.cmd(&["CTR.GET", &vic[1]]), Value::Int(50), "{z:?}");
    assert_eq!(
        c.cmd(&["CTR.ADD", &vic[1], "1"]),
        Value::Int(51),
        "not sealed"
    );
    assert_eq!(c.q("CTR.GET vic"), Value::Int(52));
    assert_eq!(leaving(&mut c, "atk:z"), Vec::<String>::new());
    for forger in ["atk:x", "atk:y", "atk:z"] {
        let got = c.cmd(&["CTR.GET", forger]);
        assert!(
            matches!(got, Value::Int(0) | Value::Nil),
            "{forger} credited: {got:?}"
        );
    }
}

/// A state with section 16 whose one outbox entry claims a transfer debited at `from` (the
/// name a receiver judges a credit by) toward `receiver`.
fn forged_outbox(receiver: &str, from: &str, dv: i64, df: i64, fold_id: u64) -> Vec<u8> {
    use common::{ivarint, uvarint};
    let seq = 1u64 << 50;
    let mut s = vec![1u8, 1];
    s.extend(ivarint(0));
    s.push(16);
    s.extend(0x5eed_u64.to_le_bytes()); // giver id, of the forger's choosing
    s.extend(uvarint(seq));
    if fold_id == 0 {
        s.push(0); // not sealed
    } else {
        s.push(1); // a fold is sent by a holder sealed into its receiver
        s.extend(uvarint(receiver.len() as u64));
        s.extend(receiver.as_bytes());
    }
    s.extend(uvarint(1));
    s.extend(uvarint(receiver.len() as u64));
    s.extend(receiver.as_bytes());
    s.extend(uvarint(seq));
    s.extend(ivarint(dv));
    s.extend(ivarint(df));
    s.extend(fold_id.to_le_bytes());
    s.extend(uvarint(from.len() as u64));
    s.extend(from.as_bytes());
    s.extend(uvarint(0)); // inbox
    s.extend(uvarint(0)); // leaving
    s.push(0); // END
    s
}

/// The fold id a home keeps for its leaving holder `holder`, read from the home's uncompressed
/// DUMP as anyone allowed to read the home can (`leaving`: the name, then the id, 8 bytes LE).
fn fold_id_in_dump(home_blob: &[u8], holder: &str) -> u64 {
    let name = holder.as_bytes();
    let at = (0..=home_blob.len() - name.len())
        .rev()
        .find(|&i| &home_blob[i..i + name.len()] == name)
        .expect("the leaving holder in the home's DUMP")
        + name.len();
    u64::from_le_bytes(home_blob[at..at + 8].try_into().expect("8 bytes"))
}

/// Issue 34, item 1 ("mint through RESTORE"): a user allowed `RESTORE` on keys of its own
/// restores a payload whose outbox claims a transfer debited at a key it cannot write: a fold
/// credit "from" a leaving holder carrying the fold id read from the home's `DUMP`, and a
/// budget move "from" a floored spread's home toward one of its holders. A restored key sends
/// only what was debited under its own name (or, for a holder's copy, a holder name of the same
/// spread): both entries are dropped on `RESTORE`; the home's total stays exact and its real
/// holder's fold lands, the holder's floor stays. A third, restored under a holder-shaped name
/// that carries the victim spread's id but the attacker's own home, sends its move under its
/// own name: no holder of `stock` takes it for a sibling's (before, the id alone made a
/// sibling). The real fold cannot land first (the home's
/// value is 10 below the largest integer, its 20 units would overflow it) until the test makes
/// room. A fourth carries the real fold id but signs with the forger's own name (which it may
/// write): the home matches a fold by its id and its holder's name. Before, the home applied
/// the forged fold (its 1,000,000 units taken away), then took the real holder's credit as a
/// repeat (its 20 units gone), and the holder's budget grew by 1,000,000; the fourth alone did
/// the first.
#[test]
fn a_restored_outbox_sends_nothing_its_name_did_not_debit() {
    let held = Server::start_with(&["--rdbcompression", "no"], HOLD);
    let mut c = held.conn();
    let (holders, _) = spread_with_values(&mut c, "victim", 2);
    shrink_held(&mut c, "victim", 1, &holders[1..]);
    let near_max = c.cmd(&["CTR.ADD", "victim", &(i64::MAX - 20).to_string()]);
    assert_eq!(near_max.int(), i64::MAX - 10);
    let home_blob = DumpFrame::parse(&c.cmd(&["DUMP", "victim"]).bytes())
        .expect("an uncompressed DUMP")
        .blob;
    let fold_id = fold_id_in_dump(&home_blob, &holders[1]);

    c.q("CTR.ADD stock 1000");
    c.q("CTR.FLOOR stock 100");
    let stock = names(&c.q("CTR.SPREAD stock 4"));
    let budgets_before = info(&mut c, "stock", "holder_budgets").unwrap();

    c.q("CTR.ADD frame 1");
    let frame = common::dump::DumpFrame::of_key(&mut c, "frame");
    // A holder-shaped name carrying the attacker's own home and the victim spread's (public)
    // id: a user allowed to write `{ctr.*}atk:*` names, as spread writers of `atk:*` homes are.
    let (tag, _) = stock[1].split_once('}').expect("a holder name");
    let id = tag.split('.').nth(1).expect("{ctr.<id>");
    let sibling = format!("{{ctr.{id}.9.0}}atk:sib");
    let forged = [
        (
            "atk:fold",
            forged_outbox("victim", &holders[1], -1_000_000, 0, fold_id),
        ),
        (
            "atk:own",
            forged_outbox("victim", "atk:own", -1_000_000, 0, fold_id),
        ),
        (
            "atk:move",
            forged_outbox(&stock[1], "stock", 0, -1_000_000, 0),
        ),
        (
            &sibling,
            forged_outbox(&stock[1], &sibling, 0, -1_000_000, 0),
        ),
    ];
    for (key, state) in &forged {
        assert_eq!(
            c.cmd(&[
                b"RESTORE".as_slice(),
                key.as_bytes(),
                b"0",
                &frame.with_blob(state)
            ]),
            Value::Simple("OK".into()),
            "RESTORE {key}"
        );
    }
    assert_eq!(
        held.info_field("ctr", "ctr_restored_transfers_dropped"),
        "2"
    );

    let free = release(&held, &[]);
    let mut f = free.conn();
    // The forged credits would be sent (and resent) by now.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(f.q("CTR.ADD victim -100").int(), i64::MAX - 110);
    wait_folded(&mut f, "victim");
    assert_eq!(
        f.q("CTR.GET victim").int(),
        i64::MAX - 90,
        "no unit minted nor lost"
    );
    assert_eq!(
        info(&mut f, "stock", "holder_budgets").unwrap(),
        budgets_before,
        "no budget given by the forged move"
    );
    assert_eq!(info(&mut f, "stock", "floor"), Some(Value::Int(100)));
    assert_eq!(f.cmd(&["CTR.DECRFLOOR", &stock[1], "1000"]), Value::Nil);
}

/// CTR.REFUND on a spread counter (issue 35, item 3): each member gives back, once, the grants
/// it made itself, and says nil for a token it did not grant (the clients walk the purchase's
/// probe order until a member answers a number); a replica reaches the same states. A holder
/// folded back replays a refund it gave, and sends home a grant it still holds (its units went
/// home with the fold): its error names the add that gives them back there, once.
#[test]
fn refunds_on_a_spread_counter_go_back_to_the_member_that_granted() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut c = server.conn();
    c.q("CTR.ADD stock 300");
    c.q("CTR.FLOOR stock 0");
    let members = names(&c.q("CTR.SPREAD stock 3"));
    let (home, h1, h2) = (
        members[0].as_str(),
        members[1].as_str(),
        members[2].as_str(),
    );
    assert_eq!(home, "stock");
    for (member, units, token) in [(h1, "7", "o1"), (h2, "5", "o2"), (home, "3", "o3")] {
        let granted = c.cmd(&["CTR.DECRFLOOR", member, units, "TOKEN", token]);
        assert!(matches!(granted, Value::Int(_)), "{member}: {granted:?}");
    }
    assert_eq!(c.q("CTR.GET stock"), Value::Int(285));
    let refund =
        |c: &mut Conn, member: &str, token: &str| c.cmd(&["CTR.REFUND", member, "TOKEN", token]);
    assert_eq!(refund(&mut c, h2, "o1"), Value::Nil, "not its grant");
    assert_eq!(refund(&mut c, home, "o1"), Value::Nil, "not its grant");
    assert_eq!(refund(&mut c, h1, "o1"), Value::Int(7));
    assert_eq!(refund(&mut c, h1, "o1"), Value::Int(7), "a retry replays");
    assert_eq!(refund(&mut c, home, "o3"), Value::Int(3));
    assert_eq!(c.q("CTR.GET stock"), Value::Int(295));
    // The purchases' own retries still replay their first replies.
    assert!(matches!(
        c.cmd(&["CTR.DECRFLOOR", h1, "7", "TOKEN", "o1"]),
        Value::Int(_)
    ));
    assert_eq!(c.q("CTR.GET stock"), Value::Int(295));
    server.wait_replicas(1);
    let mut r = replica.conn();
    for member in &members {
        assert_eq!(
            r.cmd(&["DEBUG", "DIGEST-VALUE", member]),
            c.cmd(&["DEBUG", "DIGEST-VALUE", member]),
            "{member}"
        );
    }
    // A shrink folds h2 with the grant of o2 in it. Once the fold landed, h2 sends the refund
    // home: the add its error names, under a token of the grant's own, which a retry replays.
    c.q("CTR.SPREAD stock 2");
    wait_folded(&mut c, "stock");
    let sent_home = refund(&mut c, h2, "o2").error();
    let add = sent_home
        .split_once(", once: ")
        .map(|(_, add)| add.to_string())
        .unwrap_or_default();
    assert!(
        sent_home.starts_with("ERR refund after a fold: the grant's 5 units"),
        "{sent_home}"
    );
    assert!(
        add.starts_with("CTR.ADD stock 5 TOKEN ctr-refund:"),
        "{sent_home}"
    );
    assert_eq!(
        refund(&mut c, h2, "o2").error(),
        sent_home,
        "nothing changed at h2"
    );
    assert_eq!(c.q("CTR.GET stock"), Value::Int(295));
    let words: Vec<&str> = add.split(' ').collect();
    assert_eq!(c.cmd(&words), Value::Int(300));
    assert_eq!(
        c.cmd(&words),
        Value::Int(300),
        "a retried refund replays at the home"
    );
    assert_eq!(c.q("CTR.GET stock"), Value::Int(300));
    // Folded too, h1 replays the refund it gave, and has no grant of another token.
    c.q("CTR.SPREAD stock 1");
    wait_folded(&mut c, "stock");
    assert_eq!(refund(&mut c, h1, "o1"), Value::Int(7));
    assert_eq!(refund(&mut c, h1, "o2"), Value::Nil);
    assert_eq!(c.q("CTR.GET stock"), Value::Int(300));
}
