//! redis-cli script tests: each tests/cli/NAME.redis is run line by line through `redis-cli`
//! against a fresh server, and the transcript must equal tests/cli/NAME.expected. Lines starting
//! with `#` are comments and are copied to the transcript. Set CTR_BLESS=1 to rewrite the
//! expected files after a deliberate change (then read the diff).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::Server;

fn run_line(port: u16, line: &str) -> String {
    let mut child = Command::new("redis-cli")
        .args(["--no-raw", "-p", &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redis-cli");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{line}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn transcript(script: &str) -> String {
    let server = Server::start();
    let mut out = String::new();
    for line in script.lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        out.push_str(&format!("redis> {line}\n"));
        out.push_str(&run_line(server.port, line));
    }
    out
}

fn scripts() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "redis"))
        .collect();
    files.sort();
    files
}

#[test]
fn cli_scripts_match_their_transcripts() {
    let bless = std::env::var_os("CTR_BLESS").is_some();
    let files = scripts();
    assert!(!files.is_empty(), "no tests/cli/*.redis scripts");
    let mut failures = Vec::new();
    for script in files {
        let expected_path = script.with_extension("expected");
        let got = transcript(&std::fs::read_to_string(&script).unwrap());
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != expected {
            failures.push(format!(
                "{}:\n--- expected\n{expected}\n--- got\n{got}",
                script.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The fenced block of `lang` that follows `heading` in a doc.
fn doc_block(doc: &str, heading: &str, lang: &str) -> String {
    let section = &doc[doc.find(heading).expect("heading")..];
    let start = section.find(&format!("```{lang}\n")).expect("block") + lang.len() + 4;
    let end = start + section[start..].find("```").expect("block end");
    section[start..end].to_string()
}

/// docs/COMMANDS.md's CTR.RECONCILE examples run as written, whatever today's date: the
/// transcript gives the output it shows, and the script (a watermark from START) repairs exactly.
#[test]
fn the_reconcile_examples_of_the_command_reference_run_as_written() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/COMMANDS.md"))
            .unwrap();
    let heading = "## CTR.RECONCILE key truth";
    let shown = doc_block(&doc, heading, "text");
    let commands: String = shown
        .lines()
        .filter_map(|l| l.strip_prefix("redis> "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(transcript(&commands), shown);
    let script = doc_block(&doc, heading, "sh");
    let server = Server::start();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -e\nredis-cli() {{ command redis-cli -p {} \"$@\"; }}\n{script}",
            server.port
        ))
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.ends_with("120\n3\n"), "{stdout}");
}
