# Sourced by the scripts beside it (run.sh, device_check.sh), from the repository root: the
# output folder, a time stamp, the machine's description and the CUDA build for the GPU
# present. Results go to ${OUT:-gpu-out}/.
out="${OUT:-gpu-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
stamp() { echo "== $(date +%T) $*"; }

# the GPU and the host, into $out/$1
describe_machine() {
  { nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
    lscpu | grep -E "Model name|^CPU\(s\)"; } 2>&1 | tee "$out/$1"
}

# pip install with CUDA for the GPU present (at most $1 seconds); gravpipe on PATH after
build_with_cuda() {
  GRAVPIPE_CUDA=ON CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=native" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    timeout "$1" python3 -m pip install -q --no-build-isolation --no-deps . > "$out/pip.txt" 2>&1 \
    || { tail -40 "$out/pip.txt"; exit 1; }
  command -v gravpipe >/dev/null || export PATH="$(dirname "$(python3 -c "import sys; print(sys.executable)")"):$PATH"
  python3 -c "import gravpipe as gp; print('cuda backend:', gp.available_backends()['cuda'])"
}
