// CRC32C: the portable table version and the run-time choice of implementation.
#include "gravpipe/crc32c.hpp"

#include <array>

#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reversed

/// The byte-at-a-time table, built at compile time (no mutable global state).
constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<std::uint32_t, 256> kTable = make_table();

}  // namespace

namespace detail {

std::uint32_t crc32c_update_portable(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return crc;
}

#if !defined(GRAVPIPE_HAVE_SSE42_CRC)
std::uint32_t crc32c_update_sse42(std::uint32_t, const unsigned char*, std::size_t) {
  throw BackendError("crc32c: this build has no SSE4.2 implementation");
}
#endif

}  // namespace detail

bool crc32c_hardware_available() {
#if defined(GRAVPIPE_HAVE_SSE42_CRC) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

Crc32cImpl resolve_crc32c(Crc32cImpl impl) {
  if (impl == Crc32cImpl::Auto) return crc32c_hardware_available() ? Crc32cImpl::Sse42 : Crc32cImpl::Portable;
  if (impl == Crc32cImpl::Sse42 && !crc32c_hardware_available())
    throw BackendError("crc32c: the SSE4.2 implementation is not available (this CPU or build lacks SSE4.2)");
  return impl;
}

std::string crc32c_impl_name(Crc32cImpl impl) {
  switch (impl) {
    case Crc32cImpl::Auto: return "auto";
    case Crc32cImpl::Sse42: return "sse4.2";
    case Crc32cImpl::Portable: break;
  }
  return "portable";
}

std::uint32_t crc32c(Span<const unsigned char> data, Crc32cImpl impl) {
  const std::uint32_t init = 0xFFFFFFFFu;
  const std::uint32_t crc = resolve_crc32c(impl) == Crc32cImpl::Sse42
                                ? detail::crc32c_update_sse42(init, data.data(), data.size())
                                : detail::crc32c_update_portable(init, data.data(), data.size());
  return crc ^ 0xFFFFFFFFu;
}

}  // namespace gravpipe
