// The default parameters of the core's algorithms, read from their parameter structs so
// that the Python API, the CLI help and the docs never restate a number the core owns.
#include <nanobind/nanobind.h>

#include "gravpipe/hermite.hpp"
#include "gravpipe/leapfrog.hpp"
#include "gravpipe/tree.hpp"

namespace nb = nanobind;

namespace {

nb::dict hermite_defaults() {
  const gravpipe::HermiteParams p{};
  nb::dict d;
  d["eta"] = p.eta, d["eta_s"] = p.eta_s, d["dt_max"] = p.dt_max;
  return d;
}

nb::dict leapfrog_defaults() {
  const gravpipe::LeapfrogParams p{};
  nb::dict d;
  d["dt"] = p.dt;
  return d;
}

nb::dict tree_defaults() {
  const gravpipe::TreeParams p{};
  nb::dict d;
  d["theta"] = p.theta, d["quad_tol"] = p.quad_tol, d["n_leaf"] = p.n_leaf, d["n_crit"] = p.n_crit;
  d["theta_max"] = gravpipe::kThetaMax;  // a bound, not a parameter
  return d;
}

}  // namespace

void bind_defaults(nb::module_& m) {
  m.def("defaults", [] {
    nb::dict d;
    d["hermite"] = hermite_defaults(), d["leapfrog"] = leapfrog_defaults(), d["tree"] = tree_defaults();
    nb::dict timeline;  // Hermite's integer block clock (timeline.hpp)
    timeline["ticks_per_dt_max"] = gravpipe::kTicksPerDtMax;
    d["timeline"] = timeline;
    return d;
  }, "Default parameters of the core's integrators and treecode, by algorithm; the block clock's ticks.");
}
