#!/usr/bin/env bash
# One short call on a lent GPU machine (its lease is minutes): build with CUDA for the GPU
# present, the gpu-marked tests, the out-of-core tests, the GPU tree lists against the CPU
# tree at N = 1e7, then the out-of-core step against the in-core one at N = 1e7 on that
# host's disk and in its RAM (a second machine for issue 10's ratio). Each stage has its own
# time limit, so a slow one cannot eat the rest; everything lands in ${OUT:-gpu-out}/.
#   bash benchmarks/gpu/lease_check.sh          (from the repository root)
set -uo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/gpu/setup.sh
stamp start
describe_machine machine.txt
{ free -g | head -2; df -h /tmp /dev/shm; findmnt -T /tmp; } 2>&1 | tee -a "$out/machine.txt"

stamp build
build_with_cuda 300

stamp gpu tests
timeout 150 python3 -m pytest -q -rfs -m gpu -p no:cacheprovider 2>&1 | tee "$out/pytest_gpu.txt" | tail -6
stamp out-of-core tests
timeout 90 python3 -m pytest -q -rf -n 8 -p no:cacheprovider tests/test_store.py tests/test_ooc_tree.py \
  tests/test_ooc_simulation.py tests/test_curve_order.py 2>&1 | tee "$out/pytest_ooc.txt" | tail -6

stamp tree lists, GPU against CPU
timeout 150 gravpipe bench tree --backend cuda --sizes 10000000 --repeat 2 --json "$out/tree_cuda.json" \
  2>&1 | tee "$out/tree_cuda.txt" | tail -12

for where in disk shm; do
  dir=/tmp/gp-ooc; [ $where = shm ] && dir=/dev/shm/gp-ooc
  mkdir -p $dir
  stamp "out of core against in core, N = 1e7, 4 threads, scratch $dir"
  timeout 150 gravpipe bench ooc ratio -n 10000000 --threads 4 --repeat 2 --scratch $dir \
    --json "$out/ooc_ratio_$where.json" 2>&1 | tee "$out/ooc_ratio_$where.txt" | tail -14
  rm -rf $dir
done
stamp done
# one archive back (the device tool returns at most 8 files)
tar czf /tmp/lease_results.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/lease_results.tgz "$out/lease_results.tgz"
