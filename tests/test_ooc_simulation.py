"""The out-of-core run (gravpipe.ooc_simulation) against the in-core Simulation.

What these prove, with budgets so small that paging really happens (a page cache of a few
dozen 4 KiB pages for ~600 KB of particle data):
- a run of Simulation(..., memory_budget=, scratch=) is the in-core tree leapfrog bit for
  bit (positions and velocities), and its diagnostics rows (energy from the diagnostic tree,
  Lagrangian radii in passes over the pages) agree with the in-core rows to rounding;
- its snapshots and checkpoints are ordinary GADGET-layout files (io.read);
- a run killed with SIGKILL mid-run and resumed from its newest checkpoint ends bit for bit
  where the uninterrupted run ends, with the same diagnostics rows, under another budget too;
- the command line runs, checkpoints and resumes it;
- a scratch disk that fills up stops the run with an error naming the page, removes the
  scratch file and leaves the checkpoints written before intact and resumable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import gravpipe as gp
from gravpipe.errors import MemoryBudgetError
from gravpipe.ooc import plan_budget

# budgets here are tiny on purpose, so that pages really move: the walk may thrash
pytestmark = pytest.mark.filterwarnings("ignore::gravpipe.errors.MemoryBudgetWarning")

PAGE = 4096
N = 3000
DT = 1 / 64


def _least(n: int, threads: int) -> int:
    with pytest.raises(MemoryBudgetError) as e:
        plan_budget(n, 1 << 16, PAGE, threads, 16)
    return int(e.value.least_budget)


def _budget(threads: int = 2) -> int:
    return _least(N, threads) + 64 * PAGE  # 64 frames: far less than the ~150 pages of data


def _by_id(p: gp.Particles) -> gp.Particles:
    o = np.argsort(p.id)
    return gp.Particles(p.pos[o], p.vel[o], p.mass[o], p.id[o])


def _rows_without_clock(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("seconds_")} for row in history]


@pytest.fixture
def scratch(tmp_path):
    d = tmp_path / "scratch"
    d.mkdir()
    return d


def test_out_of_core_run_is_the_in_core_run_bit_for_bit(tmp_path, scratch):
    p = gp.ic.plummer(N, seed=2)
    with gp.Simulation(p, gravity="tree", dt=DT, threads=2, memory_budget=_budget(), scratch=scratch,
                       page_bytes=PAGE) as sim:
        assert isinstance(sim, gp.Simulation) and sim.residence == "pages"
        sim.evolve(0.25, snapshot_every=0.125, checkpoint_every=0.125, out=tmp_path / "run", progress=False)
        assert sim.provider.stats["misses"] > 1000  # the run really paged
        got = sim.particles
        rows = sim.history
    ref = gp.Simulation(p, gravity="tree", dt=DT, threads=2, backend="cpu")
    ref.evolve(0.25, snapshot_every=0.125, checkpoint_every=0.125, out=tmp_path / "ref", progress=False)
    assert np.array_equal(got.pos, ref.particles.pos) and np.array_equal(got.vel, ref.particles.vel)
    assert np.array_equal(got.id, p.id)
    assert [r["time"] for r in rows] == [r["time"] for r in ref.history]
    for a, b in zip(rows, ref.history):
        for k in ("kinetic", "potential", "total", "r_lagr_1", "r_lagr_50", "r_lagr_90"):
            assert a[k] == pytest.approx(b[k], rel=1e-12, abs=0), k
        assert a["steps"] == b["steps"] and a["particle_steps"] == b["particle_steps"]
    assert os.listdir(scratch) == []  # closed: the scratch file is gone
    snap = gp.io.read_snapshot(tmp_path / "run" / "snapshot_0002.h5")
    assert snap.time == 0.25
    assert np.array_equal(_by_id(snap.particles).pos, got.pos)  # written in curve order, ids intact
    assert snap.parameters["out_of_core"] == 1


def test_energy_diagnostics_against_a_float64_direct_sum(scratch):
    p = gp.ic.plummer(2000, seed=5)
    with gp.Simulation(p, gravity="tree", dt=DT, threads=1, eps=1 / 64, memory_budget=_least(2000, 1) + 64 * PAGE,
                       scratch=scratch, page_bytes=PAGE) as sim:
        e = sim.energy()
        radii = [sim.history[0][f"r_lagr_{k}"] for k in (1, 10, 50, 90)]
    exact = gp.diagnostics.energy(p, 1 / 64)  # float64 direct sum
    assert e.kinetic == pytest.approx(exact.kinetic, rel=1e-13)
    assert e.potential == pytest.approx(exact.potential, rel=2e-5)  # the theta = 0.25 float64 tree
    assert np.array_equal(radii, gp.diagnostics.lagrangian_radii(p, (0.01, 0.1, 0.5, 0.9))) or \
        np.allclose(radii, gp.diagnostics.lagrangian_radii(p, (0.01, 0.1, 0.5, 0.9)), rtol=1e-14, atol=0)


KILLED_RUN = textwrap.dedent("""
    import sys, gravpipe as gp
    out, scratch, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    p = gp.ic.plummer(%d, seed=3)
    sim = gp.Simulation(p, gravity="tree", dt=%r, threads=2, memory_budget=budget, scratch=scratch, page_bytes=%d)
    sim.evolve(2.0, checkpoint_every=1 / 32, out=out, progress=False)
    print("FINISHED")
""" % (N, DT, PAGE))


def _wait_for(child: subprocess.Popen, path, timeout: float = 120) -> None:
    """Until ``path`` exists, the child still running (its stderr shown if it stopped)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert child.poll() is None, child.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _cli_run_args(scratch) -> list[str]:
    """`gravpipe run` options of a small out-of-core tree run whose pages move."""
    return ["--gravity", "tree", "-n", "2000", "--dt", "0.015625", "--threads", "2", "--memory-budget",
            str(_least(2000, 2) + 64 * PAGE), "--scratch", str(scratch), "--page-bytes", str(PAGE)]


def test_kill_and_resume_is_bit_identical(tmp_path, scratch):
    """A run killed by SIGKILL after some checkpoints, resumed (under another budget and
    scratch directory), ends bit for bit where an uninterrupted run ends."""
    out = tmp_path / "killed"
    child = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(out), str(scratch), str(_budget())],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(child, out / "checkpoint_0004.h5")
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert "FINISHED" not in child.stdout.read()
    other = tmp_path / "scratch2"
    other.mkdir()
    t_end = 0.25
    with gp.Simulation.resume(out, scratch=other, memory_budget=_budget() + 200 * PAGE) as resumed:
        assert resumed.residence == "pages" and 0 < resumed.time < t_end
        resumed.evolve(t_end, checkpoint_every=1 / 32, out=out, progress=False)
        got, rows = resumed.particles, resumed.history
    with gp.Simulation(gp.ic.plummer(N, seed=3), gravity="tree", dt=DT, threads=2, memory_budget=_budget(),
                       scratch=scratch, page_bytes=PAGE) as straight:
        straight.evolve(t_end, checkpoint_every=1 / 32, out=tmp_path / "straight", progress=False)
        want, want_rows = straight.particles, straight.history
    assert np.array_equal(got.pos, want.pos) and np.array_equal(got.vel, want.vel)
    assert _rows_without_clock(rows) == _rows_without_clock(want_rows)
    assert os.listdir(other) == []


def test_command_line_runs_checkpoints_and_resumes(tmp_path, scratch):
    def run(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "gravpipe.cli", "run", "--no-progress", *args], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout

    common = _cli_run_args(scratch)
    run(*common, "--t-end", "0.125", "--checkpoint-every", "0.0625", "--out", str(tmp_path / "a"))
    text = run("--resume", str(tmp_path / "a"), "--t-end", "0.25")
    assert "energy error" in text and "out of core" in text
    run(*common, "--t-end", "0.25", "--out", str(tmp_path / "b"))
    a = gp.io.read_snapshot(sorted((tmp_path / "a").glob("snapshot_*.h5"))[-1])
    b = gp.io.read_snapshot(sorted((tmp_path / "b").glob("snapshot_*.h5"))[-1])
    assert a.time == b.time == 0.25
    assert np.array_equal(a.particles.pos, b.particles.pos) and np.array_equal(a.particles.vel, b.particles.vel)
    assert os.listdir(scratch) == []


DISK_FULL_RUN = textwrap.dedent("""
    import resource, signal, sys, gravpipe as gp
    from gravpipe.errors import StoreError
    out, scratch, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of a signal
    # precise rows: their potential goes to pot_check, the scratch file's last column, whose
    # pages a run this small writes back (its other columns stay in the cache)
    sim = gp.Simulation(gp.ic.plummer(%d, seed=4), gravity="tree", dt=%r, threads=1, memory_budget=budget,
                        scratch=scratch, page_bytes=%d, precise_energy=True)
    sim.evolve(1 / 16, checkpoint_every=1 / 32, out=out, progress=False)
    # the 'disk' now ends inside the sort's columns of the scratch file (column-major pages;
    # vel~ comes after pos, vel, ..., pos~), above the size of a checkpoint (h5py does not
    # survive a failed write: the test keeps its files below the limit)
    import os
    limit = sim.provider.store.page_of("vel~", 0, 0) * %d
    assert os.path.getsize(out + "/checkpoint_0002.h5") < limit
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        sim.evolve(1.0, checkpoint_every=1 / 32, out=out, progress=False)
        print("NO ERROR")
    except StoreError as e:
        print("ERROR", e)
""" % (N, DT, PAGE, PAGE))


def test_full_scratch_disk_stops_the_run_and_keeps_checkpoints(tmp_path, scratch):
    out = tmp_path / "run"
    budget = _least(N, 1) + 64 * PAGE
    r = subprocess.run([sys.executable, "-c", DISK_FULL_RUN, str(out), str(scratch), str(budget)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ERROR") and "EFBIG" in r.stdout and "page" in r.stdout, r.stdout
    assert os.listdir(scratch) == []  # the failed run removed its scratch file
    ckpts = sorted(out.glob("checkpoint_*.h5"))
    assert ckpts, "the checkpoints written before the failure are there"
    with gp.Simulation.resume(out, scratch=scratch) as sim:  # and intact: the run continues from them
        assert sim.time >= 1 / 16
        sim.evolve(sim.time + DT, progress=False)


def test_out_of_core_options_that_do_not_apply_are_refused(scratch):
    p = gp.ic.plummer(500, seed=1)
    with pytest.raises(ValueError, match="gravity='tree' only"):
        gp.Simulation(p, memory_budget="64MiB", scratch=scratch)
    with pytest.raises(ValueError, match="integrator='leapfrog' only"):
        gp.Simulation(p, gravity="tree", integrator="hermite", memory_budget="64MiB", scratch=scratch)
    with pytest.raises(ValueError, match="go together"):
        gp.Simulation(p, gravity="tree", memory_budget="64MiB")
    with pytest.raises(ValueError, match="backend='cuda'"):
        gp.Simulation(p, gravity="tree", backend="cuda", memory_budget="64MiB", scratch=scratch)
    with pytest.raises(MemoryBudgetError, match="least budget that works"):
        gp.Simulation(p, gravity="tree", memory_budget="64KiB", scratch=scratch)
    assert os.listdir(scratch) == []


@pytest.mark.parametrize("page", [0, 1000])
def test_a_bad_page_size_is_named(scratch, page):
    with pytest.raises(ValueError, match="page size: must be a positive multiple of 4096"):
        gp.Simulation(gp.ic.plummer(500, seed=1), gravity="tree", memory_budget="64MiB", scratch=scratch,
                      page_bytes=page)
    assert os.listdir(scratch) == []


def test_command_line_refuses_a_run_folder_before_filling_the_store(tmp_path, scratch, monkeypatch):
    """An out-of-core run into a folder that holds another run stops at once with the in-core
    run's message: nothing is drawn into the pages (which at large N takes minutes) first."""
    from gravpipe import ooc_simulation
    from gravpipe.cli import main

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "snapshot_0001.h5").write_bytes(b"x")

    def not_expected(*a, **k):
        raise AssertionError("the store was filled before the folder was checked")

    monkeypatch.setattr(ooc_simulation.PagedRun, "from_blocks", not_expected)
    code = main(["run", "--gravity", "tree", "-n", "1000", "--memory-budget", "64MiB", "--scratch", str(scratch),
                 "--out", str(tmp_path / "run"), "--no-progress"])
    assert code == 2


def test_sigterm_removes_the_scratch_files_and_keeps_the_checkpoints(tmp_path, scratch):
    """A batch system's SIGTERM (time limit) in the middle of an out-of-core `gravpipe run`:
    the run unwinds, removes its scratch files, keeps the checkpoints it wrote, says so and
    exits with 128 + 15."""
    out = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-m", "gravpipe.cli", "run", "--no-progress", *_cli_run_args(scratch),
                              "--t-end", "500", "--checkpoint-every", "0.0625", "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(child, out / "checkpoint_0002.h5")
    assert os.listdir(scratch) != []  # the store's scratch file is there mid-run
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM, err
    assert "terminated (SIGTERM)" in err
    assert os.listdir(scratch) == []
    with gp.Simulation.resume(out, scratch=scratch, memory_budget=_budget()) as resumed:
        assert resumed.time >= 2 * 0.0625
