//! Every guard against loops and huge walks has a test that trips it: the directory walk's
//! block budget, the overlapping-extent budget of large reads, and the path component
//! limit. Each image is valid except for the one construction, and every checksum holds.

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::testing::reseal;
use tet_core::block::{MemDevice, BLOCK_SIZE};
use tet_core::cetrafs::raw::{RawExtent, RawExtentHeader, RawExtentIndex, RawInode};
use tet_core::cetrafs::{Buffers, Code, Fs, MAX_PATH_COMPONENTS};
use tet_core::ErrorKind;
use zerocopy::{FromBytes, IntoBytes};

const B: usize = BLOCK_SIZE;

fn small(files: &[(&[u8], usize, Placement)]) -> (Vec<u8>, Vec<u64>) {
    let p = Params {
        size_bytes: 1 << 20,
        bg_size_blocks: 256,
        zone_groups: 1,
        nodes: 1,
        inodes: 16,
        journal_blocks: 3,
        pending_slots: 1,
        ..Params::default()
    };
    let mut b = ImageBuilder::new(p);
    let d = b.mkdir(ImageBuilder::ROOT, b"d", 0o755).unwrap();
    let mut inos = vec![d];
    for (name, blocks, placement) in files {
        inos.push(
            b.add_file(d, name, vec![9u8; blocks * B], Sparse::Dense, *placement)
                .unwrap(),
        );
    }
    (b.build().unwrap(), inos)
}

fn inode_at(img: &[u8], ino: u64) -> usize {
    let fs = Fs::open(MemDevice::new(img), &mut [0u8; B]).unwrap();
    (fs.superblock().raw().inode_table_start.get() + ino) as usize * B
}

fn raw_inode(img: &[u8], ino: u64) -> RawInode {
    let at = inode_at(img, ino);
    RawInode::read_from_bytes(&img[at..at + 256]).unwrap()
}

fn put_inode(img: &mut [u8], ino: u64, r: &RawInode) {
    let at = inode_at(img, ino);
    img[at..at + 256].copy_from_slice(r.as_bytes());
}

/// The last data block whose bitmap bit is clear (an unused block to put a tree in).
fn free_block(img: &[u8]) -> u64 {
    let total = (img.len() / B) as u64;
    let fs = Fs::open(MemDevice::new(img), &mut [0u8; B]).unwrap();
    let bg = fs.block_group(0, &mut [0u8; B]).unwrap();
    let (start, data) = (bg.raw().start_block.get(), bg.raw().data_offset.get());
    (start + data..total)
        .rev()
        .find(|lba| {
            let i = lba - start - data;
            img[(start + 1) as usize * B + (i / 8) as usize] & (1 << (i % 8)) == 0
        })
        .unwrap()
}

#[test]
fn directory_walk_stops_at_its_block_budget() {
    let (mut img, inos) = small(&[(b"f", 1, Placement::Contiguous)]);
    let dir = inos[0];
    let mut r = raw_inode(&img, dir);
    let dir_block = RawExtent::read_from_bytes(&r.slots[..16])
        .unwrap()
        .physical
        .get();
    // A leaf of 254 extents, each mapping logical block 0 to the directory's one block,
    // and four index entries all pointing at it: 1016 block reads for a one-block
    // directory on a 256-block image.
    let leaf = free_block(&img);
    let mut blk = vec![0u8; B];
    let h = RawExtentHeader::read_from_bytes(&[0u8; 12]).unwrap();
    let mut h = h;
    h.magic.set(0xCE7A);
    h.entries.set(254);
    h.max.set(254);
    blk[..12].copy_from_slice(h.as_bytes());
    for k in 0..254 {
        let mut e = RawExtent::read_from_bytes(&[0u8; 16]).unwrap();
        e.len.set(1);
        e.physical.set(dir_block);
        blk[12 + 16 * k..28 + 16 * k].copy_from_slice(e.as_bytes());
    }
    blk[4080..4084].copy_from_slice(b"CTET");
    img[leaf as usize * B..(leaf as usize + 1) * B].copy_from_slice(&blk);
    r.extent_header.depth.set(1);
    r.extent_header.entries.set(4);
    r.slots = [0; 64];
    for k in 0..4 {
        let mut ix = RawExtentIndex::read_from_bytes(&[0u8; 12]).unwrap();
        ix.child.set(leaf);
        r.slots[16 * k..16 * k + 12].copy_from_slice(ix.as_bytes());
    }
    put_inode(&mut img, dir, &r);
    reseal(&mut img);

    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
    let d = fs.inode(dir, &mut bufs.data).unwrap();
    let mut listed = 0u64;
    let e = fs
        .read_dir(&d, &mut bufs, |_| {
            listed += 1;
            std::ops::ControlFlow::Continue(())
        })
        .unwrap_err();
    assert_eq!(e.what, "directory walk block budget");
    assert_eq!(e.kind, ErrorKind::Exhausted { budget: 256 });
    assert_eq!(listed, 256, "one entry per block read within the budget");
    let (found, _) = fsck::findings(MemDevice::new(&img), &fsck::Options::default());
    let hit = found
        .iter()
        .find(|f| f.error.what == "directory walk block budget")
        .unwrap_or_else(|| panic!("{found:?}"));
    assert_eq!((hit.code, hit.ino), (Code::DirBlock, Some(dir)));
}

#[test]
fn large_reads_stop_at_overlapping_extents() {
    // 70 single-block extents in one leaf (every other block), read in one call (a
    // sweep over the tree); then extent 1 is widened to start at logical 0 with length
    // 2, so the sweep would read 71 blocks for a 70-block range.
    let (mut img, inos) = small(&[(b"big", 70, Placement::Fragmented)]);
    let f = inos[1];
    let r = raw_inode(&img, f);
    assert_eq!(r.extent_header.depth.get(), 1);
    let leaf = RawExtentIndex::read_from_bytes(&r.slots[..12])
        .unwrap()
        .child
        .get() as usize;
    let at = leaf * B + 12 + 16;
    let mut e = RawExtent::read_from_bytes(&img[at..at + 16]).unwrap();
    assert_eq!(e.logical.get(), 1);
    e.logical.set(0);
    e.len.set(2);
    img[at..at + 16].copy_from_slice(e.as_bytes());
    reseal(&mut img);

    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
    let i = fs.inode(f, &mut bufs.data).unwrap();
    let mut out = vec![0u8; 70 * B];
    let e = fs.read(&i, 0, &mut out, &mut bufs).unwrap_err();
    assert_eq!(e.what, "extent.logical (overlapping extents)");
    assert_eq!(e.kind, ErrorKind::Exhausted { budget: 70 });
    let (found, _) = fsck::findings(MemDevice::new(&img), &fsck::Options::default());
    assert!(
        found
            .iter()
            .any(|x| x.code == Code::ExtentOverlap && x.ino == Some(f)),
        "{found:?}"
    );
}

#[test]
fn paths_stop_at_the_component_limit() {
    let (img, _) = small(&[]);
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
    let ok = "./".repeat(MAX_PATH_COMPONENTS - 1) + "d";
    assert!(fs.resolve(ok.as_bytes(), &mut bufs).unwrap().is_dir());
    let long = "./".repeat(MAX_PATH_COMPONENTS) + "d";
    let e = fs.resolve(long.as_bytes(), &mut bufs).unwrap_err();
    assert_eq!(e.what, "path components");
    assert_eq!(
        e.kind,
        ErrorKind::OutOfRange {
            value: MAX_PATH_COMPONENTS as u64,
            max: MAX_PATH_COMPONENTS as u64
        }
    );
}
