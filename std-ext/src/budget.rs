//! Memory budgets: what this machine has.

/// This machine's memory in bytes (`/proc/meminfo`), or 1 GiB when it cannot be read.
pub fn host_ram() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        })
        .unwrap_or(1 << 30)
}

/// Parses a memory budget as `--memory-budget` takes it: bytes (`1048576`), binary units
/// (`512K`, `512M`, `1.5G`, `2T`, or `KiB`/`MiB`/`GiB`/`TiB`: powers of 2^10), decimal
/// units (`512KB`, `512MB`, `1GB`, `2TB`: powers of 10^3), or a percentage of this
/// machine's physical memory (`10%`, `2.5%`), as a file's `memory_budget_percent_bps`
/// is. Fractions are rounded down to a whole byte; the budget must be at least one byte.
pub fn parse_budget(s: &str) -> Result<u64, String> {
    parse_budget_of(s, host_ram())
}

/// [`parse_budget`] with the machine's memory given.
pub fn parse_budget_of(s: &str, ram: u64) -> Result<u64, String> {
    let bad = || {
        format!(
            "invalid memory budget '{s}' (a number of bytes with an optional unit: 512M or \
             512MiB (2^20 bytes), 512MB (10^6), 1.5G, 1GiB, or a percentage of RAM: 10%)"
        )
    };
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let (mul, div): (u128, u128) = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => (1, 1),
        "k" | "kib" => (1 << 10, 1),
        "m" | "mib" => (1 << 20, 1),
        "g" | "gib" => (1 << 30, 1),
        "t" | "tib" => (1 << 40, 1),
        "kb" => (1_000, 1),
        "mb" => (1_000_000, 1),
        "gb" => (1_000_000_000, 1),
        "tb" => (1_000_000_000_000, 1),
        "%" => (u128::from(ram), 100),
        _ => return Err(bad()),
    };
    // The number as an exact fraction: digits / 10^decimals.
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if whole.is_empty() && frac.is_empty() || frac.contains('.') || frac.len() > 9 {
        return Err(bad());
    }
    let digits: u128 = format!("{whole}{frac}").parse().map_err(|_| bad())?;
    let scale = 10u128.pow(u32::try_from(frac.len()).unwrap_or(0));
    if unit.trim() == "%" && digits > scale.saturating_mul(100) {
        return Err(format!(
            "invalid memory budget '{s}': more than 100% of this machine's memory"
        ));
    }
    let bytes = digits
        .checked_mul(mul)
        .and_then(|v| v.checked_div(scale.saturating_mul(div)))
        .and_then(|v| u64::try_from(v).ok())
        .ok_or_else(|| format!("invalid memory budget '{s}': too large"))?;
    if bytes == 0 {
        return Err(format!(
            "invalid memory budget '{s}': must be at least one byte"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_as_people_write_them() {
        let ram = 16u64 << 30;
        for (s, want) in [
            ("1048576", 1 << 20),
            ("512M", 512 << 20),
            ("512MiB", 512 << 20),
            ("512m", 512 << 20),
            ("512MB", 512_000_000),
            ("1.5G", 3 << 29),
            ("1GiB", 1 << 30),
            ("2TB", 2_000_000_000_000),
            ("10%", ram / 10),
            ("2.5%", ram / 40),
            ("100%", ram),
            ("0.5K", 512),
        ] {
            assert_eq!(parse_budget_of(s, ram), Ok(want), "{s}");
        }
        for s in [
            "",
            "M",
            "1.2.3G",
            "12X",
            "-1M",
            "0",
            "0.1",
            "101%",
            "1e6",
            "99999999999T",
        ] {
            assert!(parse_budget_of(s, ram).is_err(), "{s}");
        }
    }
}
