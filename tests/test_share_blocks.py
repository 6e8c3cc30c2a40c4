"""A rank's share written and drawn block by block, never whole in memory (the out-of-core
runs over MPI ranks): ``io.write_share_blocks`` and ``ic.model_share_blocks``.

References: ``io.write_set``, which writes a member from the whole particle set with
``snapshot._write_particle_group`` (datasets made from their data), for the file layout;
``io.write_share`` of the concatenated blocks for the files block-wise writing must give
(every group, dataset and attribute compared with h5py: names, dtypes, shapes, storage
settings, values); the whole model (``ic.plummer``, ``ic.uniform_cube``, which join their
own blocks beyond ``IC_BLOCK``) for the particles of a share.

Run by the tests, one MPI case writes every set:
``mpiexec -n 2 python -m mpi4py tests/test_share_blocks.py OUT``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from mpi_launch import MPI_ENV, mpiexec

import gravpipe as gp
from gravpipe import ic

# --------------------------------------------------------------------------------------
# ic.model_share_blocks

N_MODEL, SEED = 300, 11
SMALL_BLOCK = 64  # IC_BLOCK in these tests: a 300-particle model of five blocks, drawn fast


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # model_blocks, plummer and uniform_cube read IC_BLOCK when called
    monkeypatch.setattr(ic, "IC_BLOCK", SMALL_BLOCK)


def _whole_model(model: str, n: int, seed: int) -> gp.Particles:
    return gp.ic.plummer(n, seed) if model == "plummer" else gp.ic.uniform_cube(n, seed)


def _check_pieces(pieces: list[dict[str, np.ndarray]], whole: gp.Particles, begin: int, end: int,
                  most: int, model_block: int) -> None:
    assert all(1 <= len(p["mass"]) <= most for p in pieces)
    for p in pieces:  # a piece lies inside one of the model's blocks
        assert p["id"][0] // model_block == p["id"][-1] // model_block
        assert p["pos"].shape == (len(p["mass"]), 3) and p["id"].dtype == np.int64
    for key, ref in (("pos", whole.pos), ("vel", whole.vel), ("mass", whole.mass), ("id", whole.id)):
        got = np.concatenate([p[key] for p in pieces]) if pieces else ref[:0]
        assert got.dtype == ref.dtype and np.array_equal(got, ref[begin:end]), key


SHARES = [(0, 300), (0, 0), (70, 70), (300, 300), (10, 60), (50, 200), (128, 192), (199, 300)]


@pytest.mark.parametrize("model", ["plummer", "uniform-cube"])
@pytest.mark.parametrize("begin, end", SHARES)
def test_model_share_blocks_are_the_models_particles_in_pieces(small_blocks, model, begin, end):
    whole = _whole_model(model, N_MODEL, SEED)
    for block, most in ((10, 10), (1000, SMALL_BLOCK)):
        pieces = list(ic.model_share_blocks(model, N_MODEL, SEED, begin, end, block=block))
        _check_pieces(pieces, whole, begin, end, most, SMALL_BLOCK)
    share = ic.model_share(model, N_MODEL, SEED, begin, end)  # the pieces joined
    _check_pieces([share] if end > begin else [], whole, begin, end, end - begin, N_MODEL)
    assert share["pos"].shape == (end - begin, 3) and share["id"].dtype == np.int64
    assert share["pos"].flags.writeable  # joined: the caller's own arrays


@pytest.mark.parametrize("model", ["plummer", "uniform-cube"])
def test_model_share_blocks_of_a_model_of_one_block(model):
    whole = _whole_model(model, 500, SEED)
    for begin, end in ((0, 0), (100, 400), (0, 500)):
        pieces = list(ic.model_share_blocks(model, 500, SEED, begin, end, block=128))
        _check_pieces(pieces, whole, begin, end, 128, ic.IC_BLOCK)
        assert all(not a.flags.writeable for p in pieces for a in p.values())


def test_model_share_blocks_refuses_bad_arguments():
    with pytest.raises(ValueError, match="needs a seed"):
        ic.model_share_blocks("plummer", 100, None, 0, 10)  # when called, before any piece
    with pytest.raises(ValueError, match=r"share \[20, 10\) outside"):
        ic.model_share_blocks("plummer", 100, 1, 20, 10)
    with pytest.raises(ValueError, match="block: expected an integer >= 1"):
        ic.model_share_blocks("plummer", 100, 1, 0, 10, block=0)
    with pytest.raises(ValueError, match="cannot be drawn block by block"):
        ic.model_share_blocks("uniform-sphere", 100, 1, 0, 10)
    # a rank with an empty share checks the model's n as the others do
    with pytest.raises(ValueError, match="n: must be >= 2"):
        list(ic.model_share_blocks("plummer", 1, 1, 0, 0))


# --------------------------------------------------------------------------------------
# io.write_share_blocks, over two MPI ranks

N_SET, TIME = 13, 0.375
PARAMS = {"eps": 1 / 32, "integrator": "leapfrog"}
# the whole run's state: scalars, a small array, a history column
WHOLE_STATE = {"step": 24, "dt": 1 / 64, "rng": np.arange(4, dtype=np.uint64),
               "history_time": np.array([0.0, 0.125, 0.25, 0.375])}
ERRORS = {"short": "the blocks hold 3 particles, not the n = 7",
          "long": "block 1: its 5 particles after 3 go past the n = 7",
          "no_vel": r"block 0: fields ['vel'] missing, [] not announced",
          "no_state": r"block 0: fields ['acc'] missing, [] not announced",
          "wide": "block 0 (particles 0..6 of the share): 'acc' has shape (7, 2), expected (7, 3)"}


def _model() -> tuple[gp.Particles, np.ndarray, np.ndarray]:
    """The set's particles and per-particle state: acc (N, 3) float64, index (N,) int64."""
    p = gp.ic.plummer(N_SET, seed=7)
    return p, np.sin(np.arange(3 * N_SET, dtype=np.float64)).reshape(N_SET, 3), np.arange(N_SET, dtype=np.int64)[::-1]


def _blocks(pos, vel, mass, ids, acc, index, sizes: list[int]) -> Iterator[dict[str, np.ndarray]]:
    """The rows in blocks of ``sizes`` (the last takes the rest)."""
    edges = np.concatenate(([0], np.cumsum(sizes), [len(mass)])).astype(int)
    for s, e in zip(edges[:-1], edges[1:]):
        yield {"pos": pos[s:e], "vel": vel[s:e], "mass": mass[s:e], "id": ids[s:e], "acc": acc[s:e],
               "index": index[s:e]}


def _mpi_case(out: Path) -> None:
    """Under mpiexec -n 2: the sets the tests read (in ``out``) and the errors (out/errors.json)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    p, acc, index = _model()
    # "split": rank r holds file_share's slice, as write_set splits the whole set (the reference)
    b, e = gp.io.file_share(N_SET, rank, comm.Get_size())
    mine = (p.pos[b:e], p.vel[b:e], p.mass[b:e], p.id[b:e], acc[b:e], index[b:e])
    gp.io.write_set(comm, out / "ref", p, TIME, parameters=PARAMS,
                    integrator_state={**WHOLE_STATE, "acc": acc.reshape(-1), "index": index})
    gp.io.write_share(comm, out / "share", *mine[:4], TIME, parameters=PARAMS, integrator_state=WHOLE_STATE,
                      per_particle_state={"acc": mine[4], "index": mine[5]})
    gp.io.write_share_blocks(comm, out / "blocks", e - b, lambda: _blocks(*mine, [2, 0, 3]), TIME,
                             parameters=PARAMS, integrator_state=WHOLE_STATE,
                             per_particle_state_widths={"acc": 3, "index": 1})
    # "lopsided": rank 0 holds all, rank 1 none (write_share with empty arrays; no blocks at
    # all, so the dtypes come from the announcement: index's given, acc's float64)
    everything = (p.pos, p.vel, p.mass, p.id, acc, index)
    held = everything if rank == 0 else tuple(a[:0] for a in everything)
    gp.io.write_share(comm, out / "share_lopsided", *held[:4], TIME, parameters=PARAMS,
                      integrator_state=WHOLE_STATE, per_particle_state={"acc": held[4], "index": held[5]})
    gp.io.write_share_blocks(comm, out / "blocks_lopsided", len(held[2]),
                             lambda: _blocks(*held, [5, 5]) if rank == 0 else iter(()), TIME,
                             parameters=PARAMS, integrator_state=WHOLE_STATE,
                             per_particle_state_widths={"acc": 3, "index": (1, np.int64)})
    # errors: the rank named in ERRORS' case (1, or 0 for no_vel) gives bad blocks of its 7
    p7 = (p.pos[:7], p.vel[:7], p.mass[:7], p.id[:7], acc[:7], index[:7])

    def bad(case: str) -> Iterator[dict[str, Any]]:
        if case == "short":
            return _blocks(*(a[:3] for a in p7), [])
        if case == "long":
            return _blocks(*(np.concatenate([a, a[:1]]) for a in p7), [3])
        block = next(_blocks(*p7, []))
        if case == "no_vel":
            del block["vel"]
        elif case == "no_state":
            del block["acc"]
        else:
            block["acc"] = block["acc"][:, :2]
        return iter((block,))

    errors = {}
    for case in ERRORS:
        failing = 0 if case == "no_vel" else 1
        blocks = (lambda c=case: bad(c)) if rank == failing else (lambda: _blocks(*p7, [4]))
        try:
            gp.io.write_share_blocks(comm, out / f"error_{case}", 7, blocks, TIME,
                                     per_particle_state_widths={"acc": 3, "index": 1})
            errors[case] = ["", "written"]
        except Exception as exc:  # noqa: BLE001 - the test checks its kind and text
            errors[case] = [type(exc).__name__, str(exc)]
    gathered = comm.gather(errors, root=0)
    if rank == 0:
        (out / "errors.json").write_text(json.dumps(gathered))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = mpiexec()
    out = tmp_path_factory.mktemp("share_blocks")
    r = subprocess.run([exe, "-n", "2", sys.executable, "-m", "mpi4py", __file__, str(out)],
                       env=MPI_ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def _contents(path: Path) -> dict[str, Any]:
    """Everything in an HDF5 file, by object name: groups and datasets with their
    attributes (in their order, with dtypes), datasets' storage settings and values."""
    def attrs(obj: Any) -> list[tuple[str, str, Any]]:
        out = []
        for key in obj.attrs:
            value = obj.attrs[key]
            dtype = str(value.dtype) if isinstance(value, np.ndarray | np.generic) else type(value).__name__
            out.append((key, dtype, value.tolist() if isinstance(value, np.ndarray | np.generic) else value))
        return out

    found: dict[str, Any] = {}
    with h5py.File(path, "r") as f:
        found["/"] = ("group", attrs(f), list(f))

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                plist = obj.id.get_create_plist()
                found[name] = ("dataset", str(obj.dtype), obj.shape, obj.chunks, obj.compression, obj.maxshape,
                               obj.fillvalue, plist.get_layout(), plist.get_alloc_time(), plist.get_fill_time(),
                               obj[...].tobytes(), attrs(obj))
            else:
                found[name] = ("group", attrs(obj), list(obj))

        f.visititems(visit)
    return found


def _assert_same_files(a: Path, b: Path) -> None:
    ca, cb = _contents(a), _contents(b)
    assert list(ca) == list(cb), f"{a} and {b} hold different objects"
    for name in ca:
        assert ca[name] == cb[name], f"{name} differs between {a} and {b}"


def _members(folder: Path) -> list[Path]:
    return [folder / f"{folder.name}.{k}.hdf5" for k in range(2)]


@pytest.mark.parametrize("blocks, reference", [("blocks", "share"), ("share", "ref"),
                                               ("blocks_lopsided", "share_lopsided")])
def test_a_set_written_block_wise_is_the_set_write_share_writes(written, blocks, reference):
    for mine, ref in zip(_members(written / blocks), _members(written / reference), strict=True):
        _assert_same_files(mine, ref)
    with h5py.File(_members(written / "blocks_lopsided")[1]) as f:  # the empty member is complete
        assert f["PartType1/Coordinates"].shape == (0, 3) and f["Integrator/acc"].attrs["per_particle"] == 3
        assert f["Integrator/index"].dtype == np.int64 and "step" not in f["Integrator"].attrs


@pytest.mark.parametrize("folder", ["blocks", "blocks_lopsided"])
def test_read_share_reads_a_set_written_block_wise(written, folder):
    p, acc, index = _model()
    counts = [gp.io.file_share(N_SET, r, 2) for r in range(2)] if folder == "blocks" else [(0, N_SET), (N_SET, N_SET)]
    for rank, (b, e) in enumerate(counts):
        share = gp.io.read_share(written / folder, rank, 2)
        assert share.whole_member and share.n_total == N_SET and share.time == TIME
        for got, ref in ((share.pos, p.pos), (share.vel, p.vel), (share.mass, p.mass), (share.ids, p.id),
                         (share.state["acc"], acc), (share.state["index"], index)):
            assert np.array_equal(got, ref[b:e])
        assert share.state["step"] == 24 and np.array_equal(share.state["rng"], WHOLE_STATE["rng"])
        assert share.parameters["eps"] == 1 / 32
    snap = gp.io.read_snapshot(written / folder)
    assert np.array_equal(snap.particles.pos, p.pos) and np.array_equal(snap.integrator_state["acc"], acc.reshape(-1))


@pytest.mark.parametrize("case", list(ERRORS))
def test_blocks_that_do_not_match_the_share_are_refused_on_every_rank(written, case):
    failing = 0 if case == "no_vel" else 1
    for kind, text in (rank_errors[case] for rank_errors in json.loads((written / "errors.json").read_text())):
        assert kind == "ValueError" and f"rank {failing}: {ERRORS[case]}" in text, text
        assert "the set was not written" in text
    # no set, no temporary folder
    assert not [p.name for p in written.iterdir() if f"error_{case}" in p.name]


if __name__ == "__main__":
    _mpi_case(Path(sys.argv[1]))
