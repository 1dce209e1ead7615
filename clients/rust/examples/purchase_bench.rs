//! Purchases from one client by the probe rule (`SpreadRouter::decrfloor`, tokened): on a
//! floored counter of one key and spread over H holders. Prints, per phase, purchases per
//! second and the mean latency: while in stock (each purchase stops at its first holder with
//! budget) and once sold out (each refusal visits every holder). Run by hand against a server
//! loaded with the module: `purchase_bench PORT HOLDERS N`.

use std::time::Instant;

use redis_ctr_client::{CtrCommands, SpreadRouter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, port, holders, n] = args.as_slice() else {
        return Err("usage: purchase_bench PORT HOLDERS N".into());
    };
    let (holders, n): (u32, usize) = (holders.parse()?, n.parse()?);
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?.get_connection()?;
    let key = format!("bench:stock:{holders}");
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
            let bought = router.decrfloor(&mut con, &key, 1, Some(token.as_bytes()), None)?;
            granted += usize::from(bought.is_some());
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{holders} holder(s), {phase}: {n} purchases, {granted} granted, {:.0}/s, {:.1} us each",
            n as f64 / secs,
            secs * 1e6 / n as f64
        );
    }
    Ok(())
}
