"""Run under ``mpiexec -n 2`` by ``gravpipe bench model``: the ping-pong fit, a j-parallel
direct evaluation and treecode evaluations over two ranks (one thread each), through the
functions of ``gravpipe.bench.pingpong``, ``benchmarks/mpi_scaling.py`` and
``gravpipe.parallel.domain_leapfrog.DomainLeapfrog``. Rank 0 writes the JSON to the path given.

A tree evaluation is timed as ``gravpipe run`` pays for it on every step of a run over ranks
(the state distributed: each rank holds its domain): the domains cut along the curve, the
leaving particles migrated, the local tree built, the essential trees exchanged and
grafted, and the forces of the rank's own particles. Sizes are measured in
interleaved rounds; in each round a size is evaluated until >= 0.3 s of work (the mean per
evaluation); the figure is the median over rounds. Each evaluation also records the slower
rank's own tree seconds (sort, build, moments, walk, evaluate): the rest is the domain
decomposition and exchange that the model prices from these calibration sizes."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import gravpipe
from gravpipe import _core
from gravpipe.bench import pingpong

TREE_CAL = (15000, 30000)      # the domain constants come from these
TREE_CMP = (60000, 120000)     # compared with the model
ROUNDS, MIN_SECONDS = 7, 0.3


def _scaling():
    path = Path(gravpipe.__file__).resolve().parents[2] / "benchmarks" / "mpi_scaling.py"
    spec = importlib.util.spec_from_file_location("gravpipe_mpi_scaling", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _TreeCase:
    def __init__(self, comm, n: int):
        from gravpipe.parallel.domain_leapfrog import DomainLeapfrog
        from gravpipe.parallel.essential_forces import EssentialTreeForces

        self.comm, self.n = comm, n
        p = gravpipe.ic.plummer(n, seed=1)
        b, e = gravpipe.io.file_share(n, comm.Get_rank(), comm.Get_size())
        self.forces = EssentialTreeForces(comm, 1 / 64, 1.0, threads=1)
        # the start-up evaluation: the first domains are equal slices; later ones are balanced by cost
        self.run = DomainLeapfrog(comm, p.pos[b:e], p.vel[b:e], p.mass[b:e], p.id[b:e], forces=self.forces,
                                  dt=1 / 128, t0=0.0)

    def once(self) -> tuple[float, float, float]:
        """(wall seconds, the slower rank's own tree seconds, essential bytes sent by all ranks)."""
        comm, forces = self.comm, self.forces
        before = forces.balance.bytes_essential
        comm.Barrier()
        t0 = time.perf_counter()
        self.run.forces_now()
        wall = time.perf_counter() - t0
        s = forces.tree_stats
        local = s.seconds_sort + s.seconds_build + s.seconds_moments + s.seconds_walk + s.seconds_evaluate
        wall, local = comm.allreduce(wall, op=MPI.MAX), comm.allreduce(local, op=MPI.MAX)
        return wall, local, float(forces.balance.bytes_essential - before)

    def round(self) -> dict:
        rows = []
        while not rows or sum(r[0] for r in rows) < MIN_SECONDS:  # the same count on every rank
            rows.append(self.once())
        a = np.array(rows)
        b = self.forces.balance
        return {"seconds": float(a[:, 0].mean()), "local_tree_seconds": float(a[:, 1].mean()),
                "bytes_essential": float(a[:, 2].mean()), "evaluations": len(rows),
                "interactions_per_body": b.interactions / max(b.evaluations, 1) / self.n}


def _trees(comm) -> list[dict]:
    _core.set_max_threads(1)  # this rank's share of the cores, as a Simulation on ranks does
    cases = {n: _TreeCase(comm, n) for n in TREE_CAL + TREE_CMP}
    per = {n: [] for n in cases}
    for _ in range(ROUNDS):
        for n, case in cases.items():
            per[n].append(case.round())
    out = []
    for n, rounds in per.items():
        med = sorted(rounds, key=lambda r: r["seconds"])[(len(rounds) - 1) // 2]
        w = [r["seconds"] for r in rounds]
        out.append({"n": n, "calibration": n in TREE_CAL, **med,
                    "local_tree_seconds": float(np.median([r["local_tree_seconds"] for r in rounds])),
                    "spread": max(w) / min(w), "rounds": rounds})
    return out


def main() -> None:
    comm = MPI.COMM_WORLD
    rows = pingpong.run(comm, sizes=[1, 1024, 16384, 262144, 1 << 20, 4 << 20], repeats=10)
    sc = _scaling()
    direct = sc.direct(comm, 8192, 1, 5)
    trees = _trees(comm)
    if comm.Get_rank() == 0:
        f = pingpong.fits(rows)["all"]
        with open(sys.argv[1], "w") as fh:
            json.dump({"pingpong": {"latency_s": f.latency_s, "seconds_per_byte": f.seconds_per_byte, "rows": rows},
                       "direct": direct, "trees": trees, "ranks": comm.Get_size()}, fh)


if __name__ == "__main__":
    main()
