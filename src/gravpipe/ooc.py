"""The treecode out of core (Salmon & Warren, seed 004; DESIGN.md "What comes after"):
particles in the pages of a scratch store, in curve order, within a fixed memory budget.

A run with files, diagnostics and resume is :mod:`gravpipe.ooc_simulation` (what
``Simulation(..., memory_budget=, scratch=)`` builds); this module fills its store and
drives its integrator.

    with OutOfCore.from_particles(p, "/scratch", memory_budget="2GiB", eps=1/256, dt=1/128) as ooc:
        ooc.forces(next_dt=1/128)        # sort + build + moments + walk: acc, pot on the pages
                                         # (and the first step's kick-drift and runs prepared)
        ooc.step(1/128)                  # one leapfrog step (kick-drift, sort, tree, kick)
        ooc.evolve_to(1.0)               # whole steps of dt (one shortened step off the grid)
        acc = ooc.gather("acc")          # (N,3) in the caller's order (tests; needs N in memory)

The step lives in C++: ``_core.PagedLeapfrog`` (paged_leapfrog.hpp), an integrator behind the
same interface as the in-core leapfrog, owns it whole: the sort (the kick-drift riding on it
in the frame the last walk predicted, its runs made by that walk, the tree's cells built as it
writes the particles), the walk with the closing kick riding on it, and the grid of
``evolve_to``. For the same particles, parameters and thread count its forces and steps are
the in-core ones bit for bit; its options (:attr:`OutOfCore.options`: ``presort``,
``presort_run``, ``tree_in_sort``, ``prefetch_runs``, ...) only move the disk's work in time.
This module keeps what is O(chunk) and at the edge: filling the store block by block, the
budget plan's warning, reading back, snapshots and checkpoints streamed from the pages, and
measurements of the whole process around the stages the integrator reports
(:class:`StepTimes`).

Ids that are the caller's index plus a constant (checked block by block as the store is
filled) are read from the sorted index (``ParticleStore.derive_from``): the sort neither
carries nor writes them. The store keeps every field the sort carries twice (``pos`` and its
twin ``pos~``) and the keys; on disk that is 192 bytes a particle.

The budget (paged_budget.hpp, :func:`plan_budget`) covers everything that grows with N: the
page checksum tables, the page cache, the tree's cells and groups, the sort buffer and its run
sources, each thread's copied particle blocks and the kick pass's blocks. A budget that cannot
hold the least of them raises :class:`~gravpipe.errors.MemoryBudgetError` naming the least
budget; one that holds them but leaves the particles' cache less than the walk's working set
(:func:`walk_least_cache`, ~3 MiB per thread) warns with
:class:`~gravpipe.errors.MemoryBudgetWarning`, naming a budget that does not
(:func:`walk_budget`): below it each step re-reads the same pages many times over.
"""

from __future__ import annotations

import math
import os
import resource
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace, TracebackType

import numpy as np

from gravpipe import _core
from gravpipe.backends import resolve_isa
from gravpipe.block_device import BlockDevice
from gravpipe.errors import MemoryBudgetError, MemoryBudgetWarning
from gravpipe.store import DEFAULT_FIELDS, ParticleStore, format_bytes, page_bytes_for_budget, parse_byte_size
from gravpipe.tree_params import (DEFAULT_N_CRIT, DEFAULT_N_LEAF, DEFAULT_QUAD_TOL, DEFAULT_THETA, TreeStats,
                                  _check_precision, check_quad_tol, check_tree_params)

__all__ = ["OutOfCore", "StepTimes", "OOC_FIELDS", "CHECKPOINT_STATE", "plan_budget", "tree_keep_free",
           "MemoryBudgetError", "MemoryBudgetWarning"]

#: the fields the external sort carries (each with its twin "<name>~"), besides key and index;
#: "id" only when the store does not read it from the index (OutOfCore.carried)
CARRIED = ["pos", "vel", "mass", "id"]
#: fields of the out-of-core store beyond the store's defaults (paged_leapfrog_fields: the
#: sort's twins, its keys, the caller's index and the diagnostic tree's potential)
OOC_FIELDS: dict[str, tuple[int, str]] = {name: (comps, dtype) for name, comps, dtype, _ in
                                          _core.paged_leapfrog_fields() if name not in DEFAULT_FIELDS}
#: the per-particle state of a checkpoint, beside pos, vel, mass, id: the forces of the last
#: evaluation (the next kick's), the caller's order (the sort's tie-break) and the sorted
#: curve keys (the store is in curve order at a checkpoint)
CHECKPOINT_STATE: dict[str, tuple[int, str]] = {"acc": (3, "f8"), "pot": (1, "f8"), "index": (1, "i8"),
                                                "key": (1, "i8")}
#: cells and groups per particle the budget plans for (at n_leaf 16, n_crit 256)
CELLS_PER_PARTICLE_AT_16 = float(_core.PAGED_CELLS_PER_PARTICLE_AT_16)
GROUPS_PER_PARTICLE_AT_256 = float(_core.PAGED_GROUPS_PER_PARTICLE_AT_256)
#: particles per block of the separate kick-drift pass
KICK_BLOCK = int(_core.PAGED_KICK_BLOCK)
#: particles of a run the walk makes for the next sort (walk_runs.hpp): ~4 MB of the budget
PRESORT_RUN = int(_core.PAGED_PRESORT_RUN)
#: bytes of x, y, z and m pages the walk's working set holds for each compute thread
WALK_CACHE_PER_THREAD = int(_core.PAGED_WALK_CACHE_PER_THREAD)
#: bytes a thread of a budget's spare room that go to the sort's buffer and the cells' cache
#: before the particles' cache shares in it
SORT_AND_CELLS_ROOM = int(_core.PAGED_SORT_AND_CELLS_ROOM)


def walk_least_cache(n: int, page_bytes: int, threads: int) -> int:
    """Bytes of particle cache below which the tree walk thrashes: its working set, or every
    page of x, y, z and m when they take less."""
    return int(_core.paged_walk_least_cache(int(n), int(page_bytes), int(threads)))


def copy_allowance(n_crit: int = DEFAULT_N_CRIT, n_leaf: int = DEFAULT_N_LEAF) -> int:
    """Bytes of particle blocks one thread holds copied out of the pages at most (those that
    straddle a page, or come when its share of pinned frames is full): its run's sinks and
    the one source piece it is gathering, ~96 KiB at the defaults (PagedTree::copy_allowance)."""
    return int(_core.paged_tree_copy_allowance(int(n_crit), int(n_leaf)))


def tree_keep_free(n: int, threads: int, n_crit: int = DEFAULT_N_CRIT, n_leaf: int = DEFAULT_N_LEAF) -> int:
    """Bytes the tree's cell cache leaves to the walk's other charges: the threads' copied
    particle blocks and the prefetch's table of runs (24 bytes a run of ~2048 particles)."""
    return int(_core.paged_tree_keep_free(int(n), int(threads), int(n_crit), int(n_leaf)))


def _context_switches() -> int:
    """Context switches of this process so far, every thread, voluntary and not (getrusage)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


@dataclass
class StepTimes:
    """Wall seconds of one out-of-core step (or of forces(), or the sums over evolve_to's
    steps), by stage, and its page traffic (the integrator's report)."""
    kick_drift: float = 0.0
    sort: float = 0.0
    build: float = 0.0
    moments: float = 0.0
    walk_forces: float = 0.0    # the tree walk, the forces and the closing kick riding on it
    bytes_read: int = 0         # particle and cell pages together
    bytes_written: int = 0
    cell_bytes_read: int = 0    # ... of which the tree's cell pages
    cell_bytes_written: int = 0
    cell_cache_bytes: int = 0   # the tree's cell cache (frames)
    cells: int = 0
    sort_detail: dict = field(default_factory=dict)
    #: the kick-drift ran inside the sort (its seconds in ``sort``, ``kick_drift`` 0)
    kick_drift_in_sort: bool = False
    #: stage -> [bytes read, bytes written] (particle and cell pages) for the stages that ran:
    #: "kick_drift", "sort", "build_moments" (one pass), "walk_forces"; they add up to
    #: bytes_read and bytes_written
    stage_bytes: dict = field(default_factory=dict)
    #: stage -> CPU seconds (user + system) of the whole process, every thread, over the same
    #: spans as stage_bytes: set against the stage's wall seconds times the threads, what is
    #: left is time the cores were idle (waiting on the disk) or ran other processes
    stage_cpu: dict = field(default_factory=dict)
    #: stage -> context switches of the whole process, every thread, voluntary and not, over
    #: the same spans: each synchronous page read on a device costs its thread a sleep and a
    #: wake, so this counts the I/O's cost on the cores without the host's noise in it
    stage_switches: dict = field(default_factory=dict)
    #: stage -> the scratch's block device's own counters over the same spans
    #: (block_device.DeviceCounters.as_dict(), the whole device's); empty where the scratch
    #: has no block device (tmpfs) to measure
    stage_device: dict = field(default_factory=dict)
    device: str = ""            # the block device measured, e.g. "vda"; "" when none
    #: the walk's tree's counters (cell cache) and the most bytes a thread's copied blocks held
    cell_counters: dict = field(default_factory=dict)
    copy_peak_bytes: int = 0
    prefetch_runs: int = 0      # the walk's prefetch depth (runs of groups ahead of each thread)
    #: steps taken and their interactions (evolve_to's sums; one step: 1)
    steps: int = 0
    interactions: int = 0

    @property
    def total(self) -> float:
        return self.kick_drift + self.sort + self.build + self.moments + self.walk_forces

    @classmethod
    def of_report(cls, r: dict, meter: _StageMeter | None = None) -> StepTimes:
        """From the integrator's report (a dict) and the process's measurements over its stages."""
        st = cls(**{k: r[k] for k in ("kick_drift", "sort", "build", "moments", "walk_forces", "bytes_read",
                                      "bytes_written", "cell_bytes_read", "cell_bytes_written",
                                      "cell_cache_bytes", "cells", "kick_drift_in_sort", "copy_peak_bytes",
                                      "prefetch_runs")})
        st.sort_detail = dict(r["sort_detail"])
        st.stage_bytes = {k: list(v) for k, v in r["stage_bytes"].items()}
        st.cell_counters = dict(r["cell_counters"])
        if meter is not None:
            meter.fill(st)
        return st


class _StageMeter:
    """The process's CPU seconds, context switches and the scratch device's counters over each
    stage the integrator reports (its stage observer: "" where a step's traffic starts, each
    stage's name where it ends). ``per_call``: each start begins a new account (forces() before
    a step keeps its own); else they add up (evolve_to's steps)."""

    def __init__(self, device: BlockDevice | None, per_call: bool = True):
        self.device, self.per_call = device, per_call
        self.cpu: dict[str, float] = {}
        self.switches: dict[str, int] = {}
        self.disk: dict[str, dict] = {}
        self._cpu = self._switch = 0
        self._disk = None

    def __call__(self, stage: str) -> None:
        cpu, switches = time.process_time(), _context_switches()
        disk = self.device.counters() if self.device is not None else None
        if stage:
            self.cpu[stage] = self.cpu.get(stage, 0.0) + cpu - self._cpu
            self.switches[stage] = self.switches.get(stage, 0) + switches - self._switch
            if disk is not None:
                had = self.disk.setdefault(stage, {})
                for k, v in (disk - self._disk).as_dict().items():
                    had[k] = had.get(k, 0) + v
        elif self.per_call:
            self.cpu, self.switches, self.disk = {}, {}, {}
        self._cpu, self._switch, self._disk = cpu, switches, disk

    def fill(self, st: StepTimes) -> None:
        st.stage_cpu, st.stage_switches, st.stage_device = dict(self.cpu), dict(self.switches), dict(self.disk)
        st.device = self.device.name if self.device is not None else ""


@dataclass(frozen=True)
class BudgetPlan:
    """How a memory budget is shared (bytes): the particles' cache, the least the tree needs
    (its cells' fewest frames and the planned groups), and the headroom the sort and the tree
    use in turn (the sort buffer and run sources; the cell cache, groups and copied blocks)."""
    budget: int
    tables_and_least_frames: int
    tree_least: int
    headroom: int
    sort_buffer: int
    cache: int


def _least_budget(n: int, page_bytes: int, threads: int, n_leaf: int, n_crit: int, read_ahead: int = 4,
                  **limits) -> SimpleNamespace:
    """The parts of the least budget for n particles (bytes): least, store, tables, tree,
    groups, sort, blocks, keep_free (paged_budget.hpp, LeastPagedBudget)."""
    return SimpleNamespace(**_core.paged_least_budget(int(n), int(page_bytes), int(threads), int(n_leaf),
                                                      int(n_crit), int(read_ahead), **limits))


def walk_budget(n: int, page_bytes: int | None, threads: int, n_leaf: int, n_crit: int = 256,
                read_ahead: int = 4) -> int:
    """The least budget (bytes) whose default split gives the particles' cache the walk's
    working set (walk_least_cache); ``page_bytes`` None: pages sized from the budget, as
    OutOfCore sizes them when none is given."""
    return int(_core.paged_walk_budget(int(n), int(page_bytes or 0), int(threads), int(n_leaf), int(n_crit),
                                       int(read_ahead)))


def plan_budget(n: int, memory_budget: int, page_bytes: int, threads: int, n_leaf: int, n_crit: int = 256,
                cache_bytes: int | None = None, read_ahead: int = 4, page_auto: bool = False,
                sort_buffer: int | None = None, **limits) -> BudgetPlan:
    """The particles' cache and the sort buffer a budget leaves for ``n`` particles (see the
    module docstring). MemoryBudgetError naming the least budget when it cannot hold them;
    MemoryBudgetWarning naming a budget that avoids it when the default split leaves the
    walk less cache than its working set (``page_auto``: the page size was sized from the
    budget, and so would be for the budget named). ``limits``: kick_block, keep_free,
    groups_per_particle_at_256 (tests that plan for less)."""
    d = _core.plan_paged_budget(int(n), int(memory_budget), int(page_bytes), int(threads), int(n_leaf), int(n_crit),
                                cache_bytes, sort_buffer, bool(page_auto), int(read_ahead), **limits)
    if d["warning"]:
        warnings.warn(d["warning"], MemoryBudgetWarning, stacklevel=3)
    return BudgetPlan(d["budget"], d["tables_and_least_frames"], d["tree_least"], d["headroom"], d["sort_buffer"],
                      d["cache"])


class OutOfCore:
    """N particles in an out-of-core store, stepped by the paged leapfrog (see the module
    docstring). Build with :meth:`from_particles`, :meth:`from_blocks`, :meth:`from_snapshot`
    or :meth:`from_checkpoint`; close (or use ``with``) to remove the scratch file, which also
    happens when construction fails.

    Parameters are those of :class:`gravpipe.tree.Tree` (eps, G, theta, quadrupole,
    quad_tol, n_leaf, n_crit, threads, precision, local_expansion, isa; alpha is not
    available out of core) plus ``scratch`` (directory of the scratch file),
    ``memory_budget`` ("4GiB", bytes), ``page_bytes`` (default: from the budget,
    :func:`gravpipe.store.page_bytes_for_budget`), optional ``cache_bytes`` and
    ``sort_buffer`` (bytes of the external sort's runs; by default what the budget's
    headroom holds, capped at one run of every particle), and ``dt``, the step of
    :meth:`evolve_to`'s grid. ``kick_block``, ``keep_free`` and ``groups_per_particle_at_256``
    plan the budget for less than the defaults (tests of its edges).
    """

    def __init__(self, n: int, scratch: str | os.PathLike, memory_budget: str | int, *, eps: float = 0.0,
                 G: float = 1.0, theta: float = DEFAULT_THETA, quadrupole: bool = True,
                 quad_tol: float = DEFAULT_QUAD_TOL, n_leaf: int = DEFAULT_N_LEAF, n_crit: int = DEFAULT_N_CRIT,
                 threads: int | None = None, precision: str = "mixed", local_expansion: bool = True,
                 isa: str = "auto", page_bytes: str | int | None = None, cache_bytes: str | int | None = None,
                 sort_buffer: str | int | None = None, dt: float = 0.0, kick_block: int = KICK_BLOCK,
                 keep_free: int | None = None, groups_per_particle_at_256: float = GROUPS_PER_PARTICLE_AT_256):
        self.n = int(n)
        if self.n < 1:
            raise ValueError(f"n: must be >= 1, got {n}")
        self.threads = int(threads) if threads else int(_core.max_threads())
        self.params = dict(eps=float(eps), G=float(G), theta=float(theta), quadrupole=bool(quadrupole),
                           quad_tol=float(quad_tol), n_leaf=int(n_leaf), n_crit=int(n_crit), threads=self.threads,
                           precision=precision, local_expansion=bool(local_expansion), isa=resolve_isa(isa))
        # the in-core Tree's checks (the core checks eps and G again when the tree is built)
        check_tree_params(theta, n_leaf, n_crit, None, threads)
        check_quad_tol(quad_tol)
        _check_precision(precision)
        if not (math.isfinite(float(eps)) and float(eps) >= 0):
            raise ValueError(f"eps: must be finite and >= 0, got {eps!r}")
        page = parse_byte_size(page_bytes) if page_bytes is not None else page_bytes_for_budget(memory_budget)
        limits = dict(kick_block=int(kick_block), keep_free=keep_free,
                      groups_per_particle_at_256=float(groups_per_particle_at_256))
        self.plan = plan_budget(self.n, parse_byte_size(memory_budget), page, self.threads, int(n_leaf), int(n_crit),
                                None if cache_bytes is None else parse_byte_size(cache_bytes),
                                page_auto=page_bytes is None,
                                sort_buffer=None if sort_buffer is None else parse_byte_size(sort_buffer), **limits)
        self.store = ParticleStore(scratch, self.n, self.plan.budget, page_bytes=page, extra_fields=OOC_FIELDS,
                                   cache_bytes=self.plan.cache, threads=self.threads)
        #: the scratch's block device, whose own counters each step's stages report
        #: (StepTimes.stage_device); None for a scratch in RAM or with no device to measure
        self.scratch_device = None if self.store.in_memory else BlockDevice.of_path(scratch)
        p = self.params
        self._impl = _core.PagedLeapfrog(self.store._core, float(dt), p["eps"], p["G"], p["theta"], p["quadrupole"],
                                         p["quad_tol"], p["n_leaf"], p["n_crit"], p["threads"], p["precision"],
                                         p["local_expansion"], p["isa"], self.plan.sort_buffer, self.plan.headroom,
                                         int(kick_block), keep_free)
        # c when every id is its particle's caller index + c (checked as blocks are written,
        # which must come in order from 0): the store then reads the ids from the index
        # (ParticleStore.derive_from) once it is filled; None otherwise
        self._id_offset: int | None = None
        self._ids_written = 0
        self.last = StepTimes()
        self.tree_stats: TreeStats | None = None

    # ---- filling ----------------------------------------------------------------------------

    @classmethod
    def from_particles(cls, particles, scratch: str | os.PathLike, memory_budget: str | int, chunk: int = 1 << 18,
                       **kwargs) -> OutOfCore:
        """A store of ``particles`` (:class:`gravpipe.Particles`), written in the caller's order
        in chunks of ``chunk``; ``index`` records that order."""
        ooc = cls(len(particles.mass), scratch, memory_budget, **kwargs)
        try:
            for b in range(0, ooc.n, chunk):
                e = min(ooc.n, b + chunk)
                ooc._write_block(b, particles.pos[b:e], particles.vel[b:e], particles.mass[b:e], particles.id[b:e])
            ooc._filled()
        except BaseException:
            ooc.close()
            raise
        return ooc

    @classmethod
    def from_blocks(cls, blocks, n: int, scratch: str | os.PathLike, memory_budget: str | int,
                    **kwargs) -> OutOfCore:
        """A store of ``n`` particles arriving as consecutive :class:`gravpipe.Particles`
        blocks (``ic.plummer_blocks``, ``ic.model_blocks``): initial conditions of any N
        drawn straight into the pages."""
        ooc = cls(n, scratch, memory_budget, **kwargs)
        try:
            b = 0
            for blk in blocks:
                if b + len(blk.mass) > n:
                    raise ValueError(f"blocks: more than the {n} particles announced")
                ooc._write_block(b, blk.pos, blk.vel, blk.mass, blk.id)
                b += len(blk.mass)
            if b != n:
                raise ValueError(f"blocks: {b} particles of the {n} announced")
            ooc._filled()
        except BaseException:
            ooc.close()
            raise
        return ooc

    @classmethod
    def from_snapshot(cls, path: str | os.PathLike, scratch: str | os.PathLike, memory_budget: str | int,
                      chunk: int = 1 << 20, **kwargs) -> OutOfCore:
        """A store of the particles of a GADGET-layout HDF5 snapshot, read block by block
        (never N elements at once, :func:`gravpipe.io.open_blocks`); ``index`` is the file's order."""
        from gravpipe import io
        with io.open_blocks(path) as snap:
            return cls.from_blocks(snap.blocks(chunk), snap.n, scratch, memory_budget, **kwargs)

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, scratch: str | os.PathLike, memory_budget: str | int,
                        chunk: int = 1 << 20, **kwargs) -> OutOfCore:
        """The store of a checkpoint written by :meth:`write_checkpoint`, read block by block:
        the state after its last force evaluation, with the integrator's step count and grid
        origin, so that the next :meth:`step` continues bit for bit. ``kwargs`` as for the
        constructor (the run's parameters)."""
        from gravpipe import io
        with io.open_blocks(path) as snap:
            ooc = cls(snap.n, scratch, memory_budget, **kwargs)
            try:
                for b, blk in zip(range(0, snap.n, chunk), snap.blocks(chunk)):
                    e = b + blk.n
                    ooc._write_block(b, blk.pos, blk.vel, blk.mass, blk.id, index=snap.state_rows("index", b, e))
                    for name, (_, dtype) in CHECKPOINT_STATE.items():
                        if name == "index":
                            continue  # written with the block
                        rows = snap.state_rows(name, b, e)
                        ooc.store.write(name, b, np.ascontiguousarray(rows, np.float64 if dtype == "f8" else np.int64))
                ooc._filled()
                scalars = snap.integrator_scalars or {}
                if "steps" in scalars and "grid_origin" in scalars:
                    ooc._impl.restart(int(scalars["steps"]), float(scalars["grid_origin"]))
                else:
                    ooc._impl.restart(0, float(snap.time))
            except BaseException:
                ooc.close()
                raise
        return ooc

    def _write_block(self, b: int, pos, vel, mass, ids, index: np.ndarray | None = None) -> None:
        """Particles [b, b + len(mass)): ``index`` their caller order (default: b, b + 1, ...)."""
        pos = np.ascontiguousarray(pos, np.float64)
        vel = np.ascontiguousarray(vel, np.float64)
        mass = np.ascontiguousarray(mass, np.float64)
        if not (np.isfinite(pos).all() and np.isfinite(vel).all() and np.isfinite(mass).all()):
            raise ValueError(f"particles {b}..{b + len(mass) - 1}: positions, velocities and masses must be finite")
        if (mass < 0).any():
            raise ValueError(f"particles {b}..{b + len(mass) - 1}: masses must be >= 0")
        self.store.write("pos", b, pos)
        self.store.write("vel", b, vel)
        self.store.write("mass", b, mass)
        ids = np.ascontiguousarray(ids, np.int64)
        index = np.arange(b, b + len(mass), dtype=np.int64) if index is None else np.ascontiguousarray(index, np.int64)
        self.store.write("id", b, ids)
        self.store.write("index", b, index)
        self._note_ids(b, ids, index)
        self.reset()

    def _note_ids(self, b: int, ids: np.ndarray, index: np.ndarray) -> None:
        """Keep _id_offset: the c with id = index + c (mod 2^64, as the sort adds them) over
        every block written so far, in order from 0; None once a block breaks it."""
        if b != self._ids_written or len(ids) == 0:
            self._id_offset, self._ids_written = None, -1  # out of order: never derived
            return
        c = int(ids[0] - index[0])  # int64 arithmetic wraps mod 2^64, as the sort's does
        if b == 0:
            self._id_offset = c
        if self._id_offset != c or not bool(np.all(ids - index == c)):
            self._id_offset = None
        self._ids_written = b + len(ids)

    def _filled(self) -> None:
        """Every particle written: ids that are the index plus a constant are read from it."""
        if self._id_offset is not None and self._ids_written == self.n:
            self.store.derive_from("id", "index", self._id_offset)

    # ---- the integrator ---------------------------------------------------------------------

    @property
    def options(self):
        """The integrator's options (``_core.PagedLeapfrogOptions``: presort, presort_run,
        tree_in_sort, kick_block, keep_free, prefetch_runs, dt), set in place."""
        return self._impl.options

    @property
    def dt(self) -> float:
        """The step of :meth:`evolve_to`'s grid."""
        return float(self._impl.options.dt)

    @dt.setter
    def dt(self, dt: float) -> None:
        if not (dt > 0 and math.isfinite(dt)):
            raise ValueError(f"dt: must be > 0, got {dt}")
        self._impl.options.dt = float(dt)

    @property
    def t(self) -> float:
        """The time: the grid's origin plus its whole steps of dt."""
        return float(self._impl.time)

    @t.setter
    def t(self, t: float) -> None:
        self._impl.time = float(t)  # a new grid origin

    @property
    def grid_origin(self) -> float:
        return float(self._impl.grid_origin)

    def checkpoint(self) -> dict:
        """The integrator's scalars a checkpoint keeps: steps, grid_origin."""
        steps, origin = self._impl.checkpoint()
        return {"steps": np.int64(steps), "grid_origin": float(origin)}

    @property
    def carried(self) -> list[str]:
        """The fields the sort carries: "id" too unless the store reads it from the index."""
        return list(self._impl.carried)

    @property
    def sorted(self) -> bool:
        """Whether the store is in curve order for the current positions."""
        return bool(self._impl.sorted)

    @property
    def prepared(self) -> dict:
        """What the last walk prepared for the next step: {"next_dt": its dt or None (the
        predicted kick-drift), "runs": whether it made the next sort's runs}."""
        return {"next_dt": self._impl.prepared_dt, "runs": bool(self._impl.prepared_runs)}

    def reset(self) -> None:
        """Forget what the integrator knows of the particles (its tree and cells, the runs and
        bounds it prepared): for a caller that reorders or rewrites them through the core."""
        self._impl.reset()

    def _report(self, report: dict, meter: _StageMeter) -> StepTimes:
        st = StepTimes.of_report(report, meter)
        self.tree_stats = TreeStats(**report["tree_stats"])
        st.steps, st.interactions = 1, int(self.tree_stats.pp_interactions + self.tree_stats.pc_interactions)
        self.last = st
        return st

    def sort(self) -> dict:
        """External sort of every particle into curve order (key, caller index), the tree's
        cells built for the next forces as it writes them (``options.tree_in_sort``): the
        sort's details (``tree_in_sort``, or why not in ``tree_declined``)."""
        return dict(self._impl.sort())

    def forces(self, next_dt: float | None = None) -> StepTimes:
        """Sort (if needed), build, moments and the walk: self-gravity of every particle into
        the store's ``acc`` and ``pot``. Returns the stages' times and page traffic.

        ``next_dt``: the step that follows (a run's first forces): the walk also checks that
        every force is finite (IntegrationError naming a particle otherwise), predicts the
        bounds of that step's kick-drift and makes its sort's runs, as each step's walk does
        for the next, so that the first :meth:`step` of ``next_dt`` rides its kick-drift on
        the sort and goes straight to the merge (N = 1e7 at 1/10: the first step ~2 s
        shorter, the first forces ~0.5 s longer; BENCHMARKS.md)."""
        meter = _StageMeter(self.scratch_device)
        return self._report(self._impl.forces(next_dt, meter), meter)

    def step(self, dt: float) -> StepTimes:
        """One kick-drift-kick leapfrog step of ``dt`` (as gravpipe's in-core leapfrog:
        vel += dt/2 acc; pos += dt vel; forces; vel += dt/2 acc), on the pages."""
        meter = _StageMeter(self.scratch_device)
        return self._report(self._impl.step(float(dt), meter), meter)

    def evolve_to(self, t: float) -> StepTimes:
        """Whole steps of ``dt`` to ``t``; off the grid, one shortened step to ``t`` that
        becomes the new grid origin (the in-core leapfrog's evolve_to), in one call of the
        integrator. Returns the sums over its steps (``steps``, their ``interactions``);
        :attr:`last` is the last step's."""
        before = self._impl.totals()
        meter = _StageMeter(self.scratch_device, per_call=False)
        self._impl.evolve_to(float(t), meter)
        after = self._impl.totals()
        done = StepTimes(**{k: after[k] - before[k] for k in ("kick_drift", "sort", "build", "moments",
                                                                "walk_forces", "bytes_read", "bytes_written",
                                                                "steps", "interactions")})
        meter.fill(done)
        if done.steps:
            last = self._impl.last()
            self.tree_stats = TreeStats(**last["tree_stats"])
            self.last = StepTimes.of_report(last)
            self.last.steps = 1
        return done

    def diagnostic_potential(self, theta: float, precision: str = "double") -> float:
        """The potential of every particle from a second, finer tree (opening angle
        ``theta``, ``precision`` list kernels, the run's other parameters) into the field
        ``pot_check``, leaving the run's ``acc`` and ``pot`` as they are; the store must be
        in curve order (it is after :meth:`forces` and :meth:`step`). Returns its seconds."""
        return float(self._impl.diagnostic_potential(float(theta), precision))

    def write_checkpoint(self, path: str | os.PathLike, parameters: dict, integrator_state: dict,
                         chunk: int = 1 << 20) -> None:
        """A checkpoint streamed from the pages (GADGET layout, atomic): the particles in the
        store's order, the per-particle state of :data:`CHECKPOINT_STATE`, the integrator's
        :meth:`checkpoint` and the caller's ``integrator_state`` (scalars, small arrays).
        Needs the forces of the current positions (the state after :meth:`forces` or
        :meth:`step`)."""
        from gravpipe import io
        from gravpipe.particles import Particles
        if not self._impl.has_forces:
            raise RuntimeError("write_checkpoint: the forces of the current positions are not evaluated")
        state = {**integrator_state, **self.checkpoint()}
        fields = ["pos", "vel", "mass", "id", *CHECKPOINT_STATE]
        with io.streamed_snapshot(path, self.n, self.t, parameters=parameters, integrator_state=state,
                                  per_particle_state=CHECKPOINT_STATE) as out:
            for _, blk in self.blocks(fields, chunk):
                out.write(Particles(blk["pos"], blk["vel"], blk["mass"], blk["id"]),
                          state={k: blk[k] for k in CHECKPOINT_STATE})

    # ---- reading back ---------------------------------------------------------------------------

    def blocks(self, fields: list[str], chunk: int = 1 << 20) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """(begin, {field: block}) over the store in its (curve) order, ``chunk`` at a time."""
        for b in range(0, self.n, chunk):
            e = min(self.n, b + chunk)
            yield b, {f: self.store.read(f, b, e) for f in fields}

    def write_snapshot(self, path: str | os.PathLike, chunk: int = 1 << 20,
                       parameters: dict | None = None) -> None:
        """A GADGET-layout snapshot of the store's particles (its curve order) at ``self.t``,
        streamed block by block (io.streamed_snapshot: temporary name, then renamed)."""
        from gravpipe import io
        from gravpipe.particles import Particles
        with io.streamed_snapshot(path, self.n, self.t, parameters=parameters) as out:
            for _, blk in self.blocks(["pos", "vel", "mass", "id"], chunk):
                out.write(Particles(blk["pos"], blk["vel"], blk["mass"], blk["id"]))

    def gather(self, name: str) -> np.ndarray:
        """A whole field in the caller's order (needs it in memory: tests and small runs)."""
        comps, dtype = (OOC_FIELDS.get(name) or self.store.field(name))
        out = np.empty((self.n, comps) if comps > 1 else self.n, dtype=np.float64 if dtype == "f64" else np.int64)
        for _, blk in self.blocks([name, "index"]):
            out[blk["index"]] = blk[name]
        return out

    # ---- lifetime ---------------------------------------------------------------------------

    @property
    def stats(self) -> dict:
        """The store's counters and budget figures."""
        return self.store.stats()

    def close(self) -> None:
        """Drop the integrator (its tree and the cells a sort built, which share the store) and
        remove the scratch files."""
        self._impl = _Closed()
        self.store.close()

    @property
    def closed(self) -> bool:
        return self.store.closed

    def __enter__(self) -> OutOfCore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OutOfCore(n={self.n}, store={self.store!r}, cache={format_bytes(self.plan.cache)})"


class _Closed:
    """Stands for the integrator of a closed OutOfCore: every use says so."""

    def __getattr__(self, name: str):
        raise ValueError("this out-of-core store is closed (its scratch file is gone)")
