"""The treecode over MPI ranks (locally essential trees; gravpipe.parallel.essential_forces)
against float64 direct sums and the serial tree.

- Export + graft in one process: a rank's tree plus the pieces exported for its domain box
  gives the serial tree's accuracy; a piece exported for the wrong box (the receiver's
  walks need cells pruned from it) raises, never drops forces; malformed pieces raise.
- 2, 3 (and oversubscribed 4) ranks under mpiexec: forces meet the treecode's bounds
  (median |da|/|a| <= 3e-4, 99th percentile <= 1.5e-3 at the default
  theta) on a Plummer sphere and an uneven pair of spheres (N = 20000), with a 99th
  percentile within 15% of the serial tree's on the same particles, each rank holding
  only its share and every particle once; runs on the same P are bit-identical; a leapfrog run with distributed state
  (each rank holding its domain, fewer than N) keeps every particle once, its energy error
  equals the serial run's within 10%; kill-and-resume on the same P is bit-identical; a
  checkpoint set resumed on 3 ranks or in one process continues within the tree's bounds.

Skipped when mpi4py or mpiexec is missing (``pip install 'gravpipe[mpi]'``).
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import MPI_ENV, mpiexec
from reference import direct_sum_f64
from tree_models import MODELS, small_plummer

import gravpipe as gp
from gravpipe import _core
from gravpipe.parallel.domain import curve_keys

EPS = 1 / 64
MEDIAN_BOUND, P99_BOUND = 3e-4, 1.5e-3  # the treecode's promise at the default theta (gravpipe.tree)
CASE = Path(__file__).parent / "mpi" / "tree_case.py"
TREE_ARGS = dict(eps=EPS, G=1.0, theta=gp.tree.DEFAULT_THETA, quadrupole=True, quad_tol=0.0,
                 n_leaf=gp.tree.DEFAULT_N_LEAF, n_crit=gp.tree.DEFAULT_N_CRIT, alpha=0.0, threads=1,
                 precision="mixed")


@functools.lru_cache(maxsize=None)
def reference(model: str, every: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """(indices, float64 direct-sum accelerations) of every `every`-th particle of a model."""
    p = MODELS[model]()
    idx = np.arange(0, p.n, every)
    return idx, direct_sum_f64(p.pos, p.mass, p.pos[idx], EPS, exclude=idx)[0]


def errors(acc: np.ndarray, model: str) -> tuple[float, float]:
    """Median and 99th percentile of |a - a_ref| / |a_ref| against the float64 reference."""
    idx, ref = reference(model)
    e = np.linalg.norm(acc[idx] - ref, axis=1) / np.linalg.norm(ref, axis=1)
    return float(np.median(e)), float(np.percentile(e, 99))


@functools.lru_cache(maxsize=None)
def serial_errors(model: str) -> tuple[float, float]:
    """The serial tree's errors on the same particles: the bound a domain decomposition keeps."""
    p = MODELS[model]()
    return errors(gp.tree.Tree(p.pos, p.mass, eps=EPS).forces()[0], model)


def check_accuracy(acc: np.ndarray, model: str, absolute: bool) -> None:
    """Median within the treecode's bound; the 99th percentile within 15% of the serial
    tree's on the same particles (the tail depends on where cells are cut), and within the
    treecode's bound too when ``absolute``."""
    med, p99 = errors(acc, model)
    med_s, p99_s = serial_errors(model)
    assert med <= MEDIAN_BOUND and p99 <= 1.15 * p99_s, (med, p99, med_s, p99_s)
    if absolute:
        assert p99 <= P99_BOUND, (med, p99)


# ---- export and graft in one process ------------------------------------------------------

def split_along_curve(p: gp.Particles, parts: int) -> list[np.ndarray]:
    order = _core.curve_order(np.ascontiguousarray(p.pos))
    return [order[len(order) * k // parts:len(order) * (k + 1) // parts] for k in range(parts)]


def domain_tree(p: gp.Particles, idx: np.ndarray) -> _core.DomainTree:
    return _core.DomainTree(np.ascontiguousarray(p.pos[idx]), np.ascontiguousarray(p.mass[idx]), **TREE_ARGS)


def graft(receiver: _core.DomainTree, pieces: list[tuple[np.ndarray, ...]]) -> None:
    receiver.graft(np.concatenate([c for c, _, _ in pieces]), np.concatenate([l for _, l, _ in pieces]),
                   np.concatenate([q for _, _, q in pieces]), np.array([len(c) for c, _, _ in pieces]),
                   np.array([len(q) for _, _, q in pieces]))


def test_exported_pieces_grafted_give_the_serial_accuracy():
    p = MODELS["two_plummers"]()
    parts = split_along_curve(p, 3)
    trees = [domain_tree(p, idx) for idx in parts]
    acc = np.empty((p.n, 3))
    for r, (idx, tree) in enumerate(zip(parts, trees)):
        pieces = [t.export_for(tree.domain()) for q, t in enumerate(trees) if q != r]
        assert sum(len(q) for _, _, q in pieces) < p.n - len(idx)  # not the other domains whole
        assert any((links[:, 2] == -2).any() for _, links, _ in pieces)
        graft(tree, pieces)
        a, pot, cost = np.empty((len(idx), 3)), np.empty(len(idx)), np.empty(len(idx), np.int64)
        tree.forces(a, pot, cost)
        assert (cost > 0).all()
        acc[idx] = a
    # the serial tree's 99th percentile on this model is 1.40e-3, 94% of the bound, and where
    # the domains cut cells moves the tail by several per cent either way (three domains:
    # 1.51e-3 along the Hilbert curve, 1.39e-3 along Morton's; four along Morton's: 1.49e-3):
    # held to the serial tree's, as the oversubscribed run is; the runs under mpiexec keep
    # the absolute bound too
    check_accuracy(acc, "two_plummers", absolute=False)


def octree_group_boxes(pos: np.ndarray, keys: np.ndarray, n_crit: int) -> np.ndarray:
    """(k, 7) boxes of the self-gravity groups, found here from the curve keys alone: the
    highest octree cells of at most n_crit particles, each its particles' bounding box."""
    order = np.argsort(keys, kind="stable")
    k, pos = keys[order], pos[order]
    rows = []

    def split(b: int, e: int, level: int) -> None:
        if e - b <= n_crit or level == 21:
            rows.append(np.concatenate((pos[b:e].min(axis=0), pos[b:e].max(axis=0), [0.0])))
            return
        digit = (k[b:e] >> np.uint64(3 * (20 - level))) & np.uint64(7)
        cuts = np.searchsorted(digit, np.arange(9, dtype=np.uint64)) + b
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            if hi > lo:
                split(int(lo), int(hi), level + 1)

    split(0, len(k), 0)
    return np.array(rows)


def test_a_domain_is_its_groups_boxes_and_its_piece_what_their_walks_open():
    """A Plummer half's domain is the boxes of its self-gravity groups, found here from the
    curve keys alone; a box around several groups would, where the curve jumps from a group
    by the core to halo groups, ask the other half for its core at the halo's resolution.
    The piece for the domain is the piece for those boxes."""
    p = gp.ic.plummer(100_000, seed=1)
    lo, hi = p.pos.min(axis=0), p.pos.max(axis=0)
    frame = (lo - 0.125 * (hi - lo).max(), hi + 0.125 * (hi - lo).max())
    keys = curve_keys(p.pos, *frame)
    halves = np.array_split(np.argsort(keys, kind="stable"), 2)
    trees = [_core.DomainTree(np.ascontiguousarray(p.pos[i]), np.ascontiguousarray(p.mass[i]), **TREE_ARGS,
                              frame_lo=frame[0], frame_hi=frame[1]) for i in halves]
    for r, idx in enumerate(halves):
        groups = octree_group_boxes(p.pos[idx], keys[idx], TREE_ARGS["n_crit"])
        domain = trees[r].domain()
        assert np.array_equal(domain, groups)
        for a, b in zip(trees[1 - r].export_for(domain), trees[1 - r].export_for(groups[::-1].copy())):
            assert np.array_equal(a, b)  # the order of the boxes changes nothing


def test_a_piece_for_the_wrong_box_raises_instead_of_dropping_forces():
    p = MODELS["plummer"]()
    a, b = split_along_curve(p, 2)
    ta, tb = domain_tree(p, a), domain_tree(p, b)
    box = ta.domain()
    real = np.isfinite(box).all(axis=1)  # empty boxes (lo > hi, infinite) pad the domain
    box[real, 3:6] = box[real, :3] + 0.05 * (box[real, 3:6] - box[real, :3])  # a corner of each of a's boxes
    graft(ta, [tb.export_for(box)])
    with pytest.raises(RuntimeError, match="pruned"):
        ta.forces(np.empty((len(a), 3)), np.empty(len(a)), None)


def test_graft_rejects_malformed_pieces():
    p = MODELS["plummer"]()
    a, b = split_along_curve(p, 2)
    ta, tb = domain_tree(p, a), domain_tree(p, b)
    cells, links, parts = tb.export_for(ta.domain())
    bad = links.copy()
    bad[0, 0] = len(links) + 5  # children beyond the piece
    with pytest.raises(ValueError, match="malformed"):
        ta.graft(cells, bad, parts, np.array([len(cells)]), np.array([len(parts)]))
    with pytest.raises(ValueError, match="piece sizes"):
        ta.graft(cells, links, parts, np.array([len(cells) + 1]), np.array([len(parts)]))


# ---- under mpiexec ---------------------------------------------------------------------------

def mpirun(ranks: int, *args: str, cwd: Path, tag: str = "") -> dict[str, np.ndarray]:
    out = cwd / f"result_{ranks}_{args[0]}{tag}.npz"
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", str(CASE), args[0], str(out), *args[1:]]
    r = subprocess.run(cmd, cwd=cwd, env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


def check_forces(r: dict[str, np.ndarray], model: str, absolute: bool) -> None:
    for k in ("acc0", "acc1"):  # equal slices, then domains balanced by the first's cost
        check_accuracy(r[k], model, absolute)
    assert r["imbalance_interactions"] < 1.1  # cost-balanced domains
    assert r["bytes_essential"] > 0 and r["seconds_comm"] > 0 and r["interactions"] > 0


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("model", ["plummer", "two_plummers"])
def test_tree_forces_on_ranks_meet_the_serial_bounds_and_are_deterministic(tmp_path, ranks, model):
    a = mpirun(ranks, "forces", model, cwd=tmp_path, tag="a")
    check_forces(a, model, absolute=True)
    b = mpirun(ranks, "forces", model, cwd=tmp_path, tag="b")
    assert np.array_equal(a["acc1"], b["acc1"]) and np.array_equal(a["pot1"], b["pot1"])


def test_tree_forces_on_four_oversubscribed_ranks(tmp_path):
    check_forces(mpirun(4, "forces", "plummer", cwd=tmp_path), "plummer", absolute=False)


def serial_leapfrog(run_dir: Path, t_end: float) -> gp.Simulation:
    # precise rows, as tree_case.py's: the run's own potentials carry tree errors that
    # differ with the domains
    sim = gp.Simulation(small_plummer(), gravity="tree", eps=EPS, dt=1 / 64, threads=1, precise_energy=True)
    sim.evolve(t_end, checkpoint_every=0.125, out=run_dir, progress=False)
    return sim


@pytest.mark.parametrize("ranks", [2, 3])
def test_leapfrog_on_ranks_agrees_with_serial_and_is_deterministic(tmp_path, ranks):
    serial = serial_leapfrog(tmp_path / "serial", 0.25)
    a = mpirun(ranks, "leapfrog", str(tmp_path / "a"), "0.25", cwd=tmp_path, tag="a")
    b = mpirun(ranks, "leapfrog", str(tmp_path / "b"), "0.25", cwd=tmp_path, tag="b")
    assert np.array_equal(a["pos"], b["pos"]) and np.array_equal(a["vel"], b["vel"])
    assert abs(a["energy_error"] - serial.energy_error()) <= 0.1 * abs(serial.energy_error())
    assert np.abs(a["pos"] - serial.particles.pos).max() < 1e-3  # tree errors, not bits
    assert a["comm"] > 0 and f"curve domains over {ranks} MPI ranks" in str(a["detail"])
    # the domains are cut again only when a rank's cost drifts 5% over the mean
    cuts, evaluations = map(int, re.search(r"domains cut (\d+) times in (\d+) evaluations", str(a["summary"])).groups())
    assert 1 <= cuts < evaluations


def test_kill_and_resume_on_the_same_ranks_is_bit_identical(tmp_path):
    whole = mpirun(2, "leapfrog", str(tmp_path / "whole"), "0.375", cwd=tmp_path, tag="whole")
    cut = tmp_path / "cut"
    mpirun(2, "leapfrog", str(cut), "0.25", cwd=tmp_path, tag="cut")
    assert "domain_cost" in gp.io.read_snapshot(sorted(cut.glob("checkpoint_*"))[-1]).integrator_state
    again = mpirun(2, "leapfrog", str(cut), "0.375", cwd=tmp_path, tag="again")
    assert np.array_equal(whole["pos"], again["pos"]) and np.array_equal(whole["vel"], again["vel"])


def test_resume_on_other_rank_counts_continues_within_the_tree_bounds(tmp_path):
    """A 2-rank checkpoint set read block-wise by 3 ranks, and whole by one process."""
    whole = mpirun(2, "leapfrog", str(tmp_path / "whole"), "0.375", cwd=tmp_path, tag="whole")
    cut = tmp_path / "cut"
    mpirun(2, "leapfrog", str(cut), "0.25", cwd=tmp_path, tag="cut")
    serial_dir = tmp_path / "serial"
    shutil.copytree(cut, serial_dir)
    three = mpirun(3, "leapfrog", str(cut), "0.375", cwd=tmp_path, tag="three")
    assert three["shares"].sum() == small_plummer().n and len(three["shares"]) == 3
    assert np.abs(three["pos"] - whole["pos"]).max() < 1e-3  # tree errors, not bits
    one = gp.Simulation.resume(serial_dir, threads=1)
    assert one.residence == "memory"
    one.evolve(0.375, progress=False)
    order = np.argsort(one.particles.id)
    assert np.abs(one.particles.pos[order] - whole["pos"]).max() < 1e-3


def test_cli_tree_run_under_mpiexec(tmp_path):
    exe = Path(sys.executable).parent / "gravpipe"
    r = subprocess.run([mpiexec(), "-n", "2", str(exe), "run", "-n", "2048", "--gravity", "tree", "--t-end", "0.125",
                        "--no-progress"], cwd=tmp_path, env=MPI_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("energy error") == 1 and "curve domains over 2 MPI ranks" in r.stdout
    assert "load imbalance" in r.stdout and "comm" in r.stdout


def test_a_bad_particle_in_one_share_stops_every_rank_naming_it(tmp_path):
    r = mpirun(2, "bad_particle", cwd=tmp_path)
    first, second = (str(m) for m in r["messages"])
    assert f"(particle id {int(r['bad_id'])})" in second and "exceeds 1e+18" in second
    assert first.startswith("another rank refused its share: rank 1:")
