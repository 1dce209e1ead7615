//! Server-level fuzzing: 20,000 random argument vectors over every command of the module
//! (CTR.*, PNC.*, the internal CTR.APPLY, CTR.SETSTATE, PNC.APPLY, PNC.SETSTATE), against one
//! server, from a seeded PRNG (CTR_FUZZ_SEED to change it; the seed is printed).
//!
//! Arguments: integers at the i64 edges and around the server's time, malformed integers,
//! empty, 256/257/300-byte, NUL-holding and binary strings, known, repeated, lower-case and
//! unknown options, options without values, wrong argument counts, keys holding strings, lists,
//! sets, sorted sets and streams, random and mutated CTR states, effects and PNC blobs.
//!
//! Checked after every command: the reply is a well-formed RESP value (a value or an error), no
//! handler panicked, and, for the keys that exist from the start (one of every kind), a refused
//! command (an error reply) and a read-only command left the key's `DEBUG DIGEST-VALUE`
//! unchanged. Every 500 commands the server answers PING; every 2,500 it saves and reloads its
//! dataset (DEBUG RELOAD: every stored state must load again). At the end every key is read by
//! every read command, dumped and restored, the dataset reloads with an equal digest, and the
//! `tokens_held` gauge equals the tokens the counters hold.

mod common;

use std::time::{Duration, Instant};

use common::forge::{edge_i64, mutate, random_bytes, random_ctr_state, random_effect, tame_i64};
use common::pnc::{state_blob, stored_blob, Rng};
use common::{lists_holders, Conn, Server, Value};

const COMMANDS: usize = 20_000;
/// A hard bound on the run: it stops there (and says so) on a machine far slower than expected.
const TIME_BUDGET: Duration = Duration::from_secs(150);

/// Keys that exist from the start and are never deleted: digests are tracked for them.
const GUARDS: &[&str] = &[
    "g:plain",
    "g:big",
    "g:sharded",
    "g:floored",
    "g:tokens",
    "g:recon",
    "g:pnc",
    "g:string",
    "g:list",
    "g:set",
    "g:zset",
    "g:stream",
];
/// Counters and PN-counters a well-behaved command targets.
const CTR_GUARDS: &[&str] = &[
    "g:plain",
    "g:big",
    "g:sharded",
    "g:floored",
    "g:tokens",
    "g:recon",
];
/// Keys the run creates, changes and lets expire (CTR and PNC ones apart, so that well-behaved
/// commands mostly find the type they expect).
const FREE_CTR: &[&str] = &["f:c0", "f:c1", "f:c2", "f:c3"];
const FREE_PNC: &[&str] = &["f:p0", "f:p1"];

const READ_ONLY: &[&str] = &[
    "CTR.GET",
    "CTR.MGET",
    "CTR.INFO",
    "PNC.GET",
    "PNC.STATE",
    "PNC.INFO",
];

struct Gen {
    rng: Rng,
    now: i64,
    /// This command is a well-behaved one (plausible values, the right kind of key), so that
    /// the run reaches deep states; the others are hostile.
    tame: bool,
    /// Real encodings taken from the server (DUMP of the guard keys), to mutate.
    ctr_blobs: Vec<Vec<u8>>,
    pnc_blobs: Vec<Vec<u8>>,
}

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.below(n)
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.rng.below(n) == 0
    }

    fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.rng.below(items.len() as u64) as usize]
    }

    fn int(&mut self) -> Vec<u8> {
        const MALFORMED: &[&[u8]] = &[
            b"",
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"1.5",
            b"1e3",
            b"abc",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"1\0",
            b"\0",
            b"0x10",
            b"NONE",
            b"inf",
        ];
        if self.tame {
            tame_i64(&mut self.rng, self.now).to_string().into_bytes()
        } else if self.one_in(8) {
            self.pick(MALFORMED).to_vec()
        } else {
            edge_i64(&mut self.rng, self.now).to_string().into_bytes()
        }
    }

    fn string(&mut self) -> Vec<u8> {
        if self.tame {
            return format!("tok-{}", self.below(50)).into_bytes();
        }
        match self.below(9) {
            0 => Vec::new(),
            1 => vec![b'x'; 300],
            2 => vec![b't'; 256],
            3 => vec![b't'; 257],
            4 => b"a\0b\0".to_vec(),
            5 => {
                let len = self.below(40) as usize;
                random_bytes(&mut self.rng, len)
            }
            _ => format!("tok-{}", self.below(50)).into_bytes(),
        }
    }

    fn key(&mut self, pnc: bool) -> Vec<u8> {
        if self.tame {
            let key = match (pnc, self.below(2)) {
                (true, 0) => "g:pnc",
                (true, _) => self.pick(FREE_PNC),
                (false, 0) => self.pick(CTR_GUARDS),
                (false, _) => self.pick(FREE_CTR),
            };
            return key.as_bytes().to_vec();
        }
        match self.below(10) {
            0..=4 => self.pick(GUARDS).as_bytes().to_vec(),
            5..=6 => self.pick(FREE_CTR).as_bytes().to_vec(),
            7..=8 => self.pick(FREE_PNC).as_bytes().to_vec(),
            _ => match self.below(3) {
                0 => Vec::new(),
                1 => vec![b'k'; 300],
                _ => random_bytes(&mut self.rng, 8),
            },
        }
    }

    /// `NAME value` pairs from `names`, plus unknown, repeated and lower-case ones, and
    /// sometimes a name without its value.
    fn options(&mut self, names: &[&str], out: &mut Vec<Vec<u8>>) {
        let mut given: Vec<Vec<u8>> = Vec::new();
        if self.tame {
            for name in names {
                if self.one_in(2) {
                    continue;
                }
                let value = match *name {
                    "TOKEN" => self.string(),
                    "EX" | "PX" => (1 + self.below(100)).to_string().into_bytes(),
                    _ => self.int(),
                };
                if name == &"PX" && given.iter().any(|g| g == b"EX") {
                    continue;
                }
                given.push(name.as_bytes().to_vec());
                out.push(name.as_bytes().to_vec());
                out.push(value);
            }
            return;
        }
        for _ in 0..self.below(4) {
            let name = match self.below(10) {
                0 => b"BOGUS".to_vec(),
                1 if !given.is_empty() => given[self.below(given.len() as u64) as usize].clone(),
                2 => self.pick(names).to_ascii_lowercase().into_bytes(),
                _ => self.pick(names).as_bytes().to_vec(),
            };
            given.push(name.clone());
            out.push(name);
            let value = if self.one_in(3) {
                self.string()
            } else {
                self.int()
            };
            out.push(value);
        }
        if self.one_in(12) {
            out.push(self.pick(names).as_bytes().to_vec());
        }
    }

    /// A transfer step (`CTR.STEP`): version 1 (or another), a kind (1-6 or another), then
    /// random bytes, a short name and numbers, or nothing.
    fn ctr_step(&mut self) -> Vec<u8> {
        let version = if self.one_in(8) {
            self.below(256) as u8
        } else {
            1
        };
        let kind = if self.one_in(8) {
            self.below(256) as u8
        } else {
            1 + self.below(6) as u8
        };
        let mut step = vec![version, kind];
        match self.below(3) {
            0 => {
                let len = self.below(40) as usize;
                step.extend(random_bytes(&mut self.rng, len));
            }
            1 => {
                step.push(1);
                step.push(b'k');
                let len = self.below(24) as usize;
                step.extend(random_bytes(&mut self.rng, len));
            }
            _ => {}
        }
        step
    }

    fn ctr_state(&mut self) -> Vec<u8> {
        match self.below(4) {
            0 => random_ctr_state(&mut self.rng, self.now),
            1 => {
                let i = self.below(self.ctr_blobs.len() as u64) as usize;
                self.ctr_blobs[i].clone()
            }
            2 => {
                let i = self.below(self.ctr_blobs.len() as u64) as usize;
                let blob = self.ctr_blobs[i].clone();
                mutate(&mut self.rng, &blob)
            }
            _ => {
                let len = self.below(30) as usize;
                random_bytes(&mut self.rng, len)
            }
        }
    }

    fn pnc_blob(&mut self, stored: bool) -> Vec<u8> {
        let ids = ["a", "b", "eu-west", "r-0123456789abcdef", "z.1"];
        let max = i64::MAX as u64;
        match self.below(4) {
            0 => {
                let n = self.below(4) as usize;
                let mut entries: Vec<(&str, u64, u64)> = (0..n)
                    .map(|i| {
                        let p = [0, 1, max, max + 1, 1 << 40][self.below(5) as usize];
                        let q = [0, 3, max][self.below(3) as usize];
                        (ids[(i + self.below(2) as usize) % ids.len()], p, q)
                    })
                    .collect();
                if !self.one_in(5) {
                    entries.sort_by_key(|e| e.0);
                    entries.dedup_by_key(|e| e.0);
                }
                if stored {
                    let gen = [0, 1, u64::MAX][self.below(3) as usize];
                    let home = (!self.one_in(2)).then_some(("a", gen));
                    stored_blob(&entries, home)
                } else {
                    state_blob(&entries)
                }
            }
            1 | 2 => {
                let i = self.below(self.pnc_blobs.len() as u64) as usize;
                let blob = self.pnc_blobs[i].clone();
                if self.one_in(2) {
                    mutate(&mut self.rng, &blob)
                } else {
                    blob
                }
            }
            _ => {
                let len = self.below(30) as usize;
                random_bytes(&mut self.rng, len)
            }
        }
    }

    /// One random argument vector (command name first).
    fn command(&mut self) -> Vec<Vec<u8>> {
        const NAMES: &[&str] = &[
            "CTR.ADD",
            "CTR.GET",
            "CTR.MGET",
            "CTR.CLEAR",
            "CTR.INFO",
            "CTR.FLOOR",
            "CTR.DECRFLOOR",
            "CTR.CEIL",
            "CTR.INCREX",
            "CTR.REFUND",
            "CTR.RECONCILE",
            "CTR.APPLY",
            "CTR.STEP",
            "CTR.SETSTATE",
            "CTR.SPREAD",
            "PNC.ADD",
            "PNC.GET",
            "PNC.STATE",
            "PNC.MERGE",
            "PNC.CLEAR",
            "PNC.INFO",
            "PNC.APPLY",
            "PNC.SETSTATE",
        ];
        self.tame = self.one_in(2);
        let name = self.pick(NAMES);
        let pnc = name.starts_with("PNC");
        let mut args = vec![
            if self.one_in(4) {
                name.to_ascii_lowercase()
            } else {
                name.to_string()
            }
            .into_bytes(),
            self.key(pnc),
        ];
        match name {
            "CTR.ADD" => {
                args.push(self.int());
                self.options(&["TOKEN", "AT", "EX", "PX"], &mut args);
            }
            "CTR.MGET" => {
                for _ in 0..self.below(4) {
                    args.push(self.key(false));
                }
            }
            "CTR.CLEAR" => self.options(&["TOKEN"], &mut args),
            "CTR.FLOOR" => args.push(if self.one_in(5) {
                b"none".to_vec()
            } else {
                self.int()
            }),
            "CTR.DECRFLOOR" => {
                args.push(self.int());
                self.options(&["TOKEN", "AT"], &mut args);
            }
            "CTR.CEIL" => args.push(if self.one_in(5) {
                b"none".to_vec()
            } else {
                self.int()
            }),
            "CTR.INCREX" => {
                let names = ["BYINT", "LBOUND", "UBOUND", "TOKEN", "AT", "EX", "PXAT"];
                self.options(&names, &mut args);
                for flag in ["SATURATE", "PERSIST", "ENX"] {
                    if self.one_in(3) {
                        args.push(flag.as_bytes().to_vec());
                    }
                }
            }
            "CTR.REFUND" => {
                args.push(b"TOKEN".to_vec());
                args.push(self.string());
            }
            "CTR.RECONCILE" => {
                if self.one_in(2) {
                    args.push(b"FROM".to_vec());
                    let (kind, source) = if self.tame {
                        [("STREAM", "g:stream"), ("ZSET", "g:zset"), ("SET", "g:set")]
                            [self.below(3) as usize]
                    } else {
                        (
                            self.pick(&["STREAM", "ZSET", "SET", "LIST", "stream"]),
                            self.pick(GUARDS),
                        )
                    };
                    args.push(kind.as_bytes().to_vec());
                    args.push(source.as_bytes().to_vec());
                    if self.one_in(2) {
                        args.push(b"EMPTYOK".to_vec());
                    }
                } else {
                    args.push(self.int());
                }
                self.options(&["AT"], &mut args);
            }
            "CTR.APPLY" => args.push(random_effect(&mut self.rng, self.now, self.tame)),
            "CTR.STEP" => args.push(self.ctr_step()),
            "CTR.SETSTATE" => args.push(self.ctr_state()),
            "CTR.SPREAD" => args.push(if self.tame {
                (1 + self.below(8)).to_string().into_bytes()
            } else {
                self.int()
            }),
            "PNC.ADD" => args.push(self.int()),
            "PNC.MERGE" => args.push(self.pnc_blob(false)),
            "PNC.APPLY" => {
                let id: Vec<u8> = if self.one_in(4) {
                    self.string()
                } else {
                    self.pick(&["a", "b", "eu-west", "x.y"]).as_bytes().to_vec()
                };
                args.push(id);
                args.push(self.int());
                args.push(self.int());
            }
            "PNC.SETSTATE" => args.push(self.pnc_blob(true)),
            _ => {}
        }
        // Wrong argument counts: drop the last argument or add a stray one.
        match if self.tame { 99 } else { self.below(25) } {
            0 if args.len() > 1 => {
                args.pop();
            }
            1 => args.push(self.int()),
            _ => {}
        }
        args
    }
}

fn digest(c: &mut Conn, key: &str) -> Value {
    c.cmd(&["DEBUG", "DIGEST-VALUE", key])
}

fn show(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| {
            if a.len() > 40 {
                format!("<{} bytes>", a.len())
            } else {
                format!("{:?}", String::from_utf8_lossy(a))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn setup(c: &mut Conn) {
    for cmd in [
        "CTR.ADD g:plain 5",
        "CTR.ADD g:big 9223372036854775807",
        "CTR.ADD g:floored 10",
        "CTR.FLOOR g:floored 2",
        "CTR.ADD g:tokens 1 TOKEN a",
        "CTR.ADD g:tokens 1 TOKEN b",
        "CTR.DECRFLOOR g:tokens 1 TOKEN c",
        "CTR.RECONCILE g:recon 5",
        "CTR.ADD g:recon 3",
        "PNC.ADD g:pnc 5",
        "SET g:string hello",
        "RPUSH g:list a b",
        "SADD g:set a b c",
        "ZADD g:zset 1 a 2 b",
    ] {
        assert!(!c.q(cmd).is_error(), "{cmd}");
    }
    // Shards [1, 2, 3]: format 1, VALUE 6, SHARDS 3 x, END.
    let sharded = [1u8, 1, 12, 2, 3, 2, 4, 6, 0];
    assert_eq!(
        c.cmd(&[&b"CTR.SETSTATE"[..], b"g:sharded", &sharded]),
        Value::Simple("OK".into())
    );
    assert!(!c
        .cmd(&["PNC.MERGE", "g:pnc", "\x01\x02\x01b\x04\x01\x01c\x00\x09"])
        .is_error());
    assert!(!c.q("XADD g:stream 1-1 f v").is_error());
    assert!(!c.q("XADD g:stream 60000-1 f v").is_error());
}

/// The string buffer of a module value's DUMP payload.
fn dumped_blob(c: &mut Conn, key: &str) -> Vec<u8> {
    let payload = c.cmd(&["DUMP", key]).bytes();
    common::forge::DumpFrame::parse(&payload)
        .unwrap_or_else(|| panic!("unexpected DUMP framing for {key}"))
        .blob
}

#[test]
fn twenty_thousand_random_commands_never_crash_or_corrupt_the_server() {
    let seed: u64 = std::env::var("CTR_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_c7a1);
    eprintln!("server fuzz seed {seed} (CTR_FUZZ_SEED to change)");
    // Uncompressed DUMP payloads, so that the module's buffer can be read out of them.
    // No idle sweep: it would (rightly) release expired tokens between the digests taken around
    // each command (tests/ctr_sweep.rs covers it). No rebalance of floored spread counters
    // either: it moves budget between holders after a refusal (tests/ctr_floor_spread.rs).
    let server = Server::start_with(
        &["--rdbcompression", "no"],
        &[
            "promote-threshold",
            "50",
            "sweep-budget",
            "0",
            "rebalance-delay-ms",
            "0",
        ],
    );
    let mut c = server.conn();
    setup(&mut c);
    let now = c.q("TIME").array()[0].text().parse::<i64>().unwrap() * 1000;
    let ctr_keys = [
        "g:plain",
        "g:big",
        "g:sharded",
        "g:floored",
        "g:tokens",
        "g:recon",
    ];
    let mut gen = Gen {
        rng: Rng::new(seed),
        now,
        tame: false,
        ctr_blobs: ctr_keys.iter().map(|k| dumped_blob(&mut c, k)).collect(),
        pnc_blobs: vec![c.q("PNC.STATE g:pnc").bytes(), dumped_blob(&mut c, "g:pnc")],
    };
    let mut digests: Vec<Value> = GUARDS.iter().map(|k| digest(&mut c, k)).collect();
    let (mut errors, mut refused_on_guards) = (0, 0);
    let started = Instant::now();
    let mut sent = 0;
    while sent < COMMANDS {
        if started.elapsed() > TIME_BUDGET {
            eprintln!("time budget spent after {sent} commands");
            break;
        }
        let args = gen.command();
        sent += 1;
        c.send(&args);
        let reply = match c.read() {
            Ok(reply) => reply,
            Err(e) => panic!(
                "#{sent} {}: no reply ({e}); server alive: {}\n{}",
                show(&args),
                server.alive(),
                server.log()
            ),
        };
        if let Value::Error(e) = &reply {
            errors += 1;
            assert!(
                !e.contains("internal error"),
                "#{sent} {}: a handler panicked: {e}",
                show(&args)
            );
        }
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        if let Some(g) = GUARDS
            .iter()
            .position(|k| args.get(1) == Some(&k.as_bytes().to_vec()))
        {
            let now_digest = digest(&mut c, GUARDS[g]);
            if reply.is_error() || READ_ONLY.contains(&name.as_str()) {
                refused_on_guards += usize::from(reply.is_error());
                assert_eq!(
                    now_digest,
                    digests[g],
                    "#{sent} {}: replied {reply:?} but changed {}",
                    show(&args),
                    GUARDS[g]
                );
            }
            digests[g] = now_digest;
        }
        if sent.is_multiple_of(500) {
            assert_eq!(c.q("PING"), Value::Simple("PONG".into()), "#{sent}");
        }
        if sent.is_multiple_of(2_500) {
            assert_eq!(
                c.q("DEBUG RELOAD"),
                Value::Simple("OK".into()),
                "#{sent}: the dataset no longer reloads:\n{}",
                server.log()
            );
        }
    }
    eprintln!(
        "{sent} commands in {:?}: {errors} errors, {refused_on_guards} refused on tracked keys",
        started.elapsed()
    );
    assert!(sent >= COMMANDS / 10, "far too few commands ran");
    final_checks(&server, &mut c);
}

/// Every key is readable, dumpable and restorable; the dataset reloads exactly; the tokens gauge
/// matches the counters.
fn final_checks(server: &Server, c: &mut Conn) {
    // Without TTLs nothing changes under us while we compare.
    let keys: Vec<Vec<u8>> = c.q("KEYS *").array().iter().map(Value::bytes).collect();
    for k in &keys {
        c.cmd(&[&b"PERSIST"[..], k]);
    }
    let mut tokens = 0;
    for k in &keys {
        let kind = c.cmd(&[&b"TYPE"[..], k]).text();
        let reads: &[&str] = match kind.as_str() {
            "ctr-count" => &["CTR.GET", "CTR.INFO", "CTR.MGET"],
            "ctr-pncnt" => &["PNC.GET", "PNC.STATE", "PNC.INFO"],
            _ => &[],
        };
        for r in reads {
            let reply = c.cmd(&[r.as_bytes(), k]);
            assert!(
                !reply.is_error(),
                "{r} {:?}: {reply:?}",
                String::from_utf8_lossy(k)
            );
        }
        if kind == "ctr-count" {
            let info = c.cmd(&[&b"CTR.INFO"[..], k]);
            tokens += info.field("tokens").int() + info.field("ledger").int();
        }
        if kind.starts_with("ctr-") {
            let payload = c.cmd(&[&b"DUMP"[..], k]).bytes();
            let copy = [b"copy:".as_slice(), k].concat();
            assert_eq!(
                c.cmd(&[&b"RESTORE"[..], &copy, b"0", &payload]),
                Value::Simple("OK".into())
            );
            // A restored PN-counter drops its home record (it may come from elsewhere): its
            // CRDT state is what must be equal.
            let same = if kind == "ctr-count" {
                "DEBUG"
            } else {
                "PNC.STATE"
            };
            let read = |c: &mut Conn, key: &[u8]| match same {
                "DEBUG" => c.cmd(&[&b"DEBUG"[..], b"DIGEST-VALUE", key]),
                _ => c.cmd(&[&b"PNC.STATE"[..], key]),
            };
            // A spread home restored under another name while it lives is a copy, detached
            // into a counter of its own units: no holders, so not the home's digest.
            if lists_holders(&c.cmd(&[&b"CTR.INFO"[..], k])) {
                assert!(!lists_holders(&c.cmd(&[&b"CTR.INFO"[..], &copy])));
            } else {
                assert_eq!(
                    read(c, &copy),
                    read(c, k),
                    "RESTORE of {:?}",
                    String::from_utf8_lossy(k)
                );
            }
            assert!(c.cmd(&[&b"MEMORY"[..], b"USAGE", k]).int() >= server.least_memory_usage());
            if kind == "ctr-count" {
                let info = c.cmd(&[&b"CTR.INFO"[..], &copy]);
                tokens += info.field("tokens").int() + info.field("ledger").int();
            }
        }
    }
    server.wait_tokens_held(tokens, "the tokens_held gauge drifted");
    let before = c.q("DEBUG DIGEST");
    assert_eq!(
        c.q("DEBUG RELOAD"),
        Value::Simple("OK".into()),
        "{}",
        server.log()
    );
    assert_eq!(
        c.q("DEBUG DIGEST"),
        before,
        "the reload changed the dataset"
    );
    assert_eq!(c.q("PING"), Value::Simple("PONG".into()));
}
