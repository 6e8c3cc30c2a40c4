// The store behind a Python object that can be closed (its scratch file removed) before the
// object is collected: shared by bind_store.cpp and the out-of-core tree in bind_tree.cpp.
#pragma once
#include <memory>

#include <nanobind/nanobind.h>

#include "gravpipe/error.hpp"
#include "gravpipe/particle_store.hpp"

namespace gravpipe::bindings {

// Objects that hold references into the store (the out-of-core tree: pins, budget charges)
// share its ownership, so that closing the box while one of them lives (an exception's
// traceback holding the tree while a `with` block closes the store) leaves the store to the
// last of them: their destructors never touch a freed store, and the scratch file goes with
// that last owner. Calls through a closed box throw.
class StoreBox {
 public:
  explicit StoreBox(const StoreConfig& c) : store_(std::make_shared<ParticleStore>(c)) {}
  ParticleStore& get() const {
    if (!store_) throw InputError("store: already closed (its scratch file is gone)");
    return *store_;
  }
  /// The store, owned jointly (throws once closed).
  std::shared_ptr<ParticleStore> share() const {
    get();
    return store_;
  }
  void close() { store_.reset(); }
  bool closed() const { return !store_; }

 private:
  std::shared_ptr<ParticleStore> store_;
};

/// Page-cache counters as a dict (the store's, and the out-of-core tree's cell cache).
nanobind::dict counters_dict(const StoreCounters& c);

}  // namespace gravpipe::bindings
