//! The FUSE adapter: each kernel request translated into a read of the image
//! (`tet_alloc::cetrafs::view`, through the journal overlay when read-only) or an
//! operation of the library writer, and its error rendered as the errno the kernel
//! passes on. One lock around the state: requests run one at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use tet_alloc::cetrafs::view;
use tet_alloc::cetrafs::write::{SetAttr, WriteError, Writer};
use tet_core::block::{Block, BlockDevice, BlockDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::raw::RawInode;
use tet_core::cetrafs::{Buffers, Fs, OverlayDevice};

use crate::cetrafs::device::FileDevice;

/// How long the kernel may keep names and attributes: this process is the image's one
/// writer while it is mounted read-write, and a read-only mount refuses an image that
/// another node writes, so a second is safe and saves a lookup per path component.
const TTL: Duration = Duration::from_secs(1);
/// Directory entries one `readdir` reply can hold at most (a reply is one page).
const PAGE: usize = 256;
/// The largest write the kernel sends (one joins the writer's batch: `BATCH_WRITE`).
pub const MAX_WRITE: u32 = 1 << 20;

const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFREG: u32 = 0o100_000;
const XATTR_CREATE: i32 = 1;
const XATTR_REPLACE: i32 = 2;
const RENAME_NOREPLACE: u32 = 1;
const O_ACCMODE: i32 = 3;
const EOPNOTSUPP: i32 = 95;
/// POSIX ACLs travel as these xattrs; cetrafs has none (mode bits only).
const ACL_PREFIX: &[u8] = b"system.posix_acl_";
/// The access ACL: a minimal one (owner, group, other, as `cp -a` and `tar` write for
/// a file without ACLs) is its mode bits, and is taken as a chmod.
const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
const S_ISGID: u32 = 0o2000;

/// The read-only mount's device: the image file, with the committed slots of dirty
/// journals read in their place (as `ls` and `cat` see the image).
pub type OverlayDev = OverlayDevice<'static, 'static, &'static FileDevice>;

/// What the mount reads and writes through.
pub enum Backend {
    /// Read-only: the filesystem over the overlay.
    ReadOnly(Box<Fs<OverlayDev>>),
    /// Read-write: the library writer, joined as one node.
    ReadWrite(Box<Writer<&'static FileDevice>>),
}

/// The mount's state, shared with the command (which leaves the writer after the
/// session ends).
pub struct State {
    /// The backend.
    pub backend: Backend,
    bufs: Buffers,
    /// Open handles per inode (read-write: a file unlinked while open is kept).
    open: BTreeMap<u64, u32>,
    /// Files unlinked while open, kept in `/lost+found` until their last close.
    pub kept: BTreeSet<u64>,
    /// Device errors logged (the first few are printed).
    errors: u64,
    /// A timed commit failed: its changes are lost, and no caller was there to be
    /// told, so every later `fsync` and `statfs` fails with `EIO` (as a file system
    /// whose writeback failed answers the next `fsync`).
    pub timed_commit_failed: bool,
}

impl State {
    /// The state over `backend`.
    pub fn new(backend: Backend) -> State {
        State {
            backend,
            bufs: Buffers::new(),
            open: BTreeMap::new(),
            kept: BTreeSet::new(),
            errors: 0,
            timed_commit_failed: false,
        }
    }
}

/// The filesystem the session serves.
pub struct CetraFuse {
    state: Arc<Mutex<State>>,
    image: String,
    notifier: Arc<OnceLock<Notifier>>,
    /// The mount's hold on the image (docs/cetrafs.md section 15, "Holding an image"),
    /// told at the session's end that the mount is leaving; shared with the command,
    /// which lets go of it after the leave. Apart from the state's lock, which a commit
    /// may hold through a long flush.
    hold: Option<Arc<crate::cetrafs::hold::Hold>>,
}

impl CetraFuse {
    /// Serves `state`; `image` names the image in messages. `notifier` is set once the
    /// session is up: through it a change the kernel cannot see in a reply (a mode set
    /// by an ACL) drops the kernel's cached attributes.
    pub fn new(
        state: Arc<Mutex<State>>,
        image: &Path,
        notifier: Arc<OnceLock<Notifier>>,
        hold: Option<Arc<crate::cetrafs::hold::Hold>>,
    ) -> CetraFuse {
        CetraFuse {
            state,
            image: image.display().to_string(),
            notifier,
            hold,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for CetraFuse {
    /// The session has ended (the kernel unmounted it): the leave starts now, so a
    /// command that meets the hold waits for it instead of refusing.
    fn drop(&mut self) {
        if let Some(h) = self.hold.as_deref() {
            if let Err(e) = h.leaving() {
                crate::report::warn(format!("{}: {e}", self.image));
            }
        }
    }
}

/// The kernel's errno for a structure that does not read: `EIO`, with the error
/// printed (the first 20; a damaged file must not flood the log).
fn eio(st: &mut State, image: &str, what: &str, e: &tet_core::Error) -> Errno {
    st.errors = st.errors.saturating_add(1);
    if st.errors <= 20 {
        crate::report::warn(format!(
            "{image}: {what}: {} (the request fails with EIO)",
            super::super::describe(e)
        ));
    }
    Errno::EIO
}

fn errno_of(st: &mut State, image: &str, what: &str, e: &WriteError) -> Errno {
    match e {
        WriteError::Device(d) => eio(st, image, what, d),
        other => Errno::from_i32(other.errno().code()),
    }
}

fn time(ns: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_nanos(ns))
        .unwrap_or(UNIX_EPOCH)
}

fn kind_of(mode: u32) -> FileType {
    match mode & S_IFMT {
        S_IFDIR => FileType::Directory,
        S_IFLNK => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

fn kind_of_code(code: u8) -> FileType {
    match code {
        2 => FileType::Directory,
        7 => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

/// The attributes of an inode as `stat` shows them.
fn attr_of(r: &RawInode) -> FileAttr {
    let mode = r.mode.get();
    FileAttr {
        ino: INodeNo(r.ino.get()),
        size: r.size.get(),
        blocks: r.blocks.get().saturating_mul(8),
        atime: time(r.atime_ns.get()),
        mtime: time(r.mtime_ns.get()),
        ctime: time(r.ctime_ns.get()),
        crtime: time(r.crtime_ns.get()),
        kind: kind_of(mode),
        perm: u16::try_from(mode & 0o7777).unwrap_or(0),
        nlink: r.nlink.get(),
        uid: r.uid.get(),
        gid: r.gid.get(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn now_ns() -> u64 {
    crate::cetrafs::write::now_ns()
}

fn time_ns(t: TimeOrNow) -> u64 {
    match t {
        TimeOrNow::Now => now_ns(),
        TimeOrNow::SpecificTime(s) => s
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    }
}

/// Runs `f` with the filesystem the backend reads through and the scratch buffers: the
/// journal overlay when read-only; when read-write the writer's view, its pending batch
/// read in place of the device's blocks, so a read sees every change that returned
/// without committing the batch first.
fn with_fs<R>(
    st: &mut State,
    f: impl FnOnce(&dyn Reader, &mut Buffers) -> Result<R, tet_core::Error>,
) -> Result<R, tet_core::Error> {
    let State { backend, bufs, .. } = st;
    match backend {
        Backend::ReadOnly(fs) => f(&**fs, bufs),
        Backend::ReadWrite(w) => {
            let view = w.view(&mut bufs.data)?;
            f(&view, bufs)
        }
    }
}

/// Answers a request that has nothing to return but success.
fn reply_empty(r: Result<(), Errno>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

/// The reads the mount makes, over either backend's device.
trait Reader {
    fn inode(&self, ino: u64, buf: &mut Block)
        -> Result<tet_core::cetrafs::Inode, tet_core::Error>;
    fn lookup(
        &self,
        dir: &tet_core::cetrafs::Inode,
        name: &[u8],
        bufs: &mut Buffers,
    ) -> Result<Option<u64>, tet_core::Error>;
    fn read_at(
        &self,
        i: &tet_core::cetrafs::Inode,
        offset: u64,
        out: &mut [u8],
        tree: &mut Block,
    ) -> Result<usize, tet_core::Error>;
    fn dir_page(
        &self,
        dir: &tet_core::cetrafs::Inode,
        after: u64,
        bufs: &mut Buffers,
    ) -> Result<Vec<view::PageEntry>, tet_core::Error>;
    fn counts(&self, buf: &mut Block) -> Result<view::Counts, tet_core::Error>;
    fn xattr_names(
        &self,
        i: &tet_core::cetrafs::Inode,
        bufs: &mut Buffers,
    ) -> Result<Vec<u8>, tet_core::Error>;
    fn xattr_value(
        &self,
        i: &tet_core::cetrafs::Inode,
        key: &[u8],
        bufs: &mut Buffers,
    ) -> Result<Option<Vec<u8>>, tet_core::Error>;
}

impl<D: BlockDevice> Reader for Fs<D> {
    fn inode(
        &self,
        ino: u64,
        buf: &mut Block,
    ) -> Result<tet_core::cetrafs::Inode, tet_core::Error> {
        if ino == 0 || ino >= self.superblock().inode_count() {
            return Err(tet_core::Error::new(
                tet_core::ErrorKind::NotFound,
                "inode number",
                0,
            ));
        }
        Fs::inode(self, ino, buf)
    }
    fn lookup(
        &self,
        dir: &tet_core::cetrafs::Inode,
        name: &[u8],
        bufs: &mut Buffers,
    ) -> Result<Option<u64>, tet_core::Error> {
        Fs::lookup(self, dir, name, bufs)
    }
    fn read_at(
        &self,
        i: &tet_core::cetrafs::Inode,
        offset: u64,
        out: &mut [u8],
        tree: &mut Block,
    ) -> Result<usize, tet_core::Error> {
        view::read_at(self, i, offset, out, tree)
    }
    fn dir_page(
        &self,
        dir: &tet_core::cetrafs::Inode,
        after: u64,
        bufs: &mut Buffers,
    ) -> Result<Vec<view::PageEntry>, tet_core::Error> {
        view::dir_page(self, dir, after, PAGE, bufs)
    }
    fn counts(&self, buf: &mut Block) -> Result<view::Counts, tet_core::Error> {
        view::counts(self, buf)
    }
    fn xattr_names(
        &self,
        i: &tet_core::cetrafs::Inode,
        bufs: &mut Buffers,
    ) -> Result<Vec<u8>, tet_core::Error> {
        view::xattr_names(self, i, bufs)
    }
    fn xattr_value(
        &self,
        i: &tet_core::cetrafs::Inode,
        key: &[u8],
        bufs: &mut Buffers,
    ) -> Result<Option<Vec<u8>>, tet_core::Error> {
        view::xattr_value(self, i, key, bufs)
    }
}

impl CetraFuse {
    /// The attributes of `ino`.
    fn attr(&self, st: &mut State, ino: u64) -> Result<FileAttr, Errno> {
        if let Backend::ReadWrite(w) = &st.backend {
            // The writer's view includes its batch not yet committed.
            return match w.stat(ino) {
                Ok(r) => Ok(attr_of(&r)),
                Err(e) => Err(errno_of(st, &self.image, &format!("inode {ino}"), &e)),
            };
        }
        let r = with_fs(st, |fs, b| fs.inode(ino, &mut b.data).map(|i| *i.raw()));
        match r {
            Ok(r) => Ok(attr_of(&r)),
            Err(e) if e.kind == tet_core::ErrorKind::NotFound => Err(Errno::ENOENT),
            Err(e) => Err(eio(st, &self.image, &format!("inode {ino}"), &e)),
        }
    }

    /// The inode `name` names in `dir`.
    fn find(&self, st: &mut State, dir: u64, name: &[u8]) -> Result<u64, Errno> {
        if let Backend::ReadWrite(w) = &st.backend {
            return match w.lookup(dir, name) {
                Ok(i) => Ok(i),
                Err(e) => Err(errno_of(
                    st,
                    &self.image,
                    &format!("directory inode {dir}"),
                    &e,
                )),
            };
        }
        let r = with_fs(st, |fs, b| {
            let d = fs.inode(dir, &mut b.data)?;
            if !d.is_dir() {
                return Ok(Err(Errno::ENOTDIR));
            }
            Ok(fs.lookup(&d, name, b)?.ok_or(Errno::ENOENT))
        });
        match r {
            Ok(x) => x,
            Err(e) => Err(eio(st, &self.image, &format!("directory inode {dir}"), &e)),
        }
    }

    /// Before reading the block groups' free counts (`statfs`): the writer's batch
    /// committed, so the counts include it (a commit writes them).
    fn settle(&self, st: &mut State) -> Result<(), Errno> {
        if let Backend::ReadWrite(w) = &mut st.backend {
            if let Err(e) = w.sync() {
                return Err(errno_of(st, &self.image, "committing the batch", &e));
            }
        }
        Ok(())
    }

    /// The writer, or `EROFS` on a read-only mount; its clock set to now.
    fn writer(st: &mut State) -> Result<&mut Writer<&'static FileDevice>, Errno> {
        match &mut st.backend {
            Backend::ReadOnly(_) => Err(Errno::EROFS),
            Backend::ReadWrite(w) => {
                w.set_time(now_ns());
                Ok(w)
            }
        }
    }

    /// Runs a writer operation, its error rendered.
    fn write_op<T>(
        &self,
        st: &mut State,
        what: &str,
        f: impl FnOnce(&mut Writer<&'static FileDevice>) -> Result<T, WriteError>,
    ) -> Result<T, Errno> {
        let w = Self::writer(st)?;
        match f(w) {
            Ok(v) => Ok(v),
            Err(e) => Err(errno_of(st, &self.image, what, &e)),
        }
    }

    /// Answers a request that names an inode (looked up, made or linked) with its
    /// attributes.
    fn entry(&self, st: &mut State, ino: Result<u64, Errno>, reply: ReplyEntry) {
        match ino.and_then(|i| self.attr(st, i)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// Creates regular file `name` in `parent` with `mode` (the umask applied), owned
    /// by the caller (create and mknod, `what` naming which).
    fn create_file(
        &self,
        st: &mut State,
        what: &str,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
    ) -> Result<u64, Errno> {
        self.write_op(st, what, |w| {
            w.create(parent.0, name.as_bytes(), mode, req.uid(), req.gid())
        })
    }

    /// Runs `f` on inode `ino` as the mount reads it, a failure to read being the
    /// xattr block's `EIO`.
    fn with_xattrs<R>(
        &self,
        st: &mut State,
        ino: INodeNo,
        f: impl FnOnce(
            &dyn Reader,
            &tet_core::cetrafs::Inode,
            &mut Buffers,
        ) -> Result<R, tet_core::Error>,
    ) -> Result<R, Errno> {
        let r = with_fs(st, |fs, b| {
            let i = fs.inode(ino.0, &mut b.data)?;
            f(fs, &i, b)
        });
        r.map_err(|e| eio(st, &self.image, "xattr block", &e))
    }

    /// One close of `ino`: a file kept after its unlink is freed at the last.
    fn close(&self, st: &mut State, ino: u64) {
        let left = match st.open.get_mut(&ino) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n
            }
            None => 0,
        };
        if left == 0 {
            st.open.remove(&ino);
            if st.kept.remove(&ino) {
                if let Err(e) = self.write_op(st, "freeing an unlinked file", |w| w.release(ino)) {
                    crate::report::warn(format!(
                        "{}: inode {ino} stays in /lost+found ({e:?})",
                        self.image
                    ));
                }
            }
        }
    }

    /// A minimal access ACL on `ino`: its permission bits set to `perms`, the set-id
    /// and sticky bits kept, except set-group-ID when the caller is neither root nor of
    /// the file's group (the kernel's rule for an ACL that changes the mode; the
    /// caller's supplementary groups are not known here, so it may drop it where the
    /// kernel would keep it). The kernel's cached attributes are dropped, as its
    /// setxattr path expects the filesystem to change the mode without a reply saying so.
    fn acl_chmod(
        &self,
        req: &Request,
        ino: INodeNo,
        perms: u32,
        notifier: &Notifier,
    ) -> Result<(), Errno> {
        let mut st = self.lock();
        let r = self.write_op(&mut st, "setxattr (ACL)", |w| {
            let old = w.stat(ino.0)?;
            // Setting an access ACL changes the mode, which only the owner (or root)
            // may: chmod's rule, whatever the kernel checked before asking.
            if req.uid() != 0 && req.uid() != old.uid.get() {
                return Err(tet_alloc::cetrafs::write::Errno::EPERM.into());
            }
            let mut special = old.mode.get() & 0o7000;
            if req.uid() != 0 && req.gid() != old.gid.get() {
                special &= !S_ISGID;
            }
            let a = SetAttr {
                mode: Some(special | perms),
                uid: None,
                gid: None,
                atime_ns: None,
                mtime_ns: None,
            };
            w.set_attr(ino.0, &a)
        });
        drop(st);
        if r.is_ok() {
            // Attributes only (a negative offset keeps the page cache). A kernel that
            // has forgotten the inode answers ENOENT: nothing cached to drop.
            let _ = notifier.inval_inode(ino, -1, 0);
        }
        r
    }

    fn opened(st: &mut State, ino: u64) {
        let n = st.open.entry(ino).or_insert(0);
        *n = n.saturating_add(1);
    }
}

impl Filesystem for CetraFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Larger writes mean fewer transactions; the kernel caps what it accepts.
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = self.lock();
        let ino = self.find(&mut st, parent.0, name.as_bytes());
        self.entry(&mut st, ino, reply);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let mut st = self.lock();
        match self.attr(&mut st, ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.lock();
        let a = SetAttr {
            mode,
            uid,
            gid,
            atime_ns: atime.map(time_ns),
            mtime_ns: mtime.map(time_ns),
        };
        let r = self.write_op(&mut st, "setattr", |w| {
            if let Some(s) = size {
                w.truncate(ino.0, s)?;
            }
            if a.mode.is_some()
                || a.uid.is_some()
                || a.gid.is_some()
                || a.atime_ns.is_some()
                || a.mtime_ns.is_some()
            {
                w.set_attr(ino.0, &a)?;
            }
            Ok(())
        });
        match r.and_then(|()| self.attr(&mut st, ino.0)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let mut st = self.lock();
        let r = with_fs(&mut st, |fs, b| {
            let i = fs.inode(ino.0, &mut b.data)?;
            if !i.is_symlink() {
                return Ok(None);
            }
            let mut out = vec![0u8; usize::try_from(i.size()).unwrap_or(0).min(BLOCK_SIZE)];
            let n = fs.read_at(&i, 0, &mut out, &mut b.tree)?;
            out.truncate(n);
            Ok(Some(out))
        });
        match r {
            Ok(Some(t)) => reply.data(&t),
            Ok(None) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(eio(
                &mut st,
                &self.image,
                &format!("symlink inode {}", ino.0),
                &e,
            )),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & S_IFMT != S_IFREG && mode & S_IFMT != 0 {
            // Devices, FIFOs and sockets have no inode type in cetrafs.
            reply.error(Errno::EPERM);
            return;
        }
        let mut st = self.lock();
        let ino = self.create_file(&mut st, "mknod", req, parent, name, mode & !umask);
        self.entry(&mut st, ino, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut st = self.lock();
        let ino = self.write_op(&mut st, "mkdir", |w| {
            w.mkdir(
                parent.0,
                name.as_bytes(),
                mode & !umask,
                req.uid(),
                req.gid(),
            )
        });
        self.entry(&mut st, ino, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut st = self.lock();
        let ino = match self.find(&mut st, parent.0, name.as_bytes()) {
            Ok(i) => i,
            Err(e) => return reply.error(e),
        };
        let is_open = st.open.contains_key(&ino);
        let r = self.write_op(&mut st, "unlink", |w| {
            if is_open {
                w.unlink_open(parent.0, name.as_bytes())
            } else {
                w.unlink(parent.0, name.as_bytes()).map(|()| None)
            }
        });
        reply_empty(
            r.map(|kept| {
                if let Some(k) = kept {
                    st.kept.insert(k);
                }
            }),
            reply,
        );
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut st = self.lock();
        reply_empty(
            self.write_op(&mut st, "rmdir", |w| w.rmdir(parent.0, name.as_bytes())),
            reply,
        );
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let mut st = self.lock();
        let ino = self.write_op(&mut st, "symlink", |w| {
            w.symlink(
                parent.0,
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
                req.uid(),
                req.gid(),
            )
        });
        self.entry(&mut st, ino, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        let bits = flags.bits();
        if bits & !RENAME_NOREPLACE != 0 {
            // RENAME_EXCHANGE and RENAME_WHITEOUT.
            return reply.error(Errno::EINVAL);
        }
        let target = self.find(&mut st, newparent.0, newname.as_bytes());
        if bits & RENAME_NOREPLACE != 0 && target.is_ok() {
            return reply.error(Errno::EEXIST);
        }
        // A file replaced while open is kept like an unlinked one: moved aside first.
        if let Ok(t) = target {
            if st.open.contains_key(&t) {
                let r = self.write_op(&mut st, "rename", |w| {
                    w.unlink_open(newparent.0, newname.as_bytes())
                });
                match r {
                    Ok(Some(k)) => {
                        st.kept.insert(k);
                    }
                    Ok(None) => {}
                    Err(e) => return reply.error(e),
                }
            }
        }
        let r = self.write_op(&mut st, "rename", |w| {
            w.rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes())
        });
        reply_empty(r, reply);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut st = self.lock();
        let r = self.write_op(&mut st, "link", |w| {
            w.link(ino.0, newparent.0, newname.as_bytes())
        });
        self.entry(&mut st, r.map(|()| ino.0), reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut st = self.lock();
        let writing = flags.0 & O_ACCMODE != 0;
        if writing && matches!(st.backend, Backend::ReadOnly(_)) {
            return reply.error(Errno::EROFS);
        }
        match self.attr(&mut st, ino.0) {
            Ok(a) if a.kind == FileType::Directory && writing => reply.error(Errno::EISDIR),
            Ok(_) => {
                Self::opened(&mut st, ino.0);
                reply.opened(FileHandle(0), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut st = self.lock();
        let r = with_fs(&mut st, |fs, b| {
            let i = fs.inode(ino.0, &mut b.data)?;
            if i.is_dir() {
                return Ok(None);
            }
            let len = u64::from(size).min(i.size().saturating_sub(offset));
            let mut out = vec![0u8; usize::try_from(len).unwrap_or(0)];
            let n = fs.read_at(&i, offset, &mut out, &mut b.tree)?;
            out.truncate(n);
            Ok(Some(out))
        });
        match r {
            Ok(Some(d)) => reply.data(&d),
            Ok(None) => reply.error(Errno::EISDIR),
            Err(e) => reply.error(eio(&mut st, &self.image, &format!("inode {}", ino.0), &e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut st = self.lock();
        match self.write_op(&mut st, "write", |w| w.write(ino.0, offset, data)) {
            Ok(()) => reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX)),
            Err(e) => reply.error(e),
        }
    }

    /// Nothing to do at a close (writes reach the writer as they are made; `fsync`
    /// makes them durable): `ENOSYS`, after which the kernel sends no more flushes, a
    /// request saved at every close.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        self.close(&mut st, ino.0);
        reply.ok();
    }

    /// Commits the writer's batch (every metadata change and small write so far: data
    /// written and flushed, then the transaction committed and checkpointed) and
    /// flushes the device: this returns only when the file's data and the metadata
    /// that reaches it are durable.
    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        if matches!(st.backend, Backend::ReadOnly(_)) {
            return reply.ok();
        }
        if st.timed_commit_failed {
            return reply.error(Errno::EIO);
        }
        let r = self.write_op(&mut st, "fsync", |w| {
            w.sync()?;
            w.fs().device().flush().map_err(WriteError::from)
        });
        reply_empty(r, reply);
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fsync(req, ino, fh, datasync, reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut st = self.lock();
        let r = with_fs(&mut st, |fs, b| {
            let d = fs.inode(ino.0, &mut b.data)?;
            if !d.is_dir() {
                return Ok(Err(Errno::ENOTDIR));
            }
            let parent = d.raw().parent.get();
            let page = fs.dir_page(&d, offset.max(view::DOTDOT_COOKIE), b)?;
            Ok(Ok((parent, page)))
        });
        let (parent, page) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => return reply.error(e),
            Err(e) => {
                return reply.error(eio(
                    &mut st,
                    &self.image,
                    &format!("directory inode {}", ino.0),
                    &e,
                ))
            }
        };
        if offset < view::DOT_COOKIE && reply.add(ino, view::DOT_COOKIE, FileType::Directory, ".") {
            return reply.ok();
        }
        if offset < view::DOTDOT_COOKIE {
            let up = if parent == 0 { ino.0 } else { parent };
            if reply.add(INodeNo(up), view::DOTDOT_COOKIE, FileType::Directory, "..") {
                return reply.ok();
            }
        }
        for e in page {
            if reply.add(
                INodeNo(e.ino),
                e.cookie,
                kind_of_code(e.file_type),
                OsStr::from_bytes(&e.name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let mut st = self.lock();
        if st.timed_commit_failed {
            return reply.error(Errno::EIO);
        }
        if let Err(e) = self.settle(&mut st) {
            return reply.error(e);
        }
        match with_fs(&mut st, |fs, b| fs.counts(&mut b.data)) {
            Ok(c) => reply.statfs(
                c.data_blocks,
                c.free_blocks,
                c.free_blocks,
                c.inodes,
                c.free_inodes,
                4096,
                255,
                4096,
            ),
            Err(e) => reply.error(eio(&mut st, &self.image, "block group counts", &e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if name.as_bytes().starts_with(ACL_PREFIX) {
            // No ACLs beyond the mode bits: a minimal access ACL sets them (as ext4 does,
            // storing nothing); any other is refused, and `cp -a` and `tar` then chmod.
            let perms = (name.as_bytes() == ACL_ACCESS)
                .then(|| minimal_acl(value))
                .flatten();
            return match (perms, self.notifier.get()) {
                (Some(p), Some(n)) => reply_empty(self.acl_chmod(req, ino, p, n), reply),
                _ => reply.error(Errno::from_i32(EOPNOTSUPP)),
            };
        }
        let mut st = self.lock();
        if flags & (XATTR_CREATE | XATTR_REPLACE) != 0 {
            let had = self.with_xattrs(&mut st, ino, |fs, i, b| {
                fs.xattr_value(i, name.as_bytes(), b)
            });
            match had {
                Ok(Some(_)) if flags & XATTR_CREATE != 0 => return reply.error(Errno::EEXIST),
                Ok(None) if flags & XATTR_REPLACE != 0 => return reply.error(Errno::ENODATA),
                Ok(_) => {}
                Err(e) => return reply.error(e),
            }
        }
        let r = self.write_op(&mut st, "setxattr", |w| {
            w.set_xattr(ino.0, name.as_bytes(), value)
        });
        reply_empty(r, reply);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let mut st = self.lock();
        match self.with_xattrs(&mut st, ino, |fs, i, b| {
            fs.xattr_value(i, name.as_bytes(), b)
        }) {
            Ok(Some(v)) => xattr_reply(&v, size, reply),
            Ok(None) => reply.error(Errno::ENODATA),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let mut st = self.lock();
        match self.with_xattrs(&mut st, ino, |fs, i, b| fs.xattr_names(i, b)) {
            Ok(v) => xattr_reply(&v, size, reply),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut st = self.lock();
        let r = self.write_op(&mut st, "removexattr", |w| {
            w.remove_xattr(ino.0, name.as_bytes())
        });
        reply_empty(r, reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = self.lock();
        let ino = match self.create_file(&mut st, "create", req, parent, name, mode & !umask) {
            Ok(i) => i,
            Err(e) => return reply.error(e),
        };
        match self.attr(&mut st, ino) {
            Ok(a) => {
                Self::opened(&mut st, ino);
                reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }
}

/// The permission bits a minimal POSIX ACL (`system.posix_acl_access` in the kernel's
/// xattr form: version 2, then exactly the owner, group and other entries, in that
/// order) stands for; `None` for any other value.
fn minimal_acl(v: &[u8]) -> Option<u32> {
    const VERSION: u32 = 2;
    const TAGS: [u16; 3] = [0x01, 0x04, 0x20];
    let (head, rest) = v.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*head) != VERSION || rest.len() != 24 {
        return None;
    }
    let mut perms = 0u32;
    for (entry, tag) in rest.chunks_exact(8).zip(TAGS) {
        let (t, p) = entry.split_first_chunk::<2>()?;
        let p = p.first_chunk::<2>()?;
        let p = u32::from(u16::from_le_bytes(*p));
        if u16::from_le_bytes(*t) != tag || p > 7 {
            return None;
        }
        perms = perms.checked_shl(3)? | p;
    }
    Some(perms)
}

/// `getxattr`/`listxattr`: the size when asked for it (`size` 0), the bytes when they
/// fit, else `ERANGE`.
fn xattr_reply(v: &[u8], size: u32, reply: ReplyXattr) {
    let len = u32::try_from(v.len()).unwrap_or(u32::MAX);
    if size == 0 {
        reply.size(len);
    } else if len > size {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(v);
    }
}
