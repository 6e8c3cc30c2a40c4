// libgravpipe_g6_env: the OpenMP wait policy of a GRAPE-6 host, chosen before libgomp loads.
//
// A GRAPE-6 host calls the library thousands of times a second with short force calls and
// does its own serial work in between. libgomp's default wait policy keeps idle team
// threads spinning for ~300000 iterations (a few ms) after every parallel region and at
// every barrier; on a busy machine they take the cores from the host thread and from the
// team members they wait for. With 2 threads on a loaded 2-core machine a Hermite host ran
// 4-10x slower than with 1; OMP_WAIT_POLICY=passive (threads sleep at once) made 2 threads
// faster than 1 again. So, unless the user chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT set),
// the default is passive.
//
// libgomp reads its environment once, in its own constructor, which runs before the
// constructors of every library that links it (libgravpipe_g6 among them): a setenv there
// is too late. This library has no dependency but libc and is listed after libgomp in
// libgravpipe_g6's DT_NEEDED, so the dynamic loader initializes it before libgomp (glibc
// initializes independent libraries in reverse load order; test_grape6.py checks that the
// policy takes effect). libgravpipe_g6's constructor, which runs after libgomp's, takes the
// variable out of the environment again, so the host and its child processes keep their
// own environment. A host that loaded libgomp itself first (one with OpenMP regions of its
// own) keeps libgomp's default: it sets the policy it wants.
#include <cstdlib>

namespace {
bool g_set_wait_policy = false;

__attribute__((constructor)) void choose_wait_policy() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  g_set_wait_policy = setenv("OMP_WAIT_POLICY", "passive", 0) == 0;
}
}  // namespace

/// Whether this library put OMP_WAIT_POLICY into the environment (libgravpipe_g6 takes it out).
extern "C" __attribute__((visibility("default"))) int gravpipe_g6_env_set_wait_policy(void) {
  return g_set_wait_policy ? 1 : 0;
}
