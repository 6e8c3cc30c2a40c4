"""The out-of-core particle store (Salmon & Warren, seed 004): per-particle fields in
fixed-size pages of a scratch file, in curve order, read and written through an in-core page
cache that stays within a byte budget.

Each field is kept as structure-of-arrays columns (``pos`` is three columns x, y, z), each
column cut into pages of ``page_bytes`` (``page_bytes / 8`` particles), except that the
columns of a page group (:data:`PAGE_GROUPS`: pos and mass) share their pages, one after the
other (``page_bytes / 32`` particles of x, y, z and m a page). The cache evicts with
CLOCK (or LRU), writes dirty pages back with a CRC32C that is checked on every read from the
file (a mismatch raises :class:`~gravpipe.errors.ChecksumError` naming the page: corrupt data
is never used), and a background thread reads ahead along the curve so that I/O overlaps
compute. The scratch file is opened with ``O_DIRECT`` where the file system accepts it, so
the counted bytes really reach the device rather than the kernel's buffer cache; elsewhere
it is buffered and each page is synced and dropped after its I/O. ``io_mode`` /
``io_detail`` say which, never silently.

Typical use::

    from gravpipe.store import ParticleStore
    with ParticleStore("/scratch", n=10_000_000, memory_budget="2GiB") as s:
        s.write("pos", 0, pos)              # (n, 3) float64, particles in curve order
        x = s.read("pos", 1000, 2000)       # (1000, 3)
        print(s.stats()["bytes_swapped"])   # bytes read + written, as seed 004 reports
    # the scratch file is gone here, also when the block raised

Errors: :class:`~gravpipe.errors.MemoryBudgetError` (a ``ValueError``) when the budget is too
small, with the least budget that works; :class:`~gravpipe.errors.StoreError` for I/O
failures (the disk full, the file size limit) naming the file, the page and the reason.

A run killed by SIGKILL cannot remove its scratch files. Each store holds a lock (flock) on
its file while it lives; a new store first removes the files of its directory whose lock it
can take, their makers gone, and says so (:class:`~gravpipe.errors.StaleScratchWarning`,
naming the files and the pid that made them). The files of live runs sharing the directory
are never touched. On a file system without flock nothing is removed.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from types import TracebackType

import numpy as np

from gravpipe import _core
from gravpipe.errors import StaleScratchWarning

#: name -> (components, dtype) of the fields every store has; Hermite adds e.g.
#: ``extra_fields={"jerk": 3, "t": 1, "dt": 1}``.
DEFAULT_FIELDS: dict[str, tuple[int, str]] = {
    "pos": (3, "f64"), "vel": (3, "f64"), "mass": (1, "f64"), "id": (1, "i64"), "acc": (3, "f64"), "pot": (1, "f64"),
}
#: fields that share their pages (one page holds x[P], y[P], z[P], m[P] of the same P
#: particles): the tree's walk reads all four of a leaf, so it pins and loads one page, not
#: four, and a page spans a quarter of the particles a column's page would
#: (the external sort's twins, ``pos~`` and ``mass~``, share theirs the same way)
PAGE_GROUPS: dict[str, str] = {"pos": "body", "mass": "body"}


def check_scratch_dir(scratch: str | os.PathLike, what: str = "scratch") -> None:
    """ValueError naming ``scratch`` unless it is an existing directory: a scratch file is
    made inside a folder the user chose, never a folder made up from a mistyped path."""
    path = os.fspath(scratch)
    if not os.path.exists(path):
        raise ValueError(f"{what}: directory {path} does not exist (create it, or name another)")
    if not os.path.isdir(path):
        raise ValueError(f"{what}: {path} is not a directory")


def _warn_stale(removed: Sequence[tuple[str, int, int]]) -> None:
    """One line naming the scratch files of dead processes a new store removed, by pid."""
    if not removed:
        return
    by_pid: dict[int, list[str]] = {}
    for path, pid, size in removed:
        by_pid.setdefault(int(pid), []).append(f"{path} ({format_bytes(size)})")
    what = "; ".join(f"of process {pid}, which no longer runs: {', '.join(files)}" for pid, files in by_pid.items())
    warnings.warn(f"scratch: removed {len(removed)} stale scratch file{'s' if len(removed) != 1 else ''} {what}",
                  StaleScratchWarning, stacklevel=3)


def _page_group(name: str) -> str:
    if name.endswith("~") and name[:-1] in PAGE_GROUPS:
        return PAGE_GROUPS[name[:-1]] + "~"
    return PAGE_GROUPS.get(name, "")


DEFAULT_PAGE_BYTES = 1 << 20
#: frames (of both the particles' and the cells' caches) the automatic page size aims for
AUTO_PAGE_FRAMES = 1024


def page_bytes_for_budget(memory_budget: str | int) -> int:
    """The page size an out-of-core run takes when none is given: the largest power of two
    that leaves ~1024 frames in ``memory_budget``, between 4 KiB and 1 MiB. Small budgets need
    small pages: the walk's working set is a number of pages (N = 1e7 at a budget of 1/10 of
    the data: 1 MiB pages 10x slower than 64 KiB ones; BENCHMARKS.md)."""
    budget = parse_byte_size(memory_budget)
    page = 4096
    while page * 2 <= min(DEFAULT_PAGE_BYTES, budget // AUTO_PAGE_FRAMES):
        page *= 2
    return page
_DTYPES = {"f64": np.float64, "i64": np.int64}


def parse_byte_size(value: str | int) -> int:
    """Bytes from ``"4GiB"``, ``"512 MiB"``, ``"1.5GB"``, ``"64k"`` or a plain count (binary
    units KiB..TiB and K/M/G/T, decimal kB..TB, case-insensitive). The one parser behind
    every size option (``memory_budget=``, ``--memory-budget``). ValueError naming the text
    otherwise."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"byte size: expected a size such as '4GiB' or a byte count, got {value!r}")
    if isinstance(value, (int, np.integer)):
        if value < 0:
            raise ValueError(f"byte size: must be >= 0, got {value}")
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"byte size: expected a size such as '4GiB' or a byte count, got {value!r}")
    return int(_core.parse_byte_size(value))


def format_bytes(n: int) -> str:
    """``n`` bytes as ``"4 GiB"``, ``"1.50 MiB"``."""
    return str(_core.format_bytes(int(n)))


def _field_list(extra_fields: Mapping[str, int | tuple[int, str]] | None) -> list[tuple[str, int, str, str]]:
    """(name, components, dtype, page group) of the default fields and ``extra_fields``."""
    fields = dict(DEFAULT_FIELDS)
    for name, spec in (extra_fields or {}).items():
        comps, dtype = (spec, "f64") if isinstance(spec, (int, np.integer)) else spec
        if dtype not in _DTYPES:
            raise ValueError(f"extra_fields: field {name!r} dtype must be 'f64' or 'i64', got {dtype!r}")
        if name in fields:
            raise ValueError(f"extra_fields: field {name!r} exists already")
        fields[name] = (int(comps), dtype)
    return [(name, comps, dtype, _page_group(name)) for name, (comps, dtype) in fields.items()]


def page_count(n: int, page_bytes: int, extra_fields: Mapping[str, int | tuple[int, str]] | None = None) -> int:
    """Pages of the scratch file for ``n`` particles: a column of its own takes
    ceil(n / (page_bytes / 8)), a page group of w columns ceil(n / (page_bytes / 8 / w))
    (the store's own layout, ParticleStore::page_count)."""
    return int(_core.ParticleStore.page_count(int(n), _field_list(extra_fields), int(page_bytes)))


class ParticleStore:
    """Particles [0, n) in pages of a scratch file in ``scratch``, with an in-core cache
    within ``memory_budget``.

    Parameters
    ----------
    scratch : path
        An existing directory for the scratch file (``gravpipe-scratch-<pid>-XXXXXX``).
    n : int
        Number of particles.
    memory_budget : str or int
        Bytes for everything that grows with N: the page checksum table, the page cache
        (``cache_bytes``, by default half of what the table leaves) and what later charges
        the same budget (PagedParticles blocks; tree cells and lists). Too small:
        MemoryBudgetError with the least budget that works.
    page_bytes : str or int
        Page size, a multiple of 4096 (direct I/O alignment); default 1 MiB.
    extra_fields : {name: components or (components, "f64"|"i64")}
        Fields besides pos, vel, mass, id, acc, pot.
    cache_bytes : str or int, optional
        The page cache's share of the budget.
    eviction : "clock" or "lru"
    io : "auto", "direct" or "buffered"
        "auto": O_DIRECT where the file system accepts it, else buffered + fadvise (see
        ``io_mode`` / ``io_detail``); "direct" raises StoreError where it is refused.
    read_ahead : int
        Pages fetched ahead along a column by the background thread (0: none).
    threads : int, optional
        Threads that read at once (sizes the fewest frames); default OpenMP's maximum.
    """

    def __init__(self, scratch: str | os.PathLike, n: int, memory_budget: str | int = "4GiB",
                 page_bytes: str | int = DEFAULT_PAGE_BYTES,
                 extra_fields: Mapping[str, int | tuple[int, str]] | None = None,
                 cache_bytes: str | int | None = None, eviction: str = "clock", io: str = "auto",
                 read_ahead: int = 4, threads: int | None = None):
        if int(n) < 1:
            raise ValueError(f"n: must be >= 1, got {n}")
        if read_ahead < 0:
            raise ValueError(f"read_ahead: must be >= 0, got {read_ahead}")
        check_scratch_dir(scratch)
        self._fields = _field_list(extra_fields)
        self._core = _core.ParticleStore(
            os.fspath(scratch), int(n), self._fields, parse_byte_size(page_bytes), parse_byte_size(memory_budget),
            0 if cache_bytes is None else parse_byte_size(cache_bytes), eviction, io, int(read_ahead),
            int(threads or 0))
        _warn_stale(self._core.stale_files_removed)
        self.n = int(n)

    @staticmethod
    def least_budget(n: int, page_bytes: str | int = DEFAULT_PAGE_BYTES,
                     extra_fields: Mapping[str, int | tuple[int, str]] | None = None, read_ahead: int = 4,
                     threads: int | None = None) -> int:
        """The least ``memory_budget`` (bytes) a store of these parameters runs with."""
        return int(_core.ParticleStore.least_budget(int(n), _field_list(extra_fields), parse_byte_size(page_bytes),
                                                    int(read_ahead), int(threads or 0)))

    # ---- data --------------------------------------------------------------------------

    def field(self, name: str) -> tuple[int, str]:
        """(components, dtype) of a field; ValueError listing the fields for an unknown name."""
        for fname, comps, dtype, _ in self._fields:
            if fname == name:
                return comps, dtype
        raise ValueError(f"store: no field {name!r} (fields: {', '.join(f[0] for f in self._fields)})")

    @property
    def fields(self) -> list[str]:
        return [f[0] for f in self._fields]

    def derive_from(self, field: str, source: str, offset: int) -> None:
        """From now on ``field`` reads as ``source`` + ``offset`` (int64, wrapping mod 2^64),
        its own pages left as they are and no longer written. For an owner that knows the two
        agree for every particle and that reorders ``source`` with the particles: OutOfCore's
        ids that are the caller's index plus a constant, which the sort then neither carries
        nor writes (N = 1e7: 80 MB less to the disk a step). A write to ``field`` or to
        ``source`` through this store first writes the derived values into ``field``'s pages
        and ends it (as does :meth:`materialize`). The derivation lives in the core's store
        (ParticleStore::derive_from), where the paged leapfrog sees it too."""
        self.field(field), self.field(source)
        wrapped = int(offset) % (1 << 64)  # as int64 arithmetic wraps
        self._core.derive_from(field, source, wrapped - (1 << 64) if wrapped >= (1 << 63) else wrapped)

    def derive_curve_keys(self, field: str, pos: str, frame_lo: Sequence[float], frame_scale: float,
                          threads: int | None = None) -> None:
        """From now on ``field`` reads as the curve keys of ``pos`` in the frame (frame_lo,
        frame_scale) of a sort (the bits that sort gave them, as long as ``pos`` is not
        moved). Its own pages are left as they are; a write to it or to ``pos`` through this
        store first writes the keys into its pages and ends it (as does :meth:`materialize`,
        for readers of the pages such as the tree's build)."""
        self.field(field), self.field(pos)
        lo, scale = np.array(frame_lo, np.float64), float(frame_scale)
        if lo.shape != (3,) or not (np.isfinite(lo).all() and np.isfinite(scale) and scale >= 0):
            raise ValueError(f"store: a frame is a corner (3,) and a scale >= 0, got {frame_lo!r}, {frame_scale!r}")
        self._core.derive_curve_keys(field, pos, lo.tolist(), scale, int(threads or 0))

    @property
    def derived(self) -> dict[str, str]:
        """{field: what it reads as} of the fields that derive_from or derive_curve_keys made."""
        return dict(self._core.derivations())

    def forget_derivation(self, field: str) -> None:
        """End a derivation without writing anything: the owner has written the field's pages
        itself."""
        self._core.forget_derivation(field)

    def materialize(self, field: str) -> None:
        """Write a derived field's values into its pages and end its derivation (nothing for a
        field that is not derived)."""
        self._core.materialize(field)

    def write(self, field: str, begin: int, values: np.ndarray) -> None:
        """Particles [begin, begin + len(values)) of ``field``: shape (count, components), or
        (count,) for scalar fields; float64 (int64 for ``id``). Derived fields that read
        ``field`` (or are it) are written into their pages first."""
        comps, dtype = self.field(field)
        arr = np.ascontiguousarray(values, dtype=_DTYPES[dtype])
        want = (len(arr),) if comps == 1 else (len(arr), comps)
        if arr.ndim == 0 or arr.shape != want:
            raise ValueError(f"store: field {field!r} takes shape (count,{'' if comps == 1 else f' {comps}'}), "
                             f"got {np.shape(values)}")
        if dtype == "f64":
            self._core.write_f64(field, int(begin), arr)
        else:
            self._core.write_i64(field, int(begin), arr)

    def read(self, field: str, begin: int, end: int) -> np.ndarray:
        """Particles [begin, end) of ``field``: (end - begin, components) or (end - begin,)."""
        if end < begin:
            raise ValueError(f"store: end {end} < begin {begin}")
        return self._core.read_values(field, int(begin), int(end) - int(begin))

    def read_blocks(self, begins: Sequence[int], ends: Sequence[int], threads: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """x, y, z, m of blocks [begins[k], ends[k]) read through the core's PagedParticles
        accessor (the one the tree will use) by OpenMP threads in parallel, concatenated in k
        order."""
        return _core.store_read_blocks(
            self._core, np.ascontiguousarray(begins, np.int64), np.ascontiguousarray(ends, np.int64), int(threads or 0))

    def flush(self) -> None:
        """Write every dirty page to the scratch file."""
        self._core.flush()

    def cool(self, field: str, begin: int, end: int) -> None:
        """A sweep in particle order is done with particles [begin, end) of ``field``: the
        pages of its columns whose last particle lies there are the first to give way when a
        frame is needed (a hint for the cache; no value changes). The tree's results and the
        closing kick use it run by run, so that the pages they have finished writing do not
        crowd out the pages the walk still reads."""
        self._core.cool(field, int(begin), int(end))

    def evict_all(self) -> None:
        """Flush, then empty the cache: the next reads come from the file."""
        self._core.evict_all()

    def prefetch(self, pages: Sequence[int]) -> int:
        """Load scratch-file ``pages`` (numbers from :meth:`page_of`) into the cache ahead of
        their use, their reads in flight together (:attr:`batched_reads`), as the tree walk's
        prefetch does. Pages already resident are skipped; loading stops when the frames a
        prefetch may take (a quarter of the cache, never a page in use) run out. Returns the
        number of loads that failed: such a page is left out, and the read that wants it
        reads it again and raises the error (e.g. :class:`~gravpipe.errors.ChecksumError`)."""
        return int(self._core.prefetch_pages([int(p) for p in pages]))

    def clean_cold(self) -> int:
        """Write back one batch (up to 16) of the dirty pages next in line for eviction (not
        used since the eviction hand last passed them, unpinned), their writes in flight
        together; they stay in the cache, clean. The walk's prefetch thread does this while it
        has nothing to plan, so that the compute threads' evictions find clean frames instead
        of waiting for write-backs. Returns how many pages it wrote: 0 when none is dirty and
        cold, or on a buffered file (the kernel writes behind there already)."""
        return int(self._core.clean_cold())

    def write_through(self, begin: int, values: dict[str, np.ndarray], staging_pages: int = 8) -> None:
        """Write particles [begin, begin + count) of several fields at once, as the external
        sort's permute writes its output: ``values`` maps each field to an array shaped as
        :meth:`write` takes it. Where the columns given fill every slot of their pages (an
        ungrouped field's column, or every field of a page group such as pos with mass), the
        pages the range covers whole are laid out ``staging_pages`` at a time and go straight
        to the scratch file, their writes in flight together (counted as ``written_through``),
        taking no frame of the cache; partial pages at the ends, and fields that share their
        pages with fields not given, go through the cache as :meth:`write` does."""
        if staging_pages < 0:
            raise ValueError(f"store: staging_pages must be >= 0, got {staging_pages}")
        columns, rows, count = [], [], None
        for field, v in values.items():
            comps, dtype = self.field(field)
            arr = np.ascontiguousarray(v, dtype=_DTYPES[dtype])
            want_count = len(arr) if arr.ndim > 0 else -1
            if count is None:
                count = want_count
            want = (count,) if comps == 1 else (count, comps)
            if arr.ndim == 0 or arr.shape != want:
                raise ValueError(f"store: field {field!r} takes shape (count,{'' if comps == 1 else f' {comps}'}) "
                                 f"with the count of the other fields ({count}), got {np.shape(v)}")
            for c in range(comps):
                columns.append((field, c))
                rows.append((arr if comps == 1 else arr[:, c]).view(np.uint64))
        if not columns:
            return
        self._core.write_through(columns, int(begin), np.ascontiguousarray(np.stack(rows)), int(staging_pages))

    def page_of(self, field: str, component: int, index: int) -> int:
        """The scratch-file page holding component ``component`` of particle ``index``."""
        return int(self._core.page_of(field, int(component), int(index)))

    # ---- counters ----------------------------------------------------------------------

    def stats(self) -> dict[str, float | int | str]:
        """Counters since creation or reset_stats(): pages_read, bytes_read, pages_written,
        bytes_written, bytes_swapped (read + written, seed 004's figure), hits, misses,
        evictions, prefetched, prefetch_hits, checksum_checks, read_past and written_through
        (pages of those read and written past the cache frames: the walk's making of the next
        sort's runs), stall_seconds (compute threads
        waiting on I/O); and io_mode, io_detail, batched_reads, eviction, frames, pages,
        page_bytes, budget_bytes, budget_used_bytes, read_ahead_failures, and
        aio_contexts_made (Linux AIO contexts made for the batches of this store and of its
        trees' cells: made once and lent again, since destroying one waits ~20-55 ms)."""
        s = dict(self._core.counters())
        s.update(io_mode=self.io_mode, io_detail=self.io_detail, batched_reads=self.batched_reads, eviction=self._core.eviction, frames=self.frames,
                 pages=self.pages, page_bytes=self.page_bytes, budget_bytes=int(self._core.budget_total),
                 budget_used_bytes=int(self._core.budget_used), read_ahead_failures=int(self._core.read_ahead_failures()),
                 aio_contexts_made=int(self._core.aio_contexts_made))
        return s

    def reset_stats(self) -> None:
        """Zero the counters (e.g. at the start of each step, for bytes swapped per step)."""
        self._core.reset_counters()

    @property
    def path(self) -> str:
        """The scratch file."""
        return str(self._core.path)

    @property
    def io_mode(self) -> str:
        """"direct" (O_DIRECT) or "buffered" (page cache, synced and dropped per page)."""
        return str(self._core.io_mode)

    @property
    def io_detail(self) -> str:
        """Why the I/O mode is what it is (e.g. the file system's refusal of O_DIRECT)."""
        return str(self._core.io_detail)

    @property
    def batched_reads(self) -> str:
        """How batched page loads (the walk's prefetch, :meth:`prefetch`) reach the file:
        "Linux AIO, 16 deep" on a direct-I/O file, else "one page at a time (why)"."""
        return str(self._core.batched_reads)

    @property
    def in_memory(self) -> bool:
        """Whether the scratch file lies in memory (tmpfs or ramfs, such as /dev/shm): the
        tree walk then loads pages as it needs them, with no prefetch (nothing to hide)."""
        return bool(self._core.in_memory)

    @property
    def frames(self) -> int:
        return int(self._core.frames)

    @property
    def pages(self) -> int:
        return int(self._core.pages)

    @property
    def page_bytes(self) -> int:
        return int(self._core.page_bytes)

    def particles_per_page(self, field: str) -> int:
        """Particles a page of ``field`` holds: page_bytes / 8 / the columns that share its
        pages (4 for pos and mass, PAGE_GROUPS)."""
        return int(self._core.particles_per_page(field))

    # ---- lifetime ----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return bool(self._core.closed)

    def close(self) -> None:
        """Remove the scratch file and free the cache (the store is unusable afterwards).
        Dirty pages are dropped: the store is scratch, not an archive."""
        self._core.close()

    def __enter__(self) -> ParticleStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "ParticleStore(closed)"
        return (f"ParticleStore(n={self.n}, path={self.path!r}, io={self.io_mode}, frames={self.frames} x "
                f"{format_bytes(self.page_bytes)}, budget={format_bytes(int(self._core.budget_total))})")


def from_particles(particles, scratch: str | os.PathLike, chunk: int = 1 << 20, **store_kwargs
                   ) -> tuple[ParticleStore, np.ndarray]:
    """A store holding ``particles`` (a :class:`gravpipe.Particles`) in curve order, written
    in chunks of ``chunk`` particles. Returns (store, order): particle k of the store is
    ``particles[order[k]]``. The caller closes the store (or uses it in a ``with``)."""
    order = np.asarray(_core.curve_order(np.ascontiguousarray(particles.pos, np.float64)))
    store = ParticleStore(scratch, len(order), **store_kwargs)
    try:
        for b in range(0, len(order), chunk):
            idx = order[b:b + chunk]
            store.write("pos", b, particles.pos[idx])
            store.write("vel", b, particles.vel[idx])
            store.write("mass", b, particles.mass[idx])
            store.write("id", b, particles.id[idx])
    except BaseException:
        store.close()
        raise
    return store, order
