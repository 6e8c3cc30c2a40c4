// The GRAPE-6 j-memory: per address, the particle's index, mass and predictor coefficients at
// its own time tj, exactly as g6_set_j_particle delivers them; prediction to the common time
// ti happens here, on the library side, as the hardware's predictor pipeline did.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "gravpipe/span.hpp"

namespace gravpipe::grape6 {

/// One g6_set_j_particle call's data (coefficients as GRAPE-6 takes them: a/2, jerk/6, snap/18).
struct JParticle {
  int index = 0;
  double tj = 0, mass = 0;
  double x[3] = {0, 0, 0}, v[3] = {0, 0, 0};
  double aby2[3] = {0, 0, 0}, a1by6[3] = {0, 0, 0}, a2by18[3] = {0, 0, 0};
};

/// Predicted j-particles [0, nj) at time ti: positions and velocities (3 nj, row-major),
/// masses and indices, in address order.
struct PredictedJ {
  std::vector<double> pos, vel, mass;
  std::vector<int> index;
  std::size_t size() const { return mass.size(); }
};

class JMemory {
 public:
  /// capacity: the largest number of addresses (GRAPE-6's j-memory size).
  explicit JMemory(std::size_t capacity) : capacity_(capacity) {}

  /// Store p at address. Throws InputError for an address outside [0, capacity) or
  /// non-finite data (the address is then marked invalid until written again).
  void write(int address, const JParticle& p);
  /// Forget every particle (g6_reset).
  void clear();

  std::size_t capacity() const { return capacity_; }
  /// Bumped by every write: predictions and index maps are cached against it.
  std::uint64_t version() const { return version_; }
  /// Bumped only when a write changes a mass or an index, or the memory is cleared: the
  /// pipeline then needs a full j-write (set_j), not a position update.
  std::uint64_t layout_version() const { return layout_version_; }

  /// Throws InputError naming the first address in [0, nj) that was never written or holds
  /// invalid data.
  void check_filled(std::size_t nj) const;
  /// Predict addresses [0, nj) to time ti into out (check_filled(nj) first).
  void predict(std::size_t nj, double ti, PredictedJ& out, int threads) const;
  /// The address in [0, nj) holding `index`: -1 when none; throws InputError when several
  /// do (GRAPE-6 would skip all of them; the pipeline excludes one j per i-particle).
  std::int64_t address_of(int index, std::size_t nj) const;

 private:
  enum class State : std::uint8_t { Empty, Valid, Invalid };
  void rebuild_index_map() const;

  std::size_t capacity_;
  std::vector<JParticle> slots_;
  std::vector<State> state_;
  std::uint64_t version_ = 0, layout_version_ = 0;
  // index -> address (-2: several addresses), rebuilt lazily when the layout changed
  mutable std::unordered_map<int, std::int64_t> address_of_index_;
  mutable std::unordered_map<int, std::vector<std::int64_t>> duplicates_;
  mutable std::uint64_t map_version_ = ~std::uint64_t{0};
};

}  // namespace gravpipe::grape6
