//! cetrafs: one flipped bit in any checksummed structure is reported with the structure,
//! the field and the block; mount checks refuse bad maps and features; journals classify
//! slots by the pre-change checksum rule; the overlay serves committed blocks.

use std::ops::ControlFlow;

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::testing::write_journal_txn;
use tet_core::block::{MemDevice, BLOCK_SIZE};
use tet_core::cetrafs::Finding;
use tet_core::cetrafs::{Buffers, Committed, Extent, Fs, SlotClass};
use tet_core::checksum::crc32c_skipping;
use tet_core::finding::Severity;
use tet_core::ErrorKind;

/// Error-severity findings of the full check.
fn check_image(img: &[u8]) -> Vec<Finding> {
    fsck::findings(MemDevice::new(img), &fsck::Options::default())
        .0
        .into_iter()
        .filter(|f| f.severity() == Severity::Error)
        .collect()
}

const B: usize = BLOCK_SIZE;

fn base() -> Vec<u8> {
    let p = Params {
        size_bytes: 16 << 20,
        bg_size_blocks: 1024,
        inodes: 128,
        nodes: 4,
        journal_blocks: 9,
        ..Params::default()
    };
    let mut b = ImageBuilder::new(p);
    let d = b.mkdir(ImageBuilder::ROOT, b"dir", 0o755).unwrap();
    let f = b
        .add_file(
            d,
            b"file",
            vec![7u8; 3 * B],
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
    b.set_xattr(f, b"user.k", b"v").unwrap();
    b.add_file(
        ImageBuilder::ROOT,
        b"deep",
        vec![5u8; 1100 * B],
        Sparse::Dense,
        Placement::Fragmented,
    )
    .unwrap();
    let mut img = b.build().unwrap();
    // A registry row for node 7 in row 0.
    let fs = Fs::open(MemDevice::new(&img), &mut [0u8; B]).unwrap();
    let reg = fs.superblock().raw().registry_start.get() as usize;
    let js = fs.journal_start(0);
    let mut row = vec![0u8; 128];
    row[0..4].copy_from_slice(b"CTND");
    row[8..16].copy_from_slice(&7u64.to_le_bytes());
    row[16..20].copy_from_slice(&1u32.to_le_bytes());
    row[40..48].copy_from_slice(&js.to_le_bytes());
    row[48..54].copy_from_slice(b"node-a");
    let c = crc32c_skipping(&row, 120);
    row[120..128].copy_from_slice(&c.to_le_bytes());
    img[reg * B..reg * B + 128].copy_from_slice(&row);
    img
}

fn fs(img: &[u8]) -> Fs<MemDevice<'_>> {
    Fs::open(MemDevice::new(img), &mut [0u8; B]).unwrap()
}

fn reseal_sb(img: &mut [u8]) {
    let c = crc32c_skipping(&img[..424], 416);
    img[416..424].copy_from_slice(&c.to_le_bytes());
}

/// Flips one bit at `block * 4096 + byte` and expects a checksum finding in `block`
/// whose field names `what`.
fn flip_reports(block: u64, byte: usize, what: &str) {
    let mut img = base();
    let at = block as usize * B + byte;
    img[at] ^= 0x10;
    let found = check_image(&img);
    let hit = found
        .iter()
        .find(|p| matches!(p.error.kind, ErrorKind::ChecksumMismatch { .. }));
    let p = hit.unwrap_or_else(|| {
        panic!(
            "no checksum finding for {what}: {:?}",
            found.iter().map(|p| p.error).collect::<Vec<_>>()
        )
    });
    assert_eq!(p.code.as_str(), "checksum");
    assert_eq!(
        p.error.offset / B as u64,
        block,
        "{what}: wrong block in {:?}",
        p.error
    );
    assert!(
        p.error.what.contains(what),
        "{} does not name {what}",
        p.error.what
    );
}

#[test]
fn base_image_verifies_clean() {
    let img = base();
    let found: Vec<_> = check_image(&img).into_iter().map(|p| p.error).collect();
    assert_eq!(found, vec![]);
}

#[test]
fn every_checksummed_structure_reports_a_flipped_bit() {
    let img = base();
    let f = fs(&img);
    let sb = *f.superblock();
    let raw = sb.raw();
    let z = u64::from(sb.zone_group_count());
    let mut bufs = Buffers::new();
    flip_reports(0, 100, "superblock.checksum");
    flip_reports(1, 20, "zone_group.hot_checksum");
    flip_reports(1, 530, "zone_group.cold_checksum");
    flip_reports(1 + z, 70, "block_group.checksum");
    flip_reports(raw.bg_regions_start.get(), 30, "region_header.checksum");
    flip_reports(raw.registry_start.get(), 60, "registry.checksum");
    flip_reports(f.journal_start(1), 30, "journal_flag.checksum");
    let file = f.resolve(b"/dir/file", &mut bufs).unwrap();
    flip_reports(file.lba(), 190, "inode.checksum");
    flip_reports(file.raw().xattr_block.get(), 70, "xattr_block.tail");
    let dir = f.resolve(b"/dir", &mut bufs).unwrap();
    let mut first: Option<Extent> = None;
    let _ = f.for_each_extent(&dir, &mut bufs.tree, |e| {
        first = Some(e);
        Ok(ControlFlow::Break(()))
    });
    flip_reports(first.unwrap().physical, 300, "dir_block.tail");
    // The deep file: its root's first slot points to an interior block, whose first
    // entry points to a leaf.
    let deep = f.resolve(b"/deep", &mut bufs).unwrap();
    assert_eq!(deep.depth(), 2);
    let interior = u64::from_le_bytes(deep.raw().slots[4..12].try_into().unwrap());
    flip_reports(interior, 20, "extent_block.tail.crc");
    let leaf = u64::from_le_bytes(
        img[interior as usize * B + 16..interior as usize * B + 24]
            .try_into()
            .unwrap(),
    );
    flip_reports(leaf, 100, "extent_block.tail.crc");
}

#[test]
fn slot_header_bit_flip_and_torn_payload() {
    let mut img = base();
    let f = fs(&img);
    let target = f.superblock().raw().inode_table_start.get() + 100;
    let slot0 = f.journal_start(0) + 1;
    write_journal_txn(
        &mut img,
        0,
        0,
        9,
        &[(target, vec![1; 10], true)],
        true,
        true,
    )
    .unwrap();
    assert_eq!(check_image(&img), vec![]);
    let mut bad = img.clone();
    bad[slot0 as usize * B + 50] ^= 1;
    let p = &check_image(&bad)[0];
    assert_eq!(p.error.what, "slot.header_checksum");
    assert_eq!(p.error.offset / B as u64, slot0);
    // A payload that fails its checksum in a transaction whose headers say committed is
    // a finding (the core's replay view treats it as uncommitted and never replays it).
    let mut torn = img.clone();
    torn[(slot0 as usize + 1) * B + 3] ^= 1;
    let p = &check_image(&torn)[0];
    assert_eq!(p.code.as_str(), "journal-payload");
    assert_eq!(p.error.offset, slot0 * B as u64 + 24);
    // Not replayable: the replay view leaves it out.
    assert_eq!(classes(&torn, 0), []);
}

#[test]
fn mount_refuses_unknown_incompat_bits_by_position() {
    let mut img = base();
    img[48] |= 1 << 5;
    reseal_sb(&mut img);
    let e = Fs::open(MemDevice::new(&img), &mut [0u8; B]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::UnknownFlags { bits: 5 });
    assert_eq!(
        (e.what, e.offset),
        ("superblock.feature_incompat (bit position)", 48)
    );
}

#[test]
fn unknown_ro_compat_bits_mount_read_only() {
    let mut img = base();
    img[56 + 1] |= 2; // bit 9
    reseal_sb(&mut img);
    assert!(fs(&img).superblock().read_only());
    assert!(!fs(&base()).superblock().read_only());
}

#[test]
fn mount_checks_the_region_map() {
    // Inode table overlapping the inode bitmap.
    let mut img = base();
    let start = u64::from_le_bytes(img[88..96].try_into().unwrap());
    img[104..112].copy_from_slice(&start.to_le_bytes());
    reseal_sb(&mut img);
    let e = Fs::open(MemDevice::new(&img), &mut [0u8; B]).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Overlap { .. }), "{e:?}");
    assert_eq!(e.offset, 104);
    // total_blocks past the device.
    let mut img = base();
    let total = u64::from_le_bytes(img[32..40].try_into().unwrap());
    img[32..40].copy_from_slice(&(total + 1).to_le_bytes());
    reseal_sb(&mut img);
    let e = Fs::open(MemDevice::new(&img), &mut [0u8; B]).unwrap_err();
    assert_eq!(
        (e.kind, e.offset),
        (
            ErrorKind::ShortDevice {
                device_blocks: total,
                total_blocks: total + 1
            },
            32
        )
    );
    // A region wrapping past u64::MAX.
    let mut img = base();
    img[128..136].copy_from_slice(&u64::MAX.to_le_bytes());
    reseal_sb(&mut img);
    let e = Fs::open(MemDevice::new(&img), &mut [0u8; B]).unwrap_err();
    assert_eq!((e.kind, e.offset), (ErrorKind::Overflow, 120));
    // Zone group free count disagreeing with its block groups: a cached counter, so the
    // mount goes ahead and the check reports it.
    let mut img = base();
    img[B + 16] ^= 1;
    let c = crc32c_skipping(&img[B..B + 64], 56);
    img[B + 56..B + 64].copy_from_slice(&c.to_le_bytes());
    assert!(Fs::open(MemDevice::new(&img), &mut [0u8; B]).is_ok());
    let p = &check_image(&img)[0];
    assert_eq!(p.code.as_str(), "zone-free-count");
    assert_eq!(
        (p.error.what, p.error.offset),
        ("zone_group.free_data_blocks", B as u64 + 16)
    );
}

/// The replay class of each committed slot of row `row`'s journal, in slot order
/// (classified across every journal).
fn classes(img: &[u8], row: u32) -> Vec<SlotClass> {
    let f = fs(img);
    let mut bufs = Buffers::new();
    let mut table = vec![Committed::default(); 64];
    let n = f.committed_slots(&mut table, &mut bufs);
    table.truncate(n);
    f.classify_chains(&mut table, &mut bufs.data).unwrap();
    table.sort_by_key(|c| (c.row, c.slot));
    table
        .iter()
        .filter(|c| c.row == row)
        .map(|c| c.class.unwrap())
        .collect()
}

#[test]
fn journal_replay_classification_and_overlay() {
    let img0 = base();
    let f = fs(&img0);
    let mut bufs = Buffers::new();
    let file = f.resolve(b"/dir/file", &mut bufs).unwrap();
    let mut target = 0;
    let _ = f.for_each_extent(&file, &mut bufs.tree, |e| {
        target = e.physical;
        Ok(ControlFlow::Break(()))
    });
    let new = vec![0xAB; B];
    // Committed, dirty: the target still holds the pre-change contents.
    let mut img = img0.clone();
    write_journal_txn(
        &mut img,
        1,
        0,
        42,
        &[(target, new.clone(), false)],
        true,
        true,
    )
    .unwrap();
    assert_eq!(classes(&img, 1), [SlotClass::NeedsReplay]);
    // The overlay serves the journal copy; reading through it shows the new bytes.
    let f = fs(&img);
    let mut table = [Committed::default(); 4];
    let ov = f.overlay(&mut table, &mut bufs).unwrap();
    assert_eq!(ov.entries().len(), 1);
    assert_eq!(ov.entries()[0].target, target);
    let dev = tet_core::cetrafs::OverlayDevice::new(MemDevice::new(&img), &ov);
    let fo = Fs::open(dev, &mut bufs.data).unwrap();
    let fi = fo.resolve(b"/dir/file", &mut bufs).unwrap();
    let mut out = vec![0u8; 3 * B];
    fo.read(&fi, 0, &mut out, &mut bufs).unwrap();
    assert_eq!(&out[..B], &new[..]);
    assert_eq!(&out[B..], &vec![7u8; 2 * B][..]);
    // A table too small is its own error.
    let e = f.overlay(&mut [], &mut bufs).unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Budget {
            needed: 1,
            available: 0
        }
    );
    assert_eq!(e.what, "journal overlay table");
    // Already applied.
    let mut applied = img.clone();
    applied[target as usize * B..(target as usize + 1) * B].copy_from_slice(&new);
    assert_eq!(classes(&applied, 1), [SlotClass::AlreadyApplied]);
    // Conflicting: the target changed to something else since.
    let mut conflict = img.clone();
    conflict[target as usize * B] = 0x55;
    assert_eq!(classes(&conflict, 1), [SlotClass::Conflicting]);
    // F_FRESH replays whatever the target holds.
    let mut fresh = img0.clone();
    write_journal_txn(
        &mut fresh,
        1,
        0,
        43,
        &[(target, new.clone(), true)],
        true,
        true,
    )
    .unwrap();
    fresh[target as usize * B] = 0x55;
    assert_eq!(classes(&fresh, 1), [SlotClass::NeedsReplay]);
    // Uncommitted (no F_COMMIT) and clean journals.
    let mut unc = img0.clone();
    write_journal_txn(
        &mut unc,
        1,
        0,
        44,
        &[
            (target, new.clone(), false),
            (target + 1, new.clone(), false),
        ],
        false,
        true,
    )
    .unwrap();
    assert_eq!(classes(&unc, 1), []);
    let mut clean = img0.clone();
    write_journal_txn(&mut clean, 1, 0, 45, &[(target, new, false)], true, false).unwrap();
    assert_eq!(classes(&clean, 1), []);
}

/// Transaction 1 (row 1) turns A into B and transaction 2 (row 2) turns B into C: a
/// chain across two journals, classified by checksums, and served at its end.
#[test]
fn a_chain_across_journals_replays_in_txn_order() {
    let img0 = base();
    let f = fs(&img0);
    let mut bufs = Buffers::new();
    let file = f.resolve(b"/dir/file", &mut bufs).unwrap();
    let mut target = 0;
    let _ = f.for_each_extent(&file, &mut bufs.tree, |e| {
        target = e.physical;
        Ok(ControlFlow::Break(()))
    });
    let t = target as usize * B;
    let a = img0[t..t + B].to_vec();
    let (b, c) = (vec![0xBB; B], vec![0xCC; B]);
    let mut img = img0.clone();
    write_journal_txn(&mut img, 1, 0, 1, &[(target, b.clone(), false)], true, true).unwrap();
    img[t..t + B].copy_from_slice(&b);
    write_journal_txn(&mut img, 2, 0, 2, &[(target, c.clone(), false)], true, true).unwrap();
    let at = |img: &mut Vec<u8>, v: &[u8]| img[t..t + B].copy_from_slice(v);
    // Disk at A: both need replay (not "2 conflicts").
    at(&mut img, &a);
    assert_eq!(
        (classes(&img, 1), classes(&img, 2)),
        (vec![SlotClass::NeedsReplay], vec![SlotClass::NeedsReplay])
    );
    let f = fs(&img);
    let mut table = [Committed::default(); 4];
    let ov = f.overlay(&mut table, &mut bufs).unwrap();
    assert_eq!(ov.entries().len(), 1);
    assert_eq!(
        ov.entries()[0].txn_id,
        2,
        "a chain is served at its last version"
    );
    // Disk at B: 1 applied, 2 needs replay. Disk at C: both applied.
    at(&mut img, &b);
    assert_eq!(
        (classes(&img, 1), classes(&img, 2)),
        (
            vec![SlotClass::AlreadyApplied],
            vec![SlotClass::NeedsReplay]
        )
    );
    at(&mut img, &c);
    assert_eq!(
        (classes(&img, 1), classes(&img, 2)),
        (
            vec![SlotClass::AlreadyApplied],
            vec![SlotClass::AlreadyApplied]
        )
    );
    // Disk at something else: the chain conflicts from its start.
    img[t] ^= 0x5A;
    assert_eq!(
        (classes(&img, 1), classes(&img, 2)),
        (vec![SlotClass::Conflicting], vec![SlotClass::Conflicting])
    );
}

/// Flash storage over a byte vector, as an MCU driver would present it.
struct Flash(Vec<u8>);

impl embedded_storage::ReadStorage for Flash {
    type Error = ();
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), ()> {
        let o = offset as usize;
        bytes.copy_from_slice(self.0.get(o..o + bytes.len()).ok_or(())?);
        Ok(())
    }
    fn capacity(&self) -> usize {
        self.0.len()
    }
}

#[test]
fn flash_adapter_reads_an_image_at_an_offset() {
    let img = base();
    let mut flash = vec![0xFFu8; 8192];
    flash.extend_from_slice(&img);
    let dev = tet_core::block::FlashDevice::new(Flash(flash), 8192);
    let mut bufs = Buffers::new();
    let f = Fs::open(&dev, &mut bufs.data).unwrap();
    let file = f.resolve(b"/dir/file", &mut bufs).unwrap();
    let mut v = [0u8; 4];
    assert_eq!(f.xattr(&file, b"user.k", &mut v, &mut bufs).unwrap(), 1);
    assert_eq!(&v[..1], b"v");
    let mut out = vec![0u8; 100];
    assert_eq!(
        f.read(&file, 3 * B as u64 - 50, &mut out, &mut bufs)
            .unwrap(),
        50
    );
    assert_eq!(&out[..50], &[7u8; 50]);
}
