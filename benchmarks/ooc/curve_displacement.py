"""How far particles move in curve order over one drift: the case for (or against) a
one-pass sort of nearly sorted pages. Positions in curve order, drifted by dt vel, sorted
again; prints quantiles of |new rank - old rank| and the particles beyond a window.
BENCHMARKS.md, "Fewer passes over the pages (session 8)".

    python benchmarks/ooc/curve_displacement.py 1e7
"""
import sys

import numpy as np

import gravpipe as gp
from gravpipe import _core


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


if __name__ == "__main__":
    main()
