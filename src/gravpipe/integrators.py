"""The integrators a Simulation can run, behind one small interface (REBOUND's plug-ins).

Each entry builds a core integrator from particles, a force provider and its parameters,
says whether it needs jerks from the provider, and names its *quantum*: the step whose
multiples (counted from the integrator's grid origin) it reaches without an extra force
evaluation (dt_max for Hermite block steps, where all particles are synchronized; dt for
leapfrog). Any other stop costs one force evaluation on all particles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gravpipe import _core
from gravpipe._validate import check_finite, check_magnitude, check_positive_scalar


@dataclass(frozen=True)
class IntegratorSpec:
    name: str
    defaults: dict[str, float]
    quantum_key: str   # the step parameter: stops at multiples of it need no extra force evaluation
    build: Callable[..., Any]
    description: str
    needs_jerk: bool   # whether its force provider must deliver jerks
    #: what a checkpoint's /Integrator holds for it: name -> (dtype kind "f" or "i", entries
    #: per particle, 0: one entry, whether an older checkpoint may lack it); the core's
    #: checkpoint() writes these and its restart reads them
    state: dict[str, tuple[str, int, bool]]
    #: the most steps of the quantum its clock counts from the grid origin (see check_reach)
    max_quanta: int


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
    f64, i64 = _split_restart(INTEGRATORS["hermite"], restart, len(mass))
    return _core.Hermite(pipe, pos, vel, mass, t0, params["eta"], params["eta_s"], params["dt_max"], f64, i64)


def _build_leapfrog(pipe, pos, vel, mass, t0, params, restart):
    _check_range(pipe, pos, vel)
    f64, i64 = _split_restart(INTEGRATORS["leapfrog"], restart, len(mass))
    return _core.Leapfrog(pipe, pos, vel, mass, t0, params["dt"], f64, i64)


def _split_restart(spec: IntegratorSpec, restart: dict[str, Any] | None, n: int):
    if restart is None:
        return None, None
    check_restart(spec.name, restart, n)
    arrays = {k: v for k, v in restart.items() if isinstance(v, np.ndarray)}  # others are not the core's
    f64 = {k: np.ascontiguousarray(v, np.float64) for k, v in arrays.items() if v.dtype.kind == "f"}
    i64 = {k: np.ascontiguousarray(v, np.int64) for k, v in arrays.items() if v.dtype.kind in "iu"}
    return f64, i64


def check_restart(name: str, state: dict[str, Any], n: int, where: str = "/Integrator") -> None:
    """Check a checkpoint's integrator state for the ``name`` integrator of ``n`` particles
    against what it reads (``IntegratorSpec.state``): each field present (but those older
    checkpoints lack), an array of its dtype kind and length, floats finite. Raises
    ValueError "WHERE/FIELD: what is wrong" (``where``: "ckpt.h5: /Integrator" names the
    file). Entries it does not read (the history, a domain's costs, ...) are not its to check."""
    spec = INTEGRATORS.get(name)
    if spec is None:
        raise ValueError(f"{where}: the state of integrator {name!r}, which this gravpipe does not have "
                         f"({', '.join(INTEGRATORS)})")
    for field, (kind, per_particle, optional) in spec.state.items():
        what = f"{where}/{field}"
        if field not in state:
            if optional:
                continue
            raise ValueError(f"{what}: missing (a {name} checkpoint holds {', '.join(spec.state)})")
        value = state[field]
        if not isinstance(value, np.ndarray):
            raise ValueError(f"{what}: an attribute ({type(value).__name__} {value!r}), expected a dataset")
        words = {"f": "floats", "i": "integers"}[kind]
        if value.dtype.kind not in ("f" if kind == "f" else "iu"):
            raise ValueError(f"{what}: dtype {value.dtype}, expected {words}")
        length = per_particle * n if per_particle else 1
        if value.shape != (length,):
            expect = f"{per_particle} x {n} particles" if per_particle else "one entry"
            raise ValueError(f"{what}: shape {value.shape}, expected ({length},) ({expect})")
        if kind == "f":
            check_finite(what, value)


# defaults: the core's parameter structs (HermiteParams, LeapfrogParams), never restated here
_DEFAULTS = _core.defaults()
_TICKS_PER_DT_MAX = int(_DEFAULTS["timeline"]["ticks_per_dt_max"])

INTEGRATORS: dict[str, IntegratorSpec] = {
    "hermite": IntegratorSpec(
        "hermite", dict(_DEFAULTS["hermite"]), "dt_max", _build_hermite,
        "4th-order Hermite, block individual time steps (Makino & Aarseth 1992); a smaller eta_s "
        "(e.g. 0.0025) removes most of the start-up energy error of short runs", needs_jerk=True,
        state={"t_ticks": ("i", 1, False), "dt_ticks": ("i", 1, False), "now_ticks": ("i", 0, False),
               "timeline_t0": ("f", 0, True), "acc": ("f", 3, False), "jerk": ("f", 3, False),
               "pot": ("f", 1, False)},
        # int64 ticks, 2^40 to dt_max: 2^62 of them leave a step's end room to spare
        max_quanta=2 ** 62 // _TICKS_PER_DT_MAX),
    "leapfrog": IntegratorSpec(
        "leapfrog", dict(_DEFAULTS["leapfrog"]), "dt", _build_leapfrog,
        "kick-drift-kick leapfrog, shared time step", needs_jerk=False,
        state={"acc": ("f", 3, False), "pot": ("f", 1, False), "steps": ("i", 0, False),
               "grid_origin": ("f", 0, True)},
        max_quanta=2 ** 53),  # t0 + k dt with k counted exactly in float64 as in int64
}


def check_reach(name: str, t_end: float, origin: float, quantum: float) -> None:
    """Whether the ``name`` integrator's clock can count from ``origin`` (its grid origin) to
    ``t_end`` in steps of ``quantum`` (dt_max, dt): ValueError saying what is wrong, before
    a step is taken. The clock holds ``max_quanta`` steps (Hermite: int64 ticks, 2^40 to
    dt_max; leapfrog: a step count exact in float64, 2^53); beyond them t_end is a time the
    timeline cannot hold when even the default step would not reach it, else the step is
    below the timeline's resolution. A step that does not change a float64 time at the
    origin or at t_end is below its resolution too."""
    spec = INTEGRATORS[name]
    key, most = spec.quantum_key, spec.max_quanta
    quanta = (t_end - origin) / quantum
    if quanta > most:
        if t_end - origin > most * spec.defaults[key]:
            raise ValueError(f"t_end: {t_end!r} is a time the {name} timeline cannot hold: {quanta:.3g} steps of "
                             f"{key} = {quantum!r} from {origin!r}, at most {most:.3g} (t_end up to "
                             f"{origin + most * quantum:.6g}; a larger {key} reaches further)")
        raise ValueError(f"{key}: a step of {quantum!r} is below the timeline's resolution: t_end = {t_end!r} is "
                         f"{quanta:.3g} such steps from {origin!r}, more than the {most:.3g} the {name} clock "
                         f"counts (the least {key} that reaches it: {(t_end - origin) / most:.3g})")
    for t in (origin, t_end):
        if t + quantum == t:
            raise ValueError(f"{key}: a step of {quantum!r} is below the resolution of float64 time at "
                             f"t = {t!r} (t + {key} == t; the smallest step there is {math.ulp(t):.3g})")


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
