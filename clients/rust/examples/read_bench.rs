//! Hot reads of one counter: CLIENTS threads, each on its own connection to 127.0.0.1:PORT
//! (after `READONLY` when the last argument is `readonly`, so that a cluster replica serves
//! them), send `CTR.GET KEY` one at a time for SECONDS. Prints one line:
//! `reads reads_per_s p50_ms p99_ms errors max_ms`. Run by bench/spread.sh:
//! `read_bench PORT KEY CLIENTS SECONDS [readonly]`.

use std::thread;
use std::time::{Duration, Instant};

/// What one reader thread saw: each successful read's latency, and the failed reads.
struct Readings {
    latencies: Vec<Duration>,
    errors: u64,
}

fn read_for(
    client: &redis::Client,
    key: &str,
    until: Instant,
    readonly: bool,
) -> redis::RedisResult<Readings> {
    let mut con = client.get_connection()?;
    if readonly {
        redis::cmd("READONLY").query::<()>(&mut con)?;
    }
    let mut get = redis::cmd("CTR.GET");
    get.arg(key);
    let mut readings = Readings {
        latencies: Vec::with_capacity(100_000),
        errors: 0,
    };
    while Instant::now() < until {
        let sent = Instant::now();
        match get.query::<i64>(&mut con) {
            Ok(_) => readings.latencies.push(sent.elapsed()),
            Err(_) => readings.errors += 1,
        }
    }
    Ok(readings)
}

fn percentile_ms(sorted: &[Duration], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (port, key, clients, seconds, readonly) = match args.as_slice() {
        [_, port, key, clients, seconds] => (port, key, clients, seconds, false),
        [_, port, key, clients, seconds, mode] if mode == "readonly" => {
            (port, key, clients, seconds, true)
        }
        _ => return Err("usage: read_bench PORT KEY CLIENTS SECONDS [readonly]".into()),
    };
    let (clients, seconds): (usize, f64) = (clients.parse()?, seconds.parse()?);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (client, key) = (client.clone(), key.clone());
            thread::spawn(move || read_for(&client, &key, until, readonly))
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for handle in threads {
        let readings = handle.join().map_err(|_| "a reader thread panicked")??;
        latencies.extend(readings.latencies);
        errors += readings.errors;
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    println!(
        "{} {:.0} {:.3} {:.3} {} {:.3}",
        latencies.len(),
        latencies.len() as f64 / elapsed,
        percentile_ms(&latencies, 0.50),
        percentile_ms(&latencies, 0.99),
        errors,
        percentile_ms(&latencies, 1.0)
    );
    Ok(())
}
