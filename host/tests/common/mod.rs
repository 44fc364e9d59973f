//! Helpers shared by the CLI tests: run the real binary, compare with golden files.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `tet-host args` in `cwd`: (exit code, stdout, stderr). With `TET_SAVE_QUERIES`
/// set, a query is also kept ([`save_query`]).
pub fn run<S: AsRef<std::ffi::OsStr>>(args: &[S], cwd: &Path) -> (i32, Vec<u8>, String) {
    save_query(args, cwd);
    let out = Command::new(env!("CARGO_BIN_EXE_tet-host"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// With `TET_SAVE_QUERIES=DIR`, keeps a `tet-host query` these tests run, when it is a
/// document's text given inline over a regular file, with the JSON answer (no `-q`, `--plan`,
/// `--output`, `--preview` or `--format`): the file as `DIR/files/HASH.tet`, the query as
/// `DIR/HASH.json` (`doc`, `file`, `memory_budget`, `jobs`, `test`). The Python binding's
/// parity test (`python/tests/test_parity.py`) asks `tetrs` and the CLI each of them.
/// Regenerate with `TET_SAVE_QUERIES=$PWD/python/tests/data/queries cargo test -p tet-host
/// --test query_cli --test dims_cli --test cli --test hostile --test no_harm`.
pub fn save_query<S: AsRef<std::ffi::OsStr>>(args: &[S], cwd: &Path) {
    let Some(dir) = std::env::var_os("TET_SAVE_QUERIES").map(PathBuf::from) else {
        return;
    };
    let args: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    if args.first().map(String::as_str) != Some("query") {
        return;
    }
    let (mut doc, mut file, mut budget, mut jobs) = (None, None, None, None);
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-t" | "--tet" => file = it.next().cloned(),
            "--memory-budget" => budget = it.next().cloned(),
            "-j" | "--jobs" => jobs = it.next().cloned(),
            "-x" | "--execute" | "--no-mmap" => {}
            flag if flag.starts_with('-') => return,
            text => doc = Some(text.to_string()),
        }
    }
    let (Some(doc), Some(file)) = (doc, file) else {
        return;
    };
    // The binding takes a document's text, never its path.
    let target = cwd.join(&file);
    if tet_host::tet::query_doc::looks_like_path(&doc)
        || cwd.join(&doc).exists()
        || !std::fs::metadata(&target).is_ok_and(|m| m.is_file())
    {
        return;
    }
    let bytes = std::fs::read(&target).unwrap();
    let name = format!("{:016x}.tet", fnv(&bytes));
    std::fs::create_dir_all(dir.join("files")).unwrap();
    std::fs::write(dir.join("files").join(&name), &bytes).unwrap();
    let test = std::thread::current().name().unwrap_or("").to_string();
    let record = serde_json::json!({
        "doc": doc, "file": name, "memory_budget": budget, "jobs": jobs, "test": test,
    });
    let key = format!("{doc}\0{name}\0{budget:?}\0{jobs:?}");
    let text = serde_json::to_string_pretty(&record).unwrap() + "\n";
    std::fs::write(dir.join(format!("{:016x}.json", fnv(key.as_bytes()))), text).unwrap();
}

/// FNV-1a, 64 bits: a stable name for a file's or a query's bytes.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The test tier, `TET_TEST_TIER`: `short` (the default, what CI runs) or `long`. The
/// one place the tests read it.
pub fn long_tier() -> bool {
    std::env::var("TET_TEST_TIER").is_ok_and(|t| t == "long")
}

/// `short` rounds (seeds, sizes) in the short tier, `long` in the long one.
pub fn rounds(short: usize, long: usize) -> usize {
    if long_tier() {
        long
    } else {
        short
    }
}

/// Whether FUSE can be used here; prints SKIPPING (and fails under CI) when not.
pub fn fuse_ready(test: &str) -> bool {
    let ok =
        Path::new("/dev/fuse").exists() && (is_root() || which("fusermount3")) && which("timeout");
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: /dev/fuse, root or fusermount3, and timeout are required under CI"
        );
        println!("SKIPPING {test}: no /dev/fuse (or not root and no fusermount3)");
    }
    ok
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether `prog` is on the PATH.
pub fn which(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A test's directory, with an empty `mnt` in it: on /dev/shm when there is one (the
/// writer flushes after every operation, which on a disk costs milliseconds; the crash
/// tests kill processes, not the machine, so memory keeps what was written), else under
/// the target directory. A mount left there by an earlier run is detached first.
pub fn mount_dir(prefix: &str, name: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
    };
    let d = base.join(format!("{prefix}-{name}-{}", std::process::id()));
    if d.join("mnt").exists() {
        detach(&d.join("mnt"));
    }
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("mnt")).unwrap();
    d
}

/// This host's name as `tet-host` writes it in a registry row (`/etc/hostname`, white
/// space dropped, at most 64 bytes).
pub fn this_host() -> Vec<u8> {
    let mut h = std::fs::read("/etc/hostname").unwrap_or_default();
    h.retain(|b| !b.is_ascii_whitespace());
    h.truncate(64);
    h
}

/// Whether `/proc/self/mountinfo` shows a FUSE mount on `mnt`.
pub fn is_mounted(mnt: &Path) -> bool {
    let want = std::fs::canonicalize(mnt).unwrap();
    let want = want.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_ref()) && l.contains(" - fuse"))
}

/// Unmounts `mnt` lazily, whatever holds it (a test's guard).
pub fn detach(mnt: &Path) {
    for (prog, args) in [("fusermount3", ["-u", "-z"]), ("umount", ["-l", ""])] {
        let _ = Command::new(prog)
            .args(args.iter().filter(|a| !a.is_empty()))
            .arg(mnt)
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Whether `TET_BLESS` asks to rewrite golden files.
pub fn bless() -> bool {
    std::env::var_os("TET_BLESS").is_some()
}

/// Compares `actual` with `host/tests/golden/NAME` (or rewrites it under `TET_BLESS`).
pub fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if bless() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing golden {}; run with TET_BLESS=1", path.display()));
    assert_eq!(actual, expected, "output differs from {}", path.display());
}

/// A NumPy `.npy` file (format 1.0) holding `data` with the given dtype `descr`, order
/// and shape.
pub fn npy(descr: &str, fortran: bool, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut h = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
        if fortran { "True" } else { "False" }
    );
    while !(h.len().saturating_add(11)).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(h.len()).unwrap().to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A cetrafs image's bytes with no superblock left that passes: the primary's magic and
/// each copy's (the places `info --json` lists for image `name` in `dir`) damaged.
pub fn without_superblocks(dir: &Path, name: &str) -> Vec<u8> {
    let (_, out, _) = run(&["info", "--json", name], dir);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let mut img = std::fs::read(dir.join(name)).unwrap();
    img[0] = b'X';
    for c in v["superblock_copies"].as_array().unwrap() {
        let at = usize::try_from(c["block"].as_u64().unwrap()).unwrap() * 4096 + 512;
        img[at] = b'X';
    }
    img
}
