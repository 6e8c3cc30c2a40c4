"""The integrators a Simulation can run, behind one small interface (REBOUND's plug-ins).

Each entry builds a core integrator from particles, a force provider and its parameters,
says whether it needs jerks from the provider, and names its *quantum*: the step whose
multiples (counted from the integrator's grid origin) it reaches without an extra force
evaluation (dt_max for Hermite block steps, where all particles are synchronized; dt for
leapfrog). Any other stop costs one force evaluation on all particles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gravpipe import _core
from gravpipe._validate import check_magnitude, check_positive_scalar


@dataclass(frozen=True)
class IntegratorSpec:
    name: str
    defaults: dict[str, float]
    quantum_key: str   # the step parameter: stops at multiples of it need no extra force evaluation
    build: Callable[..., Any]
    description: str
    needs_jerk: bool   # whether its force provider must deliver jerks


def _check_range(pipe, pos, vel) -> None:
    """The state an integrator starts from against the range of its force provider's
    arithmetic (float32 in mixed precision: |x|, |v| <= 1e18, ``_validate.MAX_MAGNITUDE``):
    ValueError naming the particle's index, before the first forces turn an overflow into
    a NaN far from its cause. A provider that does not say its precision is held to float64's."""
    precision = getattr(pipe, "precision", "double")
    check_magnitude("pos", pos, precision)
    check_magnitude("vel", vel, precision)


def _build_hermite(pipe, pos, vel, mass, t0, params, restart):
    _check_range(pipe, pos, vel)
    f64, i64 = _split_restart(restart)
    return _core.Hermite(pipe, pos, vel, mass, t0, params["eta"], params["eta_s"], params["dt_max"], f64, i64)


def _build_leapfrog(pipe, pos, vel, mass, t0, params, restart):
    _check_range(pipe, pos, vel)
    f64, i64 = _split_restart(restart)
    return _core.Leapfrog(pipe, pos, vel, mass, t0, params["dt"], f64, i64)


def _split_restart(restart: dict[str, np.ndarray] | None):
    if restart is None:
        return None, None
    f64 = {k: np.ascontiguousarray(v, np.float64) for k, v in restart.items() if v.dtype.kind == "f"}
    i64 = {k: np.ascontiguousarray(v, np.int64) for k, v in restart.items() if v.dtype.kind in "iu"}
    return f64, i64


# defaults: the core's parameter structs (HermiteParams, LeapfrogParams), never restated here
_DEFAULTS = _core.defaults()

INTEGRATORS: dict[str, IntegratorSpec] = {
    "hermite": IntegratorSpec(
        "hermite", dict(_DEFAULTS["hermite"]), "dt_max", _build_hermite,
        "4th-order Hermite, block individual time steps (Makino & Aarseth 1992); a smaller eta_s "
        "(e.g. 0.0025) removes most of the start-up energy error of short runs", needs_jerk=True),
    "leapfrog": IntegratorSpec(
        "leapfrog", dict(_DEFAULTS["leapfrog"]), "dt", _build_leapfrog,
        "kick-drift-kick leapfrog, shared time step", needs_jerk=False),
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
