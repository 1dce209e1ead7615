//! The runnable examples in docs/examples run against a test server and must succeed.

mod common;

use std::path::Path;
use std::process::Command;

use common::Server;

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
        stdout.contains("after repair: value 20, drift -1"),
        "{stdout}"
    );
}
