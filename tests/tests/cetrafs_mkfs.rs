//! The streaming image writer: what it must write on a used device, and sizes no file
//! here can hold (simulated with a sink that only counts).

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{BlockSink, ImageBuilder, MemSink, Params, Placement, Sparse};
use tet_core::block::{Block, MemDevice, BLOCK_SIZE};
use tet_core::{Error, ErrorKind};

fn params(size: u64) -> Params {
    Params {
        size_bytes: size,
        bg_size_blocks: 1024,
        inodes: 64,
        ..Params::default()
    }
}

/// On a device full of old data, the image must verify clean: every block the format
/// reads as "empty" (bitmaps, registry, pending queues, journal slots) is written.
#[test]
fn an_image_written_over_garbage_verifies_clean() {
    let size = 16u64 << 20;
    let mut b = ImageBuilder::new(params(size));
    let d = b.mkdir(ImageBuilder::ROOT, b"d", 0o755).unwrap();
    b.add_file(
        d,
        b"f",
        vec![3; 10_000],
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    let mut img: Vec<u8> = (0..size as usize)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    let total = b.build_into(&mut MemSink(&mut img)).unwrap();
    assert_eq!(total, size / 4096);
    let (found, _) = fsck::findings(MemDevice::new(&img), &fsck::Options::default());
    assert_eq!(found, vec![]);
    // And the same bytes as the in-memory build wherever the format reads.
    let clean = b.build().unwrap();
    let (found, _) = fsck::findings(MemDevice::new(&clean), &fsck::Options::default());
    assert_eq!(found, vec![]);
}

/// Counts what would be written, holding nothing.
#[derive(Default)]
struct Counting {
    blocks: u64,
    nonzero: u64,
    max_lba: u64,
}

impl BlockSink for Counting {
    fn write_block(&mut self, lba: u64, block: &Block) -> Result<(), Error> {
        self.blocks += 1;
        self.nonzero += u64::from(block[..] != [0u8; BLOCK_SIZE][..]);
        self.max_lba = self.max_lba.max(lba);
        Ok(())
    }
}

/// 256 TiB (more than ext4's largest file) in 1 GiB groups: the writer goes through
/// every group writing three blocks of metadata each and stays inside the image.
#[test]
fn a_256_tib_image_is_written_as_metadata_only() {
    let size = 256u64 << 40;
    let p = Params {
        size_bytes: size,
        bg_size_blocks: 1 << 18,
        inodes: 1 << 22,
        zone_groups: 256,
        ..Params::default()
    };
    let b = ImageBuilder::new(p);
    let mut sink = Counting::default();
    let total = b.build_into(&mut sink).unwrap();
    let groups = u64::from(
        ImageBuilder::block_groups(&Params {
            size_bytes: size,
            bg_size_blocks: 1 << 18,
            inodes: 1 << 22,
            zone_groups: 256,
            ..Params::default()
        })
        .unwrap(),
    );
    assert!(groups > 262_000, "{groups}");
    assert!(sink.max_lba < total);
    // Per group: descriptor, region header, 8 bitmap blocks; plus the fixed tables.
    assert!(sink.blocks < groups * 11 + 10_000, "{} blocks", sink.blocks);
    assert!(
        sink.nonzero < groups * 4 + 10_000,
        "{} nonzero",
        sink.nonzero
    );
}

/// A sink that fails is an error naming the write, never a panic or a partial success.
#[test]
fn a_failing_sink_stops_the_build() {
    struct Full(u64);
    impl BlockSink for Full {
        fn write_block(&mut self, lba: u64, _: &Block) -> Result<(), Error> {
            if self.0 == 0 {
                return Err(Error::new(
                    ErrorKind::Io,
                    "image write",
                    lba * BLOCK_SIZE as u64,
                ));
            }
            self.0 -= 1;
            Ok(())
        }
    }
    for budget in [0, 1, 5, 50] {
        let e = ImageBuilder::new(params(8 << 20))
            .build_into(&mut Full(budget))
            .unwrap_err();
        assert_eq!((e.kind, e.what), (ErrorKind::Io, "image write"));
    }
}

/// The smallest legal block group (3 blocks): every image size gets an image that
/// verifies clean, the remainder too short for another group left unused (it used to
/// work for one size in four).
#[test]
fn tiny_block_groups_work_for_every_size() {
    let base = Params {
        size_bytes: 0,
        bg_size_blocks: 3,
        zone_groups: 1,
        nodes: 1,
        inodes: 16,
        journal_blocks: 3,
        pending_slots: 1,
        ..Params::default()
    };
    let min = ImageBuilder::min_size_bytes(&base).unwrap() / 4096;
    for blocks in min..min + 40 {
        let p = Params {
            size_bytes: blocks * 4096,
            ..base.clone()
        };
        let img = ImageBuilder::new(p)
            .build()
            .unwrap_or_else(|e| panic!("{blocks}: {e}"));
        let (found, _) = fsck::findings(MemDevice::new(&img), &fsck::Options::default());
        assert_eq!(found, vec![], "{blocks} blocks");
    }
    let p = Params {
        size_bytes: (min - 1) * 4096,
        ..base
    };
    match ImageBuilder::new(p).build() {
        Err(e) => assert_eq!(e.what, "image size"),
        Ok(_) => panic!("{} blocks is below the smallest size and built", min - 1),
    }
}
