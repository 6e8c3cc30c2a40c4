// The page file's lock against other processes' clean-ups: a forked process removes every
// unlocked page file of the directory as fast as it can while this one makes and drops page
// files; each one made must open (a clean-up that took a file in the moment between its
// making and its locking makes its maker make another, never fail), and none is left behind.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "gravpipe/aligned_buffer.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/page_file.hpp"
#include "scratch_dir.hpp"
#include "test_harness.hpp"
#include "test_suites.hpp"

namespace gravpipe_test {

namespace {

using gravpipe::IoMode;
using gravpipe::PageFile;

/// Run remove_stale_page_files on `dir` in a forked process for `seconds`; its pid.
pid_t fork_cleaner(const std::string& dir, double seconds) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) gravpipe::remove_stale_page_files(dir);
  ::_exit(0);
}

void files_made_beside_a_cleanup_all_open(Context& t) {
  ScratchDir dir;
  const pid_t cleaner = fork_cleaner(dir.path(), 2.0);
  REQUIRE(cleaner > 0);
  const gravpipe::AlignedBuffer page(4096);
  int made = 0;
  std::string error;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(2.0);
  while (std::chrono::steady_clock::now() < end && error.empty()) {
    try {
      const PageFile file(dir.path(), 4096, IoMode::Auto);
      file.write(0, gravpipe::Span<const unsigned char>(page.data(), page.size()));  // the file is usable
      ++made;
    } catch (const gravpipe::StoreError& e) {
      error = e.what();
    }
  }
  int status = 0;
  ::waitpid(cleaner, &status, 0);
  if (!error.empty()) t.fail(__FILE__, __LINE__, "after " + std::to_string(made) + " files: " + error);
  CHECK(made > 100);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(dir.empty());
}

}  // namespace

Suite page_file_suite() {
  Suite s("page_file");
  s.add("files_made_beside_a_cleanup_all_open", files_made_beside_a_cleanup_all_open);
  return s;
}

}  // namespace gravpipe_test
