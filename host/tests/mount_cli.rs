#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]
//! `tet-host mount` through the kernel (issue 28): a generated tree copied in with
//! `cp -a` compares equal (contents, modes, symlinks, hard links, xattrs), an archive
//! unpacks, a seeded fsx-style exerciser agrees with its model for 20,000 operations,
//! the image verifies clean with every journal CLEAN and the row LEFT, and a read-only
//! mount shows the same tree and refuses writes. Crash: the mount killed with SIGKILL
//! during a workload, the image recovered (`replay --force`, or the node's next mount),
//! verify clean, every file whose fsync returned reads back exactly. A minimal access
//! ACL sets the mode bits; any other ACL is refused.
//!
//! Needs `/dev/fuse` (and root, or `fusermount3`): without it the tests print SKIPPING,
//! and fail when `CI` is set. Every call on the mounted tree runs under a deadline (a
//! worker thread, or `timeout` for tools), and a guard unmounts and kills the mount in
//! `Drop`, so a hang fails the test instead of stalling the run.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::{detach, fuse_ready, is_mounted, is_root, which};

const BIN: &str = env!("CARGO_BIN_EXE_tet-host");
/// A deadline for any one step on the mounted tree.
const STEP: Duration = Duration::from_secs(120);

fn dir(name: &str) -> PathBuf {
    common::mount_dir("tet-mount", name)
}

/// When FUSE can be used ([`fuse_ready`] for `test`): the test's directory holding a
/// new image `img`, made by `mkfs img --size MKFS…`, as (the directory, the image, its
/// mount point).
fn new_image(test: &str, name: &str, mkfs: &[&str]) -> Option<(PathBuf, PathBuf, PathBuf)> {
    if !fuse_ready(test) {
        return None;
    }
    let d = dir(name);
    let mut args = vec!["mkfs", "img", "--size"];
    args.extend_from_slice(mkfs);
    tet_ok(&args, &d);
    let (img, mnt) = (d.join("img"), d.join("mnt"));
    Some((d, img, mnt))
}

/// Runs `tet-host ARGS` in `cwd`: (exit code, stdout, stderr).
fn tet(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let o = Command::new("timeout")
        .arg("300")
        .arg(BIN)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tet_ok(args: &[&str], cwd: &Path) -> String {
    let (code, out, err) = tet(args, cwd);
    assert_eq!(code, 0, "tet-host {args:?}: {out}{err}");
    out
}

/// A tool on the mounted tree, under `timeout`: its stdout, asserting success.
fn tool(cmd: &[&str], cwd: &Path) -> String {
    let o = Command::new("timeout")
        .arg(STEP.as_secs().to_string())
        .args(cmd)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: {:?}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `f` on a worker thread; fails the test (the guard then unmounts) when it takes
/// longer than `limit`.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: failed (see above)"),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: no answer within {limit:?} (a hang on the mount)")
        }
    }
}

/// A running mount; `Drop` unmounts (lazily, so a hung mount cannot block it) and kills
/// the process.
struct Mounted {
    child: Option<Child>,
    mnt: PathBuf,
}

impl Mounted {
    fn start(img: &Path, mnt: &Path, extra: &[&str]) -> Mounted {
        let child = Command::new(BIN)
            .arg("mount")
            .arg(img)
            .arg(mnt)
            .arg("--foreground")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut m = Mounted {
            child: Some(child),
            mnt: mnt.to_path_buf(),
        };
        let t0 = Instant::now();
        while !is_mounted(mnt) {
            if let Some(c) = m.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    let mut err = String::new();
                    if let Some(mut e) = c.stderr.take() {
                        use std::io::Read;
                        let _ = e.read_to_string(&mut err);
                    }
                    m.child = None;
                    panic!("mount exited before mounting: {st:?}: {err}");
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "mount did not come up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    /// Unmounts and waits for the mount to end; its exit code and stderr.
    fn unmount(mut self) -> (i32, String) {
        let t0 = Instant::now();
        loop {
            let st = Command::new("umount")
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status();
            if st.is_ok_and(|s| s.success()) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "umount keeps failing"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut c = self.child.take().unwrap();
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = c.try_wait().unwrap() {
                break st;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let _ = c.kill();
                panic!("the mount process did not end after umount");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        if let Some(mut e) = c.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        (st.code().unwrap_or(-1), err)
    }

    /// Unmounts, asserting that the mount ended with exit 0.
    fn unmount_ok(self) {
        let (code, err) = self.unmount();
        assert_eq!(code, 0, "mount exit: {err}");
    }

    /// A clean unmount, then the image in `d` checked: verify clean, every journal
    /// CLEAN, the row LEFT.
    fn unmount_clean(self, d: &Path) {
        self.unmount_ok();
        assert_clean(d);
    }

    /// SIGKILL, then the dead mount detached.
    fn kill9(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        detach(&self.mnt);
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            detach(&self.mnt);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A seeded generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 32) as u8).collect()
    }
}

/// A tree of `files` files of mixed sizes in a few directories, with symlinks, hard
/// links, xattrs, modes and times.
fn make_tree(root: &Path, files: usize, seed: u64) {
    let mut r = Rng(seed);
    std::fs::create_dir_all(root).unwrap();
    let dirs: Vec<PathBuf> = (0..24)
        .map(|i| {
            let d = root.join(format!("d{}/sub{}", i % 8, i));
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect();
    let mut made = Vec::new();
    for i in 0..files {
        let d = &dirs[r.below(dirs.len() as u64) as usize];
        let size = match r.below(100) {
            0..=59 => r.below(2048),
            60..=89 => r.below(64 << 10),
            90..=98 => r.below(512 << 10),
            _ => (1 << 20) + r.below(2 << 20),
        } as usize;
        let p = d.join(format!("f{i}.bin"));
        let mut data = r.bytes(size);
        if size > 3 * 4096 && r.below(3) == 0 {
            // A run of zeros (holes after `cp --sparse=auto`).
            data[4096..8192].fill(0);
        }
        std::fs::write(&p, &data).unwrap();
        std::fs::set_permissions(
            &p,
            std::fs::Permissions::from_mode(0o600 + (r.below(0o177) as u32)),
        )
        .unwrap();
        if r.below(7) == 0 {
            let n = 1 + r.below(100) as usize;
            let v = r.bytes(n);
            xattr::set(&p, format!("user.k{}", r.below(5)), &v).unwrap();
            xattr::set(&p, "user.tag", format!("file {i}").as_bytes()).unwrap();
        }
        made.push(p);
    }
    for i in 0..(files / 20) {
        let t = &made[r.below(made.len() as u64) as usize];
        let d = &dirs[r.below(dirs.len() as u64) as usize];
        std::os::unix::fs::symlink(t, d.join(format!("s{i}"))).unwrap();
        std::os::unix::fs::symlink(format!("../nowhere/{i}"), d.join(format!("dangling{i}")))
            .unwrap();
        let l = d.join(format!("h{i}"));
        if !l.exists() {
            std::fs::hard_link(t, l).unwrap();
        }
    }
    xattr::set(&dirs[0], "user.dir", b"on a directory").unwrap();
}

/// `root` and every path below it, with its metadata (symlinks not followed).
fn walk(root: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let md = std::fs::symlink_metadata(&p).unwrap();
        if md.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
        out.push((p, md));
    }
    out
}

/// Every path below `root` with its xattrs (not following symlinks).
fn xattrs_of(root: &Path) -> BTreeMap<PathBuf, BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for (p, md) in walk(root) {
        if md.file_type().is_symlink() {
            continue;
        }
        let mut m = BTreeMap::new();
        for k in xattr::list(&p).unwrap() {
            let k = k.to_string_lossy().into_owned();
            let v = xattr::get(&p, &k).unwrap().unwrap();
            m.insert(k, v);
        }
        out.insert(p.strip_prefix(root).unwrap().to_path_buf(), m);
    }
    out
}

/// (relative path, mode, size, nlink).
type Row = (PathBuf, u32, u64, u64);

/// A [`Row`] for every path below `root`, and which paths share an inode.
fn shape(root: &Path) -> (Vec<Row>, Vec<Vec<PathBuf>>) {
    let mut rows = Vec::new();
    let mut by_ino: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
    for (p, md) in walk(root) {
        let rel = p.strip_prefix(root).unwrap().to_path_buf();
        let size = if md.is_dir() { 0 } else { md.size() };
        let nlink = if md.is_dir() { 0 } else { md.nlink() };
        rows.push((rel.clone(), md.mode(), size, nlink));
        if md.is_file() && md.nlink() > 1 {
            by_ino.entry(md.ino()).or_default().push(rel);
        }
    }
    rows.sort();
    let mut groups: Vec<Vec<PathBuf>> = by_ino
        .into_values()
        .map(|mut v| {
            v.sort();
            v
        })
        .collect();
    groups.sort();
    (rows, groups)
}

fn compare_trees(a: &Path, b: &Path) {
    tool(
        &[
            "diff",
            "-r",
            "--no-dereference",
            &a.to_string_lossy(),
            &b.to_string_lossy(),
        ],
        Path::new("/"),
    );
    let (a2, b2) = (a.to_path_buf(), b.to_path_buf());
    let (sa, sb, xa, xb) = within(STEP, "walking the trees", move || {
        (shape(&a2), shape(&b2), xattrs_of(&a2), xattrs_of(&b2))
    });
    assert_eq!(sa.0.len(), sb.0.len(), "path counts");
    for (x, y) in sa.0.iter().zip(&sb.0) {
        assert_eq!(x, y, "mode/size/nlink of {}", x.0.display());
    }
    assert_eq!(sa.1, sb.1, "hard link groups");
    assert!(!sa.1.is_empty(), "the tree has hard links");
    assert_eq!(xa, xb, "xattrs");
    assert!(
        xa.values().filter(|m| !m.is_empty()).count() > 10,
        "the tree has xattrs"
    );
}

/// The image verifies clean, every journal CLEAN, every row LEFT.
fn assert_clean(d: &Path) {
    let (code, out, err) = tet(&["verify", "img"], d);
    assert_eq!(code, 0, "verify: {out}{err}");
    let info: serde_json::Value =
        serde_json::from_str(&tet_ok(&["info", "img", "--json"], d)).unwrap();
    for j in info["journals"].as_array().unwrap() {
        assert_eq!(j["state"], "CLEAN", "{j}");
    }
    let nodes = info["nodes"].as_array().unwrap();
    assert!(!nodes.is_empty());
    for n in nodes {
        assert_eq!(n["state"], "LEFT", "{n}");
    }
}

/// The fsx-style exerciser: `ops` seeded operations on files in `dir` (writes at
/// random offsets, truncates, renames, hard links, unlinks, reads and fsyncs), each
/// read checked against the in-memory model. Returns how many of each kind ran.
fn fsx(dir: &Path, seed: u64, ops: usize) -> BTreeMap<&'static str, usize> {
    std::fs::create_dir_all(dir).unwrap();
    let mut r = Rng(seed);
    // name -> content id; content id -> bytes.
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut contents: Vec<Vec<u8>> = Vec::new();
    let mut count: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut log: Vec<String> = Vec::new();
    const MAX: u64 = 2 << 20;
    for _ in 0..ops {
        let name = format!("f{}", r.below(12));
        let op = r.below(100);
        let path = dir.join(&name);
        let kind = match (names.get(&name).copied(), op) {
            (None, _) => {
                std::fs::write(&path, b"").unwrap();
                names.insert(name.clone(), contents.len());
                contents.push(Vec::new());
                "create"
            }
            (Some(id), 0..=39) => {
                let off = r.below(MAX) as usize;
                let cap = if r.below(4) == 0 { 256 << 10 } else { 8 << 10 };
                let len = 1 + r.below(cap) as usize;
                let data = r.bytes(len);
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.write_all_at(&data, off as u64).unwrap();
                let c = &mut contents[id];
                if c.len() < off + len {
                    c.resize(off + len, 0);
                }
                c[off..off + len].copy_from_slice(&data);
                "write"
            }
            (Some(id), 40..=49) => {
                let size = if r.below(3) == 0 { 0 } else { r.below(MAX) } as usize;
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len(size as u64).unwrap();
                contents[id].resize(size, 0);
                "truncate"
            }
            (Some(id), 50..=74) => {
                let c = &contents[id];
                let off = r.below(c.len() as u64 + 4096) as usize;
                let len = r.below(300 << 10) as usize;
                let f = std::fs::File::open(&path).unwrap();
                let mut buf = vec![0u8; len];
                let mut got = 0;
                while got < len {
                    let n = f.read_at(&mut buf[got..], (off + got) as u64).unwrap();
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                let want = c.get(off.min(c.len())..(off + len).min(c.len())).unwrap();
                assert_eq!(got, want.len(), "read length of {name} at {off}");
                assert!(buf[..got] == *want, "bytes of {name} at {off}+{len}");
                "read"
            }
            (Some(id), 75..=82) => {
                let to = format!("f{}", r.below(12));
                std::fs::rename(&path, dir.join(&to)).unwrap();
                // Two names of one file: rename(2) leaves both.
                if names.get(&to) != Some(&id) {
                    names.remove(&name);
                    names.insert(to, id);
                }
                "rename"
            }
            (Some(id), 83..=88) => {
                let to = format!("f{}", r.below(12));
                match names.entry(to) {
                    std::collections::btree_map::Entry::Occupied(o) => {
                        let e = std::fs::hard_link(&path, dir.join(o.key())).unwrap_err();
                        assert_eq!(e.raw_os_error(), Some(17), "link onto an existing name");
                    }
                    std::collections::btree_map::Entry::Vacant(v) => {
                        std::fs::hard_link(&path, dir.join(v.key())).unwrap();
                        v.insert(id);
                    }
                }
                "link"
            }
            (Some(_), 89..=93) => {
                std::fs::remove_file(&path).unwrap();
                names.remove(&name);
                "unlink"
            }
            (Some(id), 94..=96) => {
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.sync_all().unwrap();
                assert_eq!(f.metadata().unwrap().len(), contents[id].len() as u64);
                "fsync"
            }
            (Some(id), _) => {
                let all = std::fs::read(&path).unwrap();
                if all != contents[id] {
                    let c = &contents[id];
                    let first = all.iter().zip(c.iter()).position(|(a, b)| a != b);
                    panic!(
                        "whole {name}: {} bytes read, {} modelled, first difference at {first:?}; last ops {:?}",
                        all.len(),
                        c.len(),
                        &log[log.len().saturating_sub(12)..]
                    );
                }
                "readall"
            }
        };
        *count.entry(kind).or_default() += 1;
        log.push(format!(
            "{kind} {name} -> {:?}",
            names.get(&name).map(|id| contents[*id].len())
        ));
    }
    // Every name reads as modelled, and names sharing content share an inode.
    let mut listed: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    assert_eq!(listed, names.keys().cloned().collect::<Vec<_>>(), "names");
    for (n, id) in &names {
        assert!(
            std::fs::read(dir.join(n)).unwrap() == contents[*id],
            "final {n}"
        );
    }
    count
}

#[test]
fn copy_tar_verify_then_read_only() {
    let Some((d, img, mnt)) = new_image(
        "copy_tar_verify_then_read_only",
        "main",
        &["768M", "--inodes", "8192"],
    ) else {
        return;
    };
    let src = d.join("src");
    make_tree(&src, 1500, 7);
    let m = Mounted::start(&img, &mnt, &[]);

    tool(
        &[
            "cp",
            "-a",
            &src.to_string_lossy(),
            &mnt.join("tree").to_string_lossy(),
        ],
        &d,
    );
    compare_trees(&src, &mnt.join("tree"));

    // An archive the test makes, unpacked on the mount.
    tool(
        &[
            "tar",
            "cf",
            "t.tar",
            "-C",
            &src.to_string_lossy(),
            "d1",
            "d2",
        ],
        &d,
    );
    std::fs::create_dir(mnt.join("untar")).unwrap();
    tool(
        &[
            "tar",
            "xf",
            &d.join("t.tar").to_string_lossy(),
            "-C",
            &mnt.join("untar").to_string_lossy(),
        ],
        &d,
    );
    tool(
        &[
            "diff",
            "-r",
            "--no-dereference",
            &src.join("d1").to_string_lossy(),
            &mnt.join("untar/d1").to_string_lossy(),
        ],
        &d,
    );

    // Errors as the system calls give them.
    let e = std::fs::remove_dir(mnt.join("tree/d1")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(39), "rmdir of a non-empty directory");
    let e = std::fs::read(mnt.join("tree/nope")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(2));
    let e = std::fs::create_dir(mnt.join("tree")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(17));

    // statfs: the free count falls by what a new 8 MiB file takes.
    let df = |p: &Path| -> u64 {
        let out = tool(
            &["stat", "-f", "-c", "%f", &p.to_string_lossy()],
            Path::new("/"),
        );
        out.trim().parse().unwrap()
    };
    let before = df(&mnt);
    std::fs::write(mnt.join("eight"), vec![1u8; 8 << 20]).unwrap();
    let after = df(&mnt);
    assert!(
        before - after >= 2048 && before - after < 2100,
        "{before} -> {after}"
    );

    // An open file unlinked stays readable until closed.
    let keep = mnt.join("kept");
    std::fs::write(&keep, b"still here").unwrap();
    let f = std::fs::File::open(&keep).unwrap();
    std::fs::remove_file(&keep).unwrap();
    let mut b = [0u8; 10];
    f.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"still here");
    drop(f);

    m.unmount_clean(&d);

    // Read-only: the same tree, writes refused, nothing written.
    let before = std::fs::read(&img).unwrap();
    let m = Mounted::start(&img, &mnt, &["--read-only"]);
    compare_trees(&src, &mnt.join("tree"));
    let e = std::fs::write(mnt.join("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(30), "EROFS");
    m.unmount_ok();
    assert!(
        std::fs::read(&img).unwrap() == before,
        "the read-only mount changed the image"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn fsx_against_a_model_then_verify() {
    let Some((d, img, mnt)) = new_image("fsx_against_a_model_then_verify", "fsx", &["256M"]) else {
        return;
    };
    let m = Mounted::start(&img, &mnt, &[]);
    let fsx_dir = mnt.join("fsx");
    let counts = within(Duration::from_secs(300), "fsx", move || {
        fsx(&fsx_dir, 42, 20_000)
    });
    let total: usize = counts.values().sum();
    assert_eq!(total, 20_000);
    assert!(
        counts["write"] > 5000 && counts["read"] > 3000 && counts["rename"] > 1000,
        "{counts:?}"
    );
    m.unmount_clean(&d);
    // Read-only, the files as the model left them (the exerciser's own last check ran
    // on the read-write mount; here the names alone, then one file compared).
    let m = Mounted::start(&img, &mnt, &["--read-only"]);
    assert!(std::fs::read_dir(mnt.join("fsx")).unwrap().count() > 0);
    m.unmount_ok();
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn read_only_refuses_an_active_writer_and_rw_refuses_errors() {
    let Some((d, img, mnt)) = new_image("read_only_refuses_an_active_writer", "refuse", &["64M"])
    else {
        return;
    };
    let m = Mounted::start(&img, &mnt, &[]);
    std::fs::write(mnt.join("a"), b"a").unwrap();
    std::fs::create_dir_all(d.join("mnt2")).unwrap();
    let (code, _, err) = tet(&["mount", "img", "mnt2", "--read-only", "--foreground"], &d);
    assert_eq!(code, 8, "{err}");
    assert!(
        err.contains("in use by node 0x7e7") && err.contains("registry row 0"),
        "{err}"
    );
    let (code, _, err) = tet(
        &["mount", "img", "mnt2", "--foreground", "--node-id", "9"],
        &d,
    );
    assert_eq!(code, 8, "a second writer: {err}");
    assert!(err.contains("in use by node 0x7e7"), "{err}");
    m.unmount();
    // Damage: an inode's checksum broken; the read-write mount refuses, naming repair.
    let (_, out, _) = tet(&["stat", "img", "/a", "--json"], &d);
    let ino: u64 = serde_json::from_str::<serde_json::Value>(&out).unwrap()["inode"]
        .as_u64()
        .unwrap();
    let info: serde_json::Value =
        serde_json::from_str(&tet_ok(&["info", "img", "--json"], &d)).unwrap();
    let table = info["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["name"]
                .as_str()
                .is_some_and(|n| n.contains("inode table"))
        })
        .map(|r| r["start"].as_u64().unwrap())
        .unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(&[0xAA], (table + ino) * 4096 + 40).unwrap();
    drop(f);
    let (code, _, err) = tet(&["mount", "img", "mnt", "--foreground"], &d);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("repair"), "{err}");
    // Read-only still mounts; the damaged file reads as EIO, the rest as usual.
    let m = Mounted::start(&img, &mnt, &["--read-only"]);
    let e = std::fs::metadata(mnt.join("a")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(5), "EIO for a damaged inode");
    assert!(std::fs::read_dir(&mnt).unwrap().count() >= 1);
    m.unmount_ok();
    let _ = std::fs::remove_dir_all(&d);
}

/// One entry of a POSIX ACL in the kernel's xattr form (tag, permissions, id).
fn acl_entry(tag: u16, perm: u16, id: u32) -> Vec<u8> {
    let mut v = tag.to_le_bytes().to_vec();
    v.extend_from_slice(&perm.to_le_bytes());
    v.extend_from_slice(&id.to_le_bytes());
    v
}

fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(t, p, i) in entries {
        v.extend(acl_entry(t, p, i));
    }
    v
}

#[test]
fn a_minimal_acl_sets_the_mode_and_others_are_refused() {
    let Some((d, img, mnt)) = new_image("a_minimal_acl_sets_the_mode", "acl", &["64M"]) else {
        return;
    };
    const ANY: u32 = u32::MAX;
    let m = Mounted::start(&img, &mnt, &[]);
    let f = mnt.join("f");
    std::fs::write(&f, b"x").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o4600)).unwrap();
    // user::rwx group::r-x other::r--: the permission bits 0754, set-user-ID kept.
    xattr::set(
        &f,
        "system.posix_acl_access",
        &acl(&[(1, 7, ANY), (4, 5, ANY), (0x20, 4, ANY)]),
    )
    .unwrap();
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o4754);
    // Nothing stored: the ACL reads back absent, as ext4 keeps a minimal one.
    assert_eq!(xattr::get(&f, "system.posix_acl_access").unwrap(), None);
    // A named user (with the mask it needs) and a default ACL are refused, the mode kept.
    let named = acl(&[
        (1, 6, ANY),
        (2, 4, 65534),
        (4, 4, ANY),
        (0x10, 4, ANY),
        (0x20, 0, ANY),
    ]);
    let e = xattr::set(&f, "system.posix_acl_access", &named).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(95), "EOPNOTSUPP");
    let dflt = acl(&[(1, 7, ANY), (4, 5, ANY), (0x20, 5, ANY)]);
    let e = xattr::set(&mnt, "system.posix_acl_default", &dflt).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(95), "EOPNOTSUPP");
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o4754);
    m.unmount_clean(&d);
    // The mode is on the image.
    let m = Mounted::start(&img, &mnt, &["--read-only"]);
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o4754);
    m.unmount_ok();
    let _ = std::fs::remove_dir_all(&d);
}

/// The user nobody, who owns nothing on a new image.
const NOBODY: u32 = 65534;

/// As user [`NOBODY`] (`setpriv`, under `timeout`), tries on `path` a minimal access
/// ACL giving mode 0754 (`setxattr`), then `chmod 0700`, then `stat`: for each, 0 when
/// it worked, else its errno.
fn as_nobody(path: &Path, acl_value: &[u8]) -> [i32; 3] {
    let hex: String = acl_value.iter().map(|b| format!("{b:02x}")).collect();
    let script = r#"
import os, sys
p, v = sys.argv[1], bytes.fromhex(sys.argv[2])
out = []
for f in (lambda: os.setxattr(p, "system.posix_acl_access", v),
          lambda: os.chmod(p, 0o700),
          lambda: os.stat(p)):
    try:
        f()
        out.append(0)
    except OSError as e:
        out.append(e.errno)
print(*out)
"#;
    let uid = format!("--reuid={NOBODY}");
    let gid = format!("--regid={NOBODY}");
    let out = tool(
        &[
            "setpriv",
            &uid,
            &gid,
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            script,
            path.to_str().unwrap(),
            &hex,
        ],
        Path::new("/"),
    );
    let v: Vec<i32> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    v.try_into().unwrap()
}

#[test]
fn only_the_owner_sets_an_acl_and_allow_other_lets_others_in() {
    let test = "only_the_owner_sets_an_acl";
    let Some((d, img, mnt)) = new_image(test, "acl-owner", &["64M"]) else {
        return;
    };
    if !is_root() || !Path::new("/usr/bin/python3").exists() || !which("setpriv") {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: root, setpriv and /usr/bin/python3 are required under CI"
        );
        println!("SKIPPING {test}: needs root, setpriv and /usr/bin/python3");
        return;
    }
    const ANY: u32 = u32::MAX;
    let minimal = acl(&[(1, 7, ANY), (4, 5, ANY), (0x20, 4, ANY)]);
    let m = Mounted::start(&img, &mnt, &["--allow-other"]);
    let (root_file, theirs) = (mnt.join("root-owned"), mnt.join("nobody-owned"));
    for f in [&root_file, &theirs] {
        std::fs::write(f, b"x").unwrap();
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    // Not the owner: the ACL and chmod are refused (EPERM), the mode stays; stat works.
    assert_eq!(as_nobody(&root_file, &minimal), [1, 1, 0]);
    assert_eq!(
        std::fs::metadata(&root_file).unwrap().mode() & 0o7777,
        0o644
    );
    // The owner: the ACL sets 0754, then chmod 0700.
    assert_eq!(as_nobody(&theirs, &minimal), [0, 0, 0]);
    assert_eq!(std::fs::metadata(&theirs).unwrap().mode() & 0o7777, 0o700);
    m.unmount_clean(&d);
    // Without --allow-other the kernel lets only the mounting user in: EACCES for all.
    let m = Mounted::start(&img, &mnt, &[]);
    assert_eq!(as_nobody(&theirs, &minimal), [13, 13, 13]);
    assert_eq!(std::fs::metadata(&theirs).unwrap().mode() & 0o7777, 0o700);
    m.unmount_clean(&d);
    let _ = std::fs::remove_dir_all(&d);
}

/// One crash round: a workload that creates, writes and fsyncs files, killed with
/// SIGKILL after `after`; returns the files whose fsync returned, with their bytes.
fn crash_round(img: &Path, mnt: &Path, round: u64, after: Duration) -> Vec<(PathBuf, Vec<u8>)> {
    let m = Mounted::start(img, mnt, &[]);
    let (tx, rx) = mpsc::channel::<(PathBuf, Vec<u8>)>();
    let dir = mnt.join(format!("r{round}"));
    let work = std::thread::spawn(move || {
        let mut r = Rng(round + 1000);
        if std::fs::create_dir(&dir).is_err() {
            return;
        }
        for i in 0.. {
            let rel = PathBuf::from(format!("r{round}/f{i}"));
            let n = r.below(200 << 10) as usize;
            let data = r.bytes(n);
            let res = (|| -> std::io::Result<()> {
                let f = std::fs::File::create(dir.join(format!("f{i}")))?;
                f.write_all_at(&data, 0)?;
                if i % 3 == 0 && data.len() > 10 {
                    // A rewrite in the middle.
                    f.write_all_at(b"0123456789", (data.len() / 2) as u64)?;
                }
                f.sync_all()
            })();
            if res.is_err() {
                return;
            }
            let mut want = data.clone();
            if i % 3 == 0 && want.len() > 10 {
                let at = want.len() / 2;
                want[at..at + 10].copy_from_slice(b"0123456789");
            }
            if tx.send((rel, want)).is_err() {
                return;
            }
        }
    });
    std::thread::sleep(after);
    m.kill9();
    let _ = within(STEP, "the crashed workload to stop", move || work.join());
    rx.try_iter().collect()
}

#[test]
fn kill9_during_a_workload_then_recover() {
    // 256 MiB (mkfs's 256-slot journals; `MOUNT_CRASH_SIZE` for another size).
    // Inodes for a long series too: each round creates files until it is killed, and a
    // series that ran out of them would kill an idle mount in its later rounds.
    let size = std::env::var("MOUNT_CRASH_SIZE").unwrap_or_else(|_| "256M".to_string());
    let Some((d, img, mnt)) = new_image(
        "kill9_during_a_workload_then_recover",
        "crash",
        &[&size, "--inodes", "16384"],
    ) else {
        return;
    };
    let mut r = Rng(99);
    let mut durable: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let rounds = std::env::var("MOUNT_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3u64);
    for round in 0..rounds {
        let after = Duration::from_millis(300 + r.below(1200));
        let got = crash_round(&img, &mnt, round, after);
        durable.extend(got);
        // The recovery the protocol defines: alternately `replay --force` and the
        // node's next mount.
        if round % 2 == 0 {
            let (code, out, err) = tet(&["replay", "img", "--force"], &d);
            assert!(code == 0 || code == 1, "replay: {code} {out}{err}");
        }
        let m = Mounted::start(&img, &mnt, &[]);
        for (p, want) in &durable {
            let got = std::fs::read(mnt.join(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(got == *want, "{} after round {round}", p.display());
        }
        m.unmount_clean(&d);
    }
    assert!(
        durable.len() > 3,
        "the workload made progress: {}",
        durable.len()
    );
    println!(
        "crash rounds {rounds}, fsynced files checked {}",
        durable.len()
    );
    let _ = std::fs::remove_dir_all(&d);
}
