//! Inodes, trees and xattr blocks that do not read (docs/cetrafs.md section 14). A tree
//! or xattr block whose tail alone is wrong is resealed, accepting what it holds as it
//! reads now (`-p`); an inode that still cannot be read is cleared by `-y` (its block
//! zeroed, its bitmap bit cleared; the next round removes the entries naming it and
//! frees its blocks); an xattr block that does not read is dropped by `-y` (the inode
//! keeps everything else).

use alloc::vec::Vec;

use tet_core::block::BlockDeviceMut;
use tet_core::cetrafs::raw::RawInode;
use tet_core::cetrafs::{
    Code, Finding, BITS_PER_BITMAP_BLOCK, EXTENT_MAGIC, TAIL_AT, TAIL_EXTENT, TAIL_XATTR,
};
use tet_core::Error;

use super::patches::{reseal_tail, set_bit, split, Patches};
use super::Fix;

/// What [`clear`] says it does.
pub const CLEARED: &str =
    "inode that cannot be read cleared: the file is lost (its entries are removed and its \
     blocks freed next round)";

/// What dropping an xattr block says.
pub const XATTRS_DROPPED: &str =
    "xattr block that does not read dropped: the inode's extended attributes are lost";

/// Whether finding `f` says inode `f.ino` itself, or its extent tree, does not read.
/// (Extents that overlap, or index keys that disagree with their subtrees, break rules
/// the reader does not depend on: the file reads, and is left to be reported.)
fn inode_unreadable(f: &Finding) -> bool {
    let w = f.error.what;
    matches!(
        f.code,
        Code::Magic | Code::Checksum | Code::Inode | Code::ExtentTree | Code::ReadFailed
    ) && ((w.starts_with("inode.") && w != "inode.xattr_block") || w.starts_with("extent"))
}

/// Whether finding `f` is about inode `f.ino`'s xattr block.
fn xattr_unreadable(f: &Finding) -> bool {
    let w = f.error.what;
    matches!(
        f.code,
        Code::Magic | Code::Checksum | Code::XattrBlock | Code::XattrDuplicate | Code::ReadFailed
    ) && (w.starts_with("xattr") || w == "inode.xattr_block")
}

/// Whether a finding is about a block's tail, the tail magic it must carry, and whether
/// the block's content is worth resealing (a tree block's header magic; any xattr).
type TailRule = (bool, [u8; 4], fn(&[u8]) -> bool);

/// Plans this family's fixes for the round. `done` lists the inode blocks another fix
/// of the round already repairs (a magic restored, a checksum resealed).
pub(super) fn fix_unreadable<D: BlockDeviceMut>(
    found: &[Finding],
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let sb = *patches.fs.superblock();
    let itable = sb.raw().inode_table_start.get();
    let root = sb.root_inode();
    let mut handled: Vec<u64> = Vec::new();
    // Tails first: a resealed tree or xattr block is checked whole next round.
    for f in found {
        let (lba, _) = split(f.error.offset);
        let (tail, magic, header_ok): TailRule = match f.error.what {
            "extent_block.tail.crc" | "extent_block.tail.magic" => (true, TAIL_EXTENT, |b| {
                b.get(..2) == Some(&EXTENT_MAGIC.to_le_bytes()[..])
            }),
            "xattr_block.tail.crc" | "xattr_block.tail.magic" => (true, TAIL_XATTR, |b| {
                b.get(..TAIL_AT).is_some_and(|x| x.iter().any(|v| *v != 0))
            }),
            _ => (false, [0; 4], |_| false),
        };
        if !tail || handled.contains(&lba) {
            continue;
        }
        let Some(ino) = f.ino else { continue };
        let now = *patches.block(lba)?;
        if !header_ok(&now[..]) {
            continue;
        }
        handled.push(lba);
        handled.push(itable.saturating_add(ino));
        let mut b = now;
        if let Some(m) = b.get_mut(TAIL_AT..TAIL_AT.saturating_add(4)) {
            m.copy_from_slice(&magic);
        }
        if let Some(r) = b.get_mut(TAIL_AT.saturating_add(4)..TAIL_AT.saturating_add(8)) {
            r.fill(0);
        }
        // Sealed as it reads (the magic, or one byte of the stored checksum, was hit):
        // nothing is lost. Otherwise what the block holds changed, and resealing keeps
        // the change (`-y`).
        let stored = b
            .get(TAIL_AT.saturating_add(8)..TAIL_AT.saturating_add(16))
            .and_then(|x| <[u8; 8]>::try_from(x).ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0);
        let c = tet_core::checksum::crc32c_skipping(&b[..], TAIL_AT.saturating_add(8));
        let lossless = c == stored || super::entries::one_byte_apart(c, stored);
        let tree = magic == TAIL_EXTENT;
        let fix = Fix {
            code: f.code,
            action: match (tree, lossless) {
                (true, true) => "extent tree block resealed (it reads as it was sealed)",
                (true, false) => {
                    "extent tree block resealed: accepts its extents as they read now (a \
                     changed extent is kept as it reads)"
                }
                (false, true) => "xattr block resealed (it reads as it was sealed)",
                (false, false) => "xattr block resealed: accepts the attributes as they read now",
            },
            offset: f.error.offset,
            value: Some(ino),
            lossless,
        };
        if !patches.allows(&fix) {
            continue;
        }
        reseal_tail(&mut b);
        *patches.block(lba)? = b;
        fixes.push(fix);
    }
    // Inodes another fix of this round repairs are not cleared.
    let repaired: Vec<u64> = fixes.iter().map(|x| split(x.offset).0).collect();
    for f in found {
        let Some(ino) = f.ino else { continue };
        let lba = itable.saturating_add(ino);
        if ino == root || handled.contains(&lba) || repaired.contains(&lba) {
            continue;
        }
        if inode_unreadable(f) {
            handled.push(lba);
            let fix = Fix {
                code: f.code,
                action: CLEARED,
                offset: lba.saturating_mul(tet_core::block::BLOCK_SIZE_U64),
                value: Some(ino),
                lossless: false,
            };
            if patches.allows(&fix) {
                clear(patches, ino, lba)?;
                fixes.push(fix);
            }
        } else if xattr_unreadable(f) {
            handled.push(lba);
            let fix = Fix {
                code: f.code,
                action: XATTRS_DROPPED,
                offset: lba
                    .saturating_mul(tet_core::block::BLOCK_SIZE_U64)
                    .saturating_add(96),
                value: Some(ino),
                lossless: false,
            };
            if patches.allows(&fix) {
                patches.inode(lba, |r: &mut RawInode| r.xattr_block.set(0))?;
                fixes.push(fix);
            }
        }
    }
    Ok(())
}

/// Zeroes inode `ino`'s block (`lba`) and clears its bit in the inode bitmap.
fn clear<D: BlockDeviceMut>(patches: &mut Patches<'_, D>, ino: u64, lba: u64) -> Result<(), Error> {
    patches.block(lba)?.fill(0);
    let start = patches.fs.superblock().raw().inode_bitmap_start.get();
    let b = patches.block(start.saturating_add(ino / BITS_PER_BITMAP_BLOCK))?;
    set_bit(b, ino % BITS_PER_BITMAP_BLOCK, false);
    Ok(())
}
