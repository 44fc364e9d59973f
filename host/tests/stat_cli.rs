//! `stat` with readable times and the extent list; one symlink policy for the reading
//! commands (never followed, and a path through one says so).

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod common;
use common::run;

#[test]
fn stat_shows_time_mode_and_extents_and_symlinks_are_never_followed() {
    let d = std::env::temp_dir().join(format!("tet-stat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("src/d")).unwrap();
    std::fs::write(d.join("src/d/a.txt"), vec![b'a'; 10_000]).unwrap();
    let f = std::fs::File::options()
        .write(true)
        .open(d.join("src/d/a.txt"))
        .unwrap();
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 123_456_789))
        .unwrap();
    std::os::unix::fs::symlink("d/a.txt", d.join("src/ln")).unwrap();
    std::os::unix::fs::symlink("d", d.join("src/dl")).unwrap();
    let (code, _, err) = run(&["mkfs", "img", "--size", "8M", "--from", "src"], &d);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run(&["stat", "img", "/d/a.txt"], &d);
    let out = String::from_utf8(out).unwrap();
    assert_eq!(code, 0);
    assert!(
        out.contains("mtime         2023-11-14T22:13:20.123456789Z"),
        "{out}"
    );
    assert!(out.contains("mode          -rw-r--r-- (644)"), "{out}");
    assert!(
        out.contains("extents       1\n  logical 0..3 -> blocks "),
        "{out}"
    );
    assert!(out.contains("(3 blocks)"), "{out}");
    let (_, out, _) = run(&["stat", "--json", "img", "/d/a.txt"], &d);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["extents"][0]["logical"], 0);
    assert_eq!(v["extents"][0]["len"], 3);
    assert_eq!(v["mtime"], "2023-11-14T22:13:20.123456789Z");
    // A symlink is shown as itself, with its target.
    let (_, out, _) = run(&["stat", "--json", "img", "/ln"], &d);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (v["type"].as_str(), v["target"].as_str()),
        (Some("symlink"), Some("d/a.txt"))
    );
    // Never followed: at the end of a path or inside one, and said so.
    // What the image holds at a path is not a file: a request the data cannot satisfy
    // (8), as a missing path is, never a usage error.
    let (code, out, err) = run(&["cat", "img", "/ln"], &d);
    assert_eq!((code, out.len()), (8, 0));
    assert!(
        err.contains("/ln: is a symlink (-> d/a.txt); symlinks in an image are not followed"),
        "{err}"
    );
    let (code, _, err) = run(&["ls", "img", "/dl/a.txt"], &d);
    assert_eq!(code, 8);
    assert!(
        err.contains("/dl/a.txt: /dl is a symlink (-> d); paths in an image are not followed through symlinks"),
        "{err}"
    );
    assert!(!err.contains("no such file"), "{err}");
    let (code, _, err) = run(&["cat", "img", "/nope/x"], &d);
    assert_eq!(code, 8);
    assert!(err.contains("no such file or directory"), "{err}");
    let (code, out, err) = run(&["cat", "img", "/d"], &d);
    assert_eq!((code, out.len()), (8, 0));
    assert!(err.ends_with("/d: is a directory\n"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}
