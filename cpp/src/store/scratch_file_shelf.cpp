// A page file kept for the next tree (scratch_file_shelf.hpp).
#include "gravpipe/scratch_file_shelf.hpp"

#include <utility>

namespace gravpipe {

ScratchFileShelf::ScratchFileShelf(std::string directory, AioContextPool* aio_pool)
    : directory_(std::move(directory)), aio_pool_(aio_pool) {}

std::unique_ptr<PageFile> ScratchFileShelf::take(std::size_t page_bytes, IoMode mode) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (kept_ && kept_->page_bytes() == page_bytes && kept_->mode() == mode) {
      ++reused_;
      return std::move(kept_);
    }
  }
  return std::make_unique<PageFile>(directory_, page_bytes, mode, aio_pool_);
}

void ScratchFileShelf::put(std::unique_ptr<PageFile> file) {
  std::unique_ptr<PageFile> removed;  // unlinked outside the lock
  std::lock_guard<std::mutex> lock(mutex_);
  removed = std::exchange(kept_, std::move(file));
}

std::int64_t ScratchFileShelf::reused() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reused_;
}

}  // namespace gravpipe
