//! Lets the linker find the target port's linker script (`src/arch/<port>/link.x`, or for the
//! Cortex-M port the board's `memory.x` that cortex-m-rt's `link.x` includes; `-Tlink.x` comes
//! from `.cargo/config.toml`) and relinks when it changes. The `-T` flags themselves live in
//! the config, not here.
//!
//! The two Cortex-M boards share `target_arch = "arm"` and every other cfg, so the target
//! picks the board: `thumbv8m.main` is the dual Cortex-M33 `mps2-an521` (cfg `board_an521`),
//! any other Arm target the Cortex-M4 `mps2-an386`.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    println!("cargo::rustc-check-cfg=cfg(board_an521)");
    let port = if arch == "arm" {
        let board = if target.starts_with("thumbv8m") { "an521" } else { "an386" };
        if board == "an521" {
            println!("cargo:rustc-cfg=board_an521");
        }
        format!("cortex_m/{board}")
    } else {
        arch
    };
    println!("cargo:rustc-link-search={dir}/src/arch/{port}");
    println!("cargo:rerun-if-changed=src/arch/{port}");
    println!("cargo:rerun-if-changed=build.rs");
}
