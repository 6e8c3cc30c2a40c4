// time_transfers (cuda_transfer.hpp): cudaMemcpy between a device buffer and pageable or
// pinned host memory, timed with CUDA events; the host buffers are touched first so that
// page faults are not timed.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda_check.cuh"
#include "gravpipe/cuda_transfer.hpp"

namespace gravpipe::cuda {

namespace {

/// The two events around a timed copy.
struct EventPair {
  Event start, stop;
};

double time_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, int repeats,
                 const EventPair& ev) {
  std::vector<double> t;
  GP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));  // warm-up
  for (int r = 0; r < repeats; ++r) {
    GP_CUDA_CHECK(cudaEventRecord(ev.start.get()));
    GP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
    GP_CUDA_CHECK(cudaEventRecord(ev.stop.get()));
    GP_CUDA_CHECK(cudaEventSynchronize(ev.stop.get()));
    float ms = 0;
    GP_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start.get(), ev.stop.get()));
    t.push_back(1e-3 * ms);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace

std::vector<TransferTiming> time_transfers(const std::vector<std::size_t>& sizes, int repeats, int device) {
  if (sizes.empty() || repeats < 1) throw InputError("time_transfers: need sizes and repeats >= 1");
  select_device(device);
  const std::size_t most = *std::max_element(sizes.begin(), sizes.end());
  DeviceBuffer<unsigned char> dev;
  PinnedBuffer<unsigned char> pinned;
  dev.reserve(most), pinned.reserve(most);
  std::vector<unsigned char> pageable(most);
  std::memset(pageable.data(), 1, most), std::memset(pinned.data(), 1, most);
  EventPair ev;
  std::vector<TransferTiming> out;
  for (const std::size_t b : sizes)
    for (const bool pin : {false, true}) {
      unsigned char* host = pin ? pinned.data() : pageable.data();
      out.push_back({"h2d", pin, b, time_copy(dev.data(), host, b, cudaMemcpyHostToDevice, repeats, ev)});
      out.push_back({"d2h", pin, b, time_copy(host, dev.data(), b, cudaMemcpyDeviceToHost, repeats, ev)});
    }
  return out;
}

}  // namespace gravpipe::cuda
