"""The external sort with and without overlapped reads (the next run read on a loader
thread while this one is sorted and written), alternating in one process at a budget of
1/10 of the particle data. With ``kick-drift`` the sort kicks and drifts each run as it
reads it (h = dt = 0: the same reads and writes, positions unchanged, so the predicted
bounds stay exact from one sort to the next). BENCHMARKS.md, "The external sort".

    python benchmarks/ooc/sort_overlap_ab.py 1e7 /path/to/scratch [kick-drift]
"""
import sys
import time

import numpy as np

import gravpipe as gp
from gravpipe import _core
from gravpipe.ooc import CARRIED, OutOfCore


def main() -> None:
    n, scratch = int(float(sys.argv[1])), sys.argv[2]
    kick_drift = len(sys.argv) > 3 and sys.argv[3] == "kick-drift"
    p = gp.ic.plummer(n, seed=1)
    with OutOfCore.from_particles(p, scratch, int(0.1 * 96 * n), eps=1e-3) as o:
        o.forces()  # sorted, and acc for the kick
        o.reset()  # the integrator's tree and cells go back to the budget: this sorts by itself
        kd = None
        if kick_drift:
            lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
            for _, blk in o.blocks(["pos"]):
                lo, hi = np.minimum(lo, blk["pos"].min(0)), np.maximum(hi, blk["pos"].max(0))
            kd = (0.0, 0.0, list(lo), list(hi))
        for _ in range(3):
            for overlap in (False, True):
                a = dict(o.store.stats())
                t0 = time.perf_counter()
                d = _core.store_sort_by_curve(o.store._core, CARRIED, o.plan.sort_buffer, o.threads, kd, overlap)
                assert d["kick_drift_applied"] == kick_drift
                sec = time.perf_counter() - t0
                b = dict(o.store.stats())
                print(f"overlap {overlap!s:5}: sort {sec:.2f} s ({d['runs']} runs: runs {d['seconds_runs']:.2f}, merge "
                      f"{d['seconds_merge']:.2f}, permute {d['seconds_permute']:.2f}), stalls "
                      f"{b['stall_seconds'] - a['stall_seconds']:.2f} thread-s", flush=True)


if __name__ == "__main__":
    main()
