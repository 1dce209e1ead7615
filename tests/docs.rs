//! The docs run as written. Every fenced block of README.md, docs/*.md and the client
//! libraries' READMEs (clients/python/README.md, clients/rust/README.md) that is a redis-cli
//! transcript (a ```text block with `127.0.0.1:6379>` or `redis>` prompts) or a client snippet
//! (```python, ```rust) is run against a fresh server (one per file, blocks in order, so a
//! file's examples may build on each other) and its output compared with what the doc shows.
//! Each Python snippet runs alone, so it carries its own imports and client.
//!
//! A client snippet that is not a whole program says so to its reader on its first line:
//! `# fragment: <what it needs>` (Python) or `// fragment: <what it needs>` (Rust); it is not
//! run. A transcript that cannot run here is marked, on the line just before its fence, with
//! `<!-- doc-test: skip: <reason> -->`; the reason is required (e.g. "needs a cluster"). A
//! client snippet may not use that hidden marker: its reader would not see why it does not run.
//! Python snippets check each line that ends with `# -> <python literal>`; the port 6379 in a
//! snippet is replaced by the test server's. Other blocks (```sh build and ops steps, formats)
//! are not examples of the commands and are not run.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::cluster::{key_slot, slot_map, Cluster};
use common::{note, python_with_redis_py, Conn, Server, Value};

const SKIP_MARK: &str = "<!-- doc-test: skip:";

struct Block {
    file: String,
    line: usize,
    lang: String,
    body: Vec<String>,
    skip: Option<String>,
}

fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    files.insert(0, root.join("README.md"));
    files.push(root.join("clients/python/README.md"));
    files.push(root.join("clients/rust/README.md"));
    files
}

/// The reason a client snippet gives on its first line for being a fragment, if it does.
fn fragment_reason(b: &Block) -> Option<&str> {
    let first = b.body.first()?.trim_start();
    first
        .strip_prefix("# fragment:")
        .or_else(|| first.strip_prefix("// fragment:"))
        .map(str::trim)
}

fn blocks(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).expect("read a doc");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = path
        .strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let skip = i
            .checked_sub(1)
            .and_then(|p| lines[p].trim().strip_prefix(SKIP_MARK))
            .map(|r| r.trim_end_matches("-->").trim().to_string());
        let start = i;
        i += 1;
        let mut body = Vec::new();
        while i < lines.len() && !lines[i].starts_with("```") {
            body.push(lines[i].to_string());
            i += 1;
        }
        i += 1;
        out.push(Block {
            file: file.clone(),
            line: start + 1,
            lang: lang.trim().to_string(),
            body,
            skip,
        });
    }
    out
}

/// The command of a transcript line (`127.0.0.1:6379> CMD ...` or `redis> CMD ...`).
fn prompt_command(line: &str) -> Option<&str> {
    let (prompt, rest) = line.split_once("> ")?;
    let is_prompt = prompt == "redis"
        || prompt
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    is_prompt.then_some(rest)
}

fn is_transcript(b: &Block) -> bool {
    b.lang == "text" && b.body.iter().any(|l| prompt_command(l).is_some())
}

/// Splits a command line as redis-cli does: spaces, "double quotes" with \xHH, \n, \", \\
/// escapes, and 'single quotes'.
fn split_args(line: &str) -> Vec<Vec<u8>> {
    let bytes = line.as_bytes();
    let mut args = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        if i == bytes.len() {
            break;
        }
        let mut arg = Vec::new();
        match bytes[i] {
            b'"' => {
                i += 1;
                while bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                        match bytes[i] {
                            b'x' => {
                                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                                arg.push(u8::from_str_radix(hex, 16).unwrap());
                                i += 2;
                            }
                            b'n' => arg.push(b'\n'),
                            b'r' => arg.push(b'\r'),
                            b't' => arg.push(b'\t'),
                            other => arg.push(other),
                        }
                    } else {
                        arg.push(bytes[i]);
                    }
                    i += 1;
                }
                i += 1;
            }
            b'\'' => {
                i += 1;
                while bytes[i] != b'\'' {
                    arg.push(bytes[i]);
                    i += 1;
                }
                i += 1;
            }
            _ => {
                while i < bytes.len() && bytes[i] != b' ' {
                    arg.push(bytes[i]);
                    i += 1;
                }
            }
        }
        args.push(arg);
    }
    args
}

/// A bulk string as redis-cli shows it (sdscatrepr).
fn quoted(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x07 => s.push_str("\\a"),
            0x08 => s.push_str("\\b"),
            b if b.is_ascii_graphic() || b == b' ' => s.push(b as char),
            b => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s.push('"');
    s
}

/// A reply as redis-cli prints it on a terminal (RESP2), one string per line.
fn render(v: &Value, prefix: &str) -> String {
    match v {
        Value::Int(n) => format!("(integer) {n}\n"),
        Value::Bulk(b) => format!("{}\n", quoted(b)),
        Value::Simple(s) => format!("{s}\n"),
        Value::Error(e) => format!("(error) {e}\n"),
        Value::Nil => "(nil)\n".to_string(),
        Value::Array(items) if items.is_empty() => "(empty array)\n".to_string(),
        Value::Array(items) => {
            let width = items.len().to_string().len();
            let inner = format!("{prefix}{}", " ".repeat(width + 2));
            let mut out = String::new();
            for (i, item) in items.iter().enumerate() {
                let lead = if i == 0 { "" } else { prefix };
                out.push_str(&format!("{lead}{:>width$}) ", i + 1));
                out.push_str(&render(item, &inner));
            }
            out
        }
        other => format!("{other:?}\n"),
    }
}

/// Runs a transcript: every prompt line's command, its printed reply compared with the lines
/// that follow it. Returns the differences.
fn run_transcript(c: &mut Conn, b: &Block) -> Vec<String> {
    run_transcript_with(&mut |args| c.cmd(args), b, &mut Names::default())
}

/// [`run_transcript`] through `send` (a connection, or a cluster client that follows
/// redirections as `redis-cli -c` does), with the spread holder names the doc shows bound to
/// those the server made (`names`: a spread's id is random, so its names differ on every run).
fn run_transcript_with(
    send: &mut dyn FnMut(&[Vec<u8>]) -> Value,
    b: &Block,
    names: &mut Names,
) -> Vec<String> {
    let mut failures = Vec::new();
    let mut i = 0;
    while i < b.body.len() {
        let Some(command) = prompt_command(&b.body[i]) else {
            // Lines before the first prompt: the shell command that started redis-cli.
            assert!(
                b.body[i].starts_with("$ "),
                "{}:{}: a line outside any command's output: {:?}",
                b.file,
                b.line + 1 + i,
                b.body[i]
            );
            i += 1;
            continue;
        };
        let at = b.line + 1 + i;
        let mut expected = String::new();
        i += 1;
        while i < b.body.len() && prompt_command(&b.body[i]).is_none() {
            expected.push_str(&b.body[i]);
            expected.push('\n');
            i += 1;
        }
        let args = split_args(command);
        if let Some(time) = fixed_event_time(&args) {
            failures.push(format!(
                "{}:{at}: {command}: a fixed event time ({time}) is refused once it is older \
                 than the window: a transcript must not depend on today's date",
                b.file
            ));
            continue;
        }
        let args: Vec<Vec<u8>> = args.iter().map(|a| names.actual(a)).collect();
        let reply = send(&args);
        let got = names.doc_form(&render(&reply, ""), &expected);
        if got != expected {
            failures.push(format!(
                "{}:{at}: {command}\n  doc says:\n{expected}  server says:\n{got}",
                b.file
            ));
        }
    }
    failures
}

/// Holder names a doc shows (a spread's, `{ctr.<id>.<i>.<k>}<home>`) bound to the names the
/// server made in their place: the spread id is drawn at random, so a transcript of a spread
/// cannot show the names of the next run. Each pair is (doc name, server's name).
#[derive(Default)]
struct Names(Vec<(String, String)>);

/// What a holder name says: (spread id, index, attempt k, home).
fn holder_parts(name: &str) -> Option<(&str, &str, &str, &str)> {
    let rest = name.strip_prefix("{ctr.")?;
    let (tag, home) = rest.split_once('}')?;
    let mut fields = tag.split('.');
    let parts = (fields.next()?, fields.next()?, fields.next()?, home);
    (fields.next().is_none() && parts.0.len() == 16).then_some(parts)
}

/// The holder name quoted in a printed reply line (`2) "{ctr....}home"`), if any.
fn quoted_holder(line: &str) -> Option<&str> {
    let start = line.find("\"{ctr.")? + 1;
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

impl Names {
    /// `arg` with a doc's holder name replaced by the server's.
    fn actual(&self, arg: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(arg);
        match self.0.iter().find(|(doc, _)| *doc == text) {
            Some((_, actual)) => actual.clone().into_bytes(),
            None => arg.to_vec(),
        }
    }

    /// The server's printed reply `got` written with the doc's names: a holder name the doc
    /// shows on a line where the server printed another holder of the same index and home
    /// (the doc's spread ids standing each for one of the server's) is bound to it.
    fn doc_form(&mut self, got: &str, expected: &str) -> String {
        let shown: Vec<&str> = expected.lines().collect();
        let mut out = String::new();
        for (n, line) in got.lines().enumerate() {
            let doc = shown.get(n).and_then(|l| quoted_holder(l));
            if let (Some(doc), Some(actual)) = (doc, quoted_holder(line)) {
                if self.may_bind(doc, actual) {
                    self.0.push((doc.to_string(), actual.to_string()));
                }
            }
            let mut line = line.to_string();
            for (doc, actual) in &self.0 {
                line = line.replace(actual.as_str(), doc);
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    fn may_bind(&self, doc: &str, actual: &str) -> bool {
        let (Some(d), Some(a)) = (holder_parts(doc), holder_parts(actual)) else {
            return false;
        };
        let same_id = |x: &(String, String)| {
            let (xd, xa) = (holder_parts(&x.0), holder_parts(&x.1));
            xd.map(|p| p.0) == Some(d.0) && xa.map(|p| p.0) != Some(a.0)
        };
        (d.1, d.3) == (a.1, a.3)
            && doc != actual
            && !self.0.iter().any(|x| x.0 == doc || same_id(x))
    }
}

/// The holders (1..count) the module names for a spread of `home` with id `id` made on a
/// cluster whose slot `s` is served by master `owner[s]`, the masters ranked `rank` for ties
/// (the module ranks them by its slot map's order): each on the master with the fewest
/// holders so far, in the first slot no other holder (nor the home) has (`plan_holders`).
fn planned(home: &str, id: &str, count: usize, owner: &[usize], rank: &[usize]) -> Vec<String> {
    let mut used = vec![false; owner.len()];
    let mut per = vec![0usize; rank.len()];
    let home_slot = key_slot(home.as_bytes()) as usize;
    used[home_slot] = true;
    per[rank[owner[home_slot]]] += 1;
    let mut names = Vec::new();
    for index in 1..count {
        let m = (0..per.len())
            .min_by_key(|&m| (per[m], m))
            .expect("masters");
        let name = (0..)
            .map(|k| format!("{{ctr.{id}.{index}.{k}}}{home}"))
            .find(|n| {
                let slot = key_slot(n.as_bytes()) as usize;
                !used[slot] && rank[owner[slot]] == m
            })
            .expect("a slot on every master");
        used[key_slot(name.as_bytes()) as usize] = true;
        per[m] += 1;
        names.push(name);
    }
    names
}

/// An `AT` argument that is a unix time in ms of this century: the example would work only
/// around the day it was written.
fn fixed_event_time(args: &[Vec<u8>]) -> Option<i64> {
    args.windows(2)
        .filter(|w| w[0].eq_ignore_ascii_case(b"AT"))
        .filter_map(|w| std::str::from_utf8(&w[1]).ok()?.parse::<i64>().ok())
        .find(|t| *t >= 1_000_000_000_000)
}

/// Runs a python snippet; each `expr  # -> literal` line becomes an assertion.
fn run_python(python: &str, server: &Server, b: &Block) -> Vec<String> {
    let mut script = String::from("import sys\n");
    for line in &b.body {
        let line = line.replace("6379", &server.port.to_string());
        match line.split_once("# -> ") {
            Some((expr, want)) => script.push_str(&format!(
                "__got = ({})\nif __got != ({want}):\n    sys.exit({:?} + ': got ' + repr(__got))\n",
                expr.trim(),
                expr.trim()
            )),
            None => {
                script.push_str(&line);
                script.push('\n');
            }
        }
    }
    // The repository's own client package, as `pip install ./clients/python` would give it.
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python");
    let out = Command::new(python)
        .args(["-c", &script])
        .env("PYTHONPATH", package)
        .output()
        .expect("run python");
    if out.status.success() {
        Vec::new()
    } else {
        vec![format!(
            "{}:{}: python snippet failed:\n{}{}",
            b.file,
            b.line,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )]
    }
}

#[test]
fn every_transcript_and_client_snippet_in_the_docs_runs_as_written() {
    let python = python_with_redis_py();
    let mut failures = Vec::new();
    let mut ran = 0;
    for path in doc_files() {
        let runnable: Vec<Block> = blocks(&path)
            .into_iter()
            .filter(|b| is_transcript(b) || b.lang == "python" || b.lang == "rust")
            .collect();
        let mut server: Option<Server> = None;
        for b in runnable {
            let snippet = b.lang == "python" || b.lang == "rust";
            if snippet && b.skip.is_some() {
                failures.push(format!(
                    "{}:{}: a client snippet says that it does not run on its first line \
                     (`# fragment: ...` or `// fragment: ...`), not in a hidden marker",
                    b.file, b.line
                ));
                continue;
            }
            if let Some(reason) = fragment_reason(&b) {
                assert!(
                    reason.len() >= 8,
                    "{}:{}: a fragment needs a written reason",
                    b.file,
                    b.line
                );
                continue;
            }
            if let Some(reason) = &b.skip {
                assert!(
                    reason.len() >= 8,
                    "{}:{}: a skipped block needs a written reason",
                    b.file,
                    b.line
                );
                continue;
            }
            let server = server.get_or_insert_with(Server::start);
            ran += 1;
            if is_transcript(&b) {
                failures.extend(run_transcript(&mut server.conn(), &b));
            } else if b.lang == "python" {
                match &python {
                    Some(py) => failures.extend(run_python(py, server, &b)),
                    None => note(&format!(
                        "{}:{}: python snippet not run: no Python with redis-py",
                        b.file, b.line
                    )),
                }
            } else {
                failures.push(format!(
                    "{}:{}: a {} snippet has no runner here: say on its first line that it is \
                     a fragment (// fragment: ...)",
                    b.file, b.line, b.lang
                ));
            }
        }
    }
    assert!(ran >= 5, "only {ran} blocks found");
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn the_runner_reads_redis_cli_syntax_and_prints_like_it() {
    assert_eq!(
        split_args(r#"PNC.MERGE k "\x01a b\"" 'x y' z"#),
        vec![
            b"PNC.MERGE".to_vec(),
            b"k".to_vec(),
            b"\x01a b\"".to_vec(),
            b"x y".to_vec(),
            b"z".to_vec()
        ]
    );
    let nested = Value::Array(vec![
        Value::Int(1),
        Value::Array(vec![Value::Bulk(b"a\x00".to_vec()), Value::Nil]),
    ]);
    assert_eq!(
        render(&nested, ""),
        "1) (integer) 1\n2) 1) \"a\\x00\"\n   2) (nil)\n"
    );
    assert_eq!(
        prompt_command("127.0.0.1:6379> CTR.GET k"),
        Some("CTR.GET k")
    );
    assert_eq!(prompt_command("redis> PING"), Some("PING"));
    assert_eq!(prompt_command("1) (integer) 3"), None);
    let at = |line: &str| fixed_event_time(&split_args(line));
    assert_eq!(
        at("CTR.RECONCILE v 100 AT 1764412800000"),
        Some(1_764_412_800_000)
    );
    assert_eq!(at("CTR.RECONCILE v 100 AT 60000"), None);
}

/// The transcripts of docs/CLUSTER.md that need a cluster (marked skipped for the one-server
/// run above, with a reason naming this test) run on a 3-master cluster started here, through
/// a client that follows redirections as `redis-cli -c` does, their replies compared with the
/// doc. A spread's holder names come from a random spread id: the doc's are bound to the
/// server's by index and home, and must be the names the module gives with the doc's id on a
/// cluster like this one (for some order of its masters), so that the doc shows a reply the
/// module can give, and its later commands write the holders it made.
#[test]
fn the_cluster_transcripts_run_on_a_cluster() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let transcripts: Vec<Block> = blocks(&root.join("docs/CLUSTER.md"))
        .into_iter()
        .filter(is_transcript)
        .filter(|b| {
            b.skip
                .as_deref()
                .is_some_and(|r| r.contains("the_cluster_transcripts_run_on_a_cluster"))
        })
        .collect();
    assert!(transcripts.len() >= 2, "{} transcripts", transcripts.len());
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let mut names = Names::default();
    let mut failures = Vec::new();
    for b in &transcripts {
        failures.extend(run_transcript_with(
            &mut |args| client.cmd(args),
            b,
            &mut names,
        ));
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    assert!(!names.0.is_empty(), "a spread's holders were shown");

    let ports = cluster.ports();
    let map = slot_map(&mut cluster.nodes[0].conn()).expect("slot map");
    let owner: Vec<usize> = map
        .iter()
        .map(|p| ports.iter().position(|q| q == p).expect("a master of ours"))
        .collect();
    let ranks: Vec<Vec<usize>> = (0..6)
        .map(|n| {
            let mut r = vec![0, 1, 2];
            r.swap(0, n % 3);
            if n >= 3 {
                r.swap(1, 2);
            }
            r
        })
        .collect();
    let (doc_names, actual_names): (Vec<String>, Vec<String>) = names.0.iter().cloned().unzip();
    for shown in [&doc_names, &actual_names] {
        let (id, _, _, home) = holder_parts(&shown[0]).expect("a holder name");
        assert!(shown
            .iter()
            .all(|n| holder_parts(n).is_some_and(|p| p.0 == id)));
        let made = ranks
            .iter()
            .any(|rank| planned(home, id, shown.len() + 1, &owner, rank) == *shown);
        assert!(made, "not names the module gives with id {id}: {shown:?}");
    }
}
