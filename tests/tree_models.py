"""Particle sets for the treecode's MPI tests (tests/test_mpi_tree.py, tests/mpi/tree_case.py).

N = 20000 for force accuracy: the 99th percentile of the errors is a statistic of the
largest ~1% (200 particles), and at a few thousand particles the serial tree itself sits at
its bound."""

from __future__ import annotations

import numpy as np

import gravpipe as gp

N = 20000


def plummer() -> gp.Particles:
    return gp.ic.plummer(N, seed=11)


def two_plummers() -> gp.Particles:
    """An uneven, clustered set: a heavy sphere (3/4 of the mass, 2/3 of the particles) and
    a light, compact one 3 length units away."""
    a, b = gp.ic.plummer(2 * N // 3, seed=12), gp.ic.plummer(N - 2 * N // 3, seed=13)
    pos = np.concatenate((a.pos, 0.4 * b.pos + [3.0, 0.5, 0.0]))
    vel = np.concatenate((a.vel, b.vel))
    mass = np.concatenate((0.75 * a.mass, 0.25 * b.mass))
    return gp.Particles(pos, vel, mass)


def small_plummer() -> gp.Particles:
    """For leapfrog runs: a few thousand particles keep each run to seconds."""
    return gp.ic.plummer(4096, seed=14)


MODELS = {"plummer": plummer, "two_plummers": two_plummers}
