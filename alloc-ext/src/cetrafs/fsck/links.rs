//! Passes 5 and 6: every inode reachable from the root (orphans reported at the top of
//! each unreachable subtree, then each directory of a cycle), and link counts against
//! the references counted.

use alloc::vec::Vec;

use tet_core::cetrafs::check::Sink;
use tet_core::cetrafs::{Code, FileType, Finding, Superblock};
use tet_core::ErrorKind;

use super::dirs::{live_entries, Infos};
use super::err;
use super::maps::Bits;
use super::Entry;

/// Passes 4 to 6 over the remembered entries: targets in use and of the right type,
/// reachability from the root, directories named once with the right parent, orphans,
/// link counts.
pub(super) fn connectivity(
    sb: &Superblock,
    in_use: &Bits,
    infos: &mut Infos,
    entries: &[Entry],
    sink: &mut dyn Sink<Finding>,
) {
    let root = sb.root_inode();
    let inode_lba = |ino: u64| sb.raw().inode_table_start.get().saturating_add(ino);
    match infos.get_mut(root).map(|r| *r) {
        Some(r) if r.kind == Some(FileType::Directory) && r.parent == root => {}
        _ => sink.report(&Finding::new(
            Code::RootInode,
            err(
                ErrorKind::Invalid,
                "root inode (inode 1)",
                inode_lba(root),
                0,
            ),
        )),
    }
    let live = live_entries(sb, in_use, infos, entries, sink);
    // Reachability: breadth-first from the root over live entries. Entries are grouped
    // by directory in ascending inode order (pass 3 walked inodes in order).
    let children = |dir: u64| {
        let lo = entries.partition_point(|e| e.dir < dir);
        let hi = entries.partition_point(|e| e.dir <= dir);
        (lo, hi)
    };
    let mut queue: Vec<u64> = Vec::new();
    if let Some(r) = infos.get_mut(root) {
        r.reached = true;
        queue.push(root);
    }
    let mut head = 0usize;
    while let Some(dir) = queue.get(head).copied() {
        head = head.saturating_add(1);
        let (lo, hi) = children(dir);
        for k in lo..hi {
            let (Some(e), Some(true)) = (entries.get(k), live.get(k).copied()) else {
                continue;
            };
            if let Some(t) = infos.get_mut(e.target) {
                if !t.reached {
                    t.reached = true;
                    if t.kind == Some(FileType::Directory) {
                        queue.push(e.target);
                    }
                }
            }
        }
    }
    // Orphans: the tops of unreachable subtrees (named by no live entry) are reported,
    // and what hangs below them is marked so it is not reported again; what remains
    // unreached after that is a cycle of directories, each reported.
    let tops: Vec<u64> = infos
        .list
        .iter()
        .filter(|i| !i.reached && i.refs == 0)
        .map(|i| i.ino)
        .collect();
    let mut below: Vec<u64> = Vec::new();
    for top in &tops {
        report_orphan(*top, sb, sink);
        below.clear();
        below.push(*top);
        let mut head = 0usize;
        while let Some(dir) = below.get(head).copied() {
            head = head.saturating_add(1);
            if let Some(t) = infos.get_mut(dir) {
                if t.reached {
                    continue;
                }
                t.reached = true;
                if t.kind != Some(FileType::Directory) {
                    continue;
                }
            }
            let (lo, hi) = children(dir);
            for k in lo..hi {
                if let (Some(e), Some(true)) = (entries.get(k), live.get(k).copied()) {
                    below.push(e.target);
                }
            }
        }
    }
    for i in infos.list.iter() {
        if !i.reached {
            report_orphan(i.ino, sb, sink);
        }
        // Section 8: only a directory has a parent.
        if i.kind.is_some() && i.kind != Some(FileType::Directory) && i.parent != 0 {
            sink.report(
                &Finding::new(
                    Code::DirParent,
                    err(
                        ErrorKind::Mismatch {
                            expected: 0,
                            found: i.parent,
                        },
                        "inode.parent (not a directory: 0)",
                        inode_lba(i.ino),
                        88,
                    ),
                )
                .of_inode(i.ino),
            );
        }
        let expected = if i.kind == Some(FileType::Directory) {
            i.subdirs.saturating_add(2)
        } else {
            i.refs
        };
        if i.nlink != expected {
            sink.report(
                &Finding::new(
                    Code::LinkCount,
                    err(
                        ErrorKind::Mismatch {
                            expected: expected.into(),
                            found: i.nlink.into(),
                        },
                        "inode.nlink",
                        inode_lba(i.ino),
                        28,
                    ),
                )
                .of_inode(i.ino),
            );
        }
    }
}

fn report_orphan(ino: u64, sb: &Superblock, sink: &mut dyn Sink<Finding>) {
    sink.report(
        &Finding::new(
            Code::Orphan,
            err(
                ErrorKind::Invalid,
                "inode (in use, not reachable from the root)",
                sb.raw().inode_table_start.get().saturating_add(ino),
                0,
            ),
        )
        .of_inode(ino),
    );
}
