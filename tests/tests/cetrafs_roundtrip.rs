//! cetrafs: images built by `tet_alloc::cetrafs::mkfs` read back byte-identical through the
//! core reader, including sparse files, uninitialized extents, multi-block directories,
//! depth-2 extent trees, xattrs and symlinks.

use std::ops::ControlFlow;

use proptest::prelude::*;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_core::block::{Block, MemDevice};
use tet_core::cetrafs::{Buffers, Fs};

fn open(img: &[u8]) -> Fs<MemDevice<'_>> {
    let mut b = Buffers::new();
    Fs::open(MemDevice::new(img), &mut b.data).unwrap()
}

/// Reads a whole file with two buffers, and checks that the one-block paths (resolve,
/// read, and stream, which bootloaders use) see the same bytes.
fn read_all(fs: &Fs<MemDevice<'_>>, path: &str) -> Vec<u8> {
    let mut b = Buffers::new();
    let ino = fs.resolve(path.as_bytes(), &mut b).unwrap();
    let mut out = vec![0u8; ino.size() as usize];
    let n = fs.read(&ino, 0, &mut out, &mut b).unwrap();
    assert_eq!(n, out.len());

    let mut one: Block = [0; 4096];
    let ino1 = fs.resolve(path.as_bytes(), &mut one).unwrap();
    assert_eq!(ino1.ino(), ino.ino(), "{path}: one-block resolve");
    let mut out1 = vec![0u8; out.len()];
    assert_eq!(fs.read(&ino1, 0, &mut out1, &mut one).unwrap(), out.len());
    assert!(out1 == out, "{path}: one-block read");
    let mut streamed = Vec::with_capacity(out.len());
    let mut calls = 0usize;
    let flow = fs
        .stream(&ino1, &mut one, |bytes| {
            assert!(!bytes.is_empty() && bytes.len() <= 4096);
            streamed.extend_from_slice(bytes);
            calls += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(flow, ControlFlow::Continue(()));
    assert!(streamed == out, "{path}: one-block stream");
    assert_eq!(calls, out.len().div_ceil(4096), "{path}: a call per block");
    out
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

#[test]
fn small_tree_round_trips() {
    let mut b = ImageBuilder::new(Params::default());
    let docs = b.mkdir(ImageBuilder::ROOT, b"docs", 0o755).unwrap();
    let hello = b
        .add_file(
            docs,
            b"hello.txt",
            b"hello, cetrafs\n".to_vec(),
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
    b.set_xattr(hello, b"user.lang", b"en").unwrap();
    b.add_file(
        ImageBuilder::ROOT,
        b"empty",
        Vec::new(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    b.add_symlink(ImageBuilder::ROOT, b"link", b"docs/hello.txt")
        .unwrap();
    let img = b.build().unwrap();
    assert_eq!(img, b.build().unwrap(), "mkfs is deterministic");
    let fs = open(&img);
    assert_eq!(read_all(&fs, "/docs/hello.txt"), b"hello, cetrafs\n");
    assert_eq!(
        read_all(&fs, "docs/../docs/./hello.txt"),
        b"hello, cetrafs\n"
    );
    assert_eq!(read_all(&fs, "/empty"), b"");
    assert_eq!(read_all(&fs, "/link"), b"docs/hello.txt");
    let mut bufs = Buffers::new();
    let ino = fs.resolve(b"/docs/hello.txt", &mut bufs).unwrap();
    let mut v = [0u8; 8];
    let n = fs.xattr(&ino, b"user.lang", &mut v, &mut bufs).unwrap();
    assert_eq!(&v[..n], b"en");
    let root = fs.resolve(b"/", &mut bufs).unwrap();
    let mut names = Vec::new();
    fs.read_dir(&root, &mut bufs, |e| {
        names.push(String::from_utf8(e.name().to_vec()).unwrap());
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(names, ["docs", "empty", "link"]);
    assert_eq!(
        fs.resolve(b"/nope", &mut bufs).unwrap_err().kind,
        tet_core::ErrorKind::NotFound
    );
}

#[test]
fn deep_trees_sparse_and_uninit() {
    for unordered in [false, true] {
        let p = Params {
            unordered,
            ..Params::default()
        };
        let mut b = ImageBuilder::new(p);
        // 1100 single-block extents: more than 4 × 254, so the tree has depth 2.
        let frag = pattern(1100 * 4096, 7);
        b.add_file(
            ImageBuilder::ROOT,
            b"frag",
            frag.clone(),
            Sparse::Dense,
            Placement::Fragmented,
        )
        .unwrap();
        let mut sparse = vec![0u8; 40 * 4096];
        sparse[5 * 4096..5 * 4096 + 100].copy_from_slice(&pattern(100, 1));
        sparse[39 * 4096 + 17] = 9;
        b.add_file(
            ImageBuilder::ROOT,
            b"holes",
            sparse.clone(),
            Sparse::Holes,
            Placement::Contiguous,
        )
        .unwrap();
        b.add_file(
            ImageBuilder::ROOT,
            b"uninit",
            sparse.clone(),
            Sparse::Uninit,
            Placement::Contiguous,
        )
        .unwrap();
        let big = b.mkdir(ImageBuilder::ROOT, b"big", 0o700).unwrap();
        for i in 0..100 {
            b.add_file(
                big,
                format!("f{i:03}").as_bytes(),
                pattern(i, i as u8),
                Sparse::Dense,
                Placement::Contiguous,
            )
            .unwrap();
        }
        let img = b.build().unwrap();
        let fs = open(&img);
        let mut bufs = Buffers::new();
        let f = fs.resolve(b"/frag", &mut bufs).unwrap();
        assert_eq!(f.depth(), 2);
        assert_eq!(read_all(&fs, "/frag"), frag);
        assert_eq!(read_all(&fs, "/holes"), sparse);
        assert_eq!(read_all(&fs, "/uninit"), sparse);
        // Reads at odd offsets across block boundaries.
        let mut out = vec![0u8; 10_000];
        let n = fs.read(&f, 4090, &mut out, &mut bufs).unwrap();
        assert_eq!(&out[..n], &frag[4090..14_090]);
        // A large unaligned read takes the one-pass extent sweep.
        let mut big = vec![0xEEu8; 700_001];
        let n = fs.read(&f, 12_345, &mut big, &mut bufs).unwrap();
        assert_eq!(&big[..n], &frag[12_345..712_346]);
        let h = fs.resolve(b"/holes", &mut bufs).unwrap();
        let mut hb = vec![0xEEu8; 39 * 4096];
        let n = fs.read(&h, 4096 + 7, &mut hb, &mut bufs).unwrap();
        assert_eq!(&hb[..n], &sparse[4096 + 7..]);
        for i in [0usize, 14, 15, 99] {
            assert_eq!(read_all(&fs, &format!("/big/f{i:03}")), pattern(i, i as u8));
        }
        let d = fs.resolve(b"/big", &mut bufs).unwrap();
        assert_eq!(d.size(), 7 * 4096);
    }
}

#[derive(Debug, Clone)]
enum Entry {
    File {
        len: usize,
        seed: u8,
        sparse: u8,
        frag: bool,
    },
    Dir {
        children: usize,
    },
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn random_trees_round_trip(entries in proptest::collection::vec(
        prop_oneof![
            (prop_oneof![0usize..20_000, 0usize..3_500_000], any::<u8>(), 0u8..3, any::<bool>())
                .prop_map(|(len, seed, sparse, frag)| Entry::File { len, seed, sparse, frag }),
            (0usize..80).prop_map(|children| Entry::Dir { children }),
        ], 1..10), unordered in any::<bool>(), deep_blocks in 1017usize..1200) {
        let params = Params { unordered, size_bytes: 192 << 20, inodes: 2048, ..Params::default() };
        let mut b = ImageBuilder::new(params);
        let mut expect: Vec<(String, Vec<u8>)> = Vec::new();
        // Always one file fragmented past 4 × 254 extents, so its tree has depth 2.
        let deep = pattern(deep_blocks * 4096, 3);
        b.add_file(ImageBuilder::ROOT, b"deep", deep.clone(), Sparse::Dense, Placement::Fragmented).unwrap();
        expect.push(("/deep".into(), deep));
        for (i, e) in entries.iter().enumerate() {
            match e {
                Entry::File { len, seed, sparse, frag } => {
                    // Zero runs every 3rd block so the sparse modes have something to do.
                    let mut data = pattern(*len, *seed);
                    for (k, c) in data.chunks_mut(4096).enumerate() {
                        if k % 3 == 1 { c.fill(0); }
                    }
                    let mode = [Sparse::Dense, Sparse::Holes, Sparse::Uninit][*sparse as usize];
                    let pl = if *frag { Placement::Fragmented } else { Placement::Contiguous };
                    b.add_file(ImageBuilder::ROOT, format!("file{i}").as_bytes(), data.clone(), mode, pl).unwrap();
                    expect.push((format!("/file{i}"), data));
                }
                Entry::Dir { children } => {
                    let d = b.mkdir(ImageBuilder::ROOT, format!("dir{i}").as_bytes(), 0o755).unwrap();
                    for c in 0..*children {
                        let data = pattern(c * 10, c as u8);
                        b.add_file(d, format!("c{c}").as_bytes(), data.clone(), Sparse::Dense, Placement::Contiguous).unwrap();
                        expect.push((format!("/dir{i}/c{c}"), data));
                    }
                }
            }
        }
        let img = b.build().unwrap();
        let fs = open(&img);
        prop_assert_eq!(fs.resolve(b"/deep", &mut Buffers::new()).unwrap().depth(), 2);
        for (path, data) in &expect {
            prop_assert_eq!(&read_all(&fs, path), data, "{}", path);
        }
    }
}

/// Counts block reads, to show what the one-block paths cost.
struct Counting<'a> {
    dev: MemDevice<'a>,
    reads: std::cell::Cell<u64>,
}

impl tet_core::block::BlockDevice for Counting<'_> {
    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut Block) -> tet_core::Result<()> {
        self.reads.set(self.reads.get() + 1);
        self.dev.read_block(lba, buf)
    }
}

#[test]
fn one_block_paths_match_two_and_skip_holes() {
    let mut b = ImageBuilder::new(Params::default());
    let frag = pattern(1100 * 4096 + 123, 7);
    b.add_file(
        ImageBuilder::ROOT,
        b"frag",
        frag.clone(),
        Sparse::Dense,
        Placement::Fragmented,
    )
    .unwrap();
    // A 4 GiB-class sparse file would take a million callbacks; 4000 holes make the
    // point: two data blocks, no per-hole lookups.
    let mut sparse = vec![0u8; 4000 * 4096];
    sparse[5 * 4096] = 1;
    sparse[3999 * 4096 + 17] = 9;
    let holes = b
        .add_file(
            ImageBuilder::ROOT,
            b"holes",
            sparse.clone(),
            Sparse::Holes,
            Placement::Contiguous,
        )
        .unwrap();
    b.set_xattr(holes, b"user.crc", b"abc").unwrap();
    let img = b.build().unwrap();
    let dev = Counting {
        dev: MemDevice::new(&img),
        reads: 0.into(),
    };
    let mut one: Block = [0; 4096];
    let fs = Fs::open(&dev, &mut one).unwrap();
    let mut two = Buffers::new();

    // Partial reads at block edges agree between one block and two.
    let f1 = fs.resolve(b"/frag", &mut one).unwrap();
    assert_eq!(f1.depth(), 2);
    for (off, len) in [
        (0, 1),
        (4095, 2),
        (4096 * 17 + 5, 70_000),
        (4096 * 1099, 9000),
    ] {
        let mut a = vec![0u8; len];
        let mut c = vec![0u8; len];
        let na = fs.read(&f1, off as u64, &mut a, &mut one).unwrap();
        let nc = fs.read(&f1, off as u64, &mut c, &mut two).unwrap();
        let end = (off + len).min(frag.len());
        assert_eq!((na, nc), (end - off, end - off), "read at {off}");
        assert!(
            a[..na] == frag[off..end] && c[..nc] == frag[off..end],
            "at {off}"
        );
    }

    // A stream that breaks stops at once.
    let mut calls = 0;
    let flow = fs
        .stream(&f1, &mut one, |_| {
            calls += 1;
            ControlFlow::Break(())
        })
        .unwrap();
    assert_eq!((flow, calls), (ControlFlow::Break(()), 1));

    // Holes are mapped a run at a time: the inode, then only the two data blocks.
    let h = fs.resolve(b"/holes", &mut one).unwrap();
    assert_eq!(h.depth(), 0);
    let before = dev.reads.get();
    let mut got = Vec::new();
    let flow = fs
        .stream(&h, &mut one, |bytes| {
            got.extend_from_slice(bytes);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert!(flow.is_continue() && got == sparse);
    assert_eq!(dev.reads.get() - before, 2, "two data blocks read");

    // Xattrs through one block.
    let mut v = [0u8; 8];
    let n = fs.xattr(&h, b"user.crc", &mut v, &mut one).unwrap();
    assert_eq!(&v[..n], b"abc");
}

#[test]
fn open_for_read_skips_only_the_group_tables() {
    let mut b = ImageBuilder::new(Params::default());
    b.add_file(
        ImageBuilder::ROOT,
        b"f",
        pattern(5000, 3),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    let mut img = b.build().unwrap();
    // The zone group table (block 1) loses its magic: the full mount refuses the image,
    // the read-only mount of a bootloader does not look there and reads the file.
    img[4096] ^= 0xFF;
    let mut one: Block = [0; 4096];
    let e = Fs::open(MemDevice::new(&img), &mut one).unwrap_err();
    assert_eq!((e.what, e.offset), ("zone_group.magic", 4096));
    let fs = Fs::open_for_read(MemDevice::new(&img), &mut one).unwrap();
    let ino = fs.resolve(b"/f", &mut one).unwrap();
    let mut out = vec![0u8; 5000];
    assert_eq!(fs.read(&ino, 0, &mut out, &mut one).unwrap(), 5000);
    assert!(out == pattern(5000, 3));
    // The superblock is still checked.
    img[0] ^= 0xFF;
    let e = Fs::open_for_read(MemDevice::new(&img), &mut one).unwrap_err();
    assert_eq!((e.what, e.offset), ("superblock.magic", 0));
}

#[test]
fn the_overlay_reads_only_the_flag_block_of_a_clean_journal() {
    let img = ImageBuilder::new(Params::default()).build().unwrap();
    let dev = Counting {
        dev: MemDevice::new(&img),
        reads: 0.into(),
    };
    let mut one: Block = [0; 4096];
    let fs = Fs::open_for_read(&dev, &mut one).unwrap();
    let rows = u64::from(fs.superblock().node_capacity());
    assert!(rows > 1 && fs.journal_slots() > 1);
    let before = dev.reads.get();
    let mut table = [tet_core::cetrafs::Committed::EMPTY; 4];
    let overlay = fs.overlay(&mut table, &mut one).unwrap();
    assert!(overlay.entries().is_empty());
    // One read per journal: its flag says clean, and a clean journal holds nothing a
    // reader must see (its slots are history; the checker reads them, a boot does not).
    assert_eq!(dev.reads.get() - before, rows);
}
