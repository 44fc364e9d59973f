//! Journal replay: a chain of transactions across two journals, replayed whole, refused
//! for a live node, idempotent, and crash-safe: a power cut after every write, and a
//! write torn at a 512-byte boundary, then replay again, always converges to the image
//! with every transaction applied, and the checker sees nothing replay would not fix.

mod power;
use power::PowerCut;

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::testing::{register_node, write_journal_txn};
use tet_core::block::{BlockDeviceMut, MemDevice, MemDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::check::Severity;
use tet_core::cetrafs::replay::{replay, ReplayError, ReplayOptions, ReplayReport};
use tet_core::cetrafs::{Buffers, Committed, Fs};

const B: usize = BLOCK_SIZE;
const ME: u64 = 0xFEED;

/// Files `a` (1 block) and `b` (2 blocks); rows 0 and 1 belong to nodes 7 and 8, which
/// crashed and were FENCED. Transaction 1 (row 0) turns `a` into B; 2 (row 1) turns B into C; 3 (row 0)
/// rewrites both blocks of `b`. Returns the image and the expected contents after replay.
fn scenario() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let p = Params {
        size_bytes: 8 << 20,
        bg_size_blocks: 512,
        inodes: 32,
        nodes: 4,
        journal_blocks: 9,
        ..Params::default()
    };
    let mut b = ImageBuilder::new(p);
    b.add_file(1, b"a", vec![b'A'; B], Sparse::Dense, Placement::Contiguous)
        .unwrap();
    b.add_file(
        1,
        b"b",
        vec![b'x'; 2 * B],
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    let mut img = b.build().unwrap();
    register_node(&mut img, 0, 7, 2, b"n7").unwrap();
    register_node(&mut img, 1, 8, 2, b"n8").unwrap();
    let a0 = block_of(&img, b"/a", 0);
    let (b0, b1) = (block_of(&img, b"/b", 0), block_of(&img, b"/b", 1));
    let at = |lba: u64| lba as usize * B;
    write_journal_txn(&mut img, 0, 0, 1, &[(a0, vec![b'B'; B], false)], true, true).unwrap();
    // Transaction 2's pre-change checksum is transaction 1's result.
    let saved = img[at(a0)..at(a0) + B].to_vec();
    img[at(a0)..at(a0) + B].fill(b'B');
    write_journal_txn(&mut img, 1, 0, 2, &[(a0, vec![b'C'; B], false)], true, true).unwrap();
    img[at(a0)..at(a0) + B].copy_from_slice(&saved);
    write_journal_txn(
        &mut img,
        0,
        1,
        3,
        &[(b0, vec![b'D'; B], false), (b1, vec![b'E'; B], false)],
        true,
        true,
    )
    .unwrap();
    let mut want_b = vec![b'D'; B];
    want_b.extend(vec![b'E'; B]);
    (img, vec![b'C'; B], want_b)
}

fn block_of(img: &[u8], path: &[u8], logical: u32) -> u64 {
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).unwrap();
    let i = fs.resolve(path, &mut bufs).unwrap();
    match fs.map_block(&i, logical, &mut bufs.tree).unwrap() {
        tet_core::cetrafs::Mapping::Mapped { physical, .. } => physical,
        m => panic!("{m:?}"),
    }
}

fn read_file(img: &[u8], path: &[u8]) -> Vec<u8> {
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).unwrap();
    let i = fs.resolve(path, &mut bufs).unwrap();
    let mut out = vec![0u8; i.size() as usize];
    fs.read(&i, 0, &mut out, &mut bufs).unwrap();
    out
}

fn run<D: BlockDeviceMut>(dev: D, force: bool) -> std::result::Result<ReplayReport, ReplayError> {
    let mut bufs = Buffers::new();
    let fs = Fs::open(dev, &mut bufs.data).map_err(ReplayError::Device)?;
    let mut table = vec![Committed::default(); 32];
    replay(
        &fs,
        ReplayOptions { node_id: ME, force },
        &mut table,
        &mut bufs,
        &mut |_: &tet_core::cetrafs::Finding| {},
    )
}

fn errors(img: &[u8]) -> Vec<tet_core::cetrafs::Finding> {
    fsck::findings(MemDevice::new(img), &fsck::Options::default())
        .0
        .into_iter()
        .filter(|f| f.severity() == Severity::Error)
        .collect()
}

fn journals_clean(img: &[u8]) -> bool {
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).unwrap();
    (0..4).all(|row| !fs.journal_flag(row, &mut bufs.data).unwrap().is_dirty())
}

#[test]
fn replay_applies_a_chain_across_journals_once() {
    let (mut img, a, b) = scenario();
    // Before: the checker sees the image as replay will leave it, and only warns.
    assert_eq!(errors(&img), vec![]);
    assert_eq!(read_file(&img, b"/a"), vec![b'A'; B]);
    let r = run(MemDeviceMut::new(&mut img), false).unwrap();
    assert_eq!(
        r,
        ReplayReport {
            journals: 2,
            written: 4,
            already: 0,
            conflicts: 0
        }
    );
    assert_eq!(read_file(&img, b"/a"), a);
    assert_eq!(read_file(&img, b"/b"), b);
    assert!(journals_clean(&img));
    let (found, _) = fsck::findings(MemDevice::new(&img), &fsck::Options::default());
    assert_eq!(found, vec![], "nothing left, not even a warning");
    // Idempotent: a second run changes no byte.
    let before = img.clone();
    let r = run(MemDeviceMut::new(&mut img), false).unwrap();
    assert_eq!(r, ReplayReport::default());
    assert!(img == before);
}

#[test]
fn a_live_nodes_journal_is_refused_unless_forced() {
    let (mut img, a, _) = scenario();
    register_node(&mut img, 1, 8, 1, b"n8").unwrap();
    let before = img.clone();
    assert_eq!(
        run(MemDeviceMut::new(&mut img), false).unwrap_err(),
        ReplayError::LiveNode { row: 1, node_id: 8 }
    );
    assert!(img == before, "a refused replay writes nothing");
    run(MemDeviceMut::new(&mut img), true).unwrap();
    assert_eq!(read_file(&img, b"/a"), a);
}

#[test]
fn a_power_cut_at_any_write_then_replay_again_converges() {
    let (img0, a, b) = scenario();
    // Count the writes of an uninterrupted replay.
    let mut probe = img0.clone();
    let dev = PowerCut::new(&mut probe, u64::MAX, 0);
    run(&dev, false).unwrap();
    let total = dev.writes.get();
    assert!(total >= 9, "{total} writes");
    let mut cases = 0;
    for cut in 0..=total {
        for tear in [0usize, 1, 3, 7] {
            if tear > 0 && cut == 0 {
                continue;
            }
            let mut img = img0.clone();
            let dev = PowerCut::new(&mut img, cut, tear);
            let first = run(&dev, false);
            assert_eq!(
                first.is_ok(),
                cut >= total,
                "cut {cut} tear {tear}: {first:?}"
            );
            // Whatever was cut, the checker reports nothing replay will not fix, and
            // each file reads either before or after its transactions.
            assert_eq!(
                errors(&img),
                vec![],
                "cut {cut} tear {tear}: before the rerun"
            );
            // Power back: replay again, to the end.
            run(MemDeviceMut::new(&mut img), false).unwrap();
            assert!(journals_clean(&img), "cut {cut} tear {tear}");
            assert_eq!(errors(&img), vec![], "cut {cut} tear {tear}");
            assert_eq!(read_file(&img, b"/a"), a, "cut {cut} tear {tear}");
            assert_eq!(read_file(&img, b"/b"), b, "cut {cut} tear {tear}");
            cases += 1;
        }
    }
    assert!(cases > 30);
}

/// Repair of a dirty, damaged image — journals to replay, a wrong link count, a group
/// free count off, a bitmap padding bit clear — cut after every write (and torn), then
/// repaired again: always converges to a clean image with every file's new content.
#[test]
fn a_power_cut_at_any_write_of_a_repair_then_repair_again_converges() {
    use tet_alloc::cetrafs::repair::{repair, Mode, RepairOptions};
    use tet_alloc::cetrafs::testing::reseal;
    let (mut img0, a, b) = scenario();
    {
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&img0), &mut bufs.data).unwrap();
        let ia = fs.resolve(b"/a", &mut bufs).unwrap().lba() as usize * B;
        let bg0 = fs.superblock().raw().bg_table_start.get() as usize * B;
        let ib = fs.superblock().raw().inode_bitmap_start.get() as usize * B;
        img0[ia + 28] = 3; // nlink
        img0[bg0 + 64] ^= 1; // free_data_blocks
        img0[ib + B - 1] &= 0x7F; // a padding bit
        reseal(&mut img0);
    }
    let opts = RepairOptions {
        node_id: ME,
        force: false,
        memory_limit: 1 << 30,
        superblock: None,
    };
    let mut probe = img0.clone();
    let dev = PowerCut::new(&mut probe, u64::MAX, 0);
    let out = repair(&dev, Mode::Yes, &opts, &mut |_| true).unwrap();
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert!(out.fixes.len() >= 3, "{:?}", out.fixes);
    let total = dev.writes.get();
    assert_eq!(errors(&probe), vec![]);
    for cut in 0..total {
        for tear in [0usize, 2, 5] {
            let mut img = img0.clone();
            let dev = PowerCut::new(&mut img, cut, tear);
            assert!(repair(&dev, Mode::Yes, &opts, &mut |_| true).is_err());
            let out = repair(MemDeviceMut::new(&mut img), Mode::Yes, &opts, &mut |_| true)
                .unwrap_or_else(|e| panic!("cut {cut} tear {tear}: {e:?}"));
            assert!(out.left.is_empty(), "cut {cut} tear {tear}: {:?}", out.left);
            assert_eq!(errors(&img), vec![], "cut {cut} tear {tear}");
            assert!(journals_clean(&img), "cut {cut} tear {tear}");
            assert_eq!(read_file(&img, b"/a"), a, "cut {cut} tear {tear}");
            assert_eq!(read_file(&img, b"/b"), b, "cut {cut} tear {tear}");
        }
    }
}
