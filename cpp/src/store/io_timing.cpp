// Block I/O timing through PageFile (one block = one page).
#include "gravpipe/io_timing.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <vector>

#include "gravpipe/aligned_buffer.hpp"
#include "gravpipe/crc32c.hpp"
#include "gravpipe/error.hpp"

namespace gravpipe {

IoTiming time_block_io(const std::string& directory, std::size_t block_bytes, int repeats, IoMode mode) {
  if (repeats < 1) throw InputError("time_block_io: repeats must be >= 1");
  const PageFile file(directory, block_bytes, mode);
  const AlignedBuffer buf(block_bytes);
  for (std::size_t i = 0; i < block_bytes; ++i) buf.data()[i] = static_cast<unsigned char>(i * 131u + 7u);
  IoTiming t;
  t.mode = file.mode();
  t.mode_detail = file.mode_detail();
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const Span<const unsigned char> out(buf.data(), block_bytes);
  for (int k = 0; k < repeats; ++k) file.write(k, out);  // allocate the blocks
  for (int k = 0; k < repeats; ++k) {
    const auto t0 = Clock::now();
    file.write(k, out);
    t.write_seconds.push_back(seconds(t0));
  }
  for (int k = 0; k < repeats; ++k) {
    const auto t0 = Clock::now();
    file.read(k, buf.span());
    t.read_seconds.push_back(seconds(t0));
  }
  return t;
}

ChecksumTiming time_page_checksum(std::size_t page_bytes, std::size_t pages, int hot_repeats) {
  if (page_bytes == 0 || pages == 0 || hot_repeats < 1)
    throw InputError("time_page_checksum: page_bytes, pages and hot_repeats must be >= 1");
  using Clock = std::chrono::steady_clock;
  const std::size_t total = page_bytes * pages;
  std::vector<unsigned char> data(total), evict(total);
  for (std::size_t i = 0; i < total; ++i) data[i] = static_cast<unsigned char>(i * 131u + 7u);
  std::vector<std::size_t> order(pages);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(12345));
  std::fill(evict.begin(), evict.end(), static_cast<unsigned char>(1));
  volatile std::uint32_t sink = 0;  // stored, so that no checksum is optimised away
  const auto page = [&](std::size_t k) { return Span<const unsigned char>(data.data() + k * page_bytes, page_bytes); };
  auto t0 = Clock::now();
  for (const std::size_t k : order) sink = sink ^ crc32c(page(k));
  const double cold = std::chrono::duration<double>(Clock::now() - t0).count();
  sink = sink ^ crc32c(page(0));  // in the caches from here on
  t0 = Clock::now();
  for (int r = 0; r < hot_repeats; ++r) sink = sink ^ crc32c(page(0));
  const double hot = std::chrono::duration<double>(Clock::now() - t0).count();
  ChecksumTiming t;
  t.cold_gb_s = static_cast<double>(total) / cold / 1e9;
  t.hot_gb_s = static_cast<double>(page_bytes) * hot_repeats / hot / 1e9;
  t.implementation = crc32c_impl_name(resolve_crc32c(Crc32cImpl::Auto));
  return t;
}

}  // namespace gravpipe
