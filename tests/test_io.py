"""Snapshots: bitwise round trips, the GADGET-4 layout, foreign files, errors, atomic writes.

The layout checks spell the expected attributes out here (not from gravpipe.io.fields), so
a wrong row in the package's table fails a test instead of defining the answer.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time as time_module
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

import gravpipe
from gravpipe.io import (
    SnapshotError,
    atomic_open,
    atomic_path,
    describe,
    read,
    read_snapshot,
    write_snapshot,
)
from gravpipe.io import snapshot as snapshot_module
from gravpipe.io.fields import G_CGS
from gravpipe.particles import Particles

N = 257


def _bits(a: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
    """dtype, shape and raw bytes: equal triples mean bitwise-identical arrays."""
    a = np.asarray(a)
    return a.dtype.str, a.shape, a.tobytes()


@pytest.fixture
def particles() -> Particles:
    rng = np.random.default_rng(42)
    pos = rng.normal(size=(N, 3)) * 10.0 ** rng.integers(-8, 8, size=(N, 1))
    vel = rng.normal(size=(N, 3))
    vel[0] = [-0.0, 5e-324, np.nextafter(1.0, 2.0)]  # signed zero, subnormal, 1 + ulp
    mass = rng.random(N) / N
    mass[3] = 0.0  # massless tracer: allowed
    ids = rng.choice(2**40, size=N, replace=False).astype(np.int64)
    return Particles(pos, vel, mass, ids)


def _listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


# --------------------------------------------------------------------------------------
# round trip


def test_round_trip_is_bitwise(tmp_path, particles):
    rng = np.random.default_rng(7)
    t = 1.0 / 3.0 + 2.0**-50
    potential = -rng.random(N)
    acceleration = rng.normal(size=(N, 3))
    parameters = {
        "integrator": "hermite",
        "eps": 1.0 / 256.0,
        "G": 1.0,
        "eta": 0.02,
        "n_steps": 2**62 + 1,  # needs all 64 bits
        "resumed": True,
        "note": "päivä ✓",  # non-ASCII text survives
    }
    state = {
        "t_i": np.cumsum(rng.integers(1, 2**20, size=N)).astype(np.int64),
        "dt_i": 2.0 ** -rng.integers(3, 20, size=N).astype(np.float64),
        "acc": acceleration.copy(),
        "jerk": rng.normal(size=(N, 3)),
        "active": rng.random(N) < 0.5,
        "bins": rng.integers(0, 40, size=N).astype(np.int8),
        "clock_0d": np.array(123456789, dtype=np.int64),
        "empty": np.zeros((0, 3)),
        "tick": 2**61 + 3,
        "time_base": 2.0**-40,
        "ready": False,
        "scheme": "block-hermite-4",
    }
    out = write_snapshot(tmp_path / "ckpt.h5", particles, t, potential=potential,
                         acceleration=acceleration, parameters=parameters, integrator_state=state)
    assert out == tmp_path / "ckpt.h5"

    snap = read_snapshot(out)
    for name in ("pos", "vel", "mass", "id"):
        assert _bits(getattr(snap.particles, name)) == _bits(getattr(particles, name)), name
    assert snap.particles.id.dtype == np.int64
    assert snap.time == t and type(snap.time) is float
    assert _bits(snap.potential) == _bits(potential)
    assert _bits(snap.acceleration) == _bits(acceleration)
    for key, value in parameters.items():
        assert snap.parameters[key] == value and type(snap.parameters[key]) is type(value), key
    assert set(snap.integrator_state) == set(state)
    for key, value in state.items():
        got = snap.integrator_state[key]
        if isinstance(value, np.ndarray):
            assert isinstance(got, np.ndarray) and _bits(got) == _bits(value), key
        else:
            assert got == value and type(got) is type(value), key
    assert snap.path == out and snap.part_type == 1

    p2, t2 = read(out)
    assert _bits(p2.pos) == _bits(particles.pos) and t2 == t


def test_plain_snapshot_has_no_optional_parts(tmp_path, particles):
    path = write_snapshot(tmp_path / "s.h5", particles, 0.0)
    snap = read_snapshot(path)
    assert snap.potential is None and snap.acceleration is None and snap.integrator_state is None
    with h5py.File(path, "r") as f:
        assert set(f.keys()) == {"Header", "PartType1", "Parameters"}
        assert set(f["PartType1"].keys()) == {"Coordinates", "Velocities", "Masses", "ParticleIDs"}


def test_parameters_written_by_gravpipe(tmp_path, particles):
    path = write_snapshot(tmp_path / "s.h5", particles, 2.5, parameters={"eps": 0.01, "code_version": "9.9"})
    params = read_snapshot(path).parameters
    assert params["units"] == "N-body (Henon): G = M = 1"
    assert params["G"] == 1.0
    assert params["eps"] == 0.01
    assert params["code_version"] == gravpipe.__version__  # the installed version wins
    assert params["gravpipe_format_version"] == 1
    # a file's parameters can be handed back to the writer (resume, convert)
    write_snapshot(tmp_path / "again.h5", particles, 2.5, parameters=params)
    assert read_snapshot(tmp_path / "again.h5").parameters == params


def test_numpy_scalar_parameters_keep_their_value(tmp_path, particles):
    given = {"f32": np.float32(0.1), "u16": np.uint16(65535), "flag": np.bool_(True)}
    path = write_snapshot(tmp_path / "s.h5", particles, 0.0, parameters=given)
    params = read_snapshot(path).parameters
    assert params["f32"] == float(np.float32(0.1))
    assert params["u16"] == 65535 and params["flag"] is True
    with h5py.File(path, "r") as f:
        assert f["Parameters"].attrs["f32"].dtype == np.float32


# --------------------------------------------------------------------------------------
# layout, read back with raw h5py


def test_layout_matches_gadget4(tmp_path, particles):
    t = 3.75
    path = write_snapshot(tmp_path / "s.h5", particles, t, potential=np.zeros(N),
                          acceleration=np.ones((N, 3)), parameters={"integrator": "leapfrog", "eps": 0.05})
    expected_header = {
        "NumPart_ThisFile": (np.uint64, (6,)),
        "NumPart_Total": (np.uint64, (6,)),
        "NumPart_Total_HighWord": (np.uint32, (6,)),
        "MassTable": (np.float64, (6,)),
        "Time": (np.float64, ()),
        "Redshift": (np.float64, ()),
        "BoxSize": (np.float64, ()),
        "NumFilesPerSnapshot": (np.int32, ()),
    }
    counts = [0, N, 0, 0, 0, 0]
    with h5py.File(path, "r") as f:
        attrs = f["Header"].attrs
        assert set(attrs.keys()) == set(expected_header)  # no cosmology attributes
        for name, (dtype, shape) in expected_header.items():
            value = np.asarray(attrs[name])
            assert value.dtype == dtype and value.shape == shape, name
        assert attrs["NumPart_ThisFile"].tolist() == counts
        assert attrs["NumPart_Total"].tolist() == counts
        assert attrs["NumPart_Total_HighWord"].tolist() == [0] * 6
        assert attrs["MassTable"].tolist() == [0.0] * 6
        assert attrs["Time"] == t and attrs["Redshift"] == 0.0 and attrs["BoxSize"] == 0.0
        assert attrs["NumFilesPerSnapshot"] == 1

        g = f["PartType1"]
        expected_data = {
            "Coordinates": (np.float64, (N, 3), particles.pos),
            "Velocities": (np.float64, (N, 3), particles.vel),
            "Masses": (np.float64, (N,), particles.mass),
            "ParticleIDs": (np.uint64, (N,), particles.id.astype(np.uint64)),
            "Potential": (np.float64, (N,), np.zeros(N)),
            "Acceleration": (np.float64, (N, 3), np.ones((N, 3))),
        }
        assert set(g.keys()) == set(expected_data)
        for name, (dtype, shape, values) in expected_data.items():
            assert g[name].dtype == dtype and g[name].shape == shape, name
            assert np.array_equal(g[name][...], values), name

        params = f["Parameters"].attrs
        assert params["units"] == "N-body (Henon): G = M = 1"
        assert params["G"] == 1.0 and params["eps"] == 0.05 and params["integrator"] == "leapfrog"
        assert params["code_version"] == gravpipe.__version__
        version = params["gravpipe_format_version"]
        assert np.asarray(version).dtype.kind == "i" and version == 1
        # neutral cosmology for yt and pynbody, which read these from /Parameters
        for name, value in {"Omega0": 0.0, "OmegaLambda": 0.0, "HubbleParam": 1.0}.items():
            assert np.asarray(params[name]).dtype == np.float64 and params[name] == value, name
        assert "BoxSize" not in params  # pynbody would read a /Parameters BoxSize = 0 as a box


# --------------------------------------------------------------------------------------
# files written by other codes


def _write_foreign(path: Path, rng) -> dict:
    """A GADGET-2/3-style HDF5 file: two particle types, float32, uint32 ids, MassTable."""
    n0, n1 = 5, 7
    d = {
        "pos0": rng.normal(size=(n0, 3)).astype(np.float32),
        "vel0": rng.normal(size=(n0, 3)).astype(np.float32),
        "mass0": rng.random(n0).astype(np.float32) + 0.5,
        "id0": np.arange(100, 100 + n0, dtype=np.uint32),
        "pos1": rng.normal(size=(n1, 3)).astype(np.float32),
        "vel1": rng.normal(size=(n1, 3)).astype(np.float32),
        "id1": np.array([7, 3, 2**32 - 1, 0, 11, 12, 4000000000], dtype=np.uint32),
        "pot1": -rng.random(n1).astype(np.float32),
        "mass1": 0.25,
        "time": 0.125,
    }
    with h5py.File(path, "w") as f:
        h = f.create_group("Header")
        h.attrs["NumPart_ThisFile"] = np.array([n0, n1, 0, 0, 0, 0], dtype=np.uint32)
        h.attrs["NumPart_Total"] = np.array([n0, n1, 0, 0, 0, 0], dtype=np.uint32)
        h.attrs["NumPart_Total_HighWord"] = np.zeros(6, dtype=np.uint32)
        h.attrs["MassTable"] = np.array([0.0, d["mass1"], 0, 0, 0, 0])
        h.attrs["Time"] = d["time"]
        h.attrs["Redshift"] = 0.0
        h.attrs["BoxSize"] = 100.0
        h.attrs["NumFilesPerSnapshot"] = np.int32(1)
        h.attrs["Omega0"] = 0.3
        h.attrs["OmegaLambda"] = 0.7
        h.attrs["HubbleParam"] = 0.7
        h.attrs["Flag_Sfr"] = np.int32(0)
        g0 = f.create_group("PartType0")
        g0["Coordinates"] = d["pos0"]
        g0["Velocities"] = d["vel0"]
        g0["Masses"] = d["mass0"]
        g0["ParticleIDs"] = d["id0"]
        g0["InternalEnergy"] = np.ones(n0, dtype=np.float32)
        g1 = f.create_group("PartType1")
        g1["Coordinates"] = d["pos1"]
        g1["Velocities"] = d["vel1"]
        g1["ParticleIDs"] = d["id1"]
        g1["Potential"] = d["pot1"]
    return d


def test_reads_foreign_gadget_file(tmp_path):
    path = tmp_path / "snapshot_000.hdf5"
    d = _write_foreign(path, np.random.default_rng(3))

    snap = read_snapshot(path)  # PartType1 by default
    p = snap.particles
    assert p.pos.dtype == np.float64 and np.array_equal(p.pos, d["pos1"].astype(np.float64))
    assert np.array_equal(p.vel, d["vel1"].astype(np.float64))
    assert np.array_equal(p.mass, np.full(7, 0.25))  # from MassTable
    assert p.id.dtype == np.int64 and p.id.tolist() == d["id1"].astype(np.int64).tolist()
    assert snap.time == d["time"] and snap.parameters == {} and snap.integrator_state is None
    assert snap.potential.dtype == np.float64 and np.array_equal(snap.potential, d["pot1"].astype(np.float64))
    assert snap.acceleration is None

    gas = read_snapshot(path, part_type=0)
    assert gas.part_type == 0 and gas.particles.n == 5
    assert np.array_equal(gas.particles.mass, d["mass0"].astype(np.float64))
    assert gas.particles.id.tolist() == list(range(100, 105))

    with pytest.raises(SnapshotError, match="PartType2"):
        read_snapshot(path, part_type=2)

    text = describe(path)
    for word in ("PartType0", "PartType1", "InternalEnergy", "MassTable", "0.25", "not written by gravpipe"):
        assert word in text, word


@pytest.mark.parametrize("id_dtype", [np.int32, np.uint16, np.uint64, np.int64])
def test_any_integer_id_dtype(tmp_path, particles, id_dtype):
    path = write_snapshot(tmp_path / "s.h5", particles, 0.0)
    ids = np.arange(N, dtype=id_dtype)[::-1]
    with h5py.File(path, "r+") as f:
        del f["PartType1/ParticleIDs"]
        f["PartType1/ParticleIDs"] = ids
    assert read_snapshot(path).particles.id.tolist() == ids.astype(np.int64).tolist()


# --------------------------------------------------------------------------------------
# malformed files


def _good(tmp_path, particles) -> Path:
    return write_snapshot(tmp_path / "good.h5", particles, 1.0)


def _edit(path: Path, action) -> Path:
    with h5py.File(path, "r+") as f:
        action(f)
    return path


def _replace(name, value):
    def action(f):
        del f[name]
        f[name] = value
    return action


def _set_attr(group, name, value):
    def action(f):
        f[group].attrs[name] = value
    return action


MALFORMED = {
    "no Header": (lambda f: f.__delitem__("Header"), "no /Header"),
    "no PartType1": (lambda f: f.__delitem__("PartType1"), "no /PartType1"),
    "no Velocities": (lambda f: f.__delitem__("PartType1/Velocities"), "Velocities is missing"),
    "no Coordinates": (lambda f: f.__delitem__("PartType1/Coordinates"), "Coordinates is missing"),
    "no ParticleIDs": (lambda f: f.__delitem__("PartType1/ParticleIDs"), "ParticleIDs is missing"),
    "no Masses, no MassTable": (lambda f: f.__delitem__("PartType1/Masses"), "masses unknown"),
    "no NumPart_ThisFile": (lambda f: f["Header"].attrs.__delitem__("NumPart_ThisFile"), "NumPart_ThisFile"),
    "no Time": (lambda f: f["Header"].attrs.__delitem__("Time"), "Time is missing"),
    "Coordinates (N,2)": (_replace("PartType1/Coordinates", np.zeros((N, 2))), r"shape \(257, 2\)"),
    "Masses too short": (_replace("PartType1/Masses", np.ones(N - 1)), r"shape \(256,\)"),
    "Potential (N,3)": (lambda f: f.create_dataset("PartType1/Potential", data=np.ones((N, 3))),
                        "Potential has shape"),
    "float ids": (_replace("PartType1/ParticleIDs", np.arange(N, dtype=np.float64)), "ParticleIDs has dtype"),
    "string coords": (_replace("PartType1/Coordinates", np.full((N, 3), b"x")), "Coordinates has dtype"),
    "Coordinates is a group": (lambda f: (f.__delitem__("PartType1/Coordinates"),
                                          f.create_group("PartType1/Coordinates")), "not a dataset"),
    "NaN position": (_replace("PartType1/Coordinates", np.full((N, 3), np.nan)), "non-finite"),
    "duplicate ids": (_replace("PartType1/ParticleIDs", np.zeros(N, dtype=np.uint64)), "duplicate"),
    "id above int64": (_replace("PartType1/ParticleIDs", np.full(N, 2**64 - 1, dtype=np.uint64)), "int64"),
    "multi-file": (_set_attr("Header", "NumFilesPerSnapshot", np.int32(4)), "multi-file"),
    "count disagrees": (lambda f: [_set_attr("Header", name, np.array([0, N + 1, 0, 0, 0, 0], np.uint64))(f)
                                   for name in ("NumPart_ThisFile", "NumPart_Total")], r"expected \(258, 3\)"),
    "total disagrees": (_set_attr("Header", "NumPart_Total", np.array([0, 2 * N, 0, 0, 0, 0], np.uint64)),
                        "NumPart_Total"),
    "Integrator subgroup": (lambda f: f.create_group("Integrator/nested"), "not a dataset"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_gives_clear_error(tmp_path, particles, case):
    action, message = MALFORMED[case]
    path = _edit(_good(tmp_path, particles), action)
    with pytest.raises(SnapshotError, match=message) as info:
        read_snapshot(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_masses_from_mass_table_when_dataset_absent(tmp_path, particles):
    def action(f):
        del f["PartType1/Masses"]
        f["Header"].attrs["MassTable"] = np.array([0, 0.5, 0, 0, 0, 0], dtype=np.float64)
    snap = read_snapshot(_edit(_good(tmp_path, particles), action))
    assert np.array_equal(snap.particles.mass, np.full(N, 0.5))


@pytest.mark.parametrize("content,message", [
    (b"", "not an HDF5 file"),
    (b"# positions\n0 0 0\n1 1 1\n", "not an HDF5 file"),
])
def test_not_hdf5(tmp_path, content, message):
    path = tmp_path / "bad.h5"
    path.write_bytes(content)
    for reader in (read_snapshot, read, describe):
        with pytest.raises(SnapshotError, match=message) as info:
            reader(path)
        assert str(path) in str(info.value)


def test_truncated_file(tmp_path, particles):
    path = _good(tmp_path, particles)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotError) as info:
        read_snapshot(path)
    assert str(path) in str(info.value)


def test_missing_file_and_directory(tmp_path):
    missing = tmp_path / "nope.h5"
    for reader in (read_snapshot, read, describe):
        with pytest.raises(FileNotFoundError, match="nope.h5"):
            reader(missing)
    with pytest.raises(SnapshotError, match="directory"):
        read_snapshot(tmp_path)


def test_bad_part_type_argument(tmp_path, particles):
    path = _good(tmp_path, particles)
    for bad in (-1, 1.0, True, "1"):
        with pytest.raises(ValueError, match="part_type"):
            read_snapshot(path, part_type=bad)
    with pytest.raises(SnapshotError, match="out of range"):
        read_snapshot(path, part_type=6)


# --------------------------------------------------------------------------------------
# bad arguments to the writer: clear error, nothing written


BAD_WRITES = {
    "negative id": (dict(), "index 5"),
    "nan time": (dict(time=float("nan")), "time"),
    "text time": (dict(time="soon"), "time"),
    "potential shape": (dict(potential=np.zeros(N + 1)), "potential"),
    "acceleration shape": (dict(acceleration=np.zeros((N, 2))), "acceleration"),
    "acceleration inf": (dict(acceleration=np.full((N, 3), np.inf)), "acceleration"),
    "header name": (dict(parameters={"Time": 1.0}), "Header"),
    "list parameter": (dict(parameters={"radii": [1, 2]}), "radii"),
    "None parameter": (dict(parameters={"seed": None}), "seed"),
    "huge int": (dict(parameters={"n": 2**64}), "int64"),
    "G zero": (dict(parameters={"G": 0.0}), "G"),
    "eps negative": (dict(parameters={"eps": -1e-3}), "eps"),
    "eps text": (dict(parameters={"eps": "small"}), "eps"),
    "slash key": (dict(parameters={"a/b": 1}), "'a/b'"),
    "cosmological OmegaLambda": (dict(parameters={"OmegaLambda": 0.7}), "OmegaLambda"),
    "HubbleParam not 1": (dict(parameters={"HubbleParam": 0.7}), "HubbleParam"),
    "Omega0 text": (dict(parameters={"Omega0": "0"}), "Omega0"),
    "state list": (dict(integrator_state={"t_i": [0.0, 1.0]}), "numpy array"),
    "state object array": (dict(integrator_state={"x": np.array([None, 1])}), "dtype"),
    "state str array": (dict(integrator_state={"x": np.array(["a"])}), "dtype"),
    "state not mapping": (dict(integrator_state=[("t", 1)]), "mapping"),
}


@pytest.mark.parametrize("case", sorted(BAD_WRITES))
def test_bad_write_arguments(tmp_path, particles, case):
    kwargs, message = BAD_WRITES[case]
    kwargs = dict(kwargs)
    t = kwargs.pop("time", 0.0)
    p = particles
    if case == "negative id":
        ids = p.id.copy()
        ids[5] = -3
        p = Particles(p.pos, p.vel, p.mass, ids)
    with pytest.raises(ValueError, match=message):
        write_snapshot(tmp_path / "out.h5", p, t, **kwargs)
    assert _listing(tmp_path) == []


def test_write_needs_particles(tmp_path):
    with pytest.raises(TypeError, match="Particles"):
        write_snapshot(tmp_path / "x.h5", np.zeros((3, 3)), 0.0)


# --------------------------------------------------------------------------------------
# atomic writes


class Crash(RuntimeError):
    pass


def _crash_during_write(monkeypatch):
    """Make write_snapshot fail after the particle data are in the temporary file."""
    def boom(group, state):
        group.attrs["half"] = 1
        raise Crash("disk on fire")
    monkeypatch.setattr(snapshot_module, "_write_integrator", boom)


def test_crash_mid_write_leaves_nothing(tmp_path, particles, monkeypatch):
    _crash_during_write(monkeypatch)
    with pytest.raises(Crash):
        write_snapshot(tmp_path / "ckpt.h5", particles, 1.0, integrator_state={"tick": 1})
    assert _listing(tmp_path) == []


def test_failed_rewrite_keeps_old_file(tmp_path, particles):
    path = write_snapshot(tmp_path / "ckpt.h5", particles, 1.0)
    before = path.read_bytes()
    with pytest.MonkeyPatch.context() as mp:
        _crash_during_write(mp)
        with pytest.raises(Crash):
            write_snapshot(path, particles, 2.0, integrator_state={"tick": 2})
    assert path.read_bytes() == before
    assert read_snapshot(path).time == 1.0
    assert _listing(tmp_path) == ["ckpt.h5"]


def test_rewrite_replaces_old_file(tmp_path, particles):
    path = write_snapshot(tmp_path / "s.h5", particles, 1.0)
    write_snapshot(path, particles, 2.0)
    assert read_snapshot(path).time == 2.0
    assert _listing(tmp_path) == ["s.h5"]


def test_atomic_open_and_path(tmp_path):
    target = tmp_path / "log.txt"
    with atomic_open(target) as fh:
        fh.write("first\n")
        assert not target.exists()  # invisible until complete
    assert target.read_text() == "first\n"

    with pytest.raises(Crash):
        with atomic_open(target, "wb") as fh:
            fh.write(b"second, partial")
            raise Crash
    assert target.read_text() == "first\n"
    assert _listing(tmp_path) == ["log.txt"]

    with pytest.raises(FileNotFoundError, match="created no file"):
        with atomic_path(tmp_path / "never.bin"):
            pass
    with pytest.raises(ValueError, match="mode"):
        with atomic_open(target, "a"):
            pass
    with pytest.raises(KeyboardInterrupt):  # interrupts clean up too
        with atomic_path(tmp_path / "x.npy") as tmp:
            with tmp.open("wb") as fh:
                np.save(fh, np.zeros(3))
            raise KeyboardInterrupt
    assert _listing(tmp_path) == ["log.txt"]


def _assert_names_path_not_tmp(exc: OSError, path: Path, *words: str) -> None:
    text = str(exc)
    assert exc.filename == str(path), text
    assert ".tmp" not in text and "HDF5" not in text and "synchronously" not in text, text
    for word in words:
        assert word in text, text


def test_write_into_missing_folder_names_path_and_reason(tmp_path, particles):
    path = tmp_path / "nodir" / "x.h5"
    with pytest.raises(FileNotFoundError) as info:
        write_snapshot(path, particles, 0.0)
    assert info.value.errno == errno.ENOENT
    _assert_names_path_not_tmp(info.value, path, "does not exist", str(path.parent))
    assert _listing(tmp_path) == []


def test_write_below_a_file_names_path_and_reason(tmp_path, particles):
    (tmp_path / "plain").write_text("")
    path = tmp_path / "plain" / "x.h5"
    with pytest.raises(NotADirectoryError) as info:
        write_snapshot(path, particles, 0.0)
    _assert_names_path_not_tmp(info.value, path, "not a folder")


def test_write_onto_a_folder_fails_before_writing(tmp_path, particles, monkeypatch):
    (tmp_path / "x.h5").mkdir()
    monkeypatch.setattr(snapshot_module, "_write_header", lambda *a: pytest.fail("wrote data"))
    with pytest.raises(IsADirectoryError) as info:
        write_snapshot(tmp_path / "x.h5", particles, 0.0)
    _assert_names_path_not_tmp(info.value, tmp_path / "x.h5", "is a folder")
    assert _listing(tmp_path) == ["x.h5"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_folder_and_unreadable_file(tmp_path, particles):
    folder = tmp_path / "ro"
    folder.mkdir()
    readable = write_snapshot(folder / "ok.h5", particles, 0.0)
    folder.chmod(0o555)
    readable.chmod(0o000)
    try:
        with pytest.raises(PermissionError) as info:
            write_snapshot(folder / "x.h5", particles, 0.0)
        _assert_names_path_not_tmp(info.value, folder / "x.h5", "permission denied", str(folder))
        with pytest.raises(PermissionError, match="ok.h5"):
            read_snapshot(readable)
    finally:
        folder.chmod(0o755)
        readable.chmod(0o644)


def test_permission_denied_names_path(tmp_path, monkeypatch):
    # the OS's answer as a non-root user sees it (root, which runs some CI, ignores modes)
    def denied(path, flags, mode=0o777):
        raise PermissionError(errno.EACCES, "Permission denied", path)
    monkeypatch.setattr(os, "open", denied)
    target = tmp_path / "log.txt"
    with pytest.raises(PermissionError) as info:
        with atomic_open(target):
            pytest.fail("the body ran")
    _assert_names_path_not_tmp(info.value, target, "permission denied", str(tmp_path))


def test_disk_full_while_writing_names_path(tmp_path):
    target = tmp_path / "big.bin"
    with pytest.raises(OSError) as info:
        with atomic_open(target, "wb") as fh:
            fh.write(b"part")
            raise OSError(errno.ENOSPC, "No space left on device")  # as write() reports it
    assert info.value.errno == errno.ENOSPC
    _assert_names_path_not_tmp(info.value, target, "disk full")
    assert _listing(tmp_path) == []


def test_other_files_errors_pass_unchanged(tmp_path):
    # an error about another file that the body touches is not a write error of ours
    with pytest.raises(FileNotFoundError) as info:
        with atomic_open(tmp_path / "copy.txt") as fh:
            fh.write(open(tmp_path / "source.txt").read())
    assert info.value.filename == str(tmp_path / "source.txt")
    assert _listing(tmp_path) == []


_KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    from gravpipe.io import snapshot
    from gravpipe.particles import Particles

    def stall(group, state):
        group.create_dataset("partial", data=np.zeros(1000))
        group.file.flush()
        Path(sys.argv[2]).write_text("writing")
        time.sleep(60)

    snapshot._write_integrator = stall
    p = Particles(np.eye(3), np.zeros((3, 3)), np.ones(3))
    snapshot.write_snapshot(sys.argv[1], p, 2.0, integrator_state={"tick": 2})
""")


def test_killed_writer_never_leaves_partial_file(tmp_path, particles):
    path = write_snapshot(tmp_path / "ckpt.h5", particles, 1.0)
    before = path.read_bytes()
    flag = tmp_path.parent / f"{tmp_path.name}.flag"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(path), str(flag)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time_module.monotonic() + 60
        while not flag.exists():
            if proc.poll() is not None:
                pytest.fail(f"writer exited early: {proc.stdout.read().decode()}")
            if time_module.monotonic() > deadline:
                pytest.fail("writer never reached the middle of its write")
            time_module.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert path.read_bytes() == before  # the final name still holds the old, complete file
    leftovers = [n for n in _listing(tmp_path) if n != "ckpt.h5"]
    assert leftovers, "the writer was killed before it created its temporary file"
    assert all(n.startswith(".ckpt.h5.tmp-") for n in leftovers)  # only the hidden temporary
    assert read_snapshot(path).time == 1.0


# --------------------------------------------------------------------------------------
# describe


def test_describe(tmp_path, particles):
    path = write_snapshot(tmp_path / "ckpt.h5", particles, 0.5, potential=np.zeros(N),
                          parameters={"integrator": "hermite", "eps": 0.004},
                          integrator_state={"t_i": np.zeros(N, dtype=np.int64), "tick": 99})
    text = describe(path)
    for word in (str(path), f"N = {N}", "time = 0.5", "checkpoint", "isolated",
                 "Coordinates", "float64", f"({N}, 3)", "N-body length", "ParticleIDs", "uint64",
                 "Potential", "integrator", "'hermite'", "eps", "0.004", "gravpipe_format_version",
                 "t_i", "int64", "tick = 99"):
        assert word in text, word
    assert "Acceleration" not in text


# --------------------------------------------------------------------------------------
# other tools open gravpipe snapshots


def _sorted_by_id(ids, *arrays):
    order = np.argsort(np.asarray(ids))
    return [np.asarray(a)[order] for a in (ids, *arrays)]


def test_yt_loads_snapshot(tmp_path, particles):
    yt = pytest.importorskip("yt")
    path = write_snapshot(tmp_path / "snap.hdf5", particles, 1.5)
    lo, hi = particles.pos.min() - 1.0, particles.pos.max() + 1.0
    for bbox in ([[lo, hi]] * 3, None):  # an isolated system: yt sizes the domain itself
        ds = yt.load(str(path), bounding_box=bbox)
        assert not ds.cosmological_simulation  # OmegaLambda = 0 in /Parameters
        assert float(ds.current_time.to("code_time")) == 1.5  # Time, not a scale factor
        assert ds.current_redshift == 0.0
        ad = ds.all_data()
        ids, pos, vel, mass = _sorted_by_id(
            ad["PartType1", "ParticleIDs"].d,
            ad["PartType1", "Coordinates"].to("code_length").d,
            ad["PartType1", "Velocities"].to("code_velocity").d,
            ad["PartType1", "Masses"].to("code_mass").d,
        )
        ref_ids, ref_pos, ref_vel, ref_mass = _sorted_by_id(particles.id, particles.pos, particles.vel,
                                                            particles.mass)
        assert np.array_equal(ids.astype(np.int64), ref_ids)
        np.testing.assert_allclose(pos, ref_pos, rtol=1e-12, atol=0)
        np.testing.assert_allclose(vel, ref_vel, rtol=1e-12, atol=0)
        np.testing.assert_allclose(mass, ref_mass, rtol=1e-12, atol=0)


PC_CM, MSUN_G = 3.0856775814913673e18, 1.988409870698051e33


@pytest.mark.parametrize("scale", [None, (PC_CM, MSUN_G)])
def test_yt_and_pynbody_show_the_files_time_and_mass(tmp_path, particles, scale):
    """Both opened our snapshots with GADGET's default units (pynbody: 9.78 Gyr for t = 1 and
    t = 10, a cosmological age; yt: a total mass of 2e43 g). The files carry GADGET-4's unit
    attributes (N-body scale, or the physical one given) and Time_GYR: pynbody reads them,
    yt takes them as unit_base (its Gadget frontend reads none from a file)."""
    yt = pytest.importorskip("yt")
    pynbody = pytest.importorskip("pynbody")
    from gravpipe import io

    params = {} if scale is None else {"UnitLength_in_cm": scale[0], "UnitMass_in_g": scale[1]}
    length, mass = (1.0, 1 / G_CGS) if scale is None else scale
    unit_time = (length ** 3 / (G_CGS * mass)) ** 0.5  # G = 1 in these units
    for t in (1.0, 10.0):
        path = write_snapshot(tmp_path / f"snap_{t:g}.hdf5", particles, t, parameters=params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = pynbody.load(str(path))
            assert float(s.properties["time"].in_units("s")) == pytest.approx(t * unit_time, rel=1e-12)
            assert float(s["mass"].sum().in_units("g")) == pytest.approx(particles.total_mass * mass, rel=1e-12)
            ds = yt.load(str(path), unit_base=io.unit_base(path))
            assert float(ds.current_time.to("s")) == pytest.approx(t * unit_time, rel=1e-12)
            total = ds.all_data()["PartType1", "Masses"].sum()
            assert float(total.to("g")) == pytest.approx(particles.total_mass * mass, rel=1e-12)
            assert float(ds.length_unit.to("cm")) == pytest.approx(length, rel=1e-12)
    if scale is not None:  # a Plummer sphere of 1 Msun in 1 pc: the crossing time is ~15 Myr
        assert unit_time / 3.15576e13 == pytest.approx(14.9, rel=0.01)


def test_pynbody_loads_snapshot(tmp_path, particles):
    pynbody = pytest.importorskip("pynbody")
    path = write_snapshot(tmp_path / "snap.hdf5", particles, 1.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = pynbody.load(str(path))
        ids, pos, vel, mass = _sorted_by_id(
            np.asarray(s["iord"]), np.asarray(s["pos"]), np.asarray(s["vel"]), np.asarray(s["mass"]))
        # pynbody reads the cosmology from /Parameters: the neutral values, not its defaults
        props = s.properties
        assert (props["h"], props["a"], props["omegaM0"], props["omegaL0"]) == (1.0, 1.0, 0.0, 0.0)
        assert "boxsize" not in props  # isolated: no periodic box
        # the units of the file's GADGET-4 attributes (N-body scale: 1 cm, 1/G_cgs g), with
        # factors of a and h that change no number at a = h = 1
        pos_plain = s["pos"].in_units("cm")
        mass_plain = s["mass"].in_units("g") * G_CGS
    assert not [w for w in caught if "Assuming default value" in str(w.message)]
    assert len(s) == N
    ref_ids, ref_pos, ref_vel, ref_mass = _sorted_by_id(particles.id, particles.pos, particles.vel, particles.mass)
    assert np.array_equal(ids.astype(np.int64), ref_ids)
    np.testing.assert_allclose(pos, ref_pos, rtol=1e-12, atol=0)
    np.testing.assert_allclose(vel, ref_vel, rtol=1e-12, atol=0)
    np.testing.assert_allclose(mass, ref_mass, rtol=1e-12, atol=0)
    order = np.argsort(np.asarray(s["iord"]))
    np.testing.assert_allclose(np.asarray(pos_plain)[order], ref_pos, rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.asarray(mass_plain)[order], ref_mass, rtol=1e-12, atol=0)
