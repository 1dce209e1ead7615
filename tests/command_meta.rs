//! Every command's metadata, as the server reports it: arity, flags, key positions and key-spec
//! flags (COMMAND INFO), the keys of sample calls with their flags (COMMAND GETKEYSANDFLAGS,
//! what cluster clients and ACLs use), and a summary (COMMAND DOCS). A command added to the
//! module without an entry here fails `every_module_command_is_listed_here`.

mod common;

use common::{Server, Value};

struct Meta {
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    /// Legacy first, last, step key positions.
    range: (i64, i64, i64),
    /// The flags of each key spec, in order.
    specs: &'static [&'static str],
    /// Sample calls (without the command name) and the keys the server finds, with flags.
    calls: &'static [(&'static str, &'static [(&'static str, &'static str)])],
}

const RW: &str = "RW access update";
const RO: &str = "RO access";
const OW: &str = "OW update";

const COMMANDS: &[Meta] = &[
    Meta {
        name: "ctr.add",
        arity: -3,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[
            ("k 1", &[("k", RW)]),
            ("k 1 TOKEN t AT 5 EX 9", &[("k", RW)]),
        ],
    },
    Meta {
        name: "ctr.get",
        arity: 2,
        // Not fast: on a spread home it gathers from every master.
        flags: &["readonly", "module"],
        range: (1, 1, 1),
        specs: &[RO],
        calls: &[("k", &[("k", RO)])],
    },
    Meta {
        name: "ctr.mget",
        arity: -2,
        flags: &["readonly", "module"],
        range: (1, -1, 1),
        specs: &[RO],
        calls: &[
            ("a", &[("a", RO)]),
            ("a b c", &[("a", RO), ("b", RO), ("c", RO)]),
        ],
    },
    Meta {
        name: "ctr.clear",
        arity: -2,
        flags: &["write", "denyoom", "module"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k", &[("k", RW)]), ("k TOKEN t", &[("k", RW)])],
    },
    Meta {
        name: "ctr.info",
        arity: 2,
        flags: &["readonly", "module"],
        range: (1, 1, 1),
        specs: &[RO],
        calls: &[("k", &[("k", RO)])],
    },
    Meta {
        name: "ctr.floor",
        arity: 3,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k 0", &[("k", RW)]), ("k NONE", &[("k", RW)])],
    },
    Meta {
        name: "ctr.throttle",
        arity: -5,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[
            ("k 4 1 60", &[("k", RW)]),
            ("k 4 1 60 2 TOKEN t AT 5", &[("k", RW)]),
        ],
    },
    Meta {
        name: "ctr.window",
        arity: -3,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[
            ("k 60000", &[("k", RW)]),
            ("k 60000 BUCKETS 6", &[("k", RW)]),
            ("k NONE", &[("k", RW)]),
        ],
    },
    Meta {
        name: "ctr.decrfloor",
        arity: -3,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k 1 TOKEN t AT 5", &[("k", RW)])],
    },
    Meta {
        name: "ctr.ceil",
        arity: 3,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k 10", &[("k", RW)]), ("k NONE", &[("k", RW)])],
    },
    Meta {
        name: "ctr.increx",
        arity: -2,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[
            ("k", &[("k", RW)]),
            (
                "k BYINT 5 UBOUND 9 SATURATE EX 60 ENX TOKEN t",
                &[("k", RW)],
            ),
        ],
    },
    Meta {
        name: "ctr.refund",
        arity: 4,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k TOKEN t", &[("k", RW)])],
    },
    Meta {
        name: "ctr.reconcile",
        arity: -3,
        // movablekeys: the source is found by the command (getkeys-api); cluster clients ask
        // the server (COMMAND GETKEYS) or route by the first key.
        flags: &["write", "denyoom", "module", "movablekeys"],
        range: (1, 1, 1),
        specs: &[RW, RO],
        calls: &[
            ("c 5", &[("c", RW)]),
            ("c 5 AT 60000", &[("c", RW)]),
            ("c FROM STREAM s", &[("c", RW), ("s", RO)]),
            ("c from zset z AT 60000", &[("c", RW), ("z", RO)]),
            ("c FROM SET s", &[("c", RW), ("s", RO)]),
            // Keys named like keywords are keys all the same.
            ("c FROM ZSET set AT 60000", &[("c", RW), ("set", RO)]),
            ("c FROM SET stream", &[("c", RW), ("stream", RO)]),
            ("FROM FROM STREAM FROM", &[("FROM", RW), ("FROM", RO)]),
            ("c 5 FROM x", &[("c", RW)]),
            ("c FROM STREAM", &[("c", RW)]),
        ],
    },
    Meta {
        name: "ctr.spread",
        arity: 3,
        flags: &["write", "denyoom", "module"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k 16", &[("k", RW)])],
    },
    Meta {
        name: "ctr.holders",
        arity: -2,
        flags: &["readonly", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RO],
        calls: &[("k", &[("k", RO)]), ("k AT 5", &[("k", RO)])],
    },
    Meta {
        name: "ctr.orphans",
        arity: -1,
        flags: &["write", "admin", "module"],
        range: (0, 0, 0),
        specs: &[],
        calls: &[],
    },
    Meta {
        name: "ctr.gather",
        arity: 2,
        flags: &["readonly", "module"],
        range: (0, 0, 0),
        specs: &[],
        calls: &[],
    },
    Meta {
        name: "ctr.apply",
        arity: 3,
        flags: &["write", "denyoom", "module"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k effect", &[("k", RW)])],
    },
    Meta {
        name: "ctr.step",
        arity: 3,
        flags: &["write", "denyoom", "module"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k step", &[("k", RW)])],
    },
    Meta {
        name: "ctr.setstate",
        arity: 3,
        flags: &["write", "denyoom", "module"],
        range: (1, 1, 1),
        specs: &[OW],
        calls: &[("k state", &[("k", OW)])],
    },
    Meta {
        name: "pnc.add",
        arity: 3,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k 1", &[("k", RW)])],
    },
    Meta {
        name: "pnc.get",
        arity: 2,
        flags: &["readonly", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RO],
        calls: &[("k", &[("k", RO)])],
    },
    Meta {
        name: "pnc.state",
        arity: -2,
        flags: &["readonly", "module"],
        range: (1, 1, 1),
        specs: &[RO],
        calls: &[("k", &[("k", RO)])],
    },
    Meta {
        name: "pnc.merge",
        arity: 3,
        flags: &["write", "denyoom", "module"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k blob", &[("k", RW)])],
    },
    Meta {
        name: "pnc.clear",
        arity: 2,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k", &[("k", RW)])],
    },
    Meta {
        name: "pnc.info",
        arity: 2,
        flags: &["readonly", "module"],
        range: (1, 1, 1),
        specs: &[RO],
        calls: &[("k", &[("k", RO)])],
    },
    Meta {
        name: "pnc.floor",
        arity: 3,
        flags: &["write", "denyoom", "module"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k 0", &[("k", RW)])],
    },
    Meta {
        name: "pnc.decrfloor",
        arity: -3,
        flags: &["write", "denyoom", "module"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k 1 TOKEN t", &[("k", RW)])],
    },
    Meta {
        name: "pnc.give",
        arity: 4,
        flags: &["write", "denyoom", "module"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k eu 5", &[("k", RW)])],
    },
    Meta {
        name: "pnc.apply",
        arity: -5,
        flags: &["write", "denyoom", "module", "fast"],
        range: (1, 1, 1),
        specs: &[RW],
        calls: &[("k id 1 5", &[("k", RW)])],
    },
    Meta {
        name: "pnc.setstate",
        arity: 3,
        flags: &["write", "denyoom", "module"],
        range: (1, 1, 1),
        specs: &[OW],
        calls: &[("k state", &[("k", OW)])],
    },
];

fn words(v: &Value) -> Vec<String> {
    v.array().iter().map(Value::text).collect()
}

#[test]
fn every_module_command_is_listed_here() {
    let server = Server::start();
    let mut listed = words(&server.conn().q("COMMAND LIST FILTERBY MODULE ctr"));
    listed.sort();
    let mut ours: Vec<String> = COMMANDS.iter().map(|m| m.name.to_string()).collect();
    ours.sort();
    assert_eq!(listed, ours, "a command without metadata expectations here");
}

#[test]
fn command_info_declares_arity_flags_and_every_key() {
    let server = Server::start();
    let mut c = server.conn();
    for m in COMMANDS {
        let info = c.cmd(&["COMMAND", "INFO", m.name]).array();
        let info = info[0].array();
        // [name, arity, flags, first, last, step, acl categories, tips, key specs, subcommands]
        assert_eq!(info[0].text(), m.name);
        assert_eq!(info[1], Value::Int(m.arity), "{} arity", m.name);
        let mut flags = words(&info[2]);
        flags.sort();
        let mut want: Vec<String> = m.flags.iter().map(|f| f.to_string()).collect();
        want.sort();
        assert_eq!(flags, want, "{} flags", m.name);
        let range = (info[3].int(), info[4].int(), info[5].int());
        assert_eq!(range, m.range, "{} first/last/step", m.name);
        let specs = info[8].array();
        assert_eq!(specs.len(), m.specs.len(), "{} key specs", m.name);
        for (spec, want) in specs.iter().zip(m.specs) {
            assert_eq!(
                words(&spec.field("flags")).join(" "),
                *want,
                "{} key spec flags",
                m.name
            );
        }
    }
}

#[test]
fn getkeys_finds_every_key_with_its_flags() {
    let server = Server::start();
    let mut c = server.conn();
    for m in COMMANDS {
        for (call, want) in m.calls {
            let mut args = vec!["COMMAND", "GETKEYSANDFLAGS", m.name];
            args.extend(call.split_whitespace());
            let got: Vec<(String, String)> = c
                .cmd(&args)
                .array()
                .iter()
                .map(|k| {
                    let k = k.array();
                    (k[0].text(), words(&k[1]).join(" "))
                })
                .collect();
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(k, f)| (k.to_string(), f.to_string()))
                .collect();
            assert_eq!(got, want, "{} {call}", m.name);
            // COMMAND GETKEYS agrees (the keys alone).
            args[1] = "GETKEYS";
            let keys: Vec<String> = want.iter().map(|(k, _)| k.clone()).collect();
            assert_eq!(words(&c.cmd(&args)), keys, "{} {call}", m.name);
        }
    }
}

#[test]
fn command_docs_give_every_command_a_summary() {
    let server = Server::start();
    let mut c = server.conn();
    for m in COMMANDS {
        let docs = c.cmd(&["COMMAND", "DOCS", m.name]).array();
        assert_eq!(docs.len(), 2, "{}: {docs:?}", m.name);
        assert_eq!(docs[0].text(), m.name);
        let doc = &docs[1];
        let summary = doc.field("summary").text();
        assert!(summary.len() >= 20, "{}: summary {summary:?}", m.name);
        assert!(
            summary.ends_with('.') || summary.ends_with(']'),
            "{}: {summary:?}",
            m.name
        );
        if m.name.ends_with("apply") || m.name.ends_with("setstate") || m.name == "ctr.step" {
            assert!(summary.starts_with("Internal:"), "{}: {summary:?}", m.name);
        }
        assert!(!doc.field("complexity").text().is_empty(), "{}", m.name);
        assert!(!doc.field("since").text().is_empty(), "{}", m.name);
        assert_eq!(doc.field("group").text(), "module", "{}", m.name);
        assert_eq!(doc.field("module").text(), "ctr", "{}", m.name);
    }
}

/// The commands that gather a spread counter's total from every master (a blocked client, up
/// to `ctr.gather-timeout-ms`): what a user sees of them through COMMAND INFO and COMMAND DOCS
/// says so. Not `fast` (the server's latency monitor and clients take `fast` as O(1) and never
/// blocking), and a complexity that names the spread case.
const GATHERING: &[&str] = &["ctr.get", "ctr.mget", "ctr.info", "ctr.clear"];

#[test]
fn commands_that_gather_are_not_fast_and_say_the_spread_case() {
    let server = Server::start();
    let mut c = server.conn();
    for name in GATHERING {
        let info = c.cmd(&["COMMAND", "INFO", name]).array();
        let flags = words(&info[0].array()[2]);
        assert!(
            !flags.iter().any(|f| f == "fast"),
            "{name} is flagged fast but gathers on a spread counter: {flags:?}"
        );
        let docs = c.cmd(&["COMMAND", "DOCS", name]).array();
        let complexity = docs[1].field("complexity").text();
        assert!(
            complexity.contains("O(H) for")
                && complexity.contains("spread counter")
                && complexity.contains("gathered from every master")
                && complexity.contains("ctr.gather-timeout-ms"),
            "{name}: complexity {complexity:?} does not say the spread case"
        );
    }
    // Commands that never gather keep `fast` where they had it: CTR.HOLDERS answers from the
    // home's master alone.
    let info = c.cmd(&["COMMAND", "INFO", "ctr.holders"]).array();
    assert!(words(&info[0].array()[2]).iter().any(|f| f == "fast"));
}
