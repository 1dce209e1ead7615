//! ACL categories (issue 38, item 4): a user given `+@write +@read` got `NOPERM` on `CTR.ADD`
//! and `CTR.GET` on every server. Where the server's module API allows it (Redis 7.2+ for the
//! native categories, Redis 7.4+ and Valkey 8+ for the module's `@ctr`), every command is in
//! the categories of its kind; on Redis 7.0 the by-name grant docs/COMMANDS.md gives works.

mod common;

use common::{Conn, Server, Value};

/// The categories docs/COMMANDS.md's table gives each command (without `@ctr`, which all have).
const CATEGORIES: &[(&str, &[&str])] = &[
    ("ctr.add", &["write", "fast"]),
    ("ctr.floor", &["write", "fast"]),
    ("ctr.decrfloor", &["write", "fast"]),
    ("pnc.add", &["write", "fast"]),
    ("pnc.clear", &["write", "fast"]),
    ("ctr.clear", &["write", "slow"]),
    ("ctr.reconcile", &["write", "slow"]),
    ("ctr.spread", &["write", "slow"]),
    ("pnc.merge", &["write", "slow"]),
    ("ctr.holders", &["read", "fast"]),
    ("pnc.get", &["read", "fast"]),
    ("ctr.get", &["read", "slow"]),
    ("ctr.mget", &["read", "slow"]),
    ("ctr.info", &["read", "slow"]),
    ("ctr.gather", &["read", "slow"]),
    ("pnc.state", &["read", "slow"]),
    ("pnc.info", &["read", "slow"]),
    ("ctr.apply", &["write", "slow", "dangerous"]),
    ("ctr.step", &["write", "slow", "dangerous"]),
    ("ctr.setstate", &["write", "slow", "dangerous"]),
    ("pnc.setstate", &["write", "slow", "dangerous"]),
    ("pnc.apply", &["write", "fast", "dangerous"]),
];

/// The categories checked for each command: a command must be in exactly those of them that
/// the table gives it.
const CHECKED: [&str; 5] = ["write", "read", "fast", "slow", "dangerous"];

/// What this server's module API lets the module set.
struct Support {
    native: bool,
    module: bool,
}

fn support(server: &Server) -> Support {
    let (name, version) = server.identity();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    match name.as_str() {
        "valkey" => Support {
            native: true,
            module: version >= (8, 0),
        },
        _ => Support {
            native: version >= (7, 2),
            module: version >= (7, 4),
        },
    }
}

fn ok() -> Value {
    Value::Simple("OK".into())
}

fn members(c: &mut Conn, category: &str) -> Vec<String> {
    match c.cmd(&["ACL", "CAT", category]) {
        Value::Array(items) => items.iter().map(|v| v.text().to_lowercase()).collect(),
        other => panic!("ACL CAT {category} -> {other:?}"),
    }
}

/// A connection authenticated as a new user with `rules`.
fn user(server: &Server, admin: &mut Conn, name: &str, rules: &[&str]) -> Conn {
    let mut setuser = vec!["ACL", "SETUSER", name, "on", ">pw", "~*"];
    setuser.extend_from_slice(rules);
    assert_eq!(admin.cmd(&setuser), ok(), "{setuser:?}");
    let mut c = server.conn();
    assert_eq!(c.cmd(&["AUTH", name, "pw"]), ok());
    c
}

fn is_noperm(reply: &Value) -> bool {
    matches!(reply, Value::Error(e) if e.starts_with("NOPERM"))
}

#[test]
fn a_user_given_write_and_read_runs_the_counter_commands_where_the_server_allows_categories() {
    let server = Server::start();
    let (name, version) = server.identity();
    let support = support(&server);
    eprintln!(
        "{name} {version}: native categories {}, @ctr {}",
        support.native, support.module
    );
    let mut admin = server.conn();
    let mut app = user(&server, &mut admin, "app", &["+@write", "+@read"]);
    let add = app.q("CTR.ADD k 1");
    let get = app.q("CTR.GET k");
    if !support.native {
        // Redis 7.0: no category holds a module command (docs/COMMANDS.md says so).
        assert!(is_noperm(&add), "{name} {version}: {add:?}");
        assert!(is_noperm(&get), "{name} {version}: {get:?}");
        let unknown = admin.q("ACL SETUSER other on +@ctr");
        assert!(unknown.is_error(), "{unknown:?}");
        return;
    }
    assert_eq!(add, Value::Int(1), "{name} {version}");
    assert_eq!(get, Value::Int(1), "{name} {version}");
    assert_eq!(app.q("CTR.DECRFLOOR k 1"), Value::Int(0));
    assert_eq!(app.q("PNC.ADD p 2"), Value::Int(2));

    // A reader only reads.
    let mut reader = user(&server, &mut admin, "reader", &["+@read"]);
    assert_eq!(reader.q("CTR.GET k"), Value::Int(0));
    assert!(is_noperm(&reader.q("CTR.ADD k 1")));

    // Without the slow commands, the reads that may gather a spread total are out.
    let mut quick = user(&server, &mut admin, "quick", &["+@all", "-@slow"]);
    assert_eq!(quick.q("CTR.ADD k 5"), Value::Int(5));
    assert!(is_noperm(&quick.q("CTR.GET k")));

    if support.module {
        // @ctr: the module's commands and nothing else.
        let mut counters = user(&server, &mut admin, "counters", &["+@ctr"]);
        assert_eq!(counters.q("CTR.ADD k 1"), Value::Int(6));
        assert_eq!(counters.q("CTR.GET k"), Value::Int(6));
        assert!(is_noperm(&counters.q("SET s 1")));
    }
}

#[test]
fn every_command_is_in_the_categories_of_its_kind() {
    let server = Server::start();
    let (name, version) = server.identity();
    let support = support(&server);
    if !support.native {
        eprintln!("{name} {version}: no ACL categories for module commands (checked elsewhere)");
        return;
    }
    let mut c = server.conn();
    for category in CHECKED {
        let members = members(&mut c, category);
        for (command, categories) in CATEGORIES {
            assert_eq!(
                members.contains(&command.to_string()),
                categories.contains(&category),
                "{name} {version}: {command} in @{category}"
            );
        }
    }
    if support.module {
        let module = members(&mut c, "ctr");
        for (command, _) in CATEGORIES {
            assert!(module.contains(&command.to_string()), "{command} in @ctr");
        }
        // Every module command, also one added after this table: in @ctr, read or write, and
        // fast or slow.
        let (read, write) = (members(&mut c, "read"), members(&mut c, "write"));
        let (fast, slow) = (members(&mut c, "fast"), members(&mut c, "slow"));
        assert!(module.len() >= CATEGORIES.len(), "{module:?}");
        for command in &module {
            assert!(
                read.contains(command) != write.contains(command),
                "{command}: read or write"
            );
            assert!(
                fast.contains(command) != slow.contains(command),
                "{command}: fast or slow"
            );
        }
    }
}

/// docs/COMMANDS.md's by-name grant for Redis 7.0, run as written on every server.
#[test]
fn the_documented_grant_by_name_runs_every_public_command() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/COMMANDS.md"))
        .expect("docs/COMMANDS.md");
    let grant = doc
        .lines()
        .find(|l| l.starts_with("ACL SETUSER app "))
        .expect("the ACL SETUSER app line of docs/COMMANDS.md");
    let server = Server::start();
    let mut admin = server.conn();
    let words: Vec<&str> = grant.split_whitespace().collect();
    assert_eq!(admin.cmd(&words), ok(), "{grant}");
    let mut app = server.conn();
    assert_eq!(app.q("AUTH app app-secret"), ok());
    assert_eq!(app.q("CTR.ADD k 3"), Value::Int(3));
    assert_eq!(app.q("CTR.GET k"), Value::Int(3));
    assert_eq!(app.q("CTR.FLOOR k 0"), ok());
    assert_eq!(app.q("CTR.DECRFLOOR k 1"), Value::Int(2));
    assert!(!app.q("CTR.INFO k").is_error());
    assert_eq!(app.q("CTR.HOLDERS k").flat_text(), "k");
    assert_eq!(app.q("PNC.ADD p 2"), Value::Int(2));
    assert_eq!(app.q("PNC.GET p"), Value::Int(2));
    // Every public command of the table is granted.
    for (command, categories) in CATEGORIES {
        let public = !categories.contains(&"dangerous") && *command != "ctr.gather";
        assert_eq!(
            grant.contains(&format!(" +{command}")),
            public,
            "{command} in the documented grant"
        );
    }
}
