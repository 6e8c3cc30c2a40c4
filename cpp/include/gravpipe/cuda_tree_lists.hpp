// The tree's interaction lists evaluated on an NVIDIA GPU (the tree's backend "cuda"): the
// CPU threads walk and gather as for the CPU kernels and pack each group's list into a
// ListBatch (tree_list_batch.hpp) that lives in page-locked memory here; a full batch goes
// to the device straight from there, one thread block per group evaluates it (cpp/src/cuda/tree_list_kernels.cuh), and the results come
// back for the threads to combine and scatter (tree_runs.cpp).
//
// One lane per CPU thread: its own stream and two batch slots (a pinned batch and device
// buffers, which grow and are kept from one evaluation to the next), so that a thread packs
// its next batch while its last one computes, and threads never wait on each other. Compiled from cuda_tree_lists.cu
// with CUDA, otherwise from cuda_tree_lists_none.cpp, whose constructor throws
// BackendError: a build without CUDA has no GPU tree, and says so.
#pragma once
#include <memory>
#include <string>

#include "gravpipe/tree_list_batch.hpp"

namespace gravpipe {

class CudaTreeLists {
 public:
  /// Batch slots per lane: one computing while the other is packed.
  static constexpr int kSlots = 2;

  /// `lanes`: the CPU threads that will submit (thread t uses lane t). Throws BackendError
  /// when `device` cannot be used (no driver, no GPU, or no CUDA in this build).
  CudaTreeLists(int device, int lanes);
  ~CudaTreeLists();
  CudaTreeLists(const CudaTreeLists&) = delete;
  CudaTreeLists& operator=(const CudaTreeLists&) = delete;

  int lanes() const;
  /// "NVIDIA H100 80GB HBM3, sm_90, 132 SMs"
  const std::string& device_name() const;

  /// Start of an evaluation on the calling thread: makes the device current and forgets
  /// any batch of the lane left uncollected (after an evaluation that threw).
  void begin(int lane);
  /// The slot's batch, to pack (page-locked; its capacity is kept between evaluations).
  /// Throws std::logic_error while the slot is busy: its batch is being read by the device.
  ListBatch& batch(int lane, int slot);
  /// Start the slot's batch (copy in, kernel, copy out) on the lane's stream. The slot must
  /// have been collected (busy() false); its batch must not change until it is collected.
  void submit(int lane, int slot, float eps2);
  bool busy(int lane, int slot) const;
  /// Wait for the slot's batch; its results, kListResultWords per sink in the batch's sink
  /// order, stay valid until the slot's next submit.
  const double* collect(int lane, int slot);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gravpipe
