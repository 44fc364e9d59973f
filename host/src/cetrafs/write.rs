//! The offline writing commands (`put`, `rm`, `mkdir`, `mv`, `ln`, `chmod`, `chown`,
//! `touch`, `truncate`, `setfattr`, and the reading `getfattr`): each joins the image as
//! a node for the length of the command (docs/cetrafs.md section 15: its registry row
//! `ACTIVE`, then `LEFT`) and writes through its journal with the library's write path;
//! the host only parses arguments and renders. Each refuses an image with
//! error-severity findings (`tet-host repair` first). Messages are in the words of the
//! equivalent Unix tool; exit codes from the one table: 0 done, 4 the image's own
//! damage, 8 a request the image cannot satisfy or a refusal, 16 usage.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::write::{Errno, JoinOptions, SetAttr, WriteError, Writer};
use tet_core::block::BlockDeviceMut;
use tet_core::cetrafs::check::Severity;

use crate::cetrafs::device::FileDevice;
use crate::cetrafs::hold::{self, Hold, Holder, Refused};
use crate::Exit;

/// The node id the offline commands join as (and `replay --node-id` recovers).
pub const OFFLINE_NODE_ID: u64 = 0x7E7;

/// Files up to this size are put in one transaction (larger ones in 16 MiB pieces).
const ONE_TRANSACTION: u64 = 1 << 20;

/// Options every writing command takes.
#[derive(clap::Args, Clone, Debug)]
pub struct Node {
    /// The node id to join as (a crashed command is recovered by `tet-host replay
    /// IMAGE`, or by the next command with the same id).
    #[arg(long, default_value_t = OFFLINE_NODE_ID, value_parser = clap::value_parser!(u64).range(1..))]
    pub node_id: u64,
}

/// `put IMAGE SRC DEST`.
#[derive(clap::Args, Clone, Debug)]
pub struct PutArgs {
    /// The image (written in place).
    pub image: PathBuf,
    /// A file, symlink or directory tree on this machine.
    pub src: PathBuf,
    /// Where in the image (an existing directory: SRC goes inside it).
    pub dest: OsString,
    #[command(flatten)]
    pub node: Node,
}

/// `rm IMAGE PATH...`.
#[derive(clap::Args, Clone, Debug)]
pub struct RmArgs {
    /// The image (written in place).
    pub image: PathBuf,
    /// Paths inside the image.
    #[arg(required = true)]
    pub paths: Vec<OsString>,
    /// Remove directories and their contents.
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    pub recursive: bool,
    /// Ignore paths that do not exist.
    #[arg(short = 'f', long = "force")]
    pub force: bool,
    #[command(flatten)]
    pub node: Node,
}

/// `mkdir IMAGE PATH...`.
#[derive(clap::Args, Clone, Debug)]
pub struct MkdirArgs {
    /// The image (written in place).
    pub image: PathBuf,
    /// Directories to make.
    #[arg(required = true)]
    pub paths: Vec<OsString>,
    /// Make parents as needed; no error when the directory exists.
    #[arg(short = 'p', long = "parents")]
    pub parents: bool,
    /// Permission bits, octal (default 755).
    #[arg(short = 'm', long = "mode", value_parser = parse_mode)]
    pub mode: Option<u32>,
    #[command(flatten)]
    pub node: Node,
}

/// `mv IMAGE SRC DEST`.
#[derive(clap::Args, Clone, Debug)]
pub struct MvArgs {
    /// The image (written in place).
    pub image: PathBuf,
    /// The path to move.
    pub src: OsString,
    /// The new path (an existing directory: SRC goes inside it).
    pub dest: OsString,
    #[command(flatten)]
    pub node: Node,
}

/// `ln [-s] IMAGE TARGET LINK`.
#[derive(clap::Args, Clone, Debug)]
pub struct LnArgs {
    /// The image (written in place).
    pub image: PathBuf,
    /// What the link names: a path inside the image (a hard link), or any text (-s).
    pub target: OsString,
    /// The new name (an existing directory: the link goes inside it).
    pub link: OsString,
    /// Make a symbolic link.
    #[arg(short = 's', long = "symbolic")]
    pub symbolic: bool,
    #[command(flatten)]
    pub node: Node,
}

/// `chmod IMAGE MODE PATH...`.
#[derive(clap::Args, Clone, Debug)]
pub struct ChmodArgs {
    /// The image (written in place).
    pub image: PathBuf,
    /// Permission bits, octal (e.g. 644, 4755).
    #[arg(value_parser = parse_mode)]
    pub mode: u32,
    /// Paths inside the image.
    #[arg(required = true)]
    pub paths: Vec<OsString>,
    #[command(flatten)]
    pub node: Node,
}

/// `chown IMAGE OWNER[:GROUP] PATH...`.
#[derive(clap::Args, Clone, Debug)]
pub struct ChownArgs {
    /// The image (written in place).
    pub image: PathBuf,
    /// Numeric owner, optionally `:GROUP` (`:GROUP` alone changes the group only).
    pub owner: String,
    /// Paths inside the image.
    #[arg(required = true)]
    pub paths: Vec<OsString>,
    #[command(flatten)]
    pub node: Node,
}

/// `touch IMAGE PATH...`.
#[derive(clap::Args, Clone, Debug)]
pub struct TouchArgs {
    /// The image (written in place).
    pub image: PathBuf,
    /// Paths inside the image (created empty when missing).
    #[arg(required = true)]
    pub paths: Vec<OsString>,
    /// Do not create missing files.
    #[arg(short = 'c', long = "no-create")]
    pub no_create: bool,
    /// The time to set, seconds since 1970 (default: now).
    #[arg(short = 'd', long = "date")]
    pub date: Option<u64>,
    #[command(flatten)]
    pub node: Node,
}

/// `truncate IMAGE -s SIZE PATH...`.
#[derive(clap::Args, Clone, Debug)]
pub struct TruncateArgs {
    /// The image (written in place).
    pub image: PathBuf,
    /// The new size in bytes.
    #[arg(short = 's', long = "size")]
    pub size: u64,
    /// Files inside the image (created when missing, as truncate(1) does).
    #[arg(required = true)]
    pub paths: Vec<OsString>,
    #[command(flatten)]
    pub node: Node,
}

/// `setfattr IMAGE -n NAME [-v VALUE] PATH` or `setfattr IMAGE -x NAME PATH`.
#[derive(clap::Args, Clone, Debug)]
pub struct SetfattrArgs {
    /// The image (written in place).
    pub image: PathBuf,
    /// The attribute to set (with its namespace: user.x).
    #[arg(
        short = 'n',
        long = "name",
        conflicts_with = "remove",
        required_unless_present = "remove"
    )]
    pub name: Option<OsString>,
    /// Its value (default empty).
    #[arg(short = 'v', long = "value")]
    pub value: Option<OsString>,
    /// The attribute to remove.
    #[arg(short = 'x', long = "remove")]
    pub remove: Option<OsString>,
    /// The path inside the image.
    pub path: OsString,
    #[command(flatten)]
    pub node: Node,
}

/// `getfattr IMAGE PATH...`.
#[derive(clap::Args, Clone, Debug)]
pub struct GetfattrArgs {
    /// The image.
    pub image: PathBuf,
    /// Paths inside the image.
    #[arg(required = true)]
    pub paths: Vec<OsString>,
    /// Only this attribute.
    #[arg(short = 'n', long = "name")]
    pub name: Option<OsString>,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("invalid mode: '{s}' (octal, at most 7777)"))
}

/// A command's failure: the message (said) and the exit.
struct Fail(String, Exit);

type Done = Result<(), Fail>;

fn show(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

/// The exit for a write-path error: the image's own damage 4, a device failure or a
/// refusal 8, an operation's Unix error 8 (a request the image cannot satisfy).
pub(crate) fn exit_of(e: &WriteError) -> Exit {
    match e {
        WriteError::Device(d) => Exit::of(d.kind.category()),
        WriteError::Replay(r) => Exit::of(r.category()),
        _ => Exit::Operational,
    }
}

/// `"{what}: {strerror}"` as the Unix tool says it.
fn fail(what: String, e: &WriteError) -> Fail {
    let why = match e {
        WriteError::Errno(x) => x.message().to_string(),
        other => other.to_string(),
    };
    Fail(format!("{what}: {why}"), exit_of(e))
}

pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Opens `image` for writing, refuses it when the check finds errors, joins as
/// `node_id`, runs `f`, and leaves. The exit of the whole command.
fn with_writer(
    tool: &str,
    image: &Path,
    node_id: u64,
    f: impl FnOnce(&mut Writer<&FileDevice>) -> Done,
) -> Exit {
    let dev = match FileDevice::open_rw(image) {
        Ok(d) => d,
        Err(e) => {
            crate::say!("{tool}: cannot open '{}': {e}", image.display());
            return Exit::Operational;
        }
    };
    let (mut w, _hold) = match join_checked(tool, image, node_id, &dev) {
        Ok(w) => w,
        Err(exit) => return exit,
    };
    let r = f(&mut w);
    let left = w.leave();
    if let Err(Fail(msg, exit)) = r {
        crate::say!("{tool}: {msg}");
        return exit;
    }
    if let Err(e) = left {
        crate::say!("{tool}: {}: leaving: {e}", image.display());
        return exit_of(&e);
    }
    Exit::Clean
}

/// A test hook: with `TET_HOST_TEST_HOLD_UNTIL=PATH`, a command that has taken an
/// image's gate keeps it until PATH exists (at most 60 s), so a test of two commands
/// started together lets the winner go on only once the loser has met its hold. Not
/// for users.
fn hold_for_tests() {
    let Some(path) = std::env::var_os("TET_HOST_TEST_HOLD_UNTIL") else {
        return;
    };
    let t0 = std::time::Instant::now();
    while !Path::new(&path).exists() && t0.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Takes the gate of `image` for `tool`, a command that writes it (docs/cetrafs.md
/// section 15, "Holding an image"), or says why not: held by a live node or another
/// command, refused at once; held by one that is leaving, after waiting for it.
/// `Ok(None)`: not an image whose superblock reads (the command's own open says so).
pub fn gate(tool: &str, image: &Path) -> Result<Option<Hold>, Exit> {
    let hold = gate_only(tool, image)?;
    if hold.is_some() {
        hold_for_tests();
    }
    Ok(hold)
}

/// [`gate`] without the test hook (a joiner pauses with its row held instead).
fn gate_only(tool: &str, image: &Path) -> Result<Option<Hold>, Exit> {
    let hold = Hold::gate(image).or_else(|e| {
        if e.unsupported() {
            // As e2fsprogs on an image file: written without a lock, said once.
            crate::report::warn(format!(
                "{}: {e}: another writer of this image would not be seen",
                image.display()
            ));
            return Ok(None);
        }
        crate::say!("{tool}: {}: not written: {e}", image.display());
        if matches!(e, Refused::Held(Holder::Node { leaving: true, .. })) {
            crate::say!(
                "{tool}: it was still leaving after {} s: wait for its process to end \
                 (`tet-host umount` returns when it has)",
                hold::LEAVE_WAIT.as_secs()
            );
        }
        Err(Exit::Operational)
    })?;
    Ok(hold)
}

/// Warns on stderr when a process holds `image` (what a reading command reads may be
/// changing under it), or else for each writer of it that crashed (its row `ACTIVE` or
/// `FENCED` while no process holds the image), naming the one command that recovers it.
pub fn warn_if_in_use(image: &Path) {
    match hold::holder(image) {
        Ok(Some(h)) => crate::report::warn(format!(
            "{} is in use by {h}: what is read may be changing",
            image.display()
        )),
        Ok(None) => {
            for (row, id) in hold::crashed_rows(image).unwrap_or_default() {
                crate::report::warn(format!(
                    "{}: node {id:#x} (registry row {row}) is ACTIVE but no process holds it: \
                     it crashed; `tet-host replay {}` recovers it",
                    image.display(),
                    image.display()
                ));
            }
        }
        Err(_) => {}
    }
}

/// Joins `dev` (the image `image`, opened for writing) as node `node_id` the way every
/// writing command and the read-write mount do: the gate taken (a held image refused,
/// whatever the node id), the node's own crash recovered, an image with error-severity
/// findings refused (repair first), then the join with this host's name, the gate
/// narrowed to the row; the writer's clock set. Says why not, in `tool`'s name. The
/// hold must live as long as the writer.
pub(crate) fn join_checked<'d>(
    tool: &str,
    image: &Path,
    node_id: u64,
    dev: &'d FileDevice,
) -> Result<(Writer<&'d FileDevice>, Option<Hold>), Exit> {
    let mount = tool == "mount";
    let mut hold = gate_only(tool, image)?;
    // This node's own crash first (docs/cetrafs.md section 15: its next join recovers
    // it): a command killed mid-transaction leaves counts behind the bitmaps, which the
    // check would report as errors. Nobody holds the image (the gate is ours), so an
    // ACTIVE row of this id is a crash, not a live process.
    if let Err(e) = tet_alloc::cetrafs::write::recover(dev, node_id) {
        crate::say!(
            "{tool}: {}: recovering node {node_id:#x}: {e}",
            image.display()
        );
        return Err(exit_of(&e));
    }
    let (found, _) = fsck::findings(dev, &fsck::Options::default());
    let errors = found
        .iter()
        .filter(|f| f.severity() == Severity::Error)
        .count();
    if errors > 0 {
        crate::say!(
            "{tool}: {}: not written: verify finds {errors} error(s) (run `tet-host verify` \
             to see them, `tet-host repair` to fix them first)",
            image.display()
        );
        return Err(Exit::Problems);
    }
    let opts = JoinOptions {
        node_id,
        hostname: hostname(),
        now_secs: now_ns() / 1_000_000_000,
    };
    let mut w = match Writer::join(dev, &opts) {
        Ok(w) => w,
        Err(WriteError::NodeActive {
            row,
            node_id,
            hostname: host,
        }) if hold.is_some() && !host.is_empty() && host != opts.hostname => {
            crate::say!(
                "{tool}: {}: cannot join: node {node_id:#x} of host {} (registry row {row}) is \
                 ACTIVE: it may be alive there (this host cannot see its hold); if it \
                 crashed, `tet-host replay {} --force` recovers it",
                image.display(),
                String::from_utf8_lossy(&host),
                image.display()
            );
            return Err(Exit::Operational);
        }
        Err(WriteError::NodeActive { row, node_id, .. }) if hold.is_some() => {
            // Under the gate no process of this host holds any row: that node crashed.
            crate::say!(
                "{tool}: {}: cannot join: node {node_id:#x} (registry row {row}) is ACTIVE \
                 but no process holds it: it crashed. `tet-host replay {}` recovers it",
                image.display(),
                image.display()
            );
            return Err(Exit::Operational);
        }
        Err(WriteError::Errno(Errno::ENOSPC)) => {
            let ids: Vec<String> = hold::rows(image)
                .unwrap_or_default()
                .iter()
                .map(|(_, id, _)| format!("{id:#x}"))
                .collect();
            crate::say!(
                "{tool}: {}: cannot join as node {node_id:#x}: the node registry is full \
                 (each of its {} rows keeps the node id that first joined in it, and rows are \
                 never reused): join as one of {}",
                image.display(),
                ids.len(),
                ids.join(", ")
            );
            return Err(Exit::Operational);
        }
        Err(e) => {
            crate::say!("{tool}: {}: cannot join: {e}", image.display());
            return Err(exit_of(&e));
        }
    };
    if let Some(h) = hold.as_mut() {
        if let Err(e) = h.keep_row(w.row(), mount) {
            crate::say!("{tool}: {}: cannot hold its row: {e}", image.display());
            // Leaving writes nothing but the row and counts: the join is undone.
            let _ = w.leave();
            return Err(Exit::Operational);
        }
    }
    if hold.is_some() {
        hold_for_tests();
    }
    w.set_time(now_ns());
    Ok((w, hold))
}

/// This host's name (at most 64 bytes), as the registry row records it.
pub(crate) fn hostname() -> Vec<u8> {
    std::fs::read("/etc/hostname")
        .map(|mut h| {
            h.retain(|b| !b.is_ascii_whitespace());
            h.truncate(64);
            h
        })
        .unwrap_or_default()
}

/// The (directory, name) a path's last component goes in, where an existing directory
/// at `dest` means "inside it, under `default_name`".
fn place<D: BlockDeviceMut>(
    w: &Writer<D>,
    dest: &[u8],
    default_name: &[u8],
) -> Result<(u64, Vec<u8>), WriteError> {
    if let Ok(ino) = w.resolve(dest) {
        if w.stat(ino)
            .is_ok_and(|i| i.mode.get() & 0o170_000 == 0o040_000)
        {
            return Ok((ino, default_name.to_vec()));
        }
    }
    w.resolve_parent(dest)
}

fn base(p: &[u8]) -> &[u8] {
    let t = p.strip_suffix(b"/").unwrap_or(p);
    t.rsplit(|b| *b == b'/').next().unwrap_or(t)
}

/// `tet-host put IMAGE SRC DEST`.
pub fn put(a: &PutArgs) -> Exit {
    let src_name = a
        .src
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_else(|| b"root".to_vec());
    with_writer("put", &a.image, a.node.node_id, |w| {
        put_in(w, &a.src, a.dest.as_bytes(), &src_name)
    })
}

fn put_in<D: BlockDeviceMut>(w: &mut Writer<D>, src: &Path, dest: &[u8], src_name: &[u8]) -> Done {
    let (dir, name) = place(w, dest, src_name)
        .map_err(|e| fail(format!("cannot create '{}'", show(dest)), &e))?;
    // Files and directories share transactions (each still whole or absent).
    w.set_batch(true)
        .map_err(|e| fail(format!("cannot create '{}'", show(dest)), &e))?;
    let mut links = std::collections::BTreeMap::new();
    put_tree(w, src, dir, &name, &mut links)
}

/// What `put` does once joined, over any device: `src` (a host file or tree) copied to
/// `dest` in the image (inside it when it is a directory), in batch mode, not synced
/// (the caller's `sync` or `leave` commits). For the crash tests; the message is the
/// command's.
pub fn put_with<D: BlockDeviceMut>(
    w: &mut Writer<D>,
    src: &Path,
    dest: &[u8],
) -> Result<(), String> {
    let name = src
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_else(|| b"root".to_vec());
    put_in(w, src, dest, &name).map_err(|Fail(m, _)| m)
}

fn put_tree<D: BlockDeviceMut>(
    w: &mut Writer<D>,
    src: &Path,
    dir: u64,
    name: &[u8],
    links: &mut std::collections::BTreeMap<(u64, u64), u64>,
) -> Done {
    let md = std::fs::symlink_metadata(src).map_err(|e| {
        Fail(
            format!("cannot stat '{}': {e}", src.display()),
            Exit::Operational,
        )
    })?;
    let ctx = |e: &WriteError| fail(format!("cannot create '{}'", src.display()), e);
    let ft = md.file_type();
    let existing = w.lookup(dir, name).ok();
    // Whether the inode already has its mode, owner and times.
    let mut attrs_done = false;
    let ino = if ft.is_dir() {
        match existing {
            Some(i)
                if w.stat(i)
                    .is_ok_and(|r| r.mode.get() & 0o170_000 == 0o040_000) =>
            {
                i
            }
            _ => w
                .mkdir(dir, name, md.mode(), md.uid(), md.gid())
                .map_err(|e| ctx(&e))?,
        }
    } else {
        if md.nlink() > 1 {
            if let Some(first) = links.get(&(md.dev(), md.ino())) {
                if existing.is_some() {
                    w.unlink(dir, name).map_err(|e| ctx(&e))?;
                }
                return w.link(*first, dir, name).map_err(|e| ctx(&e));
            }
        }
        if existing.is_some() {
            w.unlink(dir, name).map_err(|e| ctx(&e))?;
        }
        let ino = if ft.is_symlink() {
            let t = std::fs::read_link(src).map_err(|e| {
                Fail(
                    format!("cannot read '{}': {e}", src.display()),
                    Exit::Operational,
                )
            })?;
            w.symlink(dir, name, t.as_os_str().as_bytes(), md.uid(), md.gid())
                .map_err(|e| ctx(&e))?
        } else if ft.is_file() && md.len() <= ONE_TRANSACTION {
            // A small file in one transaction: whole or absent.
            let data = std::fs::read(src).map_err(|e| {
                Fail(
                    format!("cannot read '{}': {e}", src.display()),
                    Exit::Operational,
                )
            })?;
            let attr = SetAttr {
                mode: Some(md.mode()),
                uid: Some(md.uid()),
                gid: Some(md.gid()),
                ..SetAttr::default()
            };
            let attr = SetAttr {
                atime_ns: Some(ns(md.atime(), md.atime_nsec())),
                mtime_ns: Some(ns(md.mtime(), md.mtime_nsec())),
                ..attr
            };
            attrs_done = true;
            w.create_file(dir, name, &attr, &data)
                .map_err(|e| ctx(&e))?
        } else if ft.is_file() {
            let ino = w
                .create(dir, name, md.mode(), md.uid(), md.gid())
                .map_err(|e| ctx(&e))?;
            let mut file = std::fs::File::open(src).map_err(|e| {
                Fail(
                    format!("cannot open '{}': {e}", src.display()),
                    Exit::Operational,
                )
            })?;
            let mut buf = vec![0u8; 16 << 20];
            let mut off = 0u64;
            loop {
                let n = file.read(&mut buf).map_err(|e| {
                    Fail(
                        format!("cannot read '{}': {e}", src.display()),
                        Exit::Operational,
                    )
                })?;
                if n == 0 {
                    break;
                }
                let piece = buf.get(..n).unwrap_or(&[]);
                if piece.iter().any(|b| *b != 0) {
                    w.write(ino, off, piece).map_err(|e| ctx(&e))?;
                }
                off = off.saturating_add(u64::try_from(n).unwrap_or(0));
            }
            if w.stat(ino).is_ok_and(|r| r.size.get() < off) {
                w.truncate(ino, off).map_err(|e| ctx(&e))?;
            }
            ino
        } else {
            crate::report::warn(format!(
                "put: skipping '{}': not a file, directory or symlink",
                src.display()
            ));
            return Ok(());
        };
        if md.nlink() > 1 {
            links.insert((md.dev(), md.ino()), ino);
        }
        ino
    };
    if let Ok(names) = xattr::list(src) {
        for k in names {
            if let Ok(Some(v)) = xattr::get(src, &k) {
                w.set_xattr(ino, k.as_bytes(), &v).map_err(|e| {
                    fail(
                        format!("'{}': xattr {}", src.display(), k.to_string_lossy()),
                        &e,
                    )
                })?;
            }
        }
    }
    if ft.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(src)
            .map_err(|e| {
                Fail(
                    format!("cannot read '{}': {e}", src.display()),
                    Exit::Operational,
                )
            })?
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        entries.sort();
        for n in entries {
            put_tree(w, &src.join(&n), ino, n.as_bytes(), links)?;
        }
    }
    if attrs_done {
        return Ok(());
    }
    let attr = SetAttr {
        mode: (!ft.is_symlink()).then_some(md.mode() & 0o7777),
        uid: Some(md.uid()),
        gid: Some(md.gid()),
        atime_ns: Some(ns(md.atime(), md.atime_nsec())),
        mtime_ns: Some(ns(md.mtime(), md.mtime_nsec())),
    };
    w.set_attr(ino, &attr).map_err(|e| ctx(&e))
}

fn ns(s: i64, n: i64) -> u64 {
    u64::try_from(s)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(n).unwrap_or(0))
}

/// `tet-host rm [-r] [-f] IMAGE PATH...`.
pub fn rm(a: &RmArgs) -> Exit {
    with_writer("rm", &a.image, a.node.node_id, |w| {
        w.set_batch(true)
            .map_err(|e| fail("cannot remove".to_string(), &e))?;
        for p in &a.paths {
            let p = p.as_bytes();
            let what = format!("cannot remove '{}'", show(p));
            let (dir, name) = match w.resolve_parent(p) {
                Ok(x) => x,
                Err(e) if a.force && e.errno() == Errno::ENOENT => continue,
                Err(e) => return Err(fail(what, &e)),
            };
            let ino = match w.lookup(dir, &name) {
                Ok(i) => i,
                Err(e) if a.force && e.errno() == Errno::ENOENT => continue,
                Err(e) => return Err(fail(what, &e)),
            };
            let is_dir = w
                .stat(ino)
                .is_ok_and(|r| r.mode.get() & 0o170_000 == 0o040_000);
            if is_dir && !a.recursive {
                return Err(fail(what, &WriteError::Errno(Errno::EISDIR)));
            }
            remove(w, dir, &name, ino, is_dir).map_err(|e| fail(what, &e))?;
        }
        Ok(())
    })
}

/// Removes `name` (inode `ino`) from `dir`, a directory with everything below it.
fn remove(
    w: &mut Writer<&FileDevice>,
    dir: u64,
    name: &[u8],
    ino: u64,
    is_dir: bool,
) -> Result<(), WriteError> {
    if !is_dir {
        return w.unlink(dir, name);
    }
    // Depth first, with an explicit stack (a deep tree cannot overflow ours).
    let mut stack: Vec<(u64, Vec<u8>, u64)> = vec![(dir, name.to_vec(), ino)];
    while let Some((parent, n, d)) = stack.last().cloned() {
        let children = w.read_dir(d)?;
        let mut pushed = false;
        for (cn, ci, ct) in children {
            if ct == 2 {
                stack.push((d, cn, ci));
                pushed = true;
                break;
            }
            w.unlink(d, &cn)?;
        }
        if !pushed {
            w.rmdir(parent, &n)?;
            stack.pop();
        }
    }
    Ok(())
}

/// `tet-host mkdir [-p] [-m MODE] IMAGE PATH...`.
pub fn mkdir(a: &MkdirArgs) -> Exit {
    let mode = a.mode.unwrap_or(0o755);
    with_writer("mkdir", &a.image, a.node.node_id, |w| {
        for p in &a.paths {
            let p = p.as_bytes();
            let what = format!("cannot create directory '{}'", show(p));
            if a.parents {
                let mut cur = 1u64;
                for c in p
                    .split(|b| *b == b'/')
                    .filter(|c| !c.is_empty() && *c != b".")
                {
                    cur = match w.lookup(cur, c) {
                        Ok(i)
                            if w.stat(i)
                                .is_ok_and(|r| r.mode.get() & 0o170_000 == 0o040_000) =>
                        {
                            i
                        }
                        Ok(_) => return Err(fail(what, &WriteError::Errno(Errno::EEXIST))),
                        Err(e) if e.errno() == Errno::ENOENT => w
                            .mkdir(cur, c, mode, 0, 0)
                            .map_err(|e| fail(what.clone(), &e))?,
                        Err(e) => return Err(fail(what, &e)),
                    };
                }
            } else {
                let (dir, name) = w.resolve_parent(p).map_err(|e| fail(what.clone(), &e))?;
                w.mkdir(dir, &name, mode, 0, 0)
                    .map_err(|e| fail(what, &e))?;
            }
        }
        Ok(())
    })
}

/// `tet-host mv IMAGE SRC DEST`.
pub fn mv(a: &MvArgs) -> Exit {
    with_writer("mv", &a.image, a.node.node_id, |w| {
        let (s, d) = (a.src.as_bytes(), a.dest.as_bytes());
        let what = format!("cannot move '{}' to '{}'", show(s), show(d));
        let (sdir, sname) = w.resolve_parent(s).map_err(|e| fail(what.clone(), &e))?;
        w.lookup(sdir, &sname).map_err(|e| fail(what.clone(), &e))?;
        let (ddir, dname) = place(w, d, base(s)).map_err(|e| fail(what.clone(), &e))?;
        w.rename(sdir, &sname, ddir, &dname)
            .map_err(|e| fail(what, &e))
    })
}

/// `tet-host ln [-s] IMAGE TARGET LINK`.
pub fn ln(a: &LnArgs) -> Exit {
    with_writer("ln", &a.image, a.node.node_id, |w| {
        let (t, l) = (a.target.as_bytes(), a.link.as_bytes());
        let kind = if a.symbolic {
            "symbolic link"
        } else {
            "hard link"
        };
        let what = format!("failed to create {kind} '{}'", show(l));
        let (dir, name) = place(w, l, base(t)).map_err(|e| fail(what.clone(), &e))?;
        if a.symbolic {
            w.symlink(dir, &name, t, 0, 0)
                .map(|_| ())
                .map_err(|e| fail(what, &e))
        } else {
            let ino = w
                .resolve(t)
                .map_err(|e| fail(format!("failed to access '{}'", show(t)), &e))?;
            w.link(ino, dir, &name).map_err(|e| fail(what, &e))
        }
    })
}

/// `tet-host chmod IMAGE MODE PATH...`.
pub fn chmod(a: &ChmodArgs) -> Exit {
    with_writer("chmod", &a.image, a.node.node_id, |w| {
        for p in &a.paths {
            let p = p.as_bytes();
            let ino = w
                .resolve(p)
                .map_err(|e| fail(format!("cannot access '{}'", show(p)), &e))?;
            let attr = SetAttr {
                mode: Some(a.mode),
                ..SetAttr::default()
            };
            w.set_attr(ino, &attr)
                .map_err(|e| fail(format!("changing permissions of '{}'", show(p)), &e))?;
        }
        Ok(())
    })
}

/// `tet-host chown IMAGE OWNER[:GROUP] PATH...`.
pub fn chown(a: &ChownArgs) -> Exit {
    let (u, g) = match a.owner.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (a.owner.as_str(), None),
    };
    let num = |s: &str| -> Result<Option<u32>, ()> {
        if s.is_empty() {
            Ok(None)
        } else {
            s.parse().map(Some).map_err(|_| ())
        }
    };
    let (Ok(uid), Ok(gid)) = (num(u), g.map_or(Ok(None), num)) else {
        crate::say!("chown: invalid user: '{}' (numeric UID[:GID])", a.owner);
        return Exit::Usage;
    };
    with_writer("chown", &a.image, a.node.node_id, |w| {
        for p in &a.paths {
            let p = p.as_bytes();
            let ino = w
                .resolve(p)
                .map_err(|e| fail(format!("cannot access '{}'", show(p)), &e))?;
            let attr = SetAttr {
                uid,
                gid,
                ..SetAttr::default()
            };
            w.set_attr(ino, &attr)
                .map_err(|e| fail(format!("changing ownership of '{}'", show(p)), &e))?;
        }
        Ok(())
    })
}

/// `tet-host touch [-c] [-d SECS] IMAGE PATH...`.
pub fn touch(a: &TouchArgs) -> Exit {
    let t = a
        .date
        .map_or_else(now_ns, |s| s.saturating_mul(1_000_000_000));
    with_writer("touch", &a.image, a.node.node_id, |w| {
        for p in &a.paths {
            let p = p.as_bytes();
            let what = format!("cannot touch '{}'", show(p));
            let ino = match w.resolve(p) {
                Ok(i) => i,
                Err(e) if e.errno() == Errno::ENOENT && a.no_create => continue,
                Err(e) if e.errno() == Errno::ENOENT => {
                    let (dir, name) = w.resolve_parent(p).map_err(|e| fail(what.clone(), &e))?;
                    w.create(dir, &name, 0o644, 0, 0)
                        .map_err(|e| fail(what.clone(), &e))?
                }
                Err(e) => return Err(fail(what, &e)),
            };
            let attr = SetAttr {
                atime_ns: Some(t),
                mtime_ns: Some(t),
                ..SetAttr::default()
            };
            w.set_attr(ino, &attr).map_err(|e| fail(what, &e))?;
        }
        Ok(())
    })
}

/// `tet-host truncate IMAGE -s SIZE PATH...`.
pub fn truncate(a: &TruncateArgs) -> Exit {
    with_writer("truncate", &a.image, a.node.node_id, |w| {
        for p in &a.paths {
            let p = p.as_bytes();
            let what = format!("cannot open '{}' for writing", show(p));
            let ino = match w.resolve(p) {
                Ok(i) => i,
                Err(e) if e.errno() == Errno::ENOENT => {
                    let (dir, name) = w.resolve_parent(p).map_err(|e| fail(what.clone(), &e))?;
                    w.create(dir, &name, 0o644, 0, 0)
                        .map_err(|e| fail(what.clone(), &e))?
                }
                Err(e) => return Err(fail(what, &e)),
            };
            w.truncate(ino, a.size).map_err(|e| fail(what, &e))?;
        }
        Ok(())
    })
}

/// `tet-host setfattr IMAGE (-n NAME [-v VALUE] | -x NAME) PATH`.
pub fn setfattr(a: &SetfattrArgs) -> Exit {
    with_writer("setfattr", &a.image, a.node.node_id, |w| {
        let p = a.path.as_bytes();
        let ino = w.resolve(p).map_err(|e| fail(show(p), &e))?;
        match (&a.name, &a.remove) {
            (_, Some(x)) => w
                .remove_xattr(ino, x.as_bytes())
                .map_err(|e| match e.errno() {
                    Errno::ENODATA => {
                        Fail(format!("{}: No such attribute", show(p)), Exit::Operational)
                    }
                    _ => fail(show(p), &e),
                }),
            (Some(n), None) => {
                let v = a.value.as_ref().map_or(&b""[..], |v| v.as_bytes());
                w.set_xattr(ino, n.as_bytes(), v)
                    .map_err(|e| fail(show(p), &e))
            }
            (None, None) => Err(Fail("no attribute named (-n or -x)".into(), Exit::Usage)),
        }
    })
}

/// `tet-host getfattr IMAGE PATH...`: every extended attribute, as `getfattr -d`
/// prints them (values quoted, bytes outside printable ASCII octal-escaped).
pub fn getfattr(a: &GetfattrArgs) -> Exit {
    use tet_core::cetrafs::{Buffers, Fs};
    let dev = match FileDevice::open(&a.image) {
        Ok(d) => d,
        Err(e) => {
            crate::say!("getfattr: cannot open '{}': {e}", a.image.display());
            return Exit::Operational;
        }
    };
    crate::cetrafs::with_journal(&dev, false, |d| {
        let mut bufs = Buffers::new();
        let fs = match Fs::open_for_read(d, &mut bufs.data) {
            Ok(f) => f,
            Err(e) => {
                crate::say!("getfattr: {}: cannot mount: {e}", a.image.display());
                return Exit::of(e.kind.category());
            }
        };
        for p in &a.paths {
            let pb = p.as_bytes();
            let ino = match fs.resolve(pb, &mut bufs) {
                Ok(i) => i,
                Err(e) => {
                    crate::say!("getfattr: {}: {e}", show(pb));
                    return Exit::Operational;
                }
            };
            let mut lines = Vec::new();
            let r = fs.xattrs(&ino, &mut bufs, |x| {
                if a.name.as_ref().is_none_or(|n| n.as_bytes() == x.key()) {
                    lines.push(format!("{}=\"{}\"", show(x.key()), escape(x.value())));
                }
                std::ops::ControlFlow::Continue(())
            });
            if let Err(e) = r {
                crate::say!("getfattr: {}: {e}", show(pb));
                return Exit::of(e.kind.category());
            }
            if a.name.is_some() && lines.is_empty() {
                crate::say!("getfattr: {}: No such attribute", show(pb));
                return Exit::Operational;
            }
            if !lines.is_empty() {
                println!("# file: {}", show(pb.strip_prefix(b"/").unwrap_or(pb)));
                for l in lines {
                    println!("{l}");
                }
                println!();
            }
        }
        Exit::Clean
    })
}

fn escape(v: &[u8]) -> String {
    let mut s = String::new();
    for b in v {
        match b {
            b'"' | b'\\' => {
                s.push('\\');
                s.push(char::from(*b));
            }
            0x20..=0x7E => s.push(char::from(*b)),
            _ => s.push_str(&format!("\\{b:03o}")),
        }
    }
    s
}
