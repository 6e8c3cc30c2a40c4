// Invariant checks inside the core's hot structures (the page cache, the tree build, the
// curve sort, the particle store), compiled in only with GRAVPIPE_DEBUG_CHECKS (CMake option
// of that name), as SWIFT does with SWIFT_DEBUG_CHECKS. Input is validated once at the
// boundary; these checks catch gravpipe's own bugs where they happen instead of as a wrong
// force many steps later. A broken invariant throws InvariantError (error.hpp) naming the
// file, the line and the condition: a library never kills its process, so no assert().
// Without the flag the condition and the message are not even evaluated: the checks cost
// nothing in a release build, so they may be as thorough as a debugging session needs.
//
//   GRAVPIPE_DEBUG_ASSERT(pins >= 0, "page " + std::to_string(page));
//   GRAVPIPE_DEBUG_ONLY(const double before = sum();)   // state a later check compares with
#pragma once
#include <string>

#include "gravpipe/error.hpp"

namespace gravpipe {

/// Whether this build checks its invariants (for tests that expect a check to fire).
#if defined(GRAVPIPE_DEBUG_CHECKS) && GRAVPIPE_DEBUG_CHECKS
constexpr bool kDebugChecks = true;
#else
constexpr bool kDebugChecks = false;
#endif

namespace detail {
/// The message of a broken invariant: where, what, and the caller's detail.
inline std::string invariant_message(const char* file, int line, const char* condition, const std::string& detail) {
  std::string s = std::string("gravpipe internal invariant broken at ") + file + ":" + std::to_string(line) + ": " +
                  condition;
  if (!detail.empty()) s += " (" + detail + ")";
  return s + "; this is a bug in gravpipe, please report it";
}
}  // namespace detail

}  // namespace gravpipe

#if defined(GRAVPIPE_DEBUG_CHECKS) && GRAVPIPE_DEBUG_CHECKS
/// Throws gravpipe::InvariantError unless `cond` holds; `msg` (anything a std::string can be
/// made from) is evaluated only when it fails.
#define GRAVPIPE_DEBUG_ASSERT(cond, msg)                                                               \
  do {                                                                                                 \
    if (!(cond))                                                                                       \
      throw ::gravpipe::InvariantError(::gravpipe::detail::invariant_message(__FILE__, __LINE__, #cond, \
                                                                              std::string(msg)));      \
  } while (false)
/// Code that exists only in a checking build (state that a later check needs).
#define GRAVPIPE_DEBUG_ONLY(...) __VA_ARGS__
#else
#define GRAVPIPE_DEBUG_ASSERT(cond, msg) \
  do {                                   \
  } while (false)
#define GRAVPIPE_DEBUG_ONLY(...)
#endif
