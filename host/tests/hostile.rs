//! Inputs that are not regular files, and output into a closed pipe: refused or ended
//! cleanly, never a hang or a panic.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::PathBuf;
use std::process::Command;

mod common;

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A command prefix that runs as `nobody` (so permission bits apply although the tests
/// run as root).
fn as_nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]);
    c
}

#[test]
fn special_files_are_refused_before_opening() {
    let d = scratch();
    let fifo = d.join("fifo");
    let _ = std::fs::remove_file(&fifo);
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for input in [
        fifo.to_str().unwrap(),
        "/dev/zero",
        "/dev/null",
        d.to_str().unwrap(),
    ] {
        for cmd in [
            &["verify", input][..],
            &["info", input],
            &["repair", "-n", input],
        ] {
            // A FIFO with no writer would block `open`; the test would hang, not fail.
            let (code, out, err) = common::run(cmd, &d);
            assert_eq!(code, 8, "{cmd:?}: {err}");
            assert!(out.is_empty());
            assert!(err.contains(input), "{cmd:?}: {err}");
            assert!(err.contains("regular files"), "{cmd:?}: {err}");
        }
    }
    let (code, _, err) = common::run(
        &["query", r#"{"dataset": "a", "sum": []}"#, "-t", "/dev/zero"],
        &d,
    );
    assert_eq!(code, 8, "{err}");
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // More output than a pipe buffer holds, read by `head -1`.
    let d = scratch();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let mut h = "{'descr': '|u1', 'fortran_order': False, 'shape': (300000,), }".to_string();
    while !(h.len() + 11).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    npy.extend_from_slice(&(h.len() as u16).to_le_bytes());
    npy.extend_from_slice(h.as_bytes());
    npy.extend_from_slice(&data);
    std::fs::write(d.join("big.npy"), npy).unwrap();
    let (code, _, err) = common::run(&["convert", "big.npy", "big.tet"], &d);
    assert_eq!(code, 0, "{err}");
    let bin = env!("CARGO_BIN_EXE_tet-host");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; '{bin}' query '{{\"dataset\": \"big\"}}' -t big.tet --format table | head -3"
        ))
        .current_dir(&d)
        .output()
        .unwrap();
    // Two header lines (what the table holds, its index space), then the first value.
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().nth(2), Some("[0]\t0"), "{text}");
    assert!(text.starts_with("# big values: dtype "), "{text}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn outputs_that_are_not_regular_files_are_refused_and_never_replaced() {
    let d = scratch();
    let example =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/temperature.tet");
    let mut bad = std::fs::read(&example).unwrap();
    bad[12] |= 4;
    std::fs::write(d.join("bad.tet"), &bad).unwrap();
    for out in ["/dev/full", "/dev/null", d.to_str().unwrap()] {
        let (code, _, err) = common::run(&["repair", "-y", "bad.tet", "-o", out], &d);
        assert_eq!(code, 8, "{out}: {err}");
        assert!(err.contains("not a regular file"), "{err}");
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/full")
        .unwrap()
        .file_type()
        .is_char_device());
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    // Through a symbolic link the named file is replaced and the link kept.
    let _ = std::fs::remove_file(d.join("link.tet"));
    std::os::unix::fs::symlink(d.join("bad.tet"), d.join("link.tet")).unwrap();
    let (code, _, err) = common::run(&["repair", "-p", "link.tet"], &d);
    assert_eq!(code, 1, "{err}");
    assert!(std::fs::symlink_metadata(d.join("link.tet"))
        .unwrap()
        .file_type()
        .is_symlink());
    let (code, _, _) = common::run(&["verify", "bad.tet"], &d);
    assert_eq!(code, 0);
}

#[test]
fn mkfs_sizes_that_overflow_are_refused() {
    let d = scratch();
    let (code, _, err) = common::run(
        &[
            "mkfs",
            "x.img",
            "--size",
            "64M",
            "--inodes",
            "18446744073709551615",
        ],
        &d,
    );
    assert_eq!(code, 16, "{err}");
    assert!(!d.join("x.img").exists());
}

#[test]
fn mkfs_refuses_to_replace_a_device_node() {
    let d = scratch();
    let (code, _, err) = common::run(&["mkfs", "/dev/full", "--size", "64M"], &d);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/full")
        .unwrap()
        .file_type()
        .is_char_device());
}

/// The hostile-input matrix of `docs/hostile-inputs.md`: every input against every
/// command that reads one, each run with its data segment capped at 256 MiB (file
/// mappings do not count), asserting the exit code and that the output names the input.
#[test]
fn hostile_input_matrix() {
    let d = scratch().join("matrix");
    std::fs::create_dir_all(&d).unwrap();
    let example =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/temperature.tet");
    std::fs::write(d.join("empty"), b"").unwrap();
    std::fs::write(d.join("one"), b"x").unwrap();
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(d.join("random"), noise).unwrap();
    let _ = std::fs::remove_file(d.join("fifo"));
    assert!(Command::new("mkfifo")
        .arg(d.join("fifo"))
        .status()
        .unwrap()
        .success());
    std::fs::copy(&example, d.join("noperm")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.join("noperm"), std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    // A valid header, then 1 TiB of hole (the footer the flag promises is zeros).
    let huge = std::fs::File::create(d.join("huge.tet")).unwrap();
    std::io::Write::write_all(&mut &huge, &std::fs::read(&example).unwrap()).unwrap();
    huge.set_len(1 << 40).unwrap();
    let bin = env!("CARGO_BIN_EXE_tet-host");
    let dir = d.to_str().unwrap().to_string();
    // (input, expected exit of: info, verify, repair -n, ls, cat, stat, query, convert,
    // replay)
    let rows: &[(&str, [i32; 9])] = &[
        // Neither format: named as what it looks like, exit 8 ("not ours" is not damage);
        // `convert` reads NumPy files and refuses other input as a usage error.
        ("empty", [8, 8, 8, 8, 8, 8, 8, 16, 8]),
        ("one", [8, 8, 8, 8, 8, 8, 8, 16, 8]),
        ("random", [8, 8, 8, 8, 8, 8, 8, 16, 8]),
        // A .tet file: the wrong input (16) for the cetrafs commands.
        // Its footer is unreadable but its data is not: info warns and answers, query
        // reaches the dataset lookup (there is no "a").
        ("huge.tet", [0, 4, 4, 16, 16, 16, 16, 16, 16]),
        (&dir, [8; 9]),
        ("/dev/zero", [8; 9]),
        ("/dev/null", [8; 9]),
        ("fifo", [8; 9]),
        ("missing", [8; 9]),
        ("noperm", [8; 9]),
    ];
    for (input, want) in rows {
        let cmds: [Vec<&str>; 9] = [
            vec!["info", input],
            vec!["verify", input],
            vec!["repair", "-n", input],
            vec!["ls", input],
            vec!["cat", input, "/x"],
            vec!["stat", input, "/"],
            vec!["query", r#"{"dataset": "a", "sum": []}"#, "-t", input],
            vec!["convert", input, "out.tet"],
            vec!["replay", input],
        ];
        for (cmd, want) in cmds.iter().zip(want) {
            // As nobody, so `noperm` is unreadable even though the tests run as root.
            let out = Command::new("setpriv")
                .args([
                    "--reuid=nobody",
                    "--regid=nogroup",
                    "--clear-groups",
                    "bash",
                    "-c",
                ])
                .arg("ulimit -d 262144; exec \"$@\"")
                .arg("_")
                .arg(bin)
                .args(cmd)
                .current_dir(&d)
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(out.status.code(), Some(*want), "{cmd:?}: {text}");
            assert!(
                text.contains(input),
                "{cmd:?} does not name its input: {text}"
            );
            assert!(!text.contains("panicked"), "{cmd:?}: {text}");
        }
    }
    assert!(!d.join("out.tet").exists());
}

#[test]
fn out_of_range_flags_are_usage_errors() {
    let d = scratch();
    for args in [
        &["mkfs", "x.img", "--size", "0"][..],
        &["mkfs", "x.img", "--size", "64M", "--inodes", "0"],
        &[
            "mkfs",
            "x.img",
            "--size",
            "64M",
            "--inodes",
            "18446744073709551615",
        ],
        &["verify", "-j", "0", "x.tet"],
        &["verify", "--memory-budget", "lots", "x.tet"],
        &["convert", "x.npy", "y.tet", "--level", "99"],
    ] {
        let (code, _, err) = common::run(args, &d);
        assert_eq!(code, 16, "{args:?}: {err}");
    }
}

#[test]
fn a_full_standard_output_is_an_operational_error() {
    let example =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/temperature.tet");
    let out = Command::new(env!("CARGO_BIN_EXE_tet-host"))
        .arg("info")
        .arg(&example)
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(8));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write to standard output"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn an_unwritable_output_directory_leaves_nothing_behind() {
    use std::os::unix::fs::PermissionsExt;
    let d = scratch().join("ro");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o555)).unwrap();
    let example =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/temperature.tet");
    let mut bad = std::fs::read(&example).unwrap();
    bad[12] |= 4;
    let src = scratch().join("bad-for-ro.tet");
    std::fs::write(&src, &bad).unwrap();
    let out = as_nobody()
        .arg(env!("CARGO_BIN_EXE_tet-host"))
        .args(["repair", "-y"])
        .arg(&src)
        .arg("-o")
        .arg(d.join("fixed.tet"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(8), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
}

#[test]
fn mkfs_too_small_names_the_smallest_size_that_works() {
    let d = scratch();
    let flags = ["--zone-groups", "1", "--nodes", "1", "--inodes", "16"];
    let mut args = vec!["mkfs", "small.img", "--size", "100K"];
    args.extend(flags);
    let (code, _, err) = common::run(&args, &d);
    assert_eq!(code, 16);
    assert!(
        err.contains("--size 100K is too small: with 1 zone group, 1 node and 16 inodes the smallest image is "),
        "{err}"
    );
    let min = err.trim().rsplit(' ').next().unwrap().to_string();
    let mut args = vec!["mkfs", "small.img", "--size", &min];
    args.extend(flags);
    let (code, _, err) = common::run(&args, &d);
    assert_eq!(code, 0, "{min}: {err}");
    let (code, _, _) = common::run(&["verify", "small.img"], &d);
    assert_eq!(code, 0);
    // One block less does not fit.
    let kib: u64 = min.trim_end_matches('K').parse().unwrap();
    let less = format!("{}K", kib - 4);
    let mut args = vec!["mkfs", "small.img", "--size", &less];
    args.extend(flags);
    assert_eq!(common::run(&args, &d).0, 16);
}

#[test]
fn non_utf8_paths_and_spaces() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let d = scratch();
    let example =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/temperature.tet");
    let name = OsStr::from_bytes(b"a b\xff.tet");
    std::fs::copy(&example, d.join(name)).unwrap();
    let run = |args: &[&OsStr]| {
        Command::new(env!("CARGO_BIN_EXE_tet-host"))
            .args(args)
            .current_dir(&d)
            .output()
            .unwrap()
    };
    let out = run(&[OsStr::new("verify"), OsStr::new("--deep"), name]);
    assert_eq!(out.status.code(), Some(0));
    // The name is shown lossily, not refused.
    assert!(String::from_utf8_lossy(&out.stdout).contains("a b\u{fffd}.tet: clean"));
    let out = run(&[
        OsStr::new("query"),
        OsStr::new(r#"{"dataset": "station_id", "sum": []}"#),
        OsStr::new("-t"),
        name,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let target = OsStr::from_bytes(b"out \xfe.npy");
    let out = run(&[
        OsStr::new("export"),
        name,
        OsStr::new("--dataset"),
        OsStr::new("pressure"),
        target,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(d.join(target).is_file());
}
