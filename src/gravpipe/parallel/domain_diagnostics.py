"""Diagnostics of particles spread over MPI ranks, each rank holding its share: sums and
order statistics by collectives, never by gathering the particles.

Every rank gets the same numbers: sums are taken in rank order (``MPI_Allreduce`` does not
promise an order, and a diagnostics row must not depend on it), the Lagrangian radii come
from ``streamed_diagnostics`` with the ranks' histograms summed and only the particles of
the bins that hold the quantiles exchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gravpipe import diagnostics, streamed_diagnostics


class RankReductions:
    """``streamed_diagnostics.Reductions`` over the ranks of ``comm`` (collective calls)."""

    def __init__(self, comm: Any):
        self.comm = comm

    def sum(self, values: np.ndarray) -> np.ndarray:
        """The elementwise sum of every rank's ``values`` (same shape on all), in rank order."""
        values = np.ascontiguousarray(values, np.float64)
        every = np.empty((self.comm.Get_size(),) + values.shape)
        self.comm.Allgather(values, every)
        total = every[0].copy()
        for part in every[1:]:
            total += part
        return total

    def min(self, value: float) -> float:
        from mpi4py import MPI

        return float(self.comm.allreduce(float(value), op=MPI.MIN))

    def max(self, value: float) -> float:
        from mpi4py import MPI

        return float(self.comm.allreduce(float(value), op=MPI.MAX))

    def concatenate(self, values: np.ndarray) -> np.ndarray:
        """Every rank's ``values`` (1-D float64) end to end, in rank order."""
        values = np.ascontiguousarray(values, np.float64)
        counts = np.array(self.comm.allgather(len(values)), np.int64)
        out = np.empty(int(counts.sum()))
        self.comm.Allgatherv(values, [out, counts, np.concatenate(([0], np.cumsum(counts)[:-1])), _double()])
        return out


def _double() -> Any:
    from mpi4py import MPI

    return MPI.DOUBLE


def energy(comm: Any, vel: np.ndarray, mass: np.ndarray, pot: np.ndarray) -> diagnostics.Energy:
    """K = 1/2 sum m |v|^2 and W = 1/2 sum m phi over every rank's particles (this rank's:
    vel (n, 3), mass (n,), pot (n,) potential per unit mass), the same on every rank."""
    k = 0.5 * float(np.dot(mass, np.einsum("ij,ij->i", vel, vel))) if len(mass) else 0.0
    w = 0.5 * float(np.dot(mass, pot)) if len(mass) else 0.0
    k, w = RankReductions(comm).sum(np.array([k, w]))
    return diagnostics.Energy(kinetic=float(k), potential=float(w), total=float(k + w))


def lagrangian_radii(comm: Any, pos: np.ndarray, mass: np.ndarray, fractions: Any) -> np.ndarray:
    """``diagnostics.lagrangian_radii`` about the centre of mass of every rank's particles
    (this rank's: pos (n, 3), mass (n,); n may be 0), shape (k,), the same on every rank."""
    blocks = [{"pos": pos, "mass": mass}] if len(mass) else []
    return streamed_diagnostics.lagrangian_radii(lambda: blocks, fractions, RankReductions(comm))
