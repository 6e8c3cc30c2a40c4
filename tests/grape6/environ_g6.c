/* A host that prints OMP_WAIT_POLICY as it sees it once libgravpipe_g6 has loaded: the
 * library may choose libgomp's wait policy (cpp/src/grape6/g6_env.cpp), never the host's
 * environment. */
#include <stdio.h>
#include <stdlib.h>

#include "gravpipe/g6.h"

int main(void) {
  const char *policy = getenv("OMP_WAIT_POLICY");
  printf("%s %d\n", policy ? policy : "(unset)", g6_npipes() > 0);
  return 0;
}
