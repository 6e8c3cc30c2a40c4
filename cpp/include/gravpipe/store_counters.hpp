// What the out-of-core store counts: page traffic to and from its scratch file, cache hits
// and misses, and the seconds compute threads stood waiting for I/O. "Swapped" bytes are
// read + written, the figure Salmon & Warren report (seed 004) because wall-clock I/O time
// depends on the kernel and the device.
#pragma once
#include <cstdint>

namespace gravpipe {

struct StoreCounters {
  std::int64_t pages_read = 0;       // pages read from the file (demand and read-ahead)
  std::int64_t bytes_read = 0;
  std::int64_t pages_written = 0;    // pages written back (eviction and flush)
  std::int64_t bytes_written = 0;
  std::int64_t hits = 0;             // pins that found their page ready in memory
  std::int64_t misses = 0;           // pins that had to load it or wait for its load
  std::int64_t evictions = 0;        // pages dropped from a frame to make room
  std::int64_t prefetched = 0;       // pages loaded by the read-ahead thread
  std::int64_t prefetch_hits = 0;    // ... of which a later pin used
  std::int64_t checksum_checks = 0;  // pages whose CRC32C was checked on a read from the file
  std::int64_t read_past = 0;        // ... of the pages read, those read past the frames (read_past)
  std::int64_t written_through = 0;  // ... of the pages written, those written past them (write_through)
  double stall_seconds = 0;          // compute threads waiting on loads and write-backs
  std::int64_t bytes_swapped() const { return bytes_read + bytes_written; }
};

}  // namespace gravpipe
