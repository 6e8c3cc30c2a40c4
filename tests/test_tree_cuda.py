"""The treecode with its interaction lists on the GPU (backend "cuda").

The walk and the lists are the CPU tree's; only the list kernel differs, so the GPU tree
is checked against the float64 direct sum within the CPU tree's own bounds
(tests/test_tree.py) and against the CPU tree, from which it may differ only by float32
rounding. GPU tests are marked ``gpu`` and skipped without a usable CUDA backend; the
refusals at the end run everywhere.
"""

import numpy as np
import pytest
from reference import direct_sum_f64, rel_rms

import gravpipe as gp
from gravpipe.errors import BackendUnavailableError
from gravpipe.simulation import Simulation

CUDA = gp.available_backends()["cuda"]


def plummer(n, seed):
    p = gp.ic.plummer(n, seed=seed)
    return np.array(p.pos), np.array(p.mass)


def rel_errors(acc, ref):
    return np.linalg.norm(acc - ref, axis=1) / np.linalg.norm(ref, axis=1)


@pytest.fixture(scope="module")
def plummer_case():
    pos, mass = plummer(12000, 11)
    eps = 1 / 64
    sel = np.sort(np.random.default_rng(0).choice(len(mass), 600, replace=False))
    acc, pot, _ = direct_sum_f64(pos, mass, pos[sel], eps=eps, exclude=sel)
    return pos, mass, eps, sel, acc, pot


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA.available, reason=f"no CUDA backend: {CUDA.detail}")
@pytest.mark.parametrize("theta", [0.2, 0.6])
def test_gpu_tree_within_the_cpu_trees_bounds(plummer_case, theta):
    """test_tree.py's bounds: theta 0.2 median < 1e-5, max < 2e-4; the default (0.6)
    median < 3e-4, p99 < 1.5e-3."""
    pos, mass, eps, sel, ra, rp = plummer_case
    acc, pot = gp.Tree(pos, mass, eps, theta=theta, backend="cuda").forces()
    e = rel_errors(acc[sel], ra)
    if theta == 0.2:
        assert np.median(e) < 1e-5 and e.max() < 2e-4, (np.median(e), e.max())
        assert np.max(np.abs(pot[sel] - rp) / np.abs(rp)) < 1e-5
    else:
        assert np.median(e) < 3e-4 and np.percentile(e, 99) < 1.5e-3, (np.median(e), np.percentile(e, 99))


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA.available, reason=f"no CUDA backend: {CUDA.detail}")
@pytest.mark.parametrize("quadrupole", [True, False])
def test_gpu_tree_matches_cpu_tree_to_float32_rounding(plummer_case, quadrupole):
    """Same walk, same lists: the two differ by float32 rounding of the pair terms. Each
    term carries ~1e-7 relative error (2^-24 rounding, 2^-23 rsqrt); sums of ~1e3 terms
    with partial cancellation stay near 1e-6, so 1e-5 relative RMS is a bound with room,
    and still ~100x below the tree's own error at theta 0.6."""
    pos, mass, eps = plummer_case[:3]
    kw = dict(theta=0.6, quadrupole=quadrupole, threads=4)
    a_cpu, p_cpu = gp.Tree(pos, mass, eps, backend="cpu", **kw).forces()
    a_gpu, p_gpu = gp.Tree(pos, mass, eps, backend="cuda", **kw).forces()
    assert rel_rms(a_gpu, a_cpu) < 1e-5, rel_rms(a_gpu, a_cpu)
    assert rel_rms(p_gpu, p_cpu) < 1e-5, rel_rms(p_gpu, p_cpu)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA.available, reason=f"no CUDA backend: {CUDA.detail}")
def test_gpu_tree_forces_at_points_match_cpu(plummer_case):
    """forces_at with exclusions (chunked groups, masked particles anywhere in a list)."""
    pos, mass, eps = plummer_case[:3]
    rng = np.random.default_rng(3)
    idx = rng.choice(len(mass), 500, replace=False)
    pts, ex = pos[idx], idx.astype(np.int64)
    a_cpu, p_cpu = gp.Tree(pos, mass, eps, backend="cpu").forces(pts, exclude=ex)
    a_gpu, p_gpu = gp.Tree(pos, mass, eps, backend="cuda").forces(pts, exclude=ex)
    assert np.all(np.isfinite(a_gpu)) and rel_rms(a_gpu, a_cpu) < 1e-5 and rel_rms(p_gpu, p_cpu) < 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA.available, reason=f"no CUDA backend: {CUDA.detail}")
def test_no_self_force():
    """eps = 0: a self pair that were not left out would give inf/nan; a lone particle feels
    nothing, and two bodies feel exactly each other."""
    acc, pot = gp.Tree(np.zeros((1, 3)), np.ones(1), 0.0, backend="cuda").forces()
    assert np.all(acc == 0) and np.all(pot == 0)
    pos = np.array([[0.0, 0, 0], [1.0, 0, 0]])
    acc, pot = gp.Tree(pos, np.array([1.0, 2.0]), 0.0, backend="cuda").forces()
    np.testing.assert_allclose(acc, [[2.0, 0, 0], [-1.0, 0, 0]], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(pot, [-2.0, -1.0], rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA.available, reason=f"no CUDA backend: {CUDA.detail}")
def test_deterministic(plummer_case):
    """Two evaluations, and different thread counts (other batches), give the same bits."""
    pos, mass, eps = plummer_case[:3]
    tree = gp.Tree(pos, mass, eps, backend="cuda", threads=3)
    a1, p1 = tree.forces()
    a2, p2 = tree.forces()
    a3, p3 = gp.Tree(pos, mass, eps, backend="cuda", threads=1).forces()
    assert np.array_equal(a1, a2) and np.array_equal(p1, p2)
    assert np.array_equal(a1, a3) and np.array_equal(p1, p3)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA.available, reason=f"no CUDA backend: {CUDA.detail}")
def test_leapfrog_conserves_energy_like_the_cpu_tree():
    p = gp.ic.plummer(2000, seed=5)
    runs = {}
    for backend in ("cpu", "cuda"):
        sim = Simulation(p, gravity="tree", integrator="leapfrog", eps=1 / 64, dt=1 / 128, backend=backend)
        sim.evolve(0.5, progress=False)
        runs[backend] = sim
    assert runs["cuda"].backend == "cuda"
    de_cpu, de_gpu = abs(runs["cpu"].energy_error()), abs(runs["cuda"].energy_error())
    assert de_gpu < 1e-3 and de_gpu < 2 * de_cpu + 1e-6, (de_gpu, de_cpu)


# ---- refusals: these run without a GPU ----------------------------------------------------


def test_out_of_core_tree_refuses_cuda(tmp_path):
    pos, mass = plummer(100, 1)
    with pytest.raises(ValueError, match="backend='cuda'.*out of core"):
        gp.Tree(pos, mass, 0.01, backend="cuda", memory_budget="64MiB", scratch=str(tmp_path))


def test_out_of_core_simulation_refuses_cuda(tmp_path):
    with pytest.raises(ValueError, match="backend='cuda'.*out of core"):
        Simulation(gp.ic.plummer(64, seed=1), gravity="tree", backend="cuda", memory_budget="64MiB",
                   scratch=tmp_path)


def test_double_precision_refused_on_the_gpu():
    pos, mass = plummer(100, 1)
    with pytest.raises((ValueError, BackendUnavailableError)):
        gp.Tree(pos, mass, 0.01, backend="cuda", precision="double")


def test_unknown_backend_refused():
    pos, mass = plummer(100, 1)
    with pytest.raises(ValueError, match="unknown backend"):
        gp.Tree(pos, mass, 0.01, backend="opencl")


def test_auto_keeps_the_tree_on_the_cpu():
    pos, mass = plummer(100, 1)
    assert gp.Tree(pos, mass, 0.01, backend="auto").backend == "cpu"
    sim = Simulation(gp.ic.plummer(64, seed=1), gravity="tree", dt=1 / 64)
    assert sim.backend == "cpu"


@pytest.mark.skipif(CUDA.available, reason="a CUDA backend is available here")
def test_unavailable_cuda_raises_backend_unavailable():
    pos, mass = plummer(100, 1)
    with pytest.raises(BackendUnavailableError, match="backend 'cuda' is not available"):
        gp.Tree(pos, mass, 0.01, backend="cuda")
    with pytest.raises(BackendUnavailableError, match="backend 'cuda' is not available"):
        Simulation(gp.ic.plummer(64, seed=1), gravity="tree", backend="cuda", dt=1 / 64)


def test_core_tree_without_device_raises_backend_error():
    """The core's own check (not only the Python one): no device -> BackendUnavailableError;
    with a device the core builds."""
    from gravpipe import _core
    pos, mass = plummer(100, 1)
    args = (pos, mass, 0.01, 1.0, 0.6, True, 0.0, 16, 64, 0.0, 1, "mixed", True)
    if CUDA.available:
        assert _core.Tree(*args, backend="cuda").device_name
    else:
        with pytest.raises(BackendUnavailableError, match="backend 'cuda' is not available"):
            _core.Tree(*args, backend="cuda")
