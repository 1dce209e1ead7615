//! Prometheus with real components: Debian's redis_exporter (`prometheus-redis-exporter`,
//! which `make test` installs) runs the repository's script (docs/operations/ctr-metrics.lua)
//! against a server with the module; its `/metrics` page, fetched over plain HTTP, carries
//! every field of `INFO ctr` with the value the server reports, and the watched keys'
//! `CTR.INFO` figures. The alert rules and the Grafana dashboard name only series the script
//! exports, and every alert is explained in docs/OPERATIONS.md.
//!
//! The exporter is a child of this test, on a free loopback port, stopped by a Drop guard
//! (kill and wait) whatever happens; the server is the harness's own.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{key_slot, Cluster};
use common::{free_port, Server, Value};

const SCRIPT: &str = "docs/operations/ctr-metrics.lua";
const RULES: &str = "docs/operations/ctr-alerts.yml";
const DASHBOARD: &str = "docs/operations/ctr-dashboard.json";

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read_repo_file(path: &str) -> String {
    std::fs::read_to_string(repo_file(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The exporter binary: $REDIS_EXPORTER, else Debian's.
fn exporter_binary() -> String {
    std::env::var("REDIS_EXPORTER").unwrap_or_else(|_| "prometheus-redis-exporter".into())
}

/// A redis_exporter this test started; killed and reaped on drop.
struct Exporter {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Exporter {
    /// Starts the exporter against `server` with the repository's script, WATCH set to
    /// `watch`; waits until its page shows a successful scrape of the server.
    fn start(server: &Server, watch: &[&str]) -> Exporter {
        let dir = std::env::temp_dir().join(format!(
            "redis-ctr-exporter-{}-{}",
            std::process::id(),
            server.port
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the exporter's dir");
        // The watch list is the server's ctr.metrics-keys: the script runs as shipped.
        let list = watch.join(" ");
        let set = server
            .conn()
            .cmd(&["CONFIG", "SET", "ctr.metrics-keys", list.as_str()]);
        assert_eq!(set, Value::Simple("OK".into()), "{list}");
        let script_path = repo_file(SCRIPT);

        for _attempt in 0..5 {
            let port = free_port();
            let log = std::fs::File::create(dir.join("exporter.log")).expect("exporter log");
            let child = Command::new(exporter_binary())
                .arg("--redis.addr")
                .arg(format!("redis://127.0.0.1:{}", server.port))
                .arg("--script")
                .arg(&script_path)
                .arg("--web.listen-address")
                .arg(format!("127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log fd"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "start {} ({e}): `make test` installs Debian's prometheus-redis-exporter \
                         (.ci/install-deps); REDIS_EXPORTER=path picks another binary",
                        exporter_binary()
                    )
                });
            let mut exporter = Exporter {
                child,
                port,
                dir: dir.clone(),
            };
            if exporter.wait_ready() {
                return exporter;
            }
            // Drop kills it; another process took the port, or it failed: try another port.
        }
        panic!("redis_exporter never served a successful scrape");
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false; // exited: e.g. the port was taken
            }
            if let Ok(page) = http_get(self.port, "/metrics") {
                if page.lines().any(|l| l == "redis_up 1") {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("exporter.log")).unwrap_or_default()
    }

    /// One scrape: the page, and its `redis_script_values` samples by `key` label.
    fn scrape(&self) -> (String, BTreeMap<String, f64>) {
        let page = http_get(self.port, "/metrics")
            .unwrap_or_else(|e| panic!("GET /metrics: {e}; exporter log:\n{}", self.log()));
        let values = script_values(&page);
        (page, values)
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("exporter log kept in {}", self.dir.display());
        }
    }
}

/// GET over HTTP/1.0 (the server closes the connection after the body, no chunking); the body
/// of a 200 answer.
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no HTTP header end"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(std::io::Error::other(format!("HTTP answer {status}")));
    }
    Ok(body.to_string())
}

/// `redis_script_values{key="NAME"} VALUE` lines (the exporter may add labels after `key`).
fn script_values(page: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in page.lines() {
        let Some(rest) = line.strip_prefix("redis_script_values{") else {
            continue;
        };
        let (labels, value) = rest.rsplit_once("} ").expect("a sample line");
        let key = labels
            .split("\",")
            .find_map(|l| l.strip_prefix("key=\""))
            .map(|k| k.trim_end_matches('"'))
            .unwrap_or_else(|| panic!("no key label in {line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        assert!(
            out.insert(key.to_string(), value).is_none(),
            "{key} twice on the page"
        );
    }
    out
}

/// `INFO ctr`'s statistics as (field, value), in order: every field but the watch list
/// (`ctr_watch_keys`, the script's input, not a figure).
fn info_ctr(server: &Server) -> Vec<(String, i64)> {
    let text = server.conn().q("INFO ctr").text();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| *k != "ctr_watch_keys")
        .map(|(k, v)| (k.to_string(), v.trim().parse().expect("an integer field")))
        .collect()
}

/// One scrape, checked against the server: every INFO ctr field is on the page, no other
/// ctr_ field is, and each value is the server's, read just before or just after the scrape
/// (the idle sweep and the script's own reads may move a field in between; any value outside
/// that range is the script's error). Returns the page, its values, and INFO ctr after.
fn scrape_checked(
    exporter: &Exporter,
    server: &Server,
) -> (String, BTreeMap<String, f64>, BTreeMap<String, i64>) {
    let before: BTreeMap<String, i64> = info_ctr(server).into_iter().collect();
    let (page, values) = exporter.scrape();
    let after: BTreeMap<String, i64> = info_ctr(server).into_iter().collect();
    assert!(after.len() >= 50, "INFO ctr has its fields: {after:?}");
    for (field, high) in &after {
        let low = before[field];
        let (low, high) = (low.min(*high) as f64, low.max(*high) as f64);
        let got = values.get(field).copied();
        assert!(
            got.is_some_and(|v| low <= v && v <= high),
            "{field} on the exporter's page: {got:?}, the server's {low}..={high}"
        );
    }
    let exported = values
        .keys()
        .filter(|k| k.starts_with("ctr_") && !k.starts_with("ctr_key_"))
        .count();
    assert_eq!(exported, after.len(), "no field beyond INFO ctr's");
    (page, values, after)
}

fn watched(values: &BTreeMap<String, f64>, field: &str, key: &str) -> Option<f64> {
    values.get(&format!("ctr_key_{field}:{key}")).copied()
}

#[test]
fn the_exporter_serves_every_info_ctr_field_and_the_watched_counters() {
    let server = Server::start();
    let mut c = server.conn();
    // Purchases: one granted, its retry replayed, one refused by the floor.
    assert_eq!(c.q("CTR.ADD stock 10").int(), 10);
    assert_eq!(c.q("CTR.FLOOR stock 0"), Value::Simple("OK".into()));
    assert_eq!(c.q("CTR.DECRFLOOR stock 4 TOKEN order-1").int(), 6);
    assert_eq!(c.q("CTR.DECRFLOOR stock 4 TOKEN order-1").int(), 6);
    assert_eq!(c.q("CTR.DECRFLOOR stock 100"), Value::Nil);
    // A retried add, and a reconcile that finds the counter 2 high.
    assert_eq!(c.q("CTR.ADD views 5 TOKEN t-1").int(), 5);
    assert_eq!(c.q("CTR.ADD views 5 TOKEN t-1").int(), 5);
    // CTR.RECONCILE replies [new value, drift].
    assert_eq!(c.q("CTR.RECONCILE views 3").array()[1].int(), 2);
    c.q("SET plain x");

    let exporter = Exporter::start(&server, &["stock", "views", "missing", "plain"]);
    let (page, values, _) = scrape_checked(&exporter, &server);
    for (field, want) in [
        ("ctr_adds", 2.0),
        ("ctr_duplicates_ignored", 2.0),
        ("ctr_decrements_granted", 1.0),
        ("ctr_decrements_refused", 1.0),
        ("ctr_reconciles", 1.0),
        ("ctr_drift_total_abs", 2.0),
        ("ctr_drift_1_9", 1.0),
        ("ctr_tokens_held", 2.0),
    ] {
        assert_eq!(values.get(field), Some(&want), "{field}:\n{page}");
    }
    assert_eq!(watched(&values, "exists", "stock"), Some(1.0));
    assert_eq!(watched(&values, "value", "stock"), Some(6.0));
    assert_eq!(watched(&values, "floor", "stock"), Some(0.0));
    assert_eq!(watched(&values, "ledger", "stock"), Some(1.0));
    assert_eq!(watched(&values, "value", "views"), Some(3.0));
    assert_eq!(watched(&values, "last_drift", "views"), Some(2.0));
    assert_eq!(watched(&values, "total_abs_drift", "views"), Some(2.0));
    assert_eq!(watched(&values, "tokens", "views"), Some(1.0));
    assert_eq!(
        watched(&values, "floor", "views"),
        None,
        "no floor, no series"
    );
    assert_eq!(watched(&values, "exists", "missing"), Some(0.0));
    assert_eq!(watched(&values, "error", "missing"), Some(0.0));
    assert_eq!(watched(&values, "exists", "plain"), Some(0.0));
    assert_eq!(watched(&values, "error", "plain"), Some(1.0));

    // The page follows the server: each scrape runs the script again.
    assert_eq!(c.q("CTR.ADD views 7").int(), 10);
    assert_eq!(c.q("CTR.DECRFLOOR stock 6").int(), 0);
    assert_eq!(c.q("CTR.RECONCILE views 1000").array()[1].int(), -990);
    let (page, values, _) = scrape_checked(&exporter, &server);
    assert_eq!(values.get("ctr_adds"), Some(&3.0), "{page}");
    assert_eq!(values.get("ctr_decrements_granted"), Some(&2.0));
    assert_eq!(values.get("ctr_drift_100_999"), Some(&1.0));
    assert_eq!(values.get("ctr_drift_largest_abs"), Some(&990.0));
    assert_eq!(watched(&values, "value", "stock"), Some(0.0));
    assert_eq!(watched(&values, "value", "views"), Some(1000.0));
    assert_eq!(watched(&values, "last_drift", "views"), Some(-990.0));
    assert!(page.lines().any(|l| l == "redis_up 1"), "{page}");

    // The watch list is changed on the server, the exporter and its script left as they are
    // (issue 38: it lived inside the Lua file). A name shaped like an INFO field stays a name.
    let set = c.cmd(&["CONFIG", "SET", "ctr.metrics-keys", "views ctr_fake:12"]);
    assert_eq!(set, Value::Simple("OK".into()));
    let (page, values, _) = scrape_checked(&exporter, &server);
    assert_eq!(watched(&values, "value", "views"), Some(1000.0), "{page}");
    assert_eq!(
        watched(&values, "value", "stock"),
        None,
        "no longer watched"
    );
    assert_eq!(watched(&values, "exists", "ctr_fake:12"), Some(0.0));
    assert!(!values.contains_key("ctr_fake"), "{page}");
}

/// Every query of the dashboard's panels; each panel has a title, a type and (but rows) a
/// query at least.
fn dashboard_exprs(dashboard: &json::Json) -> Vec<String> {
    let panels = dashboard
        .get("panels")
        .and_then(json::Json::as_array)
        .expect("panels");
    let mut exprs = Vec::new();
    for panel in panels {
        let title = panel.get("title").and_then(json::Json::as_str);
        let kind = panel.get("type").and_then(json::Json::as_str);
        assert!(
            title.is_some() && kind.is_some(),
            "a panel with a title and a type"
        );
        if kind == Some("row") {
            continue;
        }
        let targets = panel
            .get("targets")
            .and_then(json::Json::as_array)
            .unwrap_or_else(|| panic!("panel {title:?} has targets"));
        assert!(!targets.is_empty(), "panel {title:?} queries something");
        for t in targets {
            let expr = t
                .get("expr")
                .and_then(json::Json::as_str)
                .unwrap_or_else(|| panic!("a target of {title:?} has an expr"));
            exprs.push(expr.to_string());
        }
    }
    exprs
}

/// The exporter's own series a text names (`redis_up`, `redis_commands_total`, ...), besides
/// the script's `redis_script_values`.
fn exporter_series(text: &str) -> Vec<String> {
    let mut out: Vec<String> = prefixed_words(text, "redis_")
        .into_iter()
        .map(|(name, _)| name.to_string())
        .filter(|name| name != "redis_script_values")
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Issue 38 (friction): the dashboard shows whether each server is up, and the module
/// commands' latency and errors, from series Debian's redis_exporter already serves (no
/// script needed): each series it names is on the exporter's page, for a module command.
#[test]
fn the_dashboards_server_and_command_panels_read_series_the_exporter_serves() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(c.q("CTR.ADD k 1"), Value::Int(1));
    assert!(c.q("CTR.ADD k x").is_error(), "a failed call");
    assert!(c.q("CTR.ADD k").is_error(), "a rejected call (arity)");
    let exporter = Exporter::start(&server, &[]);
    let (page, _) = exporter.scrape();
    let text = read_repo_file(DASHBOARD);
    let dashboard = json::parse(&text).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"));
    let series = exporter_series(&dashboard_exprs(&dashboard).join("\n"));
    for name in [
        "redis_up",
        "redis_commands_total",
        "redis_commands_duration_seconds_total",
        "redis_commands_failed_calls_total",
        "redis_commands_rejected_calls_total",
    ] {
        assert!(
            series.contains(&name.to_string()),
            "the dashboard shows {name}"
        );
    }
    for name in &series {
        let sample = if name == "redis_up" {
            "redis_up 1".to_string()
        } else {
            format!("{name}{{cmd=\"ctr.add\"")
        };
        assert!(
            page.lines().any(|l| l.starts_with(&sample)),
            "{DASHBOARD} names {name}: not on the exporter's page as {sample}\n{page}"
        );
    }
    let failed = page
        .lines()
        .find(|l| l.starts_with("redis_commands_failed_calls_total{cmd=\"ctr.add\"}"));
    assert!(failed.is_some_and(|l| l.ends_with(" 1")), "{failed:?}");
}

/// The CtrFalseRefusals alert's block of the rules file.
fn alert_block(rules: &str, alert: &str) -> String {
    rules
        .split("- alert: ")
        .find(|b| b.starts_with(alert))
        .unwrap_or_else(|| panic!("alert {alert} in {RULES}"))
        .to_string()
}

/// Issue 38, item 7: CtrFalseRefusals fired on every server with a refusal (any amount larger
/// than a counter's stock) while some watched counter kept headroom. It now reads the refusals
/// that may be false alone: a floored spread counter's holder refusing with no fresh bound of
/// the whole counter's headroom beyond the amount. Legitimate refusals leave that field still.
#[test]
fn false_refusals_count_only_refusals_the_whole_counter_might_have_covered() {
    let server = Server::start();
    let mut c = server.conn();
    // Legitimate: a plain counter asked more than its stock, while another keeps headroom.
    c.q("CTR.ADD stock 10");
    c.q("CTR.FLOOR stock 0");
    c.q("CTR.ADD other 500");
    c.q("CTR.FLOOR other 0");
    assert_eq!(c.q("CTR.DECRFLOOR stock 11"), Value::Nil);
    // Legitimate: a spread counter's holder asked more than the whole counter holds (the
    // rebalance round's bound proves it: TRYAGAIN until it comes, then nil).
    c.q("CTR.ADD sale 100");
    c.q("CTR.FLOOR sale 0");
    let holders = common::names(&c.q("CTR.SPREAD sale 4"));
    let (reply, _) = common::purchase_until_final(&mut c, &["CTR.DECRFLOOR", &holders[1], "101"]);
    assert_eq!(reply, Value::Nil);

    let exporter = Exporter::start(&server, &["other"]);
    let (page, values, _) = scrape_checked(&exporter, &server);
    assert_eq!(values.get("ctr_decrements_refused"), Some(&2.0), "{page}");
    assert_eq!(
        values.get("ctr_decrements_refused_unproven"),
        Some(&0.0),
        "{page}"
    );
    assert!(watched(&values, "value", "other").is_some_and(|v| v >= 100.0));

    // A refusal that may be false: rebalancing off, a holder short of 60 units while the
    // counter holds 100 in all.
    c.q("CONFIG SET ctr.rebalance-delay-ms 0");
    assert_eq!(c.cmd(&["CTR.DECRFLOOR", &holders[2], "60"]), Value::Nil);
    let (page, values, _) = scrape_checked(&exporter, &server);
    assert_eq!(values.get("ctr_decrements_refused"), Some(&3.0), "{page}");
    assert_eq!(
        values.get("ctr_decrements_refused_unproven"),
        Some(&1.0),
        "{page}"
    );

    // The alert reads that field, and not every refusal.
    let alert = alert_block(&read_repo_file(RULES), "CtrFalseRefusals");
    let expr = alert.split("labels:").next().unwrap_or_default();
    assert!(expr.contains("ctr_decrements_refused_unproven"), "{alert}");
    assert!(!expr.contains("key=\"ctr_decrements_refused\""), "{alert}");
}

/// A name `prefix:<n>` whose slot master `owner` serves (`want`) or does not.
fn name_on(cluster: &Cluster, prefix: &str, owner: usize, want: bool) -> String {
    (0..)
        .map(|n| format!("{prefix}:{n}"))
        .find(|k| (cluster.owner(key_slot(k.as_bytes())) == owner) == want)
        .expect("some name")
}

#[test]
fn in_a_cluster_the_script_reads_the_keys_its_master_serves() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let local = name_on(&cluster, "local", 0, true);
    let remote = name_on(&cluster, "remote", 0, false);
    let home = name_on(&cluster, "home", 0, true);
    assert_eq!(client.cmd(&["CTR.ADD", &local, "5"]).int(), 5);
    assert_eq!(client.cmd(&["CTR.ADD", &remote, "7"]).int(), 7);
    assert_eq!(client.cmd(&["CTR.ADD", &home, "9"]).int(), 9);
    let holders = common::names(&client.cmd(&["CTR.SPREAD", &home, "6"]));
    assert!(
        holders[1..]
            .iter()
            .any(|h| cluster.owner(key_slot(h.as_bytes())) != 0),
        "holders on other masters: {holders:?}"
    );
    let local_holder = holders[1..]
        .iter()
        .find(|h| cluster.owner(key_slot(h.as_bytes())) == 0)
        .expect("6 holders over 3 masters: one more beside the home")
        .clone();
    // A holder is made by its first write.
    assert_eq!(client.cmd(&["CTR.ADD", &local_holder, "3"]).int(), 3);

    let exporter = Exporter::start(&cluster.nodes[0], &[&local, &remote, &home, &local_holder]);
    let (page, values, after) = scrape_checked(&exporter, &cluster.nodes[0]);
    // Each scrape's CTR.INFO of the home counts as a gather, failed, after its INFO ctr.
    for field in ["ctr_gathers", "ctr_gather_failures"] {
        assert_eq!(after[field] as f64, values[field] + 1.0, "{field}");
    }
    assert_eq!(values.get("ctr_spreads"), Some(&1.0), "{page}");
    assert!(
        values["ctr_gather_failures"] >= 1.0,
        "the earlier scrapes' reads of the home"
    );
    assert_eq!(values["ctr_gather_failures"], values["ctr_gathers"]);
    assert_eq!(watched(&values, "exists", &local), Some(1.0));
    assert_eq!(watched(&values, "value", &local), Some(5.0));
    // Another master's key: the script may not touch it.
    assert_eq!(watched(&values, "exists", &remote), Some(0.0));
    assert_eq!(watched(&values, "error", &remote), Some(1.0));
    assert_eq!(watched(&values, "value", &remote), None);
    // The spread home: its total needs a gather, which cannot wait inside a script (so a home
    // does not belong in WATCH: docs/OPERATIONS.md).
    assert_eq!(watched(&values, "error", &home), Some(1.0));
    assert_eq!(watched(&values, "value", &home), None);
    // A holder on this master is a counter of its own.
    assert_eq!(watched(&values, "exists", &local_holder), Some(1.0));
    assert_eq!(watched(&values, "error", &local_holder), Some(0.0));
    assert_eq!(watched(&values, "value", &local_holder), Some(3.0));
}

/// The fields the script can export: INFO ctr's (from a server with the module) and the
/// per-key ones of its KEY_FIELDS table (plus exists and error).
fn exportable_fields() -> Vec<String> {
    let server = Server::start();
    let mut fields: Vec<String> = info_ctr(&server).into_iter().map(|(k, _)| k).collect();
    let script = read_repo_file(SCRIPT);
    let table = script
        .split_once("local KEY_FIELDS = {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .expect("the script's KEY_FIELDS table")
        .0;
    for line in table.lines() {
        if let Some((name, _)) = line.trim().split_once(" = true") {
            fields.push(format!("ctr_key_{name}"));
        }
    }
    fields.extend(["ctr_key_exists".into(), "ctr_key_error".into()]);
    fields
}

/// Every `ctr_...` field a text names: in `key="..."` / `key=~"a|b"` matchers and in
/// `ctr_key_<field>:` prefixes of regexes. Not a recording rule's name (`ctr_key:...`).
fn named_fields(text: &str) -> Vec<String> {
    prefixed_words(text, "ctr_")
        .into_iter()
        .filter(|&(token, next)| !(token == "ctr_key" && next == Some(b':')))
        .map(|(token, _)| token.to_string())
        .collect()
}

/// The words of `text` (runs of letters, digits and `_`) that start with `prefix`, each with
/// the byte that follows it.
fn prefixed_words<'a>(text: &'a str, prefix: &str) -> Vec<(&'a str, Option<u8>)> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = text[i..].find(prefix) {
        let start = i + at;
        let mut end = start + prefix.len();
        while end < bytes.len() && word(bytes[end]) {
            end += 1;
        }
        if start == 0 || !word(bytes[start - 1]) {
            out.push((&text[start..end], bytes.get(end).copied()));
        }
        i = end;
    }
    out
}

/// A YAML text without its comment lines.
fn without_comments(yaml: &str) -> String {
    yaml.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The alert names of the rules file (`- alert: Name`).
fn alert_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(|s| s.trim().to_string())
        .collect()
}

#[test]
fn the_alert_rules_name_real_fields_and_are_documented() {
    let rules = read_repo_file(RULES);
    assert!(!rules.contains('\t'), "YAML indents with spaces");
    assert!(
        rules.lines().any(|l| l == "groups:"),
        "a Prometheus rules file"
    );
    // Each alert: an expression, a severity, a summary and a description.
    let blocks: Vec<&str> = rules.split("- alert: ").skip(1).collect();
    assert!(blocks.len() >= 8, "the alerts are there");
    for block in &blocks {
        let name = block.lines().next().unwrap_or_default();
        for part in ["expr:", "severity:", "summary:", "description:"] {
            assert!(block.contains(part), "alert {name} has {part}");
        }
    }
    let fields = exportable_fields();
    for field in named_fields(&without_comments(&rules)) {
        assert!(
            fields.contains(&field),
            "{RULES} names {field}, which nothing exports"
        );
    }
    // The four: drift above a bound, gather failures, transfers pending too long,
    // false refusals; each on the INFO ctr fields that measure it.
    let alerts = alert_names(&rules);
    for (alert, field) in [
        ("CtrCounterDriftAboveBound", "ctr_key_last_drift"),
        ("CtrReconcileDriftLarge", "ctr_drift_1000_plus"),
        ("CtrGatherFailures", "ctr_gather_failures"),
        ("CtrTransfersPendingTooLong", "ctr_transfers_resent"),
        ("CtrFalseRefusals", "ctr_decrements_refused_unproven"),
        (
            "CtrPurchasesAwaitingBudget",
            "ctr_decrements_awaiting_budget",
        ),
    ] {
        let block = blocks
            .iter()
            .find(|b| b.starts_with(alert))
            .unwrap_or_else(|| panic!("alert {alert} in {RULES}"));
        assert!(
            block.contains(field) || (field == "ctr_key_last_drift" && rules.contains(field)),
            "{alert} reads {field}"
        );
    }
    let ops = read_repo_file("docs/OPERATIONS.md");
    for alert in &alerts {
        assert!(
            ops.lines()
                .any(|l| l.starts_with('#') && l.contains(alert.as_str())),
            "docs/OPERATIONS.md has a section on {alert}"
        );
    }
    // promtool, when installed (Debian's `prometheus` package), checks the file as Prometheus
    // loads it.
    if let Ok(out) = Command::new("promtool")
        .args(["check", "rules"])
        .arg(repo_file(RULES))
        .output()
    {
        assert!(
            out.status.success(),
            "promtool check rules:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_dashboard_is_json_whose_queries_name_real_fields() {
    let text = read_repo_file(DASHBOARD);
    let dashboard = json::parse(&text).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"));
    assert!(dashboard
        .get("title")
        .and_then(json::Json::as_str)
        .is_some());
    assert!(dashboard.get("uid").and_then(json::Json::as_str).is_some());
    let exprs = dashboard_exprs(&dashboard);
    assert!(exprs.len() >= 10, "the dashboard shows the module");
    let fields = exportable_fields();
    let mut shown = Vec::new();
    for expr in &exprs {
        for field in named_fields(expr) {
            assert!(
                fields.contains(&field),
                "{DASHBOARD} names {field}, which nothing exports"
            );
            shown.push(field);
        }
    }
    for key in [
        "ctr_adds",
        "ctr_gather_failures",
        "ctr_transfers_resent",
        "ctr_decrements_awaiting_budget",
        "ctr_collections_pending",
    ] {
        assert!(shown.iter().any(|f| f == key), "the dashboard shows {key}");
    }
}

/// A small JSON reader (RFC 8259), enough to check the dashboard's structure without a crate.
mod json {
    #[derive(Debug)]
    #[allow(dead_code)] // every value is parsed; the checks read strings, arrays and objects
    pub enum Json {
        Null,
        Bool(bool),
        Num(f64),
        Str(String),
        Arr(Vec<Json>),
        Obj(Vec<(String, Json)>),
    }

    impl Json {
        pub fn get(&self, name: &str) -> Option<&Json> {
            match self {
                Json::Obj(fields) => fields.iter().find(|(k, _)| k == name).map(|(_, v)| v),
                _ => None,
            }
        }
        pub fn as_str(&self) -> Option<&str> {
            match self {
                Json::Str(s) => Some(s),
                _ => None,
            }
        }
        pub fn as_array(&self) -> Option<&[Json]> {
            match self {
                Json::Arr(items) => Some(items),
                _ => None,
            }
        }
    }

    pub fn parse(text: &str) -> Result<Json, String> {
        let mut p = Parser {
            b: text.as_bytes(),
            i: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.i != p.b.len() {
            return Err(format!("trailing text at byte {}", p.i));
        }
        Ok(v)
    }

    struct Parser<'a> {
        b: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn ws(&mut self) {
            while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            }
        }
        fn err<T>(&self, what: &str) -> Result<T, String> {
            Err(format!("{what} at byte {}", self.i))
        }
        fn eat(&mut self, lit: &str) -> bool {
            if self.b[self.i..].starts_with(lit.as_bytes()) {
                self.i += lit.len();
                true
            } else {
                false
            }
        }
        fn value(&mut self) -> Result<Json, String> {
            self.ws();
            match self.b.get(self.i) {
                Some(b'{') => {
                    self.i += 1;
                    let mut fields: Vec<(String, Json)> = Vec::new();
                    self.ws();
                    if self.eat("}") {
                        return Ok(Json::Obj(fields));
                    }
                    loop {
                        self.ws();
                        let key = self.string()?;
                        if fields.iter().any(|(k, _)| *k == key) {
                            return self.err(&format!("duplicate key {key:?}"));
                        }
                        self.ws();
                        if !self.eat(":") {
                            return self.err("expected ':'");
                        }
                        fields.push((key, self.value()?));
                        self.ws();
                        if self.eat("}") {
                            return Ok(Json::Obj(fields));
                        }
                        if !self.eat(",") {
                            return self.err("expected ',' or '}'");
                        }
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    let mut items = Vec::new();
                    self.ws();
                    if self.eat("]") {
                        return Ok(Json::Arr(items));
                    }
                    loop {
                        items.push(self.value()?);
                        self.ws();
                        if self.eat("]") {
                            return Ok(Json::Arr(items));
                        }
                        if !self.eat(",") {
                            return self.err("expected ',' or ']'");
                        }
                    }
                }
                Some(b'"') => Ok(Json::Str(self.string()?)),
                Some(b't') if self.eat("true") => Ok(Json::Bool(true)),
                Some(b'f') if self.eat("false") => Ok(Json::Bool(false)),
                Some(b'n') if self.eat("null") => Ok(Json::Null),
                Some(b'-' | b'0'..=b'9') => {
                    let start = self.i;
                    while self.i < self.b.len()
                        && matches!(
                            self.b[self.i],
                            b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                        )
                    {
                        self.i += 1;
                    }
                    let s = std::str::from_utf8(&self.b[start..self.i]).unwrap_or_default();
                    s.parse().map(Json::Num).or_else(|_| self.err("bad number"))
                }
                _ => self.err("expected a value"),
            }
        }
        fn string(&mut self) -> Result<String, String> {
            if !self.eat("\"") {
                return self.err("expected a string");
            }
            let mut out = Vec::new();
            loop {
                match self.b.get(self.i) {
                    None => return self.err("unterminated string"),
                    Some(b'"') => {
                        self.i += 1;
                        return String::from_utf8(out).or_else(|_| self.err("bad UTF-8"));
                    }
                    Some(b'\\') => {
                        let esc = self.b.get(self.i + 1).copied();
                        self.i += 2;
                        let c = match esc {
                            Some(b'"') => '"',
                            Some(b'\\') => '\\',
                            Some(b'/') => '/',
                            Some(b'b') => '\u{8}',
                            Some(b'f') => '\u{c}',
                            Some(b'n') => '\n',
                            Some(b'r') => '\r',
                            Some(b't') => '\t',
                            Some(b'u') => {
                                let hex = self.b.get(self.i..self.i + 4).unwrap_or_default();
                                let code = std::str::from_utf8(hex)
                                    .ok()
                                    .and_then(|h| u32::from_str_radix(h, 16).ok());
                                self.i += 4;
                                match code.and_then(char::from_u32) {
                                    Some(c) => c,
                                    None => return self.err("bad \\u escape"),
                                }
                            }
                            _ => return self.err("bad escape"),
                        };
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                    Some(&c) if c < 0x20 => return self.err("control character in a string"),
                    Some(&c) => {
                        out.push(c);
                        self.i += 1;
                    }
                }
            }
        }
    }
}
