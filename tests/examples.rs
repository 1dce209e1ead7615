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
