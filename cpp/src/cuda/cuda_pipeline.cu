// CudaPipeline (cuda_pipeline.hpp): buffers, transfers, curve sorting and kernel launches.
// The kernels are in device_sets.cuh (layouts, sorting keys, predictor) and
// force_kernels.cuh (forces); every call and launch is checked (cuda_check.cuh).
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_check.cuh"
#include "device_sets.cuh"
#include "force_kernels.cuh"
#include "gravpipe/cuda_pipeline.hpp"
#include "gravpipe/force_request_check.hpp"
#include "gravpipe/stopwatch.hpp"

namespace gravpipe::cuda {

namespace {

constexpr int kBoxBlocks = kThreads;  // pass-1 blocks of a bounding box (box_fold takes <= kThreads)

int blocks_for(std::size_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

/// The kernels index particles with int and the partial sums take up to 8 rows of n: at
/// most 2^28 particles per set.
void check_capacity(const char* what, std::size_t n) {
  if (n > static_cast<std::size_t>(INT32_MAX / 8)) throw InputError(what);
}

}  // namespace

/// Device buffers of one pipeline: the j-memory (resident), the predictor coefficients,
/// and per-call scratch reused while sizes do not grow.
class DeviceState {
 public:
  DeviceBuffer<D4> j_pos, j_vel;
  DeviceBuffer<Box> tile_box;
  DeviceBuffer<int> slot_of, user_of;
  DeviceBuffer<D4> t_x, t_v, t_a, t_j;
  DeviceBuffer<std::int64_t> t_ticks;
  DeviceBuffer<double> j_in;  // raw float64 j input: pos 3n | mass n | vel 3n
  DeviceBuffer<double> i_in;  // raw i input (also the Taylor input): up to 14 words per particle
  DeviceBuffer<double> out;   // acc 3n | pot n | jerk 3n
  DeviceBuffer<double> partial;
  DeviceBuffer<std::uint32_t> key_in, key_out;
  DeviceBuffer<int> idx_in, i_order;
  DeviceBuffer<unsigned char> sort_temp;
  DeviceBuffer<Box> boxes;  // kBoxBlocks partial boxes, then the j-set's box
  DeviceBuffer<unsigned long long> tile_counts;
  PinnedBuffer<double> host_in, host_out;
  std::vector<unsigned char> taylor_written;  // per caller's j index since the last set_j
  std::size_t taylor_missing = 0;
  int multiprocessors = 1;

  Box* j_box() const { return boxes.data() + kBoxBlocks; }
};

namespace {

/// The bounding box of n points (3n row-major, device) into *box (device).
void bounding_box(DeviceState& d, const double* xyz, int n, Box* box) {
  box_partials<<<kBoxBlocks, kThreads>>>(xyz, n, d.boxes.data());
  GP_CUDA_CHECK_LAUNCH("box_partials");
  box_fold<<<1, kThreads>>>(d.boxes.data(), kBoxBlocks, box);
  GP_CUDA_CHECK_LAUNCH("box_fold");
}

/// order[k] = index of the k-th of n points (device) along the Morton curve of *box.
void curve_order(DeviceState& d, const double* xyz, int n, const Box* box, int* order) {
  d.key_in.reserve(n), d.key_out.reserve(n), d.idx_in.reserve(n);
  curve_keys<<<blocks_for(n), kThreads>>>(xyz, n, box, d.key_in.data(), d.idx_in.data());
  GP_CUDA_CHECK_LAUNCH("curve_keys");
  std::size_t temp = 0;
  GP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, d.key_in.data(), d.key_out.data(), d.idx_in.data(),
                                                order, n, 0, 30));
  d.sort_temp.reserve(temp);
  GP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(d.sort_temp.data(), temp, d.key_in.data(), d.key_out.data(),
                                                d.idx_in.data(), order, n, 0, 30));
}

}  // namespace

CudaPipeline::CudaPipeline(Precision precision, double eps, double G, int device)
    : precision_(precision), eps_(eps), G_(G), dev_(std::make_unique<DeviceState>()) {
  check_eps(eps);
  check_G(G);
  select_device(device);
  cudaDeviceProp prop{};
  GP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  dev_->multiprocessors = prop.multiProcessorCount;
  device_name_ = std::string(prop.name) + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
                 std::to_string(prop.multiProcessorCount) + " SMs";
  dev_->boxes.reserve(kBoxBlocks + 1);
  dev_->tile_counts.reserve(2);
  GP_CUDA_CHECK(cudaMemset(dev_->tile_counts.data(), 0, 2 * sizeof(unsigned long long)));
}

CudaPipeline::~CudaPipeline() = default;

// ---- j-particle write ---------------------------------------------------------------------

void CudaPipeline::set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  const std::size_t n = check_j_set(pos, mass, vel);
  check_capacity("set_j: more than 2^28 j-particles", n);
  const auto t0 = Clock::now();
  DeviceState& d = *dev_;
  d.j_in.reserve(7 * n);
  GP_CUDA_CHECK(cudaMemcpy(d.j_in.data(), pos.data(), 3 * n * sizeof(double), cudaMemcpyHostToDevice));
  GP_CUDA_CHECK(cudaMemcpy(d.j_in.data() + 3 * n, mass.data(), n * sizeof(double), cudaMemcpyHostToDevice));
  if (!vel.empty())
    GP_CUDA_CHECK(cudaMemcpy(d.j_in.data() + 4 * n, vel.data(), 3 * n * sizeof(double), cudaMemcpyHostToDevice));
  load_j(d.j_in.data(), d.j_in.data() + 3 * n, vel.empty() ? nullptr : d.j_in.data() + 4 * n, n);
  GP_CUDA_CHECK(cudaDeviceSynchronize());
  stats_.bytes_j_write += n * (vel.empty() ? 32 : 56);
  stats_.seconds_j_write += seconds_since(t0);
}

void CudaPipeline::set_j_device(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  const std::size_t n = check_j_set(pos, mass, vel);  // sizes only: the spans are device memory
  check_capacity("set_j: more than 2^28 j-particles", n);
  const auto t0 = Clock::now();
  load_j(pos.data(), mass.data(), vel.empty() ? nullptr : vel.data(), n);
  GP_CUDA_CHECK(cudaDeviceSynchronize());
  stats_.seconds_j_write += seconds_since(t0);
}

// Sort the j-set along the curve, pack it in slot order, and start the predictor afresh.
void CudaPipeline::load_j(const double* pos, const double* mass, const double* vel, std::size_t n) {
  DeviceState& d = *dev_;
  const int nj = static_cast<int>(n);
  d.j_pos.reserve(n), d.slot_of.reserve(n), d.user_of.reserve(n), d.tile_box.reserve(blocks_for(n));
  if (vel) d.j_vel.reserve(n);
  bounding_box(d, pos, nj, d.j_box());
  curve_order(d, pos, nj, d.j_box(), d.user_of.data());
  gather_j<<<blocks_for(n), kThreads>>>(pos, mass, vel, d.user_of.data(), nj, d.j_pos.data(), d.j_vel.data(),
                                        d.slot_of.data());
  GP_CUDA_CHECK_LAUNCH("gather_j");
  n_j_ = n;
  has_vel_ = vel != nullptr;
  d.taylor_written.assign(n, 0);
  d.taylor_missing = n;
  refresh_tile_boxes();
  stats_.j_particles += n;
}

void CudaPipeline::update_j(Span<const double> pos, Span<const double> vel) {
  const std::size_t n = n_j_;
  check_j_update(pos, vel, n, has_vel_);
  const auto t0 = Clock::now();
  DeviceState& d = *dev_;
  GP_CUDA_CHECK(cudaMemcpy(d.j_in.data(), pos.data(), 3 * n * sizeof(double), cudaMemcpyHostToDevice));
  if (has_vel_)
    GP_CUDA_CHECK(cudaMemcpy(d.j_in.data() + 4 * n, vel.data(), 3 * n * sizeof(double), cudaMemcpyHostToDevice));
  regather_j<<<blocks_for(n), kThreads>>>(d.j_in.data(), has_vel_ ? d.j_in.data() + 4 * n : nullptr,
                                          d.user_of.data(), static_cast<int>(n), d.j_pos.data(), d.j_vel.data());
  GP_CUDA_CHECK_LAUNCH("regather_j");
  refresh_tile_boxes();
  GP_CUDA_CHECK(cudaDeviceSynchronize());
  stats_.bytes_j_write += n * (has_vel_ ? 48 : 24);
  stats_.seconds_j_write += seconds_since(t0);
}

void CudaPipeline::refresh_tile_boxes() {
  DeviceState& d = *dev_;
  tile_boxes<<<blocks_for(n_j_), kThreads>>>(d.j_pos.data(), static_cast<int>(n_j_), d.tile_box.data());
  GP_CUDA_CHECK_LAUNCH("tile_boxes");
}

// ---- the Hermite j-predictor (GRAPE-6 j-memory) --------------------------------------------

void CudaPipeline::write_j_taylor(const JTaylor& c) {
  const std::size_t k = c.index.size();
  if (n_j_ == 0 || !has_vel_) throw InputError("write_j_taylor: call set_j with velocities first");
  if (c.pos.size() != 3 * k || c.vel.size() != 3 * k || c.acc.size() != 3 * k || c.jerk.size() != 3 * k ||
      c.t_ticks.size() != k)
    throw InputError("write_j_taylor: index, pos, vel, acc, jerk and t_ticks have different lengths");
  if (k == 0) return;
  const auto t0 = Clock::now();
  DeviceState& d = *dev_;
  for (const std::int64_t idx : c.index) {
    if (idx < 0 || static_cast<std::size_t>(idx) >= n_j_)
      throw InputError("write_j_taylor: index " + std::to_string(idx) + " is outside [0, " +
                       std::to_string(n_j_) + ")");
    if (!d.taylor_written[idx]) d.taylor_written[idx] = 1, --d.taylor_missing;
  }
  const std::size_t n = n_j_;
  d.t_x.reserve(n), d.t_v.reserve(n), d.t_a.reserve(n), d.t_j.reserve(n), d.t_ticks.reserve(n);
  // one packed transfer: index k | pos 3k | vel 3k | acc 3k | jerk 3k | t k (8-byte words)
  d.host_in.reserve(14 * k), d.i_in.reserve(14 * k);
  double* h = d.host_in.data();
  std::memcpy(h, c.index.data(), k * 8);
  std::memcpy(h + k, c.pos.data(), 3 * k * 8);
  std::memcpy(h + 4 * k, c.vel.data(), 3 * k * 8);
  std::memcpy(h + 7 * k, c.acc.data(), 3 * k * 8);
  std::memcpy(h + 10 * k, c.jerk.data(), 3 * k * 8);
  std::memcpy(h + 13 * k, c.t_ticks.data(), k * 8);
  GP_CUDA_CHECK(cudaMemcpy(d.i_in.data(), h, 14 * k * 8, cudaMemcpyHostToDevice));
  const double* g = d.i_in.data();
  const TaylorView tv{d.t_x.data(), d.t_v.data(), d.t_a.data(), d.t_j.data(), d.t_ticks.data()};
  scatter_taylor<<<blocks_for(k), kThreads>>>(reinterpret_cast<const std::int64_t*>(g), g + k, g + 4 * k, g + 7 * k,
                                              g + 10 * k, reinterpret_cast<const std::int64_t*>(g + 13 * k),
                                              static_cast<int>(k), d.slot_of.data(), tv);
  GP_CUDA_CHECK_LAUNCH("scatter_taylor");
  stats_.bytes_j_write += 112 * k;
  stats_.seconds_j_write += seconds_since(t0);
}

void CudaPipeline::predict_j(std::int64_t now_ticks, double tick) {
  DeviceState& d = *dev_;
  if (n_j_ == 0 || d.taylor_missing > 0)
    throw InputError("predict_j: " + std::to_string(d.taylor_missing) +
                     " j-particles have no predictor coefficients (write_j_taylor after set_j)");
  const auto t0 = Clock::now();
  const TaylorView tv{d.t_x.data(), d.t_v.data(), d.t_a.data(), d.t_j.data(), d.t_ticks.data()};
  predict_j_kernel<<<blocks_for(n_j_), kThreads>>>(tv, static_cast<int>(n_j_), now_ticks, tick, d.j_pos.data(),
                                                   d.j_vel.data());
  GP_CUDA_CHECK_LAUNCH("predict_j");
  refresh_tile_boxes();
  stats_.seconds_j_write += seconds_since(t0);  // launches only: the device work is in compute
}

PipelineStats CudaPipeline::stats() const {
  PipelineStats s = stats_;
  unsigned long long counts[2];
  GP_CUDA_CHECK(cudaMemcpy(counts, dev_->tile_counts.data(), sizeof counts, cudaMemcpyDeviceToHost));
  s.tile_visits = counts[0], s.far_tile_visits = counts[1];
  return s;
}

void CudaPipeline::reset_stats() {
  stats_ = PipelineStats{};
  GP_CUDA_CHECK(cudaMemset(dev_->tile_counts.data(), 0, 2 * sizeof(unsigned long long)));
}

// ---- forces ---------------------------------------------------------------------------------

namespace {

/// The shared contract's sizes (force_request_check.hpp) and this backend's capacity; the
/// entries of a device request are not read here.
std::size_t check_request(const ForceRequest& req, std::size_t n_j, bool has_vel) {
  const std::size_t ni = check_request_sizes(req, n_j, has_vel);
  check_capacity("pos_i: more than 2^28 i-particles", ni);
  return ni;
}

}  // namespace

void CudaPipeline::forces(const ForceRequest& req) {
  const std::size_t ni = check_request(req, n_j_, has_vel_);
  check_exclude(req.exclude, n_j_);  // host memory here
  const bool jerk = !req.vel_i.empty(), with_ex = !req.exclude.empty();
  std::uint64_t excluded = 0;
  for (const std::int64_t e : req.exclude) excluded += e != kNoExclusion;
  DeviceState& d = *dev_;

  // i-particle write: one packed transfer, pos 3n | vel 3n | exclude n
  auto t0 = Clock::now();
  const std::size_t words = ni * (3 + (jerk ? 3 : 0) + (with_ex ? 1 : 0));
  d.host_in.reserve(words), d.i_in.reserve(7 * ni);
  double* h = d.host_in.data();
  std::memcpy(h, req.pos_i.data(), 3 * ni * 8);
  if (jerk) std::memcpy(h + 3 * ni, req.vel_i.data(), 3 * ni * 8);
  if (with_ex) std::memcpy(h + (jerk ? 6 : 3) * ni, req.exclude.data(), ni * 8);
  GP_CUDA_CHECK(cudaMemcpy(d.i_in.data(), h, words * 8, cudaMemcpyHostToDevice));
  stats_.bytes_i_write += words * 8;
  stats_.seconds_i_write += seconds_since(t0);

  t0 = Clock::now();
  d.out.reserve(7 * ni);
  const double* g = d.i_in.data();
  ForceRequest dreq{{g, 3 * ni},
                    jerk ? Span<const double>{g + 3 * ni, 3 * ni} : Span<const double>{},
                    with_ex ? Span<const std::int64_t>{reinterpret_cast<const std::int64_t*>(g + (jerk ? 6 : 3) * ni), ni}
                            : Span<const std::int64_t>{},
                    {d.out.data(), 3 * ni}, {d.out.data() + 3 * ni, ni},
                    jerk ? Span<double>{d.out.data() + 4 * ni, 3 * ni} : Span<double>{}};
  compute(dreq, ni, jerk);
  GP_CUDA_CHECK(cudaDeviceSynchronize());
  stats_.seconds_compute += seconds_since(t0);

  // result read: one transfer into pinned memory, then into the caller's arrays
  t0 = Clock::now();
  const std::size_t out_words = ni * (jerk ? 7 : 4);
  d.host_out.reserve(out_words);
  GP_CUDA_CHECK(cudaMemcpy(d.host_out.data(), d.out.data(), out_words * 8, cudaMemcpyDeviceToHost));
  std::memcpy(req.acc.data(), d.host_out.data(), 3 * ni * 8);
  std::memcpy(req.pot.data(), d.host_out.data() + 3 * ni, ni * 8);
  if (jerk) std::memcpy(req.jerk.data(), d.host_out.data() + 4 * ni, 3 * ni * 8);
  stats_.bytes_result_read += out_words * 8;
  stats_.seconds_result_read += seconds_since(t0);
  stats_.interactions -= excluded;  // as the CPU pipeline counts: excluded pairs are not interactions
}

void CudaPipeline::forces_device(const ForceRequest& req) {
  const std::size_t ni = check_request(req, n_j_, has_vel_);
  const bool jerk = !req.vel_i.empty();
  const auto t0 = Clock::now();
  // results straight into the caller's device arrays
  compute(req, ni, jerk);
  GP_CUDA_CHECK(cudaDeviceSynchronize());
  stats_.seconds_compute += seconds_since(t0);
}

// Sort the i-set along the j-set's curve, run the force kernel over (i-blocks x j-rows),
// fold the rows into req's outputs. Every span of req points to device memory.
void CudaPipeline::compute(const ForceRequest& req, std::size_t ni, bool jerk) {
  DeviceState& d = *dev_;
  const int n_i = static_cast<int>(ni);
  d.i_order.reserve(ni);
  curve_order(d, req.pos_i.data(), n_i, d.j_box(), d.i_order.data());

  // rows split the j-tiles so that the grid holds >= 8 blocks per multiprocessor
  const int i_blocks = blocks_for(ni), n_tiles = blocks_for(n_j_);
  int rows = std::max(1, std::min(n_tiles, (8 * d.multiprocessors + i_blocks - 1) / i_blocks));
  const int tiles_per_row = (n_tiles + rows - 1) / rows;
  rows = (n_tiles + tiles_per_row - 1) / tiles_per_row;
  const std::size_t part = static_cast<std::size_t>(rows) * ni;
  d.partial.reserve(7 * part);
  double* p0 = d.partial.data();
  const Partials p{p0, p0 + part, p0 + 2 * part, p0 + 3 * part, p0 + 4 * part, p0 + 5 * part, p0 + 6 * part, n_i};
  const JView jv{d.j_pos.data(), d.j_vel.data(), d.tile_box.data(), d.slot_of.data(), static_cast<int>(n_j_)};
  const IView iv{req.pos_i.data(), jerk ? req.vel_i.data() : nullptr,
                 req.exclude.empty() ? nullptr : req.exclude.data(), d.i_order.data(), n_i};
  const dim3 grid(i_blocks, rows);
  if (precision_ == Precision::Mixed) {
    const float eps2 = static_cast<float>(eps_ * eps_);
    if (jerk)
      forces_mixed<true><<<grid, kThreads>>>(jv, iv, eps2, tiles_per_row, p, d.tile_counts.data());
    else
      forces_mixed<false><<<grid, kThreads>>>(jv, iv, eps2, tiles_per_row, p, d.tile_counts.data());
    GP_CUDA_CHECK_LAUNCH("forces_mixed");
  } else {
    if (jerk)
      forces_double<true><<<grid, kThreads>>>(jv, iv, eps_ * eps_, tiles_per_row, p);
    else
      forces_double<false><<<grid, kThreads>>>(jv, iv, eps_ * eps_, tiles_per_row, p);
    GP_CUDA_CHECK_LAUNCH("forces_double");
  }
  reduce_rows<<<i_blocks, kThreads>>>(p, rows, n_i, jerk, G_, req.acc.data(), req.pot.data(),
                                      jerk ? req.jerk.data() : nullptr);
  GP_CUDA_CHECK_LAUNCH("reduce_rows");
  stats_.calls += 1;
  stats_.i_particles += ni;
  stats_.interactions += static_cast<std::uint64_t>(ni) * n_j_;
}

}  // namespace gravpipe::cuda
