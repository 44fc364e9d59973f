//! `tet-host mount IMAGE MOUNTPOINT [--read-only] [--foreground]`: an image served
//! through FUSE (the pure-Rust `fuser`; as root it mounts through `/dev/fuse` itself,
//! otherwise through `fusermount3`). Read-only through the journal overlay, never
//! writing the image; read-write as one node with the library writer (docs/cetrafs.md
//! section 15: the row `ACTIVE` while mounted, `LEFT` after a clean unmount).
//!
//! The mount ends cleanly on `umount`/`fusermount3 -u`, Ctrl-C, SIGTERM or SIGHUP: the
//! session ends, files unlinked while open are freed, the writer leaves. Without
//! `--foreground` the command starts the mount in a process of its own and returns once
//! the mount is up (as `fuse2fs` and other FUSE tools do), or with its error.

mod fs;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use fuser::{Config, MountOption};
use tet_alloc::cetrafs::{journal, view};
use tet_core::cetrafs::{Buffers, Fs, OverlayDevice};

use self::fs::{Backend, CetraFuse, State};
use crate::cetrafs::device::FileDevice;
use crate::cetrafs::write::{exit_of, join_checked, Node};
use crate::Exit;

/// How long the starting command waits for the mount to come up.
const START_WAIT: Duration = Duration::from_secs(60);

/// Metadata changes wait at most this long in the pending transaction before the
/// timer commits them (ext4's default commit interval): a power cut or `kill -9`
/// loses at most the changes of the last [`COMMIT_AFTER`] plus one tick.
const COMMIT_AFTER: Duration = Duration::from_secs(4);

/// How often the commit timer looks.
const COMMIT_TICK: Duration = Duration::from_secs(1);

/// `mount IMAGE MOUNTPOINT`.
#[derive(clap::Args, Clone, Debug)]
pub struct MountArgs {
    /// The image.
    pub image: PathBuf,
    /// An existing directory to mount it on.
    pub mountpoint: PathBuf,
    /// Read only: never writes the image (opened read-only); refused while a node's
    /// registry row is ACTIVE.
    #[arg(long = "read-only", short = 'r')]
    pub read_only: bool,
    /// Stay in the foreground until unmounted (Ctrl-C unmounts); without it the
    /// command returns once the mount is up and the mount runs in the background.
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Let every user of the machine reach the mount (FUSE's `allow_other`, as
    /// `fuse2fs -o allow_other`); each one's access is then checked against the modes
    /// and owners on the image. Without it only the user who mounted (and not even
    /// root) can. A user other than root needs `user_allow_other` in /etc/fuse.conf.
    #[arg(long = "allow-other")]
    pub allow_other: bool,
    /// Where the background mount writes its messages once it is up (appended);
    /// without it they go nowhere. Messages before the mount is up (why it was
    /// refused) always reach this command's standard error; with --foreground and no
    /// --log every message does.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Set by the command that starts the mount in the background: let go of standard
    /// error once the mount is up.
    #[arg(long, hide = true)]
    pub detached: bool,
    #[command(flatten)]
    pub node: Node,
}

/// `tet-host mount`.
pub fn mount(a: &MountArgs) -> Exit {
    match std::fs::metadata(&a.mountpoint) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            crate::say!(
                "mount: {}: not a directory (the mount point must be an existing directory)",
                a.mountpoint.display()
            );
            return Exit::Usage;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::say!(
                "mount: {}: no such directory (the mount point must be an existing directory)",
                a.mountpoint.display()
            );
            return Exit::Usage;
        }
        Err(e) => {
            crate::say!("mount: {}: {e}", a.mountpoint.display());
            return Exit::Usage;
        }
    }
    // A log that cannot be written is refused before anything is mounted.
    if let Some(log) = &a.log {
        if let Err(e) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            crate::say!("mount: --log {}: {e}", log.display());
            return Exit::Usage;
        }
    }
    if !a.foreground {
        return start_in_background(a);
    }
    let dev = match if a.read_only {
        FileDevice::open(&a.image)
    } else {
        FileDevice::open_rw(&a.image)
    } {
        Ok(d) => d,
        Err(e) => {
            crate::say!("mount: cannot open '{}': {e}", a.image.display());
            return Exit::Operational;
        }
    };
    // The session runs on its own thread for as long as the process lives.
    let dev: &'static FileDevice = Box::leak(Box::new(dev));
    // The row's hold (docs/cetrafs.md section 15, "Holding an image"), for as long as
    // this process lives; a read-only mount holds nothing.
    let hold;
    let backend = if a.read_only {
        // Writers are kept out while it reads (a read-only mount caches nothing it
        // could check again, and a writer would change blocks under it).
        hold = match crate::cetrafs::hold::Hold::read(&a.image) {
            Ok(h) => h,
            Err(e) => {
                crate::say!("mount: {}: {e}", a.image.display());
                return Exit::Operational;
            }
        };
        match read_only(&a.image, dev) {
            Ok(b) => b,
            Err(exit) => return exit,
        }
    } else {
        match join_checked("mount", &a.image, a.node.node_id, dev) {
            Ok((mut w, h)) => {
                hold = h;
                // Metadata operations share transactions until a read through the
                // device, a data write, fsync or the unmount commits them.
                if let Err(e) = w.set_batch(true) {
                    crate::say!("mount: {}: {e}", a.image.display());
                    return exit_of(&e);
                }
                Backend::ReadWrite(Box::new(w))
            }
            Err(exit) => return exit,
        }
    };
    // Told it is leaving when the session ends (`CetraFuse`'s drop): a command that
    // meets the hold then waits for the leave instead of refusing. Let go of when this
    // function returns, after the leave.
    let hold = hold.map(Arc::new);
    let state = Arc::new(Mutex::new(State::new(backend)));
    let exit = serve(a, Arc::clone(&state), hold.clone());
    let st = match Arc::try_unwrap(state) {
        Ok(m) => m.into_inner().unwrap_or_else(PoisonError::into_inner),
        Err(_) => {
            crate::say!("mount: {}: the session did not end", a.image.display());
            return Exit::Operational;
        }
    };
    finish(&a.image, st).max_with(exit)
}

trait MaxWith {
    fn max_with(self, other: Exit) -> Exit;
}

impl MaxWith for Exit {
    /// The worse of two exits (the first non-clean one).
    fn max_with(self, other: Exit) -> Exit {
        if matches!(self, Exit::Clean) {
            other
        } else {
            self
        }
    }
}

/// The read-only backend: refused while a node is `ACTIVE`; dirty journals' committed
/// slots read in place of their targets (the overlay lives as long as the process).
fn read_only(image: &Path, dev: &'static FileDevice) -> Result<Backend, Exit> {
    let cannot = |e: tet_core::Error| {
        crate::say!(
            "mount: {}: cannot mount: {}",
            image.display(),
            crate::cetrafs::describe(&e)
        );
        Exit::of(e.kind.category())
    };
    let mut bufs = Buffers::new();
    // Group tables that fail are read without, as the reading commands do (section 2,
    // check 7: a reader does not depend on them).
    let tables = match Fs::open(dev, &mut bufs.data) {
        Err(e)
            if e.kind.category() == tet_core::Category::Corrupt
                && Fs::open_for_read(dev, &mut bufs.data).is_ok() =>
        {
            crate::cetrafs::warn_tables(image, &e);
            false
        }
        _ => true,
    };
    let open = |d, buf: &mut tet_core::block::Block| {
        if tables {
            Fs::open(d, buf)
        } else {
            Fs::open_for_read(d, buf)
        }
    };
    let fs = open(dev, &mut bufs.data).map_err(cannot)?;
    match view::active_row(&fs, &mut bufs.data) {
        Ok(None) => {}
        Ok(Some(r)) => {
            match crate::cetrafs::hold::holder(image) {
                Ok(Some(h @ crate::cetrafs::hold::Holder::Node { .. })) => crate::say!(
                    "mount: {}: in use by {h}: a read-only mount would read a filesystem \
                     changing under it; unmount it there first",
                    image.display()
                ),
                _ => crate::say!(
                    "mount: {}: node {:#x} ({}) is ACTIVE in registry row {} but no process \
                     holds it: it crashed. `tet-host replay {}` recovers it (or mount \
                     read-write as that node)",
                    image.display(),
                    r.node_id,
                    String::from_utf8_lossy(&r.hostname),
                    r.row,
                    image.display()
                ),
            }
            return Err(Exit::Operational);
        }
        Err(e) => {
            crate::say!(
                "mount: {}: the node registry does not read: {}",
                image.display(),
                crate::cetrafs::describe(&e)
            );
            return Err(Exit::of(e.kind.category()));
        }
    }
    let table = journal::committed_slots(&fs, &mut bufs).unwrap_or_default();
    let table = Box::leak(Box::new(table));
    let ov = match fs.overlay(table, &mut bufs) {
        Ok(ov) => ov,
        Err(e) => {
            crate::say!(
                "mount: {}: the journals do not replay: {} (`tet-host verify` says more)",
                image.display(),
                crate::cetrafs::describe(&e)
            );
            return Err(Exit::Problems);
        }
    };
    let ov = Box::leak(Box::new(ov));
    let over = OverlayDevice::new(dev, ov);
    let fs = if tables {
        Fs::open(over, &mut bufs.data)
    } else {
        Fs::open_for_read(over, &mut bufs.data)
    }
    .map_err(cannot)?;
    Ok(Backend::ReadOnly(Box::new(fs)))
}

/// Mounts and serves until unmounted or signalled.
fn serve(
    a: &MountArgs,
    state: Arc<Mutex<State>>,
    hold: Option<Arc<crate::cetrafs::hold::Hold>>,
) -> Exit {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            crate::say!("mount: cannot handle signal {sig}: {e}");
            return Exit::Operational;
        }
    }
    // The image's absolute path names the mount (`tet-host umount` finds it there).
    let fsname = std::fs::canonicalize(&a.image).unwrap_or_else(|_| a.image.clone());
    let mut options = vec![
        MountOption::FSName(fsname.display().to_string()),
        MountOption::Subtype("cetrafs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    options.push(if a.read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    let mut config = Config::default();
    config.mount_options = options;
    if a.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    let notifier = Arc::new(OnceLock::new());
    let fsys = CetraFuse::new(Arc::clone(&state), &a.image, Arc::clone(&notifier), hold);
    let session = match fuser::spawn_mount(fsys, &a.mountpoint, &config) {
        Ok(s) => {
            let _ = notifier.set(s.notifier());
            if a.detached || a.log.is_some() {
                if let Err(e) = detach_stderr(a.log.as_deref()) {
                    crate::report::warn(format!("mount: the log: {e}"));
                    // The starting command waits for standard error to be let go of.
                    let _ = detach_stderr(None);
                }
            }
            s
        }
        Err(e) => {
            crate::say!(
                "mount: cannot mount {} on {}: {e}",
                a.image.display(),
                a.mountpoint.display()
            );
            return Exit::Operational;
        }
    };
    let timer_stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = Arc::clone(&timer_stop);
        let image = a.image.clone();
        std::thread::spawn(move || commit_timer(&state, &stop, &image))
    };
    let mut session = Some(session);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let Some(s) = session.as_ref() else {
            break;
        };
        if s.guard.is_finished() {
            break;
        }
        if stop.swap(false, Ordering::SeqCst) {
            // Unmount; a busy mount point stays mounted and the mount goes on.
            match unmount(&a.mountpoint) {
                Ok(()) => {}
                Err(e) => crate::report::warn(format!(
                    "{}: not unmounted ({e}); close what uses it and try again",
                    a.mountpoint.display()
                )),
            }
        }
    }
    let joined = session.take().map(fuser::BackgroundSession::join);
    timer_stop.store(true, Ordering::SeqCst);
    let _ = timer.join();
    match joined {
        Some(Err(e)) => {
            crate::say!("mount: the FUSE session ended with an error: {e}");
            Exit::Operational
        }
        _ => Exit::Clean,
    }
}

/// Commits the read-write mount's pending metadata once it has waited
/// [`COMMIT_AFTER`], until `stop`.
fn commit_timer(state: &Mutex<State>, stop: &AtomicBool, image: &Path) {
    let mut waiting_since: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(COMMIT_TICK);
        let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
        let Backend::ReadWrite(w) = &mut st.backend else {
            return;
        };
        if !w.has_pending() {
            waiting_since = None;
            continue;
        }
        let since = *waiting_since.get_or_insert_with(Instant::now);
        if since.elapsed().saturating_add(COMMIT_TICK) >= COMMIT_AFTER {
            waiting_since = None;
            if let Err(e) = w.sync() {
                crate::report::warn(format!(
                    "{}: the timed commit failed, its changes are lost: {e}",
                    image.display()
                ));
                st.timed_commit_failed = true;
            }
        }
    }
}

/// Points this process's standard error at `log` (appended) or at `/dev/null`, so
/// that the command that started the mount, and whatever reads its standard error,
/// sees it end (`out=$(tet-host mount …)` returns).
fn detach_stderr(log: Option<&Path>) -> std::io::Result<()> {
    let to = match log {
        Some(p) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)?,
        None => std::fs::OpenOptions::new().write(true).open("/dev/null")?,
    };
    rustix::stdio::dup2_stderr(&to)?;
    Ok(())
}

/// Unmounts `mountpoint` (the kernel then ends the session): `umount` as root, else
/// `fusermount3 -u`.
fn unmount(mountpoint: &Path) -> std::io::Result<()> {
    let run = |prog: &str, args: &[&std::ffi::OsStr]| {
        std::process::Command::new(prog)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
    };
    let mp = mountpoint.as_os_str();
    if run("fusermount3", &["-u".as_ref(), mp]).is_ok_and(|s| s.success()) {
        return Ok(());
    }
    match run("umount", &[mp]) {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(std::io::Error::other(format!("umount: {s}"))),
        Err(e) => Err(e),
    }
}

/// After the session: files unlinked while open freed, the writer's leave (row
/// `LEFT`, journal clean).
fn finish(image: &Path, st: State) -> Exit {
    let kept: Vec<u64> = st.kept.iter().copied().collect();
    match st.backend {
        Backend::ReadOnly(_) => Exit::Clean,
        Backend::ReadWrite(mut w) => {
            for ino in kept {
                if let Err(e) = w.release(ino) {
                    crate::report::warn(format!(
                        "{}: inode {ino} stays in /lost+found: {e}",
                        image.display()
                    ));
                }
            }
            match w.leave() {
                Ok(()) => Exit::Clean,
                Err(e) => {
                    crate::say!("mount: {}: leaving: {e}", image.display());
                    exit_of(&e)
                }
            }
        }
    }
}

/// Without `--foreground`: the same command with `--foreground` in a process group of
/// its own (so the terminal's Ctrl-C does not reach it), standard input and output
/// closed, standard error a pipe this command relays; this returns once the mount is
/// up (the child let go of the pipe: its later messages go to `--log` or nowhere), or
/// with the child's exit when it ends first.
fn start_in_background(a: &MountArgs) -> Exit {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            crate::say!("mount: cannot find this program to start the mount: {e}");
            return Exit::Operational;
        }
    };
    let mut args: Vec<OsString> = vec![
        "mount".into(),
        a.image.clone().into(),
        a.mountpoint.clone().into(),
    ];
    if a.read_only {
        args.push("--read-only".into());
    }
    if a.allow_other {
        args.push("--allow-other".into());
    }
    if let Some(log) = &a.log {
        // Absolute: the mount's working directory may change.
        args.push("--log".into());
        args.push(
            std::path::absolute(log)
                .unwrap_or_else(|_| log.clone())
                .into(),
        );
    }
    args.push("--foreground".into());
    args.push("--detached".into());
    args.push("--node-id".into());
    args.push(a.node.node_id.to_string().into());
    let before = mounted_on(&a.mountpoint);
    let mut child = match std::process::Command::new(exe)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            crate::say!("mount: cannot start the mount: {e}");
            return Exit::Operational;
        }
    };
    // The child's messages until it is up, relayed; the pipe's end means it is up or
    // has ended.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    if let Some(mut from) = child.stderr.take() {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut std::io::stderr());
            let _ = done_tx.send(());
        });
    }
    // The pipe ends when the child is up (it let go of it) or has ended: then the
    // kernel shows the mount, or the child's exit is its answer.
    let t0 = Instant::now();
    let mut piped = true;
    while t0.elapsed() < START_WAIT {
        piped = piped && done_rx.try_recv().is_err();
        if let Ok(Some(status)) = child.try_wait() {
            // Its last words relayed before this process ends.
            if piped {
                let _ = done_rx.recv_timeout(Duration::from_secs(5));
            }
            return match status.code() {
                Some(0) => Exit::Clean,
                Some(4) => Exit::Problems,
                Some(16) => Exit::Usage,
                _ => Exit::Operational,
            };
        }
        if !piped && mounted_on(&a.mountpoint) > before {
            return Exit::Clean;
        }
        std::thread::sleep(Duration::from_millis(if piped { 20 } else { 2 }));
    }
    crate::say!(
        "mount: {} did not appear on {} within {} s (the mount process {} goes on)",
        a.image.display(),
        a.mountpoint.display(),
        START_WAIT.as_secs(),
        child.id()
    );
    Exit::Operational
}

/// `umount MOUNTPOINT`.
#[derive(clap::Args, Clone, Debug)]
pub struct UmountArgs {
    /// Where a `tet-host mount` is mounted.
    pub mountpoint: PathBuf,
    /// How long to wait, in seconds, for the mount process to write back and leave.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
}

/// `tet-host umount MOUNTPOINT`: unmounts, then waits until the mount process has
/// let go of the image (docs/mount.md). Exit 0 when it left cleanly (its registry row
/// `LEFT`), 4 when it ended without leaving (the row still `ACTIVE`: `tet-host replay`
/// recovers it), 8 when it could not be unmounted or did not end within `--timeout`,
/// 16 when MOUNTPOINT is not a cetrafs FUSE mount.
pub fn umount(a: &UmountArgs) -> Exit {
    let Some((image, read_only)) = mounted_image(&a.mountpoint) else {
        crate::say!(
            "umount: {}: not a tet-host mount (no cetrafs FUSE mount there)",
            a.mountpoint.display()
        );
        return Exit::Usage;
    };
    let holder = match crate::cetrafs::hold::holder(&image) {
        Ok(Some(crate::cetrafs::hold::Holder::Node { row, node_id, .. })) => Some((row, node_id)),
        _ => None,
    };
    if let Err(e) = unmount(&a.mountpoint) {
        crate::say!(
            "umount: {}: not unmounted ({e}); close what uses it and try again",
            a.mountpoint.display()
        );
        return Exit::Operational;
    }
    // A read-only mount writes nothing: unmounted is done.
    if read_only {
        println!(
            "{}: unmounted (read-only, {})",
            a.mountpoint.display(),
            image.display()
        );
        return Exit::Clean;
    }
    // A read-write mount whose process no longer held the image had died.
    let Some((row, node_id)) = holder else {
        let crashed = crate::cetrafs::hold::crashed_rows(&image).unwrap_or_default();
        if crashed.is_empty() {
            println!(
                "{}: unmounted ({})",
                a.mountpoint.display(),
                image.display()
            );
            return Exit::Clean;
        }
        crate::say!(
            "umount: {}: unmounted, but its mount process had ended without leaving {} \
             (killed?): `tet-host replay {}` recovers it",
            a.mountpoint.display(),
            image.display(),
            image.display()
        );
        return Exit::Problems;
    };
    match crate::cetrafs::hold::wait_row_free(&image, row, Duration::from_secs(a.timeout)) {
        Ok(true) => {}
        Ok(false) => {
            crate::say!(
                "umount: {}: unmounted, but the mount process of node {node_id:#x} is still \
                 writing back {} after {} s; it goes on (wait for it, or run `tet-host \
                 umount` again)",
                a.mountpoint.display(),
                image.display(),
                a.timeout
            );
            return Exit::Operational;
        }
        Err(e) => {
            crate::say!("umount: {}: {e}", image.display());
            return Exit::Operational;
        }
    }
    match crate::cetrafs::hold::row_state(&image, row) {
        Ok(Some(tet_core::cetrafs::NodeState::Left)) => {
            println!(
                "{}: unmounted; node {node_id:#x} left {} cleanly",
                a.mountpoint.display(),
                image.display()
            );
            Exit::Clean
        }
        _ => {
            crate::say!(
                "umount: {}: the mount process of node {node_id:#x} ended without leaving \
                 {} (registry row {row} is not LEFT): `tet-host replay {}` recovers it",
                a.mountpoint.display(),
                image.display(),
                image.display()
            );
            Exit::Problems
        }
    }
}

/// The sources of the FUSE mounts on `mountpoint`, oldest first, as
/// `/proc/self/mountinfo` lists them (`fuse.cetrafs` through fusermount3, plain `fuse`
/// when root mounts directly; `mount` sets the source to the image's absolute path).
fn fuse_mounts_on(mountpoint: &Path) -> Vec<(PathBuf, bool)> {
    let want = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let want = want.as_os_str().to_string_lossy();
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let at = f.nth(4).map(unescape)?;
            let read_only = f.next()?.split(',').any(|o| o == "ro");
            let (_, tail) = l.split_once(" - ")?;
            let mut t = tail.split(' ');
            let (kind, source) = (t.next()?, t.next()?);
            (at == want && kind.starts_with("fuse"))
                .then(|| (PathBuf::from(unescape(source)), read_only))
        })
        .collect()
}

/// How many FUSE mounts there are on `mountpoint`.
fn mounted_on(mountpoint: &Path) -> usize {
    fuse_mounts_on(mountpoint).len()
}

/// The image the newest FUSE mount on `mountpoint` serves, and whether it is read-only.
fn mounted_image(mountpoint: &Path) -> Option<(PathBuf, bool)> {
    fuse_mounts_on(mountpoint).pop()
}

/// A mountinfo field with its octal escapes (`\040` for a space) decoded.
fn unescape(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0usize;
    while let Some(c) = b.get(i) {
        let oct = b
            .get(i.saturating_add(1)..i.saturating_add(4))
            .and_then(|d| {
                std::str::from_utf8(d)
                    .ok()
                    .and_then(|t| u8::from_str_radix(t, 8).ok())
            });
        match (c, oct) {
            (b'\\', Some(v)) => {
                out.push(v);
                i = i.saturating_add(4);
            }
            _ => {
                out.push(*c);
                i = i.saturating_add(1);
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
