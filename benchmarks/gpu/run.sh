#!/usr/bin/env bash
# One command on a bare GPU machine: build gravpipe with CUDA, run the whole test suite
# (the gpu-marked tests included), the CUDA pipeline's own check against a float64 direct
# sum, and the GPU benchmarks. Results go to ${OUT:-gpu-out}/.
#   bash benchmarks/gpu/run.sh [quick]      (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$out/gpu.txt"
GRAVPIPE_CUDA=ON python3 -m pip install -q --no-build-isolation --no-deps . > "$out/pip.txt" 2>&1 \
  || { tail -30 "$out/pip.txt"; exit 1; }
python3 -m pytest -q -rf 2>&1 | tee "$out/pytest.txt" | grep -E "FAILED|passed|failed|rror" || true
nvcc -O3 -std=c++17 -arch=native -Xcompiler -fopenmp -Icpp/include benchmarks/gpu/check_cuda_pipeline.cu \
  cpp/src/cuda/cuda_pipeline.cu -o /tmp/check_cuda_pipeline
/tmp/check_cuda_pipeline | tee "$out/check_cuda_pipeline.txt"
[ "${1:-}" = quick ] && exit 0
gravpipe bench transfer --plot "$out/transfer.png" --json "$out/transfer.json" 2>&1 | tail -8
gravpipe bench direct --backend cuda --json "$out/direct_cuda.json" 2>&1
gravpipe bench direct --backend cuda --sizes 1048576 --n-i 1024 --precision mixed 2>&1 | tail -6
gravpipe bench hermite --backend cuda -n 262144 --t-end 0.125 --json "$out/hermite_cuda.json" 2>&1
