// A small test harness for the core's C++ tests, so that they build wherever the core builds
// (no framework to install). Each test file adds its cases to a Suite; test_main.cpp lists
// the suites, runs the cases of those named on the command line (all without arguments) and
// exits nonzero when any check failed. A case is a function of its Context `t`, which the
// macros below record failures in: CHECK* records and goes on, REQUIRE* ends the case.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace gravpipe_test {

/// One case's record of failed checks.
class Context {
 public:
  /// Thrown by REQUIRE to end the case: the runner catches it.
  struct Stop {};

  void fail(const char* file, int line, const std::string& what) {
    ++failures_;
    std::fprintf(stderr, "  %s:%d: FAILED: %s\n", file, line, what.c_str());
  }
  int failures() const { return failures_; }

 private:
  int failures_ = 0;
};

/// Named cases of one concept (the page cache, the curve sort, ...).
class Suite {
 public:
  explicit Suite(std::string name) : name_(std::move(name)) {}
  void add(std::string name, std::function<void(Context&)> run) { cases_.emplace_back(std::move(name), std::move(run)); }
  const std::string& name() const { return name_; }
  const std::vector<std::pair<std::string, std::function<void(Context&)>>>& cases() const { return cases_; }

 private:
  std::string name_;
  std::vector<std::pair<std::string, std::function<void(Context&)>>> cases_;
};

/// "a (1) vs b (2)" for CHECK_EQ's message.
template <class A, class B>
std::string compared(const char* a, const A& va, const char* op, const char* b, const B& vb) {
  std::ostringstream s;
  s.precision(17);
  s << a << " " << op << " " << b << " with " << a << " = " << va << ", " << b << " = " << vb;
  return s.str();
}

}  // namespace gravpipe_test

#define CHECK(cond) \
  do {              \
    if (!(cond)) t.fail(__FILE__, __LINE__, #cond); \
  } while (false)
#define REQUIRE(cond)                                \
  do {                                               \
    if (!(cond)) {                                   \
      t.fail(__FILE__, __LINE__, #cond);             \
      throw ::gravpipe_test::Context::Stop{};        \
    }                                                \
  } while (false)
#define CHECK_EQ(a, b)                                                                                   \
  do {                                                                                                   \
    const auto& gp_a_ = (a);                                                                             \
    const auto& gp_b_ = (b);                                                                             \
    if (!(gp_a_ == gp_b_)) t.fail(__FILE__, __LINE__, ::gravpipe_test::compared(#a, gp_a_, "==", #b, gp_b_)); \
  } while (false)
#define REQUIRE_EQ(a, b)                                                                                 \
  do {                                                                                                   \
    const auto& gp_a_ = (a);                                                                             \
    const auto& gp_b_ = (b);                                                                             \
    if (!(gp_a_ == gp_b_)) {                                                                             \
      t.fail(__FILE__, __LINE__, ::gravpipe_test::compared(#a, gp_a_, "==", #b, gp_b_));                 \
      throw ::gravpipe_test::Context::Stop{};                                                            \
    }                                                                                                    \
  } while (false)
#define CHECK_LE(a, b)                                                                                   \
  do {                                                                                                   \
    const auto& gp_a_ = (a);                                                                             \
    const auto& gp_b_ = (b);                                                                             \
    if (!(gp_a_ <= gp_b_)) t.fail(__FILE__, __LINE__, ::gravpipe_test::compared(#a, gp_a_, "<=", #b, gp_b_)); \
  } while (false)
/// |a - b| <= tol
#define CHECK_NEAR(a, b, tol)                                                                            \
  do {                                                                                                   \
    const double gp_a_ = (a), gp_b_ = (b), gp_t_ = (tol);                                               \
    if (!(std::abs(gp_a_ - gp_b_) <= gp_t_))                                                             \
      t.fail(__FILE__, __LINE__, ::gravpipe_test::compared(#a, gp_a_, "~=", #b, gp_b_) + " (tolerance " + \
                                     std::to_string(gp_t_) + ")");                                       \
  } while (false)
/// `expr` throws an exception of type `type` (or one derived from it).
#define CHECK_THROWS_AS(expr, type)                                                             \
  do {                                                                                          \
    bool gp_thrown_ = false;                                                                    \
    try {                                                                                       \
      (void)(expr);                                                                             \
    } catch (const type&) {                                                                     \
      gp_thrown_ = true;                                                                        \
    } catch (...) {                                                                             \
      t.fail(__FILE__, __LINE__, #expr " threw something other than " #type);                  \
      gp_thrown_ = true;                                                                        \
    }                                                                                           \
    if (!gp_thrown_) t.fail(__FILE__, __LINE__, #expr " did not throw " #type);                 \
  } while (false)
