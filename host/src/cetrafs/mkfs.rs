//! `tet-host mkfs`: a cetrafs image written as it is built, block by block, to a new
//! sparse file (replaced atomically) or in place on a block device. Memory is the tree
//! copied from `--from` plus a few blocks and a word per block group, whatever the size.

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;

use serde_json::json;
use tet_alloc::cetrafs::mkfs::{BlockSink, Content, ImageBuilder, Params, Placement, Sparse};
use tet_core::block::{Block, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::{Buffers, Fs};
use tet_core::{Error, ErrorKind};

use crate::atomic::{AtomicFile, RealFs};
use crate::signature;
use crate::{Exit, Output};

/// Options of `tet-host mkfs`.
pub struct MkfsOptions<'a> {
    /// Image size in bytes (required for a file; a block device's size by default).
    pub size: Option<u64>,
    /// Block group size in bytes.
    pub bg_size: Option<u64>,
    /// Zone groups.
    pub zone_groups: Option<u32>,
    /// Node registry capacity.
    pub nodes: Option<u32>,
    /// Inode table length.
    pub inodes: Option<u64>,
    /// Volume label.
    pub label: Option<String>,
    /// Directory to copy in.
    pub from: Option<&'a Path>,
    /// Output style.
    pub output: Output,
    /// Format even when the target holds something (no question asked).
    pub force: bool,
    /// The volume UUID (default: a random one; give it for identical bytes).
    pub uuid: Option<[u8; 16]>,
}

/// Parses `64M`, `1G`, `2T`, `4096`, `512K` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let shift = match s.chars().last() {
        Some('K' | 'k') => 10u32,
        Some('M' | 'm') => 20,
        Some('G' | 'g') => 30,
        Some('T' | 't') => 40,
        _ => 0,
    };
    let num = if shift == 0 {
        s
    } else {
        s.get(..s.len().saturating_sub(1)).unwrap_or("")
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| {
            format!("invalid size '{s}' (use a number with an optional K, M, G or T suffix)")
        })
}

/// A byte count as a person writes it (`256K`, `64M`), rounded up to the unit.
pub fn human(bytes: u64) -> String {
    for (unit, shift) in [("T", 40u32), ("G", 30), ("M", 20), ("K", 10)] {
        let u = 1u64 << shift;
        if bytes >= u {
            return format!("{}{unit}", bytes.div_ceil(u));
        }
    }
    format!("{bytes} bytes")
}

/// A size to a tenth of its unit, rounded down: `3.8 MiB`, `1.25 GiB` (what `human`
/// rounds up would overstate what an image holds).
pub fn precise(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40u32), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        let u = 1u64 << shift;
        if bytes >= u {
            let hundredths = u128::from(bytes)
                .saturating_mul(100)
                .checked_div(u128::from(u))
                .unwrap_or(0);
            return format!("{}.{:02} {unit}", hundredths / 100, hundredths % 100);
        }
    }
    format!("{bytes} bytes")
}

/// `1 node`, `4 nodes`.
fn count(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Block group size by default: about 1024 groups, between 16 MiB and 1 GiB, a power
/// of two (as mke2fs scales its defaults with the size), so the metadata mkfs writes
/// (three blocks per group) grows far slower than the image.
pub fn default_bg_blocks(size: u64) -> u64 {
    let blocks = size / BLOCK_SIZE_U64;
    (blocks / 1024)
        .max(1)
        .checked_next_power_of_two()
        .unwrap_or(1 << 18)
        .clamp(1 << 12, 1 << 18)
}

/// Inodes by default: one per 64 KiB up to 1024 (small images keep most of their space
/// for data), then one per MiB up to 2^22, at least 16. An inode takes a block (a hole
/// until used), and the checker's maps take 4 bytes and a bit per inode.
pub fn default_inodes(size: u64) -> u64 {
    (size >> 16)
        .min(1024)
        .max((size >> 20).min(1 << 22))
        .max(16)
}

/// Blocks of each node's journal by default: 256 slots (513 blocks, 2 MiB a node) from
/// 128 MiB, below that the power of two of slots that keeps every node's journal about
/// 1/16 of the image (4 nodes), at least 16 (33 blocks). A writer's batch is at most one
/// journal's slots, so the journal sets how many small files a commit (four
/// `fdatasync`s) takes: about 12 with 16 slots, a few hundred with 256 (mke2fs gives a
/// filesystem of 128 MiB to 1 GiB a 16 MiB journal, 4 MiB below; `put` of 10,000 small
/// files into 128 MiB took 1.6 s with 16 slots, 0.9 s with 64, 0.6 s with 256:
/// docs/benchmarks.md). The writer holds a journal's slots in memory (4 KiB each).
pub fn default_journal_blocks(size: u64) -> u64 {
    let slots = (size >> 19).max(1);
    let pow2 = 1u64 << (63u32.saturating_sub(slots.leading_zeros()));
    pow2.clamp(16, 256).saturating_mul(2).saturating_add(1)
}

/// The parameters `mkfs` builds with: the flags, else the size-scaled defaults.
fn params(o: &MkfsOptions<'_>, size: u64) -> Params {
    let d = Params::default();
    let bg = o
        .bg_size
        .map_or_else(|| default_bg_blocks(size), |s| s / BLOCK_SIZE_U64);
    let mut p = Params {
        size_bytes: size,
        bg_size_blocks: bg,
        zone_groups: o.zone_groups.unwrap_or(d.zone_groups),
        nodes: o.nodes.unwrap_or(d.nodes),
        inodes: o.inodes.unwrap_or_else(|| default_inodes(size)),
        journal_blocks: default_journal_blocks(size),
        label: o.label.clone().unwrap_or_default(),
        ..d
    };
    if o.zone_groups.is_none() {
        // By default 2 zone groups, 1 per 256 block groups beyond that, never more than
        // the block groups the size gives.
        if let Ok(b) = ImageBuilder::block_groups(&Params {
            zone_groups: 1,
            ..p.clone()
        }) {
            p.zone_groups = (b / 256).clamp(2, 256).min(b).max(1);
        }
    }
    p
}

/// A file of the `--from` tree, read while the image is written (never held whole). It
/// is opened at its first block and closed after its last, so one is open at a time.
struct HostFile {
    path: std::path::PathBuf,
    size: u64,
    open: std::cell::RefCell<Option<File>>,
}

impl Content for HostFile {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let fail = |what: &'static str| Error::new(ErrorKind::Io, what, offset);
        let mut open = self
            .open
            .try_borrow_mut()
            .map_err(|_| fail("--from file"))?;
        if open.is_none() {
            *open = Some(File::open(&self.path).map_err(|e| {
                crate::say!("mkfs: {}: {e}", self.path.display());
                fail("--from file (cannot open)")
            })?);
        }
        let f = open.as_ref().ok_or(fail("--from file"))?;
        f.read_exact_at(buf, offset).map_err(|e| {
            crate::say!(
                "mkfs: {}: {e} (did it change while copying?)",
                self.path.display()
            );
            fail("--from file (read)")
        })?;
        let end = offset.saturating_add(u64::try_from(buf.len()).unwrap_or(u64::MAX));
        if end >= self.size {
            *open = None;
        }
        Ok(())
    }
}

/// Host files with more than one name, by (device, inode), and the image inode their
/// first name became: a later name is a hard link, not a copy.
type Seen = std::collections::HashMap<(u64, u64), u64>;

/// Why a tree could not be copied into the image.
enum CopyError {
    /// A file or directory of the tree could not be read, or the builder refused it: the
    /// path and the reason.
    Read(String),
    /// The image has no inode left for the next entry.
    OutOfInodes,
}

/// Entries (files, directories, symlinks) below `dir`, counted as `mkfs --from` copies
/// them (hard links once), up to `limit`.
fn tree_entries(dir: &Path, limit: u64) -> u64 {
    let mut n: u64 = 0;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            use std::os::unix::fs::MetadataExt;
            if !m.is_dir() && m.nlink() > 1 && !seen.insert((m.dev(), m.ino())) {
                continue;
            }
            n = n.saturating_add(1);
            if n >= limit {
                return n;
            }
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    n
}

/// Copies the host tree `host` into directory `dir`. `skip` holds the (device, inode) of
/// files never copied: the image being written and its temporary file, when the image
/// lies inside the tree.
fn copy_tree(
    b: &mut ImageBuilder,
    dir: u64,
    host: &Path,
    seen: &mut Seen,
    skip: &[(u64, u64)],
    quiet: bool,
) -> Result<(), CopyError> {
    let mut entries: Vec<_> = std::fs::read_dir(host)
        .map_err(|e| CopyError::Read(format!("{}: {e}", host.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| CopyError::Read(format!("{}: {e}", host.display())))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let name = e.file_name();
        let name = name.as_encoded_bytes();
        let at = |e: &dyn std::fmt::Display| CopyError::Read(format!("{}: {e}", path.display()));
        // What the builder refuses: out of inodes is the settings', said as such.
        let built = |e: &tet_core::Error| {
            if e.what == "inode table" {
                CopyError::OutOfInodes
            } else {
                CopyError::Read(format!("{}: {e}", path.display()))
            }
        };
        let meta = std::fs::symlink_metadata(&path).map_err(|e| at(&e))?;
        let ft = meta.file_type();
        let key = {
            use std::os::unix::fs::MetadataExt;
            if skip.contains(&(meta.dev(), meta.ino())) {
                continue;
            }
            (!ft.is_dir() && meta.nlink() > 1).then(|| (meta.dev(), meta.ino()))
        };
        if let Some(first) = key.and_then(|k| seen.get(&k).copied()) {
            b.add_link(dir, name, first).map_err(|e| built(&e))?;
            continue;
        }
        let ino = if ft.is_dir() {
            let d = b.mkdir(dir, name, 0o755).map_err(|e| built(&e))?;
            copy_tree(b, d, &path, seen, skip, quiet)?;
            d
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&path).map_err(|e| at(&e))?;
            b.add_symlink(dir, name, target.as_os_str().as_encoded_bytes())
                .map_err(|e| built(&e))?
        } else if ft.is_file() {
            let src = HostFile {
                path: path.clone(),
                size: meta.len(),
                open: std::cell::RefCell::new(None),
            };
            b.add_file_from(
                dir,
                name,
                Box::new(src),
                Sparse::Holes,
                Placement::Contiguous,
            )
            .map_err(|e| built(&e))?
        } else {
            crate::say!(
                "skipping {} (not a file, directory or symlink)",
                path.display()
            );
            continue;
        };
        if let Some(k) = key {
            seen.insert(k, ino);
        }
        {
            use std::os::unix::fs::MetadataExt;
            // The format's times count up from 1970 (docs/cetrafs.md section 8).
            if meta.mtime() < 0 && !quiet {
                crate::report::warn(format!(
                    "mkfs: {}: modified before 1970; stored as 1970-01-01 00:00:00 UTC",
                    path.display()
                ));
            }
            let mtime = u64::try_from(meta.mtime())
                .unwrap_or(0)
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::try_from(meta.mtime_nsec()).unwrap_or(0));
            b.set_meta(ino, meta.mode(), meta.uid(), meta.gid(), mtime)
                .map_err(|e| at(&e))?;
        }
        if !ft.is_symlink() {
            if let Ok(names) = xattr::list(&path) {
                let mut names: Vec<_> = names.collect();
                names.sort();
                let count = names.len();
                for k in names {
                    if let Ok(Some(v)) = xattr::get(&path, &k) {
                        b.set_xattr(ino, k.as_encoded_bytes(), &v).map_err(|e| {
                            CopyError::Read(xattr_problem(&path, &k, &v, count, &e))
                        })?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Blocks into a file at their offsets. Runs of consecutive blocks are gathered into
/// writes of up to 1 MiB; all-zero blocks are skipped on a new file (they stay holes)
/// and written on a device (which must read back zeros there).
struct FileSink<'f> {
    write: &'f mut dyn FnMut(u64, &[u8]) -> io::Result<()>,
    skip_zero: bool,
    run_start: u64,
    run: Vec<u8>,
    failed: Option<io::Error>,
    written: u64,
    /// Block 0 (the superblock), held back to be written last on a device, so a run
    /// cut short leaves nothing that claims to be an image.
    held: Option<Option<Box<Block>>>,
    /// The device, synced at each barrier (none for a new file: it is published whole,
    /// by rename, only once complete).
    sync: Option<&'f File>,
    /// Progress on standard error (a terminal only), by block handed over.
    bar: Option<indicatif::ProgressBar>,
}

const RUN: usize = 1 << 20;

impl FileSink<'_> {
    fn flush(&mut self) -> io::Result<()> {
        if self.run.is_empty() {
            return Ok(());
        }
        let at = self.run_start.saturating_mul(BLOCK_SIZE_U64);
        (self.write)(at, &self.run)?;
        self.written = self
            .written
            .saturating_add(u64::try_from(self.run.len()).unwrap_or(0));
        self.run.clear();
        Ok(())
    }
}

impl BlockSink for FileSink<'_> {
    fn barrier(&mut self) -> Result<(), Error> {
        let synced = self
            .flush()
            .and_then(|()| self.sync.map_or(Ok(()), File::sync_data));
        synced.map_err(|e| {
            self.failed = Some(e);
            Error::new(ErrorKind::Io, "image write (sync)", 0)
        })
    }

    fn write_block(&mut self, lba: u64, block: &Block) -> Result<(), Error> {
        let io_err = |e: io::Error, s: &mut Self| {
            s.failed = Some(e);
            Error::new(
                ErrorKind::Io,
                "image write",
                lba.saturating_mul(BLOCK_SIZE_U64),
            )
        };
        if let Some(b) = &self.bar {
            b.inc(BLOCK_SIZE_U64);
        }
        if self.skip_zero && block.iter().all(|b| *b == 0) {
            return Ok(());
        }
        if let (0, Some(slot)) = (lba, self.held.as_mut()) {
            *slot = Some(Box::new(*block));
            return Ok(());
        }
        let blocks = u64::try_from(self.run.len() / BLOCK_SIZE).unwrap_or(0);
        let continues = self.run_start.checked_add(blocks) == Some(lba);
        if !continues || self.run.len() >= RUN {
            if let Err(e) = self.flush() {
                return Err(io_err(e, self));
            }
            self.run_start = lba;
        }
        self.run.extend_from_slice(block);
        Ok(())
    }
}

/// A positioned write.
type WriteAt<'a> = dyn FnMut(u64, &[u8]) -> io::Result<()> + 'a;

/// Where the image goes.
enum Target {
    /// A new regular file (sparse), replacing any old one only when complete.
    File(AtomicFile<RealFs>),
    /// A block device, written in place; its size in bytes.
    Device(File, u64),
}

impl Target {
    /// The temporary file a new image is written to, if any.
    fn temporary(&self) -> Option<&Path> {
        match self {
            Target::File(f) => Some(f.temporary()),
            Target::Device(..) => None,
        }
    }
}

fn open_target(image: &Path) -> io::Result<Target> {
    match std::fs::metadata(image) {
        Ok(m) if m.file_type().is_block_device() => {
            // O_EXCL on a block device: the open fails (EBUSY) while the device is
            // mounted or held by another exclusive opener, as mke2fs refuses.
            use std::os::unix::fs::OpenOptionsExt;
            const O_EXCL: i32 = 0o200;
            let mut f = OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(O_EXCL)
                .open(image)
                .map_err(|e| match e.raw_os_error() {
                    Some(16) => io::Error::new(
                        e.kind(),
                        "the device is busy: mounted, or in use by another program",
                    ),
                    _ => e,
                })?;
            let size = f.seek(SeekFrom::End(0))?;
            Ok(Target::Device(f, size))
        }
        _ => AtomicFile::create(image, RealFs).map(Target::File),
    }
}

/// Files counted in an image that is about to be overwritten, at most.
const COUNT_LIMIT: u64 = 100_000;

/// `label 'L', N files` of the cetrafs image on `image`, from a walk of its tree that
/// stops after [`COUNT_LIMIT`] entries (`more than N files`).
fn cetrafs_summary(image: &Path) -> Option<String> {
    let dev = super::device::FileDevice::open(image).ok()?;
    let mut bufs = Buffers::new();
    // An image cut short is still described (only reading it).
    let fs = Fs::open_shortened(&dev, &mut bufs.data).ok()?;
    let label = fs.superblock().raw().label;
    let len = label.iter().position(|b| *b == 0).unwrap_or(label.len());
    // Escaped: a label's control characters must not redraw the question asked.
    let label = super::escaped(label.get(..len).unwrap_or(&[]));
    let mut dirs = vec![fs.inode(1, &mut bufs.data).ok()?];
    let mut files = 0u64;
    while let Some(dir) = dirs.pop() {
        let mut children = Vec::new();
        let _ = fs.read_dir(&dir, &mut bufs, |e| {
            files = files.saturating_add(1);
            children.push(e.inode);
            if files >= COUNT_LIMIT {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        if files >= COUNT_LIMIT {
            return Some(format!("label '{label}', more than {COUNT_LIMIT} files"));
        }
        for ino in children {
            if let Ok(i) = fs.inode(ino, &mut bufs.data) {
                if i.is_dir() {
                    dirs.push(i);
                }
            }
        }
    }
    Some(format!("label '{label}', {}", count(files, "file")))
}

/// Before formatting over a regular file or block device that holds something (a
/// filesystem, an image, a partition table, any nonzero byte where signatures are
/// probed), asks on a terminal, or refuses (exit 16) without one, as mkfs.ext4 does;
/// `force` skips the question. An empty or all-zero target is formatted without a word.
fn confirm_overwrite(image: &Path, force: bool) -> Result<(), Exit> {
    let probed = std::fs::metadata(image)
        .is_ok_and(|m| m.file_type().is_file() || m.file_type().is_block_device());
    if force || !probed {
        return Ok(());
    }
    let head = File::open(image).and_then(|f| signature::head(&f));
    let head = head.map_err(|e| {
        crate::say!("mkfs: cannot read {}: {e}", image.display());
        Exit::Operational
    })?;
    let Some(what) = signature::describe(&head) else {
        return Ok(());
    };
    let what = match (
        head.starts_with(&tet_core::cetrafs::SB_MAGIC),
        cetrafs_summary(image),
    ) {
        (true, Some(summary)) => format!("{what} ({summary})"),
        _ => what.to_string(),
    };
    if !std::io::stdin().is_terminal() {
        crate::say!(
            "mkfs: {} contains {what}; pass --force to format it anyway",
            image.display()
        );
        return Err(Exit::Usage);
    }
    let question = format!("{} contains {what}. Proceed anyway?", image.display());
    if crate::repair_mode::confirm(&question) {
        Ok(())
    } else {
        crate::say!("mkfs: {} left as it was", image.display());
        Err(Exit::Usage)
    }
}

/// The most bytes a label holds: the whole 64-byte field (docs/cetrafs.md section 3: a
/// label of 64 bytes has no NUL).
pub const LABEL_MAX: usize = 64;

/// Headroom an image sized from its tree gets over what the tree takes: a quarter.
const HEADROOM_PCT: u64 = 25;

/// A label the field cannot hold, refused before anything is written (mkfs.ext4 refuses
/// a label longer than its field too): the reason, or `None`.
pub fn label_problem(l: &str) -> Option<String> {
    if l.as_bytes().contains(&0) {
        Some("the label holds a NUL byte (a NUL ends the field)".into())
    } else if l.len() > LABEL_MAX {
        Some(format!(
            "the label is {} bytes; the field holds at most {LABEL_MAX}",
            l.len()
        ))
    } else {
        None
    }
}

/// The size of an image for the tree at `from` when `--size` is not given: the smallest
/// whole number of MiB whose data area holds what the tree takes plus
/// [`HEADROOM_PCT`] %, with the default inode count raised to the tree's entries plus
/// the same headroom. `None` (the message said) when the tree cannot be read.
fn size_from_tree(o: &MkfsOptions<'_>, from: &Path) -> Result<(u64, Option<u64>), Exit> {
    let entries = tree_entries(from, 1 << 32);
    let with_room = |n: u64| n.saturating_add(n.saturating_mul(HEADROOM_PCT) / 100);
    let inodes = o
        .inodes
        .is_none()
        .then(|| with_room(entries.saturating_add(2)));
    let with_inodes = |size: u64| {
        let mut p = params(o, size);
        if let Some(n) = inodes {
            p.inodes = p.inodes.max(n);
        }
        p
    };
    // One walk of the tree: what it takes does not depend on the geometry.
    let mut size: u64 = 8 << 20;
    let mut b = ImageBuilder::new(with_inodes(size));
    match copy_tree(
        &mut b,
        ImageBuilder::ROOT,
        from,
        &mut Seen::new(),
        &[],
        true,
    ) {
        Ok(()) => {}
        Err(CopyError::Read(e)) => {
            crate::say!("mkfs: {e}");
            return Err(Exit::Operational);
        }
        // Only a given --inodes can be too few: the build says so with the numbers.
        Err(CopyError::OutOfInodes) => return Ok((size, inodes)),
    }
    let need = with_room(b.data_blocks_needed());
    // The defaults a size gives change with it: settle on one whose data area holds it.
    for _ in 0..16 {
        match ImageBuilder::size_for_data(&with_inodes(size), need) {
            Some(s) if s <= size => return Ok((size, inodes)),
            Some(s) => size = s.max(size.saturating_add(1 << 20)),
            None => break,
        }
    }
    crate::say!(
        "mkfs: cannot size an image for {}; pass --size",
        from.display()
    );
    Err(Exit::Usage)
}

/// `tet-host mkfs`.
pub fn mkfs(image: &Path, o: &MkfsOptions<'_>) -> Exit {
    if let Some(why) = o.label.as_deref().and_then(label_problem) {
        crate::say!("mkfs: {why}; nothing written");
        return Exit::Usage;
    }
    // An image a process holds is never formatted over, --force or not.
    let _hold = if image.exists() {
        match super::write::gate("mkfs", image) {
            Ok(h) => h,
            Err(e) => return e,
        }
    } else {
        None
    };
    if let Err(e) = confirm_overwrite(image, o.force) {
        return e;
    }
    let mut target = match open_target(image) {
        Ok(t) => t,
        Err(e) => {
            crate::say!("mkfs: cannot write {}: {e}", image.display());
            return Exit::Operational;
        }
    };
    // Set when the tree sized the image, said in the summary.
    let mut sized: Option<u64> = None;
    let mut auto_inodes: Option<u64> = None;
    let size = match (&target, o.size) {
        (Target::Device(_, dev), Some(s)) if s > *dev => {
            crate::say!(
                "mkfs: --size {} is larger than {} ({} bytes)",
                human(s),
                image.display(),
                dev
            );
            return Exit::Usage;
        }
        (Target::Device(_, dev), s) => s.unwrap_or(*dev),
        (Target::File(_), Some(s)) => s,
        (Target::File(_), None) => match o.from {
            Some(from) => match size_from_tree(o, from) {
                Ok((s, inodes)) => {
                    sized = Some(s);
                    auto_inodes = inodes;
                    s
                }
                Err(e) => return e,
            },
            None => {
                crate::say!(
                    "mkfs: --size is required for an image file without --from (a block \
                     device's size is the default; with --from the tree sizes the image)"
                );
                return Exit::Usage;
            }
        },
    };
    // With --from and no --inodes, the image gets an inode for each entry of the tree
    // and the same headroom, whatever its size's default (a tree of many small files
    // would otherwise run out of inodes in an image with room to spare).
    if let (Some(from), None, None) = (o.from, o.inodes, auto_inodes) {
        let n = tree_entries(from, 1 << 32).saturating_add(2);
        auto_inodes = Some(n.saturating_add(n.saturating_mul(HEADROOM_PCT) / 100));
    }
    let mut p = params(o, size);
    if let Some(n) = auto_inodes {
        p.inodes = p.inodes.max(n);
    }
    // Every image its own UUID, unless one is given (identical bytes need `--uuid`).
    p.uuid = match o.uuid.map_or_else(super::uuid::random, Ok) {
        Ok(u) => Some(u),
        Err(e) => {
            crate::say!("mkfs: cannot draw a random UUID (pass --uuid): {e}");
            return Exit::Operational;
        }
    };
    let mut b = ImageBuilder::new(p.clone());
    if let Some(from) = o.from {
        let skip: Vec<(u64, u64)> = [Some(image), target.temporary()]
            .into_iter()
            .flatten()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino())
            })
            .collect();
        match copy_tree(
            &mut b,
            ImageBuilder::ROOT,
            from,
            &mut Seen::new(),
            &skip,
            false,
        ) {
            Ok(()) => {}
            Err(CopyError::Read(e)) => {
                crate::say!("mkfs: {e}");
                return Exit::Operational;
            }
            Err(CopyError::OutOfInodes) => {
                let n = tree_entries(from, 1 << 32);
                crate::say!(
                    "mkfs: out of inodes: {} holds {} {}, the image {} (one is the root); \
                     pass --inodes {} or more",
                    from.display(),
                    n,
                    if n == 1 { "entry" } else { "entries" },
                    count(p.inodes, "inode"),
                    n.saturating_add(2)
                );
                return Exit::Usage;
            }
        }
    }
    let total = match b.total_blocks() {
        Ok(t) => t,
        Err(e) => return refuse(&e, o, &p, size, b.data_blocks_needed()),
    };
    let mut result = Ok(());
    let written;
    // A second handle on a device, to sync and to write block 0 around the sink's writes.
    let target_sync = match &target {
        Target::Device(f, _) => match f.try_clone() {
            Ok(f) => Some(f),
            Err(e) => {
                crate::say!("mkfs: cannot write {}: {e}", image.display());
                return Exit::Operational;
            }
        },
        Target::File(_) => None,
    };
    {
        let (skip_zero, mut write): (bool, Box<WriteAt<'_>>) = match &mut target {
            Target::File(f) => (
                true,
                Box::new(|at, bytes| {
                    use tet_alloc::tet::writer::Output as _;
                    f.write_at(at, bytes)
                }),
            ),
            Target::Device(f, _) => (false, Box::new(|at, bytes| f.write_all_at(bytes, at))),
        };
        let device = !skip_zero;
        // On a device, whatever superblocks were there go first (the primary and its
        // copies zeroed, synced), and the new ones are written last: its copies after a
        // sync, then the primary after another.
        let cleared = match (&target_sync, device) {
            (Some(_), true) => super::device::FileDevice::open_rw(image).and_then(|d| {
                tet_alloc::cetrafs::copies::erase(&d, &mut [0u8; BLOCK_SIZE])
                    .map_err(|e| io::Error::other(super::describe(&e)))
            }),
            _ => Ok(()),
        };
        let mut sink = FileSink {
            write: &mut *write,
            skip_zero,
            run_start: 0,
            run: Vec::with_capacity(RUN),
            failed: None,
            written: 0,
            held: device.then_some(None),
            sync: target_sync.as_ref().filter(|_| device),
            // Over the blocks that hold something: the tree's data at most, its inodes
            // and the metadata regions (a device is written whole, zeros included).
            bar: o.from.and_then(|_| {
                let meta = total.saturating_sub(ImageBuilder::data_blocks_of(&p).unwrap_or(0));
                let blocks = if device {
                    total
                } else {
                    b.data_blocks_needed().saturating_add(meta)
                };
                crate::progress::progress_bar(true, blocks.saturating_mul(BLOCK_SIZE_U64))
            }),
        };
        let built = if let Err(e) = cleared {
            sink.failed = Some(e);
            Err(Error::new(ErrorKind::Io, "image write", 0))
        } else {
            b.build_into(&mut sink)
        };
        let mut flushed = sink.flush();
        if let (Ok(()), Some(Some(first))) = (&flushed, sink.held.take()) {
            // Everything else is on the device before the superblock that names it.
            flushed = match &target_sync {
                Some(f) => f.sync_data(),
                None => Ok(()),
            }
            .and_then(|()| (sink.write)(0, &first[..]));
            if flushed.is_ok() {
                sink.written = sink.written.saturating_add(BLOCK_SIZE_U64);
            }
        }
        if let Some(b) = sink.bar.take() {
            b.finish_and_clear();
        }
        written = sink.written;
        match (built, sink.failed.take(), flushed) {
            (Err(_), Some(e), _) | (Ok(_), _, Err(e)) => result = Err(e),
            (Err(e), None, _) => return refuse(&e, o, &p, size, b.data_blocks_needed()),
            (Ok(_), _, Ok(())) => {}
        }
    }
    let done = result.and_then(|()| match target {
        Target::File(mut f) => {
            // The file's length is the size asked for; what was never written is a hole.
            f.set_len(
                total
                    .saturating_mul(BLOCK_SIZE_U64)
                    .max(size.saturating_sub(size % BLOCK_SIZE_U64)),
            )?;
            f.commit()
        }
        Target::Device(f, _) => f.sync_all(),
    });
    if let Err(e) = done {
        crate::say!("mkfs: cannot write {}: {e}", image.display());
        return Exit::Operational;
    }
    match o.output {
        Output::Json => {
            println!(
                "{}",
                json!({"image": image.display().to_string(), "format": "cetrafs", "version": 6,
                       "blocks": total, "block_groups": ImageBuilder::block_groups(&p).unwrap_or(0),
                       "block_group_blocks": p.bg_size_blocks, "zone_groups": p.zone_groups,
                       "inodes": p.inodes, "bytes_written": written,
                       "sized_from_tree": sized.is_some()})
            );
            crate::report::printed();
        }
        _ => match sized {
            Some(s) => println!(
                "{}: cetrafs 0x0006, {total} blocks ({}, {}: sized from the tree with \
                 {HEADROOM_PCT} % headroom; --size to choose)",
                image.display(),
                human(s),
                count(p.inodes, "inode")
            ),
            None => println!("{}: cetrafs 0x0006, {total} blocks", image.display()),
        },
    }
    Exit::Clean
}

/// Explains why the settings give no image, naming what would work (a failed read of
/// a `--from` file is operational: exit 8).
fn refuse(e: &Error, o: &MkfsOptions<'_>, p: &Params, size: u64, need: u64) -> Exit {
    if e.kind == ErrorKind::Io {
        crate::say!("mkfs: {e}");
        return Exit::Operational;
    }
    if e.what == "data blocks" {
        let have = ImageBuilder::data_blocks_of(p).unwrap_or(0);
        let from = o
            .from
            .map_or("the tree".into(), |f| f.display().to_string());
        let fix = match ImageBuilder::size_for_data(p, need) {
            Some(s) => format!("pass --size {} or more", human(s)),
            None => "pass a larger --size".into(),
        };
        crate::say!(
            "mkfs: out of space: {from} takes up to {} of data blocks, a {} image holds {}; \
             {fix}, or leave --size out to size the image from the tree",
            precise(need.saturating_mul(BLOCK_SIZE_U64)),
            precise(size),
            precise(have.saturating_mul(BLOCK_SIZE_U64))
        );
        return Exit::Usage;
    }
    if e.what == "zone groups (more than block groups)" {
        let groups = match e.kind {
            ErrorKind::OutOfRange { max, .. } => max,
            _ => 0,
        };
        crate::say!(
            "mkfs: --zone-groups {} is more than the {} of a {} image; use at \
             most {groups}, a larger --size or a smaller --block-group-size",
            p.zone_groups,
            count(groups, "block group"),
            human(size)
        );
        return Exit::Usage;
    }
    if e.what == "image size" {
        let mut q = p.clone();
        if o.zone_groups.is_none() {
            q.zone_groups = 1; // the default adapts to the size
        }
        match ImageBuilder::min_size_bytes(&q) {
            Some(m) => crate::say!(
                "mkfs: --size {} is too small: with {}, {} and {} the smallest \
                 image is {}",
                human(size),
                count(q.zone_groups.into(), "zone group"),
                count(q.nodes.into(), "node"),
                count(q.inodes, "inode"),
                human(m)
            ),
            None => crate::say!("mkfs: these settings fit no image size: {e}"),
        }
        return Exit::Usage;
    }
    crate::say!("mkfs: {e}");
    Exit::Usage
}

/// Why the xattr `key` (of `count` on `path`) does not fit an image, in the image's
/// limits (docs/cetrafs.md: one xattr block per inode).
fn xattr_problem(
    path: &Path,
    key: &std::ffi::OsStr,
    value: &[u8],
    count: usize,
    e: &tet_core::Error,
) -> String {
    let k = key.to_string_lossy();
    let bytes = key.as_encoded_bytes();
    let why = if count > tet_core::cetrafs::XATTRS_PER_BLOCK {
        format!(
            "has {count} xattrs; a cetrafs inode holds at most {} (one xattr block)",
            tet_core::cetrafs::XATTRS_PER_BLOCK
        )
    } else if bytes.len() > 64 {
        format!(
            "xattr {k}: its name is {} bytes; a cetrafs xattr name holds at most 64",
            bytes.len()
        )
    } else if value.len() > 256 {
        format!(
            "xattr {k}: its value is {} bytes; a cetrafs xattr value holds at most 256",
            value.len()
        )
    } else if !bytes.contains(&b'.') {
        format!("xattr {k}: a cetrafs xattr name needs a namespace (`user.`, `trusted.`, ...)")
    } else {
        format!("xattr {k}: {e}")
    };
    format!("{}: {why}", path.display())
}
