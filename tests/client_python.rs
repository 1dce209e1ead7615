//! The Python client library (clients/python) against the module: its unittest suite, run
//! with the Makefile's Python (redis-py in target/venv), against one server and a 3-master
//! cluster started here.

mod common;

use std::path::Path;
use std::process::Command;

use common::cluster::Cluster;
use common::{note, python_with_redis_py, Server};

#[test]
fn python_client_suite_passes() {
    let Some(python) = python_with_redis_py() else {
        note(
            "Python client tests skipped: no Python with the redis package \
             (make test installs one in target/venv; or set CTR_PYTHON)",
        );
        return;
    };
    // Short buckets, so that the reconcile errors can be reached in a fraction of a second.
    let server = Server::start_with(&[], &["bucket-ms", "100"]);
    let cluster = Cluster::start(3, &[]);
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python");
    let out = Command::new(python)
        .args(["-m", "unittest", "discover", "-v", "-s", "tests", "-t", "."])
        .current_dir(&package)
        .env("PYTHONPATH", &package)
        .env("REDIS_PORT", server.port.to_string())
        .env("REDIS_CLUSTER_PORT", cluster.nodes[0].port.to_string())
        .output()
        .expect("run the Python tests");
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("\nOK"), "{report}");
    assert!(!report.contains("skipped"), "{report}");
}
