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
    match div_u64(a, b) {
        // `q * b <= a`: it cannot wrap.
        Some(q) if q.wrapping_mul(b) != a => q.saturating_add(1),
        Some(q) => q,
        None => 0,
    }
}

/// `n / d`, `None` when `d` is 0. On 64-bit targets this is the division instruction;
/// on 32-bit ones a shift-and-subtract loop, because `/` on `u64` there links a general
/// division routine (about 900 bytes of flash) that a bootloader cannot afford for the
/// few divisions by file values on its read path (block group geometry).
pub fn div_u64(n: u64, d: u64) -> Option<u64> {
    if cfg!(target_pointer_width = "64") {
        n.checked_div(d)
    } else {
        long_div(n, d)
    }
}

/// `n / d` by shift and subtract (64 steps, one quotient bit each; `None` when `d` is
/// 0): a dozen instructions of code instead of a division routine.
fn long_div(n: u64, d: u64) -> Option<u64> {
    if d == 0 {
        return None;
    }
    let (mut q, mut r) = (0u64, 0u64);
    for bit in (0..64u32).rev() {
        // The partial remainder, shifted left with the next bit of `n` brought in; the
        // bit shifted out of it (`carry`) makes it at least 2^64, so at least `d`.
        let carry = r >> 63 != 0;
        r = r.wrapping_shl(1) | (n.wrapping_shr(bit) & 1);
        if carry || r >= d {
            r = r.wrapping_sub(d);
            q |= 1u64.wrapping_shl(bit);
        }
    }
    Some(q)
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
    #[test]
    fn long_div_matches_the_division_instruction() {
        let edges = [
            0,
            1,
            2,
            3,
            7,
            4096,
            32769,
            u64::from(u32::MAX),
            1 << 32,
            1 << 63,
        ];
        let mut values: Vec<u64> = edges
            .iter()
            .flat_map(|&e: &u64| [e, e.wrapping_sub(1), e.wrapping_add(1), u64::MAX - e])
            .collect();
        // And a spread of others (xorshift).
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x >> (x % 64));
        }
        for &n in &values {
            for &d in &values {
                assert_eq!(super::long_div(n, d), n.checked_div(d), "{n} / {d}");
            }
        }
        assert_eq!(super::div_u64(u64::MAX, 0), None);
        assert_eq!(super::div_u64(10, 3), Some(3));
    }

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

/// Sorts `v` by `key`, in place: a heapsort, `O(n log n)` comparisons, no allocation,
/// and no panicking path. (The standard library's sorts keep bounds checks and
/// order-violation panics the optimiser cannot remove; the firmware panic-freedom proof
/// would not link with them.) Not stable: equal keys come out in any order. Sorted and
/// reverse-sorted input is recognised in one pass.
pub fn sort_by_key<T, K: Ord>(v: &mut [T], mut key: impl FnMut(&T) -> K) {
    // Input already in order, or in reverse order (a writer that laid rows out
    // backwards), takes one pass: keys can be expensive to derive.
    let mut ascending = true;
    let mut descending = true;
    for w in v.windows(2) {
        if let [a, b] = w {
            let (ka, kb) = (key(a), key(b));
            ascending &= ka <= kb;
            descending &= ka > kb;
            if !ascending && !descending {
                break;
            }
        }
    }
    if ascending {
        return;
    }
    if descending {
        // By hand: the standard `reverse` keeps a panicking path.
        let (mut i, mut j) = (0usize, v.len());
        while i.saturating_add(1) < j {
            j = j.saturating_sub(1);
            swap_ordered(v, i, j);
            i = i.saturating_add(1);
        }
        return;
    }
    let n = v.len();
    let mut start = n / 2;
    while let Some(s) = start.checked_sub(1) {
        start = s;
        sift_down(v, start, n, &mut key);
    }
    let mut end = n;
    while end > 1 {
        end = end.saturating_sub(1);
        swap_ordered(v, 0, end);
        sift_down(v, 0, end, &mut key);
    }
}

/// Restores the max-heap below `root` in `v[..end]`.
fn sift_down<T, K: Ord>(v: &mut [T], mut root: usize, end: usize, key: &mut impl FnMut(&T) -> K) {
    let less =
        |v: &[T], a: usize, b: usize, key: &mut dyn FnMut(&T) -> K| match (v.get(a), v.get(b)) {
            (Some(x), Some(y)) => key(x) < key(y),
            _ => false,
        };
    loop {
        let Some(mut child) = root.checked_mul(2).and_then(|c| c.checked_add(1)) else {
            return;
        };
        if child >= end {
            return;
        }
        let right = child.saturating_add(1);
        if right < end && less(v, child, right, key) {
            child = right;
        }
        if !less(v, root, child, key) {
            return;
        }
        swap_ordered(v, root, child);
        root = child;
    }
}

/// Swaps `v[a]` and `v[b]` for `a < b` (anything else is left alone).
fn swap_ordered<T>(v: &mut [T], a: usize, b: usize) {
    if let Some((lo, hi)) = v.split_at_mut_checked(b) {
        if let (Some(x), Some(y)) = (lo.get_mut(a), hi.first_mut()) {
            core::mem::swap(x, y);
        }
    }
}

/// Copies `src` into the start of `dst`, as much as both hold; returns how much. The
/// lengths are made equal where the optimiser sees it, so no length-mismatch panic
/// path is left behind (as `copy_from_slice` leaves one when it cannot prove them).
pub fn copy_prefix(dst: &mut [u8], src: &[u8]) -> usize {
    // A zipped loop: the optimiser turns it into a `memcpy` of the shorter length, with
    // no length check to fail.
    for (d, s) in dst.iter_mut().zip(src) {
        *d = *s;
    }
    dst.len().min(src.len())
}

#[cfg(test)]
mod sort_tests {
    use super::*;

    #[test]
    fn heapsort_sorts_and_copy_prefix_clips() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for n in [0usize, 1, 2, 3, 7, 64, 1000] {
            let mut v: [u64; 1000] = [0; 1000];
            for x in v.iter_mut().take(n) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *x = seed % 50;
            }
            let v = &mut v[..n];
            let mut want = v.to_vec();
            want.sort_unstable();
            sort_by_key(v, |x| *x);
            assert_eq!(v, &want[..], "n = {n}");
            sort_by_key(v, |x| core::cmp::Reverse(*x));
            want.reverse();
            assert_eq!(v, &want[..], "n = {n}, reversed");
        }
        // Distinct keys in reverse order take the one-pass reversal; sorted ones stay.
        let mut r: [u32; 100] = core::array::from_fn(|i| 1000 - i as u32);
        sort_by_key(&mut r, |x| *x);
        assert!(r.windows(2).all(|w| w[0] < w[1]) && r[0] == 901);
        sort_by_key(&mut r, |x| *x);
        assert!(r.windows(2).all(|w| w[0] < w[1]));
        let mut d = [0u8; 3];
        assert_eq!(copy_prefix(&mut d, b"abcdef"), 3);
        assert_eq!(&d, b"abc");
        assert_eq!(copy_prefix(&mut d, b"z"), 1);
        assert_eq!(&d, b"zbc");
    }
}
