"""Any end time: stops off the integrator's step grid, their outputs, and resuming across them.

- The issue's example: a Kepler orbit (e = 0.5) integrated with Hermite to t = 20 pi, which
  is not a multiple of dt_max = 1/8, ends exactly there with the 4th-order energy behaviour
  of an on-grid run (errors against the analytic solution of tests/test_integrators.py).
- Leapfrog reaches an off-grid time with one shortened step.
- A stop on the grid changes nothing; an off-grid stop moves the grid origin.
- Kill-and-resume across off-grid stops (snapshots every 0.3, checkpoints every 0.5, with
  dt_max = 1/8) is bit-identical, files included.
- A run with checkpoints always ends with one at t_end; output files are numbered in the
  order written and a resumed run continues the numbering.
- A fresh run refuses a directory that holds another run, unless told to overwrite it.
"""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
from test_integrators import PERIOD, kepler_errors, kepler_pair

import gravpipe as gp
from gravpipe import io
from gravpipe.cli import main
from gravpipe.simulation import Simulation


def kepler_run(eta: float, dt_max: float | None = None) -> dict[str, float]:
    p0 = kepler_pair(0.5)
    sim = Simulation(p0, integrator="hermite", eps=0.0, eta=eta, dt_max=dt_max, precision="double")
    sim.evolve(20 * math.pi, progress=False)
    assert sim.time == 20 * math.pi  # exactly, not the nearest grid point
    return kepler_errors(sim, p0, 0.5)


def test_hermite_kepler_to_twenty_pi():
    """Measured (AMD EPYC Zen 3): eta 0.01 / 0.005 off-grid: dE/E = -3.2e-6 / -8.3e-7, position
    off by 7.4e-6 / 7.2e-6; on a grid through 20 pi (dt_max = 2 pi / 8): -3.9e-6 / -6.5e-7."""
    coarse, fine = kepler_run(0.01), kepler_run(0.005)
    on_grid = kepler_run(0.005, dt_max=PERIOD / 8)
    assert abs(fine["energy"]) < 2e-6 and fine["position"] < 1e-4
    assert abs(fine["energy"]) < 3 * abs(on_grid["energy"])
    # energy error ~ dt^4 ~ eta^2 (Aarseth's criterion: dt ~ sqrt(eta)): ~4x per halving of eta
    assert 2.5 < coarse["energy"] / fine["energy"] < 8


def test_leapfrog_reaches_an_off_grid_time():
    p0 = kepler_pair(0.5)
    sim = Simulation(p0, integrator="leapfrog", eps=0.0, dt=1 / 256, precision="double")
    sim.evolve(20 * math.pi, progress=False)
    assert sim.time == 20 * math.pi and sim.grid_origin == 20 * math.pi
    err = kepler_errors(sim, p0, 0.5)
    assert abs(err["energy"]) < 1e-4 and err["position"] < 0.05  # 2nd order, dt = 1/256


@pytest.mark.parametrize("integrator", ["hermite", "leapfrog"])
def test_grid_stops_are_free_and_off_grid_stops_move_the_origin(integrator):
    p = gp.ic.plummer(128, seed=3)
    kw = dict(integrator=integrator, eps=1 / 32, dt=1 / 64)
    if integrator == "hermite":
        kw.pop("dt")
    quantum = 0.125 if integrator == "hermite" else 1 / 64
    straight, stopped = Simulation(p, **kw), Simulation(p, **kw)
    straight.evolve(4 * quantum, progress=False)
    stopped.evolve(quantum, progress=False)
    stopped.evolve(4 * quantum, progress=False)
    assert np.array_equal(straight.particles.pos, stopped.particles.pos)  # grid stops: no trace
    assert stopped.grid_origin == 0.0

    off = Simulation(p, **kw)
    off.evolve(1.3 * quantum, progress=False)
    assert off.time == 1.3 * quantum and off.grid_origin == 1.3 * quantum
    off.evolve(4 * quantum, progress=False)
    assert off.time == 4 * quantum
    d = np.abs(off.particles.pos - straight.particles.pos).max()
    assert 0 < d < 1e-4  # a different but equally accurate trajectory
    assert abs(off.energy_error()) < 1e-4


def evolve_files(sim: Simulation, out, t_end: float) -> None:
    sim.evolve(t_end, snapshot_every=0.3, checkpoint_every=0.5, out=out, progress=False)


@pytest.mark.parametrize("integrator", ["hermite", "leapfrog"])
def test_resume_across_off_grid_stops_is_bit_identical(tmp_path, integrator):
    p = gp.ic.plummer(128, seed=4)
    kw = {"integrator": integrator, "eps": 1 / 32, **({"dt": 1 / 32} if integrator == "leapfrog" else {})}
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    evolve_files(Simulation(p, **kw), whole, 1.3)
    names = sorted(f.name for f in whole.iterdir())
    # snapshots at 0.3 0.6 0.9 1.2 and t_end; checkpoints at 0.5 1.0 and t_end
    assert names == ["checkpoint_0001.h5", "checkpoint_0002.h5", "checkpoint_0003.h5", "diagnostics.csv",
                     "manifest.json", *(f"snapshot_000{k}.h5" for k in range(1, 6))]
    times = [io.read_snapshot(whole / f"snapshot_000{k}.h5").time for k in range(1, 6)]
    assert times == pytest.approx([0.3, 0.6, 0.9, 1.2, 1.3], abs=1e-12)
    assert io.read_snapshot(whole / "checkpoint_0003.h5").time == 1.3

    # killed after the checkpoint at t = 1: what came later is lost, then resumed
    shutil.copytree(whole, cut)
    for name in ("checkpoint_0003.h5", "snapshot_0004.h5", "snapshot_0005.h5"):
        (cut / name).unlink()
    sim = Simulation.resume(cut)
    assert sim.time == pytest.approx(1.0, abs=1e-12)
    evolve_files(sim, cut, 1.3)
    assert sorted(f.name for f in cut.iterdir()) == names
    for name in names[:-1] if names[-1] == "diagnostics.csv" else names:
        if name.endswith(".h5"):
            a, b = io.read_snapshot(whole / name), io.read_snapshot(cut / name)
            assert a.time == b.time and np.array_equal(a.particles.pos, b.particles.pos), name
            assert np.array_equal(a.particles.vel, b.particles.vel), name

    # going on from the off-grid end gives the same as going on in the first process
    first, again = Simulation.resume(whole), Simulation.resume(cut)
    for s in (first, again):
        s.evolve(1.6, progress=False)
    assert np.array_equal(first.particles.pos, again.particles.pos)


def test_final_checkpoint_and_numbering_on_resume(tmp_path):
    p = gp.ic.plummer(64, seed=5)
    out = tmp_path / "run"
    Simulation(p, eps=1 / 32).evolve(1.5, checkpoint_every=1.0, out=out, progress=False)
    ckpts = sorted(out.glob("checkpoint_*.h5"))
    assert [io.read_snapshot(c).time for c in ckpts] == [1.0, 1.5]  # the final state is kept
    sim = Simulation.resume(out)
    assert sim.time == 1.5
    sim.evolve(2.5, checkpoint_every=1.0, out=out, progress=False)
    ckpts = sorted(out.glob("checkpoint_*.h5"))
    assert [c.name for c in ckpts][-2:] == ["checkpoint_0003.h5", "checkpoint_0004.h5"]
    assert [io.read_snapshot(c).time for c in ckpts] == [1.0, 1.5, 2.0, 2.5]


def test_a_run_directory_is_not_mixed_with_another_run(tmp_path):
    p = gp.ic.plummer(64, seed=6)
    out = tmp_path / "run1"
    first = Simulation(p, eps=1 / 32)
    first.evolve(0.25, checkpoint_every=0.125, out=out, progress=False)
    first.evolve(0.5, checkpoint_every=0.125, out=out, progress=False)  # the same run goes on: fine
    Simulation.resume(out).evolve(0.625, checkpoint_every=0.125, out=out, progress=False)  # so does a resume
    n_files = len(list(out.iterdir()))
    with pytest.raises(FileExistsError, match="--resume"):
        Simulation(p, eps=1 / 32).evolve(0.25, checkpoint_every=0.125, out=out, progress=False)
    assert len(list(out.iterdir())) == n_files  # nothing touched
    (out / "notes.txt").write_text("mine")
    Simulation(p, eps=1 / 32).evolve(0.25, checkpoint_every=0.125, out=out, progress=False, overwrite=True)
    assert sorted(f.name for f in out.iterdir()) == ["checkpoint_0001.h5", "checkpoint_0002.h5",
                                                     "diagnostics.csv", "manifest.json", "notes.txt"]
    with pytest.raises(ValueError, match="not a run directory"):
        Simulation(p, eps=1 / 32).evolve(0.25, out=out / "notes.txt", progress=False)


def run_main(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_refuses_a_used_run_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ("run", "-n", "64", "--t-end", "1/8", "--out", "run1", "--no-progress")
    assert run_main(capsys, *args)[0] == 0
    code, _, err = run_main(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--resume run1" in err and "--overwrite" in err
    assert run_main(capsys, *args, "--overwrite")[0] == 0
    (tmp_path / "afile").write_text("x")
    code, _, err = run_main(capsys, "run", "-n", "64", "--t-end", "1/8", "--out", "afile", "--no-progress")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "afile" in err


def test_cli_takes_off_grid_times(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_main(capsys, "run", "-n", "64", "--t-end", "0.3", "--snap-every", "0.1", "--out", "r",
                            "--no-progress")
    assert code == 0
    times = [io.read_snapshot(f).time for f in sorted((tmp_path / "r").glob("snapshot_*.h5"))]
    assert times == pytest.approx([0.1, 0.2, 0.3], abs=1e-12)
    code, out, _ = run_main(capsys, "run", "--resume", "r", "--t-end", "0.45", "--no-progress")
    assert code == 0 and "at t = 0.45" in out
