// Typed errors thrown by the core. A library never kills its process: the bindings map
// each type to one Python exception (bindings/module.cpp), so callers can tell bad input
// from a missing backend from a failed integration.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace gravpipe {

/// Bad arguments reaching the core (shapes, ranges). Python: ValueError.
class InputError : public std::invalid_argument {
 public:
  explicit InputError(const std::string& what) : std::invalid_argument(what) {}
};

/// A requested backend or instruction set that this build or machine does not have (an ISA
/// the CPU lacks, no usable CUDA device). Python: gravpipe.BackendUnavailableError.
class BackendError : public std::runtime_error {
 public:
  explicit BackendError(const std::string& what) : std::runtime_error(what) {}
};

/// A backend that exists but failed at work (a CUDA call that returned an error): not
/// something the caller can fix by choosing another backend. Python: RuntimeError.
class DeviceError : public std::runtime_error {
 public:
  explicit DeviceError(const std::string& what) : std::runtime_error(what) {}
};

/// A locally essential tree that lacks what a walk needs: a pruned cell (imported without
/// its children) that the walk wanted to open, so the exporting rank's MAC and the
/// receiver's disagree (tree_essential.hpp). Never a silent missing force. Python: RuntimeError.
class EssentialTreeError : public std::runtime_error {
 public:
  explicit EssentialTreeError(const std::string& what) : std::runtime_error(what) {}
};

/// An integration that cannot go on (a Hermite step below its floor, a force that is not
/// finite): names the particle (caller's index) and the time. Python: gravpipe.IntegrationError,
/// with the same two as attributes.
class IntegrationError : public std::runtime_error {
 public:
  IntegrationError(const std::string& what, std::int64_t particle, double time)
      : std::runtime_error(what), particle_(particle), time_(time) {}
  std::int64_t particle() const { return particle_; }
  double time() const { return time_; }

 private:
  std::int64_t particle_;
  double time_;
};

}  // namespace gravpipe
