"""A run killed with SIGKILL at random moments resumes and ends bit-identical to an
uninterrupted run; no partial file ever remains under its final name.

The run is ``python -m gravpipe.cli run`` in a subprocess (Hermite, N = 512, checkpoints
every 3 dt_max, 42 in all). It is killed once at a random wall-clock moment (maybe before
its first checkpoint: then it starts again from scratch) and then at random moments after
randomly chosen checkpoints have appeared, so kills land in the integration and in the
middle of file writes, whatever the machine's speed. Both runs use one thread.
"""

import csv
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gravpipe as gp
from gravpipe import io

N, T_END, DT_MAX = 512, "8", "1/16"
CHECKPOINT_EVERY, SNAP_EVERY = "3/16", "1/2"  # 3 dt_max: off the grid of diagnostics rows (every 2)
N_CHECKPOINTS = 42
# the energy columns, and the step counts that a resumed run carries on from its checkpoint
COMPARED_COLUMNS = ("time", "kinetic", "potential", "total", "energy_error", "steps", "particle_steps")
# what may be in a run directory: final names, or a writer's temporary file left by a kill
FINAL_NAME = re.compile(r"^(snapshot|checkpoint)_\d{4}\.h5$|^diagnostics\.csv$|^manifest\.json$")
TEMP_NAME = re.compile(r"^\..+\.tmp-\d+-[0-9a-f]{8}$")


def run_command(ic: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "gravpipe.cli", "run", str(ic), "--t-end", T_END, "--dt-max", DT_MAX,
            "--checkpoint-every", CHECKPOINT_EVERY, "--snap-every", SNAP_EVERY, "--out", str(out),
            "--threads", "1", "--backend", "cpu", "--no-progress"]


def resume_command(out: Path) -> list[str]:
    return [sys.executable, "-m", "gravpipe.cli", "run", "--resume", str(out), "--threads", "1", "--no-progress"]


def start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def checkpoints(out: Path) -> list[Path]:
    return sorted(out.glob("checkpoint_*.h5")) if out.is_dir() else []


def kill_when(proc: subprocess.Popen, out: Path, after_checkpoints: int | None, delay: float) -> bool:
    """SIGKILL ``proc`` ``delay`` seconds after ``out`` holds ``after_checkpoints``
    checkpoints (None: after its start). False when it finished first."""
    while after_checkpoints is not None and len(checkpoints(out)) < after_checkpoints:
        if proc.poll() is not None:
            return False
        time.sleep(0.002)
    time.sleep(delay)
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


def assert_only_complete_files(out: Path) -> None:
    """Every file under a final name is complete; anything else is a writer's temporary."""
    if not out.is_dir():
        return
    for path in out.iterdir():
        assert FINAL_NAME.match(path.name) or TEMP_NAME.match(path.name), path
        if path.suffix == ".h5" and FINAL_NAME.match(path.name):
            snap = io.read_snapshot(path)  # raises on a partial file
            assert snap.particles.n == N
            assert (snap.integrator_state is not None) == path.name.startswith("checkpoint_")
        elif path.name == "diagnostics.csv":
            rows = list(csv.reader(path.open()))
            assert rows and all(len(r) == len(rows[0]) for r in rows), path


def diagnostics_columns(out: Path) -> dict[str, list[str]]:
    """The compared columns of diagnostics.csv as the exact text written (repr of float64)."""
    with open(out / "diagnostics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {c: [r[c] for r in rows] for c in COMPARED_COLUMNS}


@pytest.fixture(scope="module")
def ic(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ic") / "ic.h5"
    io.write_snapshot(path, gp.ic.plummer(N, seed=7), 0.0)
    return path


def test_sigkilled_run_resumes_bit_identical(ic, tmp_path):
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    started = time.perf_counter()
    done = subprocess.run(run_command(ic, ref), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    ref_wall = time.perf_counter() - started

    rng = np.random.default_rng(20240611)
    # (checkpoints to wait for, extra delay): the first kill at a random moment after start
    plan = [(None, rng.uniform(0.1, 0.6) * ref_wall)]
    plan += [(int(k), rng.uniform(0.0, 0.05)) for k in np.sort(rng.choice(np.arange(3, N_CHECKPOINTS - 2), 3,
                                                                        replace=False))]
    landed, resumed = 0, 0
    proc = start(run_command(ic, killed))
    for after, delay in plan:
        if not kill_when(proc, killed, after, delay):
            break
        landed += 1
        assert_only_complete_files(killed)
        if checkpoints(killed):
            proc, resumed = start(resume_command(killed)), resumed + 1
        else:  # killed before its first checkpoint: nothing to resume, start again
            proc = start(run_command(ic, killed))
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert landed >= 3 and resumed >= 3, (landed, resumed)  # the kills did interrupt the run
    assert_only_complete_files(killed)

    snaps = sorted(p.name for p in ref.glob("snapshot_*.h5"))
    assert snaps == sorted(p.name for p in killed.glob("snapshot_*.h5")) and len(snaps) == 16
    for name in snaps:
        a, b = io.read_snapshot(ref / name), io.read_snapshot(killed / name)
        assert a.time == b.time
        for field in ("pos", "vel", "id"):  # Coordinates, Velocities, ParticleIDs
            x, y = getattr(a.particles, field), getattr(b.particles, field)
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), (name, field)
    final = f"checkpoint_{N_CHECKPOINTS:04d}.h5"
    sa, sb = io.read_snapshot(ref / final).integrator_state, io.read_snapshot(killed / final).integrator_state
    assert sa.keys() == sb.keys()
    for key in sa:
        assert np.asarray(sa[key]).tobytes() == np.asarray(sb[key]).tobytes(), key
    assert diagnostics_columns(killed) == diagnostics_columns(ref)
