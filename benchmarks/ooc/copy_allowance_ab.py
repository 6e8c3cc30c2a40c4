"""The budget's plan for the threads' copied particle blocks, A/B: 4 MiB a thread (the plan
for a walk that keeps every copy of a run) against the bound the walk now keeps
(PagedTree::copy_allowance, ~96 KiB a thread), at the same budget (1/10 of the data): what the
plan frees goes to the particles' and the cells' caches. A fresh store for each, alternating,
so that the host's drift hits both alike. Prints each second step's line, then the medians.
BENCHMARKS.md, "Pages, prefetch and the budget's split".

    python benchmarks/ooc/copy_allowance_ab.py 1e7 /path/to/scratch 3
"""
import statistics
import sys

from step_report import budget, step_line, usage

import gravpipe as gp
from gravpipe.ooc import OutOfCore

THREADS = 2


def keep_free_at_4_mib(n: int) -> int:
    """tree_keep_free with 4 MiB of copied blocks a thread (its other charges as they are)."""
    return THREADS * (4 << 20) + 24 * (n // 1024 + 1) + (1 << 20)


def main() -> None:
    n, scratch = int(float(sys.argv[1])), sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    p = gp.ic.plummer(n, seed=1)
    plans = {"4 MiB a thread": keep_free_at_4_mib(n), "bounded": None}  # the budget's option keep_free
    steps: dict[str, list[float]] = {k: [] for k in plans}
    for _ in range(rounds):
        for name, keep_free in plans.items():
            with OutOfCore.from_particles(p, scratch, budget(n), eps=1e-3, threads=THREADS,
                                          keep_free=keep_free) as o:
                o.forces()
                o.step(1 / 128)  # the steady state: the next sort's runs made in the walk
                a, u0 = dict(o.store.stats()), usage()
                st = o.step(1 / 128)
                steps[name].append(st.total)
                print(step_line(f"{name} (particle cache {o.plan.cache / 2**20:.1f} MiB)", st, a,
                                dict(o.store.stats()), u0, usage()) + f", sort detail merge "
                      f"{st.sort_detail['seconds_merge']:.2f} s, permute {st.sort_detail['seconds_permute']:.2f} s",
                      flush=True)
    for name in plans:
        print(f"{name}: median step {statistics.median(steps[name]):.2f} s")


if __name__ == "__main__":
    main()
