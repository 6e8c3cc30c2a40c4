// The force pipeline on an NVIDIA GPU (issue 5): the same function as CpuPipeline, in both
// precision modes, with the j-particles resident in device memory.
//
// STATUS: compiled in CI (nvcc present), never run: no session so far has had a GPU.
// It is not yet bound to Python; benchmarks/gpu/run.sh builds and runs its check program
// (benchmarks/gpu/check_cuda_pipeline.cpp) against the CPU pipeline on a GPU machine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "gravpipe/force_provider.hpp"
#include "gravpipe/pipeline_types.hpp"

namespace gravpipe::cuda {

class DeviceState;  // device buffers (cuda_pipeline.cu)

/// One thread per i-particle; j-particles staged in tiles through shared memory; when the
/// i-set is too small to fill the GPU, the j-range is split over grid rows and the partial
/// sums are combined by a second kernel in a fixed order (the GRAPE-DR reduction network),
/// so results do not depend on the split. Mixed precision: positions as float hi + lo
/// pairs, differences (hi_j - hi_i) + (lo_j - lo_i) as on the CPU, float sums flushed to
/// double once per tile. Double: float64 throughout.
class CudaPipeline final : public ForceProvider {
 public:
  CudaPipeline(Precision precision, double eps, double G, int device = 0);
  ~CudaPipeline() override;
  CudaPipeline(const CudaPipeline&) = delete;
  CudaPipeline& operator=(const CudaPipeline&) = delete;

  void set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) override;
  void update_j(Span<const double> pos, Span<const double> vel) override;
  void forces(const ForceRequest& req) override;
  PipelineStats stats() const override { return stats_; }

 private:
  void upload_j(Span<const double> pos, Span<const double> vel);

  Precision precision_;
  double eps2_, G_;
  std::size_t n_j_ = 0;
  bool has_vel_ = false;
  std::unique_ptr<DeviceState> dev_;
  PipelineStats stats_;
};

}  // namespace gravpipe::cuda
