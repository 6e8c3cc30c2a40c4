"""Which force backends exist in this build and on this machine, and choosing one.

``backend="auto"`` picks the best available and records which and why; an explicit backend
that is missing raises :class:`BackendUnavailableError` naming it. There is never a silent
fallback from one backend to another.
"""

from __future__ import annotations

from dataclasses import dataclass

from gravpipe import _core
from gravpipe.errors import BackendUnavailableError  # defined with the core's other errors

__all__ = ["BackendInfo", "BackendUnavailableError", "available_backends", "resolve_backend"]

KNOWN_BACKENDS = ("cpu", "cuda")


@dataclass(frozen=True)
class BackendInfo:
    name: str
    available: bool
    detail: str


def available_backends() -> dict[str, BackendInfo]:
    """Every known backend with whether it can run here and a one-line reason.

    The CPU backend always exists (its ``detail`` names the SIMD instruction set and the
    thread count). The CUDA backend exists when this build has its sources (nvcc was found
    at install time) and the CUDA runtime sees a device; ``detail`` then names device 0,
    otherwise it says which of the two is missing.
    """
    isas = _core.available_isas()
    cpu = BackendInfo("cpu", True, f"isa={isas[0]}, threads={_core.max_threads()}")
    rep = _core.cuda_report()
    if not rep["compiled"]:
        cuda = BackendInfo("cuda", False, rep["status"])
    elif rep["device_count"] == 0:
        cuda = BackendInfo("cuda", False, f"the CUDA runtime sees no device: {rep['status']}")
    else:
        cuda = BackendInfo("cuda", True, f"device 0 of {rep['device_count']}: {rep['status']}")
    return {"cpu": cpu, "cuda": cuda}


def resolve_isa(name: str) -> str:
    """The CPU instruction set that ``name`` ("auto", "avx512", "avx2", "generic") selects.

    "auto" is the environment variable ``GRAVPIPE_ISA`` when it is set and not empty, else
    the best this CPU and build have. Raises ``ValueError`` for an unknown name and
    :class:`BackendUnavailableError` for one this CPU or build lacks; the message says
    whether the name came from the argument or from ``GRAVPIPE_ISA``.
    """
    try:
        return _core.resolve_isa(name)
    except RuntimeError as exc:  # the core's BackendError
        raise BackendUnavailableError(str(exc)) from None


def resolve_backend(name: str) -> BackendInfo:
    """Return the backend to use for ``name`` ("auto", "cpu" or "cuda").

    Raises ``ValueError`` for an unknown name and :class:`BackendUnavailableError` for a
    known backend that cannot run here.
    """
    if name not in ("auto", *KNOWN_BACKENDS):
        raise ValueError(f"backend: unknown backend {name!r} (expected 'auto', 'cpu' or 'cuda')")
    backends = available_backends()
    if name == "auto":
        for cand in ("cuda", "cpu"):  # best first
            if backends[cand].available:
                return backends[cand]
    info = backends[name]
    if not info.available:
        raise BackendUnavailableError(f"backend {name!r} is not available: {info.detail}")
    return info
