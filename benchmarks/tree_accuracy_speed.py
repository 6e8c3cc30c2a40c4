"""Treecode speed and accuracy on a Plummer sphere (issue 4 figures); not a test.

    python benchmarks/tree_accuracy_speed.py -n 1000000 --theta 0.4 0.5 0.6 0.8 --repeat 2

For each (theta, quadrupole): best-of-`repeat` time of one full evaluation (sort + build +
moments + walk/lists + forces) with its breakdown, interactions and MAC tests per body,
and the median and 99th percentile of |a_tree - a_direct| / |a_direct| over `--sample`
random particles, the direct reference from Pipeline(precision="double") with those
particles as the i-set (own index excluded).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gravpipe as gp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=100_000)
    ap.add_argument("--theta", type=float, nargs="+", default=[0.4, 0.5, 0.6, 0.8])
    ap.add_argument("--quad", choices=["both", "yes", "no"], default="both")
    ap.add_argument("--eps", type=float, default=None, help="softening (default: 1/64 * (N/1e4)^(-1/3))")
    ap.add_argument("--n-crit", type=int, default=None)
    ap.add_argument("--n-leaf", type=int, default=None)
    ap.add_argument("--sample", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    p = gp.ic.plummer(a.n, seed=a.seed)
    pos, mass = np.ascontiguousarray(p.pos), np.ascontiguousarray(p.mass)
    eps = a.eps if a.eps is not None else (1 / 64) * (a.n / 1e4) ** (-1 / 3)
    sel = np.sort(np.random.default_rng(a.seed).choice(a.n, a.sample, replace=False))
    t0 = time.perf_counter()
    pipe = gp.Pipeline("cpu", "double", eps=eps)
    pipe.set_j(pos, mass)
    ref, _ = pipe.forces(pos[sel], exclude=sel)
    print(f"# Plummer N={a.n} eps={eps:.4g} seed={a.seed}; direct reference on {a.sample} particles "
          f"in {time.perf_counter() - t0:.1f} s")
    kw = {}
    if a.n_crit:
        kw["n_crit"] = a.n_crit
    if a.n_leaf:
        kw["n_leaf"] = a.n_leaf
    quads = {"both": [True, False], "yes": [True], "no": [False]}[a.quad]
    print("theta quad   total  sort  build  mom   walk   eval |  pp/body  pc/body  mac/body |  median     p99")
    for quad in quads:
        for theta in a.theta:
            best, stats, acc = None, None, None
            for _ in range(a.repeat):
                t = time.perf_counter()
                tree = gp.Tree(pos, mass, eps, theta=theta, quadrupole=quad, **kw)
                acc, _ = tree.forces()
                wall = time.perf_counter() - t
                if best is None or wall < best:
                    best, stats = wall, tree.stats
            e = np.linalg.norm(acc[sel] - ref, axis=1) / np.linalg.norm(ref, axis=1)
            s = stats
            print(f"{theta:5.2f} {'yes' if quad else 'no ':>4s} {best:7.3f} {s.seconds_sort:5.3f} {s.seconds_build:6.3f} "
                  f"{s.seconds_moments:5.3f} {s.seconds_walk:6.3f} {s.seconds_evaluate:6.3f} | {s.pp_per_body:8.0f} "
                  f"{s.pc_per_body:8.0f} {s.mac_per_body:9.1f} | {np.median(e):.2e} {np.percentile(e, 99):.2e}",
                  flush=True)


if __name__ == "__main__":
    main()
