// A minimal non-owning view over contiguous memory (std::span is C++20; we build as C++17).
#pragma once
#include <cstddef>

namespace gravpipe {

template <class T>
class Span {
 public:
  constexpr Span() = default;
  constexpr Span(T* data, std::size_t size) : data_(data), size_(size) {}
  constexpr T* data() const { return data_; }
  constexpr std::size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr T& operator[](std::size_t i) const { return data_[i]; }
  constexpr T* begin() const { return data_; }
  constexpr T* end() const { return data_ + size_; }
  /// count elements from offset (the caller keeps offset + count <= size()).
  constexpr Span subspan(std::size_t offset, std::size_t count) const { return {data_ + offset, count}; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace gravpipe
