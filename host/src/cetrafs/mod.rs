//! `tet-host` commands for cetrafs images, one module per command, and what they share:
//! opening an image, the journal overlay, the committed slots, error messages.

pub mod device;
pub mod extract;
pub mod hold;
pub mod info;
pub mod mkfs;
pub mod mount;
pub mod read;
pub mod repair;
pub mod replay;
pub mod tune;
pub mod uuid;
pub mod verify;
pub mod write;

use std::path::Path;

use serde_json::{json, Value};
use tet_alloc::cetrafs::journal;
use tet_core::block::{BlockDevice, BLOCK_SIZE_U64};
use tet_core::cetrafs::copies::{self, Source, Substituted};
use tet_core::cetrafs::{Buffers, Committed, Features, Finding, Fs, OverlayDevice};
use tet_core::{Error, ErrorKind};

use crate::report::Rendered;
use crate::Exit;

/// A device the commands read an image from.
pub type Dev<'a> = &'a dyn HostDevice;

/// A [`BlockDevice`] with its run reads in the vtable. The core leaves
/// [`BlockDevice::read_blocks`] and [`BlockDevice::read_prefixes`] out of `dyn
/// BlockDevice` (firmware's size budget); the commands, which read through one trait
/// object, keep them, so a file still reads a run in one call and the inode table in
/// batches.
pub trait HostDevice: BlockDevice {
    /// [`BlockDevice::read_blocks`].
    fn blocks(&self, lba: u64, buf: &mut [u8]) -> tet_core::Result<()>;
    /// [`BlockDevice::read_prefixes`].
    fn prefixes(&self, lba: u64, len: usize, out: &mut [u8]) -> tet_core::Result<()>;
}

impl<D: BlockDevice> HostDevice for D {
    fn blocks(&self, lba: u64, buf: &mut [u8]) -> tet_core::Result<()> {
        self.read_blocks(lba, buf)
    }
    fn prefixes(&self, lba: u64, len: usize, out: &mut [u8]) -> tet_core::Result<()> {
        self.read_prefixes(lba, len, out)
    }
}

impl BlockDevice for &dyn HostDevice {
    fn block_count(&self) -> u64 {
        (**self).block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut tet_core::block::Block) -> tet_core::Result<()> {
        (**self).read_block(lba, buf)
    }
    fn read_block_prefix(
        &self,
        lba: u64,
        buf: &mut tet_core::block::Block,
        len: usize,
    ) -> tet_core::Result<()> {
        (**self).read_block_prefix(lba, buf, len)
    }
    fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> tet_core::Result<()> {
        (**self).blocks(lba, buf)
    }
    fn read_prefixes(&self, lba: u64, len: usize, out: &mut [u8]) -> tet_core::Result<()> {
        (**self).prefixes(lba, len, out)
    }
}

/// The device a command that only reads an image mounts: block 0 read as the superblock
/// copy the search of `docs/cetrafs.md` section 3.1 takes when the primary fails, with a
/// warning naming the primary's problem and the copy; the device as it is otherwise (the
/// mount then reports what it finds).
pub fn reading<D: BlockDevice>(path: &Path, dev: D) -> Substituted<D> {
    let mut b = Buffers::new();
    match copies::locate(&dev, &mut b.data, tet_core::cetrafs::ANY_DEVICE, None) {
        Ok(l) => match (l.source, l.primary) {
            (Source::Copy(lba), Some(e)) => {
                warn_copy(path, &e, lba);
                Substituted::new(dev, &l.sb)
            }
            _ => Substituted::unchanged(dev),
        },
        Err(_) => Substituted::unchanged(dev),
    }
}

/// What a report names its findings' inodes by: the first path of each, and the
/// inodes that own each block found owned twice.
#[derive(Default)]
pub struct Names {
    /// The first path the walk from the root found for each inode.
    pub paths: std::collections::BTreeMap<u64, Vec<u8>>,
    /// Every inode whose extents (or xattr block) hold each shared block.
    pub owners: std::collections::BTreeMap<u64, Vec<u64>>,
}

impl Names {
    /// The path of `ino`, when the walk reached it.
    pub fn path(&self, ino: u64) -> Option<&[u8]> {
        self.paths.get(&ino).map(Vec::as_slice)
    }

    /// `/path (inode N)`, or `inode N` when no path reaches it.
    pub fn inode(&self, ino: u64) -> String {
        match self.path(ino) {
            Some(p) => format!("{} (inode {ino})", escaped(p)),
            None => format!("inode {ino}"),
        }
    }
}

/// The names a report of `found` needs, as the filesystem reads after replay (through
/// the journal overlay and the superblock the search takes): paths for the inodes the
/// findings are about, and the other owners of each block owned twice (with theirs).
pub fn names_for(dev: Dev<'_>, found: &[Finding]) -> Names {
    let mut out = Names::default();
    let mut inos: Vec<u64> = found.iter().filter_map(|f| f.ino).collect();
    let shared: Vec<u64> = found.iter().filter_map(shared_block).collect();
    if inos.is_empty() && shared.is_empty() {
        return out;
    }
    let mut b = Buffers::new();
    let sub = match copies::locate(&dev, &mut b.data, tet_core::cetrafs::ANY_DEVICE, None) {
        Ok(l) => Substituted::new(dev, &l.sb),
        Err(_) => return out,
    };
    with_journal(&sub, false, |d| {
        if let Ok(fs) = Fs::open_shortened(d, &mut b.data) {
            for (block, ino) in tet_alloc::cetrafs::names::owners_of(&fs, &shared) {
                out.owners.entry(block).or_default().push(ino);
                inos.push(ino);
            }
            for (ino, p) in tet_alloc::cetrafs::names::paths_of(&fs, &inos) {
                out.paths.entry(ino).or_insert(p);
            }
        }
    });
    out
}

/// The block a block-shared finding says is owned twice.
fn shared_block(f: &Finding) -> Option<u64> {
    match f.error.kind {
        ErrorKind::Overlap { other }
            if f.code == tet_core::cetrafs::Code::BlockShared && other % BLOCK_SIZE_U64 == 0 =>
        {
            Some(other / BLOCK_SIZE_U64)
        }
        _ => None,
    }
}

/// The warning of a command that reads through a copy because the primary fails.
pub fn warn_copy(path: &Path, e: &Error, lba: u64) {
    crate::report::warn(format!(
        "{}: the primary superblock fails its checks ({}); reading through the copy in \
         block {lba} (`tet-host repair` restores the primary)",
        path.display(),
        describe(e)
    ));
}

/// Mounts the image for a command that only reads it, or says why not, from the
/// error's category: a block that cannot be read is operational (8), an image that does
/// not mount is damaged (4). An image shorter than its filesystem (cut short) mounts
/// with a warning ([`Fs::open_shortened`]): what lies before its end reads as usual, a
/// block past it fails when it is read, naming the block. The commands reach it through
/// [`crate::sniff`], which already told images from other files.
fn open_fs<D: BlockDevice>(path: &Path, dev: D) -> Result<Fs<D>, Exit> {
    let mut b = Buffers::new();
    // The group tables matter to allocation only: a reader whose tables fail reads
    // without them, with a warning (docs/cetrafs.md section 2, check 7; repair rebuilds
    // them from the geometry).
    let tables_fail = match Fs::open_shortened(&dev, &mut b.data) {
        // (Damage only: a device that fails to read is reported as it is.)
        Err(e)
            if e.offset >= BLOCK_SIZE_U64
                && e.kind.category() == tet_core::Category::Corrupt
                && Fs::open_shortened_for_read(&dev, &mut b.data).is_ok() =>
        {
            Some(e)
        }
        _ => None,
    };
    if let Some(e) = tables_fail {
        warn_tables(path, &e);
    }
    let fs = if tables_fail.is_some() {
        Fs::open_shortened_for_read(dev, &mut b.data)
    } else {
        Fs::open_shortened(dev, &mut b.data)
    }
    .map_err(|e| cannot_mount(path, &e))?;
    if let Some(e) = fs.shortened() {
        warn_shortened(path, &e);
    }
    Ok(fs)
}

/// The warning of a command that reads an image whose group tables fail (`e`, their
/// error): it reads without them.
pub fn warn_tables(path: &Path, e: &Error) {
    crate::report::warn(format!(
        "{}: the group tables fail their checks ({}); reading without them (`tet-host \
         repair` rebuilds them)",
        path.display(),
        describe(e)
    ));
}

/// Mounts the image for a command that writes it ([`Fs::open`]): an image shorter than
/// its filesystem is refused, with the same words as the warning of the reading
/// commands and exit 4 (the image's own damage: `docs/cetrafs.md` section 2, check 3).
fn open_fs_to_write<D: BlockDevice>(path: &Path, dev: D) -> Result<Fs<D>, Exit> {
    let mut b = Buffers::new();
    Fs::open(dev, &mut b.data).map_err(|e| cannot_mount(path, &e))
}

/// Says why the image did not mount; the exit status from the error's category.
fn cannot_mount(path: &Path, e: &Error) -> Exit {
    if matches!(e.kind, ErrorKind::ShortDevice { .. }) {
        refuse_shortened(path, e);
    } else {
        crate::say!("{}: cannot mount: {}", path.display(), describe(e));
        if e.offset < BLOCK_SIZE_U64 {
            say_no_copy(path);
        }
    }
    Exit::of(e.kind.category())
}

/// What to try when the primary superblock fails and the search found no copy.
pub fn say_no_copy(path: &Path) {
    crate::say!(
        "{}: no superblock copy was found either (docs/cetrafs.md section 3.1: the tables \
         and the first 1 GiB were searched); if you know where one is, pass -b BLOCK to \
         verify or repair",
        path.display()
    );
}

/// Checks a `-b BLOCK` before a command uses it: the block must hold a copy that passes.
/// Otherwise says why, and which blocks hold the copies when the image says (exit 16:
/// the request is wrong, not the image).
pub fn check_pick(path: &Path, dev: Dev<'_>, lba: u64) -> Result<(), Exit> {
    let mut b = Buffers::new();
    let read = dev.read_block(lba, &mut b.data);
    let parsed = read.and_then(|()| {
        tet_core::cetrafs::Superblock::parse_copy(&b.data, lba, tet_core::cetrafs::ANY_DEVICE)
    });
    let Err(e) = parsed else {
        return Ok(());
    };
    let places = copies::locate(&dev, &mut b.data, tet_core::cetrafs::ANY_DEVICE, None)
        .map(|l| {
            let list: Vec<String> =
                l.sb.copy_blocks()
                    .as_slice()
                    .iter()
                    .map(u64::to_string)
                    .collect();
            format!("; this image's copies are in blocks {}", list.join(", "))
        })
        .unwrap_or_default();
    crate::say!(
        "{}: -b {lba}: block {lba} holds no superblock copy that passes ({}){places}",
        path.display(),
        describe(&e)
    );
    Err(Exit::Usage)
}

/// The warning of a reading command on an image shorter than its filesystem (`e` is
/// [`Fs::shortened`]'s), on standard error: the command goes on.
fn warn_shortened(path: &Path, e: &Error) {
    crate::report::warn(format!(
        "{}: reading only what lies before the image's end: {}",
        path.display(),
        describe(e)
    ));
}

/// The refusal of a writing command on an image shorter than its filesystem.
fn refuse_shortened(path: &Path, e: &Error) {
    crate::say!(
        "{}: not written (an image cut short is only read): {}",
        path.display(),
        describe(e)
    );
}

/// Whether the cetrafs image at `path` is shorter than its filesystem, as
/// [`Fs::shortened`] says (`None` also when it cannot be opened or does not mount: the
/// command then reports that itself).
fn shortened(path: &Path) -> Option<Error> {
    let dev = device::FileDevice::open(path).ok()?;
    let fs = Fs::open_shortened(&dev, &mut Buffers::new().data).ok()?;
    fs.shortened()
}

/// Runs `f` on the image as a mount sees it: blocks that committed, not-yet-replayed
/// journal transactions change are served at their last committed version (section 7,
/// through the library's [`OverlayDevice`]), so `ls`, `cat` and `stat` show what the
/// filesystem holds; `no_journal` shows the raw on-disk state. An image that does not
/// mount, or whose journals cannot be classified, is read raw; the command then reports
/// the mount error itself. An image cut short keeps its journals' transactions while
/// the journals lie before its end.
pub fn with_journal<R>(dev: Dev<'_>, no_journal: bool, f: impl FnOnce(Dev<'_>) -> R) -> R {
    let mut bufs = Buffers::new();
    // (Journals lie where the superblock says: group tables that fail do not hide them.)
    let Some(fs) = (!no_journal)
        .then(|| {
            Fs::open_shortened(dev, &mut bufs.data)
                .or_else(|_| Fs::open_shortened_for_read(dev, &mut bufs.data))
                .ok()
        })
        .flatten()
    else {
        return f(dev);
    };
    let Ok(mut table) = journal::committed_slots(&fs, &mut bufs) else {
        return f(dev);
    };
    match fs.overlay(&mut table, &mut bufs) {
        Ok(ov) => f(&OverlayDevice::new(dev, &ov)),
        Err(_) => f(dev),
    }
}

/// Every committed slot of the dirty journals, classified across journals (empty when
/// they cannot be classified; `verify` says why).
fn committed_slots(fs: &Fs<Dev<'_>>, bufs: &mut Buffers) -> Vec<Committed> {
    let mut table = journal::committed_slots(fs, bufs).unwrap_or_default();
    if fs.classify_chains(&mut table, &mut bufs.data).is_err() {
        table.clear();
    }
    table
}

/// A name from an image as text that reads back to the same bytes: UTF-8 as it is,
/// except that `\\` stands for a backslash and `\xHH` for a control character's bytes or
/// a byte that is not UTF-8 (as `ls --quoting-style=escape` and Python's
/// `backslashreplace` write them).
pub fn escaped(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    let hex = |out: &mut String, bytes: &[u8]| {
        for b in bytes {
            out.push_str(&format!("\\x{b:02x}"));
        }
    };
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => hex(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes()),
                c => out.push(c),
            }
        }
        hex(&mut out, chunk.invalid());
    }
    out
}

/// Puts a name into a JSON object under `key`: the string itself when it is UTF-8;
/// otherwise its [`escaped`] text, and its bytes in hex under `KEY_hex`, so every name
/// reads back exactly.
pub fn put_name(obj: &mut serde_json::Map<String, Value>, key: &str, name: &[u8]) {
    match std::str::from_utf8(name) {
        Ok(s) => {
            obj.insert(key.into(), json!(s));
        }
        Err(_) => {
            obj.insert(key.into(), json!(escaped(name)));
            let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
            obj.insert(format!("{key}_hex"), json!(hex));
        }
    }
}

/// An error with its block number spelled out, in the units of a filesystem: a block
/// another owner holds is named as a block, not as the byte offset the error carries.
pub fn describe(e: &Error) -> String {
    describe_with(e, None)
}

/// [`describe`], naming the other owner of a shared block when it is known.
fn describe_with(e: &Error, other_owner: Option<&str>) -> String {
    let kind = match e.kind {
        ErrorKind::Overlap { other } if other % BLOCK_SIZE_U64 == 0 => format!(
            "shares block {} with {}",
            other / BLOCK_SIZE_U64,
            other_owner.unwrap_or("another owner")
        ),
        k => k.to_string(),
    };
    format!(
        "{} (block {}, byte {:#x}) {kind}",
        e.what,
        e.offset / BLOCK_SIZE_U64,
        e.offset
    )
}

/// A finding rendered for printing (the shared shape of [`crate::report`]), with its
/// cetrafs context: the block holding the field, and the inode when there is one.
pub fn rendered(f: &Finding) -> Rendered {
    rendered_at(f, &Names::default())
}

/// [`rendered`], naming the inode by its path when the walk from the root reached it
/// (`/dir/a.txt (inode 3): ...`), and the other owner of a shared block when one is
/// known (`shares block 1179 with /b.bin (inode 166)`).
pub fn rendered_at(f: &Finding, names: &Names) -> Rendered {
    let mut context = serde_json::Map::new();
    context.insert("block".into(), json!(f.error.offset / BLOCK_SIZE_U64));
    let mut message = String::new();
    if let Some(ino) = f.ino {
        context.insert("inode".into(), json!(ino));
        if let Some(p) = names.path(ino) {
            context.insert("path".into(), json!(escaped(p)));
        }
        message = format!("{}: ", names.inode(ino));
    }
    // The other owners of a shared block: every owner the lookup found but this one.
    let others: Vec<u64> = shared_block(f)
        .and_then(|b| names.owners.get(&b))
        .map(|o| o.iter().copied().filter(|i| Some(*i) != f.ino).collect())
        .unwrap_or_default();
    let other_owner = match others[..] {
        [] => None,
        [one] => Some(names.inode(one)),
        [one, ref rest @ ..] => Some(format!("{} and {} more", names.inode(one), rest.len())),
    };
    if !others.is_empty() {
        context.insert("other_inodes".into(), json!(others));
        let paths: Vec<String> = others
            .iter()
            .filter_map(|i| names.path(*i).map(escaped))
            .collect();
        if !paths.is_empty() {
            context.insert("other_paths".into(), json!(paths));
        }
    }
    message.push_str(&describe_with(&f.error, other_owner.as_deref()));
    Rendered {
        code: f.code.as_str(),
        severity: f.severity(),
        field: f.error.what,
        offset: f.error.offset,
        message,
        context,
    }
}

fn features_json(f: &Features) -> Value {
    let names = |word: u64, table: &[(u32, &'static str)]| -> Vec<String> {
        (0..64u32)
            .filter(|b| word & (1u64 << b) != 0)
            .map(|b| {
                Features::name(table, b).map_or_else(|| format!("unknown bit {b}"), str::to_string)
            })
            .collect()
    };
    json!({
        "compat": names(f.compat, Features::COMPAT),
        "incompat": names(f.incompat, Features::INCOMPAT),
        "ro_compat": names(f.ro_compat, Features::RO_COMPAT),
    })
}

/// Runs `f` on the cetrafs image at `path`, read with positioned reads. A `.tet` file
/// is refused as the wrong input for the command (16), a file of neither format as
/// what it looks like (8, [`crate::sniff`]).
pub fn with_device(path: &std::path::Path, f: impl FnOnce(Dev<'_>) -> Exit) -> Exit {
    match crate::sniff(path) {
        Ok(Some(d)) => {
            write::warn_if_in_use(path);
            f(&reading(path, d))
        }
        Ok(None) => {
            crate::say!(
                "{}: a .tet file, not a cetrafs image; this command reads cetrafs images",
                path.display()
            );
            Exit::Usage
        }
        Err(e) => e,
    }
}

/// `dev`, each block read advancing a progress bar on standard error (a terminal only):
/// the progress of a check, which reads every inode block once, the tables, the bitmaps
/// and the journals, and the tree and directory blocks of what is in use. The bar's
/// length is that estimate without the tree and directory blocks; past it, it grows.
pub struct Ticking<D> {
    dev: D,
    bar: Option<indicatif::ProgressBar>,
}

impl<D: BlockDevice> Ticking<D> {
    /// `dev` with a bar sized from the superblock the search takes (none when standard
    /// error is not a terminal, or no superblock passes).
    pub fn new(dev: D) -> Self {
        let mut b = Buffers::new();
        let estimate = copies::locate(&dev, &mut b.data, tet_core::cetrafs::ANY_DEVICE, None)
            .ok()
            .map(|l| {
                let sb = l.sb;
                let r = sb.raw();
                let bitmaps: u64 = (0..sb.block_group_count())
                    .map(|i| tet_core::cetrafs::bitmap_blocks(sb.bg_span(i).1).saturating_add(1))
                    .sum();
                [
                    sb.inode_count(),
                    u64::from(sb.zone_group_count()),
                    u64::from(sb.block_group_count()),
                    r.inode_bitmap_blocks.get(),
                    r.registry_blocks.get(),
                    r.pending_blocks.get(),
                    u64::from(sb.node_capacity()).saturating_mul(sb.node_journal_blocks()),
                    bitmaps,
                ]
                .iter()
                .fold(0u64, |a, x| a.saturating_add(*x))
            });
        let bar = estimate
            .and_then(|n| crate::progress::progress_bar(true, n.saturating_mul(BLOCK_SIZE_U64)));
        Ticking { dev, bar }
    }

    fn tick(&self) {
        self.tick_blocks(1);
    }

    /// Advances the bar by `n` blocks read.
    fn tick_blocks(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n.saturating_mul(BLOCK_SIZE_U64));
            if b.length().is_some_and(|l| b.position() > l) {
                b.set_length(b.position());
            }
        }
    }
}

impl<D> Drop for Ticking<D> {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl<D: BlockDevice> BlockDevice for Ticking<D> {
    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut tet_core::block::Block) -> tet_core::Result<()> {
        self.tick();
        self.dev.read_block(lba, buf)
    }
    fn read_block_prefix(
        &self,
        lba: u64,
        buf: &mut tet_core::block::Block,
        len: usize,
    ) -> tet_core::Result<()> {
        self.tick();
        self.dev.read_block_prefix(lba, buf, len)
    }
    fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> tet_core::Result<()> {
        self.tick_blocks(tet_core::arith::u64_of(buf.len()) / BLOCK_SIZE_U64);
        self.dev.read_blocks(lba, buf)
    }
    fn read_prefixes(&self, lba: u64, len: usize, out: &mut [u8]) -> tet_core::Result<()> {
        let n = tet_core::block::prefix_slots(lba, len, out.len())?;
        self.tick_blocks(tet_core::arith::u64_of(n));
        self.dev.read_prefixes(lba, len, out)
    }
}

impl<D: tet_core::block::BlockDeviceMut> tet_core::block::BlockDeviceMut for Ticking<D> {
    fn write_block(&self, lba: u64, buf: &tet_core::block::Block) -> tet_core::Result<()> {
        self.dev.write_block(lba, buf)
    }
    fn write_blocks(&self, lba: u64, buf: &[u8]) -> tet_core::Result<()> {
        self.dev.write_blocks(lba, buf)
    }
    fn flush(&self) -> tet_core::Result<()> {
        self.dev.flush()
    }
    fn compare_and_write(
        &self,
        lba: u64,
        expected: &[u8; tet_core::block::SECTOR],
        new: &[u8; tet_core::block::SECTOR],
    ) -> tet_core::Result<bool> {
        self.dev.compare_and_write(lba, expected, new)
    }
}
