#!/bin/busybox sh
# The Linux guest's init (PID 1): mounts what tracing needs, prints the sched domains Linux
# built, then runs the job the kernel command line names (`fairsched.job=sysbench`,
# `fairsched.job=rtapp`, or `fairsched.job=script`: the runner's /job.sh) `fairsched.runs`
# times, each with ftrace's sched events on, and prints
# each run's output, rt-app's logs and the trace (gzip, base64) between `@@fairsched` markers
# for the host's parser. Then it powers the machine off.
/bin/busybox --install -s /bin
export PATH=/bin LD_LIBRARY_PATH=/lib
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing
# Kernel messages off the console while machine-readable output is printed.
echo 1 > /proc/sys/kernel/printk

job=none runs=1 threads=8 events=1000
for word in $(cat /proc/cmdline); do
    case "$word" in
        fairsched.job=*) job="${word#*=}" ;;
        fairsched.runs=*) runs="${word#*=}" ;;
        fairsched.threads=*) threads="${word#*=}" ;;
        fairsched.events=*) events="${word#*=}" ;;
    esac
done

echo "@@fairsched linux $(uname -r) cpus $(grep -c ^processor /proc/cpuinfo)"
for d in /sys/kernel/debug/sched/domains/cpu*/domain*; do
    [ -d "$d" ] && echo "@@fairsched domain ${d#/sys/kernel/debug/sched/domains/} $(cat "$d/name") $(cat "$d/flags")"
done

T=/sys/kernel/tracing
echo 0 > $T/tracing_on
echo mono > $T/trace_clock
# 48 MiB of ring buffer in all (of the machine's 256 MiB), and room for every task's name.
ncpu=$(grep -c ^processor /proc/cpuinfo)
echo $((49152 / ncpu)) > $T/buffer_size_kb
echo 8192 > $T/saved_cmdlines_size
for e in sched_wakeup_new sched_waking sched_wakeup sched_switch sched_migrate_task; do
    echo 1 > $T/events/sched/$e/enable
done

i=0
while [ "$i" -lt "$runs" ]; do
    echo > $T/trace
    echo "@@fairsched run $i"
    # (A script's measurements are its own: it runs untraced.)
    [ "$job" = script ] || echo 1 > $T/tracing_on
    case "$job" in
        sysbench) sysbench cpu --threads="$threads" --events="$events" --time=0 --percentile=0 run > /tmp/out 2>&1 ;;
        rtapp) rt-app /workload.json > /tmp/out 2>&1 ;;
        script) sh /job.sh > /tmp/out 2>&1 ;;
    esac
    status=$?
    echo 0 > $T/tracing_on
    # The program's output after the run: the console is not written while it runs.
    if [ "$job" = sysbench ] || [ "$job" = script ]; then cat /tmp/out; fi
    echo "@@fairsched status $status"
    if [ "$job" = rtapp ]; then
        for log in /tmp/rt-app-*.log; do
            [ -f "$log" ] && echo "@@fairsched log ${log#/tmp/}" && cat "$log" && rm "$log"
        done
        echo "@@fairsched output"
        tail -n 3 /tmp/out
    fi
    # The trace gzip-compressed and in base64: far less text through the emulated UART.
    echo "@@fairsched trace $i"
    [ "$job" = script ] || gzip -c $T/trace | base64
    echo "@@fairsched end $i"
    i=$((i + 1))
done
echo "@@fairsched done"
poweroff -f
