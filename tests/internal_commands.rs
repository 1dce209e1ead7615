//! The internal commands (CTR.APPLY, CTR.STEP, CTR.SETSTATE, PNC.APPLY, PNC.SETSTATE) carry states and
//! effects the master already decided. On every server the module refuses them to clients
//! (scripts included) and runs them only from the master's replication stream and while
//! loading. Where the server has the `internal` command flag (Redis 8.0 and later), the module
//! registers them with it too, so ordinary clients do not even see them. ACL rules stay a
//! second line. Every server here runs the module's defaults (`expose-internal-commands no`).

mod common;

use common::{sharded_state, Server, Value, AOF_WITHOUT_PREAMBLE, EXPOSE_INTERNAL};

const DEFAULTS: [&str; 2] = [EXPOSE_INTERNAL, "no"];
const INTERNAL: [&str; 5] = [
    "CTR.APPLY",
    "CTR.STEP",
    "CTR.SETSTATE",
    "PNC.APPLY",
    "PNC.SETSTATE",
];

/// A call of each internal command with its arity right (and arguments that do not parse).
fn call_of(command: &str) -> Vec<&str> {
    call_on(command, "k")
}

fn call_on<'a>(command: &'a str, key: &'a str) -> Vec<&'a str> {
    match command {
        "PNC.APPLY" => vec![command, key, "bad!", "1", "1"],
        _ => vec![command, key, "x"],
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

/// The module's own refusal of an internal command called by a client.
fn is_refused_by_module(reply: &Value, command: &str) -> bool {
    matches!(reply, Value::Error(e)
        if e.contains(&format!("{command} is an internal command")))
}

/// Refused either way: unknown where the server hides it, else by the module.
fn is_refused(reply: &Value, command: &str) -> bool {
    is_unknown_command(reply) || is_refused_by_module(reply, command)
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
        assert!(
            hidden || is_refused_by_module(&reply, command),
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

/// Finding 1 of the hardening issue: on a server without the `internal` flag, a user limited by
/// ACL to `~atk:*` forged a state into `atk:x`; a script could do the same. With the module's
/// defaults, a valid state is refused to both, and nothing is written.
#[test]
fn clients_acl_limited_users_and_scripts_cannot_forge_states() {
    let server = Server::start_with(&[], &DEFAULTS);
    let mut admin = server.conn();
    admin.q("CTR.ADD bank 1000");
    admin.q("ACL SETUSER eve on >pw ~atk:* +@all");
    let state = sharded_state();
    let mut eve = server.conn();
    assert_eq!(eve.q("AUTH eve pw"), Value::Simple("OK".into()));
    for c in [&mut admin, &mut eve] {
        let reply = c.cmd(&[&b"CTR.SETSTATE"[..], b"atk:x", &state]);
        assert!(is_refused(&reply, "CTR.SETSTATE"), "{reply:?}");
        let script = c.cmd(&[
            &b"EVAL"[..],
            b"return redis.call('CTR.SETSTATE', KEYS[1], ARGV[1])",
            b"1",
            b"atk:x",
            &state,
        ]);
        assert!(script.is_error(), "a script forged a state: {script:?}");
        for command in INTERNAL {
            let reply = c.cmd(&call_on(command, "atk:k"));
            assert!(is_refused(&reply, command), "{command} -> {reply:?}");
        }
    }
    assert_eq!(
        admin.q("EXISTS atk:x atk:k"),
        Value::Int(0),
        "nothing written"
    );
    assert_eq!(admin.q("CTR.GET bank"), Value::Int(1000));

    // The same state, where the harness exposes the commands: accepted (the refusal above is
    // the gate's, not the payload's).
    let open = Server::start_with(&[], &[EXPOSE_INTERNAL, "yes"]);
    let mut c = open.conn();
    assert_eq!(
        c.cmd(&[&b"CTR.SETSTATE"[..], b"atk:x", &state]),
        Value::Simple("OK".into())
    );
    assert_eq!(c.q("CTR.GET atk:x"), Value::Int(6));
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
/// tokened floored decrement (effects with the master's time), a PN-counter add (an effect
/// on this deployment's slot) and a spread counter shrunk to 1 (its holders sealed, credited
/// and answered: transfer steps).
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
    let home = format!("folding:{round}");
    let holders = common::names(&c.cmd(&["CTR.SPREAD", &home, "4"]));
    for h in &holders {
        c.cmd(&["CTR.ADD", h, "5"]);
    }
    assert_eq!(
        common::names(&c.cmd(&["CTR.SPREAD", &home, "1"])),
        vec![home]
    );
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
const ACL_RULES: [&str; 8] = [
    "ACL",
    "SETUSER",
    "default",
    "-ctr.apply",
    "-ctr.step",
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
    assert_eq!(on_master.len(), 45);
    assert_eq!(
        digests(&mut replica.conn()),
        on_master,
        "the replica ran the effects"
    );
    let aof = aof_text(&master);
    assert!(
        aof.contains("CTR.APPLY") && aof.contains("PNC.APPLY") && aof.contains("CTR.STEP"),
        "effects and steps in the AOF"
    );

    // The rewrite writes full states (CTR.SETSTATE, PNC.SETSTATE); later effects follow it.
    master.rewrite_aof();
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

    // Failover: the replica becomes the master and the old master its replica. The old master
    // was a primary until now; as a replica it runs the effects the new master sends.
    let mut promoted = replica.conn();
    assert_eq!(promoted.q("REPLICAOF NO ONE"), Value::Simple("OK".into()));
    let new_port = replica.port.to_string();
    master.conn().cmd(&["REPLICAOF", "127.0.0.1", &new_port]);
    master.wait_link_up();
    write_effects(&mut promoted, 2);
    replica.wait_replicas(1);
    let on_new_master = digests(&mut promoted);
    assert_ne!(on_new_master, on_master, "round 2 wrote");
    assert_eq!(
        digests(&mut master.conn()),
        on_new_master,
        "the old master runs the new master's effects"
    );
    // As a replica with writes allowed, it still refuses the commands to its own clients.
    let mut on_old = master.conn();
    on_old.q("CONFIG SET replica-read-only no");
    for command in INTERNAL {
        let reply = on_old.cmd(&call_of(command));
        assert!(
            is_refused(&reply, command),
            "{command} on a replica -> {reply:?}"
        );
    }
}
