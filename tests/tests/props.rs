//! Property tests: random valid files always verify clean and read back exactly; random
//! corruption never panics, and whatever opens can be walked.

use proptest::prelude::*;
use tet_alloc::tet::testing::TetWriter;
use tet_core::tet::{DType, TetFile};
use tet_tests::{findings, logical_bytes};

#[derive(Debug, Clone)]
struct Spec {
    dtype: DType,
    shape: Vec<u64>,
    chunk: Vec<u64>,
    data: Vec<u8>,
}

fn dataset() -> impl Strategy<Value = Spec> {
    (0usize..10, 1usize..=3)
        .prop_flat_map(|(t, ndim)| {
            (
                Just(DType::ALL[t]),
                proptest::collection::vec(1u64..=5, ndim),
                proptest::collection::vec(1u64..=4, ndim),
            )
        })
        .prop_flat_map(|(dtype, shape, chunk)| {
            let n = shape.iter().product::<u64>() * dtype.size();
            (
                Just(dtype),
                Just(shape),
                Just(chunk),
                proptest::collection::vec(any::<u8>(), n as usize),
            )
        })
        .prop_map(|(dtype, shape, chunk, data)| Spec {
            dtype,
            shape,
            chunk,
            data,
        })
}

/// Builds a file; `order` permutes the rows (0 keeps canonical order).
fn build(specs: &[Spec], order: u64, footer: bool) -> Vec<u8> {
    // First collect the canonical rows through a scratch writer, then re-add permuted.
    let mut canonical = TetWriter::new();
    for (i, s) in specs.iter().enumerate() {
        let id = canonical
            .add_dataset(&format!("d{i}"), s.dtype, &s.shape, &s.chunk)
            .unwrap();
        canonical.add_array(id, &s.data).unwrap();
    }
    let bytes = canonical.to_bytes().unwrap();
    let file = TetFile::open(&bytes).unwrap();
    let mut rows: Vec<(u32, Vec<u64>, Vec<u8>)> = Vec::new();
    for ds in file.datasets() {
        let ds = ds.unwrap();
        for cell in 0..ds.grid_cells() {
            let c = ds.delinearize(cell);
            let chunk = file.chunk(&ds, c.as_slice()).unwrap();
            rows.push((ds.id().0, c.as_slice().to_vec(), chunk.payload.to_vec()));
        }
    }
    // Deterministic Fisher-Yates driven by `order`.
    let mut state = order;
    for i in (1..rows.len()).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = (state >> 33) as usize % (i + 1);
        if order != 0 {
            rows.swap(i, j);
        }
    }
    let mut w = TetWriter::new();
    for (i, s) in specs.iter().enumerate() {
        w.add_dataset(&format!("d{i}"), s.dtype, &s.shape, &s.chunk)
            .unwrap();
    }
    for (id, c, p) in rows {
        w.add_chunk_raw(tet_core::tet::DatasetId(id), &c, &p);
    }
    w.set_execution((order % 10_001) as u16, (order >> 32) as u32);
    if footer {
        w.set_history(br#"{"history":[["write","props","now"]]}"#, b"");
    }
    w.to_bytes().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn valid_files_verify_clean_and_read_back(
        specs in proptest::collection::vec(dataset(), 1..=3),
        order in any::<u64>(),
        footer in any::<bool>(),
    ) {
        let bytes = build(&specs, order, footer);
        prop_assert_eq!(findings(&bytes), vec![]);
        let file = TetFile::open(&bytes).unwrap();
        for (i, s) in specs.iter().enumerate() {
            prop_assert_eq!(&logical_bytes(&file, &format!("d{i}")), &s.data);
        }
    }

    #[test]
    fn byte_flips_never_panic(
        specs in proptest::collection::vec(dataset(), 1..=2),
        order in any::<u64>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut bytes = build(&specs, order, order % 2 == 0);
        for (at, v) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= v | 1;
        }
        // The fuzz target's body: no panic, and a file verify finds no error in serves
        // every chunk of every dataset.
        tet_host::fuzzing::open_walk(&bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut bytes = b"TETR\x01\x00\x00\x00".to_vec();
        bytes.extend_from_slice(&tail);
        // The fuzz target's body: no panic, and a file verify finds no error in serves
        // every chunk of every dataset.
        tet_host::fuzzing::open_walk(&bytes);
    }
}
