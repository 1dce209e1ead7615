//! docs/DESIGN.md's layers, checked against the code (no server): the pure core uses no Redis
//! API, `persist` never calls into `commands`, and the table of the spread counters' glue says
//! what each file imports, each importing only files listed above it (no circle).

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

/// The modules of `src/commands` a file of it names: `super::m`, `super::{m, ...}` and
/// `crate::commands::m`.
fn glue_references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for prefix in ["super::", "crate::commands::"] {
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
fn persistence_never_calls_into_the_commands() {
    for file in rust_files(Path::new("src/persist")) {
        assert!(
            !code_of(&file).contains("crate::commands"),
            "{} calls into src/commands",
            file.display()
        );
    }
}

#[test]
fn the_glue_table_says_what_each_file_imports_and_has_no_circle() {
    let rows = layer_table();
    assert!(rows.len() >= 15, "the table was found: {rows:?}");
    // The glue: every file of src/commands but the argument parsers (`parse`), so that a
    // file a row imports and the table does not name is found.
    let mut glue: BTreeSet<String> = fs::read_dir("src/commands")
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".rs").map(str::to_string)
        })
        .filter(|m| m != "mod" && m != "parse")
        .collect();
    for (_, named) in &rows {
        glue.extend(named.iter().cloned());
    }
    for name in &glue {
        let path = format!("src/commands/{name}.rs");
        assert!(Path::new(&path).exists(), "{path}, named in DESIGN.md");
    }
    let place: BTreeMap<&str, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, (f, _))| (f.as_str(), i))
        .collect();
    let mut wrong = Vec::new();
    for (i, (file, named)) in rows.iter().enumerate() {
        let code = code_of(Path::new(&format!("src/commands/{file}.rs")));
        let imports: BTreeSet<String> = glue_references(&code)
            .into_iter()
            .filter(|m| glue.contains(m) && m != file)
            .collect();
        if &imports != named {
            wrong.push(format!(
                "{file}.rs imports {imports:?}, the table says {named:?}"
            ));
        }
        for m in &imports {
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
    // The files the table names without a row of their own (leaves such as `home_names`) may
    // import glue too: no circle through them either.
    let graph: BTreeMap<String, BTreeSet<String>> = glue
        .iter()
        .map(|name| {
            let code = code_of(Path::new(&format!("src/commands/{name}.rs")));
            let imports = glue_references(&code)
                .into_iter()
                .filter(|m| glue.contains(m) && m != name)
                .collect();
            (name.clone(), imports)
        })
        .collect();
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
