//! `mkfs` says what is short and by how much, sizes an image from its tree, refuses a
//! label the field cannot hold, and says what it does with times before 1970.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod common;
use common::run;

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tet-mkfs-msg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("src/deep/er")).unwrap();
    for k in 0..40 {
        std::fs::write(d.join(format!("src/deep/f{k}")), vec![k as u8; 50_000]).unwrap();
    }
    std::fs::write(d.join("src/deep/er/big.bin"), vec![1u8; 3 << 20]).unwrap();
    d
}

#[test]
fn a_label_longer_than_the_field_is_refused_before_anything_is_written() {
    let d = scratch("label");
    let long = "l".repeat(65);
    let (code, _, err) = run(&["mkfs", "img", "--size", "8M", "--label", &long], &d);
    assert_eq!(code, 16, "{err}");
    assert!(
        err.contains("the label is 65 bytes; the field holds at most 64"),
        "{err}"
    );
    assert!(!d.join("img").exists());
    let ok = "l".repeat(64);
    assert_eq!(
        run(&["mkfs", "img", "--size", "8M", "--label", &ok], &d).0,
        0
    );
    let (_, out, _) = run(&["info", "--json", "img"], &d);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["label"], ok);
    // tune keeps the same rule.
    let (code, _, err) = run(&["tune", "img", "--label", &long], &d);
    assert_eq!(code, 16);
    assert!(err.contains("the field holds at most 64"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn without_size_the_tree_sizes_the_image_with_headroom() {
    let d = scratch("auto");
    let (code, out, err) = run(&["mkfs", "img", "--from", "src"], &d);
    let out = String::from_utf8(out).unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("sized from the tree with 25 % headroom; --size to choose"),
        "{out}"
    );
    assert_eq!(run(&["verify", "img"], &d).0, 0);
    let (_, got, _) = run(&["cat", "img", "/deep/er/big.bin"], &d);
    assert!(got == vec![1u8; 3 << 20]);
    // Data of about 5 MiB: an image of a few MiB more, not the 64 MiB default.
    let len = std::fs::metadata(d.join("img")).unwrap().len();
    assert!((5 << 20..24 << 20).contains(&len), "{len}");
    let (_, out, _) = run(&["mkfs", "--json", "img2", "--from", "src"], &d);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["sized_from_tree"], true);
    // Without --from a file still needs --size.
    let (code, _, err) = run(&["mkfs", "img3"], &d);
    assert_eq!(code, 16);
    assert!(
        err.contains("--size is required for an image file without --from"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn out_of_space_says_how_much_and_what_size_would_do() {
    let d = scratch("space");
    let (code, _, err) = run(&["mkfs", "img", "--size", "4M", "--from", "src"], &d);
    assert_eq!(code, 16, "{err}");
    assert!(
        err.contains("mkfs: out of space: src takes up to ")
            && err.contains("a 4.00 MiB image holds 3."),
        "{err}"
    );
    let want = err
        .split("pass --size ")
        .nth(1)
        .and_then(|r| r.split(" or more").next())
        .unwrap_or_else(|| panic!("{err}"))
        .replace(' ', "")
        .replace("MiB", "M");
    assert!(!d.join("img").exists());
    // The size it names works.
    let (code, _, err) = run(&["mkfs", "img", "--size", &want, "--from", "src"], &d);
    assert_eq!(code, 0, "{want}: {err}");
    assert_eq!(run(&["verify", "img"], &d).0, 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_time_before_1970_is_stored_as_1970_with_a_warning() {
    let d = scratch("old");
    let f = std::fs::File::options()
        .write(true)
        .open(d.join("src/deep/f1"))
        .unwrap();
    f.set_modified(std::time::UNIX_EPOCH - std::time::Duration::from_secs(86_400 * 365))
        .unwrap();
    let (code, _, err) = run(&["mkfs", "img", "--from", "src"], &d);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("src/deep/f1: modified before 1970; stored as 1970-01-01 00:00:00 UTC"),
        "{err}"
    );
    assert_eq!(err.matches("before 1970").count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// What a terminal shows while `tet-host ARGS` runs there (through `script`): the
/// progress bars of the commands that run long are drawn on standard error.
fn terminal(d: &std::path::Path, args: &str) -> (Option<i32>, String) {
    let bin = env!("CARGO_BIN_EXE_tet-host");
    let out = std::process::Command::new("script")
        .args(["-qec", &format!("'{bin}' {args}"), "/dev/null"])
        .current_dir(d)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn long_commands_draw_progress_on_a_terminal_only() {
    let d = scratch("progress");
    std::fs::write(d.join("src/big.bin"), vec![3u8; 96 << 20]).unwrap();
    for (args, what) in [
        ("mkfs img --from src", "mkfs --from"),
        ("verify img", "cetrafs verify"),
        ("repair -p img", "cetrafs repair"),
    ] {
        let (code, shown) = terminal(&d, args);
        assert!(matches!(code, Some(0 | 1)), "{what}: {code:?} {shown}");
        // The bar: elapsed time, then bytes done of the total.
        assert!(
            shown.contains("00:00:0") && shown.contains("iB/"),
            "{what}: {shown:?}"
        );
    }
    // convert and export, over a 16 MiB array.
    let npy = common::npy("<f4", false, &[2048, 2048], &vec![0u8; 16 << 20]);
    std::fs::write(d.join("a.npy"), npy).unwrap();
    for (args, what) in [
        ("convert a.npy a.tet", "convert"),
        ("export a.tet --dataset a out.npy", "export"),
    ] {
        let (code, shown) = terminal(&d, args);
        assert_eq!(code, Some(0), "{what}: {shown}");
        assert!(
            shown.contains("00:00:0") && shown.contains("iB/"),
            "{what}: {shown:?}"
        );
    }
    // Off a terminal, nothing of the bar reaches standard error.
    let (code, _, err) = run(&["verify", "img"], &d);
    assert_eq!(code, 0);
    assert!(!err.contains("iB/"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_tree_of_many_small_files_gets_the_inodes_it_needs() {
    let d = scratch("many");
    std::fs::create_dir_all(d.join("many")).unwrap();
    for k in 0..2000 {
        std::fs::write(d.join(format!("many/f{k}")), b"x").unwrap();
    }
    // 32 MiB gives 512 inodes by default: the tree's 2,000 entries raise it.
    let (code, _, err) = run(&["mkfs", "img", "--size", "32M", "--from", "many"], &d);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = run(&["info", "--json", "img"], &d);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert!(v["inode_count"].as_u64().unwrap() >= 2002, "{v}");
    assert_eq!(run(&["verify", "img"], &d).0, 0);
    // An explicit --inodes is kept, and too few is said so.
    let (code, _, err) = run(
        &[
            "mkfs", "img2", "--size", "32M", "--inodes", "100", "--from", "many",
        ],
        &d,
    );
    assert_eq!(code, 16);
    assert!(err.contains("pass --inodes 2002 or more"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn xattrs_past_the_images_limits_are_named_with_the_limit() {
    let d = std::env::temp_dir().join(format!("tet-mkfs-msg-xattr-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("src")).unwrap();
    let f = d.join("src/tagged");
    std::fs::write(&f, b"x").unwrap();
    if xattr::set(&f, "user.probe", b"1").is_err() {
        eprintln!("skipped: this filesystem keeps no user xattrs");
        return;
    }
    for k in 0..13 {
        xattr::set(&f, format!("user.k{k:02}"), b"v").unwrap();
    }
    let (code, _, err) = run(&["mkfs", "img", "--size", "8M", "--from", "src"], &d);
    assert_eq!(code, 8, "{err}");
    assert!(
        err.contains("src/tagged: has 1")
            && err.contains(" xattrs; a cetrafs inode holds at most 12"),
        "{err}"
    );
    assert!(!err.contains("buffer too small"), "{err}");
    for k in 0..13 {
        xattr::remove(&f, format!("user.k{k:02}")).unwrap();
    }
    xattr::set(&f, "user.probe", &[7u8; 300]).unwrap();
    let (code, _, err) = run(&["mkfs", "img", "--size", "8M", "--from", "src"], &d);
    assert_eq!(code, 8, "{err}");
    assert!(
        err.contains(
            "xattr user.probe: its value is 300 bytes; a cetrafs xattr value holds at most 256"
        ),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
