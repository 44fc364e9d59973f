//! One round's plan: which fix families run, in which order, from the findings of the
//! check and its ownership map.

use alloc::vec::Vec;

use tet_core::block::BlockDeviceMut;
use tet_core::cetrafs::{Code, Finding, Fs};
use tet_core::Error;

use super::bitmaps::{mark_inodes, pad_inode_bitmap, rebuild_bitmaps};
use super::clone::clone_extent;
use super::derived::fix_derived;
use super::dir_blocks::{changes_entries, fix_dir_blocks};
use super::entries::fix_one;
use super::lost_found::reconnect_orphans;
use super::patches::Patches;
use super::root::rebuild_root;
use super::unreadable::fix_unreadable;
use super::Fix;
use crate::cetrafs::fsck::{self, OwnershipMap};

/// Plans one round's fixes from the findings and the ownership map.
pub(super) fn plan<D: BlockDeviceMut>(
    fs: &Fs<D>,
    found: &[Finding],
    own: Option<&OwnershipMap>,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    // The codes found, once: a zeroed inode bitmap is 210,000 findings of one code.
    let mut codes: Vec<Code> = Vec::new();
    for f in found {
        if !codes.contains(&f.code) {
            codes.push(f.code);
        }
    }
    let has = |c: Code| codes.contains(&c);
    // A root that does not read first, alone: every other family reads the tree from it.
    if let Some(own) = own {
        if rebuild_root(fs, found, own, patches, fixes)? {
            return Ok(());
        }
    }
    // The inode bitmap first: which inodes are in use decides every rebuild after it.
    mark_inodes(fs, found, patches, fixes)?;
    // Bitmaps and counters, rebuilt from the ownership map.
    if let Some(own) = own {
        if has(Code::BlockLeaked)
            || has(Code::BlockUnmarked)
            || has(Code::GroupFreeCount)
            || has(Code::ZoneFreeCount)
            || has(Code::FreeCountStale)
            || has(Code::BitmapPadding)
        {
            // When an inode in use, or part of its tree, could not be read, the blocks
            // it owns are unknown: bits are only ever set then, never cleared, so no
            // block of an unreadable file is handed out again.
            let unknown_owners = found.iter().any(|f| {
                f.ino.is_some()
                    && matches!(
                        f.code,
                        Code::Inode
                            | Code::Checksum
                            | Code::Magic
                            | Code::ExtentTree
                            | Code::ExtentOverlap
                            | Code::IndexLogical
                            | Code::IndexRange
                            | Code::XattrBlock
                            | Code::XattrDuplicate
                            | Code::ReadFailed
                    )
            });
            rebuild_bitmaps(fs, own, unknown_owners, patches, fixes)?;
        }
    }
    if has(Code::BitmapPadding) {
        pad_inode_bitmap(fs, patches, fixes)?;
    }
    // Entries decide link counts: while entries are being fixed, counts wait for the
    // next round's check.
    let entries_change = found.iter().any(|f| {
        matches!(
            f.code,
            Code::DirentType | Code::DirentFree | Code::DirentDuplicate | Code::DirLinked
        ) || changes_entries(f)
    });
    fix_dir_blocks(found, patches, fixes)?;
    let extents_settled = !has(Code::BlockShared);
    for f in found {
        fix_one(f, entries_change, extents_settled, patches, fixes)?;
        fix_derived(f, patches, fixes)?;
    }
    fix_unreadable(found, patches, fixes)?;
    // Orphans, once nothing else in this round changes entries or bitmaps (the new
    // directory's blocks are allocated from what the bitmaps say is free).
    let busy = entries_change
        || !patches.blocks.is_empty()
        || has(Code::BlockLeaked)
        || has(Code::BlockUnmarked);
    if !busy {
        if let Some(own) = own {
            reconnect_orphans(fs, found, own, patches, fixes)?;
            if patches.blocks.is_empty() {
                if let Some(f) = found
                    .iter()
                    .find(|f| f.code == Code::BlockShared && f.error.what == fsck::EXTENT_SHARED)
                {
                    clone_extent(fs, f, own, patches, fixes)?;
                }
            }
        }
    }
    Ok(())
}
