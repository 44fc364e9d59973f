#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]
//! The write path (`tet_alloc::cetrafs::write`, docs/cetrafs.md section 15): operations
//! against an in-memory model, the checker clean after each sequence and every file
//! reading as modelled; Unix errors; join refusals; recovery after a crash; and a power
//! cut after every write of a sequence of operations, each operation then wholly there
//! or wholly absent.

mod power;
use power::PowerCut;
#[path = "power/reorder.rs"]
mod reorder;

use std::collections::BTreeMap;

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::write::{
    recover, recover_all, Errno, JoinOptions, SetAttr, WriteError, Writer,
};
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
    let _ = fs
        .for_each_extent(&ino, &mut bufs.tree, |_| {
            n += 1;
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .unwrap();
    assert_eq!(n, 1);
}

/// A device that records each write call: its first block and how many blocks it moved.
struct Counting<'a> {
    inner: MemDeviceMut<'a>,
    calls: std::cell::RefCell<Vec<(u64, usize)>>,
}

impl tet_core::block::BlockDevice for Counting<'_> {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut tet_core::block::Block) -> tet_core::Result<()> {
        self.inner.read_block(lba, buf)
    }
}

impl tet_core::block::BlockDeviceMut for Counting<'_> {
    fn write_block(&self, lba: u64, buf: &tet_core::block::Block) -> tet_core::Result<()> {
        self.calls.borrow_mut().push((lba, 1));
        self.inner.write_block(lba, buf)
    }
    fn write_blocks(&self, lba: u64, buf: &[u8]) -> tet_core::Result<()> {
        self.calls.borrow_mut().push((lba, buf.len() / B));
        self.inner.write_blocks(lba, buf)
    }
    fn flush(&self) -> tet_core::Result<()> {
        Ok(())
    }
    fn compare_and_write(
        &self,
        lba: u64,
        e: &[u8; tet_core::block::SECTOR],
        n: &[u8; tet_core::block::SECTOR],
    ) -> tet_core::Result<bool> {
        self.inner.compare_and_write(lba, e, n)
    }
}

#[test]
fn a_commit_writes_new_data_and_the_journal_in_runs_of_blocks() {
    let mut img = image(16 << 20);
    let data: Vec<u8> = (0..256 * B).map(|i| (i % 251) as u8).collect();
    {
        let dev = Counting {
            inner: MemDeviceMut::new(&mut img),
            calls: std::cell::RefCell::new(Vec::new()),
        };
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let f = w.create(1, b"big", 0o644, 0, 0).unwrap();
        w.set_batch(true).unwrap();
        for (k, part) in data.chunks(16 * B).enumerate() {
            w.write(f, (k * 16 * B) as u64, part).unwrap();
        }
        dev.calls.borrow_mut().clear();
        w.sync().unwrap();
        let calls = dev.calls.take();
        // 256 new data blocks, then the journal's slots and the checkpoint: a handful
        // of calls (one per block was 256 and more), the data in long runs.
        let blocks: usize = calls.iter().map(|c| c.1).sum();
        assert!(blocks >= 256 + 2, "{calls:?}");
        assert!(calls.len() <= 12, "{} calls: {calls:?}", calls.len());
        let longest = calls.iter().map(|c| c.1).max().unwrap();
        assert!(longest >= 128, "longest run {longest}: {calls:?}");
        // The journal's header and payload slots went out together.
        let js = calls.iter().filter(|c| c.1 >= 2 && c.1 < 128).count();
        assert!(js >= 1, "no journal run: {calls:?}");
        w.leave().unwrap();
    }
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    assert_eq!(read_file(&img, b"/big").unwrap(), data);
}

/// A seeded xorshift: the same sequence on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> Option<T> {
        (!v.is_empty()).then(|| v[self.below(v.len() as u64) as usize])
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, u64>),
    Link(Vec<u8>),
}

#[derive(Clone, Debug)]
struct MNode {
    kind: Kind,
    mode: u32,
    nlink: u32,
    parent: u64,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// The tree as the operations should leave it, by inode number.
#[derive(Clone, Debug)]
struct Model {
    nodes: BTreeMap<u64, MNode>,
}

impl Model {
    fn dir(&self, ino: u64) -> &BTreeMap<Vec<u8>, u64> {
        match &self.nodes[&ino].kind {
            Kind::Dir(d) => d,
            _ => panic!("not a dir"),
        }
    }
    fn dir_mut(&mut self, ino: u64) -> &mut BTreeMap<Vec<u8>, u64> {
        match &mut self.nodes.get_mut(&ino).unwrap().kind {
            Kind::Dir(d) => d,
            _ => panic!("not a dir"),
        }
    }
    fn is_dir(&self, ino: u64) -> bool {
        matches!(self.nodes[&ino].kind, Kind::Dir(_))
    }
    fn dirs(&self) -> Vec<u64> {
        self.nodes
            .keys()
            .copied()
            .filter(|i| self.is_dir(*i))
            .collect()
    }
    fn files(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| matches!(n.kind, Kind::File(_)))
            .map(|(i, _)| *i)
            .collect()
    }
    /// (dir, name) of every entry.
    fn entries(&self) -> Vec<(u64, Vec<u8>, u64)> {
        let mut v = Vec::new();
        for d in self.dirs() {
            for (n, i) in self.dir(d) {
                v.push((d, n.clone(), *i));
            }
        }
        v
    }
    fn drop_name(&mut self, ino: u64) {
        let n = self.nodes.get_mut(&ino).unwrap();
        n.nlink -= 1;
        if n.nlink == 0 || matches!(n.kind, Kind::Dir(_)) {
            self.nodes.remove(&ino);
        }
    }
    fn within(&self, mut d: u64, top: u64) -> bool {
        loop {
            if d == top {
                return true;
            }
            let p = self.nodes[&d].parent;
            if p == d {
                return false;
            }
            d = p;
        }
    }
}

const NAMES: [&[u8]; 6] = [b"a", b"b", b"c", b"dd", b"e.txt", b"f"];

/// Imports the image's tree (before any operation) into a model.
fn model_of(img: &[u8]) -> Model {
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).unwrap();
    let mut m = Model {
        nodes: BTreeMap::new(),
    };
    let mut todo = vec![1u64];
    while let Some(d) = todo.pop() {
        let ino = fs.inode(d, &mut bufs.data).unwrap();
        let mut entries = Vec::new();
        fs.read_dir(&ino, &mut bufs, |e| {
            entries.push((e.name().to_vec(), e.inode));
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        let mut map = BTreeMap::new();
        for (name, i) in entries {
            map.insert(name, i);
            let c = fs.inode(i, &mut bufs.data).unwrap();
            if c.is_dir() {
                todo.push(i);
            } else if let std::collections::btree_map::Entry::Vacant(v) = m.nodes.entry(i) {
                let mut data = vec![0u8; c.size() as usize];
                fs.read(&c, 0, &mut data, &mut bufs).unwrap();
                v.insert(MNode {
                    kind: if c.is_symlink() {
                        Kind::Link(data)
                    } else {
                        Kind::File(data)
                    },
                    mode: c.raw().mode.get() & 0o7777,
                    nlink: c.raw().nlink.get(),
                    parent: 0,
                    xattrs: BTreeMap::new(),
                });
            }
        }
        m.nodes.insert(
            d,
            MNode {
                kind: Kind::Dir(map),
                mode: ino.raw().mode.get() & 0o7777,
                nlink: ino.raw().nlink.get(),
                parent: ino.raw().parent.get(),
                xattrs: BTreeMap::new(),
            },
        );
    }
    m
}

/// Every node of the model reads from the image as modelled; nothing else is there.
fn assert_matches(img: &[u8], m: &Model, context: &str) {
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).unwrap();
    let mut seen = 0usize;
    let mut todo = vec![1u64];
    let mut visited = std::collections::BTreeSet::new();
    while let Some(d) = todo.pop() {
        let ino = fs.inode(d, &mut bufs.data).unwrap();
        let mut got = BTreeMap::new();
        fs.read_dir(&ino, &mut bufs, |e| {
            got.insert(e.name().to_vec(), e.inode);
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(&got, m.dir(d), "{context}: entries of dir {d}");
        for i in got.values() {
            if !visited.insert(*i) {
                continue;
            }
            seen += 1;
            let n = &m.nodes[i];
            let c = fs.inode(*i, &mut bufs.data).unwrap();
            assert_eq!(
                c.raw().mode.get() & 0o7777,
                n.mode,
                "{context}: mode of {i}"
            );
            assert_eq!(c.raw().nlink.get(), n.nlink, "{context}: nlink of {i}");
            let mut xs = BTreeMap::new();
            fs.xattrs(&c, &mut bufs, |x| {
                xs.insert(x.key().to_vec(), x.value().to_vec());
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
            assert_eq!(xs, n.xattrs, "{context}: xattrs of {i}");
            match &n.kind {
                Kind::Dir(_) => todo.push(*i),
                Kind::File(data) | Kind::Link(data) => {
                    let mut out = vec![0u8; c.size() as usize];
                    fs.read(&c, 0, &mut out, &mut bufs).unwrap();
                    assert!(
                        out == *data,
                        "{context}: contents of {i} ({} vs {} bytes)",
                        out.len(),
                        data.len()
                    );
                }
            }
        }
    }
    assert_eq!(seen + 1, m.nodes.len(), "{context}: nodes reachable");
}

/// One random operation, applied to the model and the writer; their outcomes agree.
fn step(w: &mut Writer<&MemDeviceMut<'_>>, m: &mut Model, r: &mut Rng) -> String {
    let name = r.pick(&NAMES).unwrap().to_vec();
    let dir = r.pick(&m.dirs()).unwrap();
    let exists = m.dir(dir).get(&name).copied();
    let op = r.below(13);
    let desc = format!(
        "op {op} dir {dir} name {:?}",
        String::from_utf8_lossy(&name)
    );
    let expect_ok = |res: Result<(), WriteError>, want: Option<Errno>, desc: &str| match (res, want)
    {
        (Ok(()), None) => {}
        (Err(e), Some(x)) => assert_eq!(e.errno(), x, "{desc}"),
        (got, want) => panic!("{desc}: got {got:?}, want {want:?}"),
    };
    match op {
        0 | 1 => {
            // `create`, or `create_file` with contents (zero blocks among them).
            let mut data: Vec<u8> = Vec::new();
            if op == 1 {
                data = (0..r.below(6 * B as u64)).map(|_| r.next() as u8).collect();
                if data.len() > 2 * B {
                    data[B..2 * B].fill(0);
                }
            }
            let res = if op == 0 {
                w.create(dir, &name, 0o644, 0, 0)
            } else {
                let a = SetAttr {
                    mode: Some(0o644),
                    mtime_ns: Some(7),
                    ..SetAttr::default()
                };
                w.create_file(dir, &name, &a, &data)
            };
            match exists {
                Some(_) => assert_eq!(res.unwrap_err().errno(), Errno::EEXIST, "{desc}"),
                None => {
                    let i = res.unwrap();
                    m.dir_mut(dir).insert(name, i);
                    m.nodes.insert(
                        i,
                        MNode {
                            kind: Kind::File(data),
                            mode: 0o644,
                            nlink: 1,
                            parent: 0,
                            xattrs: BTreeMap::new(),
                        },
                    );
                }
            }
        }
        2 => {
            let res = w.mkdir(dir, &name, 0o755, 0, 0);
            match exists {
                Some(_) => assert_eq!(res.unwrap_err().errno(), Errno::EEXIST, "{desc}"),
                None => {
                    let i = res.unwrap();
                    m.dir_mut(dir).insert(name, i);
                    m.nodes.get_mut(&dir).unwrap().nlink += 1;
                    m.nodes.insert(
                        i,
                        MNode {
                            kind: Kind::Dir(BTreeMap::new()),
                            mode: 0o755,
                            nlink: 2,
                            parent: dir,
                            xattrs: BTreeMap::new(),
                        },
                    );
                }
            }
        }
        3..=5 => {
            let Some(f) = r.pick(&m.files()) else {
                return desc;
            };
            let Kind::File(data) = &mut m.nodes.get_mut(&f).unwrap().kind else {
                unreachable!()
            };
            let len = [1, 100, B, 3 * B + 5, 40 * B][r.below(5) as usize];
            let off = if r.below(3) == 0 {
                r.below(60 * B as u64)
            } else {
                data.len() as u64
            };
            let bytes: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
            w.write(f, off, &bytes).unwrap();
            let end = off as usize + len;
            if data.len() < end {
                data.resize(end, 0);
            }
            data[off as usize..end].copy_from_slice(&bytes);
        }
        6 => {
            let Some(f) = r.pick(&m.files()) else {
                return desc;
            };
            let Kind::File(data) = &mut m.nodes.get_mut(&f).unwrap().kind else {
                unreachable!()
            };
            let size = r.below(data.len() as u64 + 3 * B as u64);
            w.truncate(f, size).unwrap();
            data.resize(size as usize, 0);
        }
        7 => {
            let res = w.unlink(dir, &name);
            match exists {
                None => expect_ok(res, Some(Errno::ENOENT), &desc),
                Some(i) if m.is_dir(i) => expect_ok(res, Some(Errno::EISDIR), &desc),
                Some(i) => {
                    expect_ok(res, None, &desc);
                    m.dir_mut(dir).remove(&name);
                    m.drop_name(i);
                }
            }
        }
        8 => {
            let res = w.rmdir(dir, &name);
            match exists {
                None => expect_ok(res, Some(Errno::ENOENT), &desc),
                Some(i) if !m.is_dir(i) => expect_ok(res, Some(Errno::ENOTDIR), &desc),
                Some(i) if !m.dir(i).is_empty() => expect_ok(res, Some(Errno::ENOTEMPTY), &desc),
                Some(i) => {
                    expect_ok(res, None, &desc);
                    m.dir_mut(dir).remove(&name);
                    m.nodes.remove(&i);
                    m.nodes.get_mut(&dir).unwrap().nlink -= 1;
                }
            }
        }
        9 => {
            let entries = m.entries();
            let Some(k) = (!entries.is_empty()).then(|| r.below(entries.len() as u64) as usize)
            else {
                return desc;
            };
            let (sdir, sname, src) = entries[k].clone();
            let desc = format!("{desc} rename {sdir}/{:?}", String::from_utf8_lossy(&sname));
            let res = w.rename(sdir, &sname, dir, &name);
            let src_dir = m.is_dir(src);
            let want = match exists {
                _ if src_dir && m.within(dir, src) && !(sdir == dir && exists == Some(src)) => {
                    Some(Errno::EINVAL)
                }
                Some(d) if d == src => None,
                Some(d) if src_dir && !m.is_dir(d) => Some(Errno::ENOTDIR),
                Some(d) if !src_dir && m.is_dir(d) => Some(Errno::EISDIR),
                Some(d) if m.is_dir(d) && !m.dir(d).is_empty() => Some(Errno::ENOTEMPTY),
                _ => None,
            };
            expect_ok(res, want, &desc);
            if want.is_none() && exists != Some(src) {
                if let Some(d) = exists {
                    if m.is_dir(d) {
                        m.nodes.remove(&d);
                        m.nodes.get_mut(&dir).unwrap().nlink -= 1;
                    } else {
                        m.drop_name(d);
                    }
                }
                m.dir_mut(sdir).remove(&sname);
                m.dir_mut(dir).insert(name, src);
                if src_dir && sdir != dir {
                    m.nodes.get_mut(&src).unwrap().parent = dir;
                    m.nodes.get_mut(&sdir).unwrap().nlink -= 1;
                    m.nodes.get_mut(&dir).unwrap().nlink += 1;
                }
            }
        }
        10 => {
            let Some(f) = r.pick(&m.files()) else {
                return desc;
            };
            let res = w.link(f, dir, &name);
            match exists {
                Some(_) => expect_ok(res, Some(Errno::EEXIST), &desc),
                None => {
                    expect_ok(res, None, &desc);
                    m.dir_mut(dir).insert(name, f);
                    m.nodes.get_mut(&f).unwrap().nlink += 1;
                }
            }
        }
        11 => {
            let target: Vec<u8> = format!("t/{}", r.below(1000)).into_bytes();
            let res = w.symlink(dir, &name, &target, 0, 0);
            match exists {
                Some(_) => assert_eq!(res.unwrap_err().errno(), Errno::EEXIST, "{desc}"),
                None => {
                    let i = res.unwrap();
                    m.dir_mut(dir).insert(name, i);
                    m.nodes.insert(
                        i,
                        MNode {
                            kind: Kind::Link(target),
                            mode: 0o777,
                            nlink: 1,
                            parent: 0,
                            xattrs: BTreeMap::new(),
                        },
                    );
                }
            }
        }
        _ => {
            let Some((_, _, i)) = r.pick(
                &m.entries()
                    .iter()
                    .map(|e| (0u64, 0u64, e.2))
                    .collect::<Vec<_>>(),
            ) else {
                return desc;
            };
            let key = [&b"user.a"[..], b"user.bb", b"trusted.c"][r.below(3) as usize].to_vec();
            match r.below(3) {
                0 => {
                    let res = w.remove_xattr(i, &key);
                    let had = m.nodes.get_mut(&i).unwrap().xattrs.remove(&key).is_some();
                    expect_ok(res, (!had).then_some(Errno::ENODATA), &desc);
                }
                1 => {
                    let mode = r.below(0o7777) as u32;
                    w.set_attr(
                        i,
                        &SetAttr {
                            mode: Some(mode),
                            ..SetAttr::default()
                        },
                    )
                    .unwrap();
                    m.nodes.get_mut(&i).unwrap().mode = mode;
                }
                _ => {
                    let v: Vec<u8> = (0..r.below(257)).map(|_| r.next() as u8).collect();
                    w.set_xattr(i, &key, &v).unwrap();
                    m.nodes.get_mut(&i).unwrap().xattrs.insert(key, v);
                }
            }
        }
    }
    desc
}

#[test]
fn random_operations_agree_with_the_model() {
    let sequences: u64 = std::env::var("WRITE_MODEL_SEQUENCES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut deepest = 0u16;
    for seed in 1..=sequences {
        let mut img = image(16 << 20);
        let mut m = model_of(&img);
        let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0x1234_5678_9ABC_DEF1));
        let ops = 60;
        let mut log = Vec::new();
        {
            let dev = MemDeviceMut::new(&mut img);
            let mut w = Writer::join(&dev, &opts()).unwrap();
            // Odd seeds batch operations into shared transactions.
            w.set_batch(seed % 2 == 1).unwrap();
            for _ in 0..ops {
                log.push(step(&mut w, &mut m, &mut r));
            }
            w.leave().unwrap();
        }
        let context = format!("seed {seed}, ops {log:?}");
        assert_eq!(
            errors(&img),
            Vec::<String>::new(),
            "{context}: {:?}",
            all_findings(&img)
        );
        assert_matches(&img, &m, &context);
        deepest = deepest.max(max_depth(&img, &m));
    }
    // Interleaved writes fragment files: extent trees below the inode were written.
    assert!(deepest >= 1, "no file needed a tree block");
}

/// The deepest extent tree among the model's files.
fn max_depth(img: &[u8], m: &Model) -> u16 {
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).unwrap();
    m.files()
        .iter()
        .map(|i| fs.inode(*i, &mut bufs.data).unwrap().depth())
        .max()
        .unwrap_or(0)
}

/// The tree as a reader sees it: path → (mode, nlink, contents or target, xattrs).
type Dump = BTreeMap<Vec<u8>, (u32, u32, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>)>;

fn dump(img: &[u8]) -> Dump {
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).unwrap();
    let mut out = Dump::new();
    let mut todo = vec![(b"".to_vec(), 1u64)];
    while let Some((path, d)) = todo.pop() {
        let ino = fs.inode(d, &mut bufs.data).unwrap();
        let mut entries = Vec::new();
        fs.read_dir(&ino, &mut bufs, |e| {
            entries.push((e.name().to_vec(), e.inode));
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        for (name, i) in entries {
            let mut p = path.clone();
            p.push(b'/');
            p.extend_from_slice(&name);
            let c = fs.inode(i, &mut bufs.data).unwrap();
            let mut xs = Vec::new();
            fs.xattrs(&c, &mut bufs, |x| {
                xs.push((x.key().to_vec(), x.value().to_vec()));
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
            xs.sort();
            let mut data = Vec::new();
            if c.is_dir() {
                todo.push((p.clone(), i));
            } else {
                data = vec![0u8; c.size() as usize];
                fs.read(&c, 0, &mut data, &mut bufs).unwrap();
            }
            out.insert(p, (c.raw().mode.get(), c.raw().nlink.get(), data, xs));
        }
    }
    out
}

/// The operations of the power-cut run, each one transaction, the first `limit` of
/// them. Returns how many completed, or how many had when the device failed.
fn ops<D: tet_core::block::BlockDeviceMut>(
    w: &mut Writer<D>,
    limit: usize,
) -> Result<usize, (usize, WriteError)> {
    ops_marked(w, limit, &mut || {})
}

/// [`ops`], calling `after` when each operation returns.
fn ops_marked<D: tet_core::block::BlockDeviceMut>(
    w: &mut Writer<D>,
    limit: usize,
    after: &mut dyn FnMut(),
) -> Result<usize, (usize, WriteError)> {
    let mut done = 0usize;
    macro_rules! step {
        ($e:expr) => {
            if done == limit {
                return Ok(done);
            }
            $e.map_err(|e| (done, e))?;
            done += 1;
            after();
        };
    }
    let at = |w: &Writer<D>, p: &[u8], done: usize| w.resolve(p).map_err(|e| (done, e));
    let old = at(w, b"/old", done)?;
    let f = at(w, b"/old/f", done)?;
    step!(w.mkdir(1, b"d", 0o755, 0, 0));
    let d = at(w, b"/d", done)?;
    step!(w.create(d, b"new", 0o644, 3, 4));
    let n = at(w, b"/d/new", done)?;
    step!(w.write(n, 0, &vec![0xA5; 9 * B + 1]));
    // Past 64 KiB (the mount's writes reach 1 MiB): a batch takes it whole too.
    step!(w.write(n, 5 * B as u64, &vec![0x3C; 75 * B + 7]));
    step!(w.write(f, 7, b"overwritten in place"));
    step!(w.set_xattr(n, b"user.x", b"1"));
    step!(w.link(n, old, b"hard"));
    step!(w.symlink(d, b"s", b"/d/new", 0, 0));
    step!(w.rename(old, b"f", d, b"f2"));
    step!(w.truncate(n, 2 * B as u64 + 9));
    step!(w.set_attr(
        n,
        &SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        }
    ));
    step!(w.unlink(old, b"hard"));
    step!(w.rmdir(1, b"old"));
    Ok(done)
}

const OPS: usize = 13;

#[test]
fn a_power_cut_at_any_write_leaves_each_operation_wholly_there_or_absent() {
    power_cuts(false);
}

#[test]
fn a_power_cut_in_batch_mode_loses_whole_operations_only() {
    power_cuts(true);
}

fn power_cuts(batch: bool) {
    let base = image(8 << 20);
    // The states between operations.
    let mut states = Vec::new();
    for k in 0..=OPS {
        let mut copy = base.clone();
        {
            let dev = MemDeviceMut::new(&mut copy);
            let mut w = Writer::join(&dev, &opts()).unwrap();
            assert_eq!(ops(&mut w, k).unwrap(), k);
            w.leave().unwrap();
        }
        assert_eq!(
            errors(&copy),
            Vec::<String>::new(),
            "after {k} operations: {:?}",
            all_findings(&copy)
        );
        states.push(dump(&copy));
    }
    assert_ne!(states[0], states[OPS]);
    // The number of writes of the whole run (join and leave included).
    let total = {
        let mut img = base.clone();
        let dev = PowerCut::new(&mut img, u64::MAX, 0);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        w.set_batch(batch).unwrap();
        assert_eq!(ops(&mut w, OPS).unwrap(), OPS);
        w.leave().unwrap();
        dev.writes.get()
    };
    assert!(total > 50, "{total} writes");
    for cut in 1..=total {
        for tear in [0usize, 3] {
            let mut img = base.clone();
            let done = {
                let dev = PowerCut::new(&mut img, cut, tear);
                match Writer::join(&dev, &opts()) {
                    Ok(mut w) => match w
                        .set_batch(batch)
                        .map_err(|e| (0, e))
                        .and_then(|()| ops(&mut w, OPS))
                    {
                        Ok(n) => {
                            let _ = w.leave();
                            n
                        }
                        Err((n, _)) => n,
                    },
                    Err(_) => 0,
                }
            };
            // A crashed writer's image is damaged nowhere: its counts trail, as
            // warnings naming `replay` (docs/cetrafs.md section 15).
            assert_eq!(
                errors(&img),
                Vec::<String>::new(),
                "cut after write {cut}, before recovery: {:?}",
                all_findings(&img)
            );
            // Recovery as the protocol defines it (`replay`: every crashed writer),
            // then the checker and the tree.
            let back = recover_all(MemDeviceMut::new(&mut img)).unwrap();
            assert!(back.iter().all(|(id, _)| *id == ME), "{back:?}");
            let context =
                format!("cut after write {cut} of {total} (tear {tear}), {done} operations done");
            assert_eq!(
                errors(&img),
                Vec::<String>::new(),
                "{context}: {:?}",
                all_findings(&img)
            );
            let now = dump(&img);
            // Unbatched: the operations done, or one more. Batched: operations that
            // shared a transaction not yet committed may be lost, whole.
            let first = if batch { 0 } else { done };
            assert!(
                states[first..=(done + 1).min(OPS)].contains(&now),
                "{context}: the tree is no state between {first} and {}",
                done + 1
            );
            // And the node joins again.
            let dev = MemDeviceMut::new(&mut img);
            Writer::join(&dev, &opts()).unwrap().leave().unwrap();
        }
    }
}

/// Error-severity findings a crashed writer's image may show before its recovery: the
/// free counts of the zone groups it owns (section 15, "Recovery"). Anything else,
/// a journal finding above all, is an error of the protocol.
fn errors_before_recovery(img: &[u8]) -> Vec<String> {
    use tet_core::cetrafs::Code;
    let (f, _) = fsck::findings(MemDevice::new(img), &fsck::Options::default());
    f.iter()
        .filter(|f| f.severity() == Severity::Error)
        .filter(|f| !matches!(f.code, Code::GroupFreeCount | Code::ZoneFreeCount))
        .map(|f| format!("{:?} {}", f.code, f.error))
        .collect()
}

/// What a reordered cut's image must satisfy: given the image, the operations returned
/// before its epoch began and by its end, and the case's description.
type Accept<'a> = &'a mut dyn FnMut(&[u8], usize, usize, &str);

/// Every epoch (the writes between two flushes) of a recorded run cut with its writes
/// landed in any order: subsets of them, some with a member torn. Each image must
/// check clean before recovery but for the free counts, recover, check clean after, and
/// `ok` must accept it, given the operations returned before the epoch began and by its
/// end.
fn reordered_cuts(base: &[u8], log: &[reorder::Event], marks: &[usize], ok: Accept<'_>) -> usize {
    let mut rng = reorder::Rng(0x27_2026);
    let mut cases = 0usize;
    for (n, e) in reorder::epochs(log).into_iter().enumerate() {
        let before = marks.iter().filter(|m| **m <= e.start).count();
        let by_end = marks.iter().filter(|m| **m <= e.end).count();
        for (mask, tear) in reorder::subsets(e.end - e.start, 12, 12, &mut rng) {
            let mut img = reorder::cut_image(base, log, e, &|i| mask[i], tear);
            let landed: usize = mask.iter().filter(|m| **m).count();
            let context = format!(
                "epoch {n} (writes {}..{} of {}), {landed} of its writes landed, tear {tear:?}",
                e.start,
                e.end,
                log.len()
            );
            assert_eq!(
                errors_before_recovery(&img),
                Vec::<String>::new(),
                "{context}, before recovery: {:?}",
                all_findings(&img)
            );
            recover(MemDeviceMut::new(&mut img), ME).unwrap();
            assert_eq!(
                errors(&img),
                Vec::<String>::new(),
                "{context}: {:?}",
                all_findings(&img)
            );
            ok(&img, before, by_end, &context);
            // Recovery is idempotent, and the node joins again.
            let dev = MemDeviceMut::new(&mut img);
            assert_eq!(recover(&dev, ME).unwrap().replayed, 0, "{context}");
            Writer::join(&dev, &opts()).unwrap().leave().unwrap();
            cases += 1;
        }
    }
    cases
}

#[test]
fn a_power_cut_that_lands_a_flushs_writes_in_any_order_loses_whole_operations_only() {
    for batch in [false, true] {
        let base = image(8 << 20);
        let mut states = Vec::new();
        for k in 0..=OPS {
            let mut copy = base.clone();
            {
                let dev = MemDeviceMut::new(&mut copy);
                let mut w = Writer::join(&dev, &opts()).unwrap();
                assert_eq!(ops(&mut w, k).unwrap(), k);
                w.leave().unwrap();
            }
            states.push(dump(&copy));
        }
        let mut img = base.clone();
        let dev = reorder::Recorder::new(&mut img);
        let mut marks = Vec::new();
        {
            let mut w = Writer::join(&dev, &opts()).unwrap();
            w.set_batch(batch).unwrap();
            let n = ops_marked(&mut w, OPS, &mut || marks.push(dev.log.borrow().len())).unwrap();
            assert_eq!(n, OPS);
            w.leave().unwrap();
        }
        let log = dev.log.borrow().clone();
        let cases = reordered_cuts(&base, &log, &marks, &mut |img, before, by_end, context| {
            let now = dump(img);
            // Unbatched: an operation returned before the epoch is there. Batched: the
            // pending transaction's operations may be lost, whole.
            let first = if batch { 0 } else { before };
            let last = (by_end + 1).min(OPS);
            assert!(
                states[first..=last].contains(&now),
                "{context}: the tree is no state between {first} and {last} (batch {batch})"
            );
        });
        assert!(cases > 100, "{cases} cases");
    }
}

#[test]
fn a_put_cut_with_a_flushs_writes_landed_in_any_order_leaves_whole_files_only() {
    let src = host_tree("reorder");
    let base = image(8 << 20);
    let mut img = base.clone();
    let dev = reorder::Recorder::new(&mut img);
    {
        let mut w = Writer::join(&dev, &opts()).unwrap();
        tet_host::cetrafs::write::put_with(&mut w, &src, b"/").unwrap();
        w.leave().unwrap();
    }
    let log = dev.log.borrow().clone();
    let cases = reordered_cuts(&base, &log, &[], &mut |img, _, _, context| {
        for (path, (mode, _, data, _)) in dump(img) {
            let Some(rel) = path.strip_prefix(b"/t/".as_slice()) else {
                continue;
            };
            let host = src.join(std::str::from_utf8(rel).unwrap());
            match mode & 0o170_000 {
                0o100_000 => assert!(
                    data == std::fs::read(&host).unwrap(),
                    "{context}: {host:?} partial"
                ),
                0o120_000 => assert_eq!(data, b"a/f2", "{context}"),
                _ => {}
            }
        }
    });
    assert!(cases > 20, "{cases} cases");
    let _ = std::fs::remove_dir_all(src.parent().unwrap());
}

#[test]
fn operations_fail_with_the_unix_error_and_write_nothing() {
    let mut img = image(8 << 20);
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let d = w.mkdir(1, b"d", 0o755, 0, 0).unwrap();
        let sub = w.mkdir(d, b"sub", 0o755, 0, 0).unwrap();
        let f = w.create(d, b"f", 0o644, 0, 0).unwrap();
        w.write(f, 0, b"x").unwrap();
        let e = |r: Result<u64, WriteError>| r.unwrap_err().errno();
        let u = |r: Result<(), WriteError>| r.unwrap_err().errno();
        assert_eq!(
            e(w.create(d, &[b'n'; 256], 0o644, 0, 0)),
            Errno::ENAMETOOLONG
        );
        assert_eq!(e(w.create(d, b"a/b", 0o644, 0, 0)), Errno::EINVAL);
        assert_eq!(e(w.create(d, b"..", 0o644, 0, 0)), Errno::EINVAL);
        assert_eq!(e(w.create(d, b"f", 0o644, 0, 0)), Errno::EEXIST);
        assert_eq!(e(w.mkdir(d, b"sub", 0o755, 0, 0)), Errno::EEXIST);
        assert_eq!(e(w.create(f, b"x", 0o644, 0, 0)), Errno::ENOTDIR);
        assert_eq!(e(w.resolve(b"/d/missing")), Errno::ENOENT);
        assert_eq!(e(w.resolve(b"/d/f/x")), Errno::ENOTDIR);
        assert_eq!(u(w.unlink(1, b"d")), Errno::EISDIR);
        assert_eq!(u(w.rmdir(1, b"d")), Errno::ENOTEMPTY);
        assert_eq!(u(w.rmdir(d, b"f")), Errno::ENOTDIR);
        assert_eq!(u(w.rename(1, b"d", sub, b"d")), Errno::EINVAL);
        assert_eq!(u(w.rename(d, b"f", 1, b"old")), Errno::EISDIR);
        assert_eq!(u(w.rename(1, b"d", 1, b"old")), Errno::ENOTEMPTY);
        assert_eq!(u(w.link(d, 1, b"dl")), Errno::EPERM);
        assert_eq!(u(w.write(d, 0, b"x")), Errno::EISDIR);
        assert_eq!(u(w.truncate(d, 0)), Errno::EISDIR);
        assert_eq!(u(w.remove_xattr(f, b"user.none")), Errno::ENODATA);
        assert_eq!(u(w.set_xattr(f, b"user.big", &[0; 257])), Errno::E2BIG);
        assert_eq!(u(w.set_xattr(f, &[b'k'; 65], b"v")), Errno::ENAMETOOLONG);
        assert_eq!(u(w.write(f, 1 << 44, b"x")), Errno::EFBIG);
        w.leave().unwrap();
    }
    let before = img.clone();
    assert_eq!(errors(&img), Vec::<String>::new());
    // Filling the image: ENOSPC, and what was written before it is consistent.
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let f = w.create(1, b"big", 0o644, 0, 0).unwrap();
        let chunk = vec![7u8; 64 * B];
        let mut off = 0u64;
        let err = loop {
            match w.write(f, off, &chunk) {
                Ok(()) => off += chunk.len() as u64,
                Err(e) => break e,
            }
            assert!(off < 16 << 20, "never ran out of space");
        };
        assert_eq!(err.errno(), Errno::ENOSPC);
        w.leave().unwrap();
    }
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    assert_ne!(img, before);
}

#[test]
fn a_join_is_refused_while_another_node_is_active_or_a_journal_is_dirty() {
    use tet_alloc::cetrafs::testing::{register_node, write_journal_txn};
    let mut img = image(8 << 20);
    register_node(&mut img, 0, 0x55, 1, b"other").unwrap();
    let dev = MemDeviceMut::new(&mut img);
    let e = Writer::join(&dev, &opts()).err().unwrap();
    assert!(
        matches!(
            e,
            WriteError::NodeActive {
                row: 0,
                node_id: 0x55,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("`tet-host replay IMAGE`"), "{e}");
    let mut img = image(8 << 20);
    register_node(&mut img, 0, 0x55, 3, b"other").unwrap();
    let target = {
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
        fs.superblock().raw().inode_table_start.get() + 1
    };
    let root = img[target as usize * B..(target as usize + 1) * B].to_vec();
    write_journal_txn(&mut img, 0, 0, 5, &[(target, root, false)], true, true).unwrap();
    let dev = MemDeviceMut::new(&mut img);
    let e = Writer::join(&dev, &opts()).err().unwrap();
    assert!(matches!(e, WriteError::NeedsReplay { row: 0, .. }), "{e:?}");
}

#[test]
fn a_crashed_writer_is_recovered_by_its_next_join() {
    let mut img = image(8 << 20);
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let f = w.create(1, b"f", 0o644, 0, 0).unwrap();
        w.write(f, 0, &vec![1u8; 10 * B]).unwrap();
        // Dropped without leaving: the row stays ACTIVE, zone group 0 owned.
    }
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let f = w.resolve(b"/f").unwrap();
        w.write(f, 10 * B as u64, b"more").unwrap();
        w.leave().unwrap();
    }
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    // Clean again: SB_CLEAN set, as after a clean leave.
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
    assert_eq!(fs.superblock().raw().sb_flags.get() & 1, 1);
    let mut want = vec![1u8; 10 * B];
    want.extend_from_slice(b"more");
    assert_eq!(read_file(&img, b"/f").unwrap(), want);
    // Written sequentially in pieces: one extent.
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
    let ino = fs.resolve(b"/f", &mut bufs).unwrap();
    let mut n = 0;
    let _ = fs.for_each_extent(&ino, &mut bufs.tree, |_| {
        n += 1;
        Ok(std::ops::ControlFlow::Continue(()))
    });
    assert_eq!(n, 1);
}

#[test]
fn a_file_unlinked_while_open_waits_in_lost_found_until_released() {
    let mut img = image(8 << 20);
    let keep;
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let f = w.create(1, b"open", 0o644, 0, 0).unwrap();
        w.write(f, 0, b"still here").unwrap();
        let g = w.create(1, b"two", 0o644, 0, 0).unwrap();
        w.link(g, 1, b"names").unwrap();
        assert_eq!(w.unlink_open(1, b"two").unwrap(), None);
        keep = w.unlink_open(1, b"open").unwrap().unwrap();
        assert_eq!(keep, f);
        w.leave().unwrap();
    }
    // A crash (or a leave) before the last close: a named file, no finding.
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    assert_eq!(
        read_file(&img, format!("/lost+found/#{keep}").as_bytes()).unwrap(),
        b"still here"
    );
    assert!(read_file(&img, b"/open").is_none());
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        w.release(keep).unwrap();
        w.leave().unwrap();
    }
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    assert!(read_file(&img, format!("/lost+found/#{keep}").as_bytes()).is_none());
}

/// The fuzz target's body over seeded random inputs (a sample of what `cargo fuzz run
/// cetrafs_write` explores; `WRITE_FUZZ_INPUTS` for longer runs).
#[test]
fn the_fuzz_body_holds_over_random_inputs() {
    let n: u64 = std::env::var("WRITE_FUZZ_INPUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let mut r = Rng(0xC0FF_EE00_D15E_A5E5);
    for _ in 0..n {
        let len = 4 * (1 + r.below(64)) as usize;
        let data: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
        tet_host::fuzzing::cetrafs_write(&data);
    }
}

/// A small host tree for `put`: nested directories, files of 0 to 17 blocks, a hard
/// link and a symlink.
fn host_tree(name: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("tet-write-put-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let t = root.join("t");
    std::fs::create_dir_all(t.join("a/b")).unwrap();
    for (i, size) in [0usize, 100, 5000, 3 * B + 1, 70_000].iter().enumerate() {
        let data: Vec<u8> = (0..*size).map(|k| (k * 7 + i) as u8).collect();
        let dir = if i % 2 == 0 {
            t.join("a")
        } else {
            t.join("a/b")
        };
        std::fs::write(dir.join(format!("f{i}")), data).unwrap();
    }
    std::fs::hard_link(t.join("a/f2"), t.join("hard")).unwrap();
    std::os::unix::fs::symlink("a/f2", t.join("sym")).unwrap();
    t
}

#[test]
fn a_power_cut_at_any_write_of_put_leaves_whole_files_only() {
    let src = host_tree("cut");
    let base = image(8 << 20);
    let total = {
        let mut img = base.clone();
        let dev = PowerCut::new(&mut img, u64::MAX, 0);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        tet_host::cetrafs::write::put_with(&mut w, &src, b"/").unwrap();
        w.leave().unwrap();
        let n = dev.writes.get();
        assert_eq!(errors(&img), Vec::<String>::new());
        let all = dump(&img);
        assert!(
            all.contains_key(b"/t/a/b/f3".as_slice()),
            "{:?}",
            all.keys()
        );
        n
    };
    for cut in 1..=total {
        for tear in [0usize, 5] {
            let mut img = base.clone();
            {
                let dev = PowerCut::new(&mut img, cut, tear);
                if let Ok(mut w) = Writer::join(&dev, &opts()) {
                    if tet_host::cetrafs::write::put_with(&mut w, &src, b"/").is_ok() {
                        let _ = w.leave();
                    }
                }
            }
            assert_eq!(
                errors(&img),
                Vec::<String>::new(),
                "put cut after write {cut}, before recovery: {:?}",
                all_findings(&img)
            );
            recover_all(MemDeviceMut::new(&mut img)).unwrap();
            let context = format!("put cut after write {cut} of {total} (tear {tear})");
            assert_eq!(
                errors(&img),
                Vec::<String>::new(),
                "{context}: {:?}",
                all_findings(&img)
            );
            // Every file there is whole: the source's bytes (a symlink its target).
            for (path, (mode, _, data, _)) in dump(&img) {
                let Some(rel) = path.strip_prefix(b"/t/".as_slice()) else {
                    continue;
                };
                let host = src.join(std::str::from_utf8(rel).unwrap());
                match mode & 0o170_000 {
                    0o100_000 => assert!(
                        data == std::fs::read(&host).unwrap(),
                        "{context}: {host:?} partial"
                    ),
                    0o120_000 => assert_eq!(data, b"a/f2", "{context}"),
                    _ => {}
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(src.parent().unwrap());
}

#[test]
fn a_file_of_more_extents_than_four_leaves_hold_gets_a_depth_2_tree() {
    let mut img = image(16 << 20);
    let n = 1100u64; // > 4 × 254 extents: one per written block, holes between
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        w.set_batch(true).unwrap();
        let f = w.create(1, b"holes", 0o644, 0, 0).unwrap();
        for k in 0..n {
            w.write(f, 2 * k * B as u64, &[k as u8 | 1; 8]).unwrap();
        }
        // Appending past the end, and cutting the tail, keep it consistent.
        w.truncate(f, (2 * n - 101) * B as u64).unwrap();
        w.leave().unwrap();
    }
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
    let ino = fs.resolve(b"/holes", &mut bufs).unwrap();
    assert_eq!(ino.depth(), 2);
    let got = read_file(&img, b"/holes").unwrap();
    assert_eq!(got.len(), (2 * n as usize - 101) * B);
    for k in 0..(n as usize - 51) {
        assert_eq!(got[2 * k * B], k as u8 | 1, "block {}", 2 * k);
        assert_eq!(got[(2 * k + 1) * B], 0, "hole {}", 2 * k + 1);
    }
}

#[test]
fn the_view_reads_the_pending_batch_and_the_device_only_what_was_committed() {
    use tet_alloc::cetrafs::view;
    let mut img = image(16 << 20);
    let body: Vec<u8> = (0..3 * B + 100).map(|i| (i % 251) as u8).collect();
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        w.set_batch(true).unwrap();
        let before = w.next_txn_id();
        let d = w.mkdir(1, b"new", 0o755, 0, 0).unwrap();
        let f = w.create(d, b"f", 0o644, 0, 0).unwrap();
        w.write(f, 0, &body).unwrap();
        // Rewritten in the batch: the new block stays a direct write.
        w.write(f, 10, b"again").unwrap();
        w.set_xattr(f, b"user.k", b"v").unwrap();
        // An old file's mapped block changed in place (journaled).
        let old = w.resolve(b"/old/f").unwrap();
        w.write(old, B as u64 + 1, b"patched").unwrap();
        assert_eq!(w.next_txn_id(), before, "nothing committed yet");

        let mut buf = [0u8; B];
        let v = w.view(&mut buf).unwrap();
        let mut bufs = Buffers::new();
        let ino = v.resolve(b"/new/f", &mut bufs).unwrap();
        let mut want = body.clone();
        want[10..15].copy_from_slice(b"again");
        let mut got = vec![0u8; want.len()];
        // One run read (`read_blocks`), the pending blocks patched over it.
        let n = view::read_at(&v, &ino, 0, &mut got, &mut bufs.tree).unwrap();
        assert_eq!((n, &got), (want.len(), &want));
        assert_eq!(
            view::xattr_value(&v, &ino, b"user.k", &mut bufs).unwrap(),
            Some(b"v".to_vec())
        );
        let dir = v.resolve(b"/new", &mut bufs).unwrap();
        let page = view::dir_page(&v, &dir, view::DOTDOT_COOKIE, 10, &mut bufs).unwrap();
        assert_eq!(page.len(), 1);
        assert_eq!(page[0].name, b"f");
        let old_i = v.resolve(b"/old/f", &mut bufs).unwrap();
        let mut got = vec![0u8; 3 * B + 10];
        view::read_at(&v, &old_i, 0, &mut got, &mut bufs.tree).unwrap();
        assert_eq!(&got[B + 1..B + 8], b"patched");
        assert_eq!(got[B], 5);
        // The device itself has none of it until the batch is committed.
        let raw = Fs::open(&dev, &mut bufs.data).unwrap();
        assert!(raw.resolve(b"/new", &mut bufs).is_err());
        w.sync().unwrap();
        w.leave().unwrap();
    }
    assert_eq!(errors(&img), Vec::<String>::new());
    let mut want = body;
    want[10..15].copy_from_slice(b"again");
    assert_eq!(read_file(&img, b"/new/f").unwrap(), want);
    assert_eq!(
        &read_file(&img, b"/old/f").unwrap()[B + 1..B + 8],
        b"patched"
    );
}

/// An image whose `/u` has 2 data blocks, 12 zero blocks mkfs left uninitialized, and 2
/// more data blocks; and those 16 blocks' bytes.
fn uninit_image() -> (Vec<u8>, Vec<u8>) {
    let mut data = vec![0u8; 16 * B];
    for (k, byte) in data.iter_mut().enumerate() {
        if !(2 * B..14 * B).contains(&k) {
            *byte = (k % 249) as u8 | 1;
        }
    }
    let mut b = ImageBuilder::new(params(8 << 20));
    b.add_file(
        ImageBuilder::ROOT,
        b"u",
        data.clone(),
        Sparse::Uninit,
        Placement::Contiguous,
    )
    .unwrap();
    (b.build().unwrap(), data)
}

/// `/u`'s extents: (logical, length, uninitialized).
fn extents_of(img: &[u8], path: &[u8]) -> Vec<(u64, u64, bool)> {
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).unwrap();
    let ino = fs.resolve(path, &mut bufs).unwrap();
    let mut v = Vec::new();
    let _ = fs
        .for_each_extent(&ino, &mut bufs.tree, |e| {
            v.push((u64::from(e.logical), u64::from(e.len), e.uninit));
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .unwrap();
    v
}

#[test]
fn a_write_into_an_uninitialized_extent_initializes_just_its_blocks() {
    let (base, data) = uninit_image();
    assert_eq!(
        extents_of(&base, b"/u"),
        vec![(0, 2, false), (2, 12, true), (14, 2, false)]
    );
    // From the middle of block 5 to the middle of block 7, then a whole block 10.
    let (at, len) = (5 * B as u64 + 100, 2 * B + 50);
    let patch: Vec<u8> = (0..len).map(|k| (k % 13) as u8 + 7).collect();
    let mut want = data.clone();
    want[at as usize..at as usize + len].copy_from_slice(&patch);
    want[10 * B..11 * B].fill(0xab);
    let run = |img: &mut Vec<u8>, cut: u64, tear: usize| -> u64 {
        let dev = PowerCut::new(img, cut, tear);
        if let Ok(mut w) = Writer::join(&dev, &opts()) {
            let f = w.resolve(b"/u");
            let ok = f.and_then(|f| {
                w.write(f, at, &patch)?;
                w.write(f, 10 * B as u64, &[0xab; B])
            });
            if ok.is_ok() {
                let _ = w.leave();
            }
        }
        dev.writes.get()
    };
    let mut img = base.clone();
    let total = run(&mut img, u64::MAX, 0);
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    assert_eq!(read_file(&img, b"/u").unwrap(), want);
    // Blocks 5, 6, 7 and 10 are initialized; the rest of the zero run stays as it was.
    assert_eq!(
        extents_of(&img, b"/u"),
        vec![
            (0, 2, false),
            (2, 3, true),
            (5, 3, false),
            (8, 2, true),
            (10, 1, false),
            (11, 3, true),
            (14, 2, false)
        ]
    );
    // A cut at any write: each write wholly there or absent, the zeros never garbage.
    let mut first_only = data.clone();
    first_only[at as usize..at as usize + len].copy_from_slice(&patch);
    for cut in 1..=total {
        for tear in [0usize, 5] {
            let mut img = base.clone();
            run(&mut img, cut, tear);
            recover(MemDeviceMut::new(&mut img), ME).unwrap();
            let context = format!("cut after write {cut} of {total} (tear {tear})");
            assert_eq!(
                errors(&img),
                Vec::<String>::new(),
                "{context}: {:?}",
                all_findings(&img)
            );
            let got = read_file(&img, b"/u").unwrap();
            assert!(
                got == data || got == first_only || got == want,
                "{context}: /u is neither before, between nor after the writes"
            );
        }
    }
}

/// A file `/frag` of `n` single-block extents with a hole after each (block `2k` holds
/// `k`), written through the library into an image of `size` bytes whose journals have
/// 16 slots; the image, the file's inode and its contents.
fn many_extents(n: u64, size: u64) -> (Vec<u8>, u64, Vec<u8>) {
    let mut img = image(size);
    let mut model = vec![0u8; 2 * n as usize * B];
    let f = {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        w.set_batch(true).unwrap();
        let f = w.create(1, b"frag", 0o644, 0, 0).unwrap();
        for k in 0..n {
            let at = 2 * k as usize * B;
            let fill = [(k % 251) as u8 | 1; 16];
            w.write(f, at as u64, &fill)
                .unwrap_or_else(|e| panic!("append {k}: {e:?}"));
            model[at..at + 16].copy_from_slice(&fill);
        }
        w.leave().unwrap();
        f
    };
    model.truncate(((2 * n - 1) as usize - 1) * B + 16);
    (img, f, model)
}

#[test]
fn a_mid_file_edit_of_a_file_of_4000_extents_rewrites_the_leaves_it_touches() {
    let n = 4000u64;
    let (mut img, f, mut model) = many_extents(n, 48 << 20);
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    {
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
        assert_eq!(fs.resolve(b"/frag", &mut bufs).unwrap().depth(), 2);
    }
    // Holes filled near the start, in the middle and near the end, one transaction each
    // (a 16-slot journal): each adds an extent to a full leaf, which splits in place.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut holes: Vec<u64> = vec![3, 2001, 7997];
    for _ in 0..60 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        holes.push(2 * (rng % (n - 1)) + 1);
    }
    let before = {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let before = w.next_txn_id();
        let mut most = (0, 0);
        for (i, h) in holes.iter().enumerate() {
            let at = *h as usize * B + 100;
            let body = [0xA0 | (i % 16) as u8; 300];
            w.write(f, at as u64, &body)
                .unwrap_or_else(|e| panic!("write {i} into hole block {h}: {e:?}"));
            model[at..at + 300].copy_from_slice(&body);
            // Section 15: a hole filled (an edit that is not growth) edits the leaf that
            // holds it and the interior block above it, and writes at most a new leaf
            // and a new interior block when they split.
            let j = last_txn(&dev, w.row(), w.next_txn_id() - 1, f);
            assert!(
                j.tree_edited <= 2 && j.tree_fresh <= 2 && j.inode == 1 && j.other == 0,
                "write {i} into hole block {h}: {j:?}"
            );
            most = most.max((j.tree_edited, j.tree_fresh));
        }
        println!("most tree blocks edited and new by one hole filled: {most:?}");
        // An edit of a mapped block in the middle, and a truncate through a leaf.
        w.write(f, 4001 * B as u64 - 7, b"across two blocks")
            .unwrap();
        let at = 4001 * B - 7;
        model[at..at + 17].copy_from_slice(b"across two blocks");
        w.truncate(f, 6000 * B as u64 + 5).unwrap();
        model.truncate(6000 * B + 5);
        let after = w.next_txn_id();
        w.leave().unwrap();
        after - before
    };
    assert_eq!(
        before,
        holes.len() as u64 + 2,
        "one transaction an operation"
    );
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    assert!(
        read_file(&img, b"/frag").unwrap() == model,
        "contents differ"
    );
}

#[test]
fn a_power_cut_while_a_leaf_splits_leaves_the_edit_wholly_there_or_absent() {
    // 1300 extents: 6 leaves under an interior block. Two holes filled, each in a full
    // leaf (the first and the third), each split in its own transaction.
    let (base, f, model) = many_extents(1300, 16 << 20);
    let edits: [(u64, u8); 2] = [(3, 0xB1), (1201, 0xB2)];
    let mut states = vec![model.clone()];
    for (h, v) in edits {
        let mut next = states.last().unwrap().clone();
        next[h as usize * B..h as usize * B + 64].fill(v);
        states.push(next);
    }
    let edit = |mut w: Writer<&PowerCut<'_>>| -> Result<(), WriteError> {
        for (h, v) in edits {
            w.write(f, h * B as u64, &[v; 64])?;
        }
        w.leave()
    };
    let total = {
        let mut img = base.clone();
        let dev = PowerCut::new(&mut img, u64::MAX, 0);
        edit(Writer::join(&dev, &opts()).unwrap()).unwrap();
        dev.writes.get()
    };
    assert!(total > 10, "{total} writes");
    for cut in 1..=total {
        for tear in [0usize, 3] {
            let mut img = base.clone();
            {
                let dev = PowerCut::new(&mut img, cut, tear);
                if let Ok(w) = Writer::join(&dev, &opts()) {
                    let _ = edit(w);
                }
            }
            recover(MemDeviceMut::new(&mut img), ME).unwrap();
            let context = format!("cut after write {cut} of {total} (tear {tear})");
            assert_eq!(
                errors(&img),
                Vec::<String>::new(),
                "{context}: {:?}",
                all_findings(&img)
            );
            let got = read_file(&img, b"/frag").unwrap();
            assert!(
                states.contains(&got),
                "{context}: the file is neither before, between nor after the edits"
            );
        }
    }
}

#[test]
fn random_edits_of_a_file_of_thousands_of_extents_read_as_modelled() {
    // Writes anywhere (holes and mapped blocks, some across two blocks), appends past
    // the end and truncates, each one transaction of a 16-slot journal, against a model.
    // `SPLIT_EDITS=N` runs a longer sequence (the test command runs 150).
    let edits: u64 = std::env::var("SPLIT_EDITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let (mut img, f, mut model) = many_extents(3500, 48 << 20);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    let txns = {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let before = w.next_txn_id();
        for i in 0..edits {
            let size = model.len() as u64;
            let kind = next(20);
            let context = format!("edit {i} (size {size})");
            if kind == 0 && size > 2000 * B as u64 {
                let to = size / 2 + next(size / 2);
                w.truncate(f, to)
                    .unwrap_or_else(|e| panic!("{context}: truncate to {to}: {e:?}"));
                model.truncate(to as usize);
            } else {
                let at = if kind < 3 {
                    size + next(4 * B as u64)
                } else {
                    next(size)
                };
                let len = 1 + next(600) as usize;
                let body: Vec<u8> = (0..len).map(|k| (i as u8) ^ (k as u8) | 0x80).collect();
                w.write(f, at, &body)
                    .unwrap_or_else(|e| panic!("{context}: write {len} at {at}: {e:?}"));
                let end = at as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[at as usize..end].copy_from_slice(&body);
            }
        }
        let after = w.next_txn_id();
        w.leave().unwrap();
        after - before
    };
    assert_eq!(txns, edits, "one transaction an edit");
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    assert!(
        read_file(&img, b"/frag").unwrap() == model,
        "contents differ"
    );
}

/// The hot sector of every block group descriptor on `dev`, with its block and count.
fn descriptor_sectors<D: tet_core::block::BlockDevice>(dev: D) -> Vec<(u64, [u8; 512], u64)> {
    let mut bufs = Buffers::new();
    let fs = Fs::open(dev, &mut bufs.data).unwrap();
    (0..fs.superblock().block_group_count())
        .map(|bg| {
            let d = fs.block_group(bg, &mut bufs.data).unwrap();
            let (lba, free) = (d.lba(), d.raw().free_data_blocks.get());
            fs.device().read_block(lba, &mut bufs.data).unwrap();
            (lba, bufs.data[..512].try_into().unwrap(), free)
        })
        .collect()
}

/// The block groups of the zone groups a node owns on `dev`.
fn owned_groups<D: tet_core::block::BlockDevice>(dev: D) -> Vec<u32> {
    let mut bufs = Buffers::new();
    let fs = Fs::open(dev, &mut bufs.data).unwrap();
    let mut out = Vec::new();
    for z in 0..fs.superblock().zone_group_count() {
        let zg = fs.zone_group(z, &mut bufs.data).unwrap();
        if zg.owner().is_some() {
            let first = zg.cold().first_bg_id.get();
            out.extend(first..first + zg.cold().bg_count.get());
        }
    }
    out
}

/// A previous owner's late update of `sector` (its count one less, resealed), tried by
/// compare-and-write against the sector it was built on; whether it landed.
fn late_update(dev: &MemDeviceMut<'_>, lba: u64, sector: &[u8; 512]) -> bool {
    use tet_core::block::BlockDeviceMut;
    let mut new = *sector;
    let free = u64::from_le_bytes(new[64..72].try_into().unwrap());
    new[64..72].copy_from_slice(&free.saturating_sub(1).to_le_bytes());
    new[112..120].fill(0);
    let crc = u64::from(tet_core::checksum::crc32c(&new[..128]));
    new[112..120].copy_from_slice(&crc.to_le_bytes());
    dev.compare_and_write(lba, sector, &new).unwrap()
}

#[test]
fn a_late_update_built_before_a_change_of_owner_fails_even_when_the_count_did_not_change() {
    // Section 4: `reconcile_seq` advances on every change of zone group owner (claim,
    // release, recovery), so a compare-and-write built on the sequence and count read
    // before it fails although the count is the same.
    let mut img = image(8 << 20);
    let before_claim = descriptor_sectors(MemDevice::new(&img));
    let (before_release, stale_count, owner_before_release) = {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let f = w.create(1, b"f", 0o644, 0, 0).unwrap();
        w.write(f, 0, &[7u8; 100]).unwrap();
        // Zone group 0 is claimed: each of its block groups whose count the write left
        // as it was refuses the update built before the claim.
        let mut unchanged = 0;
        let now = descriptor_sectors(&dev);
        let claimed = owned_groups(&dev);
        assert!(!claimed.is_empty(), "no zone group claimed");
        for (bg, ((lba, sector, free), (_, _, free_now))) in
            before_claim.iter().zip(&now).enumerate()
        {
            if claimed.contains(&(bg as u32)) && free_now == free {
                unchanged += 1;
                assert!(
                    !late_update(&dev, *lba, sector),
                    "block {lba}: a late update built before the claim landed"
                );
            }
        }
        let before_release = descriptor_sectors(&dev);
        w.leave().unwrap();
        (before_release, unchanged, claimed)
    };
    assert!(stale_count >= 1, "no block group kept its count");
    // The release: every update built before it fails, the counts being unchanged.
    let released = owned_groups(MemDevice::new(&img));
    assert!(
        released.is_empty(),
        "a zone group is still owned after the leave"
    );
    {
        let dev = MemDeviceMut::new(&mut img);
        for &bg in &owner_before_release {
            let (lba, sector, _) = &before_release[bg as usize];
            assert!(
                !late_update(&dev, *lba, sector),
                "block {lba}: a late update built before the release landed"
            );
        }
    }
    for ((_, _, a), (_, _, b)) in before_release
        .iter()
        .zip(descriptor_sectors(MemDevice::new(&img)).iter())
    {
        assert_eq!(a, b, "the release changed a count");
    }
    // Recovery of a crashed writer releases its zone groups the same way.
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let f = w.resolve(b"/f").unwrap();
        w.write(f, B as u64, &[8u8; 100]).unwrap();
        // Dropped without leaving.
    }
    let before_recovery = descriptor_sectors(MemDevice::new(&img));
    let owner_before_recovery = owned_groups(MemDevice::new(&img));
    assert!(
        !owner_before_recovery.is_empty(),
        "the crash left no zone group owned"
    );
    recover(MemDeviceMut::new(&mut img), ME).unwrap();
    {
        let dev = MemDeviceMut::new(&mut img);
        for &bg in &owner_before_recovery {
            let (lba, sector, _) = &before_recovery[bg as usize];
            assert!(
                !late_update(&dev, *lba, sector),
                "block {lba}: a late update built before the recovery landed"
            );
        }
    }
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
}

/// What one growth transaction journaled, by kind of block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Journaled {
    inode: u32,
    bitmap: u32,
    /// Tree blocks that held the tree before (edits), and new ones (`F_FRESH`).
    tree_edited: u32,
    tree_fresh: u32,
    other: u32,
    /// Whether the inode's root (extent header and inline slots) changed.
    root_changed: bool,
}

/// The targets of the last transaction in row `row`'s journal on `dev` (its slots stay in
/// the journal until the next one overwrites them), sorted into kinds for inode `ino`.
fn last_txn<D: tet_core::block::BlockDevice>(dev: D, row: u32, txn: u64, ino: u64) -> Journaled {
    use tet_core::cetrafs::raw::RawSlotHeader;
    use zerocopy::FromBytes;
    let mut bufs = Buffers::new();
    let fs = Fs::open(dev, &mut bufs.data).unwrap();
    let sb = fs.superblock().raw();
    let inode_lba = sb.inode_table_start.get() + ino;
    let bitmaps: Vec<std::ops::Range<u64>> = (0..fs.superblock().block_group_count())
        .map(|bg| {
            let (start, len) = fs.superblock().bg_span(bg);
            start + 1..start + 1 + tet_core::cetrafs::bitmap_blocks(len)
        })
        .collect();
    let start = fs.journal_start(row);
    let mut out = Journaled::default();
    let mut b = [0u8; B];
    let mut s = 0u64;
    loop {
        fs.device().read_block(start + 1 + 2 * s, &mut b).unwrap();
        let h = RawSlotHeader::read_from_bytes(&b[..64]).unwrap();
        assert_eq!(
            h.txn_id.get(),
            txn,
            "slot {s} is not of the last transaction"
        );
        let target = h.target_lba.get();
        let fresh = h.flags.get() & tet_core::cetrafs::F_FRESH != 0;
        if target == inode_lba {
            out.inode += 1;
        } else if bitmaps.iter().any(|r| r.contains(&target)) {
            out.bitmap += 1;
        } else if fs.superblock().bg_regions_start() <= target && fresh {
            out.tree_fresh += 1;
        } else if fs.superblock().bg_regions_start() <= target {
            out.tree_edited += 1;
        } else {
            out.other += 1;
        }
        s += 1;
        if s == u64::from(h.txn_slots.get()) {
            break;
        }
    }
    out
}

#[test]
fn growing_a_file_edits_one_block_of_its_tree_at_every_depth() {
    // Section 9: arrays are append-only and unordered, so growing a file edits a single
    // block of its tree. A file written a block at a time with a hole after each block
    // (so no two extents merge), one transaction a write, through depths 0, 1 and 2:
    // each transaction journals the inode, the data bitmap block it allocates in, new
    // tree blocks (`F_FRESH`), and exactly one array that held the tree before (a leaf,
    // an interior block, or the inode's root, which is the inode's block).
    let n = 1300u64; // past 4 × 254 extents: depth 2
    let mut img = image(16 << 20);
    // (depth before, depth after, what was journaled) → writes.
    let mut by_depth: BTreeMap<(u16, u16, Journaled), u64> = BTreeMap::new();
    let mut bad = Vec::new();
    let mut model = Vec::new();
    {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let f = w.create(1, b"grow", 0o644, 0, 0).unwrap();
        let depth = |dev: &MemDeviceMut<'_>| {
            let mut bufs = Buffers::new();
            let fs = Fs::open(dev, &mut bufs.data).unwrap();
            fs.inode(f, &mut bufs.data).unwrap().depth()
        };
        let root = |dev: &MemDeviceMut<'_>| {
            use tet_core::block::BlockDevice;
            let mut bufs = Buffers::new();
            let fs = Fs::open(dev, &mut bufs.data).unwrap();
            let lba = fs.superblock().raw().inode_table_start.get() + f;
            fs.device().read_block(lba, &mut bufs.data).unwrap();
            bufs.data[104..180].to_vec()
        };
        for k in 0..n {
            let (d0, r0) = (depth(&dev), root(&dev));
            let fill = [(k % 251) as u8 | 1; 16];
            let at = 2 * k as usize * B;
            w.write(f, at as u64, &fill).unwrap();
            model.resize(at, 0);
            model.extend_from_slice(&fill);
            let txn = w.next_txn_id() - 1;
            let mut j = last_txn(&dev, w.row(), txn, f);
            j.root_changed = root(&dev) != r0;
            let d1 = depth(&dev);
            let arrays = j.tree_edited + u32::from(j.root_changed);
            if j.inode != 1 || j.other != 0 || arrays != 1 || j.bitmap > 2 || j.tree_fresh > 2 {
                bad.push(format!("write {k} (depth {d0} to {d1}): {j:?}"));
            }
            *by_depth.entry((d0, d1, j)).or_insert(0) += 1;
        }
        w.leave().unwrap();
    }
    for ((d0, d1, j), count) in &by_depth {
        println!("depth {d0} -> {d1}: {count} writes journaled {j:?}");
    }
    assert!(
        bad.is_empty(),
        "{} growths edit more than one array: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    assert!(by_depth.keys().any(|k| k.1 == 2), "never reached depth 2");
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    assert!(
        read_file(&img, b"/grow").unwrap() == model,
        "contents differ"
    );
}

#[test]
fn growth_leaves_every_other_array_as_it_is_in_whatever_order() {
    // Section 9: readers accept any order, and growth edits only the array it appends
    // to. A file of 600 extents (3 leaves under the root) whose first leaf holds its
    // extents in reverse, as another implementation may write them: the checker and
    // the reader accept it, and an append edits the last leaf alone, leaving the first
    // leaf's bytes as they were (and so does an edit of the last leaf that is not
    // growth).
    use tet_core::block::BlockDevice;
    let (mut img, f, mut model) = many_extents(600, 16 << 20);
    let inode_at = {
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
        assert_eq!(fs.inode(f, &mut bufs.data).unwrap().depth(), 1);
        (fs.superblock().raw().inode_table_start.get() + f) as usize * B
    };
    let slots = img[inode_at + 116..inode_at + 180].to_vec();
    let first = (0..4)
        .filter(|i| img[inode_at + 106] as usize > *i)
        .map(|i| &slots[16 * i..16 * i + 12])
        .find(|ix| u32::from_le_bytes(ix[..4].try_into().unwrap()) == 0)
        .map(|ix| u64::from_le_bytes(ix[4..12].try_into().unwrap()))
        .unwrap();
    let leaf = first as usize * B;
    let n = u16::from_le_bytes(img[leaf + 2..leaf + 4].try_into().unwrap()) as usize;
    assert!(n > 100, "first leaf holds {n}");
    let entries: Vec<Vec<u8>> = (0..n)
        .map(|i| img[leaf + 12 + 16 * i..leaf + 28 + 16 * i].to_vec())
        .collect();
    for (i, e) in entries.iter().rev().enumerate() {
        img[leaf + 12 + 16 * i..leaf + 28 + 16 * i].copy_from_slice(e);
    }
    let crc = tet_core::checksum::crc32c_skipping(&img[leaf..leaf + B], 4088);
    img[leaf + 4088..leaf + 4096].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    assert!(
        read_file(&img, b"/frag").unwrap() == model,
        "contents differ"
    );
    let reversed = img[leaf..leaf + B].to_vec();
    let j = {
        let dev = MemDeviceMut::new(&mut img);
        let mut w = Writer::join(&dev, &opts()).unwrap();
        let at = 2 * 600 * B;
        w.write(f, at as u64, b"appended").unwrap();
        model.resize(at, 0);
        model.extend_from_slice(b"appended");
        let j = last_txn(&dev, w.row(), w.next_txn_id() - 1, f);
        let mut b = [0u8; B];
        dev.read_block(first, &mut b).unwrap();
        assert!(b[..] == reversed[..], "the first leaf was rewritten");
        // An edit that is not growth (a hole filled in the last leaf) rewrites only the
        // arrays whose entries change: the first leaf's entries, in their order, stay.
        let at = (2 * 590 + 1) * B;
        w.write(f, at as u64, b"hole").unwrap();
        model[at..at + 4].copy_from_slice(b"hole");
        dev.read_block(first, &mut b).unwrap();
        assert!(
            b[..] == reversed[..],
            "the first leaf was rewritten by an edit elsewhere"
        );
        w.leave().unwrap();
        j
    };
    assert_eq!(
        (j.inode, j.tree_edited, j.tree_fresh, j.other),
        (1, 1, 0, 0),
        "{j:?}"
    );
    assert_eq!(
        errors(&img),
        Vec::<String>::new(),
        "{:?}",
        all_findings(&img)
    );
    assert!(
        read_file(&img, b"/frag").unwrap() == model,
        "contents differ"
    );
}
