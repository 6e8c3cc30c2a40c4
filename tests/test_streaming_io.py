"""Initial conditions and snapshots of any N, block by block (ic.*_blocks, io.stream).

References: the in-memory generators (same bits for one block and for the concatenation
of many), the analytic Plummer mass profile and the uniform distribution (Kolmogorov-
Smirnov), the centre of mass (zero to rounding), and read_snapshot of the whole file.
"""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest
from scipy import stats

import gravpipe as gp
from gravpipe import ic, io


def concat(blocks) -> gp.Particles:
    parts = list(blocks)
    return gp.Particles(np.concatenate([p.pos for p in parts]), np.concatenate([p.vel for p in parts]),
                        np.concatenate([p.mass for p in parts]), id=np.concatenate([p.id for p in parts]))


def test_one_block_is_the_in_memory_model_bit_for_bit():
    whole = ic.plummer(3000, seed=5)
    (only,) = list(ic.plummer_blocks(3000, seed=5))
    assert np.array_equal(only.pos, whole.pos) and np.array_equal(only.vel, whole.vel)
    (cube,) = list(ic.uniform_cube_blocks(3000, seed=5))
    assert np.array_equal(cube.pos, ic.uniform_cube(3000, seed=5).pos)


def test_in_memory_model_beyond_one_block_is_the_concatenation(monkeypatch):
    monkeypatch.setattr(ic, "IC_BLOCK", 1000)
    whole = ic.plummer(4500, seed=9)
    joined = concat(ic.plummer_blocks(4500, seed=9, block=1000))
    assert np.array_equal(whole.pos, joined.pos) and np.array_equal(whole.vel, joined.vel)
    assert np.array_equal(whole.id, np.arange(4500))
    cube = ic.uniform_cube(4500, seed=9)
    assert np.array_equal(cube.pos, concat(ic.uniform_cube_blocks(4500, seed=9, block=1000)).pos)


def plummer_mass_fraction(r: np.ndarray) -> np.ndarray:
    """Analytic M(<r)/M of the Plummer sphere, scale a = 3 pi / 16, cut at 99.9% of the mass."""
    x = r / ic.PLUMMER_SCALE_LENGTH
    return x**3 / (1 + x * x) ** 1.5 / ic.PLUMMER_MASS_CUTOFF


def test_blocks_sample_the_plummer_model_and_are_centred():
    n = 20000
    p = concat(ic.plummer_blocks(n, seed=3, block=3000))
    assert np.array_equal(np.sort(p.id), np.arange(n))
    assert abs(p.mass.sum() - 1.0) < 1e-12
    for x in (p.pos, p.vel):
        assert np.all(np.abs(p.mass @ x) < 1e-14)
    r = np.linalg.norm(p.pos, axis=1)
    assert stats.kstest(r, plummer_mass_fraction).pvalue > 1e-3
    # the blocks come from different streams: no block repeats another's draws
    first, second = p.pos[:3000], p.pos[3000:6000]
    assert not np.any(np.isin(first[:, 0], second[:, 0]))
    # virial equilibrium of the sample: 2K / |W| near 1 (W from the float64 pipeline)
    pipe = gp.Pipeline(precision="double", eps=0.0)
    pipe.set_j(p.pos, p.mass)
    w = -0.5 * float(p.mass @ pipe.forces(p.pos, exclude=np.arange(n))[1])
    k = 0.5 * float(p.mass @ np.sum(p.vel**2, 1))
    assert abs(2 * k / abs(w) - 1) < 0.05


def test_cube_blocks_are_uniform_inside_and_centred():
    n = 20000
    p = concat(ic.uniform_cube_blocks(n, seed=4, side=2.0, block=3000))
    assert np.all(np.abs(p.pos) <= 1.0 + 1e-15) and np.all(p.vel == 0)
    assert np.all(np.abs(p.pos.mean(axis=0)) < 1e-15)
    for k in range(3):
        assert stats.kstest(p.pos[:, k], stats.uniform(-1, 2).cdf).pvalue > 1e-3


def test_bad_block_arguments_name_the_problem():
    with pytest.raises(ValueError, match="block"):
        list(ic.plummer_blocks(100, block=0))
    with pytest.raises(ValueError, match="cannot be drawn block by block"):
        ic.model_blocks("uniform-sphere", 100)
    with pytest.raises(ValueError, match="least that works"):
        ic.check_ic_budget(1000, 5000)


def test_streamed_snapshot_reads_back_whole_and_in_blocks(tmp_path):
    n = 10000
    path = tmp_path / "big.h5"
    with io.streamed_snapshot(path, n, 0.5, parameters={"ic": "plummer"}) as out:
        for block in ic.plummer_blocks(n, seed=2, block=3000):
            out.write(block)
    ref = concat(ic.plummer_blocks(n, seed=2, block=3000))
    snap = io.read_snapshot(path)
    assert snap.time == 0.5 and snap.parameters["ic"] == "plummer"
    for a in ("pos", "vel", "mass", "id"):
        assert np.array_equal(getattr(snap.particles, a), getattr(ref, a))
    with h5py.File(path) as f:
        assert f["PartType1/Coordinates"].chunks is not None
    with io.open_blocks(path) as reader:
        assert reader.n == n and reader.time == 0.5
        blocks = list(reader.blocks(4096))
    assert [b.n for b in blocks] == [4096, 4096, 1808]
    assert np.array_equal(concat(blocks).pos, ref.pos)


def test_a_streamed_snapshot_cut_short_leaves_no_file(tmp_path):
    path = tmp_path / "short.h5"
    with pytest.raises(ValueError, match="2000 of the 3000"):
        with io.streamed_snapshot(path, 3000, 0.0) as out:
            out.write(ic.plummer(2000, seed=1))
    with pytest.raises(ValueError, match="goes past"):
        with io.streamed_snapshot(path, 1000, 0.0) as out:
            out.write(ic.plummer(2000, seed=1))
    assert list(tmp_path.iterdir()) == []


FULL_DISK_WRITE = """
import errno, os, resource, signal, sys
from gravpipe import ic, io
from gravpipe.particles import Particles
folder, limit, streamed = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "streamed"
p = ic.plummer(50000, seed=1)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG, as ENOSPC on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
path = os.path.join(folder, "checkpoint.h5")
try:
    if streamed:
        with io.streamed_snapshot(path, p.n, 0.0, integrator_state={"t": 0.0},
                                  per_particle_state={"acc": (3, "f8"), "index": (1, "i8")}) as out:
            for start in range(0, p.n, 4096):
                rows = slice(start, min(start + 4096, p.n))
                out.write(Particles(p.pos[rows], p.vel[rows], p.mass[rows], p.id[rows]),
                          state={"acc": p.pos[rows], "index": p.id[rows]})
    else:
        io.write_snapshot(path, p, 0.0, integrator_state={"t": 0.0, "acc": p.pos})
    print("NO ERROR")
except OSError as e:
    print("ERROR", e.errno == errno.EFBIG, e.filename == path, e)
"""


@pytest.mark.parametrize("streamed", ["streamed", "whole"])
@pytest.mark.parametrize("limit", [20_000, 600_000, 2_000_000, 4_000_000])
def test_a_full_disk_while_writing_is_an_error_naming_the_file_not_a_crash(tmp_path, limit, streamed):
    """HDF5 cannot close a chunked dataset whose flush failed (it crashed in H5D_close, SIGSEGV,
    after ~100 lines of h5py tracebacks): whichever write the disk refuses (a block, the
    flush, the close), the writer raises one OSError naming the file, and leaves nothing."""
    r = subprocess.run([sys.executable, "-c", FULL_DISK_WRITE, str(tmp_path), str(limit), streamed],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("ERROR True True") and "cannot write: File too large" in r.stdout, r.stdout
    assert r.stderr == ""
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoints_non_finite_state_is_refused_naming_file_and_field(tmp_path):
    """No integrator stores NaN or inf: read back, one became a time of NaN or "cannot convert
    float NaN to integer" far from the file (out-of-core resume)."""
    path = tmp_path / "checkpoint.h5"
    p = ic.plummer(100, seed=1)
    with io.streamed_snapshot(path, p.n, 0.0, integrator_state={"grid_origin": 0.0, "steps": 3},
                              per_particle_state={"acc": (3, "f8")}) as out:
        out.write(p, state={"acc": p.pos})
    with h5py.File(path, "r+") as f:
        f["Integrator/acc"][40] = np.inf
        f["Integrator"].attrs["grid_origin"] = np.nan
    with io.open_blocks(path) as reader:
        with pytest.raises(io.SnapshotError, match=r"checkpoint.h5: /Integrator/grid_origin: non-finite value nan"):
            reader.integrator_scalars
        assert reader.state_rows("acc", 0, 10).shape == (10, 3)
        with pytest.raises(io.SnapshotError, match=r"/Integrator/acc, entries 30..59: non-finite value inf at index 10"):
            reader.state_rows("acc", 10, 20)
    with pytest.raises(io.SnapshotError, match=r"checkpoint.h5: /Integrator/(acc|grid_origin): non-finite"):
        io.read_snapshot(path)


def test_reading_blocks_checks_the_datasets(tmp_path):
    path = tmp_path / "bad.h5"
    io.write_snapshot(path, ic.plummer(100, seed=1), 0.0)
    with h5py.File(path, "r+") as f:
        del f["PartType1/Velocities"]
        f["PartType1/Velocities"] = np.zeros((99, 3))
    with pytest.raises(io.SnapshotError, match="Velocities has shape"):
        with io.open_blocks(path):
            pass


def test_cli_ic_streams_the_same_model(tmp_path):
    out = tmp_path / "ic.h5"
    r = subprocess.run([sys.executable, "-m", "gravpipe.cli", "ic", "uniform-cube", "-n", "5000", "--seed", "8",
                        "--memory-budget", "1GiB", "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(io.read(out)[0].pos, ic.uniform_cube(5000, seed=8).pos)
    r = subprocess.run([sys.executable, "-m", "gravpipe.cli", "ic", "plummer", "-n", "5000", "--memory-budget", "1MiB",
                        "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and "least that works" in r.stderr and r.stderr.count("\n") == 1


def test_yt_and_pynbody_open_a_streamed_snapshot(tmp_path):
    """Chunked datasets are transparent to other readers: both see every particle."""
    path = tmp_path / "streamed.hdf5"
    with io.streamed_snapshot(path, 5000, 0.0) as out:
        for block in ic.plummer_blocks(5000, seed=6, block=2000):
            out.write(block)
    ref = io.read(path)[0]
    order = np.argsort(ref.id)
    yt = pytest.importorskip("yt")
    ad = yt.load(str(path)).all_data()
    ids = ad["PartType1", "ParticleIDs"].d.astype(np.int64)
    pos = ad["PartType1", "Coordinates"].to("code_length").d
    np.testing.assert_allclose(pos[np.argsort(ids)], ref.pos[order], rtol=1e-12, atol=0)
    pynbody = pytest.importorskip("pynbody")
    s = pynbody.load(str(path))
    ids = np.asarray(s["iord"]).astype(np.int64)
    np.testing.assert_allclose(np.asarray(s["pos"])[np.argsort(ids)], ref.pos[order], rtol=1e-12, atol=0)
