#!/usr/bin/env bash
# Time ph4 (built by ph4_recipe.sh) on its own Plummer example files: GRAPE-6 calls served by
# libgravpipe_g6 (mixed and double precision, 1 and 2 threads) vs ph4's own CPU force loop.
# Prints one line per run: file, t_end, build, threads, elapsed and user CPU seconds (ph4's
# own elapsed_time and user_time), |E-E0|/|E0| at t_end as ph4 reports it, block steps,
# particle steps. THREADS (default "1 2") picks the thread counts of the g6 runs; RUN_CPU=0
# skips ph4's own CPU build. On a machine shared with other jobs, libgomp's default
# spin-waiting makes 2-thread runs of short blocks many times slower: OMP_WAIT_POLICY=passive.
#
# Usage: bash benchmarks/grape6/bench_ph4.sh WORKDIR "plummer1k.in:1 plummer4k.in:0.5" [extra ph4 args]
set -euo pipefail
WORK=${1:?WORKDIR of ph4_recipe.sh}
CASES=${2:-"plummer1k.in:1 plummer4k.in:0.5"}
shift 2 || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # ph4's main calls MPI_Init
cd "$WORK"
summary() {  # file t build threads logfile
  awk -v f="$1" -v t="$2" -v b="$3" -v th="$4" '
    /^E = / { e = $3; gsub(",", "", e); de = $6; if (e0 == "") e0 = e }
    /^block_steps = / { bs = $3; gsub(",", "", bs); ts = $6 }
    /elapsed_time = / { el = $3; gsub(",", "", el); us = $6 }
    END { printf "%-14s t=%-5s %-12s threads=%s  elapsed %8.2f s  user %8.2f s  dE/E %9.2e  block_steps %s  steps %s\n",
                 f, t, b, th, el, us, (de < 0 ? -de : de) / (e0 < 0 ? -e0 : e0), bs, ts }' "$5"
}
for c in $CASES; do
  f=${c%%:*}; t=${c##*:}
  for th in ${THREADS:-1 2}; do
    OMP_NUM_THREADS=$th GRAVPIPE_G6_PRECISION=mixed ./ph4_g6 -f src/$f -t "$t" -d "$t" "$@" > log_g6_mixed_$th.txt
    summary "$f" "$t" "g6-mixed" "$th" log_g6_mixed_$th.txt
    OMP_NUM_THREADS=$th GRAVPIPE_G6_PRECISION=double ./ph4_g6 -f src/$f -t "$t" -d "$t" "$@" > log_g6_double_$th.txt
    summary "$f" "$t" "g6-double" "$th" log_g6_double_$th.txt
  done
  if [ "${RUN_CPU:-1}" = 1 ]; then
    ./ph4_cpu -f src/$f -t "$t" -d "$t" "$@" > log_cpu.txt
    summary "$f" "$t" "ph4-own-cpu" 1 log_cpu.txt
  fi
done
