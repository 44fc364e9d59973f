#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]
//! Holding an image (docs/cetrafs.md section 15, "Holding an image"; issue 44) through
//! the real binary: of two writing commands or mounts started together behind a
//! barrier exactly one wins and the other says why; a mount refuses a second mount
//! and every writing command whatever the node id, while reading commands warn;
//! `tet-host umount` returns once the mount has left; a plain `umount` followed at once
//! by a writing command waits for the leave; the background mount lets go of the
//! caller's standard error; a mount point that is not a directory is refused; a
//! `kill -9` of the mount six seconds after the last change loses nothing; a killed
//! `put` is recovered by `replay` alone, and `verify` calls its trailing counts a
//! warning.
//!
//! The tier (`TET_TEST_TIER`, common::rounds) sets the rounds per pair: 10 (5 with a
//! mount) in the short tier, 200 in the long one. The tests that mount need
//! `/dev/fuse` and print SKIPPING without it (failing under CI).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

mod common;
use common::{detach, fuse_ready, rounds};

const BIN: &str = env!("CARGO_BIN_EXE_tet-host");

fn dir(name: &str) -> PathBuf {
    common::mount_dir("tet-hold", name)
}

fn tet_in(cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).current_dir(cwd).stdin(Stdio::null());
    c
}

/// Runs `tet-host ARGS` in `cwd`: (exit code, stdout, stderr).
fn tet(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let o = tet_in(cwd, args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn ok(cwd: &Path, args: &[&str]) -> String {
    let (code, out, err) = tet(cwd, args);
    assert_eq!(code, 0, "tet-host {args:?}: {out}{err}");
    out
}

/// The verify of `img` in `cwd` is clean, and every registry row is LEFT.
fn assert_clean(cwd: &Path, img: &str) {
    let (code, out, err) = tet(cwd, &["verify", img]);
    assert_eq!(code, 0, "verify: {out}{err}");
    assert!(out.contains(": clean"), "{out}{err}");
    let info = ok(cwd, &["info", img]);
    assert!(!info.contains(" ACTIVE "), "{info}");
}

/// A writing command of the pair runs, and what it leaves when it wins.
struct Writing {
    name: &'static str,
    args: &'static [&'static str],
    /// A path that exists (`true`) or not after it won.
    effect: Option<(&'static str, bool)>,
}

/// Every writing command, each over its own paths of the template image.
const WRITING: &[Writing] = &[
    Writing {
        name: "put",
        args: &["put", "img", "src", "/p"],
        effect: Some(("/p/one", true)),
    },
    Writing {
        name: "rm",
        args: &["rm", "img", "/r"],
        effect: Some(("/r", false)),
    },
    Writing {
        name: "mkdir",
        args: &["mkdir", "img", "/newdir"],
        effect: Some(("/newdir", true)),
    },
    Writing {
        name: "mv",
        args: &["mv", "img", "/m", "/m2"],
        effect: Some(("/m2", true)),
    },
    Writing {
        name: "ln",
        args: &["ln", "img", "/l", "/l2"],
        effect: Some(("/l2", true)),
    },
    Writing {
        name: "chmod",
        args: &["chmod", "img", "600", "/c"],
        effect: None,
    },
    Writing {
        name: "chown",
        args: &["chown", "img", "7:7", "/o"],
        effect: None,
    },
    Writing {
        name: "touch",
        args: &["touch", "img", "/t"],
        effect: Some(("/t", true)),
    },
    Writing {
        name: "truncate",
        args: &["truncate", "img", "-s", "10", "/s"],
        effect: None,
    },
    Writing {
        name: "setfattr",
        args: &["setfattr", "img", "-n", "user.k", "-v", "v", "/x"],
        effect: None,
    },
    Writing {
        name: "replay",
        args: &["replay", "img"],
        effect: None,
    },
    Writing {
        name: "tune",
        args: &["tune", "img", "--label", "won"],
        effect: None,
    },
    Writing {
        name: "repair",
        args: &["repair", "img", "-y"],
        effect: None,
    },
    Writing {
        name: "mkfs",
        args: &["mkfs", "img", "--size", "16M", "--force"],
        // A new filesystem: the template's files are gone.
        effect: Some(("/r", false)),
    },
];

/// The image every round starts from: the paths the commands change.
fn template(d: &Path) -> Vec<u8> {
    std::fs::create_dir_all(d.join("src")).unwrap();
    std::fs::write(d.join("src/one"), b"1\n").unwrap();
    ok(d, &["mkfs", "t.img", "--size", "16M", "--inodes", "128"]);
    for p in ["/r", "/m", "/l", "/c", "/o", "/s", "/x"] {
        ok(d, &["touch", "t.img", p]);
    }
    let img = std::fs::read(d.join("t.img")).unwrap();
    std::fs::remove_file(d.join("t.img")).unwrap();
    img
}

fn exists(cwd: &Path, path: &str) -> bool {
    tet(cwd, &["stat", "img", path]).0 == 0
}

/// The two processes of a race, started together behind a barrier: each one's exit
/// code, and its standard output and error. Whichever takes the image holds it until
/// the other has ended (`TET_HOST_TEST_HOLD_UNTIL`), so the loser always meets the
/// hold however the two are scheduled.
fn race(cwd: &Path, a: &[&str], b: &[&str]) -> [(i32, String); 2] {
    let release = cwd.join("release");
    let _ = std::fs::remove_file(&release);
    let gate = Arc::new(Barrier::new(2));
    let spawn = |args: &[&str], k: usize| {
        let gate = Arc::clone(&gate);
        let out = cwd.join(format!("race{k}.out"));
        let mut c = tet_in(cwd, args);
        c.env("TET_HOST_TEST_HOLD_UNTIL", &release)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(cwd.join(format!("race{k}.err"))).unwrap());
        std::thread::spawn(move || {
            gate.wait();
            c.spawn().unwrap()
        })
    };
    let (ta, tb) = (spawn(a, 0), spawn(b, 1));
    let mut kids = [ta.join().unwrap(), tb.join().unwrap()];
    let mut codes: [Option<i32>; 2] = [None, None];
    let t0 = Instant::now();
    // The first to end (the loser) lets the other go on.
    while codes.iter().all(Option::is_none) && t0.elapsed() < Duration::from_secs(60) {
        for (k, c) in kids.iter_mut().enumerate() {
            if let Some(s) = c.try_wait().unwrap() {
                codes[k] = Some(s.code().unwrap_or(-1));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    std::fs::write(&release, b"").unwrap();
    let mut got = Vec::new();
    for (k, c) in kids.iter_mut().enumerate() {
        let code = match codes[k] {
            Some(code) => code,
            None => c.wait().unwrap().code().unwrap_or(-1),
        };
        let text = format!(
            "{}{}",
            std::fs::read_to_string(cwd.join(format!("race{k}.out"))).unwrap(),
            std::fs::read_to_string(cwd.join(format!("race{k}.err"))).unwrap()
        );
        got.push((code, text));
    }
    let b = got.pop().unwrap();
    let a = got.pop().unwrap();
    [a, b]
}

/// The loser's exit and message: refused with 8, naming what holds the image.
fn assert_refused(who: &str, code: i32, err: &str) {
    assert_eq!(code, 8, "{who}: {err}");
    assert!(err.contains("in use by"), "{who}: exit {code}: [{err}]");
}

#[test]
fn of_two_writing_commands_started_together_exactly_one_wins() {
    let d = dir("pairs");
    let base = template(&d);
    let per_pair = rounds(10, 200);
    let mut pairs = Vec::new();
    for (i, a) in WRITING.iter().enumerate() {
        for b in &WRITING[i..] {
            pairs.push((a, b));
        }
    }
    // Three races at a time (each mostly waits out its winner's hold).
    let jobs: Vec<_> = pairs
        .chunks(pairs.len().div_ceil(3))
        .enumerate()
        .map(|(k, chunk)| {
            let chunk: Vec<_> = chunk.to_vec();
            let base = base.clone();
            let root = d.join(format!("w{k}"));
            std::thread::spawn(move || {
                std::fs::create_dir_all(root.join("src")).unwrap();
                std::fs::write(root.join("src/one"), b"1\n").unwrap();
                let mut wins = [0usize; 2];
                for (a, b) in chunk {
                    for round in 0..per_pair {
                        std::fs::write(root.join("img"), &base).unwrap();
                        let [ra, rb] = race(&root, a.args, b.args);
                        let what = format!("{} vs {} round {round}", a.name, b.name);
                        let winner = match (ra.0, rb.0) {
                            (0, _) => {
                                assert_refused(&what, rb.0, &rb.1);
                                wins[0] += 1;
                                a
                            }
                            (_, 0) => {
                                assert_refused(&what, ra.0, &ra.1);
                                wins[1] += 1;
                                b
                            }
                            _ => panic!("{what}: nobody won: {ra:?} {rb:?}"),
                        };
                        assert_clean(&root, "img");
                        if let Some((path, there)) = winner.effect {
                            assert_eq!(exists(&root, path), there, "{what}: {path}");
                        }
                    }
                }
                wins
            })
        })
        .collect();
    let mut wins = [0usize; 2];
    for j in jobs {
        let w = j.join().unwrap();
        wins[0] += w[0];
        wins[1] += w[1];
    }
    println!(
        "{} pairs x {per_pair} rounds: first started won {}, second {}",
        pairs.len(),
        wins[0],
        wins[1]
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A mount started in the background (`tet-host mount`), unmounted with `tet-host
/// umount` on drop when still there.
struct Mount {
    mnt: PathBuf,
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new(BIN)
            .args(["umount", "--timeout", "30"])
            .arg(&self.mnt)
            .output();
        detach(&self.mnt);
    }
}

fn mounted(mnt: &Path) -> bool {
    common::is_mounted(mnt)
}

#[test]
fn a_mount_and_a_writing_command_started_together_one_wins() {
    if !fuse_ready("a_mount_and_a_writing_command_started_together_one_wins") {
        return;
    }
    let d = dir("mountpairs");
    let base = template(&d);
    std::fs::create_dir_all(d.join("src")).unwrap();
    let per_pair = rounds(5, 200);
    let mount = ["mount", "img", "mnt"];
    let mut others: Vec<Writing> = WRITING
        .iter()
        .map(|w| Writing {
            name: w.name,
            args: w.args,
            effect: w.effect,
        })
        .collect();
    others.push(Writing {
        name: "mount",
        args: &["mount", "img", "mnt"],
        effect: None,
    });
    for Writing { name, args, effect } in others {
        for round in 0..per_pair {
            std::fs::write(d.join("img"), &base).unwrap();
            let [rm, ro] = race(&d, &mount, args);
            let what = format!("mount vs {name} round {round}");
            let guard = Mount { mnt: d.join("mnt") };
            match (rm.0, ro.0) {
                (0, _) => {
                    assert_refused(&what, ro.0, &ro.1);
                    assert!(mounted(&d.join("mnt")), "{what}");
                    // The mount holds it: reading commands warn.
                    let (code, _, err) = tet(&d, &["ls", "img", "/"]);
                    assert_eq!(code, 0, "{what}: {err}");
                    assert!(err.contains("in use by node 0x7e7"), "{what}: {err}");
                    let (code, out, err) = tet(&d, &["umount", "mnt"]);
                    assert_eq!(code, 0, "{what}: umount: {out}{err}");
                }
                (_, 0) => {
                    assert_refused(&what, rm.0, &rm.1);
                    if name == "mount" {
                        let (code, out, err) = tet(&d, &["umount", "mnt"]);
                        assert_eq!(code, 0, "{what}: umount: {out}{err}");
                    }
                    assert!(!mounted(&d.join("mnt")), "{what}");
                    if let Some((path, there)) = effect {
                        assert_eq!(exists(&d, path), there, "{what}: {path}");
                    }
                }
                _ => panic!("{what}: nobody won: {rm:?} {ro:?}"),
            }
            drop(guard);
            assert_clean(&d, "img");
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_second_mount_with_the_same_node_id_is_refused_and_nothing_is_lost() {
    if !fuse_ready("a_second_mount_with_the_same_node_id_is_refused_and_nothing_is_lost") {
        return;
    }
    let d = dir("twomounts");
    std::fs::create_dir_all(d.join("m2")).unwrap();
    ok(&d, &["mkfs", "img", "--size", "128M"]);
    ok(&d, &["mount", "img", "mnt"]);
    let _g = Mount { mnt: d.join("mnt") };
    let (code, _, err) = tet(&d, &["mount", "img", "m2"]);
    assert_eq!(code, 8, "{err}");
    assert!(
        err.contains("in use by node 0x7e7") && err.contains("since 20"),
        "{err}"
    );
    assert!(!mounted(&d.join("m2")));
    for i in 0..31 {
        std::fs::write(d.join(format!("mnt/n{i}")), format!("{i}\n")).unwrap();
    }
    // Offline writers, whatever their node id, are refused too; --force changes nothing.
    for args in [
        &["put", "img", "mnt", "/"][..],
        &["mkdir", "img", "/offline"],
        &["mkdir", "img", "/offline", "--node-id", "99"],
        &["tune", "img", "--label", "x", "--force"],
        &["replay", "img", "--force"],
        &["repair", "img", "-y"],
        &["mkfs", "img", "--size", "128M", "--force"],
    ] {
        let (code, _, err) = tet(&d, args);
        assert_eq!(code, 8, "{args:?}: {err}");
        assert!(err.contains("in use by node 0x7e7"), "{args:?}: {err}");
    }
    let (code, _, err) = tet(&d, &["verify", "img"]);
    assert!(
        err.contains("warning") && err.contains("in use by"),
        "{code} {err}"
    );
    let out = ok(&d, &["umount", "mnt"]);
    assert!(out.contains("left") && out.contains("cleanly"), "{out}");
    assert_clean(&d, "img");
    let ls = ok(&d, &["ls", "img", "/"]);
    for i in 0..31 {
        assert!(ls.contains(&format!("n{i}\n")), "n{i}: {ls}");
        assert_eq!(ok(&d, &["cat", "img", &format!("/n{i}")]), format!("{i}\n"));
    }
    assert!(!ls.contains("offline"), "{ls}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn umount_returns_once_the_mount_has_left_and_a_plain_umount_makes_writers_wait() {
    if !fuse_ready("umount_returns_once_the_mount_has_left_and_a_plain_umount_makes_writers_wait") {
        return;
    }
    let d = dir("umount");
    ok(&d, &["mkfs", "img", "--size", "128M"]);
    // `tet-host umount`: a copy taken at once is the left filesystem.
    ok(&d, &["mount", "img", "mnt"]);
    let g = Mount { mnt: d.join("mnt") };
    for i in 0..200 {
        std::fs::create_dir(d.join(format!("mnt/d{i}"))).unwrap();
    }
    ok(&d, &["umount", "mnt"]);
    std::fs::copy(d.join("img"), d.join("copy")).unwrap();
    assert_clean(&d, "copy");
    assert!(ok(&d, &["ls", "copy", "/"]).contains("d199"));
    drop(g);
    // Plain `umount`, then at once a writing command: it waits for the leave.
    ok(&d, &["mount", "img", "mnt"]);
    let g = Mount { mnt: d.join("mnt") };
    for i in 0..200 {
        std::fs::create_dir(d.join(format!("mnt/e{i}"))).unwrap();
    }
    detach(&d.join("mnt"));
    let (code, out, err) = tet(&d, &["mkdir", "img", "/after"]);
    assert_eq!(code, 0, "{out}{err}");
    drop(g);
    assert_clean(&d, "img");
    let ls = ok(&d, &["ls", "img", "/"]);
    assert!(ls.contains("e199") && ls.contains("after"), "{ls}");
    // Not a mount: usage.
    let (code, _, err) = tet(&d, &["umount", "src-nothing"]);
    assert_eq!(code, 16, "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_background_mount_lets_go_of_stderr_and_refuses_a_file_as_mount_point() {
    if !fuse_ready("the_background_mount_lets_go_of_stderr_and_refuses_a_file_as_mount_point") {
        return;
    }
    let d = dir("detach");
    ok(&d, &["mkfs", "img", "--size", "64M"]);
    // `out=$(tet-host mount img mnt 2>&1)`: returns although the mount goes on.
    let (tx, rx) = std::sync::mpsc::channel();
    let cwd = d.clone();
    std::thread::spawn(move || {
        let o = tet_in(&cwd, &["mount", "img", "mnt", "--log", "mount.log"])
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        let _ = tx.send(o);
    });
    let o = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the mount command returns while the mount goes on");
    let _g = Mount { mnt: d.join("mnt") };
    assert!(o.status.success(), "{o:?}");
    assert!(mounted(&d.join("mnt")));
    ok(&d, &["umount", "mnt"]);
    // A mount point that is not a directory.
    std::fs::write(d.join("file"), b"").unwrap();
    for mp in ["img", "file", "missing"] {
        let (code, _, err) = tet(&d, &["mount", "img", mp]);
        assert_eq!(code, 16, "{mp}: {err}");
    }
    assert_clean(&d, "img");
    let _ = std::fs::remove_dir_all(&d);
}

/// The mount's process, started in the foreground so its pid is known.
fn foreground_mount(d: &Path) -> Child {
    let c = tet_in(d, &["mount", "img", "mnt", "--foreground"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !mounted(&d.join("mnt")) {
        assert!(t0.elapsed() < Duration::from_secs(60), "the mount came up");
        std::thread::sleep(Duration::from_millis(20));
    }
    c
}

#[test]
fn a_kill_9_six_seconds_after_the_last_change_loses_nothing() {
    if !fuse_ready("a_kill_9_six_seconds_after_the_last_change_loses_nothing") {
        return;
    }
    let d = dir("kill9");
    ok(&d, &["mkfs", "img", "--size", "64M"]);
    let mut c = foreground_mount(&d);
    let _g = Mount { mnt: d.join("mnt") };
    for i in 0..20 {
        std::fs::create_dir(d.join(format!("mnt/k{i}"))).unwrap();
        std::fs::write(d.join(format!("mnt/k{i}/f")), format!("{i}")).unwrap();
        std::os::unix::fs::symlink("f", d.join(format!("mnt/k{i}/s"))).unwrap();
    }
    std::thread::sleep(Duration::from_secs(6));
    c.kill().unwrap();
    c.wait().unwrap();
    detach(&d.join("mnt"));
    // Recovery is one command, and ends clean.
    let (code, out, err) = tet(&d, &["replay", "img"]);
    assert!(code == 0 || code == 1, "{out}{err}");
    assert_clean(&d, "img");
    for i in 0..20 {
        assert_eq!(ok(&d, &["cat", "img", &format!("/k{i}/f")]), format!("{i}"));
        assert!(exists(&d, &format!("/k{i}/s")), "k{i}/s");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A seeded xorshift64*.
fn next(s: &mut u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[test]
fn a_killed_put_is_recovered_by_replay_alone() {
    let d = dir("killput");
    std::fs::create_dir_all(d.join("src")).unwrap();
    for i in 0..400 {
        std::fs::write(d.join(format!("src/f{i}")), vec![i as u8; 9000]).unwrap();
    }
    ok(&d, &["mkfs", "base", "--size", "128M"]);
    let mut seed = 44u64;
    let (mut stale_seen, mut crashed_seen, mut rounds_done) = (0, 0, 0);
    for round in 0..rounds(4, 40) {
        std::fs::copy(d.join("base"), d.join("img")).unwrap();
        let mut c = tet_in(&d, &["put", "img", "src", "/"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed at a seeded moment after it has joined (it holds the image), however
        // slowly this machine starts it: most kills then land inside its writes.
        let t0 = Instant::now();
        while c.try_wait().unwrap().is_none()
            && !tet(&d, &["ls", "img", "/"]).2.contains("in use by node")
        {
            assert!(t0.elapsed() < Duration::from_secs(60), "the put joined");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(next(&mut seed) % 30));
        let _ = c.kill();
        c.wait().unwrap();
        // Before recovery: no error, only warnings naming `replay`.
        let (code, out, err) = tet(&d, &["verify", "img", "--json"]);
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("round {round}: {e}: {out}{err}"));
        let findings = v["findings"].as_array().cloned().unwrap_or_default();
        for f in &findings {
            assert_eq!(f["severity"], "warning", "round {round}: {f}");
        }
        assert_eq!(code, 0, "round {round}: {out}{err}");
        if findings.iter().any(|f| f["code"] == "free-count-stale") {
            stale_seen += 1;
        }
        // A put killed while joined: verify names the crash and its remedy.
        if ok(&d, &["info", "img"]).contains(" ACTIVE ") {
            crashed_seen += 1;
            assert!(
                err.contains("is ACTIVE but no process holds it")
                    && err.contains("`tet-host replay img` recovers it"),
                "round {round}: {err}"
            );
        }
        // One command recovers it, without a node id.
        let (code, out, err) = tet(&d, &["replay", "img"]);
        assert!(code == 0 || code == 1, "round {round}: {out}{err}");
        assert_clean(&d, "img");
        // And writing goes on.
        ok(&d, &["mkdir", "img", "/next"]);
        assert_clean(&d, "img");
        rounds_done += 1;
    }
    println!(
        "killed put rounds {rounds_done}: killed while joined {crashed_seen}, \
         free-count-stale seen in {stale_seen}"
    );
    assert!(crashed_seen > 0, "no round killed a joined put");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_read_only_mount_keeps_writers_out_and_umount_names_a_dead_mount() {
    if !fuse_ready("a_read_only_mount_keeps_writers_out_and_umount_names_a_dead_mount") {
        return;
    }
    let d = dir("rodead");
    std::fs::create_dir_all(d.join("m2")).unwrap();
    ok(&d, &["mkfs", "img", "--size", "64M"]);
    ok(&d, &["mkdir", "img", "/a"]);
    // Read-only: writers, a read-write mount and a repair into it are refused; a second
    // read-only mount shares it.
    ok(&d, &["mount", "img", "mnt", "--read-only"]);
    let g = Mount { mnt: d.join("mnt") };
    for args in [
        &["mkdir", "img", "/b"][..],
        &["mount", "img", "m2"],
        &["tune", "img", "--label", "x", "--force"],
    ] {
        let (code, _, err) = tet(&d, args);
        assert_eq!(code, 8, "{args:?}: {err}");
        assert!(
            err.contains("in use by a read-only mount"),
            "{args:?}: {err}"
        );
    }
    ok(&d, &["mount", "img", "m2", "--read-only"]);
    let out = ok(&d, &["umount", "m2"]);
    assert!(out.contains("read-only"), "{out}");
    let out = ok(&d, &["umount", "mnt"]);
    assert!(out.contains("read-only"), "{out}");
    drop(g);
    ok(&d, &["mkdir", "img", "/b"]);
    // `repair -o` over an image a mount holds is refused; the mount's files stay.
    ok(&d, &["mkfs", "other", "--size", "64M"]);
    ok(&d, &["mount", "img", "mnt"]);
    let g = Mount { mnt: d.join("mnt") };
    std::fs::write(d.join("mnt/keep"), b"kept\n").unwrap();
    let (code, _, err) = tet(&d, &["repair", "other", "-o", "img", "-y", "--force"]);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("in use by node 0x7e7"), "{err}");
    ok(&d, &["umount", "mnt"]);
    drop(g);
    assert_eq!(ok(&d, &["cat", "img", "/keep"]), "kept\n");
    // A mount killed before its unmount: umount says so (exit 4) and names replay.
    let mut c = foreground_mount(&d);
    let g = Mount { mnt: d.join("mnt") };
    std::fs::write(d.join("mnt/late"), b"x").unwrap();
    c.kill().unwrap();
    c.wait().unwrap();
    let (code, _, err) = tet(&d, &["umount", "mnt"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("`tet-host replay"), "{err}");
    drop(g);
    let (code, _, err) = tet(&d, &["verify", "img"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("is ACTIVE but no process holds it"), "{err}");
    let (code, out, err) = tet(&d, &["replay", "img"]);
    assert_eq!(code, 1, "{out}{err}");
    assert_clean(&d, "img");
    let _ = std::fs::remove_dir_all(&d);
}
