"""The integrators a Simulation can run, behind one small interface (REBOUND's plug-ins).

Each entry builds a core integrator from particles, a force pipeline and its parameters,
and names its *quantum*: the time step that every output time must be a multiple of
(dt_max for Hermite block steps, where all particles are synchronized; dt for leapfrog).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gravpipe import _core
from gravpipe._validate import check_positive_scalar


@dataclass(frozen=True)
class IntegratorSpec:
    name: str
    defaults: dict[str, float]
    quantum_key: str   # the parameter every output time must be a multiple of
    build: Callable[..., Any]
    description: str


def _build_hermite(pipe, pos, vel, mass, t0, params, restart):
    f64, i64 = _split_restart(restart)
    return _core.Hermite(pipe, pos, vel, mass, t0, params["eta"], params["eta_s"], params["dt_max"], f64, i64)


def _build_leapfrog(pipe, pos, vel, mass, t0, params, restart):
    f64, i64 = _split_restart(restart)
    return _core.Leapfrog(pipe, pos, vel, mass, t0, params["dt"], f64, i64)


def _split_restart(restart: dict[str, np.ndarray] | None):
    if restart is None:
        return None, None
    f64 = {k: np.ascontiguousarray(v, np.float64) for k, v in restart.items() if v.dtype.kind == "f"}
    i64 = {k: np.ascontiguousarray(v, np.int64) for k, v in restart.items() if v.dtype.kind in "iu"}
    return f64, i64


INTEGRATORS: dict[str, IntegratorSpec] = {
    "hermite": IntegratorSpec(
        "hermite", {"eta": 0.02, "eta_s": 0.01, "dt_max": 0.125}, "dt_max", _build_hermite,
        "4th-order Hermite, block individual time steps (Makino & Aarseth 1992); a smaller eta_s "
        "(e.g. 0.0025) removes most of the start-up energy error of short runs"),
    "leapfrog": IntegratorSpec(
        "leapfrog", {"dt": 1.0 / 128}, "dt", _build_leapfrog,
        "kick-drift-kick leapfrog, shared time step"),
}


def resolve(name: str, overrides: dict[str, float | None]) -> tuple[IntegratorSpec, dict[str, float]]:
    """The spec for ``name`` and its parameters (defaults updated by non-None overrides).

    Raises ValueError for an unknown integrator, a parameter it does not take, or a
    parameter that is not a finite positive number.
    """
    if name not in INTEGRATORS:
        raise ValueError(f"integrator: unknown {name!r} (expected one of {', '.join(INTEGRATORS)})")
    spec = INTEGRATORS[name]
    params = dict(spec.defaults)
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in params:
            raise ValueError(f"{key}: not a parameter of the {name} integrator "
                             f"(it takes {', '.join(params)})")
        params[key] = check_positive_scalar(key, value, allow_zero=False)
    return spec, params
