//! Logging: defmt frames over the PL011 (the global logger is in `arch::logger`). Every
//! frame carries the time in µs and the CPU that logged it. Decode on the host with
//! `defmt-print -e <the kernel ELF>`.

/// Logs one line at level info (`.cargo/config.toml` sets `DEFMT_LOG=info`).
#[macro_export]
macro_rules! kprintln {
    ($($arg:tt)*) => {
        defmt::info!($($arg)*)
    };
}
