//! The built-in example file shipped as `docs/examples/temperature.tet` (the README's
//! first command verifies it). Regenerate with `TET_BLESS=1 cargo test -p tet-host`.

use alloc::vec::Vec;

use tet_core::tet::DType;
use tet_core::Error;

use crate::writer::TetWriter;

/// `temperature`: f32 [4, 6] in [3, 4] chunks (both edges clipped), values `0.5 * i`;
/// `station_id`: u16 [6] in [4] chunks; a 50 % memory budget; one history row.
pub fn temperature() -> Result<Vec<u8>, Error> {
    let mut w = TetWriter::new();
    let t = w.add_dataset("temperature", DType::F32, &[4, 6], &[3, 4])?;
    let mut vals = Vec::new();
    for i in 0u16..24 {
        vals.extend_from_slice(&(f32::from(i) * 0.5).to_le_bytes());
    }
    w.add_array(t, &vals)?;
    let s = w.add_dataset("station_id", DType::U16, &[6], &[4])?;
    let mut ids = Vec::new();
    for i in 0u16..6 {
        ids.extend_from_slice(&(100u16.saturating_add(i)).to_le_bytes());
    }
    w.add_array(s, &ids)?;
    w.set_execution(5000, 0);
    w.set_history(
        br#"{"history":[{"op":"create","source":"tet-alloc example","at":"2026-11-30T00:00:00Z"}],"metadata":{"units":"degC"}}"#,
        b"",
    );
    w.to_bytes()
}
