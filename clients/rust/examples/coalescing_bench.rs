//! One process making N single adds over K keys: one `CTR.ADD` each (`single`) or through a
//! `CoalescingWriter` (`coalesced`). Prints the wall seconds, the commands the client sent and
//! the total read back. Run by bench/coalescing.sh:
//! `coalescing_bench PORT single|coalesced N K`.

use std::time::Instant;

use redis_ctr_client::{CoalescingWriter, CtrCommands, CtrError, WriterConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, port, mode, n, keys] = args.as_slice() else {
        return Err("usage: coalescing_bench PORT single|coalesced N K".into());
    };
    let (n, keys): (usize, usize) = (n.parse()?, keys.parse()?);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let names: Vec<String> = (0..keys).map(|i| format!("page:{i}:views")).collect();
    let start = Instant::now();
    let sent = if mode == "single" {
        let mut con = client.get_connection()?;
        for i in 0..n {
            con.ctr_add(&names[i % keys], 1)?;
        }
        n as u64
    } else {
        let writer = CoalescingWriter::new(client.clone(), WriterConfig::default());
        for i in 0..n {
            writer.add(&names[i % keys], 1)?;
        }
        writer.close()?.commands
    };
    let elapsed = start.elapsed().as_secs_f64();
    let mut con = client.get_connection()?;
    let total: i64 = names
        .iter()
        .map(|k| con.ctr_get(k))
        .sum::<Result<i64, CtrError>>()?;
    println!("{elapsed:.2} {sent} {total}");
    Ok(())
}
