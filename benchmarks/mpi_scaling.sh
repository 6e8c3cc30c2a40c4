#!/usr/bin/env bash
# Strong and weak scaling of j-parallel direct summation and Hermite at P = 1 and 2 ranks:
#   bash benchmarks/mpi_scaling.sh [cores] [N] > scaling.jsonl
# Strong: the same N and the same total threads (P=1 x cores threads vs P=2 x cores/2), as
# issue 11 asks; efficiency t(P=1) / t(P=2). Weak: one thread per rank, N_P = N1 sqrt(P)
# (direct summation's work grows as N^2), efficiency t(P=1, N1) / t(P=2, N_2).
set -euo pipefail
cores=${1:-2}
n=${2:-16384}
here=$(dirname "$0")
weak_n=$(python -c "import math; print(int(round($n * math.sqrt(2))))")
mpiexec -n 1 python "$here/mpi_scaling.py" -n "$n" --threads "$cores"
mpiexec -n 2 python "$here/mpi_scaling.py" -n "$n" --threads $((cores / 2))
mpiexec -n 1 python "$here/mpi_scaling.py" -n "$n" --threads 1
mpiexec -n 2 python "$here/mpi_scaling.py" -n "$weak_n" --threads 1
