//! How long a NetCDF-3 file must be, from its header (the classic formats: `CDF\x01`,
//! 64-bit offset `CDF\x02`, CDF-5 `CDF\x05`; the layout is the NetCDF classic format
//! specification's). libnetcdf reads a variable of such a file cut short inside its data
//! as stale bytes or zeros, without an error, so `convert` checks the file's length
//! against the end its header gives the data before it reads any.

/// The fewest bytes the data of the NetCDF-3 file whose first bytes are `h` needs: the
/// end of each non-record variable (`begin` plus its elements), and of each record
/// variable's part of the last record. A record holds every record variable's part,
/// each padded to 4 bytes, except that the one record variable of a file with only one
/// is not padded (the format's rule, which libnetcdf reads by). `None` when `h` is not a
/// NetCDF-3 header that reads to its end: then nothing is checked.
pub(crate) fn data_end(h: &[u8]) -> Option<u64> {
    let version = match h.get(..4)? {
        [b'C', b'D', b'F', v @ (1 | 2 | 5)] => *v,
        _ => return None,
    };
    let mut c = Cursor {
        h,
        at: 4,
        wide: version == 5,
    };
    let numrecs = c.count()?;
    let streaming = numrecs
        == if c.wide {
            u64::MAX
        } else {
            u64::from(u32::MAX)
        };
    let dims = c.dims()?;
    c.atts()?;
    let vars = c.vars(version != 1)?;
    let size = |v: &Var| -> Option<(bool, u64)> {
        let mut elems = 1u64;
        let mut record = false;
        for (k, id) in v.dims.iter().enumerate() {
            let len = *dims.get(usize::try_from(*id).ok()?)?;
            if len == 0 && k == 0 {
                record = true;
            } else {
                elems = elems.checked_mul(len)?;
            }
        }
        Some((record, elems.checked_mul(v.elem)?))
    };
    let sized: Vec<(u64, bool, u64)> = vars
        .iter()
        .map(|v| size(v).map(|(r, b)| (v.begin, r, b)))
        .collect::<Option<_>>()?;
    let parts: Vec<u64> = sized
        .iter()
        .filter(|(_, r, _)| *r)
        .map(|(_, _, b)| *b)
        .collect();
    let recsize = match parts.as_slice() {
        [one] => *one,
        all => all.iter().try_fold(0u64, |a, b| a.checked_add(pad4(*b)?))?,
    };
    let mut end = 0u64;
    for (begin, record, bytes) in sized {
        let this = if !record {
            begin.checked_add(bytes)?
        } else if streaming || numrecs == 0 {
            continue;
        } else {
            let before = numrecs.saturating_sub(1).checked_mul(recsize)?;
            begin.checked_add(before)?.checked_add(bytes)?
        };
        end = end.max(this);
    }
    Some(end)
}

/// A variable as the end needs it: its dimension ids, bytes an element, and `begin`.
struct Var {
    dims: Vec<u64>,
    elem: u64,
    begin: u64,
}

/// A big-endian reader over the header; `wide`: CDF-5's 8-byte counts.
struct Cursor<'a> {
    h: &'a [u8],
    at: usize,
    wide: bool,
}

impl Cursor<'_> {
    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        let end = self.at.checked_add(N)?;
        let b: [u8; N] = self.h.get(self.at..end)?.try_into().ok()?;
        self.at = end;
        Some(b)
    }

    fn u32(&mut self) -> Option<u32> {
        self.bytes::<4>().map(u32::from_be_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.bytes::<8>().map(u64::from_be_bytes)
    }

    /// A count (`nelems`, a length, `vsize`): 4 bytes, 8 in CDF-5.
    fn count(&mut self) -> Option<u64> {
        if self.wide {
            self.u64()
        } else {
            self.u32().map(u64::from)
        }
    }

    /// Skips `n` bytes padded to a multiple of 4.
    fn skip_padded(&mut self, n: u64) -> Option<()> {
        let padded = pad4(n)?;
        let end = self.at.checked_add(usize::try_from(padded).ok()?)?;
        if end > self.h.len() {
            return None;
        }
        self.at = end;
        Some(())
    }

    fn name(&mut self) -> Option<()> {
        let n = self.count()?;
        self.skip_padded(n)
    }

    /// A list's tag and length: `(tag, n)`, the absent list `(0, 0)`; another tag with
    /// items, or the absent tag with a length, is not a header this reads.
    fn list(&mut self, tag: u32) -> Option<u64> {
        let t = self.u32()?;
        let n = self.count()?;
        match t {
            0 if n == 0 => Some(0),
            _ if t == tag => Some(n),
            _ => None,
        }
    }

    /// The dimension list: each dimension's length (0 for the record dimension).
    fn dims(&mut self) -> Option<Vec<u64>> {
        let n = self.list(0x0A)?;
        let mut out = Vec::new();
        for _ in 0..n {
            self.name()?;
            out.push(self.count()?);
        }
        Some(out)
    }

    /// Skips an attribute list.
    fn atts(&mut self) -> Option<()> {
        let n = self.list(0x0C)?;
        for _ in 0..n {
            self.name()?;
            let t = self.u32()?;
            let k = self.count()?;
            self.skip_padded(k.checked_mul(type_size(t)?)?)?;
        }
        Some(())
    }

    /// The variable list; `offset64`: `begin` is 8 bytes (64-bit offset and CDF-5).
    fn vars(&mut self, offset64: bool) -> Option<Vec<Var>> {
        let n = self.list(0x0B)?;
        let mut out = Vec::new();
        for _ in 0..n {
            self.name()?;
            let nd = self.count()?;
            let mut dims = Vec::new();
            for _ in 0..nd {
                // Each id takes at least 4 bytes, so a count past the header stops here.
                dims.push(self.count()?);
            }
            self.atts()?;
            let elem = type_size(self.u32()?)?;
            let _vsize = self.count()?;
            let begin = if offset64 {
                self.u64()?
            } else {
                u64::from(self.u32()?)
            };
            out.push(Var { dims, elem, begin });
        }
        Some(out)
    }
}

/// `n` rounded up to a multiple of 4 (`None` past `u64`).
fn pad4(n: u64) -> Option<u64> {
    n.checked_next_multiple_of(4)
}

/// Bytes an element of NetCDF type `t` takes (`None`: not a NetCDF-3 type).
fn type_size(t: u32) -> Option<u64> {
    match t {
        1 | 2 | 7 => Some(1),
        3 | 8 => Some(2),
        4 | 5 | 9 => Some(4),
        6 | 10 | 11 => Some(8),
        _ => None,
    }
}
