//! The full structural check: fixed structures, every row, coverage of every grid cell,
//! payload overlap and unreferenced trailing bytes. No allocation: files whose rows are
//! in canonical order need no scratch at all; others need [`scratch_words`] `u64`s.

use super::finding::{Code, Finding, Sink};
use super::index::{check_row, PayloadArea};
use super::raw::{off, RawIndexEntry};
use super::{Dataset, DatasetId, DatasetIter, Directory, IndexHeader, TetFile, SUPERBLOCK_LEN};
use crate::arith::u64_of;
use crate::error::{Error, ErrorKind};

/// A byte span `[offset, offset + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Span {
    /// First byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Inputs to [`verify`].
#[derive(Debug)]
pub struct VerifyOptions<'s> {
    /// Working memory for files whose rows are not in canonical order; see
    /// [`scratch_words`]. Too small a buffer yields a `verify-incomplete` finding.
    pub scratch: &'s mut [u64],
    /// The `metadata_spill` span, as named by `metadata_ref` in `history_json` (the core
    /// does not parse JSON; the caller does).
    pub metadata_spill: Option<Span>,
}

/// What a verification pass saw, besides its findings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct VerifySummary {
    /// Whether the fixed structures parsed far enough to check rows.
    pub rows_checked: bool,
    /// Whether rows are in canonical order (`O(1)` chunk lookup).
    pub canonical: bool,
    /// End of the last byte referenced by a valid payload, index or superblock.
    pub data_end: u64,
}

/// How many scratch words [`verify`] may need for `file`: twice the dataset count plus
/// the row count. Bounded by the file size (a record is at least 32 bytes and a row 104),
/// so a hostile header cannot make a caller that sizes scratch this way over-allocate.
pub fn scratch_words(file: &TetFile<'_>) -> usize {
    let d = usize::try_from(file.superblock().dataset_count()).unwrap_or(usize::MAX);
    d.saturating_mul(2).saturating_add(file.rows().len())
}

/// Individual `chunk-missing` findings before the rest are summarised in one.
const MISSING_REPORT_CAP: u64 = 64;

/// Checks every structural rule of layout v1 and reports each problem to `sink`.
pub fn verify(
    bytes: &[u8],
    opts: VerifyOptions<'_>,
    sink: &mut dyn Sink<Finding>,
) -> VerifySummary {
    let mut summary = VerifySummary::default();
    let Some(file) = TetFile::parse(bytes, sink) else {
        return summary;
    };
    let mut data_end = file.payload_floor().max(SUPERBLOCK_LEN);
    if let (Some(dir), Some(ix)) = (file.directory(), file.index()) {
        summary.rows_checked = true;
        let area = file.area();
        let rows = Rows { dir, ix, area };
        if rows.canonical() {
            summary.canonical = true;
            rows.check_lockstep(sink);
        } else {
            rows.check_with_scratch(opts.scratch, sink);
        }
        // Every in-bounds payload counts as referenced, even if its row is bad otherwise.
        for row in ix.rows() {
            let start = row.payload_offset.get();
            if let Some(end) = start.checked_add(row.stored_byte_len.get()) {
                if start >= area.floor && end <= area.limit {
                    data_end = data_end.max(end);
                }
            }
        }
    }
    summary.data_end = data_end;
    // Where payloads end is known only once rows were checked (or there are none).
    let rows_known = summary.rows_checked || file.superblock().dataset_count() == 0;
    if rows_known && !file.footer_invalid() {
        check_trailing(&file, data_end, opts.metadata_spill, sink);
    }
    summary
}

fn check_trailing(
    file: &TetFile<'_>,
    data_end: u64,
    spill: Option<Span>,
    sink: &mut dyn Sink<Finding>,
) {
    let limit = file.payload_limit();
    let mut cursor = data_end;
    let trailing = |start: u64, end: u64, sink: &mut dyn Sink<Finding>| {
        sink.report(&Finding::new(
            Code::TrailingBytes,
            Error::new(
                ErrorKind::Unreferenced {
                    len: end.saturating_sub(start),
                },
                "payload area",
                start,
            ),
        ));
    };
    if let Some(s) = spill {
        let json_at = file.footer().map(|f| f.json_offset()).unwrap_or(limit);
        match s.offset.checked_add(s.len) {
            Some(end) if s.offset >= data_end && end <= limit => {
                if s.offset > cursor {
                    trailing(cursor, s.offset, sink);
                }
                cursor = end;
            }
            _ => sink.report(&Finding::new(
                Code::MetadataSpill,
                Error::new(
                    ErrorKind::OutOfRange {
                        value: s.offset,
                        max: limit,
                    },
                    "history_json.metadata_ref",
                    json_at,
                ),
            )),
        }
    }
    if cursor < limit {
        trailing(cursor, limit, sink);
    }
}

struct Rows<'a> {
    dir: Directory<'a>,
    ix: IndexHeader<'a>,
    area: PayloadArea,
}

fn coords_match(ds: &Dataset<'_>, row: &RawIndexEntry, want: u64) -> bool {
    let all = row.coords();
    let (used, unused) = all.split_at(ds.ndim().min(all.len()));
    unused.iter().all(|v| *v == 0) && ds.linear(used) == Some(want)
}

/// Datasets in directory order, advanced to the one whose canonical row range holds row
/// `i`; rows must be visited in increasing order. Needs no scratch.
struct Lockstep<'a> {
    it: DatasetIter<'a, 'static>,
    cur: Option<Dataset<'a>>,
}

impl<'a> Lockstep<'a> {
    fn new(dir: Directory<'a>) -> Self {
        Lockstep {
            it: dir.iter(),
            cur: None,
        }
    }

    /// The dataset owning canonical row `i`, or `None` when the directory runs out.
    fn at(&mut self, i: u64) -> Option<Dataset<'a>> {
        while self
            .cur
            .is_none_or(|d| i >= d.first_canonical_row().saturating_add(d.grid_cells()))
        {
            match self.it.next() {
                Some(Ok(d)) => self.cur = Some(d),
                _ => return None,
            }
        }
        self.cur
    }
}

impl<'a> Rows<'a> {
    fn row_at(&self, i: u64) -> u64 {
        self.ix.row_offset(i)
    }

    /// Whether rows are in canonical order (each row is the grid cell its position says,
    /// every cell is covered) and payloads ascend without overlap: then coverage and
    /// overlap hold without scratch. Reports nothing.
    fn canonical(&self) -> bool {
        let mut datasets = Lockstep::new(self.dir);
        let mut prev_end = self.area.floor;
        for (i, row) in self.ix.rows().iter().enumerate() {
            let i = u64_of(i);
            let Some(ds) = datasets.at(i) else {
                return false;
            };
            if row.dataset_id.get() != u64::from(ds.id().0)
                || !coords_match(&ds, row, i.saturating_sub(ds.first_canonical_row()))
            {
                return false;
            }
            let start = row.payload_offset.get();
            let len = row.stored_byte_len.get();
            if len > 0 {
                match start.checked_add(len) {
                    Some(end) if start >= prev_end && end <= self.area.limit => prev_end = end,
                    _ => return false,
                }
            }
        }
        let total = u64_of(self.ix.rows().len());
        // Every remaining dataset must own no cells.
        let covered = datasets.cur.map_or(0, |d| {
            d.first_canonical_row().saturating_add(d.grid_cells())
        });
        covered == total && datasets.it.all(|d| d.is_ok_and(|d| d.grid_cells() == 0))
    }

    /// Row checks when rows are canonical: datasets advance with rows, so no scratch.
    fn check_lockstep(&self, sink: &mut dyn Sink<Finding>) {
        let mut datasets = Lockstep::new(self.dir);
        for (i, row) in self.ix.rows().iter().enumerate() {
            let i = u64_of(i);
            // Always `Some` once `canonical()` said yes.
            if let Some(ds) = datasets.at(i) {
                check_row(&ds, row, i, self.row_at(i), self.area, sink);
            }
        }
    }

    fn check_with_scratch(&self, scratch: &mut [u64], sink: &mut dyn Sink<Finding>) {
        let rows = self.ix.rows();
        let d = usize::try_from(self.dir.count()).unwrap_or(usize::MAX);
        let needed = d.saturating_mul(2).saturating_add(rows.len());
        let available = scratch.len();
        let (Some(tables), true) = (scratch.get_mut(..needed), needed <= available) else {
            sink.report(&Finding::new(
                Code::VerifyIncomplete,
                Error::new(
                    ErrorKind::Budget {
                        needed: u64_of(needed),
                        available: u64_of(available),
                    },
                    "verify scratch",
                    self.ix.offset(),
                ),
            ));
            return;
        };
        let Some((offsets, rest)) = tables.split_at_mut_checked(d) else {
            return;
        };
        let Some((firsts, work)) = rest.split_at_mut_checked(d) else {
            return;
        };
        for ((o, f), ds) in offsets
            .iter_mut()
            .zip(firsts.iter_mut())
            .zip(self.dir.iter())
        {
            let Ok(ds) = ds else { return };
            *o = ds.offset();
            *f = ds.first_canonical_row();
        }
        let table = Table {
            dir: self.dir,
            offsets,
            firsts,
        };

        // Per-row checks.
        for (i, row) in rows.iter().enumerate() {
            let i = u64_of(i);
            match table.dataset(row.dataset_id.get()) {
                Some(ds) => {
                    check_row(&ds, row, i, self.row_at(i), self.area, sink);
                }
                None => sink.report(
                    &Finding::new(
                        Code::ChunkDataset,
                        Error::new(
                            ErrorKind::OutOfRange {
                                value: row.dataset_id.get(),
                                max: u64::from(self.dir.count()).saturating_sub(1),
                            },
                            "tidx.entry.dataset_id",
                            self.row_at(i).saturating_add(off::row::DATASET_ID),
                        ),
                    )
                    .at_row(i),
                ),
            }
        }

        // Coverage: sort row numbers by global cell position, then look for repeats and gaps.
        for (i, w) in work.iter_mut().enumerate() {
            *w = u64_of(i);
        }
        let pos_of = |i: u64| -> u64 {
            let Some(row) = usize::try_from(i).ok().and_then(|i| rows.get(i)) else {
                return u64::MAX;
            };
            let Some(ds) = table.dataset(row.dataset_id.get()) else {
                return u64::MAX;
            };
            match ds.linear(row.coords().get(..ds.ndim()).unwrap_or(&[])) {
                Some(p) => ds.first_canonical_row().saturating_add(p),
                None => u64::MAX,
            }
        };
        crate::arith::sort_by_key(work, |&i| (pos_of(i), i));
        let total_cells = table.total_cells();
        let mut expected: u64 = 0;
        let mut missing: u64 = 0;
        let mut prev: Option<(u64, u64)> = None;
        for &i in work.iter() {
            let p = pos_of(i);
            if p == u64::MAX {
                break;
            }
            if let Some((pp, first_row)) = prev {
                if pp == p {
                    let ds = table.dataset_at_pos(p);
                    let mut f = Finding::new(
                        Code::ChunkDuplicate,
                        Error::new(
                            ErrorKind::Duplicate {
                                first: self.row_at(first_row),
                            },
                            "tidx.entry.chunk_index",
                            self.row_at(i).saturating_add(off::row::CHUNK_INDEX),
                        ),
                    )
                    .at_row(i);
                    if let Some(ds) = ds {
                        f = f
                            .in_dataset(ds.id().0)
                            .at_coords(ds.delinearize(p.saturating_sub(ds.first_canonical_row())));
                    }
                    sink.report(&f);
                    continue;
                }
            }
            missing = missing.saturating_add(self.report_gap(&table, expected, p, missing, sink));
            expected = p.saturating_add(1);
            prev = Some((p, i));
        }
        missing =
            missing.saturating_add(self.report_gap(&table, expected, total_cells, missing, sink));
        if missing > MISSING_REPORT_CAP {
            sink.report(&Finding::new(
                Code::ChunkMissing,
                Error::new(
                    ErrorKind::Mismatch {
                        expected: total_cells,
                        found: total_cells.saturating_sub(missing),
                    },
                    "tidx.entry_count",
                    self.ix.offset().saturating_add(off::tidx::ENTRY_COUNT),
                ),
            ));
        }

        // Overlap: sort row numbers by payload start and sweep.
        for (i, w) in work.iter_mut().enumerate() {
            *w = u64_of(i);
        }
        let span_of = |i: u64| -> Option<(u64, u64)> {
            let row = usize::try_from(i).ok().and_then(|i| rows.get(i))?;
            let start = row.payload_offset.get();
            let len = row.stored_byte_len.get();
            let end = start.checked_add(len)?;
            (len > 0 && start >= self.area.floor && end <= self.area.limit).then_some((start, end))
        };
        crate::arith::sort_by_key(work, |&i| (span_of(i).map_or(u64::MAX, |s| s.0), i));
        let mut reach: Option<(u64, u64)> = None; // (start, end) of the span reaching furthest
        for &i in work.iter() {
            let Some((start, end)) = span_of(i) else {
                break;
            };
            if let Some((other, reach_end)) = reach {
                if start < reach_end {
                    sink.report(
                        &Finding::new(
                            Code::PayloadOverlap,
                            Error::new(
                                ErrorKind::Overlap { other },
                                "tidx.entry.payload_offset",
                                self.row_at(i).saturating_add(off::row::PAYLOAD_OFFSET),
                            ),
                        )
                        .at_row(i),
                    );
                }
                if end > reach_end {
                    reach = Some((start, end));
                }
            } else {
                reach = Some((start, end));
            }
        }
    }

    /// Reports cells `from .. to` as missing (individually while under the cap) and
    /// returns how many there were.
    fn report_gap(
        &self,
        table: &Table<'_, 'a>,
        from: u64,
        to: u64,
        already: u64,
        sink: &mut dyn Sink<Finding>,
    ) -> u64 {
        let count = to.saturating_sub(from);
        let room = MISSING_REPORT_CAP.saturating_sub(already).min(count);
        let mut p = from;
        for _ in 0..room {
            if let Some(ds) = table.dataset_at_pos(p) {
                sink.report(
                    &Finding::new(
                        Code::ChunkMissing,
                        Error::new(ErrorKind::Missing, "tidx.entries", self.ix.offset()),
                    )
                    .in_dataset(ds.id().0)
                    .at_coords(ds.delinearize(p.saturating_sub(ds.first_canonical_row()))),
                );
            }
            p = p.saturating_add(1);
        }
        count
    }
}

/// Random access to dataset records through a table of their offsets.
struct Table<'t, 'a> {
    dir: Directory<'a>,
    offsets: &'t [u64],
    firsts: &'t [u64],
}

impl<'a> Table<'_, 'a> {
    fn dataset(&self, id: u64) -> Option<Dataset<'a>> {
        let i = usize::try_from(id).ok()?;
        let id32 = u32::try_from(id).ok()?;
        let at = *self.offsets.get(i)?;
        let first = *self.firsts.get(i)?;
        self.dir.record_at(at, DatasetId(id32), first, None).ok()
    }

    fn total_cells(&self) -> u64 {
        let Some(last) = self.offsets.len().checked_sub(1) else {
            return 0;
        };
        self.dataset(u64_of(last)).map_or(0, |d| {
            d.first_canonical_row().saturating_add(d.grid_cells())
        })
    }

    /// The dataset whose canonical row range contains global position `pos`.
    fn dataset_at_pos(&self, pos: u64) -> Option<Dataset<'a>> {
        let i = self.firsts.partition_point(|f| *f <= pos).checked_sub(1)?;
        self.dataset(u64_of(i))
    }
}
