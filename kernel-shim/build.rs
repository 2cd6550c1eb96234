//! Lets the linker find `link.x` (passed with `-Tlink.x` from `.cargo/config.toml`) and
//! relinks when it changes. The `-T` flags themselves live in the config, not here.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rustc-link-search={dir}");
    println!("cargo:rerun-if-changed=link.x");
    println!("cargo:rerun-if-changed=build.rs");
}
