// CudaTreeLists (cuda_tree_lists.hpp): per-thread lanes of two batch slots. A slot's
// batch, packed by the thread in page-locked memory, is copied array by array straight into
// the slot's device buffer, evaluated by evaluate_lists (tree_list_kernels.cuh) and the
// results copied back, all on the lane's stream. Every call and launch is checked
// (cuda_check.cuh).
#include <array>
#include <limits>
#include <memory>
#include <memory_resource>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_check.cuh"
#include "gravpipe/cuda_tree_lists.hpp"
#include "gravpipe/error.hpp"
#include "tree_list_kernels.cuh"

namespace gravpipe {

namespace {

using cuda::DeviceBuffer;
using cuda::Event;
using cuda::PinnedBuffer;
using cuda::Stream;

/// Page-locked host memory as a std::pmr resource, for the ListBatch arrays: the device's
/// copy engine reads them directly. Each allocation is its own cudaMallocHost (slow, and it
/// synchronises), which is fine for arrays that grow a few times and are then reused.
class PinnedResource final : public std::pmr::memory_resource {
 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    void* p = nullptr;
    // cudaMallocHost returns page-aligned memory: enough for any alignment a vector asks
    if (alignment > 4096) throw std::bad_alloc();
    GP_CUDA_CHECK(cudaMallocHost(&p, bytes == 0 ? 1 : bytes));
    return p;
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override { cudaFreeHost(p); }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};

/// Sections of a packed batch start on 256-byte boundaries (the device's widest loads and
/// cudaMalloc's alignment), so every record read by the kernel is naturally aligned.
constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Byte offsets of each array of a batch in the slot's device buffer, and the total.
struct PackedLayout {
  std::size_t jobs = 0, particles = 0, cells = 0, pidx = 0, sinks = 0, exclude = 0, total = 0;
  explicit PackedLayout(const ListBatch& b) {
    auto place = [this](std::size_t bytes) {
      const std::size_t at = total;
      total = align_up(total + bytes);
      return at;
    };
    jobs = place(b.jobs.size() * sizeof(ListJob));
    particles = place(b.particles.size() * sizeof(ListParticle<float>));
    cells = place(b.cells.size() * sizeof(ListCell<float>));
    pidx = place(b.pidx.size() * sizeof(std::int64_t));
    sinks = place(b.sinks.size() * sizeof(ListParticle<float>));
    exclude = place(b.exclude.size() * sizeof(std::int64_t));
  }
};

/// Start copying array v to device offset `at` of `base` on stream st.
template <class T>
void put(unsigned char* base, std::size_t at, const std::pmr::vector<T>& v, cudaStream_t st) {
  if (!v.empty()) GP_CUDA_CHECK(cudaMemcpyAsync(base + at, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, st));
}

template <class T>
const T* section(const unsigned char* base, std::size_t at) {
  return reinterpret_cast<const T*>(base + at);
}

/// Grow a buffer to hold n with half again to spare: batches vary in size from one to the
/// next, and each reallocation synchronises the device.
template <class Buffer>
void grow(Buffer& b, std::size_t n) {
  if (n > b.size()) b.reserve(n + n / 2);
}

struct Slot {
  ListBatch batch;  // packed by the lane's thread, in page-locked memory
  DeviceBuffer<unsigned char> in_dev;
  DeviceBuffer<double> out_dev;
  PinnedBuffer<double> out_host;
  Event done{cudaEventDisableTiming};
  bool busy = false;
  explicit Slot(std::pmr::memory_resource* pinned) : batch(pinned) {}
};

struct Lane {
  Stream stream;
  std::array<Slot, CudaTreeLists::kSlots> slots;
  static_assert(CudaTreeLists::kSlots == 2, "one initialiser a slot");
  explicit Lane(std::pmr::memory_resource* pinned) : slots{Slot(pinned), Slot(pinned)} {}
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  // the slots' buffers are freed after this body: let their transfers finish first
  ~Lane() { cudaStreamSynchronize(stream.get()); }
};

cuda::ListBatchView device_view(const unsigned char* base, const PackedLayout& at) {
  return {section<ListJob>(base, at.jobs),          section<float4>(base, at.particles),
          section<float4>(base, at.cells),          section<std::int64_t>(base, at.pidx),
          section<float4>(base, at.sinks),          section<std::int64_t>(base, at.exclude)};
}

}  // namespace

struct CudaTreeLists::State {
  int device = 0;
  std::string name;
  PinnedResource pinned;  // declared before the lanes, whose batches it holds
  std::vector<std::unique_ptr<Lane>> lanes;

  Lane& lane(int k) {
    if (k < 0 || static_cast<std::size_t>(k) >= lanes.size())
      throw std::out_of_range("CudaTreeLists: lane " + std::to_string(k) + " of " + std::to_string(lanes.size()));
    return *lanes[static_cast<std::size_t>(k)];
  }
};

CudaTreeLists::CudaTreeLists(int device, int lanes) : state_(std::make_unique<State>()) {
  if (lanes < 1) throw InputError("CudaTreeLists: lanes must be >= 1");
  cuda::select_device(device);
  cudaDeviceProp prop{};
  GP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  state_->device = device;
  state_->name = std::string(prop.name) + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
                 std::to_string(prop.multiProcessorCount) + " SMs";
  for (int k = 0; k < lanes; ++k) state_->lanes.push_back(std::make_unique<Lane>(&state_->pinned));
}

CudaTreeLists::~CudaTreeLists() = default;

int CudaTreeLists::lanes() const { return static_cast<int>(state_->lanes.size()); }

const std::string& CudaTreeLists::device_name() const { return state_->name; }

ListBatch& CudaTreeLists::batch(int lane, int slot) {
  Slot& s = state_->lane(lane).slots.at(static_cast<std::size_t>(slot));
  if (s.busy) throw std::logic_error("CudaTreeLists::batch: the slot's batch is in flight");
  return s.batch;
}

void CudaTreeLists::begin(int lane) {
  // OpenMP threads start with device 0 current: make this one current on each of them
  GP_CUDA_CHECK(cudaSetDevice(state_->device));
  Lane& l = state_->lane(lane);
  bool pending = false;
  for (const Slot& s : l.slots) pending = pending || s.busy;
  if (pending) GP_CUDA_CHECK(cudaStreamSynchronize(l.stream.get()));
  for (Slot& s : l.slots) s.busy = false;
}

void CudaTreeLists::submit(int lane, int slot, float eps2) {
  Lane& l = state_->lane(lane);
  Slot& s = l.slots.at(static_cast<std::size_t>(slot));
  if (s.busy) throw std::logic_error("CudaTreeLists::submit: the slot's last batch was not collected");
  const ListBatch& b = s.batch;
  if (b.n_jobs() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw InputError("CudaTreeLists: more than 2^31-1 groups in one batch");
  const PackedLayout at(b);
  const std::size_t n_out = kListResultWords * b.n_sinks();
  grow(s.in_dev, at.total), grow(s.out_host, n_out), grow(s.out_dev, n_out);
  const cudaStream_t st = l.stream.get();
  if (b.n_jobs() > 0) {
    unsigned char* d = s.in_dev.data();
    put(d, at.jobs, b.jobs, st), put(d, at.particles, b.particles, st), put(d, at.cells, b.cells, st);
    put(d, at.pidx, b.pidx, st), put(d, at.sinks, b.sinks, st), put(d, at.exclude, b.exclude, st);
    const auto blocks = static_cast<unsigned>(b.n_jobs());
    cuda::evaluate_lists<<<blocks, cuda::kListThreads, 0, st>>>(device_view(d, at), eps2, s.out_dev.data());
    GP_CUDA_CHECK_LAUNCH("evaluate_lists");
    GP_CUDA_CHECK(cudaMemcpyAsync(s.out_host.data(), s.out_dev.data(), n_out * sizeof(double),
                                  cudaMemcpyDeviceToHost, st));
  }
  GP_CUDA_CHECK(cudaEventRecord(s.done.get(), st));
  s.busy = true;
}

bool CudaTreeLists::busy(int lane, int slot) const {
  return state_->lane(lane).slots.at(static_cast<std::size_t>(slot)).busy;
}

const double* CudaTreeLists::collect(int lane, int slot) {
  Slot& s = state_->lane(lane).slots.at(static_cast<std::size_t>(slot));
  if (!s.busy) throw std::logic_error("CudaTreeLists::collect: the slot holds no batch");
  // a kernel's execution error surfaces here, on the wait for its batch
  GP_CUDA_CHECK(cudaEventSynchronize(s.done.get()));
  s.busy = false;
  return s.out_host.data();
}

}  // namespace gravpipe
