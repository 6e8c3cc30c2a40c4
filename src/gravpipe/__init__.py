"""gravpipe: a gravitational N-body engine in the GRAPE tradition.

The force pipeline (``Pipeline``, ``accel``) runs on CPU SIMD lanes and threads; initial
conditions live in ``gravpipe.ic``. Units are N-body (Henon) units by default: G = M = 1.
"""

from gravpipe.particles import Particles
from gravpipe.backends import BackendUnavailableError
from gravpipe.pipeline import Pipeline, PipelineStats, accel, available_backends
from gravpipe import ic

__version__ = "0.1.0"
__all__ = ["BackendUnavailableError", "Particles", "Pipeline", "PipelineStats", "accel", "available_backends", "ic", "__version__"]
