//! Replays every committed fuzz seed and every past crash (`fuzz/regressions`) through the
//! fuzz target's body, so a fixed crash stays fixed under plain `cargo test`.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::PathBuf;

#[test]
fn replay_seeds_and_regressions() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for kind in ["seeds", "regressions"] {
        let target = fuzz.join(kind).join("tet_open_walk");
        for entry in std::fs::read_dir(&target).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() && path.extension().is_none_or(|e| e != "md") {
                let bytes = std::fs::read(&path).unwrap();
                tet_host::fuzzing::open_walk(&bytes);
                replayed += 1;
            }
        }
    }
    assert!(
        replayed >= 3,
        "expected the committed seeds, replayed {replayed}"
    );
}
