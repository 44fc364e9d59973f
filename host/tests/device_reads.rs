//! `FileDevice`'s reads: short prefix reads (the inode table's 256 of 4,096 bytes) that
//! run forward are served from read-ahead windows, random ones read only the prefix;
//! either way every read returns the bytes of its block as the file holds them now.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::os::unix::fs::FileExt;

use tet_core::block::{BlockDevice, BlockDeviceMut, BLOCK_SIZE};
use tet_host::cetrafs::device::FileDevice;

/// Block `lba`'s content: every byte says which block and where in it.
fn block(lba: u64, salt: u8) -> Vec<u8> {
    (0..BLOCK_SIZE)
        .map(|i| (lba as u8).wrapping_mul(31) ^ (i as u8) ^ ((lba >> 8) as u8) ^ salt)
        .collect()
}

fn image(name: &str, blocks: u64) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("tet-host-{name}-{}.img", std::process::id()));
    let bytes: Vec<u8> = (0..blocks).flat_map(|b| block(b, 0)).collect();
    std::fs::write(&path, bytes).unwrap();
    path
}

fn prefix(dev: &FileDevice, lba: u64, len: usize) -> Vec<u8> {
    let mut buf = [0xeeu8; BLOCK_SIZE];
    dev.read_block_prefix(lba, &mut buf, len).unwrap();
    buf[..len].to_vec()
}

#[test]
fn forward_random_and_mixed_prefix_reads_return_their_blocks() {
    let path = image("prefix", 300);
    let dev = FileDevice::open(&path).unwrap();
    // Forward, as the checker walks the inode table: windows grow to 16 blocks.
    for lba in 10..200 {
        assert_eq!(prefix(&dev, lba, 256), block(lba, 0)[..256], "block {lba}");
    }
    // Random, and the same blocks again (from a window or not).
    for lba in [7u64, 250, 3, 199, 11, 299, 0, 150] {
        assert_eq!(prefix(&dev, lba, 256), block(lba, 0)[..256], "block {lba}");
        assert_eq!(prefix(&dev, lba, 100), block(lba, 0)[..100], "block {lba}");
    }
    // Interleaved with whole-block reads of another stream.
    for k in 0..60u64 {
        let (a, b) = (200 + k, 20 + k);
        assert_eq!(prefix(&dev, a, 256), block(a, 0)[..256]);
        let mut whole = [0u8; BLOCK_SIZE];
        dev.read_block(b, &mut whole).unwrap();
        assert_eq!(whole.to_vec(), block(b, 0));
    }
    // A prefix as long as the block is the block.
    assert_eq!(prefix(&dev, 42, BLOCK_SIZE), block(42, 0));
    // Past the end: the error names the block.
    let mut buf = [0u8; BLOCK_SIZE];
    let e = dev.read_block_prefix(300, &mut buf, 256).unwrap_err();
    assert_eq!(e.offset, 300 * 4096);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_write_is_seen_by_the_next_prefix_read_of_a_window() {
    let path = image("prefix-write", 64);
    let dev = FileDevice::open_rw(&path).unwrap();
    for lba in 0..20 {
        assert_eq!(prefix(&dev, lba, 256), block(lba, 0)[..256]);
    }
    // Block 5 sits in a window now; writing it through the device must not leave the
    // old bytes behind.
    let new: [u8; BLOCK_SIZE] = block(5, 0x5a).try_into().unwrap();
    dev.write_block(5, &new).unwrap();
    assert_eq!(prefix(&dev, 5, 256), block(5, 0x5a)[..256]);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_forward_stream_into_a_cut_part_fails_only_where_the_image_ends() {
    let path = image("prefix-cut", 256);
    let dev = FileDevice::open(&path).unwrap();
    for lba in 0..40 {
        assert_eq!(prefix(&dev, lba, 256), block(lba, 0)[..256]);
    }
    // Another process cuts the image at block 100, behind the device's back.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(100 * 4096).unwrap();
    for lba in 40..100 {
        assert_eq!(prefix(&dev, lba, 256), block(lba, 0)[..256], "block {lba}");
    }
    let mut buf = [0u8; BLOCK_SIZE];
    let e = dev.read_block_prefix(100, &mut buf, 256).unwrap_err();
    assert_eq!(e.offset, 100 * 4096);
    assert_eq!(e.what, "block read (the image ends here now)");
    // And a block rewritten by that process reads as it is now, once no window holds it.
    f.write_all_at(&block(150, 9)[..256], 90 * 4096).unwrap();
    drop(dev);
    let dev = FileDevice::open(&path).unwrap();
    assert_eq!(prefix(&dev, 90, 256), block(150, 9)[..256]);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_run_written_in_one_call_lands_whole_and_a_run_past_the_end_writes_nothing() {
    let path = image("runs", 64);
    let dev = FileDevice::open_rw(&path).unwrap();
    // Warm a window over blocks 8.., then write over it: the next reads see the run.
    assert_eq!(prefix(&dev, 8, 256), block(8, 0)[..256]);
    assert_eq!(prefix(&dev, 9, 256), block(9, 0)[..256]);
    let run: Vec<u8> = (8..20).flat_map(|b| block(b, 0x5a)).collect();
    dev.write_blocks(8, &run).unwrap();
    for lba in 7..21 {
        let salt = if (8..20).contains(&lba) { 0x5a } else { 0 };
        let mut b = [0u8; BLOCK_SIZE];
        dev.read_block(lba, &mut b).unwrap();
        assert_eq!(b[..], block(lba, salt)[..], "block {lba}");
    }
    // A run that ends past the device, and one of a partial block: refused, nothing
    // written (block 60 keeps its bytes).
    let past: Vec<u8> = (60..66).flat_map(|b| block(b, 0x77)).collect();
    let e = dev.write_blocks(60, &past).unwrap_err();
    assert_eq!(e.kind, tet_core::ErrorKind::Io);
    assert_eq!(e.offset, 60 * BLOCK_SIZE as u64);
    let e = dev.write_blocks(60, &past[..BLOCK_SIZE + 1]).unwrap_err();
    assert_eq!(e.kind, tet_core::ErrorKind::Invalid);
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk[60 * BLOCK_SIZE..61 * BLOCK_SIZE], block(60, 0)[..]);
    assert_eq!(on_disk.len(), 64 * BLOCK_SIZE, "the image did not grow");
    // A read-only device writes no run.
    let ro = FileDevice::open(&path).unwrap();
    assert_eq!(
        ro.write_blocks(0, &run).unwrap_err().kind,
        tet_core::ErrorKind::Io
    );
    let _ = std::fs::remove_file(&path);
}

/// Bytes this process has read through `read`-family calls (`rchar`, Linux).
fn bytes_read() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn holes_of_a_sparse_image_read_as_zeros_without_being_read() {
    // 20,000 blocks (78 MiB): data in a few places, holes between.
    let path = std::env::temp_dir().join(format!("tet-host-holes-{}.img", std::process::id()));
    let blocks = 20_000u64;
    let data: Vec<u64> = [0u64, 1, 2, 3, 100, 131, 2047, 2048, 19_999]
        .into_iter()
        .chain(250..260)
        .chain(9_000..9_003)
        .collect();
    {
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(blocks * BLOCK_SIZE as u64).unwrap();
        for lba in &data {
            f.write_all_at(&block(*lba, 1), lba * BLOCK_SIZE as u64)
                .unwrap();
        }
    }
    let want = |lba: u64| {
        if data.contains(&lba) {
            block(lba, 1)
        } else {
            vec![0u8; BLOCK_SIZE]
        }
    };
    let dev = FileDevice::open(&path).unwrap();
    let before = bytes_read();
    // Forward through everything, whole blocks and inode-sized prefixes.
    for lba in 0..blocks {
        let mut b = [0xeeu8; BLOCK_SIZE];
        dev.read_block(lba, &mut b).unwrap();
        assert!(b.to_vec() == want(lba), "block {lba}");
        if lba % 7 == 0 {
            assert_eq!(prefix(&dev, lba, 256), want(lba)[..256], "block {lba}");
        }
    }
    // Runs read in one call, across holes and data.
    for (lba, n) in [
        (0u64, 8usize),
        (96, 64),
        (2040, 16),
        (5000, 256),
        (8990, 20),
    ] {
        let mut buf = vec![0xeeu8; n * BLOCK_SIZE];
        dev.read_blocks(lba, &mut buf).unwrap();
        for k in 0..n as u64 {
            let at = k as usize * BLOCK_SIZE;
            assert!(
                buf[at..at + BLOCK_SIZE] == want(lba + k)[..],
                "run block {}",
                lba + k
            );
        }
    }
    let read = bytes_read() - before;
    // Where the filesystem says where its holes are, they are not read.
    let holes = std::fs::File::open(&path)
        .ok()
        .and_then(|f| rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(5 * BLOCK_SIZE as u64)).ok())
        == Some(100 * BLOCK_SIZE as u64);
    if holes {
        assert!(
            read < (4 << 20),
            "{read} bytes read for 78 MiB mostly holes"
        );
    }
    // A block written into a hole reads back as written.
    let mut b = [0x5au8; BLOCK_SIZE];
    let w = FileDevice::open_rw(&path).unwrap();
    w.write_block(12_345, &b).unwrap();
    b.fill(0);
    w.read_block(12_344, &mut b).unwrap();
    w.read_block(12_345, &mut b).unwrap();
    assert_eq!(b, [0x5au8; BLOCK_SIZE]);
    // A writable device trusts a hole only where it has written nothing: a run over the
    // block it wrote reads it, whatever the filesystem says.
    let mut run = vec![0xeeu8; 100 * BLOCK_SIZE];
    w.read_blocks(12_300, &mut run).unwrap();
    for k in 0..100usize {
        let want = if k == 45 { 0x5a } else { 0 };
        assert!(
            run[k * BLOCK_SIZE..][..BLOCK_SIZE]
                .iter()
                .all(|b| *b == want),
            "run block {}",
            12_300 + k
        );
    }
    // Written again in a hole's middle, through a run: read back whole.
    w.write_blocks(15_500, &vec![0x77u8; 3 * BLOCK_SIZE])
        .unwrap();
    let mut b3 = vec![0u8; 8 * BLOCK_SIZE];
    w.read_blocks(15_498, &mut b3).unwrap();
    for k in 0..8usize {
        let want = if (2..5).contains(&k) { 0x77 } else { 0 };
        assert!(
            b3[k * BLOCK_SIZE..][..BLOCK_SIZE]
                .iter()
                .all(|b| *b == want),
            "block {k}"
        );
    }
    for lba in 15_490..15_510u64 {
        w.read_block(lba, &mut b).unwrap();
        let want = if (15_500..15_503).contains(&lba) {
            0x77
        } else {
            0
        };
        assert_eq!(b, [want; BLOCK_SIZE], "block {lba}");
    }
    // Elsewhere its holes are skipped as a read-only device's are.
    let before = bytes_read();
    for lba in 16_000..17_000u64 {
        w.read_block(lba, &mut b).unwrap();
        assert_eq!(b, [0u8; BLOCK_SIZE], "block {lba}");
    }
    if holes {
        let read = bytes_read() - before;
        assert!(
            read < 200 * BLOCK_SIZE as u64,
            "{read} bytes read in a hole"
        );
    }
    std::fs::remove_file(&path).unwrap();
}

/// `read_prefixes` of `n` slots of `len` bytes from `lba`.
fn prefixes(dev: &FileDevice, lba: u64, len: usize, n: usize) -> tet_core::Result<Vec<u8>> {
    let mut out = vec![0xeeu8; n * len];
    dev.read_prefixes(lba, len, &mut out).map(|()| out)
}

/// The prefixes the file holds: each block's first `len` bytes, `salt` for the blocks
/// in `salted`.
fn want_prefixes(lba: u64, len: usize, n: usize, salted: &[u64], salt: u8) -> Vec<u8> {
    (lba..lba + n as u64)
        .flat_map(|b| block(b, if salted.contains(&b) { salt } else { 0 })[..len].to_vec())
        .collect()
}

#[test]
fn batches_of_prefixes_return_their_blocks_in_any_order_and_size() {
    let path = image("batches", 9_000);
    let dev = FileDevice::open(&path).unwrap();
    // Forward in batches of one size, as the inode walk reads: each batch after the
    // second was read ahead while the one before was used.
    for k in 0..4u64 {
        let lba = 1 + k * 2048;
        assert_eq!(
            prefixes(&dev, lba, 256, 2048).unwrap(),
            want_prefixes(lba, 256, 2048, &[], 0),
            "batch {k}"
        );
    }
    // A short last batch, inside the one read ahead of it.
    let got = prefixes(&dev, 1 + 4 * 2048, 256, 700).unwrap();
    assert_eq!(got, want_prefixes(1 + 4 * 2048, 256, 700, &[], 0));
    // Out of order, small and large, other lengths, and one block.
    for (lba, len, n) in [
        (3_000u64, 256usize, 300usize),
        (17, 100, 2048),
        (8_990, 4096, 10),
        (0, 1, 1),
        (5, 256, 0),
        (4_000, 256, 256),
        (4_256, 256, 256),
        (4_512, 256, 256),
    ] {
        assert_eq!(
            prefixes(&dev, lba, len, n).unwrap(),
            want_prefixes(lba, len, n, &[], 0),
            "{lba} {len} {n}"
        );
    }
    // Slots of no bytes, or longer than a block, or a buffer of part of a slot: refused.
    let mut out = vec![0u8; 5000];
    for (len, e_len) in [(0usize, 0usize), (4097, 4097), (256, 300)] {
        let e = dev.read_prefixes(1, len, &mut out[..e_len]).unwrap_err();
        assert_eq!(e.kind, tet_core::ErrorKind::Invalid, "{len}");
    }
    // Past the end: the error names the device's end, nothing read.
    let e = prefixes(&dev, 8_000, 256, 1_001).unwrap_err();
    assert!(
        matches!(e.kind, tet_core::ErrorKind::PastEnd { blocks: 9_000, .. }),
        "{e:?}"
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_write_after_a_batch_was_read_ahead_is_seen_by_that_batch() {
    let path = image("batch-write", 12_000);
    let dev = FileDevice::open_rw(&path).unwrap();
    // Two batches in a row: the third is being read ahead now.
    for lba in [100u64, 2_148] {
        assert_eq!(
            prefixes(&dev, lba, 256, 2048).unwrap(),
            want_prefixes(lba, 256, 2048, &[], 0)
        );
    }
    // Blocks of the third written through the device, before and after its middle.
    let salted = [4_196u64, 5_000, 6_243];
    for b in salted {
        let new: [u8; BLOCK_SIZE] = block(b, 0x3c).try_into().unwrap();
        dev.write_block(b, &new).unwrap();
    }
    assert_eq!(
        prefixes(&dev, 4_196, 256, 2048).unwrap(),
        want_prefixes(4_196, 256, 2048, &salted, 0x3c)
    );
    // And a compare-and-write into the batch read ahead of that one.
    let _ = prefixes(&dev, 6_244, 256, 2048).unwrap();
    let mut new = [0u8; 512];
    new.copy_from_slice(&block(8_300, 0x11)[..512]);
    let mut old = [0u8; 512];
    old.copy_from_slice(&block(8_300, 0)[..512]);
    assert!(dev.compare_and_write(8_300, &old, &new).unwrap());
    let got = prefixes(&dev, 8_292, 256, 2048).unwrap();
    assert_eq!(got[8 * 256..9 * 256], block(8_300, 0x11)[..256]);
    assert_eq!(got[..8 * 256], want_prefixes(8_292, 256, 8, &[], 0)[..]);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_batch_into_a_cut_part_fails_as_a_block_read_there_does() {
    let path = image("batch-cut", 8_000);
    let dev = FileDevice::open(&path).unwrap();
    assert_eq!(
        prefixes(&dev, 0, 256, 2048).unwrap(),
        want_prefixes(0, 256, 2048, &[], 0)
    );
    // Another process cuts the image inside the next batch. That call starts the one
    // after it ahead, on the other thread, past the cut.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(3_000 * 4096).unwrap();
    for (lba, first_missing) in [(2_048u64, 3_000u64), (4_096, 4_096)] {
        let e = prefixes(&dev, lba, 256, 2048).unwrap_err();
        assert!(
            matches!(e.kind, tet_core::ErrorKind::Truncated { .. }),
            "{e:?}"
        );
        assert_eq!(e.what, "block read (the image ends here now)");
        assert_eq!(
            e.offset,
            first_missing * 4096,
            "the first block past the cut"
        );
    }
    // Each block before the cut still reads alone.
    assert_eq!(prefix(&dev, 2_999, 256), block(2_999, 0)[..256]);
    drop(dev);
    std::fs::remove_file(&path).unwrap();
}

/// A block of the concurrency test: its number and the version written.
fn versioned(lba: u64, version: u64) -> [u8; BLOCK_SIZE] {
    let mut b = [0u8; BLOCK_SIZE];
    b[..8].copy_from_slice(&version.to_le_bytes());
    b[8..16].copy_from_slice(&lba.to_le_bytes());
    b
}

#[test]
fn batches_read_beside_a_writer_never_return_a_block_older_than_a_finished_write() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let blocks = 10_000u64;
    let path = std::env::temp_dir().join(format!("tet-host-versions-{}.img", std::process::id()));
    let bytes: Vec<u8> = (0..blocks).flat_map(|b| versioned(b, 0)).collect();
    std::fs::write(&path, bytes).unwrap();
    let dev = FileDevice::open_rw(&path).unwrap();
    let done: Vec<AtomicU64> = (0..blocks).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut v = 1u64;
            while !stop.load(Ordering::Acquire) {
                let lba = (v * 7_919) % blocks;
                dev.write_block(lba, &versioned(lba, v)).unwrap();
                done[lba as usize].store(v, Ordering::Release);
                v += 1;
                if v.is_multiple_of(64) {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
        });
        // The writer stops however the reader ends (a failed assertion too).
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let _stop = Stop(&stop);
        for round in 0..40u64 {
            for k in 0..4u64 {
                let lba = 1 + k * 2048;
                let floor: Vec<u64> = (lba..lba + 2048)
                    .map(|b| done[b as usize].load(Ordering::Acquire))
                    .collect();
                let got = prefixes(&dev, lba, 256, 2048).unwrap();
                for (j, slot) in got.chunks_exact(256).enumerate() {
                    let version = u64::from_le_bytes(slot[..8].try_into().unwrap());
                    let at = u64::from_le_bytes(slot[8..16].try_into().unwrap());
                    assert_eq!(
                        at,
                        lba + j as u64,
                        "round {round}: slot {j} is another block"
                    );
                    assert!(
                        version >= floor[j],
                        "round {round}: block {at} read version {version} after {} was written",
                        floor[j]
                    );
                }
            }
        }
    });
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_device_dropped_while_a_batch_is_read_ahead_stops_at_once() {
    let path = image("batch-drop", 6_200);
    for _ in 0..50 {
        let dev = FileDevice::open(&path).unwrap();
        prefixes(&dev, 0, 256, 2048).unwrap();
        // This call starts the batch from 4,096 ahead; the drop cancels and joins it.
        prefixes(&dev, 2_048, 256, 2048).unwrap();
        drop(dev);
    }
    std::fs::remove_file(&path).unwrap();
}
