"""MPI scaling of j-parallel direct summation and Hermite (issue 11, item 5).

Run under mpiexec; rank 0 prints one JSON line per measurement:

    mpiexec -n P python benchmarks/mpi_scaling.py --threads T -n 16384 [--t-end 0.125]

- direct: one all-pairs force evaluation (acc + pot, mixed, self excluded) through the
  j-parallel provider, best of --repeat; interactions per second over all ranks.
- hermite: a Plummer sphere from t = 0 to --t-end (block steps, acc + jerk + pot), its wall
  time, particle steps per second and the comm share of the step time.

benchmarks/mpi_scaling.sh runs it at P = 1 and 2 with the same total threads and prints
the strong- and weak-scaling tables with their parallel efficiency.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

import gravpipe as gp
from gravpipe.bench import machine
from gravpipe.parallel import JParallelGravity


def direct(comm, n: int, threads: int, repeat: int) -> dict:
    # as Simulation does on ranks: every OpenMP loop of this process (the j-slice's curve
    # sort too) takes this rank's share of the cores, or P ranks spin against each other
    gp._core.set_max_threads(threads)
    p = gp.ic.plummer(n, seed=1)
    if comm.Get_size() > 1:
        src = JParallelGravity(comm, 1 / 64, 1.0, "cpu", "mixed", threads)
    else:
        src = gp.Pipeline(backend="cpu", precision="mixed", eps=1 / 64, threads=threads)
    acc, pot = np.empty((n, 3)), np.empty(n)
    exclude = np.arange(n, dtype=np.int64)
    best = float("inf")
    for _ in range(repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        src.provider.set_j(p.pos, p.mass, None)
        src.provider.forces(p.pos, None, exclude, acc, pot, None)
        best = min(best, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return {"case": "direct", "n": n, "seconds": best, "interactions_per_second": n * (n - 1) / best}


def hermite(comm, n: int, threads: int, t_end: float) -> dict:
    sim = gp.Simulation(gp.ic.plummer(n, seed=1), eps=1 / 64, threads=threads,
                        comm=comm if comm.Get_size() > 1 else None)
    comm.Barrier()
    t0 = time.perf_counter()
    sim.evolve(t_end, progress=False)
    wall = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    t = sim.timings
    error = sim.energy_error()
    step_time = t.host + t.transfer + t.compute + t.comm
    return {"case": "hermite", "n": n, "t_end": t_end, "seconds": wall, "particle_steps": t.particle_steps,
            "particle_steps_per_second": t.particle_steps / wall, "comm_share": t.comm / step_time,
            "host_share": t.host / step_time, "energy_error": error}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads per rank")
    ap.add_argument("--t-end", type=float, default=0.125)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", nargs="+", default=["direct", "hermite"])
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    common = {"ranks": comm.Get_size(), "threads_per_rank": args.threads}
    rows = []
    if "direct" in args.cases:
        rows.append(direct(comm, args.n, args.threads, args.repeat))
    if "hermite" in args.cases:
        rows.append(hermite(comm, args.n, args.threads, args.t_end))
    if comm.Get_rank() == 0:
        info = machine.describe()
        for r in rows:
            print(json.dumps(common | r | {"cpu": info["cpu"], "mpi": MPI.Get_library_version().splitlines()[0].strip()}))


if __name__ == "__main__":
    main()
