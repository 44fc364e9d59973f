//! cortex-m-rt's `device` feature has its linker script include `device.x`, where a
//! device crate names its interrupt handlers. The examples handle no interrupt: an
//! empty one, where the linker finds it.

fn main() {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(
        out.join("device.x"),
        "/* No interrupt handlers: see lib.rs. */\n",
    )
    .expect("write device.x");
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=build.rs");
}
