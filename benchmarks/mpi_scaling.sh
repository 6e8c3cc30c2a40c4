#!/usr/bin/env bash
# Strong and weak scaling of j-parallel direct summation and Hermite at P = 1 and 2 ranks
# with the same total threads (P x threads per rank = cores), as issue 11 asks:
#   bash benchmarks/mpi_scaling.sh [cores] [N] > scaling.jsonl
# Parallel efficiency = t(P=1) / t(P) for strong scaling (same N), and t(P=1, N1) / t(P, N_P)
# for weak scaling with N_P = N1 sqrt(P) (direct summation's work grows as N^2).
set -euo pipefail
cores=${1:-2}
n=${2:-16384}
here=$(dirname "$0")
weak_n=$(python -c "import math; print(int(round($n * math.sqrt(2))))")
mpiexec -n 1 python "$here/mpi_scaling.py" -n "$n" --threads "$cores"
mpiexec -n 2 python "$here/mpi_scaling.py" -n "$n" --threads $((cores / 2))
mpiexec -n 2 python "$here/mpi_scaling.py" -n "$weak_n" --threads $((cores / 2))
