//! Naming what a fix that loses something touches, before it is written: the path of an
//! inode cleared or stripped of its xattrs, and the name an entry removed held, so the
//! report says which file is lost, not only which block.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use core::ops::ControlFlow;

use tet_core::block::{Block, BlockDevice, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::{Buffers, FileType, Fs};

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
    let mut dirs: Vec<(u64, Vec<u8>)> = Vec::new();
    if !wanted.is_empty() || !removals.is_empty() {
        walk(fs, &wanted, &mut out, &mut dirs);
    }
    let mut blk: Block = [0; BLOCK_SIZE];
    for f in removals {
        let lba = f.offset / BLOCK_SIZE_U64;
        let at = usize::try_from(f.offset % BLOCK_SIZE_U64).unwrap_or(0);
        if fs.device().read_block(lba, &mut blk).is_err() {
            continue;
        }
        // The entry's name as it reads (name_len at 8, the name at 11), bounded.
        let len = blk
            .get(at.saturating_add(8)..at.saturating_add(10))
            .and_then(|b| <[u8; 2]>::try_from(b).ok())
            .map(|b| usize::from(u16::from_le_bytes(b)))
            .unwrap_or(0)
            .min(255);
        if let Some(name) =
            blk.get(at.saturating_add(11)..at.saturating_add(11).saturating_add(len))
        {
            if !name.is_empty() {
                // The directory holding the block, when the walk reached it.
                let mut path = dir_of(fs, &dirs, lba).unwrap_or_default();
                path.push(b'/');
                path.extend_from_slice(name);
                out.push((f.offset, path));
            }
        }
    }
    out
}

/// Walks the tree from the root, breadth first, each directory once, recording every
/// path that names an inode of `wanted` (`(ino, fix offset)`).
fn walk<D: BlockDevice>(
    fs: &Fs<D>,
    wanted: &[(u64, u64)],
    out: &mut Vec<(u64, Vec<u8>)>,
    dirs: &mut Vec<(u64, Vec<u8>)>,
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
        if dirs.try_reserve(1).is_ok() {
            dirs.push((dir, path.clone()));
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

/// The path of the directory among `dirs` whose data holds block `lba` (empty for the
/// root).
fn dir_of<D: BlockDevice>(fs: &Fs<D>, dirs: &[(u64, Vec<u8>)], lba: u64) -> Option<Vec<u8>> {
    let mut bufs = Buffers::new();
    for (ino, path) in dirs {
        let Ok(inode) = fs.inode(*ino, &mut bufs.data) else {
            continue;
        };
        let mut holds = false;
        let _ = fs.for_each_extent(&inode, &mut bufs.tree, |e| {
            holds = lba >= e.physical && lba < e.physical.saturating_add(u64::from(e.len));
            Ok(if holds {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        });
        if holds {
            return Some(path.clone());
        }
    }
    None
}
