// Local (Taylor) expansion about a run's centre of the field of cells far from the run
// (tree_local.cpp). Internal to src/tree.
#pragma once
#include <array>
#include <cstdint>

#include "gravpipe/tree.hpp"

namespace gravpipe {

/// Order of the local expansion of the potential: the acceleration is then exact to
/// second order in the offset from the centre.
constexpr int kLocalOrder = 4;

class LocalExpansion {
 public:
  /// Start an empty expansion about `centre`.
  void reset(const double centre[3]);
  /// Add a cell's monopole (and, with `quadrupole`, its second moments), softened by eps2.
  void add_cell(const CellTerms& c, double eps2, bool quadrupole);
  /// Add the expansion's G-free sums at (x, y, z): pot += sum m/R, acc += its gradient
  /// (pointing at the mass), as the list kernels' sums.
  void evaluate(double x, double y, double z, double& ax, double& ay, double& az, double& pot) const;

 private:
  double g_[3] = {0, 0, 0};
  std::array<double, (kLocalOrder + 1) * (kLocalOrder + 2) * (kLocalOrder + 3) / 6> coeff_{};
};

}  // namespace gravpipe
