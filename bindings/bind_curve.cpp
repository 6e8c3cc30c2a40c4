// Bindings of the curve-order module (gravpipe/curve_order.hpp): Hilbert keys of positions in
// a cube and the deterministic sort, for Python layers that cut sets along the curve (MPI
// domains, out-of-core pages) and for the tests. Arrays arrive validated and C-contiguous.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/error.hpp"
#include "ndarray_views.hpp"

namespace nb = nanobind;
using namespace gravpipe;

namespace {

using bindings::CVec3, bindings::span_of, bindings::to_numpy;
using Keys = nb::ndarray<const std::uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Corner = nb::ndarray<const double, nb::shape<3>, nb::c_contig, nb::device::cpu>;

int threads_or_all(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

/// The keys (uint64 (n,)) of positions (n,3) in `box`. A position that is not finite would key
/// as the box's corner and sort silently into the wrong place: it raises, naming it.
auto keys_in(CVec3 pos, const CurveBox& box, int threads) {
  const double* p = pos.data();
  for (std::size_t k = 0; k < 3 * pos.shape(0); ++k)
    if (!std::isfinite(p[k]))
      throw InputError("curve_keys: position " + std::to_string(k / 3) + " is not finite (" + std::to_string(p[k]) +
                       ")");
  std::vector<std::uint64_t> keys;
  {
    nb::gil_scoped_release release;
    keys = curve_keys(span_of(pos), box, threads_or_all(threads));
  }
  const std::size_t n = keys.size();
  return to_numpy(std::move(keys), {n});
}

}  // namespace

void bind_curve(nb::module_& m) {
  m.def("curve_order",
        [](CVec3 pos, int threads) {
          std::vector<std::int64_t> order;
          {
            nb::gil_scoped_release release;
            order = curve_order(span_of(pos), threads_or_all(threads));
          }
          const std::size_t n = order.size();
          return to_numpy(std::move(order), {n});
        },
        nb::arg("pos"), nb::arg("threads") = 0,
        "The curve order of positions (n,3) within their bounding cube: int64 (n,), ties in index order.");
  m.def("curve_keys",
        [](CVec3 pos, Corner lo, Corner hi, int threads) {
          return keys_in(pos, curve_box(lo.data(), hi.data()), threads);
        },
        nb::arg("pos"), nb::arg("lo"), nb::arg("hi"), nb::arg("threads") = 0,
        "63-bit Peano-Hilbert keys (uint64 (n,)) of positions (n,3) in the cube over the box [lo, hi]; outside points clamp; "
        "a position that is not finite raises ValueError naming it.");
  m.def("curve_keys_in_frame",
        [](CVec3 pos, Corner frame_lo, double frame_scale, int threads) {
          CurveBox box;
          std::copy(frame_lo.data(), frame_lo.data() + 3, box.lo);
          box.scale = frame_scale;
          return keys_in(pos, box, threads);
        },
        nb::arg("pos"), nb::arg("frame_lo"), nb::arg("frame_scale"), nb::arg("threads") = 0,
        "The keys (uint64 (n,)) of positions (n,3) in a given frame (a sort's frame_lo and frame_scale, as "
        "store_sort_by_curve reports them): the bits that sort gave them; a position that is not finite raises.");
  m.def("sort_keys",
        [](Keys keys, int threads) {
          std::vector<std::uint64_t> sorted(keys.data(), keys.data() + keys.size());
          std::vector<std::int64_t> order;
          {
            nb::gil_scoped_release release;
            order = sort_keys(sorted, threads_or_all(threads));
          }
          const std::size_t n = order.size();
          return nb::make_tuple(to_numpy(std::move(order), {n}), to_numpy(std::move(sorted), {n}));
        },
        nb::arg("keys"), nb::arg("threads") = 0,
        "(order, sorted keys): the stable sort of uint64 keys, the same for any thread count.");
}
