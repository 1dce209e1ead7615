//! The ctr.* configs: defaults, CONFIG SET round trips, server-validated ranges, load arguments.

mod common;

use common::{Server, Value};

const DEFAULTS: [(&str, i64, i64, i64); 15] = [
    // name, default, min, max
    ("promote-threshold", 10_000, 1, 1_000_000_000),
    ("max-shards", 16, 1, 1024),
    ("token-window-ms", 3_600_000, 1, 604_800_000),
    ("token-max-future-ms", 60_000, 0, 86_400_000),
    ("bucket-ms", 60_000, 1, 86_400_000),
    ("bucket-retention-ms", 3_600_000, 1, 2_592_000_000),
    ("settle-ms", 60_000, 0, 86_400_000),
    ("gather-timeout-ms", 1000, 1, 60_000),
    ("gather-cache-ms", 0, 0, 86_400_000),
    ("spread-threshold", 0, 0, 1_000_000_000),
    ("spread-holders", 16, 2, 1024),
    ("collect-timeout-ms", 10_000, 1, 3_600_000),
    ("audit-interval-ms", 60_000, 0, 86_400_000),
    ("orphan-grace-ms", 600_000, 0, 604_800_000),
    ("clock-skew-ms", 1_000, 0, 60_000),
];

fn config_get(c: &mut common::Conn, name: &str) -> String {
    c.cmd(&["CONFIG", "GET", &format!("ctr.{name}")]).array()[1].text()
}

#[test]
fn defaults_round_trips_and_ranges() {
    let server = Server::start();
    let mut c = server.conn();
    for (name, default, min, max) in DEFAULTS {
        assert_eq!(
            config_get(&mut c, name),
            default.to_string(),
            "{name} default"
        );
        let key = format!("ctr.{name}");
        for ok in [min, max] {
            assert_eq!(
                c.cmd(&["CONFIG", "SET", &key, &ok.to_string()]),
                Value::Simple("OK".into())
            );
            assert_eq!(config_get(&mut c, name), ok.to_string());
        }
        for bad in [(min - 1).to_string(), (max + 1).to_string(), "abc".into()] {
            let reply = c.cmd(&["CONFIG", "SET", &key, &bad]);
            assert!(reply.is_error(), "{name} = {bad} accepted");
        }
        assert_eq!(
            config_get(&mut c, name),
            max.to_string(),
            "{name} unchanged by refusals"
        );
    }
}

#[test]
fn load_arguments_set_defaults_and_bad_ones_stop_the_load() {
    let server = Server::start_with(&[], &["max-shards", "4", "token-window-ms", "250"]);
    let mut c = server.conn();
    assert_eq!(config_get(&mut c, "max-shards"), "4");
    assert_eq!(config_get(&mut c, "token-window-ms"), "250");
    let log = Server::try_start_with(&[], &["max-shards", "0"])
        .err()
        .expect("must not start");
    assert!(log.contains("max-shards"), "{log}");
    let log = Server::try_start_with(&[], &["token-window-ms", "soon"])
        .err()
        .expect("must not start");
    assert!(log.contains("token-window-ms"), "{log}");
}

#[test]
fn config_file_lines_override_load_arguments() {
    let server = Server::start_with(&["--ctr.max-shards", "8"], &["max-shards", "4"]);
    let mut c = server.conn();
    assert_eq!(config_get(&mut c, "max-shards"), "8");
}
