// What the CUDA runtime reports about this machine. Compiled from device_query.cu when the
// build has CUDA, otherwise from device_query_none.cpp (which reports "not compiled").
#pragma once
#include <string>

namespace gravpipe::cuda {

struct DeviceReport {
  bool compiled = false;     // the build includes CUDA sources
  int device_count = 0;      // usable devices (0 without a driver or GPU)
  std::string status;        // why there is no device, or the first device's name
};

DeviceReport query_devices();

}  // namespace gravpipe::cuda
