// The tree build that rides on a sort (streamed_tree_build.hpp), as Python holds it between
// the sort that fills it and the PagedTree that takes its cells. Shared by the sort's binding
// (bind_store.cpp) and the tree's (bind_tree.cpp, which registers the class).
#pragma once
#include <memory>

#include "gravpipe/streamed_tree_build.hpp"
#include "store_box.hpp"

namespace gravpipe::bindings {

/// The build with the store it reads: it shares the store's ownership, so that its cells and
/// budget charges never outlive the store.
class StreamedBuildBox {
 public:
  StreamedBuildBox(StoreBox& box, const TreeParams& p) : box_(box), store_(box.share()), build_(*store_, p) {}
  StreamedTreeBuild& get() {
    box_.get();  // throws once the store is closed
    return build_;
  }
  const StreamedTreeBuild& get() const {
    box_.get();
    return build_;
  }

 private:
  StoreBox& box_;  // kept alive by the Python object (keep_alive)
  std::shared_ptr<ParticleStore> store_;  // before build_: destroyed after it
  StreamedTreeBuild build_;
};

}  // namespace gravpipe::bindings
