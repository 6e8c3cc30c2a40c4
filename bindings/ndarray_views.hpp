// The array types the bindings accept and return, and their views as gravpipe::Span.
// Arrays reach the bindings validated and C-contiguous from the Python layer.
#pragma once
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "gravpipe/pipeline_types.hpp"
#include "gravpipe/span.hpp"

namespace gravpipe::bindings {

namespace nb = nanobind;

using CVec3 = nb::ndarray<const double, nb::shape<-1, 3>, nb::c_contig, nb::device::cpu>;
using CScalars = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Vec3Out = nb::ndarray<double, nb::shape<-1, 3>, nb::c_contig, nb::device::cpu>;
using ScalarsOut = nb::ndarray<double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Indices = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

/// The array's elements as a Span (no copy); host or device memory, as the array's.
template <class A>
auto span_of(const A& a) {
  return Span<std::remove_pointer_t<decltype(a.data())>>(a.data(), a.size());
}

/// An optional array as a Span, empty when absent.
template <class A>
auto span_of(const std::optional<A>& a) -> decltype(span_of(*a)) {
  return a ? span_of(*a) : decltype(span_of(*a)){};
}

/// A numpy array that owns v (moved in, or copied from an lvalue), with the given shape.
template <class T>
nb::object to_numpy(std::vector<T> v, std::initializer_list<std::size_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule deleter(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.begin(), deleter));
}

/// Per-stage counters of a force provider as a dict (bind_pipeline.cpp).
nb::dict stats_dict(const PipelineStats& s);

}  // namespace gravpipe::bindings
