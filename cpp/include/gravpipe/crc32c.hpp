// CRC32C (Castagnoli polynomial, reflected 0x82F63B78, init and final xor ~0): the checksum
// of every out-of-core page, computed when a page is written back and checked on every read
// from the scratch file. The SSE4.2 instruction computes it at memory speed; a table version
// serves CPUs without it. Both give the same value ("123456789" -> 0xE3069283).
#pragma once
#include <cstdint>
#include <string>

#include "gravpipe/span.hpp"

namespace gravpipe {

enum class Crc32cImpl { Auto, Portable, Sse42 };

/// Whether this CPU and this build have the SSE4.2 crc32 instruction.
bool crc32c_hardware_available();

/// The implementation `impl` resolves to here (Auto: Sse42 when available, else Portable).
/// Asking for Sse42 where it is missing throws BackendError.
Crc32cImpl resolve_crc32c(Crc32cImpl impl);
std::string crc32c_impl_name(Crc32cImpl impl);

/// CRC32C of data with the chosen implementation (chosen at run time, like the SIMD kernels).
std::uint32_t crc32c(Span<const unsigned char> data, Crc32cImpl impl = Crc32cImpl::Auto);

namespace detail {
/// The raw update (no init/final xor) of each implementation; the SSE4.2 one lives in its
/// own translation unit compiled with -msse4.2 and is only called when the CPU has it.
std::uint32_t crc32c_update_portable(std::uint32_t crc, const unsigned char* p, std::size_t n);
std::uint32_t crc32c_update_sse42(std::uint32_t crc, const unsigned char* p, std::size_t n);
}  // namespace detail

}  // namespace gravpipe
