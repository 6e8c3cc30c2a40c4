"""One direct-summation force evaluation over the ranks of a communicator, j-parallel
(PARNASS, seed 001): every rank is handed the same particles, its pipeline holds one
contiguous slice of the j-particles (N/P each), and the partial forces of the slices are
summed in rank order on every rank, so every rank gets the same bits. For measurements (the
performance model's two-rank probe, benchmarks/mpi_scaling.py) and callers that hold all
particles on every rank; runs over ranks keep N/P particles a rank instead
(:mod:`gravpipe.parallel.direct_share`).
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
    """Direct summation split over several ranks, each handed all particles: a local
    :class:`Pipeline` for this rank's j-slice behind ``_core.JParallelForces`` (backend,
    isa, threads, stats, provider, as a Pipeline offers); ``stats.seconds_comm`` is the
    reduction's wall time."""

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
