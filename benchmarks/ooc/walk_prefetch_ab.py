"""The out-of-core walk's prefetch depth, A/B in one process: steps alternate between the
depths named (runs planned ahead of each compute thread; 0 turns the prefetch off), so that
the host's drift hits every depth alike. Prints each step's time, walk, sort, CPU, context
switches, stalls and bytes read, then the medians. BENCHMARKS.md, "Pages, prefetch and the
budget's split".

    python benchmarks/ooc/walk_prefetch_ab.py 1e7 /path/to/scratch 4,0 3
"""
import statistics
import sys

from step_report import budget, step_line, usage

import gravpipe as gp
from gravpipe.ooc import OutOfCore


def main() -> None:
    n, scratch = int(float(sys.argv[1])), sys.argv[2]
    depths = [int(d) for d in sys.argv[3].split(",")]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    p = gp.ic.plummer(n, seed=1)
    steps: dict[int, list[float]] = {d: [] for d in depths}
    with OutOfCore.from_particles(p, scratch, budget(n), eps=1e-3, threads=2) as o:
        o.forces()
        o.step(1 / 128)  # the steady state: the next sort's runs made in the walk
        for _ in range(rounds):
            for d in depths:
                o.options.prefetch_runs = d  # the walk's tree of the next step takes it
                a, u0 = dict(o.store.stats()), usage()
                st = o.step(1 / 128)
                steps[d].append(st.total)
                print(step_line(f"depth {d}", st, a, dict(o.store.stats()), u0, usage()), flush=True)
    for d in depths:
        print(f"depth {d}: median step {statistics.median(steps[d]):.2f} s of {len(steps[d])}")


if __name__ == "__main__":
    main()
