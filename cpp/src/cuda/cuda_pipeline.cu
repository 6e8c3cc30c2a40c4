// CudaPipeline (cuda_pipeline.hpp). STATUS: compiled, never run (no GPU lent so far).
//
// The pairwise interaction is add_pair (pair_interaction.hpp), the same function the CPU
// kernels use, instantiated here on the one-lane device types DF / DD below.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gravpipe/cuda_pipeline.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/pair_interaction.hpp"
#include "gravpipe/stopwatch.hpp"

namespace gravpipe::cuda {

namespace {

/// Every CUDA call is checked: a failure is a BackendError naming the call.
void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw BackendError(std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
}
#define GP_CUDA_CHECK(call) check((call), #call)

// ---- one-lane device types for add_pair -----------------------------------------------------
struct DF {
  float v;
};
struct DD {
  double v;
};
__device__ inline DF operator+(DF a, DF b) { return {a.v + b.v}; }
__device__ inline DF operator*(DF a, DF b) { return {a.v * b.v}; }
__device__ inline DF fmadd(DF a, DF b, DF c) { return {fmaf(a.v, b.v, c.v)}; }
__device__ inline DF fnmadd(DF a, DF b, DF c) { return {fmaf(-a.v, b.v, c.v)}; }
__device__ inline DD operator+(DD a, DD b) { return {a.v + b.v}; }
__device__ inline DD operator*(DD a, DD b) { return {a.v * b.v}; }
__device__ inline DD fmadd(DD a, DD b, DD c) { return {fma(a.v, b.v, c.v)}; }
__device__ inline DD fnmadd(DD a, DD b, DD c) { return {fma(-a.v, b.v, c.v)}; }
__device__ inline DF rsqrt_lane(DF x) { return {rsqrtf(x.v)}; }
__device__ inline DD rsqrt_lane(DD x) { return {rsqrt(x.v)}; }

/// Four doubles, 32-byte aligned (one 256-bit load; CUDA 13 deprecates double4).
struct alignas(32) D4 {
  double x, y, z, w;
};

constexpr int kThreads = 128;  // i-particles per block = j-particles per shared tile

/// j-particles in device memory. Mixed: hi (x, y, z, m) and lo (x, y, z, 0) float4 pairs;
/// double: (x, y, z, m) and velocities (vx, vy, vz, 0) as D4.
struct JMixed {
  const float4 *pos_hi, *pos_lo, *vel_hi, *vel_lo;
};
struct JDouble {
  const D4 *pos, *vel;
};
/// i-particles, in the same layouts, and the j index each one leaves out (-1: none).
struct IMixed {
  const float4 *pos_hi, *pos_lo, *vel_hi, *vel_lo;
  const long long* exclude;
};
struct IDouble {
  const D4 *pos, *vel;
  const long long* exclude;
};
/// Partial sums per grid row: rows x n_i each (G-free; pot as sum m/r).
struct Partials {
  double *ax, *ay, *az, *pot, *jx, *jy, *jz;
  int stride;  // n_i
};

/// One shared-memory tile entry: the j-particle's position (and velocity) differences'
/// ingredients in the kernel's precision.
struct TileMixed {
  float4 ph, pl, vh, vl;
};
struct TileDouble {
  D4 p, v;
};

template <bool kJerk>
__global__ void forces_mixed(JMixed j, int n_j, IMixed in, int n_i, float eps2, int j_per_row, Partials out) {
  __shared__ TileMixed tile[kThreads];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const bool active = i < n_i;
  const float4 zero4 = make_float4(0, 0, 0, 0);
  const float4 ph = active ? in.pos_hi[i] : zero4, pl = active ? in.pos_lo[i] : zero4;
  const float4 vh = (kJerk && active) ? in.vel_hi[i] : zero4, vl = (kJerk && active) ? in.vel_lo[i] : zero4;
  const long long ex = active ? in.exclude[i] : -1;
  double ax = 0, ay = 0, az = 0, pot = 0, jx = 0, jy = 0, jz = 0;
  const int j0 = blockIdx.y * j_per_row, j1 = min(n_j, j0 + j_per_row);
  for (int t0 = j0; t0 < j1; t0 += kThreads) {
    const int jj = t0 + threadIdx.x;
    if (jj < j1)
      tile[threadIdx.x] = {j.pos_hi[jj], j.pos_lo[jj], kJerk ? j.vel_hi[jj] : zero4, kJerk ? j.vel_lo[jj] : zero4};
    __syncthreads();
    const int count = min(kThreads, j1 - t0);
    PairSums<DF> s{{0}, {0}, {0}, {0}, {0}, {0}, {0}};
    for (int k = 0; k < count; ++k) {
      const TileMixed& e = tile[k];
      // (hi_j - hi_i) is exact for close pairs (Sterbenz), as in the CPU near path
      const DF dx{(e.ph.x - ph.x) + (e.pl.x - pl.x)}, dy{(e.ph.y - ph.y) + (e.pl.y - pl.y)},
          dz{(e.ph.z - ph.z) + (e.pl.z - pl.z)};
      DF dvx{0}, dvy{0}, dvz{0};
      if (kJerk) {
        dvx = {(e.vh.x - vh.x) + (e.vl.x - vl.x)};
        dvy = {(e.vh.y - vh.y) + (e.vl.y - vl.y)};
        dvz = {(e.vh.z - vh.z) + (e.vl.z - vl.z)};
      }
      DF rinv = rsqrt_lane(softened_r2(dx, dy, dz, DF{eps2}));
      if (t0 + k == ex) rinv = {0};
      add_pair<kJerk>(s, dx, dy, dz, dvx, dvy, dvz, DF{e.ph.w}, rinv, DF{3});
    }
    // float sums over one tile, then float64: bounds the rounding of long sums
    ax += s.ax.v, ay += s.ay.v, az += s.az.v, pot += s.pot.v;
    if (kJerk) jx += s.jx.v, jy += s.jy.v, jz += s.jz.v;
    __syncthreads();
  }
  if (!active) return;
  const int at = blockIdx.y * out.stride + i;
  out.ax[at] = ax, out.ay[at] = ay, out.az[at] = az, out.pot[at] = pot;
  if (kJerk) out.jx[at] = jx, out.jy[at] = jy, out.jz[at] = jz;
}

template <bool kJerk>
__global__ void forces_double(JDouble j, int n_j, IDouble in, int n_i, double eps2, int j_per_row, Partials out) {
  __shared__ TileDouble tile[kThreads];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const bool active = i < n_i;
  const D4 zero4 = D4{0, 0, 0, 0};
  const D4 p = active ? in.pos[i] : zero4, v = (kJerk && active) ? in.vel[i] : zero4;
  const long long ex = active ? in.exclude[i] : -1;
  PairSums<DD> s{{0}, {0}, {0}, {0}, {0}, {0}, {0}};
  const int j0 = blockIdx.y * j_per_row, j1 = min(n_j, j0 + j_per_row);
  for (int t0 = j0; t0 < j1; t0 += kThreads) {
    const int jj = t0 + threadIdx.x;
    if (jj < j1) tile[threadIdx.x] = {j.pos[jj], kJerk ? j.vel[jj] : zero4};
    __syncthreads();
    const int count = min(kThreads, j1 - t0);
    for (int k = 0; k < count; ++k) {
      const TileDouble& e = tile[k];
      const DD dx{e.p.x - p.x}, dy{e.p.y - p.y}, dz{e.p.z - p.z};
      DD dvx{0}, dvy{0}, dvz{0};
      if (kJerk) dvx = {e.v.x - v.x}, dvy = {e.v.y - v.y}, dvz = {e.v.z - v.z};
      DD rinv = rsqrt_lane(softened_r2(dx, dy, dz, DD{eps2}));
      if (t0 + k == ex) rinv = {0};
      add_pair<kJerk>(s, dx, dy, dz, dvx, dvy, dvz, DD{e.p.w}, rinv, DD{3});
    }
    __syncthreads();
  }
  if (!active) return;
  const int at = blockIdx.y * out.stride + i;
  out.ax[at] = s.ax.v, out.ay[at] = s.ay.v, out.az[at] = s.az.v, out.pot[at] = s.pot.v;
  if (kJerk) out.jx[at] = s.jx.v, out.jy[at] = s.jy.v, out.jz[at] = s.jz.v;
}

/// Sum the rows of the partials in row order (deterministic) and apply G and the sign of
/// the potential: acc and jerk (n_i, 3) row-major, pot (n_i).
__global__ void reduce_rows(Partials p, int rows, int n_i, bool jerk, double G, double* acc, double* pot,
                            double* jrk) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n_i) return;
  double ax = 0, ay = 0, az = 0, ph = 0, jx = 0, jy = 0, jz = 0;
  for (int r = 0; r < rows; ++r) {
    const int at = r * p.stride + i;
    ax += p.ax[at], ay += p.ay[at], az += p.az[at], ph += p.pot[at];
    if (jerk) jx += p.jx[at], jy += p.jy[at], jz += p.jz[at];
  }
  acc[3 * i] = G * ax, acc[3 * i + 1] = G * ay, acc[3 * i + 2] = G * az;
  pot[i] = -G * ph;
  if (jerk) jrk[3 * i] = G * jx, jrk[3 * i + 1] = G * jy, jrk[3 * i + 2] = G * jz;
}

/// Owning device array (RAII); grows, never shrinks.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }
  void reserve(std::size_t n) {
    if (n <= size_) return;
    cudaFree(ptr_);
    ptr_ = nullptr, size_ = 0;
    GP_CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T)));
    size_ = n;
  }
  void upload(const std::vector<T>& host) {
    reserve(host.size());
    GP_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  T* data() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

/// Split a float64 into float hi + lo (hi + lo == v to ~2^-48 relative).
void split(double v, float& hi, float& lo) {
  hi = static_cast<float>(v);
  lo = static_cast<float>(v - static_cast<double>(hi));
}

/// (n,3) positions (or velocities) and optional masses as hi/lo float4 pairs.
void to_mixed(Span<const double> xyz, Span<const double> mass, std::vector<float4>& hi, std::vector<float4>& lo) {
  const std::size_t n = xyz.size() / 3;
  hi.resize(n), lo.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    float h[3], l[3];
    for (int a = 0; a < 3; ++a) split(xyz[3 * k + a], h[a], l[a]);
    hi[k] = make_float4(h[0], h[1], h[2], mass.empty() ? 0.0f : static_cast<float>(mass[k]));
    lo[k] = make_float4(l[0], l[1], l[2], 0.0f);
  }
}

void to_D4(Span<const double> xyz, Span<const double> mass, std::vector<D4>& out) {
  const std::size_t n = xyz.size() / 3;
  out.resize(n);
  for (std::size_t k = 0; k < n; ++k)
    out[k] = D4{xyz[3 * k], xyz[3 * k + 1], xyz[3 * k + 2], mass.empty() ? 0.0 : mass[k]};
}

}  // namespace

/// Device buffers of one pipeline (j resident; i, partials and results reused per call).
class DeviceState {
 public:
  DeviceBuffer<float4> j_pos_hi, j_pos_lo, j_vel_hi, j_vel_lo, i_pos_hi, i_pos_lo, i_vel_hi, i_vel_lo;
  DeviceBuffer<D4> j_pos, j_vel, i_pos, i_vel;
  DeviceBuffer<long long> exclude;
  DeviceBuffer<double> partial, acc, pot, jerk;
  std::vector<double> host_mass;  // masses, kept for update_j
  int multiprocessors = 1;
};

CudaPipeline::CudaPipeline(Precision precision, double eps, double G, int device)
    : precision_(precision), eps2_(eps * eps), G_(G), dev_(std::make_unique<DeviceState>()) {
  if (!(std::isfinite(eps) && eps >= 0)) throw InputError("eps: must be finite and >= 0");
  if (!(std::isfinite(G) && G > 0)) throw InputError("G: must be finite and > 0");
  GP_CUDA_CHECK(cudaSetDevice(device));
  GP_CUDA_CHECK(cudaDeviceGetAttribute(&dev_->multiprocessors, cudaDevAttrMultiProcessorCount, device));
}

CudaPipeline::~CudaPipeline() = default;

void CudaPipeline::set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  const std::size_t n = mass.size();
  if (n == 0) throw InputError("set_j: empty j-particle set");
  if (pos.size() != 3 * n) throw InputError("set_j: pos and mass have different lengths");
  if (!vel.empty() && vel.size() != 3 * n) throw InputError("set_j: vel and mass have different lengths");
  if (n > static_cast<std::size_t>(INT32_MAX)) throw InputError("set_j: more than 2^31 - 1 j-particles");
  dev_->host_mass.assign(mass.begin(), mass.end());
  n_j_ = n;
  upload_j(pos, vel);
  stats_.j_particles += n;
}

void CudaPipeline::update_j(Span<const double> pos, Span<const double> vel) {
  if (pos.size() != 3 * n_j_) throw InputError("update_j: the particle count changed");
  upload_j(pos, vel);
}

void CudaPipeline::upload_j(Span<const double> pos, Span<const double> vel) {
  const auto t0 = Clock::now();
  const Span<const double> m{dev_->host_mass.data(), dev_->host_mass.size()};
  has_vel_ = !vel.empty();
  if (precision_ == Precision::Mixed) {
    std::vector<float4> hi, lo;
    to_mixed(pos, m, hi, lo);
    dev_->j_pos_hi.upload(hi), dev_->j_pos_lo.upload(lo);
    if (has_vel_) to_mixed(vel, {}, hi, lo), dev_->j_vel_hi.upload(hi), dev_->j_vel_lo.upload(lo);
  } else {
    std::vector<D4> p;
    to_D4(pos, m, p);
    dev_->j_pos.upload(p);
    if (has_vel_) to_D4(vel, {}, p), dev_->j_vel.upload(p);
  }
  stats_.bytes_j_write += n_j_ * (has_vel_ ? 64 : 32);
  stats_.seconds_j_write += seconds_since(t0);
}

void CudaPipeline::forces(const ForceRequest& req) {
  if (n_j_ == 0) throw InputError("forces: no j-particles; call set_j first");
  const std::size_t ni = req.pos_i.size() / 3;
  const bool jerk = !req.vel_i.empty();
  if (ni == 0 || req.pos_i.size() != 3 * ni) throw InputError("pos_i: expected a non-empty (n,3) array");
  if (jerk && !has_vel_) throw InputError("vel_i: jerk needs j-particle velocities (set_j with vel)");
  if (jerk && (req.vel_i.size() != 3 * ni || req.jerk.size() != 3 * ni)) throw InputError("vel_i/jerk: sizes differ");
  if (req.acc.size() != 3 * ni || req.pot.size() != ni) throw InputError("forces: output sizes differ from pos_i");
  if (!req.exclude.empty() && req.exclude.size() != ni) throw InputError("exclude: length differs from pos_i");
  DeviceState& d = *dev_;

  auto t0 = Clock::now();
  std::vector<long long> ex(ni, -1);
  for (std::size_t k = 0; k < req.exclude.size(); ++k) ex[k] = req.exclude[k];
  d.exclude.upload(ex);
  if (precision_ == Precision::Mixed) {
    std::vector<float4> hi, lo;
    to_mixed(req.pos_i, {}, hi, lo);
    d.i_pos_hi.upload(hi), d.i_pos_lo.upload(lo);
    if (jerk) to_mixed(req.vel_i, {}, hi, lo), d.i_vel_hi.upload(hi), d.i_vel_lo.upload(lo);
  } else {
    std::vector<D4> p;
    to_D4(req.pos_i, {}, p);
    d.i_pos.upload(p);
    if (jerk) to_D4(req.vel_i, {}, p), d.i_vel.upload(p);
  }
  stats_.bytes_i_write += ni * (jerk ? 72 : 40);
  stats_.seconds_i_write += seconds_since(t0);

  // grid: i-blocks x j-rows; rows fill ~4 blocks per multiprocessor when the i-set is small
  t0 = Clock::now();
  const int n_i = static_cast<int>(ni), n_j = static_cast<int>(n_j_);
  const int i_blocks = (n_i + kThreads - 1) / kThreads;
  const int j_tiles = (n_j + kThreads - 1) / kThreads;
  const int rows = std::max(1, std::min(j_tiles, (4 * d.multiprocessors + i_blocks - 1) / i_blocks));
  const int j_per_row = (j_tiles + rows - 1) / rows * kThreads;
  const std::size_t part = static_cast<std::size_t>(rows) * ni;
  d.partial.reserve(7 * part);
  Partials p{d.partial.data(), d.partial.data() + part, d.partial.data() + 2 * part, d.partial.data() + 3 * part,
             d.partial.data() + 4 * part, d.partial.data() + 5 * part, d.partial.data() + 6 * part, n_i};
  const dim3 grid(i_blocks, rows);
  if (precision_ == Precision::Mixed) {
    const JMixed jm{d.j_pos_hi.data(), d.j_pos_lo.data(), d.j_vel_hi.data(), d.j_vel_lo.data()};
    const IMixed im{d.i_pos_hi.data(), d.i_pos_lo.data(), d.i_vel_hi.data(), d.i_vel_lo.data(), d.exclude.data()};
    if (jerk)
      forces_mixed<true><<<grid, kThreads>>>(jm, n_j, im, n_i, static_cast<float>(eps2_), j_per_row, p);
    else
      forces_mixed<false><<<grid, kThreads>>>(jm, n_j, im, n_i, static_cast<float>(eps2_), j_per_row, p);
  } else {
    const JDouble jd{d.j_pos.data(), d.j_vel.data()};
    const IDouble id{d.i_pos.data(), d.i_vel.data(), d.exclude.data()};
    if (jerk)
      forces_double<true><<<grid, kThreads>>>(jd, n_j, id, n_i, eps2_, j_per_row, p);
    else
      forces_double<false><<<grid, kThreads>>>(jd, n_j, id, n_i, eps2_, j_per_row, p);
  }
  GP_CUDA_CHECK(cudaGetLastError());
  d.acc.reserve(3 * ni), d.pot.reserve(ni), d.jerk.reserve(3 * ni);
  reduce_rows<<<i_blocks, kThreads>>>(p, rows, n_i, jerk, G_, d.acc.data(), d.pot.data(), d.jerk.data());
  GP_CUDA_CHECK(cudaGetLastError());
  GP_CUDA_CHECK(cudaDeviceSynchronize());
  stats_.seconds_compute += seconds_since(t0);

  t0 = Clock::now();
  GP_CUDA_CHECK(cudaMemcpy(req.acc.data(), d.acc.data(), 3 * ni * sizeof(double), cudaMemcpyDeviceToHost));
  GP_CUDA_CHECK(cudaMemcpy(req.pot.data(), d.pot.data(), ni * sizeof(double), cudaMemcpyDeviceToHost));
  if (jerk) GP_CUDA_CHECK(cudaMemcpy(req.jerk.data(), d.jerk.data(), 3 * ni * sizeof(double), cudaMemcpyDeviceToHost));
  stats_.bytes_result_read += ni * (jerk ? 56 : 32);
  stats_.seconds_result_read += seconds_since(t0);
  stats_.calls += 1;
  stats_.i_particles += ni;
  stats_.interactions += static_cast<std::uint64_t>(ni) * n_j_;
}

}  // namespace gravpipe::cuda
