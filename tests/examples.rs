//! The runnable examples in docs/examples run against test servers and must succeed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::cluster::Cluster;
use common::{note, python_with_redis_py, Server};

#[test]
fn reconcile_stream_example_repairs_the_counter() {
    let server = Server::start_with(&[], &["bucket-ms", "200", "settle-ms", "100"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/reconcile_stream.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("REDIS_PORT", server.port.to_string())
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("after repair: value 22, drift -1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("s for the orders to settle (ctr.bucket-ms + ctr.settle-ms)"),
        "the wait is announced: {stdout}"
    );
}

/// Issue 38, item 5: the job RECONCILE.md shows, run as a user runs it, from its first run.
/// Right after the counter's START it waits (and says why) and changes nothing; once the
/// history has settled it repairs; a mistyped stream name is refused, not counted as 0.
#[test]
fn reconcile_stream_job_works_from_its_first_run() {
    let server = Server::start_with(&[], &["bucket-ms", "200", "settle-ms", "300"]);
    let mut c = server.conn();
    c.q("CTR.ADD demo:{orders}:count 5"); // counted before any job: 3 real orders, 2 doubled
    for _ in 0..3 {
        c.q("XADD demo:{orders}:log * order x");
    }
    let first = run_job(&server, &[]);
    assert!(first.0, "the first run fails: {}", first.1);
    assert!(first.1.contains("history starts at "), "{}", first.1);
    assert!(first
        .1
        .contains("the first repair comes once it has settled"));
    assert_eq!(c.q("CTR.GET demo:{orders}:count"), common::Value::Int(5));
    // Later runs: once the settled watermark reaches START's reply, the repair.
    let repaired = common::eventually(10, || {
        let run = run_job(&server, &[]);
        assert!(run.0, "a run fails: {}", run.1);
        run.1.contains("repaired at ").then_some(run.1)
    });
    assert!(repaired.contains("value 3, drift 2"), "{repaired}");
    assert_eq!(c.q("CTR.GET demo:{orders}:count"), common::Value::Int(3));
    // A typo in the stream's name: refused, the counter kept.
    let typo = run_job(&server, &["demo:{orders}:count", "demo:{orders}:lgo"]);
    assert!(!typo.0, "{}", typo.1);
    assert!(typo.1.contains("ERR no such source key"), "{}", typo.1);
    assert_eq!(c.q("CTR.GET demo:{orders}:count"), common::Value::Int(3));
}

/// Runs docs/examples/reconcile_stream_job.sh once: (success, stdout and stderr).
fn run_job(server: &Server, args: &[&str]) -> (bool, String) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/reconcile_stream_job.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .env("REDIS_PORT", server.port.to_string())
        .output()
        .expect("run the job");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn run_example(mut command: Command, server: &Server, cluster: &Cluster) -> String {
    let out = command
        .env("REDIS_PORT", server.port.to_string())
        .env("REDIS_CLUSTER_PORT", cluster.nodes[0].port.to_string())
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command:?}\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// docs/examples/redis_py.py (the redis_ctr library) and the program in docs/examples/rust (the
/// redis-ctr-client crate), against one server and one 3-master cluster. The Rust program is
/// built in this crate's target directory (the dependencies the two share are compiled once;
/// later runs only link it when it changed).
#[test]
fn client_examples_run_against_a_server_and_a_cluster() {
    let server = Server::start();
    let cluster = Cluster::start(3, &[]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = root.join("docs/examples");

    match python_with_redis_py() {
        Some(python) => {
            // As if installed with `pip install ./clients/python`.
            let mut command = Command::new(python);
            command
                .arg(docs.join("redis_py.py"))
                .env("PYTHONPATH", root.join("clients/python"));
            let out = run_example(command, &server, &cluster);
            assert!(
                out.contains("standalone: views 42 | paid 1 | stock 1 budgets [1]"),
                "{out}"
            );
            assert!(out.contains("| hits 1000 in 1 command(s)"), "{out}");
            assert!(
                out.contains(
                    "drop: 12 of 15 purchases granted over 4 holders, retries replayed, stock 0 (floor 0)"
                ),
                "{out}"
            );
            assert!(out.contains("cluster: 100 counters on 3 masters"), "{out}");
            assert!(
                out.contains(
                    "spread counter over 6 holders on 3 masters, written by 4 processes: 1400"
                ),
                "{out}"
            );
        }
        None => note(
            "redis-py example skipped: no Python with the redis package \
             (make test installs one in target/venv; or set CTR_PYTHON)",
        ),
    }

    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = docs.join("rust/Cargo.toml");
    let build = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo");
    assert!(
        build.status.success(),
        "building {}:\n{}",
        manifest.display(),
        String::from_utf8_lossy(&build.stderr)
    );
    let program = Command::new(target.join("release/redis-ctr-client-example"));
    let out = run_example(program, &server, &cluster);
    assert!(
        out.contains("standalone: views 41 | stock 1, budgets [1] | hits 1000 in 1 command(s)"),
        "{out}"
    );
    assert!(
        out.contains("drop: 12 of 15 purchases granted over 4 holders, retries replayed, stock 0"),
        "{out}"
    );
    assert!(
        out.contains("cluster: 100 counters summed to 4950"),
        "{out}"
    );
    assert!(
        out.contains("spread counter over 6 holders, written by 4 threads: 1400"),
        "{out}"
    );
}
