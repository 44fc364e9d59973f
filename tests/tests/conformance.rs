//! Files written by an independent implementation (`../shared/conformance/tet-upstream`)
//! must read exactly as its README states.

use tet_core::tet::{Code, DType, Severity, TetFile};
use tet_tests::{conformance_dir, findings, values};

fn read(name: &str) -> Option<Vec<u8>> {
    let dir = conformance_dir()?;
    Some(std::fs::read(dir.join(name)).unwrap())
}

fn stats(v: &[f64]) -> (f64, f64, f64, f64, f64) {
    let n = v.len() as f64;
    let sum: f64 = v.iter().sum();
    let mean = sum / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (sum, mean, min, max, var)
}

fn check_small(name: &str, dataset: &str, dtype: DType) {
    let Some(bytes) = read(name) else { return };
    assert_eq!(findings(&bytes), vec![], "{name} must verify clean");
    let file = TetFile::open(&bytes).unwrap();
    let ds = file.dataset(dataset).unwrap();
    assert_eq!(ds.dtype(), dtype);
    assert_eq!(ds.shape().collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(ds.chunk_shape().collect::<Vec<_>>(), vec![2, 2]);
    assert_eq!(ds.grid().collect::<Vec<_>>(), vec![1, 2]);
    // The edge chunk is stored clipped to [2, 1].
    let edge = file.chunk(&ds, &[0, 1]).unwrap();
    assert_eq!(edge.raw_byte_len, 2 * dtype.size());
    let v = values(&file, dataset);
    assert_eq!(v, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let (sum, mean, ..) = stats(&v);
    assert_eq!((sum, mean), (21.0, 3.5));
}

#[test]
fn sample_f32() {
    check_small("sample.tet", "temperature", DType::F32);
    let Some(bytes) = read("sample.tet") else {
        return;
    };
    let file = TetFile::open(&bytes).unwrap();
    let (sum, mean, min, max, var) = stats(&values(&file, "temperature"));
    assert_eq!((sum, mean, min, max), (21.0, 3.5, 1.0, 6.0));
    assert!((var - 2.916_666_7).abs() < 1e-6);
}

#[test]
fn multichunk_u8() {
    check_small("multichunk_u8.tet", "a", DType::U8);
}

#[test]
fn multichunk_u32() {
    check_small("multichunk_u32.tet", "a", DType::U32);
}

#[test]
fn multichunk_f16() {
    check_small("multichunk_f16.tet", "a", DType::F16);
}

#[test]
fn large_f32_with_clipped_last_chunk_row() {
    let Some(bytes) = read("large.tet") else {
        return;
    };
    assert_eq!(findings(&bytes), vec![]);
    let file = TetFile::open(&bytes).unwrap();
    let ds = file.dataset("a").unwrap();
    assert_eq!(ds.grid().collect::<Vec<_>>(), vec![9, 16]);
    assert_eq!(file.rows().len(), 144);
    assert_eq!(file.chunk(&ds, &[8, 15]).unwrap().raw_byte_len, 2 * 4 * 4);
    let v = values(&file, "a");
    assert_eq!(v, (0..2176).map(f64::from).collect::<Vec<_>>());
    let (sum, mean, min, max, var) = stats(&v);
    assert_eq!(
        (sum, mean, min, max, var),
        (2_366_400.0, 1087.5, 0.0, 2175.0, 394_581.25)
    );
}

#[test]
fn plan_has_an_invalid_footer_and_nothing_else() {
    let Some(bytes) = read("plan.tet") else {
        return;
    };
    let f = findings(&bytes);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].code, Code::FooterJson);
    assert_eq!(f[0].severity(), Severity::Error);
    assert_eq!(f[0].error.offset, 0x168);
    // The data is intact.
    let file = TetFile::open(&bytes).unwrap();
    assert_eq!(values(&file, "a"), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(file.payload_limit(), 0x168);
}
