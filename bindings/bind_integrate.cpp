// Bindings of the integrators. Arrays come in validated from gravpipe/simulation.py;
// evolve_to releases the GIL. Checkpoint arrays cross as numpy arrays of exact dtype.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <vector>

#include "integrator_args.hpp"
#include "ndarray_views.hpp"
#include "gravpipe/hermite.hpp"
#include "gravpipe/leapfrog.hpp"
#include "gravpipe/pipeline.hpp"

namespace nb = nanobind;
using namespace gravpipe;

namespace {

using bindings::CScalars, bindings::CVec3, bindings::to_numpy, bindings::state_from, bindings::restart_from;

nb::dict checkpoint_dict(const Integrator& it) {
  const CheckpointState c = it.checkpoint();
  nb::dict d;
  for (const auto& [k, v] : c.f64) d[k.c_str()] = to_numpy(v, {v.size()});
  for (const auto& [k, v] : c.i64) d[k.c_str()] = to_numpy(v, {v.size()});
  return d;
}

nb::dict counters_dict(const Integrator& it) {
  const IntegratorCounters c = it.counters();
  nb::dict d;
  d["steps"] = c.steps;
  d["particle_steps"] = c.particle_steps;
  d["seconds_host"] = c.seconds_host;
  d["seconds_total"] = c.seconds_total;
  return d;
}

}  // namespace

void bind_integrate(nb::module_& m) {
  nb::class_<Integrator>(m, "Integrator")
      .def("evolve_to", &Integrator::evolve_to, nb::arg("t"), nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("time", &Integrator::time)
      .def_prop_ro("grid_origin", &Integrator::grid_origin)
      .def("checkpoint", &checkpoint_dict)
      .def("counters", &counters_dict);

  nb::class_<InCoreIntegrator, Integrator>(m, "InCoreIntegrator")
      .def("positions",
           [](const InCoreIntegrator& it) { return to_numpy(it.state().pos, {it.state().size(), 3}); })
      .def("velocities",
           [](const InCoreIntegrator& it) { return to_numpy(it.state().vel, {it.state().size(), 3}); })
      .def("potentials",
           [](const InCoreIntegrator& it) { return to_numpy(it.potential(), {it.potential().size()}); },
           "each particle's potential from the last force evaluation (N,), at time once evolve_to returned");

  nb::class_<HermiteIntegrator, InCoreIntegrator>(m, "Hermite")
      .def("__init__",
           [](HermiteIntegrator* self, ForceProvider& pipe, CVec3 pos, CVec3 vel, CScalars mass, double t0,
              double eta, double eta_s, double dt_max, std::optional<nb::dict> f64, std::optional<nb::dict> i64) {
             HermiteParams p{eta, eta_s, dt_max};
             ParticleState s = state_from(pos, vel, mass);
             // Python objects are read before the GIL is released.
             std::optional<CheckpointState> restart;
             if (f64) restart = restart_from(*f64, i64);
             nb::gil_scoped_release release;
             if (restart)
               new (self) HermiteIntegrator(pipe, std::move(s), t0, p, *restart);
             else
               new (self) HermiteIntegrator(pipe, std::move(s), t0, p);
           },
           nb::arg("pipeline"), nb::arg("pos"), nb::arg("vel"), nb::arg("mass"), nb::arg("t0"),
           nb::arg("eta"), nb::arg("eta_s"), nb::arg("dt_max"), nb::arg("restart_f64").none() = nb::none(),
           nb::arg("restart_i64").none() = nb::none(), nb::keep_alive<1, 2>());

  nb::class_<LeapfrogIntegrator, InCoreIntegrator>(m, "Leapfrog")
      .def("__init__",
           [](LeapfrogIntegrator* self, ForceProvider& pipe, CVec3 pos, CVec3 vel, CScalars mass, double t0,
              double dt, std::optional<nb::dict> f64, std::optional<nb::dict> i64) {
             LeapfrogParams p{dt};
             ParticleState s = state_from(pos, vel, mass);
             std::optional<CheckpointState> restart;
             if (f64) restart = restart_from(*f64, i64);
             nb::gil_scoped_release release;
             if (restart)
               new (self) LeapfrogIntegrator(pipe, std::move(s), t0, p, *restart);
             else
               new (self) LeapfrogIntegrator(pipe, std::move(s), t0, p);
           },
           nb::arg("pipeline"), nb::arg("pos"), nb::arg("vel"), nb::arg("mass"), nb::arg("t0"), nb::arg("dt"),
           nb::arg("restart_f64").none() = nb::none(), nb::arg("restart_i64").none() = nb::none(),
           nb::keep_alive<1, 2>());
}
