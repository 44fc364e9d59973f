//! Block devices: 4 KiB blocks addressed by `u64` LBAs, read into caller-owned buffers.

use core::cell::RefCell;

use crate::arith::{slice, u64_of};
use crate::error::{Error, ErrorKind, Result};

/// Bytes per block.
pub const BLOCK_SIZE: usize = 4096;
/// Bytes per block, as `u64`.
pub const BLOCK_SIZE_U64: u64 = 4096;

/// One block of caller-owned memory.
pub type Block = [u8; BLOCK_SIZE];

/// The error of a read of block `lba` from a device of `blocks` blocks that ends before
/// it: [`ErrorKind::PastEnd`] about the block read, at the block's byte offset. The
/// devices here report every read at or past their end with it, so an image cut short
/// is named as such, block by block, wherever the read came from.
pub const fn past_end(lba: u64, blocks: u64) -> Error {
    Error::new(
        ErrorKind::PastEnd { block: lba, blocks },
        "block read",
        lba.saturating_mul(BLOCK_SIZE_U64),
    )
}

/// A device of 4 KiB blocks.
pub trait BlockDevice {
    /// Number of whole blocks on the device.
    fn block_count(&self) -> u64;
    /// Reads block `lba` into `buf`. A block at or past [`BlockDevice::block_count`]
    /// fails, with [`past_end`] on the devices of this crate.
    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()>;
    /// Reads at least the first `len` bytes of block `lba` into the start of `buf` (the
    /// rest of `buf` is unspecified). For structures shorter than a block, such as the
    /// 256-byte inode, on devices where a short read is cheaper than a whole block.
    fn read_block_prefix(&self, lba: u64, buf: &mut Block, len: usize) -> Result<()> {
        let _ = len;
        self.read_block(lba, buf)
    }
    /// Reads the consecutive blocks from `lba` into `buf`, whose length is a multiple of
    /// [`BLOCK_SIZE`] (a partial last block fails, as `Invalid`). One device call on
    /// devices that can (a file: one `pread`); this default reads a block at a time.
    /// Left out of `dyn BlockDevice`'s vtable (`Self: Sized`), so firmware reading through
    /// a trait object does not link it (the bootloader's 16 KiB budget).
    fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> Result<()>
    where
        Self: Sized,
    {
        if buf.len() % BLOCK_SIZE != 0 {
            return Err(Error::new(
                ErrorKind::Invalid,
                "read_blocks length (not whole blocks)",
                lba.saturating_mul(BLOCK_SIZE_U64),
            ));
        }
        let mut b: Block = [0; BLOCK_SIZE];
        for (k, chunk) in (0u64..).zip(buf.chunks_exact_mut(BLOCK_SIZE)) {
            self.read_block(lba.saturating_add(k), &mut b)?;
            chunk.copy_from_slice(&b);
        }
        Ok(())
    }
    /// Reads the first `len` bytes of each consecutive block from `lba` into consecutive
    /// `len`-byte slots of `out`: a walk of the inode table takes a batch of 256-byte
    /// inodes at once. `len` is 1 ..= [`BLOCK_SIZE`] and `out`'s length a multiple of it
    /// (otherwise `Invalid`, before anything is read). When it fails, the slots are
    /// unspecified: a caller that needs each block's own error reads them one at a time.
    /// This default reads them one at a time ([`read_prefixes_each`]); a file reads
    /// whole runs, on several threads. Left out of the vtable as
    /// [`BlockDevice::read_blocks`] is.
    fn read_prefixes(&self, lba: u64, len: usize, out: &mut [u8]) -> Result<()>
    where
        Self: Sized,
    {
        read_prefixes_each(self, lba, len, out)
    }
}

/// Checks the slot length of [`BlockDevice::read_prefixes`] against its buffer: the
/// number of blocks `out_len` bytes of `len`-byte slots hold.
pub fn prefix_slots(lba: u64, len: usize, out_len: usize) -> Result<usize> {
    if len == 0 || len > BLOCK_SIZE || out_len.checked_rem(len) != Some(0) {
        return Err(Error::new(
            ErrorKind::Invalid,
            "read_prefixes length (not whole slots of 1 to 4096 bytes)",
            lba.saturating_mul(BLOCK_SIZE_U64),
        ));
    }
    Ok(out_len.checked_div(len).unwrap_or(0))
}

/// [`BlockDevice::read_prefixes`] one block at a time, with
/// [`BlockDevice::read_block_prefix`] (the default, and what a wrapper that changes some
/// blocks falls back to).
pub fn read_prefixes_each<D: BlockDevice + ?Sized>(
    dev: &D,
    lba: u64,
    len: usize,
    out: &mut [u8],
) -> Result<()> {
    prefix_slots(lba, len, out.len())?;
    let mut b: Block = [0; BLOCK_SIZE];
    for (k, slot) in (0u64..).zip(out.chunks_exact_mut(len)) {
        dev.read_block_prefix(lba.saturating_add(k), &mut b, len)?;
        let src = b
            .get(..len)
            .ok_or_else(|| Error::new(ErrorKind::Invalid, "read_prefixes length", 0))?;
        slot.copy_from_slice(src);
    }
    Ok(())
}

/// A reference to a sized device forwards every method, [`BlockDevice::read_blocks`]
/// included, so a borrowed file still reads a run in one call.
impl<D: BlockDevice> BlockDevice for &D {
    fn block_count(&self) -> u64 {
        (**self).block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        (**self).read_block(lba, buf)
    }
    fn read_block_prefix(&self, lba: u64, buf: &mut Block, len: usize) -> Result<()> {
        (**self).read_block_prefix(lba, buf, len)
    }
    fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        (**self).read_blocks(lba, buf)
    }
    fn read_prefixes(&self, lba: u64, len: usize, out: &mut [u8]) -> Result<()> {
        (**self).read_prefixes(lba, len, out)
    }
}

/// Forwards the trait object's methods through a reference to it. A trait object has no
/// [`BlockDevice::read_blocks`] in its vtable, so a run is read a block at a time here.
macro_rules! forward_dyn {
    ($($obj:ty),*) => {$(
        impl BlockDevice for &$obj {
            fn block_count(&self) -> u64 {
                (**self).block_count()
            }
            fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
                (**self).read_block(lba, buf)
            }
            fn read_block_prefix(&self, lba: u64, buf: &mut Block, len: usize) -> Result<()> {
                (**self).read_block_prefix(lba, buf, len)
            }
        }
    )*};
}
forward_dyn!(dyn BlockDevice + '_, dyn BlockDeviceMut + '_);

/// Bytes in the hot sector of a block: the records nodes update by compare-and-write.
pub const SECTOR: usize = 512;

/// A device that can also be written, whole blocks at a time, with caller-owned
/// buffers. Writes may be cached until [`BlockDeviceMut::flush`]; a power cut can tear a
/// block write at a 512-byte boundary but never a sector, so the first 512 bytes of a
/// block (the hot sector) are written all or nothing.
pub trait BlockDeviceMut: BlockDevice {
    /// Writes block `lba`.
    fn write_block(&self, lba: u64, buf: &Block) -> Result<()>;
    /// Writes the consecutive blocks from `lba` from `buf`, whose length is a multiple
    /// of [`BLOCK_SIZE`] (a partial last block fails, as `Invalid`, before anything is
    /// written). One device call on devices that can (a file: one `pwrite`); this
    /// default writes a block at a time, in order. Until [`BlockDeviceMut::flush`], a cut
    /// may leave any of the run's blocks written and not the others (a file's page cache
    /// writes back in no set order), each torn at most as [`BlockDeviceMut`] says.
    /// Left out of `dyn BlockDeviceMut`'s vtable (`Self: Sized`), as
    /// [`BlockDevice::read_blocks`] is.
    fn write_blocks(&self, lba: u64, buf: &[u8]) -> Result<()>
    where
        Self: Sized,
    {
        if buf.len() % BLOCK_SIZE != 0 {
            return Err(Error::new(
                ErrorKind::Invalid,
                "write_blocks length (not whole blocks)",
                lba.saturating_mul(BLOCK_SIZE_U64),
            ));
        }
        for (k, chunk) in (0u64..).zip(buf.chunks_exact(BLOCK_SIZE)) {
            let b: &Block = chunk
                .try_into()
                .map_err(|_| Error::new(ErrorKind::Invalid, "write_blocks length", 0))?;
            self.write_block(lba.saturating_add(k), b)?;
        }
        Ok(())
    }
    /// Makes every write before it durable.
    fn flush(&self) -> Result<()>;
    /// Writes `new` over the first 512 bytes of block `lba` only if they equal
    /// `expected` now, atomically with respect to other writers of the device; returns
    /// whether it wrote.
    fn compare_and_write(
        &self,
        lba: u64,
        expected: &[u8; SECTOR],
        new: &[u8; SECTOR],
    ) -> Result<bool>;
}

/// Forwards a writable device's methods through a reference to it (sized or the trait
/// object); a reference to a sized device also forwards [`BlockDeviceMut::write_blocks`],
/// so a borrowed file still writes a run in one call (a trait object has no
/// `write_blocks` to forward to: a run goes a block at a time).
macro_rules! forward_mut {
    ($({$($gen:tt)*} $ty:ty $(, $runs:ident)?);*) => {$(
        impl<$($gen)*> BlockDeviceMut for &$ty {
            fn write_block(&self, lba: u64, buf: &Block) -> Result<()> {
                (**self).write_block(lba, buf)
            }
            $(
            fn $runs(&self, lba: u64, buf: &[u8]) -> Result<()> {
                (**self).$runs(lba, buf)
            }
            )?
            fn flush(&self) -> Result<()> {
                (**self).flush()
            }
            fn compare_and_write(
                &self,
                lba: u64,
                expected: &[u8; SECTOR],
                new: &[u8; SECTOR],
            ) -> Result<bool> {
                (**self).compare_and_write(lba, expected, new)
            }
        }
    )*};
}
forward_mut!({D: BlockDeviceMut} D, write_blocks; {} dyn BlockDeviceMut + '_);

/// A writable device over an in-memory image (tests, RAM disks). One writer at a time:
/// the image sits in a `RefCell`.
pub struct MemDeviceMut<'a> {
    bytes: RefCell<&'a mut [u8]>,
}

impl<'a> MemDeviceMut<'a> {
    /// Wraps an image.
    pub fn new(bytes: &'a mut [u8]) -> Self {
        MemDeviceMut {
            bytes: RefCell::new(bytes),
        }
    }

    /// Runs `f` on the `len` bytes at the start of block `lba`.
    fn with_span<T>(&self, lba: u64, len: usize, f: impl FnOnce(&mut [u8]) -> T) -> Result<T> {
        let mut b = self
            .bytes
            .try_borrow_mut()
            .map_err(|_| Error::new(ErrorKind::Io, "device busy", 0))?;
        let (s, e) = span(lba, len)?;
        let dst = b.get_mut(s..e).ok_or(Error::new(
            ErrorKind::OutOfRange {
                value: lba,
                max: u64_of(e),
            },
            "block number",
            u64_of(s),
        ))?;
        Ok(f(dst))
    }
}

fn span(lba: u64, len: usize) -> Result<(usize, usize)> {
    let start = lba
        .checked_mul(BLOCK_SIZE_U64)
        .and_then(|s| usize::try_from(s).ok())
        .ok_or(Error::new(ErrorKind::Overflow, "block number", 0))?;
    Ok((start, start.saturating_add(len)))
}

impl BlockDevice for MemDeviceMut<'_> {
    fn block_count(&self) -> u64 {
        self.bytes
            .try_borrow()
            .map_or(0, |b| u64_of(b.len()) / BLOCK_SIZE_U64)
    }

    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        let b = self
            .bytes
            .try_borrow()
            .map_err(|_| Error::new(ErrorKind::Io, "device busy", 0))?;
        MemDevice::new(&b).read_block(lba, buf)
    }
}

impl BlockDeviceMut for MemDeviceMut<'_> {
    fn write_block(&self, lba: u64, buf: &Block) -> Result<()> {
        self.with_span(lba, BLOCK_SIZE, |dst| {
            crate::arith::copy_prefix(dst, buf);
        })
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn compare_and_write(
        &self,
        lba: u64,
        expected: &[u8; SECTOR],
        new: &[u8; SECTOR],
    ) -> Result<bool> {
        self.with_span(lba, SECTOR, |dst| {
            let same = dst == expected;
            if same {
                crate::arith::copy_prefix(dst, new);
            }
            same
        })
    }
}

/// A device over an in-memory image (a trailing partial block is ignored).
#[derive(Clone, Copy, Debug)]
pub struct MemDevice<'a> {
    bytes: &'a [u8],
}

impl<'a> MemDevice<'a> {
    /// Wraps an image.
    pub fn new(bytes: &'a [u8]) -> Self {
        MemDevice { bytes }
    }
}

impl BlockDevice for MemDevice<'_> {
    fn block_count(&self) -> u64 {
        u64_of(self.bytes.len()) / BLOCK_SIZE_U64
    }

    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        let blocks = self.block_count();
        if lba >= blocks {
            return Err(past_end(lba, blocks));
        }
        let start = lba.checked_mul(BLOCK_SIZE_U64).ok_or(Error::new(
            ErrorKind::Overflow,
            "block number",
            0,
        ))?;
        buf.copy_from_slice(slice(self.bytes, start, BLOCK_SIZE_U64, "block")?);
        Ok(())
    }
}

/// Adapts `embedded_storage::ReadStorage` (flash) to [`BlockDevice`]. Flash drivers read
/// through `&mut self`, so the adapter owns the driver in a `RefCell` and is not `Sync`:
/// one reader at a time, as on a microcontroller.
pub struct FlashDevice<S> {
    storage: RefCell<S>,
    base: u32,
    blocks: u64,
}

impl<S: embedded_storage::ReadStorage> FlashDevice<S> {
    /// The image starts at flash offset `base` and runs to the end of the storage.
    pub fn new(storage: S, base: u32) -> Self {
        let cap = u64_of(storage.capacity());
        let blocks = cap.saturating_sub(u64::from(base)) / BLOCK_SIZE_U64;
        FlashDevice {
            storage: RefCell::new(storage),
            base,
            blocks,
        }
    }

    /// Gives the driver back.
    pub fn into_inner(self) -> S {
        self.storage.into_inner()
    }
}

/// Flash that can be written: `embedded_storage::Storage` erases as it needs to (NOR
/// erase-before-write is the driver's concern). A microcontroller has one writer, so
/// compare-and-write is a read, a compare and a write.
impl<S: embedded_storage::Storage> BlockDeviceMut for FlashDevice<S> {
    fn write_block(&self, lba: u64, buf: &Block) -> Result<()> {
        self.write_at(lba, buf)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn compare_and_write(
        &self,
        lba: u64,
        expected: &[u8; SECTOR],
        new: &[u8; SECTOR],
    ) -> Result<bool> {
        let mut block = [0u8; BLOCK_SIZE];
        self.read_block(lba, &mut block)?;
        if block.get(..SECTOR) != Some(&expected[..]) {
            return Ok(false);
        }
        self.write_at(lba, new)?;
        Ok(true)
    }
}

impl<S: embedded_storage::Storage> FlashDevice<S> {
    fn write_at(&self, lba: u64, bytes: &[u8]) -> Result<()> {
        let io = Error::new(
            ErrorKind::Io,
            "flash write",
            lba.saturating_mul(BLOCK_SIZE_U64),
        );
        if lba >= self.blocks {
            return Err(io);
        }
        let off = lba
            .checked_mul(BLOCK_SIZE_U64)
            .and_then(|o| o.checked_add(u64::from(self.base)))
            .and_then(|o| u32::try_from(o).ok())
            .ok_or(io)?;
        let mut s = self.storage.try_borrow_mut().map_err(|_| io)?;
        s.write(off, bytes).map_err(|_| io)
    }
}

impl<S: embedded_storage::ReadStorage> BlockDevice for FlashDevice<S> {
    fn block_count(&self) -> u64 {
        self.blocks
    }

    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        let io = || {
            Error::new(
                ErrorKind::Io,
                "flash read",
                lba.saturating_mul(BLOCK_SIZE_U64),
            )
        };
        if lba >= self.blocks {
            return Err(past_end(lba, self.blocks));
        }
        let off = lba
            .checked_mul(BLOCK_SIZE_U64)
            .and_then(|o| o.checked_add(u64::from(self.base)))
            .and_then(|o| u32::try_from(o).ok())
            .ok_or_else(io)?;
        let mut s = self.storage.try_borrow_mut().map_err(|_| io())?;
        s.read(off, buf).map_err(|_| io())
    }
}
