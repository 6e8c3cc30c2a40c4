// Typed errors thrown by the core. A library never kills its process: the bindings map
// each type to one Python exception (bindings/module.cpp), so callers can tell bad input
// from a missing backend from a failed integration.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

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

/// An internal invariant of the core broken (a pin count below zero, a cell outside its
/// parent, keys out of order after the sort): a bug in gravpipe, never bad input. Thrown
/// only by the checks that GRAVPIPE_DEBUG_CHECKS compiles in (debug_checks.hpp), naming the
/// file, the line and the condition. Python: RuntimeError.
class InvariantError : public std::logic_error {
 public:
  explicit InvariantError(const std::string& what) : std::logic_error(what) {}
};

/// A memory budget too small for what was asked (the out-of-core store's page cache, its
/// tables, and later tree cells and lists charge one budget): says what was asked and the
/// least budget that works. Python: gravpipe.errors.MemoryBudgetError (a ValueError), with
/// `requested` and `least_budget` (bytes) as attributes.
class BudgetError : public InputError {
 public:
  BudgetError(const std::string& what, std::uint64_t requested, std::uint64_t least_budget)
      : InputError(what), requested_(requested), least_budget_(least_budget) {}
  std::uint64_t requested() const { return requested_; }
  std::uint64_t least_budget() const { return least_budget_; }

 private:
  std::uint64_t requested_, least_budget_;
};

/// A scratch-file failure of the out-of-core store (an I/O error, the disk full, a file
/// removed under us): names the file, the page (-1 when none) and the reason. Python:
/// gravpipe.errors.StoreError with `path` and `page` attributes.
class StoreError : public std::runtime_error {
 public:
  StoreError(const std::string& what, std::string path, std::int64_t page)
      : std::runtime_error(what), path_(std::move(path)), page_(page) {}
  const std::string& path() const { return path_; }
  std::int64_t page() const { return page_; }

 private:
  std::string path_;
  std::int64_t page_;
};

/// A page whose CRC32C read back from the scratch file differs from the one computed when
/// it was written: the data on disk is corrupt and is never used. Python:
/// gravpipe.errors.ChecksumError (a StoreError).
class ChecksumError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace gravpipe
