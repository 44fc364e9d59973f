//! The streaming writer: random datasets (all 10 dtypes, 1–4 dims, clipped edges, mixed
//! codecs, with and without footer and spill) verify clean with every chunk decoded and
//! read back byte-identical; arrival order never changes the decoded data; canonical
//! order gives the same bytes every time and the reference layout of the conformance
//! files; and every misuse is refused with the chunk named.

use proptest::prelude::*;
use tet_alloc::tet::decode::DecodeErrorKind;
use tet_alloc::tet::history::open_for_reading;
use tet_alloc::tet::query::{plan, Axes, Operation, QueryError};
use tet_alloc::tet::writer::{
    ChunkProblem, DatasetSpec, FooterSpec, HistoryRow, WriteError, Writer, INLINE_JSON_LIMIT,
};
use tet_core::tet::fold::Reduce;
use tet_core::tet::{Code, Codec, DType, DatasetId, ExecutionSettings, TetFile};
use tet_host::tet::codec::CCompressor;
use tet_host::tet::query::{run, select_values};
use tet_host::tet::verify::{check_with, DecodeOptions};
use tet_tests::logical_bytes;

#[derive(Debug, Clone)]
struct Spec {
    dtype: DType,
    shape: Vec<u64>,
    chunk: Vec<u64>,
    data: Vec<u8>,
}

fn dataset() -> impl Strategy<Value = Spec> {
    (0usize..10, 1usize..=4)
        .prop_flat_map(|(t, ndim)| {
            (
                Just(DType::ALL[t]),
                proptest::collection::vec(1u64..=6, ndim),
                proptest::collection::vec(1u64..=4, ndim),
            )
        })
        .prop_flat_map(|(dtype, shape, chunk)| {
            let n = shape.iter().product::<u64>() * dtype.size();
            (
                Just(dtype),
                Just(shape),
                Just(chunk),
                // Few distinct values, so zstd has something to compress.
                proptest::collection::vec(0u8..4, n as usize),
            )
        })
        .prop_map(|(dtype, shape, chunk, data)| Spec {
            dtype,
            shape,
            chunk,
            data,
        })
}

fn grid(s: &Spec) -> Vec<u64> {
    s.shape
        .iter()
        .zip(&s.chunk)
        .map(|(a, c)| a.div_ceil(*c))
        .collect()
}

/// Every (dataset, coords) in canonical order.
fn cells(specs: &[Spec]) -> Vec<(u32, Vec<u64>)> {
    let mut out = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let g = grid(s);
        let total: u64 = g.iter().product();
        for mut p in 0..total {
            let mut c = vec![0; g.len()];
            for (slot, n) in c.iter_mut().zip(&g).rev() {
                *slot = p % n;
                p /= n;
            }
            out.push((i as u32, c));
        }
    }
    out
}

/// The clipped tile of `s` at `c`, row-major.
fn tile(s: &Spec, c: &[u64]) -> Vec<u8> {
    let es = s.dtype.size() as usize;
    let n = s.shape.len();
    let start: Vec<u64> = c.iter().zip(&s.chunk).map(|(k, ch)| k * ch).collect();
    let ext: Vec<u64> = (0..n)
        .map(|d| s.chunk[d].min(s.shape[d] - start[d]))
        .collect();
    let count: u64 = ext.iter().product();
    let mut out = Vec::new();
    for e in 0..count {
        let mut rem = e;
        let mut local = vec![0; n];
        for d in (0..n).rev() {
            local[d] = rem % ext[d];
            rem /= ext[d];
        }
        let mut flat = 0;
        for d in 0..n {
            flat = flat * s.shape[d] + start[d] + local[d];
        }
        let at = flat as usize * es;
        out.extend_from_slice(&s.data[at..at + es]);
    }
    out
}

fn footer(spill: bool) -> FooterSpec {
    let meta = if spill {
        format!(
            r#"{{"datasets":{{"d0":{{"attrs":{{"units":"K"}}}}}},"notes":"{}"}}"#,
            "n".repeat(INLINE_JSON_LIMIT)
        )
    } else {
        r#"{"datasets":{"a":{"attrs":{"units":"K"}}}}"#.to_string()
    };
    FooterSpec {
        history: vec![HistoryRow {
            op: "write".into(),
            source: "props \"quoted\"\n".into(),
            at: "2026-11-30T00:00:00Z".into(),
            params: vec![("seed".into(), "1".into())],
        }],
        metadata: Some(meta),
    }
}

/// Writes `specs` with chunks in `order` (a permutation of `cells`), codec per chunk
/// from `zstd_mask`, and the C compressor when `c_level` is set.
fn write(
    specs: &[Spec],
    order: &[(u32, Vec<u64>)],
    zstd_mask: u64,
    c_level: Option<i32>,
    footer: Option<&FooterSpec>,
) -> Vec<u8> {
    let decl: Vec<DatasetSpec<'_>> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| DatasetSpec {
            name: ["d0", "d1", "d2"][i],
            dtype: s.dtype,
            shape: &s.shape,
            chunk_shape: &s.chunk,
        })
        .collect();
    let mut w = Writer::new(Vec::new(), &decl).unwrap();
    if let Some(l) = c_level {
        w.set_compressor(Box::new(CCompressor::new(l)));
    }
    w.set_execution(ExecutionSettings {
        memory_budget_percent_bps: 1234,
        memory_budget_bytes: 0,
    });
    for (k, (d, c)) in order.iter().enumerate() {
        let codec = if zstd_mask >> (k % 64) & 1 == 1 {
            Codec::Zstd
        } else {
            Codec::Raw
        };
        let t = tile(&specs[*d as usize], c);
        w.write_chunk(DatasetId(*d), c, &t, codec).unwrap();
    }
    w.finish(footer).unwrap()
}

fn deep_clean(bytes: &[u8]) {
    let c = check_with(
        bytes,
        &DecodeOptions {
            deep: true,
            threads: Some(2),
            budget: Some(1 << 30),
        },
    )
    .unwrap();
    assert_eq!(c.found.kept, vec![], "verify --deep is not clean");
    assert!(c.operational.is_none());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn written_files_verify_deep_and_read_back(
        specs in proptest::collection::vec(dataset(), 1..=3),
        seed in any::<u64>(),
        zstd_mask in any::<u64>(),
        c in any::<bool>(),
        with_footer in 0u8..3,
    ) {
        let canonical = cells(&specs);
        let mut order = canonical.clone();
        // Fisher-Yates driven by `seed`.
        let mut st = seed;
        for i in (1..order.len()).rev() {
            st = st.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, (st >> 33) as usize % (i + 1));
        }
        let f = match with_footer { 0 => None, 1 => Some(footer(false)), _ => Some(footer(true)) };
        let level = c.then_some(3);
        let shuffled = write(&specs, &order, zstd_mask, level, f.as_ref());
        deep_clean(&shuffled);
        tet_tests::assert_peer_readable(&shuffled);
        let file = TetFile::open(&shuffled).unwrap();
        for (i, s) in specs.iter().enumerate() {
            prop_assert_eq!(&logical_bytes(&file, &format!("d{i}")), &s.data);
        }
        if with_footer == 2 {
            let json = file.footer().unwrap().history_json();
            prop_assert!(std::str::from_utf8(json).unwrap().contains("metadata_ref"));
        }
        // Canonical arrival: the same decoded data, and the same bytes twice.
        let a = write(&specs, &canonical, zstd_mask, level, f.as_ref());
        let b = write(&specs, &canonical, zstd_mask, level, f.as_ref());
        prop_assert_eq!(&a, &b);
        let fa = TetFile::open(&a).unwrap();
        for (i, s) in specs.iter().enumerate() {
            prop_assert_eq!(&logical_bytes(&fa, &format!("d{i}")), &s.data);
        }
        // Canonical arrival lays payloads right after the index and the checksum table
        // (16 bytes a row), in index order.
        let mut at = fa.payload_floor() + 16 * fa.rows().len() as u64;
        for row in fa.rows() {
            prop_assert_eq!(row.payload_offset.get(), at);
            at += row.stored_byte_len.get();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A bit flipped anywhere in any chunk of a file this writer makes is caught by
    /// `verify --deep`, raw chunks by the checksum table, and named at the chunk's row.
    #[test]
    fn a_flipped_bit_in_any_chunk_is_caught_by_verify_deep(
        specs in proptest::collection::vec(dataset(), 1..=3),
        zstd_mask in any::<u64>(),
        with_footer in any::<bool>(),
        pick in any::<u64>(),
        bit in 0u32..8,
    ) {
        let f = with_footer.then(|| footer(false));
        let good = write(&specs, &cells(&specs), zstd_mask, None, f.as_ref());
        let file = TetFile::open(&good).unwrap();
        let rows: Vec<(usize, u64, u64)> = file
            .rows()
            .iter()
            .enumerate()
            .filter(|(_, r)| r.stored_byte_len.get() > 0)
            .map(|(i, r)| (i, r.payload_offset.get(), r.stored_byte_len.get()))
            .collect();
        prop_assume!(!rows.is_empty());
        let (row, at, len) = rows[(pick % rows.len() as u64) as usize];
        let mut bad = good.clone();
        bad[(at + (pick >> 8) % len) as usize] ^= 1 << bit;
        let c = check_with(
            &bad,
            &DecodeOptions { deep: true, threads: Some(2), budget: Some(1 << 30) },
        )
        .unwrap();
        prop_assert!(
            c.found.kept.iter().any(|f| f.row == Some(row as u64)),
            "row {row} not named: {:?}", c.found.kept
        );
        // A raw chunk has only the table to catch it; a zstd frame that no longer
        // decodes is named by its decode finding instead.
        if file.rows()[row].codec.get() == 0 {
            prop_assert!(c
                .found
                .kept
                .iter()
                .any(|f| f.code == Code::ChunkChecksum && f.row == Some(row as u64)));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The same flip fails every read of the chunk (a scalar `sum`, a `median`, the
    /// selected values `export` writes) with a located error: for a raw chunk the
    /// checksum table's, at the chunk's row and payload offset. Opened without its table
    /// (as before it was checked), the raw flip goes unseen.
    #[test]
    fn a_flipped_bit_in_any_chunk_fails_every_read_of_it(
        specs in proptest::collection::vec(dataset(), 1..=3),
        zstd_mask in any::<u64>(),
        pick in any::<u64>(),
        bit in 0u32..8,
    ) {
        let good = write(&specs, &cells(&specs), zstd_mask, None, None);
        let file = TetFile::open(&good).unwrap();
        let rows: Vec<(usize, u64, u64)> = file
            .rows()
            .iter()
            .enumerate()
            .filter(|(_, r)| r.stored_byte_len.get() > 0)
            .map(|(i, r)| (i, r.payload_offset.get(), r.stored_byte_len.get()))
            .collect();
        prop_assume!(!rows.is_empty());
        let (row, at, len) = rows[(pick % rows.len() as u64) as usize];
        let raw = file.rows()[row].codec.get() == 0;
        let id = file.rows()[row].dataset_id.get() as usize;
        let mut bad = good.clone();
        bad[(at + (pick >> 8) % len) as usize] ^= 1 << bit;
        let reading = open_for_reading(&bad).unwrap();
        prop_assert!(reading.problems.is_empty());
        let f = reading.file;
        let ds = f.datasets().nth(id).unwrap().unwrap();
        let p = plan(&f, ds, &[]).unwrap();
        let scalar = Axes::new(ds.ndim(), None).unwrap();
        let median = Axes::new(ds.ndim(), None).unwrap();
        let errors = [
            run(&f, &p, Operation::Reduce(Reduce::Sum), &scalar, 2, 1 << 30).err(),
            run(&f, &p, Operation::Median, &median, 2, 1 << 30).err(),
            select_values(&f, &p, 1 << 30, &()).err(),
        ];
        for e in errors {
            let Some(QueryError::Decode(d)) = e else {
                return Err(TestCaseError::fail(format!("row {row}: read not refused: {e:?}")));
            };
            prop_assert_eq!(d.row, row as u64);
            prop_assert_eq!(d.payload_offset, at);
            prop_assert!(d.finding().is_some());
            if raw {
                prop_assert!(matches!(d.kind, DecodeErrorKind::ChunkChecksum { .. }), "{:?}", d.kind);
                prop_assert_eq!(d.code(), Some(Code::ChunkChecksum));
            }
        }
        if raw {
            let plain = TetFile::open(&bad).unwrap();
            let p = plan(&plain, ds, &[]).unwrap();
            prop_assert!(select_values(&plain, &p, 1 << 30, &()).is_ok());
        }
    }
}

#[test]
fn canonical_raw_files_match_the_conformance_layout_byte_for_byte() {
    let Some(dir) = tet_tests::conformance_dir() else {
        return;
    };
    for name in [
        "sample.tet",
        "multichunk_u8.tet",
        "multichunk_u32.tet",
        "multichunk_f16.tet",
        "large.tet",
    ] {
        let theirs = std::fs::read(dir.join(name)).unwrap();
        let file = TetFile::open(&theirs).unwrap();
        let mut decl = Vec::new();
        let mut shapes = Vec::new();
        for ds in file.datasets() {
            let ds = ds.unwrap();
            shapes.push((
                ds.name().to_string(),
                ds.dtype(),
                ds.shape().collect::<Vec<_>>(),
                ds.chunk_shape().collect::<Vec<_>>(),
            ));
        }
        for (n, t, s, c) in &shapes {
            decl.push(DatasetSpec {
                name: n,
                dtype: *t,
                shape: s,
                chunk_shape: c,
            });
        }
        // Without the checksum table: the reference layout byte for byte.
        let mut w = Writer::reference_layout(Vec::new(), &decl).unwrap();
        w.set_execution(file.index().unwrap().execution());
        for (i, (n, ..)) in shapes.iter().enumerate() {
            let data = logical_bytes(&file, n);
            w.write_array(DatasetId(i as u32), &data, Codec::Raw)
                .unwrap();
        }
        let ours = w.finish(None).unwrap();
        assert_eq!(ours, theirs, "{name}");
    }
}

fn one() -> [DatasetSpec<'static>; 1] {
    [DatasetSpec {
        name: "a",
        dtype: DType::U16,
        shape: &[5, 3],
        chunk_shape: &[2, 2],
    }]
}

#[test]
fn misuse_is_refused_naming_the_chunk() {
    let mut w = Writer::new(Vec::new(), &one()).unwrap();
    let e = w
        .write_chunk(DatasetId(0), &[2, 1], &[0; 4], Codec::Raw)
        .unwrap_err();
    // The corner tile [2, 1] is clipped to 1 × 1 element of 2 bytes.
    assert!(matches!(
        e,
        WriteError::Chunk {
            problem: ChunkProblem::Length {
                expected: 2,
                found: 4
            },
            ..
        }
    ));
    assert!(matches!(
        w.write_chunk(DatasetId(0), &[3, 0], &[0; 8], Codec::Raw),
        Err(WriteError::Chunk {
            problem: ChunkProblem::OutsideGrid,
            ..
        })
    ));
    assert!(matches!(
        w.write_chunk(DatasetId(1), &[0, 0], &[0; 8], Codec::Raw),
        Err(WriteError::Chunk {
            problem: ChunkProblem::UnknownDataset,
            ..
        })
    ));
    assert!(matches!(
        w.write_chunk(DatasetId(0), &[0], &[0; 8], Codec::Raw),
        Err(WriteError::Chunk {
            problem: ChunkProblem::Rank,
            ..
        })
    ));
    w.write_chunk(DatasetId(0), &[0, 0], &[0; 8], Codec::Zstd)
        .unwrap();
    assert!(matches!(
        w.write_chunk(DatasetId(0), &[0, 0], &[0; 8], Codec::Raw),
        Err(WriteError::Chunk {
            problem: ChunkProblem::Duplicate,
            ..
        })
    ));
    let e = w.finish(None).unwrap_err();
    let WriteError::Missing { dataset, coords } = &e else {
        panic!("{e:?}")
    };
    assert_eq!((dataset.0, coords.as_slice()), (0, &[0u64, 1][..]));
    assert_eq!(e.to_string(), "dataset 0 chunk (0, 1) was never written");
}

#[test]
fn bad_declarations_and_footers_are_refused() {
    let bad = [DatasetSpec {
        name: "a",
        dtype: DType::U8,
        shape: &[4, 4],
        chunk_shape: &[0, 2],
    }];
    assert!(matches!(
        Writer::new(Vec::new(), &bad),
        Err(WriteError::Dataset { index: 0, .. })
    ));
    let huge = [DatasetSpec {
        name: "a",
        dtype: DType::U8,
        shape: &[1 << 40],
        chunk_shape: &[1],
    }];
    // 2^40 rows of bookkeeping are refused, not allocated.
    assert!(matches!(
        Writer::new(Vec::new(), &huge),
        Err(WriteError::TooLarge(_))
    ));
    let mut w = Writer::new(Vec::new(), &one()).unwrap();
    let data = vec![1u8; 30];
    w.write_array(DatasetId(0), &data, Codec::Raw).unwrap();
    let f = FooterSpec {
        history: vec![],
        metadata: Some("[1, 2]".into()),
    };
    assert!(matches!(w.finish(Some(&f)), Err(WriteError::Footer(_))));
}

#[test]
fn io_output_and_atomic_file_write_the_same_bytes_as_memory() {
    let data: Vec<u8> = (0..30u8).collect();
    let mem = {
        let mut w = Writer::new(Vec::new(), &one()).unwrap();
        w.write_array(DatasetId(0), &data, Codec::Zstd).unwrap();
        w.finish(Some(&footer(false))).unwrap()
    };
    let io = {
        let out = tet_host::atomic::IoOutput::new(std::io::Cursor::new(Vec::new()));
        let mut w = Writer::new(out, &one()).unwrap();
        w.write_array(DatasetId(0), &data, Codec::Zstd).unwrap();
        w.finish(Some(&footer(false)))
            .unwrap()
            .into_inner()
            .into_inner()
    };
    assert_eq!(io, mem);
    let path = std::env::temp_dir().join(format!("tet-writer-{}.tet", std::process::id()));
    let out = tet_host::atomic::AtomicFile::create(&path, tet_host::atomic::RealFs).unwrap();
    let mut w = Writer::new(out, &one()).unwrap();
    w.write_array(DatasetId(0), &data, Codec::Zstd).unwrap();
    w.finish(Some(&footer(false))).unwrap().commit().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), mem);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn parallel_batches_write_the_same_bytes_as_one_thread() {
    let data: Vec<u8> = (0..30u8).map(|x| x % 3).collect();
    let s = Spec {
        dtype: DType::U16,
        shape: vec![5, 3],
        chunk: vec![2, 2],
        data,
    };
    let serial = {
        let mut w = Writer::new(Vec::new(), &one()).unwrap();
        w.set_compressor(Box::new(CCompressor::new(5)));
        for (_, c) in cells(std::slice::from_ref(&s)) {
            w.write_chunk(DatasetId(0), &c, &tile(&s, &c), Codec::Zstd)
                .unwrap();
        }
        w.finish(None).unwrap()
    };
    let batch: Vec<tet_host::tet::write::Tile> = cells(std::slice::from_ref(&s))
        .into_iter()
        .map(|(_, c)| (DatasetId(0), c.clone(), tile(&s, &c)))
        .collect();
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let par = pool.install(|| {
            let mut w = Writer::new(Vec::new(), &one()).unwrap();
            tet_host::tet::write::write_batch(&mut w, &batch, Codec::Zstd, 5).unwrap();
            w.finish(None).unwrap()
        });
        assert_eq!(par, serial, "{threads} threads");
    }
}

/// Millions of chunks: 2 097 152 one-byte raw chunks give a 32 MiB checksum table whose
/// descriptor in the footer metadata stays under 100 bytes, so the footer is one the
/// other implementation reads (64 KiB inline cap, no spill); the table covers every row,
/// and a flipped byte in the last chunk is caught by it.
#[test]
fn a_file_with_millions_of_chunks_keeps_a_small_footer() {
    const N: u64 = 1 << 21;
    let spec = [DatasetSpec {
        name: "many",
        dtype: DType::U8,
        shape: &[N],
        chunk_shape: &[1],
    }];
    let data: Vec<u8> = (0..N).map(|i| (i % 251) as u8).collect();
    let mut w = Writer::new(Vec::new(), &spec).unwrap();
    w.write_array(DatasetId(0), &data, Codec::Raw).unwrap();
    let mut bytes = w.finish(None).unwrap();
    tet_tests::assert_peer_readable(&bytes);
    let file = TetFile::open(&bytes).unwrap();
    let json = file.footer().unwrap().history_json();
    let v: serde_json::Value = serde_json::from_slice(json).unwrap();
    let desc = v["metadata"]["tet_checksums"].to_string();
    assert!(desc.len() < 100, "{desc}");
    assert!(v.get("metadata_ref").is_none(), "no spill needed");
    assert_eq!(v["metadata"]["tet_checksums"]["rows"], N);
    let footer = tet_alloc::tet::history::check_footer(&file);
    let table = footer.table(&file).unwrap().unwrap();
    assert_eq!(table.len(), 16 * N);
    assert_eq!(table.covered(&file), N);
    let last = file.rows()[(N - 1) as usize];
    let at = last.payload_offset.get() as usize;
    bytes[at] ^= 0x40;
    let file = tet_alloc::tet::history::open_for_reading(&bytes)
        .unwrap()
        .file;
    let ds = file.dataset("many").unwrap();
    let chunk = file.chunk(&ds, &[N - 1]).unwrap();
    assert_eq!(chunk.check_checksum().unwrap_err().offset, at as u64);
    assert_eq!(
        file.chunk(&ds, &[N - 2]).unwrap().check_checksum(),
        Ok(true)
    );
}
