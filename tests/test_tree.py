"""The Barnes-Hut treecode against the independent float64 direct sum (tests/reference.py)."""

import numpy as np
import pytest
from reference import direct_sum_f64

import gravpipe as gp
from gravpipe import _core
from gravpipe.errors import BackendUnavailableError
from gravpipe.tree import TreeGravity

ISAS = _core.available_isas()


def plummer(n, seed):
    p = gp.ic.plummer(n, seed=seed)
    return np.array(p.pos), np.array(p.mass)


def rel_errors(acc, ref):
    return np.linalg.norm(acc - ref, axis=1) / np.linalg.norm(ref, axis=1)


def sampled_reference(pos, mass, eps, n_sample=600, seed=0):
    """Direct-sum acc/pot on a random sample of the particles (self excluded)."""
    sel = np.sort(np.random.default_rng(seed).choice(len(mass), min(n_sample, len(mass)), replace=False))
    acc, pot, _ = direct_sum_f64(pos, mass, pos[sel], eps=eps, exclude=sel)
    return sel, acc, pot


@pytest.fixture(scope="module")
def plummer_case():
    pos, mass = plummer(12000, 11)
    eps = 1 / 64
    return pos, mass, eps, sampled_reference(pos, mass, eps)


def median_error(case, theta, quadrupole, **kw):
    pos, mass, eps, (sel, ra, _) = case
    acc, _ = gp.Tree(pos, mass, eps, theta=theta, quadrupole=quadrupole, **kw).forces()
    return float(np.median(rel_errors(acc[sel], ra)))


@pytest.mark.parametrize("quadrupole", [True, False])
def test_error_falls_monotonically_with_theta(plummer_case, quadrupole):
    errors = [median_error(plummer_case, th, quadrupole) for th in (1.0, 0.8, 0.6, 0.4, 0.3, 0.2)]
    assert all(a > b for a, b in zip(errors, errors[1:])), errors


@pytest.mark.parametrize("theta", [0.4, 0.6, 0.8])
def test_quadrupole_reduces_error(plummer_case, theta):
    """Quadrupoles on every accepted cell: the expansion's second order is right."""
    mono = median_error(plummer_case, theta, False)
    quad = median_error(plummer_case, theta, True)
    assert quad < 0.4 * mono, (mono, quad)


def test_quad_tol_trade_on_an_isotropic_system(plummer_case):
    """The opt-in: monopoles for weakly anisotropic cells, error within a small factor."""
    full = median_error(plummer_case, 0.5, True)
    fast = median_error(plummer_case, 0.5, True, quad_tol=0.4)
    assert full < fast < 4 * full < median_error(plummer_case, 0.5, False), (full, fast)


def test_error_falls_as_quad_tol_falls(plummer_case):
    """Cells under quad_tol lose their quadrupole term: a smaller tolerance, fewer such cells."""
    errors = [median_error(plummer_case, 0.5, True, quad_tol=q) for q in (4, 0.4, 0.04, 0)]
    assert all(a > b for a, b in zip(errors, errors[1:])), errors


def test_theta_beyond_two_over_sqrt3_is_refused():
    """Beyond 2/sqrt(3) a particle inside a cell's box can accept the cell (its opening radius
    size/theta + offset is then shorter than the box's reach from the com): theta 5 ran."""
    pos, mass = [[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], [1.0, 1.0, 1.0]
    for theta in (1.16, 5.0):
        with pytest.raises(ValueError, match=r"theta: .* is beyond 1.1547 \(2/sqrt\(3\)\)"):
            gp.Tree(pos, mass, theta=theta)
        with pytest.raises(ValueError, match=r"theta: .* is beyond 1.1547"):
            gp.Simulation(gp.ic.plummer(100, seed=1), gravity="tree", theta=theta)
    gp.Tree(pos, mass, theta=1.15).forces()
    from gravpipe import _core  # the core refuses it too, for callers that reach it directly

    with pytest.raises(ValueError, match=r"theta: 5.0 is beyond 1.1547 \(2/sqrt\(3\)\)"):
        _core.TreeForceProvider(0.01, 1.0, 5.0, True, 0.0, 16, 256, 0.0, 1, "mixed")


@pytest.mark.parametrize("quad_tol", [-1e-3, float("nan"), float("inf"), "far", True])
def test_bad_quad_tol(quad_tol):
    with pytest.raises(ValueError, match="quad_tol"):
        gp.Tree([[0.0, 0, 0], [1, 0, 0]], [1.0, 1.0], quad_tol=quad_tol)


def test_small_theta_matches_direct_sum(plummer_case):
    pos, mass, eps, (sel, ra, rp) = plummer_case
    acc, pot = gp.Tree(pos, mass, eps, theta=0.2).forces()
    e = rel_errors(acc[sel], ra)
    assert np.median(e) < 1e-5 and e.max() < 2e-4, (np.median(e), e.max())
    assert np.max(np.abs(pot[sel] - rp) / np.abs(rp)) < 1e-5


def test_default_accuracy_figure(plummer_case):
    """The documented default (theta = 0.6, quadrupoles) on a Plummer sphere."""
    pos, mass, eps, (sel, ra, _) = plummer_case
    acc, _ = gp.Tree(pos, mass, eps).forces()
    e = rel_errors(acc[sel], ra)
    assert np.median(e) < 3e-4 and np.percentile(e, 99) < 1.5e-3


@pytest.mark.parametrize("isa", ISAS)
def test_opening_everything_is_the_direct_sum(isa):
    """A tiny theta opens every cell: the tree then sums the same pairs as direct summation."""
    pos, mass = plummer(700, 5)
    ra, rp, _ = direct_sum_f64(pos, mass, pos, eps=0.01, exclude=np.arange(len(mass)))
    for precision, bound in (("double", 1e-12), ("mixed", 1e-5)):
        tree = gp.Tree(pos, mass, 0.01, theta=1e-6, n_leaf=4, n_crit=16, precision=precision, isa=isa)
        assert tree.isa == isa
        acc, pot = tree.forces()
        assert np.max(rel_errors(acc, ra)) < bound
        assert np.max(np.abs(pot - rp) / np.abs(rp)) < bound


def check_against_direct(pos, mass, eps, theta=0.5, bound=2e-3, **kw):
    acc, pot = gp.Tree(pos, mass, eps, theta=theta, **kw).forces()
    ra, rp, _ = direct_sum_f64(pos, mass, pos, eps=eps, exclude=np.arange(len(mass)))
    assert np.all(np.isfinite(acc)) and np.all(np.isfinite(pot))
    # errors relative to the RMS acceleration: in a uniform plane or line the net force
    # near the centre tends to zero, where a per-particle ratio measures nothing useful
    scale = np.sqrt(np.mean(np.sum(ra * ra, axis=1))) if len(mass) > 1 else 1.0
    err = np.linalg.norm(acc - ra, axis=1) / max(scale, 1e-300)
    assert np.percentile(err, 99) < bound, np.percentile(err, 99)
    assert np.max(np.abs(pot - rp) / np.abs(rp)) < bound
    return acc, pot


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [2, 3, 5, 17, 40])
def test_few_particles(n, isa):
    """Group sizes around the SIMD widths (1, 8 and 16 lanes; padding, odd vectors)."""
    rng = np.random.default_rng(n)
    pos, mass = rng.normal(size=(n, 3)), rng.uniform(0.5, 1.0, n)
    check_against_direct(pos, mass, 0.0, bound=1e-13, precision="double", isa=isa)
    check_against_direct(pos, mass, 0.0, bound=1e-5, precision="mixed", isa=isa)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("precision", ["double", "mixed"])
def test_every_isa_against_direct_sum(isa, precision):
    """Each list kernel this machine runs (particle and quadrupole cell terms, masked and
    unmasked, pairs and odd vectors of sinks) against the float64 direct sum, and every ISA
    within the mixed-precision rounding of the generic kernels."""
    pos, mass = plummer(3000, 4)
    acc, pot = check_against_direct(pos, mass, 1 / 64, theta=0.5, precision=precision, isa=isa, n_crit=40)
    a_gen, p_gen = gp.Tree(pos, mass, 1 / 64, theta=0.5, precision=precision, isa="generic", n_crit=40).forces()
    same = 1e-12 if precision == "double" else 1e-5
    assert np.max(rel_errors(acc, a_gen)) < same and np.max(np.abs(pot - p_gen) / np.abs(p_gen)) < same


def test_single_particle_feels_nothing():
    acc, pot = gp.Tree([[1.0, 2.0, 3.0]], [1.0]).forces()
    assert np.all(acc == 0) and np.all(pot == 0)


def test_identical_coordinates():
    """Hundreds of particles on one point: the depth limit stops the split."""
    rng = np.random.default_rng(3)
    pos = np.vstack([np.tile([0.3, -0.2, 0.1], (800, 1)), rng.normal(size=(400, 3))])
    mass = np.full(len(pos), 1 / len(pos))
    tree = gp.Tree(pos, mass, 0.05, n_leaf=8)
    assert tree.stats.nodes < 10 * len(pos)
    # the 800 coincident particles feel only the 400 others (their own pulls cancel
    # exactly): one small net force, approximated to ~4e-3 at theta = 0.5
    check_against_direct(pos, mass, 0.05, bound=1e-2)


def test_far_particle_dynamic_range():
    rng = np.random.default_rng(4)
    pos = np.vstack([rng.normal(size=(2000, 3)), [[1e6, 0.0, 0.0]]])
    mass = np.full(len(pos), 1 / len(pos))
    acc, _ = check_against_direct(pos, mass, 0.01)
    assert acc[-1, 0] < 0  # pulled back towards the cluster


@pytest.mark.parametrize("shape", ["plane", "line"])
def test_degenerate_geometry(shape):
    rng = np.random.default_rng(5)
    pos = rng.uniform(-1, 1, size=(3000, 3))
    pos[:, 2] = 0.0
    if shape == "line":
        pos[:, 1] = 0.0
    mass = rng.uniform(0.5, 1.5, len(pos)) / len(pos)
    check_against_direct(pos, mass, 0.01)


def test_translation_and_scale():
    pos, mass = plummer(3000, 6)
    a0, _ = gp.Tree(pos, mass, 0.01).forces()
    a1, _ = gp.Tree(pos + 1e4, mass, 0.01).forces()
    assert np.median(rel_errors(a1, a0)) < 1e-7


@pytest.mark.parametrize("precision, n", [("mixed", 15000), ("double", 15000), ("mixed", 70000)])
def test_identical_for_any_thread_count(precision, n):
    """n = 70000 also runs the sort's parallel path (chunks from 65536 particles on)."""
    pos, mass = plummer(n, 7)
    # duplicated positions: equal keys, whose order must not depend on the chunking
    pos[n // 2: n // 2 + 50] = pos[:50]
    a1, p1 = gp.Tree(pos, mass, 0.01, threads=1, precision=precision).forces()
    a2, p2 = gp.Tree(pos, mass, 0.01, threads=2, precision=precision).forces()
    assert np.array_equal(a1, a2) and np.array_equal(p1, p2)


@pytest.mark.parametrize("theta", [0.3, 0.7])
def test_mixed_precision_adds_little_error(plummer_case, theta):
    pos, mass, eps, (sel, ra, _) = plummer_case
    am, _ = gp.Tree(pos, mass, eps, theta=theta, precision="mixed").forces()
    ad, _ = gp.Tree(pos, mass, eps, theta=theta, precision="double").forces()
    assert np.median(rel_errors(am, ad)) < 2e-6
    assert abs(np.median(rel_errors(am[sel], ra)) / np.median(rel_errors(ad[sel], ra)) - 1) < 0.05


def test_results_in_caller_order():
    pos, mass = plummer(2000, 8)
    perm = np.random.default_rng(0).permutation(len(mass))
    a, p = gp.Tree(pos, mass, 0.01).forces()
    ap, pp = gp.Tree(pos[perm], mass[perm], 0.01).forces()
    np.testing.assert_allclose(ap, a[perm], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pp, p[perm], rtol=1e-12)


def test_field_at_other_points_and_exclude():
    pos, mass = plummer(4000, 9)
    rng = np.random.default_rng(1)
    pts = rng.normal(scale=2.0, size=(500, 3))
    tree = gp.Tree(pos, mass, 0.02, theta=0.3)
    acc, pot = tree.forces(pts)
    ra, rp, _ = direct_sum_f64(pos, mass, pts, eps=0.02)
    assert np.median(rel_errors(acc, ra)) < 1e-4
    # the tree's own particles as points, each excluding itself: the same as self-gravity
    sub = rng.choice(len(mass), 300, replace=False)
    a_sub, _ = tree.forces(pos[sub], exclude=sub)
    ra, _, _ = direct_sum_f64(pos, mass, pos[sub], eps=0.02, exclude=sub)
    assert np.median(rel_errors(a_sub, ra)) < 1e-4


def test_relative_criterion_bounds_the_error():
    pos, mass = plummer(6000, 10)
    sel, ra, _ = sampled_reference(pos, mass, 0.01)
    tree = gp.Tree(pos, mass, 0.01, theta=1.0, alpha=0.0005)
    first, _ = tree.forces()          # no old accelerations yet: geometric MAC only
    assert not tree.stats.relative_criterion_used
    second, _ = tree.forces()
    assert tree.stats.relative_criterion_used
    e1, e2 = rel_errors(first[sel], ra), rel_errors(second[sel], ra)
    assert np.percentile(e2, 99) < 0.5 * np.percentile(e1, 99)


def test_counters():
    pos, mass = plummer(5000, 12)
    tree = gp.Tree(pos, mass, 0.01, theta=0.6)
    tree.forces()
    s = tree.stats
    assert s.n_i == s.n_j == 5000
    assert 0 < s.pp_per_body < 5000 and 0 < s.pc_per_body < 5000 and s.mac_per_body > 1
    assert s.nodes > s.leaves > 0 and s.groups > 0
    assert all(getattr(s, f) >= 0 for f in ("seconds_sort", "seconds_build", "seconds_moments",
                                              "seconds_walk", "seconds_evaluate"))
    assert s.seconds_total > 0


def test_accel_method_tree():
    pos, mass = plummer(2000, 13)
    a_tree, _ = gp.accel(pos, mass, 0.01, method="tree", theta=0.3)
    a_dir, _ = gp.accel(pos, mass, 0.01, precision="double")
    assert np.median(rel_errors(a_tree, a_dir)) < 1e-4
    with pytest.raises(ValueError, match="method"):
        gp.accel(pos, mass, method="fmm")
    with pytest.raises(ValueError, match="theta"):
        gp.accel(pos, mass, theta=0.5)  # direct summation has no opening angle
    with pytest.raises(ValueError, match="backend"):
        gp.accel(pos, mass, method="tree", backend="opencl")
    if not gp.available_backends()["cuda"].available:  # the GPU lists: test_tree_cuda.py
        with pytest.raises(BackendUnavailableError, match="backend 'cuda' is not available"):
            gp.accel(pos, mass, method="tree", backend="cuda")
    a_d, _ = gp.accel(pos, mass, 0.01, method="tree", theta=0.3, precision="double")
    assert 0 < np.max(np.abs(a_d - a_tree)) < 1e-5 * np.max(np.abs(a_d))  # precision reaches the tree


@pytest.mark.parametrize("kwargs, match", [
    (dict(pos=[[np.nan, 0, 0]], mass=[1.0]), "pos"),
    (dict(pos=np.zeros((3, 2)), mass=np.ones(3)), "shape"),
    (dict(pos=np.zeros((3, 3)), mass=np.ones(2)), "mismatched"),
    (dict(pos=np.zeros((0, 3)), mass=np.ones(0)), "empty"),
    (dict(pos=np.zeros((2, 3)), mass=[1.0, -1.0]), "negative"),
    (dict(pos=np.eye(3), mass=np.ones(3), eps=-1.0), "eps"),
    (dict(pos=np.eye(3), mass=np.ones(3), theta=0.0), "theta"),
    (dict(pos=np.eye(3), mass=np.ones(3), theta=np.inf), "theta"),
    (dict(pos=np.eye(3), mass=np.ones(3), n_leaf=0), "n_leaf"),
    (dict(pos=np.eye(3), mass=np.ones(3), n_crit=0), "n_crit"),
    (dict(pos=np.eye(3), mass=np.ones(3), n_crit=2.5), "n_crit"),
    (dict(pos=np.eye(3), mass=np.ones(3), alpha=-1.0), "alpha"),
    (dict(pos=np.eye(3), mass=np.ones(3), threads=0), "threads"),
    (dict(pos=np.eye(3), mass=np.ones(3), G=0.0), "G"),
    (dict(pos=np.eye(3), mass=np.ones(3), precision="half"), "precision"),
])
def test_bad_input(kwargs, match):
    pos, mass = kwargs.pop("pos"), kwargs.pop("mass")
    with pytest.raises(ValueError, match=match):
        gp.Tree(pos, mass, **kwargs)


def test_bad_forces_arguments():
    tree = gp.Tree(np.eye(3), np.ones(3))
    with pytest.raises(ValueError, match="pos_i"):
        tree.forces(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="exclude"):
        tree.forces(np.zeros((2, 3)), exclude=[0, 3])
    with pytest.raises(ValueError, match="non-finite"):
        tree.forces(np.eye(3)[:1])  # on a particle, eps = 0


def test_simulation_with_tree_gravity_conserves_energy():
    p = gp.ic.plummer(1024, seed=14)
    tree = gp.Simulation(p, gravity="tree", integrator="leapfrog", dt=1 / 128, eps=1 / 32, theta=0.5)
    direct = gp.Simulation(p, gravity="direct", integrator="leapfrog", dt=1 / 128, eps=1 / 32, precision="double")
    tree.evolve(1.0, progress=False)
    direct.evolve(1.0, progress=False)
    assert abs(tree.energy_error()) < 1e-4
    # the trajectories agree to the level set by the force error
    d = np.linalg.norm(tree.particles.pos - direct.particles.pos, axis=1)
    assert np.median(d) < 1e-4
    assert tree.timings.interactions > 0


def test_simulation_tree_resume_is_bit_identical(tmp_path):
    p = gp.ic.plummer(512, seed=15)
    kw = dict(gravity="tree", integrator="leapfrog", dt=1 / 64, eps=1 / 32, theta=0.7)
    full = gp.Simulation(p, **kw)
    full.evolve(0.5, progress=False)
    part = gp.Simulation(p, **kw)
    part.evolve(0.25, checkpoint_every=0.25, out=tmp_path, progress=False)
    resumed = gp.Simulation.resume(tmp_path)
    assert resumed.config.theta == 0.7
    resumed.evolve(0.5, progress=False)
    assert np.array_equal(resumed.particles.pos, full.particles.pos)


def test_simulation_tree_rejects_hermite_and_stray_theta():
    p = gp.ic.plummer(64, seed=16)
    with pytest.raises(ValueError, match="leapfrog"):
        gp.Simulation(p, gravity="tree", integrator="hermite")
    with pytest.raises(ValueError, match="theta"):
        gp.Simulation(p, gravity="direct", integrator="leapfrog", theta=0.5)
    with pytest.raises(ValueError, match="theta"):
        gp.Simulation(p, gravity="tree", integrator="leapfrog", theta=-1.0)
    with pytest.raises(ValueError, match="gravity"):
        gp.Simulation(p, gravity="fmm")


def test_tree_simulation_energy_diagnostics_match_the_direct_sum():
    """Tree runs take W from their own last evaluation (the tree's error at its theta) or,
    precisely, from a fine tree (O(N log N), not an O(N^2) sum): the same value to ~1e-6."""
    p = gp.ic.plummer(3000, seed=17)
    sim = gp.Simulation(p, gravity="tree", integrator="leapfrog", dt=1 / 64, eps=1 / 32)
    w_direct = gp.diagnostics.potential_energy(sim.particles, 1 / 32)
    assert abs(sim.energy(precise=True).potential - w_direct) < 5e-6 * abs(w_direct)
    own = sim.energy().potential
    assert own != sim.energy(precise=True).potential  # a different evaluation ...
    assert abs(own - w_direct) < 1e-3 * abs(w_direct)  # ... with the run's tree error
    assert sim.history[0]["potential"] == own
    precise = gp.Simulation(p, gravity="tree", integrator="leapfrog", dt=1 / 64, eps=1 / 32, precise_energy=True)
    assert abs(precise.history[0]["potential"] - w_direct) < 5e-6 * abs(w_direct)


def test_simulation_tree_precision_and_backend():
    """precision reaches the tree's list kernels; an unknown backend is refused, not ignored
    (backend "cuda" puts the lists on the GPU: test_tree_cuda.py)."""
    p = gp.ic.plummer(500, seed=18)
    kw = dict(gravity="tree", integrator="leapfrog", dt=1 / 64, eps=1 / 32)
    runs = {prec: gp.Simulation(p, precision=prec, **kw) for prec in ("mixed", "double")}
    for sim in runs.values():
        sim.evolve(0.25, progress=False)
    assert runs["double"].provider.precision == "double"
    d = np.abs(runs["double"].particles.pos - runs["mixed"].particles.pos).max()
    assert 0 < d < 1e-5  # the mixed kernels' ~1e-7 force differences, carried 16 steps
    with pytest.raises(ValueError, match="backend"):
        gp.Simulation(p, backend="opencl", **kw)


def _line_or_plane(n, kind, seed=5):
    rng = np.random.default_rng(seed)
    pos = rng.uniform(-1, 1, size=(n, 3))
    pos[:, 2] = 0.0
    if kind == "line":
        pos[:, 1] = 0.0
    return pos, rng.uniform(0.5, 1.5, n) / n


@pytest.mark.parametrize("kind", ["plummer", "line", "plane"])
@pytest.mark.parametrize("quadrupole", [True, False])
def test_local_expansion_adds_no_visible_error(kind, quadrupole):
    """Runs' far cells through a 4th-order local expansion: against the float64 direct sum
    the errors stay those of the lists (within 15%), in isotropic and degenerate systems."""
    n = 40000
    if kind == "plummer":
        pos, mass = plummer(n, 3)
    else:
        pos, mass = _line_or_plane(n, kind)
    eps = 0.01
    sel = np.sort(np.random.default_rng(1).choice(n, 500, replace=False))
    ra, rp, _ = direct_sum_f64(pos, mass, pos[sel], eps=eps, exclude=sel)
    scale = np.linalg.norm(ra, axis=1) if kind == "plummer" else np.sqrt(np.mean(np.sum(ra * ra, axis=1)))
    med, p99 = {}, {}
    for local in (True, False):
        tree = gp.Tree(pos, mass, eps, theta=0.5, quadrupole=quadrupole, local_expansion=local)
        acc, pot = tree.forces()
        e = np.linalg.norm(acc[sel] - ra, axis=1) / scale
        med[local], p99[local] = np.median(e), np.percentile(e, 99)
        assert (tree.stats.pc_local_interactions > 0) == local
        assert np.max(np.abs(pot[sel] - rp) / np.abs(rp)) < 1e-2
    assert med[True] < 1.15 * med[False] and p99[True] < 1.15 * p99[False], (med, p99)


def test_local_expansion_matches_the_lists_it_replaces():
    """Same tree, expansion on and off: the differences are far below the tree's error."""
    pos, mass = plummer(60000, 9)
    on = gp.Tree(pos, mass, 0.01, theta=0.5)
    off = gp.Tree(pos, mass, 0.01, theta=0.5, local_expansion=False)
    a_on, p_on = on.forces()
    a_off, p_off = off.forces()
    assert on.stats.pc_local_interactions > 0.1 * on.stats.pc_interactions
    assert off.stats.pc_local_interactions == 0
    assert on.stats.pc_interactions == off.stats.pc_interactions  # the same accepted cells
    d = np.linalg.norm(a_on - a_off, axis=1) / np.linalg.norm(a_off, axis=1)
    assert np.median(d) < 1e-5 and np.max(np.abs(p_on - p_off) / np.abs(p_off)) < 1e-6, (np.median(d), d.max())


def test_frame_keys_the_cells_and_bad_frames_are_refused():
    """What this proves: ``frame`` is the cube the particles are keyed in: their own
    bounding cube (what the default takes) gives the default tree bit for bit, a larger one
    other cells (forces within the tree's error, not equal), and a frame that is not a cube
    on the grid (scale <= 0, a corner not finite) is refused by name."""
    p = gp.ic.plummer(3000, seed=4)
    lo, hi = p.pos.min(0), p.pos.max(0)
    tight = (list(lo), float((1 << 21) - 1) / np.max(hi - lo))
    a0, f0 = gp.Tree(p.pos, p.mass, eps=0.01).forces()
    a1, f1 = gp.Tree(p.pos, p.mass, eps=0.01, frame=tight).forces()
    assert np.array_equal(a0, a1) and np.array_equal(f0, f1)
    wide = (list(lo - 1.0), tight[1] / 1.3)
    a2, _ = gp.Tree(p.pos, p.mass, eps=0.01, frame=wide).forces()
    assert not np.array_equal(a0, a2)
    assert np.median(np.linalg.norm(a2 - a0, axis=1) / np.linalg.norm(a0, axis=1)) < 1e-3
    for bad in [(list(lo), 0.0), ([np.nan, 0, 0], 1.0)]:
        with pytest.raises(ValueError, match="frame"):
            gp.Tree(p.pos, p.mass, eps=0.01, frame=bad)


def test_rebuilds_in_the_last_trees_arrays_give_a_fresh_trees_bits():
    """The force provider (what every integrator step rebuilds) builds each tree in the
    arrays of the one before, so that a step faults no new pages in. Through j-sets that
    shrink and grow (the radix sort's scratch and the node arrays reused at other sizes),
    its self-gravity and its forces at other points equal a fresh Tree's bit for bit."""
    eps = 0.01
    g = TreeGravity(eps, 1.0, threads=2)
    rng = np.random.default_rng(4)
    for n, seed in [(30_000, 1), (5_000, 2), (41_000, 3), (30_000, 4)]:
        pos, mass = plummer(n, seed)
        g.provider.set_j(pos, mass, None)
        acc, pot = np.empty((n, 3)), np.empty(n)
        g.provider.forces(pos, np.arange(n, dtype=np.int64), acc, pot)
        fresh = gp.Tree(pos, mass, eps, threads=2)
        ref_acc, ref_pot = fresh.forces()
        assert np.array_equal(acc, ref_acc) and np.array_equal(pot, ref_pot)
        pts = rng.normal(size=(700, 3))
        acc_p, pot_p = np.empty((700, 3)), np.empty(700)
        g.provider.forces(pts, None, acc_p, pot_p)
        ref_acc_p, ref_pot_p = fresh.forces(pts)
        assert np.array_equal(acc_p, ref_acc_p) and np.array_equal(pot_p, ref_pot_p)
