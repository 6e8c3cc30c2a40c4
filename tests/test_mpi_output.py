"""Output of runs over several MPI ranks: GADGET-4 multi-file sets (one file per rank,
written atomically), read back as one snapshot by gravpipe, yt and pynbody; and the check
that every rank runs the same code on the same inputs.

References: the particles the run holds in memory (bit for bit), the header conventions
of GADGET-4 (NumFilesPerSnapshot, NumPart_ThisFile / NumPart_Total).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from mpi_launch import MPI_ENV, find_mpiexec

import gravpipe as gp

pytest.importorskip("mpi4py")
MPIEXEC = find_mpiexec()
if MPIEXEC is None:
    pytest.skip("mpiexec not found (pip install 'gravpipe[mpi]')", allow_module_level=True)

CASE = Path(__file__).parent / "mpi" / "output_case.py"


def mpirun(ranks: int, case: str, *args: str, cwd: Path) -> dict[str, np.ndarray]:
    out = cwd / f"out_{ranks}_{case}.npz"
    r = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", str(CASE), case, str(out), *args],
                       cwd=cwd, env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_run_writes_sets_that_read_back_as_one_snapshot(tmp_path, ranks):
    run = tmp_path / "run"
    mem = mpirun(ranks, "run", str(run), cwd=tmp_path)
    for kind in ("snapshot", "checkpoint"):
        folder = run / f"{kind}_0001"
        members = sorted(folder.iterdir())
        assert [m.name for m in members] == [f"{kind}_0001.{k}.hdf5" for k in range(ranks)]
        counts = []
        for m in members:
            with h5py.File(m) as f:
                h = f["Header"].attrs
                assert h["NumFilesPerSnapshot"] == ranks and h["NumPart_Total"][1] == 600
                counts.append(int(h["NumPart_ThisFile"][1]))
        assert counts == [600 * (k + 1) // ranks - 600 * k // ranks for k in range(ranks)]
        for path in (folder, members[-1], folder / f"{kind}_0001"):  # folder, any member, pynbody's base
            snap = gp.io.read_snapshot(path)
            for a in ("pos", "vel", "mass", "id"):
                assert np.array_equal(getattr(snap.particles, a), mem[a])
            assert snap.time == mem["time"]
    state = gp.io.read_snapshot(run / "checkpoint_0001").integrator_state
    assert state["acc"].shape == (1800,) and "history_time" in state
    assert "multi-file set of" in gp.io.describe(run / "snapshot_0001")


def test_yt_and_pynbody_open_a_set_as_one_snapshot(tmp_path):
    run = tmp_path / "run"
    mem = mpirun(2, "run", str(run), cwd=tmp_path)
    order = np.argsort(mem["id"])
    yt = pytest.importorskip("yt")
    ad = yt.load(str(run / "snapshot_0001" / "snapshot_0001.0.hdf5")).all_data()
    ids = ad["PartType1", "ParticleIDs"].d.astype(np.int64)
    assert len(ids) == 600
    pos = ad["PartType1", "Coordinates"].to("code_length").d[np.argsort(ids)]
    np.testing.assert_allclose(pos, mem["pos"][order], rtol=1e-12, atol=0)
    pynbody = pytest.importorskip("pynbody")
    s = pynbody.load(str(run / "snapshot_0001" / "snapshot_0001"))  # the set's base name
    assert len(s) == 600 and not s.is_partially_loaded()
    ids = np.asarray(s["iord"]).astype(np.int64)
    np.testing.assert_allclose(np.asarray(s["pos"])[np.argsort(ids)], mem["pos"][order], rtol=1e-12, atol=0)


def test_an_incomplete_set_is_refused(tmp_path):
    run = tmp_path / "run"
    mpirun(3, "run", str(run), cwd=tmp_path)
    folder = run / "snapshot_0001"
    (folder / "snapshot_0001.1.hdf5").unlink()
    with pytest.raises(gp.io.SnapshotError, match=r"incomplete set of 3 files.*snapshot_0001\.1\.hdf5"):
        gp.io.read(folder)
    shutil.copy(folder / "snapshot_0001.2.hdf5", folder / "snapshot_0001.1.hdf5")  # a wrong member
    with pytest.raises(gp.io.SnapshotError, match="add up to|duplicate|ids"):
        gp.io.read(folder)


def test_a_failed_member_leaves_no_set_and_every_rank_raises(tmp_path):
    r = mpirun(2, "write_fails", str(tmp_path / "run"), cwd=tmp_path)
    assert all("rank 1" in m and "No space left" in m for m in r["messages"])
    assert list(r["left"]) == []  # no set, no temporary folder


@pytest.mark.parametrize("what, text", [("ic", "initial conditions (digest) differs"),
                                        ("version", "gravpipe version differs"),
                                        ("eps", "eps differs: ranks 0,2 have 0.03125; ranks 1 have 0.015625")])
def test_ranks_that_disagree_are_refused_on_every_rank(tmp_path, what, text):
    r = mpirun(3, "mismatch", what, cwd=tmp_path)
    assert all(text in m and "ranks 1 have" in m for m in r["messages"]), r["messages"]
