"""The treecode on particles in the out-of-core store (gravpipe.tree.paged_forces).

References: the in-core Tree on the same particles (bit for bit: one tree code through two
accessors), a float64 numpy direct sum (the tree's error bounds), the store's counters
(paging really happens: a cache of a few pages for a set a hundred times larger).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from reference import direct_sum_f64

import gravpipe as gp
from gravpipe.errors import ChecksumError, MemoryBudgetError
from gravpipe.store import ParticleStore, from_particles

PAGE = 4096
CACHE = 24 * PAGE  # 24 frames for ~470 pages of pos, vel, mass, id, acc, pot at N = 20000


def small_store(p: gp.Particles, tmp_path, extra: int = 8_000_000):
    least = ParticleStore.least_budget(p.n, page_bytes=PAGE)
    return from_particles(p, tmp_path, memory_budget=least + CACHE + extra, page_bytes=PAGE, cache_bytes=CACHE)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("precision", ["mixed", "double"])
def test_paged_tree_equals_the_in_core_tree_bit_for_bit(tmp_path, threads, precision):
    p = gp.ic.plummer(20000, seed=2)
    acc, pot = gp.Tree(p.pos, p.mass, eps=1 / 64, threads=threads, precision=precision).forces()
    store, order = small_store(p, tmp_path)
    with store:
        store.evict_all()
        store.reset_stats()
        acc_p, pot_p, stats = gp.tree.paged_forces(store, eps=1 / 64, threads=threads, precision=precision)
        counters = store.stats()
    assert np.array_equal(acc_p, acc[order]) and np.array_equal(pot_p, pot[order])
    assert counters["evictions"] > 0 and counters["misses"] > 0
    assert counters["pages_read"] > counters["frames"]  # the same pages came back more than once
    assert stats.pp_interactions > 0 and stats.n_i == p.n


def test_paged_tree_meets_the_tree_error_bounds(tmp_path):
    """Independent of the in-core tree: against a float64 direct sum on a clustered set."""
    rng = np.random.default_rng(5)
    a, b = gp.ic.plummer(12000, seed=3), gp.ic.plummer(6000, seed=4)
    pos = np.vstack([a.pos, 0.3 * b.pos + [2.0, 0.0, 0.0]])
    p = gp.Particles(pos, np.zeros_like(pos), np.concatenate([a.mass, 0.5 * b.mass]) / 1.5)
    store, order = small_store(p, tmp_path)
    with store:
        acc_p, _, _ = gp.tree.paged_forces(store, eps=1 / 64)
    sample = rng.choice(p.n, 1000, replace=False)
    ref, _, _ = direct_sum_f64(p.pos, p.mass, p.pos[sample], 1 / 64, exclude=sample)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(p.n)
    err = np.linalg.norm(acc_p[inverse[sample]] - ref, axis=1) / np.linalg.norm(ref, axis=1)
    assert np.median(err) <= 3e-4 and np.percentile(err, 99) <= 1.5e-3


def test_a_flipped_bit_in_the_scratch_file_stops_the_evaluation(tmp_path):
    p = gp.ic.plummer(20000, seed=6)
    store, _ = small_store(p, tmp_path)
    with store:
        store.evict_all()
        page = store.page_of("pos", 0, 12345)
        fd = os.open(store.path, os.O_RDWR)
        try:
            byte = os.pread(fd, 1, page * PAGE + 77)
            os.pwrite(fd, bytes([byte[0] ^ 0x01]), page * PAGE + 77)
            os.fsync(fd)
        finally:
            os.close(fd)
        with pytest.raises(ChecksumError, match=f"page {page}"):
            gp.tree.paged_forces(store, eps=1 / 64)


def test_a_budget_too_small_for_the_tree_names_the_least_that_works(tmp_path):
    p = gp.ic.plummer(20000, seed=7)
    store, _ = small_store(p, tmp_path, extra=50_000)
    with store, pytest.raises(MemoryBudgetError, match="least budget that works"):
        gp.tree.paged_forces(store, eps=1 / 64)


def test_a_store_not_in_curve_order_is_refused(tmp_path):
    p = gp.ic.plummer(3000, seed=8)
    least = ParticleStore.least_budget(p.n, page_bytes=PAGE)
    with ParticleStore(tmp_path, p.n, memory_budget=least + 8_000_000, page_bytes=PAGE) as store:
        store.write("pos", 0, p.pos)  # caller order, not curve order
        store.write("mass", 0, p.mass)
        with pytest.raises(ValueError, match="not in curve order"):
            gp.tree.paged_forces(store, eps=1 / 64)
