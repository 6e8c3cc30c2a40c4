"""Diagnostics of a particle set that does not fit in memory, read block by block.

``diagnostics`` computes energies and Lagrangian radii from whole arrays; the out-of-core
run (``gravpipe.ooc_simulation``) has its particles in the pages of a store and hands over
a *block source* instead: a callable that, called again, iterates the same blocks afresh,
each a dict of arrays for consecutive particles (``"pos"`` (m,3), ``"mass"`` (m,), ...).
Memory: O(block) plus O(bins); every function makes a few passes over the blocks.

The results are those of ``diagnostics`` for the same particles up to the order of the float
sums (blocks are summed one after another).

The blocks may be one rank's share of particles spread over MPI ranks: ``ranks`` (a
:class:`Reductions`, e.g. ``gravpipe.parallel.domain_diagnostics.RankReductions``) then
combines the ranks' sums, extremes and the few particles the last pass sorts, so that every
rank gets the same radii without any rank holding all particles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import numpy as np

from gravpipe.diagnostics import _CUMSUM_SLACK

#: a callable returning a fresh iterable of blocks ({field: array} of consecutive particles)
BlockSource = Callable[[], Iterable[dict[str, np.ndarray]]]

#: histogram bins of the Lagrangian radii's first pass (in log r); the particles of the one
#: bin that holds each quantile are then sorted exactly
RADIUS_BINS = 1 << 16


class Reductions(Protocol):
    """How the blocks' partial results of several processes are combined (identical on all)."""

    def sum(self, values: np.ndarray) -> np.ndarray: ...
    def min(self, value: float) -> float: ...
    def max(self, value: float) -> float: ...
    def concatenate(self, values: np.ndarray) -> np.ndarray: ...


class OneProcess:
    """The blocks are all the particles: nothing to combine."""

    def sum(self, values: np.ndarray) -> np.ndarray:
        return values

    def min(self, value: float) -> float:
        return value

    def max(self, value: float) -> float:
        return value

    def concatenate(self, values: np.ndarray) -> np.ndarray:
        return values


def sums(source: BlockSource, quantities: dict[str, Callable[[dict[str, np.ndarray]], float]]) -> dict[str, float]:
    """{name: sum over the blocks of quantities[name](block)} in one pass."""
    out = dict.fromkeys(quantities, 0.0)
    for blk in source():
        for name, f in quantities.items():
            out[name] += float(f(blk))
    return out


def kinetic_block(blk: dict[str, np.ndarray]) -> float:
    """1/2 sum m |v|^2 of a block with "mass" and "vel"."""
    return 0.5 * float(np.dot(blk["mass"], np.einsum("ij,ij->i", blk["vel"], blk["vel"])))


def center_of_mass(source: BlockSource, ranks: Reductions = OneProcess()) -> tuple[np.ndarray, float]:
    """(x_cm (3,), total mass M) of blocks with "pos" and "mass"."""
    acc = np.zeros(4)  # moment (3), mass
    for blk in source():
        acc[:3] += blk["mass"] @ blk["pos"]
        acc[3] += float(blk["mass"].sum())
    acc = ranks.sum(acc)
    moment, total = acc[:3], float(acc[3])
    if not total > 0:
        raise ValueError("lagrangian radii: the total mass is 0")
    return moment / total, total


def lagrangian_radii(source: BlockSource, fractions: Iterable[float], ranks: Reductions = OneProcess()) -> np.ndarray:
    """Radii about the centre of mass enclosing the given mass fractions, as
    ``diagnostics.lagrangian_radii(p, fractions)`` defines them (the distance of the first
    particle, in order of distance, at which the enclosed mass reaches f M), shape (k,).

    Four passes: the centre of mass; the range of r; a mass histogram in log r
    (RADIUS_BINS bins) that finds the bin holding each quantile; the particles of those
    bins, sorted exactly. Blocks need "pos" and "mass".
    """
    fr = np.asarray(list(fractions), dtype=np.float64)
    if fr.ndim != 1 or fr.size == 0 or not ((fr > 0) & (fr <= 1)).all():
        raise ValueError(f"fractions: expected values in (0, 1], got {fr}")
    c, total = center_of_mass(source, ranks)

    def radii(blk: dict[str, np.ndarray]) -> np.ndarray:
        return np.linalg.norm(blk["pos"] - c, axis=1)

    lo, hi = np.inf, 0.0
    for blk in source():
        r = radii(blk)
        pos_r = r[r > 0]
        if pos_r.size:
            lo = min(lo, float(pos_r.min()))
        hi = max(hi, float(r.max()))
    lo, hi = ranks.min(lo), ranks.max(hi)
    if not hi > 0:  # every particle at the centre
        return np.zeros(fr.size)
    lo = min(lo, hi)
    edges = np.geomspace(lo, hi, RADIUS_BINS + 1) if hi > lo else np.array([lo, hi])
    edges[-1] = np.inf  # hi itself, and rounding of geomspace, fall into the last bin

    def bin_of(r: np.ndarray) -> np.ndarray:
        # r = 0 (a particle at the centre) goes to bin 0 with the smallest radii
        return np.clip(np.searchsorted(edges, r, side="right") - 1, 0, len(edges) - 2)

    hist = np.zeros(len(edges) - 1)
    for blk in source():
        hist += np.bincount(bin_of(radii(blk)), weights=blk["mass"], minlength=len(hist))
    cum = np.cumsum(ranks.sum(hist))
    target = fr * total - _CUMSUM_SLACK * total
    wanted = np.minimum(np.searchsorted(cum, target, side="left"), len(hist) - 1)
    members: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {int(b): [] for b in np.unique(wanted)}
    for blk in source():
        r = radii(blk)
        b = bin_of(r)
        for k in members:
            sel = b == k
            if sel.any():
                members[k].append((r[sel], blk["mass"][sel]))
    out = np.empty(fr.size)
    for q, k in enumerate(wanted):
        # (r, m) of the bin's particles of every rank, in rank order
        mine = members[int(k)]
        r = ranks.concatenate(np.concatenate([m[0] for m in mine]) if mine else np.empty(0))
        m = ranks.concatenate(np.concatenate([m[1] for m in mine]) if mine else np.empty(0))
        order = np.argsort(r, kind="stable")
        before = cum[k - 1] if k > 0 else 0.0
        enclosed = before + np.cumsum(m[order])
        i = int(np.searchsorted(enclosed, target[q], side="left"))
        out[q] = r[order][min(i, len(r) - 1)]
    return out
