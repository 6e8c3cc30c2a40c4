// A page file kept for the next tree (paged_cells.hpp). Each step's out-of-core tree wrote
// its cell records into a scratch file of its own and removed it when the next step began:
// at N = 1e7 the unlink of ~290 MB took ~45 ms on the scratch host's ext4 (mounted with
// discard), on the step's critical path, and the next file had its blocks allocated again
// while the sort wrote the records. The store's shelf keeps the last tree's file for the next
// one, which overwrites it; the file is removed with the store.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "gravpipe/page_file.hpp"

namespace gravpipe {

class ScratchFileShelf {
 public:
  /// Files in `directory`, their batches lent AIO contexts by `aio_pool` (optional, not owned).
  ScratchFileShelf(std::string directory, AioContextPool* aio_pool);

  /// A file of pages of `page_bytes` in `mode`: the one on the shelf when it was opened so
  /// (its old pages are garbage: the caller writes each page before reading it), else a new
  /// one (PageFile's errors). Thread-safe.
  std::unique_ptr<PageFile> take(std::size_t page_bytes, IoMode mode);
  /// Keep `file` for the next take(); a file already kept is removed. Thread-safe.
  void put(std::unique_ptr<PageFile> file);
  /// Files taken from the shelf rather than made, since construction.
  std::int64_t reused() const;

 private:
  const std::string directory_;
  AioContextPool* const aio_pool_;
  mutable std::mutex mutex_;
  std::unique_ptr<PageFile> kept_;
  std::int64_t reused_ = 0;
};

}  // namespace gravpipe
