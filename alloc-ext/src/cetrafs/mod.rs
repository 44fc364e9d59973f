//! cetrafs 0x0006 with an allocator: the deterministic image builder behind `mkfs`, the
//! full check with its ownership maps, and repair through the journal.

pub mod fsck;
pub mod journal;
pub mod mkfs;
pub mod repair;
#[cfg(feature = "testing")]
pub mod testing;
