//! Crash-safe replacement of a file: write a temporary file beside the target, `fsync`
//! it, rename it over the target, `fsync` the directory. At every point the target is
//! either the old file or the complete new one. The file-system calls go through
//! [`FsOps`], so tests can stop the sequence after any step.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tet_alloc::tet::writer::Output;

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
        let file = ops.create_new(&tmp)?;
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
        }
    }
}

impl<F: FsOps> Output for AtomicFile<F> {
    type Error = io::Error;

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(bytes);
        self.pos = self
            .pos
            .saturating_add(u64::try_from(bytes.len()).unwrap_or(0));
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
