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

/// An allocator whose blocks start on an AlignedBuffer::kAlignment boundary: a
/// std::vector<T, PageAlignedAllocator<T>> whose whole pages can go to an O_DIRECT file from
/// where they lie (the external sort's permuted columns).
template <class T>
struct PageAlignedAllocator {
  using value_type = T;
  PageAlignedAllocator() = default;
  template <class U>
  PageAlignedAllocator(const PageAlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    const std::size_t k = AlignedBuffer::kAlignment, bytes = (n * sizeof(T) + k - 1) / k * k;
    void* p = std::aligned_alloc(k, bytes == 0 ? k : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const PageAlignedAllocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const PageAlignedAllocator<U>&) const noexcept { return false; }
};

}  // namespace gravpipe
