//! Mutate a small cetrafs image (checksums recomputed after mutation), or take a whole
//! image (first byte odd), then verify, mount and walk it: never panic, and a verify with
//! no error means every directory lists and every file reads its whole size. Body:
//! `tet_std::fuzzing::cetrafs_open_walk`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tet_std::fuzzing::cetrafs_open_walk(data);
});
