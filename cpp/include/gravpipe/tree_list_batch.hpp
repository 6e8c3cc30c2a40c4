// A batch of gathered interaction lists and their sinks packed for the GPU list kernel
// (cuda_tree_lists.hpp): the CPU threads walk and gather as for the CPU kernels, and append
// each group's list here instead of evaluating it. Plain records in memory the owner
// chooses (std::pmr): the default heap where the packing is tested without a GPU, page-locked
// memory from CudaTreeLists::host_memory() on the device path, where each array then goes to
// the GPU straight from where it was packed (no staging copy) and the device reads the
// same records.
//
// Mixed precision only: the records are the float32 lists of GatheredList (coordinates
// relative to the group's centre) and the float32 sink coordinates relative to the same
// centre; the results come back as float64 sums.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <vector>

#include "gravpipe/tree.hpp"

namespace gravpipe {

/// One group's list and sinks inside a batch: offsets into the batch's arrays. Sizes are
/// int32 (the kernel's loop counters); offsets int64 (a batch may exceed 2^31 entries).
struct ListJob {
  std::int64_t p_begin = 0;  // first particle (ListBatch::particles)
  std::int64_t c_begin = 0;  // first quadrupole cell (ListBatch::cells)
  std::int64_t m_begin = 0;  // sorted index of the first masked particle (ListBatch::pidx)
  std::int64_t i_begin = 0;  // first sink (ListBatch::sinks, ListBatch::exclude, results)
  std::int32_t np = 0, n_masked = 0, nc = 0, ni = 0;
};
static_assert(sizeof(ListJob) == 48, "ListJob is read by the device: no padding expected");
static_assert(sizeof(ListParticle<float>) == 16 && sizeof(ListCell<float>) == 48,
              "the device reads list entries as float4 (particles) and 3 x float4 (cells)");

/// Results per sink, in the batch's sink order: unscaled by G, pot positive (sum m/r), as
/// evaluate_group's sinks.
constexpr std::size_t kListResultWords = 4;  // ax, ay, az, pot

struct ListBatch {
  /// Arrays allocated from `memory` (which must outlive the batch).
  explicit ListBatch(std::pmr::memory_resource* memory = std::pmr::get_default_resource())
      : jobs(memory), particles(memory), cells(memory), pidx(memory), sinks(memory), exclude(memory) {}

  std::pmr::vector<ListJob> jobs;
  std::pmr::vector<ListParticle<float>> particles;
  std::pmr::vector<ListCell<float>> cells;
  std::pmr::vector<std::int64_t> pidx;
  std::pmr::vector<ListParticle<float>> sinks;  // x, y, z relative to the job's centre; m unused (0)
  std::pmr::vector<std::int64_t> exclude;       // sorted j index each sink leaves out, or -1

  /// Append the list `l` (gathered in mixed precision) and the first n_i sinks of `s`
  /// (set relative to the same centre); returns the job's index. Throws InputError for a
  /// double-precision list or a list too long for one job.
  std::size_t add(const GatheredList& l, const GroupSinks& s, std::size_t n_i);
  std::size_t n_jobs() const { return jobs.size(); }
  std::size_t n_sinks() const { return sinks.size(); }
  /// Bytes this batch occupies once packed (what crosses the bus, results not included).
  std::size_t bytes() const;
  /// Empties the arrays, keeping their capacity.
  void clear();
};

}  // namespace gravpipe
