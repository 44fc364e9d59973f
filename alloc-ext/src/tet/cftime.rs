//! CF time coordinates: integers counting a unit since an epoch, as CF (and xarray's
//! NetCDF and Zarr writers) encode `datetime64` (`units = "seconds since 1970-01-01"`,
//! `calendar = "proleptic_gregorian"`).
//!
//! Dates are read and written in ISO 8601 (`2024-03-01`, `2024-03-01T06:30:00`,
//! `2024-03-01 06:30:00.5Z`) on the proleptic Gregorian calendar, which CF's `standard`
//! and `gregorian` calendars equal after 1582-10-15; other calendars (`noleap`,
//! `360_day`, ...) are refused by name. Instants are nanoseconds since
//! 1970-01-01T00:00:00 as `i128`, so every `i64` count of every unit fits.

use alloc::format;
use alloc::string::{String, ToString};

use crate::tet::meta::Bound;

/// A unit of a CF time coordinate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// `days`.
    Days,
    /// `hours`.
    Hours,
    /// `minutes`.
    Minutes,
    /// `seconds`.
    Seconds,
    /// `milliseconds`.
    Milliseconds,
    /// `microseconds`.
    Microseconds,
    /// `nanoseconds`.
    Nanoseconds,
}

impl Unit {
    /// Nanoseconds in one unit.
    pub fn nanos(self) -> i128 {
        match self {
            Unit::Days => 86_400_000_000_000,
            Unit::Hours => 3_600_000_000_000,
            Unit::Minutes => 60_000_000_000,
            Unit::Seconds => 1_000_000_000,
            Unit::Milliseconds => 1_000_000,
            Unit::Microseconds => 1_000,
            Unit::Nanoseconds => 1,
        }
    }

    /// The CF name (`seconds`).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Days => "days",
            Unit::Hours => "hours",
            Unit::Minutes => "minutes",
            Unit::Seconds => "seconds",
            Unit::Milliseconds => "milliseconds",
            Unit::Microseconds => "microseconds",
            Unit::Nanoseconds => "nanoseconds",
        }
    }

    /// The unit of a CF units word (`days`, `day`, `d`, `hours`, `h`, `seconds`, `s`, ...;
    /// UDUNITS' singular and short forms too).
    pub fn parse(word: &str) -> Option<Unit> {
        Some(match word.to_ascii_lowercase().as_str() {
            "days" | "day" | "d" => Unit::Days,
            "hours" | "hour" | "hr" | "h" => Unit::Hours,
            "minutes" | "minute" | "min" => Unit::Minutes,
            "seconds" | "second" | "sec" | "secs" | "s" => Unit::Seconds,
            "milliseconds" | "millisecond" | "msec" | "ms" => Unit::Milliseconds,
            "microseconds" | "microsecond" | "usec" | "us" => Unit::Microseconds,
            "nanoseconds" | "nanosecond" | "nsec" | "ns" => Unit::Nanoseconds,
            _ => return None,
        })
    }

    /// The unit of a NumPy `datetime64`/`timedelta64` code (`D`, `h`, `m`, `s`, `ms`,
    /// `us`, `ns`); the others (`Y`, `M`, `W`, `ps`, ...) have no CF unit of fixed
    /// length here.
    pub fn from_numpy(code: &str) -> Option<Unit> {
        Some(match code {
            "D" => Unit::Days,
            "h" => Unit::Hours,
            "m" => Unit::Minutes,
            "s" => Unit::Seconds,
            "ms" => Unit::Milliseconds,
            "us" => Unit::Microseconds,
            "ns" => Unit::Nanoseconds,
            _ => return None,
        })
    }
}

/// The `units` of a CF time coordinate: a unit counted since an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeUnits {
    /// The unit counted.
    pub unit: Unit,
    /// The epoch, in nanoseconds since 1970-01-01T00:00:00.
    pub epoch: i128,
    /// The first instant read here: 1582-10-15 for CF's `standard` and `gregorian`
    /// calendars (and no calendar, CF's default), which are Julian before it; `None`
    /// for `proleptic_gregorian`.
    pub valid_from: Option<i128>,
}

/// 1582-10-15T00:00:00, the first Gregorian day, in nanoseconds since 1970.
const GREGORIAN_START: i128 = -12_219_292_800 * 1_000_000_000;

impl TimeUnits {
    /// Whether `at` (and the epoch) fall where this calendar's dates are Gregorian.
    fn readable(&self, at: i128) -> bool {
        self.valid_from.is_none_or(|g| at >= g && self.epoch >= g)
    }
}

/// The calendars whose dates are the proleptic Gregorian ones (CF's `standard` and
/// `gregorian` differ from it only before 1582-10-15).
fn gregorian(calendar: &str) -> bool {
    matches!(
        calendar.to_ascii_lowercase().as_str(),
        "standard" | "gregorian" | "proleptic_gregorian"
    )
}

/// The time units of a coordinate whose attrs give `units` (and `calendar`):
/// `Ok(None)` when `units` is not of the form `UNIT since DATE`, `Err` when it is but
/// the unit, date or calendar cannot be read here.
pub fn parse_units(units: &str, calendar: Option<&str>) -> Result<Option<TimeUnits>, String> {
    let Some((word, date)) = units.split_once(" since ") else {
        return Ok(None);
    };
    let unit = Unit::parse(word.trim())
        .ok_or_else(|| format!("units {units:?}: {:?} is not a time unit", word.trim()))?;
    if let Some(c) = calendar.filter(|c| !gregorian(c)) {
        return Err(format!(
            "calendar {c:?} is not read here (standard, gregorian and proleptic_gregorian are)"
        ));
    }
    let epoch = parse_instant(date.trim()).map_err(|e| format!("units {units:?}: {e}"))?;
    let proleptic = calendar.is_some_and(|c| c.eq_ignore_ascii_case("proleptic_gregorian"));
    Ok(Some(TimeUnits {
        unit,
        epoch,
        valid_from: (!proleptic).then_some(GREGORIAN_START),
    }))
}

/// Digits of `s` as a number, when `s` is all ASCII digits (at least one).
fn digits(s: &str) -> Option<i128> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse::<i128>().ok())
        .flatten()
}

/// Days from 1970-01-01 to `y`-`m`-`d` (proleptic Gregorian).
fn days_from_civil(y: i128, m: i128, d: i128) -> Option<i128> {
    // Years counted from March, so the leap day ends a year; 400-year eras of 146,097
    // days.
    let y = if m <= 2 { y.checked_sub(1)? } else { y };
    let era = y.checked_div_euclid(400)?;
    let yoe = y.checked_sub(era.checked_mul(400)?)?;
    let mp = if m > 2 {
        m.checked_sub(3)?
    } else {
        m.checked_add(9)?
    };
    let doy = mp
        .checked_mul(153)?
        .checked_add(2)?
        .checked_div(5)?
        .checked_add(d)?
        .checked_sub(1)?;
    let doe = yoe
        .checked_mul(365)?
        .checked_add(yoe.checked_div(4)?)?
        .checked_sub(yoe.checked_div(100)?)?
        .checked_add(doy)?;
    era.checked_mul(146_097)?
        .checked_add(doe)?
        .checked_sub(719_468)
}

/// The date `(y, m, d)` of `z` days from 1970-01-01 (proleptic Gregorian).
fn civil_from_days(z: i128) -> Option<(i128, i128, i128)> {
    let z = z.checked_add(719_468)?;
    let era = z.checked_div_euclid(146_097)?;
    let doe = z.checked_sub(era.checked_mul(146_097)?)?;
    let yoe = doe
        .checked_sub(doe.checked_div(1460)?)?
        .checked_add(doe.checked_div(36_524)?)?
        .checked_sub(doe.checked_div(146_096)?)?
        .checked_div(365)?;
    let doy = doe.checked_sub(
        yoe.checked_mul(365)?
            .checked_add(yoe.checked_div(4)?)?
            .checked_sub(yoe.checked_div(100)?)?,
    )?;
    let mp = doy.checked_mul(5)?.checked_add(2)?.checked_div(153)?;
    let d = doy
        .checked_sub(mp.checked_mul(153)?.checked_add(2)?.checked_div(5)?)?
        .checked_add(1)?;
    let m = if mp < 10 {
        mp.checked_add(3)?
    } else {
        mp.checked_sub(9)?
    };
    let y = yoe.checked_add(era.checked_mul(400)?)?;
    let y = if m <= 2 { y.checked_add(1)? } else { y };
    Some((y, m, d))
}

fn days_in_month(y: i128, m: i128) -> i128 {
    let leap = y.checked_rem_euclid(4) == Some(0)
        && (y.checked_rem_euclid(100) != Some(0) || y.checked_rem_euclid(400) == Some(0));
    match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// An ISO 8601 date or date and time (`2024-03-01`, `2024-03-01T06:30`,
/// `2024-03-01 06:30:00.25`, a trailing `Z`; years 1 to 9999), as nanoseconds since
/// 1970-01-01T00:00:00.
pub fn parse_instant(text: &str) -> Result<i128, String> {
    let bad = || format!("{text:?} is not a date (YYYY-MM-DD, or YYYY-MM-DDTHH:MM:SS)");
    let t = text.trim();
    let t = t.strip_suffix('Z').unwrap_or(t);
    let (date, time) = match t.split_once(['T', ' ']) {
        Some((d, tm)) => (d, Some(tm.trim())),
        None => (t, None),
    };
    let mut parts = date.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let (y, m, d) = match (digits(y), digits(m), digits(d)) {
        (Some(y), Some(m), Some(d)) => (y, m, d),
        _ => return Err(bad()),
    };
    if !(1..=9999).contains(&y) || !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return Err(format!("{text:?} is not a date of the calendar"));
    }
    let mut ns: i128 = 0;
    if let Some(tm) = time.filter(|tm| !tm.is_empty()) {
        let mut f = tm.split(':');
        let h = f.next().and_then(digits);
        let mi = f.next().map_or(Some(0), digits);
        let (sec, frac) = match f.next() {
            None => (Some(0), ""),
            Some(s) => match s.split_once('.') {
                Some((w, fr)) => (digits(w), fr),
                None => (digits(s), ""),
            },
        };
        let (Some(h), Some(mi), Some(sec), None) = (h, mi, sec, f.next()) else {
            return Err(bad());
        };
        if h > 23 || mi > 59 || sec > 59 || frac.len() > 9 {
            return Err(format!("{text:?} is not a time of day"));
        }
        let mut nanos: i128 = 0;
        if !frac.is_empty() {
            let n = digits(frac).ok_or_else(bad)?;
            let scale =
                10i128.checked_pow(u32::try_from(9usize.saturating_sub(frac.len())).unwrap_or(0));
            nanos = scale.and_then(|s| n.checked_mul(s)).ok_or_else(bad)?;
        }
        ns = h
            .checked_mul(3600)
            .and_then(|v| v.checked_add(mi.checked_mul(60)?))
            .and_then(|v| v.checked_add(sec))
            .and_then(|v| v.checked_mul(1_000_000_000))
            .and_then(|v| v.checked_add(nanos))
            .ok_or_else(bad)?;
    }
    days_from_civil(y, m, d)
        .and_then(|days| days.checked_mul(Unit::Days.nanos()))
        .and_then(|v| v.checked_add(ns))
        .ok_or_else(bad)
}

/// A date as a bound on a coordinate in `units`: an integer count when the date falls
/// on one, else the fractional count (which resolves between two values).
pub fn encode(text: &str, units: &TimeUnits) -> Result<Bound, String> {
    let at = parse_instant(text)?;
    if !units.readable(at) {
        return Err(format!(
            "{text:?} or the epoch is before 1582-10-15, where the standard calendar is \
             Julian, which is not read here (calendar proleptic_gregorian is)"
        ));
    }
    let since = at
        .checked_sub(units.epoch)
        .ok_or_else(|| format!("{text:?} is out of range"))?;
    let per = units.unit.nanos();
    match (since.checked_rem(per), since.checked_div(per)) {
        (Some(0), Some(q)) => Ok(Bound::Int(q)),
        _ => {
            // Whole units plus the fraction, in f64 (a bound between two values).
            let q = since.checked_div_euclid(per).unwrap_or(0);
            let r = since.checked_rem_euclid(per).unwrap_or(0);
            Ok(Bound::Float(
                crate::tet::meta::int_f64(q)
                    + crate::tet::meta::int_f64(r) / crate::tet::meta::int_f64(per),
            ))
        }
    }
}

/// A count `value` in `units` as an ISO 8601 date and time (`2024-03-01T06:00:00`, the
/// fraction of a second when there is one), or `None` past years 1 to 9999.
pub fn format(value: i128, units: &TimeUnits) -> Option<String> {
    let ns = value
        .checked_mul(units.unit.nanos())?
        .checked_add(units.epoch)?;
    if !units.readable(ns) {
        return None;
    }
    let day = Unit::Days.nanos();
    let days = ns.checked_div_euclid(day)?;
    let rest = ns.checked_rem_euclid(day)?;
    let (y, m, d) = civil_from_days(days)?;
    if !(1..=9999).contains(&y) {
        return None;
    }
    let secs = rest.checked_div(1_000_000_000)?;
    let frac = rest.checked_rem(1_000_000_000)?;
    let (h, mi, s) = (
        secs.checked_div(3600)?,
        secs.checked_rem(3600)?.checked_div(60)?,
        secs.checked_rem(60)?,
    );
    let mut out = format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
    if frac != 0 {
        let f = format!("{frac:09}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    Some(out)
}

/// The CF `units` of a NumPy `datetime64[code]` (`seconds since 1970-01-01`) or, for a
/// `timedelta64[code]`, the unit alone (`seconds`); `Err` for codes without a fixed
/// length here.
pub fn numpy_units(code: &str, datetime: bool) -> Result<String, String> {
    let unit = Unit::from_numpy(code).ok_or_else(|| {
        format!(
            "{}64[{code}] has no CF unit here (D, h, m, s, ms, us and ns do)",
            if datetime { "datetime" } else { "timedelta" }
        )
    })?;
    Ok(if datetime {
        format!("{} since 1970-01-01", unit.name())
    } else {
        unit.name().to_string()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    #[test]
    fn civil_days_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), Some(0));
        assert_eq!(days_from_civil(2000, 3, 1), Some(11_017));
        assert_eq!(days_from_civil(1969, 12, 31), Some(-1));
        assert_eq!(days_from_civil(1, 1, 1), Some(-719_162));
        for z in (-719_162i128..2_932_896).step_by(997) {
            let (y, m, d) = civil_from_days(z).unwrap();
            assert_eq!(days_from_civil(y, m, d), Some(z), "{y}-{m}-{d}");
        }
    }

    #[test]
    fn instants_and_units() {
        assert_eq!(parse_instant("1970-01-01"), Ok(0));
        assert_eq!(
            parse_instant("2024-01-01T01:00:00Z"),
            Ok((1_704_067_200 + 3600) * 1_000_000_000)
        );
        assert_eq!(
            parse_instant("2024-01-01 00:00:00.25"),
            Ok(1_704_067_200_250_000_000)
        );
        assert_eq!(
            parse_instant("2024-01-01T06:30"),
            Ok((1_704_067_200 + 23_400) * 1_000_000_000)
        );
        assert!(parse_instant("2023-02-29").is_err());
        assert!(parse_instant("2024-13-01").is_err());
        assert!(parse_instant("2024-1-x").is_err());
        assert!(parse_instant("2024-01-01T25:00").is_err());
        let u = parse_units("hours since 2000-01-01 00:00:00", Some("standard"))
            .unwrap()
            .unwrap();
        assert_eq!(u.unit, Unit::Hours);
        assert_eq!(encode("2000-01-02", &u), Ok(Bound::Int(24)));
        assert_eq!(encode("2000-01-01T00:30", &u), Ok(Bound::Float(0.5)));
        assert_eq!(format(24, &u).as_deref(), Some("2000-01-02T00:00:00"));
        assert_eq!(parse_units("K", None), Ok(None));
        assert!(parse_units("days since 2000-01-01", Some("noleap"))
            .unwrap_err()
            .contains("noleap"));
        assert!(parse_units("fortnights since 2000-01-01", None).is_err());
        let s = parse_units("seconds since 1970-01-01", None)
            .unwrap()
            .unwrap();
        assert_eq!(format(-1, &s).as_deref(), Some("1969-12-31T23:59:59"));
        let ns = parse_units("nanoseconds since 1970-01-01", None)
            .unwrap()
            .unwrap();
        assert_eq!(
            format(1_500_000_000, &ns).as_deref(),
            Some("1970-01-01T00:00:01.5")
        );
        assert_eq!(format(i128::from(i64::MIN), &s), None);
        assert_eq!(numpy_units("s", true).unwrap(), "seconds since 1970-01-01");
        assert_eq!(numpy_units("ms", false).unwrap(), "milliseconds");
        assert!(numpy_units("Y", true).is_err());
        // The standard calendar is Julian before 1582-10-15: such dates are refused,
        // not shifted; proleptic_gregorian reads them.
        assert_eq!(parse_instant("1582-10-15"), Ok(GREGORIAN_START));
        let std = parse_units("days since 0001-01-01", Some("standard"))
            .unwrap()
            .unwrap();
        assert_eq!(format(730_121, &std), None);
        assert!(encode("2000-01-01", &std).unwrap_err().contains("Julian"));
        let none = parse_units("days since 1582-10-15", None).unwrap().unwrap();
        assert_eq!(format(0, &none).as_deref(), Some("1582-10-15T00:00:00"));
        assert_eq!(format(-1, &none), None);
        let pro = parse_units("days since 0001-01-01", Some("proleptic_gregorian"))
            .unwrap()
            .unwrap();
        assert_eq!(
            format(730_119, &pro).as_deref(),
            Some("2000-01-01T00:00:00")
        );
    }
}
