//! Lets the linker find the target architecture's `link.x` (in `src/arch/<arch>/`, passed
//! with `-Tlink.x` from `.cargo/config.toml`) and relinks when it changes. The `-T` flags
//! themselves live in the config, not here.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    println!("cargo:rustc-link-search={dir}/src/arch/{arch}");
    println!("cargo:rerun-if-changed=src/arch/{arch}/link.x");
    println!("cargo:rerun-if-changed=build.rs");
}
