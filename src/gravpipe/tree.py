"""The Barnes-Hut treecode: O(N log N) softened gravity with grouped interaction lists.

    tree = Tree(pos, mass, eps=1/64, theta=0.6)   # sort + build + moments
    acc, pot = tree.forces()                      # self-gravity, self excluded, caller's order
    acc, pot = tree.forces(pos_i)                 # field of the tree's particles at other points
    tree.stats                                    # interactions / MAC tests per body, seconds per stage

Method (Barnes & Hut 1986; Barnes 1990; Makino 1991): particles are sorted along a Peano-Hilbert
curve (21 bits per axis), the octree's cells are ranges of that order (leaves of <= n_leaf
particles, depth <= 21 levels), each cell carries mass, centre of mass, bounding box and a
traceless quadrupole. Groups of <= n_crit particles walk the tree once and share one
interaction list: a cell is accepted when the distance from the group's bounding box to
the cell's com exceeds size/theta + |com - box centre| (size: longest side of the cell's
bounding box; the second term corrects for an off-centre com); with ``alpha`` the
relative criterion of GADGET (open if G M size^2 / d^4 > alpha |a_old|) is applied too, from
the second evaluation on. Particle-particle terms are the direct pipeline's pairwise
interaction (Plummer softening; ``precision="double"``: float64 as in
``Pipeline(precision="double")``; ``"mixed"`` (default): float32 arithmetic on coordinates
relative to the group centre, float64 results, ~1e-6 added error);
particle-cell terms are the monopole (softened like a particle) plus the quadrupole
term of the softened potential's Taylor expansion, which tends to the softened particle
sum as cells shrink. Consecutive groups form runs of <= 2048 particles that walk the top
of the tree once; the cells a whole run accepts are evaluated on all its particles at
once, and those farther than 5 run radii (half-diagonals of its box) from its centre
enter a 4th-order local (Taylor) expansion of their softened monopole + quadrupole field
about that centre instead (``stats.pc_local_interactions``), whose error there is far below
the multipoles' own.

Accuracy of |a_tree - a_direct| / |a_direct| (Plummer N = 20000, eps = 1/64, 1000 particles):
    theta  quadrupole  median   99th pct
    0.8    yes         5.4e-4   3.2e-3
    0.6    yes         1.5e-4   1.2e-3
    0.4    yes         5.1e-5   3.2e-4
    0.2    yes         4.8e-6   2.8e-5
    0.6    no          5.9e-4   5.3e-3
Results are bitwise identical for any thread count (each run is summed by one thread).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from gravpipe import _core, residence
from gravpipe.backends import resolve_backend, resolve_isa
from gravpipe._validate import as_float_array, as_index_array, check_G, check_positive_scalar, check_sources
from gravpipe.pipeline import PipelineStats
from gravpipe.tree_params import (  # noqa: F401  (re-exported: gravpipe.tree is where users find them)
    DEFAULT_N_CRIT, DEFAULT_N_LEAF, DEFAULT_QUAD_TOL, DEFAULT_THETA, TreeStats, _check_precision, check_quad_tol,
    check_tree_params)

__all__ = ["Tree", "TreeStats", "check_tree_params"]


def tree_backend(backend: str, precision: str) -> str:
    """Where a tree's lists are evaluated: "cpu" or "cuda". "auto" is "cpu" for the tree
    (the GPU lists are asked for by name, never switched to). "cuda" raises
    :class:`BackendUnavailableError` when this build or machine has no usable GPU, and
    ``ValueError`` with precision "double" (the GPU list kernel is mixed precision)."""
    if backend not in ("auto", "cpu", "cuda"):
        resolve_backend(backend)  # the error for an unknown name
    if backend != "cuda":
        return "cpu"
    resolve_backend("cuda")
    if precision != "mixed":
        raise ValueError(f"precision={precision!r}: the tree's GPU list kernel (backend='cuda') is mixed "
                         "precision only; use precision='mixed' or backend='cpu'")
    return "cuda"


class Tree:
    """A Barnes-Hut tree over source particles (see the module docstring for the method).

    Parameters
    ----------
    pos : (N,3) float64 positions; mass : (N,) float64 masses >= 0 (N >= 1).
    eps : Plummer softening length (>= 0), applied exactly as in direct summation.
    G : gravitational constant (1 in N-body units).
    theta : opening angle (> 0); smaller is more accurate and slower.
    quadrupole : include cell quadrupoles (several times smaller errors at equal theta).
    quad_tol : an accepted cell contributes its monopole alone when its quadrupole term,
        relative to its monopole term at the group's distance d, is below
        ``quad_tol * theta**3`` (the scale of the expansion's own truncation error at the
        opening radius): |Q|_F / (M d^2) <= quad_tol theta^3. 0 (default): quadrupoles on
        every accepted cell. A monopole costs a third of a quadrupole term: on a Plummer
        sphere, quad_tol = 0.4 makes an evaluation ~1.8x faster for ~1.8x the median error
        (BENCHMARKS.md). The dropped terms add up coherently in flattened or elongated
        systems (discs, filaments: errors of percents), so keep 0 for those.
    n_leaf : leaf capacity; n_crit : particles per group sharing one interaction list.
    alpha : optional relative opening criterion (GADGET); used from the second ``forces()``.
    threads : OpenMP threads (None: all). Results do not depend on it, bit for bit.
    local_expansion : cells farther than 5 run radii from a run of groups reach it through a
        4th-order local expansion (the default; its error is far below the tree's), or,
        with False, through the list kernels like the others.
    precision : list kernels in "mixed" (float32 arithmetic on group-relative coordinates,
        float64 results; adds ~1e-6 relative error, far below the tree's own) or "double"
        (float64 throughout, the direct pipeline's double mode).
    isa : CPU instruction set of the list kernels, as for a Pipeline ("auto":
        GRAVPIPE_ISA if set, else the best this CPU has); ``.isa`` says which runs.
    memory_budget, scratch, page_bytes : the residence "pages" (:mod:`gravpipe.residence`):
        the particles go to the pages of a scratch file in ``scratch`` and the tree reads them
        through a page cache, everything that grows with N within ``memory_budget`` ("4GiB";
        gravpipe.ooc). The forces are the in-memory ones bit for bit; ``forces(pos_i)``,
        ``alpha``, ``frame`` and backend "cuda" are not available there. ``close()`` (or
        collection) removes the scratch file.
    frame : (lower corner (3,), grid cells per unit length): the cube the particles are
        keyed in, which decides the octree's cells (not the accuracy: cells are measured by
        their particles). Default: their bounding cube. ``TreeGravity.frame`` gives a run
        step's, so that a tree of the same cells can be built again (the run's diagnostics).
    backend : where the lists are evaluated: "cpu" (the ``isa``'s kernels), "cuda" (an
        NVIDIA GPU, mixed precision, in core only: the walk stays on the CPU threads, the
        lists go to the GPU in batches; forces differ from the CPU's by float32 rounding,
        ~1e-7 relative) or "auto" (= "cpu": the tree never moves to the GPU unasked).
    """

    def __init__(self, pos: ArrayLike, mass: ArrayLike, eps: float = 0.0, G: float = 1.0, *,
                 theta: float = DEFAULT_THETA, quadrupole: bool = True,
                 quad_tol: float = DEFAULT_QUAD_TOL, n_leaf: int = DEFAULT_N_LEAF,
                 n_crit: int = DEFAULT_N_CRIT, alpha: float | None = None, threads: int | None = None,
                 precision: str = "mixed", local_expansion: bool = True, isa: str = "auto",
                 memory_budget: str | int | None = None, scratch: str | None = None,
                 page_bytes: str | int | None = None, frame: tuple[Sequence[float], float] | None = None,
                 backend: str = "auto"):
        pos_a, mass_a = check_sources(pos, mass, "particle set")
        eps = check_positive_scalar("eps", eps)
        G = check_G(G)
        theta, n_leaf, n_crit, a, nthreads = check_tree_params(theta, n_leaf, n_crit, alpha, threads)
        quad_tol = check_quad_tol(quad_tol)
        self.theta, self.quadrupole, self.n_leaf, self.n_crit, self.alpha = theta, bool(quadrupole), n_leaf, n_crit, alpha
        self.quad_tol = quad_tol
        self.eps, self.G = eps, G
        self.precision = _check_precision(precision)
        if not isinstance(local_expansion, (bool, np.bool_)):
            raise ValueError(f"local_expansion: expected True or False, got {local_expansion!r}")
        self.local_expansion = bool(local_expansion)
        options = {"memory_budget": memory_budget, "scratch": scratch, "page_bytes": page_bytes}
        home = residence.resolve(options)
        kw = home.run_kwargs(options, {"gravity": "tree", "backend": backend})
        self.backend = tree_backend(backend, self.precision)
        self._impl = _TREES[home.name](self, pos_a, mass_a, a, nthreads, resolve_isa(isa), frame, **kw)

    def close(self) -> None:
        """Release what the tree holds outside this process's arrays (a paged tree's scratch
        file); nothing for a tree in memory."""
        self._impl.close()

    @property
    def out_of_core(self):
        """The :class:`gravpipe.ooc.OutOfCore` behind a paged tree (its store's counters:
        ``.stats``), or None."""
        return getattr(self._impl, "store", None)

    @property
    def n(self) -> int:
        return self._impl.n

    @property
    def isa(self) -> str:
        """CPU instruction set of the list kernels ("avx512", "avx2" or "generic")."""
        return self._impl.isa

    def __repr__(self) -> str:
        return (f"Tree(n={self.n}, eps={self.eps}, G={self.G}, theta={self.theta}, quadrupole={self.quadrupole}, "
                f"quad_tol={self.quad_tol}, n_leaf={self.n_leaf}, n_crit={self.n_crit}, "
                f"alpha={self.alpha})")

    def forces(self, pos_i: ArrayLike | None = None, exclude: ArrayLike | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Accelerations (n,3) and potentials (n,) in the caller's order.

        ``pos_i=None``: self-gravity of the tree's particles, each particle's own term left
        out. Otherwise the field at the points ``pos_i`` (n,3); ``exclude`` (n,) optionally
        names for each point one tree particle (caller index) to leave out, or -1.
        Raises ``ValueError`` for bad input and for a non-finite result (a point on a
        particle with eps = 0).
        """
        if pos_i is None:
            if exclude is not None:
                raise ValueError("exclude: only with pos_i (self-gravity already excludes self)")
            acc, pot = self._impl.self_forces()
        else:
            pos_a = as_float_array("pos_i", pos_i, (None, 3))
            if len(pos_a) == 0:
                raise ValueError("pos_i: empty i-particle set")
            ex = None
            if exclude is not None:
                ex = as_index_array("exclude", exclude, len(pos_a))
                bad = np.flatnonzero((ex < -1) | (ex >= self.n))
                if bad.size:
                    k = int(bad[0])
                    raise ValueError(f"exclude: index {ex[k]} at position {k} is outside [-1, {self.n})")
            acc, pot = self._impl.forces_at(pos_a, ex)
        if not (np.isfinite(acc).all() and np.isfinite(pot).all()):
            row = int(np.argwhere(~np.isfinite(acc).all(axis=1) | ~np.isfinite(pot))[0][0])
            raise ValueError(f"forces: non-finite result for i-particle {row}: it coincides with a "
                             "particle and eps = 0 makes that force infinite (use eps > 0)")
        return acc, pot

    @property
    def stats(self) -> TreeStats:
        """Counters and timers of the last evaluation (and of the build)."""
        return self._impl.stats()


class _MemoryTree:
    """A Tree's particles and cells in this process's memory (``_core.Tree``)."""

    def __init__(self, tree: Tree, pos: np.ndarray, mass: np.ndarray, alpha: float, threads: int, isa: str,
                 frame: tuple[Sequence[float], float] | None, **_: object):
        if frame is not None:
            frame = ([float(x) for x in frame[0]], float(frame[1]))
        t = tree
        self._core = _core.Tree(pos, mass, t.eps, t.G, t.theta, t.quadrupole, t.quad_tol, t.n_leaf, t.n_crit,
                                alpha, threads, t.precision, t.local_expansion, isa, frame, t.backend)
        self.n, self.isa = self._core.n, self._core.isa

    def self_forces(self) -> tuple[np.ndarray, np.ndarray]:
        acc, pot = np.empty((self.n, 3)), np.empty(self.n)
        self._core.self_forces(acc, pot)
        return acc, pot

    def forces_at(self, pos: np.ndarray, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        acc, pot = np.empty((len(pos), 3)), np.empty(len(pos))
        self._core.forces_at(pos, exclude, acc, pot)
        return acc, pot

    def stats(self) -> TreeStats:
        return TreeStats(**self._core.stats())

    def close(self) -> None:
        """Nothing to release."""


class _PagedTree:
    """A Tree's particles and cells in the pages of a scratch file (:class:`gravpipe.ooc.OutOfCore`):
    self-gravity only, in the caller's order, gathered into memory."""

    #: particles per block copied into the pages
    BLOCK = 1 << 18

    def __init__(self, tree: Tree, pos: np.ndarray, mass: np.ndarray, alpha: float, threads: int, isa: str,
                 frame: tuple[Sequence[float], float] | None, *, memory_budget: str | int, scratch: str,
                 page_bytes: str | int | None = None):
        from gravpipe.ooc import OutOfCore
        from gravpipe.particles import Particles
        if alpha:
            raise ValueError("alpha: the relative opening criterion is not available out of core")
        if frame is not None:
            raise ValueError("frame: out of core the tree keeps the store's curve order (leave frame out)")
        n, b = len(mass), self.BLOCK
        blocks = (Particles(pos[s:s + b], np.zeros((min(n - s, b), 3)), mass[s:s + b], np.arange(s, min(n, s + b)))
                  for s in range(0, n, b))
        t = tree
        self.store = OutOfCore.from_blocks(blocks, n, scratch, memory_budget, eps=t.eps, G=t.G, theta=t.theta,
                                           quadrupole=t.quadrupole, quad_tol=t.quad_tol, n_leaf=t.n_leaf,
                                           n_crit=t.n_crit, threads=threads or None, precision=t.precision,
                                           local_expansion=t.local_expansion, isa=isa, page_bytes=page_bytes)
        self.n, self.isa = n, self.store.params["isa"]

    def self_forces(self) -> tuple[np.ndarray, np.ndarray]:
        self.store.forces()
        return self.store.gather("acc"), self.store.gather("pot")

    def forces_at(self, pos: np.ndarray, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        raise ValueError("pos_i: an out-of-core tree gives self-gravity only (forces())")

    def stats(self) -> TreeStats:
        if self.store.tree_stats is None:
            raise ValueError("stats: an out-of-core tree is built by its first forces()")
        return self.store.tree_stats

    def close(self) -> None:
        self.store.close()


#: the tree of each residence (:data:`gravpipe.residence.RESIDENCES`)
_TREES: dict[str, type] = {"memory": _MemoryTree, "pages": _PagedTree}


class TreeGravity:
    """The treecode as a Simulation's force provider (what ``gravity="tree"`` plugs in).

    Each integrator step writes all particles (a new tree: sort, build, moments) and asks
    for self-gravity; the provider recognises that request and runs the grouped walk.
    Offers the same ``backend`` / ``isa`` / ``threads`` / ``stats`` as a Pipeline, so the
    Simulation reports its timings the same way (j-write: tree build; compute: walk +
    lists). Jerks are not available, so only shared-step integrators can use it.
    """

    def __init__(self, eps: float, G: float, *, theta: float = DEFAULT_THETA, quadrupole: bool = True,
                 quad_tol: float = DEFAULT_QUAD_TOL, n_leaf: int = DEFAULT_N_LEAF,
                 n_crit: int = DEFAULT_N_CRIT, alpha: float | None = None,
                 threads: int | None = None, precision: str = "mixed", isa: str = "auto", backend: str = "auto"):
        eps = check_positive_scalar("eps", eps)
        G = check_G(G)
        theta, n_leaf, n_crit, a, nthreads = check_tree_params(theta, n_leaf, n_crit, alpha, threads)
        self.theta = theta
        quad_tol = check_quad_tol(quad_tol)
        self.precision = _check_precision(precision)
        #: "cpu" or "cuda" (the lists on the GPU; "auto" stays on the CPU: tree_backend)
        self.backend: str = tree_backend(backend, self.precision)
        self._impl = _core.TreeForceProvider(eps, G, theta, bool(quadrupole), quad_tol, n_leaf, n_crit, a,
                                             nthreads, self.precision, resolve_isa(isa), self.backend)
        self.threads: int = nthreads or _core.max_threads()
        self.isa: str = self._impl.isa
        lists = "lists on GPU device 0" if self.backend == "cuda" else f"isa={self.isa}"
        self.backend_detail = (f"treecode theta={theta}, precision={self.precision}, {lists}, "
                               f"threads={self.threads}")

    @property
    def provider(self):
        """The core force provider (``_core.TreeForceProvider``) integrators take forces from."""
        return self._impl

    @property
    def frame(self) -> tuple[list[float], float] | None:
        """The cube the last written particles were keyed in (lower corner, grid cells per
        unit length): their bounding cube, or in a leapfrog step the step's frame (known
        from the positions the drift started from; curve_order.hpp, step_frame). None
        before any. ``Tree(..., frame=)`` builds that tree again."""
        f = self._impl.frame
        return None if f is None else (list(f[0]), float(f[1]))

    @property
    def stats(self) -> PipelineStats:
        return PipelineStats(**self._impl.stats())

    @property
    def tree_stats(self) -> TreeStats:
        """Counters of the last force evaluation."""
        return TreeStats(**self._impl.tree_stats())
