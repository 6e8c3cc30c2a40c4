"""The GRAPE-style force pipeline: j-particle write, i-particle write, compute, result read.

    pipe = Pipeline(backend="cpu", precision="mixed", eps=1/64)   # or "cuda", or "auto"
    pipe.set_j(pos, mass)                         # j-particle write
    acc, pot = pipe.forces(pos_i, exclude=idx)    # i-particle write + compute + result read
    pipe.stats                                    # interactions, bytes and seconds per stage

With backend="cuda", CuPy arrays (CUDA device memory) are taken as they are and the
results come back as CuPy arrays: nothing crosses the bus.

Forces (Plummer softening, d_ij = x_j - x_i, r^2 = |d_ij|^2 + eps^2):
    acc_i  =  G sum_j m_j d_ij / r^3
    pot_i  = -G sum_j m_j / r
    jerk_i =  G sum_j m_j [v_ij / r^3 - 3 (d_ij . v_ij) d_ij / r^5],   v_ij = v_j - v_i

Precision modes and their tested error bounds (relative RMS over particles of
|a - a_ref| / |a_ref| against a float64 reference, Plummer and clustered inputs):
    "double": float64 throughout; acc, pot, jerk <= 1e-12.
    "mixed":  coordinates as float hi+lo pairs (~48 bits, so differences keep float64-level
              precision and results do not change when the system is translated), float32
              arithmetic with rsqrt + one Newton step, float32 partial sums over tiles of 32
              j-particles flushed into float64; acc, pot <= 1e-6, jerk <= 1e-5 (measured
              ~1.3e-7, ~5e-8 and ~4e-7 on Plummer and clustered sets). Both i and j sets are
              put in curve order internally; tiles far from an i-block (all lanes beyond
              1.5 tile radii) use tile-relative float coordinates, one add per coordinate.
              Coordinates and velocities must stay below 1e18 in magnitude (float32 range
              of r^2).
              CUDA: each block of 128 i-particles (in curve order) converts the j-tiles to
              coordinates relative to its centre; tiles whose bounding box lies at least
              one block radius away use the float hi parts alone (dx within ~3.5 float
              ulps), nearer tiles the exact hi+lo difference. Same tested bounds; measured
              ~1.2e-7, ~5e-8 and ~3e-7 on the same sets.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import ArrayLike

from gravpipe import _core
from gravpipe import _device_arrays as dev
from gravpipe._validate import (as_float_array, as_index_array, check_G, check_positive_scalar, check_same_length,
                                check_sources, check_threads)
from gravpipe.backends import BackendUnavailableError, available_backends, resolve_backend, resolve_isa

__all__ = ["Pipeline", "PipelineStats", "accel", "available_backends", "BackendUnavailableError"]

PRECISIONS = ("mixed", "double")
MIXED_COORD_LIMIT = 1e18


@dataclass(frozen=True)
class PipelineStats:
    """Work and wall time of each pipeline stage since the last ``reset_stats()``.

    Bytes count what each stage writes into or reads out of the pipeline's memories
    (32 bytes per j-particle position+mass record, 32 more with velocities; per i-particle
    32 bytes in and 32 out, 56 each with jerk), the quantities a GRAPE host interface
    moves. Seconds are wall-clock.
    """

    calls: int = 0
    interactions: int = 0
    j_particles: int = 0
    i_particles: int = 0
    bytes_j_write: int = 0
    bytes_i_write: int = 0
    bytes_result_read: int = 0
    seconds_j_write: float = 0.0
    seconds_i_write: float = 0.0
    seconds_compute: float = 0.0
    seconds_result_read: float = 0.0
    seconds_comm: float = 0.0  # between processes (MPI runs): the reduction of partial forces
    tile_visits: int = 0
    far_tile_visits: int = 0

    @property
    def far_tile_fraction(self) -> float:
        """Mixed mode: share of (i-vector, j-tile) pairs on the fast far path."""
        return self.far_tile_visits / self.tile_visits if self.tile_visits else 0.0

    @property
    def seconds_total(self) -> float:
        return (self.seconds_j_write + self.seconds_i_write + self.seconds_compute + self.seconds_result_read
                + self.seconds_comm)

    @property
    def interactions_per_second(self) -> float:
        """Interactions over compute time (0 before any call)."""
        return self.interactions / self.seconds_compute if self.seconds_compute > 0 else 0.0

    def __str__(self) -> str:
        rows = [f"{f.name:>20s} {getattr(self, f.name):.6g}" for f in fields(self)]
        rows.append(f"{'interactions/s':>20s} {self.interactions_per_second:.4g}")
        return "\n".join(rows)


class Pipeline:
    """A force pipeline holding a set of j-particles (sources).

    Parameters
    ----------
    backend : "auto" | "cpu" | "cuda"
        "auto" picks the best available and records it in ``.backend`` and
        ``.backend_detail``; an explicit backend that is missing raises
        :class:`BackendUnavailableError` naming it.
    precision : "mixed" | "double"
        See the module docstring for what each mode computes and its error bound.
    eps : float
        Plummer softening length (>= 0), in length units.
    G : float
        Gravitational constant (1 in N-body units).
    threads : int or None
        CPU threads (None: all OpenMP threads). Results are bitwise identical for any count.
        CPU backend only: given when the backend is "cuda", it is an error.
    isa : "auto" | "avx512" | "avx2" | "generic"
        CPU instruction set of the kernels ("auto": the environment variable GRAVPIPE_ISA
        if set, else the best this CPU has). Unknown: ``ValueError``; one this CPU or build
        lacks: :class:`BackendUnavailableError`. CPU only.
    device : int
        CUDA device number (backend "cuda").

    Calls on one Pipeline are serialized; use one Pipeline per thread for concurrency.
    """

    def __init__(self, backend: str = "auto", precision: str = "mixed", eps: float = 0.0,
                 G: float = 1.0, *, threads: int | None = None, isa: str = "auto", device: int = 0):
        if precision not in PRECISIONS:
            raise ValueError(f"precision: unknown mode {precision!r} (expected 'mixed' or 'double')")
        eps = check_positive_scalar("eps", eps)
        G = check_G(G)
        threads = check_threads(threads)
        info = resolve_backend(backend)
        self.backend: str = info.name
        self.backend_detail: str = info.detail
        self.precision = precision
        if info.name == "cuda":
            for name, value, default in (("threads", threads, None), ("isa", isa, "auto")):
                if value != default:
                    raise ValueError(f"{name}: a CPU option, but backend {backend!r} runs on CUDA; "
                                     "pass backend='cpu' to use it")
            self._impl = _core.CudaPipeline(precision, eps, G, int(device))
            self.backend_detail = self._impl.device_name
        else:
            self._impl = _core.CpuPipeline(precision, eps, G, resolve_isa(isa), int(threads or 0))
            self.backend_detail = f"isa={self._impl.isa}, threads={self._impl.threads}"

    @property
    def eps(self) -> float:
        return self._impl.eps

    @property
    def G(self) -> float:
        return self._impl.G

    @property
    def isa(self) -> str | None:
        """CPU instruction set of the kernels (None on CUDA)."""
        return getattr(self._impl, "isa", None)

    @property
    def threads(self) -> int | None:
        """CPU threads of the kernels (None on CUDA)."""
        return getattr(self._impl, "threads", None)

    @property
    def provider(self):
        """The core force provider (``_core.CpuPipeline`` or ``_core.CudaPipeline``) that
        integrators take their forces from."""
        return self._impl

    @property
    def n_j(self) -> int:
        """Number of j-particles currently in the pipeline (0 before ``set_j``)."""
        return self._impl.n_j

    def __repr__(self) -> str:
        return (f"Pipeline(backend={self.backend!r}, precision={self.precision!r}, eps={self.eps}, "
                f"G={self.G}, isa={self.isa!r}, threads={self.threads}, n_j={self.n_j})")

    def set_j(self, pos: ArrayLike, mass: ArrayLike, vel: ArrayLike | None = None) -> None:
        """j-particle write: pos (N,3), mass (N,) >= 0, vel (N,3) (needed for jerk).
        With backend "cuda", CuPy arrays are read in device memory."""
        if dev.is_device_array(pos):
            self._set_j_device(pos, mass, vel)
            return
        pos_a, mass_a = check_sources(pos, mass, "j-particle set")
        self._check_range("pos", pos_a)
        vel_a = None
        if vel is not None:
            vel_a = as_float_array("vel", vel, (None, 3))
            check_same_length(pos=pos_a, vel=vel_a)
            self._check_range("vel", vel_a)
        self._impl.set_j(pos_a, mass_a, vel_a)

    def forces(self, pos_i: ArrayLike, vel_i: ArrayLike | None = None,
               exclude: ArrayLike | None = None) -> tuple[np.ndarray, ...]:
        """i-particle write + compute + result read.

        Parameters
        ----------
        pos_i : (n,3) float64 positions of the i-particles (sinks).
        vel_i : (n,3) float64 velocities; when given, the jerk is computed too (the
            j-particles must have been written with velocities).
        exclude : (n,) int, optional: for each i, the index of one j-particle to leave out
            (its own index when i is also a j), or -1.

        Returns
        -------
        (acc (n,3), pot (n,)) or, with ``vel_i``, (acc (n,3), jerk (n,3), pot (n,)).
        Raises ``ValueError`` for bad arguments and for a non-finite result (a pair at zero
        separation with eps = 0).
        """
        if self.n_j == 0:
            raise ValueError("forces: no j-particles; call set_j first")
        if dev.is_device_array(pos_i):
            return self._forces_device(pos_i, vel_i, exclude)
        pos_a = as_float_array("pos_i", pos_i, (None, 3))
        n = len(pos_a)
        if n == 0:
            raise ValueError("pos_i: empty i-particle set")
        self._check_range("pos_i", pos_a)
        vel_a = None
        if vel_i is not None:
            vel_a = as_float_array("vel_i", vel_i, (None, 3))
            check_same_length(pos_i=pos_a, vel_i=vel_a)
            self._check_range("vel_i", vel_a)
            if not self._impl.has_j_vel:
                raise ValueError("vel_i: jerk needs j-particle velocities; call set_j(pos, mass, vel)")
        exclude_a = None
        if exclude is not None:
            exclude_a = as_index_array("exclude", exclude, n)
            bad = np.flatnonzero((exclude_a < -1) | (exclude_a >= self.n_j))
            if bad.size:
                k = int(bad[0])
                raise ValueError(f"exclude: index {exclude_a[k]} at position {k} is outside [-1, {self.n_j})")
        acc = np.empty((n, 3))
        pot = np.empty(n)
        jerk = np.empty((n, 3)) if vel_a is not None else None
        self._impl.forces(pos_a, vel_a, exclude_a, acc, pot, jerk)
        _check_results(acc, pot, jerk)
        return (acc, pot) if jerk is None else (acc, jerk, pot)

    def _require_cuda(self, what: str) -> None:
        if self.backend != "cuda":
            raise ValueError(f"{what}: a CUDA device array, but this pipeline runs on {self.backend!r}; "
                             "pass host (numpy) arrays, e.g. cupy.asnumpy(a)")

    def _set_j_device(self, pos, mass, vel) -> None:
        self._require_cuda("pos")
        pos_d = dev.as_device_float("pos", pos, 3)
        n = pos_d.shape[0]
        if n == 0:
            raise ValueError("pos: empty j-particle set")
        mass_d = dev.as_device_float("mass", mass, None, n)
        if bool((mass_d < 0).any()):
            raise ValueError("mass: negative value in the device array")
        vel_d = None if vel is None else dev.as_device_float("vel", vel, 3, n)
        if self.precision == "mixed":
            dev.check_device_range("pos", pos_d)
            if vel_d is not None:
                dev.check_device_range("vel", vel_d)
        self._impl.set_j_device(pos_d, mass_d, vel_d)

    def _forces_device(self, pos_i, vel_i, exclude):
        self._require_cuda("pos_i")
        pos_d = dev.as_device_float("pos_i", pos_i, 3)
        n = pos_d.shape[0]
        if n == 0:
            raise ValueError("pos_i: empty i-particle set")
        vel_d = None if vel_i is None else dev.as_device_float("vel_i", vel_i, 3, n)
        if vel_d is not None and not self._impl.has_j_vel:
            raise ValueError("vel_i: jerk needs j-particle velocities; call set_j(pos, mass, vel)")
        if self.precision == "mixed":
            dev.check_device_range("pos_i", pos_d)
        ex_d = None if exclude is None else dev.as_device_exclude(exclude, n, self.n_j)
        acc, pot = dev.empty_like_rows(n, 3), dev.empty_like_rows(n, None)
        jerk = None if vel_d is None else dev.empty_like_rows(n, 3)
        self._impl.forces_device(pos_d, vel_d, ex_d, acc, pot, jerk)
        dev.check_device_results(acc, pot, jerk)
        return (acc, pot) if jerk is None else (acc, jerk, pot)

    @property
    def stats(self) -> PipelineStats:
        """A snapshot of the per-stage counters and timers."""
        return PipelineStats(**self._impl.stats())

    def reset_stats(self) -> None:
        self._impl.reset_stats()

    def _check_range(self, name: str, arr: np.ndarray) -> None:
        if self.precision == "mixed" and arr.size:
            big = np.abs(arr).max()
            if big >= MIXED_COORD_LIMIT:
                raise ValueError(f"{name}: magnitude {big:.3g} exceeds the mixed-precision range "
                                 f"({MIXED_COORD_LIMIT:.0e}); use precision='double'")


def _check_results(acc: np.ndarray, pot: np.ndarray, jerk: np.ndarray | None) -> None:
    for name, arr in (("acc", acc), ("pot", pot), ("jerk", jerk)):
        if arr is None:
            continue
        finite = np.isfinite(arr)
        if not finite.all():
            row = int(np.argwhere(~finite)[0][0])
            raise ValueError(
                f"forces: non-finite {name} for i-particle {row}: it coincides with a j-particle "
                "and eps = 0 makes that force infinite (use eps > 0 or exclude the pair)")
