// The external sort of an out-of-core store by curve key (Salmon & Warren, seed 004: the
// particles' pages in curve order are what make the treecode's page access local).
//
// The store holds each carried field F twice: F, the particles as the run uses them, and its
// twin "F~", scratch for the sort. The sort
//   1. reads the positions block by block for their bounding cube (the in-core frame,
//      curve_order.hpp: min and max are exact, so block by block gives the same cube);
//   2. cuts the particles into runs that fit the sort buffer, sorts each run in memory by
//      (key, index) and writes every carried field, permuted, to the twins (the field
//      "index", the particle's position in the caller's order, breaks ties exactly as the
//      in-core stable sort does, so the order is the in-core order bit for bit);
//   3. merges the runs' keys and indices (a heap over the run heads), writing "key" and
//      "index" in curve order and remembering which run each output particle came from
//      (2 bytes a particle);
//   4. permutes the other carried fields column by column: each output chunk takes a
//      contiguous slice of every run, so every read and write is sequential in its column.
// One run (the buffer holds every particle) skips the twins: the run is written in place.
// The sort buffer and the run sources are charged to the store's budget.
//
// With a kick-drift (StoreSortConfig::kick_drift, a leapfrog step's first half) the runs are
// kicked and drifted as they are read, so the step makes no pass of its own for it; the
// bounds pass is skipped and the keys use the frame of the predicted bounds. The runs' true
// bounds are checked against it bit for bit before anything but the twins is written: a
// prediction that misses leaves the fields as they were (StoreSortStats::kick_drift_applied
// false) for the caller to kick-drift and sort the plain way.
//
// The first pass can also be made ahead, run by run, while the tree walk runs (SortRunWriter,
// walk_runs.hpp): the sort then checks that those runs used its kick-drift and its frame
// (StoreSortConfig::presorted) and goes straight to the merge.
//
// An observer (SortObserver, StoreSortConfig::observer) sees the merge's keys and the
// permute's positions and masses as they are written: the out-of-core tree's cells are built
// there (streamed_tree_build.hpp) rather than from the pages read back. After the merge, the
// sort's charge shrinks to the permute's buffers, so that the observer's fit beside them.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/span.hpp"

namespace gravpipe {

/// The twin of a carried field, where the sort keeps its runs.
inline std::string sort_twin(const std::string& field) { return field + "~"; }

/// vel += h acc, then pos += dt vel (paged_kick_drift's arithmetic), "acc" read, applied by
/// the sort to each run as it reads it; `bounds`: the predicted bounds of the drifted
/// positions (PagedClosingKick::next_bounds), whose frame keys the runs.
struct SortKickDrift {
  double h = 0, dt = 0;
  AxisBounds bounds;
};

/// Runs made ahead of the sort (SortRunWriter, during the walk): their length, the frame
/// they are keyed in, the kick-drift they applied, and the bounds of the drifted positions.
struct PresortedRuns {
  std::int64_t run = 0;
  CurveBox frame;
  double h = 0, dt = 0;
  AxisBounds drifted;
};

/// Sees the particles in curve order as the sort makes it, so that a pass over them can ride
/// on the sort instead of reading them back (the out-of-core tree's build:
/// streamed_tree_build.hpp). Called from the sort's thread, in order, each particle once.
/// Only a sort of several runs calls it (one run is sorted in place, with no merge); an
/// observer that has not seen permute_done() was not given every particle.
class SortObserver {
 public:
  virtual ~SortObserver() = default;
  /// The merge's sorted keys of particles [begin, begin + keys.size()).
  virtual void merged(std::int64_t begin, Span<const std::int64_t> keys) = 0;
  /// Every key merged, before the permute.
  virtual void merge_done() = 0;
  /// Whether permuted() is still wanted (an observer that gave up says no).
  virtual bool wants_bodies() const = 0;
  /// The permute's positions and masses of particles [begin, begin + n) (float64 values, as
  /// the pages hold them), with their keys, when "pos" and "mass" share their pages, so that
  /// one chunk holds them all. On a thread of the sort's while it loads the next chunk.
  virtual void permuted(std::int64_t begin, std::int64_t n, const void* x, const void* y, const void* z,
                        const void* m, const std::int64_t* keys) = 0;
  /// Every particle permuted, its pages written.
  virtual void permute_done() = 0;
};

struct StoreSortConfig {
  /// Fields permuted into curve order besides "key" and "index" (each needs its twin).
  std::vector<std::string> carried = {"pos", "vel", "mass", "id"};
  std::uint64_t buffer_bytes = std::uint64_t{64} << 20;  // runs and merge buffers
  int threads = 1;
  /// Kick and drift as the runs are read ("pos" and "vel" must be carried).
  std::optional<SortKickDrift> kick_drift;
  /// With several runs, read the next run (and kick-drift it) on a loader thread while this
  /// one is sorted and written: a second buffer, so shorter runs. Never changes a bit.
  bool overlap_reads = true;
  /// Whether the sorted keys go to the field "key". An observer that builds the tree takes
  /// them as the merge makes them, and a caller that can make them again from the positions
  /// in the sort's frame (curve_key: the same bits) when it needs them leaves them out: N =
  /// 1e7, 80 MB less to the disk a step (ParticleStore.derive_curve_keys in Python).
  bool write_keys = true;
  /// The bounds of the positions before a leapfrog step's drift, when the store holds (or
  /// the kick-drift makes) that step's drifted positions: they are keyed in
  /// step_frame(drift_origin, their bounds), the in-core leapfrog's frame; without it, in
  /// their own bounding cube.
  std::optional<AxisBounds> drift_origin;
  /// The cube the keys divide, when it is given rather than made from the bounds: one that
  /// every MPI rank shares (paged_domain_tree.hpp), so that each rank's tree is cells of one
  /// octree. Every position must lie in it (curve_key clamps what does not).
  std::optional<CurveBox> frame;
  /// Runs already in the twins: with a kick-drift of the same h and dt whose frame (from the
  /// predicted bounds) is theirs, and drifted bounds that give that frame too, the sort goes
  /// straight to its merge (StoreSortStats::presorted_used); otherwise it makes its own.
  std::optional<PresortedRuns> presorted;
  /// Told the sorted particles as they are written (not owned; may be null).
  SortObserver* observer = nullptr;
};

struct StoreSortStats {
  CurveBox frame;
  AxisBounds bounds;  // of the positions sorted (drifted, with a kick-drift)
  std::int64_t runs = 0, run_particles = 0;
  /// The kick-drift asked for was applied (false: not asked for, or its bounds missed and
  /// the store is as it was).
  bool kick_drift_applied = false;
  bool presorted_used = false;  // the runs were made ahead (config.presorted)
  int permute_lanes = 0;        // the permute's lanes side by side (0: no permute, one run)
  bool permute_in_merge = false;  // its second lane started during the merge
  double seconds_bounds = 0, seconds_runs = 0, seconds_merge = 0, seconds_permute = 0;
  /// Bytes read and written by each pass (the store's counters around it)
  std::int64_t runs_read = 0, runs_written = 0, merge_read = 0, merge_written = 0, permute_read = 0,
               permute_written = 0;
  double seconds() const { return seconds_bounds + seconds_runs + seconds_merge + seconds_permute; }
};

/// Bytes of the sort buffer a particle of a run takes (with a kick-drift: more, its
/// velocities and a column of accelerations held too; with overlapped reads, which only
/// several runs use, a second buffer of what is read): one run needs n times
/// sort_run_bytes_per_particle(kick_drift, false).
std::uint64_t sort_run_bytes_per_particle(bool kick_drift, bool overlap_reads = false);

/// The least sort buffer (bytes) that sorts n particles in at most 65535 runs.
std::uint64_t least_sort_buffer(std::int64_t n);

/// The sort's first pass with a kick-drift, one run at a time, for a caller whose runs'
/// inputs become ready at different times (the walk's closing kick): write(k) reads run k
/// (particles [k run, (k + 1) run)), kicks and drifts it, keys it in `frame`, sorts it and
/// writes it to the twins, with sort_store_by_curve's arithmetic. The twins are discarded
/// when it is made; its buffers are charged to the store's budget. One write at a time.
class SortRunWriter {
 public:
  /// `c`: the sort's configuration (carried fields, ids, and its kick_drift's h and dt).
  SortRunWriter(ParticleStore& s, const StoreSortConfig& c, std::int64_t run, const CurveBox& frame);
  ~SortRunWriter();
  SortRunWriter(const SortRunWriter&) = delete;
  SortRunWriter& operator=(const SortRunWriter&) = delete;
  /// Bytes of the budget a writer of runs of `run` particles takes.
  static std::uint64_t budget_bytes(std::int64_t run);

  std::int64_t runs() const;
  void write(std::int64_t k);
  /// What the sort needs to use the runs (after every run is written).
  PresortedRuns result() const;

 private:
  struct Buffers;
  ParticleStore& s_;
  StoreSortConfig c_;
  std::int64_t run_;
  CurveBox frame_;
  std::unique_ptr<Buffers> b_;
};

/// Sort every particle of the store into curve order (within their bounding cube): fields
/// "pos" (3 x f64), "index" (i64, distinct: the caller's order), "key" (i64, written) and
/// the carried fields, each with its twin. Throws BudgetError (naming the least budget)
/// when the buffer or the budget is too small, InputError for a missing field.
StoreSortStats sort_store_by_curve(ParticleStore& s, const StoreSortConfig& config);

}  // namespace gravpipe
