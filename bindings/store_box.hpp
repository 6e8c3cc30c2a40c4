// The store behind a Python object that can be closed (its scratch file removed) before the
// object is collected: shared by bind_store.cpp and the out-of-core tree in bind_tree.cpp.
#pragma once
#include <memory>

#include <nanobind/nanobind.h>

#include "gravpipe/error.hpp"
#include "gravpipe/particle_store.hpp"

namespace gravpipe::bindings {

class StoreBox {
 public:
  explicit StoreBox(const StoreConfig& c) : store_(std::make_unique<ParticleStore>(c)) {}
  ParticleStore& get() const {
    if (!store_) throw InputError("store: already closed (its scratch file is gone)");
    return *store_;
  }
  void close() { store_.reset(); }
  bool closed() const { return !store_; }

 private:
  std::unique_ptr<ParticleStore> store_;
};

/// Page-cache counters as a dict (the store's, and the out-of-core tree's cell cache).
nanobind::dict counters_dict(const StoreCounters& c);

}  // namespace gravpipe::bindings
