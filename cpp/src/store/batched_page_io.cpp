// Batched page reads and writes through Linux native AIO (batched_page_io.hpp).
#include "gravpipe/batched_page_io.hpp"

#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <numeric>
#include <system_error>

#include "gravpipe/aio_context_pool.hpp"
#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {

// glibc has no wrappers for the kernel's AIO calls (libaio is a separate library): the
// system calls themselves, which are stable ABI.
long aio_setup(unsigned nr, aio_context_t* ctx) { return ::syscall(SYS_io_setup, nr, ctx); }
long aio_destroy(aio_context_t ctx) { return ::syscall(SYS_io_destroy, ctx); }
long aio_submit(aio_context_t ctx, long n, iocb** cbs) { return ::syscall(SYS_io_submit, ctx, n, cbs); }
long aio_getevents(aio_context_t ctx, long min_nr, long nr, io_event* events) {
  return ::syscall(SYS_io_getevents, ctx, min_nr, nr, events, nullptr);
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

}  // namespace

BatchedPageIo::BatchedPageIo(const PageFile& file, int depth, int join)
    : file_(file), depth_(std::max(depth, 1)), join_(std::max(join, 1)) {
  if (file_.mode() != IoMode::Direct) {
    how_ = "one page at a time (the file is buffered: AIO would block in io_submit)";
    return;
  }
  pool_ = file_.aio_pool();
  aio_context_t ctx = 0;
  if (pool_ != nullptr) {
    ctx = static_cast<aio_context_t>(pool_->acquire(depth_));
  } else if (aio_setup(static_cast<unsigned>(depth_), &ctx) != 0) {
    ctx = 0;
  }
  if (ctx == 0) {
    how_ = "one page at a time (io_setup refused: " + errno_text(errno) + ")";
    return;
  }
  context_ = ctx;
  how_ = "Linux AIO, " + std::to_string(depth_) + " deep";
}

BatchedPageIo::~BatchedPageIo() {
  if (context_ == 0) return;
  if (pool_ != nullptr && settled_)
    pool_->release(context_, depth_);  // io_destroy waits ~20-55 ms for an RCU grace period
  else
    aio_destroy(context_);  // also waits for whatever a call that threw left in flight
}

void BatchedPageIo::read(Span<const Page> pages, Span<int> errors) {
  if (errors.size() != pages.size()) throw std::logic_error("batched page I/O: one error slot per page needed");
  std::fill(errors.begin(), errors.end(), 0);
  context_ == 0 ? one_at_a_time(false, pages, errors) : in_flight_together(false, pages, errors);
}

void BatchedPageIo::write(Span<const Page> pages, Span<int> errors) {
  if (errors.size() != pages.size()) throw std::logic_error("batched page I/O: one error slot per page needed");
  std::fill(errors.begin(), errors.end(), 0);
  context_ == 0 ? one_at_a_time(true, pages, errors) : in_flight_together(true, pages, errors);
}

void BatchedPageIo::one_at_a_time(bool write, Span<const Page> pages, Span<int> errors) const {
  const std::size_t bytes = file_.page_bytes();
  for (std::size_t k = 0; k < pages.size(); ++k)
    errors[k] = write ? file_.try_write(pages[k].page, Span<const unsigned char>(pages[k].data, bytes))
                      : file_.try_read(pages[k].page, Span<unsigned char>(pages[k].data, bytes));
}

void BatchedPageIo::in_flight_together(bool write, Span<const Page> pages, Span<int> errors) {
  settled_ = false;  // until every request of this call is reaped (a throw leaves it false)
  const std::size_t page_bytes = file_.page_bytes();
  // reads in file order, so that neighbours join into one request
  std::vector<std::size_t> order(pages.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return pages[a].page < pages[b].page; });
  struct Request {
    std::size_t first;  // into order
    std::size_t count;
  };
  std::vector<Request> requests;
  for (std::size_t k = 0; k < order.size();) {
    std::size_t m = 1;
    while (k + m < order.size() && m < static_cast<std::size_t>(join_) &&
           pages[order[k + m]].page == pages[order[k + m - 1]].page + 1)
      ++m;
    requests.push_back({k, m});
    k += m;
  }
  std::vector<iovec> iov(order.size());
  for (std::size_t k = 0; k < order.size(); ++k) iov[k] = {pages[order[k]].data, page_bytes};
  // a request that fails or comes short is done again page by page, one at a time: only the
  // pages that cannot be moved fail, each with the errno that says why (ENODATA: the file
  // ends early; ENOSPC: the disk is full)
  const auto redo_one_by_one = [&](const Request& r) {
    for (std::size_t k = r.first; k < r.first + r.count; ++k)
      one_at_a_time(write, Span<const Page>(&pages[order[k]], 1), Span<int>(&errors[order[k]], 1));
  };

  std::vector<iocb> cbs(static_cast<std::size_t>(depth_));
  std::vector<iocb*> cb_ptrs(static_cast<std::size_t>(depth_));
  std::vector<io_event> events(static_cast<std::size_t>(depth_));
  for (std::size_t start = 0; start < requests.size(); start += static_cast<std::size_t>(depth_)) {
    const std::size_t n = std::min(requests.size() - start, static_cast<std::size_t>(depth_));
    for (std::size_t j = 0; j < n; ++j) {
      const Request& r = requests[start + j];
      iocb& cb = cbs[j];
      cb = iocb{};
      cb.aio_data = start + j;
      cb.aio_lio_opcode = write ? IOCB_CMD_PWRITEV : IOCB_CMD_PREADV;
      cb.aio_fildes = static_cast<std::uint32_t>(file_.fd());
      cb.aio_buf = reinterpret_cast<std::uint64_t>(&iov[r.first]);
      cb.aio_nbytes = r.count;
      cb.aio_offset = static_cast<std::int64_t>(pages[order[r.first]].page) * static_cast<std::int64_t>(page_bytes);
      cb_ptrs[j] = &cb;
    }
    // io_submit may take fewer than asked (a full device queue): what it refused goes again
    // once some of what it took has completed
    std::size_t submitted = 0, done = 0, last = n;
    while (done < last) {
      if (submitted < last) {
        const long got = aio_submit(context_, static_cast<long>(last - submitted), &cb_ptrs[submitted]);
        if (got > 0) submitted += static_cast<std::size_t>(got);
        const bool retry = got >= 0 || errno == EINTR || (errno == EAGAIN && submitted > done);
        if (!retry) {  // none of the rest can go in a batch, and none of them is in flight
          for (std::size_t j = submitted; j < last; ++j) redo_one_by_one(requests[start + j]);
          last = submitted;
          continue;
        }
        if (submitted == done) continue;  // nothing in flight to wait for
      }
      // all that is in flight at once: one wake of this thread a batch, not one a page
      const auto in_flight = static_cast<long>(submitted - done);
      const long got = aio_getevents(context_, in_flight, in_flight, events.data());
      if (got < 0) {
        if (errno == EINTR) continue;
        // the context is unusable and requests may still write into the frames: the only
        // safe way out is to stop here, which never happens short of a kernel bug
        throw std::system_error(errno, std::generic_category(), "io_getevents");
      }
      for (long e = 0; e < got; ++e) {
        const Request& r = requests[static_cast<std::size_t>(events[static_cast<std::size_t>(e)].data)];
        const long long res = events[static_cast<std::size_t>(e)].res;
        // failed, or short (the file ends early, the disk filled up)
        if (res < 0 || static_cast<std::size_t>(res) != r.count * page_bytes) redo_one_by_one(r);
      }
      done += static_cast<std::size_t>(got);
    }
  }
  settled_ = true;
}

}  // namespace gravpipe
