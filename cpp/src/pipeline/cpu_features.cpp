#include "gravpipe/cpu_features.hpp"

#include <cstdlib>

#include "gravpipe/error.hpp"

#if defined(GRAVPIPE_HAVE_AVX512_KERNELS)
#include <cpuid.h>
#endif

namespace gravpipe {

namespace {

constexpr const char* kIsaEnv = "GRAVPIPE_ISA";

bool cpu_has_avx2_fma() {
#if defined(GRAVPIPE_HAVE_AVX2_KERNELS) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

#if defined(GRAVPIPE_HAVE_AVX512_KERNELS)
/// Whether the OS saves and restores the AVX-512 state on context switches: XCR0 must
/// enable SSE, AVX (bits 1, 2), the opmask registers (5) and both halves of the ZMM
/// registers (6, 7). A CPU with AVX-512 under an OS (or hypervisor) that leaves these off
/// faults on the first ZMM instruction. XGETBV itself faults unless OSXSAVE is set.
bool os_saves_avx512_state() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr unsigned kNeeded = (1u << 1) | (1u << 2) | (1u << 5) | (1u << 6) | (1u << 7);
  return (lo & kNeeded) == kNeeded;
}
#endif

/// The AVX-512 kernels are compiled with -mavx512f -mavx512dq -mavx512vl -mfma (which
/// imply AVX2), so the CPU must have all of them.
bool cpu_has_avx512() {
#if defined(GRAVPIPE_HAVE_AVX512_KERNELS)
  __builtin_cpu_init();
  return cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         os_saves_avx512_state();
#else
  return false;
#endif
}

/// Why a known ISA is missing: the build or the CPU (users act differently on each).
std::string why_missing(Isa isa) {
  if (isa == Isa::Avx512) {
#if defined(GRAVPIPE_HAVE_AVX512_KERNELS)
    return "this CPU lacks AVX-512 F/DQ/VL, or the OS does not enable its registers";
#else
    return "this build has no AVX-512 kernels (not x86-64, or the compiler cannot target AVX-512)";
#endif
  }
  return "this CPU or this build lacks AVX2+FMA";
}

/// The available ISA called `name`; `source` says where the name came from, for errors.
Isa find_available(const std::string& name, const std::string& source) {
  for (Isa isa : available_isas())
    if (isa_name(isa) == name) return isa;
  for (Isa isa : {Isa::Avx512, Isa::Avx2})
    if (isa_name(isa) == name)
      throw BackendError(source + " '" + name + "' is not available: " + why_missing(isa));
  throw InputError(source + ": unknown instruction set '" + name +
                   "' (expected auto, avx512, avx2 or generic)");
}

}  // namespace

std::vector<Isa> available_isas() {
  std::vector<Isa> isas;
  if (cpu_has_avx512()) isas.push_back(Isa::Avx512);
  if (cpu_has_avx2_fma()) isas.push_back(Isa::Avx2);
  isas.push_back(Isa::Generic);
  return isas;
}

std::string isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Generic: break;
  }
  return "generic";
}

Isa resolve_isa(const std::string& name) {
  if (name != "auto") return find_available(name, "isa");
  // Read on every resolution, never cached: no process-wide state to go stale.
  const char* env = std::getenv(kIsaEnv);
  const std::string chosen = env != nullptr ? env : "";
  if (chosen.empty() || chosen == "auto") return available_isas().front();
  return find_available(chosen, kIsaEnv);
}

}  // namespace gravpipe
