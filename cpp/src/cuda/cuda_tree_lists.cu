// CudaTreeLists (cuda_tree_lists.hpp): per-thread lanes of two batch slots, each batch
// packed into one pinned buffer, copied in with one transfer, evaluated by
// evaluate_lists (tree_list_kernels.cuh) and its results copied back, all on the lane's
// stream. Every call and launch is checked (cuda_check.cuh).
#include <array>
#include <cstring>
#include <limits>
#include <memory>
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
using cuda::PinnedBuffer;

/// An owned stream that does not synchronise with the legacy default stream: the lanes'
/// batches overlap each other and the other threads' work.
class Stream {
 public:
  Stream() { GP_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s_); }  // in a destructor: unchecked, nothing to report to
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

/// An owned event that marks a slot's batch done (no timing: cheaper to record and wait).
class Event {
 public:
  Event() { GP_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

/// Sections of a packed batch start on 256-byte boundaries (the device's widest loads and
/// cudaMalloc's alignment), so every record read by the kernel is naturally aligned.
constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Byte offsets of each array of a batch in its packed copy, and the total.
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

template <class T>
void put(unsigned char* base, std::size_t at, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(base + at, v.data(), v.size() * sizeof(T));
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
  PinnedBuffer<unsigned char> in_host;
  DeviceBuffer<unsigned char> in_dev;
  DeviceBuffer<double> out_dev;
  PinnedBuffer<double> out_host;
  Event done;
  bool busy = false;
};

struct Lane {
  Stream stream;
  std::array<Slot, CudaTreeLists::kSlots> slots;
  int next = 0;
  Lane() = default;
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
  for (int k = 0; k < lanes; ++k) state_->lanes.push_back(std::make_unique<Lane>());
}

CudaTreeLists::~CudaTreeLists() = default;

int CudaTreeLists::lanes() const { return static_cast<int>(state_->lanes.size()); }

const std::string& CudaTreeLists::device_name() const { return state_->name; }

void CudaTreeLists::begin(int lane) {
  // OpenMP threads start with device 0 current: make this one current on each of them
  GP_CUDA_CHECK(cudaSetDevice(state_->device));
  Lane& l = state_->lane(lane);
  bool pending = false;
  for (const Slot& s : l.slots) pending = pending || s.busy;
  if (pending) GP_CUDA_CHECK(cudaStreamSynchronize(l.stream.get()));
  for (Slot& s : l.slots) s.busy = false;
  l.next = 0;
}

int CudaTreeLists::submit(int lane, const ListBatch& b, float eps2) {
  Lane& l = state_->lane(lane);
  const int k = l.next;
  Slot& s = l.slots[static_cast<std::size_t>(k)];
  if (s.busy) throw std::logic_error("CudaTreeLists::submit: the lane's next slot was not collected");
  if (b.n_jobs() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw InputError("CudaTreeLists: more than 2^31-1 groups in one batch");
  const PackedLayout at(b);
  const std::size_t n_out = kListResultWords * b.n_sinks();
  grow(s.in_host, at.total), grow(s.in_dev, at.total);
  grow(s.out_host, n_out), grow(s.out_dev, n_out);
  if (b.n_jobs() > 0) {
    unsigned char* h = s.in_host.data();
    put(h, at.jobs, b.jobs), put(h, at.particles, b.particles), put(h, at.cells, b.cells);
    put(h, at.pidx, b.pidx), put(h, at.sinks, b.sinks), put(h, at.exclude, b.exclude);
    const cudaStream_t st = l.stream.get();
    GP_CUDA_CHECK(cudaMemcpyAsync(s.in_dev.data(), h, at.total, cudaMemcpyHostToDevice, st));
    const auto blocks = static_cast<unsigned>(b.n_jobs());
    cuda::evaluate_lists<<<blocks, cuda::kListThreads, 0, st>>>(device_view(s.in_dev.data(), at), eps2,
                                                                  s.out_dev.data());
    GP_CUDA_CHECK_LAUNCH("evaluate_lists");
    GP_CUDA_CHECK(cudaMemcpyAsync(s.out_host.data(), s.out_dev.data(), n_out * sizeof(double),
                                  cudaMemcpyDeviceToHost, st));
  }
  GP_CUDA_CHECK(cudaEventRecord(s.done.get(), l.stream.get()));
  s.busy = true;
  l.next = (k + 1) % kSlots;
  return k;
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
