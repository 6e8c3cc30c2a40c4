#include "gravpipe/cuda_device.hpp"

namespace gravpipe::cuda {

DeviceReport query_devices() {
  DeviceReport r;
  r.status = "this build of gravpipe has no CUDA sources (built with GRAVPIPE_CUDA=OFF, or no CUDA compiler was found)";
  return r;
}

}  // namespace gravpipe::cuda
