//! Naming what a fix that loses something touches, before it is written: the path of an
//! inode cleared or stripped of its xattrs, and the name an entry removed held, so the
//! report says which file is lost, not only which block.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use core::ops::ControlFlow;

use tet_core::block::{Block, BlockDevice, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::RawDirEntry;
use tet_core::cetrafs::{Buffers, FileType, Fs};
use zerocopy::FromBytes;

use super::unreadable::{CLEARED, XATTRS_DROPPED};
use super::Fix;

/// At most this many directories are walked to name inodes, and at most this many bytes
/// of paths kept (a walk of a huge or deep tree for a report is cut short; what it did
/// not reach is named by its inode number alone).
const WALK_LIMIT: usize = 1 << 20;
const PATH_BYTES: usize = 64 << 20;

/// The paths of `fixes` that lose something, as `(fix offset, path)`: for an inode
/// cleared or stripped of its xattrs, every path naming it (walked from the root); for an
/// entry removed, the name it holds.
pub(super) fn name_losses<D: BlockDevice>(fs: &Fs<D>, fixes: &[Fix]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let wanted: Vec<(u64, u64)> = fixes
        .iter()
        .filter(|f| f.action == CLEARED || f.action == XATTRS_DROPPED)
        .filter_map(|f| f.value.map(|ino| (ino, f.offset)))
        .collect();
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
        // The directory holding the block, when the walk reached it.
        let mut path = runs
            .iter()
            .find(|(a, b, _)| lba >= *a && lba < *b)
            .and_then(|(_, _, d)| dirs.get(*d))
            .cloned()
            .unwrap_or_default();
        path.push(b'/');
        path.extend_from_slice(name);
        out.push((f.offset, path));
    }
    out
}

/// Walks the tree from the root, breadth first, each directory once, recording every
/// path that names an inode of `wanted` (`(ino, fix offset)`).
fn walk<D: BlockDevice>(
    fs: &Fs<D>,
    wanted: &[(u64, u64)],
    out: &mut Vec<(u64, Vec<u8>)>,
    dirs: &mut Vec<Vec<u8>>,
    mut runs: Option<&mut Vec<(u64, u64, usize)>>,
) {
    let mut bufs = Buffers::new();
    let root = fs.superblock().root_inode();
    let mut seen: BTreeSet<u64> = BTreeSet::new();
    let mut queue: Vec<(u64, Vec<u8>)> = Vec::new();
    queue.push((root, Vec::new()));
    seen.insert(root);
    let mut head = 0usize;
    let mut kept = 0usize;
    while let Some((dir, path)) = queue.get(head).cloned() {
        head = head.saturating_add(1);
        if head > WALK_LIMIT {
            break;
        }
        let Ok(inode) = fs.inode(dir, &mut bufs.data) else {
            continue;
        };
        if let Some(runs) = runs.as_deref_mut() {
            if dirs.try_reserve(1).is_ok() {
                let d = dirs.len();
                dirs.push(path.clone());
                let _ = fs.for_each_extent(&inode, &mut bufs.tree, |e| {
                    if runs.try_reserve(1).is_ok() {
                        runs.push((e.physical, e.physical.saturating_add(u64::from(e.len)), d));
                    }
                    Ok(ControlFlow::Continue(()))
                });
            }
        }
        let mut below: Vec<(u64, Vec<u8>)> = Vec::new();
        let _ = fs.read_dir(&inode, &mut bufs, |e| {
            let mut p = path.clone();
            p.push(b'/');
            p.extend_from_slice(e.name());
            for (ino, offset) in wanted {
                if *ino == e.inode {
                    out.push((*offset, p.clone()));
                }
            }
            if e.file_type == FileType::Directory {
                below.push((e.inode, p));
            }
            ControlFlow::Continue(())
        });
        for (ino, p) in below {
            if kept.saturating_add(p.len()) > PATH_BYTES || queue.try_reserve(1).is_err() {
                return;
            }
            if seen.insert(ino) {
                kept = kept.saturating_add(p.len());
                queue.push((ino, p));
            }
        }
    }
}
