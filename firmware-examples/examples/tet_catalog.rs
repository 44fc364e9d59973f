//! `tet_catalog`: parse and verify an embedded `.tet` file with no allocator, list its
//! datasets, and fold the raw `temperature` dataset (sum, min, max, mean) chunk by chunk
//! with the core's accumulators. Prints what it found; exits 0 only when every check
//! passed.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use tet_core::tet::fold::{Acc, Reduce, Value};
use tet_core::tet::{verify, Codec, Finding, Severity, TetFile, VerifyOptions};
use tet_firmware_examples::{exit, paint_stack, report_stack};

static TET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/catalog.tet"));

#[entry]
fn main() -> ! {
    paint_stack();
    let ok = run().is_some();
    report_stack();
    exit(ok)
}

fn run() -> Option<()> {
    hprintln!("catalog.tet: {} bytes", TET.len());
    let mut scratch = [0u64; 128];
    let mut errors = 0u32;
    let summary = verify(
        TET,
        VerifyOptions {
            scratch: &mut scratch,
            metadata_spill: None,
        },
        &mut |f: &Finding| {
            if f.severity() == Severity::Error {
                errors += 1;
            }
            hprintln!("finding: {} at byte {}", f.code.as_str(), f.error.offset);
        },
    );
    hprintln!(
        "verify: {} error(s), rows in canonical order: {}",
        errors,
        summary.canonical
    );
    if errors != 0 {
        return None;
    }
    let file = TetFile::open(TET).ok()?;
    for ds in file.datasets() {
        let ds = ds.ok()?;
        hprintln!(
            "dataset {}: {:?}, {} elements in {} chunks",
            ds.name(),
            ds.dtype(),
            ds.element_count(),
            ds.grid_cells()
        );
    }
    let ds = file.dataset("temperature").ok()?;
    for op in [Reduce::Sum, Reduce::Min, Reduce::Max, Reduce::Mean] {
        let mut acc = Acc::new();
        for pos in 0..ds.grid_cells() {
            let c = ds.delinearize(pos);
            let chunk = file.chunk(&ds, c.as_slice()).ok()?;
            if chunk.codec != Codec::Raw {
                return None;
            }
            let n = chunk.raw_byte_len / 2;
            acc.fold(op, ds.dtype(), chunk.payload, 0, n, 1, 0, 1);
        }
        match acc.result(op, ds.dtype()).ok()? {
            Value::I64(v) => hprintln!("{}: {}", op.name(), v),
            Value::U64(v) => hprintln!("{}: {}", op.name(), v),
            Value::F64(v) => hprintln!("{}: {:.4}", op.name(), v),
            _ => return None,
        }
    }
    Some(())
}
