// One GRAPE-6 "cluster": j-memory, the current time ti, a gravpipe force pipeline, the
// i-particles sent by g6calc_firsthalf and what the last g6calc_lasthalf left behind
// (neighbour lists, nearest distances). Every call checks its order and arguments and
// throws InputError; g6_api.cpp turns that into a message and a GRAPE-6 error return.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "g6_jmemory.hpp"
#include "g6_neighbours.hpp"
#include "gravpipe/pipeline.hpp"
#include "gravpipe/pipeline_types.hpp"

namespace gravpipe::grape6 {

/// What g6_open reads from the environment (see g6.h).
struct Settings {
  Precision precision = Precision::Mixed;
  std::size_t npipes = 256;
  std::size_t jmem = std::size_t{1} << 20;
  std::size_t nb_max = 8192;
  static Settings from_environment();
};

/// The i-particles of one g6calc_firsthalf/lasthalf pair (row-major copies).
struct IParticles {
  std::size_t nj = 0, ni = 0;
  double eps2 = 0;
  std::vector<int> index;
  std::vector<double> x, v, h2;
};

/// Outputs of a g6calc_lasthalf* call (3 ni, 3 ni, ni; nn empty or ni).
struct ForceOutput {
  Span<double> acc, jerk, pot;
  Span<int> nn;
};

class Context {
 public:
  explicit Context(const Settings& settings);

  const Settings& settings() const { return settings_; }
  void set_precision(Precision p);
  void set_ti(double ti);
  void set_j_particle(int address, const JParticle& p);
  void reset();

  /// g6calc_firsthalf: validate and keep the i-particles for the lasthalf that follows.
  void firsthalf(IParticles i);
  /// A firsthalf whose arguments were refused: the next lasthalf reports why.
  void firsthalf_failed(const std::string& why);
  /// g6calc_lasthalf(2): forces (and nearest neighbours when out.nn is not empty) on the
  /// i-particles of the pending firsthalf; nj and ni must match it.
  void lasthalf(std::size_t nj, std::size_t ni, const ForceOutput& out);
  /// g6_read_neighbour_list: GRAVPIPE_G6_OVERFLOW when some list was longer than nb_max.
  int read_neighbour_list();
  /// g6_get_neighbour_list: copies at most maxlength indices, sets nblen to how many it
  /// copied; GRAVPIPE_G6_OVERFLOW when the list was longer (than maxlength or nb_max).
  int get_neighbour_list(int ipipe, int maxlength, int& nblen, Span<int> nbl) const;
  void nearest_r2(std::size_t ni, Span<double> r2) const;

 private:
  void predict(std::size_t nj);
  /// Throws InputError while the last g6_set_ti failed.
  void check_ti() const;
  void write_pipeline(double eps2);
  void ensure_neighbour_tiles();
  void search_neighbours(const IParticles& i, bool want_nearest, Span<int> nn);

  Settings settings_;
  JMemory jmem_;
  double ti_ = 0;
  std::string ti_error_;  // why the last g6_set_ti failed; empty after one that succeeded
  int threads_;

  // j-particles predicted to ti, cached against (ti, j-memory version, nj)
  PredictedJ pred_;
  bool pred_valid_ = false;
  double pred_ti_ = 0;
  std::uint64_t pred_version_ = 0;
  std::size_t pred_nj_ = 0;
  std::uint64_t pred_stamp_ = 0;  // bumped by every prediction

  // the pipeline and what it holds
  std::unique_ptr<CpuPipeline> pipe_;
  double pipe_eps2_ = -1;
  std::uint64_t pipe_stamp_ = ~std::uint64_t{0};   // pred_stamp_ of the j-set it holds
  std::uint64_t pipe_layout_ = ~std::uint64_t{0};  // jmem_.layout_version() at its last set_j
  std::size_t pipe_nj_ = 0;
  int updates_since_sort_ = 0;

  // k-d order of the j-set at the last re-sort, and neighbour tiles over pred_
  std::vector<std::int64_t> order_;
  NeighbourSearch search_;
  std::uint64_t search_stamp_ = ~std::uint64_t{0};

  IParticles pending_;
  bool has_pending_ = false;
  std::string firsthalf_error_;
  std::vector<std::int64_t> exclude_;

  // left by the last lasthalf
  std::vector<std::vector<int>> lists_;
  std::vector<std::size_t> list_counts_;
  bool lists_valid_ = false, lists_read_ = false;
  std::vector<double> nn_r2_;
  bool nn_valid_ = false;
};

}  // namespace gravpipe::grape6
