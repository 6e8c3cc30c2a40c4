// Block I/O timing through PageFile (one block = one page).
#include "gravpipe/io_timing.hpp"

#include <chrono>

#include "gravpipe/aligned_buffer.hpp"
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

}  // namespace gravpipe
