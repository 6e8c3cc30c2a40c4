"""The force-request contract as test cases, shared by every provider's tests.

Each provider is driven through a small adapter (the Python front end, or the core class as
an integrator sees it); each case breaks one rule of the contract
(cpp/include/gravpipe/force_request_check.hpp) and names the one ValueError text that every
provider must give for it. ``test_force_contract.py`` runs the CPU providers and the tree;
``test_cuda.py`` runs the CUDA ones on a GPU machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from gravpipe import _core

N_J = 10
POS = np.random.default_rng(3).normal(size=(N_J, 3))
VEL = np.random.default_rng(4).normal(size=(N_J, 3))
MASS = np.full(N_J, 1.0 / N_J)
POS_I = POS[:5] + 0.01


class Adapter:
    """One provider. ``build`` checks eps and G; the others use good ones (eps = 0.01)."""

    name = "?"
    has_jerk = True       # the provider computes jerks (pipelines do, the tree does not)
    separate_j = True     # set_j is a call of its own (not for a Tree, built on its sources)

    def build(self, eps: float, G: float):
        raise NotImplementedError

    def forces(self, pos_i, exclude=None, vel_i=None, with_j=True, j_vel=True):
        """Write POS/MASS (with VEL if j_vel) unless with_j is False, then ask for forces on
        pos_i."""
        raise NotImplementedError

    def set_j(self, pos, mass):
        raise NotImplementedError


class CorePipeline(Adapter):
    """A core pipeline class (_core.CpuPipeline, _core.CudaPipeline) with numpy outputs."""

    def __init__(self, name: str, make: Callable[[float, float], object]):
        self.name, self._make = name, make

    def build(self, eps, G):
        return self._make(eps, G)

    def forces(self, pos_i, exclude=None, vel_i=None, with_j=True, j_vel=True):
        p = self._make(0.01, 1.0)
        if with_j:
            p.set_j(POS, MASS, VEL if j_vel else None)
        n = len(pos_i)
        jerk = np.empty((n, 3)) if vel_i is not None else None
        p.forces(pos_i, vel_i, exclude, np.empty((n, 3)), np.empty(n), jerk)

    def set_j(self, pos, mass):
        self._make(0.01, 1.0).set_j(pos, mass, None)


class PythonPipeline(Adapter):
    """gravpipe.Pipeline: the Python layer checks first, with the same texts."""

    def __init__(self, backend: str, precision: str):
        self.name, self._backend, self._precision = f"Pipeline({backend}, {precision})", backend, precision

    def build(self, eps, G):
        import gravpipe as gp

        return gp.Pipeline(self._backend, self._precision, eps=eps, G=G)

    def forces(self, pos_i, exclude=None, vel_i=None, with_j=True, j_vel=True):
        p = self.build(0.01, 1.0)
        if with_j:
            p.set_j(POS, MASS, VEL if j_vel else None)
        p.forces(pos_i, vel_i, exclude)

    def set_j(self, pos, mass):
        self.build(0.01, 1.0).set_j(pos, mass)


class CoreTree(Adapter):
    name, has_jerk, separate_j = "core Tree", False, False

    def build(self, eps, G, pos=POS, mass=MASS):
        return _core.Tree(pos, mass, eps, G, 0.6, True, 0.0, 16, 256, 0.0, 0, "mixed", True)

    def forces(self, pos_i, exclude=None, vel_i=None, with_j=True, j_vel=True):
        n = len(pos_i)
        self.build(0.01, 1.0).forces_at(pos_i, exclude, np.empty((n, 3)), np.empty(n))

    def set_j(self, pos, mass):
        self.build(0.01, 1.0, pos, mass)


class PythonTree(CoreTree):
    name = "Tree"

    def build(self, eps, G, pos=POS, mass=MASS):
        import gravpipe as gp

        return gp.Tree(pos, mass, eps=eps, G=G)

    def forces(self, pos_i, exclude=None, vel_i=None, with_j=True, j_vel=True):
        self.build(0.01, 1.0).forces(pos_i, exclude=exclude)

    set_j = None  # gravpipe.Tree names its empty set "particle set" (tree.py)


class CoreTreeProvider(Adapter):
    """The tree as an integrator sees it: only its constructor is bound."""

    name, has_jerk, separate_j = "core TreeForceProvider", False, True

    def build(self, eps, G):
        return _core.TreeForceProvider(eps, G, 0.6, True, 0.0, 16, 256, 0.0, 0, "mixed")

    forces = set_j = None


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[Adapter], None]
    message: str
    needs: str = "build"  # the adapter method the case drives
    only: Callable[[Adapter], bool] = lambda a: True

    def applies_to(self, a: Adapter) -> bool:
        return getattr(a, self.needs) is not None and self.only(a)

    def check(self, a: Adapter) -> None:
        if not self.applies_to(a):
            pytest.skip(f"{a.name} has no such call")
        with pytest.raises(ValueError) as info:
            self.run(a)
        assert str(info.value) == self.message


def _scalar(eps=0.01, G=1.0):
    return lambda a: a.build(eps, G)


def _ex(values):
    return lambda a: a.forces(POS_I, exclude=np.array(values, dtype=np.int64))


CASES = [
    Case("G = 0", _scalar(G=0.0), "G: must be finite and > 0, got 0.0"),
    Case("G < 0", _scalar(G=-1.0), "G: must be finite and > 0, got -1.0"),
    Case("G = nan", _scalar(G=math.nan), "G: must be finite and > 0, got nan"),
    Case("G = inf", _scalar(G=math.inf), "G: must be finite and > 0, got inf"),
    Case("eps < 0", _scalar(eps=-1.0), "eps: must be finite and >= 0, got -1.0"),
    Case("eps = nan", _scalar(eps=math.nan), "eps: must be finite and >= 0, got nan"),
    Case("eps = inf", _scalar(eps=math.inf), "eps: must be finite and >= 0, got inf"),
    Case("exclude = n_j", _ex([N_J, -1, -1, -1, -1]), "exclude: index 10 at position 0 is outside [-1, 10)", "forces"),
    Case("exclude < -1", _ex([0, -2, 1, 2, 3]), "exclude: index -2 at position 1 is outside [-1, 10)", "forces"),
    Case("exclude length", _ex([0, 1, 2]), "exclude: expected shape (5,), got (3,)", "forces"),
    Case("empty i-set", lambda a: a.forces(np.zeros((0, 3))), "pos_i: empty i-particle set", "forces"),
    Case("empty j-set", lambda a: a.set_j(np.zeros((0, 3)), np.zeros(0)), "pos: empty j-particle set", "set_j"),
    Case("no j-set", lambda a: a.forces(POS_I, with_j=False), "forces: no j-particles; call set_j first", "forces",
         only=lambda a: a.separate_j),
    Case("jerk without j velocities", lambda a: a.forces(POS_I, vel_i=POS_I, j_vel=False),
         "vel_i: jerk needs j-particle velocities; call set_j(pos, mass, vel)", "forces", only=lambda a: a.has_jerk),
]
