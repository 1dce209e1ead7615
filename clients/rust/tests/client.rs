//! The client crate against the module: every method on RESP2 and RESP3, sync and async,
//! standalone and on a 3-master cluster; the error kinds; the coalescing writer's flushes,
//! exactly once when replies are lost.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::cluster::Cluster;
use common::{Frozen, Server};
use redis_ctr_client::spread::holder_for_token;
use redis_ctr_client::{
    AddOptions, AsyncCtrCommands, CoalescingWriter, CounterInfo, CtrCommands, CtrError,
    CtrPipelineCommands, IncrexOptions, Increxed, ModuleError, PncInfo, Reconciled, Source,
    SpreadRouter, Throttled, WriterConfig, WriterError,
};

const BUCKET_MS: i64 = 100;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

fn url(port: u16, resp3: bool) -> String {
    let protocol = if resp3 { "resp3" } else { "resp2" };
    format!("redis://127.0.0.1:{port}/?protocol={protocol}")
}

fn module_error<T: std::fmt::Debug>(result: Result<T, CtrError>) -> ModuleError {
    match result {
        Err(CtrError::Module(kind, text)) => {
            assert!(!text.is_empty());
            kind
        }
        other => panic!("expected a module error, got {other:?}"),
    }
}

/// Every sync method once, keys under hash tag `tag`; the floored counter's info (without the
/// add rate, a local observation) and a PNC.INFO.
fn exercise<C: CtrCommands>(con: &mut C, tag: &str) -> (CounterInfo, PncInfo) {
    let k = |name: &str| format!("{{{tag}}}:{name}");
    assert_eq!(con.ctr_add(k("views"), 41).unwrap(), Some(41));
    let ttl = AddOptions::new().ex(60);
    assert_eq!(con.ctr_add_with(k("views"), 1, &ttl).unwrap(), Some(42));
    assert_eq!(con.ctr_get(k("views")).unwrap(), 42);
    assert_eq!(con.ctr_mget(&[k("views"), k("none")]).unwrap(), [42, 0]);
    let once = AddOptions::new().token("order-1").at(now_ms());
    for _ in 0..3 {
        assert_eq!(con.ctr_add_with(k("paid"), 5, &once).unwrap(), Some(5));
    }
    assert_eq!(con.ctr_clear_with_token(k("paid"), "c1").unwrap(), 5);
    assert_eq!(con.ctr_clear_with_token(k("paid"), "c1").unwrap(), 0);
    assert_eq!(con.ctr_clear(k("views")).unwrap(), 42);

    con.ctr_add(k("stock"), 5).unwrap();
    con.ctr_floor(k("stock"), Some(0)).unwrap();
    assert_eq!(
        con.ctr_decrfloor_with(k("stock"), 4, "o1", None).unwrap(),
        Some(1)
    );
    assert_eq!(
        con.ctr_decrfloor_with(k("stock"), 4, "o2", None).unwrap(),
        None
    );
    assert_eq!(con.ctr_decrfloor(k("stock"), 2).unwrap(), None);
    assert_eq!(con.ctr_add(k("stock"), -2).unwrap(), None);
    let mut info = con
        .ctr_info(k("stock"))
        .unwrap()
        .expect("the counter exists");
    assert_eq!(
        (info.value, info.floor, info.budgets.clone()),
        (1, Some(0), Some(vec![1]))
    );
    assert_eq!(info.encoding, "boxed");
    info.add_rate = 0;
    assert_eq!(con.ctr_info(k("none")).unwrap(), None);
    con.ctr_floor(k("stock"), None).unwrap();
    assert_eq!(con.ctr_info(k("stock")).unwrap().unwrap().floor, None);

    assert_eq!(
        con.ctr_reconcile(k("views"), 7, None).unwrap(),
        Reconciled {
            value: 7,
            drift: -7
        }
    );
    redis::cmd("XADD")
        .arg(&[k("log"), "*".into(), "n".into(), "1".into()])
        .exec(con)
        .unwrap();
    let counted = con
        .ctr_reconcile_from(k("counted"), Source::Stream, k("log"), None)
        .unwrap();
    assert_eq!(
        counted,
        Reconciled {
            value: 1,
            drift: -1
        }
    );

    assert_eq!(con.pnc_add(k("likes"), 10).unwrap(), 10);
    assert_eq!(con.pnc_add(k("likes"), -3).unwrap(), 7);
    assert_eq!(con.pnc_get(k("likes")).unwrap(), 7);
    let state = con.pnc_state(k("likes")).unwrap().expect("a state");
    assert_eq!(con.pnc_state(k("none")).unwrap(), None);
    assert_eq!(con.pnc_merge(k("copy"), &state).unwrap(), 7);
    let pnc = con.pnc_info(k("likes")).unwrap();
    assert_eq!(pnc.home, pnc.replica_id);
    assert_eq!((pnc.replicas[0].p, pnc.replicas[0].n), (10, 3));
    assert_eq!(con.pnc_clear(k("likes")).unwrap(), 7);
    (info, pnc)
}

#[test]
fn every_method_replies_the_same_on_resp2_and_resp3() {
    let server = Server::start();
    let replies: Vec<(CounterInfo, PncInfo)> = [false, true]
        .into_iter()
        .map(|resp3| {
            let client = redis::Client::open(url(server.port, resp3)).unwrap();
            exercise(&mut client.get_connection().unwrap(), &format!("p{resp3}"))
        })
        .collect();
    assert_eq!(replies[0], replies[1]);
}

/// CTR.CEIL, CTR.INCREX and CTR.REFUND through the typed calls, on RESP2 and RESP3, and queued
/// on a pipeline.
#[test]
fn bounds_increx_and_refunds() {
    let server = Server::start();
    for resp3 in [false, true] {
        let client = redis::Client::open(url(server.port, resp3)).unwrap();
        let mut con = client.get_connection().unwrap();
        let (rl, stock) = (format!("rl:{resp3}"), format!("stock:{resp3}"));
        let capped = IncrexOptions::new().ubound(2).ex(60).enx();
        let first = con.ctr_increx(&rl, &capped.clone().token("a")).unwrap();
        assert_eq!(
            first,
            Increxed {
                value: 1,
                applied: 1
            }
        );
        assert_eq!(
            con.ctr_increx(&rl, &capped.clone().token("b"))
                .unwrap()
                .value,
            2
        );
        assert_eq!(
            con.ctr_increx(&rl, &capped.clone().token("c"))
                .unwrap()
                .applied,
            0
        );
        assert_eq!(
            con.ctr_increx(&rl, &capped.clone().token("a")).unwrap(),
            first
        );
        let clamped = IncrexOptions::new().by(5).ubound(4).saturate();
        assert_eq!(
            con.ctr_increx(&rl, &clamped).unwrap(),
            Increxed {
                value: 4,
                applied: 2
            }
        );
        let crossed = IncrexOptions::new().lbound(3).ubound(2);
        assert_eq!(
            module_error(con.ctr_increx(&rl, &crossed)),
            ModuleError::Syntax
        );
        assert_eq!(con.ctr_add(&stock, 10).unwrap(), Some(10));
        con.ctr_ceil(&stock, Some(10)).unwrap();
        assert_eq!(con.ctr_add(&stock, 1).unwrap(), None, "the ceiling refuses");
        assert_eq!(
            module_error(con.ctr_ceil(&stock, Some(9))),
            ModuleError::AboveCeiling
        );
        let info = con.ctr_info(&stock).unwrap().unwrap();
        assert_eq!(
            (info.ceiling, info.ceiling_budgets),
            (Some(10), Some(vec![0]))
        );
        assert_eq!(
            con.ctr_decrfloor_with(&stock, 4, "o1", None).unwrap(),
            Some(6)
        );
        assert_eq!(con.ctr_refund(&stock, "o1").unwrap(), Some(4));
        assert_eq!(con.ctr_refund(&stock, "o1").unwrap(), Some(4), "a retry");
        assert_eq!(con.ctr_refund(&stock, "o2").unwrap(), None);
        let (none, increxed, refunded): ((), Increxed, Option<i64>) = redis::pipe()
            .ctr_ceil(&stock, None)
            .ctr_increx(&stock, &IncrexOptions::new().by(2))
            .ctr_refund(&stock, "o1")
            .query_ctr(&mut con)
            .unwrap();
        assert_eq!(
            (none, increxed, refunded),
            (
                (),
                Increxed {
                    value: 12,
                    applied: 2
                },
                Some(4)
            )
        );
    }
}

/// The key's TTL in ms (`PTTL`: -1 without one, -2 when missing).
fn pttl<C: redis::ConnectionLike>(con: &mut C, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

/// The key's absolute expiry in unix ms (`PEXPIRETIME`: -1 without one, -2 when missing).
fn pexpiretime<C: redis::ConnectionLike>(con: &mut C, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap()
}

/// `CTR.ADD`'s expiry options through `AddOptions`: each time form on create, ignored on an
/// existing key without `enx`; `enx` setting a TTL on a key without one and never changing
/// one; `persist` removing it; the combinations the module refuses changing nothing.
#[test]
fn add_expiry_options_set_keep_and_remove_the_ttl() {
    let server = Server::start();
    let client = redis::Client::open(url(server.port, true)).unwrap();
    let mut con = client.get_connection().unwrap();
    let c = &mut con;
    let now = now_ms();
    let add = |c: &mut redis::Connection, key: &str, options: &AddOptions| {
        c.ctr_add_with(key, 1, options).unwrap().unwrap()
    };

    // On create: each form.
    assert_eq!(add(c, "ex", &AddOptions::new().ex(60)), 1);
    assert!(
        (59_000..=60_000).contains(&pttl(c, "ex")),
        "{}",
        pttl(c, "ex")
    );
    assert_eq!(add(c, "px", &AddOptions::new().px(90_000)), 1);
    assert!((89_000..=90_000).contains(&pttl(c, "px")));
    let at_s = now / 1000 + 120;
    assert_eq!(add(c, "exat", &AddOptions::new().exat(at_s)), 1);
    assert_eq!(pexpiretime(c, "exat"), at_s * 1000);
    let at_ms = now + 150_123;
    let tokened = AddOptions::new().token("t").at(now).pxat(at_ms);
    assert_eq!(add(c, "pxat", &tokened), 1);
    assert_eq!(add(c, "pxat", &tokened), 1, "a retry");
    assert_eq!(pexpiretime(c, "pxat"), at_ms);
    // The last time given is the one sent.
    assert_eq!(add(c, "last", &AddOptions::new().ex(5).px(70_000)), 1);
    assert!((69_000..=70_000).contains(&pttl(c, "last")));
    // Without ENX, on an existing key: the TTL it has is kept, none given to one without.
    assert_eq!(add(c, "pxat", &AddOptions::new().pxat(at_ms + 60_000)), 2);
    assert_eq!(pexpiretime(c, "pxat"), at_ms);
    c.ctr_add("plain", 1).unwrap();
    assert_eq!(add(c, "plain", &AddOptions::new().exat(at_s)), 2);
    assert_eq!(pttl(c, "plain"), -1);
    // A time already past: the add replies, and the key is gone.
    assert_eq!(add(c, "past", &AddOptions::new().pxat(now - 1000)), 1);
    assert_eq!(pttl(c, "past"), -2);
    let zero = c.ctr_add_with("past", 1, &AddOptions::new().exat(0));
    assert_eq!(module_error(zero), ModuleError::InvalidExpire);

    // ENX: a key written once without a TTL is repaired; a TTL it has is never changed.
    c.ctr_add("window", 1).unwrap();
    assert_eq!(add(c, "window", &AddOptions::new().ex(60).enx()), 2);
    assert!((59_000..=60_000).contains(&pttl(c, "window")));
    let kept = pexpiretime(c, "window");
    for options in [
        AddOptions::new().ex(5).enx(),
        AddOptions::new().px(5_000).enx(),
        AddOptions::new().exat(now / 1000 + 600).enx(),
        AddOptions::new().pxat(now + 600_000).enx(),
    ] {
        add(c, "window", &options);
        assert_eq!(pexpiretime(c, "window"), kept, "{options:?}");
    }
    assert_eq!(c.ctr_get("window").unwrap(), 6);
    for (key, options, expected) in [
        (
            "enx-exat",
            AddOptions::new().exat(at_s + 1).enx(),
            (at_s + 1) * 1000,
        ),
        (
            "enx-pxat",
            AddOptions::new().pxat(at_ms + 1).enx(),
            at_ms + 1,
        ),
    ] {
        c.ctr_add(key, 1).unwrap();
        assert_eq!(add(c, key, &options), 2);
        assert_eq!(pexpiretime(c, key), expected, "{key}");
    }
    assert_eq!(add(c, "enx-new", &AddOptions::new().px(70_000).enx()), 1);
    assert!((69_000..=70_000).contains(&pttl(c, "enx-new")));

    // PERSIST removes the TTL (none to remove: nothing to do).
    assert_eq!(add(c, "window", &AddOptions::new().persist()), 7);
    assert_eq!(pttl(c, "window"), -1);
    assert_eq!(add(c, "window", &AddOptions::new().persist()), 8);
    assert_eq!(pttl(c, "window"), -1);

    // What the module refuses: nothing changes (as for IncrexOptions, refused by the server).
    add(c, "window", &AddOptions::new().ex(60).enx());
    let ttl = pexpiretime(c, "window");
    for options in [
        AddOptions::new().ex(60).persist(),
        AddOptions::new().pxat(now + 60_000).persist(),
        AddOptions::new().enx(),
        AddOptions::new().persist().enx(),
        AddOptions::new().token("bad").enx(),
    ] {
        let refused = c.ctr_add_with("window", 1, &options);
        assert_eq!(module_error(refused), ModuleError::Syntax, "{options:?}");
        let missing = c.ctr_add_with("never", 1, &options);
        assert_eq!(module_error(missing), ModuleError::Syntax, "{options:?}");
    }
    assert_eq!(c.ctr_get("window").unwrap(), 9);
    assert_eq!(pexpiretime(c, "window"), ttl);
    assert_eq!(pttl(c, "never"), -2);

    // Queued on a pipeline, and on an async connection.
    let (first, second): (Option<i64>, Option<i64>) = redis::pipe()
        .ctr_add_with("window", 1, &AddOptions::new().persist())
        .ctr_add_with("window", 1, &AddOptions::new().exat(at_s).enx())
        .query_ctr(c)
        .unwrap();
    assert_eq!((first, second), (Some(10), Some(11)));
    assert_eq!(pexpiretime(c, "window"), at_s * 1000);
    block_on(async {
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let persist = AddOptions::new().persist();
        assert_eq!(
            con.ctr_add_with("window", 1, &persist).await.unwrap(),
            Some(12)
        );
        let repair = AddOptions::new().pxat(at_ms).enx();
        assert_eq!(
            con.ctr_add_with("window", 1, &repair).await.unwrap(),
            Some(13)
        );
    });
    assert_eq!(pexpiretime(c, "window"), at_ms);
}

/// An add with an expiry option (`enx` and `persist` too) goes to the home key of a spread
/// counter, through the sync and async routers: a TTL on a holder would expire it alone.
#[test]
fn router_adds_that_change_the_ttl_go_to_the_home_key() {
    let server = Server::start();
    let client = redis::Client::open(url(server.port, false)).unwrap();
    let mut con = client.get_connection().unwrap();
    let c = &mut con;
    let router = SpreadRouter::default();
    let holders = router.spread(c, "hot", 4).unwrap();
    for _ in 0..100 {
        router.add(c, "hot", 1, &AddOptions::new()).unwrap();
    }
    let before = holder_values(c, "hot");
    assert!(before[1..].iter().all(|&v| v > 0), "{before:?}");
    let at_ms = now_ms() + 300_000;
    router
        .add(c, "hot", 1, &AddOptions::new().pxat(at_ms).enx())
        .unwrap();
    assert_eq!(pexpiretime(c, "hot"), at_ms);
    let kept = AddOptions::new().ex(5).enx().token("ttl-1");
    router.add(c, "hot", 1, &kept).unwrap();
    assert_eq!(pexpiretime(c, "hot"), at_ms, "has one: kept");
    let persist = AddOptions::new().persist().token("ttl-2");
    router.add(c, "hot", 1, &persist).unwrap();
    assert_eq!(pttl(c, "hot"), -1);
    block_on(async {
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let router = SpreadRouter::default();
        let repair = AddOptions::new().exat(at_ms / 1000).enx();
        router.add_async(&mut con, "hot", 1, &repair).await.unwrap();
        assert_eq!(
            pexpiretime(&mut client.get_connection().unwrap(), "hot"),
            at_ms / 1000 * 1000
        );
        let persist = AddOptions::new().persist();
        router
            .add_async(&mut con, "hot", 1, &persist)
            .await
            .unwrap();
    });
    assert_eq!(pttl(c, "hot"), -1);
    let after = holder_values(c, "hot");
    assert_eq!(after[1..], before[1..], "no holder was written");
    assert_eq!(after[0], before[0] + 5);
    for holder in &holders[1..] {
        assert_eq!(pttl(c, holder), -1, "{holder}");
    }
    assert_eq!(c.ctr_get("hot").unwrap(), 105);
}

#[test]
fn throttle_and_window_on_resp2_and_resp3() {
    let server = Server::start();
    for resp3 in [false, true] {
        let client = redis::Client::open(url(server.port, resp3)).unwrap();
        let mut con = client.get_connection().unwrap();
        let key = format!("limiter:{resp3}");
        let now = now_ms();
        let rate = (4, 1, 60);
        let first = con
            .ctr_throttle_with(&key, rate, 1, "req-1", Some(now))
            .unwrap();
        assert_eq!(
            first,
            Throttled {
                limited: false,
                limit: 5,
                remaining: 4,
                retry_after: -1,
                reset_after: 60,
            }
        );
        let retry = con.ctr_throttle_with(&key, rate, 1, "req-1", Some(now));
        assert_eq!(retry.unwrap(), first, "a retry replays and takes nothing");
        assert_eq!(con.ctr_throttle(&key, rate, 0).unwrap().remaining, 4);
        assert!(con.ctr_throttle(&key, rate, 9).unwrap().limited);
        let bad = con.ctr_throttle(&key, (-1, 1, 60), 1);
        assert_eq!(module_error(bad), ModuleError::InvalidLimit);

        let hits = format!("hits:{resp3}");
        con.ctr_window(&hits, Some(10_000), Some(10)).unwrap();
        let at = |ms: i64| AddOptions::new().at(now + ms);
        assert_eq!(con.ctr_add_with(&hits, 3, &at(0)).unwrap(), Some(3));
        assert_eq!(con.ctr_add_with(&hits, 2, &at(5_000)).unwrap(), Some(5));
        assert_eq!(con.ctr_add_with(&hits, 1, &at(10_000)).unwrap(), Some(3));
        let info = con.ctr_info(&hits).unwrap().unwrap();
        assert_eq!(
            (info.window_ms, info.window_buckets),
            (Some(10_000), Some(10))
        );
        con.ctr_window(&hits, None, None).unwrap();
        assert_eq!(con.ctr_info(&hits).unwrap().unwrap().window_ms, None);
        let floored = con.ctr_floor(&hits, Some(-5));
        assert!(floored.is_ok(), "no window any more: a floor is taken");
        con.ctr_window(&hits, Some(10_000), None).unwrap();
        assert_eq!(
            module_error(con.ctr_floor(&hits, Some(-6))),
            ModuleError::LimitRefused
        );
    }
}

#[test]
fn the_module_errors_have_their_kinds() {
    let server = Server::start_with(&[], &["bucket-ms", &BUCKET_MS.to_string()]);
    let mut con = redis::Client::open(url(server.port, true))
        .unwrap()
        .get_connection()
        .unwrap();
    let c = &mut con;
    c.ctr_add("max", i64::MAX).unwrap();
    assert_eq!(module_error(c.ctr_add("max", 1)), ModuleError::Overflow);
    assert_eq!(
        module_error(c.ctr_floor("f", Some(5))),
        ModuleError::BelowFloor
    );
    let old = AddOptions::new().token("t").at(1);
    assert_eq!(
        module_error(c.ctr_add_with("k", 1, &old)),
        ModuleError::TokenTooOld
    );
    let ahead = AddOptions::new().at(now_ms() + 86_400_000);
    assert_eq!(
        module_error(c.ctr_add_with("k", 1, &ahead)),
        ModuleError::TooFarInFuture
    );
    let empty = AddOptions::new().token("");
    assert_eq!(
        module_error(c.ctr_add_with("k", 1, &empty)),
        ModuleError::InvalidToken
    );
    assert_eq!(
        module_error(c.ctr_decrfloor("k", 0)),
        ModuleError::InvalidAmount
    );
    let no_ttl = AddOptions::new().px(0);
    assert_eq!(
        module_error(c.ctr_add_with("e", 1, &no_ttl)),
        ModuleError::InvalidExpire
    );
    let set_at = c.ctr_reconcile_from("k", Source::Set, "s", Some(0));
    assert_eq!(module_error(set_at), ModuleError::Syntax);
    let order = AddOptions::new().token("order-1");
    c.ctr_add_with("reused", 2, &order).unwrap();
    assert_eq!(
        module_error(c.ctr_add_with("reused", 3, &order)),
        ModuleError::TokenReused
    );
    redis::cmd("SET").arg(&["str", "x"]).exec(c).unwrap();
    assert_eq!(module_error(c.ctr_get("str")), ModuleError::WrongType);
    assert_eq!(
        module_error(c.pnc_merge("m", b"\x02\x00")),
        ModuleError::InvalidState
    );

    let watermark = || (now_ms() / BUCKET_MS - 1) * BUCKET_MS;
    let late = c.ctr_reconcile("r", 1, Some(watermark()));
    assert_eq!(module_error(late), ModuleError::HistoryMissing);
    c.ctr_reconcile("r", 0, None).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    let w = watermark();
    assert_eq!(c.ctr_reconcile("r", 5, Some(w)).unwrap().value, 5);
    let stamped = AddOptions::new().at(w);
    assert_eq!(
        module_error(c.ctr_add_with("r", 1, &stamped)),
        ModuleError::LateAdd
    );
    let off_grid = c.ctr_reconcile("r", 5, Some(w + 1));
    assert_eq!(module_error(off_grid), ModuleError::BadWatermark);
    // Issue 26, finding 8: these were plain redis errors.
    let holders = c.ctr_spread("home", 3).unwrap();
    assert_eq!(
        module_error(c.ctr_floor("home", Some(0))),
        ModuleError::FlooredSpread
    );
    c.ctr_add("floored", 5).unwrap();
    c.ctr_floor("floored", Some(2)).unwrap();
    assert_eq!(
        module_error(c.ctr_clear("floored")),
        ModuleError::BelowFloor
    );
    let negative = AddOptions::new().at(-1);
    assert_eq!(
        module_error(c.ctr_add_with("k", 1, &negative)),
        ModuleError::InvalidTime
    );
    assert_eq!(
        module_error(c.ctr_clear(&holders[1])),
        ModuleError::UseHomeKey
    );
    assert_eq!(c.ctr_get("floored").unwrap(), 5);
    // Other server errors stay redis errors.
    let unknown: Result<i64, CtrError> = redis::cmd("CTR.NOSUCH")
        .query::<i64>(c)
        .map_err(CtrError::from);
    assert!(matches!(unknown, Err(CtrError::Redis(_))), "{unknown:?}");
    assert_eq!(
        ModuleError::from_text(
            "ERR PNC.ADD must run on a primary: a replica has no replica id of its own"
        ),
        Some(ModuleError::NotPrimary)
    );
}

/// Every async method once (fewer asserts than the sync twin: the calls and parsers are
/// shared, what differs is the transport).
async fn exercise_async<C: AsyncCtrCommands>(con: &mut C, tag: &str) {
    let k = |name: &str| format!("{{{tag}}}:{name}");
    assert_eq!(con.ctr_add(k("v"), 2).await.unwrap(), Some(2));
    let once = AddOptions::new().token("t");
    assert_eq!(con.ctr_add_with(k("v"), 1, &once).await.unwrap(), Some(3));
    assert_eq!(con.ctr_add_with(k("v"), 1, &once).await.unwrap(), Some(3));
    assert_eq!(con.ctr_get(k("v")).await.unwrap(), 3);
    assert_eq!(con.ctr_mget(&[k("v"), k("w")]).await.unwrap(), [3, 0]);
    con.ctr_floor(k("v"), Some(1)).await.unwrap();
    assert_eq!(con.ctr_decrfloor(k("v"), 2).await.unwrap(), Some(1));
    assert_eq!(
        con.ctr_decrfloor_with(k("v"), 1, "d", None).await.unwrap(),
        None
    );
    let info = con.ctr_info(k("v")).await.unwrap().unwrap();
    assert_eq!((info.value, info.floor), (1, Some(1)));
    con.ctr_floor(k("v"), None).await.unwrap();
    assert_eq!(con.ctr_clear(k("v")).await.unwrap(), 1);
    assert_eq!(con.ctr_clear_with_token(k("v"), "c").await.unwrap(), 0);
    assert_eq!(con.ctr_reconcile(k("v"), 4, None).await.unwrap().value, 4);
    // A missing source is refused (a mistyped name would set the counter to 0).
    let missing = con.ctr_reconcile_from(k("n"), Source::Set, k("s"), None);
    assert_eq!(module_error(missing.await), ModuleError::SourceMissing);
    let added: i64 = redis::cmd("SADD")
        .arg(k("s"))
        .arg("member")
        .query_async(con)
        .await
        .unwrap();
    assert_eq!(added, 1);
    let from = con.ctr_reconcile_from(k("n"), Source::Set, k("s"), None);
    assert_eq!(
        from.await.unwrap(),
        Reconciled {
            value: 1,
            drift: -1
        }
    );
    assert_eq!(con.pnc_add(k("l"), 5).await.unwrap(), 5);
    assert_eq!(con.pnc_get(k("l")).await.unwrap(), 5);
    let state = con.pnc_state(k("l")).await.unwrap().unwrap();
    assert_eq!(con.pnc_merge(k("m"), &state).await.unwrap(), 5);
    assert_eq!(con.pnc_info(k("l")).await.unwrap().replicas[0].p, 5);
    assert_eq!(con.pnc_clear(k("l")).await.unwrap(), 5);
    let refused = con.ctr_floor(k("v"), Some(100)).await;
    assert_eq!(module_error(refused), ModuleError::BelowFloor);
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn async_methods_on_resp2_and_resp3() {
    let server = Server::start();
    block_on(async {
        for resp3 in [false, true] {
            let client = redis::Client::open(url(server.port, resp3)).unwrap();
            let mut con = client.get_multiplexed_async_connection().await.unwrap();
            exercise_async(&mut con, &format!("a{resp3}")).await;
        }
    });
}

#[test]
fn cluster_sync_async_and_writer() {
    let cluster = Cluster::start(3, &[]);
    let seeds = vec![url(cluster.nodes[0].port, true)];
    let client = redis::cluster::ClusterClient::new(seeds.clone()).unwrap();
    let mut con = client.get_connection().unwrap();
    exercise(&mut con, "c1");
    block_on(async {
        let mut con = client.get_async_connection().await.unwrap();
        exercise_async(&mut con, "c2").await;
    });

    // Counters on every master, each readable on the master of its slot.
    let keys: Vec<String> = (0..30).map(|i| format!("spread:{i}")).collect();
    let masters: std::collections::HashSet<usize> = keys
        .iter()
        .map(|k| cluster.owner(common::cluster::key_slot(k.as_bytes())))
        .collect();
    assert_eq!(masters.len(), 3);

    let config = WriterConfig {
        flush_every: 500,
        ..WriterConfig::default()
    };
    let writer = CoalescingWriter::new(
        redis::cluster::ClusterClient::new(seeds.clone()).unwrap(),
        config,
    );
    for n in 0..3000 {
        writer.add(&keys[n % keys.len()], 1).unwrap();
    }
    let stats = writer.stats();
    writer.close().unwrap();
    for key in &keys {
        let node = &cluster.nodes[cluster.owner(common::cluster::key_slot(key.as_bytes()))];
        let mut direct = redis::Client::open(url(node.port, false)).unwrap();
        assert_eq!(direct.ctr_get(key).unwrap(), 100, "{key}");
    }
    assert_eq!(stats.adds, 3000);

    // A writer's sums through shrinks and grows of a spread counter: none lost.
    let writer_client = redis::cluster::ClusterClient::new(seeds.clone()).unwrap();
    check_writer_through_shrinks(writer_client, &mut con, "folds", false);

    // A spread counter: holders on every master, written over all of them, the total exact.
    let holders = check_spread_writes(&mut con, "hot");
    check_spread_purchases(&mut con, "stock");
    con.ctr_floor("floored", Some(0)).unwrap();
    // A floored counter spreads across masters too (its budget moves are transfers).
    assert_eq!(con.ctr_spread("floored", 2).unwrap().len(), 2);
    let masters: std::collections::HashSet<usize> = holders
        .iter()
        .map(|h| cluster.owner(common::cluster::key_slot(h.as_bytes())))
        .collect();
    assert_eq!(masters.len(), 3);
}

fn holder_values<C: CtrCommands>(con: &mut C, key: &str) -> Vec<i64> {
    let info = con.ctr_info(key).unwrap().unwrap();
    info.holder_values.unwrap()
}

/// On a fresh key: spread to 4; untokened adds reach every holder; tokened adds, each sent
/// twice by two routers (a retry, another process), go to the token's holder and count once;
/// the total read on the home key is exact. The holders' names.
fn check_spread_writes<C: CtrCommands + 'static>(con: &mut C, key: &str) -> Vec<String> {
    let router = SpreadRouter::default();
    let holders = router.spread(con, key, 4).unwrap();
    for _ in 0..200 {
        router.add(con, key, 1, &AddOptions::new()).unwrap();
    }
    assert!(holder_values(con, key).iter().all(|&v| v > 0));
    let tokens: Vec<String> = (0..40).map(|i| format!("order-{i}")).collect();
    for token in &tokens {
        let options = AddOptions::new().token(token);
        let first = router.add(con, key, 10, &options).unwrap();
        assert_eq!(router.add(con, key, 10, &options).unwrap(), first);
        let other = SpreadRouter::default();
        assert_eq!(other.add(con, key, 10, &options).unwrap(), first);
    }
    assert_eq!(con.ctr_get(key).unwrap(), 200 + 400);
    let names: Vec<Vec<u8>> = holders.iter().map(|h| h.clone().into_bytes()).collect();
    for holder in &holders {
        let expected = tokens
            .iter()
            .filter(|t| holder_for_token(&names, t.as_bytes()) == holder.as_bytes())
            .count() as i64;
        let info = con.ctr_info(holder).unwrap();
        assert_eq!(info.map_or(0, |i| i.tokens), expected, "{holder}");
    }
    holders
}

/// Purchases by the probe rule on a fresh spread counter with 3 units on each of 4 holders: 12
/// granted out of 20, none twice; every retry (by this router and another) replays the first
/// answer, even after a restock; a purchase larger than any holder's stock is refused; every
/// grant is refunded once.
fn check_spread_purchases<C: CtrCommands>(con: &mut C, key: &str) {
    let router = SpreadRouter::default();
    let holders = router.spread(con, key, 4).unwrap();
    for holder in &holders {
        con.ctr_add(holder, 3).unwrap();
    }
    let tokens: Vec<String> = (0..20).map(|i| format!("buy-{i}")).collect();
    let buy = |router: &SpreadRouter, con: &mut C, token: &str| {
        router
            .decrfloor(con, key, 1, Some(token.as_bytes()), None)
            .unwrap()
    };
    let first: Vec<Option<i64>> = tokens.iter().map(|t| buy(&router, con, t)).collect();
    assert_eq!(first.iter().filter(|v| v.is_some()).count(), 12);
    assert_eq!(con.ctr_get(key).unwrap(), 0);
    con.ctr_add(&holders[1], 50).unwrap(); // a restock: refusals stay refusals for their token
    for (token, first) in tokens.iter().zip(&first) {
        assert_eq!(buy(&router, con, token), *first, "{token}");
        assert_eq!(buy(&SpreadRouter::default(), con, token), *first, "{token}");
    }
    assert_eq!(con.ctr_get(key).unwrap(), 50);
    assert!(buy(&router, con, "after-restock").is_some());
    assert_eq!(router.decrfloor(con, key, 51, None, None).unwrap(), None);
    // Every order cancelled: each grant comes back once, to the holder that made it, also when
    // another router (another process) retries the refund; a refusal has nothing to give back.
    for (token, first) in tokens.iter().zip(&first) {
        let refunded = router.refund(con, key, token.as_bytes(), None).unwrap();
        assert_eq!(refunded, first.map(|_| 1), "{token}");
        let again = SpreadRouter::default().refund(con, key, token.as_bytes(), None);
        assert_eq!(again.unwrap(), refunded, "{token}");
    }
    assert_eq!(con.ctr_get(key).unwrap(), 49 + 12);
}

#[test]
fn spread_counters_reconcile_start_and_their_errors() {
    let server = Server::start_with(&[], &["bucket-ms", &BUCKET_MS.to_string()]);
    let client = redis::Client::open(url(server.port, false)).unwrap();
    let mut con = client.get_connection().unwrap();
    let holders = check_spread_writes(&mut con, "views");
    check_spread_purchases(&mut con, "stock");
    let c = &mut con;
    assert_eq!(c.ctr_spread("views", 4).unwrap(), holders);
    let total = c.ctr_get("views").unwrap();
    assert_eq!(c.ctr_spread("views", 2).unwrap(), holders[..2]);
    assert_eq!(
        c.ctr_get("views").unwrap(),
        total,
        "folded back into the home"
    );
    assert_eq!(
        module_error(c.ctr_add(&holders[3], 1)),
        ModuleError::HolderFolded
    );
    // A router that still holds the old list: untokened adds that meet a folded holder
    // re-read the holders and land on a current one.
    let stale = SpreadRouter::default();
    c.ctr_spread("shrunk", 3).unwrap();
    assert_eq!(stale.holders(c, b"shrunk").unwrap().len(), 3);
    c.ctr_spread("shrunk", 1).unwrap();
    for _ in 0..30 {
        stale.add(c, "shrunk", 1, &AddOptions::new()).unwrap();
    }
    assert_eq!(c.ctr_get("shrunk").unwrap(), 30);
    assert_eq!(stale.holders(c, b"shrunk").unwrap().len(), 1);
    assert_eq!(
        module_error(c.ctr_spread("views", 0)),
        ModuleError::SpreadRefused
    );
    // On one server a floored counter spreads (across masters it is refused: the cluster test).
    c.ctr_add("floored", 7).unwrap();
    c.ctr_floor("floored", Some(3)).unwrap();
    assert_eq!(c.ctr_spread("floored", 2).unwrap().len(), 2);
    let router = SpreadRouter::default();
    let bought: Vec<Option<i64>> = (0..3)
        .map(|i| {
            let token = format!("f{i}");
            router
                .decrfloor(c, "floored", 2, Some(token.as_bytes()), None)
                .unwrap()
        })
        .collect();
    assert_eq!(bought.iter().filter(|b| b.is_none()).count(), 1);
    assert_eq!(c.ctr_get("floored").unwrap(), 3);
    let info = c.ctr_info("floored").unwrap().unwrap();
    assert_eq!((info.floor, info.headroom), (Some(3), Some(0)));
    assert_eq!(info.holder_budgets, Some(vec![0, 0]));
    assert_eq!(info.units_in_flight, Some(0));
    // A holder waiting for budget in flight (here a key named as a holder of a floored spread
    // before its first credit): the purchase asks it again, with the same token, never
    // skipping it, until the budget lands or the router's purchase wait is over.
    let waiting = "{ctr.00000000000000ab.1.0}sale";
    // No home lists it, so no write may create it (a look-alike holder), and a counter renamed
    // there would be a stray: a counter's dump made at 0 under another name of its slot,
    // restored under its name (a real one is made by its home's first credit).
    let made = format!("made{waiting}");
    c.ctr_add(&made, 0).unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg(&made).query(c).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg(waiting)
        .arg(0)
        .arg(dump)
        .query(c)
        .unwrap();
    let impatient = SpreadRouter::default().with_purchase_wait(Duration::from_millis(200));
    let started = std::time::Instant::now();
    let gave_up = impatient.decrfloor(c, waiting, 1, Some(b"w1"), None);
    assert_eq!(module_error(gave_up), ModuleError::BudgetInFlight);
    assert!(started.elapsed() >= Duration::from_millis(200));
    let port = server.port;
    let restock = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let mut other = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        other.ctr_add(waiting, 5).unwrap();
    });
    let patient = SpreadRouter::default();
    assert_eq!(
        patient.decrfloor(c, waiting, 1, Some(b"w1"), None).unwrap(),
        Some(4),
        "granted once the budget landed: the first answers were not recorded"
    );
    restock.join().unwrap();
    let earliest = c.ctr_reconcile_start("started").unwrap();
    assert_eq!(earliest % BUCKET_MS, 0);
    assert!(earliest >= now_ms() - BUCKET_MS);

    // A spread learned within the refresh bound; a token sent before it keeps its holder.
    let router = SpreadRouter::new(Duration::from_millis(100));
    let token = AddOptions::new().token("before");
    router.add(c, "late", 1, &token).unwrap();
    c.ctr_spread("late", 3).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    for _ in 0..61 {
        router.add(c, "late", 1, &AddOptions::new()).unwrap();
    }
    assert!(holder_values(c, "late")[1..].iter().all(|&v| v > 0));
    router.add(c, "late", 1, &token).unwrap();
    assert_eq!(c.ctr_get("late").unwrap(), 62);

    block_on(async {
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let router = SpreadRouter::default();
        for _ in 0..90 {
            router
                .add_async(&mut con, "views", 1, &AddOptions::new())
                .await
                .unwrap();
        }
        assert_eq!(con.ctr_get("views").await.unwrap(), 690);
        assert_eq!(con.ctr_reconcile_start("started").await.unwrap(), earliest);
        // A purchase: one unit, on holder 2 alone; a retry replays the first answer.
        let names = con.ctr_spread("async-stock", 3).await.unwrap();
        con.ctr_add(&names[2], 1).await.unwrap();
        for _attempt in 0..2 {
            let bought = router.decrfloor_async(&mut con, "async-stock", 1, Some(b"buy"), None);
            assert_eq!(bought.await.unwrap(), Some(0));
        }
        let sold_out = router.decrfloor_async(&mut con, "async-stock", 1, Some(b"buy-2"), None);
        assert_eq!(sold_out.await.unwrap(), None);
        for _attempt in 0..2 {
            let refunded = router.refund_async(&mut con, "async-stock", b"buy", None);
            assert_eq!(refunded.await.unwrap(), Some(1));
        }
        let nothing = router.refund_async(&mut con, "async-stock", b"buy-2", None);
        assert_eq!(nothing.await.unwrap(), None);
        assert_eq!(con.ctr_get("async-stock").await.unwrap(), 1);
    });

    // An auto-spread: a router writing the key learns the holders within its refresh bound and
    // writes every one of them; the total keeps every add.
    for (name, value) in [("ctr.spread-threshold", "200"), ("ctr.spread-holders", "4")] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .exec(c)
            .unwrap();
    }
    let router = SpreadRouter::new(Duration::from_millis(100));
    let started = std::time::Instant::now();
    let mut sent = 0;
    while c
        .ctr_info("auto")
        .unwrap()
        .and_then(|i| i.holder_values)
        .is_none_or(|v| v.contains(&0))
    {
        assert!(started.elapsed() < Duration::from_secs(20), "never spread");
        for _ in 0..100 {
            router.add(c, "auto", 1, &AddOptions::new()).unwrap();
        }
        sent += 100;
    }
    assert_eq!(router.holders(c, b"auto").unwrap().len(), 4);
    assert_eq!(c.ctr_get("auto").unwrap(), sent);

    redis::cmd("SET")
        .arg(&holders[1])
        .arg("not a counter")
        .exec(c)
        .unwrap();
    assert_eq!(module_error(c.ctr_get("views")), ModuleError::HolderError);
}

/// A proxy that forwards to `upstream` and, for the first `drops` requests containing
/// `marker`, lets the server apply them and closes the client's connection instead of passing
/// the reply on: a reply lost after the write happened.
struct ReplyDroppingProxy {
    port: u16,
    dropped: Arc<AtomicUsize>,
}

impl ReplyDroppingProxy {
    fn start(upstream: u16, marker: &'static [u8], drops: usize) -> ReplyDroppingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let budget = Arc::new(AtomicUsize::new(drops));
        let dropped = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&dropped);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    return;
                };
                let drop_reply = Arc::new(AtomicUsize::new(0));
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (budget, flag, counter) = (
                    Arc::clone(&budget),
                    Arc::clone(&drop_reply),
                    Arc::clone(&counter),
                );
                std::thread::spawn(move || {
                    pump(c2, s2, |data| {
                        // Decided before forwarding, so the reply cannot overtake the decision.
                        let take = contains(data, marker)
                            && budget
                                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                                    b.checked_sub(1)
                                })
                                .is_ok();
                        if take {
                            flag.store(1, Ordering::SeqCst);
                        }
                        true
                    })
                });
                std::thread::spawn(move || {
                    pump(server, client, |_| {
                        let drop = drop_reply.load(Ordering::SeqCst) == 1;
                        if drop {
                            counter.fetch_add(1, Ordering::SeqCst);
                        }
                        !drop
                    })
                });
            }
        });
        ReplyDroppingProxy { port, dropped }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Copies `from` to `to` while `forward` says so; then closes both.
fn pump(mut from: TcpStream, mut to: TcpStream, mut forward: impl FnMut(&[u8]) -> bool) {
    let mut buf = [0u8; 65536];
    while let Ok(n @ 1..) = from.read(&mut buf) {
        if !forward(&buf[..n]) || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// A cluster write whose connection broke after the master ran it (its reply lost): an
/// untokened write is never sent again (it would count twice: before, the one-command pipeline's
/// I/O error made it go again as a plain request, and the add counted 10 for 5), its error is
/// returned as maybe applied; a tokened write is sent again, and counts once.
#[test]
fn a_cluster_write_whose_reply_was_lost_is_sent_again_only_with_its_token() {
    let cluster = Cluster::start(3, &[]);
    let key = "lost-reply";
    let node = cluster.owner(common::cluster::key_slot(key.as_bytes()));
    let proxy = ReplyDroppingProxy::start(cluster.nodes[node].port, b"CTR.ADD", 2);
    // The node announces the proxy as its client address: every client reaches it through it.
    let port = proxy.port.to_string();
    let set = ["CONFIG", "SET", "cluster-announce-port", port.as_str()];
    assert_eq!(
        cluster.nodes[node].conn().cmd(&set),
        common::Value::Simple("OK".into())
    );
    let seed = (node + 1) % 3;
    let announced =
        |c: &mut common::Conn| format!("{:?}", c.cmd(&["CLUSTER", "SLOTS"])).contains(&port);
    common::eventually(10, || {
        announced(&mut cluster.nodes[seed].conn()).then_some(())
    });
    let client = redis::cluster::ClusterClient::new(vec![url(cluster.nodes[seed].port, false)]);
    let mut con = client.unwrap().get_connection().unwrap();

    let untokened = con.ctr_add(key, 5);
    let error = untokened.expect_err("a write whose reply was lost");
    assert!(error.is_connection_error(), "{error}");
    let mut direct = cluster.nodes[node].conn();
    assert_eq!(
        direct.cmd(&["CTR.GET", key]),
        common::Value::Int(5),
        "counted once"
    );

    let once = AddOptions::new().token("lost-1");
    assert_eq!(con.ctr_add_with(key, 7, &once).unwrap(), Some(12));
    assert_eq!(
        direct.cmd(&["CTR.GET", key]),
        common::Value::Int(12),
        "counted once"
    );
    assert_eq!(proxy.dropped.load(Ordering::SeqCst), 2);
}

fn ctr_stat(server: &Server, field: &str) -> i64 {
    server.info_field("ctr", field).trim().parse().unwrap()
}

#[test]
fn writer_counts_each_sum_once_when_replies_are_lost() {
    let server = Server::start();
    let mut direct = redis::Client::open(url(server.port, false)).unwrap();
    direct.ctr_spread("hot", 4).unwrap();
    let proxy = ReplyDroppingProxy::start(server.port, b"CTR.ADD", 3);
    let config = WriterConfig {
        flush_every: 100,
        flush_interval: Duration::from_secs(60),
        ..WriterConfig::default()
    };
    let writer =
        CoalescingWriter::new(redis::Client::open(url(proxy.port, false)).unwrap(), config);
    for n in 0..1000 {
        writer.add("lost", 1).unwrap();
        writer.add("hot", 1).unwrap();
        if n % 10 == 9 {
            writer.flush().unwrap(); // 100 sums of "hot", whatever the flush thread's pace
        }
    }
    writer.flush().unwrap();
    let stats = writer.stats();
    writer.close().unwrap();
    let mut con = server.conn();
    assert_eq!(con.q("CTR.GET lost"), common::Value::Int(1000));
    // The spread counter's sums (100, on their tokens' holders): every holder got some, and
    // the total counts each once.
    assert_eq!(direct.ctr_get("hot").unwrap(), 1000);
    assert!(holder_values(&mut direct, "hot").iter().all(|&v| v > 0));
    assert_eq!(proxy.dropped.load(Ordering::SeqCst), 3);
    assert_eq!(stats.retries, 3);
    assert_eq!(ctr_stat(&server, "ctr_duplicates_ignored"), 3);
}

/// (holders another client spreads the key to, adds made through the writer after it).
const STEPS: [(u32, i64); 6] = [(16, 100), (1, 100), (8, 100), (2, 100), (16, 100), (1, 100)];

/// Another client changes the spread of a fresh key under a writer whose holder list is
/// trusted for `REFRESH`. After a grow the test waits that long (the writer reads the grown
/// list at its next sum); at a shrink the writer still holds the longer list, so its sums meet
/// folded holders. Each must be sent on: the total is exact after every step and no sum is
/// dropped. `folds_at_once`: on one server a shrink folds its holders before it replies, so
/// every shrink reroutes some sums; across masters folds run in the background (a sum may land
/// on a holder before its fold and be folded with it).
fn check_writer_through_shrinks<W, C>(writer_client: W, con: &mut C, key: &str, folds_at_once: bool)
where
    W: redis_ctr_client::Connector,
    C: CtrCommands,
{
    const REFRESH: Duration = Duration::from_millis(1000);
    let config = WriterConfig {
        flush_interval: Duration::from_secs(60),
        spread_refresh: Some(REFRESH),
        ..WriterConfig::default()
    };
    let writer = CoalescingWriter::new(writer_client, config);
    let (mut total, mut previous) = (0, 1);
    for (holders, adds) in STEPS {
        con.ctr_spread(key, holders).unwrap();
        if holders > previous {
            std::thread::sleep(REFRESH + Duration::from_millis(50));
        }
        let rerouted = writer.stats().rerouted;
        for n in 0..adds {
            writer.add(key, 1).unwrap();
            if n % 10 == 9 {
                writer.flush().unwrap(); // ten sums per step, each on its token's holder
            }
        }
        total += adds;
        let step = format!("the step from {previous} to {holders} holders");
        assert_eq!(con.ctr_get(key).unwrap(), total, "{step}");
        let stats = writer.stats();
        assert_eq!(stats.dropped, 0, "{step}");
        if folds_at_once || holders > previous {
            assert_eq!(stats.rerouted > rerouted, holders < previous, "{step}");
        }
        previous = holders;
    }
    let stats = writer.close().unwrap();
    assert_eq!((stats.flushed_sums, stats.dropped), (60, 0));
    assert_eq!(con.ctr_get(key).unwrap(), total);
}

#[test]
fn writer_sums_count_once_through_shrinks_and_grows() {
    let server = Server::start();
    let mut direct = redis::Client::open(url(server.port, true)).unwrap();
    let client = redis::Client::open(url(server.port, false)).unwrap();
    check_writer_through_shrinks(client, &mut direct, "folds", true);
}

/// A router whose holder list is out of date after a shrink to 1: tokened and untokened adds
/// go on to the home (none fails), a tokened retry counts once, and an add whose first send
/// landed before the fold is replayed by the folded holder, not sent on.
#[test]
fn router_adds_meeting_a_folded_holder_go_on_and_count_once() {
    let server = Server::start();
    let mut con = redis::Client::open(url(server.port, false)).unwrap();
    let stale = SpreadRouter::new(Duration::from_secs(60));
    let holders: Vec<Vec<u8>> = stale
        .spread(&mut con, "add-folds", 16)
        .unwrap()
        .into_iter()
        .map(String::into_bytes)
        .collect();
    let landed = (0..100)
        .map(|i| format!("t{i}"))
        .find(|t| holder_for_token(&holders, t.as_bytes()) != b"add-folds")
        .unwrap();
    let tokened = |t: &str| AddOptions::new().token(t);
    let first = stale.add(&mut con, "add-folds", 5, &tokened(&landed));
    assert_eq!(first.unwrap(), Some(5));
    SpreadRouter::default()
        .spread(&mut con, "add-folds", 1)
        .unwrap();
    // Replayed by the folded holder (its value, 0 now that its units are home): not sent on.
    let retry = stale.add(&mut con, "add-folds", 5, &tokened(&landed));
    assert_eq!(retry.unwrap(), Some(0));
    for i in 0..20 {
        let token = tokened(&format!("after-{i}"));
        stale.add(&mut con, "add-folds", 1, &token).unwrap();
        stale.add(&mut con, "add-folds", 1, &token).unwrap();
        SpreadRouter::default()
            .add(&mut con, "add-folds", 1, &token)
            .unwrap();
        stale
            .add(&mut con, "add-folds", 1, &AddOptions::new())
            .unwrap();
    }
    assert_eq!(con.ctr_get("add-folds").unwrap(), 5 + 20 + 20);
    assert_eq!(
        *stale.holders(&mut con, b"add-folds").unwrap(),
        [b"add-folds".to_vec()]
    );
}

/// A counter renamed onto a listed holder's name is a stray (counted 0, written by nothing):
/// the router's adds that meet it go on to another holder, untokened and tokened alike, and
/// the total counts every add once.
#[test]
fn router_adds_meeting_a_stray_holder_go_on_and_count_once() {
    let server = Server::start();
    let mut con = redis::Client::open(url(server.port, false)).unwrap();
    let router = SpreadRouter::new(Duration::from_secs(60));
    let holders = router.spread(&mut con, "add-stray", 4).unwrap();
    let stray = holders[1].clone();
    let _: () = redis::cmd("CTR.ADD")
        .arg("elsewhere")
        .arg(7)
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("RENAME")
        .arg("elsewhere")
        .arg(&stray)
        .query(&mut con)
        .unwrap();
    let holder_bytes: Vec<Vec<u8>> = holders.iter().map(|h| h.clone().into_bytes()).collect();
    let to_stray = (0..200)
        .map(|i| format!("s{i}"))
        .find(|t| holder_for_token(&holder_bytes, t.as_bytes()) == stray.as_bytes())
        .unwrap();
    for i in 0..40 {
        router
            .add(&mut con, "add-stray", 1, &AddOptions::new())
            .unwrap();
        let token = AddOptions::new().token(format!("t{i}"));
        router.add(&mut con, "add-stray", 1, &token).unwrap();
    }
    let tokened = AddOptions::new().token(to_stray.as_str());
    router.add(&mut con, "add-stray", 1, &tokened).unwrap();
    router.add(&mut con, "add-stray", 1, &tokened).unwrap();
    assert_eq!(
        con.ctr_get("add-stray").unwrap(),
        81,
        "each add once, none on the stray"
    );
}

#[test]
fn writer_memory_is_bounded_and_drop_flushes() {
    let server = Server::start();
    // Nothing listens on a port whose listener is gone: every flush fails.
    let closed_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = WriterConfig {
        max_keys: 3,
        retries: 0,
        flush_interval: Duration::from_secs(60),
        close_timeout: Duration::ZERO,
        ..WriterConfig::default()
    };
    let writer = CoalescingWriter::new(
        redis::Client::open(url(closed_port, false)).unwrap(),
        config,
    );
    for key in ["a", "b", "c", "a"] {
        writer.add(key, 1).unwrap();
    }
    assert!(matches!(writer.add("d", 1), Err(WriterError::Full(_))));
    match writer.close() {
        Err(WriterError::Undelivered { sums, .. }) => assert_eq!(sums.len(), 3),
        other => panic!("expected Undelivered, got {other:?}"),
    }

    let config = WriterConfig {
        flush_interval: Duration::from_secs(60),
        ..WriterConfig::default()
    };
    {
        let writer =
            CoalescingWriter::new(redis::Client::open(url(server.port, true)).unwrap(), config);
        for _ in 0..5 {
            writer.add("dropped", 2).unwrap();
        }
    }
    assert_eq!(server.conn().q("CTR.GET dropped"), common::Value::Int(10));
}

/// Calls of `command` (lower case) so far, from `INFO commandstats`.
fn command_calls<C: redis::ConnectionLike>(con: &mut C, command: &str) -> i64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// 50 threads and 200 async tasks sharing one router, all adding to a spread counter on a cold
/// cache at once: one `CTR.HOLDERS` each time (single-flight per key), no `CTR.INFO`, every
/// add counted.
#[test]
fn concurrent_adds_on_a_cold_cache_read_the_holders_once() {
    let server = Server::start();
    let client = redis::Client::open(url(server.port, false)).unwrap();
    let mut direct = client.get_connection().unwrap();
    direct.ctr_spread("stampede", 4).unwrap();
    let (holders_before, info_before) = (
        command_calls(&mut direct, "ctr.holders"),
        command_calls(&mut direct, "ctr.info"),
    );
    let router = Arc::new(SpreadRouter::default());
    let start = Arc::new(std::sync::Barrier::new(50));
    let threads: Vec<_> = (0..50)
        .map(|_| {
            let (router, start) = (Arc::clone(&router), Arc::clone(&start));
            let mut con = client.get_connection().unwrap();
            std::thread::spawn(move || {
                start.wait();
                router
                    .add(&mut con, "stampede", 1, &AddOptions::new())
                    .unwrap();
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(
        command_calls(&mut direct, "ctr.holders") - holders_before,
        1
    );
    assert_eq!(command_calls(&mut direct, "ctr.info"), info_before);
    assert_eq!(direct.ctr_get("stampede").unwrap(), 50);
    // CTR.HOLDERS itself, and a holder's name, which the router writes as it is.
    let names = direct.ctr_holders("stampede").unwrap();
    assert_eq!((names.len(), names[0].as_str()), (4, "stampede"));
    assert_eq!(
        module_error(direct.ctr_holders(&names[1])),
        ModuleError::UseHomeKey
    );
    let holder = router.holders(&mut direct, names[1].as_bytes()).unwrap();
    assert_eq!(*holder, [names[1].clone().into_bytes()]);

    direct.ctr_spread("stampede-async", 4).unwrap();
    let holders_before = command_calls(&mut direct, "ctr.holders");
    let router = Arc::new(SpreadRouter::default());
    block_on(async {
        let con = client.get_multiplexed_async_connection().await.unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..200 {
            let (router, mut con) = (Arc::clone(&router), con.clone());
            tasks.spawn(async move {
                router
                    .add_async(&mut con, "stampede-async", 1, &AddOptions::new())
                    .await
                    .unwrap()
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    });
    assert_eq!(
        command_calls(&mut direct, "ctr.holders") - holders_before,
        1
    );
    assert_eq!(command_calls(&mut direct, "ctr.info"), info_before);
    assert_eq!(direct.ctr_get("stampede-async").unwrap(), 200);
}

/// A router and a writer on a plain connection to the home's master of a spread counter whose
/// holders are on all 3 masters: no add fails (none sees `MOVED`), sync and async, tokened
/// retries count once, and the total read through the cluster is exact.
#[test]
fn a_plain_connection_on_the_home_master_never_fails_with_moved() {
    let cluster = Cluster::start(3, &[]);
    let seeds = vec![url(cluster.nodes[0].port, false)];
    let mut rc = redis::cluster::ClusterClient::new(seeds)
        .unwrap()
        .get_connection()
        .unwrap();
    let key = "plain-client";
    let holders = rc.ctr_spread(key, 16).unwrap();
    let master_of = |k: &str| cluster.owner(common::cluster::key_slot(k.as_bytes()));
    let home = master_of(key);
    assert!(
        holders.iter().any(|h| master_of(h) != home),
        "holders elsewhere"
    );
    let client = redis::Client::open(url(cluster.nodes[home].port, false)).unwrap();
    let mut direct = client.get_connection().unwrap();
    let router = SpreadRouter::default();
    for i in 0..50 {
        router.add(&mut direct, key, 1, &AddOptions::new()).unwrap();
        let token = AddOptions::new().token(format!("t{i}"));
        router.add(&mut direct, key, 2, &token).unwrap();
        router.add(&mut direct, key, 2, &token).unwrap(); // a retry: counted once
    }
    assert_eq!(rc.ctr_get(key).unwrap(), 150);
    let router = SpreadRouter::default();
    block_on(async {
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        for i in 0..50 {
            let token = AddOptions::new().token(format!("a{i}"));
            router.add_async(&mut con, key, 1, &token).await.unwrap();
            router
                .add_async(&mut con, key, 1, &AddOptions::new())
                .await
                .unwrap();
        }
    });
    assert_eq!(rc.ctr_get(key).unwrap(), 250);
    let config = WriterConfig {
        flush_interval: Duration::from_secs(60),
        ..WriterConfig::default()
    };
    let writer = CoalescingWriter::new(client, config);
    for _ in 0..100 {
        writer.add(key, 1).unwrap();
        writer.flush().unwrap();
    }
    let stats = writer.close().unwrap();
    assert_eq!((stats.flushed_sums, stats.dropped), (100, 0));
    assert_eq!(rc.ctr_get(key).unwrap(), 350);
}

/// A sum whose replies are always lost (it may have counted: it stays with its key, same
/// token) is held back while the sums flushed after it go on: each is on the server once the
/// flush returns its error.
#[test]
fn writer_holds_back_only_the_sum_out_of_reach() {
    let server = Server::start();
    let mut direct = redis::Client::open(url(server.port, false)).unwrap();
    let proxy = ReplyDroppingProxy::start(server.port, b"stuck", 1000);
    let config = WriterConfig {
        flush_interval: Duration::from_secs(60),
        retries: 1,
        retry_backoff: Duration::from_millis(1),
        close_timeout: Duration::from_millis(200),
        ..WriterConfig::default()
    };
    let writer =
        CoalescingWriter::new(redis::Client::open(url(proxy.port, false)).unwrap(), config);
    writer.add("stuck", 1).unwrap();
    assert!(matches!(writer.flush(), Err(WriterError::Flush(_))));
    for key in ["a", "b", "c"] {
        writer.add(key, 5).unwrap();
    }
    assert!(matches!(writer.flush(), Err(WriterError::Flush(_))));
    for key in ["a", "b", "c"] {
        assert_eq!(direct.ctr_get(key).unwrap(), 5, "{key}");
    }
    // Applied by the server on its first send, its retries deduplicated by its token.
    assert_eq!(direct.ctr_get("stuck").unwrap(), 1);
    match writer.close() {
        Err(WriterError::Undelivered { sums, .. }) => {
            let sums: Vec<_> = sums.into_iter().map(|(k, d, _)| (k, d)).collect();
            assert_eq!(sums, [(b"stuck".to_vec(), 1)]);
        }
        other => panic!("expected Undelivered, got {other:?}"),
    }
}

#[test]
fn pipelines_and_transactions_queue_the_commands_with_typed_replies() {
    use redis_ctr_client::CtrPipelineCommands;
    let server = Server::start();
    for resp3 in [false, true] {
        let mut con = redis::Client::open(url(server.port, resp3))
            .unwrap()
            .get_connection()
            .unwrap();
        let tag = if resp3 { "{pipe3}" } else { "{pipe2}" };
        let k = |name: &str| format!("{tag}:{name}");
        let before = command_calls(&mut con, "exec");
        let holders_before = command_calls(&mut con, "ctr.holders");
        type Replies = (
            Option<i64>,
            Option<i64>,
            i64,
            (),
            Option<i64>,
            Option<i64>,
            Option<CounterInfo>,
            Reconciled,
            i64,
            PncInfo,
        );
        let once = AddOptions::new().token("t1");
        let replies: Replies = redis::pipe()
            .atomic()
            .ctr_add(k("stock"), 5)
            .ctr_add_with(k("stock"), 1, &once)
            .ctr_get(k("stock"))
            .ctr_floor(k("stock"), Some(0))
            .ctr_decrfloor_with(k("stock"), 10, "o1", None)
            .ctr_decrfloor_with(k("stock"), 4, "o2", None)
            .ctr_info(k("stock"))
            .ctr_reconcile(k("views"), 7, None)
            .pnc_add(k("likes"), 3)
            .pnc_info(k("likes"))
            .query_ctr(&mut con)
            .unwrap();
        let (added, tokened, got, (), refused, bought, info, reconciled, likes, pnc) = replies;
        assert_eq!((added, tokened, got), (Some(5), Some(6), 6));
        assert_eq!((refused, bought), (None, Some(2)));
        let info = info.expect("the counter exists");
        assert_eq!((info.value, info.floor), (2, Some(0)));
        assert_eq!(
            reconciled,
            Reconciled {
                value: 7,
                drift: -7
            }
        );
        assert_eq!((likes, pnc.value), (3, 3));
        assert_eq!(
            command_calls(&mut con, "exec") - before,
            1,
            "one MULTI/EXEC"
        );
        assert_eq!(command_calls(&mut con, "ctr.holders"), holders_before);

        // A module error in a pipeline is its kind; every command ran.
        con.ctr_add(k("big"), i64::MAX).unwrap();
        let result: Result<(Option<i64>, i64), CtrError> = redis::pipe()
            .ctr_add(k("big"), 1)
            .ctr_get(k("big"))
            .query_ctr(&mut con);
        assert_eq!(module_error(result), ModuleError::Overflow);

        // Native commands on the same pipeline, and an async connection.
        let (n, value): (i64, i64) = redis::pipe()
            .cmd("INCR")
            .arg(k("plain"))
            .ctr_add(k("mixed"), 9)
            .query_ctr(&mut con)
            .unwrap();
        assert_eq!((n, value), (1, 9));
        let async_replies: (Option<i64>, i64) = block_on(async {
            let client = redis::Client::open(url(server.port, resp3)).unwrap();
            let mut con = client.get_multiplexed_async_connection().await.unwrap();
            redis::pipe()
                .atomic()
                .ctr_add(k("mixed"), 1)
                .ctr_get(k("mixed"))
                .query_ctr_async(&mut con)
                .await
                .unwrap()
        });
        assert_eq!(async_replies, (Some(10), 10));
    }
}

/// The rates of the first two steps relative to the third (the control), in `cycles` rounds of
/// 0.2 s windows each, taken in turn: a machine shared with other work slows them alike, so the
/// ratios hold where raw rates would not. Each call of a step is given a new number (`n`).
fn relative_rates(cycles: usize, n: &mut u64, mut steps: [&mut dyn FnMut(u64); 3]) -> [f64; 2] {
    let mut done = [0u64; 3];
    for _ in 0..cycles {
        for (step, count) in steps.iter_mut().zip(done.iter_mut()) {
            let end = Instant::now() + Duration::from_millis(200);
            while Instant::now() < end {
                *n += 1;
                step(*n);
                *count += 1;
            }
        }
    }
    [
        done[0] as f64 / done[2] as f64,
        done[1] as f64 / done[2] as f64,
    ]
}

/// The keys of an outage test whose master 2 goes away: a counter (`prefix:<n>`) spread over
/// 16 holders, more than two of them on master 2, and a control counter, neither at home there.
fn outage_keys(
    cluster: &Cluster,
    router: &SpreadRouter,
    con: &mut redis::cluster::ClusterConnection,
    prefix: &str,
) -> (String, String) {
    let on = |key: &str| cluster.owner(common::cluster::key_slot(key.as_bytes()));
    let not_on_2 = |name: &str| {
        (0..)
            .map(|i| format!("{name}:{i}"))
            .find(|k| on(k) != 2)
            .unwrap()
    };
    let (key, control) = (not_on_2(prefix), not_on_2("control"));
    let holders = router.spread(con, &key, 16).unwrap();
    assert!(holders.iter().filter(|h| on(h) == 2).count() > 2);
    (key, control)
}

/// One master of three shut down (issue 26, finding 2) while a `SpreadRouter` (plain and tokened
/// adds) and the coalescing writer (one sum per flush) write a spread counter with holders on
/// every master: each keeps at least half its healthy rate, measured against a control (adds
/// to a counter on a master that stays up, through a connection of its own) taken in turn in
/// 0.2 s windows; once the master's replica has taken over, the total is every acknowledged add,
/// plus at most once each plain add whose connection broke as the master went down (returned as
/// maybe counted, never sent again).
///
/// The nodes wait 15 s before they call a silent master failing: every measurement ends before
/// that, while the cluster still serves the healthy masters (past it, with the default
/// `cluster-require-full-coverage yes`, every node refuses every key until the replica takes
/// over, which no client can work around). The replica then takes over at once
/// (`CLUSTER FAILOVER FORCE`).
#[test]
fn router_and_writer_keep_half_their_rate_with_a_master_down() {
    let cluster = Cluster::start_patient(3, &[]);
    let replica = cluster.start_replica_of(2);
    let seeds = vec![url(cluster.nodes[0].port, false)];
    let client = redis::cluster::ClusterClient::new(seeds.clone()).unwrap();
    let mut con = client.get_connection().unwrap();
    let router = SpreadRouter::default();
    let (key, control) = outage_keys(&cluster, &router, &mut con, "outage");
    let writer = CoalescingWriter::new(
        redis::cluster::ClusterClient::new(seeds.clone()).unwrap(),
        WriterConfig {
            flush_interval: Duration::from_secs(60),
            ..WriterConfig::default()
        },
    );
    let mut control_con = redis::cluster::ClusterClient::new(seeds.clone())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut acknowledged = 0i64;
    // Tokened adds whose holder's master is down: refused (nothing sent, or a connection that
    // failed), retried with their tokens once the replica has taken over.
    let mut refused_tokens = Vec::new();
    // Plain adds whose connection broke as the master went down: maybe counted, never sent
    // again (a copy could count twice).
    let mut maybe = 0i64;
    let mut n = 0u64;
    let mut rates = |con: &mut redis::cluster::ClusterConnection,
                     acknowledged: &mut i64,
                     refused_tokens: &mut Vec<String>| {
        let mut add = |n: u64| {
            let token = format!("{key}:{n}");
            let tokened = n.is_multiple_of(2);
            let options = match tokened {
                true => AddOptions::new().token(&token),
                false => AddOptions::new(),
            };
            match router.add(con, &key, 1, &options) {
                Ok(_) => *acknowledged += 1,
                Err(e) if tokened && e.is_connection_error() => refused_tokens.push(token),
                Err(e) if e.is_connection_error() => maybe += 1,
                Err(e) => panic!("{e}"),
            }
        };
        let mut write = |_| {
            writer.add(&key, 1).unwrap();
            writer.flush().unwrap();
        };
        let mut control_add = |_| {
            control_con.ctr_add(&control, 1).unwrap();
        };
        relative_rates(5, &mut n, [&mut add, &mut write, &mut control_add])
    };
    let healthy = rates(&mut con, &mut acknowledged, &mut refused_tokens);
    assert!(refused_tokens.is_empty(), "{refused_tokens:?}");
    let mut down = redis::Client::open(url(cluster.nodes[2].port, false))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut down);
    let shut_down = Instant::now();
    // Rates on this shared 2-core machine move with scheduling: the outage is measured up to
    // three times, and the first measurement that keeps half of both rates is taken. A client
    // that held every add back behind the master down would fail all three. A measurement takes
    // about 3 s; none starts after 8 s, so that all end before the nodes call the master failing.
    let kept = |outage: [f64; 2]| outage[0] >= healthy[0] / 2.0 && outage[1] >= healthy[1] / 2.0;
    let mut outage = rates(&mut con, &mut acknowledged, &mut refused_tokens);
    while !kept(outage) && shut_down.elapsed() < Duration::from_secs(8) {
        outage = rates(&mut con, &mut acknowledged, &mut refused_tokens);
    }
    let report = format!(
        "relative rates (router, writer): healthy {healthy:.2?}, outage {outage:.2?}; {} \
         tokened adds refused, {maybe} plain adds maybe counted",
        refused_tokens.len()
    );
    println!("{report}");
    assert!(kept(outage), "{report}");

    // The replica takes over: nothing acknowledged is lost.
    let mut r = replica.conn();
    r.cmd(&["CLUSTER", "FAILOVER", "FORCE"]);
    common::eventually(60, || {
        let master = r.q("ROLE").array()[0].text() == "master";
        let up = r.q("CLUSTER INFO").text().contains("cluster_state:ok");
        (master && up).then_some(())
    });
    // The refused tokens, retried through the same router: each counts once on its holder.
    for token in &refused_tokens {
        let options = AddOptions::new().token(token);
        common::eventually(60, || router.add(&mut con, &key, 1, &options).ok());
        acknowledged += 1;
    }
    let stats = writer.close().unwrap();
    assert_eq!(stats.dropped, 0, "{stats:?}");
    let expected = acknowledged + stats.adds as i64;
    let total = common::eventually(30, || con.ctr_get(&key).ok());
    // Each plain add cut off counted once or not at all.
    assert!(
        (expected..=expected + maybe).contains(&total),
        "total {total}, expected {expected} and up to {maybe} more: {report}"
    );
}

/// One master of three frozen (SIGSTOP, about 6 s, less than the cluster's node timeout of
/// 15 s: nothing fails over) while a `SpreadRouter` (plain and tokened adds) and the coalescing
/// writer (one sum per flush) write a spread counter with holders on every master, through
/// cluster connections with a 250 ms response timeout: each keeps at least half its healthy
/// rate against a control taken in turn (0.2 s windows). An add whose reply timed out is
/// returned as that error and leaves the master out for a while; the writer holds back that
/// sum and sends the others. Once the master wakes (SIGCONT), the tokened adds that timed out
/// are retried with their tokens and the held sums flushed: every acknowledged add and every
/// writer add counts exactly once, each plain add that timed out at most once.
#[test]
fn router_and_writer_keep_half_their_rate_with_a_master_frozen() {
    let timeout = Duration::from_millis(250);
    let cluster = Cluster::start_patient(3, &[]);
    let seeds = vec![url(cluster.nodes[0].port, false)];
    let connect = || {
        redis::cluster::ClusterClient::builder(seeds.clone())
            .response_timeout(timeout)
            .build()
            .unwrap()
            .get_connection()
            .unwrap()
    };
    let mut con = connect();
    let router = SpreadRouter::default();
    let (key, control) = outage_keys(&cluster, &router, &mut con, "frozen");
    let writer = CoalescingWriter::new(
        redis::cluster::ClusterClient::new(seeds.clone()).unwrap(),
        WriterConfig {
            flush_interval: Duration::from_secs(60),
            timeout,
            ..WriterConfig::default()
        },
    );
    let mut control_con = connect();
    let (mut acknowledged, mut timed_out_plain, mut held_flushes) = (0i64, 0i64, 0u64);
    let mut timed_out_tokens = Vec::new();
    let mut n = 0u64;
    let mut rates = || {
        let mut add = |n: u64| {
            let token = format!("{key}:{n}");
            let tokened = n.is_multiple_of(2);
            let options = match tokened {
                true => AddOptions::new().token(&token),
                false => AddOptions::new(),
            };
            match router.add(&mut con, &key, 1, &options) {
                Ok(_) => acknowledged += 1,
                Err(CtrError::Redis(e)) if e.is_timeout() && tokened => {
                    timed_out_tokens.push(token)
                }
                // Its holder left out (its master timed out): refused unsent, retried later.
                Err(CtrError::HolderAway { .. }) if tokened => timed_out_tokens.push(token),
                Err(CtrError::Redis(e)) if e.is_timeout() => timed_out_plain += 1,
                Err(e) => panic!("{e}"),
            }
        };
        let mut write = |_| {
            writer.add(&key, 1).unwrap();
            match writer.flush() {
                Ok(()) => {}
                Err(WriterError::Flush(CtrError::Redis(e))) if e.is_timeout() => {
                    held_flushes += 1 // held back for the frozen master
                }
                Err(e) => panic!("{e}"),
            }
        };
        let mut control_add = |_| {
            control_con.ctr_add(&control, 1).unwrap();
        };
        relative_rates(10, &mut n, [&mut add, &mut write, &mut control_add])
    };
    let healthy = rates();
    let frozen_at = Instant::now();
    let frozen = Frozen::freeze(cluster.nodes[2].pid().expect("started here"));
    let outage = rates();
    drop(frozen);
    let frozen_for = frozen_at.elapsed();
    let report = format!(
        "relative rates (router, writer): healthy {healthy:.2?}, frozen {outage:.2?}; frozen \
         {frozen_for:.1?}, {timed_out_plain} plain and {} tokened adds timed out or refused unsent, \
         {held_flushes} \
         flushes held a sum back",
        timed_out_tokens.len()
    );
    println!("{report}");
    assert!(frozen_for < Duration::from_secs(12), "{report}");
    assert!(
        timed_out_plain + timed_out_tokens.len() as i64 + held_flushes as i64 > 0,
        "{report}"
    );
    assert!(outage[0] >= healthy[0] / 2.0, "{report}");
    assert!(outage[1] >= healthy[1] / 2.0, "{report}");

    // Awake: the tokened adds that timed out or were refused unsent are retried (each counts
    // once, on its token's holder), the held sums are flushed; nothing is lost, nothing counted
    // twice. Half the retries go through this router (which refuses them while that master is
    // left out, and has forgotten the holders of most of them: it remembers its last 10,000
    // tokens), half through a new one, as from another process: both pick by the token rule
    // over every holder, where the first send went.
    let other_process = SpreadRouter::default();
    for (i, token) in timed_out_tokens.iter().enumerate() {
        let options = AddOptions::new().token(token);
        let retrying = if i % 2 == 0 { &router } else { &other_process };
        common::eventually(60, || retrying.add(&mut con, &key, 1, &options).ok());
        acknowledged += 1;
    }
    common::eventually(60, || writer.flush().ok());
    let stats = writer.close().unwrap();
    assert_eq!(stats.dropped, 0, "{stats:?}");
    let counted = acknowledged + stats.adds as i64;
    let total = con.ctr_get(&key).unwrap();
    assert!(total >= counted, "{total} < {counted}: {report}");
    assert!(
        total <= counted + timed_out_plain,
        "{total} > {counted} + {timed_out_plain}: {report}"
    );
}

/// The server of `port` paused for `ms` (`CLIENT PAUSE ms WRITE`: writes held, their replies
/// late) from a connection of its own.
fn pause_writes(port: u16, ms: u64) {
    let mut admin = redis::Client::open(url(port, false))
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("WRITE")
        .query::<()>(&mut admin)
        .unwrap();
}

fn is_timeout<T: std::fmt::Debug>(result: &Result<T, CtrError>) -> bool {
    matches!(result, Err(CtrError::Redis(e)) if e.is_timeout())
}

/// Each write path whose reply times out (the server paused 700 ms, past a 200 ms timeout)
/// returns the timeout error and counts at most once with the redis crate's default retries:
/// a plain connection, a multiplexed one, and the cluster connections (sync and async), which
/// resend a command after an I/O error (16 retries by default) unless the library sends it once.
#[test]
fn a_write_whose_reply_times_out_counts_at_most_once() {
    let timeout = Duration::from_millis(200);
    let pause = 700;
    let server = Server::start();
    let cluster = Cluster::start(3, &[]);
    let counted = |port: u16, key: &str| -> i64 {
        std::thread::sleep(Duration::from_millis(pause + 100));
        let mut con = redis::Client::open(url(port, false))
            .unwrap()
            .get_connection()
            .unwrap();
        con.ctr_get(key).unwrap()
    };
    let client = redis::Client::open(url(server.port, false)).unwrap();
    let mut con = client.get_connection().unwrap();
    con.set_read_timeout(Some(timeout)).unwrap();
    for (n, options) in [AddOptions::new(), AddOptions::new().ex(60)]
        .iter()
        .enumerate()
    {
        let key = format!("once:plain:{n}");
        pause_writes(server.port, pause);
        assert!(is_timeout(&con.ctr_add_with(&key, 1, options)));
        assert!(counted(server.port, &key) <= 1, "{key}");
    }
    let seeds = vec![url(cluster.nodes[0].port, false)];
    let cluster_client = redis::cluster::ClusterClient::builder(seeds)
        .response_timeout(timeout)
        .build()
        .unwrap();
    let mut con = cluster_client.get_connection().unwrap();
    let master_of =
        |key: &str| cluster.nodes[cluster.owner(common::cluster::key_slot(key.as_bytes()))].port;
    for (n, options) in [AddOptions::new(), AddOptions::new().ex(60)]
        .iter()
        .enumerate()
    {
        let key = format!("once:cluster:{n}");
        pause_writes(master_of(&key), pause);
        assert!(is_timeout(&con.ctr_add_with(&key, 1, options)), "{key}");
        assert!(counted(master_of(&key), &key) <= 1, "{key}");
        let key = format!("once:cluster-buy:{n}");
        con.ctr_add(&key, 5).unwrap();
        con.ctr_floor(&key, Some(0)).unwrap();
        pause_writes(master_of(&key), pause);
        assert!(is_timeout(&con.ctr_decrfloor(&key, 1)), "{key}");
        assert!(counted(master_of(&key), &key) >= 4, "{key}");
    }
    block_on(async {
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(timeout);
        let mut con = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        let key = "once:multiplexed";
        pause_writes(server.port, pause);
        assert!(is_timeout(&con.ctr_add(key, 1).await));
        assert!(counted(server.port, key) <= 1);
        // redis 0.27's async cluster connection resends every request after a timeout
        // (its retries): a client for writes that must not be resent is built without them.
        let once = redis::cluster::ClusterClient::builder(vec![url(cluster.nodes[0].port, false)])
            .response_timeout(timeout)
            .retries(0)
            .build()
            .unwrap();
        let mut con = once.get_async_connection().await.unwrap();
        let key = "once:cluster-async";
        pause_writes(master_of(key), pause);
        assert!(is_timeout(&con.ctr_add(key, 1).await), "{key}");
        assert!(counted(master_of(key), key) <= 1, "{key}");
    });
}

/// A sum whose reply timed out is held back (its master left out for a while); `close` sends
/// it again with its token until the server answers (within `close_timeout`), or reports what
/// it could not deliver.
#[test]
fn close_delivers_a_sum_held_back_or_reports_it() {
    let server = Server::start();
    let client = redis::Client::open(url(server.port, false)).unwrap();
    let config = |close_timeout| WriterConfig {
        flush_interval: Duration::from_secs(60),
        timeout: Duration::from_millis(200),
        close_timeout,
        ..WriterConfig::default()
    };
    let writer = CoalescingWriter::new(client.clone(), config(Duration::from_secs(10)));
    writer.add("close:held", 5).unwrap();
    pause_writes(server.port, 2100);
    assert!(matches!(writer.flush(), Err(WriterError::Flush(e)) if timed_out(&e)));
    writer.close().expect("delivered once the pause is over");
    let mut con = client.get_connection().unwrap();
    assert_eq!(con.ctr_get("close:held").unwrap(), 5);

    let writer = CoalescingWriter::new(client.clone(), config(Duration::from_millis(300)));
    writer.add("close:undelivered", 5).unwrap();
    pause_writes(server.port, 2100);
    match writer.close() {
        Err(WriterError::Undelivered { sums, .. }) => {
            let sums: Vec<_> = sums.into_iter().map(|(k, d, _)| (k, d)).collect();
            assert_eq!(sums, [(b"close:undelivered".to_vec(), 5)]);
        }
        other => panic!("expected Undelivered, got {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(2200));
    assert!([0, 5].contains(&con.ctr_get("close:undelivered").unwrap()));
}

fn timed_out(e: &CtrError) -> bool {
    matches!(e, CtrError::Redis(e) if e.is_timeout())
}

/// Durable purchases: the grant is held by the master's replica when `decrfloor` returns it
/// (read there at once); asking for more replicas than acknowledge returns `NotDurable`, the
/// grant standing (its token replays it). On a cluster connection the `WAIT` goes to the
/// granting master (a master without replicas: acknowledged by 0).
#[test]
fn durable_purchases_wait_for_the_granting_masters_replicas() {
    let server = Server::start();
    let replica = server.start_replica();
    let mut con = redis::Client::open(url(server.port, false))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut on_replica = redis::Client::open(url(replica.port, false))
        .unwrap()
        .get_connection()
        .unwrap();
    con.ctr_add("durable", 5).unwrap();
    con.ctr_floor("durable", Some(0)).unwrap();
    let durable = SpreadRouter::default().with_durable_purchases(1, Duration::from_secs(5));
    for n in 1..=3i64 {
        let token = format!("t{n}");
        let bought = durable.decrfloor(&mut con, "durable", 1, Some(token.as_bytes()), None);
        assert_eq!(bought.unwrap(), Some(5 - n));
        assert_eq!(on_replica.ctr_get("durable").unwrap(), 5 - n);
    }
    let two = SpreadRouter::default().with_durable_purchases(2, Duration::from_millis(100));
    match two.decrfloor(&mut con, "durable", 1, Some(b"t4"), None) {
        Err(CtrError::NotDurable {
            value,
            acknowledged,
            ..
        }) => assert_eq!((value, acknowledged), (1, 1)),
        other => panic!("expected NotDurable, got {other:?}"),
    }
    assert_eq!(
        SpreadRouter::default()
            .decrfloor(&mut con, "durable", 1, Some(b"t4"), None)
            .unwrap(),
        Some(1)
    );

    let cluster = Cluster::start(3, &[]);
    let mut con = redis::cluster::ClusterClient::new(vec![url(cluster.nodes[0].port, false)])
        .unwrap()
        .get_connection()
        .unwrap();
    con.ctr_add("durable", 5).unwrap();
    con.ctr_floor("durable", Some(0)).unwrap();
    let one = SpreadRouter::default().with_durable_purchases(1, Duration::from_millis(50));
    match one.decrfloor(&mut con, "durable", 1, Some(b"c"), None) {
        Err(CtrError::NotDurable {
            value,
            acknowledged,
            ..
        }) => assert_eq!((value, acknowledged), (4, 0)),
        other => panic!("expected NotDurable, got {other:?}"),
    }
    assert_eq!(con.ctr_get("durable").unwrap(), 4);
}

/// A token whose probe order over `to` holders starts at another of the first `from` holders
/// than its order over `from`: after a grow from `from` to `to` (which keeps the first `from`
/// names), a walk of the current list would reach a holder with budget that never saw the
/// token, and grant it a second time.
fn token_moved_by_grow(prefix: &str, from: usize, to: usize) -> String {
    let first = |t: &str, n| redis_ctr_client::spread::probe_order(t.as_bytes(), n)[0];
    (0..1000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|t| first(t, to) < from && first(t, to) != first(t, from))
        .expect("a token whose first holder moves")
}

/// A token whose probe order over `n` holders starts at a holder, not the home.
fn token_starting_on_a_holder(prefix: &str, n: usize) -> String {
    (0..1000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|t| redis_ctr_client::spread::probe_order(t.as_bytes(), n)[0] != 0)
        .expect("a token that starts on a holder")
}

/// A floored counter of 300 units spread over 3 holders, and a time after the spread that the
/// home's clock has reached: its coarse clock trails this one by a few ms (a time ahead of it
/// is waited for by the router, but refused by `ctr_holders_at`).
fn stock_of_three<C: CtrCommands>(con: &mut C, key: &str) -> (Vec<String>, i64) {
    con.ctr_add(key, 300).unwrap();
    con.ctr_floor(key, Some(0)).unwrap();
    let three = con.ctr_spread(key, 3).unwrap();
    std::thread::sleep(Duration::from_millis(40));
    (three, now_ms() - 20)
}

/// A tokened purchase through one router, a grow, and a retry of the same token and `at`
/// through a second, fresh router (another process): the retry walks the holders in force at
/// `at` (`CTR.HOLDERS key AT`), replays the first reply, and the total is decremented once.
/// The token's first holder over the grown list is an old holder that never saw it: a retry
/// over the current list would be granted there a second time. Without `at`, a purchase walks
/// the current list and sends no `AT`, and its retry through the same router walks the list it
/// remembered for the token. The first case again through the async router.
#[test]
fn a_purchase_retried_through_another_router_after_a_grow_is_granted_once() {
    let server = Server::start();
    let client = redis::Client::open(url(server.port, false)).unwrap();
    let mut con = client.get_connection().unwrap();
    let (three, at) = stock_of_three(&mut con, "grown");
    let token = token_moved_by_grow("order", 3, 5);
    let first_router = SpreadRouter::default();
    let first = first_router
        .decrfloor(&mut con, "grown", 7, Some(token.as_bytes()), Some(at))
        .unwrap();
    assert!(first.is_some(), "7 of 300: {first:?}");
    assert_eq!(con.ctr_get("grown").unwrap(), 293);
    let five = con.ctr_spread("grown", 5).unwrap();
    assert_eq!(five[..3], three[..]);
    assert_eq!(con.ctr_holders_at("grown", at).unwrap(), three);
    let retry = SpreadRouter::default()
        .decrfloor(&mut con, "grown", 7, Some(token.as_bytes()), Some(at))
        .unwrap();
    assert_eq!(retry, first, "the retry replays the first reply");
    assert_eq!(con.ctr_get("grown").unwrap(), 293, "granted once");

    // Without `at`: the current list (a router that reads it at every purchase), no `AT`
    // sent, no list at a time read; the list is remembered for the token, so a retry through
    // this router after a grow walks it again.
    let mut recording = Recording::new(client.get_connection().unwrap());
    let current = SpreadRouter::new(Duration::ZERO);
    let token = token_moved_by_grow("current", 5, 7);
    let first = current
        .decrfloor(&mut recording, "grown", 3, Some(token.as_bytes()), None)
        .unwrap();
    assert!(first.is_some());
    assert!(recording.sent_any("CTR.DECRFLOOR"), "{:?}", recording.sent);
    assert!(recording.sent_any("TOKEN"));
    assert!(!recording.sent_any("AT"), "no AT: {:?}", recording.sent);
    assert_eq!(con.ctr_spread("grown", 7).unwrap()[..5], five[..]);
    let retry = current
        .decrfloor(&mut recording, "grown", 3, Some(token.as_bytes()), None)
        .unwrap();
    assert_eq!(retry, first);
    assert!(!recording.sent_any("AT"));
    assert_eq!(con.ctr_get("grown").unwrap(), 290, "granted once");
    // With `at`, the same router reads the list at that time and sends `AT`.
    let bought = current
        .decrfloor(&mut recording, "grown", 1, Some(b"with-at"), Some(at))
        .unwrap();
    assert!(bought.is_some());
    assert!(recording.sent_any("AT"));
    assert_eq!(con.ctr_get("grown").unwrap(), 289);

    block_on(async {
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let (three, at) = {
            let mut sync = client.get_connection().unwrap();
            stock_of_three(&mut sync, "grown-async")
        };
        let token = token_moved_by_grow("async", 3, 5);
        let bought = SpreadRouter::default()
            .decrfloor_async(&mut con, "grown-async", 7, Some(token.as_bytes()), Some(at))
            .await
            .unwrap();
        assert!(bought.is_some());
        assert_eq!(
            con.ctr_spread("grown-async", 5).await.unwrap()[..3],
            three[..]
        );
        let retry = SpreadRouter::default()
            .decrfloor_async(&mut con, "grown-async", 7, Some(token.as_bytes()), Some(at))
            .await
            .unwrap();
        assert_eq!(retry, bought);
        assert_eq!(con.ctr_get("grown-async").await.unwrap(), 293);
        // Its refund, through another router, walks the same list to the same holder.
        let refunded = SpreadRouter::default()
            .refund_async(&mut con, "grown-async", token.as_bytes(), Some(at))
            .await;
        assert_eq!(refunded.unwrap(), Some(7));
        assert_eq!(con.ctr_get("grown-async").await.unwrap(), 300);
    });
}

/// A tokened purchase granted by a holder, a shrink to 1 that folds that holder back, and a
/// retry of the same token and `at` through a fresh router: the folded holder replays the
/// grant, the total is decremented once, and sends its refund home (`RefundFolded` names the
/// add, which the router makes, once). A new token of that time walks the same list and
/// passes the folded holders (`HolderFolded`, as refusals) on to the home, which grants it;
/// untokened purchases through routers whose holder cache predates the shrink pass them too.
#[test]
fn a_purchase_retried_through_another_router_after_a_shrink_is_granted_once() {
    let server = Server::start();
    let mut con = redis::Client::open(url(server.port, false))
        .unwrap()
        .get_connection()
        .unwrap();
    let (three, at) = stock_of_three(&mut con, "shrunk");
    let token = token_starting_on_a_holder("order", 3);
    let first = SpreadRouter::default()
        .decrfloor(&mut con, "shrunk", 7, Some(token.as_bytes()), Some(at))
        .unwrap();
    assert!(first.is_some(), "7 of 300: {first:?}");
    let stale: Vec<SpreadRouter> = (0..10)
        .map(|_| {
            let router = SpreadRouter::new(Duration::from_secs(60));
            assert_eq!(router.holders(&mut con, b"shrunk").unwrap().len(), 3);
            router
        })
        .collect();
    assert_eq!(con.ctr_spread("shrunk", 1).unwrap(), ["shrunk"]);
    assert_eq!(con.ctr_holders_at("shrunk", at).unwrap(), three);
    let retry = SpreadRouter::default()
        .decrfloor(&mut con, "shrunk", 7, Some(token.as_bytes()), Some(at))
        .unwrap();
    assert_eq!(retry, first, "the folded holder replays the grant");
    assert_eq!(con.ctr_get("shrunk").unwrap(), 293, "granted once");
    // Its units went home with the fold: the refund follows them there, once, whether the
    // router meets the fold on its way (it asks again) or landed.
    for _ in 0..2 {
        let refund = SpreadRouter::default().refund(&mut con, "shrunk", token.as_bytes(), Some(at));
        assert_eq!(refund.unwrap(), Some(7));
        assert_eq!(con.ctr_get("shrunk").unwrap(), 300);
    }
    let late = token_starting_on_a_holder("late", 3);
    let bought = SpreadRouter::default()
        .decrfloor(&mut con, "shrunk", 3, Some(late.as_bytes()), Some(at))
        .unwrap();
    assert_eq!(bought, Some(297), "granted by the home");
    for router in &stale {
        let bought = router.decrfloor(&mut con, "shrunk", 1, None, None).unwrap();
        assert!(bought.is_some(), "the home grants");
    }
    assert_eq!(con.ctr_get("shrunk").unwrap(), 287);
}

/// The home refuses a list at a time ahead of its clock (`HoldersAhead`). A purchase whose
/// `at` is a little ahead waits for the home's clock to reach it, and walks the list at that
/// very time; one further ahead than the purchase wait is refused with that error at once,
/// nothing sent.
#[test]
fn a_callers_at_ahead_of_the_homes_clock_is_waited_for_or_refused() {
    let server = Server::start();
    let mut con = redis::Client::open(url(server.port, false))
        .unwrap()
        .get_connection()
        .unwrap();
    let (three, _) = stock_of_three(&mut con, "ahead");
    let refused = con.ctr_holders_at("ahead", now_ms() + 60_000);
    assert_eq!(module_error(refused), ModuleError::HoldersAhead);

    let started = Instant::now();
    let soon = now_ms() + 300;
    let bought = SpreadRouter::default()
        .decrfloor(&mut con, "ahead", 1, Some(b"soon"), Some(soon))
        .unwrap();
    assert!(bought.is_some());
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(con.ctr_holders_at("ahead", soon).unwrap(), three);
    let started = Instant::now();
    let later = SpreadRouter::default().decrfloor(
        &mut con,
        "ahead",
        1,
        Some(b"later"),
        Some(now_ms() + 30_000),
    );
    assert_eq!(module_error(later), ModuleError::HoldersAhead);
    assert!(started.elapsed() < Duration::from_secs(1), "not waited for");
    assert_eq!(con.ctr_get("ahead").unwrap(), 299);
}

/// A connection that keeps every command it sends, to check what a router sent.
struct Recording {
    con: redis::Connection,
    sent: Vec<String>,
}

impl Recording {
    fn new(con: redis::Connection) -> Recording {
        Recording {
            con,
            sent: Vec::new(),
        }
    }

    /// True when a command sent had `arg` as one of its arguments.
    fn sent_any(&self, arg: &str) -> bool {
        let packed = format!("${}\r\n{arg}\r\n", arg.len());
        self.sent.iter().any(|cmd| cmd.contains(&packed))
    }
}

impl redis::ConnectionLike for Recording {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.sent.push(String::from_utf8_lossy(cmd).into_owned());
        self.con.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        self.sent.push(String::from_utf8_lossy(cmd).into_owned());
        self.con.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.con.check_connection()
    }

    fn is_open(&self) -> bool {
        self.con.is_open()
    }
}

/// A router with the list from before a shrink sends a tokened add to a holder the shrink is
/// folding back (its credit held here, so the fold never lands): the holder waits in the
/// server, answers `AddAwaitsFold` past that, and the router asks it again, same token, for
/// its purchase wait, then returns that error; nothing was counted. A retry of a token the
/// holder counted before its seal replays at once (its units went home with the fold).
#[test]
fn a_tokened_add_to_a_folding_holder_is_asked_again_and_never_passed_on_early() {
    let server = Server::start_with(&[], &["debug-hold-credits", "yes"]);
    let mut con = redis::Client::open(url(server.port, false))
        .unwrap()
        .get_connection()
        .unwrap();
    con.ctr_add("restock", 10).unwrap();
    let three: Vec<Vec<u8>> = (con.ctr_spread("restock", 3).unwrap().into_iter())
        .map(String::into_bytes)
        .collect();
    let wait = Duration::from_millis(400);
    let stale = SpreadRouter::new(Duration::from_secs(60)).with_purchase_wait(wait);
    assert_eq!(*stale.holders(&mut con, b"restock").unwrap(), three);
    let on_last = |prefix: &str| {
        (0..)
            .map(|i| format!("{prefix}-{i}"))
            .find(|t| holder_for_token(&three, t.as_bytes()) == three[2].as_slice())
            .unwrap()
    };
    let (counted, new) = (on_last("counted"), on_last("new"));
    let add = |con: &mut redis::Connection, token: &str| {
        stale.add(con, "restock", 5, &AddOptions::new().token(token))
    };
    assert_eq!(add(&mut con, &counted).unwrap(), Some(5));
    assert_eq!(con.ctr_spread("restock", 1).unwrap(), ["restock"]);
    let last = String::from_utf8(three[2].clone()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while con.ctr_add(&last, 0).is_ok() {
        assert!(Instant::now() < deadline, "never sealed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    assert_eq!(
        module_error(add(&mut con, &new)),
        ModuleError::AddAwaitsFold
    );
    assert!(
        started.elapsed() >= wait,
        "asked again for its purchase wait"
    );
    assert_eq!(con.ctr_get("restock").unwrap(), 15, "nothing counted");
    let started = Instant::now();
    assert_eq!(add(&mut con, &counted).unwrap(), Some(0), "replayed");
    assert!(started.elapsed() < wait, "at once");
    assert_eq!(con.ctr_get("restock").unwrap(), 15);
}

/// A writer's sums that meet a holder whose fold is on its way (its credit held here, so it
/// never lands) are kept and sent again to that holder, never dropped: the holder answers
/// `AddAwaitsFold` past its wait in the server, and a flush returns that error with the sum
/// held back; `close` then lists it as undelivered. The sums its token sends to the home count.
#[test]
fn a_writers_sum_meeting_a_holder_mid_fold_is_kept_not_dropped() {
    let server = Server::start_with(&[], &["debug-hold-credits", "yes"]);
    let client = redis::Client::open(url(server.port, false)).unwrap();
    let mut con = client.get_connection().unwrap();
    con.ctr_add("mid", 10).unwrap();
    let three = con.ctr_spread("mid", 3).unwrap();
    let config = WriterConfig {
        flush_interval: Duration::from_secs(60),
        spread_refresh: Some(Duration::from_secs(60)),
        retries: 1,
        retry_backoff: Duration::from_millis(10),
        close_timeout: Duration::from_millis(300),
        ..WriterConfig::default()
    };
    let writer = CoalescingWriter::new(client, config);
    writer.add("mid", 1).unwrap();
    writer.flush().unwrap(); // the writer learns the three holders
    assert_eq!(con.ctr_spread("mid", 1).unwrap(), ["mid"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while three[1..].iter().any(|h| con.ctr_add(h, 0).is_ok()) {
        assert!(Instant::now() < deadline, "never sealed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut adds = 1;
    let held = (0..20).find_map(|_| {
        writer.add("mid", 1).unwrap();
        adds += 1;
        writer.flush().err()
    });
    let Some(WriterError::Flush(error)) = held else {
        panic!("no sum met a folding holder: {held:?}");
    };
    assert_eq!(module_error::<()>(Err(error)), ModuleError::AddAwaitsFold);
    assert_eq!(writer.stats().dropped, 0, "kept for the next flush");
    let counted = con.ctr_get("mid").unwrap();
    match writer.close() {
        Err(WriterError::Undelivered { sums, .. }) => {
            assert_eq!(sums.len(), 1);
            assert_eq!(counted + sums[0].1, 10 + adds, "every add counted or held");
        }
        other => panic!("the held sum is undelivered: {other:?}"),
    }
}

/// A counter of four members with 100 of room: at 0 under `CTR.CEIL 100` (`ceiled`), or at 100
/// over `CTR.FLOOR 0`; each member holds a quarter of the room.
fn bounded_spread<C: CtrCommands>(con: &mut C, key: &str, ceiled: bool) {
    if ceiled {
        con.ctr_add(key, 0).unwrap();
        con.ctr_ceil(key, Some(100)).unwrap();
    } else {
        con.ctr_add(key, 100).unwrap();
        con.ctr_floor(key, Some(0)).unwrap();
    }
    assert_eq!(con.ctr_spread(key, 4).unwrap().len(), 4);
}

/// The room each member of a spread counter has left for adds toward its bound: its share of
/// the ceiling's room (`ceiling_budgets`), or of the floor's (`budgets`).
fn member_rooms<C: CtrCommands>(con: &mut C, key: &str, ceiled: bool) -> Vec<i64> {
    let members = con.ctr_holders(key).unwrap();
    members
        .iter()
        .map(|member| {
            let info = con.ctr_info(member).unwrap().expect("a member");
            let budgets = if ceiled {
                info.ceiling_budgets
            } else {
                info.budgets
            };
            budgets.expect("a bounded member").iter().sum()
        })
        .collect()
}

type Adder<'a> = dyn FnMut(&str, i64, &AddOptions) -> Result<Option<i64>, CtrError> + 'a;

/// Adds toward the bound of a [`bounded_spread`] counter through `add`: adds of 10 are None
/// only once no member has room for 10 (each holds a quarter of the room: without the walk
/// the first full member would refuse), adds of 5 then reach the bound exactly, and the next
/// add of 1 is None. With `tokens`, every add is retried with its token through `add` and
/// through `other` (another router on another connection), before and after room was made at
/// every member: each is applied (or refused) as it first was, and counts once.
fn walk_to_the_bound(
    con: &mut redis::Connection,
    key: &str,
    ceiled: bool,
    tokens: Option<&str>,
    add: &mut Adder<'_>,
    other: &mut Adder<'_>,
) {
    let (sign, start) = if ceiled { (1, 0) } else { (-1, 100) };
    let mut sent: Vec<(AddOptions, i64, Option<i64>)> = Vec::new();
    let mut next = |delta: i64| {
        let options = match tokens {
            Some(prefix) => AddOptions::new().token(format!("{prefix}-{}", sent.len())),
            None => AddOptions::new(),
        };
        let reply = add(key, sign * delta, &options).unwrap();
        sent.push((options, sign * delta, reply));
        reply
    };
    let mut counted = 0;
    while next(10).is_some() {
        counted += 10;
        assert!(counted <= 100, "past the bound");
    }
    let rooms = member_rooms(con, key, ceiled);
    assert!(
        rooms.iter().all(|room| *room < 10),
        "an add of 10 refused while a member had room for it: {rooms:?}"
    );
    assert!(
        counted >= 80,
        "two adds of 10 fit in each quarter: {counted}"
    );
    assert_eq!(con.ctr_get(key).unwrap(), start + sign * counted);
    while next(5).is_some() {
        counted += 5;
        assert!(counted <= 100, "past the bound");
    }
    assert_eq!(counted, 100);
    assert_eq!(con.ctr_get(key).unwrap(), start + sign * 100);
    assert_eq!(next(1), None, "no room left anywhere");
    assert_eq!(member_rooms(con, key, ceiled), [0, 0, 0, 0]);
    if tokens.is_none() {
        return;
    }
    // A retry of a token a member counted replies that member's current value (as any
    // replayed CTR.ADD), of a token every member refused None again.
    let retry_all = |add: &mut Adder<'_>| {
        for (options, delta, reply) in &sent {
            let again = add(key, *delta, options).unwrap();
            assert_eq!(again.is_some(), reply.is_some(), "{options:?}");
        }
    };
    retry_all(add);
    retry_all(other);
    assert_eq!(con.ctr_get(key).unwrap(), start + sign * 100);
    // Room at every member: a walk decided afresh would count a token again somewhere.
    for member in con.ctr_holders(key).unwrap() {
        con.ctr_add(&member, -sign * 10).unwrap().expect("applied");
    }
    retry_all(other);
    retry_all(add);
    assert_eq!(con.ctr_get(key).unwrap(), start + sign * 60);
}

/// The four walks: ceiled and floored, untokened and tokened.
const WALKS: [(&str, bool, Option<&str>); 4] = [
    ("walk:ceil", true, None),
    ("walk:ceil:tokened", true, Some("c")),
    ("walk:floor", false, None),
    ("walk:floor:tokened", false, Some("f")),
];

/// `SpreadRouter::add` of a spread counter whose member refuses an add (nil: its share of the
/// ceiling's or the floor's room is used up) walks on to the other members; a counter that is
/// not spread, or an add the first member applies, is still one command.
#[test]
fn router_adds_refused_by_one_members_share_walk_on_to_the_others() {
    let server = Server::start();
    let client = redis::Client::open(url(server.port, false)).unwrap();
    let mut con = client.get_connection().unwrap();
    for (key, ceiled, tokens) in WALKS {
        bounded_spread(&mut con, key, ceiled);
        let (router, mut writes) = (SpreadRouter::default(), client.get_connection().unwrap());
        let (other, mut other_con) = (SpreadRouter::default(), client.get_connection().unwrap());
        walk_to_the_bound(
            &mut con,
            key,
            ceiled,
            tokens,
            &mut |k, d, o| router.add(&mut writes, k, d, o),
            &mut |k, d, o| other.add(&mut other_con, k, d, o),
        );
    }

    let router = SpreadRouter::default();
    bounded_spread(&mut con, "walk:cost", true);
    router
        .add(&mut con, "walk:cost", 1, &AddOptions::new())
        .unwrap();
    let before = command_calls(&mut con, "ctr.add");
    for _ in 0..8 {
        let added = router.add(&mut con, "walk:cost", 1, &AddOptions::new());
        assert!(added.unwrap().is_some());
    }
    assert_eq!(
        command_calls(&mut con, "ctr.add") - before,
        8,
        "one command each"
    );
    con.ctr_add("walk:plain", 0).unwrap();
    con.ctr_ceil("walk:plain", Some(5)).unwrap();
    let before = command_calls(&mut con, "ctr.add");
    let refused = router.add(&mut con, "walk:plain", 6, &AddOptions::new().token("p"));
    assert_eq!(refused.unwrap(), None);
    assert_eq!(
        command_calls(&mut con, "ctr.add") - before,
        1,
        "not spread: no walk"
    );
}

/// The async twin: `SpreadRouter::add_async` walks the same members.
#[test]
fn async_router_adds_refused_by_one_members_share_walk_on_to_the_others() {
    let server = Server::start();
    let client = redis::Client::open(url(server.port, true)).unwrap();
    let mut con = client.get_connection().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (key, ceiled, tokens) in WALKS {
        bounded_spread(&mut con, key, ceiled);
        let connect = || {
            let con = runtime.block_on(client.get_multiplexed_async_connection());
            (SpreadRouter::default(), con.unwrap())
        };
        let ((router, mut writes), (other, mut other_con)) = (connect(), connect());
        walk_to_the_bound(
            &mut con,
            key,
            ceiled,
            tokens,
            &mut |k, d, o| runtime.block_on(router.add_async(&mut writes, k, d, o)),
            &mut |k, d, o| runtime.block_on(other.add_async(&mut other_con, k, d, o)),
        );
    }
}

/// The coalescing writer's sums walk too: sums of 5 reach the bound exactly, the next sum of 1
/// is refused once every member refused it.
#[test]
fn writer_sums_refused_by_one_members_share_walk_on_to_the_others() {
    let server = Server::start();
    let client = redis::Client::open(url(server.port, false)).unwrap();
    let mut con = client.get_connection().unwrap();
    for (key, ceiled) in [("wwalk:ceil", true), ("wwalk:floor", false)] {
        bounded_spread(&mut con, key, ceiled);
        let (sign, start) = if ceiled { (1, 0) } else { (-1, 100) };
        let config = WriterConfig {
            flush_interval: Duration::from_secs(60),
            spread_refresh: Some(Duration::from_secs(60)),
            ..WriterConfig::default()
        };
        let writer = CoalescingWriter::new(client.clone(), config);
        for _ in 0..20 {
            writer.add(key, sign * 5).unwrap();
            writer.flush().unwrap();
        }
        assert_eq!(con.ctr_get(key).unwrap(), start + sign * 100);
        writer.add(key, sign).unwrap();
        writer.flush().unwrap();
        let stats = writer.close().unwrap();
        assert_eq!(con.ctr_get(key).unwrap(), start + sign * 100);
        assert_eq!((stats.flushed_sums, stats.refused), (20, 1), "{stats:?}");
        assert!(
            stats.walked >= 3,
            "the last sum asked every member: {stats:?}"
        );
        assert_eq!(
            stats.commands,
            21 + stats.walked + stats.retries,
            "{stats:?}"
        );
        assert_eq!(member_rooms(&mut con, key, ceiled), [0, 0, 0, 0]);
    }
}
