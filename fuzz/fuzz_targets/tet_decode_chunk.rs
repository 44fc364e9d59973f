//! Decodes one chunk (arbitrary `raw_byte_len` and stored bytes) with ruzstd and the C
//! decoder: they must agree, and a success must have exactly `raw_byte_len` bytes. The
//! body is `tet_std::fuzzing::decode_chunk`, replayed by `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tet_std::fuzzing::decode_chunk(data);
});
