"""The CUDA backend against the same float64 numpy reference and bounds as the CPU tests.

Every test here is marked ``gpu`` and skipped where the CUDA backend is unavailable (a
build without CUDA sources, or no device): CI has no GPU, so these run on a GPU machine
(benchmarks/gpu/run.sh runs them there).
"""

import numpy as np
import pytest
from conftest import clustered_set
from contract_cases import CASES, CorePipeline, PythonPipeline
from reference import direct_sum_f64, rel_rms

import gravpipe as gp
from gravpipe import _core
from gravpipe.simulation import Simulation

CUDA = gp.available_backends()["cuda"]
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA.available, reason=f"no CUDA backend: {CUDA.detail}")]

BOUND = {"double": {"acc": 1e-12, "pot": 1e-12, "jerk": 1e-12},
         "mixed": {"acc": 1e-6, "pot": 1e-6, "jerk": 1e-5}}


def plummer_set(n, seed):
    p = gp.ic.plummer(n, seed=seed)
    return np.array(p.pos), np.array(p.vel), np.array(p.mass)


def cuda_self_forces(pos, vel, mass, eps, precision, G=1.0):
    pipe = gp.Pipeline("cuda", precision, eps=eps, G=G)
    pipe.set_j(pos, mass, vel)
    return pipe.forces(pos, vel, exclude=np.arange(len(mass)))


@pytest.mark.parametrize("precision", ["double", "mixed"])
@pytest.mark.parametrize("make, eps", [(plummer_set, 1 / 64), (clustered_set, 1e-4), (clustered_set, 0.0)])
def test_accuracy_against_float64_reference(precision, make, eps):
    seed = np.random.SeedSequence().entropy % 2**32  # fresh inputs every run
    pos, vel, mass = make(3000, seed)
    acc, jerk, pot = cuda_self_forces(pos, vel, mass, eps, precision)
    ra, rp, rj = direct_sum_f64(pos, mass, pos, eps=eps, vel_j=vel, vel_i=vel, exclude=np.arange(len(mass)))
    b = BOUND[precision]
    assert rel_rms(acc, ra) <= b["acc"], f"seed {seed}"
    assert rel_rms(pot, rp) <= b["pot"], f"seed {seed}"
    assert rel_rms(jerk, rj) <= b["jerk"], f"seed {seed}"


@pytest.mark.parametrize("shift", [1.0, 1e3, -1e5])
def test_mixed_translation_does_not_change_forces(shift):
    pos, vel, mass = clustered_set(1200, 7)
    moved = pos + np.array([shift, -0.5 * shift, 0.25 * shift])
    acc, jerk, pot = cuda_self_forces(moved, vel, mass, 1e-4, "mixed")
    ra, rp, rj = direct_sum_f64(moved, mass, moved, eps=1e-4, vel_j=vel, vel_i=vel, exclude=np.arange(len(mass)))
    assert rel_rms(acc, ra) <= BOUND["mixed"]["acc"]
    assert rel_rms(jerk, rj) <= BOUND["mixed"]["jerk"]


@pytest.mark.parametrize("precision", ["double", "mixed"])
@pytest.mark.parametrize("n_i", [1, 7, 127, 128, 129, 1000])
def test_small_i_sets_against_many_j(precision, n_i):
    """Small i-sets split the j-range over grid rows; the row sums must still be exact."""
    rng = np.random.default_rng(n_i)
    pos_j, mass_j = rng.normal(size=(20000, 3)), rng.random(20000)
    pos_i = rng.normal(size=(n_i, 3))
    pipe = gp.Pipeline("cuda", precision, eps=0.05, G=2.5)
    pipe.set_j(pos_j, mass_j)
    acc, pot = pipe.forces(pos_i)
    ra, rp, _ = direct_sum_f64(pos_j, mass_j, pos_i, eps=0.05, G=2.5)
    assert rel_rms(acc, ra) <= BOUND[precision]["acc"]
    assert rel_rms(pot, rp) <= BOUND[precision]["pot"]


def test_exclusion_only_removes_the_named_pair():
    rng = np.random.default_rng(5)
    pos, mass = rng.normal(size=(1000, 3)), rng.random(1000)
    exclude = np.full(1000, -1)
    exclude[::3] = rng.integers(0, 1000, size=len(exclude[::3]))
    pipe = gp.Pipeline("cuda", "double", eps=0.1)
    pipe.set_j(pos, mass)
    acc, pot = pipe.forces(pos, exclude=exclude)
    ra, rp, _ = direct_sum_f64(pos, mass, pos, eps=0.1, exclude=exclude)
    assert rel_rms(acc, ra) < 1e-13 and rel_rms(pot, rp) < 1e-13
    assert pipe.stats.interactions == 1000 * 1000 - np.count_nonzero(exclude >= 0)


@pytest.mark.parametrize("precision", ["double", "mixed"])
def test_deterministic_and_agrees_with_cpu(precision):
    pos, vel, mass = plummer_set(5000, 3)
    one = cuda_self_forces(pos, vel, mass, 0.01, precision)
    again = cuda_self_forces(pos, vel, mass, 0.01, precision)
    for a, b in zip(one, again):
        assert np.array_equal(a, b)
    cpu = gp.Pipeline("cpu", precision, eps=0.01)
    cpu.set_j(pos, mass, vel)
    ref = cpu.forces(pos, vel, exclude=np.arange(len(mass)))
    bound = 2 * BOUND[precision]["acc"]
    assert rel_rms(one[0], ref[0]) <= bound and rel_rms(one[2], ref[2]) <= bound


def test_cupy_arrays_stay_on_the_device():
    cp = pytest.importorskip("cupy")
    pos, vel, mass = plummer_set(4000, 6)
    host = cuda_self_forces(pos, vel, mass, 0.01, "mixed")
    pipe = gp.Pipeline("cuda", "mixed", eps=0.01)
    pipe.set_j(cp.asarray(pos), cp.asarray(mass), cp.asarray(vel))
    acc, jerk, pot = pipe.forces(cp.asarray(pos), cp.asarray(vel), exclude=cp.arange(4000))
    assert all(isinstance(a, cp.ndarray) for a in (acc, jerk, pot))
    for d, h in zip((acc, jerk, pot), host):
        assert np.array_equal(cp.asnumpy(d), h)  # same kernels, same bits
    with pytest.raises(ValueError, match="float64"):
        pipe.forces(cp.asarray(pos, dtype=cp.float32))
    with pytest.raises(ValueError, match="exclude"):
        pipe.forces(cp.asarray(pos), exclude=cp.full(4000, 4000))
    with pytest.raises(ValueError, match="cuda|CUDA"):
        gp.Pipeline("cpu").set_j(cp.asarray(pos), cp.asarray(mass))


CUDA_ADAPTERS = [CorePipeline(f"core CudaPipeline({p})", lambda eps, G, p=p: _core.CudaPipeline(p, eps, G, 0))
                 for p in ("mixed", "double")] + [PythonPipeline("cuda", p) for p in ("mixed", "double")]
CUDA_PAIRS = [(a, c) for a in CUDA_ADAPTERS for c in CASES if c.applies_to(a)]


@pytest.mark.parametrize("adapter, case", CUDA_PAIRS, ids=[f"{a.name}: {c.name}" for a, c in CUDA_PAIRS])
def test_cuda_keeps_the_force_contract(adapter, case):
    """The same bad requests as the CPU providers (test_force_contract.py), the same texts."""
    case.check(adapter)


def test_auto_prefers_cuda_and_cpu_options_are_refused():
    assert gp.Pipeline().backend == "cuda"
    assert "sm_" in gp.Pipeline("cuda").backend_detail
    with pytest.raises(ValueError, match="threads"):
        gp.Pipeline("cuda", threads=2)
    with pytest.raises(ValueError, match="isa"):
        gp.Pipeline("cuda", isa="avx2")


@pytest.mark.parametrize("integrator, kw", [("hermite", {"eta": 0.01}), ("leapfrog", {"dt": 1 / 256})])
def test_simulation_on_cuda_conserves_energy_and_follows_the_cpu(integrator, kw):
    p = gp.ic.plummer(2048, seed=11)
    gpu = Simulation(p, integrator=integrator, eps=1 / 64, backend="cuda", **kw)
    cpu = Simulation(p, integrator=integrator, eps=1 / 64, backend="cpu", **kw)
    gpu.evolve(0.5, progress=False)
    cpu.evolve(0.5, progress=False)
    assert gpu.backend == "cuda"
    assert abs(gpu.energy_error()) < 1e-5
    assert abs(gpu.energy_error()) < 3 * abs(cpu.energy_error()) + 1e-8
    # mixed-precision rounding differs between the backends; after half a time unit the
    # trajectories still agree far below the particle spacing
    assert np.max(np.abs(gpu.particles.pos - cpu.particles.pos)) < 1e-6


def test_hermite_on_cuda_resumes_bit_identically(tmp_path):
    p = gp.ic.plummer(1024, seed=2)
    full, cut = tmp_path / "full", tmp_path / "cut"
    ref = Simulation(p, integrator="hermite", eps=1 / 64, dt_max=1 / 32, backend="cuda")
    ref.evolve(1.0, checkpoint_every=0.25, out=full, progress=False)
    part = Simulation(p, integrator="hermite", eps=1 / 64, dt_max=1 / 32, backend="cuda")
    part.evolve(1.0, checkpoint_every=0.25, out=cut, progress=False)
    for f in sorted(cut.glob("checkpoint_*.h5"))[2:]:
        f.unlink()
    sim = Simulation.resume(cut)
    sim.evolve(1.0, checkpoint_every=0.25, out=cut, progress=False)
    assert sim.particles.pos.tobytes() == ref.particles.pos.tobytes()
    assert sim.particles.vel.tobytes() == ref.particles.vel.tobytes()


def test_transfer_benchmark_fits_latency_and_bandwidth():
    from gravpipe.bench import transfer

    rows, fits = transfer.run([1024, 65536, 1 << 22], repeats=3)
    assert len(rows) == 3 * 4 and all(r["seconds"] > 0 for r in rows)
    assert len(fits) == 4 and all(f.latency_s > 0 and f.bandwidth_gb_s > 0 for f in fits)
