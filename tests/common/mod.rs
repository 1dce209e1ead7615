//! Test harness: each test starts its own redis-server processes on free loopback ports, in
//! their own temp dirs, with the module loaded, and always stops them (SHUTDOWN NOSAVE, then a
//! kill of the child it started if that does not end it).

#![allow(dead_code)]

pub mod cluster;
pub mod dump;
pub mod forge;
pub mod pnc;
pub mod resp;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use dump::DumpFrame;
pub use resp::{Conn, Value};

/// Server options for an AOF whose rewrite uses the module's `aof_rewrite` (no RDB preamble),
/// fsynced on every write.
pub const AOF_WITHOUT_PREAMBLE: [&str; 6] = [
    "--appendonly",
    "yes",
    "--aof-use-rdb-preamble",
    "no",
    "--appendfsync",
    "always",
];

/// The module load argument that makes the internal commands ordinary ones.
pub const EXPOSE_INTERNAL: &str = "expose-internal-commands";

/// The module under test: $CTR_MODULE, or the release build in the workspace's target
/// directory (found from this crate's directory upwards: the client crates share it).
pub fn module_path() -> PathBuf {
    const BUILT: &str = "target/release/libredis_ctr.so";
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = std::env::var_os("CTR_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            manifest
                .ancestors()
                .map(|dir| dir.join(BUILT))
                .find(|path| path.exists())
                .unwrap_or_else(|| manifest.join(BUILT))
        });
    assert!(
        path.exists(),
        "module not built at {} (run `make test`)",
        path.display()
    );
    path
}

pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// A port that is free now, whose cluster-bus twin (+10000) is free too, and that this process
/// has not handed out before (as a port or as a twin): the kernel may give a just-released port
/// again, so three calls in a row could otherwise name one port twice.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local addr").port();
        if port >= 55535 || TcpListener::bind(("127.0.0.1", port + 10000)).is_err() {
            continue;
        }
        let mut handed_out = HANDED_OUT
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if handed_out.contains(&port) || handed_out.contains(&(port + 10000)) {
            continue;
        }
        handed_out.insert(port);
        handed_out.insert(port + 10000);
        return port;
    }
}

fn fresh_dir() -> PathBuf {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "redis-ctr-test-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create test dir");
    dir
}

enum Probe {
    Ready,
    NotYet,
    Foreign,
}

pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    module_args: Vec<String>,
    with_module: bool,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[], &[])
    }

    /// Starts a server with extra `redis-server` options (`["--appendonly", "yes"]`) and module
    /// load arguments.
    pub fn start_with(args: &[&str], module_args: &[&str]) -> Server {
        match Server::try_start(args, module_args, true, &[]) {
            Ok(server) => server,
            Err(log) => panic!("redis-server did not start; log:\n{log}"),
        }
    }

    /// One attempt to start with the module; the server's log when it does not come up (e.g. a
    /// refused load argument).
    pub fn try_start_with(args: &[&str], module_args: &[&str]) -> Result<Server, String> {
        Server::try_start(args, module_args, true, &[])
    }

    /// Starts a server, with or without the module, after writing `files` (name, bytes) into
    /// its directory (e.g. a `dump.rdb` to load). Err carries the server log when it does not
    /// come up.
    pub fn try_start(
        args: &[&str],
        module_args: &[&str],
        with_module: bool,
        files: &[(&str, &[u8])],
    ) -> Result<Server, String> {
        let mut server = Server {
            child: None,
            port: 0,
            dir: fresh_dir(),
            args: args.iter().map(|s| s.to_string()).collect(),
            module_args: module_args.iter().map(|s| s.to_string()).collect(),
            with_module,
        };
        for (name, bytes) in files {
            std::fs::write(server.dir.join(name), bytes).expect("write a file for the server");
        }
        if server.try_launch(false) {
            Ok(server)
        } else {
            Err(server.log())
        }
    }

    /// Starts the server again on the port it had (a restart: replicas and tests know it).
    fn launch(&mut self) {
        if !self.try_launch(true) {
            panic!("redis-server did not start; log:\n{}", self.log());
        }
    }

    fn try_launch(&mut self, keep_port: bool) -> bool {
        for _attempt in 0..5 {
            if self.port == 0 || !keep_port {
                self.port = free_port();
            }
            let mut cmd = Command::new(server_binary());
            cmd.arg("--port")
                .arg(self.port.to_string())
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--enable-debug-command", "yes", "--daemonize", "no"])
                // A master's full sync starts at once instead of waiting 5 s (the default) for
                // more replicas to share its transfer: the tests start them one at a time, and
                // every replica, failover and resync paid those 5 s. A test's own value (in
                // `args`, which come later) wins.
                .args(["--repl-diskless-sync-delay", "0"])
                .arg("--dir")
                .arg(&self.dir)
                .arg("--logfile")
                .arg(self.dir.join("redis.log"))
                .args(&self.args);
            if self.with_module {
                cmd.arg("--loadmodule")
                    .arg(module_path())
                    .args(&self.module_args);
                // White-box tests forge states with CTR.SETSTATE and friends, which Redis 8
                // hides from ordinary clients by default; tests/internal_commands.rs runs the
                // default (`expose-internal-commands no`).
                if !self.module_args.iter().any(|a| a == EXPOSE_INTERNAL) {
                    cmd.args([EXPOSE_INTERNAL, "yes"]);
                }
            }
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let child = cmd.spawn().expect("start redis-server (is it installed?)");
            self.child = Some(child);
            if self.wait_ready() {
                return true;
            }
            self.kill();
        }
        false
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
            }
            match self.probe() {
                Probe::Ready => return true,
                // Another process owns the port (it was free when picked): ours will fail to
                // bind; start over on another port.
                Probe::Foreign => return false,
                Probe::NotYet => {}
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// A raw readiness probe: a server that fails to load may close the connection at any
    /// point, which must not panic here. Ready only when the server answering on our port is
    /// the child we started (its INFO process_id), not some other server on a reused port.
    fn probe(&self) -> Probe {
        use std::io::{BufRead, BufReader, Read, Write};
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return Probe::NotYet;
        };
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return Probe::NotYet;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut pong = [0u8; 7];
        if s.write_all(b"PING\r\n").is_err()
            || s.read_exact(&mut pong).is_err()
            || &pong != b"+PONG\r\n"
        {
            return Probe::NotYet; // e.g. -LOADING, or exiting
        }
        if s.write_all(b"INFO server\r\n").is_err() {
            return Probe::NotYet;
        }
        let mut reader = BufReader::new(s);
        let mut header = String::new();
        let len = match reader.read_line(&mut header) {
            Ok(_) => header
                .trim_end()
                .strip_prefix('$')
                .and_then(|n| n.parse().ok()),
            Err(_) => None,
        };
        let Some(len) = len.filter(|n: &usize| *n < 1 << 20) else {
            return Probe::NotYet;
        };
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return Probe::NotYet;
        }
        let ours = String::from_utf8_lossy(&body)
            .lines()
            .any(|l| l == format!("process_id:{pid}"));
        if ours {
            Probe::Ready
        } else {
            Probe::Foreign
        }
    }

    /// The process id of the server this test started (None once it was killed).
    #[allow(dead_code)]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn conn(&self) -> Conn {
        Conn::connect(self.port).expect("connect to test server")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// True while the server answers PING.
    pub fn alive(&self) -> bool {
        Conn::connect(self.port)
            .map(|mut c| c.q("PING") == Value::Simple("PONG".into()))
            .unwrap_or(false)
    }

    /// Stops the server (saving nothing) and starts it again on the same port and dir, so it
    /// loads whatever RDB or AOF files are there.
    pub fn restart(&mut self) {
        self.stop("SHUTDOWN NOSAVE");
        self.launch();
    }

    /// Like [`Server::restart`], with `extra` server options from now on (e.g. the
    /// `--appendonly yes` a `CONFIG SET` gave it, so that it loads its AOF).
    pub fn restart_adding(&mut self, extra: &[&str]) {
        self.stop("SHUTDOWN NOSAVE");
        self.args.extend(extra.iter().map(|s| s.to_string()));
        self.launch();
    }

    /// Like [`Server::restart`] but SHUTDOWN SAVE first, so an RDB is written.
    pub fn restart_saving(&mut self) {
        self.stop("SHUTDOWN SAVE");
        self.launch();
    }

    fn stop(&mut self, how: &str) {
        // Only ever shut down our own child. While it runs it holds the port (Redis does not
        // share listening ports); once it has exited, another server may listen there, so
        // send nothing.
        match self.child.as_mut().map(Child::try_wait) {
            None => return,
            Some(Ok(Some(_))) => {
                self.child = None;
                return;
            }
            Some(_) => {}
        }
        if let Ok(mut c) = Conn::connect(self.port) {
            c.send(&how.split_whitespace().collect::<Vec<_>>());
            let _ = c.read(); // the connection closes on success
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        if let Some(child) = self.child.as_mut() {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill();
    }

    /// Sends SIGKILL to the server this harness started.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a replica of this server and waits until it is in sync.
    pub fn start_replica(&self) -> Server {
        let port = self.port.to_string();
        let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port], &[]);
        replica.wait_link_up();
        replica
    }

    pub fn wait_link_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut c = self.conn();
        while Instant::now() < deadline {
            let info = c.q("INFO replication").text();
            if info.contains("master_link_status:up") && !info.contains("master_sync_in_progress:1")
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("replica link never came up:\n{}", self.log());
    }

    /// Waits until every write made so far on this master reached `n` replicas.
    ///
    /// Not `WAIT`: WAIT only waits for the calling connection's own writes, and a fresh
    /// connection has made none. Instead: the master's replication offset now, then each
    /// replica's processed offset (asked of the replica itself) until enough have reached it.
    pub fn wait_replicas(&self, n: i64) {
        let target: i64 = self
            .info_field("replication", "master_repl_offset")
            .parse()
            .expect("master_repl_offset");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info = self.conn().q("INFO replication").text();
            let ports: Vec<u16> = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .filter_map(|l| {
                    l.split(',')
                        .find_map(|kv| kv.strip_prefix("port="))
                        .and_then(|p| p.parse().ok())
                })
                .collect();
            let caught_up = ports
                .iter()
                .filter(|port| {
                    let Ok(mut c) = Conn::connect(**port) else {
                        return false;
                    };
                    c.send(&["INFO", "replication"]);
                    let Ok(Value::Bulk(text)) = c.read() else {
                        return false;
                    };
                    String::from_utf8_lossy(&text)
                        .lines()
                        .find_map(|l| l.strip_prefix("slave_repl_offset:"))
                        .and_then(|v| v.trim().parse::<i64>().ok())
                        .is_some_and(|offset| offset >= target)
                })
                .count() as i64;
            if caught_up >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "only {caught_up} of {n} replicas reached offset {target}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Which server this is, from INFO server: ("redis", "8.0.2") or ("valkey", "8.1.1").
    pub fn identity(&self) -> (String, String) {
        match self.info_field("server", "valkey_version") {
            v if !v.is_empty() => ("valkey".into(), v),
            _ => ("redis".into(), self.info_field("server", "redis_version")),
        }
    }

    /// True when MEMORY USAGE of a module-typed key is the module's own report alone: Valkey
    /// 8.x adds neither the key nor the object header for module values (an inline counter,
    /// which allocates nothing, then reads 0), where Redis and Valkey 9 add both.
    pub fn memory_usage_is_module_report_only(&self) -> bool {
        let (name, version) = self.identity();
        name == "valkey" && version.starts_with("8.")
    }

    /// The least MEMORY USAGE of any key on this server: 1, or 0 where it is the module's own
    /// report alone (see [`Server::memory_usage_is_module_report_only`]).
    pub fn least_memory_usage(&self) -> i64 {
        i64::from(!self.memory_usage_is_module_report_only())
    }

    /// The `ctr_tokens_held` gauge of INFO ctr.
    pub fn tokens_held(&self) -> i64 {
        self.info_field("ctr", "ctr_tokens_held")
            .parse()
            .expect("ctr_tokens_held")
    }

    /// Waits (bounded) for the tokens-held gauge to read `expected`. A value's tokens leave the
    /// gauge when the value is freed, and Valkey frees a reloaded or flushed dataset's old
    /// values on a background thread, shortly after the command returns.
    pub fn wait_tokens_held(&self, expected: i64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.tokens_held() != expected && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(self.tokens_held(), expected, "{what}");
    }

    pub fn info_field(&self, section: &str, field: &str) -> String {
        let info = self.conn().cmd(&["INFO", section]).text();
        info_value(&info, field).unwrap_or_default().to_string()
    }

    /// Rewrites the AOF (BGREWRITEAOF) and returns once the rewrite has finished: counted by
    /// the server's `aof_rewrites`, not only seen idle (a rewrite scheduled behind a replica's
    /// sync starts up to 100 ms after that sync's child ends).
    #[allow(dead_code)]
    pub fn rewrite_aof(&self) {
        let done = || {
            self.info_field("persistence", "aof_rewrites")
                .parse::<u64>()
                .unwrap_or(0)
        };
        let before = done();
        let reply = self.conn().q("BGREWRITEAOF");
        assert!(!reply.is_error(), "BGREWRITEAOF -> {reply:?}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while done() == before {
            assert!(
                Instant::now() < deadline,
                "the AOF rewrite never finished:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.wait_persistence_idle();
    }

    /// Waits until a background save or AOF rewrite has finished.
    pub fn wait_persistence_idle(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let busy = [
                "aof_rewrite_in_progress",
                "aof_rewrite_scheduled",
                "rdb_bgsave_in_progress",
            ]
            .iter()
            .any(|f| self.info_field("persistence", f) == "1");
            if !busy {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("persistence never went idle:\n{}", self.log());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop("SHUTDOWN NOSAVE");
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("test server log kept in {}", self.dir.display());
        }
    }
}

/// A note that shows even though the test harness captures output (a direct write to stderr).
pub fn note(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "note: {text}");
}

/// Python with redis-py: $CTR_PYTHON (the Makefile's target/venv), else python3.
pub fn python_with_redis_py() -> Option<String> {
    let python = std::env::var("CTR_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", "import redis"])
        .output()
        .is_ok_and(|out| out.status.success());
    ok.then_some(python)
}

/// CRC-64/Jones as used by Redis for DUMP payloads (reflected, poly 0xad93d23594c935a9).
pub fn crc64(data: &[u8]) -> u64 {
    const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &byte in data {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Seals a DUMP body (type byte .. module EOF) with an RDB version and a valid CRC64.
pub fn seal_dump(body: &[u8], rdb_version: u16) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend_from_slice(&rdb_version.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Splits a DUMP payload into (body, rdb_version), checking its CRC.
pub fn unseal_dump(payload: &[u8]) -> (Vec<u8>, u16) {
    let n = payload.len();
    assert!(n > 10, "payload too short");
    let crc = u64::from_le_bytes(payload[n - 8..].try_into().unwrap());
    assert_eq!(crc, crc64(&payload[..n - 8]), "payload CRC");
    let version = u16::from_le_bytes(payload[n - 10..n - 8].try_into().unwrap());
    (payload[..n - 10].to_vec(), version)
}

/// RDB length encoding, as used for strings inside a module value.
pub fn rdb_len(n: usize) -> Vec<u8> {
    if n < 64 {
        vec![n as u8]
    } else if n < 16384 {
        vec![0x40 | (n >> 8) as u8, n as u8]
    } else {
        let mut v = vec![0x80];
        v.extend_from_slice(&(n as u32).to_be_bytes());
        v
    }
}

/// LEB128 varint and zigzag, matching the module's encodings.
pub fn uvarint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

pub fn ivarint(v: i64) -> Vec<u8> {
    uvarint(((v << 1) ^ (v >> 63)) as u64)
}

/// A sharded counter's state as CTR.SETSTATE takes it: format 1, VALUE 6, SHARDS [1,2,3], END.
#[allow(dead_code)]
pub fn sharded_state() -> Vec<u8> {
    let mut blob = vec![1, 1];
    blob.extend(ivarint(6));
    blob.extend([2, 3]);
    for v in [1, 2, 3] {
        blob.extend(ivarint(v));
    }
    blob.push(0);
    blob
}

#[test]
fn crc64_matches_redis_reference() {
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
}

/// Checks a purchase was refused for want of budget still travelling: a retryable `TRYAGAIN`
/// naming `key` (nothing recorded against its token).
#[allow(dead_code)]
pub fn assert_awaits_budget(reply: Value, key: &str) {
    let Value::Error(e) = &reply else {
        panic!("{key}: expected TRYAGAIN, got {reply:?}");
    };
    assert!(
        e.starts_with("TRYAGAIN") && e.contains(key) && e.contains("budget in flight"),
        "{key}: {e}"
    );
}

/// Sends a purchase (`CTR.DECRFLOOR ...`) until it is not refused with `TRYAGAIN` (budget
/// still moving), every 10 ms for at most 5 s, as the client libraries do: its final reply,
/// and how many `TRYAGAIN` came first.
#[allow(dead_code)]
pub fn purchase_until_final(c: &mut Conn, args: &[&str]) -> (Value, usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut waits = 0;
    loop {
        let reply = c.cmd(args);
        match &reply {
            Value::Error(e) if e.starts_with("TRYAGAIN") && Instant::now() < deadline => {
                waits += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => return (reply, waits),
        }
    }
}

#[allow(dead_code)]
/// True when a `CTR.INFO` reply lists holders (a spread home).
pub fn lists_holders(info: &Value) -> bool {
    let named = |v: &Value| matches!(v, Value::Bulk(b) if b.as_slice() == b"holders");
    match info {
        Value::Array(items) => items.iter().step_by(2).any(named),
        Value::Map(pairs) => pairs.iter().any(|(k, _)| named(k)),
        _ => false,
    }
}

/// A field of a `CTR.INFO` reply (RESP2 pairs or a RESP3 map); None when absent.
#[allow(dead_code)]
pub fn info_entry(info: &Value, name: &str) -> Option<Value> {
    let is = |v: &Value| matches!(v, Value::Bulk(b) if b.as_slice() == name.as_bytes());
    match info {
        Value::Array(items) => items.chunks(2).find(|c| is(&c[0])).map(|c| c[1].clone()),
        Value::Map(pairs) => pairs.iter().find(|(k, _)| is(k)).map(|(_, v)| v.clone()),
        _ => None,
    }
}

#[allow(dead_code)]
/// The key's own ceiling from its `CTR.INFO` reply (None without one): a ceiled spread home's
/// `ceiling` is the counter's, its own share is the first of `holder_ceilings`.
pub fn own_ceiling(info: &Value) -> Option<i64> {
    let field = |name: &str| info_entry(info, name);
    match field("holder_ceilings") {
        Some(Value::Array(shares)) => shares.first().map(Value::int),
        _ => match field("ceiling")? {
            Value::Int(c) => Some(c),
            _ => None,
        },
    }
}

/// The strings of an array reply (holder names, ...).
/// Makes a plain counter at 0 under `name` by restoring a counter's dump there (`RESTORE`
/// writes what a user may write under a name: a key named like a holder that no home lists,
/// which no write may create, and which a counter renamed there would not be: a stray). The
/// dump is made under `made<name>`, the same slot.
#[allow(dead_code)]
pub fn restore_plain_counter(c: &mut Conn, name: &str) {
    let tmp = format!("made{name}");
    assert_eq!(c.cmd(&["CTR.ADD", &tmp, "0"]), Value::Int(0));
    let dump = c.cmd(&["DUMP", &tmp]).bytes();
    let restored = c.cmd(&[b"RESTORE".as_slice(), name.as_bytes(), b"0", &dump]);
    assert_eq!(restored, Value::Simple("OK".into()), "{name}");
    assert_eq!(c.cmd(&["DEL", &tmp]), Value::Int(1));
}

pub fn names(reply: &Value) -> Vec<String> {
    reply.array().iter().map(Value::text).collect()
}

/// Polls `f` every 100 ms until it returns Some, for at most `secs` seconds.
pub fn eventually<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "condition never met");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The floor fields of a floored spread home's `CTR.INFO`.
#[derive(Debug)]
pub struct FloorView {
    pub total: i64,
    pub headroom: i64,
    pub floors: Vec<i64>,
    pub budgets: Vec<i64>,
    pub in_flight: i64,
}

impl FloorView {
    /// None when the reply is an error (a master down or failing over: the gather fails).
    pub fn of(info: &Value) -> Option<FloorView> {
        if info.is_error() {
            return None;
        }
        let ints = |v: Value| -> Vec<i64> { v.array().iter().map(Value::int).collect() };
        Some(FloorView {
            total: info.field("value").int(),
            headroom: info.field("headroom").int(),
            floors: ints(info.field("holder_floors")),
            budgets: ints(info.field("holder_budgets")),
            in_flight: info.field("units_in_flight").int(),
        })
    }
}

/// A small deterministic generator (no dependency needed for test randomness).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

/// A server this test started, frozen with SIGSTOP until dropped (SIGCONT, also when an
/// assertion fails): it accepts connections and answers nothing, acknowledges nothing.
#[allow(dead_code)]
pub struct Frozen(u32);

#[allow(dead_code)]
impl Frozen {
    pub fn freeze(pid: u32) -> Frozen {
        signal("-STOP", pid);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal("-CONT", self.0);
    }
}

fn signal(which: &str, pid: u32) {
    let sent = std::process::Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill {which} {pid}");
}

/// The value of `field` in an `INFO` reply's text (`field:value` lines), untrimmed.
pub fn info_value<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
}
