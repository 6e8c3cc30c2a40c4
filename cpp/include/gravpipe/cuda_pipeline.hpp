// The force pipeline on an NVIDIA GPU: the same function as CpuPipeline, in both precision
// modes, with the j-particles resident in device memory in curve order, and (for Hermite)
// GRAPE-6's j-memory: each j-particle's predictor coefficients on the device, predicted
// there to every block time, so a block moves only its active particles over the bus.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gravpipe/force_provider.hpp"
#include "gravpipe/pipeline_types.hpp"

namespace gravpipe::cuda {

class DeviceState;  // device buffers (cuda_pipeline.cu)

/// One thread per i-particle, blocks of i-particles in curve order, j tiles in shared
/// memory, the j-range split over grid rows for small i-sets with an ordered reduction.
/// Mixed precision: block-relative float coordinates, exact hi+lo differences for tiles
/// near the block (force_kernels.cuh). Double: float64 throughout. Deterministic: the same
/// inputs give the same bits on the same GPU model.
class CudaPipeline final : public ForceProvider {
 public:
  /// Throws InputError for a bad eps or G, BackendError when the device cannot be used;
  /// any call throws DeviceError when CUDA fails.
  CudaPipeline(Precision precision, double eps, double G, int device = 0);
  ~CudaPipeline() override;
  CudaPipeline(const CudaPipeline&) = delete;
  CudaPipeline& operator=(const CudaPipeline&) = delete;

  void set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) override;
  void update_j(Span<const double> pos, Span<const double> vel) override;
  void forces(const ForceRequest& req) override;

  /// The same calls on arrays already in device memory (CuPy, DLPack): every span's data
  /// pointer is a device pointer; results are written to device memory, nothing crosses the bus.
  void set_j_device(Span<const double> pos, Span<const double> mass, Span<const double> vel);
  void forces_device(const ForceRequest& req);

  bool predicts_j() const override { return true; }
  void write_j_taylor(const JTaylor& coeffs) override;
  void predict_j(std::int64_t now_ticks, double tick) override;

  /// Counters and timers; tile_visits / far_tile_visits count (i-block, j-tile) pairs of
  /// the mixed kernel and how many took the far path.
  PipelineStats stats() const override;
  void reset_stats();
  std::size_t n_j() const { return n_j_; }
  bool has_j_vel() const { return has_vel_; }
  Precision precision() const { return precision_; }
  double eps() const { return eps_; }
  double G() const { return G_; }
  /// "NVIDIA H100 80GB HBM3, sm_90, 132 SMs"
  const std::string& device_name() const { return device_name_; }

 private:
  void load_j(const double* pos, const double* mass, const double* vel, std::size_t n);
  void compute(const ForceRequest& device_req, std::size_t ni, bool jerk);
  void refresh_tile_boxes();

  Precision precision_;
  double eps_, G_;
  std::size_t n_j_ = 0;
  bool has_vel_ = false;
  std::string device_name_;
  std::unique_ptr<DeviceState> dev_;
  PipelineStats stats_;
};

}  // namespace gravpipe::cuda
