//! Writes the cetrafs images the bootloader reads (with the project's own image
//! builder and its journal test tool) and puts `memory.x` where the linker finds it.

use std::path::Path;

use tet_alloc::cetrafs::mkfs::ImageBuilder;
use tet_alloc::cetrafs::mkfs::{Placement, Sparse};
use tet_alloc::cetrafs::testing::{register_node, write_journal_txn};
use tet_core::block::BLOCK_SIZE;
use tet_core::checksum::crc32c;

fn main() {
    // The program's flash: FLASH_KIB with no CRC table or the 1 KiB one; the 16 KiB
    // table is for bigger parts and gets 16 KiB more, and so do the full errors
    // (`error-detail`: 8 KiB more).
    let feature = |f: &str| std::env::var_os(format!("CARGO_FEATURE_{f}")).is_some();
    let flash_kib = FLASH_KIB
        + if feature("CRC_TABLE_16K") { 16 } else { 0 }
        + if feature("ERROR_DETAIL") { 8 } else { 0 };
    let layout = tet_fw_images::layout("memory.x")
        .replace("FLASH_KIB", &flash_kib.to_string())
        .replace("IMAGE_KIB", &(256 - flash_kib).to_string());
    let out = tet_fw_images::out_dir_with_layout(&layout);
    boot_images(&out);
}

/// Flash for the program (code, constants, vector table, `.data` initialisers).
const FLASH_KIB: u32 = 16;

const KERNEL_LEN: usize = 10_000;

/// A kernel image: a version line, then bytes that depend on the version.
fn kernel(version: u8) -> Vec<u8> {
    let mut k = format!("KERNEL v{version}\n").into_bytes();
    let mut x = u32::from(version).wrapping_mul(0x9E37_79B9) | 1;
    while k.len() < KERNEL_LEN {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        k.push(x.to_le_bytes()[0]);
    }
    k
}

/// The smallest cetrafs image that holds `/boot/kernel.img` at `version` (its CRC-32C
/// beside it in the xattr `user.crc32c`, 8 hex digits), `/boot/config.txt`, and the
/// journal of one node, which crashed (its registry row is fenced).
fn boot_image(version: u8) -> Vec<u8> {
    let mut b = tet_fw_images::small_image(32, 9, 8);
    let boot = b.mkdir(ImageBuilder::ROOT, b"boot", 0o755).unwrap();
    let k = kernel(version);
    let crc = format!("{:08x}", crc32c(&k));
    let ino = b
        .add_file(boot, b"kernel.img", k, Sparse::Dense, Placement::Contiguous)
        .unwrap();
    b.set_xattr(ino, b"user.crc32c", crc.as_bytes()).unwrap();
    b.add_file(
        boot,
        b"config.txt",
        b"console=ttyS0\n".to_vec(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    let mut img = b.build().unwrap();
    register_node(&mut img, 0, 1, 2, b"node1").unwrap();
    img
}

/// boot.img has the kernel at version 1. The dirty image is the same image after a
/// crash that left a committed, unreplayed transaction in node 1's journal updating
/// the kernel to version 2 (its data blocks and its xattr block: the blocks where the
/// two versions' images differ). Two whole images do not fit the LM3S6965's flash
/// beside the program, so the dirty one is stored as the blocks where it differs from
/// boot.img: `dirty.lbas` (block numbers, u32 little-endian) and `dirty.blocks`.
fn boot_images(out: &Path) {
    let v1 = boot_image(1);
    let v2 = boot_image(2);
    assert_eq!(v1.len(), v2.len());
    let writes: Vec<(u64, Vec<u8>, bool)> = diff(&v1, &v2)
        .map(|(lba, b)| (lba, b.to_vec(), false))
        .collect();
    assert!(
        (2..=4).contains(&writes.len()),
        "{} blocks differ",
        writes.len()
    );
    let mut dirty = v1.clone();
    write_journal_txn(&mut dirty, 0, 0, 1, &writes, true, true).unwrap();
    let (mut lbas, mut blocks) = (Vec::new(), Vec::new());
    for (lba, b) in diff(&v1, &dirty) {
        lbas.extend_from_slice(&u32::try_from(lba).unwrap().to_le_bytes());
        blocks.extend_from_slice(b);
    }
    std::fs::write(out.join("boot.img"), &v1).unwrap();
    std::fs::write(out.join("dirty.lbas"), lbas).unwrap();
    std::fs::write(out.join("dirty.blocks"), blocks).unwrap();
}

/// The blocks of `b` that differ from `a`, with their numbers.
fn diff<'b>(a: &'b [u8], b: &'b [u8]) -> impl Iterator<Item = (u64, &'b [u8])> {
    a.chunks(BLOCK_SIZE)
        .zip(b.chunks(BLOCK_SIZE))
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(lba, (_, y))| (lba as u64, y))
}
