"""Simulation: bad input, the particles it hands out, energy conservation, timings, resume."""

import numpy as np
import pytest

import gravpipe as gp
from gravpipe import io
from gravpipe.simulation import Simulation

EPS = 1 / 64


@pytest.fixture(scope="module")
def plummer():
    return gp.ic.plummer(256, seed=11)


def make(p, **kw):
    kw.setdefault("threads", 1)
    kw.setdefault("backend", "cpu")  # thread counts are a CPU option; CUDA runs are in test_cuda.py
    return Simulation(p, integrator=kw.pop("integrator", "hermite"), eps=kw.pop("eps", EPS), **kw)


# ---- bad input ------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"integrator": "rk4"}, "integrator"),
    ({"integrator": "hermite", "dt": 0.01}, "dt"),          # leapfrog's parameter
    ({"integrator": "leapfrog", "dt_max": 0.125}, "dt_max"),  # Hermite's parameter
    ({"integrator": "hermite", "eta": -0.1}, "eta"),
    ({"eps": -1e-3}, "eps"),
    ({"eps": float("nan")}, "eps"),
    ({"precision": "half"}, "precision"),
    ({"backend": "quantum"}, "backend"),
    ({"gravity": "fmm"}, "gravity"),
    ({"gravity": "tree", "integrator": "hermite"}, "leapfrog"),
])
def test_bad_parameters_name_the_argument(plummer, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(plummer, **kwargs)


@pytest.mark.parametrize("bad", [np.zeros((8, 3)), None, "ic.h5"])
def test_input_must_be_particles(bad):
    with pytest.raises(ValueError, match="particles"):
        Simulation(bad)


def test_evolve_checks_times_and_cadences(plummer, tmp_path):
    sim = make(plummer)
    sim.evolve(0.25, progress=False)
    with pytest.raises(ValueError, match="t_end.*before"):
        sim.evolve(0.125, progress=False)
    for bad in (float("nan"), float("inf"), "soon"):
        with pytest.raises(ValueError, match="t_end"):
            sim.evolve(bad, progress=False)
    with pytest.raises(ValueError, match="snapshot_every"):
        sim.evolve(1.0, snapshot_every=0.0, out=tmp_path, progress=False)
    with pytest.raises(ValueError, match="checkpoint_every"):
        sim.evolve(1.0, checkpoint_every=-0.125, out=tmp_path, progress=False)
    with pytest.raises(ValueError, match="out"):
        sim.evolve(1.0, snapshot_every=0.25, progress=False)
    assert sim.time == 0.25  # nothing above advanced the clock
    assert list(tmp_path.iterdir()) == []


# ---- state ------------------------------------------------------------------------------

def test_particles_is_a_synchronized_copy(plummer):
    sim = make(plummer)
    first = sim.particles
    assert first is not sim.particles and not first.pos.flags.writeable
    np.testing.assert_array_equal(first.pos, plummer.pos)
    sim.evolve(0.5, progress=False)
    now = sim.particles
    np.testing.assert_array_equal(first.pos, plummer.pos)  # an earlier copy does not move
    assert not np.array_equal(now.pos, plummer.pos)
    np.testing.assert_array_equal(now.id, plummer.id)
    np.testing.assert_array_equal(now.mass, plummer.mass)
    # synchronized: the set handed out at t = 0.5 is the state an uninterrupted run has there,
    # so stopping to look (outputs, diagnostics) does not perturb the trajectory
    other = make(plummer)
    for t in (0.125, 0.25, 0.375, 0.5):
        other.evolve(t, progress=False)
    assert other.particles.pos.tobytes() == now.pos.tobytes()
    assert other.particles.vel.tobytes() == now.vel.tobytes()


@pytest.mark.parametrize("integrator, kw, bound", [
    ("hermite", {}, 1e-6),                   # measured ~1e-8 (eta 0.02)
    ("leapfrog", {"dt": 1 / 256}, 1e-3),     # second order, shared step; measured ~1e-5
])
def test_energy_is_conserved_on_a_short_plummer_run(plummer, integrator, kw, bound):
    sim = make(plummer, integrator=integrator, precision="double", **kw)
    assert sim.energy_error() == 0.0
    sim.evolve(1.0, progress=False)
    err = sim.energy_error()
    assert 0 < abs(err) < bound
    # the energy it reports is the one an independent float64 numpy sum gives
    p = sim.particles
    d = p.pos[:, None, :] - p.pos[None, :, :]
    inv_r = 1 / np.sqrt(np.einsum("ijk,ijk->ij", d, d) + EPS ** 2)
    np.fill_diagonal(inv_r, 0.0)
    total = 0.5 * np.sum(p.mass * np.sum(p.vel ** 2, 1)) - 0.5 * p.mass @ inv_r @ p.mass
    assert total == pytest.approx(sim.energy().total, rel=1e-12)


def test_timings_add_up(plummer):
    sim = make(plummer)
    sim.evolve(0.5, progress=False)
    t = sim.timings
    assert t.host >= 0 and t.transfer > 0 and t.compute > 0
    # host is the integrator's wall time minus the pipeline's; only the initial force
    # evaluation (before the first block) sits outside both
    assert t.host + t.transfer + t.compute == pytest.approx(t.total, rel=0.05, abs=2e-3)
    assert 0 < t.steps <= t.particle_steps
    n = plummer.n
    assert t.interactions >= t.particle_steps * (n - 1)
    assert t.particle_steps_per_second == pytest.approx(t.particle_steps / t.total)
    assert 0 <= t.host_transfer_share <= 1
    assert "particle steps" in str(t)


# ---- checkpoints and resume -----------------------------------------------------------

def test_resume_of_a_non_checkpoint_errors(plummer, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        Simulation.resume(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        Simulation.resume(tmp_path)
    io.write_snapshot(tmp_path / "checkpoint_0001.h5", plummer, 0.0)  # a snapshot by that name
    with pytest.raises(ValueError, match="not a gravpipe checkpoint"):
        Simulation.resume(tmp_path)
    (tmp_path / "checkpoint_0002.h5").write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match="checkpoint_0002.h5"):
        Simulation.resume(tmp_path)


@pytest.mark.parametrize("integrator, kw", [("hermite", {"dt_max": 1 / 64}), ("leapfrog", {"dt": 1 / 64})])
def test_resume_is_bit_identical(plummer, tmp_path, integrator, kw):
    """Checkpoints every 3 quanta and a run of 160 quanta, so that the diagnostics rows
    (every 3rd quantum) and the checkpoint times are not on one grid."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    every = 3 * next(iter(kw.values()))
    t_end = 160 * next(iter(kw.values()))
    ref = make(plummer, integrator=integrator, **kw)
    ref.evolve(t_end, checkpoint_every=every, out=full, progress=False)
    part = make(plummer, integrator=integrator, **kw)
    part.evolve(t_end, checkpoint_every=every, out=cut, progress=False)
    for f in sorted(cut.glob("checkpoint_*.h5"))[7:]:  # as if killed after the 7th checkpoint
        f.unlink()
    sim = Simulation.resume(cut)
    assert sim.time == pytest.approx(7 * every)
    sim.evolve(**{k: v for k, v in sim.config.evolve.items() if k != "out"}, out=cut, progress=False)
    assert sim.particles.pos.tobytes() == ref.particles.pos.tobytes()
    assert sim.particles.vel.tobytes() == ref.particles.vel.tobytes()
    assert sim.energy_error() == ref.energy_error()
    cols = ["time", "total", "energy_error", "r_lagr_50", "steps", "particle_steps"]
    assert [[r[c] for c in cols] for r in sim.history] == [[r[c] for c in cols] for r in ref.history]
    assert (cut / "diagnostics.csv").read_text().count("\n") == (full / "diagnostics.csv").read_text().count("\n")


def test_ranks_split_the_cores_only_where_the_solver_runs_on_them(monkeypatch):
    """What this proves: under MPI a rank gets cores // ranks threads only for a solver that
    runs on CPU threads. On a GPU machine "auto" puts direct summation on CUDA, which takes
    no threads: `mpiexec -n 2 gravpipe run` failed there ("threads: a CPU option") until the
    backend was resolved first. The tree walks on CPU threads whatever runs its lists."""
    from gravpipe import domain_run as simulation
    from gravpipe.backends import BackendInfo

    gpu_machine = {"auto": BackendInfo("cuda", True, "test"), "cuda": BackendInfo("cuda", True, "test"),
                   "cpu": BackendInfo("cpu", True, "test")}
    monkeypatch.setattr(simulation, "resolve_backend", lambda name: gpu_machine[name])
    assert not simulation._runs_on_cpu_threads("direct", "auto")
    assert not simulation._runs_on_cpu_threads("direct", "cuda")
    assert simulation._runs_on_cpu_threads("direct", "cpu")
    assert simulation._runs_on_cpu_threads("tree", "auto") and simulation._runs_on_cpu_threads("tree", "cuda")
