#!/bin/bash
# What `kernelkite trace --pid` costs the tracer's own process on a thread pool
# (tests/workloads/c/tpool.c: THREADS threads looping usleep(SLEEP_US) + getppid()):
# its utime + stime over 5 s in the middle of a 12 s trace, as % of one core. With
# several binaries, rounds interleave them on one pool. Needs root and gcc.
#
#   xtask/scripts/trace_cpu_pool.sh THREADS SLEEP_US ROUNDS KERNELKITE [KERNELKITE...]
set -eu
threads=$1 sleep_us=$2 rounds=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $pool 2>/dev/null; rm -rf "$work"' EXIT
gcc -O2 -pthread -o "$work/tpool" "$here/../../tests/workloads/c/tpool.c"
"$work/tpool" "$threads" "$sleep_us" &
pool=$!
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for round in $(seq "$rounds"); do
  for kk in "$@"; do
    "$kk" trace --pid "$pool" --duration 12 -o "$work/bundle.json" >/dev/null 2>&1 &
    tracer=$!
    sleep 5
    t0=$(ticks $tracer) s0=$(date +%s.%N)
    sleep 5
    t1=$(ticks $tracer) s1=$(date +%s.%N)
    # CLK_TCK is 100: ticks per second are % of one core.
    echo "$kk: $threads threads, sleep ${sleep_us} us, round $round: $(echo "($t1 - $t0) / ($s1 - $s0)" | bc -l | cut -c1-5) % of one core"
    wait $tracer
  done
done
