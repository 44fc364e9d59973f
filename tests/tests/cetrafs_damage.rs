//! The damage generator (after fsck.ocfs2's `fswreck`): named corruptions that keep every
//! checksum valid, so only the cross-checks can see them. Each is applied to a fresh
//! image with files, and `verify` must report its specific code. The repair tests reuse
//! [`DAMAGE`].

use std::ops::ControlFlow;

mod power;
use power::PowerCut;

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::testing::{reseal, write_journal_txn};
use tet_core::block::{MemDevice, BLOCK_SIZE};
use tet_core::cetrafs::raw::{
    RawBlockGroup, RawDirEntry, RawExtent, RawExtentIndex, RawInode, RawJournalFlag, RawNodeRow,
    RawPendingFree, RawRegionHeader, RawSlotHeader, RawSuperblock, RawXattr, RawZoneGroupHot,
};
use tet_core::cetrafs::{Buffers, Code, Extent, Finding, Fs, SB_CLEAN};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

const B: usize = BLOCK_SIZE;
const ROOT: u64 = 1;
const DIR: u64 = 2;
const A: u64 = 3;
const FB: u64 = 4;
const SUB: u64 = 5;
const C: u64 = 6;
const FRAG: u64 = 7;
const DEEP: u64 = 8;
const FREE_INO: u64 = 100;

/// The base image: directories two deep, dense and fragmented files (inline, depth-1 and
/// depth-2 trees), xattrs, a symlink, and node 7 registered ACTIVE in row 0.
fn base() -> Vec<u8> {
    let p = Params {
        size_bytes: 16 << 20,
        bg_size_blocks: 1024,
        inodes: 128,
        nodes: 4,
        journal_blocks: 9,
        pending_slots: 16,
        ..Params::default()
    };
    let mut b = ImageBuilder::new(p);
    assert_eq!(b.mkdir(ROOT, b"dir", 0o755).unwrap(), DIR);
    let dense = |n: usize, v: u8| vec![v; n * B];
    assert_eq!(
        b.add_file(DIR, b"a", dense(3, 1), Sparse::Dense, Placement::Contiguous)
            .unwrap(),
        A
    );
    b.set_xattr(A, b"user.k", b"v").unwrap();
    b.set_xattr(A, b"user.m", b"w").unwrap();
    assert_eq!(
        b.add_file(DIR, b"b", dense(1, 2), Sparse::Dense, Placement::Contiguous)
            .unwrap(),
        FB
    );
    assert_eq!(b.mkdir(DIR, b"sub", 0o755).unwrap(), SUB);
    assert_eq!(
        b.add_file(SUB, b"c", dense(2, 3), Sparse::Dense, Placement::Contiguous)
            .unwrap(),
        C
    );
    assert_eq!(
        b.add_file(
            ROOT,
            b"frag",
            dense(3, 4),
            Sparse::Dense,
            Placement::Fragmented
        )
        .unwrap(),
        FRAG
    );
    assert_eq!(
        b.add_file(
            ROOT,
            b"deep",
            dense(1100, 5),
            Sparse::Dense,
            Placement::Fragmented
        )
        .unwrap(),
        DEEP
    );
    b.add_symlink(ROOT, b"link", b"dir/a").unwrap();
    let mut img = b.build().unwrap();
    let reg = Img::sb(&img).registry_start.get() as usize;
    let js = fs(&img).journal_start(0);
    patch::<RawNodeRow>(&mut img, reg * B, |r| {
        r.magic = *b"CTND";
        r.node_id.set(7);
        r.state.set(1);
        r.journal_start.set(js);
    });
    reseal(&mut img);
    img
}

fn fs(img: &[u8]) -> Fs<MemDevice<'_>> {
    Fs::open(MemDevice::new(img), &mut [0u8; B]).unwrap()
}

/// Changes the `T` at byte `at` through its named fields.
fn patch<T: FromBytes + IntoBytes + KnownLayout + Immutable>(
    img: &mut [u8],
    at: usize,
    f: impl FnOnce(&mut T),
) {
    let n = std::mem::size_of::<T>();
    let mut v = T::read_from_bytes(&img[at..at + n]).unwrap();
    f(&mut v);
    img[at..at + n].copy_from_slice(v.as_bytes());
}

/// Geometry lookups on an image.
struct Img;

impl Img {
    fn sb(img: &[u8]) -> RawSuperblock {
        RawSuperblock::read_from_bytes(&img[..424]).unwrap()
    }
    fn inode_at(img: &[u8], ino: u64) -> usize {
        (Self::sb(img).inode_table_start.get() + ino) as usize * B
    }
    fn inode(img: &mut [u8], ino: u64, f: impl FnOnce(&mut RawInode)) {
        let at = Self::inode_at(img, ino);
        patch(img, at, f);
    }
    fn extents(img: &[u8], ino: u64) -> Vec<Extent> {
        let fs = fs(img);
        let i = fs.inode(ino, &mut [0u8; B]).unwrap();
        let mut v = Vec::new();
        let _ = fs
            .for_each_extent(&i, &mut [0u8; B], |e| {
                v.push(e);
                Ok(ControlFlow::Continue(()))
            })
            .unwrap();
        v
    }
    fn first_block(img: &[u8], ino: u64) -> u64 {
        Self::extents(img, ino)
            .iter()
            .min_by_key(|e| e.logical)
            .unwrap()
            .physical
    }
    /// Byte offset of the entry naming `name` in directory `dir`.
    fn dirent(img: &[u8], dir: u64, name: &[u8]) -> usize {
        for e in Self::extents(img, dir) {
            for b in 0..u64::from(e.len) {
                let blk = (e.physical + b) as usize * B;
                for k in 0..15 {
                    let at = blk + k * 266;
                    let d = RawDirEntry::read_from_bytes(&img[at..at + 266]).unwrap();
                    let n = d.name_len.get() as usize;
                    if d.inode.get() != 0 && &d.name[..n] == name {
                        return at;
                    }
                }
            }
        }
        panic!("no entry {name:?}")
    }
    /// Byte offset of a free slot in directory `dir`.
    fn free_dirent(img: &[u8], dir: u64) -> usize {
        let e = Self::extents(img, dir)[0];
        let blk = e.physical as usize * B;
        (0..15)
            .map(|k| blk + k * 266)
            .find(|at| img[*at..*at + 8].iter().all(|b| *b == 0))
            .unwrap()
    }
    fn link(img: &mut [u8], dir: u64, name: &[u8], target: u64, ftype: u8) {
        let at = Self::free_dirent(img, dir);
        patch::<RawDirEntry>(img, at, |d| {
            d.inode.set(target);
            d.name_len.set(name.len() as u16);
            d.file_type = ftype;
            d.name[..name.len()].copy_from_slice(name);
        });
    }
    fn bg_desc(img: &[u8], bi: u32) -> usize {
        let sb = Self::sb(img);
        (sb.bg_table_start.get() + u64::from(bi)) as usize * B
    }
    fn bg(img: &[u8], bi: u32) -> RawBlockGroup {
        let at = Self::bg_desc(img, bi);
        RawBlockGroup::read_from_bytes(&img[at..at + 128]).unwrap()
    }
    /// Byte offset of the data bitmap byte for data block `lba`, and the bit.
    fn data_bit(img: &[u8], lba: u64) -> (usize, u8) {
        let sb = Self::sb(img);
        let bi = ((lba - sb.bg_regions_start.get()) / sb.bg_size_blocks.get()) as u32;
        let bg = Self::bg(img, bi);
        let i = lba - bg.start_block.get() - bg.data_offset.get();
        let at = (bg.start_block.get() + 1) as usize * B + (i / 8) as usize;
        (at, 1 << (i % 8))
    }
    /// Adds `d` to block group `bi`'s free count and its zone group's.
    fn adjust_free(img: &mut [u8], bi: u32, d: i64) {
        let at = Self::bg_desc(img, bi);
        let mut zg = 0;
        patch::<RawBlockGroup>(img, at, |g| {
            g.free_data_blocks
                .set(g.free_data_blocks.get().wrapping_add_signed(d));
            zg = g.owner_zg.get();
        });
        patch::<RawZoneGroupHot>(img, (1 + zg) as usize * B, |z| {
            z.free_data_blocks
                .set(z.free_data_blocks.get().wrapping_add_signed(d));
        });
    }
    fn bg_of(img: &[u8], lba: u64) -> u32 {
        let sb = Self::sb(img);
        ((lba - sb.bg_regions_start.get()) / sb.bg_size_blocks.get()) as u32
    }
    /// The last free data block of block group `bi`.
    fn free_block(img: &[u8], bi: u32) -> u64 {
        let g = Self::bg(img, bi);
        let first = g.start_block.get() + g.data_offset.get();
        (first..first + g.data_block_count.get())
            .rev()
            .find(|lba| {
                let (at, m) = Self::data_bit(img, *lba);
                img[at] & m == 0
            })
            .unwrap()
    }
    fn registry_row(img: &[u8], row: u64) -> usize {
        Self::sb(img).registry_start.get() as usize * B + row as usize * 128
    }
    fn pending(img: &[u8], z: u64, slot: u64) -> usize {
        let sb = Self::sb(img);
        let per = (u64::from(sb.pending_slots_per_zg.get()) * 16).div_ceil(B as u64);
        (sb.pending_start.get() + z * per) as usize * B + slot as usize * 16
    }
    fn add_pending(img: &mut [u8], z: u64, slot: u64, lba: u64, count: u32) {
        let at = Self::pending(img, z, slot);
        patch::<RawPendingFree>(img, at, |p| {
            p.lba.set(lba);
            p.count.set(count);
            p.magic = *b"CTPF";
        });
    }
    fn slot_header(img: &[u8], row: u32, slot: u64) -> usize {
        (fs(img).journal_start(row) + 1 + 2 * slot) as usize * B
    }
    fn register(img: &mut [u8], row: u64, node: u64, state: u32) {
        let js = fs(img).journal_start(row as u32);
        let at = Self::registry_row(img, row);
        patch::<RawNodeRow>(img, at, |r| {
            r.magic = *b"CTND";
            r.row.set(row as u32);
            r.node_id.set(node);
            r.state.set(state);
            r.journal_start.set(js);
        });
    }
    fn set_owner(img: &mut [u8], z: u64, owner: u16) {
        patch::<RawZoneGroupHot>(img, (1 + z) as usize * B, |h| h.owner_node_id.set(owner));
    }
}

/// A committed transaction in row `row`'s journal (dirty), writing `bytes` to `target`.
#[allow(clippy::ptr_arg)] // lets callers compute arguments from the same image
fn txn(img: &mut Vec<u8>, row: u32, slot: u64, id: u64, target: u64, fresh: bool) {
    write_journal_txn(
        img,
        row,
        slot,
        id,
        &[(target, vec![0xAB; 100], fresh)],
        true,
        true,
    )
    .unwrap();
}

type Damage = (&'static str, fn(&mut Vec<u8>), Code);

/// Every corruption: its name, how to apply it, and the code `verify` must report.
pub const DAMAGE: &[Damage] = &[
    (
        "inode blocks one too many",
        |i| Img::inode(i, A, |n| n.blocks.set(n.blocks.get() + 1)),
        Code::InodeBlocks,
    ),
    (
        "file nlink 2 with one name",
        |i| Img::inode(i, A, |n| n.nlink.set(2)),
        Code::LinkCount,
    ),
    (
        "directory nlink off",
        |i| Img::inode(i, DIR, |n| n.nlink.set(7)),
        Code::LinkCount,
    ),
    (
        "directory parent wrong",
        |i| Img::inode(i, SUB, |n| n.parent.set(ROOT)),
        Code::DirParent,
    ),
    (
        "directory size one block too many",
        |i| Img::inode(i, DIR, |n| n.size.set(n.size.get() + B as u64)),
        Code::DirSize,
    ),
    (
        "root parent not itself",
        |i| Img::inode(i, ROOT, |n| n.parent.set(DIR)),
        Code::RootInode,
    ),
    (
        "entry type disagrees with the inode",
        |i| Img::inode(i, FB, |n| n.mode.set(0o120_644)),
        Code::DirentType,
    ),
    (
        "entry removed: file orphaned",
        |i| {
            let at = Img::dirent(i, DIR, b"b");
            i[at..at + 266].fill(0);
        },
        Code::Orphan,
    ),
    (
        "entry removed: directory subtree orphaned",
        |i| {
            let at = Img::dirent(i, DIR, b"sub");
            i[at..at + 266].fill(0);
        },
        Code::Orphan,
    ),
    (
        "inode bitmap bit of a named file cleared",
        |i| {
            let at = Img::sb(i).inode_bitmap_start.get() as usize * B;
            i[at] &= !(1 << FB);
        },
        Code::InodeUnmarked,
    ),
    (
        "entry names an inode past the table",
        |i| Img::link(i, DIR, b"far", 100_000, 1),
        Code::DirBlock,
    ),
    (
        "entry names a free inode",
        |i| Img::link(i, DIR, b"ghost", FREE_INO, 1),
        Code::DirentFree,
    ),
    (
        "name repeated in a directory",
        |i| {
            let at = Img::dirent(i, DIR, b"b");
            patch::<RawDirEntry>(i, at, |d| d.name[0] = b'a');
        },
        Code::DirentDuplicate,
    ),
    (
        "directory hard link",
        |i| Img::link(i, ROOT, b"sub2", SUB, 2),
        Code::DirLinked,
    ),
    (
        "directory loop",
        |i| Img::link(i, SUB, b"up", DIR, 2),
        Code::DirLinked,
    ),
    (
        "root named by an entry",
        |i| Img::link(i, SUB, b"root", ROOT, 2),
        Code::DirLinked,
    ),
    (
        "in-use inode nothing names",
        |i| {
            let src = Img::inode_at(i, FB);
            let dst = Img::inode_at(i, FREE_INO);
            i.copy_within(src..src + 256, dst);
            patch::<RawInode>(i, dst, |n| {
                n.ino.set(FREE_INO);
                n.blocks.set(0);
                n.extent_header.entries.set(0);
                n.slots = [0; 64];
            });
            let at = Img::sb(i).inode_bitmap_start.get() as usize * B + (FREE_INO / 8) as usize;
            i[at] |= 1 << (FREE_INO % 8);
        },
        Code::Orphan,
    ),
    (
        "extents overlap logically",
        |i| {
            let at = Img::inode_at(i, FRAG) + 116 + 16;
            patch::<RawExtent>(i, at, |e| e.logical.set(0));
        },
        Code::ExtentOverlap,
    ),
    (
        "two files share a block",
        |i| {
            let shared = Img::first_block(i, A);
            let at = Img::inode_at(i, FB) + 116;
            patch::<RawExtent>(i, at, |e| e.physical.set(shared));
        },
        Code::BlockShared,
    ),
    (
        "a file's extent maps its own tree block",
        |i| {
            let inode = fs(i).inode(DEEP, &mut [0u8; B]).unwrap();
            let leaf_parent = u64::from_le_bytes(inode.raw().slots[4..12].try_into().unwrap());
            let at = Img::inode_at(i, FRAG) + 116;
            patch::<RawExtent>(i, at, |e| e.physical.set(leaf_parent));
        },
        Code::BlockShared,
    ),
    (
        "index entry logical below its subtree",
        |i| {
            let at = Img::inode_at(i, DEEP) + 116 + 16;
            patch::<RawExtentIndex>(i, at, |x| x.logical.set(x.logical.get() - 1));
        },
        Code::IndexLogical,
    ),
    (
        "index entry logical above its subtree's first block",
        |i| {
            let at = Img::inode_at(i, DEEP) + 116 + 16;
            patch::<RawExtentIndex>(i, at, |x| x.logical.set(x.logical.get() + 1));
        },
        Code::IndexRange,
    ),
    (
        "directory extent uninitialized",
        |i| {
            let at = Img::inode_at(i, SUB) + 116;
            patch::<RawExtent>(i, at, |e| e.len.set(e.len.get() | 1 << 31));
            patch::<RawSuperblock>(i, 0, |s| {
                s.feature_incompat.set(s.feature_incompat.get() | 2)
            });
        },
        Code::DirHole,
    ),
    (
        "uninitialized extent without INCOMPAT_UNINIT",
        |i| {
            let at = Img::inode_at(i, C) + 116;
            patch::<RawExtent>(i, at, |e| e.len.set(e.len.get() | 1 << 31));
        },
        Code::ExtentTree,
    ),
    (
        "INCOMPAT_EXTENTS clear",
        |i| {
            patch::<RawSuperblock>(i, 0, |s| {
                s.feature_incompat.set(s.feature_incompat.get() & !1)
            });
        },
        Code::Mount,
    ),
    (
        "undefined sb_flags bit",
        |i| {
            patch::<RawSuperblock>(i, 0, |s| s.sb_flags.set(s.sb_flags.get() | 4));
        },
        Code::Mount,
    ),
    (
        "label not UTF-8",
        |i| patch::<RawSuperblock>(i, 0, |s| s.label[0] = 0xFF),
        Code::Mount,
    ),
    (
        "label not NUL-padded",
        |i| patch::<RawSuperblock>(i, 0, |s| s.label[9] = b'x'),
        Code::Mount,
    ),
    (
        "superblock reserved byte set",
        |i| patch::<RawSuperblock>(i, 0, |s| s.reserved[3] = 1),
        Code::Mount,
    ),
    (
        "inode reserved byte set",
        |i| Img::inode(i, C, |n| n.reserved[0] = 1),
        Code::Inode,
    ),
    (
        "unused inline extent slot not zero",
        |i| Img::inode(i, C, |n| n.slots[63] = 1),
        Code::Inode,
    ),
    (
        "extent header generation set",
        |i| Img::inode(i, C, |n| n.extent_header.generation.set(9)),
        Code::Inode,
    ),
    (
        "F_FRESH slot with a pre_checksum",
        |i| {
            txn(i, 0, 0, 5, Img::free_block(i, 1), true);
            let at = Img::slot_header(i, 0, 0);
            patch::<RawSlotHeader>(i, at, |h| h.pre_checksum.set(1));
        },
        Code::JournalSlot,
    ),
    (
        "registry row past node_capacity in use",
        |i| {
            let at = Img::registry_row(i, 4);
            i[at] = 1;
        },
        Code::RegistryRow,
    ),
    (
        "block group reserved byte set",
        |i| {
            let at = Img::bg_desc(i, 0);
            patch::<RawBlockGroup>(i, at, |g| g.reserved1[0] = 1);
        },
        Code::Mount,
    ),
    (
        "directory block past its size, hole below",
        |i| {
            let at = Img::inode_at(i, SUB) + 116;
            patch::<RawExtent>(i, at, |e| e.logical.set(1));
        },
        Code::DirHole,
    ),
    (
        "xattr key repeated",
        |i| {
            let x = fs(i)
                .inode(A, &mut [0u8; B])
                .unwrap()
                .raw()
                .xattr_block
                .get() as usize
                * B;
            patch::<RawXattr>(i, x + 322, |e| e.key[5] = b'k');
        },
        Code::XattrDuplicate,
    ),
    (
        "group free count off, bitmap right",
        |i| {
            Img::adjust_free(i, 0, -1);
        },
        Code::GroupFreeCount,
    ),
    (
        "group free count behind its bitmap in a zone the ACTIVE writer owns",
        |i| {
            // Row 0 is the base image's ACTIVE node 7: a crashed writer's trailing
            // count (docs/cetrafs.md section 15), a warning.
            Img::set_owner(i, 0, 0);
            Img::adjust_free(i, 0, -1);
        },
        Code::FreeCountStale,
    ),
    (
        "zone free count off",
        |i| {
            patch::<RawZoneGroupHot>(i, B, |z| {
                z.free_data_blocks.set(z.free_data_blocks.get() + 1)
            });
        },
        Code::ZoneFreeCount,
    ),
    (
        "free block marked used, counts adjusted",
        |i| {
            let lba = Img::free_block(i, 0);
            let (at, m) = Img::data_bit(i, lba);
            i[at] |= m;
            Img::adjust_free(i, 0, -1);
        },
        Code::BlockLeaked,
    ),
    (
        "owned block marked free, counts adjusted",
        |i| {
            let lba = Img::first_block(i, C);
            let (at, m) = Img::data_bit(i, lba);
            i[at] &= !m;
            let bi = Img::bg_of(i, lba);
            Img::adjust_free(i, bi, 1);
        },
        Code::BlockUnmarked,
    ),
    (
        "data bitmap padding bit clear",
        |i| {
            let last = Img::sb(i).block_group_count.get() - 1;
            let g = Img::bg(i, last);
            let at = (g.start_block.get() + 1) as usize * B + B - 1;
            i[at] &= 0x7F;
        },
        Code::BitmapPadding,
    ),
    (
        "inode bitmap padding bit clear",
        |i| {
            let at = Img::sb(i).inode_bitmap_start.get() as usize * B + B - 1;
            i[at] &= 0x7F;
        },
        Code::BitmapPadding,
    ),
    (
        "inode bitmap bit 0 clear",
        |i| {
            let at = Img::sb(i).inode_bitmap_start.get() as usize * B;
            i[at] &= !1;
        },
        Code::BitmapPadding,
    ),
    (
        "committed transaction not replayed",
        |i| {
            let t = Img::free_block(i, 1);
            txn(i, 0, 0, 5, t, true);
        },
        Code::JournalReplay,
    ),
    (
        "clean flag with a journal to replay",
        |i| {
            let t = Img::free_block(i, 1);
            txn(i, 0, 0, 5, t, true);
            patch::<RawSuperblock>(i, 0, |s| s.sb_flags.set(s.sb_flags.get() | SB_CLEAN));
        },
        Code::CleanWithReplay,
    ),
    (
        "target changed after the transaction",
        |i| {
            let t = Img::free_block(i, 1);
            txn(i, 0, 0, 5, t, false);
            i[t as usize * B] ^= 0xFF;
        },
        Code::JournalConflict,
    ),
    (
        "chain broken across journals",
        |i| {
            // Transaction 5 (row 0) and 6 (row 1) both change block t; 6's pre-change
            // checksum is not 5's result.
            let t = Img::free_block(i, 1);
            Img::register(i, 1, 8, 1);
            txn(i, 0, 0, 5, t, false);
            txn(i, 1, 0, 6, t, false);
        },
        Code::JournalConflict,
    ),
    (
        "transaction slots disagree on txn_slots",
        |i| {
            let t = Img::free_block(i, 1);
            write_journal_txn(
                i,
                0,
                0,
                5,
                &[(t, vec![1; 8], true), (t - 1, vec![2; 8], true)],
                true,
                true,
            )
            .unwrap();
            let at = Img::slot_header(i, 0, 1);
            patch::<RawSlotHeader>(i, at, |h| h.txn_slots.set(3));
        },
        Code::JournalTxn,
    ),
    (
        "F_COMMIT before the last slot",
        |i| {
            let t = Img::free_block(i, 1);
            write_journal_txn(
                i,
                0,
                0,
                5,
                &[(t, vec![1; 8], true), (t - 1, vec![2; 8], true)],
                true,
                true,
            )
            .unwrap();
            let at = Img::slot_header(i, 0, 0);
            patch::<RawSlotHeader>(i, at, |h| h.flags.set(h.flags.get() | 2));
        },
        Code::JournalTxn,
    ),
    (
        "txn_id used in two journals",
        |i| {
            Img::register(i, 1, 8, 1);
            txn(i, 0, 0, 5, Img::free_block(i, 1), true);
            txn(i, 1, 0, 5, Img::free_block(i, 2), true);
        },
        Code::JournalTxn,
    ),
    (
        "committed payload corrupt",
        |i| {
            txn(i, 0, 0, 5, Img::free_block(i, 1), true);
            let at = Img::slot_header(i, 0, 0) + B;
            i[at + 7] ^= 1;
        },
        Code::JournalPayload,
    ),
    (
        "dirty journal of a free registry row",
        |i| {
            txn(i, 2, 0, 5, Img::free_block(i, 1), true);
        },
        Code::JournalUnowned,
    ),
    (
        "two rows, one node id",
        |i| Img::register(i, 1, 7, 1),
        Code::NodeDuplicate,
    ),
    (
        "zone owned by a free row",
        |i| Img::set_owner(i, 0, 3),
        Code::ZoneOwner,
    ),
    (
        "zone owned by a node that left",
        |i| {
            Img::register(i, 1, 8, 3);
            Img::set_owner(i, 0, 1);
        },
        Code::ZoneOwner,
    ),
    (
        "zone owned by a fenced node",
        |i| {
            Img::register(i, 1, 8, 2);
            Img::set_owner(i, 0, 1);
        },
        Code::ZoneOwnerFenced,
    ),
    (
        "pending entry in another zone",
        |i| {
            let other = Img::sb(i).block_group_count.get() - 1;
            let lba = Img::free_block(i, other);
            Img::add_pending(i, 0, 0, lba, 1);
        },
        Code::PendingZone,
    ),
    (
        "two pending entries free one block",
        |i| {
            let lba = Img::free_block(i, 0);
            Img::add_pending(i, 0, 0, lba, 1);
            Img::add_pending(i, 0, 1, lba, 1);
        },
        Code::PendingDuplicate,
    ),
    (
        "pending entry frees a block a file owns",
        |i| {
            let lba = Img::first_block(i, A);
            Img::add_pending(i, 0, 0, lba, 1);
        },
        Code::PendingInUse,
    ),
    (
        "pending entry count 0",
        |i| {
            let lba = Img::free_block(i, 0);
            Img::add_pending(i, 0, 0, lba, 1);
            let at = Img::pending(i, 0, 0);
            patch::<RawPendingFree>(i, at, |p| p.count.set(0));
        },
        Code::PendingEntry,
    ),
    (
        "registry row's journal_start wrong",
        |i| {
            let at = Img::registry_row(i, 0);
            patch::<RawNodeRow>(i, at, |r| r.journal_start.set(r.journal_start.get() + 1));
        },
        Code::RegistryRow,
    ),
    (
        "inode flags nonzero",
        |i| Img::inode(i, C, |n| n.flags.set(1)),
        Code::Inode,
    ),
    (
        "extent length 0",
        |i| {
            let at = Img::inode_at(i, C) + 116;
            patch::<RawExtent>(i, at, |e| e.len.set(0));
        },
        Code::ExtentTree,
    ),
    (
        "directory entry name_len 0",
        |i| {
            let at = Img::dirent(i, DIR, b"b");
            patch::<RawDirEntry>(i, at, |d| d.name_len.set(0));
        },
        Code::DirBlock,
    ),
    (
        "xattr key without a namespace",
        |i| {
            let x = fs(i)
                .inode(A, &mut [0u8; B])
                .unwrap()
                .raw()
                .xattr_block
                .get() as usize
                * B;
            patch::<RawXattr>(i, x, |e| e.key[4] = b'_');
        },
        Code::XattrBlock,
    ),
    (
        "journal slot txn_id 0",
        |i| {
            txn(i, 0, 0, 5, Img::free_block(i, 1), true);
            let at = Img::slot_header(i, 0, 0);
            patch::<RawSlotHeader>(i, at, |h| h.txn_id.set(0));
        },
        Code::JournalSlot,
    ),
    (
        "journal flag row wrong",
        |i| {
            let at = fs(i).journal_start(0) as usize * B;
            patch::<RawJournalFlag>(i, at, |f| f.row.set(3));
        },
        Code::JournalFlag,
    ),
    (
        "region header bg_id wrong",
        |i| {
            let at = Img::bg(i, 1).start_block.get() as usize * B;
            patch::<RawRegionHeader>(i, at, |h| h.bg_id.set(0));
        },
        Code::RegionHeader,
    ),
    (
        "superblock root_inode not 1",
        |i| {
            patch::<RawSuperblock>(i, 0, |s| s.root_inode.set(2));
        },
        Code::Mount,
    ),
    (
        "superblock copy's label changed",
        |i| {
            let b = Img::sb(i).block_group_count.get();
            let at = Img::bg_desc(i, b - 1) + 512 + 200;
            i[at] ^= 1;
        },
        Code::SuperblockCopy,
    ),
];

fn verify(img: &[u8]) -> Vec<Finding> {
    fsck::findings(MemDevice::new(img), &fsck::Options::default()).0
}

#[test]
fn base_image_is_clean() {
    let img = base();
    assert_eq!(verify(&img), vec![]);
    let fs = fs(&img);
    let deep = fs.inode(DEEP, &mut [0u8; B]).unwrap();
    assert_eq!(deep.depth(), 2, "the base image must hold a depth-2 tree");
    assert_eq!(fs.inode(FRAG, &mut [0u8; B]).unwrap().depth(), 0);
    let mut bufs = Buffers::new();
    assert!(fs.resolve(b"/dir/sub/c", &mut bufs).is_ok());
}

#[test]
fn every_damage_is_reported_with_its_code() {
    assert!(DAMAGE.len() >= 40, "{} corruptions", DAMAGE.len());
    let clean = base();
    let mut missed = Vec::new();
    for (name, apply, code) in DAMAGE {
        let mut img = clean.clone();
        apply(&mut img);
        reseal(&mut img);
        let found = verify(&img);
        let checksums = found
            .iter()
            .filter(|f| matches!(f.code, Code::Checksum | Code::Magic))
            .count();
        if !found.iter().any(|f| f.code == *code) || checksums > 0 {
            missed.push(format!(
                "{name}: expected {}, got {:?}",
                code.as_str(),
                found
                    .iter()
                    .map(|f| (f.code.as_str(), f.error.what, f.error.offset))
                    .collect::<Vec<_>>()
            ));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn damage_covers_every_cross_check_code() {
    // Codes a resealed image can break only through another structure's rule, or that
    // need an image the generator cannot make.
    let not_generated = [
        Code::Checksum,
        Code::Magic,
        Code::ReadFailed,
        Code::CheckIncomplete,
    ];
    for c in Code::ALL {
        if not_generated.contains(c) {
            continue;
        }
        assert!(
            DAMAGE.iter().any(|d| d.2 == *c),
            "no corruption produces {}",
            c.as_str()
        );
    }
}

mod repair {
    use super::*;
    use tet_alloc::cetrafs::repair::{repair, Mode, RepairOptions, RESTORED};
    use tet_core::block::MemDeviceMut;

    /// Damages repair fixes although their code is not one of [`FIXED`]: structures
    /// rebuilt from the geometry, the registry and the bitmaps, must-be-zero bytes
    /// cleared, and (`-y`) inodes that cannot be read cleared, xattr blocks dropped.
    const REBUILT: &[&str] = &[
        "uninitialized extent without INCOMPAT_UNINIT",
        "inode reserved byte set",
        "unused inline extent slot not zero",
        "extent header generation set",
        "F_FRESH slot with a pre_checksum",
        "registry row past node_capacity in use",
        "block group reserved byte set",
        "xattr key repeated",
        "pending entry in another zone",
        "two pending entries free one block",
        "pending entry count 0",
        "registry row's journal_start wrong",
        "inode flags nonzero",
        "extent length 0",
        "xattr key without a namespace",
        "journal slot txn_id 0",
        "journal flag row wrong",
        "region header bg_id wrong",
    ];

    /// The findings repair fixes; every other corruption is reported and left.
    const FIXED: &[Code] = &[
        Code::InodeBlocks,
        Code::LinkCount,
        Code::DirParent,
        Code::DirSize,
        Code::DirentType,
        Code::DirentFree,
        Code::DirentDuplicate,
        Code::DirLinked,
        Code::Orphan,
        Code::BlockShared,
        Code::InodeUnmarked,
        Code::GroupFreeCount,
        Code::ZoneFreeCount,
        Code::FreeCountStale,
        Code::BlockLeaked,
        Code::BlockUnmarked,
        Code::BitmapPadding,
        // Replay resolves these: it applies what it can and discards the rest.
        Code::JournalReplay,
        Code::CleanWithReplay,
        Code::JournalConflict,
        Code::JournalTxn,
        Code::JournalPayload,
        Code::JournalUnowned,
        // A warning: nothing to repair.
        Code::ZoneOwnerFenced,
        // Rewritten from the superblock.
        Code::SuperblockCopy,
    ];

    pub fn opts() -> RepairOptions {
        RepairOptions {
            node_id: 0xFEED,
            // The base image registers node 7 ACTIVE; these images are offline copies.
            force: true,
            memory_limit: 1 << 30,
            superblock: None,
        }
    }

    /// The files of the base image, by path, read through the checker's view.
    pub fn files(img: &[u8]) -> Vec<(&'static str, Option<Vec<u8>>)> {
        let paths = ["/dir/a", "/dir/sub/c", "/frag", "/deep", "/link"];
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(img), &mut bufs.data).ok();
        paths
            .iter()
            .map(|p| {
                let got = fs.as_ref().and_then(|fs| {
                    let i = fs.resolve(p.as_bytes(), &mut bufs).ok()?;
                    let mut out = vec![0u8; i.size() as usize];
                    fs.read(&i, 0, &mut out, &mut bufs).ok()?;
                    Some(out)
                });
                (*p, got)
            })
            .collect()
    }

    #[test]
    fn every_damage_is_repaired_or_reported() {
        let clean = base();
        let clean_files = files(&clean);
        let mut problems = Vec::new();
        for (name, apply, code) in DAMAGE {
            let mut img = clean.clone();
            apply(&mut img);
            reseal(&mut img);
            let damaged = img.clone();
            // -n changes no byte.
            let dry = repair(MemDeviceMut::new(&mut img), Mode::No, &opts(), &mut |_| {
                true
            })
            .unwrap();
            if img != damaged {
                problems.push(format!("{name}: -n wrote"));
            }
            let before = files(&img);
            let out = repair(MemDeviceMut::new(&mut img), Mode::Yes, &opts(), &mut |_| {
                true
            })
            .unwrap();
            let left: Vec<_> = errors(&img);
            let primary_only = |damaged: &[u8]| {
                *code == Code::Mount
                    && damaged[..BLOCK_SIZE] != clean[..BLOCK_SIZE]
                    && damaged[BLOCK_SIZE..] == clean[BLOCK_SIZE..]
            };
            let warning = code.severity() == tet_core::cetrafs::check::Severity::Warning;
            // A tree block owned twice is reported against the tree, which is not cloned.
            let left_anyway = *name == "a file's extent maps its own tree block";
            // Entries that break a rule of their own are removed by -y.
            let fixed_anyway = *name == "entry names an inode past the table"
                || *name == "directory entry name_len 0"
                || REBUILT.contains(name);
            if (FIXED.contains(code) || fixed_anyway) && !left_anyway {
                if !left.is_empty()
                    || (out.fixes.is_empty() && out.replay.journals == 0 && !warning)
                {
                    problems.push(format!(
                        "{name}: expected repaired, left {:?} after {:?}",
                        left.iter()
                            .map(|f| (f.code.as_str(), f.error.what, f.error.offset))
                            .collect::<Vec<_>>(),
                        out.fixes.iter().map(|f| f.action).collect::<Vec<_>>()
                    ));
                }
                if dry.fixes.is_empty() && out.replay.journals == 0 && !warning {
                    problems.push(format!("{name}: -n planned nothing"));
                }
            } else if left.is_empty() && !primary_only(&damaged) {
                problems.push(format!("{name}: expected left, repaired"));
            }
            // A primary that fails while its copies pass is restored from a copy
            // (docs/cetrafs.md section 3.1): block 0 alone is written, and its fields
            // come back as mkfs wrote them.
            let primary_only = primary_only(&damaged);
            if primary_only {
                if !left.is_empty() || out.fixes.first().map(|f| f.action) != Some(RESTORED) {
                    problems.push(format!("{name}: primary not restored: {:?}", out.fixes));
                }
                if img[BLOCK_SIZE..] != damaged[BLOCK_SIZE..] || img[16..280] != clean[16..280] {
                    problems.push(format!("{name}: the restore wrote more than block 0"));
                }
            }
            // An image that does not mount is written only in its group tables, which
            // are rebuilt from the superblock's geometry.
            if *code == Code::Mount && !primary_only {
                let tables_end = Img::sb(&damaged).inode_bitmap_start.get() as usize * BLOCK_SIZE;
                if img[tables_end..] != damaged[tables_end..]
                    || img[..BLOCK_SIZE] != damaged[..BLOCK_SIZE]
                {
                    problems.push(format!(
                        "{name}: wrote past the group tables of an image that does not mount"
                    ));
                }
            }
            if !left.is_empty() && left != out.left {
                problems.push(format!("{name}: outcome's left differs from a fresh check"));
            }
            // Files the corruption did not touch read back byte-identical.
            for ((path, want), (_, had)) in clean_files.iter().zip(&before) {
                if had.as_ref() == want.as_ref() {
                    let now = files(&img).into_iter().find(|(p, _)| p == path).unwrap().1;
                    if now != *had {
                        problems.push(format!("{name}: {path} changed"));
                    }
                }
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    fn errors(img: &[u8]) -> Vec<Finding> {
        verify(img)
            .into_iter()
            .filter(|f| f.severity() == tet_core::cetrafs::check::Severity::Error)
            .collect()
    }
}

#[test]
fn orphans_are_named_in_lost_and_found() {
    use tet_alloc::cetrafs::repair::{repair, Mode};
    use tet_core::block::MemDeviceMut;
    let mut img = base();
    let at = Img::dirent(&img, DIR, b"b");
    img[at..at + 266].fill(0);
    let at = Img::dirent(&img, DIR, b"sub");
    img[at..at + 266].fill(0);
    reseal(&mut img);
    let out = repair(
        MemDeviceMut::new(&mut img),
        Mode::Preen,
        &repair::opts(),
        &mut |_| true,
    )
    .unwrap();
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert!(out.fixes.iter().any(|f| f.action == "/lost+found created"));
    assert_eq!(verify(&img), vec![]);
    let mut bufs = Buffers::new();
    let fs = fs(&img);
    let b = fs
        .resolve(format!("/lost+found/{FB}").as_bytes(), &mut bufs)
        .unwrap();
    let mut got = vec![0u8; b.size() as usize];
    fs.read(&b, 0, &mut got, &mut bufs).unwrap();
    assert_eq!(got, vec![2u8; B]);
    // The orphaned directory keeps its subtree, with `..` now /lost+found.
    let c = fs
        .resolve(format!("/lost+found/{SUB}/c").as_bytes(), &mut bufs)
        .unwrap();
    assert_eq!(c.size(), 2 * B as u64);
    let sub = fs
        .resolve(format!("/lost+found/{SUB}").as_bytes(), &mut bufs)
        .unwrap();
    let lf = fs.resolve(b"/lost+found", &mut bufs).unwrap();
    assert_eq!(sub.raw().parent.get(), lf.ino());
}

#[test]
fn a_block_owned_twice_is_cloned_for_the_later_owner() {
    use tet_alloc::cetrafs::repair::{repair, Mode};
    use tet_core::block::MemDeviceMut;
    let mut img = base();
    let shared = Img::first_block(&img, A);
    let at = Img::inode_at(&img, FB) + 116;
    patch::<RawExtent>(&mut img, at, |e| e.physical.set(shared));
    reseal(&mut img);
    let out = repair(
        MemDeviceMut::new(&mut img),
        Mode::Yes,
        &repair::opts(),
        &mut |_| true,
    )
    .unwrap();
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert!(out.fixes.iter().any(|f| f.code == Code::BlockShared));
    assert_eq!(verify(&img), vec![]);
    // b now reads a copy of the block it pointed at; a keeps its own, unchanged.
    assert_ne!(Img::first_block(&img, FB), shared);
    assert_eq!(Img::first_block(&img, A), shared);
    let files = repair::files(&img);
    assert_eq!(files[0].1.as_deref(), Some(&vec![1u8; 3 * B][..]));
}

/// Repair of several damaged images, cut after every write (and torn at 512-byte
/// boundaries), then run again: it converges, verify is clean, and every file the damage
/// did not touch reads back as it was.
#[test]
fn repairs_cut_at_every_write_converge() {
    use tet_alloc::cetrafs::repair::{repair, Mode};
    use tet_core::block::MemDeviceMut;
    let clean = base();
    let want = repair::files(&clean);
    type Case = (&'static str, fn(&mut Vec<u8>));
    let cases: [Case; 9] = [
        ("orphan and a repeated name", |i| {
            let at = Img::dirent(i, DIR, b"b");
            i[at..at + 266].fill(0);
            // A second entry named `c`: a repeated name, and a link count one short.
            Img::link(i, SUB, b"c", C, 1);
        }),
        ("a block owned twice", |i| {
            let shared = Img::first_block(i, A);
            let at = Img::inode_at(i, FB) + 116;
            patch::<RawExtent>(i, at, |e| e.physical.set(shared));
        }),
        ("counters, bitmaps and a link count", |i| {
            Img::adjust_free(i, 0, -1);
            Img::inode(i, A, |n| n.nlink.set(3));
            let lba = Img::free_block(i, 1);
            let (at, m) = Img::data_bit(i, lba);
            i[at] |= m;
        }),
        // The rebuilds of section 14: group tables before the mount, then the journal's
        // own blocks, then the journaled blocks.
        ("a block group descriptor zeroed", |i| {
            let s = Img::sb(i);
            let at = (s.bg_table_start.get() as usize + 1) * B;
            i[at..at + B].fill(0);
        }),
        ("a zone group descriptor zeroed", |i| {
            i[2 * B..3 * B].fill(0);
        }),
        ("a region header zeroed", |i| {
            let s = Img::sb(i);
            let at = (s.bg_regions_start.get() + s.bg_size_blocks.get()) as usize * B;
            i[at..at + B].fill(0);
        }),
        ("a journal flag block zeroed", |i| {
            let s = Img::sb(i);
            let at = (s.node_journal_start.get() + s.node_journal_blocks.get()) as usize * B;
            i[at..at + B].fill(0);
        }),
        ("a free registry row with a stray byte", |i| {
            let s = Img::sb(i);
            let at = s.registry_start.get() as usize * B + 3 * 128 + 17;
            i[at] = 0x5a;
        }),
        ("an inode in use zeroed (the file is cleared)", |i| {
            let at = Img::inode_at(i, C);
            i[at..at + B].fill(0);
        }),
    ];
    for (name, damage) in cases {
        let mut img0 = clean.clone();
        damage(&mut img0);
        reseal(&mut img0);
        assert!(
            verify(&img0)
                .iter()
                .any(|f| f.severity() == tet_core::cetrafs::check::Severity::Error),
            "{name}: the damage is detected"
        );
        let mut probe = img0.clone();
        let dev = PowerCut::new(&mut probe, u64::MAX, 0);
        let out = repair(&dev, Mode::Yes, &repair::opts(), &mut |_| true).unwrap();
        assert!(out.left.is_empty(), "{name}: {:?}", out.left);
        let total = dev.writes.get();
        let good = repair::files(&probe);
        for cut in 0..total {
            for tear in [0usize, 3] {
                let mut img = img0.clone();
                let dev = PowerCut::new(&mut img, cut, tear);
                assert!(repair(&dev, Mode::Yes, &repair::opts(), &mut |_| true).is_err());
                let out = repair(
                    MemDeviceMut::new(&mut img),
                    Mode::Yes,
                    &repair::opts(),
                    &mut |_| true,
                )
                .unwrap_or_else(|e| panic!("{name}, cut {cut} tear {tear}: {e:?}"));
                assert!(
                    out.left.is_empty(),
                    "{name}, cut {cut} tear {tear}: {:?}",
                    out.left
                );
                let errors: Vec<_> = verify(&img)
                    .into_iter()
                    .filter(|f| f.severity() == tet_core::cetrafs::check::Severity::Error)
                    .collect();
                assert_eq!(errors, vec![], "{name}, cut {cut} tear {tear}");
                let now = repair::files(&img);
                for ((path, w), ((_, n), (_, g))) in want.iter().zip(now.iter().zip(&good)) {
                    // Untouched files as they were; the others as an uninterrupted repair
                    // leaves them.
                    assert!(n == w || n == g, "{name}, cut {cut} tear {tear}: {path}");
                }
            }
        }
    }
}

#[test]
fn an_inode_with_only_a_bad_checksum_is_resealed_by_preen() {
    use tet_alloc::cetrafs::repair::{repair, Mode};
    use tet_core::block::MemDeviceMut;
    let mut img = base();
    let at = Img::inode_at(&img, C);
    img[at + 248] ^= 0x40; // the checksum itself
    assert!(verify(&img).iter().any(|f| f.code == Code::Checksum));
    let out = repair(
        MemDeviceMut::new(&mut img),
        Mode::Preen,
        &repair::opts(),
        &mut |_| true,
    )
    .unwrap();
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert_eq!(verify(&img), vec![]);
    // A flipped must-be-zero byte as well: cleared and resealed, the inode is again
    // exactly what mkfs wrote.
    let mut img = base();
    let at = Img::inode_at(&img, C);
    img[at + 4] ^= 1; // flags, which must be zero
    let out = repair(
        MemDeviceMut::new(&mut img),
        Mode::Preen,
        &repair::opts(),
        &mut |_| true,
    )
    .unwrap();
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert!(
        img[at..at + B] == base()[at..at + B],
        "the flipped flag byte cleared, nothing else of the inode changed"
    );
    // A field that means something changed (the file type, to one cetrafs has not):
    // the inode is not sound, so -p reseals nothing and leaves it, and says what -y would
    // do (clear it).
    let mut img = base();
    let at = Img::inode_at(&img, C);
    img[at + 17] = 0x60; // mode 0o060000, a block device
    let before = img.clone();
    let out = repair(
        MemDeviceMut::new(&mut img),
        Mode::Preen,
        &repair::opts(),
        &mut |_| true,
    )
    .unwrap();
    assert!(out.left.iter().any(|f| f.code == Code::Checksum));
    assert!(img == before, "an unsound inode is left as it is");
    assert!(
        out.withheld
            .iter()
            .any(|f| f.action.starts_with("inode that cannot be read cleared")),
        "{:?}",
        out.withheld
    );
}

#[test]
fn with_no_free_space_the_later_owners_extent_is_cleared() {
    use tet_alloc::cetrafs::repair::{repair, Mode};
    use tet_core::block::MemDeviceMut;
    // A small image whose data area is full.
    let p = Params {
        size_bytes: 1 << 20,
        bg_size_blocks: 256,
        zone_groups: 1,
        nodes: 1,
        inodes: 16,
        journal_blocks: 9,
        pending_slots: 1,
        ..Params::default()
    };
    let mut b = ImageBuilder::new(p.clone());
    let a = b
        .add_file(ROOT, b"a", vec![1; B], Sparse::Dense, Placement::Contiguous)
        .unwrap();
    let bb = b
        .add_file(ROOT, b"b", vec![2; B], Sparse::Dense, Placement::Contiguous)
        .unwrap();
    let img = b.build().unwrap();
    let free = Img::bg(&img, 0).free_data_blocks.get() as usize;
    let mut b = ImageBuilder::new(p);
    b.add_file(ROOT, b"a", vec![1; B], Sparse::Dense, Placement::Contiguous)
        .unwrap();
    b.add_file(ROOT, b"b", vec![2; B], Sparse::Dense, Placement::Contiguous)
        .unwrap();
    let fill = b
        .add_file(
            ROOT,
            b"fill",
            vec![3; free * B],
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
    let mut img = b.build().unwrap();
    assert_eq!(Img::bg(&img, 0).free_data_blocks.get(), 0);
    // b's extent moves onto a's block, and `fill` grows back over b's old one, so no
    // block is left free for a copy.
    let shared = Img::first_block(&img, a);
    let old_b = Img::first_block(&img, bb);
    let at = Img::inode_at(&img, bb) + 116;
    patch::<RawExtent>(&mut img, at, |e| e.physical.set(shared));
    let at = Img::inode_at(&img, fill) + 116;
    patch::<RawExtent>(&mut img, at, |e| {
        assert_eq!(e.physical.get(), old_b + 1);
        e.physical.set(old_b);
        e.len.set(e.len.get() + 1);
    });
    Img::inode(&mut img, fill, |n| {
        n.size.set(n.size.get() + B as u64);
        n.blocks.set(n.blocks.get() + 1);
    });
    reseal(&mut img);
    let out = repair(
        MemDeviceMut::new(&mut img),
        Mode::Yes,
        &repair::opts(),
        &mut |_| true,
    )
    .unwrap();
    assert!(out.left.is_empty(), "{:?}", out.left);
    assert!(
        out.fixes
            .iter()
            .any(|f| f.action.starts_with("extent cleared")),
        "{:?}",
        out.fixes.iter().map(|f| f.action).collect::<Vec<_>>()
    );
    assert_eq!(verify(&img), vec![]);
    let mut bufs = Buffers::new();
    let fs = fs(&img);
    let i = fs.resolve(b"/b", &mut bufs).unwrap();
    let mut got = vec![9u8; B];
    fs.read(&i, 0, &mut got, &mut bufs).unwrap();
    assert_eq!(got, vec![0u8; B], "b's range is a hole now");
    let i = fs.resolve(b"/a", &mut bufs).unwrap();
    fs.read(&i, 0, &mut got, &mut bufs).unwrap();
    assert_eq!(got, vec![1u8; B], "a keeps its block");
}

/// A repair cut after it marked its journal DIRTY leaves warnings only, which name the
/// remedy (docs/cetrafs.md section 13); repair again converges.
#[test]
fn an_interrupted_repair_leaves_warnings_that_name_the_remedy() {
    use tet_alloc::cetrafs::repair::{repair, Mode};
    use tet_core::block::MemDeviceMut;
    use tet_core::cetrafs::check::Severity;
    let mut img0 = base();
    Img::inode(&mut img0, A, |n| n.nlink.set(3));
    reseal(&mut img0);
    let mut probe = img0.clone();
    let dev = PowerCut::new(&mut probe, u64::MAX, 0);
    repair(&dev, Mode::Yes, &repair::opts(), &mut |_| true).unwrap();
    let total = dev.writes.get();
    let mut dirty_cuts = 0;
    for cut in 0..total {
        let mut img = img0.clone();
        let dev = PowerCut::new(&mut img, cut, 0);
        assert!(repair(&dev, Mode::Yes, &repair::opts(), &mut |_| true).is_err());
        let found = verify(&img);
        if found.iter().any(|f| f.code == Code::JournalReplay) {
            dirty_cuts += 1;
            assert!(
                found.iter().all(|f| f.severity() == Severity::Warning),
                "cut {cut}: {found:?}"
            );
            let remedy = found
                .iter()
                .any(|f| f.code.description().contains("tet-host replay"));
            assert!(remedy, "cut {cut}: {found:?}");
        }
        let out = repair(
            MemDeviceMut::new(&mut img),
            Mode::Yes,
            &repair::opts(),
            &mut |_| true,
        )
        .unwrap();
        assert!(out.left.is_empty(), "cut {cut}: {:?}", out.left);
    }
    assert!(
        dirty_cuts >= 1,
        "some cut falls after the journal went DIRTY"
    );
}
