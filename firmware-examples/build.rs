//! Writes the images the examples embed with the project's own writer, and puts
//! `memory.x` where the linker finds it.

use tet_alloc::tet::writer::{DatasetSpec, Writer};
use tet_core::tet::{Codec, DType, DatasetId};

fn main() {
    let out = tet_fw_images::out_dir_with_layout(&tet_fw_images::layout("lm3s6965.x"));

    // catalog.tet: a 16 × 24 i16 field in 5 × 7 chunks (clipped at the edges, raw), and
    // a small u8 mask in one chunk.
    let temp: Vec<u8> = (0..16 * 24)
        .flat_map(|i: i32| ((i % 97) * 3 - 50).to_le_bytes().into_iter().take(2))
        .collect();
    let mask: Vec<u8> = (0..8u8).map(|i| i % 2).collect();
    let specs = [
        DatasetSpec {
            name: "temperature",
            dtype: DType::I16,
            shape: &[16, 24],
            chunk_shape: &[5, 7],
        },
        DatasetSpec {
            name: "mask",
            dtype: DType::U8,
            shape: &[8],
            chunk_shape: &[8],
        },
    ];
    let mut w = Writer::new(Vec::new(), &specs).unwrap();
    w.write_array(DatasetId(0), &temp, Codec::Raw).unwrap();
    w.write_array(DatasetId(1), &mask, Codec::Raw).unwrap();
    let bytes = w.finish(None).unwrap();
    std::fs::write(out.join("catalog.tet"), bytes).unwrap();
}
