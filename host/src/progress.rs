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
