#!/bin/sh
# Runs the kernel in QEMU virt (8 CPUs, GICv3) with the given command line, decodes its
# defmt log and exits with QEMU's exit code (the kernel's semihosting exit code).
#
#   ./run.sh "scenario=boot"
#   ./run.sh "scenario=sysbench threads=8 events=1000 maxprime=2000"
#   DET=1 ./run.sh "scenario=sysbench"      # deterministic: single-threaded TCG, icount
#
# Environment: KERNEL (default: the release ELF), SMP (default 8), TIMEOUT (s, default 120),
# LOG (raw defmt stream, default /tmp/kernel-shim-$$.bin), DET=1 for icount mode.
set -u
cd "$(dirname "$0")"
KERNEL=${KERNEL:-../target/aarch64-unknown-none-softfloat/release/kernel-shim}
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
timeout "$TIMEOUT" qemu-system-aarch64 -M virt,gic-version=3 -cpu cortex-a57 -smp "$SMP" -m 256M \
    -nographic -monitor none -serial "file:$LOG" -semihosting -nic none $ACCEL \
    -kernel "$KERNEL" -append "$ARGS"
code=$?
defmt-print --show-skipped-frames -e "$KERNEL" < "$LOG"
echo "qemu exit code: $code"
exit $code
