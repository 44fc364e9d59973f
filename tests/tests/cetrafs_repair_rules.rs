//! Repair's two rules over a populated image (docs/cetrafs.md section 14): no block a
//! readable inode in use maps is ever marked free, and `-p` never drops a name. Each
//! damage is applied to a fresh copy; after `-p` and after `-y` the rules hold and every
//! file whose own inode, tree, data and naming entries were not damaged reads back
//! byte-identically at its path (content, mode, owner, times, xattrs, link target).

use std::collections::{BTreeMap, BTreeSet};

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::repair::{repair, Mode, RepairOptions, RepairOutcome};
use tet_alloc::cetrafs::testing::reseal;
use tet_core::block::{MemDevice, MemDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::check::{check_inode, InodeVisitor, Severity};
use tet_core::cetrafs::raw::{RawExtent, RawInode, RawSuperblock};
use tet_core::cetrafs::{
    bitmap_blocks, Buffers, Code, DirEntry, Extent, Finding, Fs, BITS_PER_BITMAP_BLOCK,
};
use zerocopy::FromBytes;

const B: usize = BLOCK_SIZE;
const ROOT: u64 = 1;

/// A small seeded generator (xorshift), so every run damages the same bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The populated image: 520 regular files in nested directories (one directory of 70
/// entries, five blocks), hard links, symlinks, xattrs, an empty file, a sparse file,
/// fragmented files with depth-1 and depth-2 trees, owners and times set.
fn populated() -> Vec<u8> {
    let p = Params {
        size_bytes: 32 << 20,
        bg_size_blocks: 2048,
        inodes: 768,
        nodes: 2,
        journal_blocks: 33,
        pending_slots: 16,
        ..Params::default()
    };
    let mut b = ImageBuilder::new(p);
    let mut rng = Rng(0x5eed_cafe);
    let big = b.mkdir(ROOT, b"big", 0o755).unwrap();
    let mut files = Vec::new();
    for k in 0..70u32 {
        let len = 1 + rng.below(3 * B as u64) as usize;
        let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ k) as u8).collect();
        let ino = b
            .add_file(
                big,
                format!("f{k:03}").as_bytes(),
                data,
                Sparse::Dense,
                Placement::Contiguous,
            )
            .unwrap();
        files.push(ino);
    }
    for d in 0..10u32 {
        let dir = b.mkdir(ROOT, format!("d{d}").as_bytes(), 0o750).unwrap();
        let sub = b.mkdir(dir, b"sub", 0o700).unwrap();
        for k in 0..46u32 {
            let at = if k % 3 == 0 { sub } else { dir };
            let len = rng.below(2 * B as u64) as usize;
            let data: Vec<u8> = (0..len).map(|i| (i as u32 * 7 + d + k) as u8).collect();
            let ino = b
                .add_file(
                    at,
                    format!("g{k}").as_bytes(),
                    data,
                    Sparse::Dense,
                    Placement::Contiguous,
                )
                .unwrap();
            b.set_meta(ino, 0o640, 1000 + d, 100 + k, 1_700_000_000 + u64::from(k))
                .unwrap();
            files.push(ino);
        }
    }
    for (n, ino) in files.iter().enumerate().step_by(17) {
        b.set_xattr(*ino, b"user.tag", format!("t{n}").as_bytes())
            .unwrap();
        b.set_xattr(*ino, b"trusted.x", b"yz").unwrap();
    }
    for (n, ino) in files.iter().enumerate().step_by(29) {
        b.add_link(ROOT, format!("hard{n}").as_bytes(), *ino)
            .unwrap();
    }
    b.add_symlink(ROOT, b"to_big", b"big/f001").unwrap();
    b.add_symlink(big, b"up", b"../d3/g1").unwrap();
    b.add_file(
        ROOT,
        b"empty",
        Vec::new(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    let mut sparse = vec![0u8; 9 * B];
    sparse[..100].fill(7);
    sparse[6 * B..6 * B + 5].fill(9);
    b.add_file(
        ROOT,
        b"sparse",
        sparse,
        Sparse::Holes,
        Placement::Contiguous,
    )
    .unwrap();
    let frag: Vec<u8> = (0..12 * B).map(|i| (i / 97) as u8).collect();
    b.add_file(ROOT, b"frag", frag, Sparse::Dense, Placement::Fragmented)
        .unwrap();
    let deep: Vec<u8> = (0..1100 * B).map(|i| (i / 4099) as u8).collect();
    b.add_file(ROOT, b"deep", deep, Sparse::Dense, Placement::Fragmented)
        .unwrap();
    b.build().unwrap()
}

fn open(img: &[u8]) -> Option<Fs<MemDevice<'_>>> {
    Fs::open(MemDevice::new(img), &mut [0u8; B]).ok()
}

fn sb(img: &[u8]) -> RawSuperblock {
    RawSuperblock::read_from_bytes(&img[..424]).unwrap()
}

/// What an inode maps: data extents, tree blocks, its xattr block, and for a directory
/// its entries with where they are.
#[derive(Default)]
struct Mapped {
    blocks: Vec<u64>,
    /// The first data block of each extent.
    data: Vec<u64>,
    entries: Vec<(Vec<u8>, u64, u64, usize)>,
}

impl InodeVisitor for Mapped {
    fn tree_block(&mut self, _: u64, lba: u64) {
        self.blocks.push(lba);
    }
    fn extent(&mut self, _: u64, e: &Extent, _: u64, _: usize) {
        self.blocks
            .extend(e.physical..e.physical + u64::from(e.len));
        self.data.push(e.physical);
    }
    fn dir_entry(&mut self, _: u64, e: &DirEntry, lba: u64, off: usize) {
        self.entries.push((e.name().to_vec(), e.inode, lba, off));
    }
    fn xattr_block(&mut self, _: u64, lba: u64) {
        self.blocks.push(lba);
    }
}

/// The inode's blocks and entries as far as they read (`None`: the inode does not).
fn mapped(fs: &Fs<MemDevice<'_>>, ino: u64) -> Option<Mapped> {
    let mut m = Mapped::default();
    let mut bufs = Buffers::new();
    check_inode(fs, ino, &mut bufs, &mut |_: &Finding| {}, &mut m)?;
    Some(m)
}

/// Whether data block `lba` is marked used in its data bitmap.
fn marked(img: &[u8], lba: u64) -> bool {
    let s = sb(img);
    let bg = (lba - s.bg_regions_start.get()) / s.bg_size_blocks.get();
    let start = s.bg_regions_start.get() + bg * s.bg_size_blocks.get();
    let len = s.bg_size_blocks.get().min(s.total_blocks.get() - start);
    let i = lba - start - 1 - bitmap_blocks(len);
    let at = (start + 1 + i / BITS_PER_BITMAP_BLOCK) as usize * B;
    let bit = i % BITS_PER_BITMAP_BLOCK;
    img[at + (bit / 8) as usize] & (1 << (bit % 8)) != 0
}

/// The block rule: every block a readable inode maps is marked used. Returns the first
/// block that is not, with its inode.
fn unmarked_block(img: &[u8]) -> Option<(u64, u64)> {
    let fs = open(img)?;
    for ino in 1..fs.superblock().inode_count() {
        if let Some(m) = mapped(&fs, ino) {
            if let Some(b) = m.blocks.iter().find(|b| !marked(img, **b)) {
                return Some((ino, *b));
            }
        }
    }
    None
}

/// A file as a user sees it at its path.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: u64,
    content: Vec<u8>,
    xattrs: Option<Vec<u8>>,
}

/// A named file of the clean image: its path, what it reads as, and what it depends on
/// (blocks whole, and the byte ranges of the entries naming it and its directories).
struct Known {
    path: Vec<u8>,
    seen: Seen,
    blocks: BTreeSet<u64>,
    entries: Vec<(u64, usize)>,
}

fn seen(fs: &Fs<MemDevice<'_>>, path: &[u8]) -> Option<Seen> {
    let mut bufs = Buffers::new();
    let i = fs.resolve(path, &mut bufs).ok()?;
    let mut content = Vec::new();
    if !i.is_dir() {
        content = vec![0u8; i.size() as usize];
        fs.read(&i, 0, &mut content, &mut bufs).ok()?;
    }
    let r = *i.raw();
    let xattrs = match r.xattr_block.get() {
        0 => None,
        x => {
            let mut blk = [0u8; B];
            tet_core::block::BlockDevice::read_block(fs.device(), x, &mut blk).ok()?;
            Some(blk[..4080].to_vec())
        }
    };
    Some(Seen {
        mode: r.mode.get(),
        uid: r.uid.get(),
        gid: r.gid.get(),
        size: r.size.get(),
        mtime: r.mtime_ns.get(),
        content,
        xattrs,
    })
}

/// Every name of the clean image, walked from the root.
fn known(img: &[u8]) -> Vec<Known> {
    let fs = open(img).unwrap();
    let itable = sb(img).inode_table_start.get();
    let mut out = Vec::new();
    // (directory inode, its path, blocks and entries its own name depends on)
    let mut stack = vec![(ROOT, Vec::new(), BTreeSet::new(), Vec::new())];
    while let Some((dir, path, deps, ents)) = stack.pop() {
        let m = mapped(&fs, dir).unwrap();
        let mut dir_deps: BTreeSet<u64> = deps.clone();
        dir_deps.insert(itable + dir);
        // A directory's data blocks are its entries, counted by entry; its tree
        // blocks count whole.
        let dir_blocks: BTreeSet<u64> = m.entries.iter().map(|e| e.2).collect();
        dir_deps.extend(m.blocks.iter().filter(|b| !dir_blocks.contains(b)));
        for (name, ino, lba, off) in m.entries {
            let mut p = path.clone();
            p.push(b'/');
            p.extend_from_slice(&name);
            let mut e = ents.clone();
            e.push((lba, off));
            let mut d = dir_deps.clone();
            d.insert(itable + ino);
            let own = mapped(&fs, ino).unwrap();
            if fs.inode(ino, &mut [0u8; B]).unwrap().is_dir() {
                stack.push((ino, p.clone(), dir_deps.clone(), e.clone()));
            } else {
                d.extend(own.blocks);
            }
            out.push(Known {
                seen: seen(&fs, &p).unwrap(),
                path: p,
                blocks: d,
                entries: e,
            });
        }
    }
    out
}

/// Where a damage fell: whole blocks, and single bytes.
#[derive(Default, Clone)]
struct Hit {
    blocks: BTreeSet<u64>,
    bytes: Vec<(u64, usize)>,
}

impl Hit {
    fn touches(&self, k: &Known) -> bool {
        let entry_hit = |lba: u64, at: usize| {
            k.entries
                .iter()
                .any(|(l, off)| *l == lba && at >= *off && at < off + 266)
        };
        k.blocks.iter().any(|b| self.blocks.contains(b))
            || k.entries.iter().any(|(l, _)| self.blocks.contains(l))
            || self
                .bytes
                .iter()
                .any(|(l, at)| k.blocks.contains(l) || entry_hit(*l, *at))
    }
}

fn opts() -> RepairOptions {
    RepairOptions {
        node_id: 0xFEED,
        force: true,
        memory_limit: 1 << 30,
        superblock: None,
    }
}

fn errors(img: &[u8]) -> Vec<Finding> {
    fsck::findings(MemDevice::new(img), &fsck::Options::default())
        .0
        .into_iter()
        .filter(|f| f.severity() == Severity::Error)
        .collect()
}

/// What one damage came to.
#[derive(Default, Debug)]
struct Tally {
    /// Damages verify did not detect (not judged).
    undetected: u32,
    cases: u32,
    clean_after_p: u32,
    clean_after_y: u32,
    left_after_y: u32,
    preserved: u64,
    untouched: u64,
    /// The first error left after `-y`, by code and field, counted.
    left: BTreeMap<String, u32>,
    /// The cases left with errors after `-y`, with what is left.
    left_cases: Vec<String>,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.undetected += o.undetected;
        self.cases += o.cases;
        self.clean_after_p += o.clean_after_p;
        self.clean_after_y += o.clean_after_y;
        self.left_after_y += o.left_after_y;
        self.preserved += o.preserved;
        self.untouched += o.untouched;
        self.left_cases.extend(o.left_cases.iter().cloned());
        for (k, n) in &o.left {
            *self.left.entry(k.clone()).or_default() += n;
        }
    }
}

/// Runs `-n`, `-p` and `-y` over `damaged` and checks the rules; problems are pushed.
fn judge(
    name: &str,
    clean: &[Known],
    damaged: &[u8],
    hit: &Hit,
    tally: &mut Tally,
    problems: &mut Vec<String>,
) {
    tally.cases += 1;
    let mut img = damaged.to_vec();
    let _ = repair(MemDeviceMut::new(&mut img), Mode::No, &opts(), &mut |_| {
        true
    });
    if img != damaged {
        problems.push(format!("{name}: -n wrote"));
    }
    for mode in [Mode::Preen, Mode::Yes] {
        let mut img = damaged.to_vec();
        let out = repair(MemDeviceMut::new(&mut img), mode, &opts(), &mut |_| true);
        let Ok(out) = out else {
            // A repair that stops writes nothing it cannot finish; the rules still hold.
            if unmarked_block(&img).is_some() {
                problems.push(format!("{name} {mode:?}: stopped, a mapped block free"));
            }
            continue;
        };
        if let Some((ino, b)) = unmarked_block(&img) {
            problems.push(format!(
                "{name} {mode:?}: block {b} of inode {ino} marked free after {:?}, left {:?}",
                out.fixes.iter().map(|f| f.action).collect::<Vec<_>>(),
                errors(&img)
                    .iter()
                    .map(|f| (f.code.as_str(), f.error.what, f.error.offset))
                    .collect::<Vec<_>>()
            ));
        }
        let left = errors(&img);
        match mode {
            Mode::Preen if left.is_empty() => tally.clean_after_p += 1,
            Mode::Yes if left.is_empty() => tally.clean_after_y += 1,
            Mode::Yes => {
                tally.left_after_y += 1;
                let key = format!("{} {}", left[0].code.as_str(), left[0].error.what);
                *tally.left.entry(key).or_default() += 1;
                tally.left_cases.push(format!(
                    "{name}: {:?} after {:?}",
                    left.iter()
                        .map(|f| (f.code.as_str(), f.error.what, f.error.offset))
                        .collect::<Vec<_>>(),
                    out.fixes.iter().map(|f| f.action).collect::<Vec<_>>()
                ));
            }
            _ => {}
        }
        let fs = open(&img);
        for k in clean.iter().filter(|k| !hit.touches(k)) {
            tally.untouched += 1;
            let now = fs.as_ref().and_then(|fs| seen(fs, &k.path));
            if now.as_ref() == Some(&k.seen) {
                tally.preserved += 1;
            } else {
                let path = String::from_utf8_lossy(&k.path);
                problems.push(format!(
                    "{name} {mode:?}: {path} {} after {:?}, left {:?}",
                    if now.is_some() { "changed" } else { "lost" },
                    out.fixes.iter().map(|f| f.action).collect::<Vec<_>>(),
                    left.iter()
                        .map(|f| (f.code.as_str(), f.error.what))
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
}

/// The inode of `path` in `img`.
fn ino_of(img: &[u8], path: &[u8]) -> u64 {
    open(img)
        .unwrap()
        .resolve(path, &mut Buffers::new())
        .unwrap()
        .ino()
}

fn inode_at(img: &[u8], ino: u64) -> usize {
    (sb(img).inode_table_start.get() + ino) as usize * B
}

fn first_block(img: &[u8], ino: u64) -> u64 {
    let fs = open(img).unwrap();
    *mapped(&fs, ino).unwrap().data.first().unwrap()
}

/// A logical damage: its name, how to apply it (resealed afterwards), and where it falls.
type Logical = (&'static str, fn(&mut Vec<u8>) -> Hit);

const LOGICAL: &[Logical] = &[
    ("inode bitmap zeroed", |i| {
        let s = sb(i);
        let at = s.inode_bitmap_start.get() as usize * B;
        i[at..at + s.inode_bitmap_blocks.get() as usize * B].fill(0);
        Hit::default()
    }),
    ("data bitmaps zeroed", |i| {
        let s = sb(i);
        for g in 0..u64::from(s.block_group_count.get()) {
            let start = s.bg_regions_start.get() + g * s.bg_size_blocks.get();
            let len = s.bg_size_blocks.get().min(s.total_blocks.get() - start);
            let at = (start + 1) as usize * B;
            i[at..at + bitmap_blocks(len) as usize * B].fill(0);
        }
        Hit::default()
    }),
    ("a block claimed by two files", |i| {
        // d2/g2's first extent moves onto big/f010's first block: f010 is intact.
        let victim = ino_of(i, b"/d2/g2");
        let shared = first_block(i, ino_of(i, b"/big/f010"));
        let at = inode_at(i, victim) + 116;
        let mut e = RawExtent::read_from_bytes(&i[at..at + 16]).unwrap();
        e.physical.set(shared);
        i[at..at + 16].copy_from_slice(zerocopy::IntoBytes::as_bytes(&e));
        Hit {
            blocks: [sb(i).inode_table_start.get() + victim].into(),
            ..Hit::default()
        }
    }),
    ("a reachable file's nlink 0", |i| {
        let ino = ino_of(i, b"/d1/g1");
        let at = inode_at(i, ino) + 28;
        i[at..at + 4].fill(0);
        Hit::default()
    }),
    ("a hard-linked file's nlink wrong", |i| {
        let ino = ino_of(i, b"/hard29");
        let at = inode_at(i, ino) + 28;
        i[at..at + 4].copy_from_slice(&7u32.to_le_bytes());
        Hit::default()
    }),
    ("a regular file's parent nonzero", |i| {
        let ino = ino_of(i, b"/d4/g2");
        let at = inode_at(i, ino) + 88;
        i[at..at + 8].copy_from_slice(&5u64.to_le_bytes());
        Hit::default()
    }),
    ("a directory's parent wrong", |i| {
        let ino = ino_of(i, b"/d5/sub");
        let at = inode_at(i, ino) + 88;
        i[at..at + 8].copy_from_slice(&1u64.to_le_bytes());
        Hit::default()
    }),
    ("a directory's size wrong", |i| {
        let ino = ino_of(i, b"/big");
        let at = inode_at(i, ino) + 32;
        i[at..at + 8].copy_from_slice(&(2 * B as u64).to_le_bytes());
        Hit::default()
    }),
    ("a file's blocks count wrong", |i| {
        let ino = ino_of(i, b"/frag");
        let at = inode_at(i, ino) + 40;
        i[at..at + 8].copy_from_slice(&3u64.to_le_bytes());
        Hit::default()
    }),
    ("an entry naming a free inode", |i| {
        let (lba, off) = entry_of(i, b"/d6", b"g4");
        let free = sb(i).inode_count.get() - 1;
        let at = lba as usize * B + off;
        i[at..at + 8].copy_from_slice(&free.to_le_bytes());
        Hit {
            bytes: vec![(lba, off)],
            ..Hit::default()
        }
    }),
    ("an orphan (its only entry zeroed)", |i| {
        let (lba, off) = entry_of(i, b"/d7", b"g5");
        let at = lba as usize * B + off;
        i[at..at + 266].fill(0);
        Hit {
            bytes: vec![(lba, off)],
            ..Hit::default()
        }
    }),
    ("a directory loop (a subdirectory names its parent)", |i| {
        let parent = ino_of(i, b"/d8");
        let (lba, off) = free_slot(i, b"/d8/sub");
        let at = lba as usize * B + off;
        i[at..at + 8].copy_from_slice(&parent.to_le_bytes());
        i[at + 8..at + 10].copy_from_slice(&4u16.to_le_bytes());
        i[at + 10] = 2;
        i[at + 11..at + 15].copy_from_slice(b"loop");
        Hit {
            bytes: vec![(lba, off)],
            ..Hit::default()
        }
    }),
    ("one changed byte in a name, resealed", |i| {
        let (lba, off) = entry_of(i, b"/big", b"f033");
        i[lba as usize * B + off + 12] = b'X';
        Hit {
            bytes: vec![(lba, off)],
            ..Hit::default()
        }
    }),
];

/// The first empty entry slot of directory `dir`'s blocks: its block and byte offset.
fn free_slot(img: &[u8], dir: &[u8]) -> (u64, usize) {
    let fs = open(img).unwrap();
    let mut parts = Parts::default();
    check_inode(
        &fs,
        ino_of(img, dir),
        &mut Buffers::new(),
        &mut |_: &Finding| {},
        &mut parts,
    )
    .unwrap();
    for lba in parts.data {
        for k in 0..15 {
            let at = lba as usize * B + k * 266;
            if img[at..at + 8] == [0; 8] {
                return (lba, k * 266);
            }
        }
    }
    panic!("no free slot");
}

/// Repairs `img` in memory in `mode`, saying yes to every fix the mode allows.
fn run_repair(img: &mut [u8], mode: Mode) -> RepairOutcome {
    repair(MemDeviceMut::new(img), mode, &opts(), &mut |_| true).unwrap()
}

#[test]
fn populated_image_is_clean() {
    let img = populated();
    assert_eq!(errors(&img), vec![]);
    let k = known(&img);
    assert!(k.len() >= 540, "{} names", k.len());
    let files = k
        .iter()
        .filter(|n| n.seen.mode & 0o170000 == 0o100000)
        .count();
    assert!(files >= 500, "{files} regular files");
    let fs = open(&img).unwrap();
    let big = fs.resolve(b"/big", &mut Buffers::new()).unwrap();
    assert!(big.size() >= 4 * B as u64, "a multi-block directory");
    let deep = fs.resolve(b"/deep", &mut Buffers::new()).unwrap();
    assert_eq!(deep.depth(), 2);
    assert_eq!(unmarked_block(&img), None);
}

#[test]
fn logical_damages_keep_every_mapped_block_and_every_name() {
    let clean = populated();
    let names = known(&clean);
    let mut problems = Vec::new();
    let mut tally = Tally::default();
    for (name, damage) in LOGICAL {
        let mut img = clean.clone();
        let hit = damage(&mut img);
        reseal(&mut img);
        judge(name, &names, &img, &hit, &mut tally, &mut problems);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Bitmaps, counts, sizes and parents are derived: -p sets them; the shared block,
    // the free inode's entry, the loop and the changed name need -y... except the name,
    // which -p accepts as it reads now.
    assert!(tally.clean_after_p >= 9, "{tally:?}");
    assert_eq!(tally.clean_after_y, tally.cases, "{tally:?}");
}

/// The inode bitmap zeroed: `-p` sets it from the inodes before it rebuilds the data
/// bitmap, so no file's block is marked free and verify ends clean.
#[test]
fn a_zeroed_inode_bitmap_is_rebuilt_from_the_inodes_first() {
    let mut img = populated();
    let s = sb(&img);
    let at = s.inode_bitmap_start.get() as usize * B;
    let bitmap = img[at..at + B].to_vec();
    img[at..at + B].fill(0);
    let found = errors(&img);
    assert!(
        found.iter().any(|f| f.code == Code::InodeUnmarked),
        "{found:?}"
    );
    let out = run_repair(&mut img, Mode::Preen);
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert_eq!(
        out.rounds, 1,
        "one round: inode bitmap, then what derives from it"
    );
    assert_eq!(
        img[at..at + B],
        bitmap[..],
        "the inode bitmap as mkfs wrote it"
    );
    assert_eq!(unmarked_block(&img), None);
    assert_eq!(errors(&img), vec![]);
}

/// A device that counts reads of the inode table's blocks (a prefix read included).
struct InodeReads<'a> {
    inner: MemDeviceMut<'a>,
    table: std::ops::Range<u64>,
    reads: std::cell::Cell<u64>,
}

impl tet_core::block::BlockDevice for InodeReads<'_> {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut tet_core::block::Block) -> tet_core::Result<()> {
        if self.table.contains(&lba) {
            self.reads.set(self.reads.get() + 1);
        }
        self.inner.read_block(lba, buf)
    }
}

impl tet_core::block::BlockDeviceMut for InodeReads<'_> {
    fn write_block(&self, lba: u64, buf: &tet_core::block::Block) -> tet_core::Result<()> {
        self.inner.write_block(lba, buf)
    }
    fn flush(&self) -> tet_core::Result<()> {
        self.inner.flush()
    }
    fn compare_and_write(
        &self,
        lba: u64,
        e: &[u8; tet_core::block::SECTOR],
        n: &[u8; tet_core::block::SECTOR],
    ) -> tet_core::Result<bool> {
        self.inner.compare_and_write(lba, e, n)
    }
}

/// After a round that only set bitmap bits (the zeroed inode bitmap), repair checks
/// again from the first check's maps: the inode table is walked once, not twice, and
/// the outcome is what two full checks gave.
#[test]
fn a_round_of_bitmaps_alone_is_checked_again_without_walking_the_inodes() {
    let mut img = populated();
    let s = sb(&img);
    let at = s.inode_bitmap_start.get() as usize * B;
    img[at..at + B].fill(0);
    let table = s.inode_table_start.get()..s.inode_table_start.get() + s.inode_count.get();
    let clean = populated();
    let in_use = {
        let fs = open(&clean).unwrap();
        (1..s.inode_count.get())
            .filter(|i| fs.inode(*i, &mut Buffers::new().data).is_ok())
            .count() as u64
    };
    let dev = InodeReads {
        inner: MemDeviceMut::new(&mut img),
        table,
        reads: std::cell::Cell::new(0),
    };
    let out = repair(&dev, Mode::Preen, &opts(), &mut |_| true).unwrap();
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert_eq!(out.rounds, 1);
    // One walk reads every inode once (the free ones to find they are free), plus the
    // inodes the fixes name and the planning reads: far below two walks.
    let walk = s.inode_count.get() - 1;
    let reads = dev.reads.get();
    assert!(
        reads >= walk && reads < walk + in_use,
        "{reads} inode reads for {walk} inodes, {in_use} in use"
    );
    assert_eq!(errors(&img), vec![]);
}

/// The re-check from kept maps: clean on the image the maps came from, with the walk's
/// counts; `None` (the caller checks in full) as soon as a bitmap bit differs.
#[test]
fn a_recheck_from_kept_maps_falls_back_on_any_difference() {
    let clean = populated();
    let (full, kept) = fsck::check_keeping_maps(
        MemDevice::new(&clean),
        &fsck::Options::default(),
        &mut |_: &Finding| {},
    );
    let (again, _) = fsck::recheck_bitmaps(
        MemDevice::new(&clean),
        &fsck::Options::default(),
        kept.unwrap(),
    )
    .expect("a clean image rechecks clean");
    assert_eq!(again.summary, full.summary);
    assert_eq!(again.entries, full.entries);
    assert!(again.cross_checked);
    let s = sb(&clean);
    // A data bitmap bit set for a free block (checksums are not kept over bitmaps).
    let start = s.bg_regions_start.get();
    let len = s.bg_size_blocks.get().min(s.total_blocks.get() - start);
    let data = start + 1 + bitmap_blocks(len);
    let free = (data..start + len).find(|b| !marked(&clean, *b)).unwrap();
    let i = free - data;
    let mut leaked = clean.clone();
    leaked[(start + 1) as usize * B + (i / 8) as usize] |= 1 << (i % 8);
    let recheck = |img: &[u8], kept| {
        fsck::recheck_bitmaps(MemDevice::new(img), &fsck::Options::default(), kept)
    };
    let (_, kept) = fsck::check_keeping_maps(
        MemDevice::new(&clean),
        &fsck::Options::default(),
        &mut |_: &Finding| {},
    );
    assert!(recheck(&leaked, kept.unwrap()).is_none(), "a leaked bit");
    // An inode bit set for a free inode, and one cleared for an inode in use.
    let ib = s.inode_bitmap_start.get() as usize * B;
    let fs = open(&clean).unwrap();
    let free_ino = (1..s.inode_count.get())
        .find(|i| fs.inode(*i, &mut Buffers::new().data).is_err())
        .unwrap();
    let used_ino = (2..s.inode_count.get())
        .find(|i| fs.inode(*i, &mut Buffers::new().data).is_ok())
        .unwrap();
    for (ino, set) in [(free_ino, true), (used_ino, false)] {
        let mut img = clean.clone();
        let byte = ib + (ino / 8) as usize;
        if set {
            img[byte] |= 1 << (ino % 8);
        } else {
            img[byte] &= !(1 << (ino % 8));
        }
        let (_, kept) = fsck::check_keeping_maps(
            MemDevice::new(&clean),
            &fsck::Options::default(),
            &mut |_: &Finding| {},
        );
        assert!(
            recheck(&img, kept.unwrap()).is_none(),
            "inode {ino} bit set: {set}"
        );
    }
}

/// A block claimed twice: until `-y` resolves it, every claimant's blocks stay marked.
#[test]
fn while_a_block_is_claimed_twice_every_claimants_blocks_stay_marked() {
    let mut img = populated();
    let intact = ino_of(&img, b"/deep");
    let victim = ino_of(&img, b"/big/f020");
    let shared = first_block(&img, intact);
    let at = inode_at(&img, victim) + 116;
    let mut e = RawExtent::read_from_bytes(&img[at..at + 16]).unwrap();
    e.physical.set(shared);
    img[at..at + 16].copy_from_slice(zerocopy::IntoBytes::as_bytes(&e));
    let n = RawInode::read_from_bytes(&img[inode_at(&img, victim)..][..256]).unwrap();
    assert_eq!(n.extent_header.depth.get(), 0);
    reseal(&mut img);
    let out = run_repair(&mut img, Mode::Preen);
    assert!(
        out.left.iter().any(|f| f.code == Code::BlockShared),
        "{:?} {:?}",
        out.fixes,
        out.left
    );
    assert_eq!(unmarked_block(&img), None);
    let out = repair(MemDeviceMut::new(&mut img), Mode::Yes, &opts(), &mut |_| {
        true
    })
    .unwrap();
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert_eq!(unmarked_block(&img), None);
}

/// One flipped bit of an inode's magic, checksum not fixed: `ls` of its directory fails
/// (the inode does not read), `-p` restores the magic (the checksum then matches) and the
/// file reads as before.
#[test]
fn an_inode_whose_magic_alone_is_wrong_is_restored_by_preen() {
    let clean = populated();
    let ino = ino_of(&clean, b"/d3/g7");
    let want = seen(&open(&clean).unwrap(), b"/d3/g7").unwrap();
    let mut img = clean.clone();
    let at = inode_at(&img, ino);
    img[at] ^= 0x10;
    assert!(seen(&open(&img).unwrap(), b"/d3/g7").is_none());
    let out = run_repair(&mut img, Mode::Preen);
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert!(out
        .fixes
        .iter()
        .any(|f| f.action.starts_with("inode magic restored")));
    assert_eq!(seen(&open(&img).unwrap(), b"/d3/g7"), Some(want));
    assert_eq!(img[at..at + B], clean[at..at + B]);
}

/// Where the entry naming `name` in directory `dir` is: its block and byte offset.
fn entry_of(img: &[u8], dir: &[u8], name: &[u8]) -> (u64, usize) {
    let fs = open(img).unwrap();
    let d = ino_of(img, dir);
    let m = mapped(&fs, d).unwrap();
    let e = m.entries.iter().find(|e| e.0 == name).unwrap();
    (e.2, e.3)
}

/// One changed byte in one name, checksum not fixed: `-p` accepts the entries as they
/// read now, so no entry of the directory moves to /lost+found and the changed name is
/// kept as it reads.
#[test]
fn one_changed_byte_in_a_name_keeps_every_entry_under_preen() {
    let clean = populated();
    let names = known(&clean);
    let (lba, off) = entry_of(&clean, b"/big", b"f020");
    let mut img = clean.clone();
    img[lba as usize * B + off + 11 + 1] = b'X';
    let hit = Hit {
        bytes: vec![(lba, off + 12)],
        ..Hit::default()
    };
    assert!(errors(&img).iter().any(|f| f.code == Code::Checksum));
    let (mut problems, mut tally) = (Vec::new(), Tally::default());
    judge("name byte", &names, &img, &hit, &mut tally, &mut problems);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let out = run_repair(&mut img, Mode::Preen);
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert!(out
        .fixes
        .iter()
        .all(|f| f.action == "directory block resealed: accepts the entries as they read now"));
    let fs = open(&img).unwrap();
    assert!(
        seen(&fs, b"/big/fX20").is_some(),
        "the name as it reads now"
    );
    assert!(fs.resolve(b"/lost+found", &mut Buffers::new()).is_err());
}

/// An entry that breaks a rule of its own (a `/` in its name) in a block whose tail was
/// resealed: `-p` leaves it, naming what `-y` would lose; `-y` removes that entry alone.
#[test]
fn a_bad_entry_is_removed_by_yes_alone_and_its_neighbours_keep_their_names() {
    let clean = populated();
    let names = known(&clean);
    let (lba, off) = entry_of(&clean, b"/big", b"f033");
    let mut img = clean.clone();
    img[lba as usize * B + off + 11] = b'/';
    let hit = Hit {
        bytes: vec![(lba, off + 11)],
        ..Hit::default()
    };
    let (mut problems, mut tally) = (Vec::new(), Tally::default());
    judge(
        "slash in a name",
        &names,
        &img,
        &hit,
        &mut tally,
        &mut problems,
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let mut p = img.clone();
    let out = repair(MemDeviceMut::new(&mut p), Mode::Preen, &opts(), &mut |_| {
        true
    })
    .unwrap();
    assert!(
        out.left.iter().any(|f| f.code == Code::DirBlock),
        "{:?}",
        out.left
    );
    let mut y = img.clone();
    let out = repair(MemDeviceMut::new(&mut y), Mode::Yes, &opts(), &mut |_| true).unwrap();
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert!(out.fixes.iter().any(|f| f
        .action
        .starts_with("directory entry that does not validate removed")));
}

/// What kind of metadata a block holds, for the sweep's tallies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    ZoneGroup,
    BlockGroup,
    InodeBitmap,
    Inode,
    FreeInode,
    Registry,
    Pending,
    JournalFlag,
    JournalSlot,
    RegionHeader,
    DataBitmap,
    Directory,
    Tree,
    Xattr,
}

/// Every metadata block of `img` but the superblock (section 19's backups are another
/// issue's): the tables, bitmaps and inodes, the registry, queues and journals, each
/// region's header and bitmap, and every directory, tree and xattr block.
fn metadata_blocks(img: &[u8]) -> Vec<(u64, Kind)> {
    let s = sb(img);
    let fs = open(img).unwrap();
    let mut out = Vec::new();
    let z = u64::from(s.zone_group_count.get());
    let g = u64::from(s.block_group_count.get());
    out.extend((1..1 + z).map(|l| (l, Kind::ZoneGroup)));
    out.extend((1 + z..1 + z + g).map(|l| (l, Kind::BlockGroup)));
    let ib = s.inode_bitmap_start.get();
    out.extend((ib..ib + s.inode_bitmap_blocks.get()).map(|l| (l, Kind::InodeBitmap)));
    let it = s.inode_table_start.get();
    for ino in 1..s.inode_count.get() {
        let used = mapped(&fs, ino).is_some();
        out.push((it + ino, if used { Kind::Inode } else { Kind::FreeInode }));
    }
    let r = s.registry_start.get();
    out.extend((r..r + s.registry_blocks.get()).map(|l| (l, Kind::Registry)));
    let p = s.pending_start.get();
    out.extend((p..p + s.pending_blocks.get()).map(|l| (l, Kind::Pending)));
    let per = s.node_journal_blocks.get();
    for n in 0..u64::from(s.node_capacity.get()) {
        let j = s.node_journal_start.get() + n * per;
        out.push((j, Kind::JournalFlag));
        out.extend((j + 1..j + per).map(|l| (l, Kind::JournalSlot)));
    }
    for bg in 0..g {
        let start = s.bg_regions_start.get() + bg * s.bg_size_blocks.get();
        let len = s.bg_size_blocks.get().min(s.total_blocks.get() - start);
        out.push((start, Kind::RegionHeader));
        out.extend((start + 1..start + 1 + bitmap_blocks(len)).map(|l| (l, Kind::DataBitmap)));
    }
    for ino in 1..s.inode_count.get() {
        let mut parts = Parts::default();
        if check_inode(
            &fs,
            ino,
            &mut Buffers::new(),
            &mut |_: &Finding| {},
            &mut parts,
        )
        .is_none()
        {
            continue;
        }
        out.extend(parts.tree.iter().map(|l| (*l, Kind::Tree)));
        out.extend(parts.xattr.iter().map(|l| (*l, Kind::Xattr)));
        if fs.inode(ino, &mut [0u8; B]).unwrap().is_dir() {
            out.extend(parts.data.iter().map(|l| (*l, Kind::Directory)));
        }
    }
    out.sort_unstable();
    out.dedup_by_key(|b| b.0);
    out
}

/// An inode's blocks by what they hold.
#[derive(Default)]
struct Parts {
    tree: Vec<u64>,
    data: Vec<u64>,
    xattr: Vec<u64>,
}

impl InodeVisitor for Parts {
    fn tree_block(&mut self, _: u64, lba: u64) {
        self.tree.push(lba);
    }
    fn extent(&mut self, _: u64, e: &Extent, _: u64, _: usize) {
        self.data.extend(e.physical..e.physical + u64::from(e.len));
    }
    fn xattr_block(&mut self, _: u64, lba: u64) {
        self.xattr.push(lba);
    }
}

/// One sweep case: a name, the damaged image, and where the damage fell.
struct Case {
    name: String,
    kind: Kind,
    image: Vec<u8>,
    hit: Hit,
}

/// The damages of one block: zeroed (when it is not already zero) and flipped at `flips`
/// seeded random bytes (one bit each), checksums not fixed.
fn cases(clean: &[u8], lba: u64, kind: Kind, flips: u32, rng: &mut Rng) -> Vec<Case> {
    let mut out = Vec::new();
    let at = lba as usize * B;
    if clean[at..at + B].iter().any(|b| *b != 0) {
        let mut image = clean.to_vec();
        image[at..at + B].fill(0);
        out.push(Case {
            name: format!("{kind:?} block {lba} zeroed"),
            kind,
            image,
            hit: Hit {
                blocks: [lba].into(),
                ..Hit::default()
            },
        });
    }
    for _ in 0..flips {
        let byte = rng.below(B as u64) as usize;
        let bit = rng.below(8);
        let mut image = clean.to_vec();
        image[at + byte] ^= 1 << bit;
        out.push(Case {
            name: format!("{kind:?} block {lba} byte {byte} bit {bit} flipped"),
            kind,
            image,
            hit: Hit {
                bytes: vec![(lba, byte)],
                ..Hit::default()
            },
        });
    }
    out
}

/// What a sweep came to: the tally by kind and in all, and the problems found (the
/// first few of each case).
type Swept = (BTreeMap<Kind, Tally>, Tally, Vec<String>);

/// Damages each of `blocks` (see [`cases`]) and judges the damages verify detects.
fn sweep(clean: &[u8], blocks: &[(u64, Kind)], flips: u32, rng: &mut Rng) -> Swept {
    let names = known(clean);
    let (mut by_kind, mut all, mut problems) = (BTreeMap::new(), Tally::default(), Vec::new());
    for &(lba, kind) in blocks {
        for c in cases(clean, lba, kind, flips, rng) {
            if std::env::var_os("TET_SWEEP_BLOCKS").is_some() {
                eprintln!("case {}", c.name);
            }
            let t: &mut Tally = by_kind.entry(c.kind).or_default();
            if errors(&c.image).is_empty() {
                t.undetected += 1;
                all.undetected += 1;
                continue;
            }
            let mut one = Tally::default();
            let mut found = Vec::new();
            judge(&c.name, &names, &c.image, &c.hit, &mut one, &mut found);
            if found.len() > 3 {
                let more = found.len() - 3;
                found.truncate(3);
                found.push(format!("{}: {more} more", c.name));
            }
            problems.extend(found);
            t.add(&one);
            all.add(&one);
        }
    }
    (by_kind, all, problems)
}

/// A seeded sample of the sweep (the full one is `full_metadata_sweep`): metadata blocks
/// of every kind, each zeroed and flipped at one random byte.
#[test]
fn seeded_metadata_damage_keeps_the_rules() {
    let clean = populated();
    let blocks = metadata_blocks(&clean);
    let mut rng = Rng(0xd1ce);
    let mut sample = Vec::new();
    let kinds: BTreeSet<Kind> = blocks.iter().map(|b| b.1).collect();
    for kind in kinds {
        let of: Vec<(u64, Kind)> = blocks.iter().filter(|b| b.1 == kind).copied().collect();
        for _ in 0..3 {
            sample.push(of[rng.below(of.len() as u64) as usize]);
        }
    }
    sample.dedup();
    let (_, all, problems) = sweep(&clean, &sample, 1, &mut rng);
    eprintln!(
        "{:?}",
        (all.cases, all.clean_after_p, all.clean_after_y, &all.left)
    );
    assert!(problems.is_empty(), "{all:?}\n{}", problems.join("\n"));
    assert!(all.cases >= 30, "{all:?}");
}

/// The full sweep: every metadata block zeroed and flipped at three seeded random bytes.
/// Run with `cargo test --release -p tet-tests --test cetrafs_repair_rules -- --ignored
/// --nocapture full_metadata_sweep`; its counts are in docs/benchmarks.md.
#[test]
#[ignore = "the full sweep takes minutes: run it on purpose"]
fn full_metadata_sweep() {
    let clean = populated();
    let mut blocks = metadata_blocks(&clean);
    // TET_SWEEP_BLOCKS=a,b,… sweeps only those blocks (the same bytes as in the full run).
    let only: Vec<u64> = std::env::var("TET_SWEEP_BLOCKS")
        .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default();
    let mut rng = Rng(0x5eed);
    if !only.is_empty() {
        let mut kept = Vec::new();
        for (lba, kind) in blocks {
            if only.contains(&lba) {
                kept.push((lba, kind));
            } else {
                // Draw the same random bytes as the full sweep would.
                for _ in 0..6 {
                    rng.next();
                }
            }
        }
        blocks = kept;
    }
    let (by_kind, all, problems) = sweep(&clean, &blocks, 3, &mut rng);
    eprintln!(
        "{} blocks\n{:?}",
        blocks.len(),
        by_kind
            .iter()
            .map(|(k, t)| (k, t.cases, t.clean_after_p, t.clean_after_y, t.undetected))
            .collect::<Vec<_>>()
    );
    for p in &problems {
        eprintln!("PROBLEM {p}");
    }
    for c in &all.left_cases {
        eprintln!("LEFT {c}");
    }
    eprintln!(
        "TOTAL detected {} (undetected {}), clean after -p {}, clean after -y {}, left {}, \
         files preserved {} of {}",
        all.cases,
        all.undetected,
        all.clean_after_p,
        all.clean_after_y,
        all.left_after_y,
        all.preserved,
        all.untouched
    );
    let detected = all.cases;
    assert!(problems.is_empty(), "{} problems", problems.len());
    assert!(
        u64::from(all.clean_after_y) * 100 >= u64::from(detected) * 95,
        "{all:?}"
    );
}

/// The blocks of `path` in the clean image (data, tree, xattr).
fn blocks_of(clean: &[u8], path: &[u8]) -> Vec<u64> {
    let fs = open(clean).unwrap();
    mapped(&fs, ino_of(clean, path)).unwrap().blocks
}

/// One flipped bit in a field of an inode that means something (its extent count, an
/// extent's block, its size), checksum not fixed: `-p` cannot tell the change from the
/// truth, so it neither reseals nor clears; the inode stays as damaged, every block the
/// file had stays marked, and the report says what `-y` would do.
#[test]
fn preen_never_blesses_a_changed_inode_field() {
    let clean = populated();
    for (path, byte, bit) in [
        (&b"/d2/g4"[..], 106usize, 0u8), // extent_header.entries 1 -> 0
        (b"/d2/g5", 125, 3),             // an extent's physical block
        (b"/d2/g7", 34, 1),              // size
    ] {
        let ino = ino_of(&clean, path);
        let blocks = blocks_of(&clean, path);
        let mut img = clean.clone();
        let at = inode_at(&img, ino);
        img[at + byte] ^= 1 << bit;
        let damaged = img[at..at + B].to_vec();
        let out = run_repair(&mut img, Mode::Preen);
        let p = String::from_utf8_lossy(path);
        assert_eq!(
            img[at..at + B],
            damaged[..],
            "{p}: the inode is left as damaged"
        );
        assert!(!out.left.is_empty(), "{p}");
        for b in &blocks {
            assert!(marked(&img, *b), "{p}: block {b} freed by -p");
        }
        assert!(
            out.withheld.iter().any(|f| !f.lossless),
            "{p}: -p says what -y would do: {:?}",
            out.withheld
        );
        assert_eq!(unmarked_block(&img), None, "{p}");
    }
}

/// An xattr block that no longer reads (a value length past 256, resealed) is kept
/// marked by `-p`: its owner is readable and in use, and `-p` does not drop xattrs.
#[test]
fn preen_keeps_an_unreadable_xattr_block_marked() {
    let clean = populated();
    let fs = open(&clean).unwrap();
    let ino = ino_of(&clean, b"/big/f017");
    let x = fs
        .inode(ino, &mut [0u8; B])
        .unwrap()
        .raw()
        .xattr_block
        .get();
    assert_ne!(x, 0);
    let mut img = clean.clone();
    img[x as usize * B + 65] = 0x01; // value_len of the first attribute: 256 + 4
    reseal(&mut img);
    let out = run_repair(&mut img, Mode::Preen);
    assert!(
        marked(&img, x),
        "the xattr block freed by -p: {:?}",
        out.fixes
    );
    assert!(out.withheld.iter().any(|f| f
        .action
        .starts_with("xattr block that does not read dropped")));
}

/// A zeroed inode bitmap and one flipped byte in a file's inode: the inode is found in
/// use although it does not read (its magic and number say it is that inode), so `-p`
/// keeps every block it had marked and leaves its name.
#[test]
fn a_damaged_inode_under_a_zeroed_bitmap_keeps_its_blocks() {
    let clean = populated();
    let path = b"/d1/g8";
    let ino = ino_of(&clean, path);
    let blocks = blocks_of(&clean, path);
    let mut img = clean.clone();
    let s = sb(&img);
    let ib = s.inode_bitmap_start.get() as usize * B;
    img[ib..ib + B].fill(0);
    let at = inode_at(&img, ino);
    img[at + 60] ^= 0x04; // mtime, checksum not fixed
    let out = run_repair(&mut img, Mode::Preen);
    for b in &blocks {
        assert!(marked(&img, *b), "block {b} freed by -p: {:?}", out.fixes);
    }
    assert_eq!(unmarked_block(&img), None);
    let fs = open(&img).unwrap();
    let names = known(&clean);
    for k in names.iter().filter(|k| k.path != path) {
        assert_eq!(seen(&fs, &k.path).as_ref(), Some(&k.seen), "{:?}", k.path);
    }
}

/// Interactive repair answered no to the data bitmap rebuild and yes to the rest: the
/// free counts are set from the bitmap as it stays, not from the rebuild that was not
/// written, so only the leaked block is left.
#[test]
fn a_refused_bitmap_rebuild_leaves_counts_that_match_the_bitmap() {
    let clean = populated();
    let mut img = clean.clone();
    // Mark one free data block used (a leaked bit); the counts are left as they were.
    let s = sb(&img);
    let start = s.bg_regions_start.get();
    let len = s.bg_size_blocks.get().min(s.total_blocks.get() - start);
    let data = start + 1 + bitmap_blocks(len);
    let free = (data..start + len).find(|b| !marked(&img, *b)).unwrap();
    let i = free - data;
    img[(start + 1) as usize * B + (i / 8) as usize] |= 1 << (i % 8);
    let out = repair(MemDeviceMut::new(&mut img), Mode::Yes, &opts(), &mut |f| {
        !f.action.starts_with("data bitmap rebuilt")
    })
    .unwrap();
    let left: Vec<Code> = errors(&img).iter().map(|f| f.code).collect();
    assert!(left.contains(&Code::BlockLeaked), "{left:?}");
    assert!(
        !left.contains(&Code::GroupFreeCount) && !left.contains(&Code::ZoneFreeCount),
        "{left:?} after {:?}, withheld {:?}, rounds {}",
        out.fixes,
        out.withheld,
        out.rounds
    );
    assert!(marked(&img, free), "the refused rebuild wrote nothing");
}

/// A file whose inode is zeroed: `-p` leaves it and names what `-y` would lose; `-y`
/// clears it and removes its entry, both named by the file's full path.
#[test]
fn what_a_lossy_fix_loses_is_named_by_its_path() {
    let clean = populated();
    let ino = ino_of(&clean, b"/d4/sub/g3");
    let mut img = clean.clone();
    let at = inode_at(&img, ino);
    img[at..at + B].fill(0);
    let named = |out: &RepairOutcome, action: &str| -> Vec<Vec<u8>> {
        let fixes: Vec<u64> = out
            .fixes
            .iter()
            .chain(&out.withheld)
            .filter(|f| f.action.starts_with(action))
            .map(|f| f.offset)
            .collect();
        out.names
            .iter()
            .filter(|(o, _)| fixes.contains(o))
            .map(|(_, p)| p.clone())
            .collect()
    };
    let out = run_repair(&mut img, Mode::Preen);
    assert_eq!(
        named(&out, "inode that cannot be read cleared"),
        [b"/d4/sub/g3".to_vec()]
    );
    let out = run_repair(&mut img, Mode::Yes);
    assert_eq!(
        named(&out, "inode that cannot be read cleared"),
        [b"/d4/sub/g3".to_vec()]
    );
    assert_eq!(
        named(&out, "entry naming an inode not in use"),
        [b"/d4/sub/g3".to_vec()]
    );
    assert!(out.left.is_empty(), "{:?}", out.left);
}

/// The same file in a directory no path reaches (its parent's entry cleared): the entry
/// removed is named by the inode of the directory holding it, as debugfs writes one.
#[test]
fn an_entry_removed_in_an_unreached_directory_is_named_by_its_directory_inode() {
    let clean = populated();
    let ino = ino_of(&clean, b"/d4/sub/g3");
    let sub = ino_of(&clean, b"/d4/sub");
    let mut img = clean.clone();
    let (lba, off) = entry_of(&img, b"/", b"d4");
    let at = lba as usize * B + off;
    img[at..at + 266].fill(0);
    let at = inode_at(&img, ino);
    img[at..at + B].fill(0);
    reseal(&mut img);
    let out = run_repair(&mut img, Mode::Yes);
    let removed: Vec<&Vec<u8>> = out
        .fixes
        .iter()
        .filter(|f| f.action.starts_with("entry naming an inode not in use"))
        .flat_map(|f| out.names.iter().filter(move |(o, _)| *o == f.offset))
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        removed,
        [&format!("<{sub}>/g3").into_bytes()],
        "{:?}",
        out.fixes
    );
}

/// The root inode zeroed: `-p` leaves it (the root's mode, owner and times are lost);
/// `-y` makes a new root over the directory blocks the old one owned, so every name
/// below it reads back at its path, byte for byte, and nothing goes to /lost+found.
#[test]
fn a_zeroed_root_is_rebuilt_over_its_own_blocks() {
    let clean = populated();
    let names = known(&clean);
    let mut img = clean.clone();
    let at = inode_at(&img, ROOT);
    img[at..at + B].fill(0);
    let found = errors(&img);
    assert!(found.iter().any(|f| f.code == Code::RootInode), "{found:?}");
    let out = run_repair(&mut img, Mode::Preen);
    // -p changes nothing while the root is lost: counts without it would be wrong.
    assert_eq!(out.fixes, vec![]);
    assert_eq!(img[at..at + B], [0u8; B][..]);
    assert!(out.left.iter().any(|f| f.code == Code::RootInode));
    assert!(out.withheld.iter().any(|f| f.code == Code::RootInode));
    let out = run_repair(&mut img, Mode::Yes);
    assert!(out.left.is_empty(), "{:?}", out.left);
    let rebuilt = out
        .fixes
        .iter()
        .find(|f| f.code == Code::RootInode)
        .unwrap();
    let top = names.iter().filter(|k| k.entries.len() == 1).count() as u64;
    assert_eq!(
        rebuilt.value,
        Some(top),
        "every entry of the root kept its name"
    );
    assert_eq!(errors(&img), vec![]);
    let fs = open(&img).unwrap();
    for k in &names {
        assert_eq!(
            seen(&fs, &k.path).as_ref(),
            Some(&k.seen),
            "{}",
            String::from_utf8_lossy(&k.path)
        );
    }
    assert!(fs
        .resolve(b"/lost+found", &mut Buffers::new())
        .is_err_and(|e| e.kind == tet_core::ErrorKind::NotFound));
}

/// The root zeroed and its one directory block too: the new root is empty, and what it
/// held is found under /lost+found by inode number.
#[test]
fn a_root_lost_with_its_blocks_sends_its_children_to_lost_found() {
    let mut img = populated();
    let at = inode_at(&img, ROOT);
    let root_blocks = mapped(&open(&img).unwrap(), ROOT).unwrap().blocks;
    let big = ino_of(&img, b"/big");
    img[at..at + B].fill(0);
    for b in root_blocks {
        img[b as usize * B..(b as usize + 1) * B].fill(0);
    }
    let out = run_repair(&mut img, Mode::Yes);
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert_eq!(errors(&img), vec![]);
    let fs = open(&img).unwrap();
    let path = format!("/lost+found/{big}");
    let dir = fs.resolve(path.as_bytes(), &mut Buffers::new()).unwrap();
    assert!(dir.is_dir());
    assert!(fs
        .resolve(format!("{path}/f000").as_bytes(), &mut Buffers::new())
        .is_ok());
}
