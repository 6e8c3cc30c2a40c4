"""The treecode out of core (gravpipe.ooc): the same tree code as the in-core Tree through
the store's accessor, so forces and leapfrog steps are the in-core ones bit for bit, with
budgets small enough that the pages really move (misses, evictions and bytes read are
asserted); against a float64 direct sum within the tree's accuracy; the external sort in
several runs; budget errors naming the least budget; a flipped bit in the scratch file
during a tree evaluation raising ChecksumError; the scratch file removed at the end and on
failure."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

import gravpipe as gp
from gravpipe import _core
from gravpipe.errors import ChecksumError, MemoryBudgetError, MemoryBudgetWarning
from gravpipe.ooc import OutOfCore, plan_budget, walk_least_cache

# budgets here are tiny on purpose, so that pages really move: the walk may thrash
pytestmark = pytest.mark.filterwarnings("ignore::gravpipe.errors.MemoryBudgetWarning")

PAGE = 4096  # 512 particles a page: a few thousand particles span many pages
EPS = 1e-2
#: bytes a particle of a sort run holds in memory, plain and with the kick-drift inside
RUN = int(_core.sort_run_bytes_per_particle(False, False))
RUN_KD = int(_core.sort_run_bytes_per_particle(True, False))


def _least(n: int, threads: int, n_leaf: int = 16, **limits) -> int:
    with pytest.raises(MemoryBudgetError) as e:
        plan_budget(n, 1 << 16, PAGE, threads, n_leaf, **limits)
    return int(e.value.least_budget)


def _flip_a_bit(path: str, offset: int) -> None:
    """Flip bit 4 of the byte at ``offset`` of the file ``path`` (a corrupted page)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x10]))


def _cube(n: int, seed: int) -> gp.Particles:
    rng = np.random.default_rng(seed)
    return gp.Particles(pos=rng.random((n, 3)), vel=np.zeros((n, 3)), mass=np.full(n, 1.0 / n))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model,precision", [("plummer", "mixed"), ("cube", "double")])
def test_forces_bitwise_equal_to_in_core_tree(tmp_path, threads, model, precision):
    n = 6000
    p = gp.ic.plummer(n, seed=5) if model == "plummer" else _cube(n, 7)
    a0, pot0 = gp.Tree(p.pos, p.mass, eps=EPS, threads=threads, precision=precision).forces()
    budget = _least(n, threads) + 48 * PAGE  # a cache of a few dozen pages for 2000+ pages of data
    with OutOfCore.from_particles(p, tmp_path, budget, eps=EPS, threads=threads, precision=precision,
                                  page_bytes=PAGE, sort_buffer=RUN * 1500) as o:
        st = o.forces()
        assert st.sort_detail["runs"] >= 4  # the external merge really ran
        a1, pot1 = o.gather("acc"), o.gather("pot")
        s = o.stats
        assert s["misses"] > 0 and s["evictions"] > 0 and s["bytes_read"] > 0
        assert s["budget_used_bytes"] <= s["budget_bytes"]
        assert o.tree_stats.pp_interactions > 0
    assert np.array_equal(a0, a1) and np.array_equal(pot0, pot1)
    assert os.listdir(tmp_path) == []  # the scratch file is gone


@pytest.mark.parametrize("threads,n_crit", [(3, 32), (3, 4096), (2, 256)])
def test_build_shared_among_threads_makes_the_in_core_cells_and_groups(tmp_path, threads, n_crit):
    """What this proves: the out-of-core build, which hands subtrees to its threads and
    places the cells above them on one, writes every cell at the index, and every group in
    the order, that the in-core build gives them: forces bitwise equal to the in-core tree's
    for an odd thread count, and for group cells both inside the subtrees (small n_crit) and
    above them (n_crit larger than a subtree)."""
    n = 9000
    p = gp.ic.plummer(n, seed=8)
    a0, pot0 = gp.Tree(p.pos, p.mass, eps=EPS, threads=threads, n_crit=n_crit).forces()
    budget = _least(n, threads) + 64 * PAGE
    with OutOfCore.from_particles(p, tmp_path, budget, eps=EPS, threads=threads, n_crit=n_crit,
                                  page_bytes=PAGE) as o:
        o.forces()
        a1, pot1 = o.gather("acc"), o.gather("pot")
        assert o.tree_stats.groups > 1
    assert np.array_equal(a0, a1) and np.array_equal(pot0, pot1)


def test_forces_against_float64_direct_sum(tmp_path):
    n = 8000
    p = gp.ic.plummer(n, seed=11)
    with OutOfCore.from_particles(p, tmp_path, "64MiB", eps=EPS, threads=2, page_bytes=PAGE) as o:
        o.forces()
        acc = o.gather("acc")
    rng = np.random.default_rng(0)
    idx = rng.choice(n, 300, replace=False)
    d = p.pos[None, :, :] - p.pos[idx, None, :]  # (300, n, 3) float64
    r2 = (d * d).sum(-1) + EPS * EPS
    inv3 = r2 ** -1.5
    inv3[np.arange(300), idx] = 0.0  # self excluded
    ref = (p.mass[None, :, None] * d * inv3[:, :, None]).sum(1)
    err = np.linalg.norm(acc[idx] - ref, axis=1) / np.linalg.norm(ref, axis=1)
    # the tree's promise at theta = 0.6 (tree.py: median 1.5e-4, p99 1.2e-3 at N = 20000)
    assert np.median(err) <= 3e-4 and np.percentile(err, 99) <= 3e-3


@pytest.mark.parametrize("threads,buffer", [(1, RUN * 1100), (2, RUN * 1100), (2, RUN_KD * 4000)])
def test_leapfrog_steps_bitwise_equal_to_in_core(tmp_path, threads, buffer):
    """Several runs (the external merge), or one (sorted in place). After forces() with no
    next step named, the first step kicks and drifts in a pass of its own; the next ones
    (same dt) inside the sort, in the frame the closing kick predicted; every step's closing
    kick rides on the walk."""
    n, dt = 4000, 1 / 64
    p = gp.ic.plummer(n, seed=2)
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", eps=EPS, dt=dt, theta=0.6, threads=threads)
    sim.evolve(3 * dt)
    budget = _least(n, threads) + 64 * PAGE
    def runs(kick_drift: bool) -> int:  # runs start on page boundaries (store_sort.cpp)
        def length(overlap: bool) -> int:
            run = min(n, buffer // _core.sort_run_bytes_per_particle(kick_drift, overlap))
            return run - (run % (PAGE // 8) if PAGE // 8 < run < n else 0)
        run = length(False)
        return -(-n // (run if run == n else length(True)))  # several runs: read overlapped
    plain, fused = runs(False), runs(True)
    with OutOfCore.from_particles(p, tmp_path, budget, eps=EPS, threads=threads, page_bytes=PAGE,
                                  sort_buffer=buffer) as o:
        o.forces()  # no next_dt: nothing predicted for the first step
        first = o.step(dt)
        assert not first.kick_drift_in_sort and first.kick_drift > 0 and first.sort_detail["runs"] == plain
        assert [sum(v[k] for v in first.stage_bytes.values()) for k in (0, 1)] == [first.bytes_read,
                                                                                first.bytes_written]
        assert first.stage_bytes["kick_drift"][0] > 0
        for _ in range(2):
            st = o.step(dt)
            assert st.kick_drift_in_sort and st.kick_drift == 0
            assert st.sort_detail["runs"] == fused and st.sort_detail["kick_drift_applied"]
            assert st.bytes_read > 0 and st.bytes_written > 0
            # the stages' traffic adds up to the step's; each paged stage moved pages
            assert set(st.stage_bytes) == {"sort", "build_moments", "walk_forces"}
            assert [sum(v[k] for v in st.stage_bytes.values()) for k in (0, 1)] == [st.bytes_read, st.bytes_written]
            assert all(w > 0 for r, w in st.stage_bytes.values())
            # several runs: the sort built the tree's cells as it wrote the particles, so the
            # tree read no particle page back (its bytes are the cell pages where levels meet,
            # which the build wrote through the cells' cache); one run (sorted in place) has no
            # permute to ride on, and the tree reads the keys and the particles back
            assert st.sort_detail["tree_in_sort"] == (fused > 1), st.sort_detail["tree_declined"]
            assert (st.stage_bytes["build_moments"][0] < 8 * n) == (fused > 1)
            assert st.stage_bytes["sort"][0] > 0 and st.stage_bytes["walk_forces"][0] > 0
            # each stage's CPU seconds (every thread of the process) over the same spans
            assert set(st.stage_cpu) == set(st.stage_bytes) and all(c > 0 for c in st.stage_cpu.values())
            assert sum(st.stage_cpu.values()) <= st.total * (os.cpu_count() + 2) + 0.05
            # and the process's context switches, counted where each stage ends
            assert set(st.stage_switches) == set(st.stage_bytes) and min(st.stage_switches.values()) >= 0
            assert sum(st.stage_switches.values()) > 0  # several threads and direct I/O: some sleep
        pos, vel = o.gather("pos"), o.gather("vel")
        ids = o.gather("id")
    q = sim.particles
    assert np.array_equal(ids, q.id)
    assert np.array_equal(pos, q.pos) and np.array_equal(vel, q.vel)


@pytest.mark.parametrize("buffer", [RUN * 1100, RUN_KD * 3000])  # several runs; one (n), in place
@pytest.mark.parametrize("ids,derived", [("offset", True), ("shuffled", False), ("broken", False)])
def test_ids_written_from_the_index_or_carried_follow_their_particles(tmp_path, ids, derived, buffer):
    """Ids that are the caller's index plus a constant (checked block by block as the store is
    filled) are read from the sorted index (ParticleStore.derive_from): the sort neither
    carries nor writes them, and their pages keep the order they were filled in; any others
    (shuffled, or a block that breaks the pattern) are carried. Either way every particle
    keeps its id: the steps equal the in-core leapfrog's, ids included, bit for bit."""
    n, dt = 3000, 1 / 64
    q = gp.ic.plummer(n, seed=4)
    new_ids = {"offset": np.arange(n) + 10**12, "shuffled": np.random.default_rng(1).permutation(n) * 7 - 5,
               "broken": np.arange(n) + (np.arange(n) >= 2000)}[ids]
    p = gp.Particles(q.pos, q.vel, q.mass, new_ids)
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", eps=EPS, dt=dt, theta=0.6, threads=2)
    sim.evolve(3 * dt)
    with OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 64 * PAGE + buffer, chunk=1000, eps=EPS, threads=2,
                                  page_bytes=PAGE, sort_buffer=buffer) as o:
        assert ("id" not in o.carried) == derived
        for _ in range(3):
            st = o.step(dt)
        assert st.kick_drift_in_sort and ("id" not in o.carried) == derived
        assert (st.sort_detail["runs"] > 1) == (buffer < RUN_KD * n)
        got = {f: o.gather(f) for f in ("id", "pos", "vel")}
        assert np.array_equal(o.store.read("id", 0, n), new_ids[o.store.read("index", 0, n)])
        assert o.store.derived.get("id") == (f"index + {10**12}" if derived else None)
        if derived:  # never written since the fill
            assert np.array_equal(o.store._core.read("id", 0, n), new_ids)
    r = sim.particles
    assert np.array_equal(got["id"], new_ids) and np.array_equal(r.id, new_ids)
    assert np.array_equal(got["pos"], r.pos) and np.array_equal(got["vel"], r.vel)


def test_ids_rewritten_through_the_store_are_carried_not_overwritten(tmp_path):
    """Ids written straight into the store after filling (not by the fill) may break the
    index + c pattern: the sort then carries them again, and they follow their particles."""
    n, dt = 2000, 1 / 64
    p = gp.ic.plummer(n, seed=12)
    with OutOfCore.from_particles(p, tmp_path, "64MiB", eps=EPS, threads=2, page_bytes=PAGE,
                                  sort_buffer=RUN_KD * 1024) as o:
        o.step(dt)
        assert "id" not in o.carried
        new_ids = o.store.read("index", 0, n) * 3 + 11  # by caller index, in the store's order
        o.store.write("id", 0, new_ids)
        assert "id" in o.carried
        o.step(dt), o.step(dt)
        assert np.array_equal(o.gather("id"), np.arange(n) * 3 + 11)


def test_checkpoint_resume_keeps_ids_written_from_the_index(tmp_path):
    """A store restored from a checkpoint (its curve order, with the saved caller indices)
    still writes its ids from the index, and steps on as the original store does, bit for bit."""
    n, dt = 2000, 1 / 64
    p = gp.ic.plummer(n, seed=9)
    p = gp.Particles(p.pos, p.vel, p.mass, np.arange(n) + 3)
    kw = dict(eps=EPS, threads=2, page_bytes=PAGE, sort_buffer=RUN_KD * 1024)
    with OutOfCore.from_particles(p, tmp_path, "64MiB", **kw) as o:
        o.step(dt)
        o.write_checkpoint(tmp_path / "c.h5", {}, {})
        with OutOfCore.from_checkpoint(tmp_path / "c.h5", tmp_path, "64MiB", chunk=700, **kw) as r:
            assert "id" not in r.carried and "id" not in o.carried
            for ooc in (o, r):
                ooc.step(dt), ooc.step(dt)
            for f in ("pos", "vel", "mass", "id", "index", "key"):
                assert np.array_equal(r.store.read(f, 0, n), o.store.read(f, 0, n)), f


def test_sort_kick_drift_checks_its_predicted_frame(tmp_path):
    """The sort's kick-drift with the true bounds of the drifted positions gives the separate
    pass and the plain sort bit for bit; with bounds that miss by one ulp it leaves every
    field as it was (and the store unsorted), so the step falls back to the separate pass."""
    n, h, dt = 3000, 1 / 128, 1 / 64
    p = gp.ic.plummer(n, seed=4)
    budget = _least(n, 1) + 64 * PAGE
    kw = dict(eps=EPS, threads=1, page_bytes=PAGE, sort_buffer=RUN * 1024)
    with OutOfCore.from_particles(p, tmp_path, budget, **kw) as o:
        o.forces()
        before = {f: o.store.read(f, 0, n) for f in ("pos", "vel", "acc", "id")}
        vel = before["vel"] + h * before["acc"]  # the kick-drift in float64, element by element
        pos = before["pos"] + dt * vel
        lo, hi = list(pos.min(0)), list(pos.max(0))
        missed = list(lo)
        missed[0] = float(np.nextafter(lo[0], -np.inf))  # the frame's corner one ulp off
        d = _core.store_sort_by_curve(o.store._core, o.carried, RUN * 1024, 1, (h, dt, missed, hi))
        assert d["runs"] > 1 and not d["kick_drift_applied"]
        for f, v in before.items():
            assert np.array_equal(o.store.read(f, 0, n), v), f
        d = _core.store_sort_by_curve(o.store._core, o.carried, RUN * 1024, 1, (h, dt, lo, hi))
        assert d["kick_drift_applied"]
        fused = {f: o.store.read(f, 0, n) for f in ("pos", "vel", "id", "key")}
    with OutOfCore.from_particles(p, tmp_path, budget, **kw) as o:
        o.forces()
        _core.store_kick_drift(o.store._core, h, dt, 256)
        o.sort()
        for f, v in fused.items():
            assert np.array_equal(o.store.read(f, 0, n), v), f
    order = np.argsort(before["id"])  # the fused pass drifted every particle as numpy does
    assert np.array_equal(fused["pos"][np.argsort(fused["id"])], pos[order])


@pytest.mark.parametrize("kick_drift", [False, True])
def test_sort_with_overlapped_reads_gives_the_same_bits(tmp_path, kick_drift):
    """The sort's loader thread (the next run read, and kick-drifted, while this one is
    sorted) only moves I/O: the store after it is the one-buffer sort's, bit for bit."""
    from gravpipe.ooc import CARRIED
    n, h, dt = 5000, 1 / 128, 1 / 64
    p = gp.ic.plummer(n, seed=8)
    budget = _least(n, 2) + 64 * PAGE
    out = {}
    for overlap in (False, True):
        with OutOfCore.from_particles(p, tmp_path, budget, eps=EPS, threads=2, page_bytes=PAGE,
                                      sort_buffer=RUN * 1024) as o:
            o.forces()
            kd = None
            if kick_drift:
                pos = o.store.read("pos", 0, n) + dt * (o.store.read("vel", 0, n) + h * o.store.read("acc", 0, n))
                kd = (h, dt, list(pos.min(0)), list(pos.max(0)))
            d = _core.store_sort_by_curve(o.store._core, CARRIED, RUN * 1024, 2, kd, overlap)
            assert d["runs"] > 1 and d["kick_drift_applied"] == kick_drift
            out[overlap] = d["runs"], {f: o.store.read(f, 0, n) for f in ("pos", "vel", "mass", "id", "key", "index")}
    assert out[True][0] > out[False][0]  # the second buffer makes the runs shorter
    for f, v in out[False][1].items():
        assert np.array_equal(out[True][1][f], v), f


@pytest.mark.parametrize("carried", [["pos", "mass"], ["pos", "vel", "mass", "id"]])
def test_permute_lanes_move_every_field_with_its_particle(tmp_path, carried):
    """The permute's two lanes side by side (the positions and masses in one, velocities and
    ids in the other, which starts during the merge and follows it): every carried field
    lands with its particle, in (key, index) order,
    as the caller's arrays permuted by numpy say; a sort of the positions and masses alone
    takes one lane."""
    n = 5000
    p = gp.ic.plummer(n, seed=13)
    p = gp.Particles(p.pos, p.vel, p.mass, np.arange(n) * 7 + 5)
    with OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 64 * PAGE, eps=EPS, threads=2, page_bytes=PAGE,
                                  sort_buffer=RUN * 1024) as o:
        o.store.write("vel", 0, o.store.read("vel", 0, n)[::-1].copy())  # out of curve order
        index = o.store.read("index", 0, n)
        by_index = {f: np.empty_like(o.store.read(f, 0, n)) for f in carried}
        for f in carried:
            by_index[f][index] = o.store.read(f, 0, n)
        d = _core.store_sort_by_curve(o.store._core, carried, RUN * 1024, 2, None, True)
        assert d["runs"] > 1 and d["permute_lanes"] == (2 if "vel" in carried else 1)
        assert d["permute_in_merge"] == ("vel" in carried)  # the velocities' lane followed the merge
        index, key = o.store.read("index", 0, n), o.store.read("key", 0, n)
        assert np.array_equal(np.lexsort((index, key)), np.arange(n))
        assert np.array_equal(np.sort(index), np.arange(n))
        for f in carried:
            assert np.array_equal(o.store.read(f, 0, n), by_index[f][index]), f


def test_non_finite_force_raises_naming_the_particle(tmp_path):
    """Two particles that the drift brings to one place (eps = 0): the closing kick, riding
    on the walk, raises the in-core leapfrog's IntegrationError naming one of them."""
    n = 2000
    p = gp.ic.plummer(n, seed=6)
    with OutOfCore.from_particles(p, tmp_path, "64MiB", eps=0.0, threads=2, page_bytes=PAGE) as o:
        o.forces()
        slot = {int(i): k for k, i in enumerate(o.store.read("index", 0, n))}
        a, b = slot[700], slot[1500]
        for f in ("pos", "vel", "acc"):  # particle 1500 becomes particle 700's twin
            o.store.write(f, b, o.store.read(f, a, a + 1))
        with pytest.raises(gp.errors.IntegrationError, match=r"particle (700|1500): its force is not finite"):
            o.step(1 / 64)


def test_first_forces_prepare_the_first_steps_kick_drift_and_sort(tmp_path):
    """What this proves: forces(next_dt), a run's first forces with its step named, leaves
    the velocities as they are, predicts that step's kick-drift and makes its sort's runs
    during the walk, so that the first step kicks and drifts inside the sort and goes
    straight to the merge (no pass of its own), and the steps stay the in-core leapfrog's bit
    for bit; a step of another dt does not take them; a next_dt that is not > 0 is refused."""
    n, dt = 6000, 1 / 64
    p = gp.ic.plummer(n, seed=14)
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", eps=EPS, dt=dt, threads=2)
    sim.evolve(3 * dt)
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    with OutOfCore.from_particles(p, tmp_path / "a", _least(n, 2) + 96 * PAGE, eps=EPS, threads=2,
                                  page_bytes=PAGE) as o:
        o.options.presort, o.options.presort_run = True, 1024
        with pytest.raises(ValueError, match="next_dt: must be > 0"):
            o.forces(next_dt=0.0)
        o.forces(next_dt=dt)
        assert np.array_equal(o.gather("vel"), p.vel)  # not kicked
        assert o.prepared == {"next_dt": dt, "runs": True}
        steps = [o.step(dt) for _ in range(3)]
        assert all(st.kick_drift_in_sort and st.kick_drift == 0 for st in steps)
        assert all(st.sort_detail["presorted_used"] for st in steps)
        assert np.array_equal(o.gather("pos"), sim.particles.pos)
        assert np.array_equal(o.gather("vel"), sim.particles.vel)
    with OutOfCore.from_particles(p, tmp_path / "b", _least(n, 2) + 96 * PAGE, eps=EPS, threads=2,
                                  page_bytes=PAGE) as o:
        o.options.presort, o.options.presort_run = True, 1024
        o.forces(next_dt=dt)
        st = o.step(dt / 2)  # not the step the forces prepared
        assert not st.kick_drift_in_sort and st.kick_drift > 0 and not st.sort_detail["presorted_used"]


def test_first_forces_with_a_next_step_check_that_every_force_is_finite(tmp_path):
    """Two particles at one place with eps = 0: forces(next_dt) raises the in-core leapfrog's
    IntegrationError naming one of them (a step's first forces are checked before its kick)."""
    n = 2000
    p = gp.ic.plummer(n, seed=6)
    pos = p.pos.copy()
    pos[1500] = pos[700]
    q = gp.Particles(pos, p.vel, p.mass, p.id)
    with OutOfCore.from_particles(q, tmp_path, "64MiB", eps=0.0, threads=2, page_bytes=PAGE) as o:
        with pytest.raises(gp.errors.IntegrationError, match=r"particle (700|1500): its force is not finite"):
            o.forces(next_dt=1 / 64)


@pytest.mark.parametrize("threads,page", [(1, PAGE), (2, PAGE), (2, 3 * PAGE)])
def test_cells_paged_through_a_few_frames_bitwise_equal(tmp_path, threads, page):
    """With the fewest cell frames (the tree told to leave the rest of the budget free) the
    tree's cells do not fit their cache (a handful of frames for the 70 pages of cell records): the build,
    the moments and the walk read and write cell pages through it, and the forces still
    equal the in-core tree's bit for bit (also with pages that hold no power of two of
    particles or records), with the cells' read-ahead loading pages."""
    import gravpipe.ooc as ooc_mod
    n = 6000
    p = gp.ic.plummer(n, seed=3)
    a0, pot0 = gp.Tree(p.pos, p.mass, eps=EPS, threads=threads).forces()
    with pytest.raises(MemoryBudgetError) as e:
        plan_budget(n, 1 << 16, page, threads, 16)
    with OutOfCore.from_particles(p, tmp_path, int(e.value.least_budget), eps=EPS, threads=threads,
                                  page_bytes=page) as o:
        o.options.keep_free = 1 << 50
        st = o.forces()
        assert np.array_equal(o.gather("acc"), a0) and np.array_equal(o.gather("pot"), pot0)
        assert st.cell_cache_bytes < 0.6 * st.cells * 128  # not even the walk records fit
        assert st.cell_bytes_read > 0 and st.cell_bytes_written > 0  # cell pages really moved
        assert st.bytes_read > st.cell_bytes_read  # and are counted in the step's traffic
        c = st.cell_counters  # the walk's misses hinted the next pages: some came in ahead
        assert c["prefetched"] > 0 and c["pages_read"] >= c["prefetched"]



def test_cells_through_sets_of_slots_that_evict_bitwise_equal(tmp_path):
    """A cell cache of some sixty frames for ~290 pages of records: each reader's slots form
    eight-way sets (16 slots, two sets) whose pages are evicted and pinned again all through
    the walk, and the forces equal the in-core tree's bit for bit."""
    import gravpipe.ooc as ooc_mod
    n = 40_000
    p = gp.ic.plummer(n, seed=5)
    a0, pot0 = gp.Tree(p.pos, p.mass, eps=EPS, threads=2).forces()
    # the particles' cache fixed, and all but ~60 frames of the rest kept from the cells
    with OutOfCore.from_particles(p, tmp_path, 26_000_000, eps=EPS, threads=2, page_bytes=PAGE,
                                  cache_bytes=1_680_000) as o:
        o.options.keep_free = 24_000_000
        st = o.forces()
        frames, pages = st.cell_cache_bytes // PAGE, st.cells * 128 // PAGE
        assert 50 <= frames < pages // 2  # 16 slots a reader (3 readers), records not resident
        assert st.cell_bytes_read > 20 * pages * PAGE  # pages came and went many times
        assert np.array_equal(o.gather("acc"), a0) and np.array_equal(o.gather("pot"), pot0)

@pytest.mark.parametrize("threads", [1, 2])
def test_walk_prefetch_changes_no_bit_and_its_pages_are_used(tmp_path, threads):
    """The walk's prefetch (pages of each thread's next runs loaded ahead) moves I/O only:
    forces with it off, one run ahead and many runs ahead equal the in-core tree's bit for
    bit; with it on, the loads it made are counted as bytes read and most of them are used."""
    import gravpipe.ooc as ooc_mod
    n = 20_000  # ten runs of groups; a cache that holds a few runs' pages, not the walk's 320
    p = gp.ic.plummer(n, seed=5)
    a0, pot0 = gp.Tree(p.pos, p.mass, eps=EPS, threads=threads).forces()
    # the spare beyond the sort's and cells' room goes half to the particles' cache
    budget = _least(n, threads) + threads * ooc_mod.SORT_AND_CELLS_ROOM + 320 * PAGE
    with OutOfCore.from_particles(p, tmp_path, budget, eps=EPS, threads=threads, page_bytes=PAGE) as o:
        o.sort()
        o.store.materialize("key")  # the trees below read the keys' pages, which the sort left out
        q = o.params
        for runs in (0, 1, 4, 64):
            tree = _core.PagedTree(o.store._core, q["eps"], q["G"], q["theta"], q["quadrupole"], q["quad_tol"],
                                   q["n_leaf"], q["n_crit"], q["threads"], q["precision"], q["local_expansion"],
                                   q["isa"])
            tree.prefetch_runs = runs
            assert tree.prefetch_runs == runs
            o.store.evict_all()
            o.store.reset_stats()
            tree.self_forces()
            s = o.stats
            del tree
            assert np.array_equal(o.gather("acc"), a0) and np.array_equal(o.gather("pot"), pot0)
            assert s["misses"] > 0 and s["evictions"] > 0  # pages really moved
            if runs == 0:
                assert s["prefetched"] == 0
            else:
                assert s["prefetched"] > 0 and s["prefetch_hits"] > 0
                assert s["pages_read"] >= s["prefetched"]  # prefetched pages count as read
                assert s["bytes_read"] == s["pages_read"] * PAGE
        with pytest.raises(ValueError, match="prefetch_runs"):
            _core.PagedTree(o.store._core, q["eps"], q["G"], q["theta"], q["quadrupole"], q["quad_tol"],
                            q["n_leaf"], q["n_crit"], q["threads"], q["precision"], q["local_expansion"],
                            q["isa"]).prefetch_runs = -1


def test_flipped_bit_is_caught_with_the_walk_prefetch_loading_the_page(tmp_path):
    """A corrupt page that the walk's prefetch loads first still raises ChecksumError in the
    evaluation (the prefetch leaves the failed page to the compute thread's own pin)."""
    n = 20_000
    p = gp.ic.plummer(n, seed=9)
    o = OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 160 * PAGE, eps=EPS, threads=2, page_bytes=PAGE)
    try:
        o.sort()
        o.store.materialize("key")  # the tree below reads the keys' pages, which the sort left out
        o.store.evict_all()
        page = o.store.page_of("mass", 0, n // 2)  # read by the walk only (the moments read it first)
        q = o.params
        tree = _core.PagedTree(o.store._core, q["eps"], q["G"], q["theta"], q["quadrupole"], q["quad_tol"],
                               q["n_leaf"], q["n_crit"], q["threads"], q["precision"], q["local_expansion"],
                               q["isa"])
        tree.prefetch_runs = 64
        o.store.evict_all()  # the moments' pages gone: the walk loads them again
        _flip_a_bit(o.store.path, page * PAGE + 100)
        with pytest.raises(ChecksumError):
            tree.self_forces()
        del tree
    finally:
        o.close()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("in_sort", [False, True])
def test_flipped_bit_in_the_cell_file_raises_checksum_error(tmp_path, in_sort):
    """The tree's cells have a scratch file of their own, checked like the particles' pages:
    with a few cell frames the walk records are written back after the moments (or written
    whole by the build riding on the sort) and read again by the walk, and a corrupt one
    raises ChecksumError naming it, never wrong forces. The file then stays on the store's
    shelf for the next tree, which writes every page it reads (no error from the old bits),
    and goes with the store."""
    n = 6000
    p = gp.ic.plummer(n, seed=3)
    o = OutOfCore.from_particles(p, tmp_path, _least(n, 2), eps=EPS, threads=2, page_bytes=PAGE,
                                 sort_buffer=int(_core.least_sort_buffer(n)))
    try:
        q = o.params
        built = _core.StreamedTreeBuild(o.store._core, q["eps"], q["G"], q["theta"], q["quadrupole"], q["quad_tol"],
                                        q["n_leaf"], q["n_crit"], q["threads"]) if in_sort else None
        _core.store_sort_by_curve(o.store._core, o.carried, o.plan.sort_buffer, 2, tree=built)
        assert (built is not None and built.complete) == in_sort, built and built.declined
        tree = _core.PagedTree(o.store._core, q["eps"], q["G"], q["theta"], q["quadrupole"], q["quad_tol"],
                               q["n_leaf"], q["n_crit"], q["threads"], q["precision"], q["local_expansion"],
                               q["isa"], 1 << 50,  # keep the whole budget free: the fewest cell frames
                               built=built)
        del built
        cell_files = [f for f in os.listdir(tmp_path) if str(tmp_path / f) != o.store.path]
        assert len(cell_files) == 1
        path = str(tmp_path / cell_files[0])
        for page in range(os.path.getsize(path) // PAGE):  # every page written back so far
            _flip_a_bit(path, page * PAGE + 8)
        with pytest.raises(ChecksumError, match="walk records of cells"):
            tree.self_forces()
        del tree
        kept = sorted([os.path.basename(o.store.path), cell_files[0]])
        assert sorted(os.listdir(tmp_path)) == kept  # on the store's shelf
        o.store.materialize("key")  # the build from pages reads the keys
        again = _core.PagedTree(o.store._core, q["eps"], q["G"], q["theta"], q["quadrupole"], q["quad_tol"],
                                q["n_leaf"], q["n_crit"], q["threads"], q["precision"], q["local_expansion"],
                                q["isa"], 1 << 50)
        assert sorted(os.listdir(tmp_path)) == kept  # the same file, taken again
        again.self_forces()
        del again
    finally:
        o.close()
    assert os.listdir(tmp_path) == []


def test_a_tree_outliving_its_closed_store_is_safe(tmp_path):
    """An exception's traceback can hold the tree while a `with` block closes the store (a
    SIGTERM in the walk): calls on the tree then raise, and its destruction later touches no
    freed store; the scratch files go with the tree."""
    import gc
    n = 3000
    p = gp.ic.plummer(n, seed=4)
    o = OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 64 * PAGE, eps=EPS, threads=2, page_bytes=PAGE)
    o.forces()
    impl = o._impl  # what a traceback's frame would hold: the integrator, its tree and cells
    o.close()
    with pytest.raises(ValueError, match="closed"):
        impl.step(1 / 64)
    del impl
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_budget_too_small_names_the_least_budget(tmp_path):
    n = 5000
    least = _least(n, 1)
    with pytest.raises(MemoryBudgetError, match="least budget that works") as e:
        OutOfCore(n, tmp_path, least - 1, page_bytes=PAGE, threads=1)
    assert e.value.least_budget == least
    with OutOfCore(n, tmp_path, least, page_bytes=PAGE, threads=1):
        pass  # the least budget works
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_steps_at_the_least_budget_bitwise_equal_to_in_core(tmp_path, threads):
    """What this proves: the least budget plan_budget names is enough for whole steps, not
    just to open the store: at exactly that budget (the particles' cache its fewest frames,
    so each thread's lease soon holds its share and copies its blocks, which come out of the
    room kept beside the cells), leapfrog steps with the walk's runs and the tree built in
    the sort raise nothing, charge no more than the budget and equal the in-core leapfrog
    bit for bit. Each thread's copied blocks are planned for once (in the tree's room, not
    again in the fixed allowances), and bounded: a run's sinks and the one source piece
    being gathered, not an unbounded 4 MiB a thread."""
    import warnings

    import gravpipe.ooc as ooc_mod
    # the kick passes' blocks made small: their 4.5 MiB would hide a shortfall elsewhere (with
    # no room for copied blocks, 2 threads raise MemoryBudgetError at this budget: checked
    # by hand, so the test can fail)
    n, dt = 4000, 1 / 64
    p = gp.ic.plummer(n, seed=12)
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", eps=EPS, dt=dt, theta=0.6, threads=threads)
    sim.evolve(3 * dt)
    least = _least(n, threads, kick_block=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MemoryBudgetWarning)  # the walk's cache is thin: it warns
        o = OutOfCore.from_particles(p, tmp_path, least, eps=EPS, threads=threads, page_bytes=PAGE, kick_block=16)
    with o:
        o.options.presort, o.options.presort_run = True, 1024
        for _ in range(3):
            st = o.step(dt)
        # the tree's build rides on the sort where the permute leaves it room; at this least
        # budget of a small N it may not, and says so (then it builds after the sort)
        assert st.sort_detail["presorted_used"], st.sort_detail
        assert st.sort_detail["tree_in_sort"] or st.sort_detail["tree_declined"].startswith("the budget: ")
        assert o.store._core.budget_peak <= least
        # copies were made (the leases are full at this budget), and held within the bound
        # the budget plans for each thread: a run's sinks and one source piece
        assert 0 < st.copy_peak_bytes <= ooc_mod.copy_allowance(o.params["n_crit"], o.params["n_leaf"])
        assert np.array_equal(o.gather("pos"), sim.particles.pos)
        assert np.array_equal(o.gather("vel"), sim.particles.vel)
    assert os.listdir(tmp_path) == []


def test_budget_that_would_thrash_the_walk_warns_and_names_one_that_does_not():
    """Just above the least budget the particles' cache holds a few frames: the walk would
    re-read its pages many times a step, so the plan warns, naming a budget whose cache holds
    the walk's working set; that budget plans such a cache without a warning."""
    import warnings
    n = 200_000  # 391 pages of each column: more than the working set
    with pytest.warns(MemoryBudgetWarning, match="working set") as w:
        plan = plan_budget(n, _least(n, 2), PAGE, 2, 16)
    assert plan.cache < walk_least_cache(n, PAGE, 2)
    enough = int(str(w[0].message).split("(")[-1].split(" bytes")[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = plan_budget(n, enough, PAGE, 2, 16)
        assert plan.cache >= walk_least_cache(n, PAGE, 2)
        plan_budget(n, enough, PAGE, 2, 16, cache_bytes=8 * PAGE)  # a cache asked for: no warning
    # a store whose columns are fewer pages than the working set needs them all, no more
    assert walk_least_cache(5000, PAGE, 2) == 4 * 10 * PAGE


def test_flipped_bit_in_scratch_raises_checksum_error(tmp_path):
    n = 6000
    p = gp.ic.plummer(n, seed=9)
    o = OutOfCore.from_particles(p, tmp_path, _least(n, 1) + 32 * PAGE, eps=EPS, threads=1, page_bytes=PAGE)
    try:
        o.sort()
        o.store.evict_all()  # every page in the file, none in memory
        page = o.store.page_of("pos", 1, 3000)
        _flip_a_bit(o.store.path, page * PAGE + 100)
        with pytest.raises(ChecksumError):
            o.forces()
    finally:
        o.close()
    assert os.listdir(tmp_path) == []


def test_scratch_removed_when_filling_fails(tmp_path):
    p = gp.ic.plummer(1000, seed=1)
    pos = p.pos.copy()
    pos[700, 0] = np.nan  # past the first chunks: the store exists and has pages when it fails
    bad = SimpleNamespace(pos=pos, vel=p.vel, mass=p.mass, id=p.id)
    with pytest.raises(ValueError, match="finite"):
        OutOfCore.from_particles(bad, tmp_path, "32MiB", threads=2, page_bytes=PAGE, chunk=256)
    assert os.listdir(tmp_path) == []


def test_alpha_is_refused_out_of_core(tmp_path):
    with pytest.raises(TypeError):
        OutOfCore(100, tmp_path, "32MiB", alpha=0.01)  # not a parameter out of core


def _clumped(n: int, clump: int, seed: int) -> gp.Particles:
    """A cube with ``clump`` particles at each of n // clump points: equal keys, so leaves at
    the last level that hold more than n_leaf."""
    rng = np.random.default_rng(seed)
    pos = np.repeat(rng.random((n // clump, 3)), clump, axis=0)
    return gp.Particles(pos=pos[rng.permutation(n)], vel=np.zeros((n, 3)), mass=rng.random(n) / n)


@pytest.mark.parametrize("model,n,n_leaf,n_crit,declined", [
    ("plummer", 6000, 16, 256, ""),
    ("cube", 3000, 1, 4, ""),             # a leaf a particle: the deepest trees
    ("plummer", 6000, 64, 8, ""),         # groups smaller than leaves: every leaf a group
    ("plummer", 1500, 2048, 256, ""),     # the root is the one leaf
    ("clumped", 4000, 16, 64, ""),        # 40 equal keys a point: last-level leaves of 40
    ("clumped", 9000, 16, 256, "equal keys"),  # 9000 equal keys outgrow the build's window
])
def test_tree_built_in_the_sort_equals_the_tree_built_after_it(tmp_path, model, n, n_leaf, n_crit, declined):
    """What this proves: the cells, groups and moments that the sort builds as it writes the
    particles (streamed_tree_build.hpp: a count over the merge's keys, the records over the
    permute's particles) are those of the build that reads them back after the sort, and of
    the in-core tree: forces bitwise equal all three ways, across the octree's edge cases.
    A leaf of more equal keys than the build's window holds makes it decline, saying why,
    and the tree is built after the sort, with the same result."""
    p = {"plummer": lambda: gp.ic.plummer(n, seed=5), "cube": lambda: _cube(n, 7),
         "clumped": lambda: _clumped(n, 40 if n < 9000 else n, 3)}[model]()
    a0, pot0 = gp.Tree(p.pos, p.mass, eps=EPS, threads=2, n_leaf=n_leaf, n_crit=n_crit).forces()
    got = {}
    for in_sort in (True, False):
        budget = _least(n, 2, n_leaf) + 64 * PAGE + 4 * n * 40
        with OutOfCore.from_particles(p, tmp_path, budget, eps=EPS, threads=2, n_leaf=n_leaf, n_crit=n_crit,
                                      page_bytes=PAGE, sort_buffer=int(_core.least_sort_buffer(n))) as o:
            o.options.tree_in_sort = in_sort
            st = o.forces()
            assert st.sort_detail["runs"] >= 2  # the merge and the permute ran
            if in_sort:
                assert st.sort_detail["tree_in_sort"] == (not declined)
                assert declined in st.sort_detail["tree_declined"]
            else:
                assert "tree_in_sort" not in st.sort_detail
            # the cell cache, small during the sort, widened to what the budget has left
            got[in_sort] = (o.gather("acc"), o.gather("pot"), o.tree_stats.nodes, o.tree_stats.leaves,
                            o.tree_stats.groups, st.cell_cache_bytes)
    for a1, pot1, *_ in got.values():
        assert np.array_equal(a0, a1) and np.array_equal(pot0, pot1)
    assert got[True][2:] == got[False][2:]


def test_keys_left_out_of_the_sort_read_as_the_keys_it_would_have_written(tmp_path):
    """What this proves: with the tree built in the sort, the merge writes no keys to the disk;
    the store reads them as the curve keys of the positions in the sort's frame (its frame or
    the one the walk's runs were made in), the bits that a sort without the build writes;
    and a tree built from the pages (the diagnostic tree) first writes them into the key
    pages, which it reads, with the same potentials as from keys the merge wrote."""
    n, dt = 6000, 1 / 64
    p = gp.ic.plummer(n, seed=15)
    keys, pots = {}, {}
    for in_sort in (True, False):
        with OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 96 * PAGE, eps=EPS, threads=2,
                                      page_bytes=PAGE) as o:
            o.options.presort, o.options.presort_run, o.options.tree_in_sort = True, 1024, in_sort
            o.forces(next_dt=dt)
            steps = [o.step(dt) for _ in range(2)]
            assert all(st.sort_detail["runs"] > 1 and st.sort_detail["presorted_used"] for st in steps)
            assert all(st.sort_detail.get("tree_in_sort", False) == in_sort for st in steps)
            assert ("key" in o.store.derived) == in_sort
            keys[in_sort] = o.store.read("key", 0, n)
            if in_sort:  # not written by these steps' sorts: the pages hold an earlier order's
                assert not np.array_equal(o.store._core.read("key", 0, n), keys[True])
                assert o.store._core.stale("key")
                with pytest.raises(ValueError, match=r"left its keys out .*materialize\('key'\)"):
                    _core.PagedTree(o.store._core, EPS, 1.0, 0.6, True, 0.0, 16, 256, 2, "mixed", True)
            o.diagnostic_potential(0.4)
            assert "key" not in o.store.derived and not o.store._core.stale("key")
            assert np.array_equal(o.store._core.read("key", 0, n), keys[in_sort])
            pots[in_sort] = o.gather("pot_check")
    assert np.array_equal(keys[True], keys[False]) and np.all(np.diff(keys[True]) >= 0)
    assert np.array_equal(pots[True], pots[False])



def test_aio_contexts_and_cell_files_are_made_once_then_reused(tmp_path):
    """What this proves: the sort's merge and permute lanes, the walk's prefetch, the next
    sort's runs, the read-ahead and the cell files of each step's tree borrow their AIO
    contexts from the store's pool, and each step's tree writes its cells into the file the
    last tree left on the store's shelf: after the first step, further steps make no file
    (the unlink of the last one took ~45 ms) and contexts only where their passes overlap
    more than before (the pool grows to the most lent at once, a few at most; without it
    each step makes ~10, and each io_destroy waits ~20-55 ms for an RCU grace period), the
    scratch directory holds the same files, and the steps stay the in-core leapfrog's bit
    for bit."""
    n, dt = 6000, 1 / 64
    p = gp.ic.plummer(n, seed=16)
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", eps=EPS, dt=dt, threads=2)
    sim.evolve(4 * dt)
    with OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 96 * PAGE, eps=EPS, threads=2,
                                  page_bytes=PAGE) as o:
        o.options.presort, o.options.presort_run = True, 1024
        o.forces(next_dt=dt)
        o.step(dt)
        made, files = o.store.stats()["aio_contexts_made"], sorted(os.listdir(tmp_path))
        assert len(files) == 2  # the store's pages and the cells' (held by the tree)
        steps = []
        for _ in range(3):
            steps.append(o.step(dt))
            assert sorted(os.listdir(tmp_path)) == files
        assert all(st.sort_detail["runs"] > 1 and st.sort_detail["presorted_used"] for st in steps)
        assert all(st.sort_detail.get("tree_in_sort", False) for st in steps)
        if o.store.stats()["io_mode"] == "direct":  # else batches go a page at a time, with no AIO
            assert made > 0 and o.store.stats()["aio_contexts_made"] - made <= 3  # not ~10 a step
        assert np.array_equal(o.gather("pos"), sim.particles.pos)
        assert np.array_equal(o.gather("vel"), sim.particles.vel)
    assert os.listdir(tmp_path) == []  # the shelf's file goes with the store

def test_equal_keys_keep_the_in_core_order(tmp_path):
    """Particles sharing curve keys (groups of 8 within 1e-9 of one lattice point, far below
    a key cell): the external sort breaks ties by caller index as the in-core stable sort
    does, also after a drift has reordered the store, so forces and steps stay bitwise equal."""
    n, dt = 4096, 1 / 64
    rng = np.random.default_rng(4)
    lattice = np.repeat(rng.integers(0, 16, (n // 8, 3)) / 16.0, 8, axis=0)
    pos = lattice + 1e-9 * rng.random((n, 3))
    p = gp.Particles(pos=pos[rng.permutation(n)], vel=0.1 * rng.standard_normal((n, 3)), mass=np.full(n, 1.0 / n))
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", eps=0.05, dt=dt, theta=0.6, threads=2)
    sim.evolve(2 * dt)
    with OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 64 * PAGE, eps=0.05, threads=2, page_bytes=PAGE,
                                  sort_buffer=RUN * 1100) as o:
        o.step(dt)
        o.step(dt)
        pos1, vel1 = o.gather("pos"), o.gather("vel")
    assert np.array_equal(pos1, sim.particles.pos) and np.array_equal(vel1, sim.particles.vel)


def test_cells_built_in_the_sort_are_refused_by_a_tree_of_other_parameters(tmp_path):
    """The cells a sort built are for the tree they were made for: a tree of another theta
    is refused, naming why, and the cells stay for the right one; once taken they are gone,
    and a second tree says so."""
    n = 3000
    p = gp.ic.plummer(n, seed=1)
    a0, pot0 = gp.Tree(p.pos, p.mass, eps=EPS, threads=2, theta=0.5).forces()
    with OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 64 * PAGE, eps=EPS, threads=2, theta=0.5,
                                  page_bytes=PAGE, sort_buffer=int(_core.least_sort_buffer(n))) as o:
        q = o.params
        built = _core.StreamedTreeBuild(o.store._core, q["eps"], q["G"], q["theta"], q["quadrupole"], q["quad_tol"],
                                        q["n_leaf"], q["n_crit"], q["threads"])
        d = _core.store_sort_by_curve(o.store._core, o.carried, o.plan.sort_buffer, 2, tree=built)
        assert d["runs"] > 1 and built.complete and built.declined == ""
        def tree(theta):
            return _core.PagedTree(o.store._core, q["eps"], q["G"], theta, q["quadrupole"], q["quad_tol"],
                                   q["n_leaf"], q["n_crit"], q["threads"], q["precision"], q["local_expansion"],
                                   q["isa"], 0, built=built)
        with pytest.raises(ValueError, match="made with other parameters"):
            tree(0.6)
        t = tree(0.5)
        t.self_forces()
        del t
        assert np.array_equal(o.gather("acc"), a0) and np.array_equal(o.gather("pot"), pot0)
        with pytest.raises(RuntimeError, match="taken already"):
            tree(0.5)


def test_tree_api_out_of_core_equals_in_core(tmp_path):
    p = gp.ic.plummer(3000, seed=8)
    a0, pot0 = gp.Tree(p.pos, p.mass, eps=EPS, threads=2).forces()
    t = gp.Tree(p.pos, p.mass, eps=EPS, threads=2, memory_budget="48MiB", scratch=str(tmp_path))
    a1, pot1 = t.forces()
    assert np.array_equal(a0, a1) and np.array_equal(pot0, pot1)
    assert t.stats.pp_interactions > 0
    with pytest.raises(ValueError, match="self-gravity only"):
        t.forces(p.pos[:10])
    t.close()
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="go together"):
        gp.Tree(p.pos, p.mass, memory_budget="48MiB")


def test_cli_run_and_ic_out_of_core(tmp_path):
    from gravpipe.cli import main
    scratch, out = tmp_path / "scratch", tmp_path / "run"
    scratch.mkdir()
    ic = tmp_path / "ic.h5"
    assert main(["ic", "plummer", "-n", "3000", "--seed", "2", "-o", str(ic), "--memory-budget", "1MiB"]) == 0
    assert main(["run", str(ic), "--gravity", "tree", "--memory-budget", "48MiB", "--scratch", str(scratch),
                 "--dt", "1/64", "--t-end", "1/32", "--snap-every", "1/32", "--out", str(out), "--threads", "2",
                 "--page-bytes", "4096"]) == 0
    # as in core: snapshots at t0 + k * interval, a checkpoint at t_end (no interval given), the rows
    assert sorted(os.listdir(out)) == ["checkpoint_0001.h5", "diagnostics.csv", "manifest.json", "snapshot_0001.h5"]
    assert os.listdir(scratch) == []
    # the same two steps in core, compared particle by particle (the snapshot is in curve order)
    p, _ = gp.io.read(str(ic))
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", eps=1 / 64, dt=1 / 64, threads=2)
    sim.evolve(1 / 32)
    q, _ = gp.io.read(str(out / "snapshot_0001.h5"))
    order = np.argsort(q.id)
    ref = np.argsort(sim.particles.id)
    assert np.array_equal(q.pos[order], sim.particles.pos[ref])
    assert main(["run", "--gravity", "direct", "--memory-budget", "48MiB", "--scratch", str(scratch)]) == 2


def test_groups_beyond_the_plan_raise_memory_budget_error(tmp_path):
    """The budget plans ~1/48 groups a particle (the cells themselves are paged, however many
    there are); a tree with more groups than planned and no room for them stops with
    MemoryBudgetError naming the least budget (from the core's charge), never an OOM kill."""
    n = 6000
    p = gp.ic.plummer(n, seed=1)
    # plan for almost no groups, and little room for anything else
    limits = dict(groups_per_particle_at_256=1e-6, kick_block=16, keep_free=0)
    budget = _least(n, 1, **limits)
    with OutOfCore.from_particles(p, tmp_path, budget, eps=EPS, threads=1, page_bytes=PAGE,
                                  n_crit=16, **limits) as o:
        with pytest.raises(MemoryBudgetError, match="groups.*least budget that works") as e:
            o.forces()
        assert e.value.least_budget > budget
    assert os.listdir(tmp_path) == []


SORT_MEMORY_SCRIPT = textwrap.dedent("""
    import ctypes, json, sys
    import gravpipe as gp
    from gravpipe.ooc import OutOfCore
    def rss_mib():
        got = {}
        for line in open("/proc/self/status"):
            if line.startswith(("VmRSS", "VmHWM")):
                key, value = line.split(":")
                got[key] = int(value.split()[0]) / 1024
        return got["VmRSS"], got["VmHWM"]
    n, buffer = int(sys.argv[2]), int(sys.argv[3])
    p = gp.ic.plummer(n, seed=1)
    with OutOfCore.from_particles(p, sys.argv[1], "512MiB", threads=2, sort_buffer=buffer) as o:
        del p
        ctypes.CDLL(None).malloc_trim(0)  # freed memory back to the OS: RSS = what is in use
        before, _ = rss_mib()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        d = o.sort()
        _, peak = rss_mib()
    print(json.dumps({"runs": d["runs"], "grown_mib": peak - before, "tree_mib": d["tree_charged_bytes"] / 2**20}))
""")


def test_external_sort_stays_within_its_charged_buffer(tmp_path):
    """What this proves: the sort's memory is what the budget charges for it. The peak RSS
    during a sort of several runs (the OS's VmHWM, reset just before) exceeds the RSS before it
    by at most the charged sort buffer plus the run sources (2 bytes a particle) and the tree
    build riding on the permute, with 8 MiB
    of slack for buffers that do not grow with N; the runs' positions (24 bytes a particle of a run) used to stay allocated
    through the merge, outside the budget. Measured in a process of its own: in the test
    process the heap that earlier tests left behind moved the figure by ~7 MiB."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pytest.skip("cannot reset VmHWM (/proc/self/clear_refs) here")
    n, buffer = 2_000_000, RUN * 700_000  # several runs of <= 700k particles
    out = subprocess.run([sys.executable, "-c", SORT_MEMORY_SCRIPT, str(tmp_path), str(n), str(buffer)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout.strip().splitlines()[-1])
    assert d["runs"] >= 3
    # the sort buffer, the run sources, and what the tree's build that rides on the permute
    # charged (streamed_tree_build.hpp: its groups, its cells' fewest frames, its pages)
    assert d["tree_mib"] > 0
    charged = (buffer + 2 * n) / 2**20 + d["tree_mib"]
    # slack: the merge's and permute's chunk buffers (~3 MiB); the bug added 24 x 655360 B = 15 MiB
    assert d["grown_mib"] <= charged + 8, (d["grown_mib"], charged)


@pytest.mark.parametrize("where", ["adjacent", "far apart"])
def test_tree_over_a_store_out_of_curve_order_is_refused_naming_the_key(tmp_path, where):
    """What this proves: the out-of-core tree checks the keys' order as it counts its cells
    (the leaves partition the particles in curve order: a key below its predecessor, in a
    leaf or at a leaf's start, is caught) and refuses the store with an error naming the
    place and the remedy, rather than building a wrong tree."""
    n = 5000
    p = gp.ic.plummer(n, seed=3)
    with OutOfCore.from_particles(p, tmp_path, "64MiB", eps=EPS, threads=2, page_bytes=PAGE) as o:
        o.forces()  # sorted: the store is in curve order now
        keys = o.store.read("key", 0, n)
        assert np.all(np.diff(keys) >= 0)
        # two particles that differ in key, swapped: neighbours, or the first and the last
        i = int(np.flatnonzero(np.diff(keys) > 0)[n // 3 if where == "adjacent" else 0])
        j = i + 1 if where == "adjacent" else n - 1
        swapped = keys.copy()
        swapped[[i, j]] = swapped[[j, i]]
        o.store.write("key", 0, swapped)
        with pytest.raises(ValueError, match=r"not in curve order \(its key \d+ is below key \d+; sort it first"):
            _core.PagedTree(o.store._core, EPS, 1.0, 0.6, True, 0.0, 16, 256, 2, "mixed", True)


def _step_frame(before_lo, before_hi, after_lo, after_hi) -> tuple[list[float], float]:
    """The rule of a step's frame (curve_order.hpp, step_frame), in numpy: the old bounds
    grown by 1/256 of their largest extent while the new ones fit, else the new cube."""
    cells = float((1 << 21) - 1)
    room = np.ldexp(np.max(before_hi - before_lo), -8)
    lo, hi = before_lo - room, before_hi + room
    if not (np.all(after_lo >= lo) and np.all(after_hi <= hi)):
        lo, hi = after_lo, after_hi
    return list(lo), cells / np.max(hi - lo)


@pytest.mark.parametrize("kick", ["gentle", "one particle flung out"])
def test_a_step_keys_its_tree_in_a_frame_known_before_the_drift(tmp_path, kick):
    """What this proves: a leapfrog step's tree is keyed in the frame its drift's start
    gives (the old bounds with room), known before the last particle has moved, and in the
    new positions' own cube when one leaves that room; in core (the provider's frame) and
    out of core (the sort's frame) alike, and the steps stay equal bit for bit."""
    n, dt = 3000, 1 / 64
    p = gp.ic.plummer(n, seed=6)
    vel = p.vel.copy()
    if kick != "gentle":  # the outermost particle in x, outward by far more than the room in a step
        vel[int(np.argmax(p.pos[:, 0]))] = [500.0, 0.0, 0.0]
    p = gp.Particles(p.pos, vel, p.mass, p.id)
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", eps=EPS, dt=dt, threads=2)
    frames = [sim.provider.frame]
    bounds = [(p.pos.min(0), p.pos.max(0))]
    for _ in range(2):
        sim.evolve(sim.time + dt)
        frames.append(sim.provider.frame)
        bounds.append((sim.particles.pos.min(0), sim.particles.pos.max(0)))
    cells = float((1 << 21) - 1)
    assert frames[0] == (list(bounds[0][0]), cells / np.max(bounds[0][1] - bounds[0][0]))  # the first: tight
    for k in (1, 2):
        want = _step_frame(*bounds[k - 1], *bounds[k])
        assert frames[k][0] == want[0] and frames[k][1] == want[1]
    tight = frames[1][0] == list(bounds[1][0])
    assert tight == (kick != "gentle")  # the flung particle leaves the room
    with OutOfCore.from_particles(p, tmp_path, "64MiB", eps=EPS, threads=2, page_bytes=PAGE) as o:
        st = [o.forces()] + [o.step(dt) for _ in range(2)]
        for k in (1, 2):
            assert st[k].sort_detail["frame_lo"] == frames[k][0] and st[k].sort_detail["frame_scale"] == frames[k][1]
        assert np.array_equal(o.gather("pos"), sim.particles.pos) and np.array_equal(o.gather("vel"), sim.particles.vel)


def _presort_pair(tmp_path, p, dt, steps, between=None):
    """Two out-of-core runs of the same particles, the walk making the next sort's runs in
    one (presort) and not in the other; ``between(o)`` after the first step. Returns their
    steps' sort details and final (pos, vel) each."""
    out = []
    for presort in (True, False):
        d = tmp_path / f"presort{presort}"
        d.mkdir()
        with OutOfCore.from_particles(p, d, _least(len(p.mass), 2) + 96 * PAGE, eps=EPS, threads=2,
                                      page_bytes=PAGE) as o:
            o.options.presort, o.options.presort_run = presort, 1024  # several runs of a small store
            details = []
            for k in range(steps):
                o.store.reset_stats()
                details.append(o.step(dt).sort_detail)
                details[-1]["store"] = o.store.stats()
                if k == 0 and between is not None:
                    between(o)
            out.append((details, o.gather("pos"), o.gather("vel")))
    return out


def test_runs_made_during_the_walk_give_the_sorts_own_steps(tmp_path):
    """What this proves: the next sort's runs, made by a worker as the walk's closing kick
    completes each range (kick-drift, keys in the step's frame, twins), are used by the next
    sort, which then goes straight to its merge; the steps are the in-core leapfrog's bit for
    bit, as they are when the sort makes its runs itself."""
    n, dt = 6000, 1 / 64
    p = gp.ic.plummer(n, seed=10)
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", eps=EPS, dt=dt, threads=2)
    sim.evolve(4 * dt)
    (with_runs, pos1, vel1), (without, pos0, vel0) = _presort_pair(tmp_path, p, dt, 4)
    # the first forces (in the first step) made the first step's runs too
    assert [d["presorted_used"] for d in with_runs] == [True, True, True, True]
    assert with_runs[1]["runs"] > 1 and with_runs[1]["seconds_runs"] == 0
    # the worker read its runs (the pages no longer in a frame) and wrote their twins past
    # the cache frames
    walk_made = with_runs[1]["store"]
    assert walk_made["read_past"] > 0 and walk_made["written_through"] > 0
    assert not any(d["presorted_used"] for d in without)
    assert np.array_equal(pos1, sim.particles.pos) and np.array_equal(vel1, sim.particles.vel)
    assert np.array_equal(pos0, pos1) and np.array_equal(vel0, vel1)


def test_runs_made_during_the_walk_are_dropped_when_the_store_changes_or_a_particle_leaves(tmp_path):
    """What this proves: runs made during a walk are not used when the store was written
    since (here the velocities, halved through the store: the runs carry the old ones), nor
    when a drifted particle leaves the frame they were keyed in; the sort then makes its own,
    and the steps equal those of a run that never made any."""
    n, dt = 6000, 1 / 64
    p = gp.ic.plummer(n, seed=13)

    def halve_velocities(o):
        o.store.write("vel", 0, 0.5 * o.store.read("vel", 0, o.n))

    (tmp_path / "w").mkdir()
    (a, pos1, vel1), (_, pos0, vel0) = _presort_pair(tmp_path / "w", p, dt, 3, halve_velocities)
    assert [d["presorted_used"] for d in a] == [True, False, True]
    assert np.array_equal(pos0, pos1) and np.array_equal(vel0, vel1)
    vel = p.vel.copy()
    vel[int(np.argmax(p.pos[:, 0]))] = [0.4 / dt, 0, 0]  # out of the room in the second step
    q = gp.Particles(p.pos, vel, p.mass, p.id)
    (tmp_path / "f").mkdir()
    (b, pos1, vel1), (_, pos0, vel0) = _presort_pair(tmp_path / "f", q, dt, 3)
    assert b[1]["presorted_used"] is False and b[1]["kick_drift_applied"]
    assert np.array_equal(pos0, pos1) and np.array_equal(vel0, vel1)


def test_flipped_bit_in_a_page_the_walks_worker_reads_past_the_cache(tmp_path, monkeypatch):
    """What this proves: the pages the walk's worker reads straight from the file to make the
    next sort's runs (past the cache frames) are checked like any other page: a flipped bit
    in one raises ChecksumError naming it, from the step whose walk met it, and the runs are
    not used; the scratch file is removed."""
    n, dt = 6000, 1 / 64
    p = gp.ic.plummer(n, seed=10)
    import gravpipe.ooc as ooc_mod
    measure = ooc_mod._StageMeter.__call__
    armed, flipped = [], []

    def corrupt_after_the_sort(meter, stage):  # told where each stage of the step ends
        measure(meter, stage)
        if stage == "sort" and armed and not flipped:
            # after this step's sort: the index is read in this walk by the worker alone
            o.store.evict_all()
            flipped.append(o.store.page_of("index", 0, n // 2))
            _flip_a_bit(o.store.path, flipped[0] * PAGE + 8)

    monkeypatch.setattr(ooc_mod._StageMeter, "__call__", corrupt_after_the_sort)
    o = OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 96 * PAGE, eps=EPS, threads=2, page_bytes=PAGE)
    try:
        o.options.presort, o.options.presort_run = True, 1024
        o.forces()
        armed.append(True)
        o.store.reset_stats()
        with pytest.raises(ChecksumError, match=r"\(field 'index' component 0, particles .*is corrupt") as e:
            o.step(dt)
        assert e.value.page == flipped[0] and o.store.stats()["read_past"] > 0
        assert not o.prepared["runs"]
        del e  # its traceback holds the walk's tree (and its cell file) alive
    finally:
        o.close()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("field", ["key~", "vel~"])
def test_flipped_bit_met_by_the_merge_or_the_permute_lane_beside_it(tmp_path, field):
    """What this proves: while the merge runs, the permute's second lane (the velocities)
    follows it; a flipped bit in a run's page that the merge reads (key~) or that the lane
    reads (vel~) raises ChecksumError naming that page from the step, with neither side left
    waiting for the other, and the scratch file is removed."""
    n, dt = 6000, 1 / 64
    p = gp.ic.plummer(n, seed=11)
    o = OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 96 * PAGE, eps=EPS, threads=2, page_bytes=PAGE)
    try:
        o.options.presort, o.options.presort_run = True, 1024
        o.forces(next_dt=dt)
        st = o.step(dt)  # its sort's runs were made by the first walk
        assert st.sort_detail["presorted_used"] and st.sort_detail["permute_in_merge"]
        assert st.sort_detail["permute_lanes"] == 2
        o.store.evict_all()  # the next sort's runs, made by this walk, in the file only
        page = o.store.page_of(field, 0, n // 2)
        _flip_a_bit(o.store.path, page * PAGE + 8)
        with pytest.raises(ChecksumError, match=rf"\(field '{re.escape(field)}' component 0, .*is corrupt") as e:
            o.step(dt)
        assert e.value.page == page
        del e  # its traceback holds the walk's tree (and its cell file) alive
    finally:
        o.close()
    assert os.listdir(tmp_path) == []


CELLS_DISK_FULL = textwrap.dedent("""
    import os, resource, signal, sys, warnings
    import numpy as np
    import gravpipe as gp
    from gravpipe.errors import StoreError
    from gravpipe.ooc import MemoryBudgetWarning, OutOfCore
    scratch, budget, page, in_sort = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of a signal
    warnings.simplefilter("ignore", MemoryBudgetWarning)
    # tight pairs and leaves of one particle: a chain of cells splits each pair, so the
    # cells' file outgrows the particles' (about 6 cells a particle)
    half = gp.ic.plummer(12000, seed=10)
    p = gp.Particles(np.concatenate([half.pos, half.pos + 3e-5]), np.concatenate([half.vel, half.vel]),
                     np.concatenate([half.mass, half.mass]) / 2)
    with OutOfCore.from_particles(p, scratch, budget, eps=1e-2, threads=2, page_bytes=page, n_leaf=1) as o:
        o.options.tree_in_sort = in_sort
        o.options.presort, o.options.presort_run = True, 1024
        o.step(1 / 64)
        st = o.step(1 / 64)
        print("IN SORT", st.sort_detail.get("tree_in_sort", False))
        sizes = {f: os.path.getsize(os.path.join(scratch, f)) for f in os.listdir(scratch)}
        particles = sizes.pop(os.path.basename(o.store.path))
        # the 'disk' ends at twice the particles' file: every write to it still fits, the
        # cells' file does not
        limit = 2 * particles
        print("CELLS PAST THE LIMIT", max(sizes.values()) > limit)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        try:
            o.step(1 / 64)
            print("NO ERROR")
        except StoreError as e:
            print("ERROR", e)
    print("SCRATCH", os.listdir(scratch))
""")


@pytest.mark.parametrize("in_sort", [True, False], ids=["built_in_the_sort", "built_after_the_sort"])
def test_a_full_disk_while_the_cells_are_written(tmp_path, in_sort):
    """What this proves: when the scratch disk fills while the tree's cells are written (their
    own file refused, the particles' file not: EFBIG, the stand-in for a full disk), the step
    stops with StoreError naming the file, the page and the cells it holds, whether the cells
    were built as the sort wrote the particles (pages written whole from the build's thread)
    or after it (pages evicted from the cells' cache), and every scratch file is removed."""
    budget = _least(24000, 2, n_leaf=1) + 96 * PAGE
    r = subprocess.run([sys.executable, "-c", CELLS_DISK_FULL, str(tmp_path), str(budget), str(PAGE),
                        "1" if in_sort else "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"IN SORT {in_sort}" in r.stdout, r.stdout
    assert "CELLS PAST THE LIMIT True" in r.stdout, r.stdout
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("ERROR")), None)
    assert line is not None, r.stdout
    assert "EFBIG" in line and "writing page" in line and "of cells" in line, line
    assert "SCRATCH []" in r.stdout, r.stdout


RUNS_DISK_FULL = textwrap.dedent("""
    import os, resource, signal, sys
    import gravpipe as gp
    from gravpipe.errors import StoreError
    from gravpipe.ooc import OutOfCore
    scratch, budget, page = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of a signal
    p = gp.ic.plummer(6000, seed=10)
    with OutOfCore.from_particles(p, scratch, budget, eps=1e-2, threads=2, page_bytes=page) as o:
        o.options.presort, o.options.presort_run = True, 1024
        first = o.step(1 / 64)
        print("FIRST", first.sort_detail["presorted_used"], o.prepared["runs"])
        o.store.flush()  # the first walk's runs reach the file
        # the 'disk' now ends where the sort's twins begin (column-major pages: every field,
        # then every twin): the second sort reads the runs and writes below the limit; the
        # runs the second walk writes there cannot reach the file
        limit = o.store.page_of("pos~", 0, 0) * page
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        steps = []
        try:
            for _ in range(3):
                steps.append(o.step(1 / 64).sort_detail["presorted_used"])
            print("NO ERROR")
        except StoreError as e:
            print("STEPS", steps)
            print("ERROR", e)
    print("SCRATCH", os.listdir(scratch))
""")


def test_a_full_disk_while_the_walk_writes_the_next_sorts_runs(tmp_path):
    """What this proves: when the scratch disk fills while the walk's worker writes the next
    sort's runs (their twin pages refused: EFBIG, the stand-in for a full disk), the run stops
    with StoreError naming the file, the page, what it holds and the reason (in the walk, or
    in the next sort, which then meets the same refusal making its own runs), never hangs nor
    uses runs that did not reach the file, and the scratch file is removed."""
    budget = _least(6000, 2) + 96 * PAGE
    r = subprocess.run([sys.executable, "-c", RUNS_DISK_FULL, str(tmp_path), str(budget), str(PAGE)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "FIRST True True" in r.stdout, r.stdout  # the walks made runs for the first and second sorts
    # the error comes from the second walk (its worker writing a run's pages straight to the
    # file), or from the third step's sort making its own runs
    assert "STEPS []" in r.stdout or "STEPS [True]" in r.stdout, r.stdout
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("ERROR")), None)
    assert line is not None, r.stdout
    assert "EFBIG" in line and "writing page" in line and "~" in line, line
    assert "SCRATCH []" in r.stdout, r.stdout


def test_evolve_to_steps_the_in_core_leapfrogs_grid_in_one_call(tmp_path):
    """What this proves: the paged integrator's evolve_to keeps the in-core leapfrog's grid
    (whole steps of dt from the origin, an off-grid stop one shortened step that becomes the
    new origin, time = origin + steps * dt) within one call, its step state in the
    integrator: time, grid origin and particles equal the in-core run's bit for bit at every
    stop, and the Python wrapper gained no attribute while stepping."""
    n, dt = 3000, 1 / 64
    p = gp.ic.plummer(n, seed=21)
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", eps=EPS, dt=dt, theta=0.6, threads=2)
    with OutOfCore.from_particles(p, tmp_path, _least(n, 2) + 96 * PAGE, eps=EPS, threads=2, theta=0.6,
                                  page_bytes=PAGE, dt=dt) as o:
        o.options.presort_run = 1024
        attributes = set(vars(o))
        steps = []
        for t in (3 * dt, 4.5 * dt, 5.5 * dt, 7.25 * dt):
            steps.append(o.evolve_to(t).steps)
            sim.evolve(t, progress=False)
            assert (o.t, o.grid_origin) == (sim.time, sim.grid_origin), t
            assert np.array_equal(o.gather("pos"), sim.particles.pos), t
            assert np.array_equal(o.gather("vel"), sim.particles.vel), t
        # the last stop's shortened step: not the step the walk before it prepared
        assert steps == [3, 2, 1, 2] and not o.last.kick_drift_in_sort and o.last.kick_drift > 0
        assert set(vars(o)) == attributes
