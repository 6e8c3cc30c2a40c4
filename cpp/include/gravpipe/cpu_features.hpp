// Which instruction sets this CPU and this build offer the force kernels.
#pragma once
#include <string>
#include <vector>

namespace gravpipe {

enum class Isa { Generic, Avx2, Avx512 };

/// ISAs usable here, best first ("avx512" needs AVX-512 F, DQ and VL on the CPU, the OS
/// saving the ZMM and opmask registers, and a compiler that built those kernels; "avx2"
/// needs AVX2 + FMA on the CPU and in the build).
std::vector<Isa> available_isas();
/// Resolve a name ("auto", "avx512", "avx2", "generic"). "auto" is the environment
/// variable GRAVPIPE_ISA when it is set and not empty (so one build can compare its
/// kernels), else the best available. A missing ISA throws BackendError, an unknown name
/// InputError; both name where the name came from (the argument or GRAVPIPE_ISA).
Isa resolve_isa(const std::string& name);
std::string isa_name(Isa isa);

/// Float lanes of the ISA's SIMD vectors (VF::W of its simd_*.hpp): the i-particles that
/// one i-vector of its mixed kernels holds.
constexpr int isa_float_lanes(Isa isa) {
  return isa == Isa::Avx512 ? 16 : isa == Isa::Avx2 ? 8 : 1;
}

}  // namespace gravpipe
