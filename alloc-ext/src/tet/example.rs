//! The built-in example file shipped as `docs/examples/temperature.tet` (the README's
//! first command verifies it). Regenerate with `TET_BLESS=1 cargo test -p tet-host`.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use tet_core::tet::{Codec, DType, DatasetId, ExecutionSettings};

use crate::tet::writer::{DatasetSpec, FooterSpec, HistoryRow, WriteError, Writer};

/// `temperature`: f32 [4, 6] in [3, 4] chunks (both edges clipped), values `0.5 * i`, raw;
/// `station_id`: u16 [6] in [4] chunks, raw; `pressure`: f64 [16, 16] in [8, 8] chunks,
/// values `1000 + i / 4`, zstd; a 50 % memory budget; one history row.
pub fn temperature() -> Result<Vec<u8>, WriteError<core::convert::Infallible>> {
    let specs = [
        DatasetSpec {
            name: "temperature",
            dtype: DType::F32,
            shape: &[4, 6],
            chunk_shape: &[3, 4],
        },
        DatasetSpec {
            name: "station_id",
            dtype: DType::U16,
            shape: &[6],
            chunk_shape: &[4],
        },
        DatasetSpec {
            name: "pressure",
            dtype: DType::F64,
            shape: &[16, 16],
            chunk_shape: &[8, 8],
        },
    ];
    let mut w = Writer::new(Vec::new(), &specs)?;
    w.set_execution(ExecutionSettings {
        memory_budget_percent_bps: 5000,
        memory_budget_bytes: 0,
    });
    let temps: Vec<u8> = (0u16..24)
        .flat_map(|i| (f32::from(i) * 0.5).to_le_bytes())
        .collect();
    w.write_array(DatasetId(0), &temps, Codec::Raw)?;
    let ids: Vec<u8> = (100u16..106).flat_map(|i| i.to_le_bytes()).collect();
    w.write_array(DatasetId(1), &ids, Codec::Raw)?;
    let pressure: Vec<u8> = (0u16..256)
        .flat_map(|i| (1000.0 + f64::from(i) / 4.0).to_le_bytes())
        .collect();
    w.write_array(DatasetId(2), &pressure, Codec::Zstd)?;
    let footer = FooterSpec {
        history: vec![HistoryRow {
            op: String::from("create"),
            source: String::from("tet-alloc example"),
            at: String::from("2026-11-30T00:00:00Z"),
            params: Vec::new(),
        }],
        metadata: Some(String::from(
            r#"{"file":{"tool":"tet-alloc example"},"datasets":{"temperature":{"attrs":{"units":"degC"}},"pressure":{"attrs":{"units":"hPa"}}}}"#,
        )),
    };
    w.finish(Some(&footer))
}
