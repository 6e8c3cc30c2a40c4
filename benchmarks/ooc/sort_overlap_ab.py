"""The external sort with and without overlapped reads (the next run read on a loader
thread while this one is sorted and written), alternating in one process at a budget of
1/10 of the particle data. BENCHMARKS.md, "Fewer passes over the pages (session 8)".

    python benchmarks/ooc/sort_overlap_ab.py 1e7 /path/to/scratch
"""
import sys
import time

import gravpipe as gp
from gravpipe import _core
from gravpipe.ooc import CARRIED, OutOfCore


def main() -> None:
    n, scratch = int(float(sys.argv[1])), sys.argv[2]
    p = gp.ic.plummer(n, seed=1)
    with OutOfCore.from_particles(p, scratch, int(0.1 * 96 * n), eps=1e-3) as o:
        o.sort()
        for _ in range(3):
            for overlap in (False, True):
                a = dict(o.store.stats())
                t0 = time.perf_counter()
                d = _core.store_sort_by_curve(o.store._core, CARRIED, o.plan.sort_buffer, o.threads, None, overlap)
                sec = time.perf_counter() - t0
                b = dict(o.store.stats())
                print(f"overlap {overlap!s:5}: sort {sec:.2f} s ({d['runs']} runs: runs {d['seconds_runs']:.2f}, merge "
                      f"{d['seconds_merge']:.2f}, permute {d['seconds_permute']:.2f}), stalls "
                      f"{b['stall_seconds'] - a['stall_seconds']:.2f} thread-s", flush=True)


if __name__ == "__main__":
    main()
