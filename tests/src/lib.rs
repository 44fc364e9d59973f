//! Helpers shared by the integration tests: the conformance corpus location, a
//! verification shortcut and a reassembler that turns a file back into its logical array.
#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::path::PathBuf;

use tet_core::tet::{Code, DType, Finding, TetFile};

/// `../shared/conformance/tet-upstream`, or `None` (with a loud message) when this
/// checkout has no `../shared` beside it. Under CI (`CI` set) absence is a failure.
pub fn conformance_dir() -> Option<PathBuf> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance/tet-upstream");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "conformance corpus missing at {} (CI requires ../shared)",
            dir.display()
        );
    }
    eprintln!(
        "\n*** SKIPPING conformance tests: {} does not exist. ***\n*** Clone ../shared beside this checkout to run them. ***\n",
        dir.display()
    );
    None
}

/// Every finding for `bytes`, footer JSON included (the same checks as `tet-host verify`).
/// With `TET_SAVE_CASES=DIR` in the environment, `bytes` is also written to `DIR`
/// ([`save_case`]).
pub fn findings(bytes: &[u8]) -> Vec<Finding> {
    save_case(bytes);
    let (c, _) = tet_host::tet::verify::check(bytes).unwrap();
    assert_eq!(c.dropped, 0);
    c.kept
}

/// With `TET_SAVE_CASES=DIR`, writes `bytes` to `DIR/TEST-N.tet` (`TEST`, the running
/// test's name; `N`, the how-many-th file it checks; a test that sweeps many files, as
/// every truncation of one, keeps its first [`SAVED_PER_TEST`]). The corruption suite's files are
/// kept so for the Python binding's parity test (`python/tests/test_parity.py`), which
/// runs them through `tetrs` and `tet-host verify --json`; regenerate them with
/// `TET_SAVE_CASES=$PWD/python/tests/data/corruption cargo test -p tet-tests --test corruption`.
pub fn save_case(bytes: &[u8]) {
    use std::cell::Cell;
    thread_local!(static SAVED: Cell<u32> = const { Cell::new(0) });
    let Some(dir) = std::env::var_os("TET_SAVE_CASES") else {
        return;
    };
    let n = SAVED.with(|c| {
        let n = c.get();
        c.set(n + 1);
        n
    });
    if n >= SAVED_PER_TEST {
        return;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("case").replace("::", "-");
    let path = PathBuf::from(dir).join(format!("{test}-{n}.tet"));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Files [`save_case`] keeps of one test.
pub const SAVED_PER_TEST: u32 = 16;

/// The codes of `findings(bytes)`, in report order.
pub fn codes(bytes: &[u8]) -> Vec<Code> {
    findings(bytes).iter().map(|f| f.code).collect()
}

/// One logical element, widened.
pub fn element(dtype: DType, b: &[u8]) -> f64 {
    match dtype {
        DType::F32 => f64::from(f32::from_le_bytes(b.try_into().unwrap())),
        DType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
        DType::I32 => f64::from(i32::from_le_bytes(b.try_into().unwrap())),
        DType::I64 => i64::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::U8 => f64::from(b[0]),
        DType::U16 => f64::from(u16::from_le_bytes(b.try_into().unwrap())),
        DType::I16 => f64::from(i16::from_le_bytes(b.try_into().unwrap())),
        DType::U32 => f64::from(u32::from_le_bytes(b.try_into().unwrap())),
        DType::F16 => f64::from(half::f16::from_le_bytes(b.try_into().unwrap())),
        DType::U64 => u64::from_le_bytes(b.try_into().unwrap()) as f64,
    }
}

/// Reassembles dataset `name` into its row-major logical bytes by looking up every grid
/// cell through [`TetFile::chunk`] and decoding it. Every chunk is decoded twice, with
/// ruzstd and with the C decoder, and the bytes must agree: so every payload any test
/// reassembles is also a differential test of the two decoders.
pub fn logical_bytes(file: &TetFile<'_>, name: &str) -> Vec<u8> {
    let mut dec =
        tet_alloc::tet::decode::ChunkDecoder::new(tet_alloc::tet::decode::Ruzstd::new(), 1 << 32);
    let mut c_dec =
        tet_alloc::tet::decode::ChunkDecoder::new(tet_host::tet::codec::CZstd::new(), 1 << 32);
    let ds = file.dataset(name).unwrap();
    let shape: Vec<u64> = ds.shape().collect();
    let chunk: Vec<u64> = ds.chunk_shape().collect();
    let es = ds.dtype().size() as usize;
    let mut out = vec![0u8; ds.logical_bytes() as usize];
    for cell in 0..ds.grid_cells() {
        let coords = ds.delinearize(cell);
        let c = file.chunk(&ds, coords.as_slice()).unwrap();
        let payload = dec.decode(&c).unwrap().to_vec();
        assert_eq!(
            c_dec.decode(&c).unwrap(),
            &payload[..],
            "ruzstd and the C decoder disagree on {name} chunk {coords}"
        );
        let tile = ds.tile_shape(coords.as_slice()).unwrap();
        let tile = tile.as_slice();
        let n: u64 = tile.iter().product();
        for e in 0..n {
            // Position inside the tile, then in the array.
            let mut rem = e;
            let mut local = vec![0u64; tile.len()];
            for (l, t) in local.iter_mut().zip(tile).rev() {
                *l = rem % t;
                rem /= t;
            }
            let mut flat = 0u64;
            for ((s, k), (l, c)) in shape
                .iter()
                .zip(&chunk)
                .zip(local.iter().zip(coords.as_slice()))
            {
                flat = flat * s + c * k + l;
            }
            let src = e as usize * es;
            let dst = flat as usize * es;
            out[dst..dst + es].copy_from_slice(&payload[src..src + es]);
        }
    }
    out
}

/// The logical values of dataset `name`, widened to `f64`.
pub fn values(file: &TetFile<'_>, name: &str) -> Vec<f64> {
    let ds = file.dataset(name).unwrap();
    let es = ds.dtype().size() as usize;
    logical_bytes(file, name)
        .chunks(es)
        .map(|b| element(ds.dtype(), b))
        .collect()
}

/// Asserts that the other implementation of layout v1 (thicclatka/tetration) reads the
/// footer of `bytes`: our restatement of its rules (docs/tet-v1.md, "Footers both
/// implementations read"), so the test command needs no build of it.
/// `tests/interop/check_peer.sh` runs the real thing by hand.
pub fn assert_peer_readable(bytes: &[u8]) {
    use serde_json::Value;
    use tet_alloc::tet::writer::{interop, INLINE_JSON_LIMIT};
    let file = TetFile::open(bytes).unwrap();
    let Some(footer) = file.footer() else {
        return;
    };
    let json = footer.history_json();
    assert!(json.len() <= INLINE_JSON_LIMIT, "history_json over 64 KiB");
    let v: Value = serde_json::from_slice(json).unwrap();
    for row in v["history"].as_array().into_iter().flatten() {
        let row = row.as_object().expect("a history row is an object");
        for (k, val) in row {
            match k.as_str() {
                "op" | "source" | "at" => {
                    let s = val.as_str().expect("op, source, at are strings");
                    assert!(
                        !s.is_empty() && s.len() <= interop::ATTR_STRING_BYTES,
                        "{k}"
                    );
                }
                "parents" => assert!(val.as_array().unwrap().iter().all(Value::is_string)),
                "params" => {
                    let p = val.as_object().expect("params is an object");
                    assert!(p.len() <= interop::HISTORY_PARAMS);
                    for (pk, pv) in p {
                        let s = pv.as_str().unwrap_or_else(|| panic!("param {pk} is {pv}"));
                        assert!(!s.is_empty() && s.len() <= interop::ATTR_STRING_BYTES);
                    }
                }
                other => panic!("unknown history row key {other}"),
            }
        }
    }
    let meta = match (v.get("metadata"), v.get("metadata_ref")) {
        (Some(m), None) => m.to_string(),
        (None, Some(r)) => {
            let r = r.as_object().unwrap();
            assert_eq!(r.len(), 2, "metadata_ref has exactly offset and len");
            let (off, len) = (r["offset"].as_u64().unwrap(), r["len"].as_u64().unwrap());
            // That reader takes the spill to end where history_json starts.
            assert_eq!(
                off + len,
                footer.json_offset(),
                "spill not right before the JSON"
            );
            assert!(len as usize <= interop::SPILL_LIMIT);
            let spill = &bytes[off as usize..(off + len) as usize];
            String::from_utf8(spill.to_vec()).unwrap()
        }
        (None, None) => return,
        (Some(_), Some(_)) => panic!("metadata and metadata_ref together"),
    };
    interop::check_metadata(&meta).unwrap();
}
