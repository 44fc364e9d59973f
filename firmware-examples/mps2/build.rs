//! Writes the images the MPS2 examples embed, with the project's own writers, and
//! puts `memory.x` where the linker finds it.

use std::path::Path;

use tet_alloc::cetrafs::mkfs::ImageBuilder;
use tet_alloc::cetrafs::mkfs::{Placement, Sparse};
use tet_alloc::cetrafs::testing::{register_node, write_journal_txn};
use tet_alloc::tet::writer::{DatasetSpec, Writer};
use tet_core::block::{MemDevice, BLOCK_SIZE};
use tet_core::cetrafs::{Buffers, Fs, Mapping};
use tet_core::tet::{Codec, DType, DatasetId};

fn main() {
    let out = tet_fw_images::out_dir_with_layout(&tet_fw_images::layout("memory.x"));
    series(&out);
    proof_image(&out);
}

/// series.tet: a 64 × 100 f32 series in 16 × 25 chunks, zstd-compressed, and an i32
/// counter in raw chunks.
fn series(out: &Path) {
    let temp: Vec<u8> = (0..64 * 100)
        .flat_map(|i: u32| {
            let (row, col) = (i / 100, i % 100);
            let v = 20.0 + (row as f32) * 0.25 - (col % 7) as f32 * 0.5;
            v.to_le_bytes()
        })
        .collect();
    let count: Vec<u8> = (0..40i32)
        .flat_map(|i| (i * i - 100).to_le_bytes())
        .collect();
    let specs = [
        DatasetSpec {
            name: "temperature",
            dtype: DType::F32,
            shape: &[64, 100],
            chunk_shape: &[16, 25],
        },
        DatasetSpec {
            name: "count",
            dtype: DType::I32,
            shape: &[40],
            chunk_shape: &[16],
        },
    ];
    let mut w = Writer::new(Vec::new(), &specs).unwrap();
    w.write_array(DatasetId(0), &temp, Codec::Zstd).unwrap();
    w.write_array(DatasetId(1), &count, Codec::Raw).unwrap();
    std::fs::write(out.join("series.tet"), w.finish(None).unwrap()).unwrap();
}

/// proof.img, the cetrafs image the panic-freedom proof walks: a file with an extent
/// tree (fragmented), one with holes, one with uninitialized extents, an xattr, a
/// symlink, a hard link, and a committed, unreplayed journal transaction.
fn proof_image(out: &Path) {
    let mut b = tet_fw_images::small_image(64, 5, 40);
    let d = b.mkdir(ImageBuilder::ROOT, b"d", 0o755).unwrap();
    let data: Vec<u8> = (0..6 * BLOCK_SIZE).map(|i| (i % 251) as u8 | 1).collect();
    let frag = b
        .add_file(d, b"frag", data, Sparse::Dense, Placement::Fragmented)
        .unwrap();
    b.set_xattr(frag, b"user.k", b"v").unwrap();
    let mut sparse = vec![0u8; 3 * BLOCK_SIZE];
    sparse[2 * BLOCK_SIZE] = 7;
    b.add_file(
        d,
        b"holes",
        sparse.clone(),
        Sparse::Holes,
        Placement::Contiguous,
    )
    .unwrap();
    b.add_file(d, b"uninit", sparse, Sparse::Uninit, Placement::Contiguous)
        .unwrap();
    b.add_symlink(ImageBuilder::ROOT, b"link", b"d/frag")
        .unwrap();
    b.add_link(ImageBuilder::ROOT, b"again", frag).unwrap();
    let mut img = b.build().unwrap();
    register_node(&mut img, 0, 1, 2, b"n1").unwrap();
    // Node 1 crashed after committing new contents for /d/frag's first block.
    let target = {
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
        let ino = fs.resolve(b"/d/frag", &mut bufs).unwrap();
        assert_eq!(ino.depth(), 1, "frag has an extent tree");
        match fs.map_block(&ino, 0, &mut bufs.tree).unwrap() {
            Mapping::Mapped { physical, .. } => physical,
            Mapping::Hole => panic!("frag starts with a hole"),
        }
    };
    let payload = vec![0xEE; BLOCK_SIZE];
    write_journal_txn(&mut img, 0, 0, 1, &[(target, payload, false)], true, true).unwrap();
    std::fs::write(out.join("proof.img"), img).unwrap();
}
