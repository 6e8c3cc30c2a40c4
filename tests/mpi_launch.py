"""How the MPI tests start their ranks.

mpiexec: the one installed beside this Python (the mpich wheel of ``gravpipe[mpi]``, the MPI
that mpi4py was installed with) before any other on PATH, so that the launcher matches the
library the ranks load. MPI_ENV: the environment for it, with the two Open MPI settings that
a container run as root (a GPU machine's, a CI image's) needs: Open MPI refuses root unless
told twice, and refuses more ranks than cores unless oversubscription is allowed. MPICH
ignores both.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


def find_mpiexec() -> str | None:
    """The mpiexec beside sys.executable, else the first on PATH, else None."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    return shutil.which("mpiexec")


MPI_ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def mpiexec() -> str:
    """The mpiexec to use; skips the calling test when mpi4py or mpiexec is missing."""
    pytest.importorskip("mpi4py")
    exe = find_mpiexec()
    if exe is None:
        pytest.skip("mpiexec not found (pip install 'gravpipe[mpi]')")
    return exe
