// Many page reads in flight from one thread: Linux native AIO (io_submit / io_getevents) on
// the O_DIRECT scratch file, pages that follow one another in the file joined into one
// request that scatters them into their frames (IOCB_CMD_PREADV). One call submits a batch
// and waits for all of it.
//
// Why: the walk's prefetch loaded its pages one pread at a time, so each 64 KiB load was the
// only one in flight and cost a sleep and a wake of its thread on two cores shared with the
// forces. fio on the scratch disk: 0.61 s of system CPU per GB read one at a time, 0.22 s
// eight deep (BENCHMARKS.md, session 14).
//
// Where the kernel refuses an AIO context (no CONFIG_AIO, a seccomp filter, aio-max-nr
// reached) or the file is buffered (AIO on a buffered file blocks in io_submit), the reads
// go one pread at a time; how() says which, and nothing else changes: the bytes are the same.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gravpipe/page_file.hpp"
#include "gravpipe/span.hpp"

namespace gravpipe {

class BatchedPageReads {
 public:
  /// Page `page` of the file into `data` (page_bytes, kAlignment-aligned).
  struct Read {
    std::int64_t page;
    unsigned char* data;
  };

  /// Up to `depth` requests in flight at once on `file`, each of at most `join` pages.
  BatchedPageReads(const PageFile& file, int depth, int join = 8);
  ~BatchedPageReads();  // no request is ever left in flight: each read() waits for its own
  BatchedPageReads(const BatchedPageReads&) = delete;
  BatchedPageReads& operator=(const BatchedPageReads&) = delete;

  /// Read every page of `reads` (any order, distinct pages). errors[k] becomes 0 when read k
  /// got its whole page, else the errno that stopped it (a short read counts as EIO): the
  /// caller decides what a failed prefetch means. Never throws for an I/O error.
  void read(Span<const Read> reads, Span<int> errors);

  /// "Linux AIO, N deep" or "one pread at a time (why)".
  const std::string& how() const { return how_; }
  bool batched() const { return context_ != 0; }

 private:
  void read_one_at_a_time(Span<const Read> reads, Span<int> errors) const;
  void read_batched(Span<const Read> reads, Span<int> errors);

  const PageFile& file_;
  const int depth_;
  const int join_;
  unsigned long context_ = 0;  // aio_context_t; 0: none
  std::string how_;
};

}  // namespace gravpipe
