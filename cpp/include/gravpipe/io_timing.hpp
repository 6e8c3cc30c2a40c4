// Timing of block I/O to a scratch file, for `gravpipe bench storage` (the Yale bulk-memory
// Fig. 1 analogue, seed 002): the same PageFile the store uses, so the figures are the
// store's own I/O path, with the same direct-or-buffered mode, reported.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gravpipe/page_file.hpp"

namespace gravpipe {

struct IoTiming {
  std::vector<double> write_seconds;  // one per block written (overwrites of allocated blocks)
  std::vector<double> read_seconds;   // one per block read back, in the same order
  IoMode mode = IoMode::Buffered;     // what was in use
  std::string mode_detail;
};

/// `repeats` blocks of `block_bytes` written to successive offsets of a new scratch file in
/// `directory` (once untimed, so that the timed writes overwrite allocated blocks as the
/// store's write-backs do), then each overwritten and timed, then each read back and timed.
IoTiming time_block_io(const std::string& directory, std::size_t block_bytes, int repeats, IoMode mode);

}  // namespace gravpipe
