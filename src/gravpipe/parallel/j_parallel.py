"""Direct summation over the ranks of a communicator, j-parallel (PARNASS, seed 001;
phiGRAPE): every rank holds all particles and runs the same integrator, its pipeline holds
one contiguous slice of the j-particles (N/P each), and the partial forces of the slices
are summed in rank order on every rank. Host work (predict, correct, schedule) is
replicated; forces, the O(N^2) part, are split. A run is deterministic for a given number
of ranks; different rank counts differ within the pipeline's precision bound.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gravpipe import _core
from gravpipe.pipeline import Pipeline, PipelineStats


def ordered_sum(comm: Any) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """A reduction for ``_core.JParallelForces``: gathers every rank's partial acc, pot and
    jerk (flat float64 views, changed in place) and adds them in rank order, so every rank
    gets the same bits (MPI_Allreduce does not promise an order)."""

    def reduce(acc: np.ndarray, pot: np.ndarray, jerk: np.ndarray) -> None:
        parts = np.concatenate((acc, pot, jerk))
        gathered = np.empty((comm.Get_size(), parts.size))
        comm.Allgather(parts, gathered)
        total = gathered[0].copy()
        for row in gathered[1:]:
            total += row
        a, p = len(acc), len(pot)
        acc[:], pot[:], jerk[:] = total[:a], total[a:a + p], total[a + p:]

    return reduce


class JParallelGravity:
    """The force source of gravity="direct" on several ranks (what the gravity table builds
    when a run has a communicator): a local :class:`Pipeline` for this rank's j-slice behind
    ``_core.JParallelForces``. Offers what a Simulation reads of a Pipeline (backend, isa,
    threads, stats, provider); ``stats.seconds_comm`` is the reduction's wall time."""

    def __init__(self, comm: Any, eps: float, G: float, backend: str, precision: str, threads: int | None):
        self.comm = comm
        self.local = Pipeline(backend=backend, precision=precision, eps=eps, G=G, threads=threads)
        self.backend = self.local.backend
        self.precision = precision
        self._reduce = ordered_sum(comm)
        self._impl = _core.JParallelForces(self.local.provider, comm.Get_rank(), comm.Get_size(), self._reduce)
        self.backend_detail = f"{self.local.backend_detail}; j-parallel over {comm.Get_size()} MPI ranks"

    @property
    def provider(self) -> Any:
        return self._impl

    @property
    def stats(self) -> PipelineStats:
        return PipelineStats(**self._impl.stats())

    @property
    def isa(self) -> str | None:
        return self.local.isa

    @property
    def threads(self) -> int | None:
        return self.local.threads

    def potential(self, pos: np.ndarray, mass: np.ndarray, eps: float, G: float) -> np.ndarray:
        """float64 potentials (N,) of all particles, self excluded, split over the ranks like
        the forces (each rank sums its j-slice in double precision)."""
        exact = Pipeline(backend=self.backend, precision="double", eps=eps, G=G,
                         **({"threads": self.threads} if self.backend == "cpu" else {}))
        split = _core.JParallelForces(exact.provider, self.comm.Get_rank(), self.comm.Get_size(), self._reduce)
        n = len(mass)
        pos, mass = np.ascontiguousarray(pos, np.float64), np.ascontiguousarray(mass, np.float64)
        acc, pot = np.empty((n, 3)), np.empty(n)
        split.set_j(pos, mass, None)
        split.forces(pos, None, np.arange(n, dtype=np.int64), acc, pot, None)
        return pot
