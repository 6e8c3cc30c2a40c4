"""The treecode out of core (Salmon & Warren, seed 004; DESIGN.md "What comes after"):
particles in the pages of a scratch store, in curve order, within a fixed memory budget.

A run with files, diagnostics and resume is :mod:`gravpipe.ooc_simulation` (what
``Simulation(..., memory_budget=, scratch=)`` builds); this module is its engine.

    with OutOfCore.from_particles(p, "/scratch", memory_budget="2GiB", eps=1/256) as ooc:
        ooc.forces(next_dt=1/128)        # sort + build + moments + walk: acc, pot on the pages
                                         # (and the first step's kick-drift and runs prepared)
        ooc.step(1/128)                  # one leapfrog step (kick-drift, sort, tree, kick): the
        ooc.step(1/128)                  # kick-drift rides on the sort, whose runs the last
                                         # walk made (ooc.presort)
        acc = ooc.gather("acc")          # (N,3) in the caller's order (tests; needs N in memory)

The same tree code as :class:`gravpipe.tree.Tree` (octree rule, moment arithmetic, walk, MAC,
kernels), reading particles through the store's accessor and the tree's cells from pages of
their own: for the same particles, parameters and thread count the forces and a leapfrog step
are the in-core ones bit for bit. The cells are built as the sort writes the particles
(``tree_in_sort``, streamed_tree_build.hpp): the merge's keys stream past a count of the
cells, the permute's positions and masses past the build of their records, so the tree reads
nothing back (N = 1e7: ~0.6 GB less a step), and the keys go no further: the store makes them
again from the positions in the sort's frame when they are read (ParticleStore.derive_curve_keys),
as it reads ids that are the caller's index plus a constant from the index (derive_from): 160 MB
less to the disk a step. Where the sort has no merge (one run) or the
budget cannot hold the build beside the sort, the tree is built after the sort from the pages,
depth first, subtrees on the threads; the sort's details say which (``tree_in_sort``,
``tree_declined``). Each sort is external: runs that fit the
sort buffer are sorted by (curve key, caller index) and merged, so the order is the in-core
stable sort's. The store keeps every field the sort carries twice (``pos`` and its twin
``pos~``) and the keys; on disk that is 192 bytes a particle.

A step passes over the pages as few times as it can (each pass reads or writes every
particle at the disk's ~1 GB/s): the closing kick is applied run by run as the walk writes
each run's forces, the disk otherwise idle while the walk computes; and the same hook
predicts the bounds of the positions the next step's kick-drift will give, so that a next
step with the same ``dt`` kicks and drifts the particles inside the external sort's first
pass, keyed in the predicted frame. The sort checks that frame bit for bit against the
drifted positions; a miss (a changed ``dt``, particles written in between) leaves the store
as it was and the step makes its separate kick-drift pass. Better still, the walk makes the
next sort's runs itself (``presort``, walk_runs.hpp): a worker kick-drifts, keys and sorts each
run whose particles the closing kick has finished, in the step's frame, which a step knows
before its drift ends (the old positions' bounds with room: curve_order.hpp, step_frame, as
the in-core leapfrog keys its steps); the next sort checks it and only merges. A run's first
forces do the same for its first step when they are told its ``dt``
(``forces(next_dt=dt)``, as :meth:`step` and the run loop call them), kicking nothing. None
of it changes a bit of the result.

The budget covers everything that grows with N: the page checksum tables, the page cache, the
tree's cells (128 bytes a cell, ~0.23 N cells for a Plummer sphere, ~0.35 N for a uniform cube
at n_leaf = 16, themselves paged through a cache of their own: :class:`PagedTree`), its groups
(88 bytes each), the sort buffer and the merge's run sources (2 bytes a particle), and each
thread's particle blocks copied out of the pages (:func:`copy_allowance`, ~96 KiB). By default
the particles' cache gets half of what the least needs leave beyond 4 MiB a thread kept for
the sort's buffer and the cells (:data:`SORT_AND_CELLS_ROOM`), and the tree's cell cache what
is left when the tree is built (the sort's buffer has gone back by then; a build riding on the
sort holds the groups, the cells' fewest frames and a page of records a level beside the
permute's buffers, and widens the cell cache when the sort ends). A budget that cannot
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
from types import TracebackType

import numpy as np

from gravpipe import _core
from gravpipe.backends import resolve_isa
from gravpipe.block_device import BlockDevice, DeviceCounters
from gravpipe.errors import MemoryBudgetError, MemoryBudgetWarning
from gravpipe.store import ParticleStore, format_bytes, page_bytes_for_budget, page_count, parse_byte_size
from gravpipe.tree_params import (DEFAULT_N_CRIT, DEFAULT_N_LEAF, DEFAULT_QUAD_TOL, DEFAULT_THETA, TreeStats,
                                  _check_precision, check_quad_tol, check_tree_params)

__all__ = ["OutOfCore", "StepTimes", "OOC_FIELDS", "CHECKPOINT_STATE", "plan_budget", "tree_keep_free"]

#: the fields the external sort carries (each with its twin "<name>~"), besides key and index;
#: "id" only when the ids are not the caller's index plus a constant (else the store reads
#: them from the sorted index: OutOfCore._carried, ParticleStore.derive_from)
CARRIED = ["pos", "vel", "mass", "id"]
#: fields of the out-of-core store beyond the store's defaults (pos, vel, mass, id, acc, pot)
OOC_FIELDS: dict[str, tuple[int, str]] = {
    "index": (1, "i64"), "key": (1, "i64"),
    "pos~": (3, "f64"), "vel~": (3, "f64"), "mass~": (1, "f64"), "id~": (1, "i64"),
    "index~": (1, "i64"), "key~": (1, "i64"),
    # the potential of the diagnostic tree (energy rows), beside the run's own acc and pot
    "pot_check": (1, "f64"),
}
#: the per-particle state of a checkpoint, beside pos, vel, mass, id: the forces of the last
#: evaluation (the next kick's), the caller's order (the sort's tie-break) and the sorted
#: curve keys (the store is in curve order at a checkpoint)
CHECKPOINT_STATE: dict[str, tuple[int, str]] = {"acc": (3, "f8"), "pot": (1, "f8"), "index": (1, "i8"),
                                                "key": (1, "i8")}
#: cells per particle the budget plans for, at n_leaf = 16 (measured: Plummer 0.23, uniform
#: cube 0.29-0.35); scaled by 16 / n_leaf
CELLS_PER_PARTICLE_AT_16 = 0.4
#: groups per particle the budget plans for, at n_crit = 256 (measured: Plummer 1e7 1/80,
#: uniform cube 1/64); scaled by 256 / n_crit
GROUPS_PER_PARTICLE_AT_256 = 1 / 48
#: particles per block of the leapfrog's kick and drift passes
KICK_BLOCK = 1 << 16
#: particles of a run the walk makes for the next sort (walk_runs.hpp): ~4 MB of the budget
PRESORT_RUN = 1 << 15


#: bytes of x, y, z and m pages the tree walk's working set holds for each compute thread and
#: the prefetch: below it every step re-reads pages many times over (N = 3e6, 2 threads, 32 KiB
#: pages: a walk of 6.8 s and 0.64 GiB read with a 16.5 MiB particle cache, 7.5 s and 1.3 GiB
#: with 9 MiB, 10 s and 3.9 GiB with 4 MiB; with 0.2 MiB, > 500 GiB)
WALK_CACHE_PER_THREAD = 3 << 20


def walk_least_cache(n: int, page_bytes: int, threads: int) -> int:
    """Bytes of particle cache below which the tree walk thrashes: its working set, or every
    page of x, y, z and m when they take less."""
    column_pages = math.ceil(n / (page_bytes // 8))
    return min(WALK_CACHE_PER_THREAD * (threads + 1), 4 * column_pages * page_bytes)


def copy_allowance(n_crit: int = DEFAULT_N_CRIT, n_leaf: int = DEFAULT_N_LEAF) -> int:
    """Bytes of particle blocks one thread holds copied out of the pages at most (those that
    straddle a page, or come when its share of pinned frames is full): its run's sinks and
    the one source piece it is gathering, ~96 KiB at the defaults (PagedTree::copy_allowance;
    until session 25 the walk kept every copy of a run to its end and 4 MiB a thread were
    planned without a bound)."""
    return int(_core.paged_tree_copy_allowance(int(n_crit), int(n_leaf)))


def tree_keep_free(n: int, threads: int, n_crit: int = DEFAULT_N_CRIT, n_leaf: int = DEFAULT_N_LEAF) -> int:
    """Bytes the tree's cell cache leaves to the walk's other charges: the threads' copied
    particle blocks and the prefetch's table of runs (24 bytes a run of ~2048 particles)."""
    return threads * copy_allowance(n_crit, n_leaf) + 24 * (n // 1024 + 1) + (1 << 20)


def _context_switches() -> int:
    """Context switches of this process so far, every thread, voluntary and not (getrusage)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


@dataclass
class StepTimes:
    """Wall seconds of one out-of-core step (or of forces()), by stage, and its page traffic."""
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
    #: (N = 1e7 at 1/10: ~4x as many on a virtual disk as with the scratch in RAM)
    stage_switches: dict = field(default_factory=dict)
    #: stage -> the scratch's block device's own counters over the same spans
    #: (block_device.DeviceCounters.as_dict(): requests, bytes, busy seconds, from
    #: /proc/diskstats, the whole device's); empty where the scratch has no block device
    #: (tmpfs) to measure
    stage_device: dict = field(default_factory=dict)
    device: str = ""            # the block device measured, e.g. "vda"; "" when none
    #: the store's stats() where the last stage ended: each stage's traffic runs from there to
    #: its own end, so that a load the read-ahead thread finishes between stages counts too
    _mark: dict | None = field(default=None, repr=False, compare=False)
    _cpu_mark: float = field(default=0.0, repr=False, compare=False)
    _switch_mark: int = field(default=0, repr=False, compare=False)
    _device: BlockDevice | None = field(default=None, repr=False, compare=False)
    _device_mark: DeviceCounters | None = field(default=None, repr=False, compare=False)

    @property
    def total(self) -> float:
        return self.kick_drift + self.sort + self.build + self.moments + self.walk_forces

    def start_traffic(self, stats: dict, device: BlockDevice | None = None) -> None:
        """The store's ``stats()`` where the first stage starts (unless one already did), and
        the scratch's block device (None: nothing to measure) whose counters the stages add."""
        if self._mark is None:
            self._mark = stats
            self._cpu_mark = time.process_time()
            self._switch_mark = _context_switches()
            if device is not None:
                self._device, self.device = device, device.name
                self._device_mark = device.counters()

    def add_stage_bytes(self, stage: str, after: dict, cells: tuple[int, int] = (0, 0)) -> None:
        """Add to ``stage_bytes[stage]`` the particle store's traffic from the last stage's end
        (start_traffic) to ``after`` (its ``stats()`` now) and ``cells`` (bytes read, written
        of the cell pages)."""
        got = self.stage_bytes.setdefault(stage, [0, 0])
        got[0] += int(after["bytes_read"]) - int(self._mark["bytes_read"]) + cells[0]
        got[1] += int(after["bytes_written"]) - int(self._mark["bytes_written"]) + cells[1]
        self._mark = after
        cpu = time.process_time()
        self.stage_cpu[stage] = self.stage_cpu.get(stage, 0.0) + cpu - self._cpu_mark
        self._cpu_mark = cpu
        switches = _context_switches()
        self.stage_switches[stage] = self.stage_switches.get(stage, 0) + switches - self._switch_mark
        self._switch_mark = switches
        if self._device is not None:
            now = self._device.counters()
            used = (now - self._device_mark).as_dict()
            self._device_mark = now
            had = self.stage_device.setdefault(stage, dict.fromkeys(used, 0))
            for k, v in used.items():
                had[k] += v


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


def block_allowance(n: int) -> int:
    """Bytes of the separate kick and drift passes' blocks for n particles (72 bytes a
    particle of a block of KICK_BLOCK, or of all n when fewer: paged_leapfrog.cpp charges
    the same). The threads' copied particle blocks live only in the walk, where
    :func:`tree_keep_free` holds them beside the tree; counting them here as well reserved
    them twice (until session 24: 4 MiB a thread that no phase used, taken from the
    particles' cache)."""
    return 72 * min(KICK_BLOCK, n)


@dataclass(frozen=True)
class _LeastBudget:
    """The parts of the least budget for n particles (bytes)."""
    least: int           # all of them together
    store: int           # the page tables and the store's fewest frames
    tables: int          # ... of which the page tables
    tree: int            # the tree's fewest cell frames and its groups
    groups: int          # groups planned
    sort: int            # the least sort buffer and its run sources
    blocks: int          # the kick passes' blocks (the copied particle blocks are the tree's, tree_keep_free)


def _least_budget(n: int, page_bytes: int, threads: int, n_leaf: int, n_crit: int, read_ahead: int) -> _LeastBudget:
    least_store = ParticleStore.least_budget(n, page_bytes, extra_fields=dict(OOC_FIELDS), read_ahead=read_ahead,
                                             threads=threads)
    nodes = math.ceil(CELLS_PER_PARTICLE_AT_16 * 16 / n_leaf * n) + 1
    groups = math.ceil(GROUPS_PER_PARTICLE_AT_256 * 256 / n_crit * n) + 1
    tree_least = int(_core.paged_tree_least_bytes(nodes, groups, page_bytes, threads))
    blocks = block_allowance(n)
    least_sort = int(_core.least_sort_buffer(n)) + 2 * n
    least_headroom = max(tree_least + tree_keep_free(n, threads, n_crit, n_leaf), least_sort) + blocks
    return _LeastBudget(least_store + least_headroom, least_store, _tables(n, page_bytes), tree_least, groups,
                        least_sort, blocks)


#: bytes a thread of a budget's spare room (beyond the least) that go to the sort's buffer
#: and the cells' cache before the particles' cache shares in it. N = 1e7 at 1/10, 2 threads,
#: alternating fresh stores (benchmarks/ooc/copy_allowance_ab.py, session 25): the 7.8 MiB
#: that bounding the copied blocks freed, given half to the particles' cache (+3.9 MiB, -3.9
#: of sort buffer), read 5% fewer bytes and made the step 0.3 s slower (median 12.92 against
#: 12.62 s; permute 1.08-1.12 against 0.90-0.99 s); kept for the sort and the cells it
#: leaves the particles' cache as it was.
SORT_AND_CELLS_ROOM = 4 << 20


def _cache_share(spare: int, threads: int) -> int:
    """The particles' cache's share (bytes) of a budget's spare room by default."""
    return max(0, spare - threads * SORT_AND_CELLS_ROOM) // 2


def walk_budget(n: int, page_bytes: int | None, threads: int, n_leaf: int, n_crit: int = 256,
                read_ahead: int = 4) -> int:
    """The least budget (bytes) whose default split gives the particles' cache the walk's
    working set (walk_least_cache); ``page_bytes`` None: pages sized from the budget, as
    OutOfCore sizes them when none is given."""
    budget = 0
    for _ in range(8):  # the page size follows the budget; a few rounds settle it
        page = page_bytes or page_bytes_for_budget(max(budget, 1))
        lb = _least_budget(n, page, threads, n_leaf, n_crit, read_ahead)
        short = walk_least_cache(n, page, threads) - (lb.store - lb.tables)
        want = lb.least + (threads * SORT_AND_CELLS_ROOM + 2 * short if short > 0 else 0)
        if want <= budget:
            break
        budget = want
    return budget


def plan_budget(n: int, memory_budget: int, page_bytes: int, threads: int, n_leaf: int, n_crit: int = 256,
                cache_bytes: int | None = None, read_ahead: int = 4, page_auto: bool = False) -> BudgetPlan:
    """The particles' cache and the sort buffer a budget leaves for ``n`` particles (see the
    module docstring). MemoryBudgetError naming the least budget when it cannot hold them;
    MemoryBudgetWarning naming a budget that avoids it when the default split leaves the
    walk less cache than its working set (``page_auto``: the page size was sized from the
    budget, and so would be for the budget named)."""
    lb = _least_budget(n, page_bytes, threads, n_leaf, n_crit, read_ahead)
    least, tables = lb.least, lb.tables
    if memory_budget < least:
        raise MemoryBudgetError(
            f"memory budget {format_bytes(memory_budget)} is too small for {n} particles out of core "
            f"(pages of {format_bytes(page_bytes)}, {threads} threads, n_leaf {n_leaf}, n_crit {n_crit}): the "
            f"page tables and the fewest frames take {format_bytes(lb.store)}, the tree's fewest cell frames "
            f"and its groups (~{lb.groups} planned) {format_bytes(lb.tree)}, the sort "
            f"{format_bytes(lb.sort)} (these two use the same room in turn), and the fixed allowances for the kick passes' blocks and "
            f"the threads' copied particle blocks {format_bytes(lb.blocks + tree_keep_free(n, threads, n_crit, n_leaf))}; the least "
            f"budget that works is {format_bytes(least)} ({least} bytes)", memory_budget, least)
    least_frames = lb.store - tables
    spare = memory_budget - least
    # by default the particles' cache takes half of what the least needs leave, once the
    # sort's buffer and the tree's cell cache have had SORT_AND_CELLS_ROOM a thread of it;
    # the other half widens those two as well
    cache = least_frames + _cache_share(spare, threads)
    if cache_bytes is not None:
        if cache_bytes > least_frames + spare:
            raise MemoryBudgetError(
                f"cache_bytes {format_bytes(cache_bytes)} leaves too little of the memory budget "
                f"{format_bytes(memory_budget)} for the tree and the sort: at most "
                f"{format_bytes(least_frames + spare)}", cache_bytes, least_frames + spare)
        cache = max(cache_bytes, least_frames)
    walk_least = walk_least_cache(n, page_bytes, threads)
    if cache_bytes is None and cache < walk_least:
        enough = walk_budget(n, None if page_auto else page_bytes, threads, n_leaf, n_crit, read_ahead)
        warnings.warn(
            f"memory budget {format_bytes(memory_budget)} leaves {n} particles a cache of "
            f"{format_bytes(cache)}, less than the {format_bytes(walk_least)} the tree walk's working set "
            f"needs ({format_bytes(WALK_CACHE_PER_THREAD)} of x, y, z and m pages for each of {threads} "
            f"thread{'s' if threads != 1 else ''} and the prefetch): every step will re-read the same pages "
            f"many times over. A budget of {format_bytes(enough)} ({enough} bytes) or more avoids it.",
            MemoryBudgetWarning, stacklevel=3)
    headroom = memory_budget - tables - cache
    # up to one run of the sort with the next kick-drift inside it (the steady-state step)
    one_run = int(_core.sort_run_bytes_per_particle(True)) * n
    sort_buffer = max(lb.sort - 2 * n, min(one_run, headroom - lb.blocks - 2 * n))
    return BudgetPlan(memory_budget, lb.store, lb.tree, headroom, sort_buffer, cache)


def _tables(n: int, page_bytes: int) -> int:
    # a CRC32C, a written flag and a frame a page (PageCache::kTableBytesPerPage)
    return page_count(n, page_bytes, OOC_FIELDS) * int(_core.page_table_bytes_per_page())


class OutOfCore:
    """N particles in an out-of-core store with the treecode's parameters (see the module
    docstring). Build with :meth:`from_particles` or :meth:`from_snapshot`; close (or use
    ``with``) to remove the scratch file, which also happens when construction fails.

    Parameters are those of :class:`gravpipe.tree.Tree` (eps, G, theta, quadrupole,
    quad_tol, n_leaf, n_crit, threads, precision, local_expansion, isa; alpha is not
    available out of core) plus ``scratch`` (directory of the scratch file),
    ``memory_budget`` ("4GiB", bytes), ``page_bytes`` (default: from the budget,
    :func:`gravpipe.store.page_bytes_for_budget`) and optional ``cache_bytes`` and
    ``sort_buffer`` (bytes of the external sort's runs; by default what the budget's
    headroom holds, capped at one run of every particle).
    """

    def __init__(self, n: int, scratch: str | os.PathLike, memory_budget: str | int, *, eps: float = 0.0,
                 G: float = 1.0, theta: float = DEFAULT_THETA, quadrupole: bool = True,
                 quad_tol: float = DEFAULT_QUAD_TOL, n_leaf: int = DEFAULT_N_LEAF, n_crit: int = DEFAULT_N_CRIT,
                 threads: int | None = None, precision: str = "mixed", local_expansion: bool = True,
                 isa: str = "auto", page_bytes: str | int | None = None, cache_bytes: str | int | None = None,
                 io: str = "auto", eviction: str = "clock", read_ahead: int = 4,
                 sort_buffer: str | int | None = None):
        #: whether a step's walk also makes the next sort's runs (walk_runs.hpp); changes
        #: when the disk works, never a bit of the results
        self.presort = True
        #: particles of each of those runs (rounded up to a whole number of pages)
        self.presort_run = PRESORT_RUN
        #: whether a sort also builds the tree's cells as it writes the particles
        #: (streamed_tree_build.hpp) instead of the tree reading them back after it; changes
        #: when the disk works, never a bit of the results
        self.tree_in_sort = True
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
        self.plan = plan_budget(self.n, parse_byte_size(memory_budget), page, self.threads, int(n_leaf), int(n_crit),
                                None if cache_bytes is None else parse_byte_size(cache_bytes), read_ahead,
                                page_auto=page_bytes is None)
        if sort_buffer is not None:
            want = parse_byte_size(sort_buffer)
            least_sort = int(_core.least_sort_buffer(self.n))
            if want < least_sort or want > self.plan.sort_buffer:
                raise ValueError(f"sort_buffer: must be in [{format_bytes(least_sort)}, "
                                 f"{format_bytes(self.plan.sort_buffer)}] here, got {format_bytes(want)}")
            self.plan = BudgetPlan(self.plan.budget, self.plan.tables_and_least_frames, self.plan.tree_least,
                                   self.plan.headroom, want, self.plan.cache)
        self.store = ParticleStore(scratch, self.n, self.plan.budget, page_bytes=page, extra_fields=OOC_FIELDS,
                                   cache_bytes=self.plan.cache, eviction=eviction, io=io, read_ahead=read_ahead,
                                   threads=self.threads)
        #: the scratch's block device, whose own counters each step's stages report
        #: (StepTimes.stage_device); None for a scratch in RAM or with no device to measure
        self.scratch_device = None if self.store.in_memory else BlockDevice.of_path(scratch)
        self._tree: object | None = None
        self._sorted = False
        self._have_forces = False
        # (dt, lo, hi): the bounds of the positions a kick-drift of dt will give, predicted
        # by the last closing kick; None when unknown or stale
        self._next_bounds: tuple[float, list[float], list[float]] | None = None
        # (lo, hi): the bounds of the positions in the store, as its last sort found them;
        # None when unknown (a fill, a checkpoint) until a sort or a step's pass finds them.
        # A step's drift starts from them, and its tree's frame follows (step_frame)
        self._bounds: tuple[list[float], list[float]] | None = None
        # the next sort's runs, made during the last walk (PagedTree.self_forces' presort),
        # with the carried fields and the store's writes they were made from; None when none
        self._presorted: tuple[dict, list[str], dict] | None = None
        # the tree's cells the last sort built (a complete _core.StreamedTreeBuild), with the
        # store's writes then; None when none (the tree then builds its own)
        self._built: tuple[object, dict] | None = None
        # c when every id is its particle's caller index + c (checked as blocks are written,
        # which must come in order from 0): the store then reads the ids from the index
        # (ParticleStore.derive_from), and the sort neither carries nor writes them; None
        # otherwise. _ids_written: particles whose ids were checked;
        # _id_writes: the store's count of "id" writes then (another write, not through
        # _write_block, and the ids are carried again: never overwritten with index + c)
        self._id_offset: int | None = None
        self._ids_written = 0
        self._id_writes = 0
        self.t = 0.0
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
        except BaseException:
            ooc.close()
            raise
        return ooc

    @classmethod
    def from_snapshot(cls, path: str | os.PathLike, scratch: str | os.PathLike, memory_budget: str | int,
                      chunk: int = 1 << 20, **kwargs) -> OutOfCore:
        """A store of the particles of a GADGET-layout HDF5 snapshot, read block by block
        (never N elements at once); ``index`` is the file's order."""
        import h5py
        with h5py.File(path, "r") as f:
            g = f["PartType1"]
            n = g["Coordinates"].shape[0]
            ooc = cls(n, scratch, memory_budget, **kwargs)
            try:
                for b in range(0, n, chunk):
                    e = min(n, b + chunk)
                    ooc._write_block(b, g["Coordinates"][b:e], g["Velocities"][b:e], g["Masses"][b:e],
                                     g["ParticleIDs"][b:e])
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
        self._sorted = False
        self._have_forces = False
        self._next_bounds = None
        self._bounds = None
        self._presorted = None

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
        self._id_writes = self.store.writes.get("id", 0)

    def _carried(self) -> list[str]:
        """The fields the sort carries: "id" too unless it is read from the index."""
        derived = (self._id_offset is not None and self._ids_written == self.n
                   and self.store.writes.get("id", 0) == self._id_writes)
        return [f for f in CARRIED if f != "id" or not derived]

    # ---- the stages ---------------------------------------------------------------------------

    def _presort_run(self) -> int:
        """Particles of a run the walk makes for the next sort: presort_run rounded up to the
        longest page's, so that runs start on page boundaries; 0 (none) for a store of fewer
        particles or a budget with too little room for the run's buffers."""
        per_page = max(self.store.particles_per_page(f) for f in ("pos", "vel", "mass", "id", "index", "key"))
        run = -(-int(self.presort_run) // per_page) * per_page
        # its buffers come out of the room the tree's cell cache takes: at most an eighth of it
        # (N = 1e7 at 1/10: 4.5 of ~65 MB); a budget near the least makes its runs in the sort
        if run >= self.n or int(_core.sort_run_writer_bytes(run)) > self.plan.headroom // 8:
            return 0
        return run

    def _usable_presorted(self, dt: float) -> dict | None:
        """The runs the last walk made, if the store is as they were made from: the same
        carried fields and no write to the store since (a user's write would make them stale)."""
        runs, self._presorted = self._presorted, None
        if runs is None:
            return None
        made, carried, writes = runs
        if made["dt"] != dt or carried != self._carried() or writes != dict(self.store.writes):
            return None
        return made

    def sort(self, kick_drift: tuple[float, float, list[float], list[float]] | None = None,
             drift_origin: tuple[list[float], list[float]] | None = None, presorted: dict | None = None) -> dict:
        """External sort of every particle into curve order (key, caller index). With
        ``kick_drift`` (h, dt, lo, hi) the sort first applies vel += h acc, pos += dt vel to
        each run it reads, keyed in the frame of the predicted bounds [lo, hi] of the drifted
        positions; if they miss (``"kick_drift_applied"`` False in the returned details) the
        store is left as it was, unsorted. ``drift_origin`` (lo, hi): the bounds of the
        positions a step's drift started from; the frame is then the step's (the in-core
        leapfrog's: curve_order.hpp, step_frame). With ``tree_in_sort`` the sort also builds
        the tree's cells as it writes the particles, for the next forces to take (the details
        say ``tree_in_sort``, or why not in ``tree_declined``)."""
        self._tree = None  # its cells' budget goes back first
        self._built = None
        p = self.params
        built = _core.StreamedTreeBuild(self.store._core, p["eps"], p["G"], p["theta"], p["quadrupole"],
                                        p["quad_tol"], p["n_leaf"], p["n_crit"], p["threads"]) \
            if self.tree_in_sort else None
        carried = self._carried()
        if "id" not in carried:  # the sort leaves the ids' pages behind: they read as index + c
            self.store.derive_from("id", "index", self._id_offset)
        made = None if presorted is None else (presorted["run"], presorted["frame_lo"], presorted["frame_scale"],
                                                presorted["h"], presorted["dt"], presorted["drifted_lo"],
                                                presorted["drifted_hi"])
        # with the tree built in the sort, the merge's keys go to the build and not to the disk:
        # the store makes them again from the positions when read (derive_curve_keys)
        write_keys = built is None
        d = dict(_core.store_sort_by_curve(self.store._core, carried, self.plan.sort_buffer, self.threads,
                                           kick_drift, write_keys=write_keys,
                                           drift_origin=drift_origin, presorted=made, tree=built))
        self._sorted = kick_drift is None or bool(d["kick_drift_applied"])
        if self._sorted and write_keys:
            self.store.forget_derivation("key")
        elif self._sorted:
            self.store.derive_curve_keys("key", "pos", d["frame_lo"], d["frame_scale"], self.threads)
        if built is not None:
            d.update(tree_in_sort=bool(built.complete), tree_declined=built.declined,
                     seconds_tree_count=built.seconds_count, seconds_tree_build=built.seconds_build,
                     tree_charged_bytes=int(built.charged))
            if built.complete and self._sorted:
                self._built = (built, dict(self.store.writes))
        if self._sorted:
            self._bounds = (list(d["bounds_lo"]), list(d["bounds_hi"]))
        return d

    def _position_bounds(self) -> tuple[list[float], list[float]]:
        """The bounds of the positions in the store (exact: a pass over them when the last
        sort's are not known, as after a checkpoint)."""
        if self._bounds is None:
            lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
            for _, blk in self.blocks(["pos"]):
                lo, hi = np.minimum(lo, blk["pos"].min(0)), np.maximum(hi, blk["pos"].max(0))
            self._bounds = (lo.tolist(), hi.tolist())
        return self._bounds

    def forces(self, next_dt: float | None = None) -> StepTimes:
        """Sort (if needed), build, moments and the walk: self-gravity of every particle into
        the store's ``acc`` and ``pot``. Returns the stages' times and page traffic.

        ``next_dt``: the step that follows (a run's first forces): the walk also checks that
        every force is finite (IntegrationError naming a particle otherwise), predicts the
        bounds of that step's kick-drift and makes its sort's runs, as each step's walk does
        for the next, so that the first :meth:`step` of ``next_dt`` rides its kick-drift on
        the sort and goes straight to the merge instead of a pass of its own and a sort that
        makes its runs (N = 1e7 at 1/10: the first step ~2 s shorter, the first forces
        ~0.5 s longer; BENCHMARKS.md, session 28)."""
        if next_dt is not None and not (next_dt > 0 and math.isfinite(next_dt)):
            raise ValueError(f"next_dt: must be > 0, got {next_dt}")
        st = StepTimes()
        before = self.store.stats()
        st.start_traffic(before, self.scratch_device)
        t0 = time.perf_counter()
        if not self._sorted:
            st.sort_detail = self.sort()
            st.add_stage_bytes("sort", self.store.stats())
        st.sort = time.perf_counter() - t0
        if next_dt is None:
            self._tree_forces(st)
        else:
            h = 0.5 * next_dt
            lo, hi = self._tree_forces(st, closing_kick=(h, self.t, h, next_dt), presort=self.presort, kick=False)
            self._next_bounds = (next_dt, lo, hi)
        self._traffic(st, before)
        self.last = st
        return st

    def _tree_forces(self, st: StepTimes, closing_kick: tuple[float, float, float, float] | None = None,
                     presort: bool = False, kick: bool = True):
        """Build, moments, walk into ``acc`` and ``pot``; with ``closing_kick`` (h, t, next_h,
        next_dt) also the kick of each run as the walk writes it: returns the predicted bounds
        (lo, hi) of the next kick-drift's positions (PagedTree.self_forces). With ``presort``
        the walk also makes the next sort's runs (kept in ``_presorted``). ``kick`` False: the
        closing kick kicks nothing, only checks the forces and predicts (forces(next_dt))."""
        p = self.params
        self._tree = None
        self._have_forces = False  # until this evaluation has written every particle's acc and pot
        self._presorted = None
        run = self._presort_run() if presort and closing_kick is not None and self._bounds is not None else 0
        st.start_traffic(self.store.stats(), self.scratch_device)
        keep_free = tree_keep_free(self.n, self.threads, p["n_crit"], p["n_leaf"]) + \
            (int(_core.sort_run_writer_bytes(run)) if run else 0)
        # the cells the sort built, unless the store was written since
        built, self._built = self._built, None
        if built is not None and built[1] != dict(self.store.writes):
            built = None
        if built is None:
            self.store.materialize("key")  # the tree's build reads the keys' pages
        tree = _core.PagedTree(self.store._core, p["eps"], p["G"], p["theta"], p["quadrupole"], p["quad_tol"],
                               p["n_leaf"], p["n_crit"], p["threads"], p["precision"], p["local_expansion"], p["isa"],
                               keep_free, built=None if built is None else built[0])
        s0 = tree.stats()
        st.build, st.moments = s0["seconds_build"], s0["seconds_moments"]
        self._tree = tree
        c0 = tree.cell_counters()
        st.add_stage_bytes("build_moments", self.store.stats(), (int(c0["bytes_read"]), int(c0["bytes_written"])))
        t1 = time.perf_counter()
        if run:
            carried = self._carried()
            presort_args = (run, carried, *self._bounds)
            next_bounds, made = tree.self_forces(closing_kick=closing_kick, presort=presort_args, kick=kick)
            if made is not None:
                self._presorted = (dict(made), carried, dict(self.store.writes))
        else:
            next_bounds = tree.self_forces(closing_kick=closing_kick, kick=kick)
        st.walk_forces = time.perf_counter() - t1
        self.tree_stats = TreeStats(**tree.stats())
        c = tree.cell_counters()
        st.add_stage_bytes("walk_forces", self.store.stats(),
                           (int(c["bytes_read"]) - int(c0["bytes_read"]), int(c["bytes_written"]) - int(c0["bytes_written"])))
        st.cell_bytes_read += int(c["bytes_read"])
        st.cell_bytes_written += int(c["bytes_written"])
        st.cell_cache_bytes = int(tree.cell_cache_bytes)
        st.cells = int(tree.cell_count)
        self._have_forces = True
        return next_bounds

    def step(self, dt: float) -> StepTimes:
        """One kick-drift-kick leapfrog step of ``dt`` (as gravpipe's in-core leapfrog:
        vel += dt/2 acc; pos += dt vel; forces; vel += dt/2 acc), block by block on the pages."""
        if not (dt > 0 and math.isfinite(dt)):
            raise ValueError(f"dt: must be > 0, got {dt}")
        if not self._have_forces:
            self.forces(next_dt=dt)  # checks them, and prepares this step's kick-drift and sort
        st = StepTimes()
        before = self.store.stats()
        st.start_traffic(before, self.scratch_device)
        h = 0.5 * dt
        origin = self._position_bounds()  # the drift's start: the step's frame follows
        predicted, self._next_bounds = self._next_bounds, None
        self._tree = None
        self._sorted = False  # the drift moves every particle
        presorted = self._usable_presorted(dt)
        if predicted is not None and predicted[0] == dt:
            t0 = time.perf_counter()
            st.sort_detail = self.sort(kick_drift=(h, dt, predicted[1], predicted[2]), drift_origin=origin,
                                       presorted=presorted)
            st.sort = time.perf_counter() - t0
            st.kick_drift_in_sort = bool(st.sort_detail["kick_drift_applied"])
            st.add_stage_bytes("sort", self.store.stats())
        if not st.kick_drift_in_sort:
            t0 = time.perf_counter()
            _core.store_kick_drift(self.store._core, h, dt, KICK_BLOCK)
            self._bounds = None  # moved
            st.kick_drift = time.perf_counter() - t0
            st.add_stage_bytes("kick_drift", self.store.stats())
            t0 = time.perf_counter()
            missed = st.sort  # a sort whose prediction missed counts with this one
            st.sort_detail = self.sort(drift_origin=origin)
            st.sort = missed + time.perf_counter() - t0
            st.add_stage_bytes("sort", self.store.stats())
        # the closing kick rides on the walk, which also predicts the next step's bounds
        lo, hi = self._tree_forces(st, closing_kick=(h, self.t + dt, h, dt), presort=self.presort)
        self._next_bounds = (dt, lo, hi)
        self.t += dt
        self._traffic(st, before)
        self.last = st
        return st

    def diagnostic_potential(self, theta: float, precision: str = "double") -> float:
        """The potential of every particle from a second, finer tree (opening angle
        ``theta``, ``precision`` list kernels, the run's other parameters) into the field
        ``pot_check``, leaving the run's ``acc`` and ``pot`` as they are; the store must be
        in curve order (it is after :meth:`forces` and :meth:`step`). Returns its seconds."""
        if not self._sorted:
            raise RuntimeError("diagnostic_potential: the store is not in curve order for the current "
                               "positions (evaluate forces first)")
        p = self.params
        t0 = time.perf_counter()
        self._tree = None  # the run's cells go back to the budget first
        self.store.materialize("key")  # the tree's build reads the keys' pages
        tree = _core.PagedTree(self.store._core, p["eps"], p["G"], float(theta), p["quadrupole"], p["quad_tol"],
                               p["n_leaf"], p["n_crit"], p["threads"], precision, p["local_expansion"], p["isa"],
                               tree_keep_free(self.n, self.threads, p["n_crit"], p["n_leaf"]))
        tree.self_forces(acc_field="", pot_field="pot_check")
        del tree
        return time.perf_counter() - t0

    def write_checkpoint(self, path: str | os.PathLike, parameters: dict, integrator_state: dict,
                         chunk: int = 1 << 20) -> None:
        """A checkpoint streamed from the pages (GADGET layout, atomic): the particles in the
        store's order, the per-particle state of :data:`CHECKPOINT_STATE` and the caller's
        ``integrator_state`` (scalars, small arrays). Needs the forces of the current
        positions (the state after :meth:`forces` or :meth:`step`)."""
        from gravpipe import io
        from gravpipe.particles import Particles
        if not (self._have_forces and self._sorted):
            raise RuntimeError("write_checkpoint: the forces of the current positions are not evaluated")
        fields = ["pos", "vel", "mass", "id", *CHECKPOINT_STATE]
        with io.streamed_snapshot(path, self.n, self.t, parameters=parameters, integrator_state=integrator_state,
                                  per_particle_state=CHECKPOINT_STATE) as out:
            for _, blk in self.blocks(fields, chunk):
                out.write(Particles(blk["pos"], blk["vel"], blk["mass"], blk["id"]),
                          state={k: blk[k] for k in CHECKPOINT_STATE})

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, scratch: str | os.PathLike, memory_budget: str | int,
                        chunk: int = 1 << 20, **kwargs) -> OutOfCore:
        """The store of a checkpoint written by :meth:`write_checkpoint`, read block by block:
        the state after its last force evaluation, so that the next :meth:`step` continues
        bit for bit. ``kwargs`` as for the constructor (the run's parameters)."""
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
                ooc.t = snap.time
            except BaseException:
                ooc.close()
                raise
        ooc._sorted = ooc._have_forces = True  # the state after forces(), as it was written
        return ooc

    def _traffic(self, st: StepTimes, before: dict) -> None:
        """Bytes read and written in the step: the particles' pages and the tree's cell pages,
        up to where its last stage ended (so that the stages' traffic adds up to it)."""
        after = st._mark if st._mark is not None else self.store.stats()
        st.bytes_read = int(after["bytes_read"]) - int(before["bytes_read"]) + st.cell_bytes_read
        st.bytes_written = int(after["bytes_written"]) - int(before["bytes_written"]) + st.cell_bytes_written

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
        """Drop the tree (and cells a sort built for it, which share the store) and remove the
        scratch files."""
        self._tree = None
        self._built = None
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
