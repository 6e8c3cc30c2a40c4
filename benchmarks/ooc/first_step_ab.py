"""A run's start: forces() then the first step, against forces(next_dt) (the first step's
kick-drift predicted and its sort's runs made in the first walk) then the first step, on
fresh stores alternating. BENCHMARKS.md, "The ratio".

    python benchmarks/ooc/first_step_ab.py 1e7 DIR ROUNDS
"""
import sys
import time

from step_report import budget
import gravpipe as gp
from gravpipe.ooc import OutOfCore

n, scratch, rounds = int(float(sys.argv[1])), sys.argv[2], int(sys.argv[3])
p = gp.ic.plummer(n, seed=1)
dt = 1 / 128
for k in range(rounds):
    for named in ((False, True) if k % 2 == 0 else (True, False)):
        with OutOfCore.from_particles(p, scratch, budget(n), eps=1e-3, threads=2) as o:
            t0 = time.perf_counter()
            f = o.forces(next_dt=dt if named else None)
            t1 = time.perf_counter()
            st = o.step(dt)
            t2 = time.perf_counter()
            print(f"next_dt {'named' if named else 'none '}: forces {t1 - t0:.2f} s, first step {t2 - t1:.2f} s "
                  f"(kick_drift {st.kick_drift:.2f}, sort {st.sort:.2f}, walk {st.walk_forces:.2f}), both {t2 - t0:.2f} s",
                  flush=True)
