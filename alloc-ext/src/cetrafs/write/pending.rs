//! The filesystem as the writer sees it in batch mode: the pending transaction's blocks
//! read in place of the device's, so a reader (the mount's reads, listings and xattrs)
//! sees every operation that returned without committing the batch first.

use tet_core::block::{Block, BlockDevice, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::Fs;
use tet_core::{Error, Result};

use super::txn::Txn;
use super::Writer;

/// A device whose blocks the writer's pending transaction changed read as the
/// transaction has them (journaled targets and new data alike); every other block is
/// the device's. Reading only: the transaction is written by its commit.
pub struct PendingDevice<'a, D> {
    dev: &'a D,
    txn: &'a Txn,
}

impl<D: BlockDevice> BlockDevice for PendingDevice<'_, D> {
    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        match self.txn.changed(lba) {
            Some(b) => {
                buf.copy_from_slice(b);
                Ok(())
            }
            None => self.dev.read_block(lba, buf),
        }
    }
    fn read_block_prefix(&self, lba: u64, buf: &mut Block, len: usize) -> Result<()> {
        match self.txn.changed(lba) {
            Some(b) => {
                buf.copy_from_slice(b);
                Ok(())
            }
            None => self.dev.read_block_prefix(lba, buf, len),
        }
    }
    /// The run in one call to the device, then the blocks the transaction changed
    /// copied over it.
    fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.dev.read_blocks(lba, buf)?;
        let blocks = tet_core::arith::u64_of(buf.len() / BLOCK_SIZE);
        for (at, b) in self.txn.changed_in(lba, lba.saturating_add(blocks)) {
            let from = usize::try_from(at.saturating_sub(lba).saturating_mul(BLOCK_SIZE_U64))
                .unwrap_or(usize::MAX);
            if let Some(dst) = buf.get_mut(from..from.saturating_add(BLOCK_SIZE)) {
                dst.copy_from_slice(b);
            }
        }
        Ok(())
    }
}

impl<D: BlockDeviceMut> Writer<D> {
    /// The filesystem with the pending transaction of batch mode read in place of the
    /// device's blocks: what every operation that returned has made it, committed or
    /// not. (The free counts of the block groups are the committed ones: a commit
    /// writes them.) Mounting it reads the superblock, into `buf`.
    pub fn view(&self, buf: &mut Block) -> core::result::Result<Fs<PendingDevice<'_, D>>, Error> {
        Fs::open_for_read(
            PendingDevice {
                dev: self.fs.device(),
                txn: &self.pending,
            },
            buf,
        )
    }
}
