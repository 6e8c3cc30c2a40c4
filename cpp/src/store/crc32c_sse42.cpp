// CRC32C with the SSE4.2 crc32 instruction, 8 bytes at a time. Compiled with -msse4.2 and
// called only after crc32c_hardware_available() said yes.
#include <nmmintrin.h>

#include <cstring>

#include "gravpipe/crc32c.hpp"

namespace gravpipe::detail {

std::uint32_t crc32c_update_sse42(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  std::uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);  // no alignment assumption
    c = _mm_crc32_u64(c, word);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

}  // namespace gravpipe::detail
