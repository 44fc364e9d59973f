//! Replays every committed fuzz seed and every past crash (`fuzz/regressions`) through the
//! fuzz targets' bodies, so a fixed crash stays fixed under plain `cargo test`.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::PathBuf;

fn replay(target: &str, body: fn(&[u8])) -> usize {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for kind in ["seeds", "regressions"] {
        for entry in std::fs::read_dir(fuzz.join(kind).join(target)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() && path.extension().is_none_or(|e| e != "md") {
                body(&std::fs::read(&path).unwrap());
                replayed += 1;
            }
        }
    }
    replayed
}

#[test]
fn replay_tet_open_walk() {
    assert!(replay("tet_open_walk", tet_host::fuzzing::open_walk) >= 3);
}

#[test]
fn replay_tet_decode_chunk() {
    assert!(replay("tet_decode_chunk", tet_host::fuzzing::decode_chunk) >= 4);
}

#[test]
fn replay_tet_repair() {
    assert!(replay("tet_repair", tet_host::fuzzing::repair_all) >= 4);
}

#[test]
fn replay_tet_query() {
    assert!(replay("tet_query", tet_host::fuzzing::query_fold) >= 5);
}

#[test]
fn replay_cetrafs_open_walk() {
    assert!(replay("cetrafs_open_walk", tet_host::fuzzing::cetrafs_open_walk) >= 2);
}

#[test]
fn replay_cetrafs_path() {
    assert!(replay("cetrafs_path", tet_host::fuzzing::cetrafs_path) >= 4);
}

#[test]
fn cetrafs_fuzz_base_image_is_valid_and_reseal_is_identity_on_it() {
    let img = tet_host::fuzzing::cetrafs_base();
    assert!(!img.is_empty());
    let found: Vec<_> = errors(img).into_iter().map(|p| p.error).collect();
    assert_eq!(found, vec![]);
    let mut copy = img.to_vec();
    tet_alloc::cetrafs::testing::reseal(&mut copy);
    assert!(copy == img, "reseal must not change a valid image");
    // A mutation behind a checksum is reported as the field, not as a checksum, after reseal.
    let mut bad = img.to_vec();
    bad[68] = 77; // block_group_count
    tet_alloc::cetrafs::testing::reseal(&mut bad);
    let p = &errors(&bad)[0];
    assert!(
        !matches!(p.error.kind, tet_core::ErrorKind::ChecksumMismatch { .. }),
        "{:?}",
        p.error
    );
    // The block group table now runs into the inode bitmap.
    assert_eq!(
        (p.error.what, p.error.offset),
        ("superblock region start", 88)
    );
}

/// Error-severity findings of the full cetrafs check.
fn errors(img: &[u8]) -> Vec<tet_core::cetrafs::Finding> {
    tet_alloc::cetrafs::fsck::findings(
        tet_core::block::MemDevice::new(img),
        &tet_alloc::cetrafs::fsck::Options::default(),
    )
    .0
    .into_iter()
    .filter(|f| f.severity() == tet_core::finding::Severity::Error)
    .collect()
}

#[test]
fn replay_cetrafs_repair() {
    assert!(replay("cetrafs_repair", tet_host::fuzzing::cetrafs_repair) >= 4);
}

#[test]
fn replay_cetrafs_write() {
    assert!(replay("cetrafs_write", tet_host::fuzzing::cetrafs_write) >= 4);
}
