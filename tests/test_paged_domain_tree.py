"""The locally essential tree out of core (_core.PagedDomainTree) against the in-core one
(_core.DomainTree) on the same domains, in one process: the domain box, the exported pieces
byte for byte, and the forces, potentials and interaction counts bit for bit after the
graft, with budgets small enough that the particle and cell pages really move."""
from __future__ import annotations

import os

import numpy as np
import pytest

import gravpipe as gp
from gravpipe import _core
from gravpipe.errors import MemoryBudgetError
from gravpipe.ooc import OOC_FIELDS, plan_budget, tree_keep_free
from gravpipe.parallel.domain import curve_keys
from gravpipe.store import ParticleStore

pytestmark = pytest.mark.filterwarnings("ignore::gravpipe.errors.MemoryBudgetWarning")

PAGE = 4096
EPS = 1e-2
#: bytes a particle of a sort run holds in memory: runs of 1500 make the sort merge
RUN = int(_core.sort_run_bytes_per_particle(False, False))
FIELDS = OOC_FIELDS | {"domain_cost": (1, "i64")}


def _tree_args(threads: int, precision: str) -> dict:
    return dict(eps=EPS, G=1.0, theta=0.6, quadrupole=True, quad_tol=0.0, n_leaf=16, n_crit=256, threads=threads,
                precision=precision)


def _domains(p: gp.Particles, ranks: int) -> tuple[tuple[np.ndarray, np.ndarray], list[np.ndarray]]:
    """The frame (its box widened by an eighth) and each domain's particle indices: equal
    ranges of the curve, as the MPI run cuts them."""
    lo, hi = p.pos.min(axis=0), p.pos.max(axis=0)
    margin = 0.125 * (hi - lo).max()
    frame = (lo - margin, hi + margin)
    keys = curve_keys(p.pos, *frame)
    order = np.argsort(keys, kind="stable")
    return frame, np.array_split(order, ranks)


def _paged_tree(tmp_path, p: gp.Particles, idx: np.ndarray, frame, threads: int, precision: str, extra_pages: int):
    """A store of the domain's particles (in their caller order), sorted in the frame, and
    its PagedDomainTree."""
    n = len(idx)
    try:
        plan_budget(n, 1 << 16, PAGE, threads, 16)
        raise AssertionError("the tiny budget was accepted")
    except MemoryBudgetError as e:
        least = int(e.least_budget)
    plan = plan_budget(n, least + extra_pages * PAGE, PAGE, threads, 16, sort_buffer=RUN * 1500)
    store = ParticleStore(tmp_path, n, plan.budget, page_bytes=PAGE, extra_fields=FIELDS, cache_bytes=plan.cache,
                          threads=threads)
    store.write("pos", 0, p.pos[idx])
    store.write("vel", 0, p.vel[idx])
    store.write("mass", 0, p.mass[idx])
    store.write("id", 0, idx.astype(np.int64))
    store.write("index", 0, np.arange(n, dtype=np.int64))
    st = _core.store_sort_by_curve(store._core, ["pos", "vel", "mass", "id"], plan.sort_buffer, threads,
                                   frame=(frame[0], frame[1]))
    own = np.concatenate((st["bounds_lo"], st["bounds_hi"], [0.0]))
    tree = _core.PagedDomainTree(store._core, own, **_tree_args(threads, precision), keep_free=tree_keep_free(n, threads))
    return store, tree, st


def _graft_args(pieces: list) -> tuple:
    """The graft's arguments from the pieces (None: nothing) in sender order."""
    have = [q for q in pieces if q is not None]
    cells = np.concatenate([q[0] for q in have]) if have else np.empty((0, 19))
    links = np.concatenate([q[1] for q in have]) if have else np.empty((0, 4), np.int64)
    parts = np.concatenate([q[2] for q in have]) if have else np.empty((0, 4))
    cpp = np.array([0 if q is None else len(q[0]) for q in pieces], np.int64)
    ppp = np.array([0 if q is None else len(q[2]) for q in pieces], np.int64)
    return cells, links, parts, cpp, ppp


class _OneRank:
    """A communicator of one rank for a PagedDomainLeapfrog's constructor (it talks to no other rank)."""

    def Get_size(self) -> int:
        return 1


def _one_rank_model() -> tuple[gp.Particles, dict, object]:
    """A small Plummer model, its share as blocks take it, and the forces' tree settings."""
    from gravpipe.parallel.essential_forces import EssentialTreeForces

    p = gp.ic.plummer(500, seed=3)
    forces = EssentialTreeForces.__new__(EssentialTreeForces)
    forces.threads = 1
    forces._tree_args = _tree_args(1, "mixed") | {"alpha": 0.0}
    return p, {"pos": p.pos, "vel": p.vel, "mass": p.mass, "id": p.id}, forces


@pytest.mark.parametrize("ranks,threads,precision", [(2, 2, "mixed"), (3, 1, "double"), (2, 1, "mixed")])
def test_paged_domain_tree_is_the_in_core_one_bit_for_bit(tmp_path, ranks, threads, precision):
    p = gp.ic.plummer(9000, seed=11)
    frame, domains = _domains(p, ranks)
    core = [_core.DomainTree(np.ascontiguousarray(p.pos[i]), np.ascontiguousarray(p.mass[i]), alpha=0.0,
                             **_tree_args(threads, precision), frame_lo=frame[0], frame_hi=frame[1])
            for i in domains]
    boxes = [t.domain() for t in core]
    for r, idx in enumerate(domains):
        store, tree, st = _paged_tree(tmp_path, p, idx, frame, threads, precision, extra_pages=40)
        try:
            assert st["runs"] >= 2  # the external sort really merged
            assert np.array_equal(tree.domain(), boxes[r])
            for q in range(ranks):
                if q != r:
                    piece = tree.export_for(boxes[q])
                    for a, b in zip(piece, core[r].export_for(boxes[q])):
                        assert a.dtype == b.dtype and np.array_equal(a, b)
                    # its size, known before it is made
                    assert tree.export_size(boxes[q]) == (len(piece[0]), len(piece[2]), sum(a.nbytes for a in piece))
            pieces = [None if q == r else core[q].export_for(boxes[r]) for q in range(ranks)]
            args = _graft_args(pieces)
            core[r].graft(*args)
            tree.graft(*args)
            assert tree.imported_particles == len(args[2]) > 0
            n = len(idx)
            acc, pot, cost = np.empty((n, 3)), np.empty(n), np.empty(n, np.int64)
            core[r].forces(acc, pot, cost)
            tree.forces("acc", "pot", "domain_cost")
            counters = store._core.counters()
            assert counters["misses"] > 0 and counters["evictions"] > 0  # the pages really moved
            order = store.read("index", 0, n)  # the caller's order of each particle, now in curve order
            assert np.array_equal(store.read("acc", 0, n), acc[order])
            assert np.array_equal(store.read("pot", 0, n), pot[order])
            assert np.array_equal(store.read("domain_cost", 0, n), cost[order])
            s_core, s_paged = core[r].stats(), tree.stats()
            assert s_core["pp_interactions"] == s_paged["pp_interactions"] > 0
            assert s_core["pc_interactions"] == s_paged["pc_interactions"]
        finally:
            del tree
            store.close()


def test_paged_domain_tree_closing_kick_and_bad_input(tmp_path):
    p = gp.ic.plummer(3000, seed=2)
    frame, domains = _domains(p, 2)
    store, tree, _ = _paged_tree(tmp_path, p, domains[0], frame, 1, "mixed", extra_pages=40)
    try:
        with pytest.raises(RuntimeError, match="before graft"):
            tree.forces()
        with pytest.raises(ValueError, match="cells: expected 19 columns"):
            tree.graft(np.zeros((1, 5)), np.zeros((1, 4), np.int64), np.zeros((0, 4)), np.array([0, 1]),
                       np.array([0, 0]))
        # arrays held beside the tree (pieces in transit) take frames from the cell cache,
        # as much as it can give and no BudgetError past that; 0 gives the charge back
        cache = tree.cell_cache_bytes
        assert tree.hold_beside(PAGE) == tree.held_beside == PAGE
        held = tree.hold_beside(1 << 40)
        assert cache - tree.cell_cache_bytes > 0 and PAGE < held == tree.held_beside < 1 << 40
        assert tree.hold_beside(0) == tree.held_beside == 0
        tree.graft(*_graft_args([None, None]))
        n = len(domains[0])
        vel0 = store.read("vel", 0, n)
        tree.forces(kick_h=0.25, time=1.0)
        assert np.array_equal(store.read("vel", 0, n), vel0 + 0.25 * store.read("acc", 0, n))
    finally:
        del tree
        store.close()


def test_a_killed_ranks_migration_folders_are_removed_by_the_next_run(tmp_path):
    """A rank killed during a migration leaves its folders (gravpipe-migrate-<pid>-*); the
    next run's ranks remove those of processes that no longer run, and say so; a live
    process's folder stays."""
    import subprocess
    import sys
    import warnings

    from gravpipe.errors import StaleScratchWarning
    from gravpipe.parallel import paged_domain_leapfrog as pdl

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"gravpipe-migrate-{int(dead.stdout)}-abc123"
    stale.mkdir()
    (stale / "from0.f64").write_bytes(b"\0" * 4096)
    live = tmp_path / f"gravpipe-decompose-{os.getpid()}-xyz789"
    live.mkdir()
    other = tmp_path / "gravpipe-migrate-notes"
    other.mkdir()

    p, share, forces = _one_rank_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = pdl.PagedDomainLeapfrog(_OneRank(), lambda: iter([share]), p.n, forces=forces, dt=1 / 64, t0=0.0,
                                      memory_budget=(96 << 20) + (16 << 20), scratch=tmp_path)
    run.close()
    assert not stale.exists() and live.exists() and other.exists()
    said = [str(w.message) for w in caught if issubclass(w.category, StaleScratchWarning)]
    assert len(said) == 1 and str(stale) in said[0]


def test_the_store_a_model_is_drawn_into_leaves_the_drawn_block_its_memory(tmp_path):
    """A model's block takes ~300 MB while drawn, beside the store it is written to: the
    store made for the draw leaves it that much of the rank's budget (beyond the room kept
    outside the store), and a budget too small for both is named with the least that works."""
    import gravpipe.parallel.paged_domain_leapfrog as pdl

    p, share, forces = _one_rank_model()
    budget = (96 << 20) + (16 << 20)

    def made(blocks_bytes: int) -> int:
        run = pdl.PagedDomainLeapfrog(_OneRank(), lambda: iter([share]), p.n, forces=forces, dt=1 / 64, t0=0.0,
                                      memory_budget=budget, scratch=tmp_path, blocks_bytes=blocks_bytes)
        try:
            return int(run._store._core.budget_total)
        finally:
            run.close()

    plain, beside = made(0), made((96 << 20) + (4 << 20))
    assert plain - beside == 4 << 20  # what the block takes past the 96 MiB kept outside the store
    with pytest.raises(MemoryBudgetError, match="least budget that works is") as e:
        made((96 << 20) + (16 << 20))
    assert e.value.least_budget > budget
