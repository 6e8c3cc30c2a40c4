// CudaTreeLists in a build without CUDA sources: it cannot be made, and says why. The
// other members are unreachable (no object exists) and exist only to link.
#include "gravpipe/cuda_tree_lists.hpp"

#include "gravpipe/error.hpp"

namespace gravpipe {

struct CudaTreeLists::State {};

CudaTreeLists::CudaTreeLists(int, int) {
  throw BackendError(
      "backend 'cuda' is not available: this build of gravpipe has no CUDA sources (built with GRAVPIPE_CUDA=OFF, "
      "or no CUDA compiler was found)");
}
CudaTreeLists::~CudaTreeLists() = default;
int CudaTreeLists::lanes() const { return 0; }
const std::string& CudaTreeLists::device_name() const {
  static const std::string none;
  return none;
}
void CudaTreeLists::begin(int) {}
ListBatch& CudaTreeLists::batch(int, int) { throw BackendError("backend 'cuda' is not available"); }
void CudaTreeLists::submit(int, int, float) { throw BackendError("backend 'cuda' is not available"); }
bool CudaTreeLists::busy(int, int) const { return false; }
const double* CudaTreeLists::collect(int, int) { throw BackendError("backend 'cuda' is not available"); }

}  // namespace gravpipe
