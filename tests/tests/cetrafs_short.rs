//! cetrafs: an image cut short (a device shorter than `total_blocks`, docs/cetrafs.md
//! section 2, check 3). A mount that may write refuses it, naming `total_blocks` and
//! both lengths; `Fs::open_shortened` mounts it for reading: what lies before the end
//! reads byte for byte, a read past the end names its block; the check reports the
//! truncation first and then each block past the end it needs, at every cut; replay and
//! repair leave the image untouched.

use std::ops::ControlFlow;

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::repair::{repair, Mode, RepairOptions};
use tet_alloc::cetrafs::testing::write_journal_txn;
use tet_core::block::{Block, BlockDevice, FlashDevice, MemDevice, MemDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::replay::{replay, ReplayError, ReplayOptions};
use tet_core::cetrafs::{Buffers, Code, Committed, Extent, Finding, Fs, Superblock, ANY_DEVICE};
use tet_core::{Category, Error, ErrorKind, Fault};

const B: usize = BLOCK_SIZE;
/// Blocks in the filesystem (32 MiB).
const TOTAL: u64 = 8192;

/// The files of the image, with their contents.
struct Image {
    img: Vec<u8>,
    before: Vec<u8>,
    note: Vec<u8>,
    tail: Vec<u8>,
}

/// A 32 MiB image: `/before.bin` (6 blocks, the last one partial), `/dir/note.txt` and
/// `/tail.bin` (600 blocks, contiguous after them), all near the start of block group 0.
fn image() -> Image {
    let mut b = ImageBuilder::new(Params {
        size_bytes: TOTAL * 4096,
        bg_size_blocks: 2048,
        inodes: 64,
        ..Params::default()
    });
    let before: Vec<u8> = (0..5 * B + 123).map(|i| (i % 251) as u8).collect();
    let note = b"written before the cut\n".to_vec();
    let tail: Vec<u8> = (0..600 * B).map(|i| (i % 253) as u8).collect();
    let d = b.mkdir(ImageBuilder::ROOT, b"dir", 0o755).unwrap();
    b.add_file(
        ImageBuilder::ROOT,
        b"before.bin",
        before.clone(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    b.add_file(
        d,
        b"note.txt",
        note.clone(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    b.add_file(
        ImageBuilder::ROOT,
        b"tail.bin",
        tail.clone(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    let img = b.build().unwrap();
    assert_eq!(img.len() as u64, TOTAL * 4096);
    Image {
        img,
        before,
        note,
        tail,
    }
}

/// The extents of `path` and its inode number.
fn extents(img: &[u8], path: &[u8]) -> (u64, Vec<Extent>) {
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).unwrap();
    let inode = fs.resolve(path, &mut bufs).unwrap();
    let mut out = Vec::new();
    let walked = fs.for_each_extent(&inode, &mut bufs.tree, |e| {
        out.push(e);
        Ok(ControlFlow::Continue(()))
    });
    assert!(walked.unwrap().is_continue());
    (inode.ino(), out)
}

/// A cut through the middle of `/tail.bin`, after everything else the image holds.
fn mid_cut(img: &[u8]) -> u64 {
    let (_, tail) = extents(img, b"/tail.bin");
    assert_eq!(tail.len(), 1, "{tail:?}");
    let cut = tail[0].physical + 300;
    for p in [&b"/before.bin"[..], b"/dir/note.txt", b"/dir", b"/"] {
        for e in extents(img, p).1 {
            assert!(e.physical + u64::from(e.len) <= tail[0].physical, "{e:?}");
        }
    }
    cut
}

fn short(cut: u64) -> ErrorKind {
    ErrorKind::ShortDevice {
        device_blocks: cut,
        total_blocks: TOTAL,
    }
}

/// The first finding of a check of an image cut to `cut` blocks.
fn truncation(cut: u64) -> Finding {
    Finding::new(
        Code::ReadFailed,
        Error::new(short(cut), "superblock.total_blocks", 32),
    )
}

/// The whole of a file, read through `fs`.
fn read_all<D: BlockDevice>(fs: &Fs<D>, path: &[u8]) -> Result<Vec<u8>, Error> {
    let mut bufs = Buffers::new();
    let inode = fs.resolve(path, &mut bufs)?;
    let mut out = vec![0u8; inode.size() as usize];
    let n = fs.read(&inode, 0, &mut out, &mut bufs)?;
    out.truncate(n);
    Ok(out)
}

#[test]
fn a_mount_that_may_write_refuses_a_short_device_naming_total_blocks() {
    let im = image();
    for cut in [TOTAL - 1, 500, 8] {
        let img = &im.img[..cut as usize * B];
        let e = Fs::open(MemDevice::new(img), &mut [0u8; B]).unwrap_err();
        assert_eq!(e, Error::new(short(cut), "superblock.total_blocks", 32));
        assert_eq!(e.kind.category(), Category::Truncated);
        let e = Fs::open_for_read(MemDevice::new(img), &mut [0u8; B]).unwrap_err();
        assert_eq!(e.kind, short(cut));
        let lean = Fs::<_, Fault>::open_for_read_as(MemDevice::new(img), &mut [0u8; B]);
        assert_eq!(lean.unwrap_err(), Fault(Category::Truncated));
    }
    let e = Fs::open(
        MemDevice::new(&im.img[..(TOTAL as usize - 1) * B]),
        &mut [0; B],
    );
    assert_eq!(
        e.unwrap_err().to_string(),
        "superblock.total_blocks (byte 0x20) the image is 8191 blocks but the filesystem \
         is 8192: was it truncated?"
    );
    // The superblock alone: the device's length is the only check `ANY_DEVICE` skips.
    let block0: &Block = im.img[..B].try_into().unwrap();
    assert_eq!(
        Superblock::parse(block0, TOTAL - 1).unwrap_err().kind,
        short(TOTAL - 1)
    );
    assert_eq!(
        Superblock::parse(block0, ANY_DEVICE)
            .unwrap()
            .total_blocks(),
        TOTAL
    );
    let mut bad = block0.to_owned();
    bad[8] ^= 1; // block_size, under a now wrong checksum
    assert!(Superblock::parse(&bad, ANY_DEVICE).is_err());
}

#[test]
fn open_shortened_reads_what_lies_before_the_end_and_names_the_block_past_it() {
    let im = image();
    // The whole image: nothing is short.
    let fs = Fs::open_shortened(MemDevice::new(&im.img), &mut [0u8; B]).unwrap();
    assert_eq!(fs.shortened(), None);
    let cut = mid_cut(&im.img);
    for cut in [TOTAL - 1, cut] {
        let img = &im.img[..cut as usize * B];
        let fs = Fs::open_shortened(MemDevice::new(img), &mut [0u8; B]).unwrap();
        assert_eq!(
            fs.shortened(),
            Some(Error::new(short(cut), "superblock.total_blocks", 32))
        );
        assert_eq!(fs.superblock().total_blocks(), TOTAL);
        assert_eq!(read_all(&fs, b"/before.bin").unwrap(), im.before);
        assert_eq!(read_all(&fs, b"/dir/note.txt").unwrap(), im.note);
        if cut == TOTAL - 1 {
            assert_eq!(read_all(&fs, b"/tail.bin").unwrap(), im.tail);
            continue;
        }
        assert_eq!(
            read_all(&fs, b"/tail.bin").unwrap_err(),
            Error::new(
                ErrorKind::PastEnd {
                    block: cut,
                    blocks: cut
                },
                "block read",
                cut * 4096
            )
        );
        // Streamed block by block, every byte before the end arrives first.
        let mut bufs = Buffers::new();
        let inode = fs.resolve(b"/tail.bin", &mut bufs).unwrap();
        let mut got = Vec::new();
        let e = fs
            .stream(&inode, &mut bufs, |b| {
                got.extend_from_slice(b);
                ControlFlow::Continue(())
            })
            .unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::PastEnd {
                block: cut,
                blocks: cut
            }
        );
        assert_eq!(got, im.tail[..300 * B]);
    }
}

/// Flash storage over a byte vector.
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
fn every_device_of_the_core_names_a_block_past_its_end() {
    let bytes = vec![0x5Au8; 10 * B + 100];
    let mut copy = bytes.clone();
    let mem = MemDevice::new(&bytes);
    let mem_mut = MemDeviceMut::new(&mut copy);
    let flash = FlashDevice::new(Flash(bytes.clone()), 0);
    let devices: [&dyn BlockDevice; 3] = [&mem, &mem_mut, &flash];
    for dev in devices {
        assert_eq!(dev.block_count(), 10);
        let mut buf = [0u8; B];
        dev.read_block(9, &mut buf).unwrap();
        assert_eq!(buf, [0x5A; B]);
        for lba in [10, 11, 1 << 40] {
            let e = dev.read_block(lba, &mut buf).unwrap_err();
            assert_eq!(
                e,
                Error::new(
                    ErrorKind::PastEnd {
                        block: lba,
                        blocks: 10
                    },
                    "block read",
                    lba * 4096
                )
            );
            assert_eq!(
                e.to_string(),
                format!(
                    "block read (byte {:#x}) block {lba} lies past the device's end (the \
                     device has 10 blocks)",
                    lba * 4096
                )
            );
            assert_eq!(dev.read_block_prefix(lba, &mut buf, 256).unwrap_err(), e);
        }
    }
}

#[test]
fn the_check_of_an_image_one_block_short_reports_only_the_truncation() {
    let im = image();
    let img = &im.img[..(TOTAL as usize - 1) * B];
    let (found, outcome) = fsck::findings(MemDevice::new(img), &fsck::Options::default());
    assert_eq!(found, vec![truncation(TOTAL - 1)]);
    assert!(outcome.cross_checked);
    assert_eq!((outcome.summary.errors, outcome.summary.warnings), (1, 0));
    assert_eq!(outcome.summary.inodes, 5);
    // The whole image is clean: the finding is the cut's.
    let (found, _) = fsck::findings(MemDevice::new(&im.img), &fsck::Options::default());
    assert_eq!(found, vec![]);
}

#[test]
fn the_check_of_an_image_cut_through_a_file_names_the_file_and_its_block() {
    let im = image();
    let cut = mid_cut(&im.img);
    let (tail_ino, tail) = extents(&im.img, b"/tail.bin");
    let img = &im.img[..cut as usize * B];
    let (found, outcome) = fsck::findings(MemDevice::new(img), &fsck::Options::default());
    assert!(outcome.cross_checked);
    assert_eq!(found[0], truncation(cut));
    // Every finding is a read failure, each past the end, and the file's names it.
    for f in &found[1..] {
        assert_eq!(f.code, Code::ReadFailed, "{f:?}");
        match f.error.kind {
            ErrorKind::PastEnd { block, blocks } => {
                assert_eq!(blocks, cut, "{f:?}");
                assert!(block >= cut, "{f:?}");
            }
            _ => panic!("not a block past the end: {f:?}"),
        }
    }
    let of_tail: Vec<&Finding> = found.iter().filter(|f| f.ino.is_some()).collect();
    assert_eq!(of_tail.len(), 1, "{found:?}");
    let f = of_tail[0];
    assert_eq!(f.ino, Some(tail_ino));
    assert_eq!(
        f.error.kind,
        ErrorKind::PastEnd {
            block: cut,
            blocks: cut
        }
    );
    assert_eq!(
        f.error.what,
        "extent.physical (file data past the device's end)"
    );
    // The extent is inline: its `physical` is in the inode's block.
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(&im.img), &mut bufs.data).unwrap();
    let inode = fs.inode(tail_ino, &mut bufs.data).unwrap();
    assert_eq!(f.error.offset / 4096, inode.lba());
    let at = (f.error.offset % 4096) as usize;
    let physical = u64::from_le_bytes(im.img[f.error.offset as usize..][..8].try_into().unwrap());
    assert_eq!(physical, tail[0].physical, "byte {at} of the inode");
    // Block groups 1 to 3 lie wholly past the end: each one's region header and data
    // bitmap is a finding of its own, and no free count is compared with a bitmap that
    // could not be read.
    let sb = *fs.superblock();
    let unread: Vec<u64> = found[1..]
        .iter()
        .filter(|f| f.ino.is_none())
        .map(|f| f.error.offset / 4096)
        .collect();
    let mut want = Vec::new();
    for bg in 1..sb.block_group_count() {
        let start = sb.bg_span(bg).0;
        want.extend([start, start + 1]);
    }
    assert_eq!(unread, want);
}

#[test]
fn the_check_runs_at_every_cut_and_names_only_blocks_past_it() {
    let im = image();
    let sb = *Fs::open(MemDevice::new(&im.img), &mut [0u8; B])
        .unwrap()
        .superblock();
    // Past the group tables a cut mounts; before them the mount fails on the first
    // descriptor past the end, after the truncation is reported.
    let tables_end = sb.raw().bg_table_start.get() + u64::from(sb.block_group_count());
    let cuts = (1..TOTAL).step_by(89).chain([
        tables_end - 1,
        tables_end,
        sb.bg_regions_start(),
        sb.bg_regions_start() + 1,
        TOTAL - 2,
        TOTAL - 1,
    ]);
    for cut in cuts {
        let img = &im.img[..cut as usize * B];
        let (found, outcome) = fsck::findings(MemDevice::new(img), &fsck::Options::default());
        assert_eq!(found.first(), Some(&truncation(cut)), "cut {cut}");
        assert_eq!(outcome.cross_checked, cut >= tables_end, "cut {cut}");
        if cut < tables_end {
            assert_eq!(found.len(), 2, "cut {cut}: {found:?}");
        }
        // A block that cannot be read is reported once (not once per registry row or
        // queue entry in it).
        for (i, f) in found.iter().enumerate() {
            assert!(!found[..i].contains(f), "cut {cut}: {f:?} twice");
        }
        for f in &found[1..] {
            // A bitmap that could not be read is compared with nothing.
            assert!(
                !matches!(
                    f.code,
                    Code::GroupFreeCount
                        | Code::ZoneFreeCount
                        | Code::BlockLeaked
                        | Code::BlockUnmarked
                ),
                "cut {cut}: {f:?}"
            );
            if let ErrorKind::PastEnd { block, blocks } = f.error.kind {
                assert_eq!(f.code, Code::ReadFailed, "cut {cut}: {f:?}");
                assert_eq!(blocks, cut, "cut {cut}: {f:?}");
                assert!(block >= cut, "cut {cut}: {f:?}");
            }
            // Nothing the check could read is reported as a read failure.
            if f.code == Code::ReadFailed {
                assert!(
                    matches!(f.error.kind, ErrorKind::PastEnd { .. }),
                    "cut {cut}: {f:?}"
                );
            }
        }
        // Past the last metadata and directory block, the read failures are all.
        if cut > sb.bg_regions_start() + 3 {
            assert!(
                found.iter().all(|f| f.code == Code::ReadFailed),
                "cut {cut}: {found:?}"
            );
        }
    }
}

#[test]
fn replay_and_repair_leave_a_shortened_image_as_it_was() {
    let mut im = image();
    let cut = mid_cut(&im.img);
    // A committed transaction waiting for replay, in a journal before the end: replay
    // would write /before.bin's first block.
    let (_, before) = extents(&im.img, b"/before.bin");
    let target = before[0].physical;
    write_journal_txn(
        &mut im.img,
        0,
        0,
        3,
        &[(target, vec![0xEE; B], false)],
        true,
        true,
    )
    .unwrap();
    let cut_img = im.img[..cut as usize * B].to_vec();
    let mut img = cut_img.clone();
    {
        let dev = MemDeviceMut::new(&mut img);
        let fs = Fs::open_shortened(&dev, &mut [0u8; B]).unwrap();
        let mut table = [Committed::default(); 4];
        let e = replay(
            &fs,
            ReplayOptions {
                node_id: 9,
                force: true,
            },
            &mut table,
            &mut Buffers::new(),
            &mut |_: &Finding| {},
        )
        .unwrap_err();
        assert_eq!(
            e,
            ReplayError::Device(Error::new(short(cut), "superblock.total_blocks", 32))
        );
        assert_eq!(e.category(), Category::Truncated);
        // Repair mounts as a writer does: it reports the check's findings, the journal's
        // transaction among them, and writes nothing.
        let opts = RepairOptions {
            node_id: 9,
            force: true,
            memory_limit: 1 << 30,
            superblock: None,
        };
        let out = repair(&dev, Mode::Yes, &opts, &mut |_| true).unwrap();
        assert_eq!(out.left.first(), Some(&truncation(cut)));
        assert!(out.fixes.is_empty());
        assert_eq!(out.replay.journals, 0);
    }
    assert!(img == cut_img, "the image was written");
    // The whole image replays that transaction: the refusal is the cut's.
    let mut whole = im.img.clone();
    let dev = MemDeviceMut::new(&mut whole);
    let fs = Fs::open(&dev, &mut [0u8; B]).unwrap();
    let mut table = [Committed::default(); 4];
    let opts = ReplayOptions {
        node_id: 9,
        force: true,
    };
    let report = replay(
        &fs,
        opts,
        &mut table,
        &mut Buffers::new(),
        &mut |_: &Finding| {},
    );
    assert_eq!(report.unwrap().written, 1);
}
