//! `tet-host` does no harm, through the real binary: an output that is an input is
//! refused (through symbolic and hard links too), an existing output needs `--force`,
//! `mkfs` asks before formatting over something (refuses without a terminal), `repair
//! -o` leaves its input byte-identical, and SIGINT or SIGTERM mid-write leaves no
//! temporary file and the target as it was.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{npy, run};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-no-harm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn small_npy(dir: &Path, name: &str) -> Vec<u8> {
    let data: Vec<u8> = (0u16..64).flat_map(|v| v.to_le_bytes()).collect();
    let bytes = npy("<u2", false, &[8, 8], &data);
    std::fs::write(dir.join(name), &bytes).unwrap();
    bytes
}

fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tet-host-"))
        .collect()
}

#[test]
fn an_output_that_is_an_input_is_refused() {
    let d = scratch("same");
    let original = small_npy(&d, "x.npy");
    std::os::unix::fs::symlink(d.join("x.npy"), d.join("link.npy")).unwrap();
    std::fs::hard_link(d.join("x.npy"), d.join("hard.npy")).unwrap();
    for out in ["x.npy", "link.npy", "hard.npy"] {
        // Even --force never writes over the input.
        for force in [false, true] {
            let mut args = vec!["convert", "x.npy", out];
            if force {
                args.push("--force");
            }
            let (code, _, err) = run(&args, &d);
            assert_eq!(code, 16, "{out}: {err}");
            assert!(
                err.contains(&format!("the output {out} is the input x.npy")),
                "{err}"
            );
        }
    }
    assert_eq!(std::fs::read(d.join("x.npy")).unwrap(), original);
    assert!(std::fs::symlink_metadata(d.join("link.npy"))
        .unwrap()
        .file_type()
        .is_symlink());

    // export F.tet --dataset d F.tet, and repair F -o F.
    assert_eq!(run(&["convert", "x.npy", "f.tet"], &d).0, 0);
    let tet = std::fs::read(d.join("f.tet")).unwrap();
    let (code, _, err) = run(&["export", "f.tet", "--dataset", "x", "f.tet"], &d);
    assert_eq!(code, 16, "{err}");
    std::fs::hard_link(d.join("f.tet"), d.join("g.tet")).unwrap();
    let (code, _, err) = run(&["repair", "-y", "f.tet", "-o", "g.tet"], &d);
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("the output g.tet is the input f.tet"), "{err}");
    let (code, _, err) = run(
        &[
            "query",
            r#"{"dataset": "x", "selection": [{"start": 0, "stop": 2}]}"#,
            "-t",
            "f.tet",
            "--output",
            "g.tet",
        ],
        &d,
    );
    assert_eq!(code, 16, "{err}");
    assert_eq!(std::fs::read(d.join("f.tet")).unwrap(), tet);
    assert!(temporaries(&d).is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_existing_output_needs_force() {
    let d = scratch("exists");
    small_npy(&d, "a.npy");
    std::fs::write(d.join("keep.tet"), b"five datasets live here").unwrap();
    let (code, _, err) = run(&["convert", "a.npy", "keep.tet"], &d);
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("keep.tet exists; pass --force"), "{err}");
    assert_eq!(
        std::fs::read(d.join("keep.tet")).unwrap(),
        b"five datasets live here"
    );
    let (code, _, err) = run(&["convert", "a.npy", "keep.tet", "--force"], &d);
    assert_eq!(code, 0, "{err}");
    assert_eq!(run(&["verify", "keep.tet"], &d).0, 0);
    // export and query --output the same way.
    std::fs::write(d.join("out.npy"), b"old").unwrap();
    let (code, _, err) = run(&["export", "keep.tet", "--dataset", "a", "out.npy"], &d);
    assert_eq!(code, 16, "{err}");
    assert_eq!(std::fs::read(d.join("out.npy")).unwrap(), b"old");
    let (code, _, err) = run(
        &["export", "keep.tet", "--dataset", "a", "out.npy", "--force"],
        &d,
    );
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read(d.join("out.npy"))
        .unwrap()
        .starts_with(b"\x93NUMPY"));
    let _ = std::fs::remove_dir_all(&d);
}

fn image(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir.join("tree/sub")).unwrap();
    std::fs::write(dir.join("tree/a.txt"), b"alpha").unwrap();
    std::fs::write(dir.join("tree/sub/b.txt"), b"beta").unwrap();
    let (code, _, err) = run(
        &[
            "mkfs", name, "--size", "8M", "--label", "mine", "--from", "tree",
        ],
        dir,
    );
    assert_eq!(code, 0, "{err}");
}

#[test]
fn mkfs_asks_before_formatting_over_something() {
    let d = scratch("mkfs");
    image(&d, "full.img");
    let before = std::fs::read(d.join("full.img")).unwrap();
    // No terminal: refused, with what is there.
    let (code, _, err) = run(&["mkfs", "full.img", "--size", "8M"], &d);
    assert_eq!(code, 16, "{err}");
    assert!(
        err.contains("full.img contains a cetrafs image (label 'mine', 3 files)"),
        "{err}"
    );
    assert_eq!(std::fs::read(d.join("full.img")).unwrap(), before);
    // Other signatures, and any stray byte.
    let mut ext4 = vec![0u8; 1 << 16];
    ext4[1080] = 0x53;
    ext4[1081] = 0xef;
    std::fs::write(d.join("ext4.img"), &ext4).unwrap();
    let (code, _, err) = run(&["mkfs", "ext4.img", "--size", "8M"], &d);
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("an ext2/ext3/ext4 filesystem"), "{err}");
    let mut stray = vec![0u8; 8192];
    stray[5000] = 7;
    std::fs::write(d.join("stray.img"), &stray).unwrap();
    let (code, _, err) = run(&["mkfs", "stray.img", "--size", "8M"], &d);
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("data (it is not empty)"), "{err}");
    assert_eq!(std::fs::read(d.join("stray.img")).unwrap(), stray);
    // Empty and all-zero targets are formatted without a word.
    std::fs::write(d.join("empty.img"), b"").unwrap();
    std::fs::write(d.join("zero.img"), vec![0u8; 1 << 20]).unwrap();
    for t in ["empty.img", "zero.img"] {
        let (code, _, err) = run(&["mkfs", t, "--size", "8M"], &d);
        assert_eq!(code, 0, "{t}: {err}");
    }
    // On a terminal it asks: "n" leaves the image, "y" formats it.
    for (answer, code, changed) in [("n", 16, false), ("y", 0, true)] {
        let (status, shown) = on_terminal(&d, "mkfs full.img --size 8M", &format!("{answer}\n"));
        assert!(
            shown.contains(
                "full.img contains a cetrafs image (label 'mine', 3 files). Proceed anyway? [y/N]"
            ),
            "{shown}"
        );
        assert_eq!(status, Some(code), "{shown}");
        assert_eq!(
            std::fs::read(d.join("full.img")).unwrap() != before,
            changed
        );
    }
    // --force skips the question.
    let (code, _, err) = run(&["mkfs", "ext4.img", "--size", "8M", "--force"], &d);
    assert_eq!(code, 0, "{err}");
    assert!(temporaries(&d).is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn cetrafs_repair_to_another_file_leaves_the_input_alone() {
    let d = scratch("repair-o");
    image(&d, "img");
    let mut img = std::fs::read(d.join("img")).unwrap();
    // A block group free count off by one, checksum resealed: a lossless fix.
    {
        use tet_core::block::MemDevice;
        use tet_core::cetrafs::{Buffers, Fs};
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
        let bg = usize::try_from(fs.superblock().raw().bg_table_start.get()).unwrap() * 4096;
        img[bg + 64] ^= 2;
    }
    tet_alloc::cetrafs::testing::reseal(&mut img);
    std::fs::write(d.join("img"), &img).unwrap();
    let (code, _, err) = run(&["repair", "-p", "img", "-o", "fixed.img"], &d);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        std::fs::read(d.join("img")).unwrap(),
        img,
        "the input changed"
    );
    assert_eq!(run(&["verify", "fixed.img"], &d).0, 0);
    assert_eq!(run(&["verify", "img"], &d).0, 4);
    // The copy is sparse like the original, and -o F over F is refused.
    let (code, _, err) = run(&["repair", "-p", "img", "-o", "img"], &d);
    assert_eq!(code, 16, "{err}");
    let (code, _, err) = run(&["repair", "-p", "img", "-o", "fixed.img"], &d);
    assert_eq!(code, 16, "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Runs `args` in `d` `rounds` times, each interrupted by SIGINT or SIGTERM after a
/// seeded random delay below `max_ms`; after each run no temporary file is left and
/// `target` is either `old` or a complete new file (`verify` accepts it, or it is a NumPy
/// file: the run finished, or was interrupted after its rename; `target` is then reset
/// to `old`). Returns
/// how many runs were interrupted.
fn interrupt(d: &Path, args: &[&str], target: &str, old: &[u8], seed: u64, max_ms: u64) -> u32 {
    let bin = env!("CARGO_BIN_EXE_tet-host");
    let mut seed = seed;
    let mut interrupted = 0;
    std::fs::write(d.join(target), old).unwrap();
    for round in 0..6 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let child = Command::new(bin)
            .args(args)
            .current_dir(d)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(seed % max_ms));
        let signal = if round % 2 == 0 { "-INT" } else { "-TERM" };
        let _ = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status();
        let out = child.wait_with_output().unwrap();
        let left = temporaries(d);
        assert!(left.is_empty(), "{args:?} round {round}: {left:?}");
        let now = std::fs::read(d.join(target)).unwrap();
        match out.status.code() {
            Some(0 | 1) if target.ends_with(".npy") => {
                assert!(now.starts_with(b"\x93NUMPY"), "{args:?} round {round}");
                std::fs::write(d.join(target), old).unwrap();
            }
            Some(0 | 1) => {
                let (code, _, err) = run(&["verify", target], d);
                assert_eq!(code, 0, "{args:?} round {round}: {err}");
                std::fs::write(d.join(target), old).unwrap();
            }
            Some(code) => {
                assert!(
                    code == 130 || code == 143,
                    "{args:?} round {round}: exit {code}"
                );
                // Interrupted before the rename: the old bytes; after it (while the
                // result is checked): the complete new file.
                if now != old && target.ends_with(".npy") {
                    assert!(now.starts_with(b"\x93NUMPY"), "{args:?} round {round}");
                } else if now != old {
                    let (code, _, err) = run(&["verify", target], d);
                    assert_eq!(code, 0, "{args:?} round {round}: a partial target: {err}");
                }
                std::fs::write(d.join(target), old).unwrap();
                interrupted += 1;
            }
            // A signal that arrives before the process has installed its handler (the
            // first milliseconds) kills it before it has written anything.
            None => assert!(now == old, "{args:?} round {round}: killed after writing"),
        }
    }
    interrupted
}

/// SIGINT and SIGTERM at seeded random moments of `convert`, `export`, `mkfs --from`
/// and an in-place `.tet` `repair`: no temporary file is left, and the target is
/// untouched or complete.
#[test]
fn interrupted_writes_leave_no_temporary_and_the_target_intact() {
    let d = scratch("signal");
    // 16 MiB of u32: long enough to interrupt at many points.
    let data: Vec<u8> = (0u32..(1 << 22)).flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(
        d.join("big.npy"),
        npy("<u4", false, &[1 << 10, 1 << 12], &data),
    )
    .unwrap();
    let convert = ["convert", "big.npy", "t.tet", "--force", "--codec", "zstd"];
    let mut interrupted = interrupt(&d, &convert, "t.tet", b"the old target", 1, 400);
    // A complete .tet to export from and to repair (an undefined flag bit: a fix).
    assert_eq!(
        run(&["convert", "big.npy", "big.tet", "--codec", "raw"], &d).0,
        0
    );
    let export = [
        "export",
        "big.tet",
        "--dataset",
        "big",
        "out.npy",
        "--force",
    ];
    interrupted += interrupt(&d, &export, "out.npy", b"the old npy", 2, 300);
    let mut warned = std::fs::read(d.join("big.tet")).unwrap();
    warned[12] |= 4;
    interrupted += interrupt(&d, &["repair", "-y", "w.tet"], "w.tet", &warned, 3, 300);
    // A tree of 32 MiB for mkfs.
    std::fs::create_dir_all(d.join("tree")).unwrap();
    for i in 0..32 {
        std::fs::write(d.join(format!("tree/f{i}")), &data[..1 << 20]).unwrap();
    }
    let mkfs = ["mkfs", "img", "--size", "64M", "--from", "tree", "--force"];
    interrupted += interrupt(&d, &mkfs, "img", b"the old image", 4, 300);
    assert!(interrupted >= 4, "only {interrupted} runs were interrupted");
    let _ = std::fs::remove_dir_all(&d);
}

/// Reverses the `\\` and `\xHH` escapes of names printed as text.
fn unescape(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && b.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else if b[i] == b'\\' && b.get(i + 1) == Some(&b'x') {
            out.push(u8::from_str_radix(&s[i + 2..i + 4], 16).unwrap());
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn from_hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Names holding every byte value 1–255 but `/` go through mkfs, ls (text and JSON),
/// cat and stat and come back as the same bytes.
#[test]
fn names_are_bytes_end_to_end() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let d = scratch("names");
    let all: Vec<u8> = (1u8..=255).filter(|b| *b != b'/').collect();
    let names: Vec<Vec<u8>> = all.chunks(64).map(<[u8]>::to_vec).collect();
    std::fs::create_dir_all(d.join("tree")).unwrap();
    for n in &names {
        std::fs::write(d.join("tree").join(OsStr::from_bytes(n)), n).unwrap();
    }
    let (code, _, err) = run(&["mkfs", "img", "--size", "8M", "--from", "tree"], &d);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&["ls", "--json", "img", "/"], &d);
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let mut listed: Vec<Vec<u8>> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| match r.get("name_hex") {
            Some(h) => {
                let bytes = from_hex(h.as_str().unwrap());
                assert_eq!(unescape(r["name"].as_str().unwrap()), bytes);
                bytes
            }
            None => r["name"].as_str().unwrap().as_bytes().to_vec(),
        })
        .collect();
    listed.sort();
    let mut want = names.clone();
    want.sort();
    assert_eq!(listed, want);
    // Text: the name column (after 8 + 5 + 10 + 6 columns and their separators).
    let (_, out, _) = run(&["ls", "img", "/"], &d);
    let mut shown: Vec<Vec<u8>> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| unescape(&l[34..]))
        .collect();
    shown.sort();
    assert_eq!(shown, want);
    for n in &names {
        let mut path = b"/".to_vec();
        path.extend_from_slice(n);
        let path = OsStr::from_bytes(&path);
        let (code, out, err) = run(&[OsStr::new("cat"), OsStr::new("img"), path], &d);
        assert_eq!(code, 0, "{err}");
        assert_eq!(&out, n);
        let (code, out, err) = run(
            &[
                OsStr::new("stat"),
                OsStr::new("--json"),
                OsStr::new("img"),
                path,
            ],
            &d,
        );
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let back = match v.get("path_hex") {
            Some(h) => from_hex(h.as_str().unwrap()),
            None => v["path"].as_str().unwrap().as_bytes().to_vec(),
        };
        assert_eq!(back, path.as_bytes());
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Every command behaves the same on a closed pipe (quiet, exit 0) and on a full
/// output (a message naming standard output and the OS error, exit 8).
#[test]
fn closed_pipes_and_full_outputs_alike_for_every_command() {
    let d = scratch("pipes");
    std::fs::create_dir_all(d.join("tree")).unwrap();
    // Large enough that `cat` is still writing when `head` has gone.
    let big: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.join("tree/big.bin"), &big).unwrap();
    image(&d, "img");
    let (code, _, err) = run(&["mkfs", "big.img", "--size", "16M", "--from", "tree"], &d);
    assert_eq!(code, 0, "{err}");
    let example =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/temperature.tet");
    std::fs::copy(&example, d.join("t.tet")).unwrap();
    let commands: &[&str] = &[
        "info t.tet",
        "info --json t.tet",
        "verify t.tet",
        "verify --json t.tet",
        "repair -n t.tet",
        r#"query '{"dataset": "temperature"}' -t t.tet --format table"#,
        r#"query '{"dataset": "temperature", "sum": []}' -t t.tet"#,
        "info img",
        "verify img",
        "verify --json img",
        "repair -n img",
        "ls img /",
        "ls --json img /",
        "cat big.img /big.bin",
        "cat --json big.img /big.bin",
        "stat img /a.txt",
    ];
    let bin = env!("CARGO_BIN_EXE_tet-host");
    for cmd in commands {
        let closed = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "set -o pipefail; '{bin}' {cmd} | head -c 1 >/dev/null"
            ))
            .current_dir(&d)
            .output()
            .unwrap();
        assert_eq!(closed.status.code(), Some(0), "{cmd} | head");
        assert!(
            closed.stderr.is_empty(),
            "{cmd} | head: {}",
            String::from_utf8_lossy(&closed.stderr)
        );
        let full = Command::new("bash")
            .arg("-c")
            .arg(format!("'{bin}' {cmd} > /dev/full"))
            .current_dir(&d)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&full.stderr);
        assert_eq!(full.status.code(), Some(8), "{cmd} > /dev/full: {err}");
        assert!(
            err.contains("cannot write to standard output: No space left on device"),
            "{cmd} > /dev/full: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A file of neither format is named as what it looks like (exit 8); a `.tet` or an
/// image whose primary magic alone is damaged is a damaged file of its format (4).
#[test]
fn strange_inputs_are_named_as_what_they_are() {
    let d = scratch("strange");
    small_npy(&d, "a.npy");
    let mut ext4 = vec![0u8; 4096];
    ext4[1080] = 0x53;
    ext4[1081] = 0xef;
    std::fs::write(d.join("ext4.img"), &ext4).unwrap();
    std::fs::write(d.join("h5"), b"\x89HDF\r\n\x1a\n\0\0\0\0").unwrap();
    std::fs::write(d.join("nc"), b"CDF\x01\0\0\0\0").unwrap();
    std::fs::write(d.join("gz"), b"\x1f\x8b\x08\0\0\0\0\0").unwrap();
    std::fs::write(d.join("empty"), b"").unwrap();
    std::fs::write(d.join("passwd"), b"root:x:0:0:root:/root:/bin/bash\n").unwrap();
    for (file, what) in [
        ("a.npy", "it looks like a NumPy .npy file"),
        ("ext4.img", "it looks like an ext2/ext3/ext4 filesystem"),
        ("h5", "it looks like an HDF5 file"),
        ("nc", "it looks like a NetCDF classic file"),
        ("gz", "it looks like a gzip file"),
        ("empty", "it is empty"),
        ("passwd", "it looks like a text file"),
    ] {
        for cmd in [
            vec!["verify", file],
            vec!["info", file],
            vec!["ls", file],
            vec!["query", r#"{"dataset": "a", "sum": []}"#, "-t", file],
        ] {
            let (code, _, err) = run(&cmd, &d);
            assert_eq!(code, 8, "{cmd:?}: {err}");
            assert!(
                err.contains(&format!(
                    "{file}: not a .tet file or a cetrafs image: {what}"
                )),
                "{cmd:?}: {err}"
            );
        }
    }
    // A cetrafs image with a damaged superblock magic is a damaged image.
    image(&d, "img");
    let mut img = std::fs::read(d.join("img")).unwrap();
    img[0] = b'X';
    std::fs::write(d.join("img"), &img).unwrap();
    let (code, out, err) = run(&["verify", "img"], &d);
    let out = String::from_utf8(out).unwrap();
    assert_eq!(code, 4, "{out}{err}");
    assert!(out.contains("superblock.magic"), "{out}{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `--json` is honoured on failure too: a JSON error object on standard output with the
/// code, the message and the exit status, whatever the command and the failure.
#[test]
fn json_errors_for_every_command() {
    let d = scratch("json-errors");
    image(&d, "img");
    let broken = common::without_superblocks(&d, "img");
    std::fs::write(d.join("broken.img"), &broken).unwrap();
    std::fs::write(d.join("text"), b"just some text\n").unwrap();
    std::fs::write(d.join("data.bin"), [7u8; 64]).unwrap();
    let example =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/temperature.tet");
    std::fs::copy(&example, d.join("t.tet")).unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        (&["verify", "--json", "missing"], 8, "operational"),
        (&["info", "--json", "text"], 8, "operational"),
        (&["info", "--json", "broken.img"], 4, "damaged"),
        (&["ls", "--json", "t.tet"], 16, "usage"),
        (&["cat", "--json", "img", "/nope"], 8, "operational"),
        (&["stat", "--json", "img", "/nope"], 8, "operational"),
        (&["repair", "-n", "--json", "text"], 8, "operational"),
        (&["replay", "--json", "t.tet"], 16, "usage"),
        (&["mkfs", "--json", "data.bin", "--size", "8M"], 16, "usage"),
        (
            &["verify", "--json", "--no-such-flag", "t.tet"],
            16,
            "usage",
        ),
        (
            &[
                r#"query"#,
                r#"{"dataset": "nope", "sum": []}"#,
                "-t",
                "t.tet",
            ],
            16,
            "usage",
        ),
    ];
    for (args, exit, code) in cases {
        let (got, out, err) = run(args, &d);
        assert_eq!(got, *exit, "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}): {out:?}"));
        assert_eq!(v["error"]["code"], *code, "{args:?}: {v}");
        assert_eq!(v["error"]["exit"], *exit, "{args:?}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            !message.is_empty() && err.contains(message),
            "{args:?}: {v} / {err}"
        );
    }
    // Without --json, standard output stays empty on failure.
    let (code, out, _) = run(&["verify", "missing"], &d);
    assert_eq!((code, out.is_empty()), (8, true));
    let _ = std::fs::remove_dir_all(&d);
}

/// On a block device (a loop device, where one can be set up: root, `losetup`), mkfs
/// asks before formatting over data as on a file, and a run interrupted at a seeded
/// random moment leaves either nothing that claims to be an image (block 0 holds no
/// superblock: it is cleared first and written last) or a complete image.
#[test]
fn mkfs_on_a_block_device_writes_its_superblock_last() {
    let d = scratch("loop");
    let backing = d.join("backing");
    std::fs::write(&backing, vec![0u8; 64 << 20]).unwrap();
    let attached = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&backing)
        .output();
    let dev = match attached {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap().trim().to_string(),
        _ => {
            eprintln!("SKIPPING mkfs_on_a_block_device_writes_its_superblock_last: no loop device");
            return;
        }
    };
    let detach = || {
        let _ = Command::new("losetup").args(["-d", &dev]).status();
    };
    std::fs::create_dir_all(d.join("tree")).unwrap();
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    for i in 0..24 {
        std::fs::write(d.join(format!("tree/f{i}")), &data).unwrap();
    }
    let (code, _, err) = run(&["mkfs", &dev, "--from", "tree"], &d);
    assert_eq!(code, 0, "{err}");
    // Now it holds an image: asked about (refused without a terminal).
    let (code, _, err) = run(&["mkfs", &dev], &d);
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("contains a cetrafs image"), "{err}");
    let bin = env!("CARGO_BIN_EXE_tet-host");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut interrupted = 0;
    for round in 0..6 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let child = Command::new(bin)
            .args(["mkfs", &dev, "--from", "tree", "--force"])
            .current_dir(&d)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(seed % 120));
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let status = child.wait_with_output().unwrap().status;
        // Killed by the signal itself: it came before the handler was installed (a slow
        // start on a loaded machine, the libraries loading), so before any write. Not
        // counted as an interrupt, but the image must still be whole.
        let status = {
            use std::os::unix::process::ExitStatusExt;
            status.code().or((status.signal() == Some(2)).then_some(-2))
        };
        let mut head = [0u8; 4];
        {
            use std::os::unix::fs::FileExt;
            std::fs::File::open(&dev)
                .unwrap()
                .read_exact_at(&mut head, 0)
                .unwrap();
        }
        match status {
            // Finished, or stopped before it wrote anything: a complete image.
            Some(0) => assert_eq!(run(&["verify", &dev], &d).0, 0, "round {round}"),
            Some(130) if &head == b"CTFS" => {
                interrupted += 1;
                assert_eq!(
                    run(&["verify", &dev], &d).0,
                    0,
                    "round {round}: half an image"
                );
            }
            Some(130) => interrupted += 1,
            Some(-2) if &head == b"CTFS" => {
                assert_eq!(run(&["verify", &dev], &d).0, 0, "round {round}: early kill");
            }
            Some(-2) => {}
            other => {
                detach();
                panic!("round {round}: exit {other:?}");
            }
        }
    }
    detach();
    assert!(interrupted > 0, "no run was interrupted");
    let _ = std::fs::remove_dir_all(&d);
}

/// What a new user's trial found: a replaced file keeps its mode; query's own document
/// is an input; mkfs --from a tree holding the image leaves the image out; repair -o of
/// an image that does not mount writes nothing.
#[test]
fn trial_findings_stay_fixed() {
    use std::os::unix::fs::PermissionsExt;
    let d = scratch("trial");
    small_npy(&d, "a.npy");
    assert_eq!(run(&["convert", "a.npy", "a.tet"], &d).0, 0);
    std::fs::set_permissions(d.join("a.tet"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(run(&["convert", "a.npy", "a.tet", "--force"], &d).0, 0);
    let mode = std::fs::metadata(d.join("a.tet"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    std::fs::write(
        d.join("q.json"),
        r#"{"dataset": "a", "selection": [{"start": 0, "stop": 2}]}"#,
    )
    .unwrap();
    let (code, _, err) = run(
        &[
            "query", "q.json", "-t", "a.tet", "--output", "q.json", "--force",
        ],
        &d,
    );
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("is the input q.json"), "{err}");
    // The image inside its own --from tree.
    std::fs::create_dir_all(d.join("self")).unwrap();
    std::fs::write(d.join("self/file"), b"x").unwrap();
    for force in [false, true] {
        let mut args = vec!["mkfs", "self/img", "--size", "8M", "--from", "self"];
        if force {
            args.push("--force");
        }
        let (code, _, err) = run(&args, &d);
        assert_eq!(code, 0, "{err}");
        let (_, out, _) = run(&["ls", "--json", "self/img", "/"], &d);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let names: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["file"], "force {force}");
    }
    // An image that does not mount (no superblock passes): -o writes nothing.
    let img = common::without_superblocks(&d.join("self"), "img");
    std::fs::write(d.join("bad.img"), &img).unwrap();
    let (code, _, err) = run(&["repair", "-p", "bad.img", "-o", "out.img"], &d);
    assert_eq!(code, 4, "{err}");
    assert!(!d.join("out.img").exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// Runs `tet-host ARGS` on a terminal (through `script`), typing `input`; returns the
/// exit status and what the terminal showed.
fn on_terminal(d: &Path, args: &str, input: &str) -> (Option<i32>, String) {
    let bin = env!("CARGO_BIN_EXE_tet-host");
    let mut child = Command::new("script")
        .args(["-qec", &format!("'{bin}' {args}"), "/dev/null"])
        .current_dir(d)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Interactive repair answers as e2fsck's does: anything but y/n/a/q is asked again,
/// `n` leaves the fix, `a` takes this and every later fix, `q` declines the rest.
#[test]
fn interactive_repair_answers_y_n_a_q() {
    let d = scratch("ask");
    let example =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/temperature.tet");
    let mut warned = std::fs::read(&example).unwrap();
    warned[12] |= 4;
    std::fs::write(d.join("w.tet"), &warned).unwrap();
    let (code, shown) = on_terminal(&d, "repair w.tet", "maybe\nn\n");
    assert_eq!(code, Some(4), "{shown}");
    assert_eq!(shown.matches("[y/n/a/q]").count(), 2, "{shown}");
    assert!(shown.contains("answer y (yes), n (no), a (yes"), "{shown}");
    assert_eq!(std::fs::read(d.join("w.tet")).unwrap(), warned);
    let (code, shown) = on_terminal(&d, "repair w.tet", "a\n");
    assert_eq!(code, Some(1), "{shown}");
    // A cetrafs image with two fixes: q declines both, a takes both.
    image(&d, "img");
    let mut img = std::fs::read(d.join("img")).unwrap();
    {
        use tet_core::block::MemDevice;
        use tet_core::cetrafs::{Buffers, Fs};
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
        let bg = usize::try_from(fs.superblock().raw().bg_table_start.get()).unwrap() * 4096;
        let ino = usize::try_from(fs.resolve(b"/a.txt", &mut bufs).unwrap().lba()).unwrap() * 4096;
        img[bg + 64] ^= 2;
        img[ino + 28] = 5;
    }
    tet_alloc::cetrafs::testing::reseal(&mut img);
    std::fs::write(d.join("img"), &img).unwrap();
    let (code, shown) = on_terminal(&d, "repair img", "q\n");
    assert_eq!(code, Some(4), "{shown}");
    assert_eq!(shown.matches("[y/n/a/q]").count(), 1, "{shown}");
    assert_eq!(std::fs::read(d.join("img")).unwrap(), img);
    let (code, shown) = on_terminal(&d, "repair img", "a\n");
    assert_eq!(code, Some(1), "{shown}");
    assert_eq!(shown.matches("[y/n/a/q]").count(), 1, "{shown}");
    assert_eq!(run(&["verify", "img"], &d).0, 0);
    let _ = std::fs::remove_dir_all(&d);
}
