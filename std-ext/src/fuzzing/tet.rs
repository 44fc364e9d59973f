//! Bodies of the `.tet` fuzz targets.

use tet_core::tet::{Severity, TetFile};

/// Runs every check `tet-host verify --deep` runs, then opens the file and looks up
/// chunks of every dataset (a bounded number of each). Panics only on a broken invariant:
/// a file that opens and verifies without errors must serve every chunk of every dataset,
/// and every chunk must decode to exactly its `raw_byte_len` bytes.
pub fn open_walk(data: &[u8]) {
    let opts = crate::tet::verify::DecodeOptions {
        deep: true,
        threads: Some(1),
        budget: Some(64 << 20),
    };
    let verified_clean = match crate::tet::verify::check_with(data, &opts) {
        Ok(c) => {
            c.operational.is_none() && !c.found.kept.iter().any(|f| f.severity() == Severity::Error)
        }
        Err(_) => false,
    };
    let mut decoder =
        tet_alloc::tet::decode::ChunkDecoder::new(crate::tet::codec::CZstd::new(), 64 << 20);
    let Ok(file) = TetFile::open(data) else {
        assert!(!verified_clean, "verify found no error but open failed");
        return;
    };
    for ds in file.datasets().take(32) {
        let Ok(ds) = ds else { break };
        for cell in 0..ds.grid_cells().min(256) {
            let coords = ds.delinearize(cell);
            let got = file.chunk(&ds, coords.as_slice());
            if verified_clean {
                let chunk = match got {
                    Ok(c) => c,
                    Err(e) => panic!("clean file cannot serve chunk {coords}: {e}"),
                };
                assert_eq!(chunk.coords, coords);
                match decoder.decode(&chunk) {
                    Ok(b) => assert_eq!(u64::try_from(b.len()).ok(), Some(chunk.raw_byte_len)),
                    Err(e) => panic!("clean file cannot decode chunk {coords}: {e}"),
                }
                assert_eq!(
                    u64::try_from(chunk.payload.len()).ok(),
                    Some(
                        file.rows()[usize::try_from(chunk.row).unwrap_or(0)]
                            .stored_byte_len
                            .get()
                    )
                );
            }
        }
    }
}

/// Decodes one chunk from arbitrary bytes with both backends. The first 3 bytes give
/// `raw_byte_len` (up to 16 MiB); the rest is the stored span. Panics when the backends
/// disagree, when a decode succeeds with a length other than `raw_byte_len`, or when a
/// chunk over the 4 MiB budget is not refused before decoding.
pub fn decode_chunk(data: &[u8]) {
    use tet_alloc::tet::decode::{ChunkDecoder, DecodeErrorKind, Ruzstd};
    use tet_core::tet::{Chunk, Codec, Coords, DatasetId};
    let Some((head, span)) = data.split_first_chunk::<3>() else {
        return;
    };
    let raw = u64::from(u32::from_le_bytes([head[0], head[1], head[2], 0]));
    let chunk = Chunk {
        dataset: DatasetId(0),
        row: 0,
        coords: Coords::default(),
        codec: Codec::Zstd,
        raw_byte_len: raw,
        payload_offset: 1000,
        payload: span,
        checksum: None,
    };
    const BUDGET: u64 = 4 << 20;
    let mut r = ChunkDecoder::new(Ruzstd::new(), BUDGET);
    let mut c = ChunkDecoder::new(crate::tet::codec::CZstd::new(), BUDGET);
    let a = r.decode(&chunk).map(|b| b.to_vec());
    let b = c.decode(&chunk).map(|b| b.to_vec());
    match (&a, &b) {
        (Ok(x), Ok(y)) => {
            assert_eq!(x, y, "backends decoded different bytes");
            assert_eq!(u64::try_from(x.len()).ok(), Some(raw));
        }
        (Err(x), Err(y)) => {
            if !x.is_operational() && !y.is_operational() {
                assert_eq!(x.code(), y.code(), "backends disagree: {x} / {y}");
            }
            for e in [x, y] {
                if let DecodeErrorKind::OverBudget { needed, budget } = e.kind {
                    assert!(needed > budget);
                }
            }
        }
        // The C decoder enforces a few bit-stream rules ruzstd does not, and ruzstd 0.8
        // refuses some blocks the C decoder accepts (both found by this target:
        // `fuzz/regressions/tet_decode_chunk`, c_stricter_than_ruzstd.bin and
        // ruzstd_stricter_than_c.bin). A refusal is a frame finding, never wrong bytes:
        // what either decodes is held to the exact length and the content checksum, and
        // two that both decode must agree byte for byte.
        (Ok(_), Err(e)) | (Err(e), Ok(_)) if e.code() == Some(tet_core::tet::Code::ZstdFrame) => {}
        (Ok(_), Err(e)) | (Err(e), Ok(_)) => {
            // Otherwise only the budget may differ: the backends need different memory.
            if !e.is_operational() {
                panic!("one backend accepts, the other says {e}");
            }
        }
    }
}

/// Repairs an arbitrary file in memory with every fix (`-y --zero-bad-chunks`). Panics
/// when planning or applying fails on a file that opened, or when a plan that claims to
/// answer every finding leaves a file that does not verify clean.
pub fn repair_all(data: &[u8]) {
    repair_round(data, 0);
}

fn repair_round(data: &[u8], n: u32) {
    use tet_alloc::tet::repair::{apply, plan, Inputs};
    let opts = crate::tet::verify::DecodeOptions {
        deep: true,
        threads: Some(1),
        budget: Some(64 << 20),
    };
    let Ok(checked) = crate::tet::verify::check_with(data, &opts) else {
        return;
    };
    if checked.operational.is_some() || checked.found.kept.is_empty() || checked.found.dropped > 0 {
        return;
    }
    let inputs = Inputs {
        bytes: data,
        findings: &checked.found.kept,
        bad_rows: &checked.bad_rows,
        data_end: checked.data_end,
        metadata_spill: checked.spill,
        zero_bad_chunks: true,
    };
    let p = plan(&inputs);
    let all = vec![true; p.fixes.len()];
    let mut out: Vec<u8> = Vec::new();
    if let Err(e) = apply(&inputs, &p, &all, "2026-01-01T00:00:00Z", &mut out) {
        if tet_core::tet::TetFile::parse(data, &mut |_: &tet_core::tet::Finding| {}).is_some() {
            panic!("apply failed: {e}");
        }
        return;
    }
    // A plan that reads further once applied (a magic restored, a row's coordinates set)
    // is followed by another, up to 4 rounds (superblock, index, rows, chunks), as
    // `tet-host repair` does.
    if p.again && n < 3 {
        return repair_round(&out, n.saturating_add(1));
    }
    if p.unfixable.is_empty() {
        let after = match crate::tet::verify::check_with(&out, &opts) {
            Ok(c) => c,
            Err(e) => panic!("repaired file does not check: {e}"),
        };
        assert!(
            after.found.kept.is_empty(),
            "repair answered every finding but left {:?}",
            after.found.kept.iter().map(|f| f.code).collect::<Vec<_>>()
        );
    }
}

/// The query document keys that use the axis metadata, over every dataset of `file`: axes
/// by name (the file's own `dim_names` and made-up ones), bounds by label and by value,
/// `null_count` with and without `fill`, the `nan_*` masks. Whatever the metadata, each
/// resolves or is refused with a message; a resolved query runs, the parallel engine
/// agreeing with the single-threaded one; the metadata findings never panic.
fn named_queries(head: &[u8; 12], file: &TetFile<'_>) {
    use tet_alloc::tet::decode::{ChunkDecoder, Ruzstd};
    use tet_alloc::tet::query::{execute, plan, Axes};
    let _ = tet_alloc::tet::meta::findings(file);
    let m = tet_alloc::tet::meta::read(file).ok().flatten();
    const BUDGET: u64 = 16 << 20;
    let ops = [
        "sum",
        "nan_mean",
        "null_count",
        "nan_count",
        "min",
        "median",
    ];
    let op = ops[usize::from(head[0]) % ops.len()];
    for ds in file.datasets().take(4) {
        let Ok(ds) = ds else { break };
        let mut names: Vec<String> = m
            .as_ref()
            .and_then(|m| m.dataset(ds.name()))
            .and_then(|d| d.dim_names.clone())
            .unwrap_or_default();
        names.extend(["time".to_string(), "0".to_string(), "x".to_string()]);
        let axis = |b: u8| serde_json::json!(names[usize::from(b) % names.len()]);
        let bound = |b: u8| -> serde_json::Value {
            match b % 4 {
                0 => serde_json::Value::Null,
                1 => serde_json::json!(i64::from(b) - 100),
                2 => serde_json::json!(f64::from(b) / 3.0),
                _ => serde_json::json!(format!("{}", char::from(b'a' + b % 26))),
            }
        };
        let params = if op == "null_count" && head[4] & 1 == 1 {
            serde_json::json!({"axes": [axis(head[1])], "fill": f64::from(head[5]) - 3.0})
        } else {
            serde_json::json!({"axes": [axis(head[1]), axis(head[2])]})
        };
        let doc = serde_json::json!({
            "dataset": ds.name(),
            "selection": [{"start_label": bound(head[6]), "stop_label": bound(head[7])},
                          {"start_label": bound(head[8]), "step": 1 + i64::from(head[9] % 3)}],
            op: if head[3] & 1 == 1 { serde_json::json!([]) } else { params },
        });
        let Ok(doc) = crate::tet::query_doc::parse_doc(&doc.to_string()) else {
            continue;
        };
        let Ok(r) = crate::tet::dims::resolve(file, &ds, &doc, BUDGET) else {
            continue;
        };
        let Ok(mut p) = plan(file, ds, &r.selection) else {
            continue;
        };
        if p.selection.len() > 1 << 20 {
            continue;
        }
        p.mask = r.mask;
        let Some((o, axes)) = r.op.clone() else {
            continue;
        };
        let Ok(ax) = Axes::signed(ds.ndim(), axes.as_deref()) else {
            continue;
        };
        let par = crate::tet::query::run(file, &p, o, &ax, 2, BUDGET);
        let mut dec = ChunkDecoder::new(Ruzstd::new(), BUDGET);
        let seq = execute(file, &p, o, &ax, &mut dec);
        if let (Ok(a), Ok(b)) = (&par, &seq) {
            assert_eq!(
                format!("{a:?}"),
                format!("{b:?}"),
                "named query: engines differ"
            );
        }
    }
}

/// Plans and folds arbitrary selections over the datasets of an arbitrary file. The first
/// 12 bytes choose the operation, the reduced axes and up to 3 slices; the rest is the
/// file. Then [`named_queries`] with the same bytes. Panics when the parallel engine and the single-threaded one disagree, or when a
/// result's shape is not the selection's shape without the reduced axes.
pub fn query_fold(data: &[u8]) {
    use tet_alloc::tet::decode::{ChunkDecoder, Ruzstd};
    use tet_alloc::tet::query::{execute, plan, Axes, Operation};
    use tet_core::tet::fold::Reduce;
    use tet_core::tet::select::Slice;
    let Some((head, file_bytes)) = data.split_first_chunk::<12>() else {
        return;
    };
    let Ok(file) = TetFile::open(file_bytes) else {
        return;
    };
    named_queries(head, &file);
    let ops = [
        Operation::Reduce(Reduce::Sum),
        Operation::Reduce(Reduce::NanMean),
        Operation::Reduce(Reduce::Prod),
        Operation::Reduce(Reduce::Min),
        Operation::Reduce(Reduce::ArgMax),
        Operation::Reduce(Reduce::Count),
        Operation::Reduce(Reduce::NanCount),
        Operation::Reduce(Reduce::AllFinite),
        Operation::Reduce(Reduce::Var(1)),
        Operation::Reduce(Reduce::NanStd(0)),
        Operation::Reduce(Reduce::NormL1),
        Operation::Reduce(Reduce::NormL2),
        Operation::Reduce(Reduce::AnyNan),
        Operation::Reduce(Reduce::AnyInf),
        Operation::Covariance(tet_alloc::tet::query::Cov {
            ddof: 1,
            correlation: true,
        }),
        Operation::Histogram(tet_alloc::tet::query::Histogram {
            bins: 7,
            range: None,
        }),
        Operation::Histogram(tet_alloc::tet::query::Histogram {
            bins: 3,
            range: Some((-4.0, 4.0)),
        }),
        Operation::Quantile(tet_alloc::tet::query::Quantile {
            q: 0.3,
            integral: false,
        }),
        Operation::Median,
        Operation::Quantiles(
            tet_alloc::tet::query::Quantiles::new(&[
                tet_alloc::tet::query::Quantile {
                    q: 0.95,
                    integral: false,
                },
                tet_alloc::tet::query::Quantile {
                    q: 0.05,
                    integral: false,
                },
                tet_alloc::tet::query::Quantile {
                    q: 1.0,
                    integral: true,
                },
            ])
            .unwrap_or_else(|| unreachable!("three quantiles")),
        ),
    ];
    let op = ops
        .get(usize::from(head[0]) % ops.len())
        .copied()
        .unwrap_or(Operation::Reduce(Reduce::Sum));
    let bound = |b: u8| -> Option<i64> { (b & 0x80 == 0).then(|| i64::from(b & 0x3f) - 16) };
    let slices: Vec<Slice> = head[3..12]
        .chunks(3)
        .take(usize::from(head[2]) % 4)
        .map(|c| Slice {
            start: bound(c[0]),
            stop: bound(c[1]),
            step: (c[2] & 0x80 == 0).then(|| i64::from(c[2] & 0x7) - 1),
        })
        .collect();
    const BUDGET: u64 = 16 << 20;
    for ds in file.datasets().take(4) {
        let Ok(ds) = ds else { break };
        let axes_list: Vec<usize> = (0..ds.ndim()).filter(|d| head[1] >> d & 1 == 1).collect();
        let axes = if head[1] & 0x80 != 0 {
            None
        } else {
            Some(&axes_list[..])
        };
        let Ok(ax) = Axes::new(ds.ndim(), axes) else {
            continue;
        };
        let Ok(p) = plan(&file, ds, &slices) else {
            continue;
        };
        if p.selection.len() > 1 << 22 {
            continue;
        }
        let par = crate::tet::query::run(&file, &p, op, &ax, 2, BUDGET);
        let mut dec = ChunkDecoder::new(Ruzstd::new(), BUDGET);
        let seq = execute(&file, &p, op, &ax, &mut dec);
        match (&par, &seq) {
            (Ok(a), Ok(b)) => {
                let bits = |o: &tet_alloc::tet::query::Output| -> Vec<u64> {
                    o.values
                        .iter()
                        .map(|v| match v {
                            tet_core::tet::fold::Value::F64(f) => f.to_bits(),
                            tet_core::tet::fold::Value::U64(u)
                            | tet_core::tet::fold::Value::Position(u) => *u,
                            tet_core::tet::fold::Value::I64(i) => {
                                u64::from_le_bytes(i.to_le_bytes())
                            }
                            tet_core::tet::fold::Value::Bool(b) => u64::from(*b),
                            tet_core::tet::fold::Value::I128(i) => {
                                u64::try_from(i.rem_euclid(1 << 64)).unwrap_or_default()
                            }
                        })
                        .collect()
                };
                assert_eq!(bits(a), bits(b), "parallel and sequential folds differ");
                let mut shape = ax.out_shape(p.selection.shape().as_slice());
                if let Operation::Histogram(h) = op {
                    // One more axis: the bins, then below, above, NaN.
                    shape.push(u64::from(h.bins) + 3);
                }
                if let Operation::Quantiles(qs) = op {
                    // A first axis of one entry per quantile, as numpy.quantile's.
                    shape.insert(0, qs.to_vec().len() as u64);
                }
                if let Operation::Covariance(_) = op {
                    // A square matrix over the variables.
                    assert!(a.shape.len() == 2 && a.shape.first() == a.shape.last());
                } else {
                    assert_eq!(a.shape, shape);
                }
            }
            (Err(_), Err(_)) => {}
            // The C and ruzstd decoders may disagree on crafted frames (see decode_chunk).
            (Err(tet_alloc::tet::query::QueryError::Decode(_)), Ok(_))
            | (Ok(_), Err(tet_alloc::tet::query::QueryError::Decode(_))) => {}
            _ => panic!("parallel {:?} vs sequential {:?}", par.err(), seq.err()),
        }
    }
}
