"""The treecode over MPI ranks on a particle set every rank holds whole: the force
evaluation alone, for measurements (the performance model's MPI probe, benchmarks) and
for callers that hold all N on every rank. Runs keep their state distributed instead
(:class:`gravpipe.parallel.domain_leapfrog.DomainLeapfrog`: each rank holds its domain).

Each evaluation starts from the full arrays and ends with them:

1. every rank takes the particles it owned in the previous evaluation (the first time:
   equal slices of the caller's order) and the domains are cut again along the Hilbert
   curve of the global box, balanced by each particle's interactions in the previous
   evaluation (:mod:`gravpipe.parallel.domain`); particles migrate to their new owners
   (Alltoallv) and are kept in index order, so a rank's set depends only on positions and
   costs, never on the history;
2. the ranks evaluate their own particles' forces with locally essential trees
   (:class:`gravpipe.parallel.essential_forces.EssentialTreeForces`);
3. the results are gathered on every rank in the caller's order (Allgatherv): every rank
   holds the same bits.

Results are deterministic for a given number of ranks and meet the serial tree's error
bounds; they differ across rank counts within those bounds.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from gravpipe import _core
from gravpipe.parallel.domain import balanced_splitters, curve_keys, global_frame, migrate, owners
from gravpipe.parallel.essential_forces import BalanceCounters, Clock, EssentialTreeForces
from gravpipe.pipeline import PipelineStats
from gravpipe.tree import DEFAULT_N_CRIT, DEFAULT_N_LEAF, DEFAULT_QUAD_TOL, DEFAULT_THETA, TreeStats

#: the checkpoint array (int64 (N,)) holding each particle's cost, which decides the domains
COST_KEY = "domain_cost"


class DomainTreeGravity:
    """The force source of gravity="tree" on several ranks (see the module docstring).

    Offers what a Simulation reads of a force source (backend, backend_detail, isa,
    threads, stats, provider) plus ``balance`` (:class:`BalanceCounters`),
    ``tree_stats`` (this rank's last evaluation) and the checkpoint hooks that carry the
    per-particle cost, so that a run resumed on the same number of ranks cuts the same
    domains and continues bit for bit. ``stats.interactions`` counts all ranks'
    interactions; ``stats.seconds_comm`` is this rank's time in MPI calls.
    """

    backend = "cpu"
    parallel_kind = "domain-decomposed treecode"

    def __init__(self, comm: Any, eps: float, G: float, *, theta: float = DEFAULT_THETA, threads: int | None = None,
                 precision: str = "mixed", quad_tol: float = DEFAULT_QUAD_TOL, n_leaf: int = DEFAULT_N_LEAF,
                 n_crit: int = DEFAULT_N_CRIT, isa: str = "auto"):
        self.comm = comm
        self._forces = EssentialTreeForces(comm, eps, G, theta=theta, threads=threads, precision=precision,
                                           quad_tol=quad_tol, n_leaf=n_leaf, n_crit=n_crit, isa=isa)
        self.eps, self.G, self.theta, self.precision = float(eps), float(G), float(theta), precision
        self.threads, self.isa = self._forces.threads, self._forces.isa
        self.cost: np.ndarray | None = None   # int64 (N,): interactions per particle, last evaluation
        self._owned: np.ndarray | None = None  # int64: the particles this rank computed last time
        # the core provider calls back through a weak reference: a bound method would make a
        # cycle through the C++ object that Python's collector cannot see
        this = weakref.ref(self)
        self._impl = _core.CallbackForces(lambda *views: this()._compute(*views))
        self.backend_detail = (f"treecode theta={theta}, precision={precision}, isa={self.isa}, "
                               f"threads={self.threads}; domain-decomposed over {comm.Get_size()} MPI ranks")

    # ---- what a Simulation reads ----------------------------------------------------
    @property
    def provider(self) -> Any:
        return self._impl

    @property
    def stats(self) -> PipelineStats:
        return PipelineStats(**self._impl.stats())

    @property
    def tree_stats(self) -> TreeStats:
        """This rank's tree in the last evaluation (its own particles' walks)."""
        return self._forces.tree_stats

    @property
    def balance(self) -> BalanceCounters:
        """Counters of the evaluations so far (:class:`BalanceCounters`)."""
        return self._forces.balance

    def balance_summary(self) -> str:
        return str(self.balance)

    def checkpoint_state(self) -> dict[str, np.ndarray]:
        """Arrays for the checkpoint: the per-particle cost that decides the next domains."""
        return {} if self.cost is None else {COST_KEY: self.cost.copy()}

    def restore_checkpoint_state(self, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Take this source's arrays out of a checkpoint's state; returns the rest."""
        rest = dict(state)
        cost = rest.pop(COST_KEY, None)
        self.cost = None if cost is None else np.ascontiguousarray(cost, np.int64)
        return rest

    # ---- one evaluation --------------------------------------------------------------
    def _compute(self, pos_flat: np.ndarray, mass: np.ndarray, acc_flat: np.ndarray, pot: np.ndarray
                 ) -> tuple[int, float, float]:
        """Self-gravity of all particles (pos (3N,), mass (N,)) into acc (3N,), pot (N,),
        collectively. Returns (interactions of all ranks, seconds building trees, seconds in MPI)."""
        comm, ranks, me = self.comm, self.comm.Get_size(), self.comm.Get_rank()
        pos = pos_flat.reshape(-1, 3)
        n = len(mass)
        if n < ranks:
            raise ValueError(f"gravity='tree' over {ranks} MPI ranks needs at least {ranks} particles, got {n}")
        comm_clock = Clock()
        cost = self.cost if self.cost is not None and len(self.cost) == n else np.ones(n, np.int64)
        owned = self._owned if self._owned is not None and (len(self._owned) == 0 or self._owned.max() < n) \
            else np.arange(n * me // ranks, n * (me + 1) // ranks, dtype=np.int64)

        # domains by cost along the curve, and migration
        with comm_clock:
            lo, hi = global_frame(comm, pos[owned])
        keys = curve_keys(pos[owned], lo, hi, self.threads)
        with comm_clock:
            splitters = balanced_splitters(comm, keys, np.maximum(cost[owned], 1))
        send_f = np.column_stack((pos[owned], mass[owned]))
        send_i = np.column_stack((owned, cost[owned]))
        with comm_clock:
            got_f, got_i, migrated = migrate(comm, owners(keys, splitters), send_f, send_i)
        order = np.argsort(got_i[:, 0], kind="stable")  # index order: independent of who sent what
        mine = got_i[order, 0]
        self._owned = mine
        ev = self._forces.evaluate(got_f[order, :3], got_f[order, 3], (lo, hi), migrated)

        # results on every rank
        with comm_clock:
            all_f, all_i = self._gather(np.column_stack((ev.acc, ev.pot)), np.column_stack((mine, ev.cost)))
        acc = acc_flat.reshape(-1, 3)
        acc[all_i[:, 0]] = all_f[:, :3]
        pot[all_i[:, 0]] = all_f[:, 3]
        self.cost = np.empty(n, np.int64)
        self.cost[all_i[:, 0]] = all_i[:, 1]
        self.balance.seconds_comm += comm_clock.seconds
        return ev.interactions, ev.seconds_build, ev.seconds_comm + comm_clock.seconds

    def _gather(self, f64: np.ndarray, i64: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Allgatherv of every rank's result rows (float64 (m, a), int64 (m, b))."""
        from mpi4py import MPI

        counts = np.empty(self.comm.Get_size(), np.int64)
        self.comm.Allgather(np.array([len(f64)], np.int64), counts)
        out = []
        for block, mpi_type in ((f64, MPI.DOUBLE), (i64, MPI.INT64_T)):
            width = block.shape[1]
            recv = np.empty((int(counts.sum()), width), block.dtype)
            c = counts * width
            d = np.concatenate(([0], np.cumsum(c)[:-1])).astype(np.int64)
            self.comm.Allgatherv([np.ascontiguousarray(block), mpi_type], [recv, (c, d), mpi_type])
            out.append(recv)
        return out[0], out[1]
