#!/usr/bin/env bash
# One command on a bare GPU machine: build gravpipe with CUDA (for the GPU present only),
# run the gpu-marked tests, then the whole test suite (over the machine's cores when
# pytest-xdist is there; failures rerun alone so that a parallel-only failure is told apart),
# the CUDA pipeline's own check against a float64 direct sum, and the GPU benchmarks.
# Results go to ${OUT:-gpu-out}/; a summary is printed last.
#   bash benchmarks/gpu/run.sh [quick]      (from the repository root)
set -uo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/gpu/setup.sh
stamp start
describe_machine gpu.txt

stamp build
build_with_cuda 1200

# the check program: the pipeline alone, with its own float64 reference
stamp check program
nvcc -O3 -std=c++17 -arch=native -Xcompiler -fopenmp -Icpp/include benchmarks/gpu/check_cuda_pipeline.cu \
  cpp/src/cuda/cuda_pipeline.cu cpp/src/common/force_request_check.cpp cpp/src/common/format_number.cpp \
  -o /tmp/check_cuda_pipeline && /tmp/check_cuda_pipeline > "$out/check_cuda_pipeline.txt" 2>&1
echo "check program rc=$?"; tail -25 "$out/check_cuda_pipeline.txt"

stamp memcheck of the tree lists
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -c "import gravpipe as gp; \
p = gp.ic.plummer(3000, seed=1); print(gp.Tree(p.pos, p.mass, 1/64, backend='cuda', threads=2).forces()[0][0])" \
  2>&1 | tail -3
stamp gpu tests
python3 -m pytest -q -rfs -m gpu -p no:cacheprovider 2>&1 | tee "$out/pytest_gpu.txt" | tail -15
stamp whole suite
parallel=()
python3 -c "import xdist" 2>/dev/null && parallel=(-n "$(nproc)")
timeout 180 python3 -m pytest -q -rf "${parallel[@]}" > "$out/pytest.txt" 2>&1
tail -3 "$out/pytest.txt"
if grep -q "^FAILED" "$out/pytest.txt"; then
  stamp rerun failures alone
  grep "^FAILED" "$out/pytest.txt" | sed 's/^FAILED \([^ ]*\).*/\1/' | sort -u | head -40 > /tmp/failed.txt
  timeout 120 python3 -m pytest -q -rf $(cat /tmp/failed.txt) 2>&1 | tee "$out/pytest_rerun.txt" | tail -30
fi
if [ "${1:-}" != quick ]; then
stamp benchmarks
{
  gravpipe bench transfer --plot "$out/transfer.png" --json "$out/transfer.json" 2>&1 | tail -8
  gravpipe bench direct --backend cuda --json "$out/direct_cuda.json" 2>&1
  gravpipe bench direct --backend cuda --sizes 1048576 --n-i 1024 --precision mixed 2>&1 | tail -6
  gravpipe bench hermite --backend cuda -n 262144 --t-end 0.125 --json "$out/hermite_cuda.json" 2>&1
  gravpipe bench tree --backend cuda --sizes 1000000 10000000 --json "$out/tree_cuda.json" 2>&1
} | tee "$out/bench.txt"
stamp done
fi
# one archive back (the device tool returns at most 8 files)
tar czf /tmp/gpu_results.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/gpu_results.tgz "$out/gpu_results.tgz"
