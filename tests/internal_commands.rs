//! The internal commands (CTR.APPLY, CTR.SETSTATE, PNC.APPLY, PNC.SETSTATE) carry states and
//! effects the master already decided. Where the server has the `internal` command flag (Redis
//! 8.0 and later), the module registers them with it: an ordinary client cannot call them (so it
//! cannot forge a state), while the replication link and AOF loading still run them. Redis 7.0
//! and Valkey have no such flag: there they are ordinary commands, and the README tells
//! operators to deny them with ACL rules. Every server here runs the module's defaults
//! (`expose-internal-commands no`).

mod common;

use common::{Server, Value, AOF_WITHOUT_PREAMBLE, EXPOSE_INTERNAL};

const DEFAULTS: [&str; 2] = [EXPOSE_INTERNAL, "no"];
const INTERNAL: [&str; 4] = ["CTR.APPLY", "CTR.SETSTATE", "PNC.APPLY", "PNC.SETSTATE"];

/// A call of each internal command with its arity right (and arguments that do not parse).
fn call_of(command: &str) -> Vec<&str> {
    match command {
        "PNC.APPLY" => vec![command, "k", "bad!", "1", "1"],
        _ => vec![command, "k", "x"],
    }
}

/// Redis from 8.0 on: the only servers with the `internal` command flag.
fn server_can_hide_commands(server: &Server) -> bool {
    let (name, version) = server.identity();
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .expect("a server version");
    name == "redis" && major >= 8
}

fn is_unknown_command(reply: &Value) -> bool {
    matches!(reply, Value::Error(e) if e.starts_with("ERR unknown command"))
}

#[test]
fn internal_commands_are_hidden_where_the_server_can_hide_them() {
    let server = Server::start_with(&[], &DEFAULTS);
    let hidden = server_can_hide_commands(&server);
    let (name, version) = server.identity();
    eprintln!("{name} {version}: internal commands hidden: {hidden}");
    let mut c = server.conn();
    for command in INTERNAL {
        let reply = c.cmd(&call_of(command));
        assert_eq!(
            is_unknown_command(&reply),
            hidden,
            "{name} {version}: {command} -> {reply:?}"
        );
        let info = c.cmd(&["COMMAND", "INFO", command]);
        assert_eq!(
            info.flat_text().trim() == "(nil)",
            hidden,
            "{name} {version}: COMMAND INFO {command} -> {info:?}"
        );
    }
    assert!(c.q("GET k").flat_text() == "(nil)", "nothing was written");
    // The ordinary commands are there whatever the server.
    assert_eq!(c.q("CTR.ADD k 1"), Value::Int(1));
    assert_eq!(c.q("PNC.ADD p 1"), Value::Int(1));

    // The load argument is yes or no, and only a load argument.
    let refused = Server::try_start_with(&[], &[EXPOSE_INTERNAL, "maybe"]);
    assert!(
        refused.is_err(),
        "expose-internal-commands maybe was accepted"
    );
    let set = c.q("CONFIG SET ctr.expose-internal-commands yes");
    assert!(set.is_error(), "{set:?}");
}

#[test]
fn exposed_internal_commands_are_ordinary_commands_everywhere() {
    let server = Server::start_with(&[], &[EXPOSE_INTERNAL, "yes"]);
    let mut c = server.conn();
    for command in INTERNAL {
        let reply = c.cmd(&call_of(command));
        assert!(!is_unknown_command(&reply), "{command} -> {reply:?}");
    }
    assert_eq!(
        c.q("CONFIG GET ctr.expose-internal-commands").flat_text(),
        "ctr.expose-internal-commands yes"
    );
}

/// Writes whose replication and AOF forms are the internal commands: a tokened add and a
/// tokened floored decrement (effects with the master's time) and a PN-counter add (an effect
/// on this deployment's slot).
fn write_effects(c: &mut common::Conn, round: usize) {
    for i in 0..20 {
        let token = format!("r{round}-t{i}");
        c.cmd(&["CTR.ADD", &format!("ctr:{i}"), "3", "TOKEN", &token]);
        c.cmd(&["PNC.ADD", &format!("pnc:{i}"), "-2"]);
    }
    c.q("CTR.ADD stock 100");
    c.q("CTR.FLOOR stock 0");
    c.cmd(&[
        "CTR.DECRFLOOR",
        "stock",
        "7",
        "TOKEN",
        &format!("buy-{round}"),
    ]);
}

fn digests(c: &mut common::Conn) -> Vec<(String, Value)> {
    let mut keys: Vec<String> = c.q("KEYS *").array().iter().map(|k| k.text()).collect();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let d = c.cmd(&["DEBUG", "DIGEST-VALUE", &k]);
            (k, d)
        })
        .collect()
}

fn aof_text(server: &Server) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(server.dir.join("appendonlydir")).expect("an AOF folder") {
        let bytes = std::fs::read(entry.expect("an AOF file").path()).expect("read an AOF file");
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    text
}

/// What the README tells operators of servers without the flag: deny the commands to clients
/// with ACL rules (the replication link and AOF loading are not subject to ACLs).
const ACL_RULES: [&str; 7] = [
    "ACL",
    "SETUSER",
    "default",
    "-ctr.apply",
    "-ctr.setstate",
    "-pnc.apply",
    "-pnc.setstate",
];

#[test]
fn internal_commands_still_replicate_and_load_from_the_aof() {
    let mut master = Server::start_with(&AOF_WITHOUT_PREAMBLE, &DEFAULTS);
    let port = master.port.to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port], &DEFAULTS);
    replica.wait_link_up();
    let mut c = master.conn();
    if !server_can_hide_commands(&master) {
        for server in [&master, &replica] {
            let mut admin = server.conn();
            assert_eq!(admin.cmd(&ACL_RULES), Value::Simple("OK".into()));
            for command in INTERNAL {
                let reply = admin.cmd(&call_of(command));
                assert!(
                    matches!(&reply, Value::Error(e) if e.starts_with("NOPERM")),
                    "{command} under the README's ACL rules -> {reply:?}"
                );
            }
        }
    }
    write_effects(&mut c, 0);
    master.wait_replicas(1);
    let on_master = digests(&mut c);
    assert_eq!(on_master.len(), 41);
    assert_eq!(
        digests(&mut replica.conn()),
        on_master,
        "the replica ran the effects"
    );
    let aof = aof_text(&master);
    assert!(
        aof.contains("CTR.APPLY") && aof.contains("PNC.APPLY"),
        "effects in the AOF"
    );

    // The rewrite writes full states (CTR.SETSTATE, PNC.SETSTATE); later effects follow it.
    c.q("BGREWRITEAOF");
    master.wait_persistence_idle();
    write_effects(&mut c, 1);
    master.wait_replicas(1);
    let on_master = digests(&mut c);
    let aof = aof_text(&master);
    assert!(
        aof.contains("CTR.SETSTATE") && aof.contains("PNC.SETSTATE"),
        "states in the AOF"
    );
    master.restart();
    assert_eq!(digests(&mut master.conn()), on_master, "the AOF loaded");
    assert_eq!(digests(&mut replica.conn()), on_master);
}
