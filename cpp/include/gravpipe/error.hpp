// Typed errors thrown by the core. A library never kills its process: the bindings map
// these to Python exceptions (InputError -> ValueError, BackendError -> RuntimeError).
#pragma once
#include <stdexcept>
#include <string>

namespace gravpipe {

/// Bad arguments reaching the core (shapes, ranges). Python sees ValueError.
class InputError : public std::invalid_argument {
 public:
  explicit InputError(const std::string& what) : std::invalid_argument(what) {}
};

/// A requested backend or instruction set that this build or machine does not have.
class BackendError : public std::runtime_error {
 public:
  explicit BackendError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace gravpipe
