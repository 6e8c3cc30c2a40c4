// gravpipe._core: the nanobind module. Bindings translate types; they hold no algorithms.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/cuda_device.hpp"
#include "gravpipe/error.hpp"

namespace nb = nanobind;

namespace {

/// Raise gravpipe.errors.<name>(message, extra...). The class is looked up when raised, not
/// at import: gravpipe.errors imports nothing from the core, but the core loads first.
template <class... Extra>
void raise_python_error(const char* name, const char* message, const Extra&... extra) {
  try {
    const nb::object cls = nb::module_::import_("gravpipe.errors").attr(name);
    PyErr_SetObject(cls.ptr(), cls(message, extra...).ptr());
  } catch (const nb::python_error&) {
    PyErr_SetString(PyExc_RuntimeError, message);  // the package is broken; keep the text
  }
}

/// The core's typed errors (gravpipe/error.hpp) as the Python exceptions they stand for.
void translate_core_errors(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const gravpipe::BudgetError& e) {  // before InputError, its base
    raise_python_error("MemoryBudgetError", e.what(), e.requested(), e.least_budget());
  } catch (const gravpipe::ChecksumError& e) {  // before StoreError, its base
    raise_python_error("ChecksumError", e.what(), e.path().c_str(), e.page());
  } catch (const gravpipe::StoreError& e) {
    raise_python_error("StoreError", e.what(), e.path().c_str(), e.page());
  } catch (const gravpipe::InputError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const gravpipe::BackendError& e) {
    raise_python_error("BackendUnavailableError", e.what());
  } catch (const gravpipe::IntegrationError& e) {
    raise_python_error("IntegrationError", e.what(), e.particle(), e.time());
  } catch (const gravpipe::DeviceError& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (const gravpipe::EssentialTreeError& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

}  // namespace

void bind_pipeline(nb::module_& m);
void bind_integrate(nb::module_& m);
void bind_tree(nb::module_& m);
void bind_defaults(nb::module_& m);
void bind_parallel(nb::module_& m);
void bind_curve(nb::module_& m);
void bind_store(nb::module_& m);
void bind_paged_leapfrog(nb::module_& m);
void bind_share(nb::module_& m);
#ifdef GRAVPIPE_HAVE_CUDA
void bind_cuda(nb::module_& m);
#endif

NB_MODULE(_core, m) {
  m.doc() = "gravpipe C++ core";
  nb::register_exception_translator(&translate_core_errors);

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
  m.def("set_max_threads", [](int n) {
    if (n < 1) throw gravpipe::InputError("threads: must be >= 1, got " + std::to_string(n));
    omp_set_num_threads(n);
  }, nb::arg("n"), "OpenMP threads of this process's later parallel loops (an MPI rank's share of its cores).");
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
  bind_curve(m);
  bind_store(m);
  bind_paged_leapfrog(m);
  bind_share(m);
#ifdef GRAVPIPE_HAVE_CUDA
  bind_cuda(m);
#endif
}
