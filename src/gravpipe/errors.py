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


class MemoryBudgetError(ValueError):
    """A memory budget too small for what a run asks (``memory_budget="4GiB"`` of the
    out-of-core store: its page cache and tables, later tree cells and lists). The message
    says what was asked and the least budget that works.

    Attributes
    ----------
    requested : int or None
        The budget (or cache size) given, bytes.
    least_budget : int or None
        The least budget (or cache size) that works, bytes.
    """

    def __init__(self, message: str, requested: int | None = None, least_budget: int | None = None):
        super().__init__(message)
        self.requested = requested
        self.least_budget = least_budget


class MemoryBudgetWarning(UserWarning):
    """A memory budget that runs but leaves the out-of-core tree walk fewer cache frames than
    its working set, so that every step re-reads the same pages many times over (a step can
    take 100x longer than one a little above it). The message names a budget that avoids it.
    """


class StaleScratchWarning(UserWarning):
    """An out-of-core store removed scratch files that a run killed by SIGKILL (or a crash)
    left in its scratch directory: files no running process holds (each live store keeps a
    lock on its own). The message names them and the process that made them."""


class CheckpointSkippedWarning(UserWarning):
    """A resume passed over the newest checkpoint of a run folder because it cannot be
    opened (truncated by a full disk or a copy cut short, not HDF5) and took the newest one
    that can. The message names the file skipped, why, and the one taken."""


class StoreError(RuntimeError):
    """The out-of-core store's scratch file failed: an I/O error, the scratch disk full, the
    file size limit, a directory that cannot take the file. Nothing already written to
    snapshots or checkpoints is touched.

    Attributes
    ----------
    path : str or None
        The scratch file (or directory) concerned.
    page : int or None
        The page being read or written (-1: none).
    """

    def __init__(self, message: str, path: str | None = None, page: int | None = None):
        super().__init__(message)
        self.path = path
        self.page = page


class ChecksumError(StoreError):
    """A page read back from the scratch file whose CRC32C differs from the one computed
    when it was written: the data is corrupt and was not used (no wrong forces)."""
