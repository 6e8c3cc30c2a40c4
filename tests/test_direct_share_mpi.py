"""Direct summation with distributed state (gravpipe.parallel.direct_share) on 1-3 ranks
under mpiexec, against the serial Simulation.

- Hermite, Plummer N = 1024 to t = 1/8 (dt_max = 1/16), P = 2 and 3: the gathered
  positions equal the serial run's to 1e-12 in precision="double" (the same block
  schedule; the forces differ only in the order of the float64 sums: each rank's partial,
  then the partials in rank order, ~1e-16 relative a force), and to 1e-7 in "mixed" (where
  each rank's tile origins differ from the serial pipeline's: the pipeline's bound, ~1e-7
  relative a force, times the ~200 blocks); energy errors agree within 1% (double) and 10%
  (mixed). P = 1 is the serial run bit for bit.
- A block larger than max_block is exchanged in rounds, with the same result; so
  is the synchronization of an off-grid stop (every particle active).
- The same P twice: bitwise identical. A checkpoint, restarted in new objects, continues
  bit for bit (Hermite and leapfrog). Uneven shares, a rank without particles included,
  neither deadlock nor change the result. No rank holds an array of N entries.
- A failure on one rank (a force that is not finite) and bad input on one rank raise on
  every rank instead of leaving the others in a collective.

Skipped when mpi4py or mpiexec is missing (``pip install 'gravpipe[mpi]'``).
"""

from __future__ import annotations

import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import MPI_ENV, find_mpiexec

import gravpipe as gp

pytest.importorskip("mpi4py")
MPIEXEC = find_mpiexec()
if MPIEXEC is None:
    pytest.skip("mpiexec not found (pip install 'gravpipe[mpi]')", allow_module_level=True)

pytestmark = pytest.mark.mpi

CASE = Path(__file__).parent / "mpi" / "direct_share_case.py"
N, SEED, EPS, T_END, T_OFF = 1024, 11, 1 / 64, 0.125, 0.15  # as in the case script
PARAMS = {"hermite": {"dt_max": 1 / 16}, "leapfrog": {"dt": 1 / 128}}
# how far the energy errors may differ: double, 1% (rounding in another order); mixed, the
# pipeline's bound on potentials (1e-6 relative), which is above the run's own error here
ENERGY = {"double": lambda e: 0.01 * abs(e), "mixed": lambda e: 1e-6}
ENV = {**MPI_ENV, "OMP_NUM_THREADS": "1"}  # two cores shared by up to three ranks


def mpirun(ranks: int, case: str, *args: str, cwd: Path) -> dict[str, np.ndarray]:
    out = cwd / f"{case}_{ranks}_{'_'.join(args)}.npz"
    # python -m mpi4py: an uncaught exception on one rank aborts them all; the timeout
    # catches a deadlock
    r = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", str(CASE), case, str(out), *args],
                       cwd=cwd, env=ENV, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


@lru_cache(maxsize=None)
def serial(integrator: str, precision: str) -> tuple[np.ndarray, float, np.ndarray]:
    """The serial run's positions at T_END, its energy error there, its positions at T_OFF."""
    sim = gp.Simulation(gp.ic.plummer(N, seed=SEED), gravity="direct", integrator=integrator, eps=EPS,
                        backend="cpu", precision=precision, threads=1, **PARAMS[integrator])
    sim.evolve(T_END, progress=False)
    assert sim.time == T_END
    pos, energy_error = sim.particles.pos, sim.energy_error()
    sim.evolve(T_OFF, progress=False)
    return pos, energy_error, sim.particles.pos


def check_sizes(sizes: np.ndarray) -> None:
    """Per rank: n, pipeline_j, largest_block, largest_receive, max_block: nothing holds N."""
    n, pipeline_j, block, receive, most = sizes.T
    assert n.sum() == N and np.array_equal(pipeline_j, n)
    assert (block <= most).all() and (receive <= most).all()
    assert (sizes < N).all(), sizes


@pytest.mark.parametrize("precision, tolerance", [("double", 1e-12), ("mixed", 1e-7)])
@pytest.mark.parametrize("ranks", [2, 3])
def test_hermite_on_shares_agrees_with_serial(tmp_path, ranks, precision, tolerance):
    r = mpirun(ranks, "run", "hermite", precision, "even", cwd=tmp_path)
    pos, energy_error, pos_off = serial("hermite", precision)
    assert r["time"] == T_OFF
    assert np.abs(r["pos"] - pos).max() < tolerance
    assert np.abs(r["pos_off"] - pos_off).max() < tolerance  # an off-grid stop: all particles in rounds
    assert abs(r["energy_error"] - energy_error) <= ENERGY[precision](energy_error)
    check_sizes(r["sizes"])
    assert (r["comm"] > 0).all() and (r["bytes_per_step"] > 0).all()
    # the interactions of all ranks: each active particle feels the N - 1 others
    assert r["interactions"] % (N - 1) == 0


def test_one_rank_is_the_serial_run_bit_for_bit(tmp_path):
    r = mpirun(1, "run", "hermite", "double", "even", cwd=tmp_path)
    assert np.array_equal(r["pos"], serial("hermite", "double")[0])
    assert np.array_equal(r["pos_off"], serial("hermite", "double")[2])


def test_same_ranks_give_the_same_bits(tmp_path):
    a, b = (tmp_path / "a", tmp_path / "b")
    a.mkdir(), b.mkdir()
    a, b = (mpirun(3, "run", "hermite", "mixed", "even", cwd=where) for where in (a, b))
    assert np.array_equal(a["pos"], b["pos"]) and np.array_equal(a["vel"], b["vel"])


@pytest.mark.parametrize("ranks", [2, 3])
def test_uneven_shares_and_an_empty_rank(tmp_path, ranks):
    r = mpirun(ranks, "run", "hermite", "double", "uneven", cwd=tmp_path)
    assert r["sizes"][0, 0] == 0
    assert np.abs(r["pos"] - serial("hermite", "double")[0]).max() < 1e-12


def test_large_blocks_go_in_rounds(tmp_path):
    r = mpirun(3, "run", "hermite", "double", "uneven", "7", cwd=tmp_path)  # at most 2 per rank a round
    assert r["rounds"] > 2 * r["requests"]
    assert (r["sizes"][:, 2] <= 6).all() and (r["sizes"][:, 3] <= 6).all()
    assert np.abs(r["pos"] - serial("hermite", "double")[0]).max() < 1e-12


def test_leapfrog_on_shares_agrees_with_serial(tmp_path):
    r = mpirun(3, "run", "leapfrog", "double", "uneven", cwd=tmp_path)
    pos, energy_error, pos_off = serial("leapfrog", "double")
    assert r["steps"] == int(T_OFF // PARAMS["leapfrog"]["dt"]) + 1  # whole steps, and a shortened one to T_OFF
    assert np.abs(r["pos"] - pos).max() < 1e-12 and np.abs(r["pos_off"] - pos_off).max() < 1e-12
    assert abs(r["energy_error"] - energy_error) <= 0.01 * abs(energy_error)


@pytest.mark.parametrize("integrator", ["hermite", "leapfrog"])
def test_restart_continues_bit_for_bit(tmp_path, integrator):
    r = mpirun(2, "restart", integrator, cwd=tmp_path)
    assert np.array_equal(r["pos"], r["pos_resumed"]) and np.array_equal(r["vel"], r["vel_resumed"])


def test_a_failure_on_one_rank_stops_every_rank(tmp_path):
    r = mpirun(2, "fail", cwd=tmp_path)
    assert r["particle"][-1] in (0, 1) and "not finite" in str(r["message"][-1])
    assert r["particle"][0] == -1 and "another process" in str(r["message"][0])


def test_bad_input_on_one_rank_is_refused_on_every_rank(tmp_path):
    r = mpirun(2, "refuse", cwd=tmp_path)
    assert "non-finite" in str(r["message"][1])
    assert "rank 1" in str(r["message"][0]) and "non-finite" in str(r["message"][0])
