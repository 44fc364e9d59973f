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
