//! `tet-host repair`: every repairable case from the corruption suite with its expected
//! exit code; `-n` never changes a byte; `-p` fixes only what loses nothing; `-y` leaves
//! a file that verifies clean with every decodable chunk byte-identical; the conformance
//! `plan.tet`; and crash safety, stopping the write sequence after every step.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use tet_alloc::tet::decode::{ChunkDecoder, Ruzstd};
use tet_alloc::tet::scan::ChunkTable;
use tet_alloc::tet::testing::TetWriter;
use tet_alloc::tet::writer::{DatasetSpec, FooterSpec, HistoryRow, Writer};
use tet_core::tet::raw::off;
use tet_core::tet::{Code, Codec, DType, DatasetId, TetFile, INDEX_ENTRY_LEN};
use tet_host::atomic::{FsOps, RealFs};
use tet_host::repair_mode::Mode;
use tet_host::tet::repair::{repair_with, RepairOptions};
use tet_host::tet::verify::DecodeOptions;
use tet_host::Exit;
use tet_tests::{codes, findings};

const HISTORY: &[u8] = br#"{"history":[{"op":"create","source":"test","at":"2026-11-30"}]}"#;

/// Two datasets (raw f32 with a clipped edge, zstd u16) and a footer.
fn base() -> Vec<u8> {
    let specs = [
        DatasetSpec {
            name: "temperature",
            dtype: DType::F32,
            shape: &[2, 3],
            chunk_shape: &[2, 2],
        },
        DatasetSpec {
            name: "counts",
            dtype: DType::U16,
            shape: &[500],
            chunk_shape: &[200],
        },
    ];
    let mut w = Writer::new(Vec::new(), &specs).unwrap();
    let t: Vec<u8> = (1..=6).flat_map(|v| (v as f32).to_le_bytes()).collect();
    w.write_array(DatasetId(0), &t, Codec::Raw).unwrap();
    let c: Vec<u8> = (0..500u16).flat_map(|v| (v % 17).to_le_bytes()).collect();
    w.write_array(DatasetId(1), &c, Codec::Zstd).unwrap();
    let footer = FooterSpec {
        history: vec![HistoryRow {
            op: "create".into(),
            source: "test".into(),
            at: "2026-11-30T00:00:00Z".into(),
            params: Vec::new(),
        }],
        metadata: Some(r#"{"datasets":{"t":{"attrs":{"units":"K"}}}}"#.into()),
    };
    w.finish(Some(&footer)).unwrap()
}

fn index(b: &[u8]) -> u64 {
    TetFile::open(b).unwrap().index().unwrap().offset()
}

fn row(b: &[u8], i: u64) -> u64 {
    index(b) + 32 + i * INDEX_ENTRY_LEN
}

fn patch(mut b: Vec<u8>, at: u64, with: &[u8]) -> Vec<u8> {
    let at = at as usize;
    b[at..at + with.len()].copy_from_slice(with);
    b
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tet-repair-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn opts(mode: Mode, zero: bool) -> RepairOptions<'static> {
    RepairOptions {
        mode,
        output: None,
        zero_bad_chunks: zero,
        decode: DecodeOptions {
            deep: true,
            threads: Some(2),
            budget: Some(1 << 30),
        },
        force: false,
    }
}

/// Runs repair on a copy of `bytes`: (exit, bytes after).
fn run(bytes: &[u8], mode: Mode, zero: bool) -> (Exit, Vec<u8>) {
    let path = dir().join("f.tet");
    std::fs::write(&path, bytes).unwrap();
    let exit = repair_with(&path, bytes, &opts(mode, zero), RealFs);
    (exit, std::fs::read(&path).unwrap())
}

/// Every chunk's decoded bytes by (dataset, coords), `None` where decoding fails.
fn decoded(bytes: &[u8]) -> Vec<(u32, Vec<u64>, Option<Vec<u8>>)> {
    // A file whose superblock does not parse has no chunk to read.
    let Some(file) = TetFile::parse(bytes, &mut |_: &tet_core::tet::Finding| {}) else {
        return Vec::new();
    };
    // A chunk whose stored bytes fail their checksum does not read either.
    let sums = tet_alloc::tet::history::check_footer(&file)
        .checksums
        .and_then(|(o, n)| tet_core::tet::ChecksumTable::parse(&file, o, n).ok());
    let t = ChunkTable::new(file).unwrap();
    let mut dec = ChunkDecoder::new(Ruzstd::new(), 1 << 30);
    let mut out: Vec<_> = (0..t.rows())
        .filter_map(|r| t.chunk(r))
        .map(|c| {
            let sound = sums.as_ref().is_none_or(|s| s.check(&c).is_ok());
            (
                c.dataset.0,
                c.coords.as_slice().to_vec(),
                dec.decode(&c).ok().filter(|_| sound).map(|b| b.to_vec()),
            )
        })
        .collect();
    out.sort();
    out
}

/// The common contract for one damaged file: `-n` changes nothing and exits 4; `-p`
/// gives `p_exit`; `-y` gives `y_exit`, and when that is 1 the result verifies clean and
/// every chunk that decoded before decodes to the same bytes.
fn contract(name: &str, bad: &[u8], p_exit: Exit, y_exit: Exit, zero: bool) -> Vec<u8> {
    assert!(!findings(bad).is_empty(), "{name}: not damaged");
    let (e, after) = run(bad, Mode::No, zero);
    assert_eq!(e, Exit::Problems, "{name}: -n");
    assert_eq!(after, bad, "{name}: -n changed bytes");
    let (e, _) = run(bad, Mode::Preen, zero);
    assert_eq!(e, p_exit, "{name}: -p");
    let (e, fixed) = run(bad, Mode::Yes, zero);
    assert_eq!(e, y_exit, "{name}: -y");
    if y_exit == Exit::Fixed {
        assert_eq!(findings(&fixed), vec![], "{name}: not clean after -y");
        let before = decoded(bad);
        let after = decoded(&fixed);
        for (d, c, bytes) in &before {
            // A cell two rows claimed (a duplicate) has no one content to keep.
            let claims = before
                .iter()
                .filter(|(d2, c2, _)| d2 == d && c2 == c)
                .count();
            if let (Some(bytes), 1) = (bytes, claims) {
                let now = after.iter().find(|(d2, c2, _)| d2 == d && c2 == c).unwrap();
                assert_eq!(
                    now.2.as_ref(),
                    Some(bytes),
                    "{name}: chunk {d} {c:?} changed"
                );
            }
        }
        // Running it again finds nothing.
        let (e, again) = run(&fixed, Mode::Yes, zero);
        assert_eq!(e, Exit::Clean, "{name}: second run");
        assert_eq!(again, fixed);
    }
    fixed
}

#[test]
fn clean_file_needs_nothing() {
    let (e, after) = run(&base(), Mode::Yes, true);
    assert_eq!(e, Exit::Clean);
    assert_eq!(after, base());
}

#[test]
fn lossless_zeroing_fixes() {
    let b = base();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "superblock flags",
            patch(b.clone(), off::sb::FLAGS, &5u32.to_le_bytes()),
        ),
        (
            "record reserved",
            patch(b.clone(), 40 + off::rec::RESERVED, &[7]),
        ),
        ("record padding", patch(b.clone(), 40 + 16 + 11, &[9])),
        (
            "tidx reserved",
            patch(b.clone(), index(&b) + off::tidx::RESERVED1, &[1]),
        ),
        (
            "row reserved",
            patch(b.clone(), row(&b, 3) + off::row::RESERVED, &[1]),
        ),
        (
            "unused coordinate slot",
            patch(b.clone(), row(&b, 2) + off::row::CHUNK_INDEX + 8 * 5, &[4]),
        ),
    ];
    for (name, bad) in cases {
        let fixed = contract(name, &bad, Exit::Fixed, Exit::Fixed, false);
        // Zeroing restores exactly the original bytes.
        assert_eq!(fixed, b, "{name}");
    }
}

#[test]
fn trailing_bytes_are_removed_and_the_footer_moves_up() {
    // Spill forced: metadata larger than the inline limit.
    let big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(70_000));
    let specs = [DatasetSpec {
        name: "a",
        dtype: DType::U8,
        shape: &[4],
        chunk_shape: &[4],
    }];
    let mut w = Writer::new(Vec::new(), &specs).unwrap();
    w.write_chunk(DatasetId(0), &[0], &[1, 2, 3, 4], Codec::Raw)
        .unwrap();
    let clean = w
        .finish(Some(&FooterSpec {
            history: vec![],
            metadata: Some(big.clone()),
        }))
        .unwrap();
    assert_eq!(findings(&clean), vec![]);
    let file = TetFile::open(&clean).unwrap();
    let payload_end = file.rows()[0].payload_offset.get() + 4;
    // Insert junk between the payload and the spill, and point metadata_ref past it.
    let mut bad = clean[..payload_end as usize].to_vec();
    bad.extend_from_slice(&[0xee; 9]);
    let rest = &clean[payload_end as usize..];
    let json_at = file.footer().unwrap().json_offset() as usize;
    let spill = &clean[payload_end as usize..json_at];
    let json = String::from_utf8(clean[json_at..clean.len() - 16].to_vec()).unwrap();
    let json = json.replace(
        &format!("\"offset\":{payload_end}"),
        &format!("\"offset\":{}", payload_end + 9),
    );
    bad.extend_from_slice(spill);
    bad.extend_from_slice(json.as_bytes());
    bad.extend_from_slice(&(json.len() as u64).to_le_bytes());
    bad.extend_from_slice(&clean[clean.len() - 8..]);
    assert_eq!(codes(&bad), vec![tet_core::tet::Code::TrailingBytes]);
    let _ = rest;
    let fixed = contract(
        "trailing before spill",
        &bad,
        Exit::Fixed,
        Exit::Fixed,
        false,
    );
    let diff = fixed.iter().zip(&clean).position(|(a, b)| a != b);
    assert_eq!(
        (fixed.len(), diff),
        (clean.len(), None),
        "the footer moved back exactly"
    );
    // Plain trailing bytes at the end of a file without a footer (so without the
    // checksum table, which a footer names).
    let mut w = Writer::reference_layout(Vec::new(), &specs).unwrap();
    w.write_chunk(DatasetId(0), &[0], &[1, 2, 3, 4], Codec::Raw)
        .unwrap();
    let plain = w.finish(None).unwrap();
    let mut bad = plain.clone();
    bad.extend_from_slice(b"junk");
    assert_eq!(
        contract("trailing", &bad, Exit::Fixed, Exit::Fixed, false),
        plain
    );
}

#[test]
fn broken_footers_are_dropped_only_with_y() {
    let b = base();
    let len = b.len() as u64;
    let json_at = TetFile::open(&b).unwrap().footer().unwrap().json_offset();
    for (name, bad) in [
        // The magic and the length both broken: nothing pins the footer down.
        (
            "footer magic",
            patch(
                patch(b.clone(), len - 4, b"THSX"),
                len - 16,
                &u64::MAX.to_le_bytes(),
            ),
        ),
        ("footer version", patch(b.clone(), len - 8, &[2])),
        (
            "footer length",
            patch(b.clone(), len - 16, &u64::MAX.to_le_bytes()),
        ),
        ("footer json", patch(b.clone(), json_at, b"[")),
    ] {
        let fixed = contract(name, &bad, Exit::Problems, Exit::Fixed, false);
        let f = TetFile::open(&fixed).unwrap();
        assert!(!f.superblock().has_history_footer(), "{name}");
        assert!(fixed.len() < b.len());
    }
    let _ = HISTORY;
}

/// What the structure pins down is restored by `-p`, losing nothing, and the result is
/// the original file byte for byte: a magic whose structure validates once restored
/// (superblock, chunk index, footer: the history is kept), and a row's coordinates that
/// canonical order makes certain (outside the grid, or naming a cell another row holds).
#[test]
fn magics_and_canonical_coordinates_are_restored_losing_nothing() {
    let b = base();
    let len = b.len() as u64;
    let ix = index(&b);
    let cases = [
        (
            "superblock magic",
            patch(b.clone(), 1, b"e"),
            Code::SuperblockMagic,
        ),
        (
            "index magic",
            patch(b.clone(), ix + 2, b"d"),
            Code::IndexMagic,
        ),
        (
            "footer magic",
            patch(b.clone(), len - 4, b"THSX"),
            Code::FooterMagic,
        ),
        (
            "coordinates outside the grid",
            patch(b.clone(), row(&b, 1) + 16, &5u64.to_le_bytes()),
            Code::ChunkCoords,
        ),
        (
            // counts: rows 2, 3, 4 hold cells 0, 1, 2 (200, 200, 100 elements); row 3
            // made to name cell 0, whose tile has its length.
            "coordinates of another cell",
            patch(b.clone(), row(&b, 3) + 8, &0u64.to_le_bytes()),
            Code::ChunkDuplicate,
        ),
        (
            // temperature: row 1 made to name cell (0, 0): its 8 bytes are not that
            // tile's 16, so chunk-raw-len too, answered by the same fix.
            "coordinates of another cell, another tile length",
            patch(b.clone(), row(&b, 1) + 16, &0u64.to_le_bytes()),
            Code::ChunkDuplicate,
        ),
    ];
    for (name, bad, code) in cases {
        assert!(codes(&bad).contains(&code), "{name}: {:?}", codes(&bad));
        let checked =
            tet_host::tet::verify::check_with(&bad, &opts(Mode::No, false).decode).unwrap();
        let inputs = tet_alloc::tet::repair::Inputs {
            bytes: &bad,
            findings: &checked.found.kept,
            bad_rows: &checked.bad_rows,
            data_end: checked.data_end,
            metadata_spill: checked.spill,
            zero_bad_chunks: false,
        };
        let plan = tet_alloc::tet::repair::plan(&inputs);
        assert_eq!(plan.unfixable, vec![], "{name}");
        assert_eq!(plan.fixes.len(), 1, "{name}: {:?}", plan.fixes);
        assert!(!plan.fixes[0].lossy, "{name}");
        let fixed = contract(name, &bad, Exit::Fixed, Exit::Fixed, false);
        assert_eq!(fixed, b, "{name}: not the original bytes");
    }
    // What each says.
    let say = |bad: &[u8]| {
        let checked = tet_host::tet::verify::check(bad).unwrap();
        let inputs = tet_alloc::tet::repair::Inputs {
            bytes: bad,
            findings: &checked.0.kept,
            bad_rows: &[],
            data_end: 0,
            metadata_spill: None,
            zero_bad_chunks: false,
        };
        tet_alloc::tet::repair::plan(&inputs).fixes[0]
            .description
            .clone()
    };
    assert!(say(&patch(b.clone(), 1, b"e"))
        .starts_with("restore the superblock magic 'TETR' (it reads 'TeTR')"));
    assert_eq!(
        say(&patch(b.clone(), row(&b, 1) + 16, &5u64.to_le_bytes())),
        "set the coordinates of tidx row 1 (dataset 0 'temperature') from (0, 5) to (0, 1): \
         the rows are in canonical order, which puts cell (0, 1)'s row there; no other row \
         holds that cell, and the row's 8 bytes are its tile's"
    );
    // Not pinned down: a magic whose structure does not validate with it (the index
    // version broken too), or coordinates whose row is not where canonical order puts
    // the missing cell (rows reversed).
    let bad = patch(patch(b.clone(), ix + 2, b"d"), ix + 4, &[9]);
    contract(
        "index magic and version",
        &bad,
        Exit::Problems,
        Exit::Problems,
        false,
    );
    let mut w = TetWriter::new();
    let a = w.add_dataset("a", DType::U8, &[6], &[2]).unwrap();
    for c in [2u64, 1, 0] {
        w.add_chunk_raw(a, &[c], &[c as u8; 2]);
    }
    let rev = w.to_bytes().unwrap();
    let bad = patch(rev.clone(), row(&rev, 1) + 8, &7u64.to_le_bytes());
    assert!(codes(&bad).contains(&Code::ChunkMissing));
    contract("reversed rows", &bad, Exit::Problems, Exit::Problems, false);
}

/// A file cut inside its last payload: `-y` drops the footer and says exactly what that
/// loses, the history and the bytes of the cut payload (named, with its size); `-p`
/// writes nothing.
#[test]
fn a_cut_payload_is_named_with_its_size() {
    let b = base();
    let f = TetFile::open(&b).unwrap();
    let (i, last) = f
        .rows()
        .iter()
        .enumerate()
        .max_by_key(|(_, r)| r.payload_offset.get())
        .unwrap();
    let (start, stored) = (last.payload_offset.get(), last.stored_byte_len.get());
    let cut = (start + stored / 2) as usize;
    let bad = b[..cut].to_vec();
    let checked = tet_host::tet::verify::check(&bad).unwrap();
    let inputs = tet_alloc::tet::repair::Inputs {
        bytes: &bad,
        findings: &checked.0.kept,
        bad_rows: &[],
        data_end: 0,
        metadata_spill: None,
        zero_bad_chunks: false,
    };
    let plan = tet_alloc::tet::repair::plan(&inputs);
    let drop = plan.fixes.iter().find(|f| f.lossy).unwrap();
    let present = cut as u64 - start;
    assert!(
        drop.description.starts_with(&format!(
            "LOSES HISTORY AND {present} BYTES OF CUT PAYLOADS"
        )) && drop.description.contains(&format!(
            "the partial payload of dataset 1 'counts' chunk (2) (tidx row {i}): {present} \
                 of its {stored} bytes, at byte {start:#x}"
        )),
        "{}",
        drop.description
    );
    let (e, after) = run(&bad, Mode::Preen, false);
    assert_eq!((e, after.as_slice()), (Exit::Problems, bad.as_slice()));
    let (e, after) = run(&bad, Mode::Yes, false);
    assert_eq!(e, Exit::Problems, "the cut chunk stays unreadable");
    assert_eq!(
        after.len() as u64,
        start,
        "cut after the last whole payload"
    );
    // Every whole chunk is kept.
    for (d, c, bytes) in decoded(&bad) {
        if bytes.is_some() {
            assert!(decoded(&after)
                .iter()
                .any(|(d2, c2, b2)| (d2, c2, b2) == (&d, &c, &bytes)));
        }
    }
    // A file cut after its last payload (inside the footer) loses only the history.
    let whole = b[..(start + stored) as usize + 5].to_vec();
    let checked = tet_host::tet::verify::check(&whole).unwrap();
    let inputs = tet_alloc::tet::repair::Inputs {
        bytes: &whole,
        findings: &checked.0.kept,
        ..inputs
    };
    let plan = tet_alloc::tet::repair::plan(&inputs);
    assert!(
        plan.fixes[0].description.ends_with("; every chunk is kept"),
        "{:?}",
        plan.fixes
    );
}

#[test]
fn conformance_plan_tet_footer_is_dropped_payloads_kept() {
    let Some(dir) = tet_tests::conformance_dir() else {
        return;
    };
    let bad = std::fs::read(dir.join("plan.tet")).unwrap();
    let fixed = contract("plan.tet", &bad, Exit::Problems, Exit::Fixed, false);
    let f = TetFile::open(&fixed).unwrap();
    assert_eq!(
        tet_tests::values(&f, "a"),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    // Only the flags and the footer changed: every byte up to the payload end is the
    // same but the flag word.
    let end = fixed.len();
    assert_eq!(&fixed[..12], &bad[..12]);
    assert_eq!(&fixed[16..end], &bad[16..end]);
}

#[test]
fn undecodable_chunks_are_left_or_zeroed_with_a_history_row() {
    let b = base();
    let file = TetFile::open(&b).unwrap();
    // Row 3 is counts chunk (1): flip its checksum byte.
    let r = &file.rows()[3];
    let last = r.payload_offset.get() + r.stored_byte_len.get() - 1;
    let mut bad = b.clone();
    bad[last as usize] ^= 0xff;
    let found = codes(&bad);
    assert_eq!(found.len(), 1, "{found:?}");
    // Without --zero-bad-chunks the chunk is left.
    contract(
        "bad chunk, left",
        &bad,
        Exit::Problems,
        Exit::Problems,
        false,
    );
    let fixed = contract("bad chunk, zeroed", &bad, Exit::Problems, Exit::Fixed, true);
    let f = TetFile::open(&fixed).unwrap();
    let ds = f.dataset("counts").unwrap();
    let c = f.chunk(&ds, &[1]).unwrap();
    assert_eq!(c.codec, Codec::Raw);
    assert!(c.payload.iter().all(|b| *b == 0));
    let json = std::str::from_utf8(f.footer().unwrap().history_json()).unwrap();
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let last = v["history"].as_array().unwrap().last().unwrap();
    assert_eq!(last["op"], "repair");
    assert_eq!(last["params"]["coords"], "[1]");
    assert_eq!(last["params"]["row"], "3");
    tet_tests::assert_peer_readable(&fixed);
    assert_eq!(last["params"]["finding"], found[0].as_str());
    assert_eq!(v["metadata"]["datasets"]["t"]["attrs"]["units"], "K");
}

#[test]
fn a_raw_chunk_failing_its_checksum_is_replaced_and_stays_checksummed() {
    let b = base();
    let file = TetFile::open(&b).unwrap();
    // Row 1 is temperature chunk (0, 1), raw: one flipped bit only the checksum sees.
    let r = file.rows()[1];
    assert_eq!(r.codec.get(), 0);
    let mut bad = b.clone();
    bad[r.payload_offset.get() as usize] ^= 0x01;
    let found = findings(&bad);
    assert_eq!(
        found.iter().map(|f| (f.code, f.row)).collect::<Vec<_>>(),
        vec![(Code::ChunkChecksum, Some(1))]
    );
    contract(
        "raw chunk, left",
        &bad,
        Exit::Problems,
        Exit::Problems,
        false,
    );
    let fixed = contract(
        "raw chunk, replaced",
        &bad,
        Exit::Problems,
        Exit::Fixed,
        true,
    );
    let f = TetFile::open(&fixed).unwrap();
    let v = tet_tests::values(&f, "temperature");
    // The shape is (2, 3) in (2, 2) chunks: column 2 is chunk (0, 1), now NaN.
    assert_eq!(v[..2], [1.0, 2.0]);
    assert!(v[2].is_nan() && v[5].is_nan(), "{v:?}");
    assert_eq!(v[3..5], [4.0, 5.0]);
    // The replacement carries a checksum: its entry points at the new payload.
    let (o, n) = tet_alloc::tet::history::check_footer(&f).checksums.unwrap();
    let t = tet_core::tet::ChecksumTable::parse(&f, o, n).unwrap();
    assert_eq!(t.covered(&f), f.rows().len() as u64);
    let row = f.rows()[1];
    assert_ne!(row.payload_offset.get(), r.payload_offset.get());
    assert!(t.expected(1, row.payload_offset.get()).is_some());
    tet_tests::assert_peer_readable(&fixed);
}

#[test]
fn float_chunks_are_replaced_by_nan() {
    let specs = [DatasetSpec {
        name: "a",
        dtype: DType::F32,
        shape: &[64],
        chunk_shape: &[32],
    }];
    let mut w = Writer::new(Vec::new(), &specs).unwrap();
    let data: Vec<u8> = (0..64).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.write_array(DatasetId(0), &data, Codec::Zstd).unwrap();
    let b = w.finish(None).unwrap();
    let r0 = TetFile::open(&b).unwrap().rows()[0];
    let bad = patch(b, r0.payload_offset.get(), b"XXXX");
    let fixed = contract("float chunk", &bad, Exit::Problems, Exit::Fixed, true);
    let f = TetFile::open(&fixed).unwrap();
    let v = tet_tests::values(&f, "a");
    assert!(v[..32].iter().all(|x| x.is_nan()));
    assert_eq!(v[32..], (32..64).map(f64::from).collect::<Vec<_>>()[..]);
    assert!(f.superblock().has_history_footer());
}

#[test]
fn unrepairable_damage_writes_nothing() {
    // A missing cell: no safe fix.
    let mut w = TetWriter::new();
    let a = w.add_dataset("a", DType::U8, &[4], &[2]).unwrap();
    w.add_chunk_raw(a, &[0], &[1, 2]);
    let bad = w.to_bytes().unwrap();
    contract("missing cell", &bad, Exit::Problems, Exit::Problems, true);
    let (_, after) = run(&bad, Mode::Yes, true);
    assert_eq!(after, bad, "-y wrote something although no fix applies");
}

/// File-system steps that fail from step `fail_at` on (counting every call).
#[derive(Clone)]
struct Faulty {
    step: usize,
    fail_at: usize,
    /// Tear the failing write: write half of it first.
    tear: bool,
}

impl Faulty {
    fn tick(&mut self) -> io::Result<()> {
        self.step += 1;
        if self.step > self.fail_at {
            return Err(io::Error::other("injected power cut"));
        }
        Ok(())
    }
}

impl FsOps for Faulty {
    fn create_new(&mut self, path: &Path) -> io::Result<File> {
        self.tick()?;
        RealFs.create_new(path)
    }
    fn write_at(&mut self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        if let Err(e) = self.tick() {
            if self.tear {
                RealFs.write_at(file, offset, &bytes[..bytes.len() / 2])?;
            }
            return Err(e);
        }
        RealFs.write_at(file, offset, bytes)
    }
    fn sync(&mut self, file: &File) -> io::Result<()> {
        self.tick()?;
        RealFs.sync(file)
    }
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        self.tick()?;
        RealFs.rename(from, to)
    }
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        self.tick()?;
        RealFs.sync_dir(dir)
    }
}

#[test]
fn a_cut_at_any_step_leaves_the_old_file_or_the_repaired_one() {
    let bad = patch(base(), off::sb::FLAGS, &5u32.to_le_bytes());
    let good = base();
    let d = dir().join("crash");
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join("f.tet");
    let mut saw_old = false;
    let mut saw_new = false;
    for tear in [false, true] {
        for k in 0..8 {
            std::fs::write(&path, &bad).unwrap();
            let ops = Faulty {
                step: 0,
                fail_at: k,
                tear,
            };
            let exit = repair_with(&path, &bad, &opts(Mode::Yes, false), ops);
            let now = std::fs::read(&path).unwrap();
            if now == bad {
                saw_old = true;
                assert_eq!(
                    exit,
                    Exit::Operational,
                    "step {k}: unchanged but exit {exit:?}"
                );
            } else {
                assert_eq!(now, good, "step {k} (tear {tear}): a mix of old and new");
                saw_new = true;
            }
            // No temporary file is left behind.
            let names: Vec<_> = std::fs::read_dir(&d)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names.len(), 1, "step {k}: {names:?}");
        }
    }
    assert!(saw_old && saw_new);
}
