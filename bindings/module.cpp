// gravpipe._core: the nanobind module. Bindings translate types; they hold no algorithms.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/cuda_device.hpp"
#include "gravpipe/error.hpp"

namespace nb = nanobind;

void bind_pipeline(nb::module_& m);
void bind_integrate(nb::module_& m);
void bind_tree(nb::module_& m);
void bind_defaults(nb::module_& m);
void bind_parallel(nb::module_& m);
#ifdef GRAVPIPE_HAVE_CUDA
void bind_cuda(nb::module_& m);
#endif

NB_MODULE(_core, m) {
  m.doc() = "gravpipe C++ core";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const gravpipe::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const gravpipe::BackendError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  m.def("available_isas", [] {
    std::vector<std::string> names;
    for (auto isa : gravpipe::available_isas()) names.push_back(gravpipe::isa_name(isa));
    return names;
  }, "CPU instruction sets the kernels can use here, best first.");
  m.def("resolve_isa", [](const std::string& name) {
    return gravpipe::isa_name(gravpipe::resolve_isa(name));
  }, nb::arg("name"),
        "The instruction set a CPU kernel asked for `name` runs (\"auto\": GRAVPIPE_ISA if set, "
        "else the best); ValueError for an unknown name, RuntimeError for a missing one.");
  m.def("max_threads", [] { return omp_get_max_threads(); }, "OpenMP threads available.");
  m.def("cuda_report", [] {
    const auto r = gravpipe::cuda::query_devices();
    nb::dict d;
    d["compiled"] = r.compiled;
    d["device_count"] = r.device_count;
    d["status"] = r.status;
    return d;
  }, "Whether CUDA sources were compiled, how many devices the runtime sees, and why none.");
  bind_pipeline(m);
  bind_integrate(m);
  bind_tree(m);
  bind_defaults(m);
  bind_parallel(m);
#ifdef GRAVPIPE_HAVE_CUDA
  bind_cuda(m);
#endif
}
