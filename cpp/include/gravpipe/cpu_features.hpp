// Which instruction sets this CPU and this build offer the force kernels.
#pragma once
#include <string>
#include <vector>

namespace gravpipe {

enum class Isa { Generic, Avx2 };

/// ISAs usable here, best first ("avx2" needs AVX2 + FMA on the CPU and in the build).
std::vector<Isa> available_isas();
/// Resolve a name ("auto", "avx2", "generic"); an explicit ISA that is missing throws
/// BackendError naming it.
Isa resolve_isa(const std::string& name);
std::string isa_name(Isa isa);

}  // namespace gravpipe
