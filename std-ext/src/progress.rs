//! How far a long pass has come, for whoever draws it (the binary's progress bar).

/// Told the size of a pass and each piece done, from any thread. The library never draws
/// anything; `()` ignores it all.
pub trait Progress: Sync {
    /// The pass covers `total` bytes (told once, before the first piece).
    fn begin(&self, total: u64) {
        let _ = total;
    }

    /// `bytes` more are done.
    fn advance(&self, bytes: u64) {
        let _ = bytes;
    }

    /// The pass is over (done or stopped).
    fn end(&self) {}
}

impl Progress for () {}
