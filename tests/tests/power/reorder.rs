//! A device that records every write and flush, and the images a power cut could leave
//! from the record when writes between two flushes reach the disk in any order: the
//! model docs/cetrafs.md assumes ("durable on flush"; a page cache writes back in no set
//! order), which the in-order [`super::power::PowerCut`] does not exercise.

use std::cell::RefCell;

use tet_core::block::{Block, BlockDevice, BlockDeviceMut, MemDeviceMut, BLOCK_SIZE, SECTOR};
use tet_core::Result;

/// A write the device received: `bytes` (a block, or the sector of a compare-and-write
/// that wrote) at the start of block `lba`; or a flush.
#[derive(Clone, Debug)]
pub enum Event {
    Write { lba: u64, bytes: Vec<u8> },
    Flush,
}

/// Applies every write to `inner` (so the writer reads what it wrote) and records it.
pub struct Recorder<'a> {
    pub inner: MemDeviceMut<'a>,
    pub log: RefCell<Vec<Event>>,
}

impl<'a> Recorder<'a> {
    pub fn new(img: &'a mut [u8]) -> Self {
        Recorder {
            inner: MemDeviceMut::new(img),
            log: RefCell::new(Vec::new()),
        }
    }
}

impl BlockDevice for Recorder<'_> {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        self.inner.read_block(lba, buf)
    }
}

impl BlockDeviceMut for Recorder<'_> {
    fn write_block(&self, lba: u64, buf: &Block) -> Result<()> {
        self.log.borrow_mut().push(Event::Write {
            lba,
            bytes: buf.to_vec(),
        });
        self.inner.write_block(lba, buf)
    }
    fn flush(&self) -> Result<()> {
        self.log.borrow_mut().push(Event::Flush);
        Ok(())
    }
    fn compare_and_write(&self, lba: u64, e: &[u8; SECTOR], n: &[u8; SECTOR]) -> Result<bool> {
        let wrote = self.inner.compare_and_write(lba, e, n)?;
        if wrote {
            self.log.borrow_mut().push(Event::Write {
                lba,
                bytes: n.to_vec(),
            });
        }
        Ok(wrote)
    }
}

/// The writes between two flushes: `log[start..end]`, every one a write.
#[derive(Clone, Copy, Debug)]
pub struct Epoch {
    pub start: usize,
    pub end: usize,
}

/// The epochs of `log` that hold writes.
pub fn epochs(log: &[Event]) -> Vec<Epoch> {
    let mut out = Vec::new();
    let mut start = 0;
    for (k, e) in log.iter().enumerate() {
        if let Event::Flush = e {
            if k > start {
                out.push(Epoch { start, end: k });
            }
            start = k + 1;
        }
    }
    if log.len() > start {
        out.push(Epoch {
            start,
            end: log.len(),
        });
    }
    out
}

fn apply(img: &mut [u8], lba: u64, bytes: &[u8]) {
    let at = usize::try_from(lba).unwrap() * BLOCK_SIZE;
    img[at..at + bytes.len()].copy_from_slice(bytes);
}

/// The image a cut inside epoch `e` leaves: every write before it, and of its own
/// writes those `keep` selects, in order; with `tear = Some((k, s))` its `k`-th write
/// lands only its first `s` sectors (a block write torn at a sector boundary).
pub fn cut_image(
    base: &[u8],
    log: &[Event],
    e: Epoch,
    keep: &dyn Fn(usize) -> bool,
    tear: Option<(usize, usize)>,
) -> Vec<u8> {
    let mut img = base.to_vec();
    for (k, ev) in log[..e.end].iter().enumerate() {
        let Event::Write { lba, bytes } = ev else {
            continue;
        };
        if k >= e.start {
            let i = k - e.start;
            if !keep(i) {
                continue;
            }
            if let Some((t, s)) = tear {
                if t == i {
                    apply(&mut img, *lba, &bytes[..(s * SECTOR).min(bytes.len())]);
                    continue;
                }
            }
        }
        apply(&mut img, *lba, bytes);
    }
    img
}

/// A small seeded generator for the subsets.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Which writes of an epoch land, and the one torn (its index and the sectors landed).
pub type Subset = (Vec<bool>, Option<(usize, usize)>);

/// The subsets of an epoch of `n` writes a test tries, each a mask and a tear: none
/// (the cut just after the flush before), each write alone and each left out (up to
/// `spread` of them, spread over the epoch), and `random` seeded random subsets, half
/// of them with one member torn after 1 to 7 sectors.
pub fn subsets(n: usize, spread: usize, random: usize, rng: &mut Rng) -> Vec<Subset> {
    let mut out = vec![(vec![false; n], None)];
    let step = n.div_ceil(spread.max(1)).max(1);
    for i in (0..n).step_by(step) {
        let mut only = vec![false; n];
        only[i] = true;
        out.push((only, None));
        let mut but = vec![true; n];
        but[i] = false;
        out.push((but, None));
    }
    for r in 0..random {
        let mask: Vec<bool> = (0..n).map(|_| rng.next() % 2 == 0).collect();
        let tear = (r % 2 == 1)
            .then(|| {
                let members: Vec<usize> = (0..n).filter(|i| mask[*i]).collect();
                (!members.is_empty()).then(|| {
                    let k = members[usize::try_from(rng.next()).unwrap() % members.len()];
                    (k, 1 + usize::try_from(rng.next() % 7).unwrap())
                })
            })
            .flatten();
        out.push((mask, tear));
    }
    out
}
