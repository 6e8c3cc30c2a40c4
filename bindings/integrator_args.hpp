// What the integrator bindings (bind_integrate.cpp, bind_share.cpp) read from Python: the
// particle arrays and a checkpoint's arrays, copied into the core's types.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ndarray_views.hpp"
#include "gravpipe/integrator.hpp"

namespace gravpipe::bindings {

inline ParticleState state_from(CVec3 pos, CVec3 vel, CScalars mass) {
  ParticleState s;
  s.pos.assign(pos.data(), pos.data() + pos.size());
  s.vel.assign(vel.data(), vel.data() + vel.size());
  s.mass.assign(mass.data(), mass.data() + mass.size());
  return s;
}

inline CheckpointState restart_from(nb::dict f64, std::optional<nb::dict> i64) {
  using CF64 = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  using CI64 = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  CheckpointState c;
  for (auto [k, v] : f64) {
    auto a = nb::cast<CF64>(v);
    c.f64[nb::cast<std::string>(k)] = std::vector<double>(a.data(), a.data() + a.size());
  }
  if (i64) for (auto [k, v] : *i64) {
    auto a = nb::cast<CI64>(v);
    c.i64[nb::cast<std::string>(k)] = std::vector<std::int64_t>(a.data(), a.data() + a.size());
  }
  return c;
}

}  // namespace gravpipe::bindings
