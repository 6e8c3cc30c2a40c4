"""The Barnes-Hut treecode over MPI ranks with locally essential trees (Salmon & Warren,
seed 004): what ``gravity="tree"`` builds when a run has several ranks.

A Simulation's state is replicated (every rank runs the same integrator on all N), so each
force evaluation starts from the full arrays and ends with them; in between it works as a
distributed treecode would:

1. every rank takes the particles it owned in the previous evaluation (the first time:
   equal slices of the caller's order) and the domains are cut again along the Hilbert
   curve of the global box, balanced by each particle's interactions in the previous
   evaluation (:mod:`gravpipe.parallel.domain`); particles migrate to their new owners
   (Alltoallv) and are kept in index order, so a rank's set depends only on positions and
   costs, never on the history;
2. each rank builds its tree (``_core.DomainTree``), the domain boxes go round
   (Allgather), each rank exports for every other one the cells and particles that
   rank's walks need under the MAC (pruned where the domain box accepts a cell) and the
   pieces are exchanged (Alltoallv);
3. each rank grafts the pieces onto its tree, computes self-gravity of its own particles
   with the serial walk and kernels, and the results are gathered on every rank in the
   caller's order (Allgatherv): every rank holds the same bits.

Results are deterministic for a given number of ranks and meet the serial tree's error
bounds (the pieces carry exactly the cells the serial walk would accept or open); they
differ across rank counts within those bounds. Counters per evaluation: load imbalance
(max/mean over ranks of walk + evaluate seconds and of interactions), bytes sent in
pieces and in migration, seconds in MPI calls.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from gravpipe import _core
from gravpipe.backends import resolve_isa
from gravpipe.parallel.domain import alltoallv, balanced_splitters, curve_keys, global_frame, migrate, owners
from gravpipe.pipeline import PipelineStats
from gravpipe.tree import DEFAULT_N_CRIT, DEFAULT_N_LEAF, DEFAULT_QUAD_TOL, DEFAULT_THETA, TreeStats

#: the checkpoint array (int64 (N,)) holding each particle's cost, which decides the domains
COST_KEY = "domain_cost"

_N_CELL = 19      # float64 per exported cell (kPieceCellDoubles)
_N_LINK = 4       # int64 per exported cell (kPieceCellInts)
_N_PARTICLE = 4   # float64 per exported particle: x, y, z, m


@dataclass
class BalanceCounters:
    """Counters of the evaluations so far (sums) and of the last one.

    imbalance_*: max / mean over ranks (1 is perfect) of the local walk + evaluate seconds
    and of the interactions, averaged over evaluations (``last_*``: the last one).
    bytes_essential / bytes_migration: sent by all ranks together. seconds_comm: this rank's
    wall time in MPI calls.
    """

    evaluations: int = 0
    interactions: int = 0
    bytes_essential: int = 0
    bytes_migration: int = 0
    seconds_comm: float = 0.0
    imbalance_seconds_sum: float = 0.0
    imbalance_interactions_sum: float = 0.0
    last_imbalance_seconds: float = 1.0
    last_imbalance_interactions: float = 1.0

    @property
    def imbalance_seconds(self) -> float:
        return self.imbalance_seconds_sum / self.evaluations if self.evaluations else 1.0

    @property
    def imbalance_interactions(self) -> float:
        return self.imbalance_interactions_sum / self.evaluations if self.evaluations else 1.0

    def __str__(self) -> str:
        per = max(self.evaluations, 1)
        return (f"load imbalance (max/mean over ranks) {self.imbalance_seconds:.3f} in walk+evaluate seconds, "
                f"{self.imbalance_interactions:.3f} in interactions; bytes per evaluation: essential trees "
                f"{self.bytes_essential / per:.3e}, migration {self.bytes_migration / per:.3e}")


class _Clock:
    """Adds the wall time of its ``with`` blocks to ``seconds``."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> _Clock:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self._t0


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
        from gravpipe.tree import TreeGravity

        # one validation of the parameters, as for the serial provider
        TreeGravity(eps, G, theta=theta, quad_tol=quad_tol, n_leaf=n_leaf, n_crit=n_crit, threads=threads,
                    precision=precision, isa=isa)
        self.comm = comm
        self.eps, self.G, self.theta, self.precision = float(eps), float(G), float(theta), precision
        self.threads: int = int(threads or _core.max_threads())
        self.isa: str = resolve_isa(isa)
        self._tree_args = dict(eps=self.eps, G=self.G, theta=self.theta, quadrupole=True, quad_tol=float(quad_tol),
                               n_leaf=int(n_leaf), n_crit=int(n_crit), alpha=0.0, threads=self.threads,
                               precision=precision, isa=self.isa)
        self.cost: np.ndarray | None = None   # int64 (N,): interactions per particle, last evaluation
        self._owned: np.ndarray | None = None  # int64: the particles this rank computed last time
        self.balance = BalanceCounters()
        self._tree_stats = TreeStats()
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
        return self._tree_stats

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
        comm_clock, build_clock = _Clock(), _Clock()
        cost = self.cost if self.cost is not None and len(self.cost) == n else np.ones(n, np.int64)
        owned = self._owned if self._owned is not None and (len(self._owned) == 0 or self._owned.max() < n) \
            else np.arange(n * me // ranks, n * (me + 1) // ranks, dtype=np.int64)

        # 1. domains by cost along the curve, and migration
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
        mine, my_pos, my_mass = got_i[order, 0], np.ascontiguousarray(got_f[order, :3]), \
            np.ascontiguousarray(got_f[order, 3])
        self._owned = mine

        # 2. own tree, domain boxes, essential pieces
        with build_clock:
            # the global frame: the local trees' cells are cells of one global octree
            tree = _core.DomainTree(my_pos, my_mass, **self._tree_args, frame_lo=lo, frame_hi=hi) \
                if len(mine) else None
        box = tree.domain() if tree is not None else np.array([np.inf] * 3 + [-np.inf] * 3 + [0.0])
        boxes = np.empty((ranks, 7))
        with comm_clock:
            comm.Allgather(box, boxes)
        with build_clock:
            pieces = [tree.export_for(boxes[r]) if tree is not None and r != me else None for r in range(ranks)]
        recv, essential = self._exchange(pieces, comm_clock)

        # 3. graft, forces on the own particles, results on every rank
        m = len(mine)
        my_acc, my_pot, my_cost = np.empty((m, 3)), np.empty(m), np.empty(m, np.int64)
        if tree is not None:
            with build_clock:
                tree.graft(*recv)
            tree.forces(my_acc, my_pot, my_cost)
            self._tree_stats = TreeStats(**tree.stats())
        local = self._tree_stats if tree is not None else TreeStats()
        work = np.array([local.seconds_walk + local.seconds_evaluate,
                         local.pp_interactions + local.pc_interactions, essential, migrated], np.float64)
        with comm_clock:
            everyone = np.empty((ranks, work.size))
            comm.Allgather(work, everyone)
            all_f, all_i = self._gather(np.column_stack((my_acc, my_pot)), np.column_stack((mine, my_cost)))
        acc = acc_flat.reshape(-1, 3)
        acc[all_i[:, 0]] = all_f[:, :3]
        pot[all_i[:, 0]] = all_f[:, 3]
        self.cost = np.empty(n, np.int64)
        self.cost[all_i[:, 0]] = all_i[:, 1]
        self._count(everyone, comm_clock.seconds)
        return int(everyone[:, 1].sum()), build_clock.seconds, comm_clock.seconds

    def _exchange(self, pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None], clock: _Clock
                  ) -> tuple[tuple[np.ndarray, ...], int]:
        """Alltoallv of the essential pieces (one per destination rank, None: nothing).
        Returns the graft arguments (cells, links, particles, cells per sender, particles per
        sender) and the bytes this rank sent."""
        ranks = self.comm.Get_size()
        sizes = np.zeros((ranks, 2), np.int64)  # cells, particles per destination
        for r, p in enumerate(pieces):
            if p is not None:
                sizes[r] = len(p[0]), len(p[2])
        f_parts = [np.concatenate((p[0].ravel(), p[2].ravel())) for p in pieces if p is not None]
        i_parts = [p[1].ravel() for p in pieces if p is not None]
        send_f = np.concatenate(f_parts) if f_parts else np.empty(0)
        send_i = np.concatenate(i_parts) if i_parts else np.empty(0, np.int64)
        got = np.empty((ranks, 2), np.int64)
        with clock:
            self.comm.Alltoall(sizes, got)
            recv_f = alltoallv(self.comm, send_f.reshape(-1, 1), sizes[:, 0] * _N_CELL + sizes[:, 1] * _N_PARTICLE,
                                      got[:, 0] * _N_CELL + got[:, 1] * _N_PARTICLE).ravel()
            recv_i = alltoallv(self.comm, send_i.reshape(-1, 1), sizes[:, 0] * _N_LINK,
                                      got[:, 0] * _N_LINK).ravel()
        cells, links, particles = [], [], []
        at_f = at_i = 0
        for nc, npart in got:
            cells.append(recv_f[at_f:at_f + nc * _N_CELL].reshape(-1, _N_CELL))
            at_f += nc * _N_CELL
            particles.append(recv_f[at_f:at_f + npart * _N_PARTICLE].reshape(-1, _N_PARTICLE))
            at_f += npart * _N_PARTICLE
            links.append(recv_i[at_i:at_i + nc * _N_LINK].reshape(-1, _N_LINK))
            at_i += nc * _N_LINK
        sent = int(send_f.nbytes + send_i.nbytes)
        return (np.ascontiguousarray(np.concatenate(cells)), np.ascontiguousarray(np.concatenate(links)),
                np.ascontiguousarray(np.concatenate(particles)), np.ascontiguousarray(got[:, 0]),
                np.ascontiguousarray(got[:, 1])), sent

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

    def _count(self, everyone: np.ndarray, seconds_comm: float) -> None:
        """everyone: per rank (walk+evaluate seconds, interactions, essential bytes, migration bytes)."""
        b = self.balance

        def ratio(col: np.ndarray) -> float:
            mean = col.mean()
            return float(col.max() / mean) if mean > 0 else 1.0

        b.evaluations += 1
        b.interactions += int(everyone[:, 1].sum())
        b.bytes_essential += int(everyone[:, 2].sum())
        b.bytes_migration += int(everyone[:, 3].sum())
        b.seconds_comm += seconds_comm
        b.last_imbalance_seconds, b.last_imbalance_interactions = ratio(everyone[:, 0]), ratio(everyone[:, 1])
        b.imbalance_seconds_sum += b.last_imbalance_seconds
        b.imbalance_interactions_sum += b.last_imbalance_interactions
