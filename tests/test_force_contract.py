"""The contract every force provider keeps, and the errors the core raises.

- The core's typed errors reach Python as the classes they stand for: a missing backend or
  instruction set as ``gravpipe.BackendUnavailableError``, an integration that cannot go on
  as ``gravpipe.IntegrationError`` naming the particle and the time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import gravpipe as gp
from gravpipe import _core
from gravpipe.integrators import INTEGRATORS
from gravpipe.simulation import Simulation

KNOWN_ISAS = ("avx2", "generic")  # names this build's kernels know (gravpipe/cpu_features.hpp)
HERMITE = {"eta": 0.02, "eta_s": 0.01, "dt_max": 0.125}


# --------------------------------------------------------------------------------------
# errors


def test_error_classes_are_exported():
    assert issubclass(gp.BackendUnavailableError, RuntimeError)
    assert issubclass(gp.IntegrationError, RuntimeError)
    assert gp.backends.BackendUnavailableError is gp.BackendUnavailableError


@pytest.mark.parametrize("isa", [i for i in KNOWN_ISAS if i not in _core.available_isas()]
                         or [pytest.param("avx2", marks=pytest.mark.skip("every known ISA is available here"))])
def test_missing_isa_is_backend_unavailable(isa):
    with pytest.raises(gp.BackendUnavailableError, match=f"isa '{isa}' is not available"):
        gp.Pipeline("cpu", isa=isa)


def test_unknown_isa_is_a_value_error():
    """A name no build knows is bad input, as an unknown backend name is."""
    with pytest.raises(ValueError, match="isa: unknown instruction set 'sse9'"):
        gp.Pipeline("cpu", isa="sse9")


@pytest.mark.skipif(not hasattr(_core, "CudaPipeline") or gp.available_backends()["cuda"].available,
                    reason="needs a CUDA build on a machine without a usable device")
def test_cuda_without_device_is_backend_unavailable():
    with pytest.raises(gp.BackendUnavailableError, match="backend 'cuda' is not available: device 0"):
        _core.CudaPipeline("mixed", 0.0, 1.0, 0)


@pytest.mark.parametrize("precision", ["mixed", "double"])
@pytest.mark.parametrize("integrator, params", [("hermite", HERMITE), ("leapfrog", {"dt": 1 / 64})])
def test_coincident_particles_at_eps_zero_raise_integration_error(integrator, precision, params):
    """Particles 1 and 2 coincide: with eps = 0 their forces are not finite. (A Simulation
    refuses them earlier, when its energy diagnostic meets the same infinite potential, so
    the integrator is built here as a Simulation builds it.)"""
    pos = np.array([[1.0, 0, 0], [0, 0, 0], [0, 0, 0]])
    pipe = gp.Pipeline("cpu", precision, eps=0.0)
    with pytest.raises(gp.IntegrationError, match=r"particle 1: its force is not finite at t = 0\.5 ") as info:
        INTEGRATORS[integrator].build(pipe.provider, pos, np.zeros((3, 3)), np.ones(3), 0.5, params, None)
    assert info.value.particle == 1 and info.value.time == 0.5


@pytest.mark.parametrize("precision", ["mixed", "double"])
def test_head_on_collision_underflows_the_hermite_step(precision):
    """Two bodies released at rest at distance 1 (eps = 0) collide at the free-fall time
    pi / (2 sqrt(2 G M / r^3)) = 1.1107; the steps shrink to the floor just before it."""
    p = gp.Particles([[-0.5, 0, 0], [0.5, 0, 0]], np.zeros((2, 3)), [0.5, 0.5])
    sim = Simulation(p, integrator="hermite", eps=0.0, precision=precision, backend="cpu")
    with pytest.raises(gp.IntegrationError, match=r"hermite: particle [01]: its time step fell below") as info:
        sim.evolve(2.0, progress=False)
    t_ff = math.pi / (2 * math.sqrt(2.0))
    assert info.value.particle in (0, 1)
    assert abs(info.value.time - t_ff) < 1e-5
    assert f"at t = {info.value.time!r}" in str(info.value)
