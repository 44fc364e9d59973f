//! `tet-host replay` through the real binary: a dirty image replays once (exit 1), a
//! second run has nothing to do (exit 0), a live node's journal is refused (exit 8,
//! naming the node) and `ls`/`cat` show the journaled content before replay, the raw
//! disk with `--no-journal`.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::testing::{register_node, write_journal_txn};
use tet_core::block::MemDevice;
use tet_core::cetrafs::{Buffers, Fs, Mapping};

mod common;
use common::{golden, run};

fn dirty_image(live: bool) -> Vec<u8> {
    let mut b = ImageBuilder::new(Params {
        size_bytes: 8 << 20,
        bg_size_blocks: 512,
        inodes: 32,
        ..Params::default()
    });
    b.add_file(
        1,
        b"a",
        b"old\n".to_vec(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    let mut img = b.build().unwrap();
    register_node(&mut img, 0, 7, if live { 1 } else { 2 }, b"n7").unwrap();
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
    let i = fs.resolve(b"/a", &mut bufs).unwrap();
    let Mapping::Mapped { physical, .. } = fs.map_block(&i, 0, &mut bufs.tree).unwrap() else {
        panic!()
    };
    write_journal_txn(
        &mut img,
        0,
        0,
        1,
        &[(physical, b"new\n".to_vec(), false)],
        true,
        true,
    )
    .unwrap();
    img
}

#[test]
fn replay_once_then_nothing_and_live_nodes_refused() {
    let dir = std::env::temp_dir().join(format!("tet-host-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("img"), dirty_image(false)).unwrap();
    // Before replay: verify warns only; cat reads through the journal, or raw.
    let (code, out, _) = run(&["verify", "img"], &dir);
    assert_eq!(code, 0);
    assert!(String::from_utf8_lossy(&out).contains("warning[journal-replay]"));
    assert_eq!(run(&["cat", "img", "/a"], &dir).1, b"new\n");
    assert_eq!(run(&["cat", "--no-journal", "img", "/a"], &dir).1, b"old\n");
    let (code, out, err) = run(&["replay", "img"], &dir);
    assert_eq!(code, 1, "{err}");
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("replayed 1 journal(s): 1 block(s) written, 0 already applied, 0 conflicting"),
        "{out}"
    );
    assert_eq!(run(&["cat", "--no-journal", "img", "/a"], &dir).1, b"new\n");
    let (code, out, _) = run(&["replay", "img"], &dir);
    assert_eq!(code, 0);
    assert!(String::from_utf8_lossy(&out).contains("no journal needs replay"));
    let (code, out, _) = run(&["verify", "img"], &dir);
    assert_eq!(
        (code, String::from_utf8(out).unwrap()),
        (0, "img: clean\n".to_string())
    );

    // A row ACTIVE that no process holds is a writer that crashed: replay recovers it,
    // without --force or its node id, and the image ends clean.
    std::fs::write(dir.join("live"), dirty_image(true)).unwrap();
    let (code, out, err) = run(&["replay", "live"], &dir);
    assert_eq!(code, 1, "{err}");
    assert!(
        String::from_utf8_lossy(&out).contains("recovered node 0x7:"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let (code, out, _) = run(&["verify", "live"], &dir);
    assert_eq!(
        (code, String::from_utf8(out).unwrap()),
        (0, "live: clean\n".to_string())
    );
    // A live process holding the image refuses replay, --force or not, writing nothing.
    std::fs::write(dir.join("held"), dirty_image(false)).unwrap();
    ok_replay(&dir, "held");
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_tet-host"))
        .args(["mkdir", "held", "/z"])
        .current_dir(&dir)
        .env("TET_HOST_TEST_HOLD_MS", "3000")
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let before = loop {
        let (_, _, err) = run(&["ls", "held", "/"], &dir);
        if err.contains("in use by") {
            break std::fs::read(dir.join("held")).unwrap();
        }
        assert!(t0.elapsed().as_secs() < 20, "the holder took the image");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    for args in [&["replay", "held"][..], &["replay", "--force", "held"]] {
        let (code, _, err) = run(args, &dir);
        assert_eq!(code, 8, "{args:?}: {err}");
        assert!(err.contains("in use by"), "{err}");
    }
    assert!(
        std::fs::read(dir.join("held")).unwrap() == before,
        "refused: nothing written"
    );
    assert!(holder.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `replay --json` in the shape pinned by a golden file.
#[test]
fn replay_json_golden() {
    let dir = std::env::temp_dir().join(format!("tet-host-replay-json-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("img"), dirty_image(false)).unwrap();
    let (code, out, err) = run(&["replay", "--json", "img"], &dir);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["journals"], 1);
    golden("cetrafs_replay.json", &String::from_utf8(out).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn repair_conventions_on_a_cetrafs_image() {
    use tet_alloc::cetrafs::testing::reseal;
    let dir = std::env::temp_dir().join(format!("tet-host-crepair-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut img = dirty_image(false);
    // A wrong link count on /a, and a group free count off by one.
    {
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
        let ia = fs.resolve(b"/a", &mut bufs).unwrap().lba() as usize * 4096;
        let bg = fs.superblock().raw().bg_table_start.get() as usize * 4096;
        img[ia + 28] = 5;
        img[bg + 64] ^= 2;
        reseal(&mut img);
    }
    std::fs::write(dir.join("img"), &img).unwrap();
    assert_eq!(run(&["verify", "img"], &dir).0, 4);
    // -n: reports, exit 4, changes no byte.
    let (code, out, _) = run(&["repair", "-n", "img"], &dir);
    assert_eq!(code, 4);
    let out = String::from_utf8(out).unwrap();
    // Each finding once, with the fix that answers it.
    assert!(
        out.lines().any(
            |l| l.starts_with("would fix[link-count] /a (inode 2): inode.nlink")
                && l.ends_with("-> nlink set to the references counted = 1")
        ),
        "{out}"
    );
    assert_eq!(out.matches("inode.nlink").count(), 1, "{out}");
    assert!(std::fs::read(dir.join("img")).unwrap() == img);
    // No mode and no terminal: a usage error.
    assert_eq!(run(&["repair", "img"], &dir).0, 16);
    // -p: replays, fixes, exit 1; then clean.
    let (code, out, err) = run(&["repair", "-p", "img"], &dir);
    assert_eq!(code, 1, "{err}");
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("replayed 1 journal(s)"), "{out}");
    assert!(out.contains("fixed[group-free-count]"), "{out}");
    assert_eq!(run(&["verify", "img"], &dir).0, 0);
    assert_eq!(run(&["cat", "--no-journal", "img", "/a"], &dir).1, b"new\n");
    assert_eq!(run(&["repair", "-p", "img"], &dir).0, 0);
    // A live node: refused without --force.
    std::fs::write(dir.join("live"), dirty_image(true)).unwrap();
    let (code, _, err) = run(&["repair", "-y", "live"], &dir);
    assert_eq!(code, 8);
    assert!(err.contains("node 7 (registry row 0) is ACTIVE"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Replays `img` in `dir` to the end (exit 0 or 1).
fn ok_replay(dir: &std::path::Path, img: &str) {
    let (code, _, err) = run(&["replay", img], dir);
    assert!(code == 0 || code == 1, "{err}");
}
