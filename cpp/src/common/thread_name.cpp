// name_this_thread (thread_name.hpp).
#include "gravpipe/thread_name.hpp"

#include <cstring>

#if defined(__linux__)
#include <pthread.h>
#endif

namespace gravpipe {

void name_this_thread(const char* name) {
#if defined(__linux__)
  char kept[16] = {};  // the kernel keeps 15 characters and refuses longer names whole
  std::strncpy(kept, name, sizeof kept - 1);
  pthread_setname_np(pthread_self(), kept);
#else
  (void)name;
#endif
}

}  // namespace gravpipe
