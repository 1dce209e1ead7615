//! Purchases from one client by the probe rule (`SpreadRouter::decrfloor`, tokened): on a
//! floored counter of one key and spread over H holders. Prints, per phase, purchases per
//! second and the mean latency: while in stock (each purchase stops at its first holder with
//! budget) and once sold out (each refusal visits every holder). Run by hand against a server
//! loaded with the module: `purchase_bench PORT HOLDERS N [at]`; with `at`, each purchase gives
//! its own time (a second before it is sent, as an order stored with its token), so it walks
//! the holders in force then (`CTR.HOLDERS key AT`, one more read of the home a purchase).

use std::time::Instant;

use redis_ctr_client::{CtrCommands, SpreadRouter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (port, holders, n, with_at) = match args.as_slice() {
        [_, port, holders, n] => (port, holders, n, false),
        [_, port, holders, n, at] if at == "at" => (port, holders, n, true),
        _ => return Err("usage: purchase_bench PORT HOLDERS N [at]".into()),
    };
    let (holders, n): (u32, usize) = (holders.parse()?, n.parse()?);
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?.get_connection()?;
    let key = format!(
        "bench:stock:{holders}:{}",
        if with_at { "at" } else { "plain" }
    );
    con.ctr_add(&key, i64::try_from(n)?)?;
    con.ctr_floor(&key, Some(0))?;
    if holders > 1 {
        con.ctr_spread(&key, holders)?;
    }
    let router = SpreadRouter::default();
    for phase in ["in stock", "sold out"] {
        let start = Instant::now();
        let mut granted = 0;
        for i in 0..n {
            let token = format!("{phase}:{i}");
            let at = with_at.then(|| unix_ms() - 1000);
            let bought = router.decrfloor(&mut con, &key, 1, Some(token.as_bytes()), at)?;
            granted += usize::from(bought.is_some());
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{holders} holder(s){}, {phase}: {n} purchases, {granted} granted, {:.0}/s, {:.1} us each",
            if with_at { " with at" } else { "" },
            n as f64 / secs,
            secs * 1e6 / n as f64
        );
    }
    Ok(())
}

/// This machine's clock, unix ms.
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
