//! Naming inodes by their paths, for reports: one breadth-first walk from the root,
//! each directory read once, bounded in directories and in bytes of paths kept.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use core::ops::ControlFlow;

use tet_core::block::BlockDevice;
use tet_core::cetrafs::{Buffers, FileType, Fs};

/// At most this many directories are walked to name inodes, and at most this many bytes
/// of paths kept (a walk of a huge or deep tree for a report is cut short; what it did
/// not reach is named by its inode number alone).
const WALK_LIMIT: usize = 1 << 20;
const PATH_BYTES: usize = 64 << 20;

/// Every path naming each of `inos` that the walk from the root reaches, as
/// `(inode, path)` in the order found (an inode with hard links has several; one not
/// reached, none).
pub fn paths_of<D: BlockDevice>(fs: &Fs<D>, inos: &[u64]) -> Vec<(u64, Vec<u8>)> {
    let mut wanted: Vec<(u64, u64)> = inos.iter().map(|i| (*i, *i)).collect();
    wanted.sort_unstable();
    wanted.dedup();
    let mut out = Vec::new();
    if !wanted.is_empty() {
        walk(fs, &wanted, &mut out, &mut Vec::new(), None);
    }
    out
}

/// Walks the tree from the root, breadth first, each directory once, recording every
/// path that names an inode of `wanted` (`(ino, tag)`, sorted by inode) as `(tag, path)`;
/// with `runs`, also each directory's path (in `dirs`) and the block runs of its entries.
pub(crate) fn walk<D: BlockDevice>(
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
            let first = wanted.partition_point(|(ino, _)| *ino < e.inode);
            for (_, tag) in wanted
                .iter()
                .skip(first)
                .take_while(|(ino, _)| *ino == e.inode)
            {
                if out.try_reserve(1).is_ok() {
                    out.push((*tag, p.clone()));
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

/// At most this many blocks are looked up by [`owners_of`] (a report of more shared
/// blocks names the other owners of the first ones only).
const OWNER_LOOKUPS: usize = 1 << 16;

/// Every inode whose data extents or xattr block hold one of `blocks`, as
/// `(block, inode)` sorted by block then inode: one pass over the inode table, for
/// naming both owners of a block owned twice. Inodes that do not read are skipped.
pub fn owners_of<D: BlockDevice>(fs: &Fs<D>, blocks: &[u64]) -> Vec<(u64, u64)> {
    let mut wanted: Vec<u64> = blocks.iter().copied().take(OWNER_LOOKUPS).collect();
    wanted.sort_unstable();
    wanted.dedup();
    let mut out: Vec<(u64, u64)> = Vec::new();
    if wanted.is_empty() {
        return out;
    }
    let mut bufs = Buffers::new();
    let record = |b: u64, ino: u64, out: &mut Vec<(u64, u64)>| {
        if out.try_reserve(1).is_ok() {
            out.push((b, ino));
        }
    };
    for ino in 1..fs.superblock().inode_count() {
        let Ok(inode) = fs.inode(ino, &mut bufs.data) else {
            continue;
        };
        let x = inode.raw().xattr_block.get();
        if x != 0 && wanted.binary_search(&x).is_ok() {
            record(x, ino, &mut out);
        }
        let _ = fs.for_each_extent(&inode, &mut bufs.tree, |e| {
            let end = e.physical.saturating_add(u64::from(e.len));
            let first = wanted.partition_point(|b| *b < e.physical);
            for b in wanted.iter().skip(first).take_while(|b| **b < end) {
                record(*b, ino, &mut out);
            }
            Ok(ControlFlow::Continue(()))
        });
    }
    out.sort_unstable();
    out.dedup();
    out
}
