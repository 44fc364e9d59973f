//! Mutate a small cetrafs image (checksums recomputed after mutation), then verify, mount
//! and walk it: never panic. Body: `tet_host::fuzzing::cetrafs_open_walk`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tet_host::fuzzing::cetrafs_open_walk(data);
});
