// CRC32C with the SSE4.2 crc32 instruction. The instruction has a latency of 3 cycles and a
// throughput of one a cycle, so one chain of updates runs at a third of its speed: long
// inputs are cut into blocks of three streams of kStream bytes updated side by side, and the
// three CRCs joined. Compiled with -msse4.2 and called only after crc32c_hardware_available()
// said yes.
//
// Joining: the raw update (no init or final xor) is linear, so for streams A and B
//   crc(s, A B) = Z_|B|(crc(s, A)) xor crc(0, B),
// where Z_L is the update by L zero bytes, a linear map of the 32-bit state. Z_kStream is
// tabulated once as four tables of 256 (one per byte of the state).
//
// The pages checked are mostly ones the disk has just written by DMA, in none of the CPU's
// caches: there the three streams wait on memory (6.9 GB/s on 64 KiB pages against 25.8
// from cache, AMD EPYC Zen 4), so each block asks for the next block's cache lines while it
// runs: 15.2 GB/s on the same cold pages (BENCHMARKS.md, "Storage").
#include <nmmintrin.h>
#include <xmmintrin.h>

#include <array>
#include <cstring>

#include "gravpipe/crc32c.hpp"

namespace gravpipe::detail {

namespace {

/// Bytes of each of the three streams of a block: long enough that the two joins per block
/// cost little, short enough that pages of 4 KiB still take the three-stream path.
constexpr std::size_t kStream = 1024;

constexpr std::size_t kLine = 64;
static_assert(kStream % kLine == 0, "a stream is whole cache lines");

/// Ask for the cache lines of the block after this one, 3 lines a call (the block's 3 x
/// kStream bytes over the kStream / kLine calls of one block), those within `ahead` bytes.
inline void prefetch_next_block(const unsigned char* next, std::size_t ahead, std::size_t i) {
  for (std::size_t line = 3 * i; line < 3 * i + 3 * kLine && line < ahead; line += kLine)
    _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T0);
}

inline std::uint64_t load8(const unsigned char* p) {
  std::uint64_t word;
  std::memcpy(&word, p, 8);  // no alignment assumption
  return word;
}

/// The update of `crc` by n zero bytes (n a multiple of 8), one instruction at a time.
std::uint32_t update_zeros(std::uint32_t crc, std::size_t n) {
  std::uint64_t c = crc;
  for (; n > 0; n -= 8) c = _mm_crc32_u64(c, 0);
  return static_cast<std::uint32_t>(c);
}

/// Z_kStream as tables: zeros[b][v] = Z(v << 8b).
using ZeroTables = std::array<std::array<std::uint32_t, 256>, 4>;

const ZeroTables& zero_tables() {
  static const ZeroTables tables = [] {
    ZeroTables t{};
    for (int b = 0; b < 4; ++b)
      for (std::uint32_t v = 0; v < 256; ++v) t[b][v] = update_zeros(v << (8 * b), kStream);
    return t;
  }();
  return tables;
}

inline std::uint32_t shift_by_stream(const ZeroTables& z, std::uint32_t crc) {
  return z[0][crc & 0xff] ^ z[1][(crc >> 8) & 0xff] ^ z[2][(crc >> 16) & 0xff] ^ z[3][crc >> 24];
}

}  // namespace

std::uint32_t crc32c_update_sse42(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  if (n >= 3 * kStream) {
    const ZeroTables& z = zero_tables();
    for (; n >= 3 * kStream; n -= 3 * kStream, p += 3 * kStream) {
      std::uint64_t c0 = crc, c1 = 0, c2 = 0;
      for (std::size_t line = 0; line < kStream; line += kLine) {
        prefetch_next_block(p + 3 * kStream, n - 3 * kStream, line);
        for (std::size_t i = line; i < line + kLine; i += 8) {
          c0 = _mm_crc32_u64(c0, load8(p + i));
          c1 = _mm_crc32_u64(c1, load8(p + kStream + i));
          c2 = _mm_crc32_u64(c2, load8(p + 2 * kStream + i));
        }
      }
      const auto joined01 = shift_by_stream(z, static_cast<std::uint32_t>(c0)) ^ static_cast<std::uint32_t>(c1);
      crc = shift_by_stream(z, joined01) ^ static_cast<std::uint32_t>(c2);
    }
  }
  std::uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) c = _mm_crc32_u64(c, load8(p));
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

}  // namespace gravpipe::detail
