//! The `THST` footer: its `history_json` (metadata inline or spilled) and its tail.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use tet_core::tet::raw::RawFooterTail;
use tet_core::tet::{FOOTER_MAGIC, HISTORY_VERSION};
use zerocopy::little_endian::{U32, U64};

use super::*;

/// The 16-byte footer tail for a `history_json` of `len` bytes.
pub(crate) fn footer_tail(len: u64) -> RawFooterTail {
    RawFooterTail {
        history_json_len: U64::new(len),
        history_version: U32::new(HISTORY_VERSION),
        magic: FOOTER_MAGIC,
    }
}

/// The `history_json` for `footer`, with metadata inline, or (when that would exceed
/// [`INLINE_JSON_LIMIT`] or `force_spill`) as a `metadata_ref` to `spill_at`; returns
/// the JSON and the spill bytes to write before it. Refuses a footer the other
/// implementation would not read ([`interop`]).
pub fn footer_json(
    footer: &FooterSpec,
    spill_at: u64,
    force_spill: bool,
) -> Result<(Vec<u8>, Vec<u8>), String> {
    if footer.history.len() > interop::HISTORY_ROWS {
        return Err(alloc::format!(
            "{} history rows (at most {})",
            footer.history.len(),
            interop::HISTORY_ROWS
        ));
    }
    let mut json = String::from("{\"history\":[");
    for (i, r) in footer.history.iter().enumerate() {
        interop::check_row(r).map_err(|e| alloc::format!("history row {i}: {e}"))?;
        if i > 0 {
            json.push(',');
        }
        json.push_str("{\"op\":");
        push_str_json(&mut json, &r.op);
        json.push_str(",\"source\":");
        push_str_json(&mut json, &r.source);
        json.push_str(",\"at\":");
        push_str_json(&mut json, &r.at);
        if !r.params.is_empty() {
            json.push_str(",\"params\":{");
            for (j, (k, v)) in r.params.iter().enumerate() {
                if j > 0 {
                    json.push(',');
                }
                push_str_json(&mut json, k);
                json.push(':');
                push_str_json(&mut json, v);
            }
            json.push('}');
        }
        json.push('}');
    }
    json.push(']');
    let Some(meta) = &footer.metadata else {
        json.push('}');
        return inline_capped(json, Vec::new());
    };
    interop::check_metadata(meta).map_err(|e| alloc::format!("metadata: {e}"))?;
    if meta.len() > interop::SPILL_LIMIT {
        return Err(alloc::format!(
            "metadata is {} bytes (at most {})",
            meta.len(),
            interop::SPILL_LIMIT
        ));
    }
    let inline_len = json.len().saturating_add(meta.len()).saturating_add(13);
    if inline_len <= INLINE_JSON_LIMIT && !force_spill {
        json.push_str(",\"metadata\":");
        json.push_str(meta);
        json.push('}');
        return Ok((json.into_bytes(), Vec::new()));
    }
    json.push_str(&alloc::format!(
        ",\"metadata_ref\":{{\"offset\":{spill_at},\"len\":{}}}}}",
        meta.len()
    ));
    inline_capped(json, meta.clone().into_bytes())
}

/// The other implementation refuses a `history_json` over 64 KiB, whatever spills.
fn inline_capped(json: String, spill: Vec<u8>) -> Result<(Vec<u8>, Vec<u8>), String> {
    if json.len() > INLINE_JSON_LIMIT {
        return Err(alloc::format!(
            "the history is {} bytes of JSON (at most {INLINE_JSON_LIMIT})",
            json.len()
        ));
    }
    Ok((json.into_bytes(), spill))
}

/// `footer` (or an empty one) with `"tet_checksums": {"algorithm": "crc32c", "offset",
/// "rows"}` added to its metadata object (docs/tet-v1.md, "Chunk checksums").
pub(crate) fn with_checksum_table(
    footer: Option<&FooterSpec>,
    offset: u64,
    rows: u64,
) -> Result<FooterSpec, String> {
    let mut f = footer.cloned().unwrap_or_default();
    let mut meta = match &f.metadata {
        Some(m) => match serde_json::from_str::<serde_json::Value>(m) {
            Ok(serde_json::Value::Object(o)) => o,
            Ok(_) => return Err(String::from("metadata: not a JSON object")),
            Err(e) => return Err(alloc::format!("metadata: {e}")),
        },
        None => serde_json::Map::new(),
    };
    meta.insert(
        String::from("tet_checksums"),
        serde_json::json!({"algorithm": "crc32c", "offset": offset, "rows": rows}),
    );
    f.metadata = Some(serde_json::Value::Object(meta).to_string());
    Ok(f)
}

fn push_str_json(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}
