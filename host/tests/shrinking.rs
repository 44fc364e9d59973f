//! A cetrafs image that shrinks while it is read (another process truncates it): reads
//! are positioned reads, so the check ends with findings naming the offsets it could not
//! read, never a crash (a memory-mapped file would raise SIGBUS instead).

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_core::block::BlockDevice;
use tet_core::cetrafs::Code;
use tet_host::cetrafs::device::FileDevice;

#[test]
fn an_image_truncated_under_the_reader_gives_errors_with_offsets() {
    let mut b = ImageBuilder::new(Params {
        size_bytes: 8 << 20,
        bg_size_blocks: 512,
        inodes: 64,
        ..Params::default()
    });
    let d = b.mkdir(ImageBuilder::ROOT, b"d", 0o755).unwrap();
    for i in 0..20u8 {
        b.add_file(
            d,
            &[b'f', b'a' + i],
            vec![i; 9000],
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
    }
    let img = b.build().unwrap();
    let path = std::env::temp_dir().join(format!("tet-host-shrink-{}.img", std::process::id()));
    std::fs::write(&path, &img).unwrap();
    let dev = FileDevice::open(&path).unwrap();
    assert_eq!(dev.block_count(), 2048);
    // The other process cuts the image to its first 300 blocks.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(300 * 4096)
        .unwrap();
    let (found, _) = fsck::findings(&dev, &fsck::Options::default());
    let cut: Vec<_> = found
        .iter()
        .filter(|f| f.error.what == "block read (the image ends here now)")
        .collect();
    assert!(!cut.is_empty(), "{found:?}");
    for f in &cut {
        assert_eq!(f.code, Code::ReadFailed);
        assert!(f.error.offset >= 300 * 4096, "{:?}", f.error);
        assert_eq!(f.error.offset % 4096, 0);
    }
    // The command line says the same, with exit 4.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tet-host"))
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    // (Opened after the cut: now the superblock's total_blocks is past the device, and
    // the check says so first, then runs on what is left.)
    assert_eq!(out.status.code(), Some(4));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().next(),
        Some(
            "error[read-failed] superblock.total_blocks (block 0, byte 0x20) the image is 300 \
             blocks but the filesystem is 2048: was it truncated?"
        ),
        "{text}"
    );
    std::fs::remove_file(&path).unwrap();
}
