// The tree build that rides on a sort (streamed_tree_build.hpp), as Python holds it between
// the sort that fills it and the PagedTree that takes its cells. Shared by the sort's binding
// (bind_store.cpp) and the tree's (bind_tree.cpp, which registers the class).
#pragma once
#include "gravpipe/streamed_tree_build.hpp"
#include "store_box.hpp"

namespace gravpipe::bindings {

using StreamedBuildBox = StoreBound<StreamedTreeBuild>;

}  // namespace gravpipe::bindings
