// Checked CUDA calls and owning device/pinned-host buffers (RAII), shared by the CUDA sources.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "gravpipe/error.hpp"

namespace gravpipe::cuda {

/// Every CUDA call is checked: a failure is a BackendError naming the call.
inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw BackendError(std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
}
#define GP_CUDA_CHECK(call) ::gravpipe::cuda::check((call), #call)
/// After every launch: configuration errors now, execution errors at the next checked sync.
#define GP_CUDA_CHECK_LAUNCH(name) ::gravpipe::cuda::check(cudaGetLastError(), "launch of " name)

/// Owning device array; grows, never shrinks (reused across calls).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }
  void reserve(std::size_t n) {
    if (n <= size_) return;
    cudaFree(ptr_);
    ptr_ = nullptr, size_ = 0;
    GP_CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T)));
    size_ = n;
  }
  T* data() const { return ptr_; }
  std::size_t size() const { return size_; }

 private:
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

/// Owning page-locked host array (DMA without the driver's staging copy); grows only.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { cudaFreeHost(ptr_); }
  void reserve(std::size_t n) {
    if (n <= size_) return;
    cudaFreeHost(ptr_);
    ptr_ = nullptr, size_ = 0;
    GP_CUDA_CHECK(cudaMallocHost(&ptr_, n * sizeof(T)));
    size_ = n;
  }
  T* data() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace gravpipe::cuda
