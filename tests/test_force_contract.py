"""The contract every force provider keeps, and the errors the core raises.

- Every provider (the CPU pipeline in both precisions, the tree, the tree's force provider,
  the CUDA pipeline's constructor here and all of it in test_cuda.py), through the Python
  front end and as the core class an integrator calls, refuses the same bad request with the
  same ValueError text (the cases are in contract_cases.py).
- The core's typed errors reach Python as the classes they stand for: a missing backend or
  instruction set as ``gravpipe.BackendUnavailableError``, an integration that cannot go on
  as ``gravpipe.IntegrationError`` naming the particle and the time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from contract_cases import CASES, POS, POS_I, Adapter, CorePipeline, CoreTree, CoreTreeProvider, PythonPipeline, PythonTree

import gravpipe as gp
from gravpipe import _core
from gravpipe.integrators import INTEGRATORS
from gravpipe.simulation import Simulation

KNOWN_ISAS = ("avx512", "avx2", "generic")  # names this build's kernels know (gravpipe/cpu_features.hpp)
HERMITE = {"eta": 0.02, "eta_s": 0.01, "dt_max": 0.125}


# --------------------------------------------------------------------------------------
# one contract, one text


class BuildOnly(Adapter):
    """A provider whose constructor runs here but whose calls need a device."""

    forces = set_j = None

    def __init__(self, name, build):
        self.name, self.build = name, build


ADAPTERS = [
    PythonPipeline("cpu", "mixed"), PythonPipeline("cpu", "double"),
    CorePipeline("core CpuPipeline(mixed)", lambda eps, G: _core.CpuPipeline("mixed", eps, G)),
    CorePipeline("core CpuPipeline(double)", lambda eps, G: _core.CpuPipeline("double", eps, G)),
    PythonTree(), CoreTree(), CoreTreeProvider(),
    # the Python layer checks eps and G before it looks for the backend
    BuildOnly("Pipeline(cuda)", lambda eps, G: gp.Pipeline("cuda", eps=eps, G=G)),
]
if hasattr(_core, "CudaPipeline"):  # the constructor checks eps and G before the device
    ADAPTERS.append(BuildOnly("core CudaPipeline", lambda eps, G: _core.CudaPipeline("mixed", eps, G, 0)))
PAIRS = [(a, c) for a in ADAPTERS for c in CASES if c.applies_to(a)]


@pytest.mark.parametrize("adapter, case", PAIRS, ids=[f"{a.name}: {c.name}" for a, c in PAIRS])
def test_every_provider_refuses_the_same_way(adapter, case):
    case.check(adapter)


def test_every_case_reaches_a_core_class_and_a_front_end():
    for case in CASES:
        names = [a.name for a in ADAPTERS if case.applies_to(a)]
        assert any(n.startswith("core") for n in names) and any(not n.startswith("core") for n in names), case.name


def test_the_contract_accepts_the_edges():
    """eps = 0, kNoExclusion everywhere, a single i-particle."""
    for precision in ("mixed", "double"):
        pipe = _core.CpuPipeline(precision, 0.0, 1.0)
        pipe.set_j(POS, np.ones(len(POS)), None)
        acc, pot = np.empty((1, 3)), np.empty(1)
        pipe.forces(POS_I[:1], None, np.array([-1]), acc, pot, None)
        assert np.isfinite(acc).all() and np.isfinite(pot).all()
    tree = _core.Tree(POS, np.ones(len(POS)), 0.0, 1.0, 0.6, True, 0.0, 16, 256, 0.0, 0, "mixed", True)
    tree.forces_at(POS_I[:1], np.array([-1]), np.empty((1, 3)), np.empty(1))


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
