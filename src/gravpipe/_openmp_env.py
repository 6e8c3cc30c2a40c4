"""How long this process's OpenMP threads spin before they sleep, chosen before libgomp loads.

gravpipe's integrators run short parallel regions between their force calls (Hermite's
predict and correct, from N = 4096 on: kMinParallel). libgomp's default keeps idle team
threads spinning ~300000 iterations after every region and at every barrier; on a machine
whose cores are busy with other work they take the cores from the thread they wait for.
Measured on a 2-core VM, Hermite N = 4096 to t = 1/8 (total seconds, three runs): with one
core busy elsewhere, default 0.42-0.49, GOMP_SPINCOUNT=1000 0.26-0.27, passive 0.23-0.24;
idle, default 0.14-0.15, 1000 spins 0.16-0.18, passive 0.19-0.26. So, unless the user chose
(OMP_WAIT_POLICY or GOMP_SPINCOUNT set), threads spin 1000 iterations, then sleep.

libgomp reads its environment once, when it loads (with gravpipe's core, ``_core``): the
variable is set before the core's first import and taken out again after it, so the
process's environment, and its children's, stay the user's. A process that loaded libgomp
before gravpipe keeps the policy it had. (The GRAPE-6 host library makes the same choice
for its hosts, through libgravpipe_g6_env.)
"""

from __future__ import annotations

import os

#: spins of an idle libgomp thread before it sleeps, unless the user chose
SPIN_COUNT = "1000"


def choose() -> bool:
    """Set GOMP_SPINCOUNT unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set; whether it did."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return False
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return True


def restore(chosen: bool) -> None:
    """Take out what :func:`choose` put in, once libgomp has read it."""
    if chosen:
        os.environ.pop("GOMP_SPINCOUNT", None)
