// The store behind a Python object that can be closed (its scratch file removed) before the
// object is collected: shared by bind_store.cpp and the out-of-core tree in bind_tree.cpp.
#pragma once
#include <memory>
#include <utility>

#include <nanobind/nanobind.h>

#include "gravpipe/error.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/store_sort.hpp"
#include "gravpipe/tree.hpp"

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

/// An object that reads the store (the out-of-core tree, its build in the sort), with the
/// store it reads: every call checks that the store is open, and the object shares the
/// store's ownership, so its destructor (pins, budget charges) never runs on a store that
/// the box closed first. T is made from the store and `args`.
template <class T>
class StoreBound {
 public:
  template <class... Args>
  explicit StoreBound(StoreBox& box, Args&&... args)
      : box_(box), store_(box.share()), object_(*store_, std::forward<Args>(args)...) {}
  T& get() {
    box_.get();  // throws once the store is closed
    return object_;
  }
  const T& get() const {
    box_.get();
    return object_;
  }
  ParticleStore& store() { return box_.get(); }

 private:
  StoreBox& box_;                         // kept alive by the Python object (keep_alive)
  std::shared_ptr<ParticleStore> store_;  // before object_: destroyed after it
  T object_;
};

/// Page-cache counters as a dict (the store's, and the out-of-core tree's cell cache).
nanobind::dict counters_dict(const StoreCounters& c);
/// A tree's counters and stage seconds as a dict (bind_tree.cpp).
nanobind::dict tree_stats_dict(const TreeStats& s);
/// An external sort's details as a dict (bind_store.cpp).
nanobind::dict sort_stats_dict(const StoreSortStats& s);

}  // namespace gravpipe::bindings
