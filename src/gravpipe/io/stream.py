"""Snapshots of any N, written and read block by block, never whole in memory.

The layout is ``write_snapshot``'s (GADGET-4, ``fields``), with chunked datasets of
``CHUNK_ROWS`` rows so that a block's slice touches only its own chunks; yt, pynbody and
``read_snapshot`` open these files like any other snapshot.

    from gravpipe import ic, io
    with io.streamed_snapshot("big.h5", n, time=0.0, parameters={"ic": "plummer"}) as out:
        for block in ic.plummer_blocks(n, seed=1):
            out.write(block)                     # blocks in id order, ids 0 .. n-1
    with io.open_blocks("big.h5") as snap:       # snap.n, snap.time, snap.parameters
        for block in snap.blocks(1 << 20):       # Particles of <= 2^20 each, in file order
            ...

Writing is atomic as for ``write_snapshot``: the file appears under its name only once
all n particles are written and synced; a writer that stops early (an exception, fewer
particles than announced) leaves no file behind.

A checkpoint of any N (the out-of-core run's) streams its per-particle integrator state the
same way: ``streamed_snapshot(..., integrator_state={...scalars...},
per_particle_state={"acc": (3, "f8"), "index": (1, "i8")})`` and
``out.write(block, state={"acc": rows, "index": rows})``. Those arrays go to ``/Integrator``
as flat datasets (n * width entries, attribute ``per_particle`` = width, as in multi-file
sets) and come back block by block with ``BlockReader.state_rows``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from gravpipe.io.atomic import atomic_path
from gravpipe.io.fields import (GRAVPIPE_PART_TYPE, HEADER_GROUP, HISTORY_PREFIX, INTEGRATOR_GROUP, PARAMETERS_GROUP,
                                PARTICLE_FIELDS, part_group_name)
from gravpipe.io.snapshot import (
    Scalar,
    SnapshotError,
    _attrs_to_dict,
    _check_key,
    _checked_dataset,
    _checked_state,
    _checked_part_type,
    _existing_file,
    _finite_float,
    _header_group,
    _ids_for_file,
    _masses_from_table,
    _open_snapshot,
    _parameters_for_file,
    _read_header,
    _write_attrs,
    _write_header,
    _write_integrator,
    check_state_finite,
    new_h5_file,
)
from gravpipe.particles import Particles

__all__ = ["CHUNK_ROWS", "BlockWriter", "BlockReader", "streamed_snapshot", "open_blocks"]

#: Rows per HDF5 chunk: 65536 particles are 1.5 MiB of Coordinates, large enough for
#: sequential disk bandwidth, small enough that a block's slice reads little beyond it.
CHUNK_ROWS = 1 << 16

# the fields a streamed snapshot holds, by Particles attribute (``fields.PARTICLE_FIELDS``)
_STREAMED = ("pos", "vel", "mass", "id")
#: attribute of an /Integrator dataset holding ``per_particle`` entries for each particle
#: (the name multi-file sets use for the state they split)
PER_PARTICLE = "per_particle"


class BlockWriter:
    """Appends blocks of particles to the datasets of one open snapshot file."""

    def __init__(self, group: h5py.Group, n: int, state_group: h5py.Group | None = None,
                 per_particle_state: Mapping[str, tuple[int, str]] | None = None):
        self.n = n
        self.written = 0
        self._datasets: dict[str, h5py.Dataset] = {}
        self._state: dict[str, tuple[h5py.Dataset, int]] = {}
        for name, (width, dtype) in (per_particle_state or {}).items():
            _check_key("per_particle_state", name)
            if not (isinstance(width, (int, np.integer)) and width >= 1):
                raise ValueError(f"per_particle_state[{name!r}]: width must be an integer >= 1, got {width!r}")
            ds = state_group.create_dataset(name, shape=(n * width,), dtype=np.dtype(dtype),
                                            chunks=(min(n, CHUNK_ROWS) * width,))
            ds.attrs[PER_PARTICLE] = int(width)
            self._state[name] = (ds, int(width))
        for field in PARTICLE_FIELDS:
            if field.source in _STREAMED:
                shape = field.shape(n)
                chunks = (min(n, CHUNK_ROWS),) + shape[1:]
                ds = group.create_dataset(field.name, shape=shape, dtype=field.dtype, chunks=chunks)
                ds.attrs["unit"] = field.unit
                ds.attrs["description"] = field.description
                self._datasets[field.source] = ds

    def write(self, block: Particles, state: Mapping[str, np.ndarray] | None = None) -> None:
        """Write ``block`` (a Particles set) as the next ``block.n`` particles of the file,
        and their rows of every per-particle state array announced (``state``: name ->
        array of block.n * width entries, or (block.n, width)).

        Raises TypeError for a non-Particles block, ValueError when it would go past the n
        announced, for a negative id (ParticleIDs are uint64), or for state arrays that are
        missing, unannounced or of the wrong size."""
        if not isinstance(block, Particles):
            raise TypeError(f"block: expected gravpipe.Particles, got {type(block).__name__}")
        start, stop = self.written, self.written + block.n
        if stop > self.n:
            raise ValueError(f"block of {block.n} particles after {start} written goes past the "
                             f"{self.n} particles announced for this snapshot")
        rows = self._state_rows(state or {}, block.n)
        arrays = {"pos": block.pos, "vel": block.vel, "mass": block.mass, "id": _ids_for_file(block.id)}
        for source, ds in self._datasets.items():
            ds[start:stop] = arrays[source]
        for name, (ds, width) in self._state.items():
            ds[start * width:stop * width] = rows[name]
        self.written = stop

    def _state_rows(self, state: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        unknown = sorted(set(state) - set(self._state))
        missing = sorted(set(self._state) - set(state))
        if unknown or missing:
            raise ValueError(f"state: per-particle arrays {missing} missing, {unknown} not announced "
                             f"(announced: {sorted(self._state)})")
        rows = {}
        for name, (ds, width) in self._state.items():
            a = np.asarray(state[name])
            if a.size != n * width:
                raise ValueError(f"state[{name!r}]: expected {n} x {width} entries for this block, got shape {a.shape}")
            rows[name] = a.reshape(-1).astype(ds.dtype, copy=False)
        return rows

    def close(self) -> None:
        """Close the datasets (the writer takes no more blocks): their handles must not
        outlive the file, whose close after a failed write leaves them unusable."""
        handles = [ds for ds in self._datasets.values()] + [ds for ds, _ in self._state.values()]
        self._datasets, self._state = {}, {}
        for ds in handles:
            ds.id.close()

    def check_complete(self) -> None:
        if self.written != self.n:
            raise ValueError(f"streamed snapshot: {self.written} of the {self.n} particles announced were "
                             "written; the file is not created")


@contextmanager
def streamed_snapshot(path: str | os.PathLike[str], n: int, time: float, *,
                      parameters: Mapping[str, Scalar] | None = None,
                      integrator_state: Mapping[str, np.ndarray | Scalar] | None = None,
                      per_particle_state: Mapping[str, tuple[int, str]] | None = None) -> Iterator[BlockWriter]:
    """Open a snapshot of ``n`` particles at ``time`` for writing block by block.

    Yields a :class:`BlockWriter`; the file is renamed into place at ``path`` when the
    block ends with all n particles written. ``parameters`` as for ``write_snapshot``.
    A checkpoint: ``integrator_state`` (scalars and small arrays, as for ``write_snapshot``)
    and ``per_particle_state`` ({name: (entries per particle, dtype)}, each block's rows
    given to ``BlockWriter.write``) go to ``/Integrator``.
    Errors as ``write_snapshot`` (ValueError before anything is written, OSError naming
    ``path`` and the reason); ValueError when fewer than n particles were written.
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n: expected an integer >= 1, got {n!r}")
    time_f = _finite_float("time", time)
    params = _parameters_for_file(parameters, time_f)
    state = None if integrator_state is None else _checked_state(integrator_state)
    clash = sorted(set(state or {}) & set(per_particle_state or {}))
    if clash:
        raise ValueError(f"integrator_state and per_particle_state both name {clash}")
    checkpoint = state is not None or bool(per_particle_state)
    with atomic_path(path) as tmp:
        # no chunk cache (rdcc_nbytes=0): each block reaches the file as it is written, and a
        # dataset's close has nothing left to write. HDF5 cannot survive a chunk flush that
        # fails on close (a full disk): the dataset's handle stays half closed and a later
        # close crashes the process (SIGSEGV in H5D_close)
        with new_h5_file(tmp, rdcc_nbytes=0) as f:
            _write_header(f.create_group(HEADER_GROUP), int(n), time_f)
            state_group = f.create_group(INTEGRATOR_GROUP, track_order=True) if checkpoint else None
            writer = BlockWriter(f.create_group(part_group_name(GRAVPIPE_PART_TYPE)), int(n), state_group,
                                 per_particle_state)
            if state:
                _write_integrator(state_group, state)
            _write_attrs(f.create_group(PARAMETERS_GROUP, track_order=True), params)
            try:
                yield writer
                writer.check_complete()
            finally:
                writer.close()  # while the file is open, however the body ended
            f.flush()


class BlockReader:
    """An open snapshot read in blocks: ``n``, ``time``, ``parameters`` and ``blocks(rows)``."""

    def __init__(self, f: h5py.File, path: Path, part_type: int, member: bool = False):
        self._f, self.path = f, path
        self._header = _header_group(f, path)
        self.n, self.time = _read_header(self._header, path, part_type, member)
        self.part_type = part_type
        where = f"{path}: /{part_group_name(part_type)}"
        group = f.get(part_group_name(part_type))
        if not isinstance(group, h5py.Group):
            raise SnapshotError(f"{where}: no such group (NumPart_ThisFile[{part_type}] = {self.n})")
        self._datasets = {field.source: _checked_dataset(group, field, self.n, where)
                          for field in PARTICLE_FIELDS if field.source in _STREAMED}
        for field in PARTICLE_FIELDS:
            if field.source in _STREAMED and field.required and self._datasets[field.source] is None:
                raise SnapshotError(f"{where}/{field.name} is missing ({field.description} are required)")
        self._where = where
        params = f.get(PARAMETERS_GROUP)
        self.parameters: dict[str, Any] = _attrs_to_dict(params.attrs) if params is not None else {}
        state = f.get(INTEGRATOR_GROUP)
        self._state_group = state if isinstance(state, h5py.Group) else None

    @property
    def integrator_scalars(self) -> dict[str, Any] | None:
        """The checkpoint's ``/Integrator`` attributes and its datasets that are not per
        particle (whole: they are small), or None for a snapshot."""
        g = self._state_group
        if g is None:
            return None
        out = _attrs_to_dict(g.attrs)
        out.update({k: ds[...] for k, ds in g.items() if isinstance(ds, h5py.Dataset) and PER_PARTICLE not in ds.attrs})
        for key, value in out.items():
            if not key.startswith(HISTORY_PREFIX):
                check_state_finite(f"{self.path}: /{INTEGRATOR_GROUP}/{key}", value)
        return out

    def state_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of the per-particle integrator array ``name``: (stop - start,)
        or (stop - start, width), its dtype. SnapshotError if it is missing or malformed."""
        g = self._state_group
        ds = g.get(name) if g is not None else None
        where = f"{self.path}: /{INTEGRATOR_GROUP}/{name}"
        if not isinstance(ds, h5py.Dataset) or PER_PARTICLE not in ds.attrs:
            raise SnapshotError(f"{where}: no per-particle integrator array of that name")
        width = int(ds.attrs[PER_PARTICLE])
        if width < 1 or ds.shape != (self.n * width,):
            raise SnapshotError(f"{where}: shape {ds.shape}, expected ({self.n} x {width},)")
        if not (0 <= start <= stop <= self.n):
            raise ValueError(f"rows [{start}, {stop}) outside [0, {self.n})")
        rows = ds[start * width:stop * width]
        check_state_finite(f"{where}, entries {start * width}..{stop * width - 1}", rows)
        return rows.reshape(-1, width) if width > 1 else rows

    def per_particle_names(self) -> list[str]:
        """The names of the checkpoint's per-particle integrator arrays (none for a snapshot)."""
        g = self._state_group
        return [] if g is None else [k for k, ds in g.items() if isinstance(ds, h5py.Dataset) and PER_PARTICLE in ds.attrs]

    def arrays(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Particles [start, stop) of the file (0 <= start <= stop <= n; none is fine) as
        arrays "pos" (m, 3), "vel" (m, 3), "mass" (m,) float64 and "id" (m,) int64."""
        if not (0 <= start <= stop <= self.n):
            raise ValueError(f"rows [{start}, {stop}) outside [0, {self.n})")
        data = {source: None if ds is None else ds[start:stop] for source, ds in self._datasets.items()}
        for source in ("pos", "vel", "mass"):
            if data[source] is not None:
                data[source] = data[source].astype(np.float64, copy=False)
        if data["mass"] is None:
            data["mass"] = _masses_from_table(self._header, self.part_type, stop - start, self._where)
        if data["id"] is None:
            data["id"] = np.arange(start, stop, dtype=np.int64)
        data["id"] = data["id"].astype(np.int64)
        return data

    def blocks(self, rows: int) -> Iterator[Particles]:
        """Particles of at most ``rows`` each, in file order (float datasets as float64)."""
        if isinstance(rows, (bool, np.bool_)) or not isinstance(rows, (int, np.integer)) or rows < 1:
            raise ValueError(f"rows: expected an integer >= 1, got {rows!r}")
        for start in range(0, self.n, int(rows)):
            yield self._block(start, min(start + int(rows), self.n))

    def _block(self, start: int, stop: int) -> Particles:
        data = self.arrays(start, stop)
        try:
            return Particles(data["pos"], data["vel"], data["mass"], data["id"])
        except ValueError as exc:
            raise SnapshotError(f"{self._where}, particles {start}..{stop - 1}: {exc}") from None


@contextmanager
def open_blocks(path: str | os.PathLike[str], *, part_type: int = GRAVPIPE_PART_TYPE,
                member: bool = False) -> Iterator[BlockReader]:
    """Open a snapshot (any GADGET-layout HDF5 file) to read it block by block; ``member``:
    one file of a multi-file set on its own (``io.sets.read_share`` reads sets so). Errors
    as ``read_snapshot``: FileNotFoundError, OSError naming the file, SnapshotError."""
    part_type = _checked_part_type(part_type)
    p = _existing_file(path)
    with _open_snapshot(p) as f:
        yield BlockReader(f, p, part_type, member)
