"""Multi-file snapshot sets (GADGET-4 ``NumFilesPerSnapshot`` > 1): one snapshot split over
P files, written by P MPI ranks at once.

Layout: a folder ``<base>/`` holding ``<base>.0.hdf5 .. <base>.(P-1).hdf5``, the naming
GADGET-4, yt and pynbody share (``yt.load("<base>/<base>.0.hdf5")`` and
``pynbody.load("<base>/<base>")`` open the whole set). Each member is a complete
GADGET-layout file: ``NumPart_ThisFile`` its share, ``NumPart_Total`` the set's, the same
``Time``, ``/Parameters`` in every member. File k holds a contiguous slice of the particles
in their order (``file_share``), so reading the members in order gives the particle order
back. Checkpoints: integrator arrays with one entry (or a fixed number of entries) per
particle are split like the particles (the dataset says so: attribute ``per_particle`` =
entries per particle); the rest of the state is whole in member 0.

Writing is atomic for the set: every rank writes its member into one temporary folder
beside the target; only when all ranks report success does rank 0 rename the folder into
place (an older set of that name is moved aside first and deleted after), so a reader
sees the old set or the complete new one, never a part. On any rank's failure the
temporary folder is removed and every rank raises the same error.

``read_snapshot``, ``read`` and ``describe`` here accept a single file, a set's folder, or
any member of a set (or the ``<base>`` path pynbody uses), and check that the set is
complete and consistent.
"""

from __future__ import annotations

import itertools
import operator
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

import gravpipe.io.snapshot as single
from gravpipe.io.atomic import _fsync_directory, _fsync_file
from gravpipe.io.fields import (
    GRAVPIPE_PART_TYPE,
    HEADER_GROUP,
    INTEGRATOR_GROUP,
    PARAMETERS_GROUP,
    PARTICLE_FIELDS,
    part_group_name,
)
from gravpipe.io.snapshot import Snapshot, SnapshotError
from gravpipe.particles import Particles

__all__ = ["SET_SUFFIX", "Share", "file_share", "member_path", "read_share", "write_set", "write_share",
           "write_share_blocks", "is_set", "set_members", "read_snapshot", "read", "describe"]

#: Members end in .hdf5: pynbody finds the members of a set by that name only.
SET_SUFFIX = ".hdf5"
_PER_PARTICLE = "per_particle"  # attribute of an integrator dataset split over the members


def file_share(n: int, rank: int, ranks: int) -> tuple[int, int]:
    """Particles [begin, end) that member ``rank`` of ``ranks`` holds: contiguous, in order."""
    return n * rank // ranks, n * (rank + 1) // ranks


def member_path(folder: str | os.PathLike[str], k: int) -> Path:
    """``<folder>/<base>.<k>.hdf5`` with base the folder's name."""
    folder = Path(folder)
    return folder / f"{folder.name}.{k}{SET_SUFFIX}"


# --------------------------------------------------------------------------------------
# writing


def write_set(comm: Any, folder: str | os.PathLike[str], particles: Particles, time: float, *,
              parameters: Mapping[str, Any] | None = None,
              integrator_state: Mapping[str, Any] | None = None) -> Path:
    """Write ``particles`` (all N, the same on every rank) as a set of P = comm size files in
    ``folder``, each rank its own share, atomically. Collective. Returns ``folder``.

    ``integrator_state`` as for ``write_snapshot``; arrays whose length is a multiple
    k N (k >= 1) of the particle number, other than ``history_*`` rows, are per particle
    (k entries each, particle-major as the core writes them) and split like the particles.
    Raises on every rank the first rank's error (OSError naming ``folder``, ValueError).
    """
    ranks, rank = comm.Get_size(), comm.Get_rank()
    b, e = file_share(particles.n, rank, ranks)

    def write_mine(path: Path) -> None:
        _write_member(path, particles, b, e, time, ranks, parameters, integrator_state, whole_state=rank == 0)

    return _write_collectively(comm, Path(folder), write_mine)


def write_share(comm: Any, folder: str | os.PathLike[str], pos: np.ndarray, vel: np.ndarray, mass: np.ndarray,
                ids: np.ndarray, time: float, *,
                parameters: Mapping[str, Any] | None = None,
                integrator_state: Mapping[str, Any] | None = None,
                per_particle_state: Mapping[str, np.ndarray] | None = None) -> Path:
    """Write a set of P = comm size files in ``folder`` from the particles each rank holds:
    member k holds rank k's particles (pos (n, 3), vel (n, 3), mass (n,), ids (n,) int64;
    any n, 0 included), in their order;
    ``NumPart_Total`` is the sum over the ranks. Atomic for the set and collective, as
    :func:`write_set`; nothing of the whole set is held on any rank.

    ``integrator_state``: the state of the whole run (scalars, small arrays, history
    rows), written into member 0 (rank 0's is the one written). ``per_particle_state``:
    name -> this rank's rows ((n,) or (n, width)), written into every member with the
    attribute ``per_particle`` = width; every rank must give the same names and widths.
    Arrays of the wrong shape raise ValueError on every rank (the set is not written).
    """
    n = len(mass)
    state = dict(per_particle_state or {})
    # the rows' own dtype is the dataset's; their shape is checked with the block
    widths = {k: (int(np.shape(v)[1]) if np.ndim(v) == 2 else 1, np.asarray(v).dtype) for k, v in state.items()}
    whole_share = {"pos": pos, "vel": vel, "mass": mass, "id": ids, **state}
    # the in-memory share is the one block of the block-wise writer: one implementation
    return write_share_blocks(comm, folder, n, lambda: iter((whole_share,)), time, parameters=parameters,
                              integrator_state=integrator_state, per_particle_state_widths=widths)


#: How a per-particle state array is announced to :func:`write_share_blocks`: entries per
#: particle, or (entries per particle, dtype).
StateWidth = int | tuple[int, Any]


def write_share_blocks(comm: Any, folder: str | os.PathLike[str], n: int,
                       blocks: Callable[[], Iterable[Mapping[str, np.ndarray]]], time: float, *,
                       parameters: Mapping[str, Any] | None = None,
                       integrator_state: Mapping[str, Any] | None = None,
                       per_particle_state_widths: Mapping[str, StateWidth] | None = None) -> Path:
    """:func:`write_share` for a share that is never whole in memory: this rank's ``n``
    particles (any n, 0 included) come from ``blocks()``, an iterable of dicts in particle
    order, each of m particles (m >= 0; the m add up to n):

    - "pos" (m, 3), "vel" (m, 3): N-body length and velocity, written as float64;
    - "mass" (m,): N-body mass, float64; "id" (m,) integers >= 0 (stored as uint64);
    - one array per name of ``per_particle_state_widths``: (m,) or (m, width) rows.

    ``per_particle_state_widths``: name -> entries per particle (``width``), or
    (width, dtype); the dataset's dtype is the one given, else the first block's array's
    (float64 when the share has no block), and every block's array must cast safely to it.
    Every rank must announce the same names and widths.

    The files are those ``write_share`` writes from the concatenated blocks: the same
    datasets (created with their final shapes, contiguous and uncompressed, and filled
    block by block), dtypes, attributes and values. Memory: one block at a time.
    Collective and atomic for the set as :func:`write_set`; on every rank the first rank's
    error: ValueError when the blocks add up to another n, a block lacks a field or has
    one not announced, or an array has the wrong shape; OSError naming ``folder``.
    """
    from mpi4py import MPI

    ranks, rank = comm.Get_size(), comm.Get_rank()
    # a bad n is raised inside the set protocol (below), so no rank waits in a collective
    # the failing rank never enters; it counts 0 towards NumPart_Total meanwhile
    count = _share_count(n)
    total = comm.allreduce(count if isinstance(count, int) else 0, op=MPI.SUM)

    def write_mine(path: Path) -> None:
        if not isinstance(count, int):
            raise count
        announced = _announced_state(per_particle_state_widths)
        whole = None if rank != 0 or integrator_state is None else single._checked_state(integrator_state)
        clash = sorted(set(whole or {}) & set(announced))
        if clash:
            raise ValueError(f"integrator_state and the per-particle state both name {clash}")
        t = single._finite_float("time", time)
        params = single._parameters_for_file(parameters, t)
        source = iter(blocks())
        # the first block is read before the file is made: it gives the dtype of a
        # per-particle array whose dtype was not announced
        first = next(source, None)
        dtypes = {k: np.dtype(dt) if dt is not None else _first_dtype(first, k) for k, (_, dt) in announced.items()}
        with h5py.File(path, "w") as f:
            single._write_header(f.create_group(HEADER_GROUP), count, t, n_total=total, n_files=ranks)
            particles: dict[str, h5py.Dataset] = {}
            rows: dict[str, tuple[h5py.Dataset, int]] = {}
            written = 0
            try:
                particles.update(_create_particle_datasets(f.create_group(part_group_name(GRAVPIPE_PART_TYPE)),
                                                           count))
                single._write_attrs(f.create_group(PARAMETERS_GROUP, track_order=True), params)
                if whole is not None or announced:
                    group = f.create_group(INTEGRATOR_GROUP, track_order=True)
                    for key, value in (whole or {}).items():
                        if isinstance(value, np.ndarray):
                            group.create_dataset(key, data=value, dtype=value.dtype)
                        else:
                            group.attrs[key] = value
                    for key, (width, _) in announced.items():
                        # flat, n * width entries particle-major, as write_set splits the core's arrays
                        ds = group.create_dataset(key, shape=(count * width,), dtype=dtypes[key])
                        ds.attrs[_PER_PARTICLE] = width
                        rows[key] = (ds, width)
                for k, block in enumerate(itertools.chain(() if first is None else (first,), source)):
                    arrays = _checked_block(block, k, written, count, announced, dtypes)
                    m = len(arrays["mass"])
                    for key, ds in particles.items():
                        ds[written:written + m] = arrays[key]
                    for key, (ds, width) in rows.items():
                        ds[written * width:(written + m) * width] = arrays[key].reshape(-1)
                    written += m
            finally:
                # the datasets' handles are closed while the file is open, however the
                # blocks ended: none may outlive a file whose close failed (BlockWriter.close)
                for ds in [*particles.values(), *(ds for ds, _ in rows.values())]:
                    ds.id.close()
            if written != count:
                raise ValueError(f"the blocks hold {written} particles, not the n = {count} announced for this "
                                 "rank's share")
            f.flush()
        _fsync_file(path)  # durable before the set is renamed into place

    return _write_collectively(comm, Path(folder), write_mine)


#: The particle fields of a share, by their key in a block (``fields.PARTICLE_FIELDS``'s source).
_SHARE_FIELDS = ("pos", "vel", "mass", "id")


def _share_count(n: object) -> int | ValueError:
    """``n`` as an int >= 0, or the ValueError to raise."""
    if isinstance(n, (bool, np.bool_)):
        return ValueError(f"n: expected an integer >= 0, got {n!r}")
    try:
        value = operator.index(n)  # numpy integers yes, 3.0 and "3" no
    except TypeError:
        return ValueError(f"n: expected an integer >= 0, got {n!r}")
    return value if value >= 0 else ValueError(f"n: expected an integer >= 0, got {value}")


def _announced_state(widths: Mapping[str, StateWidth] | None) -> dict[str, tuple[int, Any]]:
    """name -> (width, dtype or None) of the per-particle state arrays announced."""
    out: dict[str, tuple[int, Any]] = {}
    for name, spec in (widths or {}).items():
        single._check_key("per_particle_state", name)
        width, dtype = spec if isinstance(spec, tuple) else (spec, None)
        if isinstance(width, (bool, np.bool_)) or not isinstance(width, (int, np.integer)) or width < 1:
            raise ValueError(f"per_particle_state[{name!r}]: width must be an integer >= 1, got {width!r}")
        if dtype is not None and np.dtype(dtype).kind not in "biufc":
            raise ValueError(f"per_particle_state[{name!r}]: dtype must be bool, integer, float or complex, "
                             f"got {np.dtype(dtype)}")
        out[name] = (int(width), dtype)
    return out


def _first_dtype(block: Mapping[str, np.ndarray] | None, name: str) -> np.dtype:
    """The dtype of ``name`` in the share's first block; float64 without one (or without
    that array, which the block check then reports)."""
    if not isinstance(block, Mapping) or name not in block:
        return np.dtype(np.float64)
    return np.asarray(block[name]).dtype


def _create_particle_datasets(group: h5py.Group, n: int) -> dict[str, h5py.Dataset]:
    """The datasets ``snapshot._write_particle_group`` makes for pos, vel, mass and id
    (name, dtype, shape for n particles, unit and description), created empty to be
    filled by slices. Like those they are contiguous and uncompressed (h5py's default
    without ``chunks``): a file written block-wise is the same file."""
    out = {}
    for field in PARTICLE_FIELDS:
        if field.source in _SHARE_FIELDS:
            ds = group.create_dataset(field.name, shape=field.shape(n), dtype=field.dtype)
            ds.attrs["unit"] = field.unit
            ds.attrs["description"] = field.description
            out[field.source] = ds
    return out


def _checked_block(block: object, k: int, start: int, n: int, announced: Mapping[str, tuple[int, Any]],
                   dtypes: Mapping[str, np.dtype]) -> dict[str, np.ndarray]:
    """Block ``k`` of a share (its particles from ``start`` on) as arrays ready for the
    datasets: pos, vel, mass float64, id uint64, each state array in its dataset's dtype.
    ValueError naming the block when it lacks a field, has one not announced, has arrays
    of the wrong shape or dtype, or would go past the share's n particles."""
    if not isinstance(block, Mapping):
        raise ValueError(f"block {k}: expected a dict of arrays, got {type(block).__name__}")
    missing = [key for key in (*_SHARE_FIELDS, *announced) if key not in block]
    unknown = sorted(key for key in block if key not in _SHARE_FIELDS and key not in announced)
    if missing or unknown:
        raise ValueError(f"block {k}: fields {missing} missing, {unknown} not announced (a block holds "
                         f"{list(_SHARE_FIELDS)} and the per-particle state {list(announced)})")
    mass = np.asarray(block["mass"])
    m = mass.shape[0] if mass.ndim == 1 else -1
    if m < 0:
        raise ValueError(f"block {k}: 'mass' has shape {mass.shape}, expected (m,)")
    if start + m > n:
        raise ValueError(f"block {k}: its {m} particles after {start} go past the n = {n} announced for this "
                         "rank's share")
    where = f"block {k} (particles {start}..{start + m - 1} of the share)"
    expected = {"pos": [(m, 3)], "vel": [(m, 3)], "mass": [(m,)], "id": [(m,)]}
    for key, (width, _) in announced.items():
        expected[key] = [(m,), (m, 1)] if width == 1 else [(m, width)]
    out: dict[str, np.ndarray] = {}
    for key, shapes in expected.items():
        a = np.asarray(block[key])
        if a.shape not in shapes and not (m == 0 and a.size == 0):  # an empty share: any empty array
            raise ValueError(f"{where}: {key!r} has shape {a.shape}, expected "
                             f"{' or '.join(str(s) for s in shapes)}")
        out[key] = a.reshape(shapes[0])
    for key in announced:
        if not np.can_cast(out[key].dtype, dtypes[key], "safe"):
            raise ValueError(f"{where}: {key!r} is {out[key].dtype}, which does not cast safely to the dataset's "
                             f"{dtypes[key]} (the dtype announced, else the first block's)")
    for field in PARTICLE_FIELDS:
        if field.source in ("pos", "vel", "mass"):
            out[field.source] = np.asarray(out[field.source], dtype=field.dtype)  # as _write_particle_group
    try:
        out["id"] = single._ids_for_file(np.asarray(out["id"], np.int64))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return out


def _write_collectively(comm: Any, folder: Path, write_mine: Any) -> Path:
    """The set protocol: rank 0 makes a temporary folder, every rank writes its member there
    (``write_mine(path)``), and only when all succeeded rank 0 renames the folder into place.
    Raises on every rank the first rank's error (OSError naming ``folder``, ValueError)."""
    ranks, rank = comm.Get_size(), comm.Get_rank()
    tmp = None
    error: BaseException | None = None
    if rank == 0:
        try:
            tmp = _make_temporary_folder(folder)
        except OSError as exc:
            error = exc
    tmp, error = comm.bcast((tmp, error), root=0)  # small control messages: pickling is fine
    if error is not None:
        raise error
    try:
        write_mine(tmp / f"{folder.name}.{rank}{SET_SUFFIX}")
    except (OSError, ValueError) as exc:
        error = exc
    errors = comm.allgather(None if error is None else (type(error), str(error)))
    failed = [(r, err) for r, err in enumerate(errors) if err is not None]
    if rank == 0:
        if failed:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            try:
                _move_into_place(tmp, folder)
            except OSError as exc:
                failed = [(0, (type(exc), str(exc)))]
                shutil.rmtree(tmp, ignore_errors=True)
    failed = comm.bcast(failed, root=0)
    if failed:
        r, (kind, text) = failed[0]
        error = (kind if issubclass(kind, (OSError, ValueError)) else OSError)(
            f"{folder}: the set was not written (rank {r}: {text})")
        error.on_every_rank = True  # raised alike on every rank: said once (gravpipe run)
        raise error
    return folder


def _make_temporary_folder(folder: Path) -> Path:
    if not folder.parent.is_dir():
        raise FileNotFoundError(f"{folder}: the folder {folder.parent} does not exist")
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    tmp.mkdir()
    return tmp


def _move_into_place(tmp: Path, folder: Path) -> None:
    """Rename the finished set onto ``folder``; an older set there is moved aside first."""
    _fsync_directory(tmp)
    old = None
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old-{secrets.token_hex(4)}")
        os.replace(folder, old)
    os.replace(tmp, folder)
    _fsync_directory(folder.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_member(path: Path, particles: Particles, b: int, e: int, time: float, n_files: int,
                  parameters: Mapping[str, Any] | None, state: Mapping[str, Any] | None, *,
                  whole_state: bool) -> None:
    n = particles.n
    arrays = {"pos": particles.pos[b:e], "vel": particles.vel[b:e], "mass": particles.mass[b:e],
              "id": single._ids_for_file(particles.id[b:e])}
    params = single._parameters_for_file(parameters, single._finite_float("time", time))
    checked = None if state is None else single._checked_state(state)
    with h5py.File(path, "w") as f:
        single._write_header(f.create_group(HEADER_GROUP), e - b, single._finite_float("time", time),
                             n_total=n, n_files=n_files)
        single._write_particle_group(f.create_group(part_group_name(GRAVPIPE_PART_TYPE)), arrays)
        single._write_attrs(f.create_group(PARAMETERS_GROUP, track_order=True), params)
        if checked is not None:
            _write_state_share(f.create_group(INTEGRATOR_GROUP, track_order=True), checked, n, b, e, whole_state)
        f.flush()
    _fsync_file(path)  # durable before the set is renamed into place


def _per_particle_width(key: str, value: Any, n: int) -> int:
    """Entries per particle of a state array split over the members, 0 if it is not split."""
    if not isinstance(value, np.ndarray) or key.startswith("history_") or value.ndim == 0 or n < 2:
        return 0
    length = value.shape[0]
    return length // n if length >= n and length % n == 0 else 0


def _write_state_share(group: h5py.Group, state: dict[str, Any], n: int, b: int, e: int, whole: bool) -> None:
    for key, value in state.items():
        width = _per_particle_width(key, value, n)
        if width:
            ds = group.create_dataset(key, data=value[b * width:e * width], dtype=value.dtype)
            ds.attrs[_PER_PARTICLE] = width
        elif whole:
            if isinstance(value, np.ndarray):
                group.create_dataset(key, data=value, dtype=value.dtype)
            else:
                group.attrs[key] = value


# --------------------------------------------------------------------------------------
# reading


def set_members(path: str | os.PathLike[str]) -> list[Path] | None:
    """The members of the set that ``path`` names (its folder, any member, or the
    ``<folder>/<base>`` path), in order; None when ``path`` is a single-file snapshot.
    Raises SnapshotError naming a missing member, FileNotFoundError when nothing is there."""
    first = _first_member(Path(path))
    if first is None:
        return None
    with single._open_snapshot(first) as f:
        header = single._header_group(f, first)
        n_files = int(single._scalar_attr(header, "NumFilesPerSnapshot", f"{first}: /{HEADER_GROUP}",
                                          required=True))
    folder = first.parent
    members = [folder / f"{first.name[: -len('.0' + SET_SUFFIX)]}.{k}{SET_SUFFIX}" for k in range(n_files)]
    missing = [m.name for m in members if not m.is_file()]
    if missing:
        raise SnapshotError(f"{folder}: incomplete set of {n_files} files (NumFilesPerSnapshot): "
                            f"missing {', '.join(missing[:5])}")
    extra = sorted(p.name for p in folder.glob(f"{first.name[: -len('.0' + SET_SUFFIX)]}.*{SET_SUFFIX}")
                   if p not in members)
    if extra:
        raise SnapshotError(f"{folder}: files beyond the set's {n_files} (NumFilesPerSnapshot): {', '.join(extra[:5])}")
    return members


def is_set(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a multi-file set (its folder, a member or the base path)."""
    try:
        return _first_member(Path(path)) is not None
    except (OSError, SnapshotError):
        return False


def _first_member(p: Path) -> Path | None:
    """Member 0 of the set ``p`` names, or None for a single file."""
    if p.is_dir():
        zeros = sorted(p.glob(f"*.0{SET_SUFFIX}"))
        if len(zeros) != 1:
            raise SnapshotError(f"{p}: is a directory; read as a multi-file set it needs exactly one "
                                f"<name>.0{SET_SUFFIX} in it, found {len(zeros)}")
        return zeros[0]
    if not p.exists():
        candidate = p.with_name(f"{p.name}.0{SET_SUFFIX}")  # pynbody's <base> form
        if candidate.is_file():
            return candidate
        raise FileNotFoundError(f"snapshot file not found: {p}")
    parts = p.name.rsplit(".", 2)
    if p.suffix == SET_SUFFIX and len(parts) == 3 and parts[1].isdigit() and _declared_files(p) > 1:
        return p.with_name(f"{parts[0]}.0{SET_SUFFIX}")
    return None


def _declared_files(path: Path) -> int:
    with single._open_snapshot(single._existing_file(path)) as f:
        header = single._header_group(f, path)
        value = single._scalar_attr(header, "NumFilesPerSnapshot", f"{path}: /{HEADER_GROUP}", required=False)
    return 1 if value is None else int(value)


def read_snapshot(path: str | os.PathLike[str], *, part_type: int = GRAVPIPE_PART_TYPE) -> Snapshot:
    """``snapshot.read_snapshot`` for a single file, or the whole set that ``path`` names
    (its folder, any member, or ``<folder>/<base>``) as one Snapshot in particle order.

    Raises as ``snapshot.read_snapshot``; for a set also SnapshotError when a member is
    missing, a member's Time or NumPart_Total differs from member 0's, or the members'
    NumPart_ThisFile do not add up to NumPart_Total."""
    if isinstance(path, str) and path.startswith(("http://", "https://")):  # ranged reads, verified chunks
        from gravpipe.reservoir import remote

        return remote.read_snapshot(path, part_type)
    members = set_members(path)
    if members is None:
        return single.read_snapshot(path, part_type=part_type)
    part_type = single._checked_part_type(part_type)
    parts = [_read_member(m, part_type) for m in members]
    _check_consistent(members, parts)
    return _joined(members, parts, part_type)


def read(path: str | os.PathLike[str], *, part_type: int = GRAVPIPE_PART_TYPE) -> tuple[Particles, float]:
    """Short form of ``read_snapshot``: ``(particles, time)``."""
    snap = read_snapshot(path, part_type=part_type)
    return snap.particles, snap.time


def _read_member(path: Path, part_type: int) -> dict[str, Any]:
    where = f"{path}: /{HEADER_GROUP}"
    with single._open_snapshot(single._existing_file(path)) as f:
        header = single._header_group(f, path)
        n = int(single._int_array_attr(header, "NumPart_ThisFile", where)[part_type])
        total = int(single._int_array_attr(header, "NumPart_Total", where).astype(object)[part_type])
        time = float(single._scalar_attr(header, "Time", where, required=True))
        group = f.get(part_group_name(part_type))
        if not isinstance(group, h5py.Group):
            raise SnapshotError(f"{path}: no /{part_group_name(part_type)} group")
        data = {fd.source: single._read_field(group, fd, n, f"{path}: /{part_group_name(part_type)}")
                for fd in PARTICLE_FIELDS}
        if data["mass"] is None:
            data["mass"] = single._masses_from_table(header, part_type, n, str(path))
        params = single._attrs_to_dict(f[PARAMETERS_GROUP].attrs) if PARAMETERS_GROUP in f else {}
        state, widths = _read_state(f)
    return {"n": n, "total": total, "time": time, "data": data, "parameters": params, "state": state,
            "widths": widths}


def _read_state(f: h5py.File) -> tuple[dict[str, Any] | None, dict[str, int]]:
    group = f.get(INTEGRATOR_GROUP)
    if group is None:
        return None, {}
    state: dict[str, Any] = single._attrs_to_dict(group.attrs)
    widths = {}
    for key, ds in group.items():
        state[key] = ds[...]
        if _PER_PARTICLE in ds.attrs:
            widths[key] = int(ds.attrs[_PER_PARTICLE])
    return state, widths


def _check_consistent(members: list[Path], parts: list[dict[str, Any]]) -> None:
    first = parts[0]
    for m, part in zip(members[1:], parts[1:]):
        if part["time"] != first["time"] or part["total"] != first["total"]:
            raise SnapshotError(f"{m}: Time {part['time']} / NumPart_Total {part['total']} differ from "
                                f"{members[0].name}'s {first['time']} / {first['total']}: not one set")
    if sum(p["n"] for p in parts) != first["total"]:
        raise SnapshotError(f"{members[0].parent}: NumPart_ThisFile of the {len(parts)} files add up to "
                            f"{sum(p['n'] for p in parts)}, not NumPart_Total = {first['total']}")


def _joined(members: list[Path], parts: list[dict[str, Any]], part_type: int) -> Snapshot:
    data = {k: (None if parts[0]["data"][k] is None else np.concatenate([p["data"][k] for p in parts]))
            for k in parts[0]["data"]}
    try:
        particles = Particles(data["pos"], data["vel"], data["mass"], data["id"])
    except ValueError as exc:
        raise SnapshotError(f"{members[0].parent}: the set does not hold valid particles: {exc}") from None
    state = None
    if parts[0]["state"] is not None:
        state = dict(parts[0]["state"])
        for key in parts[0]["widths"]:
            if any(key not in p["widths"] for p in parts):
                raise SnapshotError(f"{members[0].parent}: per-particle state {key!r} is missing in a member")
            state[key] = np.concatenate([p["state"][key] for p in parts])
    return Snapshot(particles=particles, time=parts[0]["time"],
                    potential=data.get("potential"), acceleration=data.get("acceleration"),
                    parameters=parts[0]["parameters"], integrator_state=state, path=members[0],
                    part_type=part_type)


@dataclass
class Share:
    """The particles a rank takes from a snapshot or a set (:func:`read_share`)."""

    pos: np.ndarray               # (n, 3) float64: this rank's rows, in file order (n may be 0)
    vel: np.ndarray               # (n, 3)
    mass: np.ndarray              # (n,)
    ids: np.ndarray               # (n,) int64
    time: float
    n_total: int                  # particles in the whole snapshot
    parameters: dict[str, Any]    # member 0's /Parameters
    state: dict[str, Any] | None  # /Integrator: the whole run's entries (member 0's) and this
                                  # rank's rows of each per-particle array ((n,) or (n, width))
    whole_member: bool            # the rows are member ``rank`` of a set of ``ranks`` members


@dataclass
class ShareHead:
    """What a rank learns of its share before reading its rows (:func:`read_share_blocks`)."""

    n: int                        # this rank's rows
    time: float
    n_total: int                  # particles in the whole snapshot
    parameters: dict[str, Any]    # member 0's /Parameters
    state: dict[str, Any] | None  # /Integrator's whole-run entries (member 0's); None: no /Integrator
    per_particle: list[str]       # the per-particle arrays each block carries besides the particles
    whole_member: bool            # the rows are member ``rank`` of a set of ``ranks`` members


def read_share_blocks(path: str | os.PathLike[str], rank: int, ranks: int, *, chunk: int = 1 << 20,
                      part_type: int = GRAVPIPE_PART_TYPE) -> tuple[ShareHead, Any]:
    """This rank's share of a snapshot (a single file or a set), as :func:`read_share` takes
    it (member ``rank`` when a set has ``ranks`` members, else particles [N r / P, N (r + 1)
    / P) of the members in order), read block by block: returns its head and a callable
    whose every call iterates over the rows in blocks of at most ``chunk``, dicts of "pos"
    (m, 3), "vel" (m, 3), "mass" (m,), "id" (m,) int64 and each per-particle array of the
    file's /Integrator ((m,) or (m, width)). Memory: one block and one member's header at a
    time (an out-of-core run fills its store from them). Raises as ``read_snapshot``, and
    SnapshotError for a set whose members disagree."""
    from gravpipe.io.stream import open_blocks

    found = set_members(path)
    members, member = (found, True) if found else ([Path(path)], False)
    counts = []
    for m in members:
        with open_blocks(m, part_type=part_type, member=member) as r:
            counts.append(r.n)
            if m is members[0]:
                time, parameters, whole = r.time, r.parameters, r.integrator_scalars
                per_particle = r.per_particle_names()
    total = sum(counts)
    whole_member = len(members) == ranks and len(members) > 1
    starts = np.concatenate(([0], np.cumsum(counts)))
    b, e = (int(starts[rank]), int(starts[rank + 1])) if whole_member else file_share(total, rank, ranks)
    state = dict(whole or {}) if whole is not None or per_particle else None
    head = ShareHead(e - b, time, total, parameters, state, list(per_particle), whole_member)

    def blocks() -> Any:
        for k, m in enumerate(members):
            lo, hi = max(b, int(starts[k])), min(e, int(starts[k + 1]))
            if lo >= hi:
                continue
            with open_blocks(m, part_type=part_type, member=member) as r:
                if r.time != time:
                    raise SnapshotError(f"{m}: Time {r.time} differs from {members[0].name}'s {time}: not one set")
                s0 = int(starts[k])
                for c in range(lo, hi, chunk):
                    c1 = min(hi, c + chunk)
                    blk = r.arrays(c - s0, c1 - s0)
                    for name in per_particle:
                        blk[name] = r.state_rows(name, c - s0, c1 - s0)
                    yield blk

    return head, blocks


def read_share(path: str | os.PathLike[str], rank: int, ranks: int, *,
               part_type: int = GRAVPIPE_PART_TYPE) -> Share:
    """This rank's share of a snapshot (a single file or a set), read block-wise: member
    ``rank`` when a set has ``ranks`` members (a run resumed on the P that wrote it takes
    back what each rank wrote), else particles [N r / P, N (r + 1) / P) of the members in
    order. Memory: the share and one member's header at a time; never the whole set.
    Raises as ``read_snapshot``, and SnapshotError for a set whose members disagree."""
    head, blocks = read_share_blocks(path, rank, ranks, part_type=part_type)
    got = list(blocks())
    if not got:  # an empty share: empty arrays of the file's kinds
        from gravpipe.io.stream import open_blocks

        found = set_members(path)
        first = found[0] if found else Path(path)
        with open_blocks(first, part_type=part_type, member=bool(found)) as r:
            got = [dict(r.arrays(0, 0), **{k: r.state_rows(k, 0, 0) for k in head.per_particle})]
    joined = {k: np.concatenate([blk[k] for blk in got]) for k in ("pos", "vel", "mass", "id", *head.per_particle)}
    state = None
    if head.state is not None:
        state = dict(head.state)
        state.update({k: joined[k] for k in head.per_particle})
    return Share(joined["pos"], joined["vel"], joined["mass"], joined["id"], head.time, head.n_total,
                 head.parameters, state, head.whole_member)


def unit_base(path: str | os.PathLike[str]) -> dict[str, float]:
    """``snapshot.unit_base`` of a single file or of the set ``path`` names (its member 0):
    ``yt.load(path, unit_base=io.unit_base(path))``."""
    members = set_members(path)
    return single.unit_base(path if members is None else members[0])


def describe(path: str | os.PathLike[str]) -> str:
    """``snapshot.describe`` of a single file; for a set, member 0's description after a
    line naming the set (files, particles in all)."""
    if isinstance(path, str) and path.startswith(("http://", "https://")):  # ranged reads, verified chunks
        from gravpipe.reservoir import remote

        return remote.describe(path)
    members = set_members(path)
    if members is None:
        return single.describe(path)
    snap_total = _read_member(members[0], GRAVPIPE_PART_TYPE)["total"]
    head = (f"{members[0].parent}: multi-file set of {len(members)} files ({members[0].name} .. "
            f"{members[-1].name}), {snap_total} particles in all; member 0:")
    return head + "\n" + single.describe(members[0])

