"""The treecode's parameters, their checks and its counters (TreeStats), apart from the Tree
itself so that the in-core tree (gravpipe.tree) and the out-of-core one (gravpipe.ooc) share
them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from gravpipe import _core
from gravpipe._validate import check_positive_scalar, check_threads

# The core's defaults (TreeParams in cpp/include/gravpipe/tree.hpp), never restated here.
_DEFAULTS = _core.defaults()["tree"]
DEFAULT_N_LEAF: int = _DEFAULTS["n_leaf"]
DEFAULT_N_CRIT: int = _DEFAULTS["n_crit"]
# The cheapest opening angle inside the accuracy the treecode promises at its default
# (Plummer N = 1e6: median |da|/|a| <= 3e-4, 99th percentile <= 1.5e-3; measured 2.3e-4 /
# 8.5e-4, BENCHMARKS.md); 0.5 halves the errors for ~1.25x the time.
DEFAULT_THETA: float = _DEFAULTS["theta"]
#: The largest opening angle at which the MAC means anything. A cell is accepted beyond
#: size/theta + |com - box centre| from its centre of mass (size: the longest side of its
#: box); a point of the box lies within sqrt(3)/2 size + |com - box centre| of it. Beyond
#: theta = 2/sqrt(3) a particle inside a cell's own box can accept the cell, where its
#: multipole expansion diverges (the core's kThetaMax, which its check_tree_params applies).
THETA_MAX: float = _DEFAULTS["theta_max"]
DEFAULT_QUAD_TOL: float = _DEFAULTS["quad_tol"]


@dataclass(frozen=True)
class TreeStats:
    """Work and time of the last force evaluation (sort/build/moments: of the tree build).

    Interactions and MAC tests are totals over all i-particles (``*_per_body``: divided by
    ``n_i``). ``seconds_walk`` and ``seconds_evaluate`` run interleaved per group in one
    parallel loop: they are thread-seconds scaled so that they add up to its wall time.
    """

    n_j: int = 0
    n_i: int = 0
    nodes: int = 0
    leaves: int = 0
    groups: int = 0
    pp_interactions: int = 0
    pc_interactions: int = 0
    pc_local_interactions: int = 0  # the part of pc delivered by the runs' local expansions
    mac_tests: int = 0
    seconds_sort: float = 0.0
    seconds_build: float = 0.0
    seconds_moments: float = 0.0
    seconds_walk: float = 0.0
    seconds_evaluate: float = 0.0
    seconds_forces: float = 0.0
    relative_criterion_used: bool = False

    def _per_body(self, x: int) -> float:
        return x / self.n_i if self.n_i else 0.0

    @property
    def pp_per_body(self) -> float:
        return self._per_body(self.pp_interactions)

    @property
    def pc_per_body(self) -> float:
        return self._per_body(self.pc_interactions)

    @property
    def pc_local_per_body(self) -> float:
        return self._per_body(self.pc_local_interactions)

    @property
    def mac_per_body(self) -> float:
        return self._per_body(self.mac_tests)

    @property
    def seconds_total(self) -> float:
        """One full evaluation: sort + build + moments + walk/lists + forces."""
        return self.seconds_sort + self.seconds_build + self.seconds_moments + self.seconds_forces

    def __str__(self) -> str:
        rows = [f"{f.name:>24s} {getattr(self, f.name):.6g}" for f in fields(self)]
        rows += [f"{'pp / body':>24s} {self.pp_per_body:.1f}", f"{'pc / body':>24s} {self.pc_per_body:.1f}",
                 f"{'  of which local / body':>24s} {self.pc_local_per_body:.1f}",
                 f"{'MAC tests / body':>24s} {self.mac_per_body:.1f}",
                 f"{'seconds total':>24s} {self.seconds_total:.4g}"]
        return "\n".join(rows)


def check_quad_tol(quad_tol: float) -> float:
    """Validate quad_tol: a finite number >= 0 (0: quadrupoles on every accepted cell)."""
    return check_positive_scalar("quad_tol", quad_tol)


def check_tree_params(theta: float, n_leaf: int, n_crit: int, alpha: float | None,
                      threads: int | None) -> tuple[float, int, int, float, int]:
    """Validate tree parameters; returns (theta, n_leaf, n_crit, alpha (0: off), threads (0: all))."""
    theta = check_positive_scalar("theta", theta, allow_zero=False)
    if theta > THETA_MAX:
        raise ValueError(f"theta: {theta!r} is beyond {THETA_MAX:.4f} (2/sqrt(3)), where the opening criterion "
                         "stops meaning anything: a particle inside a cell's own box could take the cell's "
                         "multipole expansion, which diverges there")
    for name, v in (("n_leaf", n_leaf), ("n_crit", n_crit)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: must be an integer >= 1, got {v!r}")
    a = 0.0 if alpha is None else check_positive_scalar("alpha", alpha, allow_zero=False)
    return theta, int(n_leaf), int(n_crit), a, check_threads(threads) or 0


def _check_precision(precision: str) -> str:
    if precision not in ("mixed", "double"):
        raise ValueError(f"precision: unknown mode {precision!r} (expected 'mixed' or 'double')")
    return precision
