//! Runs the real `tet-host` binary and compares its output with committed golden files.
//! `TET_BLESS=1 cargo test -p tet-host` rewrites the golden files (and the example file).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};

mod common;
use common::{bless, golden};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let (code, out, err) = common::run(args, cwd);
    (code, String::from_utf8(out).unwrap(), err)
}

/// Writes `bytes` into a scratch directory and returns (dir, file name).
fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tet-host-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
    dir
}

#[test]
fn example_file_is_what_the_generator_writes() {
    let bytes = tet_alloc::example::temperature().unwrap();
    let path = root().join("docs/examples/temperature.tet");
    if bless() {
        std::fs::write(&path, &bytes).unwrap();
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "regenerate with TET_BLESS=1"
    );
}

#[test]
fn verify_example() {
    let (code, out, _) = run(&["verify", "docs/examples/temperature.tet"], &root());
    assert_eq!(code, 0);
    golden("verify_example.out", &out);
}

#[test]
fn info_example() {
    let (code, out, _) = run(&["info", "docs/examples/temperature.tet"], &root());
    assert_eq!(code, 0);
    golden("info_example.out", &out);
    let (code, out, _) = run(
        &["info", "--json", "docs/examples/temperature.tet"],
        &root(),
    );
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["datasets"][0]["chunk_grid"], serde_json::json!([2, 2]));
    assert_eq!(v["datasets"][1]["codecs"]["raw"], 2);
    assert_eq!(v["execution"]["memory_budget_percent_bps"], 5000);
    assert_eq!(v["footer"]["history_rows"], 1);
    golden("info_example.json", &out);
}

fn corrupt() -> Vec<u8> {
    let mut b = tet_alloc::example::temperature().unwrap();
    let file = tet_core::tet::TetFile::open(&b).unwrap();
    let row1 = file.index().unwrap().row_offset(1) as usize;
    let row4 = file.index().unwrap().row_offset(4) as usize;
    // temperature row 1 claims chunk (0, 3) of a 2×2 grid; station_id row gets a bad codec.
    b[row1 + 16..row1 + 24].copy_from_slice(&3u64.to_le_bytes());
    b[row4 + 96..row4 + 100].copy_from_slice(&9u32.to_le_bytes());
    b
}

#[test]
fn verify_corrupt_human_json_quiet() {
    let dir = scratch("corrupt.tet", &corrupt());
    let (code, out, _) = run(&["verify", "corrupt.tet"], &dir);
    assert_eq!(code, 4);
    golden("verify_corrupt.out", &out);
    assert!(out.contains(
        "error[chunk-coords] dataset 0 'temperature': chunk (0, 3) is outside the 2×2 chunk grid (tidx row 1, byte 0x"
    ));
    let (code, out, _) = run(&["verify", "--json", "corrupt.tet"], &dir);
    assert_eq!(code, 4);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "errors");
    let codes: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["chunk-missing", "chunk-coords", "chunk-codec"]);
    golden("verify_corrupt.json", &out);
    let (code, out, _) = run(&["verify", "-q", "corrupt.tet"], &dir);
    assert_eq!(code, 4);
    assert_eq!(out.lines().count(), 1);
    golden("verify_corrupt_quiet.out", &out);
}

#[test]
fn exit_codes() {
    let (code, _, err) = run(&["verify", "does-not-exist.tet"], &root());
    assert_eq!(code, 8);
    assert!(err.contains("cannot read does-not-exist.tet"));
    let (code, _, _) = run(&["verify"], &root());
    assert_eq!(code, 16);
    let (code, _, _) = run(&["frobnicate"], &root());
    assert_eq!(code, 16);
    let (code, out, _) = run(&["--help"], &root());
    assert_eq!(code, 0);
    assert!(out.contains("verify"));
    let dir = scratch("garbage.tet", b"not a tet file at all, definitely not");
    let (code, out, _) = run(&["verify", "garbage.tet"], &dir);
    assert_eq!(code, 4);
    assert!(
        out.contains(
            "error[superblock-magic] superblock.magic magic is 'not ', expected 'TETR' (byte 0x0)"
        ),
        "{out}"
    );
}

#[test]
fn repair_asks_only_on_a_terminal() {
    let mut bytes = std::fs::read(root().join("docs/examples/temperature.tet")).unwrap();
    bytes[12] |= 4; // an undefined superblock flag bit
    let dir = scratch("ask.tet", &bytes);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tet-host"))
        .args(["repair", "ask.tet"])
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(16));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-n, -p or -y"));
    assert_eq!(std::fs::read(dir.join("ask.tet")).unwrap(), bytes);
    let (code, out, _) = run(&["repair", "-p", "ask.tet", "-o", "fixed.tet"], &dir);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("fixed[superblock-flags]"), "{out}");
    assert_eq!(
        std::fs::read(dir.join("ask.tet")).unwrap(),
        bytes,
        "-o leaves the input"
    );
    let (code, _, _) = run(&["verify", "--deep", "fixed.tet"], &dir);
    assert_eq!(code, 0);
}
