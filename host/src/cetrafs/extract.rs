//! `tet-host extract IMAGE [PATH] DEST`: a tree of an image restored on the host, as
//! debugfs's `rdump` does: regular files (holes kept as holes), directories, symlinks,
//! hard links, modes, owners (when run as root), modification times and xattrs.
//!
//! Nothing is written outside `DEST`: it must be a new or empty directory, every name is
//! checked before it is joined (`.`, `..`, empty names, `/` and NUL are refused), every
//! file and symlink is created new (never through an existing one), and directories are
//! entered only once (a damaged image whose directories loop ends). Symlinks keep their
//! targets as they are (never followed) and their own times are not set (the standard
//! library has no `lutimes`).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;
use tet_core::cetrafs::{Buffers, FileType, Fs, Inode};
use tet_core::Error;

use super::*;
use crate::{Exit, Output};

/// What an extraction did.
#[derive(Default)]
struct Tally {
    files: u64,
    dirs: u64,
    symlinks: u64,
    hard_links: u64,
    bytes: u64,
    /// Entries not restored, each with why (a damaged inode, an unsafe name).
    skipped: Vec<String>,
}

/// One extraction: the mounted image, the host side, and what is done so far.
struct Extractor<'f, 'd> {
    fs: &'f Fs<Dev<'d>>,
    bufs: Buffers,
    /// Host path of each image inode restored as a file or symlink (hard links).
    restored: BTreeMap<u64, PathBuf>,
    /// Directory inodes entered (a damaged image's loops end here).
    entered: BTreeMap<u64, ()>,
    /// Whether owners are restored (the process runs as root).
    owners: bool,
    tally: Tally,
}

/// A name from a directory entry that is safe to join to a host directory.
fn safe_name(name: &[u8]) -> Option<&OsStr> {
    let unsafe_name = name.is_empty()
        || name == b"."
        || name == b".."
        || name.iter().any(|b| *b == b'/' || *b == 0);
    (!unsafe_name).then(|| OsStr::from_bytes(name))
}

fn mtime(ns: u64) -> std::time::SystemTime {
    // Any u64 of nanoseconds (584 years) fits a SystemTime on Linux.
    UNIX_EPOCH
        .checked_add(Duration::from_nanos(ns))
        .unwrap_or(UNIX_EPOCH)
}

impl Extractor<'_, '_> {
    fn skip(&mut self, what: String) {
        crate::say!("{what}");
        self.tally.skipped.push(what);
    }

    /// Restores the inode `ino` (named `shown` in messages) at the new host path `at`.
    fn restore(&mut self, ino: u64, at: &Path, shown: &str) -> io::Result<()> {
        let inode = match self.fs.inode(ino, &mut self.bufs.data) {
            Ok(i) => i,
            Err(e) => {
                self.skip(format!("{shown}: not restored: {}", describe(&e)));
                return Ok(());
            }
        };
        if inode.is_dir() {
            return self.restore_dir(&inode, at, shown);
        }
        if let Some(first) = self.restored.get(&ino) {
            std::fs::hard_link(first, at)?;
            self.tally.hard_links = self.tally.hard_links.saturating_add(1);
            return Ok(());
        }
        let stat = self.fs.stat(&inode);
        if inode.is_symlink() {
            let mut target = Vec::new();
            let read = self.fs.stream(&inode, &mut self.bufs, |b| {
                target.extend_from_slice(b);
                ControlFlow::Continue(())
            });
            if let Err(e) = read {
                self.skip(format!("{shown}: not restored: {}", describe(&e)));
                return Ok(());
            }
            std::os::unix::fs::symlink(OsStr::from_bytes(&target), at)?;
            if self.owners {
                std::os::unix::fs::lchown(at, Some(stat.uid), Some(stat.gid))?;
            }
            self.tally.symlinks = self.tally.symlinks.saturating_add(1);
        } else {
            let file = OpenOptions::new().write(true).create_new(true).open(at)?;
            if let Err(e) = self.copy_into(&inode, &file)? {
                drop(file);
                std::fs::remove_file(at)?;
                self.skip(format!("{shown}: not restored: {}", describe(&e)));
                return Ok(());
            }
            self.finish(&inode, &file, at)?;
            self.tally.files = self.tally.files.saturating_add(1);
        }
        self.restored.insert(ino, at.to_path_buf());
        Ok(())
    }

    /// Copies the file's bytes; blocks of zeros become holes. The inner error is the
    /// image's (the file is then removed and named), the outer the host's.
    fn copy_into(&mut self, inode: &Inode, file: &File) -> io::Result<Result<(), Error>> {
        let mut out = io::BufWriter::with_capacity(1 << 20, file);
        let mut failed: Option<io::Error> = None;
        let streamed = self.fs.stream(inode, &mut self.bufs, |piece| {
            let written = if piece.iter().all(|b| *b == 0) {
                let len = i64::try_from(piece.len()).unwrap_or(i64::MAX);
                out.seek(SeekFrom::Current(len)).map(drop)
            } else {
                out.write_all(piece)
            };
            match written {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    failed = Some(e);
                    ControlFlow::Break(())
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        out.flush()?;
        drop(out);
        match streamed {
            Ok(_) => {
                // A file that ends in a hole gets its length.
                file.set_len(inode.size())?;
                self.tally.bytes = self.tally.bytes.saturating_add(inode.size());
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    /// Mode, owner, xattrs and time of a restored file or directory (time last: setting
    /// the others does not change it, but adding entries to a directory does).
    fn finish(&mut self, inode: &Inode, file: &File, at: &Path) -> io::Result<()> {
        let stat = self.fs.stat(inode);
        if self.owners {
            std::os::unix::fs::chown(at, Some(stat.uid), Some(stat.gid))?;
        }
        let mut xattrs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let listed = self.fs.xattrs(inode, &mut self.bufs, |x| {
            xattrs.push((x.key().to_vec(), x.value().to_vec()));
            ControlFlow::Continue(())
        });
        if let Err(e) = listed {
            self.skip(format!(
                "{}: xattrs not restored: {}",
                at.display(),
                describe(&e)
            ));
        }
        for (k, v) in xattrs {
            xattr::set(at, OsStr::from_bytes(&k), &v)?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(stat.mode & 0o7777))?;
        file.set_modified(mtime(stat.mtime_ns))
    }

    fn restore_dir(&mut self, dir: &Inode, at: &Path, shown: &str) -> io::Result<()> {
        if self.entered.insert(dir.ino(), ()).is_some() {
            self.skip(format!(
                "{shown}: not restored: directory inode {} is reached twice (a loop)",
                dir.ino()
            ));
            return Ok(());
        }
        std::fs::create_dir(at)?;
        self.tally.dirs = self.tally.dirs.saturating_add(1);
        self.restore_children(dir, at, shown)?;
        let handle = File::open(at)?;
        self.finish(dir, &handle, at)
    }

    fn restore_children(&mut self, dir: &Inode, at: &Path, shown: &str) -> io::Result<()> {
        let mut entries: Vec<(Vec<u8>, u64, FileType)> = Vec::new();
        let listed = self.fs.read_dir(dir, &mut self.bufs, |e| {
            entries.push((e.name().to_vec(), e.inode, e.file_type));
            ControlFlow::Continue(())
        });
        if let Err(e) = listed {
            self.skip(format!("{shown}: entries not all read: {}", describe(&e)));
        }
        for (name, ino, _) in entries {
            let child_shown = format!("{}/{}", shown.trim_end_matches('/'), escaped(&name));
            match safe_name(&name) {
                Some(n) => self.restore(ino, &at.join(n), &child_shown)?,
                None => self.skip(format!("{child_shown}: not restored: an unsafe name")),
            }
        }
        Ok(())
    }
}

/// `tet-host extract`: restores `inner` (a directory's contents, or one file) into
/// `dest`, which must be a new or empty directory. Exit 0 when everything was restored,
/// 4 when damaged entries were skipped (each named), 8 when the host side fails.
pub fn extract(
    path: &Path,
    dev: Dev<'_>,
    inner: &[u8],
    dest: &Path,
    output: Output,
    no_journal: bool,
) -> Exit {
    with_journal(dev, no_journal, |dev| {
        extract_in(path, dev, inner, dest, output)
    })
}

fn extract_in(path: &Path, dev: Dev<'_>, inner: &[u8], dest: &Path, output: Output) -> Exit {
    // DEST is checked first and made last: nothing is created for an image that does
    // not mount or a path it does not hold.
    let create = match std::fs::symlink_metadata(dest) {
        Ok(m) if !m.is_dir() => {
            crate::say!("{}: exists and is not a directory", dest.display());
            return Exit::Usage;
        }
        Ok(_) if std::fs::read_dir(dest).is_ok_and(|mut d| d.next().is_some()) => {
            crate::say!(
                "{}: is not empty; extract writes into a new or empty directory",
                dest.display()
            );
            return Exit::Usage;
        }
        Ok(_) => false,
        Err(_) => true,
    };
    let mut bufs = Buffers::new();
    let (fs, top) = match super::read::open_path(path, dev, inner, &mut bufs) {
        Ok(r) => r,
        Err(e) => return e,
    };
    if create {
        if let Err(e) = std::fs::create_dir(dest) {
            crate::say!("cannot create {}: {e}", dest.display());
            return Exit::Operational;
        }
    }
    // The process's effective uid is the owner of what it creates.
    let owners = std::fs::metadata(dest).is_ok_and(|m| m.uid() == 0);
    let mut x = Extractor {
        fs: &fs,
        bufs,
        restored: BTreeMap::new(),
        entered: BTreeMap::new(),
        owners,
        tally: Tally::default(),
    };
    let shown = escaped(inner);
    let done = if top.is_dir() {
        x.entered.insert(top.ino(), ());
        x.restore_children(&top, dest, &shown)
    } else {
        let base = inner.rsplit(|b| *b == b'/').next().unwrap_or(inner);
        match safe_name(base) {
            Some(n) => x.restore(top.ino(), &dest.join(n), &shown),
            None => {
                x.skip(format!("{shown}: not restored: an unsafe name"));
                Ok(())
            }
        }
    };
    if let Err(e) = done {
        crate::say!("cannot write into {}: {e}", dest.display());
        return Exit::Operational;
    }
    let t = &x.tally;
    match output {
        Output::Json => crate::report::print_json(&json!({
            "image": path.display().to_string(), "dest": dest.display().to_string(),
            "files": t.files, "directories": t.dirs, "symlinks": t.symlinks,
            "hard_links": t.hard_links, "bytes": t.bytes, "owners_restored": owners,
            "skipped": t.skipped,
        })),
        _ => println!(
            "{}: {} file(s) ({} bytes), {} directorie(s), {} symlink(s), {} hard link(s) into {}{}",
            path.display(),
            t.files,
            t.bytes,
            t.dirs,
            t.symlinks,
            t.hard_links,
            dest.display(),
            if t.skipped.is_empty() {
                String::new()
            } else {
                format!("; {} entrie(s) skipped", t.skipped.len())
            }
        ),
    }
    if t.skipped.is_empty() {
        Exit::Clean
    } else {
        Exit::Problems
    }
}

#[cfg(test)]
mod tests {
    use super::safe_name;

    #[test]
    fn names_that_leave_dest_are_refused() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0b"] {
            assert!(safe_name(bad).is_none(), "{bad:?}");
        }
        for good in [&b"..."[..], b".hidden", b"a b", b"\xff\xfe"] {
            assert!(safe_name(good).is_some(), "{good:?}");
        }
    }
}
