// Heap memory aligned for direct I/O (O_DIRECT needs buffers, offsets and lengths aligned to
// the device's logical block; 4096 covers every device we meet). Owns its bytes (RAII).
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "gravpipe/span.hpp"

namespace gravpipe {

class AlignedBuffer {
 public:
  static constexpr std::size_t kAlignment = 4096;

  AlignedBuffer() = default;
  /// `bytes` zeroed bytes (rounded up to the alignment for std::aligned_alloc).
  explicit AlignedBuffer(std::size_t bytes) : size_(bytes) {
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded == 0) return;
    data_.reset(static_cast<unsigned char*>(std::aligned_alloc(kAlignment, rounded)));
    if (!data_) throw std::bad_alloc();
    std::memset(data_.get(), 0, rounded);
  }
  unsigned char* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  Span<unsigned char> span() const { return {data_.get(), size_}; }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char[], Free> data_;
  std::size_t size_ = 0;
};

}  // namespace gravpipe
