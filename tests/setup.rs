//! The set-up scripts' own checks: `.ci/libclang-check` decides whether `make` must install
//! libclang-dev, so it must look for exactly what bindgen loads (through clang-sys), not any
//! file whose name starts with libclang. Each case builds a fake root folder and runs the
//! script against it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh folder standing for `/`, holding empty files at the given paths.
fn fake_root(name: &str, files: &[&str]) -> PathBuf {
    let root = std::env::temp_dir().join(format!("redis-ctr-setup-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for file in files {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().expect("a parent folder")).expect("mkdir");
        std::fs::write(&path, b"").expect("write a fake file");
    }
    std::fs::create_dir_all(&root).expect("mkdir root");
    root
}

/// (found, what the script printed)
fn libclang_check(root: &Path) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/libclang-check");
    let out = Command::new("bash")
        .arg(script)
        .arg(root)
        .output()
        .expect("run .ci/libclang-check");
    let _ = std::fs::remove_dir_all(root);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

const HEADERS: &str = "usr/lib/llvm-14/lib/clang/14.0.6/include/stddef.h";

#[test]
fn libclang_cpp_alone_is_not_libclang() {
    // What the machine image ships: the C++ library, which bindgen does not load.
    let (found, said) = libclang_check(&fake_root(
        "cpp-only",
        &["usr/lib/x86_64-linux-gnu/libclang-cpp.so.14", HEADERS],
    ));
    assert!(!found, "{said}");
    assert!(said.contains("missing"), "{said}");
}

#[test]
fn an_empty_machine_has_no_libclang() {
    let (found, said) = libclang_check(&fake_root("empty", &[]));
    assert!(!found, "{said}");
}

#[test]
fn libclang_without_clangs_headers_is_not_enough() {
    let (found, said) = libclang_check(&fake_root(
        "no-headers",
        &["usr/lib/llvm-14/lib/libclang-14.so.1"],
    ));
    assert!(!found, "{said}");
    assert!(said.contains("headers"), "{said}");
}

#[test]
fn every_name_clang_sys_loads_is_found() {
    for (case, library) in [
        ("plain", "usr/lib/llvm-14/lib/libclang.so"),
        ("versioned", "usr/lib/llvm-15/lib/libclang-15.so"),
        ("suffixed", "usr/lib/x86_64-linux-gnu/libclang.so.1"),
        ("debian", "usr/lib/x86_64-linux-gnu/libclang-14.so.1"),
        ("local", "usr/local/lib/libclang-16.so.16"),
    ] {
        let (found, said) = libclang_check(&fake_root(case, &[library, HEADERS]));
        assert!(found, "{library}: {said}");
        assert!(said.contains(library), "{library}: {said}");
    }
}
