"""The out-of-core step's stages against the in-core step's, steps alternating in one process
(Plummer, eps 1e-3, dt 1/128, 2 threads, a budget of 1/10 of the particle data): each round
one in-core leapfrog step over the in-core tree, then one out-of-core step, each line giving
the step's seconds and its tree's stages (TreeStats: the walk and the evaluation are
thread-seconds over the threads, so they add up to the forces' wall time). The in-core
step in the same round is the reference for a change to the out-of-core walk: the host's
phase moves both alike. The optional fourth argument is the budget as a fraction of the
particle data (default 0.1; below ~1e7 particles 1/10 is less than the least budget).
BENCHMARKS.md, "Stage by stage against the in-core step".

    python benchmarks/ooc/stages_against_in_core.py 1e7 /path/to/scratch [rounds] [0.1]
"""
import sys
import time

import numpy as np
from step_report import budget

import gravpipe as gp
from gravpipe import _core
from gravpipe.ooc import OutOfCore
from gravpipe.tree import TreeGravity

DT = 1 / 128
EPS = 1e-3
THREADS = 2


def main() -> None:
    n, scratch = int(float(sys.argv[1])), sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    fraction = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1
    p = gp.ic.plummer(n, seed=1)
    gravity = TreeGravity(EPS, 1.0, threads=THREADS)
    in_core = _core.Leapfrog(gravity.provider, np.ascontiguousarray(p.pos), np.ascontiguousarray(p.vel),
                             np.ascontiguousarray(p.mass), 0.0, DT)
    with OutOfCore.from_particles(p, scratch, budget(n, fraction), eps=EPS, threads=THREADS) as ooc:
        ooc.forces(next_dt=DT)
        ooc.step(DT)  # both past their first step
        in_core.evolve_to(DT)
        for r in range(rounds):
            t0 = time.perf_counter()
            in_core.evolve_to((r + 2) * DT)
            seconds = time.perf_counter() - t0
            s = gravity.provider.tree_stats()
            print(f"in core     {seconds:6.2f} s: sort {s['seconds_sort']:.3f} build {s['seconds_build']:.3f} "
                  f"moments {s['seconds_moments']:.3f} walk {s['seconds_walk']:.3f} "
                  f"evaluate {s['seconds_evaluate']:.3f}")
            st = ooc.step(DT)
            t = ooc.tree_stats
            print(f"out of core {st.total:6.2f} s: sort {st.sort:.3f} moments {t.seconds_moments:.3f} "
                  f"walk {t.seconds_walk:.3f} evaluate {t.seconds_evaluate:.3f} "
                  f"(walk stage {st.walk_forces:.3f})", flush=True)


if __name__ == "__main__":
    main()
