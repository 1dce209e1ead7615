//! The flash sale of issue 22, measured from the moment of `CTR.SPREAD`, for
//! bench/floor_spread.sh: a floored counter of STOCK units (floor 0) is spread over HOLDERS
//! holders and, as soon as `CTR.SPREAD` replies (its shares still travelling to the holders),
//! BUYERS threads buy 1 unit each with a fresh token by the probe rule
//! (`SpreadRouter::decrfloor`, which asks a holder waiting for its share again), until the
//! counter reads 0. RETRY_PERCENT of the purchases are sent a second time with the same token
//! (a client retry) and must get the first answer again. A refusal is false when `CTR.GET` of the
//! home right after still shows a unit. Prints one line: purchases, units granted, refusals,
//! false refusals and their share, retries (all replayed), purchases that waited out the
//! router's budget wait, the units left, seconds. Exits non-zero on an oversell (more granted
//! than the stock) or a retry answered differently.
//! Usage: `flash_sale_bench SEED_PORT KEY STOCK HOLDERS BUYERS RETRY_PERCENT`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::Instant;

use redis::cluster::ClusterClientBuilder;
use redis_ctr_client::{CtrCommands, CtrError, ModuleError, SpreadRouter};

/// What the buyers counted.
#[derive(Default)]
struct Tally {
    purchases: AtomicU64,
    granted: AtomicI64,
    refused: AtomicU64,
    false_refused: AtomicU64,
    retried: AtomicU64,
    waited_out: AtomicU64,
    sold_out: AtomicBool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, port, key, stock, holders, buyers, retry] = args.as_slice() else {
        return Err(
            "usage: flash_sale_bench SEED_PORT KEY STOCK HOLDERS BUYERS RETRY_PERCENT".into(),
        );
    };
    let (stock, holders): (i64, u32) = (stock.parse()?, holders.parse()?);
    let (buyers, retry): (u64, u64) = (buyers.parse()?, retry.parse()?);
    // redis-rs's cluster client retries TRYAGAIN itself, by default after 1.28 s; a buyer
    // waiting for a share wants to ask again within milliseconds.
    let client = ClusterClientBuilder::new(vec![format!("redis://127.0.0.1:{port}/")])
        .min_retry_wait(5)
        .max_retry_wait(100)
        .build()?;
    let mut admin = client.get_connection()?;
    admin.ctr_add(key.as_str(), stock)?;
    admin.ctr_floor(key.as_str(), Some(0))?;
    let router = SpreadRouter::default();
    let tally = Tally::default();
    let ready = Barrier::new(buyers as usize + 1);
    let mut start = Instant::now();
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
        let mut threads = Vec::new();
        for b in 0..buyers {
            let (client, router, tally, ready) = (&client, &router, &tally, &ready);
            let key = key.as_str();
            threads.push(s.spawn(move || -> Result<(), CtrError> {
                let mut con = client.get_connection()?;
                ready.wait();
                let mut seed = b * 104_729 + 7;
                for i in 0.. {
                    if tally.sold_out.load(Relaxed) {
                        return Ok(());
                    }
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let token = format!("b{b}-{i}");
                    let bought =
                        match router.decrfloor(&mut con, key, 1, Some(token.as_bytes()), None) {
                            Err(CtrError::Module(ModuleError::BudgetInFlight, _)) => {
                                tally.waited_out.fetch_add(1, Relaxed);
                                continue;
                            }
                            other => other?,
                        };
                    tally.purchases.fetch_add(1, Relaxed);
                    if (seed >> 33) % 100 < retry {
                        tally.retried.fetch_add(1, Relaxed);
                        let again =
                            router.decrfloor(&mut con, key, 1, Some(token.as_bytes()), None)?;
                        if again != bought {
                            return Err(CtrError::Reply(format!(
                                "token {token}: first {bought:?}, retry {again:?}"
                            )));
                        }
                    }
                    let left = if bought.is_some() {
                        tally.granted.fetch_add(1, Relaxed);
                        None
                    } else {
                        tally.refused.fetch_add(1, Relaxed);
                        let left = con.ctr_get(key)?;
                        if left >= 1 {
                            tally.false_refused.fetch_add(1, Relaxed);
                        }
                        Some(left)
                    };
                    if left == Some(0) || tally.granted.load(Relaxed) >= stock {
                        tally.sold_out.store(true, Relaxed);
                    }
                }
                Ok(())
            }));
        }
        admin.ctr_spread(key.as_str(), holders)?;
        start = Instant::now();
        ready.wait();
        for t in threads {
            t.join().expect("buyer panicked")?;
        }
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let left = admin.ctr_get(key.as_str())?;
    let granted = tally.granted.load(Relaxed);
    let (n, f) = (
        tally.purchases.load(Relaxed),
        tally.false_refused.load(Relaxed),
    );
    println!(
        "{n} purchases, {granted} units granted, {} refused, {f} false refusals ({:.2}%), {} retried (all replayed), {} waited out, {left} left, {seconds:.1} s",
        tally.refused.load(Relaxed),
        f as f64 * 100.0 / n.max(1) as f64,
        tally.retried.load(Relaxed),
        tally.waited_out.load(Relaxed),
    );
    if granted > stock || left < 0 || granted + left != stock {
        return Err(format!("oversold: {granted} granted of {stock}, {left} left").into());
    }
    Ok(())
}
