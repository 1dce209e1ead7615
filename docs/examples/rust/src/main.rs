//! redis-ctr from Rust with the `redis-ctr-client` crate (clients/rust, on the `redis` crate):
//! `CtrCommands` adds typed `ctr_*` and `pnc_*` methods to every connection, the same replies
//! under RESP2 and RESP3 (`CTR.INFO` as a struct, refusals as `None`), the module's errors as
//! `ModuleError`; a cluster connection routes each command by its key (keys used together
//! share a `{hash tag}`).
//!
//! Usage: `REDIS_PORT=6379 [REDIS_CLUSTER_PORT=7000] cargo run --release`

use redis_ctr_client::{
    AddOptions, CoalescingWriter, CtrCommands, CtrError, ModuleError, SpreadRouter, WriterConfig,
};

fn env_port(name: &str) -> Option<u16> {
    std::env::var(name).ok().and_then(|p| p.parse().ok())
}

fn standalone(port: u16) -> Result<(), Box<dyn std::error::Error>> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let mut con = client.get_connection()?;
    redis::cmd("DEL")
        .arg(&["rs:views", "rs:paid", "rs:stock", "rs:hits"])
        .exec(&mut con)?;

    assert_eq!(con.ctr_add("rs:views", 41)?, Some(41));
    assert_eq!(con.ctr_mget(&["rs:views", "rs:none"])?, [41, 0]);

    // A retried add with the same token counts once.
    let order = AddOptions::new().token("order-7");
    for _ in 0..3 {
        assert_eq!(con.ctr_add_with("rs:paid", 1, &order)?, Some(1));
    }

    // A floored counter: a decrement that would cross the floor is refused with None.
    con.ctr_add("rs:stock", 5)?;
    con.ctr_floor("rs:stock", Some(0))?;
    assert_eq!(con.ctr_decrfloor("rs:stock", 4)?, Some(1));
    assert_eq!(con.ctr_decrfloor("rs:stock", 4)?, None);
    // The module's errors come as kinds.
    match con.ctr_floor("rs:stock", Some(10)) {
        Err(CtrError::Module(ModuleError::BelowFloor, _)) => {}
        other => panic!("expected BelowFloor, got {other:?}"),
    }

    let info = con.ctr_info("rs:stock")?.expect("the counter exists");
    let budgets = info.budgets.unwrap_or_default();
    assert_eq!((info.value, budgets.iter().sum::<i64>()), (1, 1));

    // A thousand +1 become one tokened CTR.ADD (flushed by close, and every 100 ms or 10,000
    // adds before it); a flush retried after a lost reply counts once.
    let writer = CoalescingWriter::new(client.clone(), WriterConfig::default());
    for _ in 0..1000 {
        writer.add("rs:hits", 1)?;
    }
    let stats = writer.close()?;
    let hits = con.ctr_get("rs:hits")?;
    println!(
        "standalone: views 41 | stock {}, budgets {budgets:?} | hits {hits} in {} command(s)",
        info.value, stats.commands
    );
    floored_spread(&mut con)
}

/// A flash sale: a floored counter spread over 4 holders (one server here), bought from by the
/// probe rule; every purchase retried, as after a timeout, replays its first answer.
fn floored_spread(con: &mut redis::Connection) -> Result<(), Box<dyn std::error::Error>> {
    let old = con
        .ctr_info("rs:drop")?
        .and_then(|i| i.holders)
        .unwrap_or_default();
    redis::cmd("DEL").arg("rs:drop").arg(&old).exec(con)?;
    con.ctr_add("rs:drop", 12)?;
    con.ctr_floor("rs:drop", Some(0))?;
    let router = SpreadRouter::default();
    router.spread(con, "rs:drop", 4)?;
    let mut buy = |i: usize| {
        let token = format!("drop-order-{i}");
        router.decrfloor(con, "rs:drop", 1, Some(token.as_bytes()), None)
    };
    let bought = (0..15).map(&mut buy).collect::<Result<Vec<_>, _>>()?;
    let retried = (0..15).map(&mut buy).collect::<Result<Vec<_>, _>>()?;
    assert_eq!(retried, bought);
    let granted = bought.iter().filter(|b| b.is_some()).count();
    let stock = con.ctr_get("rs:drop")?;
    println!(
        "drop: {granted} of 15 purchases granted over 4 holders, retries replayed, stock {stock}"
    );
    Ok(())
}

fn cluster(port: u16) -> Result<(), Box<dyn std::error::Error>> {
    let client = redis::cluster::ClusterClient::new(vec![format!("redis://127.0.0.1:{port}")])?;
    let mut con = client.get_connection()?;
    for i in 0..100 {
        con.ctr_add(format!("rs:counter:{i}"), i)?;
    }
    let mut sum = 0;
    for i in 0..100 {
        sum += con.ctr_get(format!("rs:counter:{i}"))?;
    }
    assert_eq!(sum, (0..100).sum::<i64>());

    // Several keys in one command: one hash tag, one slot.
    con.ctr_add("{rs:page}:views", 3)?;
    let pair = con.ctr_mget(&["{rs:page}:views", "{rs:page}:likes"])?;
    assert_eq!(pair, [3, 0]);
    // Across slots the server refuses.
    let refusal = match con.ctr_mget(&["{rs:a}:x", "{rs:b}:x"]) {
        Err(CtrError::Redis(e)) => e.code().unwrap_or_default().to_string(),
        other => panic!("keys in two slots: {other:?}"),
    };
    assert_eq!(refusal, "CROSSSLOT");
    println!("cluster: 100 counters summed to {sum} | MGET {pair:?} | across slots: {refusal}");
    spread_counter(&client)
}

/// A hot counter spread over holders on every master, written from 4 threads (each as a
/// separate process would: its own connection and router) with `add`, read with `ctr_get`.
fn spread_counter(
    client: &redis::cluster::ClusterClient,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut con = client.get_connection()?;
    let old = con.ctr_info("rs:site:views")?.and_then(|info| info.holders);
    for holder in old.unwrap_or_default().iter().rev() {
        redis::cmd("DEL").arg(holder).exec(&mut con)?; // a fresh start when run again
    }
    redis::cmd("DEL").arg("rs:site:views").exec(&mut con)?;
    let holders = SpreadRouter::default().spread(&mut con, "rs:site:views", 6)?;
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..4)
            .map(|writer| {
                scope.spawn(move || -> Result<(), CtrError> {
                    let mut con = client.get_connection()?;
                    let router = SpreadRouter::default();
                    for _ in 0..250 {
                        router.add(&mut con, "rs:site:views", 1, &AddOptions::new())?;
                    }
                    // A tokened add goes to the token's holder; its retry reaches the same one.
                    let batch = AddOptions::new().token(format!("batch-{writer}"));
                    for _ in 0..2 {
                        router.add(&mut con, "rs:site:views", 100, &batch)?;
                    }
                    Ok(())
                })
            })
            .collect();
        writers
            .into_iter()
            .try_for_each(|w| w.join().expect("writer thread"))
    })?;
    let total = con.ctr_get("rs:site:views")?;
    assert_eq!(total, 4 * 250 + 4 * 100);
    let info = con.ctr_info("rs:site:views")?.ok_or("no counter")?;
    let per_holder = info.holder_values.unwrap_or_default();
    assert!(per_holder.iter().all(|&v| v > 0));
    println!(
        "cluster: spread counter over {} holders, written by 4 threads: {total} (per holder {per_holder:?})",
        holders.len()
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    standalone(env_port("REDIS_PORT").unwrap_or(6379))?;
    if let Some(port) = env_port("REDIS_CLUSTER_PORT") {
        cluster(port)?;
    }
    Ok(())
}
