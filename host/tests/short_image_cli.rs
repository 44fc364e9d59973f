//! `tet-host` on a cetrafs image cut short (docs/cetrafs.md section 2, check 3): the
//! reading commands open it with a warning and read what lies before the end byte for
//! byte; a file that needs a block past the end fails naming the block; `verify` reports
//! the truncation first; `repair` (but `-n`), `replay` and `tune` refuse it, exit 4, and
//! leave it byte-identical.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::testing::write_journal_txn;
use tet_core::block::MemDevice;
use tet_core::cetrafs::{Buffers, Fs, Mapping};

mod common;
use common::run;

const B: usize = 4096;
/// Blocks in the filesystem (32 MiB).
const TOTAL: u64 = 8192;

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tet-host-short-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The image and the files it holds.
struct Image {
    img: Vec<u8>,
    before: Vec<u8>,
    note: Vec<u8>,
    tail: Vec<u8>,
    /// `/tail.bin`'s inode and its first data block (its blocks are contiguous).
    tail_ino: u64,
    tail_start: u64,
}

/// 32 MiB: `/before.bin` (6 blocks, the last partial), `/dir/note.txt`, then
/// `/tail.bin` (600 contiguous blocks), all near the start of block group 0.
fn image() -> Image {
    let mut b = ImageBuilder::new(Params {
        size_bytes: TOTAL * 4096,
        bg_size_blocks: 2048,
        inodes: 64,
        label: "short".into(),
        ..Params::default()
    });
    let before: Vec<u8> = (0..5 * B + 123).map(|i| (i % 251) as u8).collect();
    let note = b"written before the cut\n".to_vec();
    let tail: Vec<u8> = (0..600 * B).map(|i| (i % 253) as u8).collect();
    let d = b.mkdir(ImageBuilder::ROOT, b"dir", 0o755).unwrap();
    for (dir, name, bytes) in [
        (ImageBuilder::ROOT, &b"before.bin"[..], &before),
        (d, b"note.txt", &note),
        (ImageBuilder::ROOT, b"tail.bin", &tail),
    ] {
        b.add_file(
            dir,
            name,
            bytes.clone(),
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
    }
    let img = b.build().unwrap();
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
    let t = fs.resolve(b"/tail.bin", &mut bufs).unwrap();
    let mut extents = Vec::new();
    let walked = fs.for_each_extent(&t, &mut bufs.tree, |e| {
        extents.push(e);
        Ok(ControlFlow::Continue(()))
    });
    assert!(walked.unwrap().is_continue());
    assert_eq!(extents.len(), 1, "{extents:?}");
    let (tail_ino, tail_start) = (t.ino(), extents[0].physical);
    // Everything else lies before /tail.bin.
    for p in [&b"/before.bin"[..], b"/dir/note.txt", b"/dir", b"/"] {
        let i = fs.resolve(p, &mut bufs).unwrap();
        for k in 0..i.size().div_ceil(4096) as u32 {
            match fs.map_block(&i, k, &mut bufs.tree).unwrap() {
                Mapping::Mapped { physical, .. } => assert!(physical < tail_start),
                Mapping::Hole => {}
            }
        }
    }
    Image {
        img,
        before,
        note,
        tail,
        tail_ino,
        tail_start,
    }
}

/// Writes the first `blocks` blocks of `img` to `dir/name`.
fn cut(dir: &Path, name: &str, img: &[u8], blocks: u64) -> Vec<u8> {
    let bytes = img[..blocks as usize * B].to_vec();
    std::fs::write(dir.join(name), &bytes).unwrap();
    bytes
}

fn text(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap()
}

/// The sentence every command says about an image of `blocks` blocks.
fn sentence(blocks: u64) -> String {
    format!(
        "superblock.total_blocks (block 0, byte 0x20) the image is {blocks} blocks but the \
         filesystem is {TOTAL}: was it truncated?"
    )
}

/// What a read of block `block` on an image of `blocks` blocks fails with.
fn past_end(block: u64, blocks: u64) -> String {
    format!(
        "block read (block {block}, byte {:#x}) block {block} lies past the device's end \
         (the device has {blocks} blocks)",
        block * 4096
    )
}

#[test]
fn verify_reports_the_truncation_first_with_offset_32_and_both_lengths() {
    let dir = scratch("verify");
    let im = image();
    std::fs::write(dir.join("full.img"), &im.img).unwrap();
    let (code, out, _) = run(&["verify", "full.img"], &dir);
    assert_eq!((code, text(out)), (0, "full.img: clean\n".to_string()));
    // One block short: the truncation is the one finding.
    cut(&dir, "one.img", &im.img, TOTAL - 1);
    let (code, out, err) = run(&["verify", "one.img"], &dir);
    assert_eq!(code, 4, "{err}");
    assert_eq!(
        text(out),
        format!(
            "error[read-failed] {}\none.img: 1 error(s), 0 warning(s)\n",
            sentence(TOTAL - 1)
        )
    );
    assert!(
        err.contains(&format!(
            "tet-host: warning: one.img: reading only what lies before the image's end: {}",
            sentence(TOTAL - 1)
        )),
        "{err}"
    );
    assert!(
        err.contains("the image is 8191 blocks but the filesystem is 8192: was it truncated?"),
        "{err}"
    );
    let (code, out, _) = run(&["verify", "--json", "one.img"], &dir);
    assert_eq!(code, 4);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (v["errors"].as_u64(), v["warnings"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(v["cross_checked"], true);
    let f = &v["findings"][0];
    assert_eq!(f["code"], "read-failed");
    assert_eq!(f["field"], "superblock.total_blocks");
    assert_eq!(f["offset"], 32);
    assert_eq!(f["context"]["block"], 0);
    assert_eq!(f["message"], sentence(TOTAL - 1));
    // Cut through /tail.bin: the truncation, then the file's first block past the end,
    // then the region headers and bitmaps of the block groups past it.
    let at = im.tail_start + 300;
    cut(&dir, "many.img", &im.img, at);
    let (code, out, _) = run(&["verify", "--json", "many.img"], &dir);
    assert_eq!(code, 4);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings[0]["offset"], 32);
    assert_eq!(findings[0]["message"], sentence(at));
    assert!(findings.iter().all(|f| f["code"] == "read-failed"), "{v}");
    let of_tail: Vec<&serde_json::Value> = findings
        .iter()
        .filter(|f| f["context"]["inode"].is_u64())
        .collect();
    assert_eq!(of_tail.len(), 1, "{v}");
    assert_eq!(of_tail[0]["context"]["inode"], im.tail_ino);
    assert_eq!(
        of_tail[0]["field"],
        "extent.physical (file data past the device's end)"
    );
    let message = of_tail[0]["message"].as_str().unwrap();
    assert!(
        message.ends_with(&format!(
            "block {at} lies past the device's end (the device has {at} blocks)"
        )),
        "{message}"
    );
    // Blocks 1 to 3 of 4 block groups lie past the end: a region header and a bitmap each.
    assert_eq!(findings.len(), 2 + 2 * 3, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reading_commands_read_before_the_end_and_name_the_block_past_it() {
    let dir = scratch("read");
    let im = image();
    let at = im.tail_start + 300;
    for (name, blocks) in [("one.img", TOTAL - 1), ("many.img", at)] {
        cut(&dir, name, &im.img, blocks);
        let warning = format!(
            "tet-host: warning: {name}: reading only what lies before the image's end: {}",
            sentence(blocks)
        );
        for (path, want) in [("/before.bin", &im.before), ("/dir/note.txt", &im.note)] {
            let (code, out, err) = run(&["cat", name, path], &dir);
            assert_eq!(code, 0, "{name} {path}: {err}");
            assert!(out == *want, "{name} {path}: not the bytes written");
            assert_eq!(err.lines().collect::<Vec<_>>(), [warning.as_str()]);
        }
        let (code, out, err) = run(&["ls", name, "/"], &dir);
        assert_eq!(code, 0, "{err}");
        let names: Vec<&str> = std::str::from_utf8(&out)
            .unwrap()
            .lines()
            .map(|l| l.rsplit(' ').next().unwrap())
            .collect();
        assert_eq!(names, ["before.bin", "dir", "tail.bin"]);
        assert!(err.contains(&warning), "{err}");
        let (code, out, err) = run(&["stat", "--json", name, "/tail.bin"], &dir);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["size"], im.tail.len());
        assert!(err.contains(&warning), "{err}");
        let (code, out, err) = run(&["info", "--json", name], &dir);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (v["total_blocks"].as_u64(), v["device_blocks"].as_u64()),
            (Some(TOTAL), Some(blocks))
        );
        assert!(err.contains(&warning), "{err}");
        let (code, out, _) = run(&["info", name], &dir);
        assert_eq!(code, 0);
        assert_eq!(
            text(out).lines().next().unwrap(),
            format!("image:        {name} ({TOTAL} blocks of 4096 bytes, the image only {blocks})")
        );
    }
    // One block short, /tail.bin ends long before the end.
    let (code, out, _) = run(&["cat", "one.img", "/tail.bin"], &dir);
    assert_eq!(code, 0);
    assert!(out == im.tail);
    // Cut through /tail.bin: the read fails naming the file and the block, exit 4; what
    // was written before it are the file's own first bytes.
    let (code, out, err) = run(&["cat", "many.img", "/tail.bin"], &dir);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(&format!(
            "tet-host: many.img: /tail.bin: {}",
            past_end(at, at)
        )),
        "{err}"
    );
    assert!(out.len() <= 300 * B && im.tail.starts_with(&out));
    let (code, _, err) = run(&["cat", "--json", "many.img", "/tail.bin"], &dir);
    assert_eq!(code, 4);
    assert!(err.contains(&past_end(at, at)), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn extract_restores_what_lies_before_the_end_and_names_what_does_not() {
    let dir = scratch("extract");
    let im = image();
    let at = im.tail_start + 300;
    cut(&dir, "many.img", &im.img, at);
    let (code, out, err) = run(&["extract", "--json", "many.img", "out"], &dir);
    assert_eq!(code, 4, "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["skipped"],
        serde_json::json!([format!("/tail.bin: not restored: {}", past_end(at, at))])
    );
    assert_eq!(v["files"], 2);
    assert!(std::fs::read(dir.join("out/before.bin")).unwrap() == im.before);
    assert!(std::fs::read(dir.join("out/dir/note.txt")).unwrap() == im.note);
    assert!(!dir.join("out/tail.bin").exists());
    assert!(err.contains(&sentence(at)), "{err}");
    // One block short, everything is restored.
    cut(&dir, "one.img", &im.img, TOTAL - 1);
    let (code, _, err) = run(&["extract", "one.img", "all"], &dir);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read(dir.join("all/tail.bin")).unwrap() == im.tail);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn writing_commands_refuse_a_shortened_image_and_leave_it_byte_identical() {
    let dir = scratch("write");
    let im = image();
    let at = im.tail_start + 300;
    for (name, blocks) in [("one.img", TOTAL - 1), ("many.img", at)] {
        let bytes = cut(&dir, name, &im.img, blocks);
        let refusal = format!(
            "tet-host: {name}: not written (an image cut short is only read): {}",
            sentence(blocks)
        );
        for args in [
            vec!["repair", "-y", name],
            vec!["repair", "-p", name],
            vec!["repair", "-y", "--json", name],
            vec!["repair", "-y", name, "-o", "copy.img"],
            vec!["replay", name],
            vec!["replay", "--force", name],
            vec!["tune", name, "--label", "renamed"],
        ] {
            let (code, out, err) = run(&args, &dir);
            assert_eq!(code, 4, "{args:?}: {err}");
            assert!(err.contains(&refusal), "{args:?}: {err}");
            if args.contains(&"--json") {
                let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
                assert_eq!(v["error"]["code"], "damaged");
                assert_eq!(v["error"]["exit"], 4);
            } else {
                assert!(out.is_empty(), "{args:?}: {}", text(out));
            }
            assert!(
                std::fs::read(dir.join(name)).unwrap() == bytes,
                "{args:?} wrote to {name}"
            );
            assert!(!dir.join("copy.img").exists(), "{args:?} made a copy");
        }
        // -n reports what the check finds, first the truncation, and writes nothing.
        let (code, out, _) = run(&["repair", "-n", name], &dir);
        assert_eq!(code, 4);
        assert_eq!(
            text(out).lines().next().unwrap(),
            format!("left[read-failed] {}", sentence(blocks))
        );
        assert!(std::fs::read(dir.join(name)).unwrap() == bytes);
    }
    // The file that lies before the cut reads as it did after all of that.
    let (code, out, _) = run(&["cat", "many.img", "/before.bin"], &dir);
    assert_eq!(code, 0);
    assert!(out == im.before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A committed, unreplayed transaction in a journal before the end is what the reading
/// commands show, as on the whole image; `--no-journal` shows the disk.
#[test]
fn the_journal_before_the_end_is_read_through() {
    let dir = scratch("journal");
    let mut im = image();
    let target = {
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&im.img), &mut bufs.data).unwrap();
        let i = fs.resolve(b"/dir/note.txt", &mut bufs).unwrap();
        match fs.map_block(&i, 0, &mut bufs.tree).unwrap() {
            Mapping::Mapped { physical, .. } => physical,
            Mapping::Hole => panic!("note.txt is mapped"),
        }
    };
    let mut newer = vec![0u8; B];
    newer[..im.note.len()].copy_from_slice(&im.note.to_ascii_uppercase());
    write_journal_txn(&mut im.img, 0, 0, 5, &[(target, newer, false)], true, true).unwrap();
    let at = im.tail_start + 300;
    cut(&dir, "many.img", &im.img, at);
    let (code, out, err) = run(&["cat", "many.img", "/dir/note.txt"], &dir);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, im.note.to_ascii_uppercase());
    let (code, out, _) = run(&["cat", "--no-journal", "many.img", "/dir/note.txt"], &dir);
    assert_eq!(code, 0);
    assert_eq!(out, im.note);
    let _ = std::fs::remove_dir_all(&dir);
}
