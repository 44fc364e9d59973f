//! `.tet` layout v1 with an allocator: bounded decoding, chunk access by row, the fold
//! engine, the streaming writer, the history footer, verification with owned scratch,
//! repair and the built-in example.

pub mod append;
pub mod cftime;
pub mod decode;
pub mod example;
pub mod history;
pub mod meta;
pub mod query;
pub mod repair;
pub mod scan;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transform;
mod verify;
pub mod writer;

pub use verify::verify_owned;
