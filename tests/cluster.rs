//! Redis Cluster: three masters started by the test, the module on each. Counters land on the
//! master of their slot and read back exactly through a cluster client; every command works on
//! keys in any slot; multi-key commands across slots are refused with CROSSSLOT; and a slot
//! resharded with live keys moves its counters intact (values, tokens, floors and budgets,
//! buckets, TTLs, digests).

mod common;

use std::time::{Duration, Instant};

use common::cluster::{crc16, key_slot, slot_map, tag_for_slot, Cluster, ClusterClient};
use common::{Conn, Value};

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// The server's clock (unix ms), from TIME on the node of slot 0.
fn server_ms(client: &mut ClusterClient) -> i64 {
    let t = client.cmd(&["TIME"]).array();
    t[0].text().parse::<i64>().unwrap() * 1000 + t[1].text().parse::<i64>().unwrap() / 1000
}

fn ok() -> Value {
    Value::Simple("OK".into())
}

#[test]
fn crc16_and_key_slots_follow_the_cluster_spec() {
    assert_eq!(crc16(b"123456789"), 0x31c3);
    assert_eq!(key_slot(b"foo"), 12182);
    assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
    assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    assert_eq!(
        key_slot(b"foo{}{bar}"),
        crc16(b"foo{}{bar}") % 16384,
        "an empty tag hashes the whole key"
    );
}

#[test]
fn three_hundred_counters_spread_over_every_master_and_read_back_exactly() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let keys: Vec<String> = (0..300).map(|i| format!("counter:{i}")).collect();
    let value = |i: usize| i as i64 * 7 - 1000;

    // Our slot function is the server's (binary keys and tags included).
    let mut c0 = cluster.nodes[0].conn();
    for key in
        keys.iter()
            .map(String::as_bytes)
            .chain([&b"{tag}x"[..], b"a{}b", b"\xff\x00{\xfe}", b""])
    {
        assert_eq!(
            c0.cmd(&[&b"CLUSTER"[..], b"KEYSLOT", key]),
            Value::Int(i64::from(key_slot(key))),
            "{key:?}"
        );
    }

    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            client.cmd(&["CTR.ADD", key, &value(i).to_string()]),
            Value::Int(value(i))
        );
    }
    assert_eq!(client.moved, 0, "the slot map was right from the start");

    // Each key lives on the master that owns its slot, and only there; every master holds some.
    let local_keys: Vec<Vec<String>> = cluster
        .nodes
        .iter()
        .map(|node| {
            let mut keys: Vec<String> = node
                .conn()
                .q("KEYS *")
                .array()
                .iter()
                .map(Value::text)
                .collect();
            keys.sort();
            keys
        })
        .collect();
    let mut per_node = vec![0i64; cluster.nodes.len()];
    for key in &keys {
        let owner = cluster.owner(key_slot(key.as_bytes()));
        per_node[owner] += 1;
        for (n, held) in local_keys.iter().enumerate() {
            assert_eq!(
                held.binary_search(key).is_ok(),
                n == owner,
                "{key} on node {n}"
            );
        }
    }
    assert!(per_node.iter().all(|&n| n > 0), "per node: {per_node:?}");
    for (n, held) in local_keys.iter().enumerate() {
        assert_eq!(held.len() as i64, per_node[n]);
    }
    assert_eq!(per_node.iter().sum::<i64>(), 300);

    // Read back through the cluster client: exact, one by one and with same-slot MGETs.
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(client.cmd(&["CTR.GET", key]), Value::Int(value(i)));
    }
    for group in 0..10 {
        let tagged: Vec<String> = (0..5).map(|j| format!("{{page:{group}}}:{j}")).collect();
        for (j, key) in tagged.iter().enumerate() {
            client.cmd(&["CTR.ADD", key, &(j + 1).to_string()]);
        }
        let mut mget = vec!["CTR.MGET".to_string()];
        mget.extend(tagged.iter().cloned());
        mget.push(format!("{{page:{group}}}:missing"));
        assert_eq!(
            client.cmd(&mget),
            Value::Array((1..=5).chain([0]).map(Value::Int).collect())
        );
    }
}

/// Keys with the given prefix, one in a slot of each master (found by hash tag).
fn one_key_per_master(cluster: &Cluster, prefix: &str) -> Vec<String> {
    let n = cluster.nodes.len();
    (0..n)
        .map(|i| {
            // The middle slot of node i's range.
            let slot = (16384 * (2 * i + 1) / (2 * n)) as u16;
            assert_eq!(cluster.owner(slot), i);
            format!("{{{}}}:{prefix}", tag_for_slot(slot))
        })
        .collect()
}

#[test]
fn every_command_works_on_keys_in_any_slot_and_multi_key_ones_stay_in_one_slot() {
    let cluster = Cluster::start(3, &["bucket-ms", "1000", "settle-ms", "0"]);
    let mut client = cluster.client();

    // Tokens: a retry counts once, on every master.
    for i in 0..30 {
        let key = format!("orders:{i}");
        let token = format!("order-{i}");
        for _ in 0..3 {
            assert_eq!(
                client.cmd(&["CTR.ADD", &key, "5", "TOKEN", &token]),
                Value::Int(5)
            );
        }
        assert_eq!(
            client.cmd(&["CTR.INFO", &key]).field("duplicates_ignored"),
            Value::Int(2)
        );
    }

    for (n, base) in one_key_per_master(&cluster, "x").iter().enumerate() {
        let tag = &base[..base.find('}').unwrap() + 1];
        let owner = &cluster.nodes[n];
        let key = |name: &str| format!("{tag}:{name}");

        // Floors: never oversell, the ledger replays the first outcome.
        let stock = key("stock");
        assert_eq!(client.cmd(&["CTR.ADD", &stock, "5"]), Value::Int(5));
        assert_eq!(client.cmd(&["CTR.FLOOR", &stock, "0"]), ok());
        assert_eq!(
            client.cmd(&["CTR.DECRFLOOR", &stock, "3", "TOKEN", "o1"]),
            Value::Int(2)
        );
        assert_eq!(
            client.cmd(&["CTR.DECRFLOOR", &stock, "3", "TOKEN", "o2"]),
            Value::Nil
        );
        assert_eq!(client.cmd(&["CTR.ADD", &stock, "10"]), Value::Int(12));
        assert_eq!(
            client.cmd(&["CTR.DECRFLOOR", &stock, "3", "TOKEN", "o2"]),
            Value::Nil
        );
        assert_eq!(
            client.cmd(&["CTR.DECRFLOOR", &stock, "3", "TOKEN", "o1"]),
            Value::Int(2)
        );
        assert_eq!(client.cmd(&["CTR.CLEAR", &stock]), Value::Int(12));
        assert_eq!(owner.conn().cmd(&["CTR.GET", &stock]), Value::Int(0));

        // Reconcile from a stream, a sorted set and a set in the counter's slot.
        let log = key("log");
        for i in 0..7 {
            client.cmd(&["XADD", &log, "*", "order", &i.to_string()]);
        }
        let count = key("count");
        client.cmd(&["CTR.ADD", &count, "3"]);
        assert_eq!(
            client.cmd(&["CTR.RECONCILE", &count, "FROM", "STREAM", &log]),
            Value::Array(vec![Value::Int(7), Value::Int(-4)])
        );
        let zset = key("z");
        client.cmd(&["ZADD", &zset, "1", "a", "2", "b"]);
        assert!(
            client
                .cmd(&[
                    "CTR.RECONCILE",
                    &key("zc"),
                    "from",
                    "zset",
                    &zset,
                    "AT",
                    "1000"
                ])
                .is_error(),
            "a counter without history takes no AT"
        );
        assert_eq!(
            client.cmd(&["CTR.RECONCILE", &key("zc"), "from", "zset", &zset]),
            Value::Array(vec![Value::Int(2), Value::Int(-2)])
        );
        let set = key("s");
        client.cmd(&["SADD", &set, "a", "b", "c"]);
        assert_eq!(
            client.cmd(&["CTR.RECONCILE", &key("sc"), "FROM", "SET", &set]),
            Value::Array(vec![Value::Int(3), Value::Int(-3)])
        );
        assert_eq!(client.cmd(&["CTR.GET", &count]), Value::Int(7));

        // PN-counters: adds, state, merge into a key of another slot.
        let likes = key("likes");
        assert_eq!(client.cmd(&["PNC.ADD", &likes, "10"]), Value::Int(10));
        assert_eq!(client.cmd(&["PNC.ADD", &likes, "-3"]), Value::Int(7));
        let state = client.cmd(&["PNC.STATE", &likes]).bytes();
        let other = format!("likes-copy:{n}");
        assert_eq!(
            client.cmd(&[&b"PNC.MERGE"[..], other.as_bytes(), &state]),
            Value::Int(7)
        );
        assert_eq!(client.cmd(&["PNC.GET", &other]), Value::Int(7));
        assert_eq!(
            client.cmd(&["PNC.INFO", &likes]).field("value"),
            Value::Int(7)
        );
        assert_eq!(client.cmd(&["PNC.CLEAR", &likes]), Value::Int(7));

        // Everything with this tag landed on the slot's master.
        for k in [&stock, &log, &count, &zset, &likes] {
            assert_eq!(
                owner.conn().cmd(&["EXISTS", k.as_str()]),
                Value::Int(1),
                "{k}"
            );
        }
        // Same-slot multi-key reads work.
        assert_eq!(
            client.cmd(&["CTR.MGET", &count, &stock, &key("none")]),
            Value::Array(vec![Value::Int(7), Value::Int(0), Value::Int(0)])
        );
    }

    // Across slots, the server refuses multi-key commands, wherever they are sent, and on a
    // single node too (the rule is the slot, not the node). Nothing changes.
    let keys = one_key_per_master(&cluster, "c");
    let (a, b) = (&keys[0], &keys[1]);
    let src_b = b.replace(":c", ":src");
    client.cmd(&["XADD", &src_b, "*", "f", "v"]);
    let two_slots_one_node = (format!("{a}2"), {
        // Another slot of node 0.
        let slot = key_slot(a.as_bytes()) + 1;
        assert_eq!(cluster.owner(slot), 0);
        format!("{{{}}}:src", tag_for_slot(slot))
    });
    for node in &cluster.nodes {
        let mut c = node.conn();
        assert_eq!(c.cmd(&["CTR.MGET", a, b]).error(), CROSSSLOT);
        assert_eq!(
            c.cmd(&["CTR.MGET", a, &two_slots_one_node.1]).error(),
            CROSSSLOT
        );
        for kind in ["STREAM", "ZSET", "SET", "stream"] {
            for from in ["FROM", "from"] {
                assert_eq!(
                    c.cmd(&["CTR.RECONCILE", a, from, kind, &src_b]).error(),
                    CROSSSLOT,
                    "{from} {kind}"
                );
            }
        }
        assert_eq!(
            c.cmd(&["CTR.RECONCILE", a, "FROM", "STREAM", &src_b, "AT", "1000"])
                .error(),
            CROSSSLOT
        );
        assert_eq!(
            c.cmd(&[
                "CTR.RECONCILE",
                &two_slots_one_node.0,
                "FROM",
                "STREAM",
                &two_slots_one_node.1
            ])
            .error(),
            CROSSSLOT
        );
    }
    // A source named like a keyword is still the source: `FROM ZSET set AT w` reads the key
    // `set` (a key spec searching for the word SET would take the word after it, AT, for a
    // key, and refuse or misroute the command).
    let counter = "{set}:count";
    client.cmd(&["ZADD", "set", "1", "a"]);
    let started = server_ms(&mut client);
    assert_eq!(
        client.cmd(&["CTR.RECONCILE", counter, "FROM", "ZSET", "set"]),
        Value::Array(vec![Value::Int(1), Value::Int(-1)])
    );
    // The first bucket boundary after the history started, once it has passed (with a margin:
    // the module reads a coarse clock, a few ms behind TIME).
    let w = (started / 1000 + 1) * 1000;
    while server_ms(&mut client) < w + 50 {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        client.cmd(&[
            "CTR.RECONCILE",
            counter,
            "FROM",
            "ZSET",
            "set",
            "AT",
            &w.to_string()
        ]),
        Value::Array(vec![Value::Int(1), Value::Int(0)])
    );
    assert_eq!(
        client.cmd(&["EXISTS", a]),
        Value::Int(0),
        "refusals create nothing"
    );
}

/// Adds 1 about 200 times a second until the counter has `want` shards (promote-threshold 20).
fn heat(client: &mut ClusterClient, key: &str, want: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut added = 0;
    let shards = |client: &mut ClusterClient| match client.cmd(&["CTR.INFO", key]) {
        Value::Nil => 0,
        info => info.field("shards").int(),
    };
    while shards(client) < want {
        assert!(Instant::now() < deadline, "{key} never got {want} shards");
        for _ in 0..20 {
            client.cmd(&["CTR.ADD", key, "1"]).int();
            added += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    added
}

/// CTR.INFO without the fields that are this server's own observations (add_rate,
/// duplicates_ignored: not saved, not migrated, not in the digest).
fn durable_info(info: &Value) -> Vec<(String, Value)> {
    let items = info.array();
    items
        .chunks(2)
        .map(|kv| (kv[0].text(), kv[1].clone()))
        .filter(|(k, _)| k != "add_rate" && k != "duplicates_ignored")
        .collect()
}

fn digest(c: &mut Conn, key: &str) -> Value {
    c.cmd(&["DEBUG", "DIGEST-VALUE", key])
}

#[test]
fn resharding_a_slot_moves_live_counters_intact() {
    let cluster = Cluster::start(
        3,
        &[
            "promote-threshold",
            "20",
            "max-shards",
            "4",
            "bucket-ms",
            "1000",
            "settle-ms",
            "0",
        ],
    );
    let mut client = cluster.client();
    let slot = 100u16;
    let (from, to) = (cluster.owner(slot), 1usize);
    assert_eq!(from, 0);
    let tag = format!("{{{}}}", tag_for_slot(slot));
    let key = |name: &str| format!("{tag}:{name}");
    let (views, stock, count, log, rate, likes) = (
        key("views"),
        key("stock"),
        key("count"),
        key("log"),
        key("rate"),
        key("likes"),
    );

    // Live counters of every kind in the slot.
    assert_eq!(
        client.cmd(&["CTR.ADD", &views, "5", "TOKEN", "t1"]),
        Value::Int(5)
    );
    assert_eq!(
        client.cmd(&["CTR.ADD", &views, "5", "TOKEN", "t1"]),
        Value::Int(5)
    );
    client.cmd(&["CTR.ADD", &views, "2", "TOKEN", "t2"]);
    let heated = heat(&mut client, &stock, 2);
    client.cmd(&["CTR.ADD", &stock, "100"]);
    assert_eq!(client.cmd(&["CTR.FLOOR", &stock, "10"]), ok());
    let granted = client.cmd(&["CTR.DECRFLOOR", &stock, "7", "TOKEN", "buy-1"]);
    assert_eq!(granted, Value::Int(heated + 100 - 7));
    let too_much = (heated + 100).to_string();
    let refused = client.cmd(&["CTR.DECRFLOOR", &stock, &too_much, "TOKEN", "buy-2"]);
    assert_eq!(refused, Value::Nil);
    for i in 0..5 {
        client.cmd(&["XADD", &log, "*", "order", &i.to_string()]);
    }
    assert_eq!(
        client.cmd(&["CTR.RECONCILE", &count, "FROM", "STREAM", &log]),
        Value::Array(vec![Value::Int(5), Value::Int(-5)])
    );
    let now = server_ms(&mut client);
    for d in 1..=3 {
        client.cmd(&["CTR.ADD", &count, "1", "AT", &(now + d).to_string()]);
    }
    client.cmd(&["CTR.ADD", &rate, "1", "EX", "300"]);
    client.cmd(&["PNC.ADD", &likes, "9"]);

    let ctr_keys = [&views, &stock, &count, &rate];
    let all_keys = [&views, &stock, &count, &rate, &log, &likes];
    let mut src = cluster.nodes[from].conn();
    let before: Vec<(Vec<(String, Value)>, Value)> = ctr_keys
        .iter()
        .map(|k| {
            (
                durable_info(&src.cmd(&["CTR.INFO", k])),
                digest(&mut src, k),
            )
        })
        .collect();
    let stock_info = src.cmd(&["CTR.INFO", &stock]);
    assert_eq!(stock_info.field("shards"), Value::Int(2));
    let budgets: Vec<i64> = stock_info
        .field("budgets")
        .array()
        .iter()
        .map(Value::int)
        .collect();
    assert_eq!(budgets.iter().sum::<i64>(), heated + 100 - 7 - 10);
    let log_digest = digest(&mut src, &log);
    let pnc_state = src.cmd(&["PNC.STATE", &likes]);

    // Migrate: IMPORTING on the target, MIGRATING on the source, then the keys one at a time.
    let (from_id, to_id) = (cluster.ids[from].clone(), cluster.ids[to].clone());
    let to_port = cluster.nodes[to].port.to_string();
    let mut dst = cluster.nodes[to].conn();
    let s = slot.to_string();
    assert_eq!(
        dst.cmd(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]),
        ok()
    );
    assert_eq!(
        src.cmd(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]),
        ok()
    );
    let migrate = |src: &mut Conn, keys: &[&String]| {
        let mut args: Vec<&str> = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
        args.extend(keys.iter().map(|k| k.as_str()));
        assert_eq!(src.cmd(&args), ok());
    };
    migrate(&mut src, &[&log]);

    // Mid-migration: the stream has moved, the counter has not. A reconcile that reads both
    // is told to try again (it must never count a source that is not there); a single-key
    // command on the moved key is redirected with ASK, and on a key still here is served.
    assert!(
        src.cmd(&["CTR.RECONCILE", &count, "FROM", "STREAM", &log])
            .error()
            .starts_with("TRYAGAIN"),
        "a reconcile split across nodes"
    );
    assert!(src.cmd(&["XLEN", &log]).error().starts_with("ASK"));
    assert_eq!(src.cmd(&["CTR.GET", &count]), Value::Int(8));
    let asked = client.asked;
    assert_eq!(client.cmd(&["CTR.ADD", &key("new"), "4"]), Value::Int(4));
    assert_eq!(
        client.asked,
        asked + 1,
        "a new key in a migrating slot goes by ASK"
    );
    assert_eq!(dst.q("DBSIZE"), Value::Int(2));

    let rest: Vec<String> = src
        .cmd(&["CLUSTER", "GETKEYSINSLOT", &s, "100"])
        .array()
        .iter()
        .map(Value::text)
        .collect();
    assert_eq!(rest.len(), 5, "{rest:?}");
    migrate(&mut src, &rest.iter().collect::<Vec<_>>());
    for node in [to, from, 2] {
        let reply = cluster.nodes[node]
            .conn()
            .cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
        assert_eq!(reply, ok());
    }
    cluster.wait_settled();
    assert_eq!(cluster.owner(slot), to);
    assert_eq!(src.q("DBSIZE"), Value::Int(0));
    assert_eq!(src.cmd(&["CLUSTER", "COUNTKEYSINSLOT", &s]), Value::Int(0));

    // On the new owner: the same counters, bit for bit.
    for (k, (info, dig)) in ctr_keys.iter().zip(&before) {
        assert_eq!(&durable_info(&dst.cmd(&["CTR.INFO", k])), info, "{k}");
        assert_eq!(&digest(&mut dst, k), dig, "{k}");
    }
    assert_eq!(digest(&mut dst, &log), log_digest);
    assert_eq!(dst.cmd(&["PNC.STATE", &likes]), pnc_state);
    let ttl = dst.cmd(&["PTTL", &rate]).int();
    assert!(ttl > 250_000 && ttl <= 300_000, "TTL kept: {ttl}");

    // Through the client with its stale map: MOVED once, then tokens and the ledger are still
    // recognised, floors still hold, reconcile reads its source, PN adds go on.
    let moved = client.moved;
    assert_eq!(
        client.cmd(&["CTR.ADD", &views, "5", "TOKEN", "t1"]),
        Value::Int(7)
    );
    assert_eq!(client.moved, moved + 1);
    assert_eq!(client.port_for(views.as_bytes()), cluster.nodes[to].port);
    assert_eq!(
        client.cmd(&["CTR.ADD", &views, "2", "TOKEN", "t2"]),
        Value::Int(7)
    );
    assert_eq!(
        client.cmd(&["CTR.DECRFLOOR", &stock, "7", "TOKEN", "buy-1"]),
        granted,
        "a granted purchase replays its outcome"
    );
    client.cmd(&["CTR.ADD", &stock, &too_much]);
    assert_eq!(
        client.cmd(&["CTR.DECRFLOOR", &stock, &too_much, "TOKEN", "buy-2"]),
        Value::Nil,
        "a refused purchase stays refused after a restock"
    );
    let headroom = client.cmd(&["CTR.GET", &stock]).int() - 10;
    let over = (headroom + 1).to_string();
    assert_eq!(client.cmd(&["CTR.DECRFLOOR", &stock, &over]), Value::Nil);
    assert_eq!(
        client.cmd(&["CTR.DECRFLOOR", &stock, &headroom.to_string()]),
        Value::Int(10)
    );
    client.cmd(&["XADD", &log, "*", "order", "5"]);
    assert_eq!(
        client
            .cmd(&["CTR.RECONCILE", &count, "FROM", "STREAM", &log])
            .array()
            .len(),
        2
    );
    assert_eq!(client.cmd(&["PNC.ADD", &likes, "1"]), Value::Int(10));
    assert_eq!(
        src.q("DBSIZE"),
        Value::Int(0),
        "every key left the old node"
    );
    assert_eq!(dst.q("DBSIZE"), Value::Int(all_keys.len() as i64 + 1));
    // The new owner's slot map is what every node says.
    let map = slot_map(&mut cluster.nodes[2].conn()).unwrap();
    assert_eq!(map[slot as usize], cluster.nodes[to].port);
}
