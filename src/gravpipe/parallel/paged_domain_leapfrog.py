"""The treecode's leapfrog over MPI ranks with each rank out of core (Salmon & Warren, seed
004: every processor pages its own share of the bodies and of the tree).

The step of :class:`~gravpipe.parallel.domain_leapfrog.DomainLeapfrog`, with each rank's
particles in a paged store (:class:`gravpipe.store.ParticleStore`) under its memory budget
instead of in arrays:

1. **decompose**: one pass over the store's blocks gives the box of the positions the step
   will drift to (the frame, kept while it holds them) and, in the kept frame and cuts, each
   particle's owner (to a scratch file) and the summed cost each rank would own; the cuts
   are kept while balanced, else cut again by a streamed bisection
   (:func:`~gravpipe.parallel.streamed_cut.streamed_splitters`). Then, block by block in
   rounds every rank takes together, the particles that leave go to their owners while
   those that stay go to a scratch file, the arrivals to one file per sender; the store is
   made again from the files (the stayers in their order, then the arrivals, senders in
   rank order), so that only one store holds the budget at any time;
2. **step**: the kick-drift on the pages (``store_kick_drift``), the external sort into
   curve order of the frame, the out-of-core tree of the rank (``_core.PagedDomainTree``),
   the locally essential pieces exported from its paged cells and exchanged, grafted in
   memory, and the walk over both, which writes the forces, potentials and costs to the
   pages and kicks each run's velocities as its results come.

Every operation is the in-core DomainLeapfrog's, in the same order on the same values: the
run is the in-core distributed run bit for bit on the same number of ranks (ties between
particles with one curve key, closer than 2^-21 of the frame on every axis, are broken by
the store's order rather than the arrays', and may sum in another order).

Memory: the store's budget holds the particle pages, the sort buffer, the tree's cells and
what the walk copies; the grafted pieces are charged to it too. The blocks this module
reads (BLOCK particles at a time) and the pieces on their way through MPI are outside the
store: the run keeps OUTSIDE_STORE of the rank's budget for them, and where the pieces take
more (a centrally concentrated model cut through its core), the tree's cell cache gives
frames back for the rest (_Transit).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gravpipe import _core
from gravpipe.errors import MemoryBudgetError
from gravpipe.ooc import CARRIED, OOC_FIELDS, plan_budget, tree_keep_free
from gravpipe.parallel.domain import curve_keys, exchange_rows, owners
from gravpipe.parallel.domain_leapfrog import (FRAME_FIELD, REBALANCE, SPLITTERS_FIELD, cost_by_owner, imbalance,
                                               kept_frame, on_grid, predicted, reached, restored)
from gravpipe.parallel.essential_forces import Clock, EssentialTreeForces, domains, exchange_pieces
from gravpipe.parallel.streamed_cut import streamed_splitters
from gravpipe.pipeline import PipelineStats
from gravpipe.store import ParticleStore, format_bytes, page_bytes_for_budget

#: particles a block of the passes over the store reads and writes at once
BLOCK = 1 << 16
#: bytes of a rank's budget kept by default for what lives outside its store: the arrays of
#: a block of the passes (_BLOCK_BYTES_PER_PARTICLE: ~26 MB), the pieces on their way through MPI
#: before the graft copies them into the budget, the interpreter's own arrays
OUTSIDE_STORE = 96 << 20
#: the store's fields: the paged leapfrog's and the domain cost
FIELDS: dict[str, tuple[int, str]] = OOC_FIELDS | {"domain_cost": (1, "i64")}
#: bytes of the arrays a block of the passes holds at once, a particle (where, keys, the
#: migrating rows and their sorted copies)
_BLOCK_BYTES_PER_PARTICLE = 400
#: float64 columns a migrating particle carries: pos (3), vel (3), mass, acc (3); and int64: id
_F64 = (("pos", 3), ("vel", 3), ("mass", 1), ("acc", 3))
_F64_WIDTH = 10


class PagedDomainLeapfrog:
    """The leapfrog of this rank's share of a treecode run, out of core (see the module
    docstring). ``blocks``: a callable returning an iterator over this rank's starting
    particles as dicts of "pos" (m, 3), "vel" (m, 3), "mass" (m,), "id" (m,) (and, with
    ``restart``, "acc" (m, 3), "pot" (m,), "domain_cost" (m,)); ``n`` their count (0 on a
    rank that starts with none). ``forces``: the tree's parameters (an
    :class:`EssentialTreeForces`, whose evaluation is not used). ``memory_budget``: bytes
    for this rank, its store and everything else; ``scratch``: the directory of the store's
    scratch file and the migration's files. ``restart``: the run's scalars of a
    checkpoint (steps (1,), grid_origin (1,), domain_frame (6,), domain_splitters on the
    same P) with the per-particle state in the blocks; else :meth:`start` runs the start-up
    evaluation. ``outside_store``: bytes of the budget kept for what lives outside the
    store (OUTSIDE_STORE; tests of paging give less). ``check``: called with each block as
    it is stored (a range check that raises).

    Construction fills this rank's store and talks to no other rank, so that a failure is
    one rank's to report (``consistency.agreed``); :meth:`start` is collective.
    """

    def __init__(self, comm: Any, blocks: Any, n: int, *, forces: EssentialTreeForces, dt: float, t0: float,
                 memory_budget: int, scratch: str | os.PathLike, restart: dict[str, np.ndarray] | None = None,
                 rebalance: float = REBALANCE, outside_store: int = OUTSIDE_STORE,
                 check: Callable[[dict[str, np.ndarray]], None] | None = None, blocks_bytes: int = 0):
        self.comm, self.forces, self.dt = comm, forces, float(dt)
        self.rebalance = float(rebalance)
        self.budget = int(memory_budget)
        self.scratch = Path(scratch)
        self.store_budget = self.budget - int(outside_store)
        if self.store_budget <= 0:
            raise MemoryBudgetError(f"memory budget {format_bytes(self.budget)} a rank is too small: a rank keeps "
                                    f"{format_bytes(int(outside_store))} of it for what lives outside its store",
                                    self.budget, int(outside_store) + (16 << 20))
        self.page_bytes = int(page_bytes_for_budget(self.store_budget))
        self._splitters: np.ndarray | None = None
        self._frame: tuple[np.ndarray, np.ndarray] | None = None
        self.cuts = 0
        self.comm_clock = Clock()
        self.seconds_decompose = 0.0
        self.stages: dict[str, float] = {}
        self.evaluations = 0
        self.last_stages: dict[str, float] = {}  # the last step's seconds by stage
        #: the last evaluation's import: particles, cells, bytes this rank sent, bytes grafted,
        #: bytes of pieces in transit at once and how far they went past what the budget held
        self.last_import: dict[str, int] = {}
        self.io_bytes = {"read": 0, "written": 0}  # the store's page traffic, summed over the stores
        self._stats = {"interactions": 0, "seconds_j_write": 0.0, "seconds_comm": 0.0, "seconds_total": 0.0}
        self._counters = {"steps": 0, "particle_steps": 0, "seconds_host": 0.0, "seconds_total": 0.0}
        self._last_migrated = 0
        self._tree_stats: dict[str, Any] = {}
        _remove_stale_dirs(self.scratch)
        self._store: ParticleStore | None = None
        self._transit_warned = False
        self._last_transit = 0  # bytes of the last evaluation's pieces in transit
        self._started = restart is not None
        self._fill(blocks, int(n), check, int(blocks_bytes))
        if restart is None:
            self._origin, self._steps = float(t0), 0
        else:
            self._steps, self._origin, self._frame, self._splitters = restored(restart, comm.Get_size())

    def start(self) -> None:
        """The start-up: the domains cut, the particles moved there, their forces evaluated
        (nothing after a restart, whose forces the store holds). Collective."""
        if not self._started:
            self._decompose(0.0)
            self._sort_and_forces(None, self.time)
            self._started = True

    # ---- the store -------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """The particles this rank holds."""
        return 0 if self._store is None else self._store.n

    def _new_store(self, n: int, leave: int = 0) -> None:
        """A store for n particles under the rank's budget less ``leave`` bytes (none for n = 0)."""
        self.close()
        if n == 0:
            return
        threads = self.forces.threads
        try:
            plan = plan_budget(n, self.store_budget - leave, self.page_bytes, threads,
                               self.forces._tree_args["n_leaf"], self.forces._tree_args["n_crit"])
        except MemoryBudgetError as e:  # named in the rank's budget, not its store's
            outside = self.budget - self.store_budget + leave
            least = int(e.least_budget or 0) + outside
            raise MemoryBudgetError(
                f"memory budget {format_bytes(self.budget)} a rank is too small for the {n:,} particles this rank "
                f"holds out of core: the least budget that works is {format_bytes(least)} ({least} bytes; "
                f"{format_bytes(outside)} of it kept for what lives outside the store). The store: {e}",
                self.budget, least) from None
        self._plan = plan
        self._store = ParticleStore(self.scratch, n, plan.budget, page_bytes=self.page_bytes, extra_fields=FIELDS,
                                    cache_bytes=plan.cache, threads=threads)

    def close(self) -> None:
        """Give the store's scratch file and budget back (also when the run ends)."""
        if self._store is not None:
            c = self._store._core.counters()
            self.io_bytes["read"] += int(c["bytes_read"])
            self.io_bytes["written"] += int(c["bytes_written"])
            self._store.close()
            self._store = None

    def _fill(self, blocks: Any, n: int, check: Callable[[dict[str, np.ndarray]], None] | None,
              blocks_bytes: int) -> None:
        """A new store of the n particles ``blocks()`` yields, in their order; while one is
        made it takes ``blocks_bytes`` (a model's block drawn: ~300 MB), which the store
        leaves it of its budget beyond what the rank keeps outside the store."""
        self._new_store(n, leave=max(blocks_bytes - (self.budget - self.store_budget), 0))
        at = 0
        for blk in blocks():
            m = len(blk["mass"])
            if at + m > n:
                raise ValueError(f"the blocks hold more than the {n} particles announced")
            if check is not None:
                check(blk)
            self._write(at, blk)
            at += m
        if at != n:
            raise ValueError(f"the blocks hold {at} particles, {n} announced")

    def _write(self, at: int, blk: dict[str, np.ndarray]) -> None:
        """Particles [at, at + m) from a block: pos, vel, mass, id and what of acc, pot and
        domain_cost it holds (absent: zero accelerations, unit costs, which the next
        evaluation rewrites before any use); "index" is their place, the sort's tie-break."""
        s, m = self._store, len(blk["mass"])
        for name in ("pos", "vel", "mass", "id", "acc", "pot", "domain_cost"):
            if name in blk:
                s.write(name, at, blk[name])
        s.write("index", at, np.arange(at, at + m, dtype=np.int64))
        if "acc" not in blk:
            s.write("acc", at, np.zeros((m, 3)))
        if "domain_cost" not in blk:
            s.write("domain_cost", at, np.ones(m, np.int64))

    def blocks(self, fields: list[str], chunk: int = BLOCK) -> Iterator[dict[str, np.ndarray]]:
        """This rank's particles in store order, ``chunk`` at a time, as {field: array}."""
        for b in range(0, self.n, chunk):
            e = min(self.n, b + chunk)
            yield {f: self._store.read(f, b, e) for f in fields}

    # ---- the clock -------------------------------------------------------------------------
    @property
    def time(self) -> float:
        return self._origin + self._steps * self.dt

    @property
    def grid_origin(self) -> float:
        return self._origin

    def evolve_to(self, t: float) -> None:
        """Whole steps of dt to ``t``; an off-grid ``t`` ends with a shortened step to it,
        which becomes the grid's origin (DomainLeapfrog.evolve_to). Collective."""
        if not self._started:
            raise RuntimeError("PagedDomainLeapfrog: start() first")
        if not np.isfinite(t) or t < self.time - 1e-9 * self.dt:
            raise ValueError(f"evolve_to: t = {t!r} is before the current time {self.time!r} or not finite")
        while not reached(t, self._origin, self.dt, self._steps):
            target = min(t, self._origin + (self._steps + 1) * self.dt)
            self._decompose(target - self.time)
            self._step(target)

    def _step(self, target: float) -> None:
        """One kick-drift-kick step to ``target``, as the core's leapfrog takes it: dt on the
        grid, else target - time (which then becomes the origin)."""
        t0 = time.perf_counter()
        grid, _ = on_grid(target, self._origin, self.dt)
        dt = self.dt if grid else target - self.time
        stages = {}
        if self._store is not None:
            with _timed(stages, "kick_drift"):
                _core.store_kick_drift(self._store._core, 0.5 * dt, dt, BLOCK)
        self._sort_and_forces(0.5 * dt, self.time + dt, stages)
        if grid:
            self._steps += 1
        else:
            self._origin, self._steps = float(target), 0
        self._counters["steps"] += 1
        self._counters["particle_steps"] += self.n
        self._counters["seconds_total"] += time.perf_counter() - t0

    # ---- decomposition ---------------------------------------------------------------------
    def _where_blocks(self, dt: float) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(where (m, 3), cost (m,), block start) of the store's blocks: the positions a step
        of dt drifts them to, and their costs."""
        for b in range(0, self.n, BLOCK):
            e = min(self.n, b + BLOCK)
            s = self._store
            pos = s.read("pos", b, e)
            where = pos if dt == 0 else predicted(pos, s.read("vel", b, e), s.read("acc", b, e), dt)
            yield where, np.maximum(s.read("domain_cost", b, e), 1), b

    def _decompose(self, dt: float = 0.0) -> None:
        """DomainLeapfrog._decompose over the store's blocks (see the module docstring). The
        first pass finds the box of the drifted positions and, while the frame and the cuts
        are kept (most steps), the owners in them, their summed costs and, in a scratch file
        (2 bytes a particle below 32768 ranks), each particle's owner for the migration: one pass where the
        frame or a cut that moves needs several."""
        t0 = time.perf_counter()
        comm, ranks = self.comm, self.comm.Get_size()
        with tempfile.TemporaryDirectory(prefix=f"gravpipe-decompose-{os.getpid()}-", dir=self.scratch) as tmp:
            kept, cuts = self._frame, self._splitters
            mine = np.zeros(ranks, np.int64)
            lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
            with open(Path(tmp) / "owners", "w+b") as guessed:
                for where, cost, _ in self._where_blocks(dt):
                    lo, hi = np.minimum(lo, where.min(axis=0)), np.maximum(hi, where.max(axis=0))
                    if kept is not None and cuts is not None:  # a guess: the frame stays
                        owner = owners(curve_keys(where, *kept, self.forces.threads), cuts)
                        mine += cost_by_owner(owner, cost, ranks)
                        owner.astype(_owner_dtype(ranks)).tofile(guessed)
                corners = np.vstack((lo, hi)) if self.n else np.empty((0, 3))  # their box is the positions'
                with self.comm_clock:
                    self._frame = kept_frame(comm, kept, corners)
                guess = cuts is not None and self._frame is kept
                if cuts is not None and not guess:  # a new frame: the costs by owner again
                    mine[:] = 0
                    for keys, cost in self._keyed(dt):
                        mine += cost_by_owner(owners(keys, cuts), cost, ranks)
                cut = cuts is None
                if not cut:
                    with self.comm_clock:
                        cut = imbalance(comm, mine) > self.rebalance
                if cut:
                    with self.comm_clock:
                        self._splitters = streamed_splitters(comm, lambda: self._keyed(dt))
                    self.cuts += 1
                guessed.seek(0)
                self._migrate(dt, guessed if guess and not cut else None)
        seconds = time.perf_counter() - t0
        self.seconds_decompose += seconds
        self.stages["decompose"] = self.stages.get("decompose", 0.0) + seconds
        self.last_stages = {"decompose": seconds}

    def _keyed(self, dt: float) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(curve keys in the frame (m,) uint64, cost (m,)) of the store's blocks after a
        drift of dt."""
        for where, cost, _ in self._where_blocks(dt):
            yield curve_keys(where, *self._frame, self.forces.threads), cost

    def _migrate(self, dt: float, owner_file: Any) -> None:
        """Every particle to the rank whose range holds where the step drifts it: rounds of
        one block per rank (every rank takes part in each), stayers and each sender's
        arrivals to files of their own, then the store made again from them. ``owner_file``:
        each particle's owner (int16, store order), or None: found from the drifted positions."""
        from mpi4py import MPI

        comm, ranks, me = self.comm, self.comm.Get_size(), self.comm.Get_rank()
        rounds = comm.allreduce((self.n + BLOCK - 1) // BLOCK, op=MPI.MAX)
        with tempfile.TemporaryDirectory(prefix=f"gravpipe-migrate-{os.getpid()}-", dir=self.scratch) as tmp:
            # per source (this rank: the stayers) a file of float64 rows and one of ids
            files = [(open(Path(tmp) / f"from{r}.f64", "w+b"), open(Path(tmp) / f"from{r}.id", "w+b"))
                     for r in range(ranks)]
            try:
                counts = np.zeros(ranks, np.int64)
                sent_bytes = 0
                for k in range(rounds):
                    f64, i64, owner = self._rows_of(k * BLOCK, dt, owner_file)
                    leave = owner != me
                    _append(files[me], f64[~leave], i64[~leave])
                    counts[me] += int((~leave).sum())
                    got_f, got_i, per_sender, sent = exchange_rows(comm, owner[leave], f64[leave], i64[leave])
                    sent_bytes += sent
                    at = 0
                    for r in range(ranks):
                        m = int(per_sender[r])
                        if m:
                            _append(files[r], got_f[at:at + m], got_i[at:at + m])
                            counts[r] += m
                            at += m
                self._last_migrated = sent_bytes
                self._refill(files, counts)
            finally:
                for pair in files:
                    for f in pair:
                        f.close()

    def _rows_of(self, b: int, dt: float, owner_file: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The migrating rows of the block at b (none past the store's end): f64 (m, 10) pos
        vel mass acc, i64 (m, 1) id, and each one's owner (m,) int64, read from owner_file or
        found from where a drift of dt takes it."""
        e = min(self.n, b + BLOCK)
        if b >= e:
            return np.empty((0, _F64_WIDTH)), np.empty((0, 1), np.int64), np.empty(0, np.int64)
        s = self._store
        f64 = np.column_stack([s.read(name, b, e).reshape(e - b, w) for name, w in _F64])
        if owner_file is not None:
            owner = np.fromfile(owner_file, _owner_dtype(self.comm.Get_size()), e - b).astype(np.int64)
        else:
            pos = f64[:, 0:3]
            where = pos if dt == 0 else predicted(pos, f64[:, 3:6], f64[:, 7:10], dt)
            owner = owners(curve_keys(np.ascontiguousarray(where), *self._frame, self.forces.threads),
                           self._splitters)
        return f64, s.read("id", b, e).reshape(-1, 1), owner

    def _refill(self, files: list, counts: np.ndarray) -> None:
        """The store made again from the stayers' file, then each sender's, in rank order."""
        me = self.comm.Get_rank()
        order = [me] + [r for r in range(len(files)) if r != me]
        self._new_store(int(counts.sum()))
        at = 0
        for r in order:
            rows, id_file = files[r]
            rows.seek(0), id_file.seek(0)
            left = int(counts[r])
            while left:
                m = min(left, BLOCK)
                f64 = np.fromfile(rows, np.float64, m * _F64_WIDTH).reshape(m, _F64_WIDTH)
                ids = np.fromfile(id_file, np.int64, m)
                cols = np.cumsum([0] + [w for _, w in _F64])
                blk = {name: f64[:, cols[k]:cols[k + 1]].reshape((m, w) if w > 1 else m)
                       for k, (name, w) in enumerate(_F64)}
                blk["id"] = ids
                self._write(at, blk)
                at += m
                left -= m

    # ---- forces ------------------------------------------------------------------------------
    def forces_now(self) -> None:
        """Cut, migrate and evaluate the forces of the current positions (collective), the
        clock and the motion untouched: for measurements."""
        self._decompose()
        self._sort_and_forces(None, self.time)

    def diagnostic_potential(self, theta: float) -> None:
        """The potential of every particle from a float64 tree at opening angle ``theta``
        over the ranks into the store's "pot_check" (:meth:`blocks`), the run's forces and
        costs kept, nothing counted as the run's work. Collective."""
        args = dict(self.forces._tree_args, theta=float(theta), precision="double")
        self._sort_and_forces(None, self.time, {}, tree_args=args, fields=("", "pot_check", ""))

    def _sort_and_forces(self, kick_h: float | None, t: float, stages: dict[str, float] | None = None, *,
                         tree_args: dict[str, Any] | None = None,
                         fields: tuple[str, str, str] = ("acc", "pot", "domain_cost")) -> None:
        """Sort into curve order of the frame, build the paged tree, exchange the essential
        pieces, graft and walk into ``fields`` (acceleration, potential, cost; "": not
        written); kick_h: the closing kick rides on the walk. ``tree_args``: other tree
        parameters (a diagnostic evaluation, not counted). Collective."""
        diagnostic = tree_args is not None
        comm, ranks, me = self.comm, self.comm.Get_size(), self.comm.Get_rank()
        stages = {} if stages is None else stages
        t_start = time.perf_counter()
        s = self._store
        corners = np.empty((0, 3))
        if s is not None:
            with _timed(stages, "bounds"):
                lo, hi = _bounds(s, self.n)
                corners = np.vstack((lo, hi))
        with self.comm_clock:
            self._frame = kept_frame(comm, self._frame, corners)
        tree = None
        if s is not None:
            with _timed(stages, "sort"):
                st = _core.store_sort_by_curve(s._core, CARRIED, self._plan.sort_buffer, self.forces.threads,
                                               frame=self._frame)
            with _timed(stages, "build"):
                own = np.concatenate((st["bounds_lo"], st["bounds_hi"], [0.0]))
                args = {k: v for k, v in (tree_args or self.forces._tree_args).items() if k != "alpha"}
                tree = _core.PagedDomainTree(s._core, own, **args, keep_free=tree_keep_free(self.n, args["threads"]))
        transit = _Transit(tree, self.budget - self.store_budget - BLOCK * _BLOCK_BYTES_PER_PARTICLE,
                           self._last_transit)
        exchange = Clock()
        with exchange:
            boxes = domains(comm, tree)  # every group's box of every rank: ~0.5 B a particle
        boxes_bytes = sum(b.nbytes for b in boxes)
        transit.made(boxes_bytes)
        with _timed(stages, "export"):
            # the pieces' sizes first, without making them, so that the budget has room for them
            sizes = [int(tree.export_size(boxes[r])[2]) if tree is not None and r != me else 0 for r in range(ranks)]
            transit.making(boxes_bytes + sum(sizes))
            pieces = [tree.export_for(boxes[r]) if tree is not None and r != me else None for r in range(ranks)]
        transit.made(boxes_bytes + sum(a.nbytes for piece in pieces if piece is not None for a in piece))
        del boxes
        transit.made(sum(a.nbytes for piece in pieces if piece is not None for a in piece))
        recv, essential = exchange_pieces(comm, pieces, exchange, transit.receiving)
        stages["exchange"] = exchange.seconds
        transit.sent()
        self._last_transit = transit.peak
        interactions = 0
        if tree is not None:
            with _timed(stages, "graft"):
                tree.graft(*recv)
            transit.grafted()
            self._warn_over_budget(transit)
            self.last_import = {"particles": int(tree.imported_particles), "cells": int(tree.top_cells),
                                "bytes_sent": int(essential), "graft_bytes": int(tree.graft_bytes),
                                "transit_bytes": transit.peak, "transit_over": transit.over}
            del recv
            tree.hold_beside(0)
            with _timed(stages, "walk_forces"):
                tree.forces(*fields, kick_h=kick_h, time=t)
            stats = tree.stats()
            interactions = int(stats["pp_interactions"] + stats["pc_interactions"])
            del tree
        if diagnostic:
            return
        self._tree_stats = stats if s is not None else {}
        walk = float(self._tree_stats.get("seconds_walk", 0.0) + self._tree_stats.get("seconds_evaluate", 0.0))
        work = (walk, interactions, essential, self._last_migrated)
        everyone = np.array(comm.allgather(work), np.float64)  # counts below 2^53: exact
        self.forces._count(everyone, stages["exchange"])
        self._last_migrated = 0
        self.evaluations += 1
        for name, seconds in stages.items():
            self.stages[name] = self.stages.get(name, 0.0) + seconds
            self.last_stages[name] = seconds
        st_ = self._stats
        st_["interactions"] += int(everyone[:, 1].sum())
        st_["seconds_j_write"] += sum(stages.get(k, 0.0) for k in ("sort", "build", "export", "graft"))
        st_["seconds_comm"] += stages["exchange"]
        st_["seconds_total"] += time.perf_counter() - t_start

    def _warn_over_budget(self, transit: "_Transit") -> None:
        """Warn (once a run) when the pieces in transit took more than the budget could make
        room for: the process then exceeded its budget by that much."""
        if transit.over > 0 and not self._transit_warned:
            import warnings

            from gravpipe.errors import MemoryBudgetWarning

            self._transit_warned = True
            warnings.warn(MemoryBudgetWarning(
                f"the essential pieces in transit on this rank took {format_bytes(transit.peak)} outside its store, "
                f"{format_bytes(transit.over)} more than its budget kept or its tree's cell cache could give back "
                f"when they were made: the process exceeded {format_bytes(self.budget)} by up to that much"),
                stacklevel=3)

    # ---- what the run reads ---------------------------------------------------------------------
    def checkpoint(self) -> dict[str, np.ndarray]:
        """The run's scalars a checkpoint carries (the per-particle state is the store's:
        acc, pot, domain_cost in :meth:`blocks`)."""
        out = {"steps": np.array([self._steps], np.int64), "grid_origin": np.array([self._origin])}
        if self._splitters is not None:
            out[SPLITTERS_FIELD] = self._splitters.view(np.int64).copy()
        if self._frame is not None:
            out[FRAME_FIELD] = np.concatenate(self._frame)
        return out

    def counters(self) -> dict[str, float]:
        return dict(self._counters)

    @property
    def stats(self) -> PipelineStats:
        s = dict(self._stats)
        s["seconds_comm"] += self.comm_clock.seconds
        walk = s["seconds_total"] - s["seconds_j_write"] - self._stats["seconds_comm"]
        return PipelineStats(interactions=s["interactions"], seconds_j_write=s["seconds_j_write"],
                             seconds_compute=max(walk, 0.0), seconds_comm=s["seconds_comm"])

    def stage_summary(self) -> str:
        """This rank's mean seconds per evaluation by stage, and its page traffic, in one line."""
        per = max(self.evaluations, 1)
        st = {k: v / per for k, v in self.stages.items()}
        io = dict(self.io_bytes)
        if self._store is not None:
            c = self._store._core.counters()
            io = {"read": io["read"] + int(c["bytes_read"]), "written": io["written"] + int(c["bytes_written"])}
        names = ("decompose", "kick_drift", "bounds", "sort", "build", "export", "exchange", "graft", "walk_forces")
        parts = ", ".join(f"{k} {st.get(k, 0.0):.3g}" for k in names)
        return (f"domains cut {self.cuts} times in {self.evaluations} evaluations, out of core; seconds per step on "
                f"this rank: {parts}; pages read {io['read'] / per:.3e} B, written {io['written'] / per:.3e} B "
                f"a step")


def _timed(stages: dict[str, float], name: str) -> Any:
    """A ``with`` block whose wall seconds are added to stages[name]."""

    class _T:
        def __enter__(self) -> None:
            self.t0 = time.perf_counter()

        def __exit__(self, *exc: object) -> None:
            stages[name] = stages.get(name, 0.0) + time.perf_counter() - self.t0

    return _T()


def _bounds(store: ParticleStore, n: int) -> tuple[np.ndarray, np.ndarray]:
    """min and max (3,) of the store's positions, block by block (exact, as one pass)."""
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for b in range(0, n, BLOCK):
        pos = store.read("pos", b, min(n, b + BLOCK))
        lo, hi = np.minimum(lo, pos.min(axis=0)), np.maximum(hi, pos.max(axis=0))
    return lo, hi


class _Transit:
    """The essential pieces on their way through MPI and the domains' boxes they are made
    for, which live outside the store: ``room`` bytes of the rank's budget are kept for
    them; beyond that the tree's cell cache gives frames back
    (``PagedDomainTree.hold_beside``). Before the boxes come it holds what the last
    evaluation's took; before the export, the boxes and the pieces' sizes
    (``export_size``); once the sizes to receive are known, what the exchange holds at once;
    after it, what arrived. ``over``: the bytes they took beyond the room and what was held
    when they were made (the boxes of a first evaluation past the room)."""

    def __init__(self, tree: Any, room: int, expected: int):
        self.tree, self.room = tree, max(int(room), 0)
        self.peak = self.over = self._made = self._received = 0
        self._held = self._hold(expected)

    def _hold(self, nbytes: int) -> int:
        return 0 if self.tree is None else int(self.tree.hold_beside(max(nbytes - self.room, 0)))

    def _account(self, nbytes: int) -> None:
        self.peak = max(self.peak, nbytes)
        self.over = max(self.over, nbytes - self.room - self._held)

    def making(self, nbytes: int) -> None:
        """This rank is about to hold ``nbytes``: held from now (the cell cache gives frames back)."""
        if int(nbytes) - self.room > self._held:
            self._held = self._hold(int(nbytes))

    def made(self, nbytes: int) -> None:
        """What this rank holds now: ``nbytes`` (the boxes, the pieces for the other ranks)."""
        self._made = int(nbytes)
        self._account(self._made)
        self.making(self._made)  # held from now, where it went past (the cell cache shrinks for the rest)

    def receiving(self, nbytes: int) -> None:
        """``nbytes`` are about to arrive beside the pieces made."""
        total = self._made + int(nbytes)
        self._held = self._hold(total)
        self._account(total)
        self._received = int(nbytes)

    def sent(self) -> None:
        """The pieces made have gone: what arrived stays until the graft has copied it."""
        self._held = self._hold(self._received)

    def grafted(self) -> None:
        """The graft has copied what arrived, its charge first: what stays held beside."""
        if self.tree is not None:
            self._held = int(self.tree.held_beside)
            self._account(self._received)


def _remove_stale_dirs(scratch: Path) -> None:
    """Remove the migration's scratch folders (gravpipe-migrate-<pid>-*, gravpipe-decompose-
    <pid>-*) of processes of this user that no longer run (a killed rank leaves them, GBs at
    large N), saying which (StaleScratchWarning); a folder of a live process stays."""
    import re
    import shutil
    import warnings

    from gravpipe.errors import StaleScratchWarning

    removed = []
    for path in scratch.glob("gravpipe-*-*-*"):
        m = re.fullmatch(r"gravpipe-(?:migrate|decompose)-(\d+)-\w+", path.name)
        if m is None or not path.is_dir() or path.stat().st_uid != os.geteuid() or _alive(int(m.group(1))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(str(path))
    if removed:
        warnings.warn(f"scratch: removed the migration folders of processes that no longer run: {', '.join(removed)}",
                      StaleScratchWarning, stacklevel=3)


def _alive(pid: int) -> bool:
    """Whether a process of that number runs (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_dtype(ranks: int) -> Any:
    """The narrowest integer that holds every rank number."""
    return np.int16 if ranks < 2**15 else np.int32


def _append(files: tuple[Any, Any], f64: np.ndarray, i64: np.ndarray) -> None:
    """Rows to a source's migration files: the float64 rows to one, the ids to the other."""
    if len(f64):
        np.ascontiguousarray(f64, np.float64).tofile(files[0])
        np.ascontiguousarray(i64, np.int64).reshape(-1).tofile(files[1])
