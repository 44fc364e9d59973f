//! cetrafs 0x0006 with an allocator: the deterministic image builder behind `mkfs`, the
//! full check with its ownership maps, repair through the journal, and the gathering of
//! the journals' committed slots those and the CLI share ([`journal`]).

pub mod copies;
pub mod fsck;
pub mod journal;
pub mod mkfs;
pub mod names;
pub mod records;
pub mod repair;
#[cfg(feature = "testing")]
pub mod testing;
pub mod view;
pub mod write;
