"""Which communicator a run uses, and what each rank may take of the machine."""

from __future__ import annotations

import os
from typing import Any

# Set by the MPI launchers (MPICH's hydra: PMI_*; Open MPI: OMPI_COMM_WORLD_*) in every
# process they start; a plain ``python script.py`` has none of them.
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")


def launched_under_mpi() -> bool:
    """Whether this process was started by mpiexec with more than one process."""
    for var in _LAUNCHER_SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 1:
            return True
    return False


def resolve_comm(comm: Any = None) -> Any | None:
    """The communicator of a run: ``comm`` if given (an mpi4py communicator), else
    COMM_WORLD when mpiexec started more than one process, else None (a serial run).

    Raises ImportError naming the extra to install when mpiexec started several processes
    but mpi4py is missing: running P copies of a serial run silently would be wrong.
    """
    if comm is not None:
        if not all(hasattr(comm, a) for a in ("Get_rank", "Get_size", "Allgather")):
            raise ValueError(f"comm: expected an mpi4py communicator, got {comm!r}")
        return comm if comm.Get_size() > 1 else None
    if not launched_under_mpi():
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        raise ImportError("this process was started by mpiexec with several processes, but mpi4py is "
                          "missing: pip install 'gravpipe[mpi]'") from None
    return MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() > 1 else None


def is_root(comm: Any | None) -> bool:
    """Rank 0 of ``comm``, or a serial run: the process that prints and writes files."""
    return comm is None or comm.Get_rank() == 0


def threads_per_rank(comm: Any | None) -> int:
    """This rank's share of the cores of its machine: the cores this process may use divided
    by the ranks on the same machine (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if comm is None:
        return cores
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return max(1, cores // local.Get_size())
    finally:
        local.Free()
