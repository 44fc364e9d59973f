//! Holding an image: the host-local exclusion between processes that write one image
//! (docs/cetrafs.md section 15, "Holding an image"). Nothing here is on disk: the
//! holds are open-file-description (OFD) locks on byte ranges of the image file, which
//! the kernel drops when the process ends however it ends, so a live holder is never
//! taken for a crashed one, and a crashed one never blocks the next command.
//!
//! - A joined node holds a write lock on its registry row's 128 bytes for as long as
//!   it lives (the offline commands for the length of the command, the mount until it
//!   has left).
//! - Joining, and every command that writes the image without joining (`replay`,
//!   `repair`, `tune`, `mkfs --force`), first takes the *gate*: a write lock on the
//!   whole registry. It is granted only when no row is held and nobody else holds the
//!   gate, so exactly one of two commands started together gets it. A joiner narrows
//!   the gate to its row once the row is written `ACTIVE`, without letting go of it.
//! - A mount lets go of its row's byte 126 from the start (that byte free says "a
//!   mount"); a holder that is leaving (a mount whose session has ended, writing back)
//!   lets go of the row's last byte, 127. A command that meets a leaving holder waits
//!   up to [`LEAVE_WAIT`] for it to finish; one that meets a live mount waits
//!   [`MOUNT_GRACE`] for it to start leaving (a plain `umount` has just returned)
//!   before it refuses; any other live holder is refused at once.
//! - A read-only mount read-locks the whole registry until its session ends: readers
//!   share it, and every writer meets it (given the same grace as a live mount).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use tet_core::block::{Block, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::RawNodeRow;
use tet_core::cetrafs::{NodeState, Superblock, ANY_DEVICE, NODE_MAGIC, ROWS_PER_BLOCK};
use zerocopy::FromBytes;

/// How long a command waits for a holder that is leaving (a mount writing back after
/// `umount`) before it refuses.
pub const LEAVE_WAIT: Duration = Duration::from_secs(30);

/// How long a command that meets a live mount waits for it to start leaving before it
/// refuses: the mount starts its leave as soon as the kernel ends its session, which a
/// plain `umount` does as it returns.
pub const MOUNT_GRACE: Duration = Duration::from_millis(500);

/// The row byte a mount lets go of (free: the holder is a mount).
const MOUNT_BYTE: u64 = 126;

/// The row byte a leaving holder lets go of.
const LEAVING_BYTE: u64 = 127;

/// Bytes of one registry row.
const ROW: u64 = 128;

/// Where an image's registry lies in the file, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registry {
    start: u64,
    rows: u32,
}

impl Registry {
    /// The registry of the image whose superblock `file` starts with, if it parses.
    pub fn of(file: &File) -> Option<Registry> {
        let mut b: Block = [0; BLOCK_SIZE];
        file.read_exact_at(&mut b, 0).ok()?;
        let sb = Superblock::parse(&b, ANY_DEVICE).ok()?;
        let start = sb.raw().registry_start.get().checked_mul(BLOCK_SIZE_U64)?;
        Some(Registry {
            start,
            rows: sb.node_capacity(),
        })
    }

    fn len(&self) -> u64 {
        u64::from(self.rows)
            .div_ceil(ROWS_PER_BLOCK)
            .saturating_mul(BLOCK_SIZE_U64)
    }

    fn row_at(&self, row: u32) -> u64 {
        self.start
            .saturating_add(u64::from(row).saturating_mul(ROW))
    }
}

/// Who holds an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A joined node, by its registry row as it reads now.
    Node {
        /// Its registry row.
        row: u32,
        /// Its node id (0 when the row does not read).
        node_id: u64,
        /// Its hostname.
        hostname: String,
        /// When it joined (the row's `last_heartbeat`, seconds since 1970; 0 unknown).
        since: u64,
        /// It is a mount.
        mount: bool,
        /// It is leaving (writing back after its unmount).
        leaving: bool,
    },
    /// Another command holds the gate: it is joining, or replaying, repairing, tuning
    /// or formatting the image.
    Gate,
    /// A read-only mount reads it (and must not see it change).
    Reader,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Node {
                row,
                node_id,
                hostname,
                since,
                mount,
                leaving,
            } => {
                write!(f, "node {node_id:#x}")?;
                if !hostname.is_empty() {
                    write!(f, " on {hostname}")?;
                }
                write!(f, " (registry row {row})")?;
                if *mount {
                    write!(f, ", mounted")?;
                }
                if *since > 0 {
                    write!(f, " since {}", crate::time::rfc3339(*since))?;
                }
                if *leaving {
                    write!(f, ", leaving")?;
                }
                Ok(())
            }
            Holder::Gate => write!(
                f,
                "another tet-host command (joining, or replaying, repairing, tuning or \
                 formatting it)"
            ),
            Holder::Reader => write!(f, "a read-only mount"),
        }
    }
}

/// Why a hold was not granted.
#[derive(Debug)]
pub enum Refused {
    /// The image is held.
    Held(Holder),
    /// The locks could not be asked for.
    Io(io::Error),
}

impl Refused {
    /// The file system cannot lock at all (no OFD locks: some network and FUSE file
    /// systems), as opposed to a lock that is held.
    pub fn unsupported(&self) -> bool {
        matches!(self, Refused::Io(e) if matches!(
            e.raw_os_error(),
            Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS)
        ))
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Held(h) => write!(f, "in use by {h}"),
            Refused::Io(e) => write!(f, "cannot lock it: {e}"),
        }
    }
}

/// A hold on an image: the gate, or a row once narrowed. Dropping it (or the process
/// ending) lets go.
#[derive(Debug)]
pub struct Hold {
    file: File,
    reg: Registry,
    row: Option<u32>,
}

impl Hold {
    /// Takes the gate of the image at `path`: granted when nobody holds the image,
    /// refused at once when a live node or another command holds it, after
    /// [`MOUNT_GRACE`] when a live mount does, after up to [`LEAVE_WAIT`] when a node is
    /// leaving. `Ok(None)`: not a cetrafs image whose superblock reads (nothing to
    /// hold; the command's own open says what it is).
    pub fn gate(path: &Path) -> Result<Option<Hold>, Refused> {
        let file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(Refused::Io)?;
        Hold::take(file, Lock::Write)
    }

    /// A read-only mount's hold of the image at `path`: a read lock on the whole
    /// registry, which any number of readers share and which every writer meets. It
    /// waits for writers as [`Hold::gate`] does. `Ok(None)`: not a cetrafs image whose
    /// superblock reads.
    pub fn read(path: &Path) -> Result<Option<Hold>, Refused> {
        let file = File::open(path).map_err(Refused::Io)?;
        Hold::take(file, Lock::Read)
    }

    /// Locks the whole registry of the image open as `file` with `lock`, waiting as
    /// [`Hold::gate`] says.
    fn take(file: File, lock: Lock) -> Result<Option<Hold>, Refused> {
        let Some(reg) = Registry::of(&file) else {
            return Ok(None);
        };
        let start = Instant::now();
        loop {
            if set(&file, lock, reg.start, reg.len()).map_err(Refused::Io)? {
                return Ok(Some(Hold {
                    file,
                    reg,
                    row: None,
                }));
            }
            let Some(h) = holder_in(&file, reg).map_err(Refused::Io)? else {
                // Let go between the two asks: ask again.
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            let wait = match h {
                Holder::Node { leaving: true, .. } => LEAVE_WAIT,
                Holder::Node { mount: true, .. } | Holder::Reader => MOUNT_GRACE,
                _ => Duration::ZERO,
            };
            if start.elapsed() >= wait {
                return Err(Refused::Held(h));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Narrows the gate to registry row `row` (the node's, written `ACTIVE`): the row
    /// stays locked throughout, the rest of the registry is let go; a `mount` lets go
    /// of the row's mount byte too.
    pub fn keep_row(&mut self, row: u32, mount: bool) -> io::Result<()> {
        let at = self.reg.row_at(row);
        let end = self.reg.start.saturating_add(self.reg.len());
        unlock(
            &self.file,
            self.reg.start,
            at.saturating_sub(self.reg.start),
        )?;
        let past = at.saturating_add(ROW);
        unlock(&self.file, past, end.saturating_sub(past))?;
        if mount {
            unlock(&self.file, at.saturating_add(MOUNT_BYTE), 1)?;
        }
        self.row = Some(row);
        Ok(())
    }

    /// Says the holder is leaving: lets go of its row's last byte, so a command that
    /// meets the hold waits for the leave instead of refusing.
    /// A reader (a read-only mount) lets go of everything: it writes nothing back.
    pub fn leaving(&self) -> io::Result<()> {
        match self.row {
            Some(row) => unlock(
                &self.file,
                self.reg.row_at(row).saturating_add(LEAVING_BYTE),
                1,
            ),
            None => unlock(&self.file, self.reg.start, self.reg.len()),
        }
    }
}

/// Who holds the image at `path`, if anyone (`Ok(None)` also for a file that is not a
/// cetrafs image whose superblock reads). For the reading commands' warning.
pub fn holder(path: &Path) -> io::Result<Option<Holder>> {
    let file = File::open(path)?;
    match Registry::of(&file) {
        Some(reg) => holder_in(&file, reg),
        None => Ok(None),
    }
}

/// The state of registry row `row` of the image at `path` as it reads now (`None`: a
/// free row, or one that does not read).
pub fn row_state(path: &Path, row: u32) -> io::Result<Option<NodeState>> {
    let file = File::open(path)?;
    let Some(reg) = Registry::of(&file) else {
        return Ok(None);
    };
    let mut bytes = [0u8; 128];
    file.read_exact_at(&mut bytes, reg.row_at(row))?;
    Ok(RawNodeRow::read_from_bytes(&bytes)
        .ok()
        .filter(|r| r.magic == NODE_MAGIC)
        .and_then(|r| NodeState::from_raw(r.state.get())))
}

/// The registry rows in use of the image at `path`: (row, node id, state), in row
/// order, as they read now (a row that does not read is left out).
pub fn rows(path: &Path) -> io::Result<Vec<(u32, u64, NodeState)>> {
    let file = File::open(path)?;
    let Some(reg) = Registry::of(&file) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for row in 0..reg.rows {
        let mut bytes = [0u8; 128];
        if file.read_exact_at(&mut bytes, reg.row_at(row)).is_err() {
            break;
        }
        if let Ok(r) = RawNodeRow::read_from_bytes(&bytes) {
            if let (true, Some(state)) = (r.magic == NODE_MAGIC, NodeState::from_raw(r.state.get()))
            {
                out.push((row, r.node_id.get(), state));
            }
        }
    }
    Ok(out)
}

/// The rows `ACTIVE` or `FENCED` of the image at `path` as (row, node id): with nobody
/// holding the image, writers that crashed.
pub fn crashed_rows(path: &Path) -> io::Result<Vec<(u32, u64)>> {
    Ok(rows(path)?
        .into_iter()
        .filter(|(_, _, s)| matches!(s, NodeState::Active | NodeState::Fenced))
        .map(|(row, id, _)| (row, id))
        .collect())
}

/// Waits up to `wait` until nobody holds registry row `row` of the image at `path`;
/// `Ok(true)` when free.
pub fn wait_row_free(path: &Path, row: u32, wait: Duration) -> io::Result<bool> {
    let file = File::open(path)?;
    let Some(reg) = Registry::of(&file) else {
        return Ok(true);
    };
    let start = Instant::now();
    loop {
        if conflict(&file, Lock::Write, reg.row_at(row), ROW)?.is_none() {
            return Ok(true);
        }
        if start.elapsed() >= wait {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn holder_in(file: &File, reg: Registry) -> io::Result<Option<Holder>> {
    let Some((start, len, read)) = conflicting(file, Lock::Write, reg.start, reg.len())? else {
        return Ok(None);
    };
    if read {
        return Ok(Some(Holder::Reader));
    }
    // A row's hold lies inside the row (its first byte always held); the gate, more.
    let off = start.saturating_sub(reg.start);
    let last = off.saturating_add(len.saturating_sub(1));
    if start < reg.start || len > ROW || len == 0 || off / ROW != last / ROW {
        return Ok(Some(Holder::Gate));
    }
    let row = u32::try_from(off / ROW).unwrap_or(u32::MAX);
    let at = reg.row_at(row);
    let free = |byte: u64| -> io::Result<bool> {
        Ok(conflict(file, Lock::Write, at.saturating_add(byte), 1)?.is_none())
    };
    let (mount, leaving) = (free(MOUNT_BYTE)?, free(LEAVING_BYTE)?);
    let mut bytes = [0u8; 128];
    let raw = file
        .read_exact_at(&mut bytes, at)
        .ok()
        .and_then(|()| RawNodeRow::read_from_bytes(&bytes).ok())
        .filter(|r| r.magic == NODE_MAGIC && NodeState::from_raw(r.state.get()).is_some());
    let (node_id, hostname, since) = raw.map_or((0, String::new(), 0), |r| {
        let end = r.hostname.iter().position(|b| *b == 0).unwrap_or(64);
        let host = r.hostname.get(..end).unwrap_or(&[]);
        (
            r.node_id.get(),
            String::from_utf8_lossy(host).into_owned(),
            r.last_heartbeat.get(),
        )
    });
    Ok(Some(Holder::Node {
        row,
        node_id,
        hostname,
        since,
        mount,
        leaving,
    }))
}

#[derive(Clone, Copy)]
enum Lock {
    Read,
    Write,
    Unlock,
}

/// Takes (or lets go of) `len` bytes at `start` without waiting; `Ok(false)` when
/// another open file description holds a conflicting lock.
fn set(file: &File, lock: Lock, start: u64, len: u64) -> io::Result<bool> {
    let mut fl = flock(lock, start, len)?;
    match fcntl(file, libc::F_OFD_SETLK, &mut fl) {
        Ok(()) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

fn unlock(file: &File, start: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    set(file, Lock::Unlock, start, len).map(|_| ())
}

/// The range of a lock another open file description holds that conflicts with a
/// `lock` of `len` bytes at `start`.
fn conflict(file: &File, lock: Lock, start: u64, len: u64) -> io::Result<Option<(u64, u64)>> {
    Ok(conflicting(file, lock, start, len)?.map(|(at, n, _)| (at, n)))
}

/// [`conflict`], and whether the lock held is a read lock.
fn conflicting(
    file: &File,
    lock: Lock,
    start: u64,
    len: u64,
) -> io::Result<Option<(u64, u64, bool)>> {
    let mut fl = flock(lock, start, len)?;
    fcntl(file, libc::F_OFD_GETLK, &mut fl)?;
    let kind = i32::from(fl.l_type);
    if kind == libc::F_UNLCK {
        return Ok(None);
    }
    let at = u64::try_from(fl.l_start).unwrap_or(0);
    // A length of 0 is "to the end of the file and beyond".
    let n = u64::try_from(fl.l_len)
        .ok()
        .filter(|n| *n > 0)
        .unwrap_or(u64::MAX);
    Ok(Some((at, n, kind == libc::F_RDLCK)))
}

fn flock(lock: Lock, start: u64, len: u64) -> io::Result<libc::flock> {
    let bad = |_| io::Error::from(io::ErrorKind::InvalidInput);
    let kind = match lock {
        Lock::Read => libc::F_RDLCK,
        Lock::Write => libc::F_WRLCK,
        Lock::Unlock => libc::F_UNLCK,
    };
    Ok(libc::flock {
        l_type: i16::try_from(kind).map_err(bad)?,
        l_whence: i16::try_from(libc::SEEK_SET).map_err(bad)?,
        l_start: i64::try_from(start).map_err(bad)?,
        l_len: i64::try_from(len).map_err(bad)?,
        // OFD locks require 0 here.
        l_pid: 0,
    })
}

/// `fcntl(fd, cmd, fl)` for the three OFD lock commands.
///
/// # Safety
/// Sound: `fl` is a valid, exclusively borrowed `struct flock` for the duration of the
/// call, which is all F_OFD_SETLK and F_OFD_GETLK read or write; the descriptor is
/// borrowed from a live `File`.
#[allow(unsafe_code)]
fn fcntl(file: &File, cmd: libc::c_int, fl: &mut libc::flock) -> io::Result<()> {
    // SAFETY: see the function's contract above.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, std::ptr::from_mut(fl)) };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
