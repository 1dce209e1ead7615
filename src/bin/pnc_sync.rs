//! pnc-sync: brings PN-counters to the same state in two or more Redis deployments by
//! exchanging `PNC.STATE` and `PNC.MERGE`.
//!
//! For each key it reads the state from every deployment, then merges into each deployment
//! every other deployment's state that differs from its own. Merging is commutative,
//! associative and idempotent, so running it again, concurrently with writes, in any order, or
//! from several places at once is safe; after a run without concurrent writes every
//! deployment holds the same state.
//!
//! A deployment that is down, frozen or slow (no reply within `--timeout`) is skipped with a
//! line saying so and counted as unreachable in the summary; the ones it reaches still
//! converge. With `--rebalance` it also moves decrement rights of floored counters toward the
//! deployments that spend or refuse (the rule of `src/pncounter/demand.rs`, included below).
//!
//! This program is independent of the module crate (its own small RESP client, no
//! dependencies): it can run anywhere that reaches the deployments.

#[path = "../pncounter/demand.rs"]
mod demand;

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const USAGE: &str = "\
usage: pnc-sync [options] HOST:PORT HOST:PORT [HOST:PORT ...]

Merges PN-counters (redis-ctr PNC.* keys) between Redis deployments.

options:
  --key KEY          sync this key (repeatable)
  --pattern GLOB     sync every PN-counter whose name matches GLOB (SCAN ... TYPE ctr-pncnt
                     on every deployment)
  --interval SECONDS repeat forever, sleeping SECONDS between runs (default: run once);
                     deltas need it: the tool remembers what it sent each deployment
  --runs N           with --interval, stop after N runs (exit status of the last)
  --db N             SELECT this database first (default 0)
  --user USER        AUTH with this user (needs --pass)
  --pass PASSWORD    AUTH with this password
  --timeout SECONDS  connect/read timeout (default 10): a deployment that does not answer
                     within it is skipped for the rest of the run (the others still sync)
  --rebalance        move decrement rights of floored counters (PNC.FLOOR) toward the
                     deployments that spend or refuse them, from those with slack
  --metrics-file F   after each run, write its metrics (Prometheus text format) to F
  --full             ship whole states; by default a deployment that already merged an
                     earlier state of another gets only what changed since
                     (PNC.STATE key SINCE version), whole states when it is new or lost them
  -v, --verbose      print every key's value in every deployment after the run
  -h, --help         this text

exit status: 0 all keys synced everywhere, 1 some key failed, 2 usage error, 3 some
deployment unreachable (the reachable ones were synced)";

/// Largest bulk reply accepted (a PNC state is at most 128 KiB; SCAN pages are small).
const MAX_BULK: usize = 64 * 1024 * 1024;
/// Largest array reply accepted.
const MAX_ARRAY: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

struct Client {
    name: String,
    /// None for a deployment that could not be reached.
    io: Option<(BufReader<TcpStream>, TcpStream)>,
    /// Why it stopped answering during this run (then it is skipped).
    down: Option<String>,
}

fn io_err(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into())
}

impl Client {
    /// A deployment that could not be reached: every call fails at once.
    fn unreachable(endpoint: &str, why: String) -> Client {
        Client {
            name: endpoint.to_string(),
            io: None,
            down: Some(why),
        }
    }

    fn connect(endpoint: &str, timeout: Duration) -> Result<Client, String> {
        let (host, port) = endpoint
            .rsplit_once(':')
            .ok_or_else(|| format!("{endpoint}: expected HOST:PORT"))?;
        let port: u16 = port.parse().map_err(|_| format!("{endpoint}: bad port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addr = (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("{endpoint}: {e}"))?
            .next()
            .ok_or_else(|| format!("{endpoint}: no address"))?;
        let stream =
            TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("{endpoint}: {e}"))?;
        let setup = || -> std::io::Result<TcpStream> {
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
            stream.set_nodelay(true)?;
            stream.try_clone()
        };
        let reader = setup().map_err(|e| format!("{endpoint}: {e}"))?;
        Ok(Client {
            name: endpoint.to_string(),
            io: Some((BufReader::new(reader), stream)),
            down: None,
        })
    }

    /// One command. An I/O error or a timeout marks the deployment down for the rest of the
    /// run (its connection may hold a late reply), with a line saying so.
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let (Some((reader, writer)), None) = (self.io.as_mut(), &self.down) else {
            let why = self.down.as_deref().unwrap_or("unreachable");
            return Err(format!("{}: {why}", self.name));
        };
        let mut buf = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
        writer
            .write_all(&buf)
            .and_then(|()| read_reply(reader))
            .map_err(|e| {
                let why = format!("unreachable ({e})");
                warn(&format!(
                    "{}: {why}: skipped for the rest of this run",
                    self.name
                ));
                self.down = Some(why.clone());
                format!("{}: {why}", self.name)
            })
    }

    /// A call whose error reply is a failure too.
    fn call_ok(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        match self.call(args)? {
            Reply::Error(e) => Err(format!("{}: {e}", self.name)),
            other => Ok(other),
        }
    }
}

fn read_line(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = Vec::new();
    r.by_ref().take(64 * 1024).read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Err(io_err("connection closed or line too long"));
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

fn read_reply(r: &mut impl BufRead) -> std::io::Result<Reply> {
    let line = read_line(r)?;
    let Some(kind) = line.chars().next() else {
        return Err(io_err("empty reply line"));
    };
    let rest = &line[kind.len_utf8()..];
    let len = || -> std::io::Result<i64> {
        rest.parse::<i64>()
            .map_err(|_| io_err(format!("bad length {rest:?}")))
    };
    Ok(match kind {
        '+' => Reply::Status(rest.to_string()),
        '-' => Reply::Error(rest.to_string()),
        ':' => Reply::Int(len()?),
        '$' => {
            let n = len()?;
            if n < 0 {
                return Ok(Reply::Bulk(None));
            }
            let n = usize::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_BULK)
                .ok_or_else(|| io_err("bulk reply too large"))?;
            let mut buf = vec![0u8; n + 2];
            r.read_exact(&mut buf)?;
            buf.truncate(n);
            Reply::Bulk(Some(buf))
        }
        '*' => {
            let n = len()?;
            if n < 0 {
                return Ok(Reply::Array(None));
            }
            let n = usize::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_ARRAY)
                .ok_or_else(|| io_err("array reply too large"))?;
            let mut items = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                items.push(read_reply(r)?);
            }
            Reply::Array(Some(items))
        }
        other => return Err(io_err(format!("unexpected reply type {other:?}"))),
    })
}

#[derive(Debug, Default)]
struct Options {
    endpoints: Vec<String>,
    keys: Vec<Vec<u8>>,
    pattern: Option<Vec<u8>>,
    interval: Option<Duration>,
    db: Option<String>,
    user: Option<String>,
    pass: Option<String>,
    timeout: Option<Duration>,
    verbose: bool,
    rebalance: bool,
    metrics_file: Option<String>,
    /// Ship whole states (no `SINCE`).
    full: bool,
    /// With `--interval`: stop after this many runs.
    runs: Option<u64>,
}

fn parse_args(args: Vec<OsString>) -> Result<Options, String> {
    let mut opts = Options::default();
    let mut it = args.into_iter();
    let text = |v: OsString| {
        v.into_string()
            .map_err(|_| "arguments must be UTF-8".to_string())
    };
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.to_str() {
            Some("-h") | Some("--help") => return Err(String::new()),
            Some("-v") | Some("--verbose") => opts.verbose = true,
            Some("--rebalance") => opts.rebalance = true,
            Some("--full") => opts.full = true,
            Some("--runs") => {
                let runs = text(value("--runs")?)?
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or("--runs needs a positive number")?;
                opts.runs = Some(runs);
            }
            Some("--metrics-file") => opts.metrics_file = Some(text(value("--metrics-file")?)?),
            Some("--key") => opts.keys.push(value("--key")?.as_bytes().to_vec()),
            Some("--pattern") => opts.pattern = Some(value("--pattern")?.as_bytes().to_vec()),
            Some("--interval") => {
                let secs: f64 = text(value("--interval")?)?
                    .parse()
                    .map_err(|_| "--interval needs a number of seconds".to_string())?;
                if !(secs.is_finite() && secs > 0.0) {
                    return Err("--interval must be positive".into());
                }
                opts.interval = Some(Duration::from_secs_f64(secs));
            }
            Some("--timeout") => {
                let secs: f64 = text(value("--timeout")?)?
                    .parse()
                    .map_err(|_| "--timeout needs a number of seconds".to_string())?;
                if !(secs.is_finite() && secs > 0.0) {
                    return Err("--timeout must be positive".into());
                }
                opts.timeout = Some(Duration::from_secs_f64(secs));
            }
            Some("--db") => {
                let db = text(value("--db")?)?;
                db.parse::<u32>()
                    .map_err(|_| "--db needs a database number".to_string())?;
                opts.db = Some(db);
            }
            Some("--user") => opts.user = Some(text(value("--user")?)?),
            Some("--pass") => opts.pass = Some(text(value("--pass")?)?),
            Some(s) if s.starts_with('-') => return Err(format!("unknown option {s}")),
            _ => opts.endpoints.push(text(arg)?),
        }
    }
    if opts.endpoints.len() < 2 {
        return Err("give at least two deployments (HOST:PORT)".into());
    }
    if opts.keys.is_empty() && opts.pattern.is_none() {
        return Err("give --key KEY or --pattern GLOB".into());
    }
    if opts.user.is_some() && opts.pass.is_none() {
        return Err("--user needs --pass".into());
    }
    Ok(opts)
}

/// Connects to every deployment; one that cannot be reached is skipped (a line says so) and
/// returned as unreachable, the others are synced.
fn connect_all(opts: &Options) -> Result<Vec<Client>, String> {
    let timeout = opts.timeout.unwrap_or(Duration::from_secs(10));
    let mut clients = Vec::new();
    for endpoint in &opts.endpoints {
        let client = Client::connect(endpoint, timeout).and_then(|c| prepare(opts, c));
        match client {
            Ok(c) => clients.push(c),
            Err(e) => {
                warn(&format!("{e}: unreachable, skipped in this run"));
                clients.push(Client::unreachable(endpoint, e));
            }
        }
    }
    Ok(clients)
}

/// AUTH and SELECT as configured. An error reply (a wrong password) is a failure of the run.
fn prepare(opts: &Options, mut c: Client) -> Result<Client, String> {
    if let Some(pass) = &opts.pass {
        match &opts.user {
            Some(user) => c.call_ok(&[b"AUTH", user.as_bytes(), pass.as_bytes()])?,
            None => c.call_ok(&[b"AUTH", pass.as_bytes()])?,
        };
    }
    if let Some(db) = &opts.db {
        c.call_ok(&[b"SELECT", db.as_bytes()])?;
    }
    Ok(c)
}

/// Every PN-counter matching `pattern` in any deployment.
fn scan(clients: &mut [Client], pattern: &[u8]) -> Result<BTreeSet<Vec<u8>>, String> {
    let mut keys = BTreeSet::new();
    for c in clients.iter_mut().filter(|c| c.down.is_none()) {
        let mut cursor = b"0".to_vec();
        loop {
            let reply = match c.call_ok(&[
                b"SCAN",
                &cursor,
                b"MATCH",
                pattern,
                b"COUNT",
                b"1000",
                b"TYPE",
                b"ctr-pncnt",
            ]) {
                Ok(reply) => reply,
                // Down now: the keys it listed so far are synced among the others.
                Err(_) if c.down.is_some() => break,
                Err(e) => return Err(e),
            };
            let Reply::Array(Some(parts)) = reply else {
                return Err(format!("{}: unexpected SCAN reply", c.name));
            };
            match parts.as_slice() {
                [Reply::Bulk(Some(next)), Reply::Array(Some(found))] => {
                    for k in found {
                        if let Reply::Bulk(Some(k)) = k {
                            keys.insert(k.clone());
                        }
                    }
                    cursor = next.clone();
                }
                _ => return Err(format!("{}: unexpected SCAN reply", c.name)),
            }
            if cursor == b"0" {
                break;
            }
        }
    }
    Ok(keys)
}

/// A call's failure: the deployment went down (skip it, the key goes on), or an error reply
/// (the key fails).
fn key_error(c: &Client, e: String) -> Option<String> {
    c.down.is_none().then_some(e)
}

/// What a run remembers for the next one: per (source, target, key) the version of the
/// source's state the target merged, per (deployment, key) the lineage (`epoch.incarnation`)
/// of its versions, and the demand counters of `--rebalance`.
#[derive(Default)]
struct Memory {
    delivered: HashMap<(String, String, Vec<u8>), String>,
    lineage: HashMap<(String, Vec<u8>), String>,
    demand: Demand,
    runs: u64,
    /// The deployments the previous run reached to its end.
    reached: Option<Vec<String>>,
}

/// Every this many runs, whole states (a delta carries only what its deployment wrote; whole
/// states also carry what a deployment that is gone wrote, to those that missed it).
const WHOLE_STATES_EVERY: u64 = 10;

/// One deployment's state of a key as read this run.
#[derive(Clone)]
struct StateRead {
    /// Its version (None from a module without delta states).
    version: Option<String>,
    /// Whole (true) or only what changed since the version asked for.
    full: bool,
    blob: Option<Vec<u8>>,
}

/// A version's lineage and seq (`epoch.incarnation` and `seq`).
fn split_version(v: &str) -> Option<(&str, u64)> {
    let (lineage, seq) = v.rsplit_once('.')?;
    Some((lineage, seq.parse().ok()?))
}

/// The version of `source`'s state that every reachable other deployment merged (the oldest
/// of theirs), or None when one of them has none of this lineage: then the whole state.
fn common_base(clients: &[Client], memory: &Memory, source: usize, key: &[u8]) -> Option<String> {
    let mut oldest: Option<(String, u64, &String)> = None;
    for (j, c) in clients.iter().enumerate() {
        if j == source || c.down.is_some() {
            continue;
        }
        let v =
            memory
                .delivered
                .get(&(clients[source].name.clone(), c.name.clone(), key.to_vec()))?;
        let (lineage, seq) = split_version(v)?;
        match &oldest {
            Some((l, _, _)) if l != lineage => return None,
            Some((_, s, _)) if *s <= seq => {}
            _ => oldest = Some((lineage.to_string(), seq, v)),
        }
    }
    oldest.map(|(_, _, v)| v.clone())
}

/// Reads a key's state, as a delta from `since` when given. A module without delta states
/// (an error to `SINCE`) is read whole.
fn read_state(c: &mut Client, key: &[u8], since: Option<&str>) -> Result<StateRead, String> {
    {
        let since = since.unwrap_or("0");
        match c.call(&[b"PNC.STATE", key, b"SINCE", since.as_bytes()])? {
            Reply::Array(Some(parts)) => {
                if let [Reply::Bulk(Some(v)), Reply::Bulk(Some(kind)), Reply::Bulk(blob)] =
                    parts.as_slice()
                {
                    return Ok(StateRead {
                        version: Some(String::from_utf8_lossy(v).into_owned()),
                        full: kind.as_slice() != b"delta",
                        blob: blob.clone(),
                    });
                }
                return Err(format!("{}: unexpected PNC.STATE SINCE reply", c.name));
            }
            Reply::Error(e) if e.starts_with("WRONGTYPE") => {
                return Err(format!("{}: {e}", c.name))
            }
            _ => {} // an older module: whole states
        }
    }
    match c.call_ok(&[b"PNC.STATE", key])? {
        Reply::Bulk(blob) => Ok(StateRead {
            version: None,
            full: true,
            blob,
        }),
        other => Err(format!("{}: unexpected PNC.STATE reply {other:?}", c.name)),
    }
}

/// An empty state (a delta with nothing in it).
fn is_empty_state(blob: &[u8]) -> bool {
    blob == [1, 0]
}

/// Exchanges one key's state between all reachable deployments. Returns the merges made and
/// the bytes of state read and sent.
fn sync_key(
    clients: &mut [Client],
    key: &[u8],
    memory: &mut Memory,
    whole: bool,
) -> Result<(usize, usize), String> {
    let mut reads: Vec<Option<StateRead>> = vec![None; clients.len()];
    for i in 0..clients.len() {
        let since = if whole {
            None
        } else {
            common_base(clients, memory, i, key)
        };
        match read_state(&mut clients[i], key, since.as_deref()) {
            Ok(read) => reads[i] = Some(read),
            Err(e) => {
                if let Some(e) = key_error(&clients[i], e) {
                    return Err(e);
                }
            }
        }
    }
    // A deployment new to this key, or whose history of it restarted (a restart, the key
    // deleted or restored older): what it was sent before no longer counts, and the deltas
    // read for it are not enough: every other state is read whole again.
    let mut lost = false;
    for (i, read) in reads.iter().enumerate() {
        let Some((lineage, _)) = read
            .as_ref()
            .and_then(|r| r.version.as_deref())
            .and_then(split_version)
        else {
            continue;
        };
        let name = clients[i].name.clone();
        if memory
            .lineage
            .insert((name.clone(), key.to_vec()), lineage.to_string())
            .as_deref()
            != Some(lineage)
        {
            memory
                .delivered
                .retain(|(_, target, k), _| !(target == &name && k == key));
            lost = true;
        }
    }
    if lost {
        for i in 0..clients.len() {
            if reads[i].as_ref().is_some_and(|r| !r.full) {
                reads[i] = read_state(&mut clients[i], key, None).ok();
            }
        }
    }
    let mut bytes: usize = reads
        .iter()
        .flatten()
        .filter_map(|r| r.blob.as_ref())
        .map(Vec::len)
        .sum();
    let mut merges = 0;
    let names: Vec<String> = clients.iter().map(|c| c.name.clone()).collect();
    for (j, c) in clients.iter_mut().enumerate() {
        let mut sent: Vec<&Vec<u8>> = Vec::new();
        let own = reads[j]
            .as_ref()
            .filter(|r| r.full)
            .and_then(|r| r.blob.as_ref());
        for (i, read) in reads.iter().enumerate() {
            let Some(read) = read else { continue };
            if c.down.is_some() {
                break;
            }
            if i == j {
                continue;
            }
            let delivered = (!is_empty_state(read.blob.as_deref().unwrap_or(&[1, 0])))
                .then_some(read.blob.as_ref())
                .flatten();
            if let Some(state) =
                delivered.filter(|s| !(sent.contains(s) || read.full && own == Some(*s)))
            {
                match c.call_ok(&[b"PNC.MERGE", key, state]) {
                    Ok(_) => merges += 1,
                    Err(e) => match key_error(c, e) {
                        Some(e) => return Err(e),
                        None => break,
                    },
                }
                bytes += state.len();
                sent.push(state);
            }
            if let Some(v) = &read.version {
                let pair = (names[i].clone(), c.name.clone(), key.to_vec());
                memory.delivered.insert(pair, v.clone());
            }
        }
    }
    Ok((merges, bytes))
}

fn values(clients: &mut [Client], key: &[u8]) -> String {
    clients
        .iter_mut()
        .map(|c| match c.call(&[b"PNC.GET", key]) {
            Ok(Reply::Int(v)) => v.to_string(),
            Ok(Reply::Error(e)) => format!("({e})"),
            Ok(other) => format!("({other:?})"),
            Err(e) => format!("({e})"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What one run did.
#[derive(Debug, Default, Clone, Copy)]
struct RunSummary {
    keys: usize,
    merges: usize,
    failures: usize,
    unreachable: usize,
    rights_moved: i64,
    /// Bytes of state read and sent (deltas or whole states).
    state_bytes: usize,
}

/// How often a long run reports its progress (stderr).
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// One pass over every key.
fn run_once(
    opts: &Options,
    clients: &mut [Client],
    memory: &mut Memory,
) -> Result<RunSummary, String> {
    let mut keys: BTreeSet<Vec<u8>> = opts.keys.iter().cloned().collect();
    if let Some(pattern) = &opts.pattern {
        keys.extend(scan(clients, pattern)?);
    }
    let mut run = RunSummary {
        keys: keys.len(),
        ..RunSummary::default()
    };
    // Whole states on the first run, every few runs, and whenever the deployments reached
    // changed (after a partition, what the others wrote meanwhile reaches those that missed it).
    let reached = |clients: &[Client]| -> Vec<String> {
        clients
            .iter()
            .filter(|c| c.down.is_none())
            .map(|c| c.name.clone())
            .collect()
    };
    let whole = opts.full
        || memory.runs.is_multiple_of(WHOLE_STATES_EVERY)
        || memory.reached.as_ref() != Some(&reached(clients));
    memory.runs += 1;
    let mut reported = Instant::now();
    for (done, key) in keys.iter().enumerate() {
        if reported.elapsed() >= PROGRESS_EVERY {
            warn(&format!(
                "progress: {done}/{} keys, {} merge(s)",
                keys.len(),
                run.merges
            ));
            reported = Instant::now();
        }
        let name = String::from_utf8_lossy(key);
        match sync_key(clients, key, memory, whole) {
            Ok((n, bytes)) => {
                run.merges += n;
                run.state_bytes += bytes;
                if opts.rebalance {
                    run.rights_moved += rebalance_key(clients, key, &mut memory.demand);
                }
                if opts.verbose {
                    say(&format!("{name}: {}", values(clients, key)));
                }
            }
            Err(e) => {
                run.failures += 1;
                warn(&format!("{name}: {e}"));
            }
        }
    }
    memory.reached = Some(reached(clients));
    run.unreachable = clients.iter().filter(|c| c.down.is_some()).count();
    for c in clients.iter().filter(|c| c.down.is_some()) {
        say(&format!(
            "pnc-sync: {} unreachable: not synced in this run",
            c.name
        ));
    }
    Ok(run)
}

/// Each deployment's demand counters (units refused plus decremented, as `PNC.INFO` shows
/// them) per key at the previous run: what it spent or asked for since is its demand.
type Demand = HashMap<(String, Vec<u8>), u64>;

/// What `PNC.INFO` says of a floored counter in one deployment.
struct RightsView {
    id: Vec<u8>,
    rights: i64,
    /// Units refused here plus units this deployment's own id decremented, ever.
    spent_or_refused: u64,
}

fn field<'a>(pairs: &'a [Reply], name: &str) -> Option<&'a Reply> {
    pairs
        .chunks(2)
        .find(|kv| {
            kv[0] == Reply::Bulk(Some(name.as_bytes().to_vec()))
                || kv[0] == Reply::Status(name.into())
        })
        .and_then(|kv| kv.get(1))
}

fn rights_view(info: &Reply) -> Option<RightsView> {
    let Reply::Array(Some(pairs)) = info else {
        return None;
    };
    let Some(Reply::Bulk(Some(id))) = field(pairs, "replica-id") else {
        return None;
    };
    let Some(Reply::Int(rights)) = field(pairs, "rights") else {
        return None;
    };
    let refused = match field(pairs, "refused") {
        Some(Reply::Int(n)) => u64::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    let own_n = match field(pairs, "replicas") {
        Some(Reply::Array(Some(replicas))) => replicas
            .iter()
            .filter_map(|r| match r {
                Reply::Array(Some(kv))
                    if field(kv, "id") == Some(&Reply::Bulk(Some(id.clone()))) =>
                {
                    match field(kv, "n") {
                        Some(Reply::Int(n)) => u64::try_from(*n).ok(),
                        _ => None,
                    }
                }
                _ => None,
            })
            .next()
            .unwrap_or(0),
        _ => 0,
    };
    Some(RightsView {
        id: id.clone(),
        rights: *rights,
        spent_or_refused: refused.saturating_add(own_n),
    })
}

/// Moves rights of one floored key by the demand rule: each gift is a `PNC.GIVE` on its
/// giver, whose state then goes to the receiver. Returns the rights moved.
fn rebalance_key(clients: &mut [Client], key: &[u8], demand: &mut Demand) -> i64 {
    let mut views: Vec<(usize, RightsView)> = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        if let Ok(info) = c.call_ok(&[b"PNC.INFO", key]) {
            if let Some(view) = rights_view(&info) {
                views.push((i, view));
            }
        }
    }
    let holders: Vec<demand::Holder> = views
        .iter()
        .map(|(i, v)| {
            let seen = demand.insert((clients[*i].name.clone(), key.to_vec()), v.spent_or_refused);
            demand::Holder {
                rights: v.rights,
                demand: v.spent_or_refused.saturating_sub(seen.unwrap_or(0)),
            }
        })
        .collect();
    let mut moved = 0;
    for gift in demand::plan(&holders) {
        let ((from, giver), (to, receiver)) = (&views[gift.from], &views[gift.to]);
        let amount = gift.amount.to_string();
        let given = clients[*from].call_ok(&[b"PNC.GIVE", key, &receiver.id, amount.as_bytes()]);
        if !matches!(given, Ok(Reply::Int(_))) {
            continue; // its rights changed since it was read, or it went down
        }
        let state = match clients[*from].call_ok(&[b"PNC.STATE", key]) {
            Ok(Reply::Bulk(Some(state))) => state,
            _ => continue, // the gift travels with the next run's states
        };
        let _ = clients[*to].call_ok(&[b"PNC.MERGE", key, &state]);
        moved += gift.amount;
        say(&format!(
            "{}: {} rights from {} to {}",
            String::from_utf8_lossy(key),
            gift.amount,
            String::from_utf8_lossy(&giver.id),
            String::from_utf8_lossy(&receiver.id)
        ));
    }
    moved
}

/// The run's metrics, in the Prometheus text format (for a textfile collector).
fn metrics_text(
    run: &RunSummary,
    round_secs: f64,
    now: f64,
    last_full: Option<f64>,
    started: f64,
) -> String {
    let lag = now - last_full.unwrap_or(started);
    format!(
        "# HELP pnc_sync_last_run_timestamp_seconds When the last run ended.\n\
         pnc_sync_last_run_timestamp_seconds {now:.3}\n\
         # HELP pnc_sync_last_full_sync_timestamp_seconds When a run last reached every deployment with no key failing (0: never).\n\
         pnc_sync_last_full_sync_timestamp_seconds {:.3}\n\
         # HELP pnc_sync_lag_seconds Seconds since every deployment was last brought in sync.\n\
         pnc_sync_lag_seconds {lag:.3}\n\
         pnc_sync_run_seconds {round_secs:.3}\n\
         pnc_sync_keys {}\n\
         pnc_sync_merges {}\n\
         pnc_sync_failures {}\n\
         pnc_sync_unreachable {}\n\
         pnc_sync_rights_moved {}\n\
         pnc_sync_state_bytes {}\n",
        last_full.unwrap_or(0.0),
        run.keys,
        run.merges,
        run.failures,
        run.unreachable,
        run.rights_moved,
        run.state_bytes
    )
}

/// Writes `text` to `path` through a temporary file and a rename (a reader never sees half).
fn write_metrics(path: &str, text: &str) {
    let tmp = format!("{path}.tmp");
    if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path)) {
        warn(&format!("{path}: {e}"));
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Prints a line; a closed stdout (`pnc-sync ... | head`) is not an error worth a panic.
fn say(line: &str) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Same for stderr.
fn warn(line: &str) {
    let _ = writeln!(std::io::stderr(), "pnc-sync: {line}");
}

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args_os().skip(1).collect()) {
        Ok(opts) => opts,
        Err(msg) if msg.is_empty() => {
            say(USAGE);
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            warn(&format!("{msg}\n\n{USAGE}"));
            return ExitCode::from(2);
        }
    };
    let mut memory = Memory::default();
    let mut runs: u64 = 0;
    let started = unix_now();
    let mut last_full: Option<f64> = None;
    loop {
        let began = Instant::now();
        let outcome =
            connect_all(&opts).and_then(|mut clients| run_once(&opts, &mut clients, &mut memory));
        let status = match outcome {
            Ok(run) => {
                say(&format!(
                    "pnc-sync: {} key(s), {} merge(s), {} failure(s), {} unreachable of {} deployments, {} bytes of state{}",
                    run.keys,
                    run.merges,
                    run.failures,
                    run.unreachable,
                    opts.endpoints.len(),
                    run.state_bytes,
                    if opts.rebalance {
                        format!(", {} rights moved", run.rights_moved)
                    } else {
                        String::new()
                    }
                ));
                let now = unix_now();
                if run.failures == 0 && run.unreachable == 0 {
                    last_full = Some(now);
                }
                if let Some(path) = &opts.metrics_file {
                    let secs = began.elapsed().as_secs_f64();
                    write_metrics(path, &metrics_text(&run, secs, now, last_full, started));
                }
                if run.failures > 0 {
                    1
                } else if run.unreachable > 0 {
                    3
                } else {
                    0
                }
            }
            Err(e) => {
                warn(&e);
                1
            }
        };
        runs += 1;
        let Some(interval) = opts.interval.filter(|_| opts.runs.is_none_or(|n| runs < n)) else {
            return ExitCode::from(status);
        };
        std::thread::sleep(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_the_documented_options() {
        let o = parse_args(args(&[
            "--key",
            "a",
            "--key",
            "b",
            "--pattern",
            "p:*",
            "-v",
            "--db",
            "2",
            "--rebalance",
            "--metrics-file",
            "m.prom",
            "h1:1",
            "[::1]:2",
        ]))
        .unwrap();
        assert!(o.rebalance);
        assert_eq!(o.metrics_file.as_deref(), Some("m.prom"));
        assert_eq!(o.keys, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(o.pattern.as_deref(), Some(&b"p:*"[..]));
        assert_eq!(o.endpoints, vec!["h1:1", "[::1]:2"]);
        assert!(o.verbose);
        assert_eq!(o.db.as_deref(), Some("2"));
    }

    #[test]
    fn refuses_bad_usage() {
        for bad in [
            &["--key", "a", "h:1"][..],
            &["h:1", "h:2"],
            &["--key"],
            &["--bogus", "--key", "a", "h:1", "h:2"],
            &["--interval", "0", "--key", "a", "h:1", "h:2"],
            &["--interval", "nan", "--key", "a", "h:1", "h:2"],
            &["--db", "x", "--key", "a", "h:1", "h:2"],
            &["--user", "u", "--key", "a", "h:1", "h:2"],
            &["--metrics-file"],
        ] {
            assert!(parse_args(args(bad)).is_err(), "{bad:?}");
        }
    }

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn reads_a_floored_counters_rights_and_demand_from_pnc_info() {
        let slot = |id: &str, p: i64, n: i64| {
            Reply::Array(Some(vec![
                bulk("id"),
                bulk(id),
                bulk("p"),
                Reply::Int(p),
                bulk("n"),
                Reply::Int(n),
            ]))
        };
        let info = Reply::Array(Some(vec![
            bulk("value"),
            Reply::Int(90),
            bulk("replica-id"),
            bulk("eu"),
            bulk("home"),
            bulk("eu"),
            bulk("replicas"),
            Reply::Array(Some(vec![slot("eu", 0, 7), slot("us", 100, 3)])),
            bulk("floor"),
            Reply::Int(0),
            bulk("floor-level"),
            Reply::Int(0),
            bulk("rights"),
            Reply::Int(13),
            bulk("refused"),
            Reply::Int(5),
        ]));
        let view = rights_view(&info).unwrap();
        assert_eq!(view.id, b"eu");
        assert_eq!(view.rights, 13);
        assert_eq!(
            view.spent_or_refused, 12,
            "7 decremented by eu plus 5 refused"
        );
        // A plain counter (no rights field) is not rebalanced.
        let plain = Reply::Array(Some(vec![
            bulk("value"),
            Reply::Int(1),
            bulk("replica-id"),
            bulk("eu"),
        ]));
        assert!(rights_view(&plain).is_none());
    }

    #[test]
    fn metrics_say_how_long_since_everything_was_in_sync() {
        let run = RunSummary {
            keys: 3,
            merges: 4,
            failures: 0,
            unreachable: 1,
            rights_moved: 9,
            state_bytes: 40,
        };
        let text = metrics_text(&run, 0.25, 1000.0, Some(940.0), 900.0);
        for line in [
            "pnc_sync_lag_seconds 60.000",
            "pnc_sync_unreachable 1",
            "pnc_sync_rights_moved 9",
            "pnc_sync_last_full_sync_timestamp_seconds 940.000",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        let never = metrics_text(&run, 0.25, 1000.0, None, 900.0);
        assert!(never.contains("pnc_sync_lag_seconds 100.000"), "{never}");
    }

    #[test]
    fn reads_resp_replies() {
        let mut input: &[u8] =
            b"+OK\r\n-ERR x\r\n:5\r\n$3\r\na\0b\r\n$-1\r\n*2\r\n$1\r\n0\r\n*0\r\n*-1\r\n";
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Status("OK".into()));
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Reply::Error("ERR x".into())
        );
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Int(5));
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Reply::Bulk(Some(b"a\0b".to_vec()))
        );
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Bulk(None));
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"0".to_vec())),
                Reply::Array(Some(vec![]))
            ]))
        );
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Array(None));
        assert!(read_reply(&mut input).is_err(), "end of input");
        for bad in [&b"$99999999999\r\n"[..], b"*x\r\n", b"?\r\n", b"$5\r\nab"] {
            let mut r = bad;
            assert!(read_reply(&mut r).is_err(), "{bad:?}");
        }
    }
}
