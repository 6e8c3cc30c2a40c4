// Host <-> device copy timings (seed 000 measures its host interface the same way: time
// per transfer against size, fitted as T = C1 + C2 * bytes).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace gravpipe::cuda {

struct TransferTiming {
  std::string direction;  // "h2d" or "d2h"
  bool pinned;            // page-locked host buffer (else pageable, as numpy arrays are)
  std::size_t bytes;
  double seconds;         // median over the repeats, CUDA events around one cudaMemcpy
};

/// Median time of `repeats` copies per size, both directions, pageable and pinned host
/// memory, on device `device`. Throws BackendError when the device cannot be used,
/// DeviceError when a CUDA call fails.
std::vector<TransferTiming> time_transfers(const std::vector<std::size_t>& sizes, int repeats, int device = 0);

}  // namespace gravpipe::cuda
