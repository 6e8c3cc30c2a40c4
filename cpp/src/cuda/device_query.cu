// CUDA runtime query: how many devices the backend could use, and why none if none.
#include <cuda_runtime.h>

#include "gravpipe/cuda_device.hpp"

namespace gravpipe::cuda {

DeviceReport query_devices() {
  DeviceReport r;
  r.compiled = true;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // No driver or no GPU is a normal state for a CPU machine, not an error.
    r.status = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error state
    return r;
  }
  r.device_count = count;
  if (count > 0) {
    cudaDeviceProp prop{};
    const cudaError_t perr = cudaGetDeviceProperties(&prop, 0);
    r.status = perr == cudaSuccess ? prop.name : cudaGetErrorString(perr);
  } else {
    r.status = "no CUDA device found";
  }
  return r;
}

}  // namespace gravpipe::cuda
