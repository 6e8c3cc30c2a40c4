"""MPI runs (2 and 3 ranks under mpiexec) against the serial run.

- j-parallel forces: every rank holds the same result; against a float64 numpy direct sum
  within the pipeline's bounds (mixed acc/pot 1e-6, jerk 1e-5; double 1e-12).
- Hermite on P ranks: every rank holds the same particles; the energy error equals the
  serial run's within 10%; two runs on the same P are bit-identical; kill-and-resume on
  the same P is bit-identical, and on another P continues correctly.

Skipped when mpi4py or mpiexec is missing (``pip install 'gravpipe[mpi]'``; CI installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import MPI_ENV, find_mpiexec
from reference import direct_sum_f64

import gravpipe as gp

pytest.importorskip("mpi4py")
MPIEXEC = find_mpiexec()
if MPIEXEC is None:
    pytest.skip("mpiexec not found (pip install 'gravpipe[mpi]')", allow_module_level=True)

CASE = Path(__file__).parent / "mpi" / "run_case.py"


def mpirun(ranks: int, *args: str, cwd: Path) -> dict[str, np.ndarray]:
    out = cwd / f"result_{ranks}_{args[0]}.npz"
    # python -m mpi4py: an exception on one rank aborts them all instead of leaving the others
    # waiting in a collective
    r = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", str(CASE), args[0], str(out),
                        *args[1:]],
                       cwd=cwd, env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


def rel_rms(a: np.ndarray, ref: np.ndarray) -> float:
    a, ref = a.reshape(len(ref), -1), ref.reshape(len(ref), -1)
    return float(np.sqrt(np.mean(np.sum((a - ref) ** 2, 1) / np.sum(ref ** 2, 1))))


@pytest.mark.parametrize("ranks", [2, 3])
def test_j_parallel_forces_match_the_float64_reference(tmp_path, ranks):
    r = mpirun(ranks, "forces", cwd=tmp_path)
    p = gp.ic.plummer(1000, seed=7)
    acc, pot, jerk = direct_sum_f64(p.pos, p.mass, p.pos, 1 / 64, vel_j=p.vel, vel_i=p.vel, exclude=np.arange(p.n))
    assert rel_rms(r["acc_mixed"], acc) < 1e-6 and rel_rms(r["pot_mixed"], pot) < 1e-6
    assert rel_rms(r["jerk_mixed"], jerk) < 1e-5
    assert rel_rms(r["acc_double"], acc) < 1e-12 and rel_rms(r["jerk_double"], jerk) < 1e-12


def serial_hermite(run_dir: Path, t_end: float) -> gp.Simulation:
    sim = gp.Simulation(gp.ic.plummer(512, seed=8), eps=1 / 32, threads=1, backend="cpu")
    sim.evolve(t_end, checkpoint_every=0.25, out=run_dir, progress=False)
    return sim


@pytest.mark.parametrize("ranks", [2, 3])
def test_hermite_on_ranks_agrees_with_serial_and_is_deterministic(tmp_path, ranks):
    serial = serial_hermite(tmp_path / "serial", 0.5)
    a = mpirun(ranks, "hermite", str(tmp_path / "a"), "0.5", cwd=tmp_path)
    b = mpirun(ranks, "hermite", str(tmp_path / "b"), "0.5", cwd=tmp_path)
    assert np.array_equal(a["pos"], b["pos"])  # deterministic for a given P
    assert abs(a["energy_error"] - serial.energy_error()) <= 0.1 * abs(serial.energy_error())
    assert np.abs(a["pos"] - serial.particles.pos).max() < 1e-5  # partial sums in another order
    assert a["comm"] > 0


def test_resume_on_same_and_other_rank_counts(tmp_path):
    whole = mpirun(2, "hermite", str(tmp_path / "whole"), "0.75", cwd=tmp_path)
    cut = tmp_path / "cut"
    mpirun(2, "hermite", str(cut), "0.5", cwd=tmp_path)
    again = mpirun(2, "hermite", str(cut), "0.75", cwd=tmp_path)
    assert np.array_equal(whole["pos"], again["pos"])  # kill-and-resume on the same P
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "whole", other)
    for f in sorted(other.glob("checkpoint_*"))[2:]:
        shutil.rmtree(f)  # back to t = 0.5 (checkpoints of MPI runs are multi-file set folders)
    moved = mpirun(3, "hermite", str(other), "0.75", cwd=tmp_path)
    assert np.abs(moved["pos"] - whole["pos"]).max() < 1e-5  # redistributed over 3 ranks
    assert abs(moved["energy_error"] - whole["energy_error"]) <= 0.1 * abs(whole["energy_error"])


def test_cli_run_under_mpiexec_prints_once(tmp_path):
    exe = Path(sys.executable).parent / "gravpipe"
    r = subprocess.run([MPIEXEC, "-n", "2", str(exe), "run", "-n", "256", "--t-end", "0.25", "--no-progress",
                        "--out", "run"], cwd=tmp_path, env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("energy error") == 1 and "N/P j-particles on each of 2 MPI ranks" in r.stdout
    assert "comm" in r.stdout
    # snapshots and checkpoints of a run over 2 ranks: multi-file sets of 2 files
    assert sorted(f.name for f in (tmp_path / "run").iterdir()) == [
        "checkpoint_0001", "diagnostics.csv", "manifest.json", "snapshot_0001"]
    assert sorted(f.name for f in (tmp_path / "run" / "snapshot_0001").iterdir()) == [
        "snapshot_0001.0.hdf5", "snapshot_0001.1.hdf5"]


def test_bench_pingpong_fits_latency_and_bandwidth(tmp_path):
    import json

    exe = Path(sys.executable).parent / "gravpipe"
    r = subprocess.run([MPIEXEC, "-n", "2", str(exe), "bench", "pingpong", "--sizes", "1", "1024", "65536",
                        "1048576", "--repeats", "3", "--json", "-"], cwd=tmp_path, env=MPI_ENV, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = doc["timings"]
    assert [row["bytes"] for row in rows] == [1, 1024, 65536, 1048576]
    assert all(row["seconds"] > 0 for row in rows) and rows[-1]["seconds"] > rows[0]["seconds"]
    fit = doc["fits"]["all"]
    assert fit["latency_s"] > 0 and fit["bandwidth_gb_s"] > 0 and "MPI" in doc["mpi_library"]


def test_bench_pingpong_needs_two_ranks(capsys):
    from gravpipe.cli import main

    assert main(["bench", "pingpong"]) == 2
    assert "mpiexec -n 2" in capsys.readouterr().err


def test_a_killed_rank_stops_the_run_and_resume_works(tmp_path):
    """SIGKILL on one rank mid-run: mpiexec ends promptly (no rank left waiting), the
    checkpoints written so far are intact, and the run resumes from them."""
    import signal
    import time

    exe = Path(sys.executable).parent / "gravpipe"
    out = tmp_path / "victim_run"
    run = subprocess.Popen([MPIEXEC, "-n", "2", str(exe), "run", "-n", "4096", "--t-end", "8", "--checkpoint-every",
                            "0.125", "--no-progress", "--out", str(out)], cwd=tmp_path, env=MPI_ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("checkpoint_*[0-9]"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        ranks = subprocess.run(["pgrep", "-f", f"gravpipe run .*{out}"], capture_output=True, text=True).stdout.split()
        ranks = [int(p) for p in ranks if int(p) != run.pid]
        assert len(ranks) >= 2, ranks
        os.kill(max(ranks), signal.SIGKILL)
        killed = time.monotonic()
        run.wait(timeout=60)
        assert time.monotonic() - killed < 30 and run.returncode != 0
    finally:
        if run.poll() is None:
            run.kill()
    done = sorted(out.glob("checkpoint_*[0-9]"))  # only complete sets have their final name
    assert done and gp.io.read_snapshot(done[-1]).integrator_state is not None
    sim = gp.Simulation.resume(out)  # one process now: redistributed
    sim.evolve(sim.time + 0.125, progress=False)
    assert abs(sim.energy_error()) < 1e-5


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "gravpipe.cli", *args]


def test_ranks_given_different_run_folders_are_refused(tmp_path):
    """With a different --out on each rank the run was accepted and only rank 0 wrote: the
    ranks' start-up check compares the run folder (and t_end, the cadences) too."""
    run = ["run", "-n", "256", "--t-end", "1/8", "--no-progress", "--out"]
    r = subprocess.run([MPIEXEC, "-n", "1", *_cli(*run, "a"), ":", "-n", "1", *_cli(*run, "b")],
                       cwd=tmp_path, env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "run folder (out) differs: ranks 0 have " in r.stderr and "_run0/a; ranks 1 have " in r.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("how", ["options", "run.toml"])
def test_an_out_of_core_run_under_mpiexec_pages_each_ranks_share(tmp_path, how):
    """mpiexec -n 2 gravpipe run --memory-budget B --scratch DIR: each rank pages its own share
    under B (residence "domain_pages"); a budget too small is said once by rank 0; the scratch
    files are gone at the end."""
    (tmp_path / "scratch").mkdir()
    for budget, ok in (("32MiB", False), ("160MiB", True)):
        ooc = ["--gravity", "tree", "-n", "500", "--memory-budget", budget, "--scratch", "scratch"]
        if how == "options":
            args = ["run", *ooc, "--t-end", "1/64"]
        else:
            (tmp_path / "ooc.toml").write_text(f'gravity = "tree"\nn = 500\nmemory_budget = "{budget}"\n'
                                               'scratch = "scratch"\n')
            args = ["run", "--config", "ooc.toml", "--t-end", "1/64"]
        r = subprocess.run([MPIEXEC, "-n", "2", *_cli(*args, "--no-progress")], cwd=tmp_path, env=MPI_ENV,
                           capture_output=True, text=True, timeout=300)
        if ok:
            assert r.returncode == 0, r.stdout + r.stderr
            assert "each out of core within 160 MiB" in r.stdout
        else:
            assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stdout + r.stderr
            assert r.stderr.startswith("gravpipe run: error: memory budget 32 MiB a rank is too small"), r.stderr
        assert list((tmp_path / "scratch").iterdir()) == []


def test_a_one_process_out_of_core_checkpoint_resumed_under_mpiexec_is_refused_in_one_line(tmp_path):
    (tmp_path / "scratch").mkdir()
    ooc = ["--gravity", "tree", "-n", "500", "--memory-budget", "32MiB", "--scratch", "scratch"]
    done = subprocess.run(_cli("run", *ooc, "--t-end", "1/64", "--out", "run", "--no-progress"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    r = subprocess.run([MPIEXEC, "-n", "2", *_cli("run", "--resume", "run", "--t-end", "1/32", "--no-progress")],
                       cwd=tmp_path, env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert "a run out of core in one process resumes in one process" in r.stderr
    assert list((tmp_path / "scratch").iterdir()) == []
