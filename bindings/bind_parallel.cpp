// Binding of gravpipe::JParallelForces. The reduction is a Python callable (mpi4py lives in
// Python): it is called with the GIL held, on numpy views of the provider's buffers that
// are valid only during the call.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "ndarray_views.hpp"

#include "gravpipe/callback_forces.hpp"
#include "gravpipe/j_parallel_forces.hpp"

namespace nb = nanobind;
using gravpipe::CallbackForces;
using gravpipe::ForceProvider;
using gravpipe::JParallelForces;
using gravpipe::Span;

namespace {

using gravpipe::bindings::CScalars, gravpipe::bindings::CVec3, gravpipe::bindings::Indices;
using gravpipe::bindings::ScalarsOut, gravpipe::bindings::Vec3Out, gravpipe::bindings::span_of;
using View = nb::ndarray<nb::numpy, double, nb::ndim<1>>;

// A numpy array over the buffer itself (rv_policy::reference: the default would copy an
// ndarray without an owner, and the reduction's in-place writes would be lost).
nb::object view_of(Span<double> s) {
  const std::size_t shape[1] = {s.size()};
  return nb::cast(View(s.data(), 1, shape, nb::handle()), nb::rv_policy::reference);
}

// A read-only numpy array over a const buffer, valid during the call only.
nb::object const_view_of(Span<const double> s) {
  const std::size_t shape[1] = {s.size()};
  using ConstView = nb::ndarray<nb::numpy, const double, nb::ndim<1>>;
  return nb::cast(ConstView(s.data(), 1, shape, nb::handle()), nb::rv_policy::reference);
}

CallbackForces::Compute python_compute(nb::callable compute) {
  return [compute](Span<const double> pos, Span<const double> mass, Span<double> acc, Span<double> pot) {
    nb::gil_scoped_acquire gil;
    const nb::tuple r = nb::cast<nb::tuple>(compute(const_view_of(pos), const_view_of(mass), view_of(acc),
                                                    view_of(pot)));
    if (r.size() != 3) throw gravpipe::InputError("callback forces: compute must return (interactions, "
                                                  "seconds_j_write, seconds_comm)");
    return CallbackForces::Work{nb::cast<std::uint64_t>(r[0]), nb::cast<double>(r[1]), nb::cast<double>(r[2])};
  };
}

JParallelForces::Reduction python_reduction(nb::callable reduce) {
  return [reduce](Span<double> acc, Span<double> pot, Span<double> jerk) {
    nb::gil_scoped_acquire gil;
    reduce(view_of(acc), view_of(pot), view_of(jerk));
  };
}

}  // namespace

void bind_parallel(nb::module_& m) {
  nb::class_<CallbackForces, ForceProvider>(m, "CallbackForces")
      .def("__init__",
           [](CallbackForces* self, nb::callable compute) {
             new (self) CallbackForces(python_compute(std::move(compute)));
           },
           nb::arg("compute"),
           "Self-gravity from compute(pos, mass, acc, pot) -> (interactions, seconds_j_write, seconds_comm): "
           "flat float64 views valid during the call; acc and pot are written in place.")
      .def("set_j",
           [](CallbackForces& p, CVec3 pos, CScalars mass, std::optional<CVec3> vel) {
             p.set_j(span_of(pos), span_of(mass), span_of(vel));
           },
           nb::arg("pos"), nb::arg("mass"), nb::arg("vel").none())
      .def("forces",
           [](CallbackForces& p, CVec3 pos_i, std::optional<CVec3> vel_i, std::optional<Indices> exclude,
              Vec3Out acc, ScalarsOut pot, std::optional<Vec3Out> jerk) {
             p.forces({span_of(pos_i), span_of(vel_i), span_of(exclude), span_of(acc), span_of(pot), span_of(jerk)});
           },
           nb::arg("pos_i"), nb::arg("vel_i").none(), nb::arg("exclude").none(), nb::arg("acc"), nb::arg("pot"),
           nb::arg("jerk").none(), nb::call_guard<nb::gil_scoped_release>());

  nb::class_<JParallelForces, ForceProvider>(m, "JParallelForces")
      .def("__init__",
           [](JParallelForces* self, ForceProvider& local, int rank, int ranks, nb::callable reduce) {
             new (self) JParallelForces(local, rank, ranks, python_reduction(std::move(reduce)));
           },
           nb::arg("local"), nb::arg("rank"), nb::arg("ranks"), nb::arg("reduce"), nb::keep_alive<1, 2>(),
           "j-parallel forces: ``local`` holds this rank's slice of the j-particles; "
           "reduce(acc, pot, jerk) turns partial sums (flat float64 views) into totals in place.")
      .def("set_j",
           [](JParallelForces& p, CVec3 pos, CScalars mass, std::optional<CVec3> vel) {
             p.set_j(span_of(pos), span_of(mass), span_of(vel));
           },
           nb::arg("pos"), nb::arg("mass"), nb::arg("vel").none(), nb::call_guard<nb::gil_scoped_release>())
      .def("forces",
           [](JParallelForces& p, CVec3 pos_i, std::optional<CVec3> vel_i, std::optional<Indices> exclude,
              Vec3Out acc, ScalarsOut pot, std::optional<Vec3Out> jerk) {
             p.forces({span_of(pos_i), span_of(vel_i), span_of(exclude), span_of(acc), span_of(pot), span_of(jerk)});
           },
           nb::arg("pos_i"), nb::arg("vel_i").none(), nb::arg("exclude").none(), nb::arg("acc"), nb::arg("pot"),
           nb::arg("jerk").none(), nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("mine", [](const JParallelForces& p) { return p.mine(); },
                   "The caller's indices of this rank's j-particles (curve order).");
}
