"""Validation at the boundary: every array that enters gravpipe passes through here once.

Each check raises ``ValueError`` with a message that names the argument and, where it
applies, the first offending index, so that a user can find the bad row in their data.
"""

from __future__ import annotations

import functools
import os

import numpy as np
from numpy.typing import ArrayLike


def as_float_array(name: str, value: ArrayLike, shape: tuple[int | None, ...]) -> np.ndarray:
    """Return ``value`` as a C-contiguous float64 array of the given shape.

    ``shape`` entries that are ``None`` match any length. Raises ``ValueError`` naming
    ``name`` for a wrong shape, a non-numeric dtype, or a non-finite entry.
    """
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and other unconvertible input
        raise ValueError(f"{name}: cannot be converted to an array ({exc})") from None
    if arr.ndim == 1 and arr.size == 0 and len(shape) == 2:
        arr = arr.reshape(0, shape[1] or 0)  # [] is an empty set, reported as such by callers
    if arr.dtype.kind not in "fiu" or arr.dtype.kind == "b":
        raise ValueError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
        want = "(" + ", ".join("N" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name}: expected shape {want}, got {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    check_finite(name, arr)
    return arr


def check_finite(name: str, arr: np.ndarray) -> None:
    """Raise ``ValueError`` naming the first row of ``arr`` that holds NaN or inf."""
    finite = np.isfinite(arr)
    if not finite.all():
        bad = np.argwhere(~finite)[0]
        row = int(bad[0])
        raise ValueError(f"{name}: non-finite value {float(arr[tuple(bad)])!r} at index {row}")


#: The largest |coordinate| and |velocity| the force arithmetic carries, by precision. The
#: kernels square and sum differences of coordinates (up to twice the largest apart): in
#: float64 (largest value 1.8e308) 3 (2e150)^2 fits; in mixed precision the inner
#: arithmetic is float32 (3.4e38), where 3 (2e18)^2 = 1.2e37 still fits, as do Hermite's
#: products of velocity and coordinate differences. Beyond it a square overflows to inf and
#: a force becomes inf * 0 = NaN, far from where the value came in.
MAX_MAGNITUDE = {"double": 1e150, "mixed": 1e18}


def check_magnitude(name: str, arr: np.ndarray, precision: str = "double", ids: np.ndarray | None = None) -> None:
    """Raise ``ValueError`` naming the first row of ``arr`` (and its particle id when ``ids``
    are given) with an entry beyond ``MAX_MAGNITUDE[precision]`` in absolute value.
    ``arr`` must be finite (``as_float_array``)."""
    limit = MAX_MAGNITUDE[precision]
    big = np.abs(arr) > limit
    if big.any():
        bad = np.argwhere(big)[0]
        row = int(bad[0])
        which = f"index {row}" + (f" (particle id {int(ids[row])})" if ids is not None else "")
        where = ("float32 in mixed precision; precision 'double' carries up to "
                 f"{MAX_MAGNITUDE['double']:.0e}" if precision == "mixed" else "float64")
        raise ValueError(f"{name}: value {float(arr[tuple(bad)]):.6g} at {which} exceeds {limit:.0e} in absolute "
                         f"value, the largest the force arithmetic carries (squares of differences in {where}); "
                         "rescale the units")


def as_index_array(name: str, value: ArrayLike, length: int) -> np.ndarray:
    """Return ``value`` as a C-contiguous int64 array of shape (length,)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected integers, got dtype {arr.dtype}")
    if arr.shape != (length,):
        raise ValueError(f"{name}: expected shape ({length},), got {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def check_same_length(**arrays: np.ndarray) -> None:
    """Raise ``ValueError`` if the arrays do not all have the same first dimension."""
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        raise ValueError(f"mismatched lengths: {desc}")


def check_positive_scalar(name: str, value: float, allow_zero: bool = True) -> float:
    """Return ``value`` as float after checking it is finite and >= 0 (or > 0)."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: must be finite and {bound}, got {value!r}")
    return v


def check_sources(pos: ArrayLike, mass: ArrayLike, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate source particles: pos (N,3) and mass (N,) >= 0 as float64 arrays, N >= 1.
    ``what`` names the set in the error for an empty one (e.g. "j-particle set")."""
    pos_a = as_float_array("pos", pos, (None, 3))
    mass_a = as_float_array("mass", mass, (None,))
    check_same_length(pos=pos_a, mass=mass_a)
    check_magnitude("pos", pos_a)
    if len(mass_a) == 0:
        raise ValueError(f"pos: empty {what}")
    negative = np.flatnonzero(mass_a < 0)
    if negative.size:
        raise ValueError(f"mass: negative value {mass_a[negative[0]]!r} at index {negative[0]}")
    return pos_a, mass_a


def check_G(G: float) -> float:
    """The gravitational constant as a float: finite and > 0."""
    try:
        G = float(G)
    except (TypeError, ValueError):
        raise ValueError(f"G: expected a number, got {G!r}") from None
    if not np.isfinite(G) or G <= 0:
        raise ValueError(f"G: must be finite and > 0, got {G!r}")
    return G


@functools.lru_cache(maxsize=1)
def thread_limit() -> tuple[int, str]:
    """(the most CPU threads gravpipe lets one process ask for, where that bound comes from).

    Half the threads the kernel lets this process create (the least of RLIMIT_NPROC,
    kernel.threads-max, kernel.pid_max and its cgroup's pids.max), the other half left to
    the rest of the machine: beyond what the kernel allows, OpenMP cannot start the team
    and ends the process ("libgomp: Thread creation failed", or SIGSEGV), which a library
    must not do."""
    limits: list[tuple[int, str]] = []
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append((soft, "RLIMIT_NPROC (ulimit -u)"))
    except (ImportError, OSError, ValueError):
        pass
    for path, name in (("/proc/sys/kernel/threads-max", "kernel.threads-max"),
                       ("/proc/sys/kernel/pid_max", "kernel.pid_max")):
        value = _read_limit(path)
        if value is not None:
            limits.append((value, name))
    for path in _cgroup_pids_max_paths():
        value = _read_limit(path)
        if value is not None:
            limits.append((value, f"the cgroup's pids.max ({path})"))
            break
    if not limits:
        return 1 << 15, "no kernel limit found; 32768"
    most, name = min(limits)
    return max(1, most // 2), f"half of {most} allowed by {name}"


def _read_limit(path: str) -> int | None:
    try:
        with open(path) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _cgroup_pids_max_paths() -> list[str]:
    """pids.max of this process's cgroup: v2 (a "0::/path" line) or v1's pids controller."""
    try:
        with open("/proc/self/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    paths = []
    for line in lines:
        _, controllers, where = line.split(":", 2)
        if controllers == "":
            paths.append(os.path.join("/sys/fs/cgroup", where.lstrip("/"), "pids.max"))
        elif "pids" in controllers.split(","):
            paths.append(os.path.join("/sys/fs/cgroup/pids", where.lstrip("/"), "pids.max"))
    return paths


def check_threads(threads: object, name: str = "threads") -> int | None:
    """``threads`` as an int (None: all OpenMP threads): a positive integer no larger than
    ``thread_limit()``. Raises ValueError naming ``name`` otherwise."""
    if threads is None:
        return None
    if isinstance(threads, (bool, np.bool_)) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"{name}: must be a positive integer or None, got {threads!r}")
    most, why = thread_limit()
    if threads > most:
        raise ValueError(f"{name}: {int(threads)} is more than this machine can start for one process (at most "
                         f"{most}: {why}); more threads than cores only share them")
    return int(threads)
