// The byte budget of an out-of-core run: everything whose size grows with N (the store's
// page frames and tables, and later tree cells, sort buffers, interaction lists) charges it
// through RAII reservations, so a run either fits the budget the user named
// (memory_budget="4GiB") or stops with an error that says what was asked and the least
// budget that works, instead of swapping or being killed by the OOM killer.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace gravpipe {

/// Bytes from "4GiB", "512 MiB", "1.5GB", "64k", "4096" (binary units KiB..TiB and K, M, G,
/// T; decimal kB..TB; case-insensitive). Throws InputError naming the text otherwise.
std::uint64_t parse_byte_size(const std::string& text);

/// Bytes as "4 GiB", "1.5 MiB", "512 B" (for messages).
std::string format_bytes(std::uint64_t bytes);

class MemoryBudget;

/// Bytes charged to a budget until the reservation is destroyed (move-only).
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
  Reservation& operator=(Reservation&& o) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() { release(); }
  std::uint64_t bytes() const { return bytes_; }
  void release();

 private:
  friend class MemoryBudget;
  Reservation(MemoryBudget* budget, std::uint64_t bytes) : budget_(budget), bytes_(bytes) {}
  MemoryBudget* budget_ = nullptr;  // not owned; the budget outlives its reservations
  std::uint64_t bytes_ = 0;
};

/// A fixed byte budget, safe to charge from many threads. It must outlive its reservations.
class MemoryBudget {
 public:
  explicit MemoryBudget(std::uint64_t bytes) : total_(bytes) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  /// Charge `bytes` for `what` (named in the error). Over budget: BudgetError that says
  /// what was asked, what is charged already, and the least budget that would have worked
  /// (charged + bytes).
  Reservation reserve(std::uint64_t bytes, const std::string& what);

  std::uint64_t total() const { return total_; }
  std::uint64_t used() const { return used_.load(); }
  std::uint64_t peak() const { return peak_.load(); }

 private:
  friend class Reservation;
  void give_back(std::uint64_t bytes) { used_.fetch_sub(bytes); }
  const std::uint64_t total_;
  std::atomic<std::uint64_t> used_{0};
  std::atomic<std::uint64_t> peak_{0};
};

}  // namespace gravpipe
