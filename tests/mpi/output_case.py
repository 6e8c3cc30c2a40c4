"""Run under ``mpiexec -n P python -m mpi4py output_case.py CASE OUT [ARGS]``: one case of
tests/test_mpi_output.py (multi-file sets, rank mismatch); rank 0 saves results to OUT."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import gravpipe as gp

COMM = MPI.COMM_WORLD


def run(out: str, run_dir: str) -> None:
    """Leapfrog with a snapshot and a checkpoint at t = 0.25: the files are sets of P files."""
    sim = gp.Simulation(gp.ic.plummer(600, seed=3), integrator="leapfrog", dt=1 / 64, eps=1 / 32, threads=1,
                        backend="cpu")
    sim.evolve(0.25, snapshot_every=0.25, checkpoint_every=0.25, out=run_dir, progress=False)
    p = sim.particles  # this rank's share, which it writes as its member
    shares = COMM.gather(p, root=0)
    if COMM.rank == 0:
        np.savez(out, **{a: np.concatenate([getattr(q, a) for q in shares]) for a in ("pos", "vel", "mass", "id")},
                 time=sim.time)


def mismatch(out: str, what: str) -> None:
    """Rank 1 differs from the others in ``what``; every rank must raise the same error."""
    p = gp.ic.plummer(200, seed=4)
    if COMM.rank == 1:
        if what == "ic":
            p = gp.Particles(p.pos + 1e-12, p.vel, p.mass)
        elif what == "version":
            gp.__version__ = "0.0.0-stale"
    eps = 1 / 64 if (what == "eps" and COMM.rank == 1) else 1 / 32
    try:
        gp.Simulation(p, eps=eps, threads=1, backend="cpu")
    except ValueError as exc:
        messages = COMM.gather(str(exc), root=0)
    else:
        messages = COMM.gather("", root=0)
    if COMM.rank == 0:
        np.savez(out, messages=np.array(messages))


def write_fails(out: str, run_dir: str) -> None:
    """Rank 1 cannot write its member: no set appears, every rank gets the error, no
    temporary folder stays behind."""
    from gravpipe.io import sets

    p = gp.ic.plummer(300, seed=5)
    Path(run_dir).mkdir(exist_ok=True)
    if COMM.rank == 1:
        def broken(*args, **kwargs):
            raise OSError(28, "No space left on device (injected)")
        sets._write_member = broken
    try:
        gp.io.write_set(COMM, Path(run_dir) / "snapshot_0001", p, 0.0)
        message = ""
    except OSError as exc:
        message = str(exc)
    messages = COMM.gather(message, root=0)
    if COMM.rank == 0:
        np.savez(out, messages=np.array(messages), left=np.array(sorted(f.name for f in Path(run_dir).iterdir())))


if __name__ == "__main__":
    case, out = sys.argv[1], sys.argv[2]
    {"run": lambda: run(out, sys.argv[3]), "mismatch": lambda: mismatch(out, sys.argv[3]),
     "write_fails": lambda: write_fails(out, sys.argv[3])}[case]()
