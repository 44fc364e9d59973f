//! A block device that loses power, shared by the crash-safety tests.

use std::cell::Cell;

use tet_core::block::{Block, BlockDevice, BlockDeviceMut, MemDeviceMut, BLOCK_SIZE, SECTOR};
use tet_core::{Error, ErrorKind, Result};

/// A device that loses power: writes after the `cut`-th fail, and with `tear` the
/// `cut`-th block write lands only its first `tear` sectors.
pub struct PowerCut<'a> {
    pub inner: MemDeviceMut<'a>,
    pub writes: Cell<u64>,
    pub cut: u64,
    pub tear: usize,
}

impl BlockDevice for PowerCut<'_> {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        self.inner.read_block(lba, buf)
    }
}

impl PowerCut<'_> {
    /// The number of this write, or the cut.
    fn tick(&self) -> std::result::Result<u64, Error> {
        let n = self.writes.get() + 1;
        self.writes.set(n);
        if n > self.cut {
            return Err(Error::new(ErrorKind::Io, "power cut", 0));
        }
        Ok(n)
    }
}

impl BlockDeviceMut for PowerCut<'_> {
    fn write_block(&self, lba: u64, buf: &Block) -> Result<()> {
        let n = self.tick()?;
        if n == self.cut && self.tear > 0 {
            let mut torn = [0u8; BLOCK_SIZE];
            self.inner.read_block(lba, &mut torn)?;
            torn[..self.tear * SECTOR].copy_from_slice(&buf[..self.tear * SECTOR]);
            self.inner.write_block(lba, &torn)?;
            return Err(Error::new(ErrorKind::Io, "power cut (torn)", 0));
        }
        self.inner.write_block(lba, buf)
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn compare_and_write(&self, lba: u64, e: &[u8; SECTOR], n: &[u8; SECTOR]) -> Result<bool> {
        // A sector is written whole or not at all.
        self.tick()?;
        self.inner.compare_and_write(lba, e, n)
    }
}

impl<'a> PowerCut<'a> {
    /// A device over `img` that loses power after write `cut`, tearing it when `tear`
    /// is nonzero (`u64::MAX`: never).
    pub fn new(img: &'a mut [u8], cut: u64, tear: usize) -> Self {
        PowerCut {
            inner: MemDeviceMut::new(img),
            writes: Cell::new(0),
            cut,
            tear,
        }
    }
}
