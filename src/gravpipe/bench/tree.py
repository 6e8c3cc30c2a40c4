"""``gravpipe bench tree``: speed and accuracy of the Barnes-Hut treecode against direct summation.

For each model (a Plummer sphere, ``gravpipe.ic.plummer``; a uniform cube of n equal
masses summing to 1 in [-1, 1]^3, ``gravpipe.ic.uniform_cube(side=2)``), each N, each
quadrupole setting and each opening angle theta, one full self-gravity evaluation (the
``Tree`` construction: sort, build, moments; then ``.forces()``: walk and interaction
lists) is timed as the best of ``repeat`` wall-clock repetitions, with its breakdown from
``Tree.stats``, the interactions and MAC tests per body, and interactions per second
((pp + pc) / seconds_forces). The softening is eps = (1/64) (N / 1e4)^(-1/3) unless given.

Accuracy: the error |a_tree - a_direct| / |a_direct| over a random sample of >= 1000
particles (median and 99th percentile), the reference being the float64 direct pipeline
(``Pipeline("cpu", "double")``, all N particles as sources, the sample as i-particles,
each one's own term excluded). That reference is computed once per (model, N) and also
timed: its rate, sample * N interactions over its wall time, gives the cost of a direct
all-pairs evaluation extrapolated to N^2 interactions, and each tree row reports the
ratio of that cost to its own time ("x direct"). The error reference is float64; the speed
reference is the direct pipeline in the tree's own ``precision`` (mixed by default), timed
on the same sample, so that "x direct" compares like with like.

Cost: the reference costs sample * N interactions, 1e10 at N = 1e7 with the default sample
(~10 s on the 2-core development machine); the tree rows at N = 1e7 take seconds each.

Salmon, J. K. & Warren, M. S. 1994, J. Comp. Phys. 111, 136 ("Skeletons from the treecode
closet") report interactions and MAC tests per body for uniform distributions; the
uniform-cube rows at the default theta with quadrupoles are the ones to compare with theirs
(``sw_comparison``).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np

import gravpipe as gp
from gravpipe.tree import TreeGravity, TreeStats

MODELS = ("plummer", "cube")
DEFAULT_SIZES = (100_000, 1_000_000, 10_000_000)
DEFAULT_THETAS = (0.4, 0.5, 0.6, 0.8)
DEFAULT_REPEAT = 2
DEFAULT_SAMPLE = 1000
MIN_SAMPLE = 1000
QUICK_SIZES = (20_000, 100_000)
QUICK_THETAS = (0.6, 0.8)
QUICK_REPEAT = 1
SW_THETA = gp.tree.DEFAULT_THETA  # the treecode's default opening angle: the Salmon & Warren row
SEED = 1
BACKEND = "cpu"
REFERENCE_PRECISION = "double"


@dataclass
class DirectReference:
    """The float64 direct-summation reference for one (model, N): forces on ``sample``
    particles from all N. Seconds are wall-clock for one ``Pipeline.forces`` call (one
    measurement, not best-of); interactions = sample * N."""

    model: str
    n: int
    eps: float
    sample: int
    precision: str                   # of the speed reference: the tree's list-kernel precision
    threads: int
    seconds: float                   # one forces() call on the sample, in ``precision``
    interactions: int                # sample * n
    interactions_per_second: float   # interactions / seconds
    seconds_all_pairs: float         # n^2 / interactions_per_second: a direct all-pairs evaluation, extrapolated
    seconds_error_reference: float   # the float64 forces() call that the errors are measured against


@dataclass
class TreeBenchResult:
    """One treecode measurement: (model, N, quadrupole, theta). Seconds are wall-clock, of
    the best of ``repeat`` full evaluations; the breakdown is that evaluation's
    ``Tree.stats`` (walk and evaluate are thread-seconds scaled to add up to the wall time
    of their shared parallel loop, which ``seconds_forces`` is). Per-body figures are
    totals over the N bodies divided by N. Errors are dimensionless, over the sample."""

    model: str                 # "plummer" or "cube"
    n: int
    eps: float
    theta: float
    quadrupole: bool
    precision: str             # the tree's list kernels: "mixed" or "double"
    threads: int
    repeat: int
    seconds: float             # one full evaluation: Tree(...) construction + forces(), best of repeat
    seconds_sort: float
    seconds_build: float
    seconds_moments: float
    seconds_walk: float
    seconds_evaluate: float
    seconds_forces: float      # walk + evaluate: the forces() parallel loop
    nodes: int
    leaves: int
    groups: int
    pp_interactions: int       # particle-particle, total over all bodies
    pc_interactions: int       # particle-cell, total over all bodies
    mac_tests: int             # opening-criterion tests, total (one per group and cell visited)
    pp_per_body: float
    pc_per_body: float
    pc_local_per_body: float   # the part of pc_per_body delivered by the runs' local expansions
    mac_per_body: float
    interactions_per_body: float     # pp_per_body + pc_per_body
    interactions_per_second: float   # (pp + pc) / seconds_forces
    error_median: float        # median over the sample of |a_tree - a_direct| / |a_direct|
    error_p99: float           # 99th percentile of the same
    sample: int                # particles in the error sample
    direct_interactions_per_second: float  # direct pipeline rate in the same precision (DirectReference)
    speedup_vs_direct: float   # (n^2 / direct rate) / seconds: "x direct"


def default_eps(n: int) -> float:
    """The benchmark's softening: (1/64) (N / 1e4)^(-1/3), i.e. 1/64 at N = 1e4, scaled
    with the mean interparticle spacing."""
    return (1.0 / 64.0) * (n / 1e4) ** (-1.0 / 3.0)


def make_model(model: str, n: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """(pos (n,3), mass (n,)) of ``model``: "plummer" (N-body units) or "cube" (uniform in
    [-1, 1]^3, equal masses summing to 1; centre of mass at the origin)."""
    if model == "plummer":
        p = gp.ic.plummer(n, seed=seed)
    elif model == "cube":
        p = gp.ic.uniform_cube(n, seed=seed, side=2.0)
    else:
        raise ValueError(f"model: unknown {model!r} (expected one of {', '.join(MODELS)})")
    return np.ascontiguousarray(p.pos), np.ascontiguousarray(p.mass)


def check_args(sizes: Sequence[int], models: Sequence[str], thetas: Sequence[float], repeat: int,
               sample: int, eps: float | None) -> None:
    """Raise ``ValueError`` naming the argument for values ``run`` cannot use."""
    if not sizes:
        raise ValueError("sizes: give at least one N")
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"sizes: expected positive integers, got {n!r}")
    if not models:
        raise ValueError("models: give at least one model")
    for m in models:
        if m not in MODELS:
            raise ValueError(f"models: unknown {m!r} (expected one of {', '.join(MODELS)})")
    if not thetas:
        raise ValueError("thetas: give at least one opening angle")
    for t in thetas:
        if not (isinstance(t, (int, float, np.floating)) and math.isfinite(t) and t > 0):
            raise ValueError(f"thetas: opening angles must be finite and > 0, got {t!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, (int, np.integer)) or repeat < 1:
        raise ValueError(f"repeat: must be an integer >= 1, got {repeat!r}")
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or sample < MIN_SAMPLE:
        raise ValueError(f"sample: must be an integer >= {MIN_SAMPLE} (the 99th percentile needs it), "
                         f"got {sample!r}")
    if sample > min(sizes):
        raise ValueError(f"sample: {sample} particles exceed the smallest N ({min(sizes)})")
    if eps is not None and not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps: must be finite and >= 0, got {eps!r}")


def _timed_forces(pos: np.ndarray, mass: np.ndarray, eps: float, sel: np.ndarray, precision: str,
                  threads: int | None) -> tuple[np.ndarray, float, int]:
    """(direct accelerations on ``sel``, own term excluded; seconds of the forces() call; threads)."""
    pipe = gp.Pipeline(BACKEND, precision, eps=eps, threads=threads)
    pipe.set_j(pos, mass)
    t0 = time.perf_counter()
    acc, _ = pipe.forces(pos[sel], exclude=sel)
    return acc, time.perf_counter() - t0, pipe.threads


def measure_reference(model: str, n: int, pos: np.ndarray, mass: np.ndarray, eps: float, sel: np.ndarray,
                      threads: int | None = None, precision: str = "mixed"
                      ) -> tuple[np.ndarray, DirectReference]:
    """Float64 direct accelerations on the particles ``sel`` (own term excluded: the error
    reference), and the timed speed reference: the direct pipeline in the tree's
    ``precision`` on the same sample, so that "x direct" compares like with like."""
    ref, seconds_ref, used = _timed_forces(pos, mass, eps, sel, REFERENCE_PRECISION, threads)
    seconds = seconds_ref
    if precision != REFERENCE_PRECISION:
        _, seconds, used = _timed_forces(pos, mass, eps, sel, precision, threads)
    interactions = len(sel) * n
    rate = interactions / seconds if seconds > 0 else 0.0
    return ref, DirectReference(model=model, n=n, eps=eps, sample=len(sel), precision=precision,
                                threads=used, seconds=seconds, interactions=interactions,
                                interactions_per_second=rate,
                                seconds_all_pairs=float(n) * n / rate if rate > 0 else 0.0,
                                seconds_error_reference=seconds_ref)


def measure_tree(pos: np.ndarray, mass: np.ndarray, eps: float, theta: float, quadrupole: bool,
                 repeat: int, threads: int | None, precision: str):
    """(best wall seconds of Tree(...) + forces(), that evaluation's TreeStats, its acc)."""
    best, stats, acc = math.inf, None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        tree = gp.Tree(pos, mass, eps, theta=theta, quadrupole=quadrupole, threads=threads,
                       precision=precision)
        a, _ = tree.forces()
        wall = time.perf_counter() - t0
        if wall < best:
            best, stats, acc = wall, tree.stats, a
        del tree, a
    return best, stats, acc


def run(sizes: Sequence[int] = DEFAULT_SIZES, models: Sequence[str] = MODELS,
        thetas: Sequence[float] = DEFAULT_THETAS, quadrupoles: Sequence[bool] = (True, False),
        repeat: int = DEFAULT_REPEAT, sample: int = DEFAULT_SAMPLE, threads: int | None = None,
        precision: str = "mixed", eps: float | None = None, seed: int = SEED,
        progress: Callable[[str], None] | None = None
        ) -> tuple[list[TreeBenchResult], list[DirectReference]]:
    """All measurements, in the order model, N, quadrupole, theta, and the direct
    references (one per (model, N)) they are compared with.

    ``eps`` None: ``default_eps(N)`` for each N. ``threads`` None: all OpenMP threads.
    ``progress``, if given, is called with a short description before each step. Raises
    ``ValueError`` naming the argument for bad values (``check_args``; the Tree checks
    ``precision``).
    """
    check_args(sizes, models, thetas, repeat, sample, eps)
    from gravpipe import _core

    used_threads = threads or _core.max_threads()
    say = progress or (lambda _msg: None)
    results: list[TreeBenchResult] = []
    references: list[DirectReference] = []
    for model in models:
        for n in sizes:
            n = int(n)
            say(f"{model} N = {n}: initial conditions")
            pos, mass = make_model(model, n, seed)
            e = default_eps(n) if eps is None else float(eps)
            sel = np.sort(np.random.default_rng(seed).choice(n, sample, replace=False))
            say(f"{model} N = {n}: direct reference on {sample} particles ({sample * n:.1e} interactions)")
            ref, direct = measure_reference(model, n, pos, mass, e, sel, threads, precision)
            references.append(direct)
            ref_norm = np.linalg.norm(ref, axis=1)
            for quad in quadrupoles:
                for theta in thetas:
                    say(f"{model} N = {n}: theta {theta:g}, quadrupole {'yes' if quad else 'no'}")
                    seconds, s, acc = measure_tree(pos, mass, e, float(theta), bool(quad), repeat, threads,
                                                   precision)
                    err = np.linalg.norm(acc[sel] - ref, axis=1) / ref_norm
                    del acc
                    inter = s.pp_interactions + s.pc_interactions
                    results.append(TreeBenchResult(
                        model=model, n=n, eps=e, theta=float(theta), quadrupole=bool(quad), precision=precision,
                        threads=used_threads, repeat=repeat, seconds=seconds,
                        seconds_sort=s.seconds_sort, seconds_build=s.seconds_build,
                        seconds_moments=s.seconds_moments, seconds_walk=s.seconds_walk,
                        seconds_evaluate=s.seconds_evaluate, seconds_forces=s.seconds_forces,
                        nodes=s.nodes, leaves=s.leaves, groups=s.groups,
                        pp_interactions=s.pp_interactions, pc_interactions=s.pc_interactions,
                        mac_tests=s.mac_tests, pp_per_body=s.pp_per_body, pc_per_body=s.pc_per_body,
                        pc_local_per_body=s.pc_local_per_body,
                        mac_per_body=s.mac_per_body, interactions_per_body=s.pp_per_body + s.pc_per_body,
                        interactions_per_second=inter / s.seconds_forces if s.seconds_forces > 0 else 0.0,
                        error_median=float(np.median(err)), error_p99=float(np.percentile(err, 99)),
                        sample=sample, direct_interactions_per_second=direct.interactions_per_second,
                        speedup_vs_direct=direct.seconds_all_pairs / seconds if seconds > 0 else 0.0))
            del pos, mass
    return results, references


def _row_key(r: TreeBenchResult) -> list[str]:
    return [r.model, str(r.n), "yes" if r.quadrupole else "no", f"{r.theta:g}"]


def tables(results: Sequence[TreeBenchResult]) -> list:
    """Two rich Tables, one row per (model, N, quadrupole, theta): the time of one full
    evaluation with its breakdown, interactions/s and the ratio to direct summation; then
    the work per body and the error against direct summation."""
    from rich import box
    from rich.table import Table

    repeat = max((r.repeat for r in results), default=1)
    key = ("model", "N", "quad", "theta")
    speed = Table(title=f"seconds per full evaluation (best of {repeat}) and its breakdown", box=box.SIMPLE_HEAD)
    for col in key + ("total", "sort", "build", "moments", "walk", "evaluate", "interactions/s", "x direct"):
        speed.add_column(col, justify="right")
    work = Table(title="work per body and error |a_tree - a_direct| / |a_direct| over the sample",
                 box=box.SIMPLE_HEAD)
    for col in key + ("pp/body", "pc/body", "of which local", "interactions/body", "MAC tests/body", "err median", "err p99"):
        work.add_column(col, justify="right")
    for r in results:
        speed.add_row(*_row_key(r), *(f"{x:.4f}" for x in (r.seconds, r.seconds_sort, r.seconds_build,
                                                             r.seconds_moments, r.seconds_walk, r.seconds_evaluate)),
                      f"{r.interactions_per_second:.3e}", f"{r.speedup_vs_direct:.1f}")
        work.add_row(*_row_key(r), f"{r.pp_per_body:.0f}", f"{r.pc_per_body:.0f}", f"{r.pc_local_per_body:.0f}",
                     f"{r.interactions_per_body:.0f}", f"{r.mac_per_body:.1f}", f"{r.error_median:.2e}",
                     f"{r.error_p99:.2e}")
    return [speed, work]


def reference_lines(references: Sequence[DirectReference]) -> list[str]:
    """One line per direct reference: its rate and the extrapolated all-pairs time."""
    return [f"direct reference, {d.model} N = {d.n}: {d.sample} particles in {d.seconds:.3f} s "
            f"({d.precision}, {d.threads} threads) = {d.interactions_per_second:.3e} interactions/s; "
            f"all pairs extrapolated: {d.seconds_all_pairs:.3g} s" for d in references]


def sw_comparison(results: Sequence[TreeBenchResult]) -> str | None:
    """The Salmon & Warren (1994) comparison line: interactions and MAC tests per body of
    the uniform-cube rows at the default theta with quadrupoles; None when there are none."""
    rows = [r for r in results if r.model == "cube" and r.quadrupole and math.isclose(r.theta, SW_THETA)]
    if not rows:
        return None
    parts = [f"N = {r.n}: {r.interactions_per_body:.0f} interactions/body ({r.pp_per_body:.0f} pp + "
             f"{r.pc_per_body:.0f} pc), {r.mac_per_body:.1f} MAC tests/body" for r in rows]
    return (f"Salmon & Warren (1994) comparison, uniform cube, theta {SW_THETA:g}, quadrupole: "
            + "; ".join(parts))


def summary(results: Sequence[TreeBenchResult], references: Sequence[DirectReference]) -> str:
    """Plain-text lines after the table: the references, the S&W line, what the columns mean."""
    lines = reference_lines(references)
    sw = sw_comparison(results)
    if sw is not None:
        lines.append(sw)
    lines.append("seconds: one full evaluation (Tree construction: sort + build + moments; forces: walk + "
                 "evaluate), best of repeat; interactions/s: (pp + pc) / (walk + evaluate); errors: "
                 "|a_tree - a_direct| / |a_direct| over the sample; 'x direct': the direct all-pairs time "
                 "extrapolated from the direct pipeline's rate in the tree's precision, measured in this run "
                 "on the sample (N^2 / rate), over the tree's time")
    return "\n".join(lines)


def as_json(results: Sequence[TreeBenchResult], references: Sequence[DirectReference], machine: dict) -> dict:
    return {"benchmark": "tree", "backend": BACKEND,
            "eps_default": "(1/64) * (N/1e4)^(-1/3)",
            "error": "|a_tree - a_direct| / |a_direct| over a random sample; median and 99th percentile",
            "reference": "Pipeline('cpu', 'double') on the sample, all N as sources, own term excluded; "
                         "interactions = sample * N; seconds_all_pairs = N^2 / its rate",
            "machine": machine,
            "references": [asdict(d) for d in references],
            "results": [asdict(r) for r in results]}


# ---- CPU lists against GPU lists (``gravpipe bench tree --backend cuda``) -------------------


@dataclass(frozen=True)
class BackendResult:
    """One tree evaluation with its lists on one backend (the walk is on the CPU threads)."""
    model: str
    n: int
    theta: float
    backend: str               # "cpu" or "cuda"
    seconds: float             # the provider's tree rebuilt + self-gravity, best of repeat (warm buffers)
    seconds_forces: float      # the forces alone (walk + lists), that evaluation's
    interactions: int          # particle + cell terms
    interactions_per_second: float  # interactions / seconds_forces
    rel_rms_vs_cpu: float      # acceleration difference from the CPU lists (0 for the CPU row)


def compare_backends(sizes: Sequence[int], model: str = "plummer", theta: float = 0.6, eps: float | None = None,
                     repeat: int = 1, threads: int | None = None,
                     progress: Callable[[str], None] | None = None,
                     backends: Sequence[str] = ("cpu", "cuda")) -> list[BackendResult]:
    """The same tree (mixed precision) with its lists on each of ``backends`` (the CPU first:
    the others' forces are compared with its), measured in one run, in the steady state of a
    run: each backend's force provider (the one a
    ``Simulation`` steps with) rebuilds its tree and evaluates self-gravity once unmeasured,
    which allocates its arrays and, on the GPU, its lanes' pinned and device buffers, then
    ``repeat`` times measured (the best kept). N = 1e7 takes ~30-60 s on a 16-core host
    with an H100 (the model and 2 x (repeat + 1) evaluations)."""
    if not backends or backends[0] != "cpu":
        raise ValueError(f"backends: the CPU comes first, as the reference; got {tuple(backends)}")
    rows: list[BackendResult] = []
    for n in sizes:
        pos, mass = make_model(model, n)
        e = default_eps(n) if eps is None else eps
        own = np.arange(n, dtype=np.int64)
        acc_cpu = None
        for backend in backends:
            if progress:
                progress(f"{model} N={n} theta={theta}: lists on {backend}")
            provider = TreeGravity(e, 1.0, theta=theta, threads=threads, backend=backend).provider
            acc, pot = np.empty((n, 3)), np.empty(n)
            best, stats = math.inf, None
            for rep in range(repeat + 1):  # the first one warms the buffers: not measured
                t0 = time.perf_counter()
                provider.set_j(pos, mass, None)
                provider.forces(pos, own, acc, pot)
                wall = time.perf_counter() - t0
                if rep > 0 and wall < best:
                    best, stats = wall, TreeStats(**provider.tree_stats())
            del provider
            inter = int(stats.pp_interactions + stats.pc_interactions)
            if backend == "cpu":
                acc_cpu, diff = acc, 0.0
            else:
                num = np.sum((acc - acc_cpu) ** 2, axis=1)
                den = np.sum(acc_cpu ** 2, axis=1)
                diff = float(np.sqrt(np.mean(num / np.where(den > 0, den, 1.0))))
            rate = inter / stats.seconds_forces if stats.seconds_forces > 0 else 0.0
            rows.append(BackendResult(model, n, theta, backend, best, stats.seconds_forces, inter, rate, diff))
    return rows


def backend_table(rows: Sequence[BackendResult]):
    from rich.table import Table

    t = Table(title="tree lists: CPU vs GPU (same walk, same lists)")
    for col in ("model", "N", "theta", "lists on", "build+forces s", "forces s", "interactions",
                "interactions/s", "rel RMS vs CPU"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r.model, str(r.n), f"{r.theta:g}", r.backend, f"{r.seconds:.3f}", f"{r.seconds_forces:.3f}",
                  f"{r.interactions:.3g}", f"{r.interactions_per_second:.3g}",
                  "-" if r.backend == "cpu" else f"{r.rel_rms_vs_cpu:.2e}")
    return t
