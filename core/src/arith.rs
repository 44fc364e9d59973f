//! Checked arithmetic on values read from files. Every helper returns an [`Error`] that
//! names the field and offset instead of overflowing, so call sites stay one line long.

use crate::error::{Error, ErrorKind, Result};

/// `a + b`, or an `Overflow` error about `what` at `offset`.
pub fn add(a: u64, b: u64, what: &'static str, offset: u64) -> Result<u64> {
    a.checked_add(b)
        .ok_or(Error::new(ErrorKind::Overflow, what, offset))
}

/// `a * b`, or an `Overflow` error about `what` at `offset`.
pub fn mul(a: u64, b: u64, what: &'static str, offset: u64) -> Result<u64> {
    a.checked_mul(b)
        .ok_or(Error::new(ErrorKind::Overflow, what, offset))
}

/// Rounds `n` up to a multiple of 8 (the spec's `align8`), or reports overflow.
pub fn align8(n: u64, what: &'static str, offset: u64) -> Result<u64> {
    Ok(add(n, 7, what, offset)? & !7)
}

/// `ceil(a / b)` for `b > 0`; `b == 0` yields 0 (callers reject zero divisors first).
pub fn div_ceil(a: u64, b: u64) -> u64 {
    match (a.checked_div(b), a.checked_rem(b)) {
        (Some(q), Some(r)) if r != 0 => q.saturating_add(1),
        (Some(q), _) => q,
        _ => 0,
    }
}

/// Converts a file value to `usize`; on 32-bit targets large values are an error, not a
/// truncation.
pub fn to_usize(v: u64, what: &'static str, offset: u64) -> Result<usize> {
    usize::try_from(v).map_err(|_| {
        Error::new(
            ErrorKind::OutOfRange {
                value: v,
                max: usize_max_u64(),
            },
            what,
            offset,
        )
    })
}

/// `usize` to `u64` (lossless on every supported target).
pub fn u64_of(v: usize) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

fn usize_max_u64() -> u64 {
    u64_of(usize::MAX)
}

/// The sub-slice `bytes[start .. start + len]` where `start` and `len` are file values, or a
/// `Truncated` error naming `what` at absolute offset `start`.
pub fn slice<'a>(bytes: &'a [u8], start: u64, len: u64, what: &'static str) -> Result<&'a [u8]> {
    let end = add(start, len, what, start)?;
    let available = u64_of(bytes.len());
    if end > available {
        return Err(Error::new(
            ErrorKind::Truncated {
                needed: end,
                available,
            },
            what,
            start,
        ));
    }
    let s = to_usize(start, what, start)?;
    let e = to_usize(end, what, start)?;
    bytes
        .get(s..e)
        .ok_or(Error::new(ErrorKind::Overflow, what, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_is_an_error_naming_the_field() {
        let e = add(u64::MAX, 1, "x.len", 40).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Overflow);
        assert_eq!((e.what, e.offset), ("x.len", 40));
        assert_eq!(
            align8(u64::MAX - 3, "a", 0).unwrap_err().kind,
            ErrorKind::Overflow
        );
        assert_eq!(align8(41, "a", 0).unwrap(), 48);
        assert_eq!(align8(48, "a", 0).unwrap(), 48);
    }

    #[test]
    fn div_ceil_rounds_up_and_tolerates_zero() {
        assert_eq!(div_ceil(3, 2), 2);
        assert_eq!(div_ceil(4, 2), 2);
        assert_eq!(div_ceil(0, 2), 0);
        assert_eq!(div_ceil(5, 0), 0);
        assert_eq!(div_ceil(u64::MAX, 1), u64::MAX);
    }

    #[test]
    fn slice_reports_truncation_with_offsets() {
        let b = [0u8; 10];
        assert_eq!(slice(&b, 2, 8, "s").unwrap().len(), 8);
        let e = slice(&b, 4, 8, "s").unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::Truncated {
                needed: 12,
                available: 10
            }
        );
        assert_eq!(e.offset, 4);
        assert_eq!(
            slice(&b, u64::MAX, 2, "s").unwrap_err().kind,
            ErrorKind::Overflow
        );
    }
}
