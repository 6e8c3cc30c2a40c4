"""Run under ``mpiexec -n P python -m mpi4py tree_case.py CASE OUT ...``: one case of the
domain-decomposed treecode; rank 0 saves its results to OUT (.npz) for
tests/test_mpi_tree.py to compare with serial runs and float64 references."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import gravpipe as gp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tree_models import MODELS, small_plummer  # noqa: E402


def same_on_every_rank(comm, *arrays: np.ndarray) -> bool:
    everyone = comm.allgather([a.tobytes() for a in arrays])
    return all(e == everyone[0] for e in everyone)


def forces(out: str, model: str) -> None:
    """Two force evaluations of one model through the provider (the second balanced by the
    first's cost), with the counters of the second."""
    comm = MPI.COMM_WORLD
    p = MODELS[model]()
    src = gp.parallel.DomainTreeGravity(comm, eps=1 / 64, G=1.0, threads=1)
    n = p.n
    results = {}
    for k in range(2):
        acc, pot = np.empty((n, 3)), np.empty(n)
        src.provider.set_j(p.pos, p.mass, None)
        src.provider.forces(p.pos, None, np.arange(n, dtype=np.int64), acc, pot, None)
        results[f"acc{k}"], results[f"pot{k}"] = acc, pot
    assert same_on_every_rank(comm, results["acc1"], results["pot1"], src.cost), "ranks disagree"
    b = src.balance
    if comm.rank == 0:
        np.savez(out, **results, cost=src.cost, imbalance_interactions=b.last_imbalance_interactions,
                 bytes_essential=b.bytes_essential, bytes_migration=b.bytes_migration,
                 seconds_comm=src.stats.seconds_comm, interactions=src.stats.interactions)


def gathered_by_id(comm, p: gp.Particles) -> tuple[np.ndarray, ...] | None:
    """(ids, pos, vel) of every rank's particles in id order on rank 0 (None elsewhere): for
    the comparison only; the run itself never gathers them."""
    parts = comm.gather((p.id, p.pos, p.vel))
    if comm.rank != 0:
        return None
    ids, pos, vel = (np.concatenate([q[k] for q in parts]) for k in range(3))
    order = np.argsort(ids, kind="stable")
    return ids[order], pos[order], vel[order]


def leapfrog(out: str, run_dir: str, t_end: float) -> None:
    """A leapfrog tree run (resumed from run_dir when it holds a checkpoint) with distributed
    state: each rank holds its domain's particles, fewer than N."""
    comm = MPI.COMM_WORLD
    if Path(run_dir).is_dir() and any(Path(run_dir).glob("checkpoint_*")):  # multi-file sets
        sim = gp.Simulation.resume(run_dir)
    else:
        sim = gp.Simulation(small_plummer(), gravity="tree", eps=1 / 64, dt=1 / 64, threads=1, precise_energy=True)
    assert sim.comm is not None and sim.comm.Get_size() == comm.Get_size()
    assert sim.residence == "domains"
    sim.evolve(t_end, checkpoint_every=0.125, out=run_dir, progress=False)
    p = sim.particles
    local = comm.allgather(p.n)
    assert sum(local) == sim.n and max(local) < sim.n, f"shares {local} of {sim.n}"
    energy_error = sim.energy_error()
    assert len(set(comm.allgather(energy_error))) == 1, "ranks disagree on the energy"
    whole = gathered_by_id(comm, p)
    if comm.rank == 0:
        ids, pos, vel = whole
        assert np.array_equal(ids, np.arange(sim.n)), "particles lost or duplicated"
        np.savez(out, pos=pos, vel=vel, energy_error=energy_error, comm=sim.timings.comm,
                 detail=sim.backend_detail, shares=np.array(local))


if __name__ == "__main__":
    case, out = sys.argv[1], sys.argv[2]
    if case == "forces":
        forces(out, sys.argv[3])
    elif case == "leapfrog":
        leapfrog(out, sys.argv[3], float(sys.argv[4]))
    else:
        raise SystemExit(f"unknown case {case}")
