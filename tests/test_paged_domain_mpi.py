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
    assert bool(d["transit_warned"])  # the start-up's pieces, made beyond the room kept for them, are said
    transit = d["transit"]  # (rank, stop, (bytes in transit, bytes past what the budget held))
    assert (transit[:, :, 0] > 512 << 10).any()  # pieces larger than the room outside the store...
    assert (transit[:, :, 1] == 0).all()  # ...had room made for them in the budget
    assert int(d["cuts"]) == int(d["core_cuts"]) >= 1
    for k in range(3):
        for name in ("pos", "vel", "acc", "pot"):
            assert np.array_equal(d[f"paged_{name}{k}"], d[f"core_{name}{k}"]), (name, k)
    fine, core_fine = d["paged_fine"], d["core_fine"]
    assert np.abs(fine - core_fine).max() < 1e-5 * np.abs(core_fine).max()
    assert np.abs(fine - d["paged_pot2"]).max() > 1e-7 * np.abs(fine).max()  # a tree of its own, not the run's
    assert list(scratch.iterdir()) == []  # stores and migration files are gone


def _gravpipe_run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "gravpipe"
    cmd = [mpiexec(), "-n", "2", str(exe), "run", "--no-progress", *args]
    return subprocess.run(cmd, cwd=cwd, env=MPI_ENV, capture_output=True, text=True, timeout=300)


def _last_checkpoint(run_dir: Path) -> dict[str, np.ndarray]:
    """The newest checkpoint set's particles and accelerations, in id order."""
    import gravpipe as gp

    path = sorted(run_dir.glob("checkpoint_*"))[-1]
    snap = gp.io.read_snapshot(path)
    order = np.argsort(snap.particles.id)
    acc = np.asarray(snap.integrator_state["acc"]).reshape(-1, 3)
    return {"pos": snap.particles.pos[order], "vel": snap.particles.vel[order], "acc": acc[order],
            "time": np.array(snap.time)}


def test_gravpipe_run_out_of_core_over_ranks_is_the_in_core_run_and_resumes(tmp_path):
    """``mpiexec -n 2 gravpipe run --memory-budget B --scratch DIR``: the checkpoint sets are
    the in-core distributed run's bit for bit, a resume out of core continues bit for bit,
    and nothing is left in the scratch directory."""
    common = ["-n", "12000", "--gravity", "tree", "--dt", "0.015625", "--checkpoint-every", "0.03125",
              "--threads", "1"]
    r = _gravpipe_run(*common, "--t-end", "0.09375", "--out", "core", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    paged = [*common, "--memory-budget", "100MiB", "--scratch", str(scratch)]
    r = _gravpipe_run(*paged, "--t-end", "0.0625", "--out", "paged", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "each out of core within" in r.stdout and "out of core; seconds per step" in r.stdout
    assert list(scratch.iterdir()) == []
    r = _gravpipe_run("--resume", "paged", "--t-end", "0.09375", "--memory-budget", "100MiB", "--scratch",
                      str(scratch), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    core, resumed = _last_checkpoint(tmp_path / "core"), _last_checkpoint(tmp_path / "paged")
    assert float(core["time"]) == float(resumed["time"]) == 0.09375
    for name in ("pos", "vel", "acc"):
        assert np.array_equal(core[name], resumed[name]), name
    assert list(scratch.iterdir()) == []
