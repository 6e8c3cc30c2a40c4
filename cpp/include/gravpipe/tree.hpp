// The Barnes-Hut treecode (Barnes & Hut 1986) with grouped interaction lists (Barnes 1990;
// Makino 1991's treecode on GRAPE): particles in Hilbert order, an octree whose cells are
// contiguous ranges of that order, monopole + quadrupole moments, one interaction list per
// group of <= n_crit particles, and the lists evaluated with the pipeline's pairwise
// interaction (pair_interaction.hpp).
//
// The pieces are separate functions over plain data, one file each in cpp/src/tree/:
//   tree_build.cpp     octree from the sorted keys (keys and their order: curve_order.hpp)
//   tree_moments.cpp   mass, centre of mass, bounding box, quadrupole, opening radius
//   tree_walk.cpp      groups, MAC, interaction lists, walks shared by runs of groups
//   tree_evaluate.cpp  list evaluation (SIMD lanes over the group's i-particles)
//   tree_local.cpp     local (Taylor) expansions of far cells about a run's centre
//   tree_runs.cpp      one force evaluation: runs of groups, each a shared part (the walk
//                      of the run's top, the cells all members accept, the local
//                      expansion) and a part per member group
//   tree.cpp           the Tree that ties them together, and its ForceProvider
// Moments, gathering and evaluation read particles through an accessor (particle_view.hpp),
// and the walk, gathering and local expansions read cells through one (InCoreCells below),
// never through arrays they own, so that the out-of-core tree (paged_tree.hpp) serves the
// same code from pages.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/curve_order.hpp"
#include "gravpipe/force_provider.hpp"
#include "gravpipe/particle_view.hpp"
#include "gravpipe/pipeline_types.hpp"
#include "gravpipe/span.hpp"

namespace gravpipe {

class CudaTreeLists;  // cuda_tree_lists.hpp

/// Deepest octree level: 21 bits per axis of the curve key. Cells at this level are
/// leaves whatever their count, so identical coordinates cannot recurse forever.
constexpr int kTreeMaxLevel = 21;

struct TreeParams {
  double eps = 0;           // Plummer softening, as for direct summation
  double G = 1;
  /// Barnes-Hut opening angle, > 0: the cheapest inside the accuracy the treecode promises
  /// (Plummer N = 1e6: median |da|/|a| <= 3e-4, 99th percentile <= 1.5e-3; BENCHMARKS.md)
  double theta = 0.6;
  bool quadrupole = true;
  /// An accepted cell contributes its monopole alone when its quadrupole term, relative
  /// to its monopole term at the group's distance d, is below quad_tol theta^3 (the scale
  /// of the expansion's truncation error at the opening radius): |Q|_F / (M d^2) <=
  /// quad_tol theta^3. A monopole costs a third of a quadrupole term; the test measures the
  /// cell's own anisotropy. The dropped terms add coherently in flattened or elongated
  /// systems (discs, filaments), so this is an opt-in for near-isotropic ones.
  /// >= 0; 0 (default): quadrupoles on every accepted cell.
  double quad_tol = 0;
  /// Cells far from a run of groups reach its particles through one local expansion
  /// about the run's centre (tree.cpp, tree_local.cpp) rather than the list kernels.
  bool local_expansion = true;
  int n_leaf = 16;          // leaf capacity (cells of <= n_leaf particles are not split)
  int n_crit = 256;         // group size: cells of <= n_crit particles share one list
  double alpha = 0;         // relative (GADGET) criterion when > 0 and old |a| exist
  int threads = 0;          // <= 0: all OpenMP threads
  Precision precision = Precision::Mixed;  // of the list kernels (pipeline_types.hpp)
  std::string isa = "auto";                // of the list kernels, resolved as resolve_isa does
  /// Where the lists are evaluated: "cpu" (the isa's kernels) or "cuda" (an NVIDIA GPU,
  /// cuda_tree_lists.hpp; mixed precision and the in-core Tree only). The walk and the
  /// gathering run on the CPU threads either way.
  std::string backend = "cpu";
  int device = 0;  // CUDA device number, for backend "cuda"
};

/// The largest opening angle at which the MAC means anything: a cell is accepted beyond
/// size/theta + |com - box centre| from its centre of mass, and a point of its box lies
/// within sqrt(3)/2 size + |com - box centre| of it, so beyond 2/sqrt(3) a particle inside
/// a cell's own box could take the cell's multipole expansion, which diverges there.
constexpr double kThetaMax = 1.1547005383792517;  // 2/sqrt(3)

/// Throws InputError naming the first bad parameter (theta, eps, n_leaf, ...).
void check_tree_params(const TreeParams& p);
/// Throws InputError when p asks for backend "cuda": `who` (a tree without a GPU path:
/// the out-of-core and the domain trees) names itself in the message.
void refuse_tree_cuda(const TreeParams& p, const std::string& who);

/// Work and time of the last force evaluation (and of the build that preceded it).
/// "per body" figures are totals divided by the number of i-particles.
struct TreeStats {
  std::uint64_t n_j = 0, n_i = 0, nodes = 0, leaves = 0, groups = 0;
  std::uint64_t pp_interactions = 0, pc_interactions = 0, mac_tests = 0;
  /// the part of pc_interactions that reached the bodies through their run's local
  /// expansion (cells far from the run) rather than through the list kernels
  std::uint64_t pc_local_interactions = 0;
  double seconds_sort = 0, seconds_build = 0, seconds_moments = 0;
  // walk and evaluate run interleaved per group inside one parallel loop: they are
  // thread-seconds divided by the thread count, so they add up to that loop's wall time.
  double seconds_walk = 0, seconds_evaluate = 0;
  double seconds_forces = 0;  // wall time of the whole forces() call
  bool relative_criterion_used = false;
};

// ---- octree (tree_build.cpp) -------------------------------------------------------------

/// What the walk reads of one cell, in one cache line: the walk visits cells in scattered
/// order, and with one array per field every MAC test would miss the cache once per field.
struct alignas(64) WalkCell {
  double cx = 0, cy = 0, cz = 0;  // centre of mass
  double r_open2 = 0;             // (size/theta + delta)^2
  double mono_d2 = 0;             // d^2 beyond which the monopole suffices (quad_tol)
  std::int64_t begin = 0, end = 0;
  std::int32_t first_child = -1;
  std::int32_t n_children = 0;
};

/// The particle range (begin = end = kPrunedRange) of a cell imported from another rank
/// without its children or particles (tree_essential.hpp): a leaf that must never be opened.
constexpr std::int64_t kPrunedRange = -2;

/// Cells as structure-of-arrays. Children of a cell are contiguous and come after it, so a
/// reverse sweep over the index visits children before parents.
struct TreeNodes {
  std::vector<std::int64_t> begin, end;     // particle range [begin, end) in curve order
  std::vector<std::int32_t> first_child;    // -1 for a leaf
  std::vector<std::int8_t> n_children;
  std::vector<std::int8_t> level;
  // moments (tree_moments.cpp)
  std::vector<double> mass, cx, cy, cz;               // mass and centre of mass
  std::vector<double> lo_x, lo_y, lo_z, hi_x, hi_y, hi_z;  // particle bounding box
  std::vector<double> size;                           // longest side of the bounding box
  std::vector<double> r_open2;                        // (size/theta + delta)^2
  // traceless quadrupole about the com, Q = sum m (3 y y^T - |y|^2 I), and its trace
  // part T = sum m |y|^2, which the softened expansion needs (tree_evaluate.cpp)
  std::vector<double> qxx, qxy, qxz, qyy, qyz, qzz, qtr;
  std::vector<WalkCell> walk;  // copies of the fields above that the walk reads
  std::size_t count() const { return begin.size(); }
  bool is_leaf(std::size_t c) const { return first_child[c] < 0; }
};

// ---- cells as the walk and the evaluation read them ----------------------------------------
//
// The walk, the MAC, gathering and local expansions read cells through an accessor, as they
// read particles (particle_view.hpp), so that the out-of-core tree serves the same code from
// the pages of its cell table (paged_cells.hpp). A cell accessor is any type with
//   WalkCell walk(std::int32_t k) const;      what the walk reads (one cache line)
//   CellTerms terms(std::int32_t k) const;    what gathering and local expansions read
//   double mass_size2(std::int32_t k) const;  M l^2, for the relative criterion
//   std::int32_t root() const;                where every walk starts (0 but in a tree whose
//                                             top cells come after its body: tree_essential.hpp)
// used by one thread at a time; an evaluation asks the shared cells for one accessor per
// thread with reader(). The in-core one reads TreeNodes' arrays (inlined: nothing to pay).

/// A cell's monopole and quadrupole as the kernels and local expansions use them.
struct CellTerms {
  double cx, cy, cz, m;                    // centre of mass and mass
  double qxx, qxy, qxz, qyy, qyz, qzz, qtr;  // traceless Q about the com and its trace part T
};

/// Octree over sorted keys: a cell with more than n_leaf particles below kTreeMaxLevel is
/// split into its non-empty octants.
TreeNodes build_octree(Span<const std::uint64_t> sorted_keys, int n_leaf);
/// The same into `nodes`, whose arrays are emptied first and keep their capacity.
void build_octree_into(Span<const std::uint64_t> sorted_keys, int n_leaf, TreeNodes& nodes);

/// The cell accessor over TreeNodes in memory; its own reader (a view: copy freely).
class InCoreCells {
 public:
  explicit InCoreCells(const TreeNodes& t) : t_(&t) {}
  std::size_t count() const { return t_->count(); }
  const WalkCell& walk(std::int32_t k) const { return t_->walk[static_cast<std::size_t>(k)]; }
  CellTerms terms(std::int32_t k) const {
    const TreeNodes& t = *t_;
    const auto c = static_cast<std::size_t>(k);
    return {t.cx[c], t.cy[c], t.cz[c], t.mass[c], t.qxx[c], t.qxy[c], t.qxz[c], t.qyy[c], t.qyz[c], t.qzz[c], t.qtr[c]};
  }
  double mass_size2(std::int32_t k) const {
    const auto c = static_cast<std::size_t>(k);
    return t_->mass[c] * t_->size[c] * t_->size[c];
  }
  std::int32_t root() const { return 0; }
  InCoreCells reader() const { return *this; }

 private:
  const TreeNodes* t_;
};

/// Fill the moments of every cell from the particles (an accessor, particle_view.hpp, in
/// curve order), and `walk`. Instantiated for InCoreParticles.
template <class Particles>
void compute_moments(TreeNodes& t, const Particles& p, double theta, double quad_tol, int threads);

/// Moments of the internal cell c from its children's (which must be done), and its
/// size and opening radius: one step of compute_moments, also used for the cells that join
/// grafted trees (tree_essential.cpp).
void cell_from_children(TreeNodes& t, std::size_t c, double theta);

/// The walk's copies of the cells' fields (TreeNodes::walk), from the moments.
void fill_walk_cells(TreeNodes& t, double theta, double quad_tol, int threads);

// ---- groups, MAC and interaction lists (tree_walk.cpp) -----------------------------------

/// A set of i-particles [i_begin, i_end) (in the evaluation's i order) sharing one list.
/// j-cells whose particle range meets [ex_begin, ex_end) contain an excluded j-particle of
/// the group and are always opened (empty range: none).
struct Group {
  std::int64_t i_begin = 0, i_end = 0;
  std::int64_t ex_begin = 0, ex_end = 0;
  double lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};  // bounding box of the i-particles
  double a_min = 0;                            // smallest |a_old| in the group (0: none)
};

/// Self-gravity groups: the highest cells with <= n_crit particles (or leaves), in curve order.
std::vector<std::int32_t> group_cells(const TreeNodes& t, int n_crit);

/// One group's list. The cell buffers grow as a walk needs them and are reused from group
/// to group (their length follows the list's, ~log N, not the tree's size).
struct InteractionList {
  std::vector<std::int32_t> near_buf, far_buf;
  std::size_t n_near = 0, n_far = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;  // particle ranges of opened leaves
  std::uint64_t mac_tests = 0;
  /// Pruned cells (kPrunedRange) the walk wanted to open: their children live on another
  /// rank, so a non-zero count is a broken MAC contract and the evaluation throws.
  std::uint64_t pruned_opened = 0;
  std::vector<std::int32_t> stack;  // the walk's scratch
  /// Accepted cells that take the multipole expansion.
  Span<const std::int32_t> cells() const { return {near_buf.data(), n_near}; }
  /// Accepted cells whose monopole suffices (WalkCell::mono_d2), and every accepted cell
  /// without quadrupoles.
  Span<const std::int32_t> far_cells() const { return {far_buf.data(), n_far}; }
};

struct MacParams {
  double G = 1;
  double alpha = 0;  // > 0 with g.a_min > 0: also open if G M l^2 / d^4 > alpha a_min
  bool quadrupole = true;  // false: every accepted cell goes to far_cells
};

/// Walk the tree for one group: a cell is accepted when it holds no excluded particle of
/// the group and the distance d from the group's box to its com exceeds its opening radius
/// size/theta + |com - box centre|; opened leaves give their particle ranges.
/// With `start`, the walk begins from those cells instead of the root (a run's frontier).
/// Cells through an accessor (InCoreCells, PagedCellReader).
template <class Cells>
void walk_group(const Cells& t, const Group& g, const MacParams& mac, InteractionList& out,
                Span<const std::int32_t> start = {});

/// The shared part of the walks of a run of groups (`run`: the union of their boxes and
/// excluded ranges). Cells the run accepts go to `shared` (every member accepts them);
/// leaves, and cells that some member accepts, go to `frontier`, where each member's own
/// walk_group continues; cells no member accepts are opened here once. Each member's
/// shared + own list is then exactly the list of its own walk from the root, for a
/// fraction of the MAC tests.
template <class Cells>
void walk_run(const Cells& t, const Group& run, Span<const Group> members, const MacParams& mac,
              InteractionList& shared, std::vector<std::int32_t>& frontier);

// ---- evaluation (tree_evaluate.cpp) ------------------------------------------------------

/// One list entry as the kernels broadcast it: a particle (or, without quadrupoles, a
/// cell's monopole, which is the same pseudo-particle) and a cell with its quadrupole.
/// Records rather than one array per field: an entry is one or two cache-line reads.
template <class T>
struct ListParticle {
  T x, y, z, m;
};
template <class T>
struct ListCell {
  T x, y, z, m;
  T qxx, qxy, qxz, qyy, qyz, qzz, qtr, pad;
};

/// Raw views of a list or of sinks in one precision, for the kernels.
template <class T>
struct ListView {
  const ListParticle<T>* p;
  const std::int64_t* pidx;    // sorted index of the first n_masked particles
  std::size_t np, n_masked;
  const ListCell<T>* c;        // cells with quadrupoles (none without)
  std::size_t nc;
};
template <class T>
struct SinkView {
  const T *x, *y, *z;
  const std::int64_t* exclude;
};

/// A list's particles and cells in contiguous arrays: the "j-particle write" of the GRAPE
/// treecode. Double: absolute float64 coordinates. Mixed: float32 coordinates relative to
/// the group centre, float32 moments.
template <class T>
struct ListArrays {
  std::vector<ListParticle<T>> p;
  std::vector<ListCell<T>> c;
};

struct GatheredList {
  ListArrays<double> d;
  ListArrays<float> f;
  std::vector<std::int64_t> pidx;  // sorted index of each masked particle (for exclusion)
  std::size_t n_masked = 0;        // the first n_masked particles may hold excluded ones
  std::size_t n_source_particles = 0, n_source_cells = 0;  // what the list holds
  bool mixed = false;
  /// Copy the list's particles (read through the accessor p, one block per opened leaf)
  /// and cells; ranges meeting [ex_begin, ex_end) go first. Without quadrupoles the cells
  /// join the particle stream as pseudo-particles. Mixed: coordinates relative to `centre`
  /// (the group's). Instantiated for in-core particles and cells and for paged ones.
  template <class Particles, class Cells>
  void gather(const InteractionList& l, const Cells& t, const Particles& p, bool quadrupole,
              std::int64_t ex_begin, std::int64_t ex_end, Precision precision, const double centre[3]);
  std::size_t n_particles() const { return n_source_particles; }
  std::size_t n_cells() const { return n_source_cells; }
  ListView<double> view_d() const { return view(d); }
  ListView<float> view_f() const { return view(f); }

 private:
  template <class T>
  ListView<T> view(const ListArrays<T>& a) const {
    return {a.p.data(), pidx.data(), a.p.size(), n_masked, a.c.data(), a.c.size()};
  }
};

/// The group's i-particles and their results, structure-of-arrays padded to tree_i_pad.
/// Double: x/y/z absolute; mixed: xf/yf/zf relative to the group centre.
struct GroupSinks {
  std::vector<double> x, y, z;
  std::vector<float> xf, yf, zf;
  std::vector<std::int64_t> exclude;  // sorted j index to leave out, or -1
  std::vector<double> ax, ay, az, pot;
  SinkView<double> view_d() const { return {x.data(), y.data(), z.data(), exclude.data()}; }
  SinkView<float> view_f() const { return {xf.data(), yf.data(), zf.data(), exclude.data()}; }
};
/// Sinks are padded to whole SIMD vectors of the ISA's kernels (at least kTreeIPad); the
/// kernels take them in blocks of two vectors and finish an odd vector alone, so padding
/// never exceeds one vector.
constexpr std::size_t kTreeIPad = 8;
constexpr std::size_t tree_i_pad(Isa isa) {
  const auto lanes = static_cast<std::size_t>(isa_float_lanes(isa));
  return lanes > kTreeIPad ? lanes : kTreeIPad;
}

/// n_i is a multiple of tree_i_pad(isa); the sinks' results are overwritten (unscaled by G; pot
/// positive, sum m/r).
void evaluate_group(const GatheredList& l, GroupSinks& s, std::size_t n_i, double eps2, Isa isa);

// ---- the tree ------------------------------------------------------------------------------

/// The arrays a tree is built in, handed from one tree to the next (TreeForceProvider
/// rebuilds every step): a new tree resizes them, keeping their capacity, so that a step
/// faults no fresh pages in. Fresh arrays of ~170 bytes a particle each step cost ~17% of an
/// N = 1e7 step on a VM (BENCHMARKS.md, "Barnes-Hut treecode, CPU"). Their values are never
/// read back. A tree built with storage keeps its build's scratch (keys and the sort's second
/// buffers, 24 bytes a particle) for the next; one built without frees it.
struct TreeStorage {
  std::vector<std::uint64_t> keys;  // the build's keys (scratch)
  SortScratch sort;                 // the radix sort's second buffers (scratch)
  std::vector<std::int64_t> order, rank;
  std::vector<double> x, y, z, m, a_old;
  TreeNodes nodes;
  /// The GPU's lanes of backend "cuda" (pinned and device buffers, streams), handed on
  /// like the arrays so that each step's tree reuses them; null for backend "cpu".
  std::shared_ptr<CudaTreeLists> device;
};

/// A tree over one set of source particles. Throws InputError for bad parameters or a
/// request that breaks the providers' contract (force_request_check.hpp).
class Tree {
 public:
  /// `frame` (optional): the cube the particles are keyed in (step_frame in a time step);
  /// by default their bounding cube. `storage` (optional): arrays to build in, taken over
  /// (a previous tree's, from recycle()); the results do not depend on it.
  Tree(Span<const double> pos, Span<const double> mass, const TreeParams& params, const CurveBox* frame = nullptr,
       TreeStorage* storage = nullptr);

  /// Hand this tree's arrays to `storage` for the next tree; this tree is empty afterwards
  /// and may only be destroyed.
  void recycle(TreeStorage& storage);

  /// The cube its particles are keyed in.
  const CurveBox& frame() const { return frame_; }

  /// Self-gravity of the tree's own particles (self excluded), in the caller's order.
  /// acc 3n, pot n. Uses and then updates the old |a| for the relative criterion.
  void self_forces(Span<double> acc, Span<double> pot);
  /// Forces of the tree's particles on arbitrary points pos_i (3 n_i); exclude (n_i or
  /// empty): the caller's index of one source particle to leave out per point, or -1.
  void forces_at(Span<const double> pos_i, Span<const std::int64_t> exclude, Span<double> acc,
                 Span<double> pot);

  /// |a| from an earlier step (n, caller order) for the relative opening criterion.
  void set_old_accelerations(Span<const double> a_abs);

  const TreeStats& stats() const { return stats_; }
  const TreeParams& params() const { return params_; }
  Isa isa() const { return isa_; }
  std::size_t size() const { return arrays_.m.size(); }
  const TreeNodes& nodes() const { return arrays_.nodes; }
  /// The GPU its lists run on ("NVIDIA H100 ..."), or "" for backend "cpu".
  std::string device_name() const;

 private:
  /// The sources, in curve order, through the in-core accessor.
  InCoreParticles particles() const {
    const TreeStorage& a = arrays_;
    return {{a.x.data(), a.x.size()}, {a.y.data(), a.y.size()}, {a.z.data(), a.z.size()}, {a.m.data(), a.m.size()}};
  }
  /// Evaluate groups over i-particles given in i order (sorted index -> caller index in
  /// i_caller), writing caller-ordered results, and record the work in stats_.
  void run_groups(const std::vector<Group>& groups, const InCoreParticles& sinks,
                  Span<const std::int64_t> i_exclude, Span<const std::int64_t> i_caller,
                  Span<double> acc, Span<double> pot, bool exclude_self = false);

  TreeParams params_;
  int threads_;
  Isa isa_;
  CurveBox frame_;                    // the sources' cube: forces_at sorts its points in it too
  // its arrays (recycle() hands them on): order (curve position -> caller index), rank
  // (caller index -> curve position), x, y, z, m (sources in curve order), a_old (|a| of the
  // last self_forces, curve order), nodes, and the build's scratch (keys, sort)
  TreeStorage arrays_;
  std::vector<std::int32_t> groups_;
  TreeStats stats_;
};

/// The tree behind the ForceProvider interface: set_j builds a new tree; forces() on the
/// j-set itself with exclude = own index is self-gravity (what the leapfrog asks for).
class TreeForceProvider final : public ForceProvider {
 public:
  explicit TreeForceProvider(const TreeParams& params);
  void set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) override;
  void update_j(Span<const double> pos, Span<const double> vel) override;
  void forces(const ForceRequest& req) override;
  /// The next set_j is a step's drift of positions with these bounds: its tree is keyed in
  /// step_frame(before, its own bounds), as the out-of-core leapfrog keys it.
  void set_drift_origin(const AxisBounds& before) override { before_ = before; }
  PipelineStats stats() const override { return stats_; }
  const TreeStats& tree_stats() const { return last_; }
  Isa isa() const { return isa_; }
  /// The list kernels' arithmetic (the range of coordinates they carry).
  Precision precision() const { return params_.precision; }
  /// The frame of the current j-set's tree (none before the first set_j).
  std::optional<CurveBox> frame() const { return tree_ ? std::optional<CurveBox>(tree_->frame()) : std::nullopt; }

 private:
  TreeParams params_;
  Isa isa_;
  std::vector<double> pos_, mass_;
  bool has_vel_ = false;       // whether set_j was given velocities (update_j must match)
  std::vector<double> a_old_;  // caller order, carried across rebuilds for alpha
  std::unique_ptr<Tree> tree_;
  TreeStorage storage_;        // the last tree's arrays, between rebuilds
  std::optional<AxisBounds> before_;  // set_drift_origin's, for the next set_j only
  PipelineStats stats_;
  TreeStats last_;
};

}  // namespace gravpipe
