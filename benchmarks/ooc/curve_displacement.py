"""How far particles move in curve order over one drift: the case for (or against) a
one-pass sort of nearly sorted pages. Positions in curve order, drifted by dt vel, sorted
again; prints quantiles of |new rank - old rank| and the particles beyond a window
(BENCHMARKS.md, "The external sort"), and, for the external sort's
runs made during the walk (slices of RUN particles of the old order, each sorted), how many
stretches of consecutive run places the merged order takes them in: the gathers a reader of
a field left in the runs' order would make (BENCHMARKS.md, "Measured and not kept").

    python benchmarks/ooc/curve_displacement.py 1e7
"""
import sys

import numpy as np

import gravpipe as gp
from gravpipe import _core

#: particles of a run the walk makes for the next sort (gravpipe.ooc.PRESORT_RUN)
RUN = 1 << 15


def run_stretches(rank: np.ndarray, run: int) -> np.ndarray:
    """Lengths of the stretches of consecutive places in the runs (slices of `run` particles
    of the old order, each sorted by new rank) that the merged order reads, in order.
    rank[k]: new rank of the particle at old place k."""
    n = len(rank)
    place = np.empty(n, np.int64)  # place in the runs of the particle of each new rank
    for b in range(0, n, run):
        within = np.argsort(rank[b:b + run], kind="stable")
        place[rank[b:b + run][within]] = b + np.arange(len(within))
    edges = np.flatnonzero(np.r_[True, np.diff(place) != 1, True])
    return np.diff(edges)


def main() -> None:
    n, dt = int(float(sys.argv[1])), 1 / 128
    p = gp.ic.plummer(n, seed=1)
    order = _core.curve_order(p.pos)
    pos, vel = p.pos[order], p.vel[order]
    moved = _core.curve_order(pos + dt * vel)  # moved[r]: old rank of the particle now r-th
    rank = np.empty(n, np.int64)
    rank[moved] = np.arange(n)
    d = rank - np.arange(n)
    for q in (0.5, 0.9, 0.99, 0.999):
        print(f"|displacement| quantile {q}: {np.quantile(np.abs(d), q):.0f} ranks")
    for w in (1000, 10000, 100000, 300000):
        print(f"beyond {w} ranks: {np.count_nonzero(np.abs(d) > w)} (backwards {np.count_nonzero(d < -w)})")
    lengths = run_stretches(rank, RUN)
    print(f"runs of {RUN}: the merged order reads them in {len(lengths)} stretches of consecutive places "
          f"(median {np.median(lengths):.0f} particles, {np.count_nonzero(lengths == 1)} of one particle; "
          f"mean {n / len(lengths):.1f})")


if __name__ == "__main__":
    main()
