#!/bin/sh
# Runs the kernel in QEMU virt (8 CPUs; aarch64 with a GICv3, or riscv64 under OpenSBI) with
# the given command line, decodes its defmt log and exits with QEMU's exit code (the
# kernel's exit code). `cargo xboot` from the repository root does the same without
# defmt-print.
#
#   ./run.sh "scenario=boot"
#   ./run.sh "scenario=sysbench threads=8 events=1000 maxprime=2000"
#   DET=1 ./run.sh "scenario=sysbench"      # deterministic: single-threaded TCG, icount
#   ARCH=riscv64 ./run.sh "scenario=boot"   # build first: cargo build --release --target riscv64imac-unknown-none-elf
#
# Environment: ARCH (aarch64 or riscv64, default aarch64), KERNEL (default: the release ELF),
# SMP (default 8), TIMEOUT (s, default 120), LOG (raw serial output, default
# /tmp/kernel-shim-$$.bin), DET=1 for icount mode.
set -u
cd "$(dirname "$0")"
ARCH=${ARCH:-aarch64}
case "$ARCH" in
aarch64)
    KERNEL=${KERNEL:-../target/aarch64-unknown-none-softfloat/release/kernel-shim}
    MACHINE="qemu-system-aarch64 -M virt,gic-version=3 -cpu cortex-a57 -semihosting -nic none"
    ;;
riscv64)
    KERNEL=${KERNEL:-../target/riscv64imac-unknown-none-elf/release/kernel-shim}
    MACHINE="qemu-system-riscv64 -M virt -bios default"
    ;;
*)
    echo "run.sh: ARCH must be aarch64 or riscv64" >&2
    exit 2
    ;;
esac
SMP=${SMP:-8}
TIMEOUT=${TIMEOUT:-120}
LOG=${LOG:-/tmp/kernel-shim-$$.bin}
ARGS=${1:-scenario=boot}
ACCEL=""
if [ "${DET:-0}" = 1 ]; then
    ACCEL="-accel tcg,thread=single -icount shift=0,sleep=off"
fi
rm -f "$LOG"
# shellcheck disable=SC2086
timeout "$TIMEOUT" $MACHINE -smp "$SMP" -m 256M \
    -nographic -monitor none -serial "file:$LOG" $ACCEL \
    -kernel "$KERNEL" -append "$ARGS"
code=$?
# The kernel's frames follow its first zero byte (before it: the firmware's text).
first_zero=$(LC_ALL=C grep -obUaP '\x00' "$LOG" | head -n 1 | cut -d: -f1)
tail -c +$((${first_zero:-0} + 2)) "$LOG" | defmt-print --show-skipped-frames -e "$KERNEL"
echo "qemu exit code: $code"
exit $code
