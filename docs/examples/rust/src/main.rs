//! redis-ctr from Rust with the `redis` crate: the module's commands through `redis::cmd`, the
//! `CTR.INFO` map under RESP3, and a cluster connection that routes each command by its key
//! (keys used together share a `{hash tag}`).
//!
//! Usage: `REDIS_PORT=6379 [REDIS_CLUSTER_PORT=7000] cargo run --release`

use std::collections::HashMap;

use redis::{cmd, RedisResult, Value};

fn env_port(name: &str) -> Option<u16> {
    std::env::var(name).ok().and_then(|p| p.parse().ok())
}

fn standalone(port: u16) -> RedisResult<()> {
    // `protocol=resp3`: maps arrive as maps (RESP2 clients get flat field/value arrays).
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/?protocol=resp3"))?;
    let mut con = client.get_connection()?;
    cmd("DEL")
        .arg(&["rs:views", "rs:paid", "rs:stock"])
        .exec(&mut con)?;

    let views: i64 = cmd("CTR.ADD").arg("rs:views").arg(41).query(&mut con)?;
    assert_eq!(views, 41);
    let both: Vec<i64> = cmd("CTR.MGET")
        .arg(&["rs:views", "rs:none"])
        .query(&mut con)?;
    assert_eq!(both, [41, 0]);

    // A retried add with the same token counts once.
    for _ in 0..3 {
        let paid: i64 = cmd("CTR.ADD")
            .arg(&["rs:paid", "1", "TOKEN", "order-7"])
            .query(&mut con)?;
        assert_eq!(paid, 1);
    }

    // A floored counter: a decrement that would cross the floor is refused with nil.
    cmd("CTR.ADD").arg(&["rs:stock", "5"]).exec(&mut con)?;
    cmd("CTR.FLOOR").arg(&["rs:stock", "0"]).exec(&mut con)?;
    let granted: Option<i64> = cmd("CTR.DECRFLOOR")
        .arg(&["rs:stock", "4"])
        .query(&mut con)?;
    let refused: Option<i64> = cmd("CTR.DECRFLOOR")
        .arg(&["rs:stock", "4"])
        .query(&mut con)?;
    assert_eq!((granted, refused), (Some(1), None));

    // CTR.INFO is a map: read it as one.
    let info: HashMap<String, Value> = cmd("CTR.INFO").arg("rs:stock").query(&mut con)?;
    let value: i64 = redis::from_redis_value(&info["value"])?;
    let budgets: Vec<i64> = redis::from_redis_value(&info["budgets"])?;
    assert_eq!((value, budgets.iter().sum::<i64>()), (1, 1));
    println!("standalone: views {views} | stock {value}, budgets {budgets:?}");
    Ok(())
}

fn cluster(port: u16) -> RedisResult<()> {
    let client = redis::cluster::ClusterClient::new(vec![format!("redis://127.0.0.1:{port}")])?;
    let mut con = client.get_connection()?;
    // Every CTR.* / PNC.* command has its (first) key at argument 1: the client routes by it.
    for i in 0..100 {
        cmd("CTR.ADD")
            .arg(format!("rs:counter:{i}"))
            .arg(i)
            .exec(&mut con)?;
    }
    let mut sum = 0;
    for i in 0..100 {
        let v: i64 = cmd("CTR.GET")
            .arg(format!("rs:counter:{i}"))
            .query(&mut con)?;
        sum += v;
    }
    assert_eq!(sum, (0..100).sum::<i64>());

    // Several keys in one command: one hash tag, one slot.
    cmd("CTR.ADD")
        .arg(&["{rs:page}:views", "3"])
        .exec(&mut con)?;
    let pair: Vec<i64> = cmd("CTR.MGET")
        .arg(&["{rs:page}:views", "{rs:page}:likes"])
        .query(&mut con)?;
    assert_eq!(pair, [3, 0]);
    // Across slots the server refuses.
    let across: RedisResult<Vec<i64>> = cmd("CTR.MGET")
        .arg(&["{rs:a}:x", "{rs:b}:x"])
        .query(&mut con);
    let refusal = across.expect_err("keys in two slots");
    assert_eq!(refusal.code(), Some("CROSSSLOT"));
    println!("cluster: 100 counters summed to {sum} | MGET {pair:?} | across slots: CROSSSLOT");
    Ok(())
}

fn main() -> RedisResult<()> {
    standalone(env_port("REDIS_PORT").unwrap_or(6379))?;
    if let Some(port) = env_port("REDIS_CLUSTER_PORT") {
        cluster(port)?;
    }
    Ok(())
}
