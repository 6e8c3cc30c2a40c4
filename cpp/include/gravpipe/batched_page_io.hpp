// Many page reads or writes in flight from one thread: Linux native AIO (io_submit /
// io_getevents) on the O_DIRECT scratch file, pages that follow one another in the file joined
// into one request that gathers or scatters them (IOCB_CMD_PREADV / PWRITEV). One call submits
// a batch and waits for all of it.
//
// Why: a page read or written with pread/pwrite is the only one in flight and costs a sleep and
// a wake of its thread, and on a virtual disk a doorbell write to the device, on two cores
// shared with the forces. fio on the scratch disk: 0.61 s of system CPU per GB read one at a
// time, 0.22 s eight deep (BENCHMARKS.md, "Storage").
//
// Where the kernel refuses an AIO context (no CONFIG_AIO, a seccomp filter, aio-max-nr
// reached) or the file is buffered (AIO on a buffered file blocks in io_submit), the pages go
// one pread or pwrite at a time; how() says which, and nothing else changes: the bytes are the
// same.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gravpipe/page_file.hpp"
#include "gravpipe/span.hpp"

namespace gravpipe {

class BatchedPageIo {
 public:
  /// Page `page` of the file and its bytes in memory (page_bytes, kAlignment-aligned): read
  /// into them, or written from them.
  struct Page {
    std::int64_t page;
    unsigned char* data;
  };

  /// Up to `depth` requests in flight at once on `file`, each of at most `join` pages. The
  /// AIO context is borrowed from the file's pool when it has one (PageFile::aio_pool).
  BatchedPageIo(const PageFile& file, int depth, int join = 8);
  /// No request is ever left in flight: each call waits for its own. The context goes back
  /// to the pool, or is destroyed when there is none or a call threw with requests in flight.
  ~BatchedPageIo();
  BatchedPageIo(const BatchedPageIo&) = delete;
  BatchedPageIo& operator=(const BatchedPageIo&) = delete;

  /// Read every page of `pages` (any order, distinct pages). errors[k] becomes 0 when page k
  /// arrived whole, else the errno that stopped it (a short read counts as EIO); a joined
  /// request that fails is read again page by page, so that only the bad pages fail. Never
  /// throws for an I/O error: the caller decides what a failed load means.
  void read(Span<const Page> pages, Span<int> errors);
  /// Write every page of `pages` (distinct pages) from their bytes; errors as for read().
  void write(Span<const Page> pages, Span<int> errors);

  /// "Linux AIO, N deep" or "one page at a time (why)".
  const std::string& how() const { return how_; }

 private:
  void one_at_a_time(bool write, Span<const Page> pages, Span<int> errors) const;
  void in_flight_together(bool write, Span<const Page> pages, Span<int> errors);

  const PageFile& file_;
  const int depth_;
  const int join_;
  unsigned long context_ = 0;  // aio_context_t; 0: none
  AioContextPool* pool_ = nullptr;  // where context_ came from and goes back to (null: our own)
  bool settled_ = true;             // false while a call has requests in flight
  std::string how_;
};

}  // namespace gravpipe
