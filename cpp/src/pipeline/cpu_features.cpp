#include "gravpipe/cpu_features.hpp"

#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {
bool cpu_has_avx2_fma() {
#if defined(GRAVPIPE_HAVE_AVX2_KERNELS) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}
}  // namespace

std::vector<Isa> available_isas() {
  std::vector<Isa> isas;
  if (cpu_has_avx2_fma()) isas.push_back(Isa::Avx2);
  isas.push_back(Isa::Generic);
  return isas;
}

std::string isa_name(Isa isa) { return isa == Isa::Avx2 ? "avx2" : "generic"; }

Isa resolve_isa(const std::string& name) {
  const auto isas = available_isas();
  if (name == "auto") return isas.front();
  for (Isa isa : isas)
    if (isa_name(isa) == name) return isa;
  if (name == "avx2")
    throw BackendError("isa 'avx2' is not available: this CPU or this build lacks AVX2+FMA");
  throw InputError("isa: unknown instruction set '" + name + "' (expected auto, avx2 or generic)");
}

}  // namespace gravpipe
