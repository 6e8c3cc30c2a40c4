"""Physics tests of the initial conditions against analytic models.

Every reference value below is written from the model's equations, not taken from
gravpipe.ic: the Plummer profile and distribution function, the self-energy of a uniform
sphere and of a uniform cube, and a float64 direct sum (tests/reference.py) for W.
Seeds are fixed, so each statistical test passes or fails deterministically; the
thresholds are the 99.9% critical values of the Kolmogorov-Smirnov statistic or about
4-5 standard deviations of the sampling noise measured over many seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from gravpipe import ic
from reference import direct_sum_f64

SEED = 20240501

# Plummer model in Henon units: E = -3 pi G M^2 / (64 a) = -1/4 with G = M = 1 gives
# a = 3 pi / 16; M(<r) = M r^3 / (r^2 + a^2)^(3/2); phi(r) = -G M / sqrt(r^2 + a^2).
A_PLUMMER = 3.0 * np.pi / 16.0

# Mean inverse distance between two uniform points of the unit cube (closed form from
# cube line picking; checked against a 3-D quadrature of prod(1 - |t_k|) / |t|):
# 2/5 (1 + sqrt2 - 2 sqrt3) - 2 pi/3 + 2 ln(1 + sqrt2) + 4 ln((1 + sqrt3)/sqrt2) = 1.88231...
_S2, _S3 = np.sqrt(2.0), np.sqrt(3.0)
CUBE_MEAN_INV_DIST = (0.4 * (1 + _S2 - 2 * _S3) - 2 * np.pi / 3 + 2 * np.log(1 + _S2)
                      + 4 * np.log((1 + _S3) / _S2))


# --- helpers (independent of gravpipe) -----------------------------------------------

def ks_critical(n: int, confidence: float = 0.999) -> float:
    """Exact critical value of the one-sample KS statistic for n samples."""
    return float(stats.kstwo.ppf(confidence, n))


def energies(p, G: float = 1.0) -> tuple[float, float]:
    """(K, W) in float64; W = 0.5 G sum_i m_i pot_i from the reference direct sum."""
    n = len(p.mass)
    _, pot, _ = direct_sum_f64(p.pos, p.mass, p.pos, eps=0.0, G=G, exclude=np.arange(n))
    kinetic = 0.5 * float(np.sum(p.mass[:, None] * p.vel * p.vel))
    return kinetic, 0.5 * float(np.sum(p.mass * pot))


def centre_of_mass(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    return (m[:, None] * x).sum(axis=0) / m.sum()


def assert_basic_layout(p, n: int, total_mass: float) -> None:
    assert p.pos.shape == (n, 3) and p.vel.shape == (n, 3) and p.mass.shape == (n,)
    assert p.pos.dtype == np.float64 and p.vel.dtype == np.float64 and p.mass.dtype == np.float64
    np.testing.assert_array_equal(p.id, np.arange(n))
    np.testing.assert_allclose(p.mass, total_mass / n, rtol=1e-15)
    assert p.mass.sum() == pytest.approx(total_mass, rel=1e-12)


# --- Plummer -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plummer_large():
    return ic.plummer(20000, seed=SEED)


@pytest.fixture(scope="module")
def plummer_4096():
    p = ic.plummer(4096, seed=SEED)
    return p, energies(p)


def test_plummer_mass_profile_matches_analytic(plummer_large):
    p = plummer_large
    r = np.linalg.norm(p.pos, axis=1)
    cdf = lambda x: x**3 / (x * x + A_PLUMMER**2) ** 1.5  # noqa: E731
    d = stats.kstest(r, cdf).statistic
    assert d < ks_critical(len(r)), f"KS statistic {d:.4f} vs Plummer M(<r) with a = 3 pi / 16"


def test_plummer_respects_documented_mass_cutoff(plummer_large):
    # Radii are drawn from m(r) < 0.999, i.e. r < a / sqrt(0.999^(-2/3) - 1) = 22.80.
    r_cut = A_PLUMMER / np.sqrt(0.999 ** (-2.0 / 3.0) - 1.0)
    assert r_cut == pytest.approx(22.80, abs=0.01)
    r_max = np.linalg.norm(plummer_large.pos, axis=1).max()
    m_max = r_max**3 / (r_max**2 + A_PLUMMER**2) ** 1.5
    # The outermost particle lies just inside the cut: with 20000 draws, the chance that
    # none falls in the last 0.1% of mass before it is exp(-20). The upper slack covers the
    # centre-of-mass shift (~0.01 in r, ~1e-6 in m).
    assert 0.998 < m_max < 0.99901


def test_plummer_speeds_follow_distribution_function(plummer_large):
    # For the Plummer DF f(E) ~ (-E)^(7/2), q = v / v_esc(r) has density ~ q^2 (1 - q^2)^(7/2)
    # at every r, i.e. q^2 ~ Beta(3/2, 9/2); v_esc = sqrt(-2 phi(r)) from the analytic phi.
    p = plummer_large
    r = np.linalg.norm(p.pos, axis=1)
    v_esc = np.sqrt(2.0 / np.sqrt(r * r + A_PLUMMER**2))
    q2 = np.sum(p.vel * p.vel, axis=1) / v_esc**2
    d = stats.kstest(q2, stats.beta(1.5, 4.5).cdf).statistic
    assert d < ks_critical(len(q2)), f"KS statistic {d:.4f} of q^2 vs Beta(3/2, 9/2)"


def test_plummer_is_isotropic(plummer_large):
    p = plummer_large
    r = np.linalg.norm(p.pos, axis=1)
    # Position directions: cos(theta) uniform on [-1, 1].
    d = stats.kstest(p.pos[:, 2] / r, stats.uniform(-1, 2).cdf).statistic
    assert d < ks_critical(len(r))
    # Velocity anisotropy beta = 1 - K_t / (2 K_r) = 0 for an isotropic DF; its sampling
    # noise at n = 20000 is ~0.01.
    v_r = np.sum(p.pos * p.vel, axis=1) / r
    k_r = np.sum(p.mass * v_r**2)
    k_t = np.sum(p.mass * np.sum(p.vel * p.vel, axis=1)) - k_r
    assert abs(1.0 - k_t / (2.0 * k_r)) < 0.04


def test_plummer_virial_equilibrium(plummer_4096):
    # 2K/|W| over 40 seeds at n = 4096: mean 1.001, std 0.011.
    _, (kinetic, potential) = plummer_4096
    assert 2.0 * kinetic / abs(potential) == pytest.approx(1.0, abs=0.05)


def test_plummer_total_energy_is_henon_units(plummer_4096):
    # E over 40 seeds at n = 4096: mean -0.2502, std 0.0045 (1.8%).
    _, (kinetic, potential) = plummer_4096
    assert kinetic + potential == pytest.approx(-0.25, rel=0.07)


def test_plummer_centre_of_mass_and_masses(plummer_4096):
    p, _ = plummer_4096
    assert_basic_layout(p, 4096, 1.0)
    assert np.abs(centre_of_mass(p.pos, p.mass)).max() < 1e-12
    assert np.abs(centre_of_mass(p.vel, p.mass)).max() < 1e-12


def test_plummer_G_and_mass_scale_energy():
    # Same length scale, velocities ~ sqrt(G M): E = -G M^2 / 4 and still 2K/|W| = 1.
    G, mass = 2.0, 3.0
    p = ic.plummer(2048, seed=SEED, G=G, mass=mass)
    assert_basic_layout(p, 2048, mass)
    kinetic, potential = energies(p, G=G)
    assert 2.0 * kinetic / abs(potential) == pytest.approx(1.0, abs=0.07)
    assert kinetic + potential == pytest.approx(-G * mass**2 / 4.0, rel=0.1)
    r = np.linalg.norm(p.pos, axis=1)
    cdf = lambda x: x**3 / (x * x + A_PLUMMER**2) ** 1.5  # noqa: E731
    assert stats.kstest(r, cdf).statistic < ks_critical(len(r))


@pytest.mark.parametrize("make", [
    lambda s: ic.plummer(500, seed=s),
    lambda s: ic.uniform_sphere(500, seed=s, virial_ratio=0.3),
    lambda s: ic.uniform_cube(500, seed=s, virial_ratio=0.3),
], ids=["plummer", "sphere", "cube"])
def test_same_seed_same_bits_different_seed_different(make):
    a, b, c = make(7), make(7), make(8)
    for field in ("pos", "vel", "mass", "id"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.pos, c.pos)
    assert not np.array_equal(a.vel, c.vel)


def test_seed_none_draws_fresh_samples():
    assert not np.array_equal(ic.plummer(64).pos, ic.plummer(64).pos)


# --- uniform sphere ------------------------------------------------------------------

def test_uniform_sphere_is_homogeneous_and_inside():
    radius, n = 2.5, 5000
    p = ic.uniform_sphere(n, seed=SEED, radius=radius, mass=2.0)
    assert_basic_layout(p, n, 2.0)
    r = np.linalg.norm(p.pos, axis=1)
    assert r.max() <= radius * (1 + 1e-12)
    # M(<r) = M (r/R)^3: (r/R)^3 is uniform on [0, 1].
    assert stats.kstest((r / radius) ** 3, "uniform").statistic < ks_critical(n)
    assert stats.kstest(p.pos[:, 0] / r, stats.uniform(-1, 2).cdf).statistic < ks_critical(n)
    assert np.abs(centre_of_mass(p.pos, p.mass)).max() < 1e-12 * radius
    np.testing.assert_array_equal(p.vel, 0.0)  # cold collapse by default


def test_uniform_sphere_virial_ratio():
    radius, mass, q, n = 2.0, 3.0, 0.5, 2000
    p = ic.uniform_sphere(n, seed=SEED, radius=radius, mass=mass, virial_ratio=q)
    kinetic, potential = energies(p)
    # The realised W scatters around -(3/5) G M^2 / R (std ~0.4% at n = 2000).
    assert potential == pytest.approx(-0.6 * mass**2 / radius, rel=0.02)
    assert 2.0 * kinetic / abs(potential) == pytest.approx(q, rel=0.02)
    assert np.abs(centre_of_mass(p.vel, p.mass)).max() < 1e-12
    # Isotropic velocities: each Cartesian component carries a third of the kinetic energy.
    share = np.sum(p.mass[:, None] * p.vel**2, axis=0) / (2.0 * kinetic)
    np.testing.assert_allclose(share, 1.0 / 3.0, atol=0.03)


def test_uniform_sphere_single_particle_at_origin():
    p = ic.uniform_sphere(1, seed=SEED, radius=3.0, mass=5.0)
    np.testing.assert_array_equal(p.pos, 0.0)
    np.testing.assert_array_equal(p.vel, 0.0)
    assert p.mass.tolist() == [5.0]


def test_small_n_stays_inside():
    for n in (2, 3, 5):
        for seed in range(20):
            s = ic.uniform_sphere(n, seed=seed)
            c = ic.uniform_cube(n, seed=seed, side=2.0)
            assert np.linalg.norm(s.pos, axis=1).max() <= 1 + 1e-12
            assert np.abs(c.pos).max() <= 1 + 1e-12
            assert np.abs(s.pos.mean(axis=0)).max() < 1e-12
            assert np.abs(c.pos.mean(axis=0)).max() < 1e-12


# --- uniform cube --------------------------------------------------------------------

def test_uniform_cube_is_homogeneous_and_inside():
    side, n = 3.0, 5000
    p = ic.uniform_cube(n, seed=SEED, side=side)
    assert_basic_layout(p, n, 1.0)
    assert np.abs(p.pos).max() <= 0.5 * side * (1 + 1e-12)
    for k in range(3):
        d = stats.kstest(p.pos[:, k], stats.uniform(-0.5 * side, side).cdf).statistic
        assert d < ks_critical(n), f"axis {k}: KS statistic {d:.4f}"
    assert np.abs(centre_of_mass(p.pos, p.mass)).max() < 1e-12 * side
    np.testing.assert_array_equal(p.vel, 0.0)


def test_uniform_cube_virial_ratio_is_exact():
    side, mass, q, n = 2.0, 1.5, 0.7, 1500
    p = ic.uniform_cube(n, seed=SEED, side=side, mass=mass, virial_ratio=q)
    kinetic, potential = energies(p)
    # W of the continuous cube is -(1/2) G M^2 <1/r> / side; the sample scatters ~1%.
    assert potential == pytest.approx(-0.5 * mass**2 * CUBE_MEAN_INV_DIST / side, rel=0.04)
    # The cube is scaled with its own realised W, so Q holds to rounding.
    assert 2.0 * kinetic / abs(potential) == pytest.approx(q, rel=1e-10)
    assert np.abs(centre_of_mass(p.vel, p.mass)).max() < 1e-12


def test_uniform_cube_large_n_cold_is_fine_but_virial_is_refused():
    n = ic.CUBE_VIRIAL_MAX_N + 1
    assert ic.uniform_cube(n, seed=1).n == n
    with pytest.raises(ValueError, match=rf"^n\b.*{ic.CUBE_VIRIAL_MAX_N}"):
        ic.uniform_cube(n, seed=1, virial_ratio=0.5)


# --- argument validation -------------------------------------------------------------

@pytest.mark.parametrize("func, kwargs, name", [
    (ic.plummer, {"n": 1}, "n"),
    (ic.plummer, {"n": 0}, "n"),
    (ic.plummer, {"n": -5}, "n"),
    (ic.plummer, {"n": 100.0}, "n"),
    (ic.plummer, {"n": True}, "n"),
    (ic.plummer, {"n": "100"}, "n"),
    (ic.plummer, {"n": None}, "n"),
    (ic.plummer, {"n": 100, "G": 0.0}, "G"),
    (ic.plummer, {"n": 100, "G": -1.0}, "G"),
    (ic.plummer, {"n": 100, "mass": 0.0}, "mass"),
    (ic.plummer, {"n": 100, "mass": float("nan")}, "mass"),
    (ic.plummer, {"n": 100, "mass": float("inf")}, "mass"),
    (ic.uniform_sphere, {"n": 0}, "n"),
    (ic.uniform_sphere, {"n": 2.5}, "n"),
    (ic.uniform_sphere, {"n": 1, "virial_ratio": 0.5}, "n"),
    (ic.uniform_sphere, {"n": 10, "radius": 0.0}, "radius"),
    (ic.uniform_sphere, {"n": 10, "radius": -1.0}, "radius"),
    (ic.uniform_sphere, {"n": 10, "radius": float("nan")}, "radius"),
    (ic.uniform_sphere, {"n": 10, "mass": -2.0}, "mass"),
    (ic.uniform_sphere, {"n": 10, "virial_ratio": -0.1}, "virial_ratio"),
    (ic.uniform_sphere, {"n": 10, "virial_ratio": float("inf")}, "virial_ratio"),
    (ic.uniform_sphere, {"n": 10, "virial_ratio": 0.5, "G": 0.0}, "G"),
    (ic.uniform_cube, {"n": -1}, "n"),
    (ic.uniform_cube, {"n": 1, "virial_ratio": 1.0}, "n"),
    (ic.uniform_cube, {"n": 10, "side": 0.0}, "side"),
    (ic.uniform_cube, {"n": 10, "side": float("inf")}, "side"),
    (ic.uniform_cube, {"n": 10, "mass": 0.0}, "mass"),
    (ic.uniform_cube, {"n": 10, "virial_ratio": -1.0}, "virial_ratio"),
    (ic.plummer, {"n": 10, "seed": -1}, "seed"),
    (ic.uniform_sphere, {"n": 10, "seed": 1.5}, "seed"),
    (ic.uniform_cube, {"n": 10, "seed": "abc"}, "seed"),
])
def test_bad_arguments_name_the_argument(func, kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        func(**kwargs)


def test_numpy_integer_n_is_accepted():
    assert ic.plummer(np.int64(16), seed=1).n == 16
    assert ic.uniform_cube(np.uint32(4), seed=1).n == 4
