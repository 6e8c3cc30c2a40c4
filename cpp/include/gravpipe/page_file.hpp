// One scratch file of fixed-size pages, the out-of-core store's backing file. Opened with
// O_DIRECT where the file system accepts it, so that the bytes counted really cross to the
// device and the kernel's buffer cache does not hide them (the effect Salmon & Warren warn
// about, seed 004); where it refuses (tmpfs: EINVAL) the file is buffered and each page is
// dropped from the buffer cache after its I/O (sync_file_range + posix_fadvise DONTNEED).
// The mode in use is reported, never chosen silently. I/O errors become StoreError naming
// the file, the page and the reason. The file is removed when the PageFile is destroyed.
//
// A process killed by SIGKILL (or a crash) leaves its files behind: a live PageFile holds an
// exclusive flock on its file, which the kernel drops with the process, so a file whose lock
// can be taken is stale whatever became of its pid since; remove_stale_page_files removes
// those, and every store calls it on its directory before it makes its own file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gravpipe/span.hpp"

namespace gravpipe {

enum class IoMode {
  Auto,      // direct where the file system accepts it, else buffered + fadvise (reported)
  Direct,    // O_DIRECT or a StoreError saying why not
  Buffered,  // page cache, each page synced and dropped after its I/O
};

IoMode parse_io_mode(const std::string& name);  // "auto", "direct", "buffered"
std::string io_mode_name(IoMode mode);

class AioContextPool;

/// A page file that no running process holds, removed by remove_stale_page_files.
struct StalePageFile {
  std::string path;
  long pid = 0;             // the process that made it (its name says)
  std::uint64_t bytes = 0;  // its size
};

/// Remove the page files of `directory` (gravpipe-scratch-<pid>-XXXXXX, this user's, not
/// this process's) whose lock can be taken: their makers are gone. A file on a file system
/// without flock, or one that cannot be opened, is kept; a directory that cannot be read is
/// left to the caller's own use of it to report. Returns what was removed.
std::vector<StalePageFile> remove_stale_page_files(const std::string& directory);

class PageFile {
 public:
  static constexpr std::size_t kAlignment = 4096;  // offsets, lengths and buffers

  /// Throws InputError unless `page_bytes` is a positive multiple of kAlignment.
  static void check_page_bytes(std::size_t page_bytes);

  /// A new file gravpipe-scratch-<pid>-XXXXXX in `directory` of pages of `page_bytes` (a
  /// positive multiple of kAlignment), locked (flock) for its life. Throws StoreError when
  /// the directory cannot hold it, or when `mode` is Direct and the file system refuses
  /// O_DIRECT. `aio_pool` (optional, not owned, outliving the file's BatchedPageIo): where
  /// they borrow their AIO contexts.
  PageFile(const std::string& directory, std::size_t page_bytes, IoMode mode, AioContextPool* aio_pool = nullptr);
  ~PageFile();  // removes the file, then closes it (and so drops its lock)
  PageFile(const PageFile&) = delete;
  PageFile& operator=(const PageFile&) = delete;

  /// Page `page` into buf (page_bytes, kAlignment-aligned). Thread-safe (pread).
  void read(std::int64_t page, Span<unsigned char> buf) const;
  /// buf (page_bytes, aligned) to page `page`. Thread-safe for distinct pages (pwrite).
  void write(std::int64_t page, Span<const unsigned char> buf) const;
  /// read() and write() that return the errno which stopped them instead of throwing (0:
  /// done; ENODATA: the file ends early; ENOSPC also for a write that makes no progress).
  int try_read(std::int64_t page, Span<unsigned char> buf) const noexcept;
  int try_write(std::int64_t page, Span<const unsigned char> buf) const noexcept;
  /// A StoreError naming the file, the page and the reason for errno `err`.
  [[noreturn]] void fail(const char* verb, std::int64_t page, int err) const;

  const std::string& path() const { return path_; }
  std::size_t page_bytes() const { return page_bytes_; }
  /// IoMode::Direct or IoMode::Buffered: what is in use.
  IoMode mode() const { return mode_; }
  /// Why the mode is what it is ("O_DIRECT", "buffered: O_DIRECT refused by the file system
  /// (Invalid argument)", "buffered: as requested").
  const std::string& mode_detail() const { return mode_detail_; }
  /// Whether the file lies in memory (tmpfs or ramfs, such as /dev/shm): a load is a copy
  /// of ~10 us there, with no device latency for read-ahead to hide.
  bool in_memory() const { return in_memory_; }
  /// The open descriptor, for readers that batch their requests (BatchedPageIo): the
  /// file stays its owner.
  int fd() const { return fd_; }
  /// The pool that lends AIO contexts to this file's BatchedPageIo (null: each makes its own).
  AioContextPool* aio_pool() const { return aio_pool_; }

 private:
  /// Make and lock the file; false when another process's remove_stale_page_files took it
  /// first (in the moment between its creation and its lock), the file then gone.
  bool create(const std::string& directory, IoMode mode);
  void open_direct_or_fall_back(IoMode requested);
  void use_buffered();
  std::string path_;
  std::size_t page_bytes_;
  AioContextPool* aio_pool_;
  int fd_ = -1;       // the I/O descriptor (O_DIRECT or buffered)
  int lock_fd_ = -1;  // the descriptor the file was made with, holding its lock (may be fd_)
  IoMode mode_ = IoMode::Buffered;
  std::string mode_detail_;
  bool in_memory_ = false;
};

}  // namespace gravpipe
