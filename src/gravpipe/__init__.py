"""gravpipe: a gravitational N-body engine in the GRAPE tradition.

The force pipeline (``Pipeline``, ``accel``) runs on CPU SIMD lanes and threads;
the Barnes-Hut treecode (``Tree``) gives O(N log N) forces;
``Simulation`` evolves particle sets with Hermite block time steps or leapfrog; initial
conditions are in ``gravpipe.ic``, HDF5 snapshots in ``gravpipe.io``, energies and
Lagrangian radii in ``gravpipe.diagnostics``. Besides ``ValueError`` for bad input, errors
are ``BackendUnavailableError`` (a backend or instruction set missing here) and
``IntegrationError`` (an integration that cannot go on). Units are N-body (Henon) units by
default: G = M = 1.
"""

from gravpipe import _openmp_env

_spin_chosen = _openmp_env.choose()  # before the core (and libgomp) loads
from gravpipe import _core  # noqa: E402
_openmp_env.restore(_spin_chosen)

from gravpipe import diagnostics, ic, io  # noqa: E402
from gravpipe.errors import BackendUnavailableError, IntegrationError  # noqa: E402
from gravpipe.particles import Particles  # noqa: E402
from gravpipe.gravity import accel  # noqa: E402
from gravpipe.pipeline import Pipeline, PipelineStats, available_backends  # noqa: E402
from gravpipe.simulation import Simulation, Timings  # noqa: E402
from gravpipe.tree import Tree, TreeStats  # noqa: E402

__version__ = "0.1.0"
__all__ = ["BackendUnavailableError", "IntegrationError", "Particles", "Pipeline", "PipelineStats", "Simulation",
           "Timings", "Tree", "TreeStats", "accel", "available_backends", "diagnostics", "ic", "io", "__version__"]
