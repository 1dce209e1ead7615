//! docs/DESIGN.md's layers, checked against the code (no server): the pure core and the protocol
//! machinery use no Redis API (and the protocol no globals), `persist` never calls into the
//! commands or the runtime, the runtime never into the command handlers, the table of the
//! runtime says what each file imports, each importing only files listed above it (no circle),
//! and the handlers import each other without a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The code of a Rust file without its comments (line and doc comments; the code has no block
/// comments), so that a name in a comment is not an import.
fn code_of(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The identifiers in `text` (letters, digits, `_`).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// The modules of `folder` (`commands` or `runtime`) a file of it names: `super::m`,
/// `super::{m, ...}` and `crate::<folder>::m`.
fn sibling_references(code: &str, folder: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let own = format!("crate::{folder}::");
    for prefix in ["super::", own.as_str()] {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                // The first word of each path in the group: `super::{a::x, b}` names a and b.
                for path in group[..end].split(',') {
                    if let Some(first) = words(path).next() {
                        found.insert(first.to_string());
                    }
                }
            } else if let Some(first) = words(rest).next() {
                found.insert(first.to_string());
            }
        }
    }
    found
}

/// The modules of a folder of `src` (its `.rs` files but `mod.rs`).
fn modules_of(folder: &str) -> BTreeSet<String> {
    fs::read_dir(format!("src/{folder}"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".rs").map(str::to_string)
        })
        .filter(|m| m != "mod")
        .collect()
}

/// Each module of `folder` with the modules of the same folder it imports.
fn import_graph(folder: &str) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules_of(folder);
    modules
        .iter()
        .map(|name| {
            let code = code_of(Path::new(&format!("src/{folder}/{name}.rs")));
            let imports = sibling_references(&code, folder)
                .into_iter()
                .filter(|m| modules.contains(m) && m != name)
                .collect();
            (name.clone(), imports)
        })
        .collect()
}

/// The table's rows in order: file (without `.rs`) and the glue files its last column names.
fn layer_table() -> Vec<(String, BTreeSet<String>)> {
    let design = fs::read_to_string("docs/DESIGN.md").unwrap();
    let mut rows = Vec::new();
    for line in design.lines() {
        let cells: Vec<&str> = line.trim().split(" | ").collect();
        let Some(file) = cells
            .first()
            .and_then(|c| c.strip_prefix("| `"))
            .and_then(|c| c.strip_suffix(".rs`"))
        else {
            continue;
        };
        let imports = cells.last().unwrap().trim_end_matches(" |");
        let named: BTreeSet<String> = imports
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        rows.push((file.to_string(), named));
    }
    rows
}

#[test]
fn the_core_uses_no_redis_api() {
    for dir in ["src/counter", "src/pncounter", "src/protocol"] {
        for file in rust_files(Path::new(dir)) {
            let code = code_of(&file);
            for banned in [
                "redis_module",
                "crate::ffi",
                "crate::commands",
                "crate::persist::ctr_type",
                "crate::persist::pnc_type",
            ] {
                assert!(
                    !code.contains(banned),
                    "{} uses {banned}: the core stays plain Rust",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn persistence_never_calls_into_the_commands_or_the_runtime() {
    for file in rust_files(Path::new("src/persist")) {
        let code = code_of(&file);
        for banned in ["crate::commands", "crate::runtime"] {
            assert!(!code.contains(banned), "{} uses {banned}", file.display());
        }
    }
}

#[test]
fn the_runtime_never_calls_into_the_command_handlers() {
    for file in rust_files(Path::new("src/runtime")) {
        assert!(
            !code_of(&file).contains("crate::commands"),
            "{} calls into src/commands: data flows from the handlers into the runtime",
            file.display()
        );
    }
}

#[test]
fn the_protocol_machinery_holds_no_globals() {
    for file in rust_files(Path::new("src/protocol")) {
        let code = code_of(&file);
        for line in code.lines().map(str::trim_start) {
            let global = ["static ", "pub static ", "pub(crate) static "]
                .iter()
                .any(|p| line.starts_with(p))
                || ["thread_local!", "static mut", "Mutex", "RefCell", "Cell<"]
                    .iter()
                    .any(|b| line.contains(b));
            assert!(
                !global,
                "{} holds a global ({line}): its state belongs to the machine that owns it",
                file.display()
            );
        }
    }
}

#[test]
fn the_runtime_table_says_what_each_file_imports_and_has_no_circle() {
    let rows = layer_table();
    assert!(rows.len() >= 15, "the table was found: {rows:?}");
    let graph = import_graph("runtime");
    let mut named: BTreeSet<String> = graph.keys().cloned().collect();
    for (_, imports) in &rows {
        named.extend(imports.iter().cloned());
    }
    for name in &named {
        let path = format!("src/runtime/{name}.rs");
        assert!(Path::new(&path).exists(), "{path}, named in DESIGN.md");
    }
    let place: BTreeMap<&str, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, (f, _))| (f.as_str(), i))
        .collect();
    let mut wrong = Vec::new();
    for (i, (file, said)) in rows.iter().enumerate() {
        let imports = &graph[file];
        if imports != said {
            wrong.push(format!(
                "{file}.rs imports {imports:?}, the table says {said:?}"
            ));
        }
        for m in imports {
            if place.get(m.as_str()).is_some_and(|&j| j >= i) {
                wrong.push(format!("{file}.rs imports {m}, listed below it"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/DESIGN.md's layer table:\n{}",
        wrong.join("\n")
    );
    // The files without a row of their own (leaves such as `home_names`) may import runtime
    // files too: no circle through them either.
    for start in graph.keys() {
        assert_no_circle(&graph, start, &mut Vec::new());
    }
}

#[test]
fn the_command_handlers_have_no_import_circle() {
    let graph = import_graph("commands");
    assert!(graph.len() >= 15, "the handlers were found: {graph:?}");
    for start in graph.keys() {
        assert_no_circle(&graph, start, &mut Vec::new());
    }
}

/// Panics with the path when `name` reaches itself again through `graph`.
fn assert_no_circle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    name: &str,
    path: &mut Vec<String>,
) {
    if path.iter().any(|p| p == name) {
        panic!("an import circle: {} -> {name}", path.join(" -> "));
    }
    path.push(name.to_string());
    for next in graph.get(name).into_iter().flatten() {
        assert_no_circle(graph, next, path);
    }
    path.pop();
}

/// One scheduler: no file but `src/runtime/scheduler.rs` makes a module timer (`ffi.rs` only
/// lists the API function among those it loads).
#[test]
fn every_timer_is_made_by_the_one_scheduler() {
    let mut makers = Vec::new();
    for file in rust_files(Path::new("src")) {
        let code = code_of(&file);
        let makes = code.contains("RedisModule_CreateTimer)") || code.contains("create_timer(");
        if makes && !file.ends_with("runtime/scheduler.rs") {
            makers.push(file.display().to_string());
        }
    }
    assert!(
        makers.is_empty(),
        "timers made outside the scheduler: {makers:?}"
    );
    assert!(code_of(Path::new("src/runtime/scheduler.rs")).contains("RedisModule_CreateTimer)"));
}

/// `src/commands/` holds handlers only: no state of their own between commands (tables,
/// caches, statistics live in the runtime, `src/runtime/`).
#[test]
fn the_command_handlers_keep_no_state_between_commands() {
    let mut stateful = Vec::new();
    for file in rust_files(Path::new("src/commands")) {
        let code = code_of(&file);
        for marker in [
            "thread_local!",
            "Mutex<",
            "RefCell<",
            "static mut ",
            "Atomic",
        ] {
            if code.contains(marker) {
                stateful.push(format!("{}: {marker}", file.display()));
            }
        }
    }
    assert!(stateful.is_empty(), "state kept by handlers: {stateful:?}");
}
