//! The `THST` footer: its `history_json` (metadata inline or spilled) and its tail.

use alloc::string::String;
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
/// the JSON and the spill bytes to write before it.
pub fn footer_json(
    footer: &FooterSpec,
    spill_at: u64,
    force_spill: bool,
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut json = String::from("{\"history\":[");
    for (i, r) in footer.history.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push_str("{\"op\":");
        push_str_json(&mut json, &r.op);
        json.push_str(",\"source\":");
        push_str_json(&mut json, &r.source);
        json.push_str(",\"at\":");
        push_str_json(&mut json, &r.at);
        if let Some(p) = &r.params {
            crate::tet::history::check_spill(p.as_bytes())
                .map_err(|e| alloc::format!("history row {i} params: {e}"))?;
            json.push_str(",\"params\":");
            json.push_str(p);
        }
        json.push('}');
    }
    json.push(']');
    let Some(meta) = &footer.metadata else {
        json.push('}');
        return Ok((json.into_bytes(), Vec::new()));
    };
    crate::tet::history::check_spill(meta.as_bytes())
        .map_err(|e| alloc::format!("metadata: {e}"))?;
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
    Ok((json.into_bytes(), meta.clone().into_bytes()))
}

fn push_str_json(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}
