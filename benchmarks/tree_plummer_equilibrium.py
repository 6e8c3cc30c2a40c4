"""A Plummer sphere integrated with leapfrog + treecode stays in equilibrium (issue 4).

    python benchmarks/tree_plummer_equilibrium.py -n 100000 --t-end 10 --dt 0.0078125

Integrates ``gravpipe.ic.plummer(n)`` (N-body units: crossing time 2*sqrt(2) ~ 2.8) with
``Simulation(gravity="tree", integrator="leapfrog")`` and prints, once per time unit, the
relative energy error (energy from a float64 direct sum, independent of the tree), the
virial ratio 2K/|W| and the 1%, 10%, 50% and 90% Lagrangian radii about the centre of
mass, and at the end each radius's rms scatter about its mean and its linear trend over the
run. Equilibrium: no trend beyond the scatter and 2K/|W| near 1; energy: leapfrog is symplectic, so with exact
forces the error would oscillate at the O(dt^2) level; tree force errors add a slow drift.
Writes the table as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import gravpipe as gp
from gravpipe.bench import machine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=100_000)
    ap.add_argument("--t-end", type=float, default=10.0)
    ap.add_argument("--dt", type=float, default=1 / 128)
    ap.add_argument("--eps", type=float, default=1 / 64)
    ap.add_argument("--theta", type=float, default=gp.tree.DEFAULT_THETA)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sim = gp.Simulation(gp.ic.plummer(a.n, seed=a.seed), gravity="tree", integrator="leapfrog",
                        dt=a.dt, eps=a.eps, theta=a.theta)
    info = machine.describe()
    print(f"# Plummer N={a.n} eps={a.eps} dt={a.dt} theta={a.theta}; {info['cpu']}, "
          f"{info['openmp_threads']} threads")
    print(" time   dE/E0       2K/|W|   r_1%    r_10%   r_50%   r_90%   wall_s")
    rows = []
    t0 = time.perf_counter()
    for t in np.arange(0.0, a.t_end + 1e-9, 1.0):
        if t > 0:
            sim.evolve(float(t), progress=False)
        h = sim.history[-1]
        row = {k: h[k] for k in ("time", "energy_error", "virial_ratio", "r_lagr_1", "r_lagr_10",
                                 "r_lagr_50", "r_lagr_90")}
        row["wall_seconds"] = time.perf_counter() - t0
        rows.append(row)
        print(f"{row['time']:5.1f} {row['energy_error']:+.3e} {row['virial_ratio']:8.4f} "
              f"{row['r_lagr_1']:.4f}  {row['r_lagr_10']:.4f}  {row['r_lagr_50']:.4f}  {row['r_lagr_90']:.4f} "
              f"{row['wall_seconds']:7.1f}", flush=True)
    # steady = no trend beyond the scatter: a least-squares line through r(t)/mean(r)
    times = np.array([row["time"] for row in rows])
    r = np.array([[row[f"r_lagr_{f}"] for f in (1, 10, 50, 90)] for row in rows])
    rel = r / r.mean(axis=0)
    scatter = rel.std(axis=0)
    trend = np.polyfit(times, rel, 1)[0] * (times[-1] - times[0])
    print("Lagrangian radii 1/10/50/90%: rms scatter " + " ".join(f"{x:.4f}" for x in scatter)
          + "; linear trend over the run " + " ".join(f"{x:+.4f}" for x in trend))
    t = sim.timings
    print(f"steps {t.steps}, wall {time.perf_counter() - t0:.0f} s (compute {t.compute:.0f} s, "
          f"tree build {t.transfer:.0f} s, host {t.host:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": info, "args": vars(a), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
