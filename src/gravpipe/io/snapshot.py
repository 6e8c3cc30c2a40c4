"""HDF5 snapshots and checkpoints in the GADGET-4 layout (see ``fields`` for the layout).

``write_snapshot`` writes a ``Particles`` set, the time, optional potential and
acceleration, gravpipe's metadata (``/Parameters``) and, for a checkpoint, the integrator's
state (``/Integrator``), always through ``atomic_path`` so that a crash never leaves a
partial file under the final name. ``read_snapshot`` reads gravpipe's files bit for bit and
files written by other codes in the same layout; ``describe`` summarises any such file.

Conventions
-----------
- Particles go to ``/PartType1`` (slot 1 of the header arrays); ``read_snapshot`` reads
  slot 1 unless ``part_type`` says otherwise.
- ``/Parameters`` carries Omega0 = 0, OmegaLambda = 0, HubbleParam = 1 (see
  ``fields.NON_COSMOLOGICAL``): yt then treats the file as non-cosmological (time =
  header ``Time``) and pynbody's h- and a-scaled default units leave the numbers as they
  are. Both attach their default GADGET units (kpc or Mpc, km/s, 1e10 Msol) to the raw
  N-body numbers; pynbody's ``time`` property is a cosmological age, not ``Time``.
- ``ParticleIDs`` are stored as uint64, the GADGET convention. gravpipe ids are int64; a
  negative id cannot be represented and ``write_snapshot`` rejects it (``ValueError``).
  Reading accepts ids of any integer dtype; a uint64 id above 2**63 - 1 is rejected by
  ``Particles``.
- Every malformed file raises ``SnapshotError`` (a ``ValueError``) whose message starts
  with the file name; a missing file raises ``FileNotFoundError``.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import h5py
import numpy as np
from numpy.typing import ArrayLike

from gravpipe._validate import as_float_array, check_finite
from gravpipe.io.atomic import atomic_path
from gravpipe.io.fields import (
    EXTRA_FIELDS,
    FIELDS_BY_NAME,
    FORMAT_VERSION,
    G_CGS,
    HISTORY_PREFIX,
    GRAVPIPE_PART_TYPE,
    HEADER_ATTRS,
    HEADER_ATTR_NAMES,
    HEADER_GROUP,
    INTEGRATOR_GROUP,
    N_TYPES,
    NBODY_UNITS,
    NON_COSMOLOGICAL,
    PARAMETERS_GROUP,
    PARTICLE_FIELDS,
    SECONDS_PER_GYR,
    STANDARD_PARAMETERS,
    SnapshotField,
    part_group_name,
)
from gravpipe.particles import Particles

#: A value that can be stored as an HDF5 attribute: ``/Parameters`` entries and the
#: scalar part of the integrator state.
Scalar = Union[bool, int, float, str, np.bool_, np.integer, np.floating]

_INT64 = np.iinfo(np.int64)


class SnapshotError(ValueError):
    """A file that is not a readable snapshot: not HDF5, or not in the expected layout.

    The message names the file and the problem (missing group, wrong shape, ...).
    """


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Everything ``read_snapshot`` found in one file.

    Attributes
    ----------
    particles : Particles
        pos (N,3), vel (N,3), mass (N,) in float64; id (N,) int64.
    time : float
        Simulation time (header ``Time``), N-body time units.
    potential : (N,) float64 or None
        Potential per unit mass, when the file has ``Potential``.
    acceleration : (N,3) float64 or None
        Acceleration, when the file has ``Acceleration``.
    parameters : dict[str, int | float | bool | str]
        ``/Parameters`` attributes (empty when the group is absent). Numbers come back as
        Python ``int``/``float``/``bool`` with their exact value.
    integrator_state : dict or None
        ``/Integrator`` contents for a checkpoint, else None: arrays with their exact
        dtype and shape, scalars as Python ``int``/``float``/``bool``/``str``.
    path : Path
        The file that was read.
    part_type : int
        The ``PartType`` group that was read.
    """

    particles: Particles
    time: float
    potential: np.ndarray | None
    acceleration: np.ndarray | None
    parameters: dict[str, Any]
    integrator_state: dict[str, Any] | None
    path: Path
    part_type: int = GRAVPIPE_PART_TYPE

    def __repr__(self) -> str:
        extras = [name for name in ("potential", "acceleration") if getattr(self, name) is not None]
        if self.integrator_state is not None:
            extras.append("integrator_state")
        more = f", with {', '.join(extras)}" if extras else ""
        return f"Snapshot({str(self.path)!r}, n={self.particles.n}, time={self.time!r}{more})"


# --------------------------------------------------------------------------------------
# writing


def write_snapshot(
    path: str | os.PathLike[str],
    particles: Particles,
    time: float,
    *,
    potential: ArrayLike | None = None,
    acceleration: ArrayLike | None = None,
    parameters: Mapping[str, Scalar] | None = None,
    integrator_state: Mapping[str, np.ndarray | Scalar] | None = None,
) -> Path:
    """Write a snapshot (or, with ``integrator_state``, a checkpoint) atomically.

    Parameters
    ----------
    path : str or PathLike
        Final file name; its directory must exist. An existing file is replaced only once
        the new one is complete and on disk.
    particles : Particles
        Written to ``/PartType1``: Coordinates, Velocities, Masses (float64), ParticleIDs
        (uint64; a negative id raises ``ValueError``).
    time : float
        Simulation time (finite), header ``Time``.
    potential : (N,) array, optional
        Potential per unit mass, stored as ``Potential`` (float64).
    acceleration : (N,3) array, optional
        Stored as ``Acceleration`` (float64).
    parameters : mapping of str to number/bool/str, optional
        Metadata for ``/Parameters``, e.g. ``{"integrator": "hermite", "eps": 1/256}``.
        gravpipe adds ``units`` (default ``"N-body (Henon): G = M = 1"``), ``G`` (default
        1.0), ``code_version`` (the installed gravpipe's version; a ``code_version`` given
        here is used only when that cannot be determined) and ``gravpipe_format_version``
        (always this writer's) and the neutral cosmology Omega0 = 0, OmegaLambda = 0,
        HubbleParam = 1 that yt and pynbody read from ``/Parameters`` (``fields.
        NON_COSMOLOGICAL``; those keys may be passed only with exactly these values, as
        when a file's parameters are handed back). ``G`` must be > 0 and ``eps`` >= 0.
        Keys may not repeat a ``/Header`` attribute name: yt merges the two groups.
    integrator_state : mapping of str to ndarray or scalar, optional
        Checkpoint data for ``/Integrator``: numpy arrays become datasets (any bool,
        integer, float or complex dtype and shape, stored bit for bit), scalars become
        attributes. ``read_snapshot`` returns the same mapping.

    Returns
    -------
    Path
        The final path.

    Raises
    ------
    TypeError
        ``particles`` is not a ``Particles``.
    ValueError
        Any invalid argument; raised before anything is written.
    OSError
        The file cannot be written; the message names ``path`` and the reason, the errno
        is the cause's (``FileNotFoundError``: the folder does not exist,
        ``PermissionError``, ``ENOSPC``: disk full, ...; see ``atomic.atomic_path``).
    """
    if not isinstance(particles, Particles):
        raise TypeError(f"particles: expected gravpipe.Particles, got {type(particles).__name__}")
    n = particles.n
    time_f = _finite_float("time", time)
    arrays = {
        "pos": particles.pos,
        "vel": particles.vel,
        "mass": particles.mass,
        "id": _ids_for_file(particles.id),
    }
    extras = {"potential": potential, "acceleration": acceleration}  # one keyword per EXTRA_FIELDS row
    for source, field in EXTRA_FIELDS.items():
        if extras[source] is not None:
            arrays[source] = as_float_array(source, extras[source], field.shape(n))
    params = _parameters_for_file(parameters, time_f)
    state = None if integrator_state is None else _checked_state(integrator_state)

    with atomic_path(path) as tmp:
        with new_h5_file(tmp) as f:
            _write_header(f.create_group(HEADER_GROUP), n, time_f)
            _write_particle_group(f.create_group(part_group_name(GRAVPIPE_PART_TYPE)), arrays)
            # track_order: attributes come back (and describe lists them) in the order given
            _write_attrs(f.create_group(PARAMETERS_GROUP, track_order=True), params)
            if state is not None:
                _write_integrator(f.create_group(INTEGRATOR_GROUP, track_order=True), state)
            f.flush()
    return Path(path)


@contextmanager
def new_h5_file(tmp: Path, **kwargs: Any) -> Iterator[h5py.File]:
    """``h5py.File(tmp, "w", **kwargs)`` for the body of ``atomic_path``: a write that fails
    in HDF5 (a full disk, a file size limit) comes out as ``OSError`` with the errno of the
    cause, whatever h5py made of it (``RuntimeError: Can't flush cache (... errno = 28
    ...)``), so that ``atomic_path`` names the file and the reason ("disk full")."""
    try:
        with h5py.File(tmp, "w", **kwargs) as f:
            yield f
    except (RuntimeError, OSError) as exc:
        # an OSError with an errno of its own is left to atomic_path (it may be about
        # another file the body read)
        found = None if getattr(exc, "errno", None) is not None else re.search(r"errno = (\d+)", str(exc))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(tmp)) from exc


def _ids_for_file(ids: np.ndarray) -> np.ndarray:
    negative = np.flatnonzero(ids < 0)
    if negative.size:
        i = int(negative[0])
        raise ValueError(
            f"id: value {int(ids[i])} at index {i} is negative; snapshots store ParticleIDs "
            "as uint64 (GADGET convention), so ids must be >= 0"
        )
    return ids.astype(np.uint64)


def _header_values(n: int, time: float, *, n_total: int | None = None, n_files: int = 1) -> dict[str, Any]:
    """Header of a file holding n particles; a member of a multi-file set passes the set's
    n_total and its n_files (NumFilesPerSnapshot)."""
    counts = np.zeros(N_TYPES, dtype=np.uint64)
    counts[GRAVPIPE_PART_TYPE] = n
    totals = np.zeros(N_TYPES, dtype=np.uint64)
    totals[GRAVPIPE_PART_TYPE] = n if n_total is None else n_total
    values = {
        "NumPart_ThisFile": counts,
        "NumPart_Total": totals,
        "NumPart_Total_HighWord": np.zeros(N_TYPES, dtype=np.uint32),
        "MassTable": np.zeros(N_TYPES, dtype=np.float64),  # masses are per particle
        "Time": time,
        "Redshift": 0.0,
        "BoxSize": 0.0,  # isolated system: no periodic box
        "NumFilesPerSnapshot": n_files,
    }
    # the table decides dtype and shape, so the file and the documentation cannot drift
    return {a.name: np.asarray(values[a.name], dtype=a.dtype).reshape(a.shape) for a in HEADER_ATTRS}


def _write_header(group: h5py.Group, n: int, time: float, *, n_total: int | None = None, n_files: int = 1) -> None:
    for name, value in _header_values(n, time, n_total=n_total, n_files=n_files).items():
        # np.ndarray of shape () is written as a scalar attribute, as GADGET-4 does
        group.attrs.create(name, value, dtype=value.dtype)


def _write_particle_group(group: h5py.Group, arrays: dict[str, np.ndarray]) -> None:
    for field in PARTICLE_FIELDS:
        if field.source in arrays:
            ds = group.create_dataset(field.name, data=np.asarray(arrays[field.source], dtype=field.dtype))
            ds.attrs["unit"] = field.unit
            ds.attrs["description"] = field.description


def _write_attrs(group: h5py.Group, values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        group.attrs[key] = value


def _write_integrator(group: h5py.Group, state: dict[str, Any]) -> None:
    for key, value in state.items():
        if isinstance(value, np.ndarray):
            # contiguous, uncompressed, same dtype: the bytes read back are the bytes given
            group.create_dataset(key, data=value, dtype=value.dtype)
        else:
            group.attrs[key] = value


def _parameters_for_file(parameters: Mapping[str, Scalar] | None, time: float) -> dict[str, Any]:
    """The /Parameters of a file at ``time``: the caller's, checked, with gravpipe's own
    (units, G, versions, the neutral cosmology, GADGET-4's unit attributes and Time_GYR)."""
    given = dict(parameters) if parameters is not None else {}
    for key in given:
        _check_key("parameters", key)
        if key in HEADER_ATTR_NAMES:
            raise ValueError(
                f"parameters: key {key!r} is a /Header attribute name; yt merges /Parameters "
                "into the header, so it would shadow the real value"
            )
    for key, neutral in NON_COSMOLOGICAL.items():
        if key in given and not _is_number(given[key], neutral):
            raise ValueError(
                f"parameters[{key!r}]: gravpipe runs are not cosmological, and yt and pynbody read "
                f"{key} from /Parameters; it is always written as {neutral!r}, got {given[key]!r}"
            )
    out: dict[str, Any] = {"units": NBODY_UNITS, "G": 1.0}
    out.update(given)
    out["code_version"] = _code_version(given.get("code_version"))
    out["gravpipe_format_version"] = FORMAT_VERSION
    out.update(NON_COSMOLOGICAL)  # float64 attributes, as GADGET-4 writes them
    converted = {key: _attr_value(f"parameters[{key!r}]", value) for key, value in out.items()}
    _check_number(converted, "G", lambda g: g > 0, "> 0")
    _check_number(converted, "eps", lambda e: e >= 0, ">= 0")
    converted.update(_unit_attrs(converted, time))
    return converted


def _unit_attrs(params: dict[str, Any], time: float) -> dict[str, float]:
    """GADGET-4's unit attributes (``fields.UNIT_ATTRS``) and Time_GYR for a file at ``time``:
    length and mass units as given in ``params``, else the N-body scale; the others follow
    from the run's G."""
    for key in ("UnitLength_in_cm", "UnitMass_in_g"):
        _check_number(params, key, lambda v: v > 0, "> 0")
    length = float(params.get("UnitLength_in_cm", 1.0))
    mass = float(params.get("UnitMass_in_g", 1.0 / G_CGS))
    # UnitVelocity_in_cm_per_s, UnitTime_in_s and Time_GYR given (a file's parameters handed
    # back) are replaced by those that follow from the length, the mass, G and the time
    unit_time = math.sqrt(float(params["G"]) * length ** 3 / (G_CGS * mass))
    return {"UnitLength_in_cm": length, "UnitMass_in_g": mass, "UnitVelocity_in_cm_per_s": length / unit_time,
            "UnitTime_in_s": unit_time, "Time_GYR": time * unit_time / SECONDS_PER_GYR}


def unit_base(path: str | os.PathLike[str]) -> dict[str, float]:
    """The units of a snapshot written by gravpipe as yt's ``unit_base``:
    ``yt.load(path, unit_base=io.unit_base(path))`` (yt's Gadget frontend does not read
    them from the file). Files without them (older, or from other codes): N-body scale."""
    p = _existing_file(path)
    with _open_snapshot(p) as f:
        params = _attrs_to_dict(f[PARAMETERS_GROUP].attrs) if PARAMETERS_GROUP in f else {}
    found = {k: float(params[k]) for k in ("UnitLength_in_cm", "UnitMass_in_g", "UnitVelocity_in_cm_per_s")
             if k in params}
    if len(found) < 3:
        units = _unit_attrs({"G": float(params.get("G", 1.0))}, 0.0)
        found = {k: units[k] for k in ("UnitLength_in_cm", "UnitMass_in_g", "UnitVelocity_in_cm_per_s")}
    return found


def _is_number(value: object, expected: float) -> bool:
    """Whether ``value`` is a real number (not bool or text) equal to ``expected``."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    return float(value) == expected


def _check_number(params: dict[str, Any], key: str, ok, bound: str) -> None:
    if key not in params:
        return
    value = params[key]
    if isinstance(value, (str, np.bool_)) or not (math.isfinite(float(value)) and ok(float(value))):
        raise ValueError(f"parameters[{key!r}]: must be a finite number {bound}, got {value!r}")


def _code_version(passed: object | None) -> str:
    version = _installed_version()
    if version is not None:
        return version
    return str(passed) if passed is not None else "unknown"


def _installed_version() -> str | None:
    # gravpipe/__init__ may still be importing when io is first used; then the attribute
    # is missing and the installed distribution's metadata answers instead
    try:
        import gravpipe

        version = getattr(gravpipe, "__version__", None)
        if isinstance(version, str):
            return version
    except ImportError:
        pass
    try:
        return importlib.metadata.version("gravpipe")
    except importlib.metadata.PackageNotFoundError:
        return None


def _check_key(what: str, key: object) -> None:
    if not isinstance(key, str) or not key or "/" in key or key in (".", ".."):
        raise ValueError(f"{what}: keys must be non-empty strings without '/', got {key!r}")


def _attr_value(what: str, value: object) -> Any:
    """Return ``value`` as an exactly storable attribute value, or raise ``ValueError``."""
    if isinstance(value, (bool, np.bool_)):  # before int: bool is an int subclass
        return np.bool_(value)
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        if not _INT64.min <= value <= _INT64.max:
            raise ValueError(f"{what}: integer {value} does not fit in int64")
        return np.int64(value)
    if isinstance(value, float):
        return np.float64(value)
    if isinstance(value, (np.integer, np.floating)):
        return value  # keeps its numpy dtype in the file
    raise ValueError(f"{what}: expected a number, bool or string, got {type(value).__name__} {value!r}")


def _checked_state(state: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(state, Mapping):
        raise ValueError(
            f"integrator_state: expected a mapping of names to arrays/scalars, got {type(state).__name__}"
        )
    out: dict[str, Any] = {}
    for key, value in state.items():
        _check_key("integrator_state", key)
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biufc":
                raise ValueError(
                    f"integrator_state[{key!r}]: arrays must have a bool, integer, float or "
                    f"complex dtype, got {value.dtype}"
                )
            out[key] = value
        elif isinstance(value, (list, tuple)):
            raise ValueError(
                f"integrator_state[{key!r}]: pass a numpy array (with an explicit dtype) "
                f"rather than a {type(value).__name__}, so the stored dtype is the intended one"
            )
        else:
            out[key] = _attr_value(f"integrator_state[{key!r}]", value)
    return out


def _finite_float(name: str, value: object) -> float:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    return v


# --------------------------------------------------------------------------------------
# reading


def read_snapshot(path: str | os.PathLike[str], *, part_type: int = GRAVPIPE_PART_TYPE) -> Snapshot:
    """Read a snapshot or checkpoint written by gravpipe or by another GADGET-layout code.

    Parameters
    ----------
    path : str or PathLike
        The HDF5 file.
    part_type : int, default 1
        Which ``/PartType<k>`` group to read; other groups are ignored.

    Returns
    -------
    Snapshot
        gravpipe's own files come back bit for bit (positions, velocities, masses, ids,
        time, potential, acceleration, parameters, integrator state). Files from other
        codes: float32 datasets are upcast to float64; masses come from the header
        ``MassTable`` when there is no ``Masses`` dataset; ids of any integer dtype.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    PermissionError (an OSError)
        The file cannot be read; the message names ``path``.
    SnapshotError (a ValueError)
        Not HDF5, no ``/Header``, no such ``PartType`` group, a required dataset missing
        (Coordinates, Velocities, ParticleIDs; Masses unless MassTable gives them), a
        shape that disagrees with ``NumPart_ThisFile``, a multi-file snapshot, or data that
        do not form a valid ``Particles`` set (NaN, duplicate ids, ...).
    """
    part_type = _checked_part_type(part_type)
    path = _existing_file(path)
    with _open_snapshot(path) as f:
        try:
            return _read_open_file(f, path, part_type)
        except OSError as exc:  # a truncated or corrupt file fails only when data are read
            raise SnapshotError(f"{path}: unreadable HDF5 data ({exc})") from exc


def read(path: str | os.PathLike[str], *, part_type: int = GRAVPIPE_PART_TYPE) -> tuple[Particles, float]:
    """Short form of ``read_snapshot``: return ``(particles, time)``."""
    snap = read_snapshot(path, part_type=part_type)
    return snap.particles, snap.time


def _checked_part_type(part_type: object) -> int:
    if isinstance(part_type, bool) or not isinstance(part_type, (int, np.integer)) or part_type < 0:
        raise ValueError(f"part_type: expected an integer >= 0, got {part_type!r}")
    return int(part_type)


def _existing_file(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"snapshot file not found: {p}")
    if p.is_dir():
        raise SnapshotError(f"{p}: is a directory, not a snapshot file")
    try:  # the OS's reason (permission denied, ...) rather than h5py's words on it
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read: {exc.strerror}", str(p)) from exc
    return p


def _open_snapshot(path: Path) -> h5py.File:
    if not h5py.is_hdf5(path):
        raise SnapshotError(f"{path}: not an HDF5 file")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot be opened as HDF5 ({exc})") from exc


def _read_open_file(f: h5py.File, path: Path, part_type: int) -> Snapshot:
    header = _header_group(f, path)
    n, time = _read_header(header, path, part_type)
    group_name = part_group_name(part_type)
    group = f.get(group_name)
    if not isinstance(group, h5py.Group):
        present = sorted(k for k in f.keys() if k.startswith("PartType")) or ["none"]
        raise SnapshotError(
            f"{path}: no /{group_name} group (NumPart_ThisFile[{part_type}] = {n}; "
            f"particle groups present: {', '.join(present)})"
        )
    where = f"{path}: /{group_name}"
    data = {field.source: _read_field(group, field, n, where) for field in PARTICLE_FIELDS}
    for field in PARTICLE_FIELDS:
        if data[field.source] is None and field.required:
            raise SnapshotError(f"{where}/{field.name} is missing ({field.description} are required)")
    if data["mass"] is None:
        data["mass"] = _masses_from_table(header, part_type, n, where)
    try:
        particles = Particles(data["pos"], data["vel"], data["mass"], data["id"])
        for source in EXTRA_FIELDS:
            if data[source] is not None:
                check_finite(source, data[source])
    except ValueError as exc:
        raise SnapshotError(f"{where} does not hold valid particles: {exc}") from None
    return Snapshot(
        particles=particles,
        time=time,
        potential=data["potential"],
        acceleration=data["acceleration"],
        parameters=_attrs_to_dict(f[PARAMETERS_GROUP].attrs) if PARAMETERS_GROUP in f else {},
        integrator_state=_read_integrator(f, path),
        path=path,
        part_type=part_type,
    )


def _header_group(f: h5py.File, path: Path) -> h5py.Group:
    header = f.get(HEADER_GROUP)
    if not isinstance(header, h5py.Group):
        raise SnapshotError(f"{path}: no /{HEADER_GROUP} group (not a GADGET-layout snapshot)")
    return header


def _read_header(header: h5py.Group, path: Path, part_type: int, member: bool = False) -> tuple[int, float]:
    """Return (N of ``part_type`` in this file, Time) after checking the header; ``member``:
    the file is one member of a multi-file set (its own count only)."""
    where = f"{path}: /{HEADER_GROUP}"
    numpart = _int_array_attr(header, "NumPart_ThisFile", where)
    if part_type >= len(numpart):
        raise SnapshotError(f"{where}: part_type {part_type} out of range (file has {len(numpart)} types)")
    n = int(numpart[part_type])
    n_files = _scalar_attr(header, "NumFilesPerSnapshot", where, required=False)
    if n_files is not None and int(n_files) != 1 and not member:
        raise SnapshotError(
            f"{where}: NumFilesPerSnapshot = {int(n_files)}: this file is one member of a multi-file "
            "snapshot; read the whole set through its folder or a member named <base>.<k>.hdf5 "
            "(gravpipe.io.read)"
        )
    if "NumPart_Total" in header.attrs and not member:
        total = _int_array_attr(header, "NumPart_Total", where).astype(object)  # no overflow
        if "NumPart_Total_HighWord" in header.attrs:
            high = _int_array_attr(header, "NumPart_Total_HighWord", where).astype(object)
            total = total + high * (1 << 32)
        if part_type < len(total) and total[part_type] != n:
            raise SnapshotError(
                f"{where}: NumPart_Total[{part_type}] = {total[part_type]} but "
                f"NumPart_ThisFile[{part_type}] = {n} in a single-file snapshot"
            )
    time = _scalar_attr(header, "Time", where, required=True)
    try:
        time_f = float(time)
    except (TypeError, ValueError):
        raise SnapshotError(f"{where}: Time = {time!r} is not a number") from None
    return n, time_f


def _int_array_attr(group: h5py.Group, name: str, where: str) -> np.ndarray:
    if name not in group.attrs:
        raise SnapshotError(f"{where}: attribute {name} is missing")
    value = np.asarray(group.attrs[name])
    if value.dtype.kind not in "iu" or value.ndim != 1:
        raise SnapshotError(f"{where}: {name} must be a 1-D integer array, got {value.dtype} {value.shape}")
    if value.dtype.kind == "i" and (value < 0).any():
        raise SnapshotError(f"{where}: {name} has negative entries {value.tolist()}")
    return value


def _scalar_attr(group: h5py.Group, name: str, where: str, *, required: bool) -> Any:
    if name not in group.attrs:
        if required:
            raise SnapshotError(f"{where}: attribute {name} is missing")
        return None
    value = np.asarray(group.attrs[name])
    if value.size != 1:  # some codes write 1-element arrays for scalars
        raise SnapshotError(f"{where}: {name} must be a scalar, got shape {value.shape}")
    return value.reshape(()).item()


def _read_field(group: h5py.Group, field: SnapshotField, n: int, where: str) -> np.ndarray | None:
    obj = _checked_dataset(group, field, n, where)
    if obj is None:
        return None
    data = obj[...]
    if field.dtype.kind == "f":
        data = data.astype(np.float64, copy=False)  # float32 files upcast; float64 untouched
    return data


def _checked_dataset(group: h5py.Group, field: SnapshotField, n: int, where: str) -> h5py.Dataset | None:
    """The field's dataset after checking its shape against N and its dtype kind; None if absent."""
    obj = group.get(field.name)
    if obj is None:
        return None
    if not isinstance(obj, h5py.Dataset):
        raise SnapshotError(f"{where}/{field.name} is not a dataset")
    if obj.shape != field.shape(n):
        raise SnapshotError(
            f"{where}/{field.name} has shape {obj.shape}, expected {field.shape(n)} "
            f"(N = {n} from NumPart_ThisFile)"
        )
    if not field.accepts(obj.dtype):
        kind = "a float" if field.dtype.kind == "f" else "an integer"
        raise SnapshotError(f"{where}/{field.name} has dtype {obj.dtype}, expected {kind} dtype")
    return obj


def _masses_from_table(header: h5py.Group, part_type: int, n: int, where: str) -> np.ndarray:
    table = np.asarray(header.attrs.get("MassTable", np.zeros(0)), dtype=np.float64).reshape(-1)
    mass = float(table[part_type]) if part_type < len(table) else 0.0
    if not mass > 0:
        raise SnapshotError(f"{where}/Masses is missing and MassTable[{part_type}] = {mass}: masses unknown")
    return np.full(n, mass)


def _attrs_to_dict(attrs: h5py.AttributeManager) -> dict[str, Any]:
    return {key: _python_value(attrs[key]) for key in attrs.keys()}


def _python_value(value: Any) -> Any:
    """Numpy/h5py attribute value -> plain Python value (same number, same text)."""
    if isinstance(value, bytes | np.bytes_):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return _python_value(value[()])
        return value
    if isinstance(value, np.generic):
        return value.item()  # float64 -> float, int64 -> int, bool_ -> bool: exact
    return value


def _read_integrator(f: h5py.File, path: Path) -> dict[str, Any] | None:
    group = f.get(INTEGRATOR_GROUP)
    if group is None:
        return None
    if not isinstance(group, h5py.Group):
        raise SnapshotError(f"{path}: /{INTEGRATOR_GROUP} is not a group")
    state: dict[str, Any] = _attrs_to_dict(group.attrs)
    for key, obj in group.items():
        if not isinstance(obj, h5py.Dataset):
            raise SnapshotError(f"{path}: /{INTEGRATOR_GROUP}/{key} is not a dataset")
        if key in state:
            raise SnapshotError(f"{path}: /{INTEGRATOR_GROUP}/{key} is both a dataset and an attribute")
        state[key] = obj[...]  # exact dtype and shape, 0-d included
    for key, value in state.items():
        if not key.startswith(HISTORY_PREFIX):
            check_state_finite(f"{path}: /{INTEGRATOR_GROUP}/{key}", value)
    return state


def check_state_finite(where: str, value: Any) -> None:
    """SnapshotError "WHERE: non-finite value nan at index i" for a float entry of an
    integrator's state (an array or a scalar) that is NaN or inf: no integrator stores one,
    and one read back would turn into a time of NaN or a failed integer conversion far from
    the file. (The history, ``HISTORY_PREFIX``, is a record and not checked.)"""
    arr = np.asarray(value)
    if arr.dtype.kind != "f":
        return
    bad = np.flatnonzero(~np.isfinite(arr.reshape(-1)))
    if bad.size:
        i = int(bad[0])
        raise SnapshotError(f"{where}: non-finite value {float(arr.reshape(-1)[i])!r} at index {i}")


# --------------------------------------------------------------------------------------
# describe


def describe(path: str | os.PathLike[str]) -> str:
    """A human-readable summary of a snapshot file (for ``gravpipe info FILE``).

    Lists the header (time, box, particle counts), every ``PartType`` group with its
    datasets (dtype, shape, unit and meaning for the fields gravpipe knows), the
    ``/Parameters`` and the ``/Integrator`` contents. Works on files from other codes too;
    it does not validate particle data (``read_snapshot`` does).

    Raises ``FileNotFoundError`` or ``SnapshotError`` as ``read_snapshot`` does.
    """
    path = _existing_file(path)
    with _open_snapshot(path) as f:
        try:
            return "\n".join(_describe_lines(f, path))
        except OSError as exc:
            raise SnapshotError(f"{path}: unreadable HDF5 data ({exc})") from exc


def _describe_lines(f: h5py.File, path: Path) -> list[str]:
    header = _header_group(f, path)
    where = f"{path}: /{HEADER_GROUP}"
    numpart = _int_array_attr(header, "NumPart_ThisFile", where)
    params = _attrs_to_dict(f[PARAMETERS_GROUP].attrs) if PARAMETERS_GROUP in f else {}
    if "gravpipe_format_version" in params:
        version, fmt = params.get("code_version", "?"), params["gravpipe_format_version"]
        origin = f"written by gravpipe {version} (format {fmt})"
    else:
        origin = "not written by gravpipe"
    kind = "checkpoint" if INTEGRATOR_GROUP in f else "snapshot"
    box = _scalar_attr(header, "BoxSize", where, required=False)
    box_text = "isolated (BoxSize = 0)" if not box else f"periodic, BoxSize = {box!r}"
    lines = [
        f"{path}",
        f"  GADGET-layout HDF5 {kind}, {origin}",
        f"  time = {_scalar_attr(header, 'Time', where, required=True)!r}, box: {box_text}, "
        f"particles: {int(numpart.sum())}",
    ]
    mass_table = np.asarray(header.attrs.get("MassTable", np.zeros(0)), dtype=np.float64).reshape(-1)
    own = "gravpipe_format_version" in params  # else the units are the other code's
    for name in sorted((k for k in f.keys() if k.startswith("PartType")), key=_part_type_sort_key):
        lines += _describe_group(f[name], name, numpart, mass_table, own)
    lines += _describe_parameters(params)
    if INTEGRATOR_GROUP in f:
        lines += _describe_integrator(f[INTEGRATOR_GROUP])
    return lines


# Values up to this many characters are padded to a common column so that the notes line
# up; longer ones (paths, long strings) are not, so one of them cannot widen every line.
_DESCRIBE_PAD_LIMIT = 24


def _describe_parameters(params: dict[str, Any]) -> list[str]:
    """``key = value  note`` lines; a parameter holding a JSON object (Simulation's
    ``run_config``) is unfolded into one ``key = value`` line per entry below it."""
    if not params:
        return ["  parameters: none"]
    lines = [f"  parameters ({len(params)}):"]
    kw = max(len(key) for key in params)
    vw = max((len(repr(v)) for v in params.values() if len(repr(v)) <= _DESCRIBE_PAD_LIMIT), default=0)
    for key, value in params.items():
        unfolded = _json_object(value)
        if unfolded is None:
            lines.append(f"    {key:<{kw}} = {repr(value):<{vw}}  {STANDARD_PARAMETERS.get(key, '')}".rstrip())
            continue
        lines.append(f"    {key} (JSON):")
        entries = _flatten(unfolded)
        ew = max((len(k) for k, _ in entries), default=0)
        lines += [f"      {k:<{ew}} = {v!r}" for k, v in entries]
    return lines


def _json_object(value: object) -> dict[str, Any] | None:
    if not (isinstance(value, str) and value.startswith("{")):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _flatten(obj: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """[("params.eta", 0.02), ...]: nested objects as dotted keys, an empty one as {}."""
    entries: list[tuple[str, Any]] = []
    for key, value in obj.items():
        if isinstance(value, dict) and value:
            entries += _flatten(value, f"{prefix}{key}.")
        else:
            entries.append((f"{prefix}{key}", value))
    return entries


def _part_type_sort_key(name: str) -> tuple[int, str]:
    suffix = name[len("PartType"):]
    return (int(suffix), name) if suffix.isdigit() else (sys.maxsize, name)


def _describe_group(group: Any, name: str, numpart: np.ndarray, mass_table: np.ndarray, own: bool) -> list[str]:
    suffix = name[len("PartType"):]
    k = int(suffix) if suffix.isdigit() else -1
    count = f"N = {int(numpart[k])}" if 0 <= k < len(numpart) else "N unknown"
    lines = [f"  /{name}: {count}"]
    if not isinstance(group, h5py.Group):
        return lines + ["    (not a group)"]
    known = [fld.name for fld in PARTICLE_FIELDS if fld.name in group]
    others = sorted(key for key in group.keys() if key not in FIELDS_BY_NAME)
    rows = []
    for key in known + others:
        obj = group[key]
        dtype, shape = (str(obj.dtype), str(obj.shape)) if isinstance(obj, h5py.Dataset) else ("group", "")
        field = FIELDS_BY_NAME.get(key)
        unit = (field.unit if own else "code units") if field else "?"
        rows.append((key, dtype, shape, unit, field.description if field else ""))
    if "Masses" not in group and 0 <= k < len(mass_table) and mass_table[k] > 0:
        mass_note = f"every particle has mass {float(mass_table[k])!r}"
        rows.append(("(MassTable)", "float64", "()", "code units", mass_note))
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(4)]
    for row in rows:
        cells = "  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths))
        lines.append(f"    {cells}  {row[4]}".rstrip())
    return lines


def _describe_integrator(group: Any) -> list[str]:
    if not isinstance(group, h5py.Group):
        return [f"  /{INTEGRATOR_GROUP}: (not a group)"]
    datasets = [(k, v) for k, v in group.items() if isinstance(v, h5py.Dataset)]
    lines = [f"  integrator state: {len(datasets)} arrays, {len(group.attrs)} scalars"]
    kw = max((len(key) for key, _ in datasets), default=0)
    for key, ds in datasets:
        lines.append(f"    {key:<{kw}}  {str(ds.dtype):<8} {ds.shape}")
    for key, value in _attrs_to_dict(group.attrs).items():
        lines.append(f"    {key} = {value!r}")
    return lines
