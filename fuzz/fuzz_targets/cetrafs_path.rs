//! Resolve arbitrary paths in a cetrafs image: never panic, never loop.
//! Body: `tet_std::fuzzing::cetrafs_path`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tet_std::fuzzing::cetrafs_path(data);
});
