//! pnc-sync: brings PN-counters to the same state in two or more Redis deployments by
//! exchanging `PNC.STATE` and `PNC.MERGE`.
//!
//! For each key it reads the state from every deployment, then merges into each deployment
//! every other deployment's state that differs from its own. Merging is commutative,
//! associative and idempotent, so running it again, concurrently with writes, in any order, or
//! from several places at once is safe; after a run without concurrent writes every
//! deployment holds the same state.
//!
//! This program is independent of the module crate (its own small RESP client, no
//! dependencies): it can run anywhere that reaches the deployments.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "\
usage: pnc-sync [options] HOST:PORT HOST:PORT [HOST:PORT ...]

Merges PN-counters (redis-ctr PNC.* keys) between Redis deployments.

options:
  --key KEY          sync this key (repeatable)
  --pattern GLOB     sync every PN-counter whose name matches GLOB (SCAN ... TYPE ctr-pncnt
                     on every deployment)
  --interval SECONDS repeat forever, sleeping SECONDS between runs (default: run once)
  --db N             SELECT this database first (default 0)
  --user USER        AUTH with this user (needs --pass)
  --pass PASSWORD    AUTH with this password
  --timeout SECONDS  connect/read timeout (default 10)
  -v, --verbose      print every key's value in every deployment after the run
  -h, --help         this text

exit status: 0 all keys synced, 1 some key failed, 2 usage error, 3 connection failure";

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
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

fn io_err(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into())
}

impl Client {
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
            reader: BufReader::new(reader),
            writer: stream,
        })
    }

    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut buf = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
        self.writer
            .write_all(&buf)
            .and_then(|()| read_reply(&mut self.reader))
            .map_err(|e| format!("{}: {e}", self.name))
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

fn connect_all(opts: &Options) -> Result<Vec<Client>, String> {
    let timeout = opts.timeout.unwrap_or(Duration::from_secs(10));
    let mut clients = Vec::new();
    for endpoint in &opts.endpoints {
        let mut c = Client::connect(endpoint, timeout)?;
        if let Some(pass) = &opts.pass {
            match &opts.user {
                Some(user) => c.call_ok(&[b"AUTH", user.as_bytes(), pass.as_bytes()])?,
                None => c.call_ok(&[b"AUTH", pass.as_bytes()])?,
            };
        }
        if let Some(db) = &opts.db {
            c.call_ok(&[b"SELECT", db.as_bytes()])?;
        }
        clients.push(c);
    }
    Ok(clients)
}

/// Every PN-counter matching `pattern` in any deployment.
fn scan(clients: &mut [Client], pattern: &[u8]) -> Result<BTreeSet<Vec<u8>>, String> {
    let mut keys = BTreeSet::new();
    for c in clients.iter_mut() {
        let mut cursor = b"0".to_vec();
        loop {
            let reply = c.call_ok(&[
                b"SCAN",
                &cursor,
                b"MATCH",
                pattern,
                b"COUNT",
                b"1000",
                b"TYPE",
                b"ctr-pncnt",
            ])?;
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

/// Exchanges one key's state between all deployments. Returns the merges made.
fn sync_key(clients: &mut [Client], key: &[u8]) -> Result<usize, String> {
    let mut states: Vec<Option<Vec<u8>>> = Vec::with_capacity(clients.len());
    for c in clients.iter_mut() {
        match c.call_ok(&[b"PNC.STATE", key])? {
            Reply::Bulk(state) => states.push(state),
            other => return Err(format!("{}: unexpected PNC.STATE reply {other:?}", c.name)),
        }
    }
    let mut merges = 0;
    for (i, c) in clients.iter_mut().enumerate() {
        let mut sent: Vec<&Vec<u8>> = Vec::new();
        for (j, state) in states.iter().enumerate() {
            let Some(state) = state else { continue };
            if i == j || states[i].as_ref() == Some(state) || sent.contains(&state) {
                continue;
            }
            c.call_ok(&[b"PNC.MERGE", key, state])?;
            sent.push(state);
            merges += 1;
        }
    }
    Ok(merges)
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

/// One pass over every key. Returns (keys, merges, failures).
fn run_once(opts: &Options, clients: &mut [Client]) -> Result<(usize, usize, usize), String> {
    let mut keys: BTreeSet<Vec<u8>> = opts.keys.iter().cloned().collect();
    if let Some(pattern) = &opts.pattern {
        keys.extend(scan(clients, pattern)?);
    }
    let (mut merges, mut failures) = (0, 0);
    for key in &keys {
        let name = String::from_utf8_lossy(key);
        match sync_key(clients, key) {
            Ok(n) => {
                merges += n;
                if opts.verbose {
                    say(&format!("{name}: {}", values(clients, key)));
                }
            }
            Err(e) => {
                failures += 1;
                warn(&format!("{name}: {e}"));
            }
        }
    }
    Ok((keys.len(), merges, failures))
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
    loop {
        let outcome = connect_all(&opts).and_then(|mut clients| run_once(&opts, &mut clients));
        match outcome {
            Ok((keys, merges, failures)) => {
                say(&format!(
                    "pnc-sync: {keys} key(s), {merges} merge(s), {failures} failure(s) across {} deployments",
                    opts.endpoints.len()
                ));
                if opts.interval.is_none() {
                    return if failures == 0 {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    };
                }
            }
            Err(e) => {
                warn(&e);
                if opts.interval.is_none() {
                    return ExitCode::from(3);
                }
            }
        }
        if let Some(interval) = opts.interval {
            std::thread::sleep(interval);
        }
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
            "h1:1",
            "[::1]:2",
        ]))
        .unwrap();
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
        ] {
            assert!(parse_args(args(bad)).is_err(), "{bad:?}");
        }
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
