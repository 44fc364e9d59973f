//! Volume UUIDs as people write them (`8-4-4-4-12` hex digits), and fresh random ones.

use std::io::Read;

/// `0f1e2d3c-...` for 16 bytes.
pub fn format(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    let part = |a: usize, b: usize| hex.get(a..b).unwrap_or("");
    format!(
        "{}-{}-{}-{}-{}",
        part(0, 8),
        part(8, 12),
        part(12, 16),
        part(16, 20),
        part(20, 32)
    )
}

/// Parses `8-4-4-4-12` hex digits, or 32 hex digits without dashes.
pub fn parse(s: &str) -> Result<[u8; 16], String> {
    let digits: Vec<u8> = s.bytes().filter(|b| *b != b'-').collect();
    let dashes_ok = s.len() == 32 || s.len() == 36;
    let value = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|v| u8::try_from(v).ok())
    };
    let mut out = [0u8; 16];
    if digits.len() == 32 && dashes_ok {
        for (o, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
            match (
                pair.first().and_then(|c| value(*c)),
                pair.get(1).and_then(|c| value(*c)),
            ) {
                (Some(h), Some(l)) => *o = h.saturating_mul(16).saturating_add(l),
                _ => return Err(format!("not a UUID (hex digits expected): '{s}'")),
            }
        }
        return Ok(out);
    }
    Err(format!(
        "not a UUID: '{s}' (write 32 hex digits, as 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0)"
    ))
}

/// A random (version 4) UUID from the kernel's generator.
pub fn random() -> std::io::Result<[u8; 16]> {
    let mut u = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut u)?;
    if let Some(b) = u.get_mut(6) {
        *b = (*b & 0x0f) | 0x40;
    }
    if let Some(b) = u.get_mut(8) {
        *b = (*b & 0x3f) | 0x80;
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip_and_refusals() {
        let u = super::parse("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").unwrap();
        assert_eq!(u[0], 0x0f);
        assert_eq!(u[15], 0xf0);
        assert_eq!(super::format(&u), "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
        assert_eq!(super::parse("0f1e2d3c4b5a69788796a5b4c3d2e1f0").unwrap(), u);
        for bad in [
            "",
            "xyz",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg",
        ] {
            assert!(super::parse(bad).is_err(), "{bad}");
        }
        let r = super::random().unwrap();
        assert_eq!(r[6] >> 4, 4);
        assert_ne!(super::random().unwrap(), r);
    }
}
