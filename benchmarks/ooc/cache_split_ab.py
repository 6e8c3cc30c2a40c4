"""How the budget's split between the particles' cache and the cells' cache moves the
out-of-core step: the same budget (1/10 of the data), particle caches of the sizes named (MiB,
``cache_bytes``; the cells' cache takes what is left), a fresh store for each, alternating
so that the host's drift hits every size alike. Prints each second step's time, walk, sort,
CPU, stalls, bytes read and the cells' cache, then the medians. BENCHMARKS.md,
"Pages, prefetch and the budget's split".

    python benchmarks/ooc/cache_split_ab.py 1e7 /path/to/scratch 26,30 3 [threads, default 2]
"""
import statistics
import sys

from step_report import budget, step_line, usage

import gravpipe as gp
from gravpipe.ooc import OutOfCore


def main() -> None:
    n, scratch = int(float(sys.argv[1])), sys.argv[2]
    caches = [int(float(c) * 2**20) for c in sys.argv[3].split(",")]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    p = gp.ic.plummer(n, seed=1)
    steps: dict[int, list[float]] = {c: [] for c in caches}
    for _ in range(rounds):
        for cache in caches:
            with OutOfCore.from_particles(p, scratch, budget(n), eps=1e-3, threads=threads,
                                          cache_bytes=cache) as o:
                o.forces()
                o.step(1 / 128)  # the steady state: the next sort's runs made in the walk
                a, u0 = dict(o.store.stats()), usage()
                st = o.step(1 / 128)
                steps[cache].append(st.total)
                print(step_line(f"particle cache {cache / 2**20:.0f} MiB", st, a, dict(o.store.stats()), u0, usage()),
                      flush=True)
    for cache in caches:
        print(f"particle cache {cache / 2**20:.0f} MiB: median step {statistics.median(steps[cache]):.2f} s")


if __name__ == "__main__":
    main()
