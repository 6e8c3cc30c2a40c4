"""Diagnostics against analytic results and independent references.

Potentials come from tests/reference.py (direct float64 sum written from the equations),
so most of these tests do not depend on the compiled core; the ones that let
``potential_energy`` call ``gravpipe.accel`` say so in their name.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference import direct_sum_f64

from gravpipe import diagnostics as dg
from gravpipe.particles import Particles


def _pot(p: Particles, eps: float = 0.0, G: float = 1.0) -> np.ndarray:
    _, pot, _ = direct_sum_f64(p.pos, p.mass, p.pos, eps=eps, G=G, exclude=np.arange(p.n))
    return pot


def _directions(rng, n: int) -> np.ndarray:
    v = rng.normal(size=(n, 3))
    return v / np.linalg.norm(v, axis=1)[:, None]


def _plummer_positions(rng, n: int, a: float) -> np.ndarray:
    """Plummer sphere of scale radius a from the inverse of M(r)/M = r^3 / (r^2 + a^2)^(3/2)."""
    x = rng.random(n) * (1.0 - 1e-6)  # cut the last 1e-6 of the mass: r stays finite
    r = a / np.sqrt(x ** (-2.0 / 3.0) - 1.0)
    return r[:, None] * _directions(rng, n)


# --------------------------------------------------------------------------------------
# two bodies on a circular orbit: everything is analytic


def _binary(m1=0.7, m2=0.3, d=1.3, G=1.0, boost=(0.0, 0.0, 0.0), shift=(0.0, 0.0, 0.0)) -> Particles:
    """Circular binary in the x-y plane about its centre of mass, then shifted and boosted."""
    M = m1 + m2
    v = np.sqrt(G * M / d)  # relative orbital speed
    pos = np.array([[-m2 / M * d, 0, 0], [m1 / M * d, 0, 0]]) + np.asarray(shift)
    vel = np.array([[0, -m2 / M * v, 0], [0, m1 / M * v, 0]]) + np.asarray(boost)
    return Particles(pos, vel, [m1, m2])


@pytest.mark.parametrize("G", [1.0, 2.5])
def test_circular_binary_energies(G):
    m1, m2, d = 0.7, 0.3, 1.3
    p = _binary(m1, m2, d, G)
    k_exact = 0.5 * G * m1 * m2 / d
    w_exact = -G * m1 * m2 / d
    e = dg.energy(p, eps=0.0, G=G, pot=_pot(p, G=G))
    assert e.kinetic == pytest.approx(k_exact, rel=1e-14)
    assert e.potential == pytest.approx(w_exact, rel=1e-14)
    assert e.total == pytest.approx(-0.5 * G * m1 * m2 / d, rel=1e-14)
    assert e.total == e.kinetic + e.potential
    assert dg.kinetic_energy(p) == e.kinetic
    assert dg.virial_ratio(p, 0.0, G, pot=_pot(p, G=G)) == pytest.approx(1.0, rel=1e-14)


def test_circular_binary_momenta_and_centre():
    m1, m2, d = 0.7, 0.3, 1.3
    mu, M = m1 * m2 / (m1 + m2), m1 + m2
    p = _binary(m1, m2, d)
    np.testing.assert_allclose(dg.linear_momentum(p), 0.0, atol=1e-15)
    np.testing.assert_allclose(dg.center_of_mass(p), 0.0, atol=1e-15)
    np.testing.assert_allclose(dg.angular_momentum(p), [0, 0, mu * np.sqrt(M * d)], rtol=1e-14, atol=1e-15)

    # shifted and boosted: P = M v_b, x_cm = x_0, L = L_orbit + M x_0 x v_b
    x0, vb = np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.1, -0.2])
    q = _binary(m1, m2, d, boost=vb, shift=x0)
    np.testing.assert_allclose(dg.linear_momentum(q), M * vb, rtol=1e-14)
    np.testing.assert_allclose(dg.center_of_mass(q), x0, rtol=1e-14)
    l_exact = np.array([0, 0, mu * np.sqrt(M * d)]) + M * np.cross(x0, vb)
    np.testing.assert_allclose(dg.angular_momentum(q), l_exact, rtol=1e-13, atol=1e-15)
    # the internal energy does not care where the pair is or how fast it moves as a whole
    k_internal = dg.kinetic_energy(q) - 0.5 * M * vb @ vb
    assert k_internal == pytest.approx(0.5 * m1 * m2 / d, rel=1e-12)


def test_softened_binary_potential():
    m1, m2, d, eps = 0.7, 0.3, 1.3, 0.4
    p = _binary(m1, m2, d)
    w = dg.potential_energy(p, eps, pot=_pot(p, eps=eps))
    assert w == pytest.approx(-m1 * m2 / np.sqrt(d * d + eps * eps), rel=1e-14)


def test_potential_energy_with_gravpipe_accel():
    """Without ``pot`` the potential comes from gravpipe.accel in double precision."""
    m1, m2, d, eps = 0.7, 0.3, 1.3, 0.4
    p = _binary(m1, m2, d)
    w_exact = -2.0 * m1 * m2 / np.sqrt(d * d + eps * eps)
    assert dg.potential_energy(p, eps, G=2.0) == pytest.approx(w_exact, rel=1e-12)

    rng = np.random.default_rng(5)
    q = Particles(rng.normal(size=(300, 3)), rng.normal(size=(300, 3)), rng.random(300))
    w_ref = dg.potential_energy(q, 0.01, pot=_pot(q, 0.01))
    assert dg.potential_energy(q, 0.01) == pytest.approx(w_ref, rel=1e-12)


# --------------------------------------------------------------------------------------
# a uniform sphere: W = -3 G M^2 / (5 R)


def test_uniform_sphere_potential_energy():
    """N particles of mass M/N drawn from a uniform sphere have <W> = -(3/5) G M^2/R (1 - 1/N).

    Radii are stratified (one per mass shell of M/N) so the radial sampling noise that
    dominates a random draw (~0.5 % at this N) is gone; the rest is < 0.05 % (six seeds
    measured), so a 0.2 % tolerance fails only for a real error.
    """
    n, R, M, G = 3000, 2.0, 1.0, 1.5
    rng = np.random.default_rng(11)
    r = R * np.cbrt((np.arange(n) + 0.5) / n)
    p = Particles(r[:, None] * _directions(rng, n), np.zeros((n, 3)), np.full(n, M / n))
    w = dg.potential_energy(p, 0.0, G=G, pot=_pot(p, G=G))
    assert w == pytest.approx(-0.6 * G * M * M / R * (1 - 1 / n), rel=2e-3)


# --------------------------------------------------------------------------------------
# Lagrangian radii


def _shells(radii, rng) -> np.ndarray:
    """One antipodal pair per radius: the centre of mass is exactly the origin."""
    u = _directions(rng, len(radii))
    return np.concatenate([radii[:, None] * u, -radii[:, None] * u])


def test_lagrangian_radii_of_known_shells():
    rng = np.random.default_rng(2)
    n_pairs = 500
    radii = rng.permutation(np.arange(1, n_pairs + 1) / n_pairs)  # 0.002, 0.004, ..., 1
    p = Particles(_shells(radii, rng), np.zeros((2 * n_pairs, 3)), np.full(2 * n_pairs, 1.0 / (2 * n_pairs)))
    # a fraction f is reached exactly at the pair with radius f (f a multiple of 1/500)
    f = np.array([0.01, 0.1, 0.25, 0.5, 0.9, 1.0])
    np.testing.assert_allclose(dg.lagrangian_radii(p, f), f, rtol=1e-12)
    np.testing.assert_allclose(dg.lagrangian_radii(p, f, center=np.zeros(3)), f, rtol=1e-12)
    # a fraction between two pairs needs the outer one
    np.testing.assert_allclose(dg.lagrangian_radii(p, [0.0101]), [0.012], rtol=1e-12)
    # moving everything moves the default centre (COM) along
    shifted = Particles(p.pos + [5.0, -1.0, 2.0], p.vel, p.mass)
    np.testing.assert_allclose(dg.lagrangian_radii(shifted, f), f, rtol=1e-9)
    np.testing.assert_allclose(dg.lagrangian_radii(shifted, f, center="com"), f, rtol=1e-9)


def test_lagrangian_radii_unequal_masses():
    pos = np.array([[1.0, 0, 0], [0, 2.0, 0], [0, 0, 3.0], [-4.0, 0, 0], [0, -5.0, 0]])
    mass = np.array([1.0, 2.0, 3.0, 4.0, 10.0])  # enclosed: 1, 3, 6, 10, 20
    p = Particles(pos, np.zeros((5, 3)), mass)
    got = dg.lagrangian_radii(p, [0.05, 0.1, 0.3, 0.31, 0.5, 0.51, 1.0], center=[0, 0, 0])
    np.testing.assert_array_equal(got, [1.0, 2.0, 3.0, 4.0, 4.0, 5.0, 5.0])


def test_lagrangian_radii_of_plummer_sphere():
    """Stratified Plummer sample: exact discrete answer, and close to a/sqrt(f^(-2/3) - 1)."""
    n_pairs, a = 10000, 0.8
    x = (np.arange(n_pairs) + 0.5) / n_pairs
    radii = a / np.sqrt(x ** (-2.0 / 3.0) - 1.0)
    p = Particles(_shells(radii, np.random.default_rng(4)), np.zeros((2 * n_pairs, 3)), np.ones(2 * n_pairs))
    f = np.array([0.01, 0.1, 0.5, 0.9])
    got = dg.lagrangian_radii(p, f)
    # pair i (0-based) brings the enclosed mass to (i + 1) / n_pairs
    i = np.ceil(f * n_pairs - 1e-9).astype(int) - 1
    np.testing.assert_allclose(got, radii[i], rtol=1e-12)
    np.testing.assert_allclose(got, a / np.sqrt(f ** (-2.0 / 3.0) - 1.0), rtol=3e-3)


# --------------------------------------------------------------------------------------
# Casertano & Hut density centre and core radius


def test_local_density_matches_brute_force():
    """k-d tree estimator against an O(N^2) sort of all distances, unequal masses."""
    rng = np.random.default_rng(8)
    n, k = 300, 6
    p = Particles(rng.normal(size=(n, 3)), np.zeros((n, 3)), rng.random(n) + 0.1)
    d = np.linalg.norm(p.pos[:, None, :] - p.pos[None, :, :], axis=2)
    np.fill_diagonal(d, np.inf)
    order = np.argsort(d, axis=1)
    r_k = d[np.arange(n), order[:, k - 1]]
    m_inner = p.mass[order[:, : k - 1]].sum(axis=1)
    rho = m_inner / (4.0 / 3.0 * np.pi * r_k**3)
    np.testing.assert_allclose(dg.local_density(p, k), rho, rtol=1e-12)
    centre = (rho[:, None] * p.pos).sum(axis=0) / rho.sum()
    np.testing.assert_allclose(dg.density_center(p, k), centre, rtol=1e-12, atol=1e-14)
    rc = np.sqrt((rho * ((p.pos - centre) ** 2).sum(axis=1)).sum() / rho.sum())
    assert dg.core_radius(p, k) == pytest.approx(rc, rel=1e-12)


def test_local_density_of_uniform_cube():
    """Uniform sample: the (k-1)/V_k estimator is unbiased for a Poisson process.

    Compared with the sample's own mean density in the inner cube (away from the faces,
    where neighbour spheres are cut). The mean estimate scatters by 1.3 % (30 seeds
    measured; heavy-tailed, since 1/V_k is); 6 % still catches k for k-1 (+20 %) or a
    wrong neighbour distance.
    """
    rng = np.random.default_rng(9)
    n = 20000
    side = n ** (1.0 / 3.0)  # unit number density, unit masses
    p = Particles(rng.random((n, 3)) * side, np.zeros((n, 3)), np.ones(n))
    rho = dg.local_density(p)
    inner = np.all((p.pos > 0.2 * side) & (p.pos < 0.8 * side), axis=1)
    sample_density = inner.sum() / (0.6 * side) ** 3
    assert rho[inner].mean() == pytest.approx(sample_density, rel=0.06)


def test_density_center_finds_clump_not_com():
    """A dense clump (10 % of the mass) offset from a diffuse uniform background."""
    rng = np.random.default_rng(10)
    n_bg, n_clump = 6000, 600
    clump_at = np.array([3.0, -2.0, 1.0])
    background = rng.uniform(-10.0, 10.0, size=(n_bg, 3))
    clump = clump_at + 0.1 * rng.normal(size=(n_clump, 3))
    pos = np.concatenate([background, clump])
    p = Particles(pos, np.zeros_like(pos), np.full(len(pos), 1.0 / len(pos)))
    dc = dg.density_center(p)
    assert np.linalg.norm(dc - clump_at) < 0.03  # clump sigma 0.1, ~600 members
    assert np.linalg.norm(dg.center_of_mass(p) - clump_at) > 2.0  # the COM misses it
    # Lagrangian radii about the density centre see the clump
    r10 = dg.lagrangian_radii(p, [0.05], center="density")[0]
    assert r10 < 0.3


def test_plummer_core_radius():
    """C&H density radius of a Plummer sphere: sqrt(3/5) a in the continuum limit.

    r_d^2 = int rho^2 r^2 dV / int rho^2 dV = 3/5 a^2 for rho ~ (1 + r^2/a^2)^(-5/2). With
    N = 20000 and k = 6 eight seeds gave errors within 1.2 % and centres within 0.015 a;
    the tolerances are 4 % and 0.05 a.
    """
    n, a = 20000, 0.7
    centre = np.array([1.0, -2.0, 0.5])
    pos = centre + _plummer_positions(np.random.default_rng(12), n, a)
    p = Particles(pos, np.zeros((n, 3)), np.full(n, 1.0 / n))
    assert dg.core_radius(p) == pytest.approx(np.sqrt(0.6) * a, rel=0.04)
    assert np.linalg.norm(dg.density_center(p) - centre) < 0.05 * a


def test_coincident_particles_are_an_error():
    pos = np.zeros((10, 3))
    pos[8:] = [[1.0, 0, 0], [0, 1.0, 0]]
    p = Particles(pos, np.zeros((10, 3)), np.ones(10))
    with pytest.raises(ValueError, match="exactly its position"):
        dg.local_density(p, k=6)


# --------------------------------------------------------------------------------------
# bad arguments


@pytest.fixture
def small() -> Particles:
    rng = np.random.default_rng(0)
    return Particles(rng.normal(size=(10, 3)), rng.normal(size=(10, 3)), np.ones(10))


def test_bad_arguments(small):
    pot = _pot(small)
    with pytest.raises(ValueError, match="eps"):
        dg.potential_energy(small, -0.1, pot=pot)
    with pytest.raises(ValueError, match="eps"):
        dg.energy(small, float("nan"), pot=pot)
    with pytest.raises(ValueError, match="G"):
        dg.virial_ratio(small, 0.0, G=0.0, pot=pot)
    with pytest.raises(ValueError, match="pot"):
        dg.potential_energy(small, 0.0, pot=pot[:-1])
    with pytest.raises(ValueError, match="pot"):
        dg.potential_energy(small, 0.0, pot=np.full(10, np.nan))
    for bad in ([0.0], [0.5, 1.01], [-0.1], [np.nan], []):
        with pytest.raises(ValueError, match="fractions"):
            dg.lagrangian_radii(small, bad)
    with pytest.raises(ValueError, match="center"):
        dg.lagrangian_radii(small, center="middle")
    with pytest.raises(ValueError, match="center"):
        dg.lagrangian_radii(small, center=[0.0, 0.0])
    for k in (10, 11, 1, 0, 2.5, True):
        with pytest.raises(ValueError, match="k"):
            dg.density_center(small, k=k)
    with pytest.raises(ValueError, match="k"):
        dg.core_radius(small, k=10)
    assert dg.density_center(small, k=9).shape == (3,)  # k = N - 1 is the largest allowed


def test_virial_ratio_of_single_particle_is_an_error():
    p = Particles([[0.0, 0, 0]], [[1.0, 0, 0]], [1.0])
    with pytest.raises(ValueError, match="W < 0"):
        dg.virial_ratio(p, 0.0, pot=np.zeros(1))


# --------------------------------------------------------------------------------------
# relative energy error, also for a system that starts at E = 0


def test_relative_energy_error_is_against_abs_e0():
    e0 = dg.Energy(kinetic=0.3, potential=-0.5, total=-0.2)
    later = dg.Energy(kinetic=0.31, potential=-0.5, total=-0.19)
    assert dg.relative_energy_error(later, e0) == pytest.approx(0.01 / 0.2, rel=1e-12)
    assert dg.relative_energy_error(e0, e0) == 0.0


def test_relative_energy_error_at_e0_zero_is_against_k0_plus_w0():
    e0 = dg.Energy(kinetic=0.125, potential=-0.125, total=0.0)
    later = dg.Energy(kinetic=0.1, potential=-0.099, total=0.001)
    assert dg.relative_energy_error(later, e0) == pytest.approx(0.001 / 0.25, rel=1e-12)


def test_relative_energy_error_without_mass_or_motion_is_an_error():
    nothing = dg.Energy(kinetic=0.0, potential=0.0, total=0.0)
    with pytest.raises(ValueError, match="no mass or motion"):
        dg.relative_energy_error(nothing, nothing)


def _parabolic_pair() -> Particles:
    """Two masses 1/2 at distance 2 moving apart at +-1/2: K = 1/8, W = -1/8 and E = 0
    exactly in float64 (eps = 0)."""
    pos = np.array([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    vel = np.array([[0.0, 0.5, 0.0], [0.0, -0.5, 0.0]])
    return Particles(pos, vel, np.array([0.5, 0.5]))


def test_simulation_starting_at_zero_energy_uses_k0_plus_w0():
    from gravpipe.simulation import Simulation

    sim = Simulation(_parabolic_pair(), integrator="leapfrog", dt=1 / 256, eps=0.0, backend="cpu")
    assert sim.config.energy0 == 0.0
    assert (sim.config.kinetic0, sim.config.potential0) == (0.125, -0.125)
    assert sim.energy_error() == 0.0
    sim.evolve(0.5, progress=False)
    e = sim.energy().total
    assert e != 0.0  # leapfrog does not conserve E exactly: the scale is exercised
    assert sim.energy_error() == pytest.approx(e / 0.25, rel=1e-12)
    assert sim.history[-1]["energy_error"] == pytest.approx(e / 0.25, rel=1e-12)
    assert abs(sim.energy_error()) < 1e-5


def test_simulation_of_one_particle_at_rest_names_the_problem():
    from gravpipe.simulation import Simulation

    alone = Particles(np.zeros((1, 3)), np.zeros((1, 3)), np.ones(1))
    with pytest.raises(ValueError, match="no mass or motion"):
        Simulation(alone, integrator="leapfrog", backend="cpu")


def test_checkpoint_without_k0_w0_still_loads(tmp_path):
    # checkpoints written before kinetic0/potential0 existed store energy0 only
    import json

    from gravpipe import ic
    from gravpipe.io import read_snapshot, write_snapshot
    from gravpipe.simulation import RunConfig, Simulation

    sim = Simulation(ic.plummer(64, seed=3), integrator="leapfrog", dt=1 / 64, backend="cpu", threads=1)
    sim.evolve(1 / 8, checkpoint_every=1 / 8, out=tmp_path, progress=False)
    path = tmp_path / "checkpoint_0001.h5"
    snap = read_snapshot(path)
    old = json.loads(snap.parameters["run_config"])
    del old["kinetic0"], old["potential0"]
    params = dict(snap.parameters, run_config=json.dumps(old))
    write_snapshot(path, snap.particles, snap.time, parameters=params, integrator_state=snap.integrator_state)
    resumed = Simulation.resume(tmp_path)
    assert RunConfig(**old).kinetic0 is None
    assert resumed.energy_error() == pytest.approx(sim.energy_error(), rel=1e-12, abs=1e-15)


# --------------------------------------------------------------------------------------
# a Simulation's energy diagnostics: float64 on the run's own backend and threads


def test_simulation_energy_is_float64_on_the_runs_backend_and_threads(monkeypatch):
    from gravpipe import gravity, ic, simulation

    made = []

    class Recording(gravity.Pipeline):
        def __init__(self, **kw):
            made.append(kw)
            super().__init__(**kw)

    monkeypatch.setattr(gravity, "Pipeline", Recording)
    p = ic.plummer(300, seed=4)
    sim = simulation.Simulation(p, integrator="leapfrog", dt=1 / 64, eps=1 / 32, backend="cpu", threads=1,
                                precision="mixed")
    made.clear()
    e = sim.energy()
    assert [(kw["backend"], kw["precision"], kw["threads"]) for kw in made] == [("cpu", "double", 1)]
    w_ref = 0.5 * float(np.dot(p.mass, _pot(p, eps=1 / 32)))
    assert e.potential == pytest.approx(w_ref, rel=1e-13)
    assert e.kinetic == dg.kinetic_energy(p)


@pytest.mark.parametrize("total0, label", [(-0.25, r"|E_0|$"), (0.0, r"(|K_0| + |W_0|)$")])
def test_energy_error_plot_names_the_scale_it_was_measured_against(total0, label):
    from matplotlib.figure import Figure

    from gravpipe import plot

    cols = {"time": np.array([0.0, 1.0]), "energy_error": np.array([0.0, 1e-6]),
            "total": np.array([total0, total0 + 1e-7])}
    ax = Figure().add_subplot()
    plot._energy_error(ax, cols)
    assert ax.get_ylabel().endswith(label)
