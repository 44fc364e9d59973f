//! [`Scratch`]: the caller-owned working memory every walk reads through.

use crate::block::{Block, BLOCK_SIZE};

/// The caller-owned working memory of every walk: one block for extent tree blocks and
/// one for data, directory and xattr blocks (8 KiB in all; place it in a `static` on
/// small targets).
pub struct Buffers {
    /// Extent tree blocks.
    pub tree: Block,
    /// Data, directory and xattr blocks.
    pub data: Block,
}

impl Buffers {
    /// Zeroed buffers.
    pub const fn new() -> Self {
        Buffers {
            tree: [0; BLOCK_SIZE],
            data: [0; BLOCK_SIZE],
        }
    }
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers::new()
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Buffers {}
    impl Sealed for crate::block::Block {}
}

/// The working memory a walk reads through: [`Buffers`] (8 KiB: an extent tree block
/// stays cached while data blocks are read) or one [`Block`] (4 KiB: the tree blocks
/// are read again after data blocks have reused the buffer, which costs up to two block
/// reads per extent). Every walk, lookup and read takes either.
pub trait Scratch: sealed::Sealed {
    /// The block tree walks read into and, with two buffers, a separate one for data.
    fn split(&mut self) -> (&mut Block, Option<&mut Block>);
    /// The block single reads use (inodes, directory, xattr and journal blocks).
    fn block(&mut self) -> &mut Block;
}

impl Scratch for Buffers {
    fn split(&mut self) -> (&mut Block, Option<&mut Block>) {
        (&mut self.tree, Some(&mut self.data))
    }
    fn block(&mut self) -> &mut Block {
        &mut self.data
    }
}

impl Scratch for Block {
    fn split(&mut self) -> (&mut Block, Option<&mut Block>) {
        (self, None)
    }
    fn block(&mut self) -> &mut Block {
        self
    }
}
