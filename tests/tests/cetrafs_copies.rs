//! Superblock copies (docs/cetrafs.md section 3.1): one damaged block 0 never costs the
//! image. Every byte of block 0 flipped in turn, and block 0 zeroed: the root still
//! lists through a copy, and `repair -y` ends with `verify` clean and every file
//! byte-identical. Each copy damaged alone and every pair: the image still mounts from
//! what is left, or, with nothing left, says so. Power cuts at every write of mkfs, of
//! repair's restore and of a superblock rewrite leave a valid superblock.

mod power;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use power::PowerCut;
use tet_alloc::cetrafs::copies::{audit, rewrite, with_copies};
use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{BlockSink, ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::repair::{repair, Mode, RepairOptions};
use tet_core::block::{Block, MemDevice, MemDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::check::Severity;
use tet_core::cetrafs::copies::{
    copy_offset, locate, reseal, Source, Substituted, COMPAT_SB_COPIES, COPY_AT,
};
use tet_core::cetrafs::{Buffers, Code, Finding, Fs, Superblock, ANY_DEVICE, SUPERBLOCK_LEN};
use tet_core::{Error, ErrorKind};

const ROOT: u64 = 1;

/// The geometry of the test images: `groups` block groups of 512 blocks (blocks before
/// the groups: 1095 + groups, for 1024 inodes and 2 journals of 33; the last group is
/// 300 blocks).
fn params(groups: u64) -> Params {
    Params {
        size_bytes: (1095 + groups + (groups - 1) * 512 + 300) * BLOCK_SIZE as u64,
        bg_size_blocks: 512,
        zone_groups: 1,
        inodes: 1024,
        nodes: 2,
        journal_blocks: 33,
        pending_slots: 16,
        label: "copies".into(),
        ..Params::default()
    }
}

/// A populated image: nested directories, files of several sizes, a symlink, a hard
/// link, an xattr. `groups` block groups of 512 blocks.
fn image(groups: u64) -> Vec<u8> {
    let mut b = ImageBuilder::new(params(groups));
    let docs = b.mkdir(ROOT, b"docs", 0o755).unwrap();
    let deep = b.mkdir(docs, b"deep", 0o700).unwrap();
    for k in 0..12u32 {
        let len = (k as usize * 1777) % 9000;
        let data: Vec<u8> = (0..len).map(|i| (i as u32 * 31 + k) as u8).collect();
        let dir = if k % 2 == 0 { docs } else { deep };
        b.add_file(
            dir,
            format!("f{k}").as_bytes(),
            data,
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
    }
    let one = b
        .add_file(
            ROOT,
            b"one.txt",
            b"hello\n".to_vec(),
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
    b.add_link(docs, b"again.txt", one).unwrap();
    b.add_symlink(ROOT, b"to-one", b"one.txt").unwrap();
    b.set_xattr(one, b"user.note", b"kept").unwrap();
    b.build().unwrap()
}

/// The superblock of a clean image.
fn superblock(img: &[u8]) -> Superblock {
    let mut blk: Block = [0; BLOCK_SIZE];
    blk.copy_from_slice(&img[..BLOCK_SIZE]);
    Superblock::parse(&blk, ANY_DEVICE).unwrap()
}

/// Every path of the tree and what it holds (content, or the link target, or `dir`),
/// read through the superblock the search takes. `None` when no superblock passes.
fn files(img: &[u8]) -> Option<BTreeMap<Vec<u8>, Vec<u8>>> {
    let dev = MemDevice::new(img);
    let mut bufs = Buffers::new();
    let l = locate(&dev, &mut bufs.data, ANY_DEVICE, None).ok()?;
    let fs = Fs::open_for_read(Substituted::new(&dev, &l.sb), &mut bufs.data).ok()?;
    let mut out = BTreeMap::new();
    let mut stack = vec![(ROOT, Vec::new())];
    while let Some((dir, path)) = stack.pop() {
        let inode = fs.inode(dir, &mut bufs.data).unwrap();
        let mut entries = Vec::new();
        fs.read_dir(&inode, &mut bufs, |e| {
            entries.push((e.inode, e.name().to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap();
        for (ino, name) in entries {
            let mut p = path.clone();
            p.push(b'/');
            p.extend_from_slice(&name);
            let i = fs.inode(ino, &mut bufs.data).unwrap();
            if i.is_dir() {
                out.insert(p.clone(), b"dir".to_vec());
                stack.push((ino, p));
            } else {
                let mut content = vec![0u8; i.size() as usize];
                fs.read(&i, 0, &mut content, &mut bufs).unwrap();
                out.insert(p, content);
            }
        }
    }
    Some(out)
}

fn findings(img: &[u8]) -> Vec<Finding> {
    fsck::findings(MemDevice::new(img), &fsck::Options::default()).0
}

fn errors(img: &[u8]) -> Vec<Finding> {
    findings(img)
        .into_iter()
        .filter(|f| f.severity() == Severity::Error)
        .collect()
}

fn opts() -> RepairOptions {
    RepairOptions {
        node_id: u64::MAX,
        force: false,
        memory_limit: 1 << 28,
        superblock: None,
    }
}

/// `repair` in `mode` over `img`, every fix accepted.
fn run_repair(img: &mut [u8], mode: Mode) -> tet_alloc::cetrafs::repair::RepairOutcome {
    repair(MemDeviceMut::new(img), mode, &opts(), &mut |_| true).unwrap()
}

#[test]
fn mkfs_writes_the_copies_where_the_geometry_puts_them() {
    for (groups, n) in [(3, 3), (1, 2)] {
        let img = image(groups);
        let sb = superblock(&img);
        assert!(sb.has_copies());
        assert_eq!(u64::from(sb.block_group_count()), groups);
        let places = sb.copy_blocks();
        assert_eq!(places.as_slice().len(), n);
        let last_desc = sb.raw().bg_table_start.get() + groups - 1;
        assert_eq!(places.as_slice()[0], last_desc);
        assert_eq!(places.as_slice()[1], sb.bg_regions_start());
        if groups > 1 {
            assert_eq!(
                places.as_slice()[2],
                sb.bg_span(sb.block_group_count() - 1).0
            );
        }
        let states = audit(&MemDevice::new(&img), &sb, &mut [0; BLOCK_SIZE]);
        assert!(states.iter().all(|s| s.problem.is_none()), "{states:?}");
        for &lba in places.as_slice() {
            let at = copy_offset(lba) as usize;
            // The copy: no flags, its own location, the primary's fields otherwise.
            assert_eq!(&img[at..at + 4], b"CTFS");
            assert_eq!(&img[at + 12..at + 16], &[0; 4]);
            assert_eq!(
                u64::from_le_bytes(img[at + 280..at + 288].try_into().unwrap()),
                at as u64
            );
            assert_eq!(img[at + 16..at + 280], img[16..280]);
        }
        assert!(errors(&img).is_empty());
        assert!(findings(&img).is_empty(), "{:?}", findings(&img));
    }
}

#[test]
fn every_byte_of_block_0_flipped_and_block_0_zeroed_cost_nothing() {
    let clean = image(3);
    let want = files(&clean).unwrap();
    assert!(want.len() > 15);
    // Each case built when it is checked. The bytes of block 0 past the superblock's
    // 424 belong to no structure: flipped all at once, they are one case.
    let case = |k: usize| -> (String, Vec<u8>) {
        let mut img = clean.clone();
        match k {
            k if k < SUPERBLOCK_LEN => {
                img[k] ^= 0xff;
                (format!("byte {k} flipped"), img)
            }
            k if k == SUPERBLOCK_LEN => {
                img[SUPERBLOCK_LEN..BLOCK_SIZE]
                    .iter_mut()
                    .for_each(|b| *b ^= 0xff);
                ("bytes 424.. flipped".into(), img)
            }
            _ => {
                img[..BLOCK_SIZE].fill(0);
                ("block 0 zeroed".into(), img)
            }
        }
    };
    let mut restored = 0;
    for (what, mut img) in (0..SUPERBLOCK_LEN + 2).map(case) {
        // The root (every file) still reads, through a copy when the primary fails.
        assert_eq!(files(&img).as_ref(), Some(&want), "{what}");
        let primary_fails = {
            let mut blk: Block = [0; BLOCK_SIZE];
            blk.copy_from_slice(&img[..BLOCK_SIZE]);
            Superblock::parse(&blk, ANY_DEVICE).is_err()
        };
        if primary_fails {
            // A damaged image (an error), never "not an image".
            let e = errors(&img);
            assert_eq!(e.len(), 1, "{what}: {e:?}");
            assert_eq!(e[0].error.offset / BLOCK_SIZE as u64, 0, "{what}: {e:?}");
        } else {
            assert!(errors(&img).is_empty(), "{what}");
        }
        let out = run_repair(&mut img, Mode::Yes);
        assert!(out.left.is_empty(), "{what}: {:?}", out.left);
        if primary_fails {
            restored += 1;
            assert_eq!(
                out.fixes[0].action, "primary superblock restored from the copy",
                "{what}"
            );
            assert_eq!(out.fixes[0].offset, 0);
        }
        assert!(findings(&img).is_empty(), "{what}: {:?}", findings(&img));
        assert_eq!(files(&img).as_ref(), Some(&want), "{what}");
        // Everything but block 0 is as mkfs wrote it: the restore wrote nothing else.
        assert!(img[BLOCK_SIZE..] == clean[BLOCK_SIZE..], "{what}");
        assert_eq!(img[16..280], clean[16..280], "{what}: the fields came back");
    }
    assert_eq!(
        restored,
        SUPERBLOCK_LEN + 1,
        "every byte of the 424 is checked"
    );
}

#[test]
fn preen_restores_the_primary_and_verify_says_which_copy_it_read() {
    let clean = image(2);
    let mut img = clean.clone();
    img[205] ^= 0xff; // a byte of the label
    let (found, outcome) = fsck::findings(MemDevice::new(&img), &fsck::Options::default());
    let sb = superblock(&clean);
    assert_eq!(
        outcome.superblock,
        Source::Copy(sb.copy_blocks().as_slice()[0])
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].code, Code::Checksum);
    assert_eq!(found[0].error.what, "superblock.checksum");
    assert!(outcome.cross_checked);
    let out = run_repair(&mut img, Mode::Preen);
    assert!(out.left.is_empty());
    assert_eq!(out.fixes.len(), 1, "{:?}", out.fixes);
    assert_eq!(out.fixes[0].code, Code::Checksum);
    assert_eq!(out.fixes[0].value, Some(sb.copy_blocks().as_slice()[0]));
    assert!(out.fixes[0].lossless);
    assert_eq!(img[..SUPERBLOCK_LEN][16..280], clean[16..280]);
    // A copy carries no SB_CLEAN: the restored primary has none.
    assert_eq!(&img[12..16], &[0; 4]);
    assert!(findings(&img).is_empty());
    // `-n` writes nothing and says what it would do.
    let mut again = clean.clone();
    again[205] ^= 0xff;
    let before = again.clone();
    let out = run_repair(&mut again, Mode::No);
    assert!(again == before);
    assert_eq!(
        out.fixes[0].action,
        "primary superblock restored from the copy"
    );
}

/// Damage that makes the copy in block `lba` fail: its magic.
fn break_copy(img: &mut [u8], lba: u64) {
    img[copy_offset(lba) as usize] ^= 0x20;
}

#[test]
fn each_copy_and_each_pair_damaged_the_image_still_mounts_from_what_is_left() {
    let clean = image(3);
    let want = files(&clean).unwrap();
    let places: Vec<u64> = superblock(&clean).copy_blocks().as_slice().to_vec();
    assert_eq!(places.len(), 3);
    let mut sets: Vec<Vec<u64>> = places.iter().map(|p| vec![*p]).collect();
    for i in 0..3 {
        for j in i + 1..3 {
            sets.push(vec![places[i], places[j]]);
        }
    }
    for set in &sets {
        // With the primary intact: warnings only, one per damaged copy, naming it; -p
        // rewrites them.
        let mut img = clean.clone();
        for &lba in set {
            break_copy(&mut img, lba);
        }
        let f = findings(&img);
        assert_eq!(f.len(), set.len(), "{set:?}: {f:?}");
        for (x, &lba) in f.iter().zip(set) {
            assert_eq!(x.code, Code::SuperblockCopy);
            assert_eq!(x.severity(), Severity::Warning);
            assert_eq!(x.error.offset, copy_offset(lba), "{set:?}");
        }
        let out = run_repair(&mut img, Mode::Preen);
        assert_eq!(out.fixes.len(), set.len(), "{set:?}: {:?}", out.fixes);
        assert!(img == clean, "{set:?}: the copies came back byte for byte");
        // With the primary gone too: the copy left is used.
        let mut img = clean.clone();
        for &lba in set {
            break_copy(&mut img, lba);
        }
        img[..BLOCK_SIZE].fill(0);
        let left: Vec<u64> = places
            .iter()
            .copied()
            .filter(|p| !set.contains(p))
            .collect();
        let dev = MemDevice::new(&img);
        let l = locate(&dev, &mut [0; BLOCK_SIZE], ANY_DEVICE, None).unwrap();
        assert!(
            matches!(l.source, Source::Copy(b) if left.contains(&b)),
            "{set:?}: {:?}",
            l.source
        );
        assert_eq!(files(&img).as_ref(), Some(&want), "{set:?}");
        let out = run_repair(&mut img, Mode::Yes);
        assert!(out.left.is_empty(), "{set:?}: {:?}", out.left);
        assert!(findings(&img).is_empty(), "{set:?}: {:?}", findings(&img));
        assert_eq!(files(&img).as_ref(), Some(&want), "{set:?}");
    }
    // Every copy and the primary gone: no superblock, said plainly (the primary's error).
    let mut img = clean.clone();
    for &lba in &places {
        break_copy(&mut img, lba);
    }
    img[0] ^= 0x20;
    let e = locate(
        &MemDevice::new(&img),
        &mut [0; BLOCK_SIZE],
        ANY_DEVICE,
        None,
    )
    .unwrap_err();
    assert_eq!(e.what, "superblock.magic");
    assert_eq!(files(&img), None);
    let f = findings(&img);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].code, Code::Magic);
    let before = img.clone();
    let out = run_repair(&mut img, Mode::Yes);
    assert!(!out.left.is_empty());
    assert!(img == before, "nothing is written without a superblock");
}

#[test]
fn the_search_is_bounded_and_takes_the_newest_copy() {
    let clean = image(3);
    let sb = superblock(&clean);
    let z = u64::from(sb.zone_group_count());
    let b = u64::from(sb.block_group_count());
    // Block 0 and the first copy's place both zeroed: the table scan finds group 0's.
    let mut img = clean.clone();
    img[..BLOCK_SIZE].fill(0);
    break_copy(&mut img, sb.copy_blocks().as_slice()[0]);
    let l = locate(
        &MemDevice::new(&img),
        &mut [0; BLOCK_SIZE],
        ANY_DEVICE,
        None,
    )
    .unwrap();
    assert_eq!(l.source, Source::Copy(sb.bg_regions_start()));
    assert!(l.reads <= z + b + 9, "{} reads", l.reads);
    // The first 17 blocks (the primary and both tables) zeroed: the scan of step 3
    // finds group 0's region header copy.
    let mut img = clean.clone();
    img[..17 * BLOCK_SIZE].fill(0);
    let l = locate(
        &MemDevice::new(&img),
        &mut [0; BLOCK_SIZE],
        ANY_DEVICE,
        None,
    )
    .unwrap();
    assert_eq!(l.source, Source::Copy(sb.bg_regions_start()));
    assert!(l.reads <= sb.bg_regions_start() + 16, "{} reads", l.reads);
    // Copies that disagree: the highest generation wins.
    let mut img = clean.clone();
    let dev = MemDeviceMut::new(&mut img);
    let newer = with_copies(&sb);
    rewrite(&dev, &newer, &mut [0; BLOCK_SIZE]).unwrap();
    // The last copy alone goes back to the old generation, the primary is zeroed.
    let last = sb.copy_blocks().as_slice()[2];
    let old = sb.copy_record(last);
    let at = copy_offset(last) as usize;
    img[at..at + SUPERBLOCK_LEN].copy_from_slice(zerocopy::IntoBytes::as_bytes(&old));
    img[..BLOCK_SIZE].fill(0);
    let l = locate(
        &MemDevice::new(&img),
        &mut [0; BLOCK_SIZE],
        ANY_DEVICE,
        Some(last),
    )
    .unwrap();
    assert_eq!(l.sb.raw().generation.get(), 0, "-b takes the copy named");
    let l = locate(
        &MemDevice::new(&img),
        &mut [0; BLOCK_SIZE],
        ANY_DEVICE,
        None,
    )
    .unwrap();
    assert_eq!(l.sb.raw().generation.get(), 1);
    assert_ne!(l.source, Source::Copy(last));
    // A copy moved elsewhere is not taken: its location names where it was written.
    let mut img = clean.clone();
    let from = copy_offset(sb.copy_blocks().as_slice()[0]) as usize;
    let rec = img[from..from + SUPERBLOCK_LEN].to_vec();
    let stray = 7 * BLOCK_SIZE + COPY_AT;
    img[stray..stray + SUPERBLOCK_LEN].copy_from_slice(&rec);
    let mut blk: Block = [0; BLOCK_SIZE];
    blk.copy_from_slice(&img[7 * BLOCK_SIZE..8 * BLOCK_SIZE]);
    let e = Superblock::parse_copy(&blk, 7, ANY_DEVICE).unwrap_err();
    assert_eq!(e.what, "superblock_copy.location (its own byte offset)");
    assert_eq!(e.offset, stray as u64 + 280);
    assert!(matches!(e.kind, ErrorKind::Mismatch { found, .. } if found == from as u64));
}

#[test]
fn an_image_without_copies_is_read_as_before_and_repair_adds_them() {
    let clean = image(2);
    let sb = superblock(&clean);
    let mut img = clean.clone();
    // The image as a tool without the bit would have written it.
    let mut raw = sb.primary_record();
    raw.feature_compat
        .set(raw.feature_compat.get() & !COMPAT_SB_COPIES);
    reseal(&mut raw);
    img[..SUPERBLOCK_LEN].copy_from_slice(zerocopy::IntoBytes::as_bytes(&raw));
    for &lba in sb.copy_blocks().as_slice() {
        let at = copy_offset(lba) as usize;
        img[at..at + SUPERBLOCK_LEN].fill(0);
    }
    assert!(findings(&img).is_empty(), "{:?}", findings(&img));
    let out = run_repair(&mut img, Mode::Preen);
    assert_eq!(out.fixes.len(), 1, "{:?}", out.fixes);
    assert_eq!(
        out.fixes[0].action,
        "superblock copies added (COMPAT_SB_COPIES set)"
    );
    let now = superblock(&img);
    assert!(now.has_copies());
    assert_eq!(now.raw().generation.get(), 1);
    let states = audit(&MemDevice::new(&img), &now, &mut [0; BLOCK_SIZE]);
    assert!(states.iter().all(|s| s.problem.is_none()), "{states:?}");
    assert!(findings(&img).is_empty());
    // Over bytes that are not blank: -p withholds, -y writes and says so.
    let mut img2 = img.clone();
    img2[..SUPERBLOCK_LEN].copy_from_slice(zerocopy::IntoBytes::as_bytes(&raw));
    let at = copy_offset(sb.copy_blocks().as_slice()[1]) as usize;
    img2[at..at + SUPERBLOCK_LEN].fill(0);
    img2[at + 100] = 0x5a;
    let out = run_repair(&mut img2, Mode::Preen);
    assert!(out.fixes.is_empty());
    assert_eq!(out.withheld.len(), 1);
    assert!(!superblock(&img2).has_copies());
    let out = run_repair(&mut img2, Mode::Yes);
    assert_eq!(
        out.fixes[0].action,
        tet_alloc::cetrafs::repair::COPIES_ADDED_OVER
    );
    assert!(superblock(&img2).has_copies());
    assert!(findings(&img2).is_empty());
}

/// A sink that keeps mkfs's writes in order, to replay any prefix of them.
#[derive(Default)]
struct Recorder(Vec<(u64, Box<Block>)>, Vec<usize>);

impl BlockSink for Recorder {
    fn write_block(&mut self, lba: u64, block: &Block) -> Result<(), Error> {
        self.0.push((lba, Box::new(*block)));
        Ok(())
    }
    fn barrier(&mut self) -> Result<(), Error> {
        self.1.push(self.0.len());
        Ok(())
    }
}

#[test]
fn a_power_cut_at_every_write_of_mkfs_leaves_no_superblock_or_a_complete_image() {
    let clean = image(2);
    let sb = superblock(&clean);
    // Rebuild the same image through the recorder.
    let mut p = params(2);
    assert_eq!(p.size_bytes, clean.len() as u64);
    p.uuid = Some(sb.raw().uuid);
    let mut b = ImageBuilder::new(p);
    b.add_file(
        ROOT,
        b"a",
        vec![7; 10_000],
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    let full = b.build().unwrap();
    let mut rec = Recorder::default();
    b.build_into(&mut rec).unwrap();
    let n = rec.0.len();
    // The copies come after a barrier, then the primary after another, last.
    assert_eq!(rec.0[n - 1].0, 0);
    assert_eq!(
        rec.1,
        vec![n - 1 - sb.copy_blocks().as_slice().len(), n - 1]
    );
    let mut valid_cuts = 0;
    for cut in 0..=n {
        let mut img = vec![0u8; full.len()];
        for (lba, blk) in &rec.0[..cut] {
            let at = *lba as usize * BLOCK_SIZE;
            img[at..at + BLOCK_SIZE].copy_from_slice(&blk[..]);
        }
        match locate(
            &MemDevice::new(&img),
            &mut [0; BLOCK_SIZE],
            ANY_DEVICE,
            None,
        ) {
            Err(_) => assert!(cut < n - 2, "cut {cut} of {n}: no superblock"),
            Ok(_) => {
                valid_cuts += 1;
                // Whatever superblock survives describes a complete image.
                let e: Vec<Finding> = errors(&img)
                    .into_iter()
                    .filter(|f| f.error.offset >= BLOCK_SIZE as u64)
                    .collect();
                assert!(e.is_empty(), "cut {cut} of {n}: {e:?}");
            }
        }
    }
    assert!(valid_cuts >= 2);
}

#[test]
fn a_power_cut_at_every_write_of_a_restore_or_a_rewrite_leaves_a_valid_superblock() {
    let clean = image(3);
    let want = files(&clean).unwrap();
    // The restore: the primary's label damaged, repair -y cut at every write.
    let mut damaged = clean.clone();
    damaged[210] ^= 0x01;
    let mut probe = damaged.clone();
    let dev = PowerCut::new(&mut probe, u64::MAX, 0);
    repair(&dev, Mode::Yes, &opts(), &mut |_| true).unwrap();
    let total = dev.writes.get();
    assert!(total >= 1);
    for cut in 0..total {
        for tear in [0, 1] {
            let mut img = damaged.clone();
            let dev = PowerCut::new(&mut img, cut, tear);
            let _ = repair(&dev, Mode::Yes, &opts(), &mut |_| true);
            assert_eq!(files(&img).as_ref(), Some(&want), "cut {cut} tear {tear}");
            let out = run_repair(&mut img, Mode::Yes);
            assert!(out.left.is_empty(), "cut {cut}: {:?}", out.left);
            assert!(findings(&img).is_empty(), "cut {cut}: {:?}", findings(&img));
        }
    }
    // A rewrite (what tune does): every cut leaves the old or the new superblock.
    let sb = superblock(&clean);
    let mut newer = sb.primary_record();
    newer.label = [0; 64];
    newer.label[..3].copy_from_slice(b"new");
    newer.generation.set(1);
    reseal(&mut newer);
    let mut probe = clean.clone();
    let dev = PowerCut::new(&mut probe, u64::MAX, 0);
    rewrite(&dev, &newer, &mut [0; BLOCK_SIZE]).unwrap();
    let total = dev.writes.get();
    assert_eq!(total, 1 + 3, "the primary, then each copy");
    for cut in 0..=total {
        for tear in [0, 1, 2] {
            let mut img = clean.clone();
            let dev = PowerCut::new(&mut img, cut, tear);
            let _ = rewrite(&dev, &newer, &mut [0; BLOCK_SIZE]);
            // The primary alone first, then with every copy lost in turn: a superblock
            // (old or new) is always found.
            for lost in [None, Some(0usize), Some(1), Some(2)] {
                let mut view = img.clone();
                if let Some(i) = lost {
                    view[..BLOCK_SIZE].fill(0);
                    break_copy(&mut view, sb.copy_blocks().as_slice()[i]);
                }
                let l = locate(
                    &MemDevice::new(&view),
                    &mut [0; BLOCK_SIZE],
                    ANY_DEVICE,
                    None,
                )
                .unwrap_or_else(|e| panic!("cut {cut} tear {tear} lost {lost:?}: {e}"));
                let label = &l.sb.raw().label[..3];
                assert!(label == b"new" || label == b"cop", "cut {cut}: {label:?}");
            }
        }
    }
}

/// A run read through `Substituted` is what its blocks read one at a time: block 0 as
/// the copy's record when the primary fails, the device's own bytes otherwise.
#[test]
fn runs_and_prefixes_through_a_substituted_superblock_read_as_single_blocks() {
    use tet_core::block::BlockDevice;
    let clean = image(2);
    let mut img = clean.clone();
    img[..BLOCK_SIZE].fill(0);
    let dev = MemDevice::new(&img);
    let l = locate(&dev, &mut [0; BLOCK_SIZE], ANY_DEVICE, None).unwrap();
    assert!(matches!(l.source, Source::Copy(_)));
    for sub in [Substituted::new(&dev, &l.sb), Substituted::unchanged(&dev)] {
        let mut singles = Vec::new();
        for lba in 0..5u64 {
            let mut b: Block = [0; BLOCK_SIZE];
            sub.read_block(lba, &mut b).unwrap();
            singles.extend_from_slice(&b);
        }
        for start in [0u64, 1] {
            let n = 5 - start as usize;
            let mut run = vec![0xeeu8; n * BLOCK_SIZE];
            sub.read_blocks(start, &mut run).unwrap();
            assert_eq!(
                run,
                singles[start as usize * BLOCK_SIZE..],
                "run from {start}"
            );
            let mut slots = vec![0xeeu8; n * 256];
            sub.read_prefixes(start, 256, &mut slots).unwrap();
            for k in 0..n {
                let at = (start as usize + k) * BLOCK_SIZE;
                assert_eq!(slots[k * 256..][..256], singles[at..at + 256], "slot {k}");
            }
        }
        let mut odd = vec![0u8; BLOCK_SIZE + 1];
        assert_eq!(
            sub.read_blocks(0, &mut odd).unwrap_err().kind,
            ErrorKind::Invalid
        );
    }
    // Substituted, block 0 reads the copy's record; unchanged, the zeros it holds.
    let mut b: Block = [0; BLOCK_SIZE];
    Substituted::new(&dev, &l.sb).read_block(0, &mut b).unwrap();
    assert_eq!(&b[..4], b"CTFS");
    Substituted::unchanged(&dev).read_block(0, &mut b).unwrap();
    assert!(b.iter().all(|x| *x == 0));
}
