// A name for the calling thread, as `top -H`, `ps -L`, perf and /proc/<pid>/task/<tid>/comm
// show it: the store's and the tree's helper threads name themselves, so that a profile says
// which one took the CPU (BENCHMARKS.md counts each helper's seconds by these names).
#pragma once
#include <thread>

namespace gravpipe {

/// Names the calling thread (Linux: at most 15 characters are kept; elsewhere nothing).
void name_this_thread(const char* name);
/// Names `thread` from the thread that made it, so that the name is there when the maker
/// returns (a thread that names itself does so whenever it first runs).
void name_thread(std::thread& thread, const char* name);

}  // namespace gravpipe
