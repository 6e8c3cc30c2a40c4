// GRAVPIPE_DEBUG_ASSERT: with the invariant checks compiled in, a broken one throws
// InvariantError naming the file, the line and the condition; without them, neither the
// condition nor the message is evaluated.
#include <string>

#include "gravpipe/debug_checks.hpp"
#include "gravpipe/error.hpp"
#include "test_harness.hpp"
#include "test_suites.hpp"

namespace gravpipe_test {

namespace {

void broken_invariant(Context& t) {
  int evaluated = 0;
  const auto check = [&evaluated](int pins) {
    (void)pins;  // read only by the check, which a build without them leaves out
    GRAVPIPE_DEBUG_ASSERT((++evaluated, pins >= 0), "pins " + std::to_string(pins));
  };
  check(1);  // holds: nothing thrown either way
  bool thrown = false;
  std::string what;
  try {
    check(-1);
  } catch (const gravpipe::InvariantError& e) {
    thrown = true;
    what = e.what();
  }
  CHECK_EQ(thrown, gravpipe::kDebugChecks);
  CHECK_EQ(evaluated, gravpipe::kDebugChecks ? 2 : 0);
  if (gravpipe::kDebugChecks) {
    CHECK(what.find("test_debug_checks.cpp:") != std::string::npos);
    CHECK(what.find("pins >= 0") != std::string::npos);
    CHECK(what.find("pins -1") != std::string::npos);
  }
}

void invariant_error_is_a_logic_error(Context& t) {
  // not an InputError: the bindings must not report a gravpipe bug as the caller's bad input
  const gravpipe::InvariantError e("x");
  const std::logic_error* base = &e;
  CHECK(base != nullptr);
  CHECK(dynamic_cast<const std::invalid_argument*>(base) == nullptr);
}

}  // namespace

Suite debug_checks_suite() {
  Suite s("debug_checks");
  s.add("broken_invariant", broken_invariant);
  s.add("invariant_error_is_a_logic_error", invariant_error_is_a_logic_error);
  return s;
}

}  // namespace gravpipe_test
