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

/// A device of 4 KiB blocks.
pub trait BlockDevice {
    /// Number of whole blocks on the device.
    fn block_count(&self) -> u64;
    /// Reads block `lba` into `buf`.
    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()>;
    /// Reads at least the first `len` bytes of block `lba` into the start of `buf` (the
    /// rest of `buf` is unspecified). For structures shorter than a block, such as the
    /// 256-byte inode, on devices where a short read is cheaper than a whole block.
    fn read_block_prefix(&self, lba: u64, buf: &mut Block, len: usize) -> Result<()> {
        let _ = len;
        self.read_block(lba, buf)
    }
}

impl<D: BlockDevice + ?Sized> BlockDevice for &D {
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

impl<S: embedded_storage::ReadStorage> BlockDevice for FlashDevice<S> {
    fn block_count(&self) -> u64 {
        self.blocks
    }

    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        let io = Error::new(
            ErrorKind::Io,
            "flash read",
            lba.saturating_mul(BLOCK_SIZE_U64),
        );
        if lba >= self.blocks {
            return Err(Error::new(
                ErrorKind::OutOfRange {
                    value: lba,
                    max: self.blocks.saturating_sub(1),
                },
                "block number",
                0,
            ));
        }
        let off = lba
            .checked_mul(BLOCK_SIZE_U64)
            .and_then(|o| o.checked_add(u64::from(self.base)))
            .and_then(|o| u32::try_from(o).ok())
            .ok_or(io)?;
        let mut s = self.storage.try_borrow_mut().map_err(|_| io)?;
        s.read(off, buf).map_err(|_| io)
    }
}
