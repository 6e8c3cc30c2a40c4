"""The Particles container: the one data structure every gravpipe layer agrees on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from gravpipe._validate import as_float_array, check_magnitude, check_same_length


@dataclass(frozen=True, eq=False)
class Particles:
    """A set of N point masses, validated once on construction.

    Attributes
    ----------
    pos : (N, 3) float64
        Positions, in length units (N-body units by default).
    vel : (N, 3) float64
        Velocities, in velocity units.
    mass : (N,) float64
        Masses, each >= 0, total > 0.
    id : (N,) int64
        Unique particle identifiers; default ``0 .. N-1``.

    Construction raises ``ValueError`` naming the field and the first offending index for
    NaN/inf, coordinates or velocities beyond 1e150 in absolute value (float64's squares
    overflow beyond; ``_validate.MAX_MAGNITUDE``), wrong shapes, mismatched lengths,
    negative masses, zero total mass, duplicate ids and N = 0. The arrays are copies of the input, stored read-only (use
    ``np.array(p.pos)`` for a writable array); ``copy()`` gives an independent Particles.
    """

    pos: np.ndarray
    vel: np.ndarray
    mass: np.ndarray
    id: np.ndarray

    def __init__(self, pos: ArrayLike, vel: ArrayLike, mass: ArrayLike, id: ArrayLike | None = None):
        pos_a = as_float_array("pos", pos, (None, 3))
        vel_a = as_float_array("vel", vel, (None, 3))
        mass_a = as_float_array("mass", mass, (None,))
        check_same_length(pos=pos_a, vel=vel_a, mass=mass_a)
        n = len(pos_a)
        if n == 0:
            raise ValueError("pos: empty particle set (N = 0)")
        negative = np.flatnonzero(mass_a < 0)
        if negative.size:
            i = int(negative[0])
            raise ValueError(f"mass: negative value {float(mass_a[i])!r} at index {i}")
        if not mass_a.sum() > 0:
            raise ValueError("mass: total mass is zero")
        id_a = _validated_ids(id, n)
        check_magnitude("pos", pos_a, ids=id_a)
        check_magnitude("vel", vel_a, ids=id_a)
        for name, arr in (("pos", pos_a), ("vel", vel_a), ("mass", mass_a), ("id", id_a)):
            arr = arr.copy()  # never alias (and then freeze) the caller's array
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)

    def __len__(self) -> int:
        return len(self.mass)

    @property
    def n(self) -> int:
        """Number of particles."""
        return len(self.mass)

    @property
    def total_mass(self) -> float:
        return float(self.mass.sum())

    def copy(self) -> Particles:
        """An independent copy (already validated, so construction checks run again cheaply)."""
        return Particles(self.pos.copy(), self.vel.copy(), self.mass.copy(), self.id.copy())

    def __repr__(self) -> str:
        return f"Particles(n={self.n}, total_mass={self.total_mass:.6g})"


def _validated_ids(id: ArrayLike | None, n: int) -> np.ndarray:
    if id is None:
        return np.arange(n, dtype=np.int64)
    arr = np.asarray(id)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"id: expected integers, got dtype {arr.dtype}")
    if arr.shape != (n,):
        raise ValueError(f"id: expected shape ({n},), got {arr.shape}")
    if arr.dtype == np.uint64 and n and arr.max() > np.iinfo(np.int64).max:
        i = int(np.argmax(arr > np.iinfo(np.int64).max))
        raise ValueError(f"id: value {arr[i]} at index {i} does not fit in int64")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    order = np.argsort(arr, kind="stable")
    dup = np.flatnonzero(arr[order][1:] == arr[order][:-1])
    if dup.size:
        first = int(np.min(order[dup + 1]))  # the later occurrence with the smallest index
        raise ValueError(f"id: duplicate value {arr[first]} at index {first}")
    return arr
