// The scratch page file: creation, direct-or-buffered mode, pread/pwrite with EINTR and
// short-transfer handling, errors that name file, page and reason, removal on destruction;
// the lock that marks it in use, and the removal of files no process holds.
#include "gravpipe/page_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "gravpipe/aligned_buffer.hpp"
#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {

std::string errno_text(int err) {
  std::string text = std::error_code(err, std::generic_category()).message();
  switch (err) {
    case ENOSPC: return text + " (ENOSPC): the scratch disk is full; free space or name another scratch directory";
    case EDQUOT: return text + " (EDQUOT): the disk quota is used up; free space or name another scratch directory";
    case EFBIG: return text + " (EFBIG): the file size limit (ulimit -f) or the file system's largest file is reached";
    case EIO: return text + " (EIO): the device reported an I/O error";
    case ENODATA: return "the file ends early (truncated by someone else?)";
    default: return text;
  }
}

constexpr char kNamePrefix[] = "gravpipe-scratch-";

/// Unlink and close a half-made file (both its descriptors) unless it is kept: when the
/// constructor throws after creating it, or another process's clean-up took it.
struct CreatedFile {
  const std::string& path;
  int& fd;
  int& lock_fd;
  bool keep = false;
  ~CreatedFile() {
    if (keep) return;
    ::unlink(path.c_str());
    if (fd != lock_fd) ::close(fd);
    ::close(lock_fd);
    fd = lock_fd = -1;
  }
};

/// Take the exclusive lock that marks a page file in use: 0 when held, EWOULDBLOCK when
/// another open file holds it, another errno when the file system has no flock (a file
/// there stays unlocked, and no clean-up can tell that it is stale: it is never removed).
int take_lock(int fd) {
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0)
    if (errno != EINTR) return errno;
  return 0;
}

/// Whether the open file `fd` has lost its last name (another process removed it).
bool unlinked(int fd) {
  struct stat st{};
  return ::fstat(fd, &st) == 0 && st.st_nlink == 0;
}

/// The pid in a page file's name (gravpipe-scratch-<pid>-XXXXXX, mkostemp's six characters),
/// or 0 for any other name.
long pid_of_name(const char* name) {
  const std::size_t prefix = sizeof(kNamePrefix) - 1;
  if (std::strncmp(name, kNamePrefix, prefix) != 0) return 0;
  const char* p = name + prefix;
  long pid = 0;
  for (; *p >= '0' && *p <= '9'; ++p) {
    if (pid > 100000000) return 0;
    pid = pid * 10 + (*p - '0');
  }
  if (*p != '-') return 0;
  const char* const tail = ++p;
  while (std::isalnum(static_cast<unsigned char>(*p)) != 0) ++p;
  return *p == '\0' && p - tail == 6 ? pid : 0;
}

/// Whether the file system of `fd` keeps its files in memory (statfs magic numbers of
/// linux/magic.h: TMPFS_MAGIC, RAMFS_MAGIC). An unknown file system counts as a device.
bool in_memory_file_system(int fd) {
  struct statfs fs{};
  if (::fstatfs(fd, &fs) != 0) return false;
  constexpr unsigned long kTmpfs = 0x01021994, kRamfs = 0x858458f6;
  const auto type = static_cast<unsigned long>(fs.f_type);
  return type == kTmpfs || type == kRamfs;
}

}  // namespace

IoMode parse_io_mode(const std::string& name) {
  if (name == "auto") return IoMode::Auto;
  if (name == "direct") return IoMode::Direct;
  if (name == "buffered") return IoMode::Buffered;
  throw InputError("io mode: unknown '" + name + "' (expected auto, direct or buffered)");
}

std::string io_mode_name(IoMode mode) {
  switch (mode) {
    case IoMode::Auto: return "auto";
    case IoMode::Direct: return "direct";
    case IoMode::Buffered: break;
  }
  return "buffered";
}

void PageFile::check_page_bytes(std::size_t page_bytes) {
  if (page_bytes == 0 || page_bytes % kAlignment != 0)
    throw InputError("page size: must be a positive multiple of " + std::to_string(kAlignment) +
                     " bytes (direct I/O alignment), got " + std::to_string(page_bytes));
}

PageFile::PageFile(const std::string& directory, std::size_t page_bytes, IoMode mode, AioContextPool* aio_pool)
    : page_bytes_(page_bytes), aio_pool_(aio_pool) {
  check_page_bytes(page_bytes);
  // Another process's clean-up may lock a file made a moment ago, before its maker could,
  // and remove it: the maker then makes another, after a pause that grows by 0.1 ms a try
  // (so that it does not keep meeting a clean-up that runs in step with it; 64 tries wait
  // 0.2 s at most).
  constexpr int kAttempts = 64;
  for (int attempt = 1; !create(directory, mode); ++attempt) {
    if (attempt == kAttempts)
      throw StoreError("scratch directory " + directory + ": " + std::to_string(kAttempts) +
                           " page files made there in turn were each removed at once by another process",
                       directory, -1);
    ::usleep(static_cast<useconds_t>(100 * attempt));
  }
}

bool PageFile::create(const std::string& directory, IoMode mode) {
  std::string name = directory + "/" + kNamePrefix + std::to_string(::getpid()) + "-XXXXXX";
  std::vector<char> templ(name.begin(), name.end());
  templ.push_back('\0');
  const int fd = ::mkostemp(templ.data(), O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw StoreError("scratch directory " + directory + ": cannot create a page file there: " + errno_text(err),
                     directory, -1);
  }
  path_ = templ.data();
  fd_ = lock_fd_ = fd;
  CreatedFile guard{path_, fd_, lock_fd_};
  // A clean-up may have locked and removed the file before this lock, and be gone already:
  // the lock is then ours, the name not, and the O_DIRECT open below would find no file.
  if (take_lock(lock_fd_) == EWOULDBLOCK || unlinked(lock_fd_)) return false;
  in_memory_ = in_memory_file_system(fd_);
  open_direct_or_fall_back(mode);
  // Again: where flock is a POSIX lock (NFS), the close of any descriptor of the file (the
  // refused O_DIRECT probe's) drops it, and a clean-up may have taken the file meanwhile.
  if (take_lock(lock_fd_) == EWOULDBLOCK || unlinked(lock_fd_)) return false;
  guard.keep = true;
  return true;
}

void PageFile::open_direct_or_fall_back(IoMode requested) {
  if (requested == IoMode::Buffered) {
    use_buffered();
    mode_detail_ = "buffered (as requested), pages synced and dropped from the buffer cache after I/O";
    return;
  }
  // Probe with one aligned write: some file systems accept O_DIRECT at open and refuse the I/O.
  int err = 0;
  const int dfd = ::open(path_.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  if (dfd < 0) {
    err = errno;
  } else {
    const AlignedBuffer probe(kAlignment);
    if (::pwrite(dfd, probe.data(), kAlignment, 0) != static_cast<ssize_t>(kAlignment)) err = errno ? errno : EIO;
    if (err != 0) ::close(dfd);
  }
  if (err == 0) {
    if (fd_ != lock_fd_) ::close(fd_);
    fd_ = dfd;  // the descriptor the file was made with stays open: it holds the lock
    mode_ = IoMode::Direct;
    mode_detail_ = "direct (O_DIRECT)";
    return;
  }
  const std::string why = "O_DIRECT refused by the file system: " + errno_text(err);
  if (requested == IoMode::Direct || err != EINVAL)
    throw StoreError("scratch file " + path_ + ": " + why, path_, -1);
  use_buffered();
  mode_detail_ = "buffered + fadvise (" + why + ")";
}

void PageFile::use_buffered() {
  mode_ = IoMode::Buffered;
  // No kernel read-ahead: it would pull the following pages into the buffer cache, and their
  // reads would then count as device traffic that never happened (our read-ahead thread
  // does this job, and is counted).
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
}

PageFile::~PageFile() {
  // scratch, never an archive: gone when the store goes; unlinked before the lock is
  // dropped, so that no clean-up finds it unlocked and calls it stale
  ::unlink(path_.c_str());
  if (fd_ != lock_fd_) ::close(fd_);
  ::close(lock_fd_);
}

std::vector<StalePageFile> remove_stale_page_files(const std::string& directory) {
  std::vector<StalePageFile> removed;
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) return removed;
  const long self = static_cast<long>(::getpid());
  const uid_t user = ::geteuid();
  while (const dirent* entry = ::readdir(dir)) {
    const long pid = pid_of_name(entry->d_name);
    // this process's files are live (and where flock is a POSIX lock, NFS, its own lock
    // would not keep it out)
    if (pid == 0 || pid == self) continue;
    const std::string path = directory + "/" + entry->d_name;
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);  // a POSIX write lock needs O_RDWR
    if (fd < 0) continue;
    struct stat st{}, now{};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == user && take_lock(fd) == 0 &&
        ::stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev &&
        ::unlink(path.c_str()) == 0)
      removed.push_back({path, pid, static_cast<std::uint64_t>(st.st_size)});
    ::close(fd);
  }
  ::closedir(dir);
  return removed;
}

void PageFile::fail(const char* verb, std::int64_t page, int err) const {
  throw StoreError("scratch file " + path_ + ": " + verb + " page " + std::to_string(page) + " failed: " +
                       errno_text(err),
                   path_, page);
}

int PageFile::try_read(std::int64_t page, Span<unsigned char> buf) const noexcept {
  const off_t offset = static_cast<off_t>(page) * static_cast<off_t>(page_bytes_);
  std::size_t done = 0;
  while (done < page_bytes_) {
    const ssize_t got = ::pread(fd_, buf.data() + done, page_bytes_ - done, offset + static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if (got == 0) return ENODATA;  // the file ends early
    done += static_cast<std::size_t>(got);
  }
  if (mode_ == IoMode::Buffered) ::posix_fadvise(fd_, offset, static_cast<off_t>(page_bytes_), POSIX_FADV_DONTNEED);
  return 0;
}

int PageFile::try_write(std::int64_t page, Span<const unsigned char> buf) const noexcept {
  const off_t offset = static_cast<off_t>(page) * static_cast<off_t>(page_bytes_);
  std::size_t done = 0;
  while (done < page_bytes_) {
    const ssize_t put = ::pwrite(fd_, buf.data() + done, page_bytes_ - done, offset + static_cast<off_t>(done));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return errno;
    if (put == 0) return ENOSPC;  // no progress and no error: treat as full
    done += static_cast<std::size_t>(put);
  }
  if (mode_ == IoMode::Buffered) {
    // Write the page out now (errors such as ENOSPC surface here, not at some later close)
    // and drop it, so the next read of it goes to the device.
    const auto len = static_cast<off_t>(page_bytes_);
    if (::sync_file_range(fd_, offset, len,
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0)
      return errno;
    ::posix_fadvise(fd_, offset, len, POSIX_FADV_DONTNEED);
  }
  return 0;
}

void PageFile::read(std::int64_t page, Span<unsigned char> buf) const {
  if (const int err = try_read(page, buf); err != 0) fail("reading", page, err);
}

void PageFile::write(std::int64_t page, Span<const unsigned char> buf) const {
  if (const int err = try_write(page, buf); err != 0) fail("writing", page, err);
}

}  // namespace gravpipe
