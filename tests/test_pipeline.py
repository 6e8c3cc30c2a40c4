"""The force pipeline against an independent float64 numpy reference (tests/reference.py)."""

import numpy as np
import pytest
from conftest import clustered_set
from reference import direct_sum_f64, rel_rms

import gravpipe as gp
from gravpipe import _core

ISAS = _core.available_isas()
# Error bounds per mode (relative RMS over particles), as documented in gravpipe.pipeline.
BOUND = {"double": {"acc": 1e-12, "pot": 1e-12, "jerk": 1e-12},
         "mixed": {"acc": 1e-6, "pot": 1e-6, "jerk": 1e-5}}


def plummer_set(n, seed):
    p = gp.ic.plummer(n, seed=seed)
    return np.array(p.pos), np.array(p.vel), np.array(p.mass)


def self_forces(pos, vel, mass, eps, precision, isa="auto", threads=None, G=1.0):
    pipe = gp.Pipeline("cpu", precision, eps=eps, G=G, isa=isa, threads=threads)
    pipe.set_j(pos, mass, vel)
    return pipe.forces(pos, vel, exclude=np.arange(len(mass)))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("precision", ["double", "mixed"])
@pytest.mark.parametrize("make, eps", [(plummer_set, 1 / 64), (clustered_set, 1e-4), (clustered_set, 0.0)])
def test_accuracy_against_float64_reference(isa, precision, make, eps):
    seed = np.random.SeedSequence().entropy % 2**32  # fresh inputs every run
    pos, vel, mass = make(1500, seed)
    acc, jerk, pot = self_forces(pos, vel, mass, eps, precision, isa)
    ra, rp, rj = direct_sum_f64(pos, mass, pos, eps=eps, vel_j=vel, vel_i=vel, exclude=np.arange(len(mass)))
    b = BOUND[precision]
    assert rel_rms(acc, ra) <= b["acc"], f"seed {seed}"
    assert rel_rms(pot, rp) <= b["pot"], f"seed {seed}"
    assert rel_rms(jerk, rj) <= b["jerk"], f"seed {seed}"


@pytest.mark.parametrize("precision", ["double", "mixed"])
@pytest.mark.parametrize("shift", [1.0, 1e3, -1e5])
def test_translation_does_not_change_forces(precision, shift):
    pos, vel, mass = clustered_set(1200, 7)
    moved = pos + np.array([shift, -0.5 * shift, 0.25 * shift])
    acc, jerk, pot = self_forces(moved, vel, mass, 1e-4, precision)
    # Reference from the translated coordinates themselves (adding the shift rounds them).
    ra, rp, rj = direct_sum_f64(moved, mass, moved, eps=1e-4, vel_j=vel, vel_i=vel, exclude=np.arange(len(mass)))
    b = BOUND[precision]
    scale = 1.0 if precision == "mixed" else abs(shift)  # double: positions carry |shift| * 1e-16
    assert rel_rms(acc, ra) <= b["acc"] * scale
    assert rel_rms(jerk, rj) <= b["jerk"] * scale


@pytest.mark.parametrize("precision", ["double", "mixed"])
def test_results_identical_for_any_thread_count(precision):
    pos, vel, mass = plummer_set(1000, 3)
    one = self_forces(pos, vel, mass, 0.01, precision, threads=1)
    two = self_forces(pos, vel, mass, 0.01, precision, threads=2)
    again = self_forces(pos, vel, mass, 0.01, precision, threads=2)
    for a, b, c in zip(one, two, again):
        assert np.array_equal(a, b) and np.array_equal(b, c)


@pytest.mark.parametrize("isa", [isa for isa in ISAS if isa != "generic"])
def test_isas_agree_within_bound(isa):
    pos, vel, mass = clustered_set(800, 11)
    fast = self_forces(pos, vel, mass, 1e-3, "mixed", isa)
    slow = self_forces(pos, vel, mass, 1e-3, "mixed", "generic")
    assert rel_rms(fast[0], slow[0]) < 2e-6


def test_simd_isas_agree_bitwise_in_double():
    """avx512 and avx2 do the same correctly rounded operations per lane in the same order
    (one kernel template), so double precision gives identical bits; any difference would
    mean a lane or an exclusion mask went wrong in one of them."""
    simd = [isa for isa in ISAS if isa != "generic"]
    if len(simd) < 2:
        pytest.skip(f"one SIMD instruction set here ({simd})")
    pos, vel, mass = clustered_set(700, 12)
    first = self_forces(pos, vel, mass, 1e-3, "double", simd[0])
    for isa in simd[1:]:
        for a, b in zip(first, self_forces(pos, vel, mass, 1e-3, "double", isa)):
            assert np.array_equal(a, b), isa


@pytest.mark.parametrize("precision", ["double", "mixed"])
@pytest.mark.parametrize("n_i", [1, 7, 8, 9, 33])
def test_separate_i_set_and_partial_vectors(precision, n_i):
    rng = np.random.default_rng(n_i)
    pos_j, mass_j = rng.normal(size=(300, 3)), rng.random(300)
    pos_i = rng.normal(size=(n_i, 3))
    pipe = gp.Pipeline("cpu", precision, eps=0.05, G=2.5)
    pipe.set_j(pos_j, mass_j)
    acc, pot = pipe.forces(pos_i)
    ra, rp, _ = direct_sum_f64(pos_j, mass_j, pos_i, eps=0.05, G=2.5)
    assert rel_rms(acc, ra) <= BOUND[precision]["acc"]
    assert rel_rms(pot, rp) <= BOUND[precision]["pot"]


def test_exclusion_only_removes_the_named_pair():
    rng = np.random.default_rng(5)
    pos, mass = rng.normal(size=(100, 3)), rng.random(100)
    exclude = np.full(100, -1)
    exclude[::3] = rng.integers(0, 100, size=len(exclude[::3]))
    pipe = gp.Pipeline("cpu", "double", eps=0.1)
    pipe.set_j(pos, mass)
    acc, pot = pipe.forces(pos, exclude=exclude)
    ra, rp, _ = direct_sum_f64(pos, mass, pos, eps=0.1, exclude=exclude)
    assert rel_rms(acc, ra) < 1e-13 and rel_rms(pot, rp) < 1e-13
    assert pipe.stats.interactions == 100 * 100 - np.count_nonzero(exclude >= 0)


def test_two_body_analytic():
    pos = np.array([[0.0, 0, 0], [2.0, 0, 0]])
    acc, pot = gp.accel(pos, [3.0, 1.0], eps=0.0, G=1.0, precision="double")
    assert np.allclose(acc, [[0.25, 0, 0], [-0.75, 0, 0]], rtol=1e-15)
    assert np.allclose(pot, [-0.5, -1.5], rtol=1e-15)


def test_jerk_is_time_derivative_of_acceleration():
    pos, vel, mass = clustered_set(200, 2)
    h = 1e-6
    acc, jerk, _ = self_forces(pos, vel, mass, 0.05, "double")
    a_plus = self_forces(pos + h * vel, vel, mass, 0.05, "double")[0]
    a_minus = self_forces(pos - h * vel, vel, mass, 0.05, "double")[0]
    assert rel_rms(jerk, (a_plus - a_minus) / (2 * h)) < 1e-6


def test_stats_count_work_and_reset():
    pos, vel, mass = plummer_set(256, 1)
    pipe = gp.Pipeline("cpu", "mixed", eps=0.01)
    pipe.set_j(pos, mass, vel)
    pipe.forces(pos[:100], vel[:100])
    s = pipe.stats
    assert (s.calls, s.interactions, s.j_particles, s.i_particles) == (1, 100 * 256, 256, 100)
    assert s.bytes_j_write == 256 * 64 and s.bytes_i_write == 100 * 56 and s.bytes_result_read == 100 * 56
    assert s.seconds_compute > 0 and s.interactions_per_second > 0
    pipe.reset_stats()
    assert pipe.stats.interactions == 0


def test_coincident_particles_without_softening_is_an_error():
    pos = np.array([[0.0, 0, 0], [0.0, 0, 0], [1.0, 0, 0]])
    with pytest.raises(ValueError, match="coincides"):
        gp.accel(pos, [1.0, 1.0, 1.0], eps=0.0)
    acc, _ = gp.accel(pos, [1.0, 1.0, 1.0], eps=0.1)  # softened: finite
    assert np.isfinite(acc).all()


def test_backend_selection_is_explicit():
    pipe = gp.Pipeline()
    backends = gp.available_backends()
    best = "cuda" if backends["cuda"].available else "cpu"  # auto: the best this machine has
    assert pipe.backend == best
    assert "isa=" in gp.Pipeline("cpu").backend_detail
    assert backends["cpu"].available
    if not backends["cuda"].available:
        with pytest.raises(gp.BackendUnavailableError, match="'cuda'"):
            gp.Pipeline(backend="cuda")
    with pytest.raises(ValueError, match="backend"):
        gp.Pipeline(backend="opencl")


@pytest.mark.parametrize("kwargs, match", [
    ({"eps": -1.0}, "eps"), ({"eps": float("nan")}, "eps"), ({"precision": "half"}, "precision"),
    ({"G": 0.0}, "G"), ({"threads": 0}, "threads"), ({"isa": "sse9"}, "isa"),
])
def test_bad_pipeline_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gp.Pipeline("cpu", **kwargs)


def test_bad_force_arguments():
    pipe = gp.Pipeline("cpu", "mixed", eps=0.1)
    with pytest.raises(ValueError, match="set_j"):
        pipe.forces(np.zeros((2, 3)))
    good = np.random.default_rng(0).normal(size=(10, 3))
    with pytest.raises(ValueError, match="pos: expected shape"):
        pipe.set_j(good[:, :2], np.ones(10))
    with pytest.raises(ValueError, match="mismatched lengths"):
        pipe.set_j(good, np.ones(9))
    bad = good.copy()
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match="pos: non-finite value nan at index 4"):
        pipe.set_j(bad, np.ones(10))
    with pytest.raises(ValueError, match="mass: negative"):
        pipe.set_j(good, -np.ones(10))
    with pytest.raises(ValueError, match="empty"):
        pipe.set_j(np.zeros((0, 3)), np.zeros(0))
    with pytest.raises(ValueError, match="mixed-precision range"):
        pipe.set_j(good * 1e20, np.ones(10))
    pipe.set_j(good, np.ones(10))
    with pytest.raises(ValueError, match="pos_i: non-finite"):
        pipe.forces(bad)
    with pytest.raises(ValueError, match="empty"):
        pipe.forces(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="exclude: index 10 at position 0"):
        pipe.forces(good, exclude=np.full(10, 10))
    with pytest.raises(ValueError, match="exclude: expected shape"):
        pipe.forces(good, exclude=np.arange(3))
    with pytest.raises(ValueError, match="vel_i: jerk needs j-particle velocities"):
        pipe.forces(good, vel_i=good)
    with pytest.raises(ValueError, match="mismatched lengths: pos_i has 10, vel_i has 3"):
        pipe.forces(good, vel_i=good[:3])


def test_accel_matches_pipeline_and_permutation():
    pos, _, mass = plummer_set(700, 9)
    acc, pot = gp.accel(pos, mass, eps=0.02)
    perm = np.random.default_rng(1).permutation(len(mass))
    acc_p, pot_p = gp.accel(pos[perm], mass[perm], eps=0.02)
    assert rel_rms(acc_p, acc[perm]) < 1e-6 and rel_rms(pot_p, pot[perm]) < 1e-6
