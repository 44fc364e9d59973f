//! cetrafs: the read path instantiated with the one-byte `Fault` (a bootloader's
//! `Fs<D, Fault>`) runs the same checks as with `Error`: on a sound image and on every
//! corruption tried it reaches the same result, and where `Error` fails, `Fault` fails
//! with that error's category.

use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::testing::write_journal_txn;
use tet_core::block::{Block, MemDevice, BLOCK_SIZE};
use tet_core::cetrafs::Fs;
use tet_core::checksum::Crc32c;
use tet_core::{Error, Fault};
use tet_host::fuzzing::{boot_paths_agree, boot_walk};

/// Both instantiations agree on `img` (the bootloader's walk of the whole tree, shared
/// with the `cetrafs_open_walk` fuzz target); returns whether the walk read the image.
fn agree(img: &[u8], context: &str) -> bool {
    boot_paths_agree(img).unwrap_or_else(|why| panic!("{context}: {why}"))
}

fn image() -> Vec<u8> {
    let p = Params {
        size_bytes: 4 << 20,
        bg_size_blocks: 512,
        inodes: 64,
        nodes: 2,
        journal_blocks: 9,
        ..Params::default()
    };
    let mut b = ImageBuilder::new(p);
    let d = b.mkdir(ImageBuilder::ROOT, b"dir", 0o755).unwrap();
    let file = b
        .add_file(
            d,
            b"file",
            vec![7u8; 3 * BLOCK_SIZE],
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
    b.set_xattr(file, b"user.k", b"value").unwrap();
    let frag: Vec<u8> = (0..40 * BLOCK_SIZE).map(|i| (i % 251) as u8).collect();
    b.add_file(d, b"frag", frag, Sparse::Dense, Placement::Fragmented)
        .unwrap();
    let mut holes = vec![0u8; 20 * BLOCK_SIZE];
    holes[9 * BLOCK_SIZE] = 1;
    b.add_file(d, b"holes", holes, Sparse::Holes, Placement::Contiguous)
        .unwrap();
    b.add_file(
        ImageBuilder::ROOT,
        b"top",
        b"x".to_vec(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    let mut img = b.build().unwrap();
    // A committed, unreplayed transaction rewriting /dir/file's first block: the
    // overlay serves it.
    let fs = Fs::open_for_read(MemDevice::new(&img), &mut [0; BLOCK_SIZE]).unwrap();
    let mut one: Block = [0; BLOCK_SIZE];
    let ino = fs.resolve(b"/dir/file", &mut one).unwrap();
    let target = match fs.map_block(&ino, 0, &mut one).unwrap() {
        tet_core::cetrafs::Mapping::Mapped { physical, .. } => physical,
        tet_core::cetrafs::Mapping::Hole => panic!("file block 0 is mapped"),
    };
    write_journal_txn(
        &mut img,
        1,
        0,
        9,
        &[(target, vec![0xAB; BLOCK_SIZE], false)],
        true,
        true,
    )
    .unwrap();
    img
}

#[test]
fn the_sound_image_reads_the_same_through_both() {
    let img = image();
    assert!(agree(&img, "sound image"));
    let mut seen = boot_walk::<Fault>(&img).unwrap();
    seen.sort();
    let paths: Vec<&[u8]> = seen.iter().map(|e| &e.0[..]).collect();
    let want: [&[u8]; 5] = [b"/dir", b"/dir/file", b"/dir/frag", b"/dir/holes", b"/top"];
    assert_eq!(paths, want);
    // The overlay's version of /dir/file, and its xattr.
    let mut crc = Crc32c::new();
    crc.update(&[0xAB; BLOCK_SIZE]);
    crc.update(&[7; 2 * BLOCK_SIZE]);
    let file = &seen[1];
    assert_eq!((file.1, file.2), (3 * BLOCK_SIZE as u64, crc.finish()));
    assert_eq!(file.3, [(b"user.k".to_vec(), b"value".to_vec())]);
    assert_eq!(seen[4].1, 1);
}

#[test]
fn every_single_byte_corruption_fails_alike() {
    let img = image();
    // Every block the image uses (metadata, journals and data), each damaged at bytes
    // across its structures: headers, fields, names, the tail and checksum.
    let used: Vec<usize> = img
        .chunks(BLOCK_SIZE)
        .enumerate()
        .filter(|(_, b)| b.iter().any(|x| *x != 0))
        .map(|(i, _)| i)
        .collect();
    assert!(used.len() > 40, "{} blocks in use", used.len());
    let offsets = [
        0, 1, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 96, 104, 112, 120, 200, 266, 300, 4080,
        4084, 4088,
    ];
    let (mut failed, mut read) = (0, 0);
    for &block in &used {
        for off in offsets {
            let mut bad = img.clone();
            bad[block * BLOCK_SIZE + off] ^= 0x5A;
            if agree(&bad, &format!("block {block} byte {off}")) {
                read += 1;
            } else {
                failed += 1;
            }
        }
    }
    // Both outcomes were exercised: corruption the walk does not reach (or that only
    // changes file bytes) and corruption it refuses.
    assert!(failed > 100 && read > 100, "failed {failed}, read {read}");
}

/// Reads fail past `good` blocks: an unreadable part of the flash.
struct Failing<'a> {
    dev: MemDevice<'a>,
    good: u64,
}

impl tet_core::block::BlockDevice for Failing<'_> {
    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut Block) -> tet_core::Result<()> {
        if lba >= self.good {
            return Err(Error::new(tet_core::ErrorKind::Io, "test read", lba * 4096));
        }
        self.dev.read_block(lba, buf)
    }
}

#[test]
fn each_category_reaches_the_fault() {
    use tet_core::Category;
    let img = image();
    let expect = |bad: &[u8], category: Category| {
        let e = boot_walk::<Error>(bad).unwrap_err();
        assert_eq!(e.kind.category(), category, "{e}");
        assert_eq!(boot_walk::<Fault>(bad).unwrap_err(), Fault(category));
    };
    // No blocks at all.
    expect(&[], Category::Truncated);
    // A format version this build does not implement (the superblock resealed).
    let mut newer = img.clone();
    newer[4] ^= 0x01;
    let c = tet_core::checksum::crc32c_skipping(&newer[..424], 416);
    newer[416..424].copy_from_slice(&c.to_le_bytes());
    expect(&newer, Category::Incompatible);
    // Corrupt: a flipped bit in the root inode's block.
    let mut flipped = img.clone();
    let root_block = {
        let fs = Fs::open_for_read(MemDevice::new(&img), &mut [0; BLOCK_SIZE]).unwrap();
        fs.resolve(b"/", &mut [0; BLOCK_SIZE]).unwrap().lba() as usize
    };
    flipped[root_block * BLOCK_SIZE + 40] ^= 0x04;
    expect(&flipped, Category::Corrupt);
    // Unsatisfiable: a path that does not exist. Resource: an overlay table too small.
    let mut one: Block = [0; BLOCK_SIZE];
    let lean = Fs::<_, Fault>::open_for_read_as(MemDevice::new(&img), &mut one).unwrap();
    assert_eq!(
        lean.resolve(b"/dir/none", &mut one).unwrap_err(),
        Fault(Category::Unsatisfiable)
    );
    assert_eq!(
        lean.overlay(&mut [], &mut one).unwrap_err(),
        Fault(Category::Resource)
    );
    // Io: the flash fails to read past the superblock.
    let failing = Failing {
        dev: MemDevice::new(&img),
        good: 1,
    };
    let lean = Fs::<_, Fault>::open_for_read_as(&failing, &mut one).unwrap();
    assert_eq!(
        lean.resolve(b"/dir/file", &mut one).unwrap_err(),
        Fault(Category::Io)
    );
}
