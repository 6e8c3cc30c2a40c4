"""Run under ``mpiexec -n P python -m mpi4py tree_case.py CASE OUT ...``: one case of the
treecode over MPI ranks with distributed state; rank 0 gathers the results (for the
comparison only) and saves them to OUT (.npz) for tests/test_mpi_tree.py to compare with
serial runs and float64 references."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import gravpipe as gp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tree_models import MODELS, small_plummer  # noqa: E402


def forces(out: str, model: str) -> None:
    """Two force evaluations of one model on distributed state (each rank holding a share:
    first equal slices, then the domains balanced by the first's cost), gathered in id
    order on rank 0 for the comparison, with the counters of the second."""
    from gravpipe.parallel.domain_leapfrog import DomainLeapfrog
    from gravpipe.parallel.essential_forces import EssentialTreeForces

    comm = MPI.COMM_WORLD
    p = MODELS[model]()
    b, e = gp.io.file_share(p.n, comm.rank, comm.size)
    src = EssentialTreeForces(comm, eps=1 / 64, G=1.0, threads=1)
    run = DomainLeapfrog(comm, p.pos[b:e], p.vel[b:e], p.mass[b:e], p.id[b:e], forces=src, dt=1 / 64, t0=0.0)
    results = {}
    for k in range(2):
        if k:
            run.forces_now()
        parts = comm.gather((run.ids(), run.accelerations().copy(), run.potentials().copy(),
                             run.checkpoint()["domain_cost"]))
        if comm.rank == 0:
            ids = np.concatenate([q[0] for q in parts])
            order = np.argsort(ids)
            assert np.array_equal(ids[order], np.arange(p.n)), "particles lost or duplicated"
            results[f"acc{k}"], results[f"pot{k}"], results["cost"] = (
                np.concatenate([q[j] for q in parts])[order] for j in (1, 2, 3))
    b = src.balance
    seconds_comm = comm.allreduce(run.stats.seconds_comm, op=MPI.MAX)
    if comm.rank == 0:
        np.savez(out, **results, imbalance_interactions=b.last_imbalance_interactions,
                 bytes_essential=b.bytes_essential, bytes_migration=b.bytes_migration,
                 seconds_comm=seconds_comm, interactions=b.interactions)


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
                 detail=sim.backend_detail, shares=np.array(local), summary="\n".join(sim.summary_lines()))


def bad_particle(out: str) -> None:
    """A particle beyond the arithmetic's range in the last rank's share: every rank raises
    (none waits in a collective), naming the particle by its id."""
    comm = MPI.COMM_WORLD
    p = small_plummer()
    pos = p.pos.copy()
    pos[p.n - 3] = (1e30, 0.0, 0.0)
    try:
        gp.Simulation(gp.Particles(pos, p.vel, p.mass), gravity="tree", threads=1)
        message = ""
    except ValueError as exc:
        message = str(exc)
    messages = comm.gather(message)
    if comm.rank == 0:
        np.savez(out, messages=np.array(messages), bad_id=p.n - 3)


if __name__ == "__main__":
    case, out = sys.argv[1], sys.argv[2]
    if case == "bad_particle":
        bad_particle(out)
        raise SystemExit(0)
    if case == "forces":
        forces(out, sys.argv[3])
    elif case == "leapfrog":
        leapfrog(out, sys.argv[3], float(sys.argv[4]))
    else:
        raise SystemExit(f"unknown case {case}")
