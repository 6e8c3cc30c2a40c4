"""The curve-order module (cpp/include/gravpipe/curve_order.hpp), which the pipeline and the
tree sort with: Morton keys against a bit-by-bit numpy interleave written here, and the sort
against numpy's stable argsort, for every thread count and on both sides of the size where
the comparison sort hands over to the parallel radix sort."""

from __future__ import annotations

import numpy as np
import pytest

from gravpipe import _core

BITS = 21
TOP = (1 << BITS) - 1


def morton_reference(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Keys from the definition: cell q = floor((x - lo) * (2^21 - 1) / side) per axis
    (clamped to the grid), bit b of axis a goes to bit 3b + a."""
    side = float(np.max(hi - lo))
    scale = TOP / side if side > 0 else 0.0
    q = np.clip((pos - lo) * scale, 0, TOP).astype(np.uint64)
    keys = np.zeros(len(pos), dtype=np.uint64)
    for b in range(BITS):
        for a in range(3):
            keys |= ((q[:, a] >> np.uint64(b)) & np.uint64(1)) << np.uint64(3 * b + a)
    return keys


def test_keys_match_the_bit_interleave():
    rng = np.random.default_rng(1)
    pos = rng.normal(size=(5000, 3)) * [1.0, 3.0, 0.5] + 10.0
    lo, hi = pos.min(axis=0), pos.max(axis=0)
    assert np.array_equal(_core.curve_keys(pos, lo, hi), morton_reference(pos, lo, hi))


def test_keys_of_corners_and_of_points_outside_the_box():
    lo, hi = np.zeros(3), np.ones(3)
    pts = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [-5, 0, 0], [2, 0, 0]], dtype=float)
    x = int("001" * BITS, 2)  # bits 0, 3, 6, ...
    want = [0, x, x << 1, x << 2, (1 << 63) - 1, 0, x]
    assert _core.curve_keys(pts, lo, hi).tolist() == want


@pytest.mark.parametrize("n", [0, 1, 100, 3071, 3072, 5000, 70000, 200000])
def test_sort_is_numpys_stable_argsort_for_any_thread_count(n):
    rng = np.random.default_rng(n)
    keys = rng.integers(0, max(1, n // 4), size=n, dtype=np.uint64)  # many equal keys
    keys[: n // 2] |= np.uint64(1) << np.uint64(62)  # digits of every pass differ
    want = np.argsort(keys, kind="stable")
    for threads in (1, 2, 3):
        order, sorted_keys = _core.sort_keys(keys, threads)
        assert order.dtype == np.int64 and np.array_equal(order, want), threads
        assert np.array_equal(sorted_keys, keys[want])


def test_sort_of_a_compact_set_skips_the_constant_digits():
    """Keys sharing their high bits (one small region of a big box) take the passes that
    move nothing as skipped; the order is still the stable one."""
    rng = np.random.default_rng(7)
    keys = (np.uint64(0x5A5) << np.uint64(50)) + rng.integers(0, 5000, size=100000, dtype=np.uint64)
    order, _ = _core.sort_keys(keys, 2)
    assert np.array_equal(order, np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("n", [50, 4096, 100000])
def test_curve_order_sorts_positions_in_their_bounding_cube(n):
    rng = np.random.default_rng(n)
    pos = rng.normal(size=(n, 3))
    pos[n // 2:] = pos[: n - n // 2]  # coincident pairs: equal keys, kept in index order
    want = np.argsort(morton_reference(pos, pos.min(axis=0), pos.max(axis=0)), kind="stable")
    for threads in (1, 2):
        assert np.array_equal(_core.curve_order(pos, threads), want)
