#!/usr/bin/env bash
# Strong and weak scaling of j-parallel direct summation, Hermite and the treecode at P = 1
# and 2 ranks:
#   bash benchmarks/mpi_scaling.sh [cores] [N] [tree N...] > scaling.jsonl
# Strong: the same N and the same total threads (P=1 x cores threads vs P=2 x cores/2), as
# issue 11 asks; efficiency t(P=1) / t(P=2). Weak: one thread per rank; direct summation
# N_P = N1 sqrt(P) (its work grows as N^2), the treecode N_P = N1 P (N log N: nearly
# linear); efficiency t(P=1, N1) / t(P=2, N_2) (the tree: per-body rates compared).
# The treecode runs at each tree N (default 200000 500000 1000000).
set -euo pipefail
cores=${1:-2}
n=${2:-16384}
shift $(( $# > 2 ? 2 : $# ))
tree_ns=("${@:-200000 500000 1000000}")
here=$(dirname "$0")
weak_n=$(python -c "import math; print(int(round($n * math.sqrt(2))))")
mpiexec -n 1 python "$here/mpi_scaling.py" -n "$n" --threads "$cores"
mpiexec -n 2 python "$here/mpi_scaling.py" -n "$n" --threads $((cores / 2))
mpiexec -n 1 python "$here/mpi_scaling.py" -n "$n" --threads 1
mpiexec -n 2 python "$here/mpi_scaling.py" -n "$weak_n" --threads 1
for tn in ${tree_ns[@]}; do
  mpiexec -n 1 python "$here/mpi_scaling.py" --cases tree -n "$tn" --threads "$cores"
  mpiexec -n 2 python "$here/mpi_scaling.py" --cases tree -n "$tn" --threads $((cores / 2))
  mpiexec -n 1 python "$here/mpi_scaling.py" --cases tree -n "$tn" --threads 1
  mpiexec -n 2 python "$here/mpi_scaling.py" --cases tree -n $((tn * 2)) --threads 1
done
