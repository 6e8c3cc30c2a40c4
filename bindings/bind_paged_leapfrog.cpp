// Bindings of the out-of-core leapfrog (gravpipe/paged_leapfrog.hpp) and its budget plan
// (paged_budget.hpp): arguments in, reports out as dicts. Stepping releases the GIL; the
// stage observer (a Python callable, for measurements around the stages) takes it back for
// its calls and is held only for the call that passes it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gravpipe/error.hpp"
#include "gravpipe/paged_budget.hpp"
#include "gravpipe/paged_leapfrog.hpp"
#include "store_box.hpp"

namespace nb = nanobind;
using namespace gravpipe;

namespace {

using PagedLeapfrogBox = bindings::StoreBound<PagedLeapfrog>;

PagedBudgetInputs budget_inputs(std::int64_t n, std::size_t page_bytes, int threads, int n_leaf, int n_crit,
                                int read_ahead, std::int64_t kick_block, double groups_per_particle_at_256,
                                std::optional<std::uint64_t> keep_free) {
  PagedBudgetInputs in;
  in.n = n, in.page_bytes = page_bytes, in.threads = threads, in.n_leaf = n_leaf, in.n_crit = n_crit;
  in.read_ahead = read_ahead, in.kick_block = kick_block, in.groups_per_particle_at_256 = groups_per_particle_at_256;
  in.keep_free = keep_free;
  return in;
}

#define GRAVPIPE_BUDGET_ARGS                                                                             \
  nb::arg("n"), nb::arg("page_bytes"), nb::arg("threads"), nb::arg("n_leaf") = 16, nb::arg("n_crit") = 256, \
      nb::arg("read_ahead") = 4, nb::arg("kick_block") = kKickBlock,                                     \
      nb::arg("groups_per_particle_at_256") = kGroupsPerParticleAt256, nb::arg("keep_free").none() = nb::none()

nb::dict plan_dict(const PagedBudgetPlan& p) {
  nb::dict d;
  d["budget"] = p.budget;
  d["tables_and_least_frames"] = p.tables_and_least_frames;
  d["tree_least"] = p.tree_least;
  d["headroom"] = p.headroom;
  d["sort_buffer"] = p.sort_buffer;
  d["cache"] = p.cache;
  d["warning"] = p.warning;
  return d;
}

nb::dict sort_report_dict(const PagedSortReport& r) {
  if (!r.ran) return nb::dict();
  nb::dict d = bindings::sort_stats_dict(r.stats);
  if (r.tree_tried) {
    d["tree_in_sort"] = r.tree_complete;
    d["tree_declined"] = r.tree_declined;
    d["seconds_tree_count"] = r.seconds_tree_count;
    d["seconds_tree_build"] = r.seconds_tree_build;
    d["tree_charged_bytes"] = r.tree_charged;
  }
  return d;
}

nb::dict report_dict(const PagedStepReport& r) {
  nb::dict d;
  d["kick_drift"] = r.kick_drift;
  d["sort"] = r.sort;
  d["build"] = r.build;
  d["moments"] = r.moments;
  d["walk_forces"] = r.walk_forces;
  d["kick_drift_in_sort"] = r.kick_drift_in_sort;
  d["bytes_read"] = r.bytes_read;
  d["bytes_written"] = r.bytes_written;
  d["cell_bytes_read"] = r.cell_bytes_read;
  d["cell_bytes_written"] = r.cell_bytes_written;
  d["cell_cache_bytes"] = r.cell_cache_bytes;
  d["cells"] = r.cells;
  nb::dict stages;
  for (const PagedStageBytes& s : r.stage_bytes) stages[s.stage.c_str()] = nb::make_tuple(s.read, s.written);
  d["stage_bytes"] = stages;
  d["sort_detail"] = sort_report_dict(r.sort_detail);
  d["tree_stats"] = bindings::tree_stats_dict(r.tree);
  d["cell_counters"] = bindings::counters_dict(r.cell_counters);
  d["copy_peak_bytes"] = r.copy_peak_bytes;
  d["prefetch_runs"] = r.prefetch_runs;
  return d;
}

nb::dict totals_dict(const PagedStepTotals& t) {
  nb::dict d;
  d["kick_drift"] = t.kick_drift;
  d["sort"] = t.sort;
  d["build"] = t.build;
  d["moments"] = t.moments;
  d["walk_forces"] = t.walk_forces;
  d["bytes_read"] = t.bytes_read;
  d["bytes_written"] = t.bytes_written;
  d["steps"] = t.steps;
  d["interactions"] = t.interactions;
  return d;
}

/// Runs `call` on the integrator without the GIL, the observer (a callable or None) told of
/// each stage's end with it; the observer is dropped again when the call returns or throws.
template <class Call>
auto observed(PagedLeapfrogBox& box, nb::object observer, Call&& call) {
  PagedLeapfrog& it = box.get();
  if (!observer.is_none())
    it.set_stage_observer([observer](const std::string& stage) {
      nb::gil_scoped_acquire acquire;
      observer(stage);
    });
  struct Drop {
    PagedLeapfrog& it;
    ~Drop() {
      nb::gil_scoped_acquire acquire;  // the callable's reference goes with the GIL held
      it.set_stage_observer({});
    }
  };
  nb::gil_scoped_release release;
  Drop drop{it};
  return call(it);
}

}  // namespace

void bind_paged_leapfrog(nb::module_& m) {
  m.def("paged_leapfrog_fields",
        [] {
          std::vector<std::tuple<std::string, int, std::string, std::string>> out;
          for (const FieldSpec& f : paged_leapfrog_fields())
            out.emplace_back(f.name, f.components, f.type == FieldType::F64 ? "f64" : "i64", f.page_group);
          return out;
        },
        "(name, components, 'f64' | 'i64', page group) of the paged leapfrog's store");
  m.def("paged_least_budget",
        [](std::int64_t n, std::size_t page_bytes, int threads, int n_leaf, int n_crit, int read_ahead,
           std::int64_t kick_block, double gpp, std::optional<std::uint64_t> keep_free) {
          const LeastPagedBudget lb = least_paged_budget(
              budget_inputs(n, page_bytes, threads, n_leaf, n_crit, read_ahead, kick_block, gpp, keep_free));
          nb::dict d;
          d["least"] = lb.least, d["store"] = lb.store, d["tables"] = lb.tables, d["tree"] = lb.tree;
          d["groups"] = lb.groups, d["sort"] = lb.sort, d["blocks"] = lb.blocks, d["keep_free"] = lb.keep_free;
          return d;
        },
        GRAVPIPE_BUDGET_ARGS, "The parts of the least budget (bytes) for n particles.");
  m.def("plan_paged_budget",
        [](std::int64_t n, std::uint64_t budget, std::size_t page_bytes, int threads, int n_leaf, int n_crit,
           std::optional<std::uint64_t> cache_bytes, std::optional<std::uint64_t> sort_buffer, bool page_auto,
           int read_ahead, std::int64_t kick_block, double gpp, std::optional<std::uint64_t> keep_free) {
          return plan_dict(plan_paged_budget(
              budget_inputs(n, page_bytes, threads, n_leaf, n_crit, read_ahead, kick_block, gpp, keep_free), budget,
              cache_bytes, sort_buffer, page_auto));
        },
        nb::arg("n"), nb::arg("memory_budget"), nb::arg("page_bytes"), nb::arg("threads"), nb::arg("n_leaf") = 16,
        nb::arg("n_crit") = 256, nb::arg("cache_bytes").none() = nb::none(),
        nb::arg("sort_buffer").none() = nb::none(), nb::arg("page_auto") = false, nb::arg("read_ahead") = 4,
        nb::arg("kick_block") = kKickBlock, nb::arg("groups_per_particle_at_256") = kGroupsPerParticleAt256,
        nb::arg("keep_free").none() = nb::none(),
        "How a memory budget is shared (paged_budget.hpp); MemoryBudgetError naming the least budget when it "
        "cannot hold the least needs; 'warning': a MemoryBudgetWarning's text, or ''.");
  m.def("paged_walk_budget",
        [](std::int64_t n, std::size_t page_bytes, int threads, int n_leaf, int n_crit, int read_ahead,
           std::int64_t kick_block, double gpp, std::optional<std::uint64_t> keep_free) {
          return walk_budget(
              budget_inputs(n, page_bytes, threads, n_leaf, n_crit, read_ahead, kick_block, gpp, keep_free),
              page_bytes == 0);
        },
        GRAVPIPE_BUDGET_ARGS, "The least budget whose default split gives the walk its working set (page_bytes 0: "
                              "pages sized from the budget).");
  m.def("paged_walk_least_cache", &walk_least_cache, nb::arg("n"), nb::arg("page_bytes"), nb::arg("threads"));
  m.def("paged_tree_keep_free", &tree_keep_free, nb::arg("n"), nb::arg("threads"), nb::arg("n_crit"),
        nb::arg("n_leaf"));
  m.def("paged_kick_block_bytes", &kick_block_bytes, nb::arg("n"), nb::arg("kick_block") = kKickBlock,
        "Bytes of the kick-drift pass's blocks for n particles.");
  m.def("page_bytes_for_budget", &page_bytes_for_budget, nb::arg("budget"));
  m.attr("PAGED_KICK_BLOCK") = kKickBlock;
  m.attr("PAGED_PRESORT_RUN") = kPresortRun;
  m.attr("PAGED_CELLS_PER_PARTICLE_AT_16") = kCellsPerParticleAt16;
  m.attr("PAGED_GROUPS_PER_PARTICLE_AT_256") = kGroupsPerParticleAt256;
  m.attr("PAGED_SORT_AND_CELLS_ROOM") = kSortAndCellsRoom;
  m.attr("PAGED_WALK_CACHE_PER_THREAD") = kWalkCachePerThread;

  nb::class_<PagedLeapfrogOptions>(m, "PagedLeapfrogOptions",
                                   "What a run or a benchmark may vary (paged_leapfrog.hpp): dt and the tree's "
                                   "parameters change results, the others only when the disk works.")
      .def_rw("dt", &PagedLeapfrogOptions::dt)
      .def_rw("presort", &PagedLeapfrogOptions::presort)
      .def_rw("presort_run", &PagedLeapfrogOptions::presort_run)
      .def_rw("tree_in_sort", &PagedLeapfrogOptions::tree_in_sort)
      .def_rw("kick_block", &PagedLeapfrogOptions::kick_block)
      .def_rw("keep_free", &PagedLeapfrogOptions::keep_free, nb::arg("value").none())
      .def_rw("prefetch_runs", &PagedLeapfrogOptions::prefetch_runs)
      .def_prop_ro("threads", [](const PagedLeapfrogOptions& o) { return o.tree.threads; });

  nb::class_<PagedLeapfrogBox>(m, "PagedLeapfrog")
      .def("__init__",
           [](PagedLeapfrogBox* self, bindings::StoreBox& box, double dt, double eps, double G, double theta,
              bool quadrupole, double quad_tol, int n_leaf, int n_crit, int threads, const std::string& precision,
              bool local_expansion, const std::string& isa, std::uint64_t sort_buffer, std::uint64_t headroom,
              std::int64_t kick_block, std::optional<std::uint64_t> keep_free) {
             PagedLeapfrogOptions o;
             o.dt = dt;
             TreeParams& p = o.tree;
             p.eps = eps, p.G = G, p.theta = theta, p.quadrupole = quadrupole, p.quad_tol = quad_tol;
             p.n_leaf = n_leaf, p.n_crit = n_crit, p.threads = threads, p.precision = parse_precision(precision);
             p.local_expansion = local_expansion, p.isa = isa;
             o.kick_block = kick_block, o.keep_free = keep_free;
             PagedBudgetPlan plan;
             plan.sort_buffer = sort_buffer, plan.headroom = headroom;
             new (self) PagedLeapfrogBox(box, o, plan);
           },
           nb::arg("store"), nb::arg("dt"), nb::arg("eps"), nb::arg("G"), nb::arg("theta"), nb::arg("quadrupole"),
           nb::arg("quad_tol"), nb::arg("n_leaf"), nb::arg("n_crit"), nb::arg("threads"), nb::arg("precision"),
           nb::arg("local_expansion"), nb::arg("isa"), nb::arg("sort_buffer"), nb::arg("headroom"),
           nb::arg("kick_block") = kKickBlock, nb::arg("keep_free").none() = nb::none(), nb::keep_alive<1, 2>(),
           "The leapfrog over a store of paged_leapfrog_fields(); sort_buffer and headroom from its budget plan.")
      .def_prop_ro("options", [](PagedLeapfrogBox& b) -> PagedLeapfrogOptions& { return b.get().options(); },
                   nb::rv_policy::reference_internal)
      .def("forces",
           [](PagedLeapfrogBox& b, std::optional<double> next_dt, nb::object observer) {
             const PagedStepReport* r =
                 observed(b, observer, [&](PagedLeapfrog& it) { return &it.forces(next_dt); });
             return report_dict(*r);
           },
           nb::arg("next_dt").none() = nb::none(), nb::arg("observer").none() = nb::none())
      .def("step",
           [](PagedLeapfrogBox& b, double dt, nb::object observer) {
             const PagedStepReport* r = observed(b, observer, [&](PagedLeapfrog& it) { return &it.step(dt); });
             return report_dict(*r);
           },
           nb::arg("dt"), nb::arg("observer").none() = nb::none())
      .def("evolve_to",
           [](PagedLeapfrogBox& b, double t, nb::object observer) {
             observed(b, observer, [&](PagedLeapfrog& it) {
               it.evolve_to(t);
               return 0;
             });
           },
           nb::arg("t"), nb::arg("observer").none() = nb::none(),
           "Whole steps of dt to t, off the grid one shortened step (LeapfrogIntegrator::evolve_to).")
      .def("sort",
           [](PagedLeapfrogBox& b) {
             const PagedSortReport* r = observed(b, nb::none(), [](PagedLeapfrog& it) { return &it.sort(); });
             return sort_report_dict(*r);
           })
      .def("diagnostic_potential",
           [](PagedLeapfrogBox& b, double theta, const std::string& precision) {
             const Precision p = parse_precision(precision);
             return observed(b, nb::none(), [&](PagedLeapfrog& it) { return it.diagnostic_potential(theta, p); });
           },
           nb::arg("theta"), nb::arg("precision") = "double")
      .def("reset", [](PagedLeapfrogBox& b) { b.get().reset(); })
      .def("restart",
           [](PagedLeapfrogBox& b, std::int64_t steps, double grid_origin) {
             CheckpointState c;
             c.i64["steps"] = {steps};
             c.f64["grid_origin"] = {grid_origin};
             b.get().restart(c);
           },
           nb::arg("steps"), nb::arg("grid_origin"))
      .def("checkpoint",
           [](PagedLeapfrogBox& b) {
             const CheckpointState c = b.get().checkpoint();
             return nb::make_tuple(c.i64.at("steps").at(0), c.f64.at("grid_origin").at(0));
           },
           "(steps, grid_origin)")
      .def_prop_rw(
          "time", [](PagedLeapfrogBox& b) { return b.get().time(); },
          [](PagedLeapfrogBox& b, double t) { b.get().set_time(t); })
      .def_prop_ro("grid_origin", [](PagedLeapfrogBox& b) { return b.get().grid_origin(); })
      .def("last", [](PagedLeapfrogBox& b) { return report_dict(b.get().last()); })
      .def("totals", [](PagedLeapfrogBox& b) { return totals_dict(b.get().totals()); })
      .def("counters",
           [](PagedLeapfrogBox& b) {
             const IntegratorCounters c = b.get().counters();
             nb::dict d;
             d["steps"] = c.steps, d["particle_steps"] = c.particle_steps;
             d["seconds_host"] = c.seconds_host, d["seconds_total"] = c.seconds_total;
             return d;
           })
      .def_prop_ro("carried", [](PagedLeapfrogBox& b) { return b.get().carried(); })
      .def_prop_ro("sorted", [](PagedLeapfrogBox& b) { return b.get().sorted(); })
      .def_prop_ro("has_forces", [](PagedLeapfrogBox& b) { return b.get().has_forces(); })
      .def_prop_ro("prepared_dt", [](PagedLeapfrogBox& b) { return b.get().prepared_dt(); })
      .def_prop_ro("prepared_runs", [](PagedLeapfrogBox& b) { return b.get().prepared_runs(); });
}
