//! Floored spread counters on one server: spreading shares the headroom over the holders'
//! floors, purchases by the probe rule (the Rust client's) from concurrent buyers never take
//! the total below the floor, retries replay their first answer, restocks add budget where
//! they land, and the home's CTR.INFO shows floor, headroom, budgets and demand. Persistence
//! of the spread floor is in ctr_persistence.rs.

mod common;

use std::thread;

use common::cluster::key_slot;
use common::{assert_awaits_budget, purchase_until_final, Conn, Server, Value};
use redis_ctr_client::{CtrError, ModuleError, SpreadRouter};

/// A purchase of `amount` from `sale` through `router`, retried while it answers that budget is
/// still on its way (`TRYAGAIN budget in flight`, which asks for a retry).
fn buy(
    router: &SpreadRouter,
    con: &mut redis::Connection,
    amount: i64,
    token: &str,
) -> Option<i64> {
    loop {
        match router.decrfloor(con, "sale", amount, Some(token.as_bytes()), None) {
            Err(CtrError::Module(ModuleError::BudgetInFlight, _)) => {
                thread::sleep(std::time::Duration::from_millis(20))
            }
            other => return other.unwrap(),
        }
    }
}

fn info_field(c: &mut Conn, key: &str, field: &str) -> Value {
    c.cmd(&["CTR.INFO", key]).field(field)
}

fn ints(v: &Value) -> Vec<i64> {
    v.array().iter().map(Value::int).collect()
}

/// Makes `home` a counter of `stock` with floor `floor`, spread to `n`: its holders, home first.
fn spread_floored(c: &mut Conn, home: &str, stock: i64, floor: i64, n: usize) -> Vec<String> {
    c.q(&format!("CTR.ADD {home} {stock}"));
    c.q(&format!("CTR.FLOOR {home} {floor}"));
    let holders: Vec<String> = c
        .q(&format!("CTR.SPREAD {home} {n}"))
        .array()
        .iter()
        .map(Value::text)
        .collect();
    assert_eq!(holders.len(), n);
    holders
}

/// Waits (at most 10 s) until `done` holds: the rebalance runs from a timer.
fn wait_for(c: &mut Conn, what: &str, mut done: impl FnMut(&mut Conn) -> bool) {
    let start = std::time::Instant::now();
    while !done(c) {
        assert!(start.elapsed().as_secs() < 10, "{what}: not reached");
        thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn spreading_a_floored_counter_shares_its_headroom_over_the_holders() {
    // No wait in the server: a purchase that waits for budget answers TRYAGAIN at once, so
    // that the refusal's demand is seen (tests/spread_waits.rs covers the wait).
    let server = Server::start_with(&[], &["purchase-wait-ms", "0"]);
    let mut c = server.conn();
    let holders = spread_floored(&mut c, "stock", 1000, 100, 4);
    assert_eq!(holders.len(), 4);
    let field = |c: &mut Conn, name: &str| info_field(c, "stock", name);
    assert_eq!(field(&mut c, "value"), Value::Int(1000));
    assert_eq!(field(&mut c, "floor"), Value::Int(100));
    assert_eq!(field(&mut c, "headroom"), Value::Int(900));
    assert_eq!(
        ints(&field(&mut c, "holder_floors")),
        [775, -225, -225, -225]
    );
    assert_eq!(ints(&field(&mut c, "holder_budgets")), [225; 4]);
    assert_eq!(field(&mut c, "units_in_flight"), Value::Int(0));

    // A grant replies what the holder can still sell (its value -225 is above its own floor
    // by 0), not its value: -225 read like negative stock while 675 units remained.
    assert_eq!(c.cmd(&["CTR.DECRFLOOR", &holders[1], "225"]), Value::Int(0));
    assert_eq!(c.cmd(&["CTR.GET", &holders[1]]), Value::Int(-225));
    // Holder 1 is out of budget, not the counter (675 units left): the purchase waits for
    // budget (retryable), and its refusal is demand.
    assert_awaits_budget(c.cmd(&["CTR.DECRFLOOR", &holders[1], "1"]), &holders[1]);
    // Every holder keeps its own floor: a negative add past it is a purchase of its size, and
    // waits the same way (before, it was refused for good).
    let e = c.cmd(&["CTR.ADD", &holders[1], "-1"]);
    assert!(format!("{e:?}").contains("retry the add"), "{e:?}");
    assert_awaits_budget(e, &holders[1]);
    assert_eq!(c.cmd(&["CTR.GET", &holders[1]]), Value::Int(-225));
    assert_eq!(ints(&field(&mut c, "holder_refused_units")), [0, 2, 0, 0]);
    // A rebalance brings holder 1 to an even share of the whole budget (675 / 4 = 168, more
    // than the 2 units refused) from the largest spares: half the home's (first of equals),
    // then holder 2's; each giver's floor up, holder 1's down.
    wait_for(&mut c, "the move", |c| {
        ints(&info_field(c, "stock", "holder_budgets")) == [113, 168, 169, 225]
    });
    // A restock adds budget where it lands.
    assert_eq!(c.cmd(&["CTR.ADD", &holders[1], "5"]), Value::Int(-220));
    assert_eq!(ints(&field(&mut c, "holder_budgets")), [113, 173, 169, 225]);
    assert_eq!(field(&mut c, "value"), Value::Int(780));
    assert_eq!(field(&mut c, "headroom"), Value::Int(680));

    // The counter's floor is set before it spreads; the same count changes nothing; growing
    // adds holders with floor 0 and no budget.
    let e = c.q("CTR.FLOOR stock 0").error();
    assert!(e.contains("before it spreads"), "{e}");
    assert_eq!(c.q("CTR.SPREAD stock 4").array().len(), 4);
    assert_eq!(c.q("CTR.SPREAD stock 6").array().len(), 6);
    assert_eq!(
        ints(&field(&mut c, "holder_floors")),
        [887, -393, -169, -225, 0, 0]
    );
    assert_eq!(field(&mut c, "headroom"), Value::Int(680));
}

/// Finding 12b of the spread protocol's issue: a purchase larger than any one holder's share,
/// while the counter as a whole covers it, waits (`TRYAGAIN`, nothing recorded against its
/// token) until the rebalance gathers budget to its holder, and is then granted once. A
/// purchase beyond the whole headroom is refused for good once a round has seen it, and its
/// token replays the refusal.
#[test]
fn a_purchase_larger_than_any_share_is_granted_once_budget_gathers() {
    let server = Server::start();
    let mut c = server.conn();
    let holders = spread_floored(&mut c, "sale", 1000, 0, 8);
    assert_eq!(
        ints(&info_field(&mut c, "sale", "holder_budgets")),
        [125; 8]
    );
    let buy = ["CTR.DECRFLOOR", &holders[3], "200", "TOKEN", "big-1"];
    let (granted, waits) = purchase_until_final(&mut c, &buy);
    assert!(
        matches!(granted, Value::Int(_)),
        "granted at holder 3: {granted:?}"
    );
    let waited_here: i64 = server
        .info_field("ctr", "ctr_commands_waited")
        .parse()
        .unwrap_or(0);
    assert!(
        waits >= 1 || waited_here >= 1,
        "it waited for budget first (in the server, or by TRYAGAIN)"
    );
    assert_eq!(c.cmd(&buy), granted, "the token replays the grant");
    assert_eq!(c.q("CTR.GET sale"), Value::Int(800));

    // More than the whole headroom (800): final once a round saw it, and replayed.
    let too_much = ["CTR.DECRFLOOR", &holders[5], "801", "TOKEN", "big-2"];
    let (refused, _) = purchase_until_final(&mut c, &too_much);
    assert_eq!(refused, Value::Nil);
    assert_eq!(
        c.cmd(&too_much),
        Value::Nil,
        "the token replays the refusal"
    );
    // The whole rest, in one purchase: gathered and granted.
    let (all, _) = purchase_until_final(&mut c, &["CTR.DECRFLOOR", &holders[5], "800"]);
    assert!(matches!(all, Value::Int(_)), "{all:?}");
    assert_eq!(c.q("CTR.GET sale"), Value::Int(0));
    let (sold_out, _) = purchase_until_final(&mut c, &["CTR.DECRFLOOR", &holders[0], "1"]);
    assert_eq!(sold_out, Value::Nil);
}

/// A purchase that one rebalance round covers only in part (a holder that refused nothing gives
/// at most half its budget a round: 4 x 40 here, for 300 at a holder of 80) waits in the
/// server through as many rounds as it takes and is granted in one call, the client asking
/// once. Before, the round was the only one: the buyer blocked in the server kept no demand
/// alive, and the call ended in `TRYAGAIN` at `ctr.purchase-wait-ms` (200 ms) with 240 at its
/// holder, or, with the longer wait here, in a false final refusal (nil) once the round's view
/// of the headroom had aged.
#[test]
fn a_purchase_one_round_covers_in_part_is_granted_in_one_call() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CONFIG SET ctr.purchase-wait-ms 10000");
    let holders = spread_floored(&mut c, "sale", 400, 0, 5);
    assert_eq!(ints(&info_field(&mut c, "sale", "holder_budgets")), [80; 5]);
    let buy = ["CTR.DECRFLOOR", &holders[1], "300", "TOKEN", "t-300"];
    let granted = c.cmd(&buy);
    assert!(matches!(granted, Value::Int(_)), "granted: {granted:?}");
    assert_eq!(c.q("CTR.GET sale"), Value::Int(100));
    assert_eq!(c.cmd(&buy), granted, "its token replays the grant");
    let budgets = ints(&info_field(&mut c, "sale", "holder_budgets"));
    assert_eq!(
        budgets.iter().sum::<i64>(),
        100,
        "budget moved, never made: {budgets:?}"
    );
}

/// A negative `CTR.ADD` at a holder is a purchase of its size: larger than the holder's budget
/// while the counter as a whole covers it, it waits in the server for budget to gather, as
/// `CTR.DECRFLOOR` does, and is counted in one call; past the whole headroom it is refused
/// (nil). Before, it was refused at once, though the counter had the units.
#[test]
fn a_negative_add_at_a_holder_waits_for_budget_as_a_purchase_does() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CONFIG SET ctr.purchase-wait-ms 10000");
    let holders = spread_floored(&mut c, "sale", 400, 0, 5);
    let take = ["CTR.ADD", &holders[2], "-300", "TOKEN", "t-300"];
    let taken = c.cmd(&take);
    assert!(matches!(taken, Value::Int(_)), "counted: {taken:?}");
    assert_eq!(c.q("CTR.GET sale"), Value::Int(100));
    assert_eq!(c.cmd(&take), taken, "its token replays the add");
    let (beyond, _) = purchase_until_final(&mut c, &["CTR.ADD", &holders[2], "-101"]);
    assert_eq!(beyond, Value::Nil, "past the whole headroom");
    assert_eq!(c.q("CTR.GET sale"), Value::Int(100));
}

/// A floored home renamed: its holders still carry the old name, and their demand still
/// reaches the home under its new name (a purchase larger than a holder's share is gathered
/// and granted, not refused for good after its wait), also after restarts that forgot
/// everything held in memory.
#[test]
fn a_renamed_floored_home_still_gathers_budget_for_its_holders() {
    let mut server = Server::start_with(&["--appendonly", "yes"], &[]);
    let mut c = server.conn();
    let holders = spread_floored(&mut c, "shop", 600, 0, 4);
    assert_eq!(c.q("RENAME shop store"), Value::Simple("OK".into()));
    let (granted, waits) = purchase_until_final(&mut c, &["CTR.DECRFLOOR", &holders[2], "150"]);
    assert!(
        matches!(granted, Value::Int(_)),
        "{granted:?} after {waits} waits"
    );
    assert_eq!(c.q("CTR.GET store"), Value::Int(450));
    let buy_more = |server: &Server, holder: &str, left: i64| {
        let mut c = server.conn();
        let budget = ints(&info_field(&mut c, "store", "holder_budgets"));
        let amount = budget.iter().max().copied().unwrap_or(0) + 20;
        let (granted, waits) =
            purchase_until_final(&mut c, &["CTR.DECRFLOOR", holder, &amount.to_string()]);
        assert!(
            matches!(granted, Value::Int(_)),
            "{amount} after a restart: {granted:?} after {waits} waits"
        );
        assert_eq!(c.q("CTR.GET store"), Value::Int(left - amount));
        left - amount
    };
    // Restarts from an AOF rewritten with an RDB preamble (the type's load), then from one
    // without (the state's CTR.SETSTATE).
    let mut left = 450;
    for (preamble, holder) in [("yes", &holders[1]), ("no", &holders[3])] {
        let mut c = server.conn();
        c.cmd(&["CONFIG", "SET", "aof-use-rdb-preamble", preamble]);
        server.wait_persistence_idle();
        server.rewrite_aof();
        server.restart();
        left = buy_more(&server, holder, left);
    }
}

/// A key of another type where a floored counter's grow would plan its next holder: the grow
/// passes over that name (issue 34, item 2: a grow lists only names where no key sits) and
/// leaves the key as it is. Before, the grow was refused with WRONGTYPE until the key was gone.
#[test]
fn a_key_of_another_type_at_a_planned_name_is_passed_over_by_the_grow() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD s 10");
    c.q("CTR.FLOOR s 0");
    let first: Vec<String> = c
        .q("CTR.SPREAD s 2")
        .array()
        .iter()
        .map(Value::text)
        .collect();
    assert_eq!(ints(&info_field(&mut c, "s", "holder_budgets")), [5, 5]);
    // Holder names carry the spread's random id, so only a growth's next name can be known
    // in advance: `{ctr.<id>.2.<k>}s`, the first k whose slot no other holder (nor s) has.
    let id_tag = first[1].split(".1.").next().expect("a holder name");
    let taken: Vec<u16> = first.iter().map(|n| key_slot(n.as_bytes())).collect();
    let next = (0..)
        .map(|k| format!("{id_tag}.2.{k}}}s"))
        .find(|n| !taken.contains(&key_slot(n.as_bytes())))
        .expect("a free slot");
    c.cmd(&["SET", &next, "x"]);
    let grown: Vec<String> = c
        .q("CTR.SPREAD s 3")
        .array()
        .iter()
        .map(Value::text)
        .collect();
    assert_eq!(grown.len(), 3);
    assert_ne!(grown[2], next, "the taken name is passed over");
    assert!(grown[2].starts_with(&format!("{id_tag}.2.")), "{grown:?}");
    assert_eq!(
        c.cmd(&["GET", &next]),
        Value::Bulk(b"x".to_vec()),
        "the key at the taken name is left as it was"
    );
    assert_eq!(info_field(&mut c, "s", "floor"), Value::Int(0));
    assert_eq!(ints(&info_field(&mut c, "s", "holder_budgets")), [5, 5, 0]);
    assert_eq!(c.q("CTR.GET s"), Value::Int(10));
}

/// 8 buyers, 100 purchases each of 1-3 units over 16 holders, each retried by another router
/// (another process): every retry gets the first answer; the grants never exceed the
/// headroom; the total is exactly the start minus the grants and never below the floor. A
/// refusal while the headroom read right after it still covered the amount is a false
/// refusal (the headroom only shrinks here): counted and reported.
#[test]
fn concurrent_buyers_never_take_the_total_below_the_floor() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD sale 1000");
    c.q("CTR.FLOOR sale 100");
    c.q("CTR.SPREAD sale 16");
    let url = format!("redis://127.0.0.1:{}/", server.port);
    let buyers: Vec<_> = (0..8u64)
        .map(|b| {
            let url = url.clone();
            thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                let router = SpreadRouter::default();
                let mut seed = b * 7919 + 1;
                let (mut granted, mut refused, mut false_refusals) = (0i64, 0, 0);
                for i in 0..100 {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let amount = 1 + (seed >> 33) as i64 % 3;
                    let token = format!("buyer{b}-{i}");
                    let first = buy(&router, &mut con, amount, &token);
                    if first.is_none() {
                        refused += 1;
                        let total: i64 = redis::cmd("CTR.GET").arg("sale").query(&mut con).unwrap();
                        false_refusals += i64::from(total - 100 >= amount);
                    }
                    let retry = buy(&SpreadRouter::default(), &mut con, amount, &token);
                    assert_eq!(retry, first, "{token}");
                    granted += first.map_or(0, |_| amount);
                }
                (granted, refused, false_refusals)
            })
        })
        .collect();
    let (mut granted, mut refused, mut false_refusals) = (0, 0, 0);
    for buyer in buyers {
        let (g, r, f) = buyer.join().unwrap();
        (granted, refused, false_refusals) = (granted + g, refused + r, false_refusals + f);
    }
    eprintln!(
        "floored spread, 16 holders, 800 purchases: {granted} units granted of 900, \
         {refused} purchases refused, {false_refusals} of them while the headroom covered them"
    );
    assert!(granted <= 900, "granted {granted} of 900");
    assert_eq!(c.q("CTR.GET sale"), Value::Int(1000 - granted));
    let budgets = ints(&info_field(&mut c, "sale", "holder_budgets"));
    assert!(budgets.iter().all(|&b| b >= 0), "{budgets:?}");
    assert_eq!(budgets.iter().sum::<i64>(), 900 - granted);
    // Every holder is visited before a refusal: only a purchase larger than what each holder
    // held at its visit is refused falsely (fragmentation near the end of the stock).
    assert!(false_refusals <= refused);
    assert!(
        900 - granted < 16 * 3,
        "the stock is sold down to fragments"
    );
}

/// A buyer that only ever asks holder 1 (as a client that knows one holder would): each of its
/// refusals is demand there, and the rebalancer moves budget to it from the holders that
/// refuse nothing, until almost everything is sold through holder 1.
#[test]
fn budget_follows_demand() {
    let server = Server::start();
    let mut c = server.conn();
    let holders = spread_floored(&mut c, "hot", 400, 0, 4);
    let (mut granted, mut refused) = (0, 0);
    let start = std::time::Instant::now();
    while granted < 397 {
        assert!(
            start.elapsed().as_secs() < 20,
            "granted {granted}, refused {refused}"
        );
        match c.cmd(&["CTR.DECRFLOOR", &holders[1], "1"]) {
            Value::Int(_) => granted += 1,
            _ => {
                refused += 1;
                thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
    // Each giver keeps at least 1 unit it cannot halve.
    assert_eq!(c.q("CTR.GET hot"), Value::Int(400 - granted));
    let budgets = ints(&info_field(&mut c, "hot", "holder_budgets"));
    assert_eq!(budgets.iter().sum::<i64>(), 400 - granted);
    assert!(budgets.iter().all(|&b| b >= 0), "{budgets:?}");
    assert_eq!(info_field(&mut c, "hot", "units_in_flight"), Value::Int(0));
}

/// Shrinking a floored spread counter folds the removed holders' values and floors back into
/// the home (on one server within the command): the floor, the total and the headroom stay.
#[test]
fn shrinking_keeps_the_floor_and_the_headroom() {
    let server = Server::start();
    let mut c = server.conn();
    let holders = spread_floored(&mut c, "s", 100, 10, 4);
    // Holder 2's share of the headroom 90 is 22: 17 left to sell there after 5.
    assert_eq!(c.cmd(&["CTR.DECRFLOOR", &holders[2], "5"]), Value::Int(17));
    assert_eq!(c.q("CTR.SPREAD s 2").array().len(), 2);
    assert_eq!(info_field(&mut c, "s", "floor"), Value::Int(10));
    assert_eq!(c.q("CTR.GET s"), Value::Int(95));
    assert_eq!(info_field(&mut c, "s", "headroom"), Value::Int(85));
    let floors = ints(&info_field(&mut c, "s", "holder_floors"));
    assert_eq!(floors.iter().sum::<i64>(), 10, "{floors:?}");
    let budgets = ints(&info_field(&mut c, "s", "holder_budgets"));
    assert_eq!(budgets.iter().sum::<i64>(), 85, "{budgets:?}");
}
