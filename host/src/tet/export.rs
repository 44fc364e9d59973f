//! `tet-host export`: a dataset, or a selection of it, to a NumPy `.npy` file.

use std::path::Path;

use crate::Exit;

/// `tet-host export FILE --dataset NAME OUT.npy [--selection JSON]`.
pub fn export(
    path: &Path,
    bytes: &[u8],
    dataset: &str,
    selection: &[tet_core::tet::select::Slice],
    out: &Path,
    budget: Option<u64>,
    force: bool,
) -> Exit {
    if let Err(e) = crate::atomic::check_output(out, &[path], force) {
        return e;
    }
    let file = match crate::tet::open_tet(path, bytes) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let Ok(ds) = file.dataset(dataset) else {
        crate::say!("{}: no dataset \"{dataset}\"", path.display());
        return Exit::Usage;
    };
    let budget = crate::tet::budget_for(&file, None, budget);
    let p = match tet_alloc::tet::query::plan(&file, ds, selection) {
        Ok(p) => p,
        Err(e) => {
            crate::say!("{}: {e}", path.display());
            return Exit::of(e.category());
        }
    };
    let values = match crate::tet::query::select_values(&file, &p, budget) {
        Ok(v) => v,
        Err(e) => return crate::tet::query::fail_reading(path, &ds, &e),
    };
    let shape: Vec<u64> = p.selection.shape().as_slice().to_vec();
    match crate::tet::npy::write_raw(out, ds.dtype(), &shape, &values) {
        Ok(()) => Exit::Clean,
        Err(e) => {
            crate::say!("cannot write {}: {e}", out.display());
            Exit::Operational
        }
    }
}
