"""Run under ``mpiexec -n P python -m mpi4py direct_share_case.py CASE OUT [ARGS]``: one case
of direct summation on distributed shares (gravpipe.parallel.direct_share); rank 0 saves
the gathered results to OUT (.npz) for tests/test_direct_share_mpi.py. Only this script
gathers all particles on one rank, to compare them with a serial run.

Cases:
  run INTEGRATOR PRECISION SHARES [MAX_BLOCK]
                                   evolve a Plummer sphere (N = 1024) to T_END, then to
                                   T_OFF, off the grid (a synchronization); SHARES:
                                   "even", or "uneven" (rank 0 holds none; P = 3: rank 1
                                   holds 100); MAX_BLOCK: the exchange's round size
  restart INTEGRATOR               run to T_END, checkpoint, on to 2 T_END; again from the
                                   checkpoint in new objects
  fail                             coincident particles with eps = 0 on the last rank
  refuse                           a NaN position on the last rank
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import gravpipe as gp
from gravpipe.errors import IntegrationError
from gravpipe.parallel import domain_diagnostics
from gravpipe.parallel.direct_share import ShareDirect

N, SEED, EPS, T_END, T_OFF = 1024, 11, 1 / 64, 0.125, 0.15
PARAMS = {"hermite": {"dt_max": 1 / 16}, "leapfrog": {"dt": 1 / 128}}
comm = MPI.COMM_WORLD


def share_bounds(n: int, shares: str) -> tuple[int, int]:
    """This rank's range [lo, hi) of the n particles."""
    p, r = comm.Get_size(), comm.Get_rank()
    if shares == "even":
        return n * r // p, n * (r + 1) // p
    cuts = [0, 0] + ([100] if p == 3 else []) + [n]  # rank 0 empty; P = 3: rank 1 holds 100
    return cuts[r], cuts[r + 1]


def start(integrator: str, precision: str, shares: str = "even", **kw) -> tuple[ShareDirect, slice]:
    p = gp.ic.plummer(N, seed=SEED)
    lo, hi = share_bounds(N, shares)
    mine = slice(lo, hi)
    run = ShareDirect(comm, p.pos[mine], p.vel[mine], p.mass[mine], integrator=integrator, eps=EPS,
                      backend="cpu", precision=precision, threads=1, params=PARAMS[integrator], **kw)
    return run, mine


def gathered(run: ShareDirect) -> dict[str, np.ndarray]:
    """Every rank's particles in rank order (only on rank 0), and every rank's sizes."""
    parts = comm.gather((run.positions(), run.velocities(), run.local_sizes(), run.stats.seconds_comm,
                         run.bytes_per_step), root=0)
    if comm.Get_rank() != 0:
        return {}
    sizes = np.array([[s["n"], s["pipeline_j"], s["largest_block"], s["largest_receive"], s["max_block"]]
                      for _, _, s, _, _ in parts])
    return {"pos": np.concatenate([x for x, *_ in parts]), "vel": np.concatenate([v for _, v, *_ in parts]),
            "sizes": sizes, "comm": np.array([c for *_, c, _ in parts]),
            "bytes_per_step": np.array([b for *_, b in parts])}


def energy(run: ShareDirect) -> tuple[float, float]:
    """(kinetic, potential) of all ranks' particles from the run's own potentials."""
    e = domain_diagnostics.energy(comm, run.velocities(), run.mass, run.potentials())
    return e.kinetic, e.potential


def case_run(out: str, integrator: str, precision: str, shares: str, max_block: str | None = None) -> None:
    run, _ = start(integrator, precision, shares, max_block=None if max_block is None else int(max_block))
    e0 = energy(run)
    run.evolve_to(T_END)
    e1 = energy(run)
    result = gathered(run)
    run.evolve_to(T_OFF)
    off = gathered(run)
    if comm.Get_rank() == 0:
        result["pos_off"] = off["pos"]
        stats = run.stats
        np.savez(out, **result, energy_error=(sum(e1) - sum(e0)) / abs(sum(e0)), time=run.time,
                 interactions=stats.interactions, steps=run.counters()["steps"], rounds=run.traffic()["rounds"],
                 requests=run.traffic()["requests"])


def case_restart(out: str, integrator: str) -> None:
    run, mine = start(integrator, "mixed")
    run.evolve_to(T_END)
    saved = (run.positions(), run.velocities(), run.checkpoint())
    run.evolve_to(2 * T_END)
    whole = gathered(run)
    p = gp.ic.plummer(N, seed=SEED)
    again = ShareDirect(comm, saved[0], saved[1], p.mass[mine], integrator=integrator, eps=EPS, backend="cpu",
                        precision="mixed", threads=1, params=PARAMS[integrator], restart=saved[2])
    assert again.time == T_END
    again.evolve_to(2 * T_END)
    resumed = gathered(again)
    if comm.Get_rank() == 0:
        np.savez(out, pos=whole["pos"], vel=whole["vel"], pos_resumed=resumed["pos"], vel_resumed=resumed["vel"])


def case_fail(out: str) -> None:
    p = gp.ic.plummer(64, seed=SEED)
    lo, hi = share_bounds(p.n, "even")
    pos = p.pos[lo:hi].copy()
    if comm.Get_rank() == comm.Get_size() - 1:
        pos[1] = pos[0]  # a pair at zero separation, eps = 0: a force that is not finite
    try:
        ShareDirect(comm, pos, p.vel[lo:hi], p.mass[lo:hi], eps=0.0, backend="cpu", precision="double", threads=1)
        caught = (-2, "no error")
    except IntegrationError as e:
        caught = (e.particle, str(e))
    everyone = comm.gather(caught, root=0)
    if comm.Get_rank() == 0:
        np.savez(out, particle=np.array([c[0] for c in everyone]), message=np.array([c[1] for c in everyone]))


def case_refuse(out: str) -> None:
    p = gp.ic.plummer(64, seed=SEED)
    lo, hi = share_bounds(p.n, "even")
    pos = p.pos[lo:hi].copy()
    if comm.Get_rank() == comm.Get_size() - 1:
        pos[2, 1] = np.nan
    try:
        ShareDirect(comm, pos, p.vel[lo:hi], p.mass[lo:hi], backend="cpu", threads=1)
        caught = "no error"
    except ValueError as e:
        caught = str(e)
    everyone = comm.gather(caught, root=0)
    if comm.Get_rank() == 0:
        np.savez(out, message=np.array(everyone))


if __name__ == "__main__":
    case, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    {"run": case_run, "restart": case_restart, "fail": case_fail, "refuse": case_refuse}[case](out, *args)
