//! Pass 4 over the entries pass 3 remembered: each names an inode in use, of the type it
//! says; a directory is named once, by the directory its `parent` names.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use tet_core::cetrafs::check::Sink;
use tet_core::cetrafs::{Code, FileType, Finding, Superblock};
use tet_core::ErrorKind;

use super::err;
use super::maps::Bits;
use super::{Entry, Info};

/// The inodes in use that parsed, and where each inode number's entry is (0 = none,
/// else position + 1): 4 bytes per inode, so every lookup of passes 4 to 6 is direct.
pub(super) struct Infos {
    pub(super) list: Vec<Info>,
    index: Vec<u32>,
}

impl Infos {
    /// Indexes `list` for an inode table of `inode_count`; the flag is false when the
    /// index could not be allocated (every lookup then finds nothing).
    pub(super) fn new(list: Vec<Info>, inode_count: u64) -> (Infos, bool) {
        let mut index: Vec<u32> = Vec::new();
        let count = usize::try_from(inode_count).unwrap_or(usize::MAX);
        let complete = index.try_reserve_exact(count).is_ok();
        if complete {
            index.resize(count, 0);
            for (k, i) in list.iter().enumerate() {
                let slot = usize::try_from(i.ino).ok().and_then(|n| index.get_mut(n));
                if let (Some(slot), Ok(pos)) = (slot, u32::try_from(k.saturating_add(1))) {
                    *slot = pos;
                }
            }
        }
        (Infos { list, index }, complete)
    }

    pub(super) fn get_mut(&mut self, ino: u64) -> Option<&mut Info> {
        let at = usize::try_from(ino)
            .ok()
            .and_then(|i| self.index.get(i))
            .copied()?;
        let at = usize::try_from(at).ok()?.checked_sub(1)?;
        self.list.get_mut(at)
    }
}

/// Checks every entry's target and type, counts references and subdirectories, and
/// reports directories named twice or with the wrong `parent`. Returns which entries
/// count (their target in use, parsed, and of the type the entry says).
pub(super) fn live_entries(
    sb: &Superblock,
    in_use: &Bits,
    infos: &mut Infos,
    entries: &[Entry],
    sink: &mut dyn Sink<Finding>,
) -> Vec<bool> {
    let root = sb.root_inode();
    let inode_lba = |ino: u64| sb.raw().inode_table_start.get().saturating_add(ino);
    // The entry a directory keeps when several name it: the one in the directory its
    // `parent` names, else the first; every other is the extra link.
    let mut keeper: BTreeMap<u64, usize> = BTreeMap::new();
    for (k, e) in entries.iter().enumerate() {
        if e.ftype != FileType::Directory || e.target == root {
            continue;
        }
        let Some(t) = infos.get_mut(e.target).map(|t| *t) else {
            continue;
        };
        if t.kind != Some(FileType::Directory) {
            continue;
        }
        match keeper.get(&e.target).copied() {
            None => {
                keeper.insert(e.target, k);
            }
            Some(prev) => {
                let prev_right = entries.get(prev).is_some_and(|p| p.dir == t.parent);
                if !prev_right && e.dir == t.parent {
                    keeper.insert(e.target, k);
                }
            }
        }
    }
    // Entries that count: the target is in use and parsed, and the type agrees.
    let mut live: Vec<bool> = Vec::new();
    live.resize(entries.len(), false);
    for (k, e) in entries.iter().enumerate() {
        let at_name = (e.lba, usize::from(e.off));
        if e.target == 0 || !in_use.get(e.target) {
            sink.report(
                &Finding::new(
                    Code::DirentFree,
                    err(
                        ErrorKind::Mismatch {
                            expected: 1,
                            found: 0,
                        },
                        "dirent.inode (not in use)",
                        at_name.0,
                        at_name.1,
                    ),
                )
                .of_inode(e.dir),
            );
            continue;
        }
        let Some(t) = infos.get_mut(e.target) else {
            continue; // in use but unreadable: reported by pass 3
        };
        if t.kind != Some(e.ftype) {
            sink.report(
                &Finding::new(
                    Code::DirentType,
                    err(
                        ErrorKind::Mismatch {
                            expected: t.kind.map_or(0, |k| k.code()).into(),
                            found: e.ftype.code().into(),
                        },
                        "dirent.file_type",
                        at_name.0,
                        at_name.1.saturating_add(10),
                    ),
                )
                .of_inode(e.dir),
            );
            continue;
        }
        t.refs = t.refs.saturating_add(1);
        let is_dir = t.kind == Some(FileType::Directory);
        let parent = t.parent;
        if let Some(l) = live.get_mut(k) {
            *l = true;
        }
        if is_dir {
            if let Some(d) = infos.get_mut(e.dir) {
                d.subdirs = d.subdirs.saturating_add(1);
            }
            if keeper.get(&e.target) != Some(&k) || e.target == root {
                sink.report(
                    &Finding::new(
                        Code::DirLinked,
                        err(
                            ErrorKind::Invalid,
                            "dirent.inode (a directory named twice)",
                            at_name.0,
                            at_name.1,
                        ),
                    )
                    .of_inode(e.target),
                );
            } else if parent != e.dir {
                sink.report(
                    &Finding::new(
                        Code::DirParent,
                        err(
                            ErrorKind::Mismatch {
                                expected: e.dir,
                                found: parent,
                            },
                            "inode.parent",
                            inode_lba(e.target),
                            88,
                        ),
                    )
                    .of_inode(e.target),
                );
            }
        }
    }
    live
}
