//! Bodies of the fuzz targets, shared with the regression tests that replay them.

use tet_core::tet::{Severity, TetFile};

/// Runs every check `tet-host verify` runs, then opens the file and looks up chunks of
/// every dataset (a bounded number of each). Panics only on a broken invariant: a file
/// that opens and verifies without errors must serve every chunk of every dataset.
// Panicking on a broken invariant is how a fuzz target reports it.
#[allow(clippy::panic)]
pub fn open_walk(data: &[u8]) {
    let verified_clean = match crate::tet_cmd::check(data) {
        Ok((found, _)) => !found.kept.iter().any(|f| f.severity() == Severity::Error),
        Err(_) => false,
    };
    let Ok(file) = TetFile::open(data) else {
        assert!(!verified_clean, "verify found no error but open failed");
        return;
    };
    for ds in file.datasets().take(32) {
        let Ok(ds) = ds else { break };
        for cell in 0..ds.grid_cells().min(256) {
            let coords = ds.delinearize(cell);
            let got = file.chunk(&ds, coords.as_slice());
            if verified_clean {
                let chunk = match got {
                    Ok(c) => c,
                    Err(e) => panic!("clean file cannot serve chunk {coords}: {e}"),
                };
                assert_eq!(chunk.coords, coords);
                assert_eq!(
                    u64::try_from(chunk.payload.len()).ok(),
                    Some(
                        file.rows()[usize::try_from(chunk.row).unwrap_or(0)]
                            .stored_byte_len
                            .get()
                    )
                );
            }
        }
    }
}
