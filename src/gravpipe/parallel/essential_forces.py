"""Self-gravity of the particles the ranks hold, with locally essential trees (Salmon &
Warren, seed 004): the force evaluation of the treecode over MPI ranks.

Each rank passes its own particles (any partition works; contiguous curve domains make the
pieces small) and gets their accelerations, potentials and interaction counts back:

1. each rank builds its tree (``_core.DomainTree``) in one global frame, so that the local
   trees' cells are cells of one global octree;
2. the domain boxes go round (Allgather), each rank exports for every other one the cells
   and particles that rank's walks need under the MAC (pruned where the box accepts a
   cell), and the pieces are exchanged (Alltoallv of flat float64 / int64 buffers);
3. each rank grafts the pieces onto its tree and walks it for its own particles with the
   serial walk and kernels.

The pieces carry exactly the cells the serial walk would accept or open, so the forces meet
the serial tree's error bounds; for a given partition they are deterministic. Nothing of
size N is held on any rank: a rank's memory is its particles plus the pieces it imports.
Counters per evaluation (:class:`BalanceCounters`): load imbalance over the ranks, bytes
of pieces and of migration, seconds in MPI calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gravpipe import _core
from gravpipe.backends import resolve_isa
from gravpipe.tree import DEFAULT_N_CRIT, DEFAULT_N_LEAF, DEFAULT_QUAD_TOL, DEFAULT_THETA, TreeStats

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


class Clock:
    """Adds the wall time of its ``with`` blocks to ``seconds``."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> Clock:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self._t0


@dataclass
class Evaluation:
    """One collective evaluation: this rank's results and everyone's work."""

    acc: np.ndarray    # (n, 3) float64, this rank's particles
    pot: np.ndarray    # (n,) float64
    cost: np.ndarray   # (n,) int64: each particle's interactions (the next domains' weights)
    interactions: int  # of all ranks
    seconds_build: float  # this rank's tree build, export and graft
    seconds_comm: float   # this rank's wall time in MPI calls
    #: this rank's seconds by stage: "build" (sort, cells, moments of its own tree), "export"
    #: (the pieces for the other ranks), "exchange" (boxes and pieces over MPI), "graft",
    #: "walk_forces", "counters" (the work of every rank, gathered)
    stages: dict[str, float]


class EssentialTreeForces:
    """The treecode over the particles the ranks hold (see the module docstring).

    Parameters as for :class:`gravpipe.tree.TreeGravity` (checked the same way); ``comm``
    an mpi4py communicator. :meth:`evaluate` is collective.
    """

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
        self.balance = BalanceCounters()
        self.tree_stats = TreeStats()  # this rank's tree in the last evaluation

    def evaluate(self, pos: np.ndarray, mass: np.ndarray, frame: tuple[np.ndarray, np.ndarray],
                 migrated_bytes: int = 0) -> Evaluation:
        """Self-gravity of every rank's particles; this rank's are pos (n, 3) and mass (n,)
        (n may be 0). ``frame`` (lo (3,), hi (3,)): the bounding box of all ranks' particles
        (``domain.global_frame``), the same on every rank. ``migrated_bytes``: what this
        rank sent in the migration before it, for the counters. Collective."""
        comm, ranks, me = self.comm, self.comm.Get_size(), self.comm.Get_rank()
        clocks = {name: Clock() for name in ("build", "export", "exchange", "graft", "walk_forces", "counters")}
        n = len(mass)
        with clocks["build"]:
            tree = _core.DomainTree(np.ascontiguousarray(pos, np.float64), np.ascontiguousarray(mass, np.float64),
                                    **self._tree_args, frame_lo=frame[0], frame_hi=frame[1]) if n else None
        with clocks["exchange"]:
            boxes = domains(comm, tree)
        with clocks["export"]:
            pieces = [tree.export_for(boxes[r]) if tree is not None and r != me else None for r in range(ranks)]
        recv, essential = exchange_pieces(comm, pieces, clocks["exchange"])
        acc, pot, cost = np.empty((n, 3)), np.empty(n), np.empty(n, np.int64)
        self.tree_stats = TreeStats()
        if tree is not None:
            with clocks["graft"]:
                tree.graft(*recv)
            with clocks["walk_forces"]:
                tree.forces(acc, pot, cost)
            self.tree_stats = TreeStats(**tree.stats())
        s = self.tree_stats
        work = np.array([s.seconds_walk + s.seconds_evaluate, s.pp_interactions + s.pc_interactions,
                         essential, migrated_bytes], np.float64)
        everyone = np.empty((ranks, work.size))
        with clocks["counters"]:
            comm.Allgather(work, everyone)
        stages = {name: c.seconds for name, c in clocks.items()}
        seconds_comm = stages["exchange"] + stages["counters"]
        self._count(everyone, seconds_comm)
        return Evaluation(acc, pot, cost, int(everyone[:, 1].sum()),
                          stages["build"] + stages["export"] + stages["graft"], seconds_comm, stages)

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


def domains(comm: Any, tree: Any) -> list[np.ndarray]:
    """Every rank's domain, a (k_r, 7) float64 array each: the boxes of its groups
    (``tree.domain()``; a rank without a tree: none), views of one array. Collective.

    The boxes (~0.5 B a particle) go round as one buffer (Allgatherv), not pickled: no
    copy of them besides the one every rank keeps."""
    from mpi4py import MPI

    mine = np.ascontiguousarray(tree.domain() if tree is not None else np.empty((0, 7)), np.float64)
    counts = np.array(comm.allgather(mine.size), np.int64)
    at = np.concatenate(([0], np.cumsum(counts)))
    every = np.empty(int(at[-1]), np.float64)
    comm.Allgatherv(mine, [every, counts, at[:-1], MPI.DOUBLE])
    return [every[at[r]:at[r + 1]].reshape(-1, 7) for r in range(len(counts))]


def exchange_pieces(comm: Any, pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None], clock: Clock,
                    before_receive: Callable[[int], None] | None = None) -> tuple[tuple[np.ndarray, ...], int]:
    """The essential pieces (one per destination rank, None: nothing) to their ranks, and
    theirs to this one. Returns the graft arguments (cells, links, particles, cells per
    sender, particles per sender) and the bytes this rank sent; the list is emptied.
    ``before_receive``: called with the bytes about to arrive before their arrays are made
    (an out-of-core rank makes room for them in its budget).

    Each piece goes out from its own arrays and each arrives straight into its place in
    three receive arrays in sender order (the layout graft takes), by nonblocking
    point-to-point messages: no send buffer joins the pieces, no arrival is copied."""
    from mpi4py import MPI

    ranks, me = comm.Get_size(), comm.Get_rank()
    sizes = np.zeros((ranks, 2), np.int64)  # cells, particles per destination
    for r, p in enumerate(pieces):
        if p is not None:
            sizes[r] = len(p[0]), len(p[2])
    got = np.empty((ranks, 2), np.int64)
    with clock:
        comm.Alltoall(sizes, got)
    if before_receive is not None:
        before_receive(int(got[:, 0].sum()) * (_N_CELL + _N_LINK) * 8 + int(got[:, 1].sum()) * _N_PARTICLE * 8)
    cells = np.empty((int(got[:, 0].sum()), _N_CELL))
    links = np.empty((int(got[:, 0].sum()), _N_LINK), np.int64)
    particles = np.empty((int(got[:, 1].sum()), _N_PARTICLE))
    c_at = np.concatenate(([0], np.cumsum(got[:, 0])))
    p_at = np.concatenate(([0], np.cumsum(got[:, 1])))
    requests, sent = [], 0
    with clock:
        for r in range(ranks):
            if r == me:
                continue
            for k, (into, at) in enumerate(((cells, c_at), (links, c_at), (particles, p_at))):
                if at[r + 1] > at[r]:
                    requests.append(comm.Irecv(into[at[r]:at[r + 1]], source=r, tag=k))
        for r, p in enumerate(pieces):
            if p is None:
                continue
            for k, part in enumerate(p):
                if len(part):
                    requests.append(comm.Isend(np.ascontiguousarray(part), dest=r, tag=k))
                    sent += part.nbytes
        MPI.Request.Waitall(requests)
    pieces.clear()
    return (cells, links, particles, np.ascontiguousarray(got[:, 0]), np.ascontiguousarray(got[:, 1])), sent
