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
    if !wanted.is_empty() {
        walk(fs, &wanted, &mut out);
    }
    let mut blk: Block = [0; BLOCK_SIZE];
    for f in fixes
        .iter()
        .filter(|f| f.action.contains("entry") && f.action.contains("removed"))
    {
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
                out.push((f.offset, name.to_vec()));
            }
        }
    }
    out
}

/// Walks the tree from the root, breadth first, each directory once, recording every
/// path that names an inode of `wanted` (`(ino, fix offset)`).
fn walk<D: BlockDevice>(fs: &Fs<D>, wanted: &[(u64, u64)], out: &mut Vec<(u64, Vec<u8>)>) {
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
