//! `cargo bench -p tet-host --bench cetrafs_read`: reading files through the no-alloc
//! core reader (`Fs::read` into a 1 MiB caller buffer), next to a plain `memcpy` of the
//! same number of bytes out of the in-memory image (the roofline) measured in the same run.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod timing;
use timing::best_of;

use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_core::block::MemDevice;
use tet_core::cetrafs::{Buffers, Fs};

fn main() {
    let mib = 1usize << 20;
    let params = Params {
        size_bytes: 160 << 20,
        bg_size_blocks: 32768,
        ..Params::default()
    };
    let mut b = ImageBuilder::new(params);
    let data: Vec<u8> = (0..48 * mib).map(|i| (i % 253) as u8).collect();
    b.add_file(
        ImageBuilder::ROOT,
        b"contiguous",
        data.clone(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    b.add_file(
        ImageBuilder::ROOT,
        b"fragmented",
        data[..16 * mib].to_vec(),
        Sparse::Dense,
        Placement::Fragmented,
    )
    .unwrap();
    b.add_file(
        ImageBuilder::ROOT,
        b"holes",
        vec![0u8; 48 * mib],
        Sparse::Holes,
        Placement::Contiguous,
    )
    .unwrap();
    let img = b.build().unwrap();
    let mut bufs = Buffers::new();
    let mount = best_of(20, || {
        let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
        fs.superblock().block_group_count() as usize
    });
    println!(
        "mount (superblock, map, 2 zone groups, {} block groups): {:.1} µs",
        {
            Fs::open(MemDevice::new(&img), &mut bufs.data)
                .unwrap()
                .superblock()
                .block_group_count()
        },
        mount.as_secs_f64() * 1e6
    );
    println!("| file | bytes | Fs::read | GB/s | memcpy baseline | GB/s |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
    let mut out = vec![0u8; mib];
    for name in ["contiguous", "fragmented", "holes"] {
        let ino = fs.resolve(name.as_bytes(), &mut bufs).unwrap();
        let size = ino.size() as usize;
        let read = best_of(5, || {
            let mut off = 0;
            while off < size {
                off += fs.read(&ino, off as u64, &mut out, &mut bufs).unwrap();
            }
            off
        });
        let copy = best_of(5, || {
            let mut off = 0;
            while off < size {
                out.copy_from_slice(&img[off..off + mib]);
                off += mib;
            }
            off
        });
        println!(
            "| {name} | {} MiB | {:.2} ms | {:.2} | {:.2} ms | {:.2} |",
            size / mib,
            read.as_secs_f64() * 1e3,
            size as f64 / read.as_secs_f64() / 1e9,
            copy.as_secs_f64() * 1e3,
            size as f64 / copy.as_secs_f64() / 1e9
        );
    }
}
