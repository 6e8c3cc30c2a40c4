#!/usr/bin/env bash
# One command on a bare GPU machine (issue 5): build gravpipe, run the tests, then build
# and run the CUDA pipeline's check against a float64 direct sum, and its speed figures.
#   bash benchmarks/gpu/run.sh            (from the repository root; writes to ${OUT:-gpu-out}/)
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
nvidia-smi | tee "$out/nvidia-smi.txt"
GRAVPIPE_CUDA=ON python -m pip install --no-build-isolation --no-deps . 2>&1 | tail -2
python -m pytest -q 2>&1 | tee "$out/pytest.txt" | tail -3
nvcc -O3 -std=c++17 -arch=native -Icpp/include benchmarks/gpu/check_cuda_pipeline.cu \
  cpp/src/cuda/cuda_pipeline.cu -o "$out/check_cuda_pipeline"
"$out/check_cuda_pipeline" 4096 262144 | tee "$out/check_cuda_pipeline.txt"
"$out/check_cuda_pipeline" 1024 1048576 | tee -a "$out/check_cuda_pipeline.txt"
