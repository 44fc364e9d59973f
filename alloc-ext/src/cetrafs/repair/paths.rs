//! Naming what a fix that loses something touches, before it is written: the path of an
//! inode cleared or stripped of its xattrs, and the name an entry removed held, so the
//! report says which file is lost, not only which block.

use alloc::format;
use alloc::vec::Vec;

use tet_core::block::{Block, BlockDevice, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::RawDirEntry;
use tet_core::cetrafs::Fs;
use zerocopy::FromBytes;

use super::unreadable::{CLEARED, XATTRS_DROPPED};
use super::Fix;
use crate::cetrafs::names::{owners_of, walk};

/// The paths of `fixes` that lose something, as `(fix offset, path)`: for an inode
/// cleared or stripped of its xattrs, every path naming it (walked from the root); for an
/// entry removed, the name it holds.
pub(super) fn name_losses<D: BlockDevice>(fs: &Fs<D>, fixes: &[Fix]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut wanted: Vec<(u64, u64)> = fixes
        .iter()
        .filter(|f| f.action == CLEARED || f.action == XATTRS_DROPPED)
        .filter_map(|f| f.value.map(|ino| (ino, f.offset)))
        .collect();
    wanted.sort_unstable();
    let removals: Vec<&Fix> = fixes
        .iter()
        .filter(|f| f.action.contains("entry") && f.action.contains("removed"))
        .collect();
    // Directories the walk reached, and (when entries are removed) the block runs that
    // hold their entries, by directory: gathered in the walk's one read of each.
    let mut dirs: Vec<Vec<u8>> = Vec::new();
    let mut runs: Vec<(u64, u64, usize)> = Vec::new();
    if !wanted.is_empty() || !removals.is_empty() {
        let runs = (!removals.is_empty()).then_some(&mut runs);
        walk(fs, &wanted, &mut out, &mut dirs, runs);
    }
    // Blocks of directories the walk did not reach: named by the inode that maps them,
    // as debugfs writes one (`<45>/name`), found in one pass over the inodes.
    let unreached: Vec<u64> = removals
        .iter()
        .map(|f| f.offset / BLOCK_SIZE_U64)
        .filter(|lba| !runs.iter().any(|(a, b, _)| lba >= a && lba < b))
        .collect();
    let owners = if unreached.is_empty() {
        Vec::new()
    } else {
        owners_of(fs, &unreached)
    };
    let mut blk: Block = [0; BLOCK_SIZE];
    for f in removals {
        let lba = f.offset / BLOCK_SIZE_U64;
        let at = usize::try_from(f.offset % BLOCK_SIZE_U64).unwrap_or(0);
        if fs.device().read_block(lba, &mut blk).is_err() {
            continue;
        }
        let Some(e) = blk
            .get(at..at.saturating_add(266))
            .and_then(|b| RawDirEntry::read_from_bytes(b).ok())
        else {
            continue;
        };
        let len = usize::from(e.name_len.get()).min(255);
        let Some(name) = e.name.get(..len).filter(|n| !n.is_empty()) else {
            continue;
        };
        // The directory holding the block: its path when the walk reached it, else the
        // inode mapping the block, else nothing known (`<?>`).
        let reached = runs
            .iter()
            .find(|(a, b, _)| lba >= *a && lba < *b)
            .and_then(|(_, _, d)| dirs.get(*d))
            .cloned();
        let mut path = reached.unwrap_or_else(|| {
            let at = owners.partition_point(|(b, _)| *b < lba);
            match owners.get(at) {
                Some((b, dir)) if *b == lba => format!("<{dir}>").into_bytes(),
                _ => b"<?>".to_vec(),
            }
        });
        path.push(b'/');
        path.extend_from_slice(name);
        out.push((f.offset, path));
    }
    out
}
