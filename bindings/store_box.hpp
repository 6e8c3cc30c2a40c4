// The store behind a Python object that can be closed (its scratch file removed) before the
// object is collected: shared by bind_store.cpp and the out-of-core tree in bind_tree.cpp.
#pragma once
#include <memory>

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

}  // namespace gravpipe::bindings
