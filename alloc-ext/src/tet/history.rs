//! The `history_json` of the `THST` footer, checked without building a tree: history rows
//! are validated one at a time and dropped, so memory stays bounded by the largest row.

use alloc::borrow::Cow;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use tet_core::tet::{ChecksumTable, Code, Finding, Span, TetFile};
use tet_core::{Error, ErrorKind};

/// What the JSON says.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct History {
    /// Number of rows in `history`.
    pub rows: u64,
    /// Whether an inline `metadata` object is present.
    pub inline_metadata: bool,
    /// `metadata_ref` as `(offset, len)`.
    pub metadata_ref: Option<(u64, u64)>,
    /// The inline metadata's `tet_checksums` table, as `(offset, rows)`.
    pub checksums: Option<(u64, u64)>,
}

/// A row in either accepted form; fields are borrowed and dropped right away.
#[derive(Deserialize)]
#[serde(untagged)]
enum Row<'a> {
    Object {
        #[serde(borrow)]
        op: Cow<'a, str>,
        #[serde(borrow)]
        source: Cow<'a, str>,
        #[serde(borrow)]
        at: Cow<'a, str>,
        #[serde(default)]
        #[allow(dead_code)]
        parents: Option<Any>,
        #[serde(default)]
        #[allow(dead_code)]
        params: Option<Any>,
    },
    Legacy(
        #[serde(borrow)] Cow<'a, str>,
        #[serde(borrow)] Cow<'a, str>,
        #[serde(borrow)] Cow<'a, str>,
    ),
}

struct RowCount(u64);

impl<'de> Deserialize<'de> for RowCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RowCount;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of history rows")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RowCount, A::Error> {
                let mut n: u64 = 0;
                while let Some(row) = seq.next_element::<Row<'de>>()? {
                    let (Row::Object { op, source, at, .. } | Row::Legacy(op, source, at)) = row;
                    drop((op, source, at));
                    n = n.saturating_add(1);
                }
                Ok(RowCount(n))
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(Deserialize)]
struct MetaRef {
    offset: u64,
    len: u64,
}

impl<'de> Deserialize<'de> for History {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = History;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object with optional history, metadata and metadata_ref")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<History, A::Error> {
                let mut h = History::default();
                let mut seen_history = false;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    match key.as_ref() {
                        "history" => {
                            if seen_history {
                                return Err(de::Error::duplicate_field("history"));
                            }
                            seen_history = true;
                            h.rows = map.next_value::<RowCount>()?.0;
                        }
                        "metadata" => {
                            if h.inline_metadata {
                                return Err(de::Error::duplicate_field("metadata"));
                            }
                            h.checksums = map.next_value::<Meta>()?.0;
                            h.inline_metadata = true;
                        }
                        "metadata_ref" => {
                            if h.metadata_ref.is_some() {
                                return Err(de::Error::duplicate_field("metadata_ref"));
                            }
                            let r: MetaRef = map.next_value()?;
                            h.metadata_ref = Some((r.offset, r.len));
                        }
                        _ => {
                            map.next_value::<Any>()?;
                        }
                    }
                }
                if h.inline_metadata && h.metadata_ref.is_some() {
                    return Err(de::Error::custom(
                        "metadata and metadata_ref are mutually exclusive",
                    ));
                }
                Ok(h)
            }
        }
        d.deserialize_map(V)
    }
}

/// Any JSON value, validated to the last escape and discarded. (`IgnoredAny` skips
/// strings without decoding their escapes, so it would accept a lone surrogate that a
/// full parser, and so `repair`, rejects.)
struct Any;
impl<'de> Deserialize<'de> for Any {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Any;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Any, E> {
                Ok(Any)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Any, E> {
                Ok(Any)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Any, E> {
                Ok(Any)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Any, E> {
                Ok(Any)
            }
            fn visit_str<E>(self, _: &str) -> Result<Any, E> {
                Ok(Any)
            }
            fn visit_unit<E>(self) -> Result<Any, E> {
                Ok(Any)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Any, A::Error> {
                while seq.next_element::<Any>()?.is_some() {}
                Ok(Any)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Any, A::Error> {
                while map.next_entry::<Cow<'de, str>, Any>()?.is_some() {}
                Ok(Any)
            }
        }
        d.deserialize_any(V)
    }
}

/// `metadata.tet_checksums` in the shape this writer gives it; another shape (another
/// algorithm, another writer's key) is no table, not an error.
#[derive(Deserialize)]
struct TableRef<'a> {
    #[serde(borrow)]
    algorithm: Cow<'a, str>,
    offset: u64,
    rows: u64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum MaybeTable<'a> {
    #[serde(borrow)]
    Table(TableRef<'a>),
    Other(Any),
}

/// A metadata object, validated; keeps its checksum table's `(offset, rows)`.
struct Meta(Option<(u64, u64)>);
impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Meta;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Meta, A::Error> {
                let mut table = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == "tet_checksums" {
                        if let MaybeTable::Table(t) = map.next_value::<MaybeTable<'de>>()? {
                            table = (t.algorithm == "crc32c").then_some((t.offset, t.rows));
                        }
                    } else {
                        map.next_value::<Any>()?;
                    }
                }
                Ok(Meta(table))
            }
        }
        d.deserialize_map(V)
    }
}

/// Parses `history_json`. The error text is serde_json's, with line and column.
pub fn parse(json: &[u8]) -> Result<History, String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let h = History::deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(h)
}

/// Checks that the metadata spill is a JSON object (validated without a tree); returns
/// its checksum table's `(offset, rows)`.
pub fn check_spill(spill: &[u8]) -> Result<Option<(u64, u64)>, String> {
    let mut de = serde_json::Deserializer::from_slice(spill);
    let m = Meta::deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(m.0)
}

/// What a file's footer JSON holds, and what is wrong with it.
#[derive(Debug, Default)]
pub struct FooterCheck {
    /// The history, when the JSON is valid.
    pub history: Option<History>,
    /// The metadata spill the JSON names (checked against the file only by the verifier).
    pub spill: Option<Span>,
    /// `footer-json` and `metadata-spill` findings, each with what the JSON parser said.
    pub problems: Vec<(Finding, String)>,
    /// The chunk checksum table the metadata names, as `(offset, rows)`.
    pub checksums: Option<(u64, u64)>,
}

impl FooterCheck {
    /// The chunk checksum table the metadata names: `None` when it names none (files
    /// from other writers), else the table or why it cannot be used (`checksum-table`).
    pub fn table<'a>(&self, file: &TetFile<'a>) -> Option<Result<ChecksumTable<'a>, Finding>> {
        let (offset, rows) = self.checksums?;
        Some(ChecksumTable::parse(file, offset, rows))
    }
}

/// A file opened for reading its data, as `tet-host info`, `query` and `export` and the
/// library's readers open it: the chunk checksum table the footer metadata names is
/// attached ([`TetFile::with_checksums`]), so every chunk read through
/// [`TetFile::chunk`] or a [`crate::tet::query::ReadPlan`] carries its CRC-32C and the
/// decoder checks it; and every reason the footer could not serve, to warn about (the
/// data never depends on it).
#[derive(Debug)]
pub struct Reading<'a> {
    /// The file, with its checksum table when the metadata names a usable one.
    pub file: TetFile<'a>,
    /// The footer's problems, in the order a reader meets them: the tail's (found when
    /// the file was opened), then the JSON's or the spill's with the parser's words,
    /// then a `checksum-table` finding when the table the metadata names cannot be used
    /// (its chunks then read unchecked).
    pub problems: Vec<(Finding, Option<String>)>,
}

/// Opens `bytes` for reading data ([`Reading`]): [`TetFile::open`], then the footer
/// JSON ([`check_footer`], bounded by the largest history row) for the checksum table.
pub fn open_for_reading(bytes: &[u8]) -> Result<Reading<'_>, Error> {
    Ok(reading(TetFile::open(bytes)?))
}

/// [`open_for_reading`] for a file already opened.
pub fn reading(file: TetFile<'_>) -> Reading<'_> {
    let mut problems: Vec<(Finding, Option<String>)> = Vec::new();
    problems.extend(file.footer_problem().map(|f| (f, None)));
    let footer = check_footer(&file);
    problems.extend(footer.problems.iter().map(|(f, n)| (*f, Some(n.clone()))));
    let file = match footer.table(&file) {
        Some(Ok(t)) => file.with_checksums(t),
        Some(Err(f)) => {
            problems.push((f, None));
            file
        }
        None => file,
    };
    Reading { file, problems }
}

/// Checks the footer JSON of `file` (if it has a footer) and the metadata spill it
/// names. Memory stays bounded by the largest history row ([`parse`]).
pub fn check_footer(file: &TetFile<'_>) -> FooterCheck {
    let mut out = FooterCheck::default();
    let Some(footer) = file.footer() else {
        return out;
    };
    let at = footer.json_offset();
    let h = match parse(footer.history_json()) {
        Ok(h) => h,
        Err(e) => {
            let error = Error::new(ErrorKind::Invalid, "footer.history_json", at);
            out.problems
                .push((Finding::new(Code::FooterJson, error), e));
            return out;
        }
    };
    let span = h.metadata_ref.map(|(offset, len)| Span { offset, len });
    // A spill that does not lie before the footer is the verifier's finding, not ours.
    let spill = span
        .filter(|s| s.offset.saturating_add(s.len) <= at)
        .and_then(|s| {
            let start = usize::try_from(s.offset).ok()?;
            let end = start.checked_add(usize::try_from(s.len).ok()?)?;
            file.bytes().get(start..end).map(|b| (s, b))
        });
    out.checksums = h.checksums;
    if let Some((s, bytes)) = spill {
        match check_spill(bytes) {
            Ok(t) => out.checksums = out.checksums.or(t),
            Err(e) => {
                let error = Error::new(ErrorKind::Invalid, "metadata_spill", s.offset);
                out.problems
                    .push((Finding::new(Code::MetadataSpill, error), e));
            }
        }
    }
    out.history = Some(h);
    out.spill = span;
    out
}

/// The footer's metadata object (inline, or the spill `metadata_ref` names), for readers
/// of its free-form parts (`metadata.datasets[name].attrs`). `Ok(None)`: the file has no
/// footer or no metadata. A spill is read only when it lies inside the file; it is
/// bounded by the file, as the JSON is.
pub fn metadata(file: &TetFile<'_>) -> Result<Option<serde_json::Value>, String> {
    let Some(footer) = file.footer() else {
        return Ok(None);
    };
    let json = footer.history_json();
    let h = parse(json)?;
    if h.inline_metadata {
        let v: serde_json::Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        return Ok(v.get("metadata").cloned());
    }
    let Some((offset, len)) = h.metadata_ref else {
        return Ok(None);
    };
    let spill = usize::try_from(offset)
        .ok()
        .zip(usize::try_from(len).ok())
        .and_then(|(o, l)| file.bytes().get(o..o.checked_add(l)?))
        .ok_or_else(|| alloc::format!("metadata_ref {offset}+{len} lies outside the file"))?;
    serde_json::from_slice(spill)
        .map(Some)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn accepts_objects_legacy_rows_and_refs() {
        let h = parse(br#"{"history":[{"op":"convert","source":"a.h5","at":"2026-01-01"},["x","y","z"]],"metadata":{"units":"K"}}"#).unwrap();
        assert_eq!(h.rows, 2);
        assert!(h.inline_metadata);
        let h = parse(br#"{"metadata_ref":{"offset":100,"len":20}}"#).unwrap();
        assert_eq!(h.metadata_ref, Some((100, 20)));
        assert_eq!(parse(b"{}").unwrap(), History::default());
    }

    #[test]
    fn rejects_bad_json_and_bad_shapes() {
        assert!(parse(b"XXXX").unwrap_err().contains("line 1"));
        assert!(parse(b"[1]").is_err());
        assert!(parse(br#"{"history":[{"op":"a"}]}"#).is_err());
        assert!(parse(br#"{"history":[["a","b"]]}"#).is_err());
        assert!(
            parse(br#"{"metadata":{},"metadata_ref":{"offset":1,"len":1}}"#)
                .unwrap_err()
                .contains("mutually exclusive")
        );
        assert!(parse(br#"{} trailing"#).is_err());
        // A lone surrogate escape inside ignored values is still invalid JSON text.
        assert!(parse(br#"{"x":["\udc00"]}"#).is_err());
        assert!(parse(
            br#"{"history":[{"op":"a","source":"b","at":"c","params":{"k":"\ud800"}}]}"#
        )
        .is_err());
        let deep = "[".repeat(100_000);
        assert!(parse(format!(r#"{{"metadata":{deep}}}"#).as_bytes()).is_err());
        assert!(check_spill(br#"{"a":[1,2]}"#).is_ok());
        assert!(check_spill(b"[]").is_err());
    }
}
