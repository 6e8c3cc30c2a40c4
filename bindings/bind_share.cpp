// Bindings of direct summation on distributed shares: gravpipe::ShareDirectForces, whose
// collectives are Python callables (mpi4py lives in Python; they are called with the GIL
// held, on numpy views of the core's buffers that are valid only during the call), and the
// Hermite and leapfrog integrators built on a share, agreeing through its global minimum.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <optional>
#include <utility>

#include "integrator_args.hpp"
#include "ndarray_views.hpp"
#include "gravpipe/hermite.hpp"
#include "gravpipe/leapfrog.hpp"
#include "gravpipe/share_direct_forces.hpp"

namespace nb = nanobind;
using namespace gravpipe;

namespace {

using bindings::CScalars, bindings::CVec3, bindings::Indices, bindings::ScalarsOut, bindings::Vec3Out;
using bindings::restart_from, bindings::span_of, bindings::state_from;

// A numpy array over the buffer itself (rv_policy::reference: a copy would lose the
// callable's in-place writes), valid during the call only.
template <class T>
nb::object view_of(Span<T> s) {
  const std::size_t shape[1] = {s.size()};
  return nb::cast(nb::ndarray<nb::numpy, T, nb::ndim<1>>(s.data(), 1, shape, nb::handle()),
                  nb::rv_policy::reference);
}

// The collectives as calls of Python callables:
//   min(value: int) -> int
//   allgather(mine: int64 (k,), all: int64 (k P,))              all written in place
//   allgatherv(send: f64, counts: int64 (P,), recv: f64)         recv written in place
//   alltoallv(send: f64, send_counts: int64 (P,), recv: f64, recv_counts: int64 (P,))
ShareCollectives python_collectives(int rank, int ranks, nb::callable min, nb::callable allgather,
                                    nb::callable allgatherv, nb::callable alltoallv) {
  ShareCollectives c;
  c.rank = rank, c.ranks = ranks;
  c.min = [min](std::int64_t mine) {
    nb::gil_scoped_acquire gil;
    return nb::cast<std::int64_t>(min(mine));
  };
  c.allgather = [allgather](Span<const std::int64_t> mine, Span<std::int64_t> all) {
    nb::gil_scoped_acquire gil;
    allgather(view_of(mine), view_of(all));
  };
  c.allgatherv = [allgatherv](Span<const double> send, Span<const std::int64_t> counts, Span<double> recv) {
    nb::gil_scoped_acquire gil;
    allgatherv(view_of(send), view_of(counts), view_of(recv));
  };
  c.alltoallv = [alltoallv](Span<const double> send, Span<const std::int64_t> send_counts, Span<double> recv,
                            Span<const std::int64_t> recv_counts) {
    nb::gil_scoped_acquire gil;
    alltoallv(view_of(send), view_of(send_counts), view_of(recv), view_of(recv_counts));
  };
  return c;
}

ShareAgreement agreement_of(ShareDirectForces& forces) {
  return ShareAgreement([&forces](std::int64_t mine) { return forces.global_min(mine); });
}

nb::dict traffic_dict(const ShareTraffic& t) {
  nb::dict d;
  d["requests"] = t.requests;
  d["rounds"] = t.rounds;
  d["agreements"] = t.agreements;
  d["bytes_sent"] = t.bytes_sent;
  d["bytes_received"] = t.bytes_received;
  d["largest_block"] = t.largest_block;
  d["largest_receive"] = t.largest_receive;
  return d;
}

}  // namespace

void bind_share(nb::module_& m) {
  nb::class_<ShareDirectForces, ForceProvider>(m, "ShareDirectForces")
      .def("__init__",
           [](ShareDirectForces* self, ForceProvider& local, int rank, int ranks, std::int64_t n_total,
              std::size_t max_block, nb::callable min, nb::callable allgather, nb::callable allgatherv,
              nb::callable alltoallv) {
             new (self) ShareDirectForces(local, python_collectives(rank, ranks, std::move(min), std::move(allgather),
                                                                    std::move(allgatherv), std::move(alltoallv)),
                                          n_total, max_block);
           },
           nb::arg("local"), nb::arg("rank"), nb::arg("ranks"), nb::arg("n_total"), nb::arg("max_block"),
           nb::arg("min"), nb::arg("allgather"), nb::arg("allgatherv"), nb::arg("alltoallv"), nb::keep_alive<1, 2>(),
           "Direct forces over distributed shares: ``local`` holds this rank's j-share; the four callables are "
           "the collectives (see share_direct_forces.hpp); at most max_block i-particles per round.")
      .def("set_j",
           [](ShareDirectForces& p, CVec3 pos, CScalars mass, std::optional<CVec3> vel) {
             p.set_j(span_of(pos), span_of(mass), span_of(vel));
           },
           nb::arg("pos"), nb::arg("mass"), nb::arg("vel").none())
      .def("forces",
           [](ShareDirectForces& p, CVec3 pos_i, std::optional<CVec3> vel_i, std::optional<Indices> exclude,
              Vec3Out acc, ScalarsOut pot, std::optional<Vec3Out> jerk) {
             p.forces({span_of(pos_i), span_of(vel_i), span_of(exclude), span_of(acc), span_of(pot), span_of(jerk)});
           },
           nb::arg("pos_i"), nb::arg("vel_i").none(), nb::arg("exclude").none(), nb::arg("acc"), nb::arg("pot"),
           nb::arg("jerk").none(), nb::call_guard<nb::gil_scoped_release>(),
           "Total forces on this rank's i-particles (a collective: every rank calls it).")
      .def("traffic", [](const ShareDirectForces& p) { return traffic_dict(p.traffic()); },
           "Messages so far: requests, rounds, agreements, bytes_sent, bytes_received (payload to and from "
           "other ranks), largest_block, largest_receive (entries).");

  m.def(
      "share_hermite",
      [](ShareDirectForces& forces, CVec3 pos, CVec3 vel, CScalars mass, double t0, double eta, double eta_s,
         double dt_max, std::optional<nb::dict> f64, std::optional<nb::dict> i64) {
        ParticleState s = state_from(pos, vel, mass);
        std::optional<CheckpointState> restart;
        if (f64) restart = restart_from(*f64, i64);
        nb::gil_scoped_release release;  // the start's forces call the collectives, which take the GIL
        const HermiteParams p{eta, eta_s, dt_max};
        return restart ? new HermiteIntegrator(forces, std::move(s), t0, p, *restart, agreement_of(forces))
                       : new HermiteIntegrator(forces, std::move(s), t0, p, agreement_of(forces));
      },
      nb::arg("forces"), nb::arg("pos"), nb::arg("vel"), nb::arg("mass"), nb::arg("t0"), nb::arg("eta"),
      nb::arg("eta_s"), nb::arg("dt_max"), nb::arg("restart_f64").none() = nb::none(),
      nb::arg("restart_i64").none() = nb::none(), nb::rv_policy::take_ownership, nb::keep_alive<0, 1>(),
      "Hermite on this rank's share (any n >= 0): a collective, as is each evolve_to.");

  m.def(
      "share_leapfrog",
      [](ShareDirectForces& forces, CVec3 pos, CVec3 vel, CScalars mass, double t0, double dt,
         std::optional<nb::dict> f64, std::optional<nb::dict> i64) {
        ParticleState s = state_from(pos, vel, mass);
        std::optional<CheckpointState> restart;
        if (f64) restart = restart_from(*f64, i64);
        nb::gil_scoped_release release;
        const LeapfrogParams p{dt};
        return restart ? new LeapfrogIntegrator(forces, std::move(s), t0, p, *restart, agreement_of(forces))
                       : new LeapfrogIntegrator(forces, std::move(s), t0, p, agreement_of(forces));
      },
      nb::arg("forces"), nb::arg("pos"), nb::arg("vel"), nb::arg("mass"), nb::arg("t0"), nb::arg("dt"),
      nb::arg("restart_f64").none() = nb::none(), nb::arg("restart_i64").none() = nb::none(),
      nb::rv_policy::take_ownership, nb::keep_alive<0, 1>(),
      "Shared-step leapfrog on this rank's share (any n >= 0): a collective, as is each evolve_to.");
}
