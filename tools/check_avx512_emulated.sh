#!/usr/bin/env bash
# Run the test suite with the AVX-512 kernels on a CPU that has no AVX-512.
#
# The AVX-512 translation units are compiled against a stand-in <immintrin.h> that maps
# every _mm512 intrinsic they use to SIMDe's portable version (built on AVX2+FMA), and the
# CPU check is told AVX-512 is there; auto then picks "avx512", so the whole suite runs it.
# rsqrt14 is given the largest error the hardware may have (0.99 * 2^-14). This checks the
# lane logic (loads, masks, conversions, reductions) and the error bounds, not the real
# instructions' speed. Works on a copy in a temporary folder; the repository is untouched.
#
# Needs SIMDe headers (Debian: apt-get install libsimde-dev). Usage, from the repository:
#   tools/check_avx512_emulated.sh [pytest arguments]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -f /usr/include/simde/x86/avx512.h ] || { echo "SIMDe headers missing (apt-get install libsimde-dev)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/shim" "$work/site"
tar -C "$repo" --exclude=./build --exclude=./.venv --exclude=./.git -cf - . | tar -C "$work/src" -xf -

# Every intrinsic name the AVX-512 wrapper and the CMake probe use, mapped to SIMDe's.
names=$(cat "$repo/cpp/src/pipeline/simd_avx512.hpp" "$repo/CMakeLists.txt" \
        | grep -o '_mm[0-9]*_[a-z0-9_]*' | sort -u | grep -v -x -e _mm512_rsqrt14_ps -e _mm512_cvtps_pd)
{
  cat <<'EOF'
// Stand-in for <immintrin.h> in the AVX-512 files (tools/check_avx512_emulated.sh).
#ifdef GP_EMU_SHIM
#include_next <immintrin.h>  // SIMDe's own include: the real header
#else
#define GP_EMU_SHIM
#include <simde/x86/avx512.h>
#include <cmath>
// What SIMDe 0.7 lacks. rsqrt14 with a relative error of 0.99 * 2^-14, alternating in sign
// over the lanes: the worst the hardware's estimate (< 2^-14) may be.
static inline simde__m512 gp_emu_rsqrt14_ps(simde__m512 x) {
  float in[16], out[16];
  simde_mm512_storeu_ps(in, x);
  for (int k = 0; k < 16; ++k) {
    const double e = (k % 2 ? 1.0 : -1.0) * 0.99 * std::ldexp(1.0, -14);
    out[k] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in[k])) * (1.0 + e));
  }
  return simde_mm512_loadu_ps(out);
}
static inline simde__m512d gp_emu_cvtps_pd(simde__m256 x) {
  float in[8];
  double out[8];
  simde_mm256_storeu_ps(in, x);
  for (int k = 0; k < 8; ++k) out[k] = in[k];
  return simde_mm512_loadu_pd(out);
}
#define _mm512_rsqrt14_ps gp_emu_rsqrt14_ps
#define _mm512_cvtps_pd gp_emu_cvtps_pd
#define __m512 simde__m512
#define __m512d simde__m512d
#define __m512i simde__m512i
#define __mmask16 simde__mmask16
#define __mmask8 simde__mmask8
EOF
  for n in $names; do echo "#define $n simde$n"; done
  echo "#endif"
} > "$work/shim/immintrin.h"

"$python" - "$work/src" "$work/shim" <<'EOF'
import pathlib, sys
src, shim = pathlib.Path(sys.argv[1]), sys.argv[2]
def sub(rel, old, new):
    p = src / rel
    s = p.read_text()
    if s.count(old) != 1:
        sys.exit(f"check_avx512_emulated: {rel} changed; update this script ({old!r})")
    p.write_text(s.replace(old, new))
sub("CMakeLists.txt", "set(GRAVPIPE_AVX512_FLAGS -mavx512f -mavx512dq -mavx512vl -mfma)",
    f"set(GRAVPIPE_AVX512_FLAGS -mavx2 -mfma -I{shim})")
sub("cpp/src/pipeline/cpu_features.cpp", "  return cpu_has_avx2_fma() && __builtin_cpu_supports(\"avx512f\") &&",
    "  return cpu_has_avx2_fma();  // emulated\n  return cpu_has_avx2_fma() && __builtin_cpu_supports(\"avx512f\") &&")
EOF

(cd "$work/src" && "$python" -m pip install -q --no-build-isolation --no-deps --target "$work/site" .)
PYTHONPATH="$work/site" "$python" -c "
from gravpipe import _core
assert _core.available_isas()[0] == 'avx512', _core.available_isas()
print('emulated AVX-512 kernels:', _core.available_isas())"
cd "$work/src" && PYTHONPATH="$work/site" "$python" -m pytest -q "$@"
