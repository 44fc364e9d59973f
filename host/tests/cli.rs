//! Runs the real `tet-host` binary and compares its output with committed golden files.
//! `TET_BLESS=1 cargo test -p tet-host` rewrites the golden files (and the example file).

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

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
    let bytes = tet_alloc::tet::example::temperature().unwrap();
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
    let mut b = tet_alloc::tet::example::temperature().unwrap();
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
    // A file of neither format is named as what it is: "not ours" (8), not damage.
    let dir = scratch("garbage.tet", b"not a tet file at all, definitely not");
    let (code, _, err) = run(&["verify", "garbage.tet"], &dir);
    assert_eq!(code, 8);
    assert!(
        err.contains("garbage.tet: not a .tet file or a cetrafs image: it looks like a text file"),
        "{err}"
    );
    // Warnings alone exit 0 (printed, and counted in --json), as for cetrafs images.
    let mut warned = std::fs::read(root().join("docs/examples/temperature.tet")).unwrap();
    warned[12] |= 4; // an undefined superblock flag bit: a warning
    let dir = scratch("warned.tet", &warned);
    let (code, out, _) = run(&["verify", "warned.tet"], &dir);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("warning[superblock-flags]"), "{out}");
    let (code, out, _) = run(&["verify", "--json", "warned.tet"], &dir);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["errors"].as_u64(), v["warnings"].as_u64()),
        (Some(0), Some(1))
    );
    // A .tet whose magic alone is damaged is a damaged .tet (4): its index is where its
    // superblock says.
    let mut bytes = std::fs::read(root().join("docs/examples/temperature.tet")).unwrap();
    bytes[0] = b'X';
    let dir = scratch("magic.tet", &bytes);
    let (code, out, _) = run(&["verify", "magic.tet"], &dir);
    assert_eq!(code, 4);
    assert!(
        out.contains(
            "error[superblock-magic] superblock.magic magic is 'XETR', expected 'TETR' (byte 0x0)"
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

/// A u8 dataset of 300 zstd chunks (more than the quick scan's 128) whose chunks
/// `bad` have a corrupt frame.
fn many_chunks(bad: &[u64]) -> Vec<u8> {
    use tet_alloc::tet::writer::{DatasetSpec, Writer};
    use tet_core::tet::{Codec, DType, DatasetId, TetFile};
    let spec = [DatasetSpec {
        name: "a",
        dtype: DType::U8,
        shape: &[300 * 64],
        chunk_shape: &[64],
    }];
    let mut w = Writer::new(Vec::new(), &spec).unwrap();
    let data: Vec<u8> = (0..300 * 64).map(|i| (i % 7) as u8).collect();
    w.write_array(DatasetId(0), &data, Codec::Zstd).unwrap();
    let mut b = w.finish(None).unwrap();
    let rows: Vec<_> = TetFile::open(&b).unwrap().rows().to_vec();
    for r in bad {
        let at = rows[*r as usize].payload_offset.get() as usize;
        b[at] ^= 0xff; // the magic
    }
    b
}

#[test]
fn quick_scan_covers_128_rows_deep_covers_all_in_file_order_for_any_thread_count() {
    let dir = scratch("many.tet", &many_chunks(&[200, 5, 250]));
    let (code, out, err) = run(&["verify", "many.tet"], &dir);
    assert_eq!(code, 4);
    assert_eq!(out.matches("zstd-frame").count(), 1, "{out}");
    assert!(
        err.is_empty(),
        "no progress bar when stderr is not a terminal: {err}"
    );
    let (code, one, err) = run(&["verify", "--deep", "-j", "1", "many.tet"], &dir);
    assert_eq!(code, 4);
    assert!(err.is_empty(), "{err}");
    let rows: Vec<usize> = ["tidx row 5,", "tidx row 200,", "tidx row 250,"]
        .iter()
        .map(|r| {
            one.find(r)
                .unwrap_or_else(|| panic!("{r} missing in {one}"))
        })
        .collect();
    assert!(rows.windows(2).all(|w| w[0] < w[1]), "file order: {one}");
    let (_, two, _) = run(&["verify", "--deep", "-j", "2", "many.tet"], &dir);
    let (_, mapped_off, _) = run(
        &["verify", "--deep", "--no-mmap", "-j", "3", "many.tet"],
        &dir,
    );
    assert_eq!(one, two);
    assert_eq!(one, mapped_off);
    let (_, json, _) = run(&["verify", "--deep", "--json", "many.tet"], &dir);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["scan"], "deep");
    assert_eq!(v["errors"], 3);
    let (_, q, _) = run(&["verify", "--deep", "-q", "many.tet"], &dir);
    assert!(
        q.starts_with("many.tet: 3 error(s), 0 warning(s); first: error[zstd-frame]"),
        "{q}"
    );
    let (code, _, err) = run(&["verify", "-j", "0", "many.tet"], &dir);
    assert_eq!(code, 16, "{err}");
}

#[test]
fn a_chunk_over_the_memory_budget_is_an_operational_error() {
    let dir = scratch("budget.tet", &many_chunks(&[]));
    let (code, out, err) = run(&["verify", "--memory-budget", "1K", "budget.tet"], &dir);
    assert_eq!(code, 8, "{out}");
    assert!(
        err.contains("over the memory budget of 1024 bytes"),
        "{err}"
    );
    assert!(err.contains("--memory-budget"), "{err}");
    assert!(out.contains("incomplete"), "{out}");
    // Repair writes nothing in that case.
    let (code, _, _) = run(
        &["repair", "-y", "--memory-budget", "1K", "budget.tet"],
        &dir,
    );
    assert_eq!(code, 8);
    let (code, _, _) = run(
        &["verify", "--deep", "--memory-budget", "1M", "budget.tet"],
        &dir,
    );
    assert_eq!(code, 0);
}

#[test]
fn a_cut_footer_is_warned_about_and_the_data_still_answers() {
    let mut bytes = tet_alloc::tet::example::temperature().unwrap();
    bytes.truncate(bytes.len() - 100);
    let dir = scratch("cut-footer.tet", &bytes);
    let magic_at = format!("(byte {:#x})", bytes.len() - 4);
    let warned = |err: &str| {
        assert!(
            err.contains("warning[footer-magic]: the history footer is unreadable")
                && err.contains(&magic_at),
            "{err}"
        );
    };
    let sum = |file: &str, dir: &Path| {
        run(
            &["query", r#"{"dataset": "pressure", "sum": []}"#, "-t", file],
            dir,
        )
    };
    let (code, out, err) = sum("cut-footer.tet", &dir);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("264160.0"), "{out}");
    warned(&err);
    let (code, out, err) = run(&["info", "cut-footer.tet"], &dir);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("pressure"), "{out}");
    warned(&err);
    let (code, _, err) = run(
        &[
            "export",
            "cut-footer.tet",
            "--dataset",
            "temperature",
            "t.npy",
        ],
        &dir,
    );
    assert_eq!(code, 0, "{err}");
    warned(&err);
    // verify still reports it.
    let (code, out, _) = run(&["verify", "cut-footer.tet"], &dir);
    assert_eq!(code, 4);
    assert!(out.contains("error[footer-magic]"), "{out}");
    // A footer whose JSON is broken: the same warning, with the parser's words.
    let mut bytes = tet_alloc::tet::example::temperature().unwrap();
    let json_at = json_offset(&bytes);
    bytes[json_at] = b'X';
    let dir = scratch("bad-json.tet", &bytes);
    let (code, _, err) = sum("bad-json.tet", &dir);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning[footer-json]") && err.contains(&format!("(byte {json_at:#x})")),
        "{err}"
    );
}

/// Where a file's `history_json` starts.
fn json_offset(bytes: &[u8]) -> usize {
    let file = tet_core::tet::TetFile::open(bytes).unwrap();
    file.footer().unwrap().json_offset() as usize
}

/// A flipped bit in a raw chunk of a file from our writer: `query` (every operation
/// path) and `export` refuse it with exit 4, naming the dataset, the chunk, its row and
/// the payload's byte offset, as `verify --deep` does; without the check, `sum` gave a
/// wrong number. A checksum table the reader cannot use is warned about and the data
/// still answers, unchecked.
#[test]
fn a_flipped_bit_in_a_raw_chunk_fails_query_and_export() {
    let good = tet_alloc::tet::example::temperature().unwrap();
    let file = tet_core::tet::TetFile::open(&good).unwrap();
    // Row 1: temperature chunk (0, 1), raw.
    let row = file.rows()[1];
    assert_eq!(row.codec.get(), 0);
    let at = row.payload_offset.get() as usize;
    let mut bad = good.clone();
    bad[at + 3] ^= 0x10;
    let dir = scratch("raw-flip.tet", &bad);
    let named = |err: &str| {
        assert!(
            err.contains(&format!(
                "dataset 0 'temperature' chunk (0, 1) (tidx row 1, payload at byte {at:#x}): \
                 the stored bytes do not match their checksum"
            )),
            "{err}"
        );
    };
    for doc in [
        r#"{"dataset": "temperature", "sum": []}"#,
        r#"{"dataset": "temperature", "sum": [0]}"#,
        r#"{"dataset": "temperature", "median": []}"#,
        r#"{"dataset": "temperature"}"#,
    ] {
        let (code, out, err) = run(&["query", doc, "-t", "raw-flip.tet"], &dir);
        assert_eq!(code, 4, "{doc}: {err}");
        // No answer; the JSON error object a script reads (exit 4, "damaged").
        assert!(
            !out.contains("result") && out.contains(r#""code":"damaged""#),
            "{doc}: {out}"
        );
        named(&err);
    }
    // A query that does not touch the chunk answers.
    let (code, out, err) = run(
        &[
            "query",
            r#"{"dataset": "temperature", "selection": [{"start": 0, "stop": 3}, {"start": 0, "stop": 4}], "sum": []}"#,
            "-t",
            "raw-flip.tet",
        ],
        &dir,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(r#""result":"#), "{out}");
    let (code, _, err) = run(
        &[
            "export",
            "raw-flip.tet",
            "--dataset",
            "temperature",
            "flip.npy",
        ],
        &dir,
    );
    assert_eq!(code, 4, "{err}");
    named(&err);
    assert!(!dir.join("flip.npy").exists());
    // Quick verify checks the rows its scan covers (here all 10), deep verify all.
    for deep in [false, true] {
        let args = if deep {
            vec!["verify", "--deep", "raw-flip.tet"]
        } else {
            vec!["verify", "raw-flip.tet"]
        };
        let (code, out, _) = run(&args, &dir);
        assert_eq!(code, 4);
        assert!(
            out.contains(
                "error[chunk-checksum] dataset 0 'temperature': chunk (0, 1): chunk payload \
                 checksum mismatch: stored 0x"
            ) && out.contains(&format!("(tidx row 1, byte {at:#x})")),
            "{out}"
        );
    }
    // The table's row count made wrong (same length): the table cannot be used, the
    // chunks read unchecked, and the answer is the flipped file's.
    let json_at = json_offset(&bad);
    let text = String::from_utf8_lossy(&bad[json_at..]).to_string();
    let rows_at = json_at + text.find(r#""rows":10"#).unwrap() + 8;
    let mut untabled = bad.clone();
    untabled[rows_at] = b'1';
    let dir = scratch("no-table.tet", &untabled);
    let (code, out, err) = run(
        &[
            "query",
            r#"{"dataset": "station_id", "sum": []}"#,
            "-t",
            "no-table.tet",
        ],
        &dir,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(r#""result":"#), "{out}");
    assert!(
        err.contains("warning[checksum-table]: the chunk checksum table cannot be used")
            && err.contains("read without their checksums"),
        "{err}"
    );
}

/// Files from other writers (no checksum table) verify as before, and `info` and `verify`
/// say plainly how many chunks carry no checksum; files from ours say 0.
#[test]
fn info_and_verify_count_the_chunks_without_a_checksum() {
    let mut w = tet_alloc::tet::testing::TetWriter::new();
    let a = w
        .add_dataset("a", tet_core::tet::DType::U8, &[6], &[4])
        .unwrap();
    w.add_chunk_raw(a, &[0], &[1, 2, 3, 4]);
    w.add_chunk_raw(a, &[1], &[5, 6]);
    let dir = scratch("other-writer.tet", &w.to_bytes().unwrap());
    let (code, out, _) = run(&["verify", "--deep", "other-writer.tet"], &dir);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "note: 2 of 2 chunk(s) carry no checksum (no table entry): raw payloads among \
             them cannot be checked"
        ) && out.contains("other-writer.tet: clean"),
        "{out}"
    );
    let (code, out, _) = run(&["verify", "--json", "other-writer.tet"], &dir);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["chunks"].as_u64(), v["chunks_without_checksum"].as_u64()),
        (Some(2), Some(2))
    );
    let (code, out, _) = run(&["info", "other-writer.tet"], &dir);
    assert_eq!(code, 0);
    assert!(
        out.contains("checksums:   none; 2 of 2 chunk(s) carry no checksum"),
        "{out}"
    );
    let (_, out, _) = run(&["info", "--json", "other-writer.tet"], &dir);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["checksums"]["chunks_without_checksum"].as_u64(), Some(2));
    // Ours: every chunk carries one, and verify prints no note.
    let dir = scratch("ours.tet", &tet_alloc::tet::example::temperature().unwrap());
    let (_, out, _) = run(&["verify", "--deep", "ours.tet"], &dir);
    assert!(!out.contains("carry no checksum"), "{out}");
}

#[test]
fn a_closed_standard_error_is_not_a_panic() {
    // `tet-host info missing.tet 2>&1 | head -c1`: the message has nowhere to go, and
    // the exit status still says what happened (8: the file cannot be read), not 101.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_tet-host"))
        .args(["info", "/nonexistent/missing.tet"])
        .stdout(std::process::Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(8), "{status:?}");
}
