"""Faults of runs over MPI ranks with distributed state (gravpipe run under mpiexec):

- a rank killed (SIGKILL) mid-run ends every rank within seconds; the newest checkpoint
  set is whole, and a resume from it on the same ranks reproduces the uninterrupted run
  bit for bit;
- a rank that runs out of memory (a real allocation failure under RLIMIT_AS) ends every
  rank within seconds with one line naming the rank and the cause;
- a mistake every rank makes alike (an option, a model, a missing file) is said once.

Skipped when mpi4py or mpiexec is missing (``pip install 'gravpipe[mpi]'``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import MPI_ENV, mpiexec

import gravpipe as gp

pytestmark = pytest.mark.mpi
GRAVPIPE = str(Path(sys.executable).parent / "gravpipe")
FAULT_CASE = Path(__file__).parent / "mpi" / "fault_case.py"
RUN = ["run", "--gravity", "tree", "-n", "20000", "--threads", "1", "--no-progress", "--checkpoint-every", "1/32"]
#: environment variables that carry a process's MPI rank (MPICH's hydra, Open MPI)
RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK")
#: the variable that marks the ranks of one test's launcher
TAG = "GRAVPIPE_FAULT_TEST"


def tagged_ranks(tag: str) -> dict[int, int]:
    """{rank: pid} of the processes whose environment has TAG=tag and a rank variable."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        env = dict(v.split("=", 1) for v in raw.split("\0") if "=" in v)
        if env.get(TAG) == tag:
            for var in RANK_VARS:
                if var in env:
                    found[int(env[var])] = int(entry.name)
    return found


def checkpoints(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("checkpoint_*") if not p.name.startswith("."))


@pytest.mark.parametrize("paged", [False, True], ids=["in-core", "out-of-core"])
def test_a_killed_rank_ends_the_run_and_the_last_checkpoint_set_resumes_bit_for_bit(tmp_path, paged):
    """Also with each rank out of core: the resume removes what the killed rank left in the
    scratch folder and continues bit for bit the in-core run's."""
    out, tag = tmp_path / "killed", f"killed-{os.getpid()}-{time.monotonic_ns()}"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    pages = ["--memory-budget", "110MiB", "--scratch", str(scratch)] if paged else []
    launcher = subprocess.Popen([mpiexec(), "-n", "2", GRAVPIPE, *RUN, *pages, "--t-end", "100", "--out", str(out)],
                                cwd=tmp_path, env=MPI_ENV | {TAG: tag}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(checkpoints(out)) < 3:
            assert launcher.poll() is None, launcher.communicate()
            assert time.monotonic() < deadline, "no checkpoints written"
            time.sleep(0.05)
        pids = tagged_ranks(tag)
        assert set(pids) == {0, 1}, pids
        os.kill(pids[1], signal.SIGKILL)
        killed = time.monotonic()
        launcher.communicate(timeout=60)
        assert time.monotonic() - killed < 10, "the other rank outlived the killed one by 10 s or more"
        assert launcher.returncode != 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    snap = gp.io.read_snapshot(checkpoints(out)[-1])  # whole: every member there and consistent
    assert snap.particles.n == 20000 and snap.integrator_state is not None
    t_next = repr(snap.time + 1 / 32)
    resumed = subprocess.run([mpiexec(), "-n", "2", GRAVPIPE, "run", "--resume", str(out), "--t-end", t_next,
                              "--threads", "1", "--no-progress", *pages[2:]], cwd=tmp_path, env=MPI_ENV,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert list(scratch.iterdir()) == []  # the killed rank's store and folders are gone
    whole = tmp_path / "whole"
    r = subprocess.run([mpiexec(), "-n", "2", GRAVPIPE, *RUN, "--t-end", t_next, "--out", str(whole)], cwd=tmp_path,
                       env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    a = gp.io.read_snapshot(checkpoints(out)[-1])
    b = gp.io.read_snapshot(checkpoints(whole)[-1])
    assert a.time == b.time
    ia, ib = np.argsort(a.particles.id), np.argsort(b.particles.id)  # out of core: in curve order
    assert np.array_equal(a.particles.id[ia], b.particles.id[ib])
    assert np.array_equal(a.particles.pos[ia], b.particles.pos[ib])
    assert np.array_equal(a.particles.vel[ia], b.particles.vel[ib])


def test_a_rank_out_of_memory_ends_every_rank_with_one_line_naming_it(tmp_path):
    started = time.monotonic()
    r = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py", str(FAULT_CASE), "1", "150", "--",
                        "run", "--gravity", "tree", "-n", "2000000", "--threads", "1", "--t-end", "1/128",
                        "--no-progress"], cwd=tmp_path, env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    ours = [line for line in r.stderr.splitlines() if line.startswith("gravpipe run:")]
    assert ours == [ours[0]] and "error on rank 1 of 2: out of memory" in ours[0], r.stderr[-2000:]
    assert time.monotonic() - started < 120


@pytest.mark.parametrize("args, words", [
    (["--gravity", "tree", "--backend", "cuda", "-n", "1000"], "backend='cuda': the tree over MPI ranks"),
    (["--ic", "uniform-sphere", "-n", "1000"], "model 'uniform-sphere' cannot be drawn block by block"),
    (["missing.h5"], "snapshot file not found: missing.h5"),
])
def test_a_mistake_every_rank_makes_is_said_once(tmp_path, args, words):
    """Every rank finds the same mistake: exit 2 with one line, no launcher abort."""
    r = subprocess.run([mpiexec(), "-n", "2", GRAVPIPE, "run", *args, "--t-end", "1/64", "--no-progress"],
                       cwd=tmp_path, env=MPI_ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gravpipe run: error: {words}"), r.stderr
