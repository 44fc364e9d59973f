//! Writes the damaged images the defmt example logs findings about, with the project's
//! own code, and links the defmt and cortex-m-rt scripts.

use tet_alloc::cetrafs::mkfs::{ImageBuilder, Placement, Sparse};
use tet_alloc::cetrafs::testing::reseal;
use tet_alloc::tet::writer::{DatasetSpec, Writer};
use tet_core::block::BLOCK_SIZE;
use tet_core::tet::{Codec, DType, DatasetId};

fn main() {
    let out = tet_fw_images::out_dir_with_layout(&tet_fw_images::layout("../lm3s6965.x"));
    println!("cargo:rustc-link-arg-examples=-Tdefmt.x");

    // A .tet file with one raw u16 dataset in the reference layout (no checksum table,
    // no footer), cut 4 bytes short: its last payload runs past the end of the file.
    let data: Vec<u8> = (0..64u16).flat_map(|i| i.to_le_bytes()).collect();
    let specs = [DatasetSpec {
        name: "level",
        dtype: DType::U16,
        shape: &[64],
        chunk_shape: &[16],
    }];
    let mut w = Writer::reference_layout(Vec::new(), &specs).unwrap();
    w.write_array(DatasetId(0), &data, Codec::Raw).unwrap();
    let mut tet = w.finish(None).unwrap();
    tet.truncate(tet.len() - 4);
    std::fs::write(out.join("cut.tet"), tet).unwrap();

    // A cetrafs image whose first block group claims one free data block more than its
    // bitmap has (checksums resealed, so the checker reaches the count).
    let mut b = tet_fw_images::small_image(32, 5, 4);
    b.add_file(
        ImageBuilder::ROOT,
        b"hello",
        b"hello\n".to_vec(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    let mut img = b.build().unwrap();
    let bg0 = 2 * BLOCK_SIZE + 64; // bg_table_start = 1 + zone groups; free_data_blocks at 64
    let free = u64::from_le_bytes(img[bg0..bg0 + 8].try_into().unwrap());
    img[bg0..bg0 + 8].copy_from_slice(&(free + 1).to_le_bytes());
    reseal(&mut img);
    std::fs::write(out.join("counts.img"), img).unwrap();
}
