//! `tet-host` on cetrafs images: mkfs from a directory, then info, ls, cat, stat and
//! verify through the real binary; golden files for the deterministic outputs.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};

use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::testing::reseal;
use tet_core::block::MemDevice;
use tet_core::cetrafs::{Buffers, Fs};

mod common;
use common::{golden, run};

fn text(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap()
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tet-host-cetrafs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fixed image (no host timestamps), written by the library builder.
fn fixed_image(dir: &Path) {
    let mut b = ImageBuilder::new(Params {
        size_bytes: 8 << 20,
        bg_size_blocks: 512,
        label: "golden".into(),
        ..Params::default()
    });
    let d = b.mkdir(ImageBuilder::ROOT, b"etc", 0o755).unwrap();
    let f = b
        .add_file(
            d,
            b"motd",
            b"welcome\n".to_vec(),
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
    b.set_xattr(f, b"user.origin", b"golden").unwrap();
    b.set_meta(f, 0o640, 1000, 100, 1_700_000_000_000_000_000)
        .unwrap();
    let mut sparse = vec![0u8; 64 * 4096];
    sparse[63 * 4096] = b'!';
    b.add_file(
        ImageBuilder::ROOT,
        b"sparse.bin",
        sparse,
        Sparse::Holes,
        Placement::Contiguous,
    )
    .unwrap();
    std::fs::write(dir.join("golden.img"), b.build().unwrap()).unwrap();
}

/// The findings of `verify --json` and `repair -n --json` have the one shape both
/// formats share (`code`, `severity`, `field`, `offset`, `message`, `context`), pinned by
/// golden files: a wrong link count on /etc/motd and a block group free count off by
/// one, checksums resealed.
#[test]
fn golden_findings_json_for_a_damaged_image() {
    let dir = scratch("golden-damaged");
    fixed_image(&dir);
    let path = dir.join("golden.img");
    let mut img = std::fs::read(&path).unwrap();
    {
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
        let inode = fs.resolve(b"/etc/motd", &mut bufs).unwrap().lba() as usize * 4096;
        let bg = fs.superblock().raw().bg_table_start.get() as usize * 4096;
        img[inode + 28] = 5;
        img[bg + 64] ^= 2;
    }
    reseal(&mut img);
    std::fs::write(&path, &img).unwrap();
    let (code, out, _) = run(&["verify", "--json", "golden.img"], &dir);
    assert_eq!(code, 4);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let link = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "link-count")
        .unwrap();
    assert_eq!(link["severity"], "error");
    assert!(link["context"]["inode"].as_u64().unwrap() > 1, "{link}");
    assert_eq!(
        link["context"]["block"].as_u64().unwrap(),
        link["offset"].as_u64().unwrap() / 4096
    );
    golden("cetrafs_verify_damaged.json", &text(out));
    let (code, out, _) = run(&["repair", "-n", "--json", "golden.img"], &dir);
    assert_eq!(code, 4);
    golden("cetrafs_repair_n_damaged.json", &text(out));
    assert!(
        std::fs::read(&path).unwrap() == img,
        "-n wrote to the image"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn golden_outputs_for_a_fixed_image() {
    let dir = scratch("golden");
    fixed_image(&dir);
    let (code, out, _) = run(&["info", "golden.img"], &dir);
    assert_eq!(code, 0);
    golden("cetrafs_info.out", &text(out));
    let (code, out, _) = run(&["ls", "golden.img", "/"], &dir);
    assert_eq!(code, 0);
    golden("cetrafs_ls.out", &text(out));
    let (code, out, _) = run(&["stat", "golden.img", "/etc/motd"], &dir);
    assert_eq!(code, 0);
    golden("cetrafs_stat.out", &text(out));
    let (code, out, _) = run(&["stat", "--json", "golden.img", "/etc/motd"], &dir);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["xattrs"]["user.origin"], "golden");
    assert_eq!(
        (v["uid"].as_u64(), v["mode"].as_str()),
        (Some(1000), Some("640"))
    );
    let (code, out, _) = run(&["cat", "golden.img", "/sparse.bin"], &dir);
    assert_eq!(code, 0);
    assert_eq!(out.len(), 64 * 4096);
    assert_eq!(out[63 * 4096], b'!');
    assert!(out[..63 * 4096].iter().all(|b| *b == 0));
    let (code, out, _) = run(&["verify", "golden.img"], &dir);
    assert_eq!((code, text(out)), (0, "golden.img: clean\n".to_string()));
    let (code, out, _) = run(&["info", "--json", "golden.img"], &dir);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["format"], "cetrafs");
    assert_eq!(v["label"], "golden");
    assert_eq!(v["journals"][0]["state"], "CLEAN");
}

#[test]
fn mkfs_from_a_directory_round_trips() {
    let dir = scratch("mkfs");
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/b/deep.txt"), b"deep").unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("big.bin"), &big).unwrap();
    let f = std::fs::File::create(src.join("sparse")).unwrap();
    f.set_len(10 << 20).unwrap();
    drop(f);
    std::os::unix::fs::symlink("a/b/deep.txt", src.join("link")).unwrap();
    let xattr_ok = xattr_set(&src.join("big.bin"));
    let mkfs = |image: &str| {
        let args = [
            "mkfs",
            image,
            "--size",
            "64M",
            "--from",
            "src",
            "--zone-groups",
            "3",
            "--uuid",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
        ];
        let more = [
            "--nodes",
            "8",
            "--inodes",
            "256",
            "--block-group-size",
            "8M",
        ];
        run(&[&args[..], &more[..]].concat(), &dir)
    };
    let (code, _, err) = mkfs("img");
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run(&["verify", "img"], &dir);
    assert_eq!((code, text(out)), (0, "img: clean\n".to_string()));
    assert_eq!(run(&["cat", "img", "/big.bin"], &dir).1, big);
    assert_eq!(run(&["cat", "img", "a/b/deep.txt"], &dir).1, b"deep");
    // A symlink is kept as itself (never followed): its target, as stat shows it.
    let (_, out, _) = run(&["stat", "--json", "img", "/link"], &dir);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["target"], "a/b/deep.txt");
    let sparse = run(&["cat", "img", "/sparse"], &dir).1;
    assert_eq!(sparse.len(), 10 << 20);
    let v: serde_json::Value =
        serde_json::from_slice(&run(&["stat", "--json", "img", "/sparse"], &dir).1).unwrap();
    assert_eq!(v["blocks"], 0, "an all-zero file is stored as one hole");
    if xattr_ok {
        let v: serde_json::Value =
            serde_json::from_slice(&run(&["stat", "--json", "img", "/big.bin"], &dir).1).unwrap();
        assert_eq!(v["xattrs"]["user.test"], "yes");
    } else {
        eprintln!("SKIPPING xattr assertion: the scratch filesystem refuses user xattrs");
    }
    // Determinism: the same input and UUID give the same image; without --uuid every
    // image gets its own.
    let (code, _, _) = mkfs("img2");
    assert_eq!(code, 0);
    assert!(std::fs::read(dir.join("img")).unwrap() == std::fs::read(dir.join("img2")).unwrap());
    let info = |img: &str| -> serde_json::Value {
        serde_json::from_slice(&run(&["info", "--json", img], &dir).1).unwrap()
    };
    assert_eq!(info("img")["uuid"], "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
    assert_eq!(run(&["mkfs", "u1", "--size", "8M"], &dir).0, 0);
    assert_eq!(run(&["mkfs", "u2", "--size", "8M"], &dir).0, 0);
    assert_ne!(info("u1")["uuid"], info("u2")["uuid"]);
    // tune: the label and UUID change, the image stays clean, nothing else moves.
    let before = std::fs::read(dir.join("u1")).unwrap();
    let (code, _, err) = run(
        &[
            "tune",
            "u1",
            "--label",
            "renamed",
            "--uuid",
            "00112233445566778899aabbccddeeff",
        ],
        &dir,
    );
    assert_eq!(code, 0, "{err}");
    let after = std::fs::read(dir.join("u1")).unwrap();
    assert_eq!(info("u1")["label"], "renamed");
    assert_eq!(info("u1")["uuid"], "00112233-4455-6677-8899-aabbccddeeff");
    assert_eq!(run(&["verify", "u1"], &dir).0, 0);
    // Only the primary's sector and each copy's changed, and every copy changed.
    let copies: Vec<usize> = info("u1")["superblock_copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["state"], "ok", "{c}");
            usize::try_from(c["block"].as_u64().unwrap()).unwrap() * 4096 + 512
        })
        .collect();
    assert_eq!(
        copies.len(),
        2,
        "an 8 MiB image has one block group: two copies"
    );
    let in_sector = |i: usize| i < 512 || copies.iter().any(|c| (*c..*c + 512).contains(&i));
    let changed: Vec<usize> = (0..before.len())
        .filter(|i| before[*i] != after[*i])
        .collect();
    assert!(
        changed.iter().all(|i| in_sector(*i)),
        "tune wrote outside the superblock sectors: {:?}",
        changed.iter().find(|i| !in_sector(**i))
    );
    for c in &copies {
        assert!(
            changed.iter().any(|i| (*c..*c + 512).contains(i)),
            "copy at byte {c} unchanged"
        );
    }
    assert_eq!(info("u1")["generation"], 1);
    let long = "x".repeat(65);
    assert_eq!(run(&["tune", "u1", "--label", &long], &dir).0, 16);
    assert_eq!(run(&["tune", "u1"], &dir).0, 16);
    let v: serde_json::Value =
        serde_json::from_slice(&run(&["info", "--json", "img"], &dir).1).unwrap();
    assert_eq!(v["zone_groups"].as_array().unwrap().len(), 3);
    assert_eq!(v["node_capacity"], 8);
    // Errors: a missing path is a request the image cannot satisfy (8); too small an
    // image and a bad size are usage errors.
    assert_eq!(run(&["cat", "img", "/nope"], &dir).0, 8);
    assert_eq!(run(&["mkfs", "tiny", "--size", "64K"], &dir).0, 16);
    assert_eq!(run(&["mkfs", "x", "--size", "lots"], &dir).0, 16);
    // Corruption is found and located.
    let mut img = std::fs::read(dir.join("img")).unwrap();
    img[4096 + 20] ^= 1;
    std::fs::write(dir.join("bad"), &img).unwrap();
    let (code, out, _) = run(&["verify", "-q", "bad"], &dir);
    assert_eq!(code, 4);
    let line = text(out);
    assert!(
        line.starts_with("bad: 1 error(s), 0 warning(s); first: error[checksum] zone_group.hot_checksum (block 1, byte 0x1038) checksum mismatch: stored 0x"),
        "{line}"
    );
}

fn xattr_set(path: &Path) -> bool {
    xattr::set(path, "user.test", b"yes").is_ok()
}

/// Hard links stay one inode with nlink 2; binary xattr values are shown whole in hex;
/// `cat --json` streams text (a multi-byte character straddling its 64 KiB pieces) and
/// binary files; too many zone groups is a usage error naming the largest that fits.
#[test]
fn hard_links_binary_xattrs_streamed_cat_and_zone_groups() {
    let dir = scratch("hardening");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("one"), b"shared").unwrap();
    std::fs::hard_link(src.join("one"), src.join("two")).unwrap();
    // 65535 ASCII bytes then "é" (2 bytes): the character spans the first piece's end.
    let mut text = vec![b'a'; 65535];
    text.extend_from_slice("é and more".as_bytes());
    std::fs::write(src.join("text"), &text).unwrap();
    std::fs::write(src.join("bin"), [0xffu8, 0x00, 0x10]).unwrap();
    let xattr_ok = xattr::set(src.join("bin"), "user.raw", &[0xff, 0x01]).is_ok();
    let (code, _, err) = run(&["mkfs", "img", "--size", "8M", "--from", "src"], &dir);
    assert_eq!(code, 0, "{err}");
    assert_eq!(run(&["verify", "img"], &dir).0, 0);
    let stat = |p: &str| -> serde_json::Value {
        serde_json::from_slice(&run(&["stat", "--json", "img", p], &dir).1).unwrap()
    };
    let (a, b) = (stat("/one"), stat("/two"));
    assert_eq!(a["inode"], b["inode"]);
    assert_eq!(a["nlink"], 2);
    if xattr_ok {
        assert_eq!(stat("/bin")["xattrs"]["user.raw"], "0xff01");
    }
    let cat: serde_json::Value =
        serde_json::from_slice(&run(&["cat", "--json", "img", "/text"], &dir).1).unwrap();
    assert_eq!(cat["text"].as_str().unwrap().as_bytes(), &text[..]);
    assert_eq!(cat["size"], text.len());
    let cat: serde_json::Value =
        serde_json::from_slice(&run(&["cat", "--json", "img", "/bin"], &dir).1).unwrap();
    assert_eq!(cat["hex"], "ff0010");
    let (code, _, err) = run(&["mkfs", "x", "--size", "8M", "--zone-groups", "9"], &dir);
    assert_eq!(code, 16);
    let err = text_of(err);
    assert!(err.contains("--zone-groups 9 is more than the"), "{err}");
}

fn text_of(b: impl Into<Vec<u8>>) -> String {
    String::from_utf8(b.into()).unwrap()
}

/// A device whose reads past block 0 fail, as a disk with bad sectors does.
struct FailingDevice<'a>(MemDevice<'a>);

impl tet_core::block::BlockDevice for FailingDevice<'_> {
    fn block_count(&self) -> u64 {
        self.0.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut tet_core::block::Block) -> tet_core::Result<()> {
        if lba == 0 {
            return self.0.read_block(lba, buf);
        }
        Err(tet_core::Error::new(
            tet_core::ErrorKind::Io,
            "block read",
            lba.saturating_mul(4096),
        ))
    }
}

/// An I/O error while mounting is operational (exit 8), not damage (4): the exit code
/// comes from the error's category.
#[test]
fn an_io_error_while_mounting_exits_8() {
    use tet_core::block::BlockDevice;
    use tet_host::Exit;
    let dir = scratch("io-mount");
    fixed_image(&dir);
    let path = dir.join("golden.img");
    let img = std::fs::read(&path).unwrap();
    let dev = FailingDevice(MemDevice::new(&img));
    assert_eq!(dev.block_count(), 2048);
    let out = tet_host::Output::Human;
    assert_eq!(
        tet_host::cetrafs::read::ls(&path, &dev, b"/", out, true, Default::default()),
        Exit::Operational
    );
    assert_eq!(
        tet_host::cetrafs::info::info(&path, &dev, out),
        Exit::Operational
    );
    assert_eq!(Exit::Operational.code(), 8);
    // The same image read whole mounts and lists.
    let whole = MemDevice::new(&img);
    assert_eq!(
        tet_host::cetrafs::read::ls(&path, &whole, b"/", out, true, Default::default()),
        Exit::Clean
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ls -l` reads like `ls -l` (golden), `ls -R` lists every directory below under its
/// path, in text and JSON.
#[test]
fn long_and_recursive_listings() {
    let dir = scratch("ls-l");
    fixed_image(&dir);
    let (code, out, err) = run(&["ls", "-l", "golden.img", "/etc"], &dir);
    assert_eq!(code, 0, "{err}");
    let out = text(out);
    assert!(
        out.contains("-rw-r-----   1   1000    100            8 2023-11-14 22:13  motd"),
        "{out}"
    );
    golden("cetrafs_ls_l.out", &out);
    let (code, out, _) = run(&["ls", "-R", "golden.img"], &dir);
    assert_eq!(code, 0);
    let out = text(out);
    assert!(out.starts_with("/:\n"), "{out}");
    assert!(out.contains("\n\n/etc:\n"), "{out}");
    let (code, out, _) = run(&["ls", "-R", "-l", "--json", "golden.img"], &dir);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let motd = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == "/etc/motd")
        .unwrap();
    assert_eq!(
        (motd["uid"].as_u64(), motd["gid"].as_u64()),
        (Some(1000), Some(100))
    );
    assert_eq!(motd["mtime_ns"], 1_700_000_000_000_000_000u64);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `mkfs --from` a tree with more entries than the image has inodes: the message says
/// how many the tree holds and what to pass, exit 16 (the settings), and no image is
/// left behind.
#[test]
fn mkfs_out_of_inodes_says_how_many_the_tree_needs() {
    let dir = scratch("out-of-inodes");
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    for k in 0..10 {
        std::fs::write(tree.join(format!("f{k}")), b"x").unwrap();
    }
    std::fs::write(tree.join("sub/g"), b"y").unwrap();
    let (code, _, err) = run(
        &[
            "mkfs",
            "small.img",
            "--size",
            "4M",
            "--inodes",
            "8",
            "--from",
            "tree",
        ],
        &dir,
    );
    assert_eq!(code, 16, "{err}");
    assert!(
        err.contains("out of inodes: tree holds 12 entries, the image 8 inodes")
            && err.contains("pass --inodes 14 or more"),
        "{err}"
    );
    assert!(!dir.join("small.img").exists());
    let (code, _, err) = run(
        &[
            "mkfs",
            "small.img",
            "--size",
            "4M",
            "--inodes",
            "14",
            "--from",
            "tree",
        ],
        &dir,
    );
    assert_eq!(code, 0, "{err}");
}

/// An image with more findings than a check keeps (its inode bitmap zeroed under 10,100
/// files): verify lists the first 10,000, says how many more there are, counts them
/// all, and `--json` carries the number not listed.
#[test]
fn verify_lists_the_first_findings_and_counts_the_rest() {
    let dir = scratch("many-findings");
    let mut b = ImageBuilder::new(Params {
        size_bytes: 64 << 20,
        inodes: 10_240,
        ..Params::default()
    });
    for k in 0..10_100u32 {
        b.add_file(
            ImageBuilder::ROOT,
            format!("f{k}").as_bytes(),
            Vec::new(),
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
    }
    let mut img = b.build().unwrap();
    let ib = {
        let fs = Fs::open(MemDevice::new(&img), &mut Buffers::new().data).unwrap();
        fs.superblock().raw().inode_bitmap_start.get() as usize * 4096
    };
    img[ib..ib + 4096].fill(0);
    std::fs::write(dir.join("many.img"), &img).unwrap();
    let (code, out, _) = run(&["verify", "many.img"], &dir);
    assert_eq!(code, 4);
    let out = String::from_utf8(out).unwrap();
    let listed = out.lines().filter(|l| l.starts_with("error[")).count();
    assert_eq!(listed, 10_000);
    // 10,101 inodes in use (the root too), one finding each, and the padding bits.
    assert!(
        out.contains("more findings not listed"),
        "{}",
        &out[out.len() - 300..]
    );
    let (_, out, _) = run(&["verify", "--json", "many.img"], &dir);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let not_listed = v["findings_not_listed"].as_u64().unwrap();
    assert_eq!(v["findings"].as_array().unwrap().len(), 10_000);
    assert_eq!(v["errors"].as_u64().unwrap(), 10_000 + not_listed);
    assert!(not_listed >= 101, "{not_listed}");
}

/// The block number of byte `at` of inode `ino`'s block.
fn inode_byte(img: &[u8], ino: u64, at: usize) -> usize {
    use zerocopy::FromBytes;
    let (sb, _) = tet_core::cetrafs::raw::RawSuperblock::read_from_prefix(img).unwrap();
    (sb.inode_table_start.get() + ino) as usize * 4096 + at
}

#[test]
fn a_shared_block_names_both_owners_by_path() {
    let dir = scratch("shared");
    std::fs::create_dir_all(dir.join("src/json")).unwrap();
    std::fs::create_dir_all(dir.join("src/special")).unwrap();
    std::fs::write(dir.join("src/json/scanner.py"), vec![b's'; 9000]).unwrap();
    std::fs::write(dir.join("src/special/mid.bin"), vec![b'm'; 5000]).unwrap();
    let (code, _, err) = run(&["mkfs", "img", "--size", "8M", "--from", "src"], &dir);
    assert_eq!(code, 0, "{err}");
    let stat = |p: &str| -> serde_json::Value {
        serde_json::from_slice(&run(&["stat", "--json", "img", p], &dir).1).unwrap()
    };
    let (a, b) = (stat("/json/scanner.py"), stat("/special/mid.bin"));
    let (a_ino, b_ino) = (a["inode"].as_u64().unwrap(), b["inode"].as_u64().unwrap());
    let shared = a["extents"][0]["physical"].as_u64().unwrap();
    // mid.bin's one extent (inline slot 0, physical at byte 116 + 8) now points at
    // scanner.py's first block; checksums mended, so only the ownership is wrong.
    let mut img = std::fs::read(dir.join("img")).unwrap();
    let at = inode_byte(&img, b_ino, 116 + 8);
    img[at..at + 8].copy_from_slice(&shared.to_le_bytes());
    reseal(&mut img);
    std::fs::write(dir.join("img"), &img).unwrap();
    let (code, out, _) = run(&["verify", "img"], &dir);
    let out = text(out);
    assert_eq!(code, 4, "{out}");
    // Whichever inode the scan met second is the one reported; the other is named.
    let (first, second) = if a_ino < b_ino {
        (
            format!("/json/scanner.py (inode {a_ino})"),
            format!("/special/mid.bin (inode {b_ino})"),
        )
    } else {
        (
            format!("/special/mid.bin (inode {b_ino})"),
            format!("/json/scanner.py (inode {a_ino})"),
        )
    };
    let line = out
        .lines()
        .find(|l| l.contains("[block-shared]"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(&format!("{second}: ")), "{line}");
    assert!(
        line.contains(&format!("shares block {shared} with {first}")),
        "{line}"
    );
    let (_, out, _) = run(&["verify", "--json", "img"], &dir);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "block-shared")
        .unwrap();
    let first_ino = a_ino.min(b_ino);
    assert_eq!(
        f["context"]["other_inodes"],
        serde_json::json!([first_ino]),
        "{f}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
