//! What the other implementation of layout v1 (thicclatka/tetration, CLI `tet`) requires
//! of a footer before it opens the file, so that every footer this writer produces is
//! one it reads. The limits are its `MetadataLimitsV1`; docs/tet-v1.md ("Footers both
//! implementations read") lists them.

use alloc::format;
use alloc::string::String;

use serde_json::{Map, Value};

use super::HistoryRow;

/// Longest string (op, source, at, a param key or value, an attr, a label), in bytes.
pub const ATTR_STRING_BYTES: usize = 1024;
/// Most rows in `history`.
pub const HISTORY_ROWS: usize = 4096;
/// Most `params` per row.
pub const HISTORY_PARAMS: usize = 32;
/// Most entries in `metadata.datasets`.
pub const METADATA_DATASETS: usize = 256;
/// Most `attrs` per dataset.
pub const DATASET_ATTRS: usize = 64;
/// Most `dim_names` per dataset (and most `coords` axes).
pub const DIM_NAMES: usize = 8;
/// Most labels per `coords` axis.
pub const COORD_LABELS: usize = 64;
/// The largest metadata spill, in bytes (16 MiB).
pub const SPILL_LIMIT: usize = 16 * 1024 * 1024;

/// `s` cut to at most [`ATTR_STRING_BYTES`] at a character boundary.
pub fn clip(s: &str) -> &str {
    let mut end = s.len().min(ATTR_STRING_BYTES);
    while !s.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    s.get(..end).unwrap_or_default()
}

fn check_string(s: &str, what: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if s.len() > ATTR_STRING_BYTES {
        return Err(format!(
            "{what} is {} bytes (at most {ATTR_STRING_BYTES})",
            s.len()
        ));
    }
    Ok(())
}

/// A row's strings are nonempty and short enough, its params few enough and unique.
pub fn check_row(row: &HistoryRow) -> Result<(), String> {
    check_string(&row.op, "op")?;
    check_string(&row.source, "source")?;
    check_string(&row.at, "at")?;
    if row.params.len() > HISTORY_PARAMS {
        return Err(format!(
            "{} params (at most {HISTORY_PARAMS})",
            row.params.len()
        ));
    }
    for (i, (k, v)) in row.params.iter().enumerate() {
        check_string(k, "a param key")?;
        check_string(v, &format!("param {k:?}"))?;
        if row.params.iter().take(i).any(|(p, _)| p == k) {
            return Err(format!("param {k:?} given twice"));
        }
    }
    Ok(())
}

fn strings(v: &Value, what: &str, max: usize) -> Result<(), String> {
    let Value::Array(items) = v else {
        return Err(format!("{what} is not a list of strings"));
    };
    if items.len() > max {
        return Err(format!(
            "{what} has {} entries (at most {max})",
            items.len()
        ));
    }
    items.iter().try_for_each(|s| match s {
        Value::String(s) => check_string(s, what),
        _ => Err(format!("{what} holds a value that is not a string")),
    })
}

fn object<'v>(v: &'v Value, what: &str, max: usize) -> Result<&'v Map<String, Value>, String> {
    let Value::Object(m) = v else {
        return Err(format!("{what} is not an object"));
    };
    if m.len() > max {
        return Err(format!("{what} has {} keys (at most {max})", m.len()));
    }
    m.keys()
        .try_for_each(|k| check_string(k, &format!("a key of {what}")))?;
    Ok(m)
}

fn dataset(name: &str, v: &Value) -> Result<(), String> {
    let what = format!("metadata.datasets[{name:?}]");
    let d = object(v, &what, usize::MAX)?;
    if let Some(a) = d.get("attrs") {
        let what = format!("{what}.attrs");
        for (k, v) in object(a, &what, DATASET_ATTRS)? {
            match v {
                Value::String(s) => check_string(s, &format!("{what}[{k:?}]"))?,
                _ => return Err(format!("{what}[{k:?}] is not a string")),
            }
        }
    }
    if let Some(n) = d.get("dim_names") {
        strings(n, &format!("{what}.dim_names"), DIM_NAMES)?;
    }
    if let Some(c) = d.get("coords") {
        let what = format!("{what}.coords");
        for (axis, c) in object(c, &what, DIM_NAMES)? {
            let what = format!("{what}[{axis:?}]");
            let labels = object(c, &what, usize::MAX)?
                .get("labels")
                .ok_or_else(|| format!("{what} has no labels"))?;
            strings(labels, &format!("{what}.labels"), COORD_LABELS)?;
        }
    }
    Ok(())
}

/// The metadata is an object in the shapes the other implementation reads: optional
/// `file` (`tool`, `library_version`, `created_at`: strings) and optional `datasets`, a map
/// from dataset name to `{attrs: {string: string}, dim_names: [string], coords: {axis:
/// {labels: [string]}}}` (each key optional). Other keys are free: that reader ignores them.
pub fn check_metadata(meta: &str) -> Result<(), String> {
    let v: Value = serde_json::from_str(meta).map_err(|e| format!("{e}"))?;
    let m = object(&v, "metadata", usize::MAX)?;
    if let Some(f) = m.get("file") {
        let f = object(f, "metadata.file", usize::MAX)?;
        for key in ["tool", "library_version", "created_at"] {
            match f.get(key) {
                None => {}
                Some(Value::String(s)) => check_string(s, &format!("metadata.file.{key}"))?,
                Some(_) => return Err(format!("metadata.file.{key} is not a string")),
            }
        }
    }
    if let Some(ds) = m.get("datasets") {
        for (name, d) in object(ds, "metadata.datasets", METADATA_DATASETS)? {
            dataset(name, d)?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    fn row(params: &[(&str, &str)]) -> HistoryRow {
        HistoryRow {
            op: "convert".into(),
            source: "a.npy".into(),
            at: "2026-01-01T00:00:00Z".into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn rows() {
        assert!(check_row(&row(&[("codec", "raw")])).is_ok());
        assert!(check_row(&row(&[("codec", "")]))
            .unwrap_err()
            .contains("empty"));
        assert!(check_row(&row(&[("a", "1"), ("a", "2")]))
            .unwrap_err()
            .contains("twice"));
        let mut r = row(&[]);
        r.source = "x".repeat(1025);
        assert!(check_row(&r).unwrap_err().contains("1025 bytes"));
        r.source = clip(&r.source).into();
        assert!(check_row(&r).is_ok());
        let many: vec::Vec<_> = (0..33).map(|i| (i.to_string(), "v".to_string())).collect();
        r.params = many;
        assert!(check_row(&r).unwrap_err().contains("33 params"));
        assert_eq!(clip("é".repeat(600).as_str()).len(), 1024);
    }

    #[test]
    fn metadata_shapes() {
        let ok = r#"{"file":{"tool":"t"},"datasets":{"a":{"attrs":{"units":"K"},"dim_names":["x"],"coords":{"x":{"labels":["p"]}}}},"other":[1]}"#;
        assert!(check_metadata(ok).is_ok());
        for (bad, says) in [
            ("[]", "metadata is not an object"),
            (r#"{"file":{"tool":1}}"#, "tool is not a string"),
            (r#"{"datasets":{"a":{"attrs":{"u":1}}}}"#, "attrs[\"u\"]"),
            (
                r#"{"datasets":{"a":{"dim_names":"x"}}}"#,
                "dim_names is not",
            ),
            (r#"{"datasets":{"a":{"coords":{"x":{}}}}}"#, "no labels"),
            (r#"{"datasets":{"a":[]}}"#, "is not an object"),
        ] {
            assert!(check_metadata(bad).unwrap_err().contains(says), "{bad}");
        }
    }
}
