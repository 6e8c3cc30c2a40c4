// Runs the C++ test suites: `gravpipe_cpp_tests` runs every suite, `gravpipe_cpp_tests
// page_cache curve_sort` those named (CMake registers one ctest test per suite). Exit status:
// 0 when every check passed, 1 when one failed, 2 for an unknown suite name.
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "gravpipe/debug_checks.hpp"
#include "test_harness.hpp"
#include "test_suites.hpp"

int main(int argc, char** argv) {
  using gravpipe_test::Context;
  using gravpipe_test::Suite;
  std::vector<Suite> suites;
  for (const auto& make : gravpipe_test::all_suites()) suites.push_back(make());

  std::vector<std::string> wanted(argv + 1, argv + argc);
  for (const std::string& w : wanted) {
    bool known = false;
    for (const Suite& s : suites) known = known || s.name() == w;
    if (!known) {
      std::fprintf(stderr, "unknown suite '%s'; suites:", w.c_str());
      for (const Suite& s : suites) std::fprintf(stderr, " %s", s.name().c_str());
      std::fprintf(stderr, "\n");
      return 2;
    }
  }
  std::printf("gravpipe C++ tests (invariant checks %s)\n", gravpipe::kDebugChecks ? "compiled in" : "off");
  int cases = 0, failed = 0;
  for (const Suite& s : suites) {
    bool run = wanted.empty();
    for (const std::string& w : wanted) run = run || s.name() == w;
    if (!run) continue;
    for (const auto& [name, body] : s.cases()) {
      Context t;
      ++cases;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        body(t);
      } catch (const Context::Stop&) {  // a REQUIRE failed: recorded already
      } catch (const std::exception& e) {
        t.fail(__FILE__, __LINE__, "unexpected exception: " + std::string(e.what()));
      } catch (...) {
        t.fail(__FILE__, __LINE__, "unexpected exception of an unknown type");
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s %s.%s (%.2f s)\n", t.failures() == 0 ? "ok    " : "FAILED", s.name().c_str(), name.c_str(), seconds);
      std::fflush(stdout);  // a case that kills the process shows where it happened
      failed += t.failures() != 0;
    }
  }
  std::printf("%d of %d cases passed\n", cases - failed, cases);
  return failed == 0 ? 0 : 1;
}
