"""The curve-order module (cpp/include/gravpipe/curve_order.hpp), which the pipeline, the
tree, the out-of-core pages and the MPI domains sort with: Peano-Hilbert keys against a
level-by-level numpy implementation of Hamilton's construction written here, and against
what makes a curve a Hilbert curve (every grid cell once, each next to the one before, the
top 3L bits naming the level-L octree cell); the sort against numpy's stable argsort, for
every thread count and on both sides of the size where the comparison sort hands over to
the parallel radix sort."""

from __future__ import annotations

import numpy as np
import pytest

from gravpipe import _core

BITS = 21
TOP = (1 << BITS) - 1


def grid_cells(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Cell q = floor((x - lo) * (2^21 - 1) / side) per axis, clamped to the grid (uint64 (n, 3))."""
    side = float(np.max(hi - lo))
    scale = TOP / side if side > 0 else 0.0
    return np.clip((pos - lo) * scale, 0, TOP).astype(np.uint64)


def morton_of_cells(q: np.ndarray) -> np.ndarray:
    """Bit b of axis a goes to bit 3b + a."""
    keys = np.zeros(len(q), dtype=np.uint64)
    for b in range(BITS):
        for a in range(3):
            keys |= ((q[:, a] >> np.uint64(b)) & np.uint64(1)) << np.uint64(3 * b + a)
    return keys


def _rotate_right3(v: np.ndarray, r: np.ndarray) -> np.ndarray:
    r = r % 3
    return ((v >> r) | (v << (3 - r))) & 7


def _rotate_left3(v: np.ndarray, r: np.ndarray) -> np.ndarray:
    r = r % 3
    return ((v << r) | (v >> (3 - r))) & 7


def _trailing_ones(i: int) -> int:
    return len(bin(i)) - len(bin(i).rstrip("1"))


# Hamilton (2006), "Compact Hilbert indices": the entry corner e(w) and direction d(w) of the
# w-th sub-cube, n = 3
ENTRY = np.array([0] + [(2 * ((w - 1) // 2)) ^ (2 * ((w - 1) // 2) >> 1) for w in range(1, 8)])
DIRECTION = np.array([0] + [_trailing_ones(w - 1 if w % 2 == 0 else w) % 3 for w in range(1, 8)])


def hilbert_reference(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Keys one level at a time from the top: the octant digit l (x bit 0, y bit 1, z bit 2)
    through the state (entry corner e, direction d) to the Hilbert digit w, which sets the
    child's state; the root's state is e = 0, d = 0."""
    q = grid_cells(pos, lo, hi).astype(np.int64)
    e = np.zeros(len(q), dtype=np.int64)
    d = np.zeros(len(q), dtype=np.int64)
    keys = np.zeros(len(q), dtype=np.uint64)
    for b in range(BITS - 1, -1, -1):
        digit = ((q[:, 0] >> b) & 1) | (((q[:, 1] >> b) & 1) << 1) | (((q[:, 2] >> b) & 1) << 2)
        t = _rotate_right3(digit ^ e, d + 1)
        w = t ^ (t >> 1) ^ (t >> 2)  # inverse Gray code
        e = e ^ _rotate_left3(ENTRY[w], d + 1)
        d = (d + DIRECTION[w] + 1) % 3
        keys = (keys << np.uint64(3)) | w.astype(np.uint64)
    return keys


def test_keys_match_the_level_by_level_construction():
    rng = np.random.default_rng(1)
    pos = rng.normal(size=(5000, 3)) * [1.0, 3.0, 0.5] + 10.0
    lo, hi = pos.min(axis=0), pos.max(axis=0)
    assert np.array_equal(_core.curve_keys(pos, lo, hi), hilbert_reference(pos, lo, hi))


@pytest.mark.parametrize("level", [1, 2, 3, 5])
def test_the_curve_visits_every_cell_of_a_grid_once_each_next_to_the_one_before(level):
    m = 1 << level
    centres = (np.arange(m) + 0.5) / m
    pos = np.array(np.meshgrid(centres, centres, centres, indexing="ij")).reshape(3, -1).T.copy()
    keys = _core.curve_keys(pos, np.zeros(3), np.ones(3))
    assert len(np.unique(keys)) == m**3
    path = np.rint(pos[np.argsort(keys)] * m - 0.5).astype(int)
    assert (np.abs(np.diff(path, axis=0)).sum(axis=1) == 1).all()  # face neighbours, no jumps


def test_the_top_bits_name_the_octree_cell():
    """At every level, two points share their key's top 3L bits exactly when they share the
    level-L octree cell (the Morton prefix): the tree's cells are ranges of the sorted keys."""
    rng = np.random.default_rng(3)
    pos = rng.random((20000, 3)) ** 3  # clustered towards a corner: cells at many depths
    lo, hi = np.zeros(3), np.ones(3)
    keys = _core.curve_keys(pos, lo, hi)
    morton = morton_of_cells(grid_cells(pos, lo, hi))
    for level in range(1, 8):
        shift = np.uint64(63 - 3 * level)
        pairs = np.unique(np.stack([keys >> shift, morton >> shift]), axis=1)
        assert len(np.unique(pairs[0])) == len(np.unique(pairs[1])) == pairs.shape[1], level


def test_keys_of_corners_and_of_points_outside_the_box():
    lo, hi = np.zeros(3), np.ones(3)
    corners = np.array([[i & 1, (i >> 1) & 1, (i >> 2) & 1] for i in range(8)], dtype=float)
    keys = _core.curve_keys(corners, lo, hi)
    assert keys[0] == 0  # the curve starts at the box's lower corner
    last = corners[np.argmax(keys)]
    assert keys.max() == (1 << 63) - 1 and np.abs(last).sum() == 1  # and ends at a corner next to it
    outside = np.array([[-5, 0, 0], [2, 0, 0], [0.5, 9, -1]], dtype=float)
    inside = np.clip(outside, 0, 1)
    assert np.array_equal(_core.curve_keys(outside, lo, hi), _core.curve_keys(inside, lo, hi))


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
    want = np.argsort(hilbert_reference(pos, pos.min(axis=0), pos.max(axis=0)), kind="stable")
    for threads in (1, 2):
        assert np.array_equal(_core.curve_order(pos, threads), want)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_keys_of_a_position_that_is_not_finite_raise_naming_it(bad):
    """A NaN would otherwise key as the box's corner (0) and sort silently into place."""
    pos = np.random.default_rng(1).random((10, 3))
    pos[7, 1] = bad
    with pytest.raises(ValueError, match="position 7 is not finite"):
        _core.curve_keys(pos, np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match="position 7 is not finite"):
        _core.curve_keys_in_frame(pos, np.zeros(3), 1000.0)


def test_keys_in_a_frame_are_the_keys_of_its_cube():
    """A frame given as its corner and scale (as a sort reports it) keys positions as the cube
    it stands for: the unit cube's frame is the corner 0 and 2^21 - 1 cells a unit."""
    pos = np.random.default_rng(2).random((1000, 3))
    want = _core.curve_keys(pos, np.zeros(3), np.ones(3))
    assert np.array_equal(_core.curve_keys_in_frame(pos, np.zeros(3), float((1 << 21) - 1)), want)
