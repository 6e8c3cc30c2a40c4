// Checked CUDA calls and owning device/pinned-host buffers, streams and events (RAII), shared
// by the CUDA sources.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "gravpipe/error.hpp"

namespace gravpipe::cuda {

/// Every CUDA call is checked: a failure is a DeviceError naming the call.
inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw DeviceError(std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
}

/// Make `device` current. A device that cannot be selected (no driver, no GPU, a number
/// beyond the count) means the backend is unavailable here: BackendError, not DeviceError.
inline void select_device(int device) {
  const cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky error state
  throw BackendError("backend 'cuda' is not available: device " + std::to_string(device) + ": " +
                     cudaGetErrorString(err));
}
#define GP_CUDA_CHECK(call) ::gravpipe::cuda::check((call), #call)
/// After every launch: configuration errors now, execution errors at the next checked sync.
#define GP_CUDA_CHECK_LAUNCH(name) ::gravpipe::cuda::check(cudaGetLastError(), "launch of " name)

/// Where a CudaBuffer's memory lives: device memory, or page-locked host memory (DMA
/// without the driver's staging copy).
struct DeviceMemory {
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaMalloc(p, bytes); }
  static void release(void* p) { cudaFree(p); }
};
struct PinnedHostMemory {
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaMallocHost(p, bytes); }
  static void release(void* p) { cudaFreeHost(p); }
};

/// Owning array of n T in Memory; grows, never shrinks (reused across calls).
template <class T, class Memory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  ~CudaBuffer() { Memory::release(ptr_); }
  void reserve(std::size_t n) {
    if (n <= size_) return;
    Memory::release(ptr_);
    ptr_ = nullptr, size_ = 0;
    void* p = nullptr;
    GP_CUDA_CHECK(Memory::allocate(&p, n * sizeof(T)));
    ptr_ = static_cast<T*>(p), size_ = n;
  }
  T* data() const { return ptr_; }
  std::size_t size() const { return size_; }

 private:
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

template <class T>
using DeviceBuffer = CudaBuffer<T, DeviceMemory>;
template <class T>
using PinnedBuffer = CudaBuffer<T, PinnedHostMemory>;

/// An owned stream that does not synchronise with the legacy default stream, so that
/// streams of different CPU threads overlap each other.
class Stream {
 public:
  Stream() { GP_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s_); }  // in a destructor: unchecked, nothing to report to
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

/// An owned event. Default: timing events (cudaEventElapsedTime); cudaEventDisableTiming
/// for events that only mark work done (cheaper to record and wait on).
class Event {
 public:
  explicit Event(unsigned flags = cudaEventDefault) { GP_CUDA_CHECK(cudaEventCreateWithFlags(&e_, flags)); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace gravpipe::cuda
