//! Mutate the small cetrafs image (checksums recomputed), repair it with every fix, and
//! check that repair either reports what it left or leaves an image that verifies with
//! no error. Body: `tet_std::fuzzing::cetrafs_repair`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tet_std::fuzzing::cetrafs_repair(data);
});
