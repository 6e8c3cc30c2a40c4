"""Arrays in CUDA device memory (CuPy, or anything CuPy wraps without a copy through
``__cuda_array_interface__``): recognising them, and validating them on the device, so
that the CUDA pipeline takes them without a round trip through host memory.

CuPy is imported only when such an array is actually passed; it is not a dependency.
"""

from __future__ import annotations

from typing import Any

MIXED_COORD_LIMIT = 1e18


def is_device_array(a: Any) -> bool:
    """True for an array in CUDA device memory."""
    return hasattr(a, "__cuda_array_interface__")


def _cupy():
    try:
        import cupy
    except ImportError as exc:  # an object with __cuda_array_interface__ but no CuPy
        raise ValueError("CUDA device arrays need CuPy (pip install cupy-cuda12x or cupy-cuda13x)") from exc
    return cupy


def as_device_float(name: str, value: Any, width: int | None, length: int | None = None):
    """A C-contiguous float64 CuPy view of a device array: shape (n, width), or (n,) when
    width is None; finite values only. Raises ValueError naming ``name`` otherwise."""
    cp = _cupy()
    arr = cp.asarray(value)
    if arr.dtype != cp.float64:
        raise ValueError(f"{name}: device arrays must be float64, got {arr.dtype} (convert with .astype('float64'))")
    want = (length if length is not None else arr.shape[0],) + (() if width is None else (width,))
    if arr.ndim != len(want) or arr.shape != want:
        shape = "(n, 3)" if width else "(n,)"
        raise ValueError(f"{name}: expected shape {shape}" + (f" with n = {length}" if length is not None else "")
                         + f", got {arr.shape}")
    arr = cp.ascontiguousarray(arr)
    if not bool(cp.isfinite(arr).all()):
        raise ValueError(f"{name}: non-finite value in the device array")
    return arr


def check_device_range(name: str, arr) -> None:
    """Mixed precision keeps coordinates below 1e18 (float32 range of r^2)."""
    cp = _cupy()
    if arr.size and float(cp.abs(arr).max()) >= MIXED_COORD_LIMIT:
        raise ValueError(f"{name}: magnitude exceeds the mixed-precision range ({MIXED_COORD_LIMIT:.0e}); "
                         "use precision='double'")


def as_device_exclude(value: Any, length: int, n_j: int):
    """A C-contiguous int64 CuPy array of length ``length`` with entries in [-1, n_j)."""
    cp = _cupy()
    arr = cp.asarray(value)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"exclude: expected integers, got dtype {arr.dtype}")
    if arr.shape != (length,):
        raise ValueError(f"exclude: expected shape ({length},), got {arr.shape}")
    arr = cp.ascontiguousarray(arr.astype(cp.int64, copy=False))
    bad = cp.flatnonzero((arr < -1) | (arr >= n_j))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"exclude: index {int(arr[k])} at position {k} is outside [-1, {n_j})")
    return arr


def empty_like_rows(n: int, width: int | None):
    cp = _cupy()
    return cp.empty((n, width) if width else (n,), dtype=cp.float64)


def check_device_results(acc, pot, jerk) -> None:
    cp = _cupy()
    for name, arr in (("acc", acc), ("pot", pot), ("jerk", jerk)):
        if arr is not None and not bool(cp.isfinite(arr).all()):
            row = int(cp.flatnonzero(~cp.isfinite(arr.reshape(len(arr), -1)).any(axis=1))[0])
            raise ValueError(
                f"forces: non-finite {name} for i-particle {row}: it coincides with a j-particle "
                "and eps = 0 makes that force infinite (use eps > 0 or exclude the pair)")
