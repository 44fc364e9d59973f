//! Findings of both formats in one shape: the same human line (`error[code] message`)
//! and the same JSON object (`code`, `severity`, `field`, `offset`, `message`, and a
//! `context` object that each format fills with what locates the finding in its own
//! terms: dataset, row and chunk coordinates for `.tet`, block and inode for cetrafs).

use serde_json::{json, Map, Value};
use tet_core::finding::Severity;

/// A finding ready to show.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The finding's stable code (`chunk-coords`, `inode-checksum`, ...).
    pub code: &'static str,
    /// Error or warning.
    pub severity: Severity,
    /// The field, named as in `docs/`.
    pub field: &'static str,
    /// Absolute byte offset of the field.
    pub offset: u64,
    /// The sentence a person reads.
    pub message: String,
    /// Where the finding is, in the format's own terms.
    pub context: Map<String, Value>,
}

impl Rendered {
    /// `error[code] message`.
    pub fn line(&self) -> String {
        self.line_as(self.severity.name())
    }

    /// The line with another tag in place of the severity (`left[code] ...` in repair).
    pub fn line_as(&self, tag: &str) -> String {
        format!("{tag}[{}] {}", self.code, self.message)
    }

    /// The JSON object.
    pub fn json(&self) -> Value {
        json!({
            "code": self.code,
            "severity": self.severity.name(),
            "field": self.field,
            "offset": self.offset,
            "message": self.message,
            "context": self.context,
        })
    }
}

/// Findings a check keeps, for both formats; the rest are counted
/// (`... and N more findings not listed`, `findings_not_listed` in JSON), so an image
/// with a million findings is checked in bounded memory.
pub const KEEP: usize = 10_000;
