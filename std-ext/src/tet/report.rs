//! `.tet` findings in words a person can act on: dataset names, chunk grids, rows.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Map};
use tet_core::tet::{Code, Finding, Severity, Sink, TetFile};
use tet_core::ErrorKind;

use crate::report::Rendered;

pub use crate::report::KEEP;

/// Collects findings with a cap.
#[derive(Default)]
pub struct Collector {
    /// The first [`KEEP`] findings, plus host-made ones.
    pub kept: Vec<Finding>,
    /// Messages for host findings that carry their own text (JSON errors), by index.
    pub notes: BTreeMap<usize, String>,
    /// Findings not kept.
    pub dropped: u64,
    /// Count per severity.
    pub errors: u64,
    /// Count of warnings.
    pub warnings: u64,
}

impl Sink<Finding> for Collector {
    fn report(&mut self, f: &Finding) {
        match f.severity() {
            Severity::Error => self.errors = self.errors.saturating_add(1),
            Severity::Warning => self.warnings = self.warnings.saturating_add(1),
        }
        if self.kept.len() < KEEP {
            self.kept.push(*f);
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }
}

impl Collector {
    /// Adds a finding with a free-text explanation.
    pub fn report_with_note(&mut self, f: Finding, note: String) {
        self.report(&f);
        if let Some(i) = self.kept.len().checked_sub(1) {
            self.notes.insert(i, note);
        }
    }

    /// Whether anything was found.
    pub fn is_clean(&self) -> bool {
        self.errors == 0 && self.warnings == 0
    }
}

/// Names and grid shapes of the datasets that findings mention, gathered in one pass
/// over the directory (so rendering N findings costs O(datasets + N), not O(datasets × N))
/// and only for the ids mentioned (so memory is bounded by the kept findings).
#[derive(Default)]
pub struct Names(BTreeMap<u32, (String, String)>);

impl Names {
    /// Collects the datasets `findings` mention.
    pub fn for_findings(file: Option<&TetFile<'_>>, findings: &[Finding]) -> Names {
        let wanted: std::collections::BTreeSet<u32> =
            findings.iter().filter_map(|f| f.dataset).collect();
        let mut names = Names::default();
        let Some(file) = file else { return names };
        if wanted.is_empty() {
            return names;
        }
        for ds in file.datasets() {
            let Ok(ds) = ds else { break };
            if wanted.contains(&ds.id().0) {
                let grid: Vec<String> = ds.grid().map(|g| g.to_string()).collect();
                names
                    .0
                    .insert(ds.id().0, (ds.name().to_string(), grid.join("×")));
            }
        }
        names
    }
}

/// The one-line message for a finding.
pub fn message(names: &Names, f: &Finding, note: Option<&String>) -> String {
    let mut m = String::new();
    let named = f.dataset.and_then(|id| names.0.get(&id).cloned());
    if let Some(id) = f.dataset {
        match &named {
            Some((name, _)) => {
                let _ = write!(m, "dataset {id} '{name}': ");
            }
            None => {
                let _ = write!(m, "dataset {id}: ");
            }
        }
    }
    let grid = named.map(|(_, g)| g).unwrap_or_default();
    let coords = f.coords.map(|c| c.to_string()).unwrap_or_default();
    match (f.code, f.error.kind) {
        (Code::ChunkCoords, _) => {
            let _ = write!(m, "chunk {coords} is outside the {grid} chunk grid");
        }
        (Code::ChunkMissing, ErrorKind::Missing) => {
            let _ = write!(m, "chunk {coords} has no index row ({grid} chunk grid)");
        }
        (Code::ChunkMissing, ErrorKind::Mismatch { expected, found }) => {
            let _ = write!(
                m,
                "{} of {expected} chunk grid cells have no index row",
                expected.saturating_sub(found)
            );
        }
        (Code::ChunkDuplicate, ErrorKind::Duplicate { first }) => {
            let _ = write!(
                m,
                "chunk {coords} is also covered by the row at byte {first:#x}"
            );
        }
        _ => {
            if !coords.is_empty() {
                let _ = write!(m, "chunk {coords}: ");
            }
            let _ = write!(m, "{} {}", f.error.what, f.error.kind);
            if let Some(n) = note {
                let _ = write!(m, ": {n}");
            }
        }
    }
    match f.row {
        Some(r) => {
            let _ = write!(m, " (tidx row {r}, byte {:#x})", f.error.offset);
        }
        None => {
            let _ = write!(m, " (byte {:#x})", f.error.offset);
        }
    }
    m
}

/// A finding rendered for printing (the shared shape of [`crate::report`]), with its
/// `.tet` context: dataset id and name, index row, chunk coordinates.
pub fn rendered(names: &Names, f: &Finding, note: Option<&String>) -> Rendered {
    let mut context = Map::new();
    if let Some(id) = f.dataset {
        context.insert("dataset".into(), json!(id));
        if let Some((name, _)) = names.0.get(&id) {
            context.insert("dataset_name".into(), json!(name));
        }
    }
    if let Some(row) = f.row {
        context.insert("row".into(), json!(row));
    }
    if let Some(c) = f.coords {
        context.insert("coords".into(), json!(c.as_slice()));
    }
    Rendered {
        code: f.code.as_str(),
        severity: f.severity(),
        field: f.error.what,
        offset: f.error.offset,
        message: message(names, f, note),
        context,
    }
}
