"""Run under ``mpiexec -n P python run_case.py CASE OUT``: one MPI test case; rank 0 saves
its results to OUT (.npz) for tests/test_mpi.py to compare with a serial run."""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import gravpipe as gp
from gravpipe import _core
from gravpipe.parallel import JParallelGravity


def forces(out: str) -> None:
    """One force evaluation (acc, pot, jerk) with self excluded, through the j-parallel provider."""
    p = gp.ic.plummer(1000, seed=7)
    comm = MPI.COMM_WORLD
    results = {}
    for precision in ("mixed", "double"):
        src = JParallelGravity(comm, eps=1 / 64, G=1.0, backend="cpu", precision=precision, threads=1)
        n = p.n
        acc, pot, jerk = np.empty((n, 3)), np.empty(n), np.empty((n, 3))
        src.provider.set_j(p.pos, p.mass, p.vel)
        src.provider.forces(p.pos, p.vel, np.arange(n, dtype=np.int64), acc, pot, jerk)
        results.update({f"acc_{precision}": acc, f"pot_{precision}": pot, f"jerk_{precision}": jerk})
    everyone = comm.gather(results["acc_mixed"], root=0)
    if comm.rank == 0:
        assert all(np.array_equal(a, everyone[0]) for a in everyone), "ranks disagree"
        np.savez(out, **results)


def hermite(out: str, run_dir: str, t_end: float) -> None:
    """A Hermite run (resumed from run_dir when it holds a checkpoint and t_end is later)."""
    from pathlib import Path

    comm = MPI.COMM_WORLD
    if Path(run_dir).is_dir() and any(Path(run_dir).glob("checkpoint_*")):  # multi-file sets
        sim = gp.Simulation.resume(run_dir)
    else:
        sim = gp.Simulation(gp.ic.plummer(512, seed=8), eps=1 / 32, threads=1, backend="cpu")
    assert sim.comm is not None and sim.comm.Get_size() == comm.Get_size()
    sim.evolve(t_end, checkpoint_every=0.25, out=run_dir, progress=False)
    assert sim.residence == "domains"
    p = sim.particles  # this rank's share: a contiguous slice, in order
    energy_error = sim.energy_error()  # collective: every rank sums its share of the potential
    shares = comm.gather((p.n, p.pos, p.vel, energy_error), root=0)
    if comm.rank == 0:  # gathered here for the comparison only; the run holds N/P a rank
        assert max(s[0] for s in shares) < sim.n and sum(s[0] for s in shares) == sim.n
        assert len({s[3] for s in shares}) == 1, "ranks disagree on the energy"
        np.savez(out, pos=np.concatenate([s[1] for s in shares]), vel=np.concatenate([s[2] for s in shares]),
                 energy_error=energy_error, comm=sim.timings.comm)


if __name__ == "__main__":
    case, out = sys.argv[1], sys.argv[2]
    if case == "forces":
        forces(out)
    elif case == "hermite":
        hermite(out, sys.argv[3], float(sys.argv[4]))
    else:
        raise SystemExit(f"unknown case {case}")
