//! The operations: each one or more transactions that are each consistent, failing
//! with the Unix error the system call would give, writing nothing when it fails.

use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;
use tet_core::cetrafs::raw::{RawInode, RawXattr};
use tet_core::cetrafs::{
    Inode, EXTENT_MAGIC, INLINE_SLOTS, INODE_MAGIC, TAIL_AT, TAIL_XATTR, XATTRS_PER_BLOCK,
};
use tet_core::checksum::crc32c_skipping;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::dir::{check_name, Found};
use super::tree::{cut, initialize, lookup, Ext};
use super::txn::Txn;
use super::{Errno, WriteError, Writer};

/// File type codes of directory entries (section 10).
const FT_REG: u8 = 1;
const FT_DIR: u8 = 2;
const FT_LNK: u8 = 7;
/// The largest file: 2^32 blocks.
const MAX_SIZE: u64 = 1 << 44;
/// Blocks a write puts in one transaction at most (16 MiB; fewer when the blocks it
/// changes in place do not fit one journal).
const WRITE_CHUNK: u64 = 4096;
const XATTR_ENTRY: usize = 322;
/// Writes up to this size join a batch (small files copied in share commits, and a
/// large file written 1 MiB at a time, the mount's `max_write`, commits once per 16 MiB
/// of new data, `BATCH_DATA`, instead of once a write).
pub const BATCH_WRITE: usize = 1 << 20;
/// Where a file unlinked while open waits for its last close.
const LOST_FOUND: &[u8] = b"lost+found";

/// The name a file unlinked while open keeps in `/lost+found`.
fn kept_name(ino: u64) -> Vec<u8> {
    alloc::format!("#{ino}").into_bytes()
}

/// What `set_attr` changes (`None`: unchanged). `ctime` is always the writer's time.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// Permission bits (0o7777); the file type is kept.
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Access time, ns since 1970.
    pub atime_ns: Option<u64>,
    /// Modification time, ns since 1970.
    pub mtime_ns: Option<u64>,
}

fn file_type_of(mode: u32) -> u8 {
    match mode & S_IFMT {
        S_IFDIR => FT_DIR,
        S_IFLNK => FT_LNK,
        _ => FT_REG,
    }
}

fn is_dir(i: &RawInode) -> bool {
    i.mode.get() & S_IFMT == S_IFDIR
}

impl<D: BlockDeviceMut> Writer<D> {
    fn inode_lba(&self, ino: u64) -> u64 {
        self.fs
            .superblock()
            .raw()
            .inode_table_start
            .get()
            .saturating_add(ino)
    }

    /// Inode `ino` as the transaction sees it, validated.
    pub(super) fn inode(&self, t: &Txn, ino: u64) -> Result<RawInode, WriteError> {
        if ino == 0 || ino >= self.fs.superblock().inode_count() {
            return Err(Errno::EIO.into());
        }
        let lba = self.inode_lba(ino);
        let b = self.read(t, lba)?;
        Ok(*Inode::parse(&b, lba, ino)?.raw())
    }

    pub(super) fn put_inode(&self, t: &mut Txn, ino: u64, mut raw: RawInode) {
        raw.checksum.set(crc32c_skipping(raw.as_bytes(), 248));
        let mut b: Block = [0; BLOCK_SIZE];
        if let Some(d) = b.get_mut(..256) {
            d.copy_from_slice(raw.as_bytes());
        }
        Self::put(t, self.inode_lba(ino), b);
    }

    fn new_inode(
        &self,
        ino: u64,
        mode: u32,
        uid: u32,
        gid: u32,
        nlink: u32,
        parent: u64,
    ) -> RawInode {
        let mut r = RawInode::new_zeroed();
        r.magic = INODE_MAGIC;
        r.ino.set(ino);
        r.mode.set(mode);
        r.uid.set(uid);
        r.gid.set(gid);
        r.nlink.set(nlink);
        for t in [
            &mut r.atime_ns,
            &mut r.mtime_ns,
            &mut r.ctime_ns,
            &mut r.crtime_ns,
        ] {
            t.set(self.now_ns);
        }
        r.parent.set(parent);
        r.extent_header.magic.set(EXTENT_MAGIC);
        r.extent_header.max.set(INLINE_SLOTS);
        r
    }

    /// The inode of `ino`, as it reads now (every transaction checkpointed).
    pub fn stat(&self, ino: u64) -> Result<RawInode, WriteError> {
        self.inode(&self.pending, ino)
    }

    /// The inode `name` names in directory `dir`.
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<u64, WriteError> {
        let t = &self.pending;
        let d = self.inode(t, dir)?;
        if !is_dir(&d) {
            return Err(Errno::ENOTDIR.into());
        }
        Ok(self.find(t, &d, name)?.ok_or(Errno::ENOENT)?.ino)
    }

    /// The entries of directory `dir`: (name, inode, file type code).
    pub fn read_dir(&self, dir: u64) -> Result<Vec<(Vec<u8>, u64, u8)>, WriteError> {
        let t = &self.pending;
        let d = self.inode(t, dir)?;
        if !is_dir(&d) {
            return Err(Errno::ENOTDIR.into());
        }
        Ok(self
            .entries(t, &d)?
            .into_iter()
            .map(|(f, n)| (n, f.ino, f.file_type))
            .collect())
    }

    /// The inode a path names, from the root (`/` separated, `.` and `..` understood,
    /// symlinks not followed: a path through one is `ENOTDIR`).
    pub fn resolve(&self, path: &[u8]) -> Result<u64, WriteError> {
        let t = &self.pending;
        let mut cur = self.fs.superblock().root_inode();
        for c in path.split(|b| *b == b'/') {
            if c.is_empty() || c == b"." {
                continue;
            }
            let d = self.inode(t, cur)?;
            if !is_dir(&d) {
                return Err(Errno::ENOTDIR.into());
            }
            if c == b".." {
                cur = d.parent.get();
                continue;
            }
            if c.len() > 255 {
                return Err(Errno::ENAMETOOLONG.into());
            }
            cur = self.find(t, &d, c)?.ok_or(Errno::ENOENT)?.ino;
        }
        Ok(cur)
    }

    /// The directory holding a path's last component, and that component (`EINVAL`
    /// for the root, `.` or `..`).
    pub fn resolve_parent(&self, path: &[u8]) -> Result<(u64, Vec<u8>), WriteError> {
        let trimmed = path.strip_suffix(b"/").unwrap_or(path);
        let (dir, name) = match trimmed.iter().rposition(|b| *b == b'/') {
            Some(k) => (
                trimmed.get(..k).unwrap_or(&[]),
                trimmed.get(k.saturating_add(1)..).unwrap_or(&[]),
            ),
            None => (&b""[..], trimmed),
        };
        check_name(name)?;
        let d = self.resolve(dir)?;
        let raw = self.stat(d)?;
        if !is_dir(&raw) {
            return Err(Errno::ENOTDIR.into());
        }
        Ok((d, name.to_vec()))
    }

    /// A new entry's checks: `dir` a directory, the name valid and free.
    fn new_entry_checks(&self, t: &Txn, dir: u64, name: &[u8]) -> Result<RawInode, WriteError> {
        check_name(name)?;
        let d = self.inode(t, dir)?;
        if !is_dir(&d) {
            return Err(Errno::ENOTDIR.into());
        }
        if self.find(t, &d, name)?.is_some() {
            return Err(Errno::EEXIST.into());
        }
        Ok(d)
    }

    fn touch_dir(&self, d: &mut RawInode) {
        d.mtime_ns.set(self.now_ns);
        d.ctime_ns.set(self.now_ns);
    }

    /// Creates an empty regular file `name` in `dir`.
    pub fn create(
        &mut self,
        dir: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<u64, WriteError> {
        self.run(|w, t| w.make(t, dir, name, S_IFREG | (mode & 0o7777), uid, gid, None))
    }

    /// Creates regular file `name` in `dir` holding `data`, with the times and owner of
    /// `attr` (mode from `attr.mode`, default 0o644), all in one transaction: a file
    /// either exists whole or not at all (`ENOSPC` when it does not fit one
    /// transaction: create and write it in pieces instead). Zero blocks of `data`
    /// become holes.
    pub fn create_file(
        &mut self,
        dir: u64,
        name: &[u8],
        attr: &SetAttr,
        data: &[u8],
    ) -> Result<u64, WriteError> {
        let mode = S_IFREG | (attr.mode.unwrap_or(0o644) & 0o7777);
        let (uid, gid) = (attr.uid.unwrap_or(0), attr.gid.unwrap_or(0));
        self.run(|w, t| {
            let ino = w.make(t, dir, name, mode, uid, gid, None)?;
            let len = tet_core::arith::u64_of(data.len());
            let mut at = 0usize;
            while at < data.len() {
                let end = at.saturating_add(BLOCK_SIZE).min(data.len());
                let piece = data.get(at..end).unwrap_or(&[]);
                // Runs of nonzero blocks are written together.
                if piece.iter().any(|b| *b != 0) {
                    let mut e = end;
                    while e < data.len() {
                        let next = e.saturating_add(BLOCK_SIZE).min(data.len());
                        if data.get(e..next).is_none_or(|p| p.iter().all(|b| *b == 0)) {
                            break;
                        }
                        e = next;
                    }
                    let off = tet_core::arith::u64_of(at);
                    w.write_piece(t, ino, off, data.get(at..e).unwrap_or(&[]))?;
                    at = e;
                } else {
                    at = end;
                }
            }
            let mut r = w.inode(t, ino)?;
            r.size.set(len);
            if let Some(x) = attr.atime_ns {
                r.atime_ns.set(x);
            }
            if let Some(x) = attr.mtime_ns {
                r.mtime_ns.set(x);
            }
            w.put_inode(t, ino, r);
            Ok(ino)
        })
    }

    /// Makes directory `name` in `dir`.
    pub fn mkdir(
        &mut self,
        dir: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<u64, WriteError> {
        self.run(|w, t| w.make(t, dir, name, S_IFDIR | (mode & 0o7777), uid, gid, None))
    }

    /// Makes symlink `name` in `dir` pointing at `target`.
    pub fn symlink(
        &mut self,
        dir: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<u64, WriteError> {
        if target.is_empty() {
            return Err(Errno::ENOENT.into());
        }
        if target.len() >= BLOCK_SIZE || target.contains(&0) {
            return Err(Errno::ENAMETOOLONG.into());
        }
        self.run(|w, t| w.make(t, dir, name, S_IFLNK | 0o777, uid, gid, Some(target)))
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one helper behind three operations"
    )]
    fn make(
        &mut self,
        t: &mut Txn,
        dir: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        target: Option<&[u8]>,
    ) -> Result<u64, WriteError> {
        let mut d = self.new_entry_checks(t, dir, name)?;
        let dir_kind = mode & S_IFMT == S_IFDIR;
        if dir_kind && d.nlink.get() == u32::MAX {
            return Err(Errno::EMLINK.into());
        }
        let ino = self.alloc_inode(t)?;
        let mut r = if dir_kind {
            self.new_inode(ino, mode, uid, gid, 2, dir)
        } else {
            self.new_inode(ino, mode, uid, gid, 1, 0)
        };
        if let Some(target) = target {
            let (p, _) = self.alloc_run(t, None, 1)?;
            let mut b: Block = [0; BLOCK_SIZE];
            if let Some(x) = b.get_mut(..target.len()) {
                x.copy_from_slice(target);
            }
            Self::put_data(t, p, b);
            let m = super::tree::Map::fresh(alloc::vec![Ext {
                logical: 0,
                len: 1,
                physical: p,
                uninit: false
            }]);
            self.store_map(t, &mut r, m, 2)?;
            r.size.set(tet_core::arith::u64_of(target.len()));
            r.blocks.set(1);
        }
        t.fresh.insert(self.inode_lba(ino));
        self.put_inode(t, ino, r);
        self.add_entry(t, &mut d, name, ino, file_type_of(mode))?;
        if dir_kind {
            d.nlink.set(d.nlink.get().saturating_add(1));
        }
        self.touch_dir(&mut d);
        self.put_inode(t, dir, d);
        Ok(ino)
    }

    /// Names `ino` also as `name` in `dir` (`EPERM` for a directory).
    pub fn link(&mut self, ino: u64, dir: u64, name: &[u8]) -> Result<(), WriteError> {
        self.run(|w, t| {
            let mut d = w.new_entry_checks(t, dir, name)?;
            let mut r = w.inode(t, ino)?;
            if is_dir(&r) {
                return Err(Errno::EPERM.into());
            }
            r.nlink
                .set(r.nlink.get().checked_add(1).ok_or(Errno::EMLINK)?);
            r.ctime_ns.set(w.now_ns);
            w.put_inode(t, ino, r);
            w.add_entry(t, &mut d, name, ino, file_type_of(r.mode.get()))?;
            w.touch_dir(&mut d);
            w.put_inode(t, dir, d);
            Ok(())
        })
    }

    /// Frees a file's data, tree and xattr blocks and its inode.
    fn free_file(&mut self, t: &mut Txn, ino: u64, r: &RawInode) -> Result<(), WriteError> {
        let m = self.map_of(t, r)?;
        for e in &m.exts {
            self.free_run(t, e.physical, e.len)?;
        }
        for b in &m.tree {
            self.free_run(t, *b, 1)?;
        }
        if r.xattr_block.get() != 0 {
            self.free_run(t, r.xattr_block.get(), 1)?;
        }
        self.free_inode(t, ino)
    }

    /// One name of a non-directory gone: its link count down, the file freed at 0.
    fn drop_link(&mut self, t: &mut Txn, ino: u64) -> Result<(), WriteError> {
        let mut r = self.inode(t, ino)?;
        let n = r.nlink.get().saturating_sub(1);
        if n == 0 {
            self.free_file(t, ino, &r)
        } else {
            r.nlink.set(n);
            r.ctime_ns.set(self.now_ns);
            self.put_inode(t, ino, r);
            Ok(())
        }
    }

    /// Removes the name `name` from `dir` (not a directory: `EISDIR`).
    pub fn unlink(&mut self, dir: u64, name: &[u8]) -> Result<(), WriteError> {
        self.run(|w, t| {
            let mut d = w.inode(t, dir)?;
            if !is_dir(&d) {
                return Err(Errno::ENOTDIR.into());
            }
            let f = w.find(t, &d, name)?.ok_or(Errno::ENOENT)?;
            let r = w.inode(t, f.ino)?;
            if is_dir(&r) {
                return Err(Errno::EISDIR.into());
            }
            w.remove_entry(t, &f)?;
            w.drop_link(t, f.ino)?;
            w.touch_dir(&mut d);
            w.put_inode(t, dir, d);
            Ok(())
        })
    }

    /// `unlink` of a file the caller holds open (the mount, section 15): when `name`
    /// is the file's last name, the same transaction names it `#INO` in `/lost+found`
    /// (made if absent) instead of freeing it, and returns its inode for
    /// [`Writer::release`] at the last close; otherwise as `unlink` (`None`).
    pub fn unlink_open(&mut self, dir: u64, name: &[u8]) -> Result<Option<u64>, WriteError> {
        self.run(|w, t| {
            let mut d = w.inode(t, dir)?;
            if !is_dir(&d) {
                return Err(Errno::ENOTDIR.into());
            }
            let f = w.find(t, &d, name)?.ok_or(Errno::ENOENT)?;
            let r = w.inode(t, f.ino)?;
            if is_dir(&r) {
                return Err(Errno::EISDIR.into());
            }
            w.remove_entry(t, &f)?;
            w.touch_dir(&mut d);
            w.put_inode(t, dir, d);
            if r.nlink.get() > 1 {
                w.drop_link(t, f.ino)?;
                return Ok(None);
            }
            let root = w.fs.superblock().root_inode();
            let rd = w.inode(t, root)?;
            let lf = match w.find(t, &rd, LOST_FOUND)? {
                Some(x) if x.file_type == FT_DIR => x.ino,
                Some(_) => return Err(Errno::EEXIST.into()),
                None => w.make(t, root, LOST_FOUND, S_IFDIR | 0o700, 0, 0, None)?,
            };
            let mut l = w.inode(t, lf)?;
            w.add_entry(
                t,
                &mut l,
                &kept_name(f.ino),
                f.ino,
                file_type_of(r.mode.get()),
            )?;
            w.touch_dir(&mut l);
            w.put_inode(t, lf, l);
            Ok(Some(f.ino))
        })
    }

    /// The last close of a file [`Writer::unlink_open`] kept: its `/lost+found` entry
    /// removed and the file freed, in one transaction. `ENOENT` when it is not there
    /// (a user removed it).
    pub fn release(&mut self, ino: u64) -> Result<(), WriteError> {
        let root = self.fs.superblock().root_inode();
        let lf = self.lookup(root, LOST_FOUND)?;
        self.unlink(lf, &kept_name(ino))
    }

    /// Removes the empty directory `name` from `dir`.
    pub fn rmdir(&mut self, dir: u64, name: &[u8]) -> Result<(), WriteError> {
        self.run(|w, t| {
            let d = w.inode(t, dir)?;
            if !is_dir(&d) {
                return Err(Errno::ENOTDIR.into());
            }
            let f = w.find(t, &d, name)?.ok_or(Errno::ENOENT)?;
            let r = w.inode(t, f.ino)?;
            if !is_dir(&r) {
                return Err(Errno::ENOTDIR.into());
            }
            if !w.entries(t, &r)?.is_empty() {
                return Err(Errno::ENOTEMPTY.into());
            }
            w.remove_entry(t, &f)?;
            w.free_file(t, f.ino, &r)?;
            let mut d = w.inode(t, dir)?;
            d.nlink.set(d.nlink.get().saturating_sub(1).max(2));
            w.touch_dir(&mut d);
            w.put_inode(t, dir, d);
            Ok(())
        })
    }

    /// Renames `sname` in `sdir` to `dname` in `ddir`, replacing what `dname` names
    /// (a file by a file, an empty directory by a directory), as rename(2).
    pub fn rename(
        &mut self,
        sdir: u64,
        sname: &[u8],
        ddir: u64,
        dname: &[u8],
    ) -> Result<(), WriteError> {
        self.run(|w, t| w.rename_in(t, sdir, sname, ddir, dname))
    }

    fn rename_in(
        &mut self,
        t: &mut Txn,
        sdir: u64,
        sname: &[u8],
        ddir: u64,
        dname: &[u8],
    ) -> Result<(), WriteError> {
        check_name(dname)?;
        let sd = self.inode(t, sdir)?;
        let dd = self.inode(t, ddir)?;
        if !is_dir(&sd) || !is_dir(&dd) {
            return Err(Errno::ENOTDIR.into());
        }
        let src: Found = self.find(t, &sd, sname)?.ok_or(Errno::ENOENT)?;
        let s = self.inode(t, src.ino)?;
        let moving_dir = is_dir(&s);
        if moving_dir && sdir != ddir {
            // Not into itself or below it.
            let mut cur = ddir;
            for _ in 0..tet_core::cetrafs::MAX_PATH_COMPONENTS {
                if cur == src.ino {
                    return Err(Errno::EINVAL.into());
                }
                let c = self.inode(t, cur)?;
                let p = c.parent.get();
                if p == cur {
                    break;
                }
                cur = p;
            }
        }
        let dst = self.find(t, &dd, dname)?;
        if let Some(dst) = dst {
            if dst.ino == src.ino {
                return Ok(());
            }
            let o = self.inode(t, dst.ino)?;
            match (moving_dir, is_dir(&o)) {
                (true, false) => return Err(Errno::ENOTDIR.into()),
                (false, true) => return Err(Errno::EISDIR.into()),
                (true, true) if !self.entries(t, &o)?.is_empty() => {
                    return Err(Errno::ENOTEMPTY.into())
                }
                _ => {}
            }
            self.retarget_entry(t, &dst, src.ino, file_type_of(s.mode.get()))?;
            if is_dir(&o) {
                self.free_file(t, dst.ino, &o)?;
                let mut d = self.inode(t, ddir)?;
                d.nlink.set(d.nlink.get().saturating_sub(1).max(2));
                self.put_inode(t, ddir, d);
            } else {
                self.drop_link(t, dst.ino)?;
            }
        } else {
            let mut d = self.inode(t, ddir)?;
            self.add_entry(t, &mut d, dname, src.ino, file_type_of(s.mode.get()))?;
            self.put_inode(t, ddir, d);
        }
        self.remove_entry(t, &src)?;
        let mut s = self.inode(t, src.ino)?;
        s.ctime_ns.set(self.now_ns);
        if moving_dir && sdir != ddir {
            s.parent.set(ddir);
            let mut a = self.inode(t, sdir)?;
            a.nlink.set(a.nlink.get().saturating_sub(1).max(2));
            self.put_inode(t, sdir, a);
            let mut b = self.inode(t, ddir)?;
            b.nlink
                .set(b.nlink.get().checked_add(1).ok_or(Errno::EMLINK)?);
            self.put_inode(t, ddir, b);
        }
        self.put_inode(t, src.ino, s);
        for d in [sdir, ddir] {
            let mut x = self.inode(t, d)?;
            self.touch_dir(&mut x);
            self.put_inode(t, d, x);
        }
        Ok(())
    }

    /// Writes `data` at byte `offset` of file `ino`, a transaction per piece that fits
    /// one journal: new blocks are written first, then the transaction mapping them;
    /// blocks already mapped change through the journal.
    ///
    /// In batch mode a write of at most [`BATCH_WRITE`] bytes joins the pending
    /// transaction instead when it fits one journal (whole or absent after a crash,
    /// like every batched operation; [`Writer::sync`] makes it durable).
    pub fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<(), WriteError> {
        let end = offset
            .checked_add(tet_core::arith::u64_of(data.len()))
            .ok_or(Errno::EFBIG)?;
        if end > MAX_SIZE {
            return Err(Errno::EFBIG.into());
        }
        if self.batch && !data.is_empty() && data.len() <= BATCH_WRITE {
            match self.run(|w, t| w.write_piece(t, ino, offset, data)) {
                // Too many blocks changed in place for one journal: in pieces below.
                Err(e) if e.errno() == Errno::ENOSPC => {}
                r => return r,
            }
        }
        self.sync()?;
        let mut pos = offset;
        let mut chunk = WRITE_CHUNK.saturating_mul(BLOCK_SIZE_U64);
        while pos < end {
            // A piece ends on a block boundary.
            let piece_end = (pos / BLOCK_SIZE_U64)
                .saturating_add(chunk / BLOCK_SIZE_U64)
                .saturating_mul(BLOCK_SIZE_U64)
                .min(end);
            let from = usize::try_from(pos.saturating_sub(offset)).map_err(|_| Errno::EFBIG)?;
            let to = usize::try_from(piece_end.saturating_sub(offset)).map_err(|_| Errno::EFBIG)?;
            let bytes = data.get(from..to).ok_or(Errno::EINVAL)?;
            let mut t = Txn::default();
            if self.left {
                return Err(Errno::EROFS.into());
            }
            self.write_piece(&mut t, ino, pos, bytes)?;
            if !self.fits(&t) {
                if chunk <= BLOCK_SIZE_U64 {
                    return Err(Errno::ENOSPC.into());
                }
                chunk = (chunk / 2).max(BLOCK_SIZE_U64);
                continue;
            }
            self.commit(t)?;
            pos = piece_end;
        }
        if data.is_empty() {
            self.run(|w, t| {
                let r = w.inode(t, ino)?;
                if is_dir(&r) {
                    return Err(Errno::EISDIR.into());
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    fn write_piece(
        &mut self,
        t: &mut Txn,
        ino: u64,
        off: u64,
        data: &[u8],
    ) -> Result<(), WriteError> {
        let mut r = self.inode(t, ino)?;
        if is_dir(&r) {
            return Err(Errno::EISDIR.into());
        }
        let mut m = self.map_of(t, &r)?;
        let end = off.saturating_add(tet_core::arith::u64_of(data.len()));
        let first = off / BLOCK_SIZE_U64;
        let last = end.saturating_sub(1) / BLOCK_SIZE_U64;
        let patch = |b: &mut Block, l: u64| {
            let bstart = l.saturating_mul(BLOCK_SIZE_U64);
            let s = bstart.max(off);
            let e = bstart.saturating_add(BLOCK_SIZE_U64).min(end);
            let (bs, be) = (s.saturating_sub(bstart), e.saturating_sub(bstart));
            let (ds, de) = (s.saturating_sub(off), e.saturating_sub(off));
            if let (Some(dst), Some(src)) = (
                b.get_mut(usize::try_from(bs).unwrap_or(0)..usize::try_from(be).unwrap_or(0)),
                data.get(usize::try_from(ds).unwrap_or(0)..usize::try_from(de).unwrap_or(0)),
            ) {
                dst.copy_from_slice(src);
            }
        };
        let mut added = 0u64;
        let mut l = first;
        while l <= last {
            match lookup(&m.exts, l) {
                Some((p, false)) => {
                    let mut b = self.read(t, p)?;
                    patch(&mut b, l);
                    Self::put(t, p, b);
                    l = l.saturating_add(1);
                }
                Some((p, true)) => {
                    // A block of an uninitialized extent reads as zeros whatever it
                    // holds, until the commit marks it initialized: its new contents
                    // (zeros where the write does not reach) go straight to the
                    // device before that, as new data does (section 15).
                    let mut b: Block = [0; BLOCK_SIZE];
                    patch(&mut b, l);
                    Self::put_data(t, p, b);
                    initialize(&mut m.exts, l);
                    l = l.saturating_add(1);
                }
                None => {
                    let mut n = 0u64;
                    while l.saturating_add(n) <= last
                        && lookup(&m.exts, l.saturating_add(n)).is_none()
                    {
                        n = n.saturating_add(1);
                    }
                    let hint = l
                        .checked_sub(1)
                        .and_then(|p| lookup(&m.exts, p))
                        .map(|(p, _)| p.saturating_add(1))
                        .or_else(|| {
                            m.exts
                                .iter()
                                .max_by_key(|e| e.logical)
                                .map(|e| e.physical.saturating_add(e.len))
                        });
                    let (p, got) = self.alloc_run(t, hint, n)?;
                    for k in 0..got {
                        let mut b: Block = [0; BLOCK_SIZE];
                        patch(&mut b, l.saturating_add(k));
                        Self::put_data(t, p.saturating_add(k), b);
                    }
                    m.exts.push(Ext {
                        logical: l,
                        len: got,
                        physical: p,
                        uninit: false,
                    });
                    added = added.saturating_add(got);
                    l = l.saturating_add(got);
                }
            }
        }
        r.blocks.set(r.blocks.get().saturating_add(added));
        if end > r.size.get() {
            r.size.set(end);
        }
        r.mtime_ns.set(self.now_ns);
        r.ctime_ns.set(self.now_ns);
        self.store_map(t, &mut r, m, 2)?;
        self.put_inode(t, ino, r);
        Ok(())
    }

    /// Sets file `ino`'s size: blocks past it freed, the tail of its last block zeroed
    /// (so a later extension reads zeros), or holes added.
    pub fn truncate(&mut self, ino: u64, size: u64) -> Result<(), WriteError> {
        if size > MAX_SIZE {
            return Err(Errno::EFBIG.into());
        }
        self.run(|w, t| {
            let mut r = w.inode(t, ino)?;
            if is_dir(&r) {
                return Err(Errno::EISDIR.into());
            }
            let mut m = w.map_of(t, &r)?;
            let keep = size.div_ceil(BLOCK_SIZE_U64);
            let freed = cut(&mut m.exts, keep);
            let mut n = 0u64;
            for (p, len) in freed {
                w.free_run(t, p, len)?;
                n = n.saturating_add(len);
            }
            let tail = size % BLOCK_SIZE_U64;
            if tail != 0 && size < r.size.get() {
                if let Some((p, false)) = lookup(&m.exts, keep.saturating_sub(1)) {
                    let mut b = w.read(t, p)?;
                    if let Some(x) = b.get_mut(usize::try_from(tail).unwrap_or(BLOCK_SIZE)..) {
                        x.fill(0);
                    }
                    Self::put(t, p, b);
                }
            }
            r.blocks.set(r.blocks.get().saturating_sub(n));
            r.size.set(size);
            r.mtime_ns.set(w.now_ns);
            r.ctime_ns.set(w.now_ns);
            w.store_map(t, &mut r, m, 2)?;
            w.put_inode(t, ino, r);
            Ok(())
        })
    }

    /// chmod, chown and utimens in one.
    pub fn set_attr(&mut self, ino: u64, a: &SetAttr) -> Result<(), WriteError> {
        self.run(|w, t| {
            let mut r = w.inode(t, ino)?;
            if let Some(m) = a.mode {
                r.mode.set((r.mode.get() & S_IFMT) | (m & 0o7777));
            }
            if let Some(u) = a.uid {
                r.uid.set(u);
            }
            if let Some(g) = a.gid {
                r.gid.set(g);
            }
            if let Some(x) = a.atime_ns {
                r.atime_ns.set(x);
            }
            if let Some(x) = a.mtime_ns {
                r.mtime_ns.set(x);
            }
            r.ctime_ns.set(w.now_ns);
            w.put_inode(t, ino, r);
            Ok(())
        })
    }

    fn xattr_checks(&self, key: &[u8]) -> Result<(), Errno> {
        if key.len() > 64 {
            return Err(Errno::ENAMETOOLONG);
        }
        if key.is_empty() || !key.contains(&b'.') || key.contains(&0) {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// Sets extended attribute `key` of `ino` to `value`.
    pub fn set_xattr(&mut self, ino: u64, key: &[u8], value: &[u8]) -> Result<(), WriteError> {
        self.xattr_checks(key)?;
        if value.len() > 256 {
            return Err(Errno::E2BIG.into());
        }
        self.enable_xattrs()?;
        self.run(|w, t| {
            let mut r = w.inode(t, ino)?;
            let (lba, mut b) = match r.xattr_block.get() {
                0 => {
                    let (p, _) = w.alloc_run(t, None, 1)?;
                    t.fresh.insert(p);
                    r.xattr_block.set(p);
                    (p, [0u8; BLOCK_SIZE])
                }
                p => (p, w.read(t, p)?),
            };
            let mut e = RawXattr::new_zeroed();
            if let Some(d) = e.key.get_mut(..key.len()) {
                d.copy_from_slice(key);
            }
            e.value_len
                .set(u16::try_from(value.len()).map_err(|_| Errno::E2BIG)?);
            if let Some(d) = e.value.get_mut(..value.len()) {
                d.copy_from_slice(value);
            }
            let slot = xattr_slot(&b, key)
                .or_else(|| xattr_slot(&b, b""))
                .ok_or(Errno::ENOSPC)?;
            put_xattr(&mut b, slot, Some(&e));
            Self::put(t, lba, b);
            r.ctime_ns.set(w.now_ns);
            w.put_inode(t, ino, r);
            Ok(())
        })
    }

    /// Removes extended attribute `key` of `ino` (`ENODATA` when absent); the block
    /// is freed with its last attribute.
    pub fn remove_xattr(&mut self, ino: u64, key: &[u8]) -> Result<(), WriteError> {
        self.xattr_checks(key)?;
        self.run(|w, t| {
            let mut r = w.inode(t, ino)?;
            let lba = r.xattr_block.get();
            if lba == 0 {
                return Err(Errno::ENODATA.into());
            }
            let mut b = w.read(t, lba)?;
            let slot = xattr_slot(&b, key).ok_or(Errno::ENODATA)?;
            put_xattr(&mut b, slot, None);
            let empty = (0..XATTRS_PER_BLOCK)
                .all(|s| b.get(s.saturating_mul(XATTR_ENTRY)).is_none_or(|k| *k == 0));
            if empty {
                w.free_run(t, lba, 1)?;
                r.xattr_block.set(0);
            } else {
                Self::put(t, lba, b);
            }
            r.ctime_ns.set(w.now_ns);
            w.put_inode(t, ino, r);
            Ok(())
        })
    }
}

impl<D: BlockDeviceMut> Writer<D> {
    /// Sets `COMPAT_XATTR` before the first xattr block of an image without it: the
    /// superblock rewritten with `generation` advanced, primary then copies (section
    /// 3.1), before any transaction refers to an xattr block.
    fn enable_xattrs(&mut self) -> Result<(), WriteError> {
        if self.xattrs_enabled {
            return Ok(());
        }
        let mut b: Block = [0; BLOCK_SIZE];
        self.fs.device().read_block(0, &mut b)?;
        let mut raw =
            tet_core::cetrafs::raw::RawSuperblock::read_from_bytes(b.get(..424).unwrap_or(&[]))
                .map_err(|_| super::txn::changed("superblock", 0))?;
        if raw.feature_compat.get() & 1 == 0 {
            raw.feature_compat.set(raw.feature_compat.get() | 1);
            raw.generation.set(raw.generation.get().wrapping_add(1));
            raw.checksum.set(crc32c_skipping(
                raw.as_bytes(),
                tet_core::cetrafs::SB_CHECKSUM_AT,
            ));
            crate::cetrafs::copies::rewrite(self.fs.device(), &raw, &mut b)?;
        }
        self.xattrs_enabled = true;
        Ok(())
    }
}

/// The slot whose key is `key` (`b""`: a free slot).
fn xattr_slot(b: &Block, key: &[u8]) -> Option<usize> {
    (0..XATTRS_PER_BLOCK).find(|s| {
        let at = s.saturating_mul(XATTR_ENTRY);
        let k = b.get(at..at.saturating_add(64)).unwrap_or(&[]);
        let len = k.iter().position(|c| *c == 0).unwrap_or(k.len());
        k.get(..len) == Some(key)
    })
}

fn put_xattr(b: &mut Block, slot: usize, e: Option<&RawXattr>) {
    let at = slot.saturating_mul(XATTR_ENTRY);
    if let Some(d) = b.get_mut(at..at.saturating_add(XATTR_ENTRY)) {
        match e {
            Some(e) => d.copy_from_slice(e.as_bytes()),
            None => d.fill(0),
        }
    }
    if let Some(d) = b.get_mut(TAIL_AT..TAIL_AT + 4) {
        d.copy_from_slice(&TAIL_XATTR);
    }
    let crc = crc32c_skipping(b, TAIL_AT + 8);
    if let Some(d) = b.get_mut(TAIL_AT + 8..TAIL_AT + 16) {
        d.copy_from_slice(&crc.to_le_bytes());
    }
}

const _: () = assert!(core::mem::size_of::<RawXattr>() == XATTR_ENTRY);
const _: fn(&[u8]) -> Option<&RawXattr> = |b| RawXattr::ref_from_bytes(b).ok();
