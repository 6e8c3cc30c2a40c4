"""Each MPI rank out of core (PagedDomainLeapfrog): a 2- and a 3-rank treecode run with
every rank's store under a budget that makes its pages move is the in-core distributed run
(DomainLeapfrog) bit for bit, positions, velocities, accelerations and potentials of every
particle at each stop, an off-grid one included."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpi_launch import MPI_ENV, mpiexec

CASE = Path(__file__).parent / "mpi" / "paged_domain_case.py"

pytestmark = pytest.mark.filterwarnings("ignore::gravpipe.errors.MemoryBudgetWarning")


@pytest.mark.parametrize("ranks", [2, 3])
def test_out_of_core_ranks_are_the_in_core_ranks_bit_for_bit(tmp_path, ranks):
    out = tmp_path / "out.npz"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", str(CASE), str(out), str(scratch)]
    r = subprocess.run(cmd, env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    d = np.load(out)
    assert int(d["misses"]) > 0, "the budget held every page: nothing was paged"
    assert int(d["cuts"]) == int(d["core_cuts"]) >= 1
    for k in range(3):
        for name in ("pos", "vel", "acc", "pot"):
            assert np.array_equal(d[f"paged_{name}{k}"], d[f"core_{name}{k}"]), (name, k)
    assert list(scratch.iterdir()) == []  # stores and migration files are gone
