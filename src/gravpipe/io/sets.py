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

import os
import secrets
import shutil
from collections.abc import Mapping
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

__all__ = ["SET_SUFFIX", "Share", "file_share", "member_path", "read_share", "write_set", "write_share", "is_set", "set_members",
           "read_snapshot", "read", "describe"]

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
    """
    from mpi4py import MPI

    ranks, rank = comm.Get_size(), comm.Get_rank()
    n = len(mass)
    total = comm.allreduce(n, op=MPI.SUM)
    rows = {k: _rows(k, v, n) for k, v in (per_particle_state or {}).items()}

    def write_mine(path: Path) -> None:
        arrays = {"pos": pos, "vel": vel, "mass": mass, "id": single._ids_for_file(np.asarray(ids, np.int64))}
        whole = None if rank != 0 or integrator_state is None else single._checked_state(integrator_state)
        t = single._finite_float("time", time)
        with h5py.File(path, "w") as f:
            single._write_header(f.create_group(HEADER_GROUP), n, t, n_total=total, n_files=ranks)
            single._write_particle_group(f.create_group(part_group_name(GRAVPIPE_PART_TYPE)), arrays)
            single._write_attrs(f.create_group(PARAMETERS_GROUP, track_order=True),
                                single._parameters_for_file(parameters, t))
            if whole is not None or rows:
                group = f.create_group(INTEGRATOR_GROUP, track_order=True)
                for key, value in (whole or {}).items():
                    if isinstance(value, np.ndarray):
                        group.create_dataset(key, data=value, dtype=value.dtype)
                    else:
                        group.attrs[key] = value
                for key, value in rows.items():
                    ds = group.create_dataset(key, data=value.reshape(-1), dtype=value.dtype)
                    ds.attrs[_PER_PARTICLE] = value.shape[1]
            f.flush()
        _fsync_file(path)  # durable before the set is renamed into place

    return _write_collectively(comm, Path(folder), write_mine)


def _rows(name: str, value: np.ndarray, n: int) -> np.ndarray:
    """``value`` as (n, width) rows: (n,) is width 1."""
    a = np.ascontiguousarray(value)
    if a.ndim not in (1, 2) or a.shape[0] != n:
        raise ValueError(f"per_particle_state[{name!r}]: shape {a.shape}, expected ({n},) or ({n}, width)")
    return a.reshape(n, 1) if a.ndim == 1 else a


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


def read_share(path: str | os.PathLike[str], rank: int, ranks: int, *,
               part_type: int = GRAVPIPE_PART_TYPE) -> Share:
    """This rank's share of a snapshot (a single file or a set), read block-wise: member
    ``rank`` when a set has ``ranks`` members (a run resumed on the P that wrote it takes
    back what each rank wrote), else particles [N r / P, N (r + 1) / P) of the members in
    order. Memory: the share and one member's header at a time; never the whole set.
    Raises as ``read_snapshot``, and SnapshotError for a set whose members disagree."""
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
    blocks: list[dict[str, np.ndarray]] = []
    rows: dict[str, list[np.ndarray]] = {k: [] for k in per_particle}
    for k, m in enumerate(members):
        lo, hi = max(b, int(starts[k])), min(e, int(starts[k + 1]))
        if lo >= hi and not (b == e and k == 0):
            continue
        with open_blocks(m, part_type=part_type, member=member) as r:
            if r.time != time:
                raise SnapshotError(f"{m}: Time {r.time} differs from {members[0].name}'s {time}: not one set")
            s0 = int(starts[k])
            lo, hi = (lo, hi) if lo < hi else (s0, s0)
            blocks.append(r.arrays(lo - s0, hi - s0))
            for name in per_particle:
                rows[name].append(r.state_rows(name, lo - s0, hi - s0))
    joined = {k: np.concatenate([blk[k] for blk in blocks]) for k in ("pos", "vel", "mass", "id")}
    state = None
    if whole is not None or per_particle:
        state = dict(whole or {})
        state.update({k: np.concatenate(v) for k, v in rows.items()})
    return Share(joined["pos"], joined["vel"], joined["mass"], joined["id"], time, total, parameters, state,
                 whole_member)


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

