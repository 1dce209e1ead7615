//! The Python client library (clients/python) against the module: its unittest suite, run
//! with the Makefile's Python (redis-py in target/venv), against one server (with a replica,
//! for the durable purchases), one that holds fold credits (a holder stays mid-fold) and a
//! 3-master cluster started here; and the outage tests
//! (`tests/outage.py`), each on a cluster of its own: one with a replica, whose master it
//! shuts down, one whose master it freezes (SIGSTOP of the server this test started, then
//! SIGCONT).
//!
//! `CTR_PYTHON_TESTS="tests.test_pipeline tests.test_types.TypesTest"` runs those unittest names
//! instead of the whole suite (the servers are the same).

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
    // For the durable purchases (tests/test_durable.py): WAIT counts this replica.
    let replica = server.start_replica();
    // A server whose folds never land (their credits held): a holder stays mid-fold.
    let held = Server::start_with(&[], &["debug-hold-credits", "yes"]);
    let cluster = Cluster::start(3, &[]);
    let only = std::env::var("CTR_PYTHON_TESTS").unwrap_or_default();
    let mut args = vec!["-m", "unittest"];
    if only.trim().is_empty() {
        args.extend(["discover", "-v", "-s", "tests", "-t", "."]);
    } else {
        args.push("-v");
        args.extend(only.split_whitespace());
    }
    run_python(
        &python,
        &args,
        &[
            ("REDIS_PORT", server.port.to_string()),
            ("REDIS_REPLICA_PORT", replica.port.to_string()),
            ("REDIS_HELD_PORT", held.port.to_string()),
            ("REDIS_CLUSTER_PORT", cluster.nodes[0].port.to_string()),
        ],
    );
}

/// One master of three shut down while `Ctr.add` (plain and tokened) and the coalescing writer
/// write a spread counter with holders on every master: each keeps at least half its healthy
/// rate, and once the master's replica has taken over, the total is every acknowledged add.
/// The nodes call a silent master failing after 15 s, after every measurement: past that, with
/// the default full coverage, the whole cluster refuses keys until the replica takes over
/// (the test then makes it take over at once).
#[test]
fn python_adds_keep_their_rate_with_a_master_down() {
    let Some(python) = python_with_redis_py() else {
        note("Python outage test skipped: no Python with the redis package");
        return;
    };
    let cluster = Cluster::start_patient(3, &[]);
    let replica = cluster.start_replica_of(2);
    run_python(
        &python,
        &["-m", "unittest", "-v", "tests.outage.MasterDownTest"],
        &[
            ("REDIS_CLUSTER_PORT", cluster.nodes[0].port.to_string()),
            ("REDIS_DOWN_PORT", cluster.nodes[2].port.to_string()),
            ("REDIS_REPLICA_PORT", replica.port.to_string()),
        ],
    );
}

/// One master of three frozen (SIGSTOP, for about 6 s, less than this cluster's node timeout
/// of 15 s, so that nothing fails over) while `Ctr.add` (plain and tokened) and the coalescing
/// writer, then their asyncio twins (`AsyncCtr.add`, `AsyncCoalescingWriter`), write a
/// spread counter with holders on every master, through a cluster client with a socket timeout:
/// each keeps at least half its healthy rate, and once the master wakes (SIGCONT) the total
/// counts every add acknowledged and every add of the writer exactly once (the tokened adds
/// whose reply timed out retried with their tokens, the writer's held sums flushed), and each
/// plain add whose reply timed out at most once (maybe counted, as a lost reply).
#[test]
fn python_adds_keep_their_rate_with_a_master_frozen() {
    let Some(python) = python_with_redis_py() else {
        note("Python outage test skipped: no Python with the redis package");
        return;
    };
    let cluster = Cluster::start_patient(3, &[]);
    let frozen = &cluster.nodes[2];
    run_python(
        &python,
        &["-m", "unittest", "-v", "tests.outage.MasterFrozenTest"],
        &[
            ("REDIS_CLUSTER_PORT", cluster.nodes[0].port.to_string()),
            ("REDIS_FROZEN_PORT", frozen.port.to_string()),
            (
                "REDIS_FROZEN_PID",
                frozen.pid().expect("started here").to_string(),
            ),
        ],
    );
}

fn run_python(python: &str, args: &[&str], env: &[(&str, String)]) {
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python");
    let mut cmd = Command::new(python);
    cmd.args(args)
        .current_dir(&package)
        .env("PYTHONPATH", &package);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = cmd.output().expect("run the Python tests");
    // What the tests print (the outage tests' rates): shown with --nocapture.
    print!("{}", String::from_utf8_lossy(&out.stdout));
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("\nOK"), "{report}");
    assert!(!report.contains("skipped"), "{report}");
}
