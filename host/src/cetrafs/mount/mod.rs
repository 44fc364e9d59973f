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
    #[command(flatten)]
    pub node: Node,
}

/// `tet-host mount`.
pub fn mount(a: &MountArgs) -> Exit {
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
    let backend = if a.read_only {
        match read_only(&a.image, dev) {
            Ok(b) => b,
            Err(exit) => return exit,
        }
    } else {
        match join_checked("mount", &a.image, a.node.node_id, dev) {
            Ok(mut w) => {
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
    let state = Arc::new(Mutex::new(State::new(backend)));
    let exit = serve(a, Arc::clone(&state));
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
            crate::say!(
                "mount: {}: node {:#x} ({}) is ACTIVE in registry row {}: it may have the \
                 image mounted read-write; unmount it there, or if that node crashed, \
                 recover it with `tet-host replay {} --node-id {:#x} --force` (or mount \
                 read-write as that node)",
                image.display(),
                r.node_id,
                String::from_utf8_lossy(&r.hostname),
                r.row,
                image.display(),
                r.node_id
            );
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
fn serve(a: &MountArgs, state: Arc<Mutex<State>>) -> Exit {
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
    let mut options = vec![
        MountOption::FSName(a.image.display().to_string()),
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
    let fsys = CetraFuse::new(state, &a.image, Arc::clone(&notifier));
    let session = match fuser::spawn_mount(fsys, &a.mountpoint, &config) {
        Ok(s) => {
            let _ = notifier.set(s.notifier());
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
    match session.take().map(fuser::BackgroundSession::join) {
        Some(Err(e)) => {
            crate::say!("mount: the FUSE session ended with an error: {e}");
            Exit::Operational
        }
        _ => Exit::Clean,
    }
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
/// closed; this returns once the mount point shows the mount, or with the child's exit
/// when it ends first (its message already printed on the shared standard error).
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
    args.push("--foreground".into());
    args.push("--node-id".into());
    args.push(a.node.node_id.to_string().into());
    let before = mounted_on(&a.mountpoint);
    let mut child = match std::process::Command::new(exe)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            crate::say!("mount: cannot start the mount: {e}");
            return Exit::Operational;
        }
    };
    let t0 = Instant::now();
    while t0.elapsed() < START_WAIT {
        if let Ok(Some(status)) = child.try_wait() {
            return match status.code() {
                Some(0) => Exit::Clean,
                Some(4) => Exit::Problems,
                Some(16) => Exit::Usage,
                _ => Exit::Operational,
            };
        }
        if mounted_on(&a.mountpoint) > before {
            return Exit::Clean;
        }
        std::thread::sleep(Duration::from_millis(20));
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

/// How many FUSE mounts `/proc/self/mountinfo` shows on `mountpoint`.
fn mounted_on(mountpoint: &Path) -> usize {
    let want = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return 0;
    };
    info.lines()
        .filter(|l| {
            let mut f = l.split(' ');
            let at = f.nth(4).map(unescape);
            at.as_deref() == Some(want.as_os_str().to_string_lossy().as_ref())
                && l.split(" - ").nth(1).is_some_and(|t| t.starts_with("fuse"))
        })
        .count()
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
