//! Directories, path resolution and extended attributes.

use core::ops::ControlFlow;

use zerocopy::FromBytes;

use super::check_tail;
use super::fs::Fs;
use super::inode::Inode;
use super::raw::{RawDirEntry, RawXattr};
use super::scratch::Scratch;
use super::{err, DIRENTS_PER_BLOCK, TAIL_AT, TAIL_DIR, TAIL_XATTR, XATTRS_PER_BLOCK};
use crate::block::{Block, BlockDevice, BLOCK_SIZE_U64};
use crate::error::{Error, ErrorKind, Result};

/// Most components a path may have.
pub const MAX_PATH_COMPONENTS: usize = 4096;

/// Directory entry file types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FileType {
    /// 1.
    Regular,
    /// 2.
    Directory,
    /// 7.
    Symlink,
}

impl FileType {
    /// From the on-disk code.
    pub fn from_code(c: u8) -> Option<FileType> {
        match c {
            1 => Some(FileType::Regular),
            2 => Some(FileType::Directory),
            7 => Some(FileType::Symlink),
            _ => None,
        }
    }

    /// The on-disk code.
    pub fn code(self) -> u8 {
        match self {
            FileType::Regular => 1,
            FileType::Directory => 2,
            FileType::Symlink => 7,
        }
    }
}

/// One validated directory entry, borrowing its name from the directory block.
#[derive(Clone, Copy, Debug)]
pub struct DirEntry<'b> {
    /// Target inode.
    pub inode: u64,
    /// Type.
    pub file_type: FileType,
    name: &'b [u8],
}

impl<'b> DirEntry<'b> {
    /// The name bytes.
    pub fn name(&self) -> &'b [u8] {
        self.name
    }
}

/// One extended attribute, borrowing its key and value from the xattr block.
#[derive(Clone, Copy, Debug)]
pub struct Xattr<'b> {
    key: &'b [u8],
    value: &'b [u8],
}

impl<'b> Xattr<'b> {
    /// The full key (`user.x`).
    pub fn key(&self) -> &'b [u8] {
        self.key
    }
    /// The value.
    pub fn value(&self) -> &'b [u8] {
        self.value
    }
}

/// The first nonzero byte, testing 16 bytes at a time (directory and xattr blocks are
/// mostly zero padding, and every byte of it is checked).
fn nonzero_at(bytes: &[u8]) -> Option<usize> {
    let mut chunks = bytes.chunks_exact(16);
    let mut base = 0usize;
    for c in &mut chunks {
        if u128::from_ne_bytes(c.try_into().unwrap_or([1; 16])) != 0 {
            return c
                .iter()
                .position(|b| *b != 0)
                .map(|i| base.saturating_add(i));
        }
        base = base.saturating_add(16);
    }
    chunks
        .remainder()
        .iter()
        .position(|b| *b != 0)
        .map(|i| base.saturating_add(i))
}

impl<D: BlockDevice, E: From<Error>> Fs<D, E> {
    /// Parses directory block `lba` (in `block`), calling `f` with each entry in use and
    /// its byte offset in the block. A block whose tail or padding is wrong is an error;
    /// an entry that breaks a rule of its own is skipped, so it hides none of the others
    /// (the checker reports it, docs/cetrafs.md section 13).
    pub(crate) fn dir_block(
        &self,
        block: &Block,
        lba: u64,
        f: &mut impl FnMut(&DirEntry, usize) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, E> {
        Self::dir_block_frame(block, lba)?;
        for k in 0..DIRENTS_PER_BLOCK {
            let off = k.saturating_mul(266);
            if let Ok(Some(e)) = self.dir_entry_at(block, lba, off) {
                if f(&e, off).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The rules of a directory block outside its entries: the tail (magic and crc) and
    /// the zero padding before it.
    pub(crate) fn dir_block_frame(block: &Block, lba: u64) -> Result<(), E> {
        check_tail::<E>(
            block,
            lba,
            TAIL_DIR,
            ("dir_block.tail.magic", "dir_block.tail.crc"),
        )?;
        let used = DIRENTS_PER_BLOCK.saturating_mul(266);
        if let Some(i) = nonzero_at(block.get(used..TAIL_AT).unwrap_or(&[])) {
            return Err(err(
                ErrorKind::NonZero { value: 1 },
                "dir_block.padding",
                lba,
                used.saturating_add(i),
            ));
        }
        Ok(())
    }

    /// The entry at byte `off` of directory block `lba`, validated on its own (section 10's
    /// entry rules); `None` for an empty slot. Repair salvages a block entry by entry.
    pub fn dir_entry_at<'b>(
        &self,
        block: &'b Block,
        lba: u64,
        off: usize,
    ) -> Result<Option<DirEntry<'b>>, E> {
        let bytes = block.get(off..off.saturating_add(266)).unwrap_or(&[]);
        let raw = RawDirEntry::ref_from_bytes(bytes)
            .map_err(|_| err::<E>(ErrorKind::Invalid, "dirent", lba, off))?;
        let ino = raw.inode.get();
        if ino == 0 {
            if let Some(i) = nonzero_at(bytes) {
                return Err(err(
                    ErrorKind::NonZero { value: 1 },
                    "dirent (empty slot)",
                    lba,
                    off.saturating_add(i),
                ));
            }
            return Ok(None);
        }
        if ino >= self.superblock().inode_count() {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: ino,
                    max: self.superblock().inode_count().saturating_sub(1),
                },
                "dirent.inode",
                lba,
                off,
            ));
        }
        let len = raw.name_len.get();
        let name_len = u8::try_from(len).ok().filter(|l| *l >= 1).ok_or(err::<E>(
            ErrorKind::OutOfRange {
                value: len.into(),
                max: 255,
            },
            "dirent.name_len",
            lba,
            off.saturating_add(8),
        ))?;
        let file_type = FileType::from_code(raw.file_type).ok_or(err::<E>(
            ErrorKind::OutOfRange {
                value: raw.file_type.into(),
                max: 7,
            },
            "dirent.file_type",
            lba,
            off.saturating_add(10),
        ))?;
        let (name, rest) = raw.name.split_at(usize::from(name_len).min(255));
        if let Some(i) = nonzero_at(rest) {
            return Err(err(
                ErrorKind::NonZero { value: 1 },
                "dirent.name (padding)",
                lba,
                off.saturating_add(11)
                    .saturating_add(name.len())
                    .saturating_add(i),
            ));
        }
        if name.iter().any(|b| *b == b'/' || *b == 0) || name == b"." || name == b".." {
            return Err(err(
                ErrorKind::Invalid,
                "dirent.name",
                lba,
                off.saturating_add(11),
            ));
        }
        Ok(Some(DirEntry {
            inode: ino,
            file_type,
            name,
        }))
    }

    /// Calls `f` with every entry of directory `dir` (block order follows the unordered
    /// extent array; entries within a block in slot order). `.` and `..` are not stored.
    pub fn read_dir(
        &self,
        dir: &Inode,
        scratch: &mut impl Scratch,
        mut f: impl FnMut(&DirEntry) -> ControlFlow<()>,
    ) -> Result<(), E> {
        if !dir.is_dir() {
            return Err(err(
                ErrorKind::Invalid,
                "inode.mode (not a directory)",
                dir.lba,
                16,
            ));
        }
        let blocks = dir.size().div_ceil(BLOCK_SIZE_U64);
        // Block budget: a walk never needs more block reads than the device has blocks,
        // however its (unordered, possibly overlapping) extents are arranged.
        let budget = self.superblock().total_blocks();
        let mut reads: u64 = 0;
        let _stopped_early = self.for_each_extent_with(dir, scratch, |e, data| {
            if e.uninit {
                return Err(err(
                    ErrorKind::Invalid,
                    "extent.len (uninitialized directory block)",
                    dir.lba,
                    104,
                ));
            }
            for b in 0..u64::from(e.len) {
                if u64::from(e.logical).saturating_add(b) >= blocks {
                    break;
                }
                let lba = e.physical.saturating_add(b);
                reads = reads.saturating_add(1);
                if reads > budget {
                    return Err(err(
                        ErrorKind::Exhausted { budget },
                        "directory walk block budget",
                        dir.lba,
                        104,
                    ));
                }
                self.load(lba, data)?;
                if self.dir_block(data, lba, &mut |e, _| f(e))?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(())
    }

    /// The inode `name` names in directory `dir`, if any.
    pub fn lookup(
        &self,
        dir: &Inode,
        name: &[u8],
        scratch: &mut impl Scratch,
    ) -> Result<Option<u64>, E> {
        let mut found = None;
        self.read_dir(dir, scratch, |e| {
            if e.name() == name {
                found = Some(e.inode);
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(found)
    }

    /// Resolves an absolute or root-relative path (`/a/b`, `a/b`); `.` and `..` are
    /// handled through the inode's `parent`. Symlinks are not followed.
    pub fn resolve(&self, path: &[u8], scratch: &mut impl Scratch) -> Result<Inode, E> {
        let root = self.superblock().root_inode();
        let mut cur = self.inode(root, scratch.block())?;
        for (n, comp) in path
            .split(|b| *b == b'/')
            .filter(|c| !c.is_empty())
            .enumerate()
        {
            if n >= MAX_PATH_COMPONENTS {
                return Err(err(
                    ErrorKind::OutOfRange {
                        value: crate::arith::u64_of(n),
                        max: crate::arith::u64_of(MAX_PATH_COMPONENTS),
                    },
                    "path components",
                    0,
                    0,
                ));
            }
            match comp {
                b"." => {}
                b".." => {
                    let parent = cur.raw.parent.get();
                    cur = self.inode(parent, scratch.block())?;
                }
                name => {
                    if !cur.is_dir() {
                        return Err(err(
                            ErrorKind::NotFound,
                            "path (not a directory)",
                            cur.lba,
                            16,
                        ));
                    }
                    let ino = self.lookup(&cur, name, scratch)?.ok_or(err::<E>(
                        ErrorKind::NotFound,
                        "path",
                        cur.lba,
                        0,
                    ))?;
                    cur = self.inode(ino, scratch.block())?;
                }
            }
        }
        Ok(cur)
    }

    /// Calls `f` with every extended attribute of `inode`.
    pub fn xattrs(
        &self,
        inode: &Inode,
        scratch: &mut impl Scratch,
        mut f: impl FnMut(&Xattr) -> ControlFlow<()>,
    ) -> Result<(), E> {
        let lba = inode.raw.xattr_block.get();
        if lba == 0 {
            return Ok(());
        }
        self.check_data_range(lba, 1, "inode.xattr_block", inode.lba, 96)?;
        let block = scratch.block();
        self.load(lba, block)?;
        let block = &*block;
        check_tail::<E>(
            block,
            lba,
            TAIL_XATTR,
            ("xattr_block.tail.magic", "xattr_block.tail.crc"),
        )?;
        let used = XATTRS_PER_BLOCK.saturating_mul(322);
        if let Some(i) = nonzero_at(block.get(used..TAIL_AT).unwrap_or(&[])) {
            return Err(err(
                ErrorKind::NonZero { value: 1 },
                "xattr_block.padding",
                lba,
                used.saturating_add(i),
            ));
        }
        for k in 0..XATTRS_PER_BLOCK {
            let off = k.saturating_mul(322);
            let bytes = block.get(off..off.saturating_add(322)).unwrap_or(&[]);
            let raw = RawXattr::ref_from_bytes(bytes)
                .map_err(|_| err::<E>(ErrorKind::Invalid, "xattr", lba, off))?;
            if raw.key[0] == 0 {
                if let Some(i) = nonzero_at(bytes) {
                    return Err(err(
                        ErrorKind::NonZero { value: 1 },
                        "xattr (free slot)",
                        lba,
                        off.saturating_add(i),
                    ));
                }
                continue;
            }
            let key_len = raw.key.iter().position(|b| *b == 0).unwrap_or(64);
            let (key, rest) = raw.key.split_at(key_len);
            if nonzero_at(rest).is_some() || !key.contains(&b'.') {
                return Err(err(ErrorKind::Invalid, "xattr.key", lba, off));
            }
            let vlen = raw.value_len.get();
            if vlen > 256 {
                return Err(err(
                    ErrorKind::OutOfRange {
                        value: vlen.into(),
                        max: 256,
                    },
                    "xattr.value_len",
                    lba,
                    off.saturating_add(64),
                ));
            }
            if let Some(i) = nonzero_at(raw.value.get(usize::from(vlen)..).unwrap_or(&[])) {
                return Err(err(
                    ErrorKind::NonZero { value: 1 },
                    "xattr.value (padding)",
                    lba,
                    off.saturating_add(66)
                        .saturating_add(usize::from(vlen))
                        .saturating_add(i),
                ));
            }
            let x = Xattr {
                key,
                value: raw.value.get(..usize::from(vlen)).unwrap_or(&[]),
            };
            if f(&x).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// Copies the value of xattr `key` into `out`; returns its length, or `NotFound`.
    /// A value longer than `out` is a `BufferTooSmall` error.
    pub fn xattr(
        &self,
        inode: &Inode,
        key: &[u8],
        out: &mut [u8],
        scratch: &mut impl Scratch,
    ) -> Result<usize, E> {
        let mut result = Err(err(ErrorKind::NotFound, "xattr.key", inode.lba, 96));
        self.xattrs(inode, scratch, |x| {
            if x.key() != key {
                return ControlFlow::Continue(());
            }
            let v = x.value();
            result = match out.get_mut(..v.len()) {
                Some(dst) => Ok(crate::arith::copy_prefix(dst, v)),
                None => Err(err(
                    ErrorKind::BufferTooSmall {
                        needed: crate::arith::u64_of(v.len()),
                        available: crate::arith::u64_of(out.len()),
                    },
                    "xattr value buffer",
                    inode.lba,
                    96,
                )),
            };
            ControlFlow::Break(())
        })?;
        result
    }
}
