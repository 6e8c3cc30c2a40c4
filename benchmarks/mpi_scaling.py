"""MPI scaling of j-parallel direct summation, Hermite and the treecode (issue 11, items 3, 5).

Run under mpiexec; rank 0 prints one JSON line per measurement:

    mpiexec -n P python benchmarks/mpi_scaling.py --threads T -n 16384 [--t-end 0.125]

- direct: one all-pairs force evaluation (acc + pot, mixed, self excluded) through the
  j-parallel provider, best of --repeat; interactions per second over all ranks.
- hermite: a Plummer sphere from t = 0 to --t-end (block steps, acc + jerk + pot), its wall
  time, particle steps per second and the comm share of the step time.
- tree: one self-gravity evaluation of the treecode (default theta, mixed) including its
  tree builds; P = 1: the serial tree, P > 1: each rank holding its curve domain, the
  domains cut again, leavers migrated, locally essential trees (one evaluation first, so
  the domains are balanced by measured cost), best of --repeat;
  interactions per second over all ranks, load imbalance (max/mean over ranks of walk +
  evaluate seconds and of interactions), bytes sent (essential trees, migration) and the
  comm share.

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
from gravpipe.parallel.domain_leapfrog import DomainLeapfrog
from gravpipe.parallel.essential_forces import EssentialTreeForces


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


def tree(comm, n: int, threads: int, repeat: int) -> dict:
    gp._core.set_max_threads(threads)  # as in direct(): this rank's share of the cores
    p = gp.ic.plummer(n, seed=1)
    parallel = comm.Get_size() > 1
    run = forces = None
    if parallel:  # each rank holds its domain, as a run over ranks does
        b, e = gp.io.file_share(n, comm.Get_rank(), comm.Get_size())
        forces = EssentialTreeForces(comm, 1 / 64, 1.0, threads=threads)
        # the start-up evaluation: its domains are equal slices; later ones are balanced by cost
        run = DomainLeapfrog(comm, p.pos[b:e], p.vel[b:e], p.mass[b:e], p.id[b:e], forces=forces, dt=1 / 128,
                             t0=0.0)

    def evaluate() -> tuple[float, int, float]:
        """(seconds, interactions, comm seconds) of one evaluation, tree builds included."""
        comm.Barrier()
        t0 = time.perf_counter()
        if parallel:
            before, comm_before = forces.balance.interactions, run.stats.seconds_comm
            run.forces_now()
            work, comm_s = forces.balance.interactions - before, run.stats.seconds_comm - comm_before
        else:
            t = gp.tree.Tree(p.pos, p.mass, eps=1 / 64, threads=threads)
            t.forces()
            work, comm_s = t.stats.pp_interactions + t.stats.pc_interactions, 0.0
        return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX), work, comm_s

    best, row = float("inf"), {}
    for _ in range(repeat):
        seconds, interactions, comm_s = evaluate()
        if seconds < best:
            best, row = seconds, {"interactions_per_second": interactions / seconds,
                                  "interactions_per_body": interactions / n, "comm_share": comm_s / seconds}
            if parallel:
                b = forces.balance
                row |= {"imbalance_seconds": b.last_imbalance_seconds,
                        "imbalance_interactions": b.last_imbalance_interactions}
    if parallel:
        b = forces.balance
        row |= {"bytes_essential_per_eval": b.bytes_essential / b.evaluations,
                "bytes_migration_per_eval": b.bytes_migration / b.evaluations}
    return {"case": "tree", "n": n, "seconds": best} | row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads per rank")
    ap.add_argument("--t-end", type=float, default=0.125)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", nargs="+", default=["direct", "hermite"], choices=["direct", "hermite", "tree"])
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    common = {"ranks": comm.Get_size(), "threads_per_rank": args.threads}
    rows = []
    if "direct" in args.cases:
        rows.append(direct(comm, args.n, args.threads, args.repeat))
    if "hermite" in args.cases:
        rows.append(hermite(comm, args.n, args.threads, args.t_end))
    if "tree" in args.cases:
        rows.append(tree(comm, args.n, args.threads, args.repeat))
    if comm.Get_rank() == 0:
        info = machine.describe()
        for r in rows:
            print(json.dumps(common | r | {"cpu": info["cpu"], "mpi": MPI.Get_library_version().splitlines()[0].strip()}))


if __name__ == "__main__":
    main()
