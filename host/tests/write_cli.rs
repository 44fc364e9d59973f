//! The offline writing commands through the real binary (docs/cetrafs.md section 15):
//! a tree put in reads back and verifies clean; each command's Unix wording and exit
//! code; an image with errors, or with another node ACTIVE, is refused; a crashed
//! writer is recovered by `replay --node-id N --force`.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::os::unix::fs::symlink;
use std::path::PathBuf;

use tet_alloc::cetrafs::write::{JoinOptions, Writer};
use tet_core::block::MemDeviceMut;

mod common;
use common::run;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-write-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ok(args: &[&str], cwd: &std::path::Path) -> Vec<u8> {
    let (code, out, err) = run(args, cwd);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

#[test]
fn put_a_tree_then_change_it_and_verify_clean() {
    let d = dir("put");
    let src = d.join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::write(src.join("a"), b"alpha\n").unwrap();
    std::fs::hard_link(src.join("a"), src.join("hard")).unwrap();
    symlink("a", src.join("sym")).unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("sub/big"), &big).unwrap();
    std::fs::write(src.join("sub/deeper/empty"), b"").unwrap();
    ok(&["mkfs", "img", "--size", "32M"], &d);
    ok(&["put", "img", "src", "/tree"], &d);
    ok(&["verify", "img"], &d);
    assert_eq!(ok(&["cat", "img", "/tree/sub/big"], &d), big);
    assert_eq!(ok(&["cat", "img", "/tree/hard"], &d), b"alpha\n");
    let ls = String::from_utf8(ok(&["ls", "-l", "img", "/tree"], &d)).unwrap();
    assert!(ls.contains("sym -> a"), "{ls}");
    assert!(
        ls.lines().any(|l| l.contains(" 2 ") && l.ends_with(" a")),
        "{ls}"
    );
    // Into an existing directory: under the source's name.
    ok(&["mkdir", "-p", "img", "/x/y"], &d);
    ok(&["put", "img", "src/a", "/x"], &d);
    assert_eq!(ok(&["cat", "img", "/x/a"], &d), b"alpha\n");
    ok(&["mv", "img", "/x/a", "/x/y"], &d);
    ok(&["ln", "img", "/x/y/a", "/x/hl"], &d);
    ok(&["ln", "-s", "img", "../tree", "/x/s"], &d);
    ok(&["chmod", "img", "600", "/x/hl"], &d);
    ok(&["chown", "img", "5:6", "/x/hl"], &d);
    ok(&["touch", "img", "-d", "1000", "/x/new"], &d);
    ok(&["truncate", "img", "-s", "10", "/tree/sub/big"], &d);
    ok(
        &["setfattr", "img", "-n", "user.k", "-v", "v1", "/x/hl"],
        &d,
    );
    let g = String::from_utf8(ok(&["getfattr", "img", "/x/y/a"], &d)).unwrap();
    assert_eq!(g, "# file: x/y/a\nuser.k=\"v1\"\n\n");
    ok(&["setfattr", "img", "-x", "user.k", "/x/hl"], &d);
    assert_eq!(ok(&["cat", "img", "/tree/sub/big"], &d), &big[..10]);
    ok(&["rm", "-r", "img", "/tree/sub"], &d);
    ok(&["verify", "img"], &d);
    let ls = String::from_utf8(ok(&["ls", "-l", "img", "/x"], &d)).unwrap();
    assert!(ls.contains("hl"), "{ls}");
    assert!(ls.contains("     5      6 "), "{ls}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn failures_use_the_unix_words_and_the_exit_table() {
    let d = dir("fail");
    ok(&["mkfs", "img", "--size", "16M"], &d);
    ok(&["mkdir", "img", "/d"], &d);
    ok(&["touch", "img", "/d/f"], &d);
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["mkdir", "img", "/d"],
            8,
            "mkdir: cannot create directory '/d': File exists",
        ),
        (
            &["mkdir", "img", "/no/such"],
            8,
            "No such file or directory",
        ),
        (
            &["rm", "img", "/d"],
            8,
            "rm: cannot remove '/d': Is a directory",
        ),
        (
            &["rm", "img", "/zz"],
            8,
            "rm: cannot remove '/zz': No such file or directory",
        ),
        (
            &["mv", "img", "/d", "/d/f/x"],
            8,
            "mv: cannot move '/d' to '/d/f/x': Not a directory",
        ),
        (&["ln", "img", "/d", "/dl"], 8, "Operation not permitted"),
        (&["chmod", "img", "9", "/d"], 16, "invalid mode"),
        (
            &["chmod", "img", "644", "/nope"],
            8,
            "chmod: cannot access '/nope'",
        ),
        (
            &["setfattr", "img", "-x", "user.q", "/d/f"],
            8,
            "/d/f: No such attribute",
        ),
    ];
    for (args, code, words) in cases {
        let (c, _, err) = run(args, &d);
        assert_eq!(c, *code, "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
    }
    ok(&["rm", "-f", "img", "/zz"], &d);
    ok(&["verify", "img"], &d);
    // An image with an error finding is not written.
    let mut img = std::fs::read(d.join("img")).unwrap();
    let root_block = {
        let mut bufs = tet_core::cetrafs::Buffers::new();
        let fs = tet_core::cetrafs::Fs::open(tet_core::block::MemDevice::new(&img), &mut bufs.data)
            .unwrap();
        fs.superblock().raw().inode_table_start.get() as usize + 1
    };
    img[root_block * 4096 + 20] ^= 1; // root uid: its checksum fails
    std::fs::write(d.join("bad"), &img).unwrap();
    let (c, _, err) = run(&["mkdir", "bad", "/e"], &d);
    assert_eq!(c, 4, "{err}");
    assert!(err.contains("repair"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_crashed_writer_is_refused_to_others_and_recovered_by_replay() {
    let d = dir("crash");
    ok(&["mkfs", "img", "--size", "16M"], &d);
    let mut img = std::fs::read(d.join("img")).unwrap();
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(
            &dev,
            &JoinOptions {
                node_id: 77,
                hostname: b"crashed".to_vec(),
                now_secs: 0,
            },
        )
        .unwrap();
        let f = w.create(1, b"f", 0o644, 0, 0).unwrap();
        w.write(f, 0, b"data").unwrap();
        // No leave: the node crashed with its row ACTIVE.
    }
    std::fs::write(d.join("img"), &img).unwrap();
    let (c, _, err) = run(&["mkdir", "img", "/x"], &d);
    assert_eq!(c, 8, "{err}");
    assert!(
        err.contains("node 0x4d (registry row 0) is ACTIVE but no process holds it"),
        "{err}"
    );
    assert!(err.contains("`tet-host replay img` recovers it"), "{err}");
    // One command, no node id: every crashed writer is recovered.
    let (c, out, err) = run(&["replay", "img"], &d);
    assert_eq!(c, 1, "{err}");
    assert!(
        String::from_utf8_lossy(&out).contains("recovered node 0x4d"),
        "{out:?}"
    );
    ok(&["verify", "img"], &d);
    ok(&["mkdir", "img", "/x"], &d);
    assert_eq!(ok(&["cat", "img", "/f"], &d), b"data");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn kill_9_of_a_put_then_recovery_leaves_a_clean_image() {
    let d = dir("kill");
    let big: Vec<u8> = (0..24_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(d.join("big"), &big).unwrap();
    ok(&["mkfs", "base", "--size", "64M"], &d);
    // Seeded moments, from early in the command to near its end.
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut cut_short = 0;
    for round in 0..6 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let wait = std::time::Duration::from_millis(10 + seed % 400);
        std::fs::copy(d.join("base"), d.join("img")).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tet-host"))
            .args(["put", "img", "big", "/big"])
            .current_dir(&d)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(wait);
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        // Recovery: `replay --force` as the crashed node (even rounds), or the same
        // node's next command (odd rounds: it recovers before it checks).
        if round % 2 == 0 {
            let (c, _, err) = run(&["replay", "img", "--node-id", "2023", "--force"], &d);
            assert!(
                c == 0 || c == 1,
                "round {round} ({wait:?}): replay {c}: {err}"
            );
        } else {
            ok(&["mkdir", "img", "/recovered"], &d);
        }
        let (c, out, err) = run(&["verify", "img"], &d);
        assert_eq!(
            c,
            0,
            "round {round} ({wait:?}): {} {err}",
            String::from_utf8_lossy(&out)
        );
        // Whatever of the file is there reads as a prefix of it; the image takes writes.
        let (c, got, _) = run(&["cat", "img", "/big"], &d);
        if c != 0 || got.len() < big.len() {
            cut_short += 1;
        }
        if c == 0 {
            assert!(
                big.starts_with(&got),
                "round {round}: /big is not a prefix of the source"
            );
        }
        ok(&["mkdir", "img", "/after"], &d);
        ok(&["verify", "img"], &d);
    }
    // The moments are early enough that some kills land inside the put (on a machine
    // fast enough to finish it first, none would: then this says so).
    eprintln!("kill -9: {cut_short} of 6 puts cut short");
    let _ = std::fs::remove_dir_all(&d);
}
