//! Progress bars on standard error, drawn only for a person at a terminal.

/// A progress bar on standard error (elapsed, bytes, throughput, ETA) when `wanted` and
/// standard error is a terminal; `None` otherwise.
pub fn progress_bar(wanted: bool, total: u64) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !wanted || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    Some(bar)
}

/// A progress bar for a pass of the library ([`tet_std::Progress`]): drawn when the pass
/// begins, when `wanted` and standard error is a terminal ([`progress_bar`]).
pub struct Bar {
    wanted: bool,
    bar: std::sync::OnceLock<Option<indicatif::ProgressBar>>,
}

impl Bar {
    /// A bar drawn only if `wanted`.
    pub fn new(wanted: bool) -> Bar {
        Bar {
            wanted,
            bar: std::sync::OnceLock::new(),
        }
    }
}

impl tet_std::Progress for Bar {
    fn begin(&self, total: u64) {
        let _ = self.bar.set(progress_bar(self.wanted, total));
    }

    fn advance(&self, bytes: u64) {
        if let Some(Some(b)) = self.bar.get() {
            b.inc(bytes);
        }
    }

    fn end(&self) {
        if let Some(Some(b)) = self.bar.get() {
            b.finish_and_clear();
        }
    }
}
