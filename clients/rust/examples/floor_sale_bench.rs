//! Buyers of one floored spread counter in a cluster, for bench/floor_spread.sh: BUYERS threads
//! buy 1-5 units with a fresh token each until 99% of STOCK is granted (the last 1% sits in
//! fragments the walk may not reach: excluded). SKEW_PERCENT of the buyers walk only the listed
//! HOT holders (in the probe order of the token over that list, as buyers near one master
//! would); the others walk every holder by the probe rule (`SpreadRouter::decrfloor`). A
//! refusal is false when the gathered total read right after still covers the amount. Prints
//! one line: purchases, granted units, refusals, false refusals and their share, seconds.
//! Usage: `floor_sale_bench SEED_PORT KEY STOCK BUYERS SKEW_PERCENT [HOT_HOLDER...]`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use redis::cluster::ClusterClient;
use redis_ctr_client::spread::probe_order;
use redis_ctr_client::{CtrCommands, SpreadRouter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, port, key, stock, buyers, skew, hot @ ..] = args.as_slice() else {
        return Err(
            "usage: floor_sale_bench SEED_PORT KEY STOCK BUYERS SKEW_PERCENT [HOT...]".into(),
        );
    };
    let (stock, buyers, skew): (i64, u64, u64) = (stock.parse()?, buyers.parse()?, skew.parse()?);
    let client = ClusterClient::new(vec![format!("redis://127.0.0.1:{port}/")])?;
    let router = SpreadRouter::default();
    let granted = AtomicI64::new(0);
    let (purchases, refused, false_refused) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let start = Instant::now();
    std::thread::scope(|s| -> Result<(), redis_ctr_client::CtrError> {
        let mut threads = Vec::new();
        for b in 0..buyers {
            let (client, router, key) = (&client, &router, key.as_str());
            let (granted, purchases, refused, false_refused) =
                (&granted, &purchases, &refused, &false_refused);
            let skewed = b * 100 < skew * buyers;
            threads.push(s.spawn(move || -> Result<(), redis_ctr_client::CtrError> {
                let mut con = client.get_connection()?;
                let mut seed = b * 104_729 + 7;
                for i in 0.. {
                    if granted.load(Relaxed) >= stock * 99 / 100 {
                        return Ok(());
                    }
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let amount = 1 + (seed >> 33) as i64 % 5;
                    let token = format!("b{b}-{i}");
                    let bought = if skewed {
                        let order = probe_order(token.as_bytes(), hot.len());
                        let mut bought = None;
                        for h in order {
                            bought = con.ctr_decrfloor_with(&hot[h], amount, &token, None)?;
                            if bought.is_some() {
                                break;
                            }
                        }
                        bought
                    } else {
                        router.decrfloor(&mut con, key, amount, Some(token.as_bytes()), None)?
                    };
                    purchases.fetch_add(1, Relaxed);
                    if bought.is_some() {
                        granted.fetch_add(amount, Relaxed);
                    } else {
                        refused.fetch_add(1, Relaxed);
                        if con.ctr_get(key)? >= amount {
                            false_refused.fetch_add(1, Relaxed);
                        }
                    }
                }
                Ok(())
            }));
        }
        // A buyer's error (a node down) ends the run with it.
        threads
            .into_iter()
            .try_for_each(|t| t.join().expect("buyer panicked"))
    })?;
    let (n, f) = (purchases.load(Relaxed), false_refused.load(Relaxed));
    println!(
        "{n} purchases, {} units granted, {} refused, {f} false refusals ({:.2}%), {:.1} s",
        granted.load(Relaxed),
        refused.load(Relaxed),
        f as f64 * 100.0 / n.max(1) as f64,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
