"""The exceptions gravpipe raises besides ``ValueError`` (bad input), in one place.

The core's typed C++ errors (``cpp/include/gravpipe/error.hpp``) arrive as these classes
(``bindings/module.cpp``): a missing backend or instruction set as
:class:`BackendUnavailableError`, an integration that cannot go on as
:class:`IntegrationError`. This module imports nothing from the core, so the core can raise
them while the package is still loading.
"""

from __future__ import annotations


class BackendUnavailableError(RuntimeError):
    """An explicitly requested backend or CPU instruction set does not exist in this build
    or on this machine (e.g. ``backend="cuda"`` without a usable GPU, ``isa="avx2"`` on a
    CPU without AVX2). ``backend="auto"`` never raises it."""


class IntegrationError(RuntimeError):
    """An integration that cannot go on: a Hermite time step fell below its floor (a close
    encounter too hard to follow), or a force was not finite (coincident particles with
    eps = 0).

    Attributes
    ----------
    particle : int or None
        Index of the particle (in the run's order) where it happened.
    time : float or None
        Simulation time at which it happened.
    """

    def __init__(self, message: str, particle: int | None = None, time: float | None = None):
        super().__init__(message)
        self.particle = particle
        self.time = time
