//! Superblock copies through the real binary (docs/cetrafs.md section 3.1): one bad
//! byte in block 0, or block 0 zeroed, costs nothing a user can see but a warning.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod common;
use common::run;

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tet-copies-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("src/sub")).unwrap();
    std::fs::write(d.join("src/hello.txt"), b"hello\n").unwrap();
    std::fs::write(d.join("src/sub/data.bin"), vec![0x5au8; 70_000]).unwrap();
    d
}

fn copies(d: &std::path::Path, img: &str) -> Vec<u64> {
    let (code, out, err) = run(&["info", "--json", img], d);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    v["superblock_copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["state"], "ok", "{c}");
            c["block"].as_u64().unwrap()
        })
        .collect()
}

#[test]
fn a_damaged_label_byte_reads_through_a_copy_and_repair_restores_it() {
    let d = scratch("label");
    let (code, _, err) = run(
        &[
            "mkfs", "img", "--size", "64M", "--from", "src", "--label", "data",
        ],
        &d,
    );
    assert_eq!(code, 0, "{err}");
    let places = copies(&d, "img");
    assert_eq!(places.len(), 3, "{places:?}");
    let clean = std::fs::read(d.join("img")).unwrap();
    // The user's damage: printf '\xff' | dd of=img bs=1 seek=205 conv=notrunc
    let mut img = clean.clone();
    img[205] = 0xff;
    std::fs::write(d.join("img"), &img).unwrap();
    let (code, out, err) = run(&["ls", "img", "/"], &d);
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("hello.txt") && out.contains("sub"), "{out}");
    assert!(
        err.contains("the primary superblock fails its checks (superblock.checksum")
            && err.contains(&format!("reading through the copy in block {}", places[0])),
        "{err}"
    );
    let (code, out, _) = run(&["cat", "img", "/hello.txt"], &d);
    assert_eq!((code, out.as_slice()), (0, &b"hello\n"[..]));
    // verify: a damaged image (4), the check done through the copy.
    let (code, out, err) = run(&["verify", "img"], &d);
    let out = String::from_utf8(out).unwrap();
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        out.contains("error[checksum] superblock.checksum (block 0"),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "checked through the superblock copy in block {}",
            places[0]
        )),
        "{err}"
    );
    // -b names another copy; a block that holds none is refused, naming why.
    let (code, out, _) = run(
        &["verify", "--json", "-b", &places[2].to_string(), "img"],
        &d,
    );
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(code, 4);
    assert_eq!(v["superblock"]["copy"], places[2]);
    let (code, _, err) = run(&["verify", "-b", "7", "img"], &d);
    assert_eq!(code, 16);
    assert!(
        err.contains("block 7 holds no superblock copy that passes (superblock_copy.magic"),
        "{err}"
    );
    // repair -p restores the primary from the copy; everything reads as before.
    let (code, out, err) = run(&["repair", "-p", "img"], &d);
    let out = String::from_utf8(out).unwrap();
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("primary superblock restored from the copy"),
        "{out}"
    );
    let (code, out, err) = run(&["verify", "img"], &d);
    assert_eq!(code, 0, "{}{err}", String::from_utf8_lossy(&out));
    let now = std::fs::read(d.join("img")).unwrap();
    assert!(now[4096..] == clean[4096..], "only block 0 was written");
    assert_eq!(now[200..204], *b"data");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_zeroed_block_0_is_a_damaged_image_never_not_an_image() {
    let d = scratch("zeroed");
    let (code, _, err) = run(&["mkfs", "img", "--size", "32M", "--from", "src"], &d);
    assert_eq!(code, 0, "{err}");
    let mut img = std::fs::read(d.join("img")).unwrap();
    img[..4096].fill(0);
    std::fs::write(d.join("img"), &img).unwrap();
    let (code, out, err) = run(&["verify", "img"], &d);
    assert_eq!(code, 4, "{}{err}", String::from_utf8_lossy(&out));
    assert!(!err.contains("not a .tet file or a cetrafs image"), "{err}");
    let (code, out, _) = run(&["stat", "img", "/sub/data.bin"], &d);
    assert_eq!(code, 0);
    assert!(String::from_utf8(out).unwrap().contains("70000"));
    let (code, _, err) = run(&["repair", "-y", "img"], &d);
    assert_eq!(code, 1, "{err}");
    assert_eq!(run(&["verify", "img"], &d).0, 0);
    let (_, out, _) = run(&["cat", "img", "/sub/data.bin"], &d);
    assert!(out == vec![0x5au8; 70_000]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_wiped_start_tables_and_all_is_found_by_its_copies_and_a_wrong_b_is_refused() {
    let d = scratch("wiped");
    let (code, _, err) = run(&["mkfs", "img", "--size", "32M", "--from", "src"], &d);
    assert_eq!(code, 0, "{err}");
    let places = copies(&d, "img");
    let clean = std::fs::read(d.join("img")).unwrap();
    // A -b that names no copy is the request's fault (16), with the copies listed.
    let (code, _, err) = run(&["verify", "-b", "23", "img"], &d);
    assert_eq!(code, 16, "{err}");
    let list: Vec<String> = places.iter().map(u64::to_string).collect();
    assert!(
        err.contains("-b 23: block 23 holds no superblock copy that passes")
            && err.contains(&format!(
                "this image's copies are in blocks {}",
                list.join(", ")
            )),
        "{err}"
    );
    assert_eq!(run(&["repair", "-p", "-b", "23", "img"], &d).0, 16);
    // The first 8 KiB, then the first 20 KiB (the primary and both group tables of this
    // image: 2 zone groups, 2 block groups) wiped.
    for kib in [8usize, 20] {
        let mut img = clean.clone();
        img[..kib * 1024].fill(0);
        std::fs::write(d.join("img"), &img).unwrap();
        let (code, out, err) = run(&["ls", "img", "/sub"], &d);
        assert_eq!(code, 0, "{kib} KiB: {err}");
        assert!(String::from_utf8(out).unwrap().contains("data.bin"));
        let (code, _, err) = run(&["tune", "img", "--label", "x"], &d);
        assert_eq!(code, 4, "{err}");
        assert!(
            err.contains("`tet-host repair img` restores it from the copy in block"),
            "{err}"
        );
        assert_eq!(run(&["verify", "img"], &d).0, 4, "{kib} KiB");
        let (code, out, err) = run(&["repair", "-y", "img"], &d);
        assert_eq!(code, 1, "{kib} KiB: {}{err}", String::from_utf8_lossy(&out));
        assert_eq!(run(&["verify", "img"], &d).0, 0, "{kib} KiB");
        let (_, got, _) = run(&["cat", "img", "/sub/data.bin"], &d);
        assert!(got == vec![0x5au8; 70_000], "{kib} KiB");
    }
    // Every superblock gone: said plainly, with what to try.
    let mut img = clean.clone();
    img[..4096].fill(0);
    for p in &places {
        img[*p as usize * 4096 + 512] = 0;
    }
    std::fs::write(d.join("img"), &img).unwrap();
    let (code, _, err) = run(&["verify", "img"], &d);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("no superblock copy was found either"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}
