// Binding of gravpipe::cuda::CudaPipeline (built only with CUDA). Host arrays arrive
// validated and C-contiguous from gravpipe/pipeline.py; device arrays (CuPy, anything with
// DLPack on a CUDA device) go to the *_device calls without crossing the bus.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "ndarray_views.hpp"
#include "gravpipe/cuda_pipeline.hpp"
#include "gravpipe/cuda_transfer.hpp"

namespace nb = nanobind;
using gravpipe::Span;
using gravpipe::cuda::CudaPipeline;

namespace {

using gravpipe::bindings::CScalars, gravpipe::bindings::CVec3, gravpipe::bindings::Indices;
using gravpipe::bindings::ScalarsOut, gravpipe::bindings::Vec3Out, gravpipe::bindings::span_of;
using gravpipe::bindings::stats_dict;

// The same shapes in CUDA device memory.
using DVec3 = nb::ndarray<const double, nb::shape<-1, 3>, nb::c_contig, nb::device::cuda>;
using DScalars = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cuda>;
using DIndices = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cuda>;
using DVec3Out = nb::ndarray<double, nb::shape<-1, 3>, nb::c_contig, nb::device::cuda>;
using DScalarsOut = nb::ndarray<double, nb::ndim<1>, nb::c_contig, nb::device::cuda>;

}  // namespace

void bind_cuda(nb::module_& m) {
  m.def("cuda_time_transfers",
        [](const std::vector<std::size_t>& sizes, int repeats, int device) {
          nb::list rows;
          for (const auto& t : gravpipe::cuda::time_transfers(sizes, repeats, device)) {
            nb::dict d;
            d["direction"] = t.direction, d["pinned"] = t.pinned, d["bytes"] = t.bytes, d["seconds"] = t.seconds;
            rows.append(d);
          }
          return rows;
        },
        nb::arg("sizes"), nb::arg("repeats"), nb::arg("device") = 0,
        "Median seconds per cudaMemcpy, host<->device, pageable and pinned, per size.");

  nb::class_<CudaPipeline, gravpipe::ForceProvider>(m, "CudaPipeline")
      .def("__init__",
           [](CudaPipeline* self, const std::string& precision, double eps, double G, int device) {
             new (self) CudaPipeline(gravpipe::parse_precision(precision), eps, G, device);
           },
           nb::arg("precision"), nb::arg("eps"), nb::arg("G"), nb::arg("device") = 0)
      .def("set_j",
           [](CudaPipeline& p, CVec3 pos, CScalars mass, std::optional<CVec3> vel) {
             p.set_j(span_of(pos), span_of(mass), span_of(vel));
           },
           nb::arg("pos"), nb::arg("mass"), nb::arg("vel").none(), nb::call_guard<nb::gil_scoped_release>())
      .def("set_j_device",
           [](CudaPipeline& p, DVec3 pos, DScalars mass, std::optional<DVec3> vel) {
             p.set_j_device(span_of(pos), span_of(mass), span_of(vel));
           },
           nb::arg("pos"), nb::arg("mass"), nb::arg("vel").none(), nb::call_guard<nb::gil_scoped_release>())
      .def("forces",
           [](CudaPipeline& p, CVec3 pos_i, std::optional<CVec3> vel_i, std::optional<Indices> exclude, Vec3Out acc,
              ScalarsOut pot, std::optional<Vec3Out> jerk) {
             p.forces({span_of(pos_i), span_of(vel_i), span_of(exclude), span_of(acc), span_of(pot), span_of(jerk)});
           },
           nb::arg("pos_i"), nb::arg("vel_i").none(), nb::arg("exclude").none(), nb::arg("acc"), nb::arg("pot"),
           nb::arg("jerk").none(), nb::call_guard<nb::gil_scoped_release>())
      .def("forces_device",
           [](CudaPipeline& p, DVec3 pos_i, std::optional<DVec3> vel_i, std::optional<DIndices> exclude,
              DVec3Out acc, DScalarsOut pot, std::optional<DVec3Out> jerk) {
             p.forces_device({span_of(pos_i), span_of(vel_i), span_of(exclude), span_of(acc), span_of(pot), span_of(jerk)});
           },
           nb::arg("pos_i"), nb::arg("vel_i").none(), nb::arg("exclude").none(), nb::arg("acc"), nb::arg("pot"),
           nb::arg("jerk").none(), nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("n_j", &CudaPipeline::n_j)
      .def_prop_ro("has_j_vel", &CudaPipeline::has_j_vel)
      .def_prop_ro("precision", [](const CudaPipeline& p) { return gravpipe::precision_name(p.precision()); })
      .def_prop_ro("eps", &CudaPipeline::eps)
      .def_prop_ro("G", &CudaPipeline::G)
      .def_prop_ro("device_name", &CudaPipeline::device_name)
      .def("stats", [](const CudaPipeline& p) { return stats_dict(p.stats()); })
      .def("reset_stats", &CudaPipeline::reset_stats);
}
