// Binding of gravpipe::CpuPipeline. Arrays arrive already validated and C-contiguous
// float64/int64 from gravpipe/pipeline.py; the compute releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>

#include "ndarray_views.hpp"
#include "gravpipe/pipeline.hpp"

namespace nb = nanobind;
using gravpipe::CpuPipeline;
using gravpipe::Span;

namespace {

using gravpipe::bindings::CScalars, gravpipe::bindings::CVec3, gravpipe::bindings::Indices;
using gravpipe::bindings::ScalarsOut, gravpipe::bindings::Vec3Out, gravpipe::bindings::span_of;
using gravpipe::bindings::stats_dict;
}  // namespace

nb::dict gravpipe::bindings::stats_dict(const gravpipe::PipelineStats& s) {
  nb::dict d;
  d["calls"] = s.calls;
  d["interactions"] = s.interactions;
  d["j_particles"] = s.j_particles;
  d["i_particles"] = s.i_particles;
  d["bytes_j_write"] = s.bytes_j_write;
  d["bytes_i_write"] = s.bytes_i_write;
  d["bytes_result_read"] = s.bytes_result_read;
  d["seconds_j_write"] = s.seconds_j_write;
  d["seconds_i_write"] = s.seconds_i_write;
  d["seconds_compute"] = s.seconds_compute;
  d["seconds_result_read"] = s.seconds_result_read;
  d["seconds_comm"] = s.seconds_comm;
  d["tile_visits"] = s.tile_visits;
  d["far_tile_visits"] = s.far_tile_visits;
  return d;
}

void bind_pipeline(nb::module_& m) {
  // The interface integrators take their forces through; CpuPipeline and the tree's
  // provider derive from it, so either can drive an integrator.
  nb::class_<gravpipe::ForceProvider>(m, "ForceProvider")
      .def("stats", [](const gravpipe::ForceProvider& p) { return stats_dict(p.stats()); });

  nb::class_<CpuPipeline, gravpipe::ForceProvider>(m, "CpuPipeline")
      .def("__init__",
           [](CpuPipeline* self, const std::string& precision, double eps, double G,
              const std::string& isa, int threads) {
             new (self) CpuPipeline(gravpipe::parse_precision(precision), eps, G, isa, threads);
           },
           nb::arg("precision"), nb::arg("eps"), nb::arg("G"), nb::arg("isa") = "auto",
           nb::arg("threads") = 0)
      .def("set_j",
           [](CpuPipeline& p, CVec3 pos, CScalars mass, std::optional<CVec3> vel) {
             p.set_j(span_of(pos), span_of(mass), span_of(vel));
           },
           nb::arg("pos"), nb::arg("mass"), nb::arg("vel").none(),
           nb::call_guard<nb::gil_scoped_release>())
      .def("forces",
           [](CpuPipeline& p, CVec3 pos_i, std::optional<CVec3> vel_i,
              std::optional<Indices> exclude, Vec3Out acc, ScalarsOut pot,
              std::optional<Vec3Out> jerk) {
             p.forces({span_of(pos_i), span_of(vel_i), span_of(exclude), span_of(acc),
                       span_of(pot), span_of(jerk)});
           },
           nb::arg("pos_i"), nb::arg("vel_i").none(), nb::arg("exclude").none(), nb::arg("acc"),
           nb::arg("pot"), nb::arg("jerk").none(), nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("n_j", &CpuPipeline::n_j)
      .def_prop_ro("has_j_vel", &CpuPipeline::has_j_vel)
      .def_prop_ro("isa", [](const CpuPipeline& p) { return gravpipe::isa_name(p.isa()); })
      .def_prop_ro("precision",
                   [](const CpuPipeline& p) { return gravpipe::precision_name(p.precision()); })
      .def_prop_ro("threads", &CpuPipeline::threads)
      .def_prop_ro("eps", &CpuPipeline::eps)
      .def_prop_ro("G", &CpuPipeline::G)
      .def("stats", [](const CpuPipeline& p) { return stats_dict(p.stats()); })
      .def("reset_stats", &CpuPipeline::reset_stats);
}
