// The GRAPE-style force pipeline on the CPU: j-particle write, i-particle write, compute,
// result read, each counted and timed (seed 000, PCI-HIB, sections 3-4).
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/force_provider.hpp"
#include "gravpipe/pipeline_types.hpp"
#include "gravpipe/j_memory.hpp"
#include "gravpipe/span.hpp"
#include "gravpipe/stopwatch.hpp"

namespace gravpipe {

class CpuPipeline final : public ForceProvider {
 public:
  /// threads <= 0 uses all OpenMP threads. Throws InputError for a bad eps or G
  /// (force_request_check.hpp), BackendError for an unavailable isa.
  CpuPipeline(Precision precision, double eps, double G, const std::string& isa, int threads);

  /// j-particle write: positions (3n), masses (n >= 1) and optionally velocities (3n;
  /// needed for jerk). Replaces the previous j-set.
  void set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) override;
  /// Same particles, new positions/velocities, j-memory order kept (no sort).
  void update_j(Span<const double> pos, Span<const double> vel) override;
  /// i-particle write + compute + result read. Throws InputError for a request that breaks
  /// the providers' contract (force_request_check.hpp).
  void forces(const ForceRequest& req) override;

  std::size_t n_j() const { return n_j_; }
  bool has_j_vel() const { return has_j_vel_; }
  Precision precision() const { return precision_; }
  Isa isa() const { return isa_; }
  int threads() const { return threads_; }
  double eps() const { return eps_; }
  double G() const { return G_; }
  PipelineStats stats() const override;
  void reset_stats();

 private:
  void write_i(const ForceRequest& req, std::size_t n_padded);
  void compute(std::size_t n_padded, bool with_jerk, bool with_exclude);
  std::size_t i_row(std::size_t slot) const;
  void count_j_write(Clock::time_point t0);
  void read_results(const ForceRequest& req);

  Precision precision_;
  Isa isa_;
  int threads_;
  double eps_, G_;
  std::size_t n_j_ = 0;
  bool has_j_vel_ = false;
  // j-memory: one of the two pairs is in use, by precision.
  void write_j_mixed(Span<const double> pos, Span<const double> mass, Span<const double> vel);
  void fill_j_mixed(Span<const double> pos, Span<const double> mass, Span<const double> vel);
  void write_j_double(Span<const double> pos, Span<const double> mass, Span<const double> vel);

  std::vector<JPosMixed> j_pos_mixed_;   // mixed j-memory, in curve order (curve_order.hpp)
  std::vector<JVelMixed> j_vel_mixed_;
  std::vector<JRelMixed> j_rel_mixed_;
  std::vector<JVelRelMixed> j_vel_rel_mixed_;
  std::vector<JTileMixed> j_tiles_;
  std::vector<std::int64_t> j_order_;    // mixed j-memory slot -> user j index
  std::vector<std::int64_t> j_slot_of_;  // user j index -> slot in the mixed j-memory
  std::vector<double> j_mass_;           // kept for update_j
  std::vector<std::int64_t> i_order_;    // mixed i-memory slot -> row of the request
  std::vector<JPosDouble> j_pos_double_;
  std::vector<JVelDouble> j_vel_double_;
  IMemoryMixed i_mixed_;
  IMemoryDouble i_double_;
  ResultMemory results_;
  PipelineStats stats_;
  mutable std::mutex mutex_;  // one call at a time: the memories are shared state
};

}  // namespace gravpipe
