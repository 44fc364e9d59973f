//! Crash-safe replacement of a file: write a temporary file beside the target, `fsync`
//! it, rename it over the target, `fsync` the directory. At every point the target is
//! either the old file or the complete new one. The file-system calls go through
//! [`FsOps`], so tests can stop the sequence after any step.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tet_alloc::tet::writer::Output;

use crate::Error;

/// Temporary files of writes in progress: removed when the process is interrupted.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn pending() -> MutexGuard<'static, Vec<PathBuf>> {
    // A panic elsewhere leaves the list valid: use it as it is.
    PENDING.lock().unwrap_or_else(PoisonError::into_inner)
}

fn forget(tmp: &Path) {
    pending().retain(|p| p != tmp);
}

/// The temporary files of the writes in progress, removed, and the list held: while the
/// value lives no write can register a new one. The binary calls it when a signal ends
/// the process (the targets are untouched: they are replaced only by a rename at the
/// end), and exits while still holding it.
pub fn remove_temporaries() -> Held {
    let mut list = pending();
    for tmp in list.drain(..) {
        let _ = std::fs::remove_file(tmp);
    }
    Held(list)
}

/// The list of temporary files, locked ([`remove_temporaries`]).
pub struct Held(
    #[allow(dead_code, reason = "held for its lock")] MutexGuard<'static, Vec<PathBuf>>,
);

/// Whether `a` and `b` name the same file: the same device and inode, so symbolic links
/// and hard links are seen through.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Refuses to write `output` when it is one of `inputs`, naming both, or when it exists
/// and `force` is not given (usage errors), or when its directory is not there (an
/// operational error). Commands that create a file call it before they read anything.
pub fn check_output(output: &Path, inputs: &[&Path], force: bool) -> Result<(), Error> {
    if let Some(input) = inputs.iter().find(|i| same_file(output, i)) {
        return Err(Error::usage(format!(
            "the output {} is the input {} (the same file); write to another path",
            output.display(),
            input.display()
        ))
        .at(output));
    }
    // A node that is not a regular file (a device, a FIFO, a directory) is refused by
    // [`AtomicFile::create`] whatever `force` says.
    let regular = std::fs::metadata(output).is_ok_and(|m| m.is_file());
    let dangling = std::fs::symlink_metadata(output).is_ok() && std::fs::metadata(output).is_err();
    if !force && (regular || dangling) {
        return Err(Error::usage(format!(
            "{} exists; pass --force to replace it",
            output.display()
        ))
        .at(output));
    }
    check_parent(output).map_err(|why| Error::io(why).at(output))
}

/// Refuses to create `output` in a directory that is not there (an operational error), before a command reads its input: the temporary file beside it could not be
/// created, and a directory is never made for it.
pub fn check_parent(output: &Path) -> Result<(), String> {
    let dir = dir_of(output);
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "cannot create {}: {} is not a directory",
            output.display(),
            dir.display()
        )),
        Err(e) => Err(format!(
            "cannot create {}: directory {}: {e}",
            output.display(),
            dir.display()
        )),
    }
}

/// The file-system steps of an atomic replace.
pub trait FsOps {
    /// Creates `path`, which must not exist.
    fn create_new(&mut self, path: &Path) -> io::Result<File>;
    /// Writes `bytes` at `offset`.
    fn write_at(&mut self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// Flushes the file's data and metadata to the device.
    fn sync(&mut self, file: &File) -> io::Result<()>;
    /// Renames `from` over `to` (atomic on one file system).
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()>;
    /// Flushes the directory entry changes of `dir`.
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()>;
}

/// The real file system.
#[derive(Default, Clone, Copy, Debug)]
pub struct RealFs;

impl FsOps for RealFs {
    fn create_new(&mut self, path: &Path) -> io::Result<File> {
        OpenOptions::new().write(true).create_new(true).open(path)
    }
    fn write_at(&mut self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        file.write_all_at(bytes, offset)
    }
    fn sync(&mut self, file: &File) -> io::Result<()> {
        file.sync_all()
    }
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// Bytes buffered before a write.
const BUFFER: usize = 1 << 20;

/// A new file that replaces `target` only on [`AtomicFile::commit`]; dropped without
/// commit, its temporary file is removed and the target is untouched.
pub struct AtomicFile<F: FsOps> {
    ops: F,
    file: Option<File>,
    tmp: PathBuf,
    target: PathBuf,
    pos: u64,
    buf: Vec<u8>,
    buf_at: u64,
}

fn dir_of(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

impl<F: FsOps> AtomicFile<F> {
    /// Starts a replacement of `target` (the temporary file is created beside it). A
    /// target that exists and is not a regular file (a device such as `/dev/full`, a
    /// FIFO, a directory) is refused: renaming over it would replace the node itself.
    pub fn create(target: &Path, mut ops: F) -> io::Result<Self> {
        // Through a symbolic link, replace the file it names and keep the link.
        let resolved;
        let target = match std::fs::symlink_metadata(target) {
            Ok(m) if m.file_type().is_symlink() => {
                resolved = std::fs::canonicalize(target)?;
                resolved.as_path()
            }
            _ => target,
        };
        if let Ok(m) = std::fs::symlink_metadata(target) {
            if !m.file_type().is_file() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} exists and is not a regular file; write to a regular file",
                        target.display()
                    ),
                ));
            }
        }
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into());
        let tmp = dir_of(target).join(format!(".{name}.tet-host-{}.tmp", std::process::id()));
        // Registered before it exists, so an interrupt at any moment removes it.
        pending().push(tmp.clone());
        let file = ops.create_new(&tmp).inspect_err(|_| forget(&tmp))?;
        // A file replaced keeps its permissions and, where this process may set it, its
        // owner (as `sed -i` does); a new file gets the umask's.
        if let Ok(old) = std::fs::metadata(target) {
            if let Err(e) = file.set_permissions(old.permissions()) {
                // Not a file to leave behind.
                let _ = std::fs::remove_file(&tmp);
                forget(&tmp);
                return Err(e);
            }
            let _ = std::os::unix::fs::fchown(&file, Some(old.uid()), Some(old.gid()));
        }
        Ok(AtomicFile {
            ops,
            file: Some(file),
            tmp,
            target: target.to_path_buf(),
            pos: 0,
            buf: Vec::new(),
            buf_at: 0,
        })
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let file = self.file.as_ref().ok_or_else(closed)?;
        self.ops.write_at(file, self.buf_at, &self.buf)?;
        self.buf_at = self
            .buf_at
            .saturating_add(u64::try_from(self.buf.len()).unwrap_or(0));
        self.buf.clear();
        Ok(())
    }

    /// The temporary file being written.
    pub fn temporary(&self) -> &Path {
        &self.tmp
    }

    /// Sets the file's length (a longer file gets a hole at the end).
    pub fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.flush_buf()?;
        self.file.as_ref().ok_or_else(closed)?.set_len(len)
    }

    /// Flushes, syncs, renames over the target and syncs the directory.
    pub fn commit(mut self) -> io::Result<()> {
        self.flush_buf()?;
        let file = self.file.take().ok_or_else(closed)?;
        self.ops.sync(&file)?;
        drop(file);
        self.ops.rename(&self.tmp, &self.target)?;
        // From here the temporary name is gone; nothing to clean up.
        forget(&self.tmp);
        self.tmp = PathBuf::new();
        self.ops.sync_dir(&dir_of(&self.target))
    }
}

fn closed() -> io::Error {
    io::Error::other("output already committed")
}

impl<F: FsOps> Drop for AtomicFile<F> {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
            forget(&self.tmp);
        }
    }
}

impl<F: FsOps> Output for AtomicFile<F> {
    type Error = io::Error;

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let n = u64::try_from(bytes.len()).unwrap_or(0);
        self.pos = self.pos.saturating_add(n);
        if bytes.len() >= BUFFER {
            // A large piece is written as it is, not copied into the buffer first (a
            // streaming writer's slab would otherwise be held twice).
            self.flush_buf()?;
            let file = self.file.as_ref().ok_or_else(closed)?;
            self.ops.write_at(file, self.buf_at, bytes)?;
            self.buf_at = self.buf_at.saturating_add(n);
            return Ok(());
        }
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= BUFFER {
            self.flush_buf()?;
        }
        Ok(())
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.flush_buf()?;
        let file = self.file.as_ref().ok_or_else(closed)?;
        self.ops.write_at(file, offset, bytes)
    }
}

/// Any `Write + Seek` as a writer [`Output`] (appends at the end, seeks back for the
/// header and index).
pub struct IoOutput<W: std::io::Write + std::io::Seek> {
    inner: W,
    end: u64,
}

impl<W: std::io::Write + std::io::Seek> IoOutput<W> {
    /// Wraps `inner`, which must be empty and positioned at 0.
    pub fn new(inner: W) -> Self {
        IoOutput { inner, end: 0 }
    }

    /// The wrapped writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: std::io::Write + std::io::Seek> Output for IoOutput<W> {
    type Error = io::Error;

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.seek(io::SeekFrom::Start(self.end))?;
        self.inner.write_all(bytes)?;
        self.end = self
            .end
            .saturating_add(u64::try_from(bytes.len()).unwrap_or(0));
        Ok(())
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.inner.seek(io::SeekFrom::Start(offset))?;
        self.inner.write_all(bytes)
    }
}
