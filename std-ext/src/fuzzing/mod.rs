//! Bodies of the fuzz targets (feature `testing`), shared with the regression tests that
//! replay them, one module per format. Panicking on a broken invariant is how a fuzz
//! target reports it, so these modules are outside the command modules' lint wall.

mod cetrafs;
mod tet;

pub use cetrafs::*;
pub use tet::*;
