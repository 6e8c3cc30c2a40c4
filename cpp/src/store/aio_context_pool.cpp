// Linux AIO contexts kept for reuse (aio_context_pool.hpp).
#include "gravpipe/aio_context_pool.hpp"

#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace gravpipe {

static_assert(sizeof(aio_context_t) <= sizeof(std::uint64_t), "an AIO context fits 64 bits");

AioContextPool::~AioContextPool() {
  for (const Idle& i : idle_) ::syscall(SYS_io_destroy, static_cast<aio_context_t>(i.context));
}

std::uint64_t AioContextPool::acquire(int depth) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = std::find_if(idle_.begin(), idle_.end(), [depth](const Idle& i) { return i.depth == depth; });
    if (it != idle_.end()) {
      const std::uint64_t context = it->context;
      idle_.erase(it);
      return context;
    }
  }
  aio_context_t context = 0;
  if (::syscall(SYS_io_setup, static_cast<unsigned>(depth), &context) != 0) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  ++made_;
  return static_cast<std::uint64_t>(context);
}

void AioContextPool::release(std::uint64_t context, int depth) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back({depth, context});
}

std::int64_t AioContextPool::made() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return made_;
}

}  // namespace gravpipe
