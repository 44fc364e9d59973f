//! `tet-host` commands for `.tet` files, one module per command. What they share with
//! the Python binding (open, budgets, verify, query, the codec) is `tet_std::tet`,
//! re-exported here under the paths the commands use.

use std::path::Path;

use tet_core::tet::TetFile;

use crate::Exit;

pub use tet_std::tet::{
    budget_for, budget_message, budget_source, codec, dims, no_dataset_message, now_rfc3339,
    query_doc, raise_budget, read_warnings, report,
};

#[cfg(feature = "netcdf")]
mod cdf3;
pub mod convert;
pub mod export;
#[cfg(feature = "hdf5")]
pub mod hdf5;
pub mod info;
#[cfg_attr(
    not(any(feature = "zarr", feature = "netcdf", feature = "hdf5")),
    allow(
        dead_code,
        reason = "the Zarr, NetCDF and HDF5 inputs use all of it, .npy only its check"
    )
)]
pub(crate) mod ingest;
#[cfg(feature = "netcdf")]
pub mod netcdf;
pub mod npy;
pub mod query;
pub mod repair;
pub mod transform;
pub mod verify;
pub mod write;
#[cfg(feature = "zarr")]
pub mod zarr;
/// A build without the `zarr` feature: stores are recognised, and refused with a message.
#[cfg(not(feature = "zarr"))]
pub mod zarr {
    use std::path::Path;

    use super::convert::ConvertOptions;
    use crate::Exit;

    /// Whether `path` is a Zarr v3 store (a directory with a `zarr.json`).
    pub fn is_store(path: &Path) -> bool {
        path.is_dir() && path.join("zarr.json").is_file()
    }

    fn refused() -> Exit {
        crate::say!("this tet-host was built without Zarr support (cargo feature `zarr`)");
        Exit::Usage
    }

    /// Refused: no Zarr support in this build.
    pub fn convert(_: &Path, _: &Path, _: Option<&str>, _: &ConvertOptions) -> Exit {
        refused()
    }

    /// Refused: no Zarr support in this build.
    pub fn export(_: &Path, _: &[u8], _: Option<&str>, _: &Path, _: Option<u64>, _: bool) -> Exit {
        refused()
    }
}

/// Opens `bytes` as a `.tet` file for reading data ([`tet_std::tet::open_reading`]),
/// or says why not (exit 4 for a damaged file, 8 for a file of neither format, 16 for a
/// cetrafs image). What the reader could not use is warned of on standard error.
pub fn open_tet<'a>(path: &Path, bytes: &'a [u8]) -> Result<TetFile<'a>, Exit> {
    let opened = tet_std::tet::open_reading(path, bytes).map_err(|e| {
        crate::say!("{e}");
        Exit::of(e.category())
    })?;
    for w in &opened.warnings {
        crate::errln!("tet-host: {}: {w}", path.display());
    }
    Ok(opened.file)
}

/// Says that `file` has no dataset `name` and lists those it has (exit 16).
pub fn no_dataset(path: &Path, file: &TetFile<'_>, name: &str) -> Exit {
    crate::say!("{}", no_dataset_message(path, file, name));
    Exit::Usage
}
