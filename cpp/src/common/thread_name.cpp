// name_this_thread (thread_name.hpp).
#include "gravpipe/thread_name.hpp"

#include <cstring>

#if defined(__linux__)
#include <pthread.h>
#endif

namespace gravpipe {

namespace {
void name_native(std::thread::native_handle_type handle, const char* name) {
#if defined(__linux__)
  char kept[16] = {};  // the kernel keeps 15 characters and refuses longer names whole
  std::strncpy(kept, name, sizeof kept - 1);
  pthread_setname_np(handle, kept);
#else
  (void)handle, (void)name;
#endif
}
}  // namespace

void name_this_thread(const char* name) {
#if defined(__linux__)
  name_native(pthread_self(), name);
#else
  (void)name;
#endif
}

void name_thread(std::thread& thread, const char* name) { name_native(thread.native_handle(), name); }

}  // namespace gravpipe
