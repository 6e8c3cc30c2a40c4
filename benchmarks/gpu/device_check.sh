#!/usr/bin/env bash
# One short call on the GPU machine (its time there is minutes): build with CUDA for the GPU
# present, the gpu-marked tests, the GPU tree lists against the CPU tree at N = 1e7, the
# out-of-core step against the in-core one at N = 1e7 on that host's disk (a second machine
# for issue 10's ratio), then the out-of-core tests on that host's file system. The stages run
# in that order of priority under one deadline (DEADLINE_SECONDS, default 540): each gets its own
# limit or what is left, whichever is less, so a slow one cannot eat the rest and the results
# are always packed. Everything lands in ${OUT:-gpu-out}/device_results.tgz.
#   bash benchmarks/gpu/device_check.sh          (from the repository root)
set -uo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/gpu/setup.sh
deadline=$((SECONDS + ${DEADLINE_SECONDS:-540}))
# seconds a stage may run: its own limit $1, or what is left before the deadline
allow() { local left=$((deadline - SECONDS)); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }

stamp start
describe_machine machine.txt
{ free -g | head -2; df -h /tmp /dev/shm; findmnt -T /tmp; } 2>&1 | tee -a "$out/machine.txt"

stamp build
build_with_cuda "$(allow 240)"

stamp gpu tests
timeout "$(allow 150)" python3 -m pytest -q -rfs -m gpu -p no:cacheprovider 2>&1 | tee "$out/pytest_gpu.txt" | tail -6

stamp tree lists, GPU against CPU
timeout "$(allow 150)" gravpipe bench tree --backend cuda --sizes 10000000 --repeat 2 --json "$out/tree_cuda.json" \
  2>&1 | tee "$out/tree_cuda.txt" | tail -12

dir=/tmp/gp-ooc
mkdir -p $dir
stamp "out of core against in core, N = 1e7, 4 threads, scratch $dir"
timeout "$(allow 200)" gravpipe bench ooc ratio -n 10000000 --threads 4 --repeat 3 --scratch $dir \
  --json "$out/ooc_ratio_disk.json" 2>&1 | tee "$out/ooc_ratio_disk.txt" | tail -14
rm -rf $dir

if [ $((deadline - SECONDS)) -gt 40 ]; then
  stamp out-of-core tests
  timeout "$(allow 120)" python3 -m pytest -q -rf -n 8 -p no:cacheprovider tests/test_store.py tests/test_ooc_tree.py \
    tests/test_ooc_simulation.py tests/test_curve_order.py 2>&1 | tee "$out/pytest_ooc.txt" | tail -6
fi
stamp done
# one archive back (the device tool returns at most 8 files)
tar czf /tmp/device_results.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/device_results.tgz "$out/device_results.tgz"
