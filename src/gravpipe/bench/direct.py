"""``gravpipe bench direct``: the direct-summation force pipeline, interactions per second.

For each N (a Plummer sphere, all-pairs self-gravity, eps = 1/64) and each mode
(acc+pot, acc+jerk+pot) and precision, the pipeline's compute rate is measured as the best
of several repetitions. A float64 numpy all-pairs evaluation (acc+pot, chunked
broadcasting, the way a careful Python user would write it) is timed in the same run at
the smaller sizes, and every result is also given as a ratio to that reference rate.
Flop rates use the GRAPE convention: 38 flops per interaction for acc+pot, 60 with jerk.
On the CPU, several instruction sets (``isas``, e.g. avx512 and avx2) can be measured in
one run, on the same inputs, so their rates compare directly.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

import gravpipe as gp
from gravpipe.backends import resolve_isa

FLOPS_ACC_POT = 38
FLOPS_WITH_JERK = 60
EPS = 1.0 / 64
DEFAULT_SIZES = {"cpu": [1024, 2048, 4096, 8192, 16384, 32768, 65536],
                 "cuda": [16384, 65536, 262144, 1048576]}


@dataclass
class DirectResult:
    n: int
    mode: str            # "acc+pot" or "acc+jerk+pot"
    precision: str       # "mixed", "double" or "numpy-f64"
    backend: str
    threads: int | None  # CPU threads (None on CUDA)
    seconds: float       # best compute time of one evaluation (n_i x N interactions)
    interactions_per_second: float
    gflops: float
    ratio_to_numpy: float | None
    n_i: int = 0         # i-particles per call (N: all pairs)
    isa: str | None = None  # CPU instruction set of the kernels (None on CUDA and numpy)


def numpy_all_pairs(pos: np.ndarray, mass: np.ndarray, eps: float, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Float64 reference: acc (N,3), pot (N,) by chunked numpy broadcasting, self excluded."""
    n = len(mass)
    acc = np.empty((n, 3))
    pot = np.empty(n)
    for s in range(0, n, chunk):
        d = pos[None, :, :] - pos[s:s + chunk, None, :]
        r2 = np.einsum("ijk,ijk->ij", d, d) + eps * eps
        rinv = 1.0 / np.sqrt(r2)
        rows = np.arange(min(chunk, n - s))
        rinv[rows, rows + s] = 0.0
        mr = mass[None, :] * rinv
        acc[s:s + chunk] = np.einsum("ij,ijk->ik", mr * rinv * rinv, d)
        pot[s:s + chunk] = -mr.sum(axis=1)
    return acc, pot


def _best_time(fn, min_seconds: float = 0.3, max_repeats: int = 5) -> float:
    best = float("inf")
    spent = 0.0
    for _ in range(max_repeats):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        spent += dt
        if spent >= min_seconds:
            break
    return best


def measure_numpy(n: int, seed: int = 1) -> float:
    """Interactions per second of the float64 numpy reference at size n."""
    p = gp.ic.plummer(n, seed=seed)
    pos, mass = np.array(p.pos), np.array(p.mass)
    t = _best_time(lambda: numpy_all_pairs(pos, mass, EPS), max_repeats=3)
    return n * (n - 1) / t


def measure_pipeline(n: int, precision: str, jerk: bool, backend: str = "cpu",
                     threads: int | None = None, seed: int = 1, n_i: int | None = None,
                     isa: str = "auto") -> tuple[float, int | None]:
    """(best compute seconds of one evaluation on the first n_i particles (default all) of
    a Plummer sphere of n, each excluding itself; CPU threads used, None on CUDA)."""
    p = gp.ic.plummer(n, seed=seed)
    pipe = gp.Pipeline(backend=backend, precision=precision, eps=EPS, threads=threads, isa=isa)
    pipe.set_j(p.pos, p.mass, p.vel if jerk else None)
    k = n if n_i is None else min(n_i, n)
    exclude = np.arange(k)
    pos_i = np.ascontiguousarray(p.pos[:k])
    vel = np.ascontiguousarray(p.vel[:k]) if jerk else None

    def once() -> None:
        pipe.reset_stats()
        pipe.forces(pos_i, vel, exclude=exclude)
        once.compute = min(getattr(once, "compute", float("inf")), pipe.stats.seconds_compute)

    _best_time(once)
    return once.compute, pipe.threads


def run(sizes: list[int], precisions: list[str], modes: list[str], backend: str = "cpu",
        threads: int | None = None, numpy_max_n: int = 4096,
        n_i: int | None = None, isas: list[str] | None = None) -> tuple[list[DirectResult], float]:
    """All measurements, and the numpy reference rate they are compared with. ``n_i``
    limits the i-set to that many particles (a Hermite block), against all N. ``isas``
    (CPU only; default ["auto"]) are the instruction sets to measure, each checked before
    any timing starts (an unknown or missing one raises)."""
    isas = isas or ["auto"]
    if backend == "cuda" and isas != ["auto"]:
        raise ValueError("isa: a CPU option, but the benchmark runs on CUDA")
    resolved = [resolve_isa(isa) for isa in isas] if backend == "cpu" else [None]
    ref_n = min(numpy_max_n, max(sizes))
    numpy_rate = measure_numpy(ref_n)
    results = [DirectResult(ref_n, "acc+pot", "numpy-f64", "numpy", 1, ref_n * (ref_n - 1) / numpy_rate,
                            numpy_rate, numpy_rate * FLOPS_ACC_POT / 1e9, 1.0, ref_n)]
    for n in sizes:
        for mode in modes:
            jerk = mode == "acc+jerk+pot"
            for precision in precisions:
                for isa in resolved:
                    sec, used = measure_pipeline(n, precision, jerk, backend, threads, n_i=n_i,
                                                 isa=isa or "auto")
                    k = n if n_i is None else min(n_i, n)
                    rate = k * (n - 1) / sec
                    flops = FLOPS_WITH_JERK if jerk else FLOPS_ACC_POT
                    results.append(DirectResult(n, mode, precision, backend, used, sec, rate,
                                                rate * flops / 1e9, rate / numpy_rate, k, isa))
    return results, numpy_rate


def as_json(results: list[DirectResult], machine: dict) -> dict:
    return {"benchmark": "direct", "eps": EPS, "flop_convention": {"acc+pot": FLOPS_ACC_POT,
            "acc+jerk+pot": FLOPS_WITH_JERK}, "machine": machine,
            "results": [asdict(r) for r in results]}
