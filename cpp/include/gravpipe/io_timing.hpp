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

/// The page checksum's speed, bytes checked per second (1e9), on pages that are in none of
/// the CPU's caches (as pages the disk has just written by DMA are) and on one page checked
/// again and again (in L1/L2).
struct ChecksumTiming {
  double cold_gb_s = 0;
  double hot_gb_s = 0;
  std::string implementation;  // crc32c_impl_name of what ran
};

/// CRC32C of `pages` pages of `page_bytes` each, visited once in a shuffled order after
/// as many bytes again were written elsewhere (to push them out of the caches), and of one
/// page `hot_repeats` times.
ChecksumTiming time_page_checksum(std::size_t page_bytes, std::size_t pages, int hot_repeats);

}  // namespace gravpipe
