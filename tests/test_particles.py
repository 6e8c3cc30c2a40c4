"""Tests of the Particles container: validation at the boundary and ownership of arrays.

The contract (DESIGN.md, "bad input gets a clear error, never a wrong answer"): every bad
input raises ValueError naming the field and, where it applies, the first offending index.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gravpipe.particles import Particles


def valid(n: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3)), rng.standard_normal((n, 3)), rng.random(n) + 0.1


# --- a valid set ---------------------------------------------------------------------

def test_valid_input_is_stored_as_float64_and_int64():
    pos, vel, mass = valid(6)
    p = Particles(pos, vel, mass)
    assert len(p) == p.n == 6
    assert p.pos.dtype == p.vel.dtype == p.mass.dtype == np.float64
    assert p.id.dtype == np.int64
    np.testing.assert_array_equal(p.pos, pos)
    np.testing.assert_array_equal(p.vel, vel)
    np.testing.assert_array_equal(p.mass, mass)
    assert p.total_mass == pytest.approx(mass.sum(), rel=1e-15)


def test_ids_default_to_arange():
    p = Particles(*valid(7))
    np.testing.assert_array_equal(p.id, np.arange(7))
    assert p.id.dtype == np.int64


def test_lists_and_integer_arrays_are_converted():
    p = Particles([[0, 0, 0], [1, 2, 3]], np.zeros((2, 3), dtype=np.int32), [1, 2])
    assert p.pos.dtype == np.float64 and p.vel.dtype == np.float64 and p.mass.dtype == np.float64
    np.testing.assert_array_equal(p.pos[1], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(p.mass, [1.0, 2.0])


def test_massless_tracers_are_allowed_when_total_is_positive():
    pos, vel, _ = valid(3)
    p = Particles(pos, vel, [0.0, 0.0, 1.0])
    assert p.total_mass == 1.0


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64, np.int8])
def test_integer_ids_of_any_width_are_accepted(dtype):
    ids = np.array([9, 3, 0, 100, 7], dtype=dtype)
    p = Particles(*valid(5), id=ids)
    assert p.id.dtype == np.int64
    np.testing.assert_array_equal(p.id, ids.astype(np.int64))


def test_largest_int64_id_fits_from_uint64():
    big = np.iinfo(np.int64).max
    p = Particles(*valid(2), id=np.array([0, big], dtype=np.uint64))
    assert int(p.id[1]) == big


# --- ownership: read-only, never aliasing the caller ---------------------------------

def test_arrays_are_read_only_and_fields_frozen():
    p = Particles(*valid())
    for field in ("pos", "vel", "mass", "id"):
        arr = getattr(p, field)
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[0] = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.pos = np.zeros((5, 3))


def test_arrays_do_not_alias_the_callers_arrays():
    # float64 C-contiguous input is the case where np.ascontiguousarray would hand back
    # the caller's own array; the container must still copy it.
    pos, vel, mass = valid()
    ids = np.arange(10, 15, dtype=np.int64)
    p = Particles(pos, vel, mass, id=ids)
    for mine, theirs in ((p.pos, pos), (p.vel, vel), (p.mass, mass), (p.id, ids)):
        assert not np.shares_memory(mine, theirs)
        assert theirs.flags.writeable  # the caller's array is not frozen
    before = p.pos.copy()
    pos[:] = 99.0
    ids[0] = 12345
    np.testing.assert_array_equal(p.pos, before)
    assert p.id[0] == 10


def test_copy_is_independent():
    p = Particles(*valid())
    q = p.copy()
    assert q is not p
    for field in ("pos", "vel", "mass", "id"):
        assert not np.shares_memory(getattr(p, field), getattr(q, field))
        np.testing.assert_array_equal(getattr(p, field), getattr(q, field))


# --- non-finite values ---------------------------------------------------------------

@pytest.mark.parametrize("field", ["pos", "vel", "mass"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_name_field_and_first_index(field, bad):
    arrays = dict(zip(("pos", "vel", "mass"), valid(8)))
    arr = arrays[field]
    if arr.ndim == 2:
        arr[3, 1] = bad
        arr[6, 0] = bad  # a later bad row must not be the one reported
    else:
        arr[3] = bad
        arr[6] = bad
    with pytest.raises(ValueError, match=rf"^{field}\b.*index 3\b"):
        Particles(**arrays)


@pytest.mark.parametrize("field", ["pos", "vel"])
@pytest.mark.parametrize("bad", [1e300, -3.2e151, 1.7976931348623157e308])
def test_values_beyond_the_arithmetic_name_field_index_and_particle(field, bad):
    """Finite but huge (a flipped exponent byte, garbage): squared in the kernels they
    overflow, and the run failed far away with "force is not finite ... eps = 0?"."""
    arrays = dict(zip(("pos", "vel", "mass"), valid(8)))
    arrays[field][5, 2] = bad
    arrays[field][7, 0] = bad
    with pytest.raises(ValueError, match=rf"^{field}: value .* at index 5 \(particle id 105\) exceeds 1e\+150"):
        Particles(**arrays, id=np.arange(100, 108))
    arrays[field][5, 2] = arrays[field][7, 0] = 1e149  # within float64's range
    Particles(**arrays)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), data=st.data())
def test_first_non_finite_row_is_reported(n, data):
    rows = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4))
    pos, vel, mass = valid(n)
    pos[rows, data.draw(st.integers(0, 2))] = np.nan
    with pytest.raises(ValueError, match=rf"^pos\b.*index {min(rows)}\b"):
        Particles(pos, vel, mass)


# --- shapes and lengths --------------------------------------------------------------

@pytest.mark.parametrize("field, shape", [
    ("pos", (5, 2)), ("pos", (5, 4)), ("pos", (15,)), ("pos", (5, 3, 1)),
    ("vel", (5, 2)), ("vel", (3, 5)), ("vel", (5,)),
    ("mass", (5, 1)), ("mass", (1, 5)), ("mass", ()),
])
def test_wrong_shape_names_the_field(field, shape):
    arrays = dict(zip(("pos", "vel", "mass"), valid(5)))
    arrays[field] = np.ones(shape)
    with pytest.raises(ValueError, match=rf"^{field}\b.*shape"):
        Particles(**arrays)


def test_ragged_input_names_the_field():
    _, vel, mass = valid(2)
    with pytest.raises(ValueError, match=r"^pos\b"):
        Particles([[0.0, 0.0, 0.0], [1.0, 1.0]], vel, mass)


@pytest.mark.parametrize("field, value", [
    ("pos", np.zeros((5, 3), dtype=complex)),
    ("vel", np.full((5, 3), "a")),
    ("mass", np.ones(5, dtype=bool)),
])
def test_non_real_dtypes_are_refused(field, value):
    arrays = dict(zip(("pos", "vel", "mass"), valid(5)))
    arrays[field] = value
    with pytest.raises(ValueError, match=rf"^{field}\b"):
        Particles(**arrays)


@pytest.mark.parametrize("lengths", [(5, 4, 5), (5, 5, 6), (3, 5, 5)])
def test_mismatched_lengths_are_reported_with_each_length(lengths):
    n_pos, n_vel, n_mass = lengths
    pos, vel, mass = valid(max(lengths))
    with pytest.raises(ValueError, match="mismatched lengths") as err:
        Particles(pos[:n_pos], vel[:n_vel], mass[:n_mass])
    msg = str(err.value)
    assert f"pos has {n_pos}" in msg and f"vel has {n_vel}" in msg and f"mass has {n_mass}" in msg


def test_empty_set_is_refused():
    with pytest.raises(ValueError, match=r"N = 0"):
        Particles(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0))


def test_flat_empty_lists_are_refused():
    with pytest.raises(ValueError, match=r"^pos\b"):
        Particles([], [], [])


# --- masses --------------------------------------------------------------------------

def test_negative_mass_names_first_index():
    pos, vel, mass = valid(6)
    mass[[2, 4]] = -1.0
    with pytest.raises(ValueError, match=r"^mass\b.*negative.*index 2\b"):
        Particles(pos, vel, mass)


def test_zero_total_mass_is_refused():
    pos, vel, _ = valid(4)
    with pytest.raises(ValueError, match=r"^mass\b.*total mass is zero"):
        Particles(pos, vel, np.zeros(4))


def test_negative_zero_mass_is_not_negative():
    pos, vel, _ = valid(2)
    p = Particles(pos, vel, [-0.0, 1.0])
    assert p.total_mass == 1.0


# --- ids -----------------------------------------------------------------------------

@pytest.mark.parametrize("ids, index", [
    ([0, 1, 2, 1, 4], 3),
    ([5, 7, 7, 5, 9], 2),   # both 7 (index 2) and 5 (index 3) repeat: the earliest repeat wins
    ([4, 3, 2, 1, 4], 4),
    ([-1, 8, 9, 10, -1], 4),
])
def test_duplicate_ids_name_the_later_occurrence(ids, index):
    with pytest.raises(ValueError, match=rf"^id\b.*duplicate.*index {index}\b"):
        Particles(*valid(5), id=ids)


@pytest.mark.parametrize("ids", [
    np.arange(4.0),                     # float, even if integral
    np.array([True, False, True, False, True]),
    np.arange(4),                       # wrong length
    np.arange(10).reshape(5, 2),        # wrong shape
    7,                                  # scalar
])
def test_bad_id_arrays_name_id(ids):
    with pytest.raises(ValueError, match=r"^id\b"):
        Particles(*valid(5), id=ids)


def test_uint64_id_beyond_int64_is_refused():
    ids = np.array([0, 1, 2**63, 3, 2**64 - 1], dtype=np.uint64)
    with pytest.raises(ValueError, match=r"^id\b.*index 2\b"):
        Particles(*valid(5), id=ids)
