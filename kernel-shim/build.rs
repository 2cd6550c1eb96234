//! Lets the linker find the target port's linker script (`src/arch/<port>/link.x`, or for the
//! Cortex-M port the `memory.x` that cortex-m-rt's `link.x` includes; `-Tlink.x` comes from
//! `.cargo/config.toml`) and relinks when it changes. The `-T` flags
//! themselves live in the config, not here.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    // The 32-bit Arm port is the Cortex-M one: cortex-m-rt's link.x includes its memory.x.
    let port = if arch == "arm" { "cortex_m" } else { arch.as_str() };
    println!("cargo:rustc-link-search={dir}/src/arch/{port}");
    println!("cargo:rerun-if-changed=src/arch/{port}");
    println!("cargo:rerun-if-changed=build.rs");
}
