#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]
//! The write path (`tet_alloc::cetrafs::write`, docs/cetrafs.md section 15): operations
//! against an in-memory model, the checker clean after each sequence and every file
//! reading as modelled; Unix errors; join refusals; recovery after a crash; and a power
//! cut after every write of a sequence of operations, each operation then wholly there
//! or wholly absent.

mod power;
use power::PowerCut;

use std::collections::BTreeMap;

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::write::{recover, Errno, JoinOptions, SetAttr, WriteError, Writer};
use tet_core::block::{MemDevice, MemDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::check::Severity;
use tet_core::cetrafs::{Buffers, Fs};

const B: usize = BLOCK_SIZE;
const ME: u64 = 0x7E7;

fn params(size: u64) -> Params {
    Params {
        size_bytes: size,
        bg_size_blocks: 512,
        inodes: 256,
        nodes: 4,
        journal_blocks: 33,
        ..Params::default()
    }
}

fn image(size: u64) -> Vec<u8> {
    let mut b = ImageBuilder::new(params(size));
    let d = b.mkdir(ImageBuilder::ROOT, b"old", 0o755).unwrap();
    b.add_file(
        d,
        b"f",
        vec![5u8; 3 * B + 10],
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    b.build().unwrap()
}

fn opts() -> JoinOptions {
    JoinOptions {
        node_id: ME,
        hostname: b"test".to_vec(),
        now_secs: 1_700_000_000,
    }
}

/// Error-severity findings of the full check.
fn errors(img: &[u8]) -> Vec<String> {
    let (f, _) = fsck::findings(MemDevice::new(img), &fsck::Options::default());
    f.iter()
        .filter(|f| f.severity() == Severity::Error)
        .map(|f| format!("{:?} {}", f.code, f.error))
        .collect()
}

fn all_findings(img: &[u8]) -> Vec<String> {
    let (f, _) = fsck::findings(MemDevice::new(img), &fsck::Options::default());
    f.iter()
        .map(|f| format!("{:?} {}", f.code, f.error))
        .collect()
}

fn read_file(img: &[u8], path: &[u8]) -> Option<Vec<u8>> {
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).ok()?;
    let ino = fs.resolve(path, &mut bufs).ok()?;
    let mut out = vec![0u8; usize::try_from(ino.size()).unwrap()];
    let n = fs.read(&ino, 0, &mut out, &mut bufs).unwrap();
    assert_eq!(n, out.len());
    Some(out)
}

#[test]
fn operations_leave_a_clean_image_that_reads_back() {
    let mut img = image(8 << 20);
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let root = 1;
        let d = w.mkdir(root, b"dir", 0o750, 1, 2).unwrap();
        let f = w.create(d, b"file", 0o640, 1, 2).unwrap();
        let data: Vec<u8> = (0..20 * B + 77).map(|i| (i % 253) as u8).collect();
        w.write(f, 0, &data).unwrap();
        w.write(f, 5, b"hello").unwrap();
        let g = w.create(root, b"sparse", 0o600, 0, 0).unwrap();
        w.write(g, 100 * B as u64 + 3, b"tail").unwrap();
        w.symlink(d, b"ln", b"../sparse", 0, 0).unwrap();
        w.link(f, root, b"hard").unwrap();
        w.set_xattr(f, b"user.k", b"v").unwrap();
        w.set_attr(
            f,
            &SetAttr {
                mode: Some(0o600),
                mtime_ns: Some(42),
                ..SetAttr::default()
            },
        )
        .unwrap();
        let old = w.resolve(b"/old/f").unwrap();
        w.truncate(old, 5).unwrap();
        w.truncate(old, 2 * B as u64).unwrap();
        w.rename(root, b"sparse", d, b"moved").unwrap();
        w.leave().unwrap();
    }
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    let mut data: Vec<u8> = (0..20 * B + 77).map(|i| (i % 253) as u8).collect();
    data[5..10].copy_from_slice(b"hello");
    assert_eq!(read_file(&img, b"/dir/file").unwrap(), data);
    assert_eq!(read_file(&img, b"/hard").unwrap(), data);
    let mut sparse = vec![0u8; 100 * B + 7];
    sparse[100 * B + 3..].copy_from_slice(b"tail");
    assert_eq!(read_file(&img, b"/dir/moved").unwrap(), sparse);
    assert_eq!(read_file(&img, b"/dir/ln").unwrap(), b"../sparse");
    let mut old = vec![5u8; 5];
    old.resize(2 * B, 0);
    assert_eq!(read_file(&img, b"/old/f").unwrap(), old);
    // Sequential writes come out as one extent.
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
    let ino = fs.resolve(b"/dir/file", &mut bufs).unwrap();
    let mut n = 0;
    fs.for_each_extent(&ino, &mut bufs.tree, |_| {
        n += 1;
        Ok(std::ops::ControlFlow::Continue(()))
    })
    .unwrap();
    assert_eq!(n, 1);
}
