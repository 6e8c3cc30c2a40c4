// An integrator that runs on one process's share of the particles (the other processes hold
// the rest; a distributed force provider, share_direct_forces.hpp, lets every share feel
// every other) agrees with the other processes through one collective that the caller
// supplies: the least of one int64 over all processes. Hermite takes its next block time
// with it. Both integrators also learn through it whether a particle of any process has
// failed (a step below the floor, a force that is not finite): a process that threw alone
// would leave the others waiting in a collective it never enters, so a failure is recorded
// and raised on every process at the next agreement.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>

#include "gravpipe/error.hpp"

namespace gravpipe {

/// The least of every process's value (MPI_Allreduce with MPI_MIN): a collective.
using GlobalMin = std::function<std::int64_t(std::int64_t)>;

class ShareAgreement {
 public:
  /// A value that says "this process has failed"; no block time is this small.
  static constexpr std::int64_t kFailed = std::numeric_limits<std::int64_t>::min();
  /// A value that says "nothing to offer" (a process without particles, or a plain check).
  static constexpr std::int64_t kNothing = std::numeric_limits<std::int64_t>::max();

  /// One process that agrees with itself: fail() throws at once.
  ShareAgreement() = default;
  explicit ShareAgreement(GlobalMin min);

  /// Whether other processes take part (then the integrator may hold no particle at all).
  bool shared() const { return static_cast<bool>(min_); }
  /// The least of every process's `mine`. Throws this process's recorded failure, or an
  /// IntegrationError (particle -1) saying another process failed, when any has; `t` is the
  /// time to name then.
  std::int64_t earliest(std::int64_t mine, double t);
  /// A failure of this process: thrown now by a process on its own, else recorded (the
  /// first one) for the next earliest() of every process.
  void fail(const IntegrationError& e);

 private:
  GlobalMin min_;
  std::optional<IntegrationError> failed_;
};

}  // namespace gravpipe
