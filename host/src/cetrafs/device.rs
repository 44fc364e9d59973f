//! cetrafs images on files and block devices, read with positioned reads (`pread`), never
//! memory-mapped: other nodes write a shared disk while we read it, and a mapping of a
//! file that shrinks kills the process with `SIGBUS` where a read returns an error.
//! A run of blocks that lies in a hole of the image file (a fresh image's inode table
//! and free space) is filled with zeros after one `lseek(SEEK_DATA)`, not read; a
//! writable device does so only where it has written nothing itself (see
//! [`Written`]).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, PoisonError};

use tet_core::block::{
    past_end, Block, BlockDevice, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64, SECTOR,
};
use tet_core::{Error, ErrorKind, Result};

/// Most blocks read at once when reads run forward (bitmaps, long directories, the
/// journal): one 64 KiB `pread` instead of sixteen 4 KiB ones. A read that does not
/// continue a window reads its one block, so random reads cost no more than without the
/// cache, and each continuation doubles the window up to this size.
const READAHEAD: u64 = 16;
/// Windows kept: the checker reads tree blocks, directory blocks, bitmaps and the
/// journals in interleaved forward streams (the inode table in batches,
/// [`BlockDevice::read_prefixes`]).
const WINDOWS: usize = 4;

/// One cached run of blocks.
#[derive(Default)]
struct Window {
    first: u64,
    blocks: u64,
    bytes: Vec<u8>,
    used: u64,
}

/// The read-ahead windows, the clock that orders their use, and the block of the last
/// short read (a prefix read that continues it starts a window).
struct Cache {
    clock: u64,
    windows: Vec<Window>,
    last_short: Option<u64>,
}

/// Granules a writable device marks as written: about 2^19 (a bitmap of about 64 KiB), each of
/// `1 << shift` blocks.
const GRANULES: u64 = 1 << 19;

/// Where a writable device has written. Its holes are trusted only outside these
/// granules: a filesystem may report data written but not yet flushed as a hole (OpenZFS
/// issue 15526), and a writer such as repair reads back what it has just written (a
/// bitmap read as zeros would hand out used blocks). Data another process wrote before
/// the open is trusted as a read-only open trusts it.
#[derive(Default)]
struct Written {
    shift: u32,
    /// One bit per granule; empty until the first write.
    bits: Vec<u64>,
}

impl Written {
    /// The granules of blocks `first .. first + n` (`n >= 1`), as a range of granules.
    fn granules(&self, first: u64, n: u64) -> (u64, u64) {
        let last = first.saturating_add(n.saturating_sub(1));
        (first >> self.shift, last >> self.shift)
    }

    /// Marks blocks `first .. first + n` written, on a device of `blocks` blocks.
    fn mark(&mut self, blocks: u64, first: u64, n: u64) {
        if self.bits.is_empty() {
            while blocks >> self.shift > GRANULES {
                self.shift = self.shift.saturating_add(1);
            }
            let words = (blocks >> self.shift).saturating_add(1).div_ceil(64);
            self.bits = vec![0; usize::try_from(words).unwrap_or(0)];
        }
        let (a, b) = self.granules(first, n);
        for g in a..=b {
            let bit = 1u64 << (g % 64);
            if let Some(w) = usize::try_from(g / 64)
                .ok()
                .and_then(|i| self.bits.get_mut(i))
            {
                *w |= bit;
            }
        }
    }

    /// Whether any of blocks `first .. first + n` may have been written.
    fn any(&self, first: u64, n: u64) -> bool {
        if self.bits.is_empty() {
            return false;
        }
        let (a, b) = self.granules(first, n);
        (a..=b).any(|g| {
            usize::try_from(g / 64)
                .ok()
                .and_then(|i| self.bits.get(i))
                // A block past the bitmap is not trusted.
                .is_none_or(|w| w & (1u64 << (g % 64)) != 0)
        })
    }
}

/// An image file or block device. Blocks are cached only between reads of one command
/// (a few read-ahead windows, and the next batch of a walk of the inode table), never
/// across commands.
pub struct FileDevice {
    shared: Arc<Shared>,
    /// The read-ahead cache behind a lock, so one device can serve reads from several
    /// threads (`FileDevice` is `Send + Sync`; a poisoned lock still holds a valid
    /// cache, so it is used as it is).
    windows: Mutex<Cache>,
    /// The thread that reads the next batch of [`BlockDevice::read_prefixes`] ahead.
    ahead: Mutex<Ahead>,
}

/// What a device's reads share with its read-ahead thread.
struct Shared {
    file: File,
    blocks: u64,
    writable: bool,
    /// Where this device has written (a writable device's holes are trusted elsewhere).
    written: Mutex<Written>,
    /// Reads left before `SEEK_DATA` is asked again, and the pause after the next
    /// answer of data: each answer of data in a row doubles the pause (up to
    /// [`MAX_PAUSE`] reads), and an answer of a hole resets it. Where the image is all data the
    /// question is then rarely asked; reading without asking is always right. (A hole
    /// is never remembered: another writer may fill it.)
    pause: Mutex<(u32, u32)>,
    /// Counts the edges of writes, before and after each: a batch read ahead while
    /// this moved is not used (it may hold what a block held before a write).
    writes: AtomicU64,
}

/// Most reads [`FileDevice`] makes without asking where the holes are.
const MAX_PAUSE: u32 = 64;

// A check may fan out over one device on several threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<FileDevice>();
};

impl FileDevice {
    /// Opens `path` read-only. Directories, FIFOs, sockets and character devices are
    /// refused before opening (opening a FIFO with no writer would block); the size of
    /// a block device is read from the device, not from its metadata.
    pub fn open(path: &Path) -> std::io::Result<FileDevice> {
        crate::input::check_kind(path)?;
        FileDevice::over(File::open(path)?, false)
    }

    /// Opens `path` for reading and writing (journal replay). Same refusals as
    /// [`FileDevice::open`].
    pub fn open_rw(path: &Path) -> std::io::Result<FileDevice> {
        crate::input::check_kind(path)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        FileDevice::over(file, true)
    }

    /// The device over an open file, sized from its end (a block device's size comes
    /// from the device, not from its metadata).
    fn over(mut file: File, writable: bool) -> std::io::Result<FileDevice> {
        let bytes = file.seek(SeekFrom::End(0))?;
        Ok(FileDevice {
            shared: Arc::new(Shared {
                file,
                blocks: bytes / BLOCK_SIZE_U64,
                writable,
                written: Mutex::new(Written::default()),
                pause: Mutex::new((0, 0)),
                writes: AtomicU64::new(0),
            }),
            windows: Mutex::new(Cache {
                clock: 0,
                windows: (0..WINDOWS).map(|_| Window::default()).collect(),
                last_short: None,
            }),
            ahead: Mutex::new(Ahead::default()),
        })
    }

    /// Forgets cached blocks and marks `n` blocks from `lba` written (before a write).
    fn before_write(&self, lba: u64, n: u64) {
        self.invalidate();
        self.shared
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .mark(self.shared.blocks, lba, n);
    }

    /// Forgets cached blocks, and counts an edge of a write (so a batch read ahead
    /// across it is not used).
    fn invalidate(&self) {
        self.shared.writes.fetch_add(1, Ordering::AcqRel);
        // A batch read ahead before this can no longer be used: stop reading it.
        if let Some(b) = self
            .ahead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next
            .take()
        {
            b.cancel();
        }
        let mut w = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        for win in w.windows.iter_mut() {
            win.blocks = 0;
        }
    }

    /// Reads the first `dst.len()` bytes of block `lba` (at most a block). A block in a
    /// window is copied from it; a read that continues a window refills it with
    /// read-ahead; any other read takes the least recently used window for its one
    /// block, unless it is a `short` read (part of a block), which reads only `dst`
    /// unless it continues the previous short read.
    fn read_into(&self, lba: u64, dst: &mut [u8], short: bool) -> Result<()> {
        if lba >= self.shared.blocks {
            return Err(past_end(lba, self.shared.blocks));
        }
        let mut guard = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let cache = &mut *guard;
        cache.clock = cache.clock.saturating_add(1);
        let now = cache.clock;
        let hit = cache
            .windows
            .iter()
            .position(|x| lba >= x.first && lba < x.first.saturating_add(x.blocks));
        let i = match hit {
            Some(i) => i,
            None => {
                let next = cache
                    .windows
                    .iter()
                    .position(|x| x.blocks > 0 && x.first.saturating_add(x.blocks) == lba);
                let follows_short = cache.last_short.and_then(|b| b.checked_add(1)) == Some(lba);
                if short && next.is_none() && !follows_short {
                    cache.last_short = Some(lba);
                    return self
                        .shared
                        .file
                        .read_exact_at(dst, lba.saturating_mul(BLOCK_SIZE_U64))
                        .map_err(|e| Self::io_error(lba, &e));
                }
                // Read-ahead grows with the stream (1, 2, 4, … 16 blocks), so a short
                // run such as a two-block directory does not pull in 64 KiB.
                let lru = || {
                    cache
                        .windows
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, x)| x.used)
                        .map_or(0, |(i, _)| i)
                };
                let (i, n) = match next {
                    Some(i) => {
                        let grown = cache
                            .windows
                            .get(i)
                            .map_or(1, |w| w.blocks.saturating_mul(2))
                            .min(READAHEAD);
                        (i, grown)
                    }
                    None if follows_short => (lru(), 2),
                    None => (lru(), 1),
                };
                let n = n.min(self.shared.blocks.saturating_sub(lba)).max(1);
                let Some(win) = cache.windows.get_mut(i) else {
                    return Err(Error::new(ErrorKind::Io, "block read", 0));
                };
                let len = usize::try_from(n.saturating_mul(BLOCK_SIZE_U64)).unwrap_or(BLOCK_SIZE);
                win.bytes.resize(len, 0);
                win.blocks = 0;
                let at = lba.saturating_mul(BLOCK_SIZE_U64);
                if n > 1 && self.shared.in_hole(at, win.bytes.len()) {
                    win.bytes.fill(0);
                    win.first = lba;
                    win.blocks = n;
                    return Self::copy_out(win, now, lba, dst);
                }
                let (mut n, mut r) = (n, self.shared.file.read_exact_at(&mut win.bytes, at));
                if r.is_err() && n > 1 {
                    // The window may run into a part that has gone; the block decides.
                    n = 1;
                    win.bytes.truncate(BLOCK_SIZE);
                    r = self.shared.file.read_exact_at(&mut win.bytes, at);
                }
                r.map_err(|e| Self::io_error(lba, &e))?;
                win.first = lba;
                win.blocks = n;
                i
            }
        };
        let Some(win) = cache.windows.get_mut(i) else {
            return Err(Error::new(ErrorKind::Io, "block read", 0));
        };
        Self::copy_out(win, now, lba, dst)
    }

    /// Block `lba` (or its first `dst.len()` bytes) out of window `win`, used at `now`.
    fn copy_out(win: &mut Window, now: u64, lba: u64, dst: &mut [u8]) -> Result<()> {
        win.used = now;
        let at = usize::try_from(lba.saturating_sub(win.first).saturating_mul(BLOCK_SIZE_U64))
            .unwrap_or(usize::MAX);
        match win.bytes.get(at..at.saturating_add(dst.len())) {
            Some(src) => {
                dst.copy_from_slice(src);
                Ok(())
            }
            None => Err(Error::new(
                ErrorKind::Io,
                "block read",
                lba.saturating_mul(BLOCK_SIZE_U64),
            )),
        }
    }

    fn write_error(lba: u64, what: &'static str) -> Error {
        Error::new(ErrorKind::Io, what, lba.saturating_mul(BLOCK_SIZE_U64))
    }

    fn io_error(lba: u64, e: &std::io::Error) -> Error {
        let offset = lba.saturating_mul(BLOCK_SIZE_U64);
        match e.kind() {
            // The image shrank under us (another process truncated it).
            std::io::ErrorKind::UnexpectedEof => Error::new(
                ErrorKind::Truncated {
                    needed: offset.saturating_add(BLOCK_SIZE_U64),
                    available: offset,
                },
                "block read (the image ends here now)",
                offset,
            ),
            _ => Error::new(ErrorKind::Io, "block read", offset),
        }
    }
}

impl BlockDevice for FileDevice {
    fn block_count(&self) -> u64 {
        self.shared.blocks
    }

    /// An inode is 256 bytes of a 4 KiB block. A read on its own is a short `pread` of
    /// just those bytes; a read that continues the previous one (inodes read in order
    /// one at a time, as a reader without [`BlockDevice::read_prefixes`] does) is served
    /// from a read-ahead window like any forward stream: one 64 KiB `pread` per sixteen
    /// inodes costs a fraction of sixteen short ones (measured in docs/benchmarks.md,
    /// "cetrafs `repair -y`").
    fn read_block_prefix(&self, lba: u64, buf: &mut Block, len: usize) -> Result<()> {
        let n = len.clamp(1, BLOCK_SIZE);
        match buf.get_mut(..n) {
            Some(dst) => self.read_into(lba, dst, true),
            None => self.read_into(lba, buf, false),
        }
    }

    /// One `pread` for the whole run, past the read-ahead windows (a large file read
    /// moves each extent run in one call; writes reach the file before any read, so
    /// the file is always current).
    fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.shared.read_run(lba, buf)
    }

    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        self.read_into(lba, buf, false)
    }

    /// Pieces of [`PIECE`] blocks, each one `pread` (or a hole, as in
    /// [`BlockDevice::read_blocks`]) into a scratch buffer that stays in cache, the
    /// prefixes copied out of it. A batch of at least [`AHEAD_MIN`] blocks is shared
    /// with a second thread, and when it continues the batch before it with as many
    /// blocks, the next batch is started there before this one is read, so the walk's
    /// work on one batch and the copy of the next out of the page cache (most of the
    /// cost) run at once. A batch read ahead is used only if no write began or ended
    /// since it was started, and only as a whole: any piece that failed, and the whole
    /// batch is read again here, so each error is the one a plain read gives.
    fn read_prefixes(&self, lba: u64, len: usize, out: &mut [u8]) -> Result<()> {
        let n = tet_core::block::prefix_slots(lba, len, out.len())?;
        if lba.saturating_add(tet_core::arith::u64_of(n)) > self.shared.blocks {
            return Err(past_end(lba.max(self.shared.blocks), self.shared.blocks));
        }
        let batch = if n >= AHEAD_MIN {
            self.batch(lba, len, n)
        } else {
            None
        };
        let Some(batch) = batch else {
            return self.shared.prefixes(lba, len, out, &mut Vec::new());
        };
        batch.work(&self.shared);
        let mut filled = batch.wait();
        let used = match filled.bytes.get(..out.len()) {
            Some(src) if !filled.failed && self.shared.writes_now() == batch.writes => {
                out.copy_from_slice(src);
                true
            }
            _ => false,
        };
        let bytes = std::mem::take(&mut filled.bytes);
        drop(filled);
        self.ahead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .spare
            .push(bytes);
        if used {
            Ok(())
        } else {
            self.shared.prefixes(lba, len, out, &mut Vec::new())
        }
    }
}

/// Blocks one `pread` of [`BlockDevice::read_prefixes`] reads (64 KiB).
const PIECE: usize = 16;
/// Blocks from which [`BlockDevice::read_prefixes`] reads on two threads and ahead.
const AHEAD_MIN: usize = 256;

/// The read-ahead thread of [`BlockDevice::read_prefixes`], started at the first batch
/// (none on a machine of one core, or when it cannot be started), stopped when the
/// device is dropped.
#[derive(Default)]
struct Ahead {
    jobs: Option<mpsc::Sender<Arc<Batch>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Whether starting it failed or is pointless (one core).
    none: bool,
    /// The batch started ahead of the caller.
    next: Option<Arc<Batch>>,
    /// The end and size of the last batch asked for.
    last: Option<(u64, usize)>,
    /// Buffers of batches used, for the next (a fresh 512 KiB is a fresh mapping, and
    /// its page faults cost more than its reads).
    spare: Vec<Vec<u8>>,
}

/// A batch of prefixes read in pieces of [`PIECE`] blocks by whichever thread claims
/// each: the read-ahead thread, and the caller once it asks for the batch.
struct Batch {
    lba: u64,
    len: usize,
    slots: usize,
    /// [`Shared::writes`] when it was started.
    writes: u64,
    claimed: AtomicUsize,
    filled: Mutex<Filled>,
    done: Condvar,
}

/// What the pieces of a [`Batch`] have read.
struct Filled {
    bytes: Vec<u8>,
    pieces: usize,
    failed: bool,
}

impl Batch {
    /// A batch into `bytes` (a buffer used before: its old contents are overwritten
    /// piece by piece, or the piece marked failed).
    fn new(lba: u64, len: usize, slots: usize, writes: u64, mut bytes: Vec<u8>) -> Batch {
        bytes.resize(slots.saturating_mul(len), 0);
        Batch {
            lba,
            len,
            slots,
            writes,
            claimed: AtomicUsize::new(0),
            filled: Mutex::new(Filled {
                bytes,
                pieces: 0,
                failed: false,
            }),
            done: Condvar::new(),
        }
    }

    fn pieces(&self) -> usize {
        self.slots.div_ceil(PIECE)
    }

    /// Claims and reads pieces until none is left.
    fn work(&self, dev: &Shared) {
        let (mut scratch, mut piece) = (Vec::new(), Vec::new());
        loop {
            let i = self.claimed.fetch_add(1, Ordering::AcqRel);
            if i >= self.pieces() {
                return;
            }
            let first = i.saturating_mul(PIECE);
            let count = self.slots.saturating_sub(first).min(PIECE);
            piece.resize(count.saturating_mul(self.len), 0);
            let lba = self.lba.saturating_add(tet_core::arith::u64_of(first));
            // A piece that panicked counts as failed, so no caller waits for it.
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                dev.prefixes(lba, self.len, &mut piece, &mut scratch)
            }))
            .is_ok_and(|r| r.is_ok());
            let mut f = self.filled.lock().unwrap_or_else(PoisonError::into_inner);
            let at = first.saturating_mul(self.len);
            match f.bytes.get_mut(at..at.saturating_add(piece.len())) {
                Some(dst) if ok => dst.copy_from_slice(&piece),
                _ => f.failed = true,
            }
            f.pieces = f.pieces.saturating_add(1);
            if f.pieces >= self.pieces() {
                self.done.notify_all();
            }
        }
    }

    /// Leaves the pieces not yet claimed unread (a batch ahead that is not wanted).
    fn cancel(&self) {
        self.claimed.store(usize::MAX / 2, Ordering::Release);
    }

    /// The batch, once every piece is read (call after [`Batch::work`], so none is
    /// left unclaimed).
    fn wait(&self) -> std::sync::MutexGuard<'_, Filled> {
        let mut f = self.filled.lock().unwrap_or_else(PoisonError::into_inner);
        while f.pieces < self.pieces() {
            f = self.done.wait(f).unwrap_or_else(PoisonError::into_inner);
        }
        f
    }
}

impl FileDevice {
    /// The batch of `n` prefixes of `len` bytes from `lba`, shared with the read-ahead
    /// thread: the one started ahead when it matches, else a new one; and the next
    /// batch started ahead when this one continues the last. `None` without the thread.
    fn batch(&self, lba: u64, len: usize, n: usize) -> Option<Arc<Batch>> {
        let mut ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        let jobs = self.jobs(&mut ahead)?;
        let writes = self.shared.writes_now();
        let batch = match ahead.next.take() {
            Some(b) if b.lba == lba && b.len == len && b.slots >= n && b.writes == writes => b,
            other => {
                if let Some(b) = other {
                    b.cancel();
                }
                let bytes = ahead.spare.pop().unwrap_or_default();
                let b = Arc::new(Batch::new(lba, len, n, writes, bytes));
                jobs.send(Arc::clone(&b)).ok()?;
                b
            }
        };
        let end = lba.saturating_add(tet_core::arith::u64_of(n));
        if ahead.last == Some((lba, n)) {
            let left =
                usize::try_from(self.shared.blocks.saturating_sub(end)).unwrap_or(usize::MAX);
            let next_n = n.min(left);
            if next_n >= AHEAD_MIN {
                let bytes = ahead.spare.pop().unwrap_or_default();
                let b = Arc::new(Batch::new(end, len, next_n, writes, bytes));
                if jobs.send(Arc::clone(&b)).is_ok() {
                    ahead.next = Some(b);
                }
            }
        }
        ahead.last = Some((end, n));
        Some(batch)
    }

    /// The read-ahead thread's queue, the thread started if it is not yet.
    fn jobs(&self, ahead: &mut Ahead) -> Option<mpsc::Sender<Arc<Batch>>> {
        if ahead.jobs.is_none() && !ahead.none {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            let (tx, rx) = mpsc::channel::<Arc<Batch>>();
            let shared = Arc::clone(&self.shared);
            let started = (cores > 1)
                .then(|| {
                    std::thread::Builder::new()
                        .name("cetrafs-ahead".into())
                        .spawn(move || {
                            while let Ok(b) = rx.recv() {
                                b.work(&shared);
                            }
                        })
                        .ok()
                })
                .flatten();
            match started {
                Some(t) => {
                    ahead.jobs = Some(tx);
                    ahead.thread = Some(t);
                }
                None => ahead.none = true,
            }
        }
        ahead.jobs.clone()
    }
}

/// Stops the read-ahead thread: the batch ahead is cancelled and the thread joined, so
/// no read of the file outlives the device.
impl Drop for FileDevice {
    fn drop(&mut self) {
        let mut ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = ahead.next.take() {
            b.cancel();
        }
        ahead.jobs = None;
        if let Some(t) = ahead.thread.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn writes_now(&self) -> u64 {
        self.writes.load(Ordering::Acquire)
    }

    /// [`BlockDevice::read_blocks`]: one `pread` for the run, or zeros for a hole.
    fn read_run(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        let n = tet_core::arith::u64_of(buf.len()) / BLOCK_SIZE_U64;
        if !buf.len().is_multiple_of(BLOCK_SIZE) {
            return Err(Error::new(
                ErrorKind::Invalid,
                "read_blocks length (not whole blocks)",
                lba.saturating_mul(BLOCK_SIZE_U64),
            ));
        }
        if lba.saturating_add(n) > self.blocks {
            return Err(past_end(lba.max(self.blocks), self.blocks));
        }
        let at = lba.saturating_mul(BLOCK_SIZE_U64);
        if n > 1 && self.in_hole(at, buf.len()) {
            buf.fill(0);
            return Ok(());
        }
        self.file
            .read_exact_at(buf, at)
            .map_err(|e| FileDevice::io_error(lba, &e))
    }

    /// [`BlockDevice::read_prefixes`] on this thread, [`PIECE`] blocks at a time
    /// through `scratch` (the slots already checked).
    fn prefixes(&self, lba: u64, len: usize, out: &mut [u8], scratch: &mut Vec<u8>) -> Result<()> {
        scratch.resize(PIECE.saturating_mul(BLOCK_SIZE), 0);
        for (k, slots) in (0u64..).zip(out.chunks_mut(PIECE.saturating_mul(len))) {
            let blocks = slots.len().checked_div(len).unwrap_or(0);
            let Some(buf) = scratch.get_mut(..blocks.saturating_mul(BLOCK_SIZE)) else {
                return Err(Error::new(ErrorKind::Invalid, "read_prefixes length", 0));
            };
            let at = lba.saturating_add(k.saturating_mul(tet_core::arith::u64_of(PIECE)));
            if self.read_run(at, buf).is_err() {
                // The run may reach into a part that has gone: each block decides, so
                // the error names the first that does not read.
                for (j, one) in (0u64..).zip(buf.chunks_exact_mut(BLOCK_SIZE)) {
                    self.read_run(at.saturating_add(j), one)?;
                }
            }
            for (slot, block) in slots
                .chunks_exact_mut(len)
                .zip(buf.chunks_exact(BLOCK_SIZE))
            {
                slot.copy_from_slice(block.get(..len).unwrap_or_default());
            }
        }
        Ok(())
    }

    /// Whether the `len` bytes at `at` lie in a hole of the file, which reads as zeros
    /// (a fresh image's inode table and free blocks): one `lseek(SEEK_DATA)` then
    /// spares the kernel filling page cache with zeros. A block device, or a filesystem
    /// that does not say, answers no, and the bytes are read; so does a writable device
    /// for blocks near any it has written ([`Written`]).
    fn in_hole(&self, at: u64, len: usize) -> bool {
        if self.writable {
            let lba = at / BLOCK_SIZE_U64;
            let n = tet_core::arith::u64_of(len).div_ceil(BLOCK_SIZE_U64);
            let written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
            if written.any(lba, n) {
                return false;
            }
        }
        let end = at.saturating_add(tet_core::arith::u64_of(len));
        let mut pause = self.pause.lock().unwrap_or_else(PoisonError::into_inner);
        if pause.0 > 0 {
            pause.0 = pause.0.saturating_sub(1);
            return false;
        }
        let hole = match rustix::fs::seek(&self.file, rustix::fs::SeekFrom::Data(at)) {
            Ok(d) => d >= end,
            // No data at or after `at`: a hole to the end, if the file still reaches
            // `end` (one that shrank is left to the read, which reports it).
            Err(rustix::io::Errno::NXIO) => self.file.metadata().is_ok_and(|m| m.len() >= end),
            Err(_) => false,
        };
        *pause = if hole {
            (0, 0)
        } else {
            let next = pause.1.saturating_mul(2).saturating_add(1).min(MAX_PAUSE);
            (next, next)
        };
        hole
    }
}

/// Writes go straight to the file (`pwrite`); `flush` is `fdatasync`; compare-and-write
/// holds an exclusive advisory lock on the file (`flock`) around its read, compare and
/// write, so cooperating processes on this host see it atomic.
impl BlockDeviceMut for FileDevice {
    fn write_block(&self, lba: u64, buf: &Block) -> Result<()> {
        if !self.shared.writable || lba >= self.shared.blocks {
            return Err(Self::write_error(lba, "block write"));
        }
        self.before_write(lba, 1);
        let r = self
            .shared
            .file
            .write_all_at(buf, lba.saturating_mul(BLOCK_SIZE_U64))
            .map_err(|_| Self::write_error(lba, "block write"));
        // Again after: a read on another thread between the two may have cached what
        // the blocks held before.
        self.invalidate();
        r
    }

    /// One `pwrite` for the whole run (the journal's slots, a commit's new file data):
    /// the run is checked against the device's end before anything is written.
    fn write_blocks(&self, lba: u64, buf: &[u8]) -> Result<()> {
        let n = tet_core::arith::u64_of(buf.len()) / BLOCK_SIZE_U64;
        if !buf.len().is_multiple_of(BLOCK_SIZE) {
            return Err(Error::new(
                ErrorKind::Invalid,
                "write_blocks length (not whole blocks)",
                lba.saturating_mul(BLOCK_SIZE_U64),
            ));
        }
        let end = lba.checked_add(n).filter(|e| *e <= self.shared.blocks);
        if !self.shared.writable || end.is_none() {
            return Err(Self::write_error(lba, "block write"));
        }
        self.before_write(lba, n.max(1));
        let r = self
            .shared
            .file
            .write_all_at(buf, lba.saturating_mul(BLOCK_SIZE_U64))
            .map_err(|_| Self::write_error(lba, "block write"));
        // Again after: a read on another thread between the two may have cached what
        // the blocks held before.
        self.invalidate();
        r
    }

    fn flush(&self) -> Result<()> {
        if !self.shared.writable {
            return Ok(());
        }
        self.shared
            .file
            .sync_data()
            .map_err(|_| Self::write_error(0, "flush"))
    }

    fn compare_and_write(
        &self,
        lba: u64,
        expected: &[u8; SECTOR],
        new: &[u8; SECTOR],
    ) -> Result<bool> {
        if !self.shared.writable || lba >= self.shared.blocks {
            return Err(Self::write_error(lba, "compare-and-write"));
        }
        self.before_write(lba, 1);
        let at = lba.saturating_mul(BLOCK_SIZE_U64);
        self.shared
            .file
            .lock()
            .map_err(|_| Self::write_error(lba, "compare-and-write (lock)"))?;
        let mut now = [0u8; SECTOR];
        let r = self.shared.file.read_exact_at(&mut now, at).and_then(|()| {
            if &now == expected {
                self.shared.file.write_all_at(new, at).map(|()| true)
            } else {
                Ok(false)
            }
        });
        let _ = self.shared.file.unlock();
        self.invalidate();
        r.map_err(|_| Self::write_error(lba, "compare-and-write"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Granules cover every block of a device of any size in at most 2^19 bits, and a
    /// block written is seen in every range that holds it, never outside its granule.
    #[test]
    fn written_granules_cover_what_was_written() {
        for blocks in [
            1u64,
            100,
            20_000,
            1 << 19,
            (1 << 19) + 1,
            1 << 28,
            u64::MAX / 4096,
        ] {
            let mut w = Written::default();
            assert!(!w.any(0, blocks.max(1)), "{blocks}: nothing written");
            let at = blocks / 3;
            w.mark(blocks, at, 1);
            assert!(w.bits.len() <= (GRANULES / 64 + 1) as usize, "{blocks}");
            assert!(w.any(at, 1) && w.any(0, blocks) && w.any(at.saturating_sub(5), 6));
            let g = 1u64 << w.shift;
            let start = at / g * g;
            if start >= 1 {
                assert!(!w.any(0, start), "{blocks}: below the granule");
            }
            if start + g < blocks {
                assert!(!w.any(start + g, blocks - start - g), "{blocks}: above it");
            }
            // A run across granules marks each.
            w.mark(blocks, 0, 3 * g);
            assert!(w.any(2 * g, 1), "{blocks}");
        }
    }
}
