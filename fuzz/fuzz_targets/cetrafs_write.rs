//! Random operation sequences through the write path over a small image: failures are
//! Unix errors only, and the image verifies with no error after the node leaves. Body:
//! `tet_std::fuzzing::cetrafs_write`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tet_std::fuzzing::cetrafs_write(data);
});
