"""The gravity solvers a Simulation can use, in one table (the integrators' twin, see
:mod:`gravpipe.integrators`).

Each entry says how to build its force provider, whether that provider delivers jerks
(Hermite needs them), which backends it computes on, its extra parameters with their
defaults (read from the C++ core's parameter structs), and how energy diagnostics get a
float64 potential for it. Simulation, ``gravpipe run`` and run.toml read this table; no
other module tests gravity names.

    kind, params = gravity.resolve("tree", {"theta": None})   # defaults filled in
    provider = kind.build(eps=1/64, G=1.0, backend="auto", precision="mixed", threads=None, **params)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np
from numpy.typing import ArrayLike

from gravpipe import _core
from gravpipe.pipeline import Pipeline, PipelineStats
from gravpipe.tree import Tree, TreeGravity


class ForceSource(Protocol):
    """What a gravity kind builds: the core provider integrators take forces from, plus the
    facts a Simulation reports (backend, instruction set, threads, counters)."""

    backend: str
    backend_detail: str

    @property
    def provider(self) -> Any: ...  # a _core force provider
    @property
    def stats(self) -> PipelineStats: ...
    @property
    def isa(self) -> str | None: ...
    @property
    def threads(self) -> int | None: ...


@dataclass(frozen=True)
class GravityKind:
    """One gravity solver.

    build(eps, G, backend, precision, threads, **params) -> ForceSource of one process (runs
    over MPI ranks build their own: ``gravpipe.domain_run``).
    diagnostic_potential(source, pos (N,3), mass (N,), eps, G) -> float64 potentials (N,),
    each particle's own term excluded, accurate enough for energy errors of ~1e-10.
    """

    name: str
    description: str
    delivers_jerk: bool
    backends: tuple[str, ...]           # the backends it computes on
    params: dict[str, float]            # its extra parameters and their defaults
    default_integrator: str             # the integrator a run gets when it names none
    # force evaluations' worth of particle steps between diagnostics rows, so that rows
    # (diagnostic_potential) cost <= ~5% of a run
    row_work: int
    # whether diagnostics rows take a precise potential of their own by default (a run's
    # ``precise_energy=None``) rather than the run's last evaluation's
    precise_rows: bool
    build: Callable[..., ForceSource]
    diagnostic_potential: Callable[[ForceSource, np.ndarray, np.ndarray, float, float], np.ndarray]


# Tree runs measure their potential energy with a tree of this opening angle (float64 list
# kernels, quadrupoles): O(N log N) where a float64 direct sum would cost O(N^2) per
# diagnostics row, with a relative error of W ~1e-6 (tests/test_tree.py).
DIAGNOSTICS_THETA = 0.25


def _build_direct(eps: float, G: float, backend: str, precision: str, threads: int | None) -> ForceSource:
    return Pipeline(backend=backend, precision=precision, eps=eps, G=G, threads=threads)


def _direct_potential(source: ForceSource, pos: np.ndarray, mass: np.ndarray, eps: float, G: float) -> np.ndarray:
    """A float64 direct sum on the run's own backend (and threads): O(N^2) like its steps."""
    exact = Pipeline(backend=source.backend, precision="double", eps=eps, G=G,
                     **({"threads": source.threads} if source.backend == "cpu" else {}))
    exact.set_j(pos, mass)
    return exact.forces(pos, exclude=np.arange(len(mass)))[1]


def _build_tree(eps: float, G: float, backend: str, precision: str, threads: int | None,
                theta: float) -> TreeGravity:
    # "auto" keeps the tree on the CPU; "cuda" puts its lists on the GPU (TreeGravity)
    return TreeGravity(eps, G, theta=theta, threads=threads, precision=precision, backend=backend)


def _tree_potential(source: ForceSource, pos: np.ndarray, mass: np.ndarray, eps: float, G: float) -> np.ndarray:
    """A fine float64 tree: O(N log N) like the run's steps."""
    # keyed in the run's last frame, as the out-of-core run's diagnostic tree is (over the
    # store in that frame's curve order): the same bits
    frame = getattr(source, "frame", None)
    return Tree(pos, mass, eps, G, theta=DIAGNOSTICS_THETA, precision="double", threads=source.threads,
                frame=frame).forces()[1]


_CORE_DEFAULTS = _core.defaults()
#: what each gravity parameter is, in words, for messages and help
PARAMETER_WORDS = {"theta": "the opening angle"}

GRAVITY: dict[str, GravityKind] = {
    "direct": GravityKind(
        "direct", "direct summation on the force pipeline, O(N^2)", delivers_jerk=True,
        backends=("cpu", "cuda"), params={}, default_integrator="hermite",
        row_work=100,  # a float64 all-pairs sum costs ~3-5 mixed-precision steps (measured)
        # precise by default: the float64 sum costs <= ~5% of a run (row_work), while the
        # mixed pipeline's own potential (|dW/W| ~1e-7-1e-6) would hide Hermite's conservation
        precise_rows=True,
        build=_build_direct, diagnostic_potential=_direct_potential),
    "tree": GravityKind(
        "tree", "Barnes-Hut treecode with quadrupoles and grouped lists, O(N log N)", delivers_jerk=False,
        backends=("cpu", "cuda"), params={"theta": _CORE_DEFAULTS["tree"]["theta"]}, default_integrator="leapfrog",
        # a float64 tree at theta 0.25 costs 7-12 evaluations at the default theta (N = 1.6e4 .. 2e6,
        # BENCHMARKS "Out-of-core runs"): a row every 200 keeps rows near 5% of a run
        row_work=200,
        # the run's own potential by default: the fine tree costs 7-12 evaluations a row, and
        # the run's tree error (|dW/W| ~1e-4 at theta 0.6) is the force error it integrates
        precise_rows=False,
        build=_build_tree, diagnostic_potential=_tree_potential),
}


def resolve(name: str, overrides: dict[str, float | None], *, option: str = "gravity"
            ) -> tuple[GravityKind, dict[str, float]]:
    """The kind for ``name`` and its parameters (defaults updated by the non-None overrides).

    Raises ValueError for an unknown kind (naming ``option``, the caller's word for it) or
    a parameter the kind does not take.
    """
    if name not in GRAVITY:
        raise ValueError(f"{option}: unknown {name!r} (expected one of {', '.join(map(repr, GRAVITY))})")
    kind = GRAVITY[name]
    params = dict(kind.params)
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in params:
            takers = [k.name for k in GRAVITY.values() if key in k.params]
            raise ValueError(f"{key}: only for {option}={' or '.join(map(repr, takers))}, not {name!r}")
        params[key] = value
    return kind, params


def accel(pos: ArrayLike, mass: ArrayLike, eps: float = 0.0, G: float = 1.0, *,
          method: str = "direct", theta: float | None = None, precision: str = "mixed", backend: str = "auto",
          threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Self-gravity of one particle set, each particle's own term excluded.

    pos (N,3), mass (N,) -> (acc (N,3), pot (N,)).
    method "direct": all pairs on the pipeline (accuracy as for :class:`Pipeline`).
    method "tree": the Barnes-Hut treecode with opening angle ``theta`` (default: the
    core's, ``GRAVITY["tree"].params["theta"]``) and quadrupoles, ``precision`` for its list
    kernels (accuracy in :mod:`gravpipe.tree`); its lists run on the CPU ("auto", "cpu") or,
    with ``backend="cuda"``, on the GPU (mixed precision).
    """
    kind, params = resolve(method, {"theta": theta}, option="method")
    if kind.name == "tree":
        return Tree(pos, mass, eps=eps, G=G, threads=threads, precision=precision, backend=backend,
                    **params).forces()
    pipe = Pipeline(backend=backend, precision=precision, eps=eps, G=G, threads=threads)
    pipe.set_j(pos, mass)
    return pipe.forces(pos, exclude=np.arange(pipe.n_j, dtype=np.int64))
